//! The poll budget that `--poll-budget adaptive` runs: it steers on the answer rate (answers
//! per ns, measured over windows of time) and tries each move before keeping it.
//!
//! Why the rate and not the batch: a batch average counts what the extra polls
//! themselves found, so a longer budget lengthens it whatever the plant does (a collapsed
//! loop with extra polls reads as a busy one), and a loop's length varies a hundredfold
//! between plants, so counts of loops are no clock. Answers per unit of time are what the
//! budget is for, and the extra polls cannot inflate them.
//!
//! The rules, in the order the code applies them at the end of each window
//! (`Params::window_ns` of the caller's time):
//!
//! - **Settle**: for `settle_ns` from the first update nothing moves (`u = start`): a cold
//!   start's synchronised wave says nothing about the steady state. `start` is a small
//!   budget on purpose: on a plant that collapses without one, no budget at all from the
//!   start lets it fall, and getting back out costs far more than the budget.
//! - **Identification**: the first trial is a step up; each one that raises the rate by
//!   `gain` is kept and followed by the next, and the budget where the climb stops is the
//!   **floor**. Later trials up come at most every `up_probe_ns`, and never from no
//!   budget: on a plant whose high state holds without one, a step up and back is the
//!   disturbance that starts a collapse, and the recovery is what answers a collapse.
//! - **Trials down**: every `probe_ns`, a step down runs for one window and is kept unless
//!   the rate falls by `noise`. Below the floor it is tried only when the evidence says
//!   the budget costs: the extra polls held the loops for at least `cost` of the time
//!   (measured by the caller, so the other ranks' moves do not enter it). A rejected trial
//!   is undone at once and doubles the interval (up to `probe_max_ns`; below the floor
//!   straight to it).
//! - **Watch**: a kept step down is watched for `watch_ns`: a window whose rate falls
//!   `fall` below the reference from before the step undoes it (and backs off). On a
//!   bistable plant a step down can look good at first and collapse later; undone soon
//!   enough the old budget brings the plant back. `fall` is wide on purpose: with many
//!   ranks one rank's window moves with the others' steps, and an undo at every dip
//!   spreads from rank to rank.
//! - **Recovery**: a window `collapse` below the reference while holding means a collapse
//!   (or a stalled peer, which it cannot tell apart). The budget goes one up, or straight
//!   to the one whose extra polls last `rescue_loop_ns` when the poll's cost is known, and
//!   doubles in each window the rate does not climb back by `gain`, as long as a loop
//!   lasts less than `rescue_loop_ns`: the cost of a recovery is a time, not a count of
//!   polls (sixteen polls of 5 µs hold every rank's requests 80 µs a loop, and deepen the
//!   collapse they are meant to end). It ends after two windows back within `fall` of the
//!   reference, or after `recover_ns` (doubling for each recovery in a row, up to
//!   `recover_max_ns`); one not back by then lowers the reference by a quarter, so a plant
//!   that really slowed down becomes the new reference instead of a recovery without end.
//!   A second collapse within `probe_max_ns` comes back one budget higher.
//!
//! Everything is integer: rates are answers per ms of the caller's time, thresholds are
//! fractions × 256. An update outside a window's end is a few adds and a compare; the
//! divisions run once per window.

/// Rates: answers per this many ns.
const RATE_NS: u64 = 1_000_000;
/// Answers per update are clamped here.
const MAX_ANSWERS: u32 = 1 << 20;
/// A window longer than this (the caller stood still for a second) counts as this long.
const MAX_WINDOW_NS: u64 = 1_000_000_000;

/// The controller's tuning, in the caller's ns and fractions × 256.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// The rate's measuring window.
    pub window_ns: u64,
    /// From the first update, nothing moves for this long.
    pub settle_ns: u64,
    /// The budget while settling.
    pub start: u32,
    /// The bound of every move and of a recovery.
    pub u_max: u32,
    /// A trial step up must raise the rate this much (the mean of its windows); a
    /// recovery's window that does not climb this much doubles its budget.
    pub gain_q8: u32,
    /// A step down is kept unless the rate falls this much.
    pub noise_q8: u32,
    /// A kept step down is undone if the rate falls this much below the reference before
    /// it; a recovery ends within this much of the reference.
    pub fall_q8: u32,
    /// A window this far below the reference while holding starts a recovery.
    pub collapse_q8: u32,
    /// Trials down at least this far apart.
    pub probe_ns: u64,
    /// Back-off stops at this interval; collapses this close count as in a row.
    pub probe_max_ns: u64,
    /// After identification, trials up at least this far apart.
    pub up_probe_ns: u64,
    /// A kept step down is watched this long.
    pub watch_ns: u64,
    /// The first recovery's longest length.
    pub recover_ns: u64,
    /// Recoveries in a row double up to this length.
    pub recover_max_ns: u64,
    /// A recovery's budget grows only while a loop lasts less than this.
    pub rescue_loop_ns: u64,
    /// Below this many answers per ms of reference nothing is tried: too few to judge.
    pub min_rate: u64,
    /// Windows a trial runs before it is measured: an answer arrives a round trip after
    /// its call left, so the first window after a move still shows the budget before it.
    pub lag_windows: u32,
    /// Windows a trial step up is measured over (their mean is judged).
    pub up_windows: u32,
    /// Windows a trial step down is measured over.
    pub down_windows: u32,
    /// A step down below the floor is tried only while the extra polls hold the loops
    /// for at least this share of the time: when an extra poll is cheap, the gain of
    /// none is as small as its cost, and on a bistable plant the trial risks a collapse
    /// for it.
    pub cost_q8: u32,
}

