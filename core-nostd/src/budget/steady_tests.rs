use super::steady::*;

const P: Params = Params::DEFAULT;
const MS: u64 = 1_000_000;

/// Drives `c` for `for_ns` in loops of `loop_ns` against a plant giving answers per ms
/// for (budget, time); each extra poll holds its loop `poll_ns` (up to the whole loop).
/// Returns the budget at the end and the time reached.
fn drive_polls(
    c: &mut Controller,
    t: &mut u64,
    for_ns: u64,
    loop_ns: u64,
    poll_ns: u64,
    mut plant: impl FnMut(u32, u64) -> u64,
) -> u32 {
    let end = *t + for_ns;
    // Fractions of an answer carry over, so a short loop loses nothing.
    let mut owed = 0u64;
    while *t < end {
        *t += loop_ns;
        let u = c.budget();
        owed += plant(u, *t) * loop_ns;
        let answers = owed / MS;
        owed %= MS;
        let waited = (u64::from(u) * poll_ns).min(loop_ns);
        c.update(answers as u32, waited, *t);
    }
    c.budget()
}

/// [`drive_polls`] with extra polls of a tenth of a loop: too cheap to go below the floor.
fn drive(
    c: &mut Controller,
    t: &mut u64,
    for_ns: u64,
    loop_ns: u64,
    plant: impl FnMut(u32, u64) -> u64,
) -> u32 {
    drive_polls(c, t, for_ns, loop_ns, loop_ns / 10, plant)
}

/// The plant of the expensive polls: every unit of budget costs `cost_pct` of the
/// rate, and nothing collapses.
fn costly(cost_pct: u64) -> impl FnMut(u32, u64) -> u64 {
    move |u, _| 8000 * (100 - cost_pct * u64::from(u).min(4)) / 100
}

#[test]
fn nothing_moves_while_settling_whatever_the_rate() {
    let mut c = Controller::new(P);
    let mut t = 0;
    // A rate that rises with the budget: a trial would climb at once.
    drive(&mut c, &mut t, P.settle_ns - P.window_ns, 1000, |u, _| {
        1000 * u64::from(u + 1)
    });
    assert_eq!(c.mode(), Mode::Settle);
    assert_eq!(c.budget(), P.start);
    assert_eq!(c.snapshot().ups + c.snapshot().downs, 0);
}

#[test]
fn identification_climbs_while_the_rate_rises_and_stops_at_the_floor() {
    let mut c = Controller::new(P);
    let mut t = 0;
    // +30 % per unit up to 3, flat above.
    let u = drive(&mut c, &mut t, 10 * MS, 5000, |u, _| {
        4000 * (10 + 3 * u64::from(u.min(3))) / 10
    });
    assert_eq!(u, 3, "{:?}", c.snapshot());
    assert_eq!(c.snapshot().floor, 3, "{:?}", c.snapshot());
    assert_eq!(c.snapshot().ups, 2, "{:?}", c.snapshot());
}

#[test]
fn cheap_polls_never_step_below_the_floor() {
    // The extra polls hold the loops a tenth of the time (less than `cost`): no evidence
    // that going without is worth the risk, so the budget never goes below the start,
    // even though the plant would reward it. Nor without a measured wait at all.
    for poll_ns in [200, 0] {
        let mut c = Controller::new(P);
        let mut t = 0;
        let mut lowest = u32::MAX;
        while t < 40 * MS {
            let u = drive_polls(&mut c, &mut t, P.window_ns, 2000, poll_ns, costly(20));
            lowest = lowest.min(u);
        }
        assert_eq!(lowest, P.start, "{poll_ns}: {:?}", c.snapshot());
        assert_eq!(c.snapshot().downs, 0, "{poll_ns}: {:?}", c.snapshot());
    }
}

#[test]
fn costly_polls_step_below_the_floor_and_stay_there() {
    // The extra polls hold the loops 40 % of the time, and a step up costs 20 %: the
    // trial down is kept, watched, and the floor follows it. From no budget there are no
    // trials up: on a bistable plant the step up and back is the disturbance.
    let mut c = Controller::new(P);
    let mut t = 0;
    drive_polls(&mut c, &mut t, 5 * MS, 2000, 800, costly(20));
    // Past two intervals of trials up.
    while t < 5 * MS + 2 * P.up_probe_ns {
        let u = drive_polls(&mut c, &mut t, 100_000, 2000, 800, costly(20));
        assert_eq!(u, 0, "{:?}", c.snapshot());
    }
    let s = c.snapshot();
    assert_eq!(s.floor, 0, "{s:?}");
    assert_eq!((s.downs, s.undone, s.ups), (1, 0, 0), "{s:?}");
    assert_eq!(s.poll_ns, 800, "{s:?}");
}

