use super::steady::*;

const P: Params = Params::DEFAULT;
const MS: u64 = 1_000_000;

/// Drives `c` for `for_ns` in loops of `loop_ns` against a plant giving answers per ms
/// for (budget, time); returns the budget at the end and the time reached.
fn drive(
    c: &mut Controller,
    t: &mut u64,
    for_ns: u64,
    loop_ns: u64,
    mut plant: impl FnMut(u32, u64) -> u64,
) -> u32 {
    let end = *t + for_ns;
    // Fractions of an answer carry over, so a short loop loses nothing.
    let mut owed = 0u64;
    while *t < end {
        *t += loop_ns;
        owed += plant(c.budget(), *t) * loop_ns;
        let answers = owed / MS;
        owed %= MS;
        c.update(answers as u32, *t);
    }
    c.budget()
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
    // A step up costs 2 % (cheap): no evidence that going without is worth the risk, so
    // the budget never goes below the start, even though the plant would reward it.
    let mut c = Controller::new(P);
    let mut t = 0;
    let mut lowest = u32::MAX;
    while t < 40 * MS {
        lowest = lowest.min(drive(&mut c, &mut t, P.window_ns, 2000, costly(2)));
    }
    assert_eq!(lowest, P.start, "{:?}", c.snapshot());
    assert_eq!(c.snapshot().downs, 0, "{:?}", c.snapshot());
}

#[test]
fn costly_polls_step_below_the_floor_when_the_rate_says_so() {
    // A step up costs 20 %: the first trial up is rejected and measured, and the trial
    // down that follows gains 20 %: kept, watched, and the floor follows it.
    let mut c = Controller::new(P);
    let mut t = 0;
    drive(&mut c, &mut t, 5 * MS, 2000, costly(20));
    // From then on at 0, but for the trials up (rejected, each a lag and two windows).
    let mut at_zero = 0;
    for _ in 0..100 {
        at_zero += u32::from(drive(&mut c, &mut t, 100_000, 2000, costly(20)) == 0);
    }
    assert!(at_zero >= 80, "{at_zero} of 100: {:?}", c.snapshot());
    assert_eq!(c.snapshot().floor, 0, "{:?}", c.snapshot());
    assert_eq!(c.snapshot().downs, 1, "{:?}", c.snapshot());
    assert_eq!(c.snapshot().undone, 0, "{:?}", c.snapshot());
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
    drive(&mut c, &mut t, 8 * MS, 2000, |u, t| pl.rate(u, t));
    let s = c.snapshot();
    assert_eq!(s.downs, 1, "{s:?}");
    assert_eq!(s.undone, 1, "{s:?}");
    assert!(s.recoveries >= 1, "{s:?}");
    // Back where it was, and the plant back up; no second trial down within the back-off.
    let u = drive(&mut c, &mut t, 8 * MS, 2000, |u, t| pl.rate(u, t));
    assert_eq!(u, 1, "{:?}", c.snapshot());
    assert!(!pl.collapsed);
    assert_eq!(c.snapshot().downs, 1, "{:?}", c.snapshot());
}

#[test]
fn a_collapse_while_holding_raises_u_to_u_max_for_recover_ns_then_returns() {
    let mut c = Controller::new(P);
    let mut t = 0;
    let flat = |_: u32, _: u64| 8000;
    drive(&mut c, &mut t, 3 * MS, 1000, flat);
    assert_eq!(c.budget(), 1);
    // A stall: a tenth of the rate for 300 µs.
    let at = t;
    let mut saw_max = None;
    while t < at + 3 * MS {
        drive(&mut c, &mut t, 1000, 1000, |_, t| {
            if t < at + 300_000 {
                800
            } else {
                8000
            }
        });
        if c.budget() == P.u_max {
            saw_max.get_or_insert(t);
        }
        if matches!(c.mode(), Mode::Hold) && saw_max.is_some() {
            break;
        }
    }
    let from = saw_max.expect("a recovery");
    assert!(from - at <= 2 * P.window_ns, "{}", from - at);
    assert!(t - from >= P.recover_ns, "{}", t - from);
    assert!(t - from <= P.recover_ns + 2 * P.window_ns, "{}", t - from);
    assert_eq!(c.budget(), 1, "{:?}", c.snapshot());
    assert_eq!(c.snapshot().recoveries, 1);
}

#[test]
fn a_second_collapse_in_a_row_comes_back_one_higher_and_waits_twice_as_long() {
    let mut c = Controller::new(P);
    let mut t = 0;
    drive(&mut c, &mut t, 3 * MS, 1000, |_, _| 8000);
    // Collapsed for good below a budget of 2.
    let mut ends = [0u32; 2];
    let mut n = 0;
    let mut last = c.budget();
    while t < 10 * MS && n < 2 {
        drive(
            &mut c,
            &mut t,
            1000,
            1000,
            |u, _| if u >= 2 { 8000 } else { 800 },
        );
        if last == P.u_max && c.budget() != P.u_max {
            ends[n] = c.budget();
            n += 1;
        }
        last = c.budget();
    }
    assert_eq!(ends, [1, 2], "{:?}", c.snapshot());
}

#[test]
fn reaction_times_are_the_same_for_loops_of_one_and_fifty_us() {
    // The same costly plant with loops 50 times apart: the budget reaches 0 at the same
    // time (within a loop and a window), because holds and needs are in ns.
    let when = |loop_ns: u64| {
        let mut c = Controller::new(P);
        let mut t = 0;
        while c.budget() != 0 && t < 20 * MS {
            drive(&mut c, &mut t, loop_ns, loop_ns, costly(20));
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
fn a_rejected_trial_down_doubles_the_wait_for_the_next() {
    // Costly polls, but going without costs more: each trial down is rejected, and the
    // gaps between them double.
    let mut c = Controller::new(P);
    let mut t = 0;
    let mut starts = [0u64; 4];
    let mut n = 0;
    let mut last = c.budget();
    while t < 40 * MS && n < 4 {
        drive(&mut c, &mut t, 1000, 1000, |u, _| match u {
            0 => 4000,
            u => 8000 * (100 - 20 * u64::from(u - 1).min(4)) / 100,
        });
        if last == 1 && c.budget() == 0 {
            starts[n] = t;
            n += 1;
        }
        last = c.budget();
    }
    assert_eq!(n, 4, "{:?}", c.snapshot());
    for w in starts.windows(3) {
        let (a, b) = (w[1] - w[0], w[2] - w[1]);
        assert!(b > a + a / 2, "{starts:?}");
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
        let u = c.update(answers, now);
        assert!(u <= P.u_max, "{:?}", c.snapshot());
    }
    let s = c.snapshot();
    assert!(s.ups + s.downs + s.recoveries > 0, "never moved: {s:?}");
}