impl Params {
    /// What benchkv runs (docs/PERFORMANCE.md, "Adaptive poll budget").
    pub const DEFAULT: Self = Self {
        window_ns: 250_000,
        settle_ns: 1_000_000,
        start: 1,
        u_max: 16,
        gain_q8: 26,
        noise_q8: 8,
        fall_q8: 77,
        collapse_q8: 128,
        probe_ns: 1_000_000,
        probe_max_ns: 16_000_000,
        up_probe_ns: 16_000_000,
        watch_ns: 2_000_000,
        recover_ns: 3_000_000,
        recover_max_ns: 8_000_000,
        rescue_loop_ns: 20_000,
        min_rate: 64,
        lag_windows: 1,
        up_windows: 2,
        down_windows: 1,
        cost_q8: 51,
    };
}

/// What the controller is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The first `settle_ns`.
    Settle,
    /// Holding `u`.
    Hold,
    /// One window one step above `from`.
    TrialUp {
        /// The budget before the trial.
        from: u32,
    },
    /// One window one step below `from`.
    TrialDown {
        /// The budget before the trial.
        from: u32,
    },
    /// A kept step down from `from`, watched until `until` against `before`.
    Watch {
        /// The budget before the step.
        from: u32,
        /// The end of the watch.
        until: u64,
        /// The reference before the step.
        before: u64,
    },
    /// A recovery: a larger budget until the rate is back at `goal` or until `until`,
    /// then `back_to`.
    Recover {
        /// The budget afterwards.
        back_to: u32,
        /// The latest end of the recovery.
        until: u64,
        /// The rate to be back at (answers per ms).
        goal: u64,
        /// The last window's rate.
        last: u64,
    },
}

/// The state, for metrics and plots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The budget.
    pub u: u32,
    /// The floor identification found (or the last kept step down set).
    pub floor: u32,
    /// The reference rate, answers per ms.
    pub reference: u64,
    /// The last window's rate, answers per ms.
    pub rate: u64,
    /// Kept moves up.
    pub ups: u64,
    /// Kept moves down (undone ones included).
    pub downs: u64,
    /// Steps down undone after a fall.
    pub undone: u64,
    /// Recoveries.
    pub recoveries: u64,
    /// What an extra poll took, ns, as last measured (0: not yet).
    pub poll_ns: u64,
}

/// The adaptive poll budget on the answer rate. See the module docs.
#[derive(Clone, Debug)]
pub struct Controller {
    p: Params,
    mode: Mode,
    /// Answers in the current window.
    answers: u64,
    /// Loops in the current window.
    loops: u64,
    /// Time the extra polls held the loops of the current window.
    waited: u64,
    /// The share of the last held window the extra polls took, × 256.
    wait_q8: u64,
    /// Where the current window started; `None` before the first update.
    win_start: Option<u64>,
    /// The first update's time.
    t0: u64,
    next_up: u64,
    next_down: u64,
    up_every: u64,
    down_every: u64,
    recover_for: u64,
    /// When the last recovery started.
    last_collapse: Option<u64>,
    /// The climb of identification is running.
    climbing: bool,
    /// A trial: windows left, and the sum of the rates of those measured.
    trial_left: u32,
    trial_sum: u64,
    s: Snapshot,
}

/// `x × (256 ± q) / 256`.
#[inline]
fn plus(x: u64, q: u32) -> u64 {
    x + ((x * u64::from(q)) >> 8)
}

#[inline]
fn minus(x: u64, q: u32) -> u64 {
    x - ((x * u64::from(q.min(256))) >> 8)
}