/// A bistable plant with costly polls: at `u = 0` the rate first rises 20 % for 600 µs,
/// then collapses to a tenth until a budget of at least 8 has been held for 500 µs.
struct Bistable {
    collapsed: bool,
    zero_since: Option<u64>,
    high_since: Option<u64>,
}

impl Bistable {
    fn new() -> Self {
        Self {
            collapsed: false,
            zero_since: None,
            high_since: None,
        }
    }

    fn rate(&mut self, u: u32, t: u64) -> u64 {
        if u == 0 {
            let since = *self.zero_since.get_or_insert(t);
            if t - since > 600_000 {
                self.collapsed = true;
            }
        } else {
            self.zero_since = None;
        }
        if u >= 8 {
            let since = *self.high_since.get_or_insert(t);
            if t - since > 500_000 {
                self.collapsed = false;
            }
        } else {
            self.high_since = None;
        }
        match (self.collapsed, u) {
            (true, _) => 600,
            (false, 0) => 9600,
            (false, u) => 8000 * (100 - 20 * u64::from(u).min(4)) / 100,
        }
    }
}

#[test]
fn a_step_down_whose_rate_falls_later_is_undone_and_the_collapse_recovered() {
    let mut c = Controller::new(P);
    let mut pl = Bistable::new();
    let mut t = 0;
    drive_polls(&mut c, &mut t, 8 * MS, 2000, 800, |u, t| pl.rate(u, t));
    let s = c.snapshot();
    assert_eq!(s.downs, 1, "{s:?}");
    assert_eq!(s.undone, 1, "{s:?}");
    assert!(s.recoveries >= 1, "{s:?}");
    // Back where it was, and the plant back up; no second trial down within the back-off.
    let u = drive_polls(&mut c, &mut t, 8 * MS, 2000, 800, |u, t| pl.rate(u, t));
    assert_eq!(u, 1, "{:?}", c.snapshot());
    assert!(!pl.collapsed);
    assert_eq!(c.snapshot().downs, 1, "{:?}", c.snapshot());
}

#[test]
fn a_collapse_raises_u_until_the_rate_is_back_then_returns() {
    // Extra polls of unknown cost (no wait measured): the recovery starts one up and
    // doubles while the rate stays down; two windows back end it.
    let mut c = Controller::new(P);
    let mut t = 0;
    let flat = |_: u32, _: u64| 8000;
    drive_polls(&mut c, &mut t, 3 * MS, 1000, 0, flat);
    assert_eq!(c.budget(), 1);
    // A stall: a tenth of the rate for 600 µs.
    let at = t;
    let (mut first, mut highest, mut ended) = (None, 0, None);
    while t < at + 4 * MS && ended.is_none() {
        drive_polls(&mut c, &mut t, 1000, 1000, 0, |_, t| {
            if t < at + 600_000 {
                800
            } else {
                8000
            }
        });
        if matches!(c.mode(), Mode::Recover { .. }) {
            first.get_or_insert(c.budget());
            highest = highest.max(c.budget());
        } else if first.is_some() {
            ended = Some(t);
        }
    }
    assert_eq!(first, Some(2), "{:?}", c.snapshot());
    assert!((4..P.u_max).contains(&highest), "{highest}");
    let ended = ended.expect("the recovery ends");
    let back = at + 600_000;
    assert!(ended - back <= 3 * P.window_ns, "{}", ended - back);
    assert_eq!(c.budget(), 1, "{:?}", c.snapshot());
    assert_eq!(c.snapshot().recoveries, 1);
}

/// The highest budget of a recovery from a collapse that lasts until a budget of
/// `needed`, with extra polls of `poll_ns` that lengthen a 1 µs loop.
fn recovery_peak(poll_ns: u64, needed: u32) -> u32 {
    let mut c = Controller::new(P);
    let mut t = 0;
    let mut owed = 0;
    let mut collapsed_at = None;
    let mut peak = 0;
    while t < 12 * MS {
        let u = c.budget();
        let loop_ns = 1000 + u64::from(u) * poll_ns;
        t += loop_ns;
        let rate = match collapsed_at {
            Some(_) if u < needed => 800,
            _ => 8000,
        };
        if t > 3 * MS && collapsed_at.is_none() {
            collapsed_at = Some(t);
        }
        owed += rate * loop_ns;
        c.update((owed / MS) as u32, u64::from(u) * poll_ns, t);
        owed %= MS;
        if matches!(c.mode(), Mode::Recover { .. }) {
            peak = peak.max(c.budget());
        }
    }
    peak
}