impl Controller {
    /// A controller about to settle at `p.start`.
    pub const fn new(p: Params) -> Self {
        let start = if p.start < p.u_max { p.start } else { p.u_max };
        Self {
            p,
            mode: Mode::Settle,
            answers: 0,
            loops: 0,
            waited: 0,
            wait_q8: 0,
            win_start: None,
            t0: 0,
            next_up: 0,
            next_down: 0,
            up_every: p.probe_ns,
            down_every: p.probe_ns,
            recover_for: p.recover_ns,
            last_collapse: None,
            climbing: true,
            trial_left: 0,
            trial_sum: 0,
            s: Snapshot {
                u: start,
                floor: start,
                reference: 0,
                rate: 0,
                ups: 0,
                downs: 0,
                undone: 0,
                recoveries: 0,
                poll_ns: 0,
            },
        }
    }

    /// Extra empty polls the next loop may make.
    #[inline]
    pub const fn budget(&self) -> u32 {
        self.s.u
    }

    /// What it is doing.
    pub const fn mode(&self) -> Mode {
        self.mode
    }

    /// The state, for metrics.
    pub const fn snapshot(&self) -> Snapshot {
        self.s
    }

    /// One loop: the answers it delivered, how long its extra polls held it (from the
    /// draining poll to the last extra one; 0 when the caller does not measure it, which
    /// closes the way below the floor), and the time at its end (ns, any origin, only
    /// differences used; a time that goes backwards counts as standing still). Returns the
    /// budget for the next loop.
    #[inline]
    pub fn update(&mut self, answers: u32, waited_ns: u64, now_ns: u64) -> u32 {
        self.answers += u64::from(answers.min(MAX_ANSWERS));
        self.loops += 1;
        self.waited = self.waited.saturating_add(waited_ns);
        let Some(start) = self.win_start else {
            self.win_start = Some(now_ns);
            self.t0 = now_ns;
            return self.s.u;
        };
        let dt = now_ns.saturating_sub(start);
        if dt >= self.p.window_ns {
            self.window(now_ns, dt.min(MAX_WINDOW_NS));
        }
        self.s.u
    }

    /// The end of a window of `dt` ns at `now`.
    fn window(&mut self, now: u64, dt: u64) {
        let r = self.answers * RATE_NS / dt;
        let loops = self.loops.max(1);
        let loop_ns = dt / loops;
        let wait_q8 = self.waited.min(dt) * 256 / dt;
        if self.mode == Mode::Hold && self.s.u > 0 && self.waited > 0 {
            self.s.poll_ns = self.waited / (loops * u64::from(self.s.u));
        }
        self.answers = 0;
        self.loops = 0;
        self.waited = 0;
        self.win_start = Some(now);
        self.s.rate = r;
        let p = self.p;
        let reference = self.s.reference;
        match self.mode {
            Mode::Settle => {
                if now.saturating_sub(self.t0) >= p.settle_ns {
                    self.s.reference = r;
                    self.mode = Mode::Hold;
                    // Identification's climb first, one window after the reference.
                    self.next_up = now + p.window_ns;
                    self.next_down = now + p.probe_ns;
                }
            }
            Mode::Hold => {
                self.wait_q8 = wait_q8;
                self.hold(now, r);
            }
            Mode::TrialUp { from } => {
                let Some(r) = self.trial_window(r, p.up_windows) else {
                    return;
                };
                self.mode = Mode::Hold;
                if r > plus(reference, p.gain_q8) {
                    self.s.reference = r;
                    self.s.ups += 1;
                    if self.climbing {
                        self.s.floor = self.s.u;
                    }
                    self.up_every = p.probe_ns;
                    // Climbing: the next step up at once; else after the interval.
                    self.next_up = if self.climbing {
                        now
                    } else {
                        now + p.up_probe_ns.max(p.probe_ns)
                    };
                } else {
                    self.s.u = from;
                    self.climbing = false;
                    self.up_every = (self.up_every * 2).max(p.up_probe_ns).min(p.probe_max_ns);
                    self.next_up = now + self.up_every;
                }
            }
            Mode::TrialDown { from } => {
                let Some(r) = self.trial_window(r, p.down_windows) else {
                    return;
                };
                if r >= minus(reference, p.noise_q8) && r > 0 {
                    self.s.downs += 1;
                    self.mode = Mode::Watch {
                        from,
                        until: now + p.watch_ns,
                        before: reference,
                    };
                    self.s.reference = r;
                } else {
                    self.undo_down(now, from);
                }
            }
            Mode::Watch {
                from,
                until,
                before,
            } => {
                // Against the better of the two: a collapse that follows a first gain shows
                // as a fall from the gain before it reaches the old level.
                if r < minus(before.max(reference), p.fall_q8) {
                    // The step down was a mistake: undo it; a collapse it started is the
                    // hold's to see.
                    self.s.undone += 1;
                    self.s.reference = before;
                    self.undo_down(now, from);
                } else {
                    self.s.reference = (reference * 3 + r) / 4;
                    if now >= until {
                        self.s.floor = self.s.floor.min(self.s.u);
                        self.mode = Mode::Hold;
                        self.down_every = p.probe_ns;
                        self.next_down = now + p.probe_ns;
                    }
                }
            }
            Mode::Recover {
                back_to,
                until,
                goal,
                last,
            } => {
                let back = r >= goal && last >= goal;
                if back || now >= until {
                    if r < goal {
                        // Not back by the end: perhaps the plant slowed; a lower reference
                        // makes it the new one after a few recoveries instead of none.
                        self.s.reference = minus(reference, 64);
                    }
                    self.s.u = back_to;
                    self.mode = Mode::Hold;
                    // The rate climbs back for a while: a trial now would read the climb
                    // as its own gain.
                    self.next_up = self.next_up.max(now + p.probe_ns);
                    self.next_down = self.next_down.max(now + p.probe_ns);
                    return;
                }
                if r <= plus(last, p.gain_q8) && loop_ns < p.rescue_loop_ns {
                    // Not climbing back, and a loop is still short: wait longer per loop.
                    self.s.u = (self.s.u * 2).min(p.u_max);
                }
                self.mode = Mode::Recover {
                    back_to,
                    until,
                    goal,
                    last: r,
                };
            }
        }
    }