#[test]
fn a_recovery_bounds_the_time_its_extra_polls_take_not_their_count() {
    // With 1 µs polls it reaches the bound; with 5 µs polls it stops at the budget whose
    // polls last `rescue_loop_ns` (4 × 5 µs), though the plant would need 8: sixteen
    // polls of 5 µs would hold every loop 80 µs.
    assert_eq!(recovery_peak(1000, 16), P.u_max);
    assert_eq!(recovery_peak(5000, 8), 4);
}

#[test]
fn a_second_collapse_soon_after_comes_back_one_higher() {
    let mut c = Controller::new(P);
    let mut t = 0;
    drive(&mut c, &mut t, 3 * MS, 1000, |_, _| 8000);
    // Collapsed for good below a budget of 2.
    let mut ends = [0u32; 2];
    let mut n = 0;
    let mut recovering = false;
    while t < 15 * MS && n < 2 {
        drive(
            &mut c,
            &mut t,
            1000,
            1000,
            |u, _| {
                if u >= 2 {
                    8000
                } else {
                    800
                }
            },
        );
        let now = matches!(c.mode(), Mode::Recover { .. });
        if recovering && !now {
            ends[n] = c.budget();
            n += 1;
        }
        recovering = now;
    }
    assert_eq!(ends, [1, 2], "{:?}", c.snapshot());
    // And there it stays.
    let u = drive(&mut c, &mut t, 10 * MS, 1000, |u, _| {
        if u >= 2 {
            8000
        } else {
            800
        }
    });
    assert_eq!(u, 2, "{:?}", c.snapshot());
    assert_eq!(c.snapshot().recoveries, 2, "{:?}", c.snapshot());
}

#[test]
fn reaction_times_are_the_same_for_loops_of_one_and_fifty_us() {
    // The same costly plant with loops 50 times apart: the budget reaches 0 at the same
    // time (within a loop and a window), because holds and needs are in ns.
    let when = |loop_ns: u64| {
        let mut c = Controller::new(P);
        let mut t = 0;
        while c.budget() != 0 && t < 20 * MS {
            drive_polls(&mut c, &mut t, loop_ns, loop_ns, loop_ns / 2, costly(20));
        }
        t
    };
    let (fast, slow) = (when(1000), when(50_000));
    assert!(fast < 20 * MS, "never stepped down");
    assert!(
        fast.abs_diff(slow) <= P.window_ns + 50_000,
        "{fast} vs {slow}"
    );
}

#[test]
fn a_rejected_trial_below_the_floor_waits_the_longest_for_the_next() {
    // Costly polls, but going without costs more: each trial down is rejected, and the
    // next one waits `probe_max_ns` (on a bistable plant each costs a collapse).
    let mut c = Controller::new(P);
    let mut t = 0;
    let mut starts = [0u64; 3];
    let mut n = 0;
    let mut last = c.budget();
    while t < 60 * MS && n < 3 {
        drive_polls(&mut c, &mut t, 1000, 1000, 500, |u, _| match u {
            0 => 4000,
            u => 8000 * (100 - 20 * u64::from(u - 1).min(4)) / 100,
        });
        if last == 1 && c.budget() == 0 {
            starts[n] = t;
            n += 1;
        }
        last = c.budget();
    }
    assert_eq!(n, 3, "{:?}", c.snapshot());
    for w in starts.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            (P.probe_max_ns..P.probe_max_ns + 4 * P.window_ns).contains(&gap),
            "{starts:?}"
        );
    }
    assert_eq!(c.snapshot().downs, 0);
}

#[test]
fn no_answers_at_all_move_nothing() {
    let mut c = Controller::new(P);
    let mut t = 0;
    drive(&mut c, &mut t, 30 * MS, 3000, |_, _| 0);
    assert_eq!(c.budget(), P.start, "{:?}", c.snapshot());
    let s = c.snapshot();
    assert_eq!(s.ups + s.downs + s.recoveries, 0, "{s:?}");
}

#[test]
fn adversarial_times_and_counts_keep_u_bounded() {
    let mut c = Controller::new(P);
    let mut now = 5 * MS;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..200_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        now = match x % 5 {
            0 => now,
            1 => now.saturating_sub(7000),
            2 => now + (x >> 38),
            _ => now + 900,
        };
        let answers = match (x >> 8) % 4 {
            0 => 0,
            1 => u32::MAX,
            _ => (x >> 20) as u32 % 64,
        };
        let waited = match (x >> 30) % 3 {
            0 => 0,
            1 => u64::MAX,
            _ => x >> 44,
        };
        let u = c.update(answers, waited, now);
        assert!(u <= P.u_max, "{:?}", c.snapshot());
    }
    let s = c.snapshot();
    assert!(s.ups + s.downs + s.recoveries > 0, "never moved: {s:?}");
}