    /// A window while holding `u`: a collapse, or the reference and perhaps a trial.
    fn hold(&mut self, now: u64, r: u64) {
        let p = self.p;
        let reference = self.s.reference;
        if r < minus(reference, p.collapse_q8) {
            // A second collapse soon after the first: the budget held before did not keep
            // the plant up, so come back one higher.
            let again = self
                .last_collapse
                .is_some_and(|t| now < t.saturating_add(p.probe_max_ns));
            self.last_collapse = Some(now);
            let u = self.s.u;
            self.recover(now, if again { u + 1 } else { u });
            return;
        }
        if r >= minus(reference, p.fall_q8) {
            self.recover_for = p.recover_ns;
        }
        self.s.reference = (reference * 3 + r) / 4;
        if self.s.reference < p.min_rate {
            return;
        }
        let u = self.s.u;
        if now >= self.next_up && u < p.u_max && u > 0 {
            self.mode = Mode::TrialUp { from: u };
            self.trial_left = p.lag_windows + p.up_windows.max(1);
            self.trial_sum = 0;
            self.s.u = u + 1;
        } else if now >= self.next_down
            && u > 0
            && (u > self.s.floor || self.wait_q8 >= u64::from(p.cost_q8))
        {
            self.mode = Mode::TrialDown { from: u };
            self.trial_left = p.lag_windows + p.down_windows.max(1);
            self.trial_sum = 0;
            self.s.u = u - 1;
        }
    }

    /// A recovery from the budget held, back to `back_to` afterwards.
    fn recover(&mut self, now: u64, back_to: u32) {
        let p = self.p;
        self.s.recoveries += 1;
        self.mode = Mode::Recover {
            back_to: back_to.min(p.u_max),
            until: now + self.recover_for,
            goal: minus(self.s.reference, p.fall_q8),
            last: self.s.rate,
        };
        // The plant can collapse: whoever's step started it, no step down for a while.
        self.down_every = p.probe_max_ns;
        self.next_down = now + p.probe_max_ns;
        self.recover_for = (self.recover_for * 2).min(p.recover_max_ns);
        // The budget whose extra polls last `rescue_loop_ns`, when a poll's cost is known.
        let fit = match self.s.poll_ns {
            0 => 0,
            c => (p.rescue_loop_ns / c).min(u64::from(p.u_max)) as u32,
        };
        self.s.u = (self.s.u + 1).max(fit).min(p.u_max);
    }

    /// A trial step down from `from` rejected or undone: back to `from`, and the next
    /// trial later. One below the floor waits the longest at once: on a plant whose low
    /// state follows it, each trial costs a collapse.
    fn undo_down(&mut self, now: u64, from: u32) {
        let below = self.s.u < self.s.floor;
        self.s.u = from;
        self.mode = Mode::Hold;
        self.down_every = if below {
            self.p.probe_max_ns
        } else {
            (self.down_every * 2).min(self.p.probe_max_ns)
        };
        self.next_down = now + self.down_every;
    }

    /// A window of a trial measured over `measured` windows after the lag: `Some(mean
    /// rate)` at its last window.
    fn trial_window(&mut self, r: u64, measured: u32) -> Option<u64> {
        let measured = measured.max(1);
        if self.trial_left <= measured {
            self.trial_sum += r;
        }
        self.trial_left = self.trial_left.saturating_sub(1);
        (self.trial_left == 0).then(|| self.trial_sum / u64::from(measured))
    }
}
