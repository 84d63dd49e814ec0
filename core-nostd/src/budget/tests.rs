use super::*;

/// Small counts so each transition shows in a few dozen loops.
const P: Params = Params {
    low_need: 4,
    high_need: 6,
    hold_min: 3,
    warmup: 16,
    ..Params::SEED
};

/// A controller past its warm-up with the given gains (as the warm-up would set them).
fn steering(step_up: u32, u_max: u32) -> Controller {
    let mut c = Controller::new(P);
    c.phase = Phase::Control;
    c.s.step_up = step_up;
    c.s.step_down = (2 * step_up).max(2);
    c.s.u_max = u_max;
    c.s.u = 0;
    c
}

/// A plant: each loop takes `loop_ns`, the RTT is `rtt_ns`, `cqes` completions.
struct Plant {
    now: u64,
    loop_ns: u64,
    rtt_ns: u64,
}

impl Plant {
    /// Loops of `loop_ns`, an RTT of `rtt_ns`, starting at time 0.
    fn new(loop_ns: u64, rtt_ns: u64) -> Self {
        Self {
            now: 0,
            loop_ns,
            rtt_ns,
        }
    }

    fn obs(&mut self, cqes: u32) -> Observation {
        self.now += self.loop_ns;
        Observation {
            cqes,
            now_ns: self.now,
            rtt_ns: Some(self.rtt_ns),
        }
    }
}

/// Runs `n` loops; returns the budgets after each.
fn run(
    c: &mut Controller,
    plant: &mut Plant,
    n: usize,
    mut cqes: impl FnMut(u32) -> u32,
) -> [u32; 512] {
    let mut out = [0; 512];
    for slot in out.iter_mut().take(n) {
        let o = plant.obs(cqes(c.budget()));
        *slot = c.update(o);
    }
    out
}

#[test]
fn low_rho_steps_up_after_low_need_loops_then_holds() {
    let mut c = steering(2, 20);
    // Loop 1 µs, RTT 6 µs: rho ≈ 0.17 < 0.8; batches of 3, never empty.
    let mut pl = Plant::new(1000, 6000);
    let u = run(&mut c, &mut pl, 15, |_| 3);
    // The loop-time EWMA starts at 0, so rho is low from the first loop.
    assert_eq!(&u[..4], &[0, 0, 0, 2], "{u:?}");
    // Held for hold_min loops, then another low_need before the next step.
    assert_eq!(&u[4..11], &[2, 2, 2, 2, 2, 2, 4], "{u:?}");
    assert_eq!(c.snapshot().ups, 2);
    assert_eq!(c.snapshot().downs, 0);
}

#[test]
fn a_high_empty_ratio_steps_up_even_when_rho_is_in_band() {
    let mut c = steering(1, 20);
    // rho = 1.0 (in 0.8..1.2) once the EWMAs settle; every loop empty.
    let mut pl = Plant::new(6000, 6000);
    // Let the loop EWMA reach rho 1 with batches (no step: low by rho at first, so
    // reset the counters by a loop in band).
    run(&mut c, &mut pl, 200, |_| 1);
    let before = c.snapshot();
    assert!(before.rho > u64::from(P.rho_low), "{before:?}");
    // Now empty loops: the empty EWMA passes 0.75 after ~22 of them (and 0.9 only after
    // ~37), so the first step up comes from the empty-ratio rule, not the collapse rule.
    let mut first_up = None;
    for i in 0..60 {
        let u = c.update(pl.obs(0));
        if u > before.u {
            first_up = Some((i, c.snapshot()));
            break;
        }
    }
    let (i, s) = first_up.expect("no step up on empty loops");
    assert!(s.empty > u64::from(P.e_high), "{i}: {s:?}");
    assert_eq!(
        s.recoveries, before.recoveries,
        "{i}: the collapse rule moved first"
    );
    assert_eq!(s.u, before.u + 1, "one step_up");
}

#[test]
fn high_rho_and_few_empties_step_down_after_high_need_loops() {
    let mut c = steering(2, 30);
    c.s.u = 20;
    // Loop 12 µs, RTT 6 µs, the EWMAs already there: rho ≈ 2 > 1.2; busy loops.
    c.s.loop_ns = 12_000 * ONE;
    c.s.rtt_ns = 6000 * ONE;
    c.s.batch = 10 * ONE;
    let mut pl = Plant::new(12_000, 6000);
    let u = run(&mut c, &mut pl, 120, |_| 10);
    let first = u.iter().position(|&x| x != 20).expect("never moved");
    assert_eq!(
        first + 1,
        P.high_need as usize,
        "after high_need loops: {u:?}"
    );
    assert_eq!(u[first], 16, "step_down = 2 x step_up: {u:?}");
    // Every later change is another step down of 4 (to 0), at least high_need +
    // hold_min loops apart.
    let (at, n) = change_points(&u[..120]);
    for w in at[..n].windows(2) {
        assert!(w[1] - w[0] >= (P.high_need + P.hold_min) as usize, "{u:?}");
        assert_eq!(u[w[0]].saturating_sub(4), u[w[1]], "{u:?}");
    }
    assert!(c.snapshot().downs >= 2);
}

#[test]
fn collapse_recovery_raises_u_by_two_steps_at_once() {
    let mut c = steering(3, 40);
    // rho in band (1.0) so only the collapse rule can act; every loop empty.
    let mut pl = Plant::new(6000, 6000);
    c.s.loop_ns = 6000 * ONE;
    c.s.rtt_ns = 6000 * ONE;
    c.s.empty = ONE; // already collapsed: empty ratio 1, batch 0
    c.hold_cnt = 0;
    let u = c.update(pl.obs(0));
    // The empty-ratio rule steps up too, but not before low_need loops; the collapse
    // rule acts at once, by 2 x step_up.
    assert_eq!(u, 6);
    assert_eq!(c.snapshot().recoveries, 1);
    // Then a hold: nothing moves for hold_min loops.
    for _ in 0..P.hold_min {
        assert_eq!(c.update(pl.obs(0)), 6);
    }
}

#[test]
fn u_stays_within_zero_and_u_max() {
    let mut c = steering(8, 10);
    let mut pl = Plant::new(100, 100_000);
    let u = run(&mut c, &mut pl, 500, |_| 0);
    assert!(u.iter().take(500).all(|&x| x <= 10), "{u:?}");
    assert_eq!(u[499], 10, "pinned at u_max");
    let mut c = steering(8, 10);
    c.s.u = 3;
    let mut pl = Plant::new(1_000_000, 1000);
    let u = run(&mut c, &mut pl, 500, |_| 50);
    assert_eq!(u[499], 0, "stepped down to 0 and stays");
}

/// Runs `c`'s warm-up on a known plant: batch = 4.5 + 1.0 u (dB/du = 1 → step_up =
/// round(2/1) = 2); loops of 1 µs and a 6 µs RTT (R0 = 6 loops per round trip → u_max =
/// round(2.5 x 6) = 15). Checks the phases and budgets on the way.
fn warm_up_on_a_known_plant(c: &mut Controller, p: Params) {
    let mut pl = Plant::new(1000, 6000);
    // 4.5 completions per loop on average at u = 0: alternate 4 and 5.
    let mut k = 0u32;
    for _ in 0..p.warmup {
        assert_eq!(c.phase(), Phase::Baseline);
        assert_eq!(c.budget(), 0);
        k += 1;
        c.update(pl.obs(4 + k % 2));
    }
    assert_eq!(c.phase(), Phase::Probe);
    assert_eq!(c.budget(), p.u_probe);
    for _ in 0..p.warmup {
        k += 1;
        // 4.5 + 8 = 12.5 on average (a B0 taken as 0 would make dB/du 1.56, step_up 1).
        c.update(pl.obs(12 + k % 2));
    }
    assert_eq!(c.phase(), Phase::Control);
}

#[test]
fn warmup_identifies_a_known_plant() {
    let mut c = Controller::new(P);
    warm_up_on_a_known_plant(&mut c, P);
    let s = c.snapshot();
    assert_eq!((s.step_up, s.step_down, s.u_max), (2, 4, 15), "{s:?}");
    assert_eq!(s.u, 0, "steering starts from 0");
}

#[test]
fn warmup_floors_a_flat_plant_and_bounds_u_max() {
    // Batches that do not grow with u: dB/du floored at 1/16 → step_up clamped to 8;
    // no RTT sample ever → R0 = 0 → u_max at its floor of 8.
    let mut c = Controller::new(P);
    for i in 0..2 * P.warmup as u64 {
        c.update(Observation {
            cqes: 2,
            now_ns: i * 1000,
            rtt_ns: None,
        });
    }
    let s = c.snapshot();
    assert_eq!(c.phase(), Phase::Control);
    assert_eq!((s.step_up, s.step_down, s.u_max), (8, 16, 8), "{s:?}");
    // A plant whose RTT is 100 loops: u_max at its ceiling of 64.
    let mut c = Controller::new(P);
    for i in 0..2 * P.warmup as u64 {
        c.update(Observation {
            cqes: 1,
            now_ns: i * 100,
            rtt_ns: Some(10_000),
        });
    }
    assert_eq!(c.snapshot().u_max, 64);
}

#[test]
fn adversarial_inputs_keep_u_bounded_and_the_phases_moving() {
    adversarial(Params::SEED);
    adversarial(Params::ADAPTED);
}

fn adversarial(p: Params) {
    let mut c = Controller::new(p);
    let mut now = 1_000_000u64;
    let mut x = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        // xorshift: a fixed adversarial sequence.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let total = 2 * p.warmup as usize + 20_000;
    for i in 0..total {
        let r = next();
        now = match r % 5 {
            0 => now,                      // standing still
            1 => now.saturating_sub(5000), // backwards
            2 => now + (r >> 40),          // a jump of up to 16 M ns
            _ => now + 700,
        };
        let rtt = match (r >> 8) % 4 {
            0 => None,
            1 => Some(6000),
            2 => Some(600_000),  // 100x
            _ => Some(u64::MAX), // absurd
        };
        let cqes = if i < total / 2 { 0 } else { (r >> 20) as u32 }; // none, then huge
        let u = c.update(Observation {
            cqes,
            now_ns: now,
            rtt_ns: rtt,
        });
        let s = c.snapshot();
        assert!(u <= s.u_max && s.u_max <= 64, "{i}: {s:?}");
    }
    assert_eq!(c.phase(), Phase::Control, "the warm-up ended");
    let s = c.snapshot();
    assert!(s.ups + s.downs > 0, "the controller never moved: {s:?}");
}

/// [`P`]'s counts with [`Params::ADAPTED`]'s steering.
const A: Params = Params {
    low_need: 4,
    high_need: 6,
    hold_min: 3,
    warmup: 16,
    ..Params::ADAPTED
};

/// A controller past its warm-up with [`A`]'s steering.
fn batch_steering(step_up: u32, u: u32, u_max: u32) -> Controller {
    let mut c = Controller::new(A);
    c.phase = Phase::Control;
    c.s.step_up = step_up;
    c.s.step_down = (2 * step_up).max(2);
    c.s.u_max = u_max;
    c.s.u = u;
    c
}

#[test]
fn batch_steering_steps_up_below_a_batch_of_one_whatever_rho_says() {
    let mut c = batch_steering(2, 4, 20);
    // Loop 10 µs, RTT 1 µs: rho = 10, high for the spec; half a completion per loop
    // and half the loops empty (under e_high): low only by the batch.
    let mut pl = Plant::new(10_000, 1000);
    // 0, 1, 0, 1, ...: a batch EWMA near 0.5 and an empty ratio near 0.5.
    let mut k = 0u32;
    let u = run(&mut c, &mut pl, 64, |_| {
        k += 1;
        k % 2
    });
    let s = c.snapshot();
    assert!(s.rho > u64::from(A.rho_high), "{s:?}");
    assert!(s.batch < u64::from(A.b_low), "{s:?}");
    assert_eq!(s.downs, 0, "{s:?}");
    assert!(s.ups >= 2, "{u:?}");
    assert!(u[63] > 4, "{u:?}");
}

#[test]
fn batch_steering_steps_down_above_a_batch_of_four_whatever_rho_says() {
    let mut c = batch_steering(1, 8, 20);
    // Loop 1 µs, RTT 1 ms: rho = 0.001, low for the spec; batches of 8, never empty.
    let mut pl = Plant::new(1000, 1_000_000);
    let u = run(&mut c, &mut pl, 200, |_| 8);
    let s = c.snapshot();
    assert!(s.rho < u64::from(A.rho_low), "{s:?}");
    assert_eq!(s.ups, 0, "{s:?}");
    assert_eq!(u[199], 0, "stepped down by 2 to 0: {u:?}");
    assert_eq!(s.downs, 4, "8 to 0 by 2; none counted at 0: {s:?}");
}

#[test]
fn a_step_down_followed_by_a_step_up_doubles_the_next_step_downs_need() {
    let mut c = batch_steering(1, 4, 20);
    let mut pl = Plant::new(1000, 50_000);
    // Batches of 8 while u >= 4, none below: the plant collapses without the budget.
    let plant = |u: u32| if u >= 4 { 8 } else { 0 };
    let u = run(&mut c, &mut pl, 400, plant);
    let (at, n) = change_points(&u[..400]);
    assert!(n >= 5, "{u:?}");
    // Each stay at 4 after a step up back from 2 lasts longer than the one before:
    // the high count needed doubles (6, 12, 24 ... loops, plus the EWMA's settling).
    let mut stays = [0usize; 32];
    let mut k = 0;
    for w in at[..n].windows(2) {
        if u[w[0]] == 4 && k < stays.len() {
            stays[k] = w[1] - w[0];
            k += 1;
        }
    }
    assert!(k >= 2, "{u:?}");
    for w in stays[..k].windows(2) {
        assert!(
            w[1] > w[0] + A.high_need as usize,
            "{:?} in {u:?}",
            &stays[..k]
        );
    }
    assert!(c.snapshot().downs >= 3, "{:?}", c.snapshot());
}

#[test]
fn two_step_downs_in_a_row_halve_the_need_back() {
    let mut c = batch_steering(1, 4, 20);
    c.down_need = 4 * A.high_need;
    c.last_down = true;
    let mut pl = Plant::new(1000, 50_000);
    // Always high: each step down stands, and each halves the need.
    let mut seen = [0u32; 2];
    for _ in 0..200 {
        c.update(pl.obs(8));
        let downs = c.snapshot().downs as usize;
        if (1..=2).contains(&downs) {
            seen[downs - 1] = c.down_need;
        }
    }
    assert_eq!(seen, [2 * A.high_need, A.high_need]);
    assert_eq!(c.budget(), 0);
}

#[test]
fn without_back_off_an_undone_step_down_leaves_the_need_alone() {
    let mut c = steering(1, 20);
    c.s.u = 4;
    let mut pl = Plant::new(10_000, 1000);
    // The spec's steering on rho = 10 (high) while u >= 4, every loop empty below
    // (low): down, up, down, ... and the need stays at high_need.
    for _ in 0..400 {
        let u = c.budget();
        c.update(pl.obs(if u >= 4 { 8 } else { 0 }));
        assert_eq!(c.down_need, P.high_need, "{:?}", c.snapshot());
    }
    assert!(c.snapshot().downs >= 3, "{:?}", c.snapshot());
}

#[test]
fn a_batch_between_the_bands_holds_u() {
    // Batches of 3: not below b_low (1), not above b_high (4); never empty. The EWMAs
    // start settled there.
    let mut c = batch_steering(1, 4, 20);
    c.s.batch = 3 * ONE;
    let mut pl = Plant::new(1000, 50_000);
    let u = run(&mut c, &mut pl, 300, |_| 3);
    assert!(u[..300].iter().all(|&x| x == 4), "{u:?}");
}

#[test]
fn batch_steering_steps_up_on_a_high_empty_ratio_even_with_batches_above_one() {
    // One loop in eight brings 16 completions: a batch EWMA around 2, an empty ratio
    // around 0.85 (above e_high). The EWMAs start settled there.
    let mut c = batch_steering(1, 0, 20);
    c.s.batch = 2 * ONE;
    c.s.empty = ONE * 85 / 100;
    let mut pl = Plant::new(1000, 50_000);
    let mut k = 0u32;
    run(&mut c, &mut pl, 300, |_| {
        k += 1;
        if k.is_multiple_of(8) {
            16
        } else {
            0
        }
    });
    let s = c.snapshot();
    assert!(s.batch >= u64::from(A.b_low), "{s:?}");
    assert!(s.ups >= 2 && s.downs == 0, "{s:?}");
}

#[test]
fn many_empty_loops_are_not_high_however_large_the_batch() {
    // 40 completions every other loop: a batch EWMA near 20 (above b_high) with an
    // empty ratio near 0.5 (above e_low, below e_high): neither high nor low. The EWMAs
    // start settled there.
    let mut c = batch_steering(1, 4, 20);
    c.s.batch = 20 * ONE;
    c.s.empty = ONE / 2;
    let mut pl = Plant::new(1000, 50_000);
    let mut k = 0u32;
    let u = run(&mut c, &mut pl, 300, |_| {
        k += 1;
        if k.is_multiple_of(2) {
            40
        } else {
            0
        }
    });
    assert!(u[..300].iter().all(|&x| x == 4), "{u:?}");
}

#[test]
fn the_adapted_parameters_warm_up_in_sixteen_loops_a_phase() {
    let mut c = Controller::new(Params::ADAPTED);
    let mut pl = Plant::new(1000, 6000);
    for _ in 0..16 {
        c.update(pl.obs(1));
    }
    assert_eq!(c.phase(), Phase::Probe);
    for _ in 0..16 {
        c.update(pl.obs(9));
    }
    assert_eq!(c.phase(), Phase::Control);
}

#[test]
fn the_adapted_warmup_hands_over_at_step_up_not_zero() {
    let mut c = Controller::new(A);
    warm_up_on_a_known_plant(&mut c, A);
    assert_eq!(c.snapshot().step_up, 2);
    assert_eq!(c.budget(), 2, "steering starts from step_up");
}

/// Where a budget sequence changes (the first 64 places), and how many.
fn change_points(u: &[u32]) -> ([usize; 64], usize) {
    let (mut at, mut n) = ([0; 64], 0);
    for i in 1..u.len() {
        if u[i] != u[i - 1] && n < 64 {
            at[n] = i;
            n += 1;
        }
    }
    (at, n)
}

#[test]
fn the_seed_parameters_are_the_seeds_fractions() {
    // rho 0.8..1.2 and empty ratio 0.40..0.75, × 2^16 (truncated).
    let p = Params::SEED;
    assert_eq!(
        (p.rho_low, p.rho_high, p.e_high, p.e_low),
        (52_428, 78_643, 49_152, 26_214)
    );
}

#[test]
fn every_ewma_follows_its_input_up_and_down() {
    let mut c = Controller::new(P);
    // Loop 1: no start to time it from; 16 completions; the first RTT sample seeds the
    // RTT EWMA whole.
    c.update(Observation {
        cqes: 16,
        now_ns: 0,
        rtt_ns: Some(6400),
    });
    let s = c.snapshot();
    assert_eq!((s.batch, s.empty, s.loop_ns), (ONE, 0, 0), "{s:?}");
    assert_eq!(s.rtt_ns, 6400 * ONE, "{s:?}");
    // Loop 2: 1 600 ns, empty, a shorter RTT: every EWMA moves 1/16 (RTT 1/64) of the
    // way, the batch and the RTT downwards.
    c.update(Observation {
        cqes: 0,
        now_ns: 1600,
        rtt_ns: Some(640),
    });
    let s = c.snapshot();
    assert_eq!(s.batch, ONE - ONE / 16, "{s:?}");
    assert_eq!(s.empty, ONE / 16, "{s:?}");
    assert_eq!(s.loop_ns, 100 * ONE, "{s:?}");
    assert_eq!(s.rtt_ns, (6400 - 90) * ONE, "{s:?}");
    // rho = loop / RTT = 100 / 6310, × 2^16.
    assert_eq!(s.rho, (100 << 16) / 6310, "{s:?}");
}

#[test]
fn warmup_rounds_step_up_and_u_max_to_the_nearest() {
    // B0 = 0, B1 = 6 at u_probe = 8: dB/du = 0.75, 2 / 0.75 = 2.67, so step_up = 3.
    // Loops of 1 µs and a 5.5 µs RTT: R0 = 5.5, 2.5 R0 = 13.75, so u_max = 14.
    // (Truncating would give 2 and 13.)
    let mut c = Controller::new(P);
    for i in 0..2 * P.warmup {
        c.update(Observation {
            cqes: if i < P.warmup { 0 } else { 6 },
            now_ns: u64::from(i) * 1000,
            rtt_ns: Some(5500),
        });
    }
    let s = c.snapshot();
    assert_eq!(c.phase(), Phase::Control);
    assert_eq!((s.step_up, s.step_down, s.u_max), (3, 6, 14), "{s:?}");
}

#[test]
fn rho_divides_by_no_less_than_the_rtt_floor() {
    // Loops of 1 µs against a 100 ns RTT: rho = 1 000 / max(100, 500) = 2, not 10.
    let mut c = Controller::new(P);
    for i in 0..2u64 {
        c.update(Observation {
            cqes: 1,
            now_ns: i * 16_000,
            rtt_ns: Some(100),
        });
    }
    let s = c.snapshot();
    assert_eq!((s.loop_ns, s.rtt_ns), (1000 * ONE, 100 * ONE), "{s:?}");
    assert_eq!(s.rho, 2 * ONE, "{s:?}");
}

/// One `steer` from an in-band state (rho 1, batch 2, empty ratio 0.5; `u` = 4, every
/// need 1, no hold) after `set`; returns the state after it.
fn steer_once(p: Params, set: impl FnOnce(&mut Snapshot)) -> Snapshot {
    let p = Params {
        low_need: 1,
        high_need: 1,
        hold_min: 0,
        ..p
    };
    let mut c = Controller::new(p);
    c.phase = Phase::Control;
    c.s.step_up = 2;
    c.s.step_down = 4;
    c.s.u_max = 20;
    c.s.u = 4;
    c.s.rho = ONE;
    c.s.batch = 2 * ONE;
    c.s.empty = ONE / 2;
    set(&mut c.s);
    c.steer();
    c.snapshot()
}

#[test]
fn a_level_exactly_on_a_band_edge_is_in_band() {
    let seed = Params::SEED;
    let lo = u64::from(seed.rho_low);
    let hi = u64::from(seed.rho_high);
    let (e_hi, e_lo) = (u64::from(seed.e_high), u64::from(seed.e_low));
    // (what is set, u after one steer): on the edge nothing moves, one past it moves.
    type Set = fn(&mut Snapshot);
    let cases: [(Set, u32); 8] = [
        (|s| s.rho = u64::from(Params::SEED.rho_low), 4),
        (|s| s.rho = u64::from(Params::SEED.rho_low) - 1, 6),
        (|s| s.empty = u64::from(Params::SEED.e_high), 4),
        (|s| s.empty = u64::from(Params::SEED.e_high) + 1, 6),
        (
            |s| (s.rho, s.empty) = (u64::from(Params::SEED.rho_high), 0),
            4,
        ),
        (
            |s| (s.rho, s.empty) = (u64::from(Params::SEED.rho_high) + 1, 0),
            0,
        ),
        (
            |s| (s.rho, s.empty) = (2 * ONE, u64::from(Params::SEED.e_low)),
            4,
        ),
        (
            |s| (s.rho, s.empty) = (2 * ONE, u64::from(Params::SEED.e_low) - 1),
            0,
        ),
    ];
    assert!(lo < ONE && ONE < hi && e_lo < ONE / 2 && ONE / 2 < e_hi);
    for (i, (set, u)) in cases.into_iter().enumerate() {
        let s = steer_once(Params::SEED, set);
        assert_eq!(s.u, u, "case {i}: {s:?}");
    }
}

#[test]
fn collapse_recovery_needs_a_batch_below_one_and_over_nine_tenths_empty() {
    // Steering on the batch with b_low = 0, so only the recovery can move u; a low
    // empty-ratio threshold above 1 keeps the empty ratio from stepping up.
    let p = Params {
        use_rho: false,
        b_low: 0,
        e_high: u32::MAX,
        ..Params::SEED
    };
    let edge = ONE * 9 / 10;
    let cases: [(u64, u64, u64); 4] = [
        // (batch, empty, recoveries)
        (ONE - 1, edge + 1, 1),
        (ONE, edge + 1, 0),
        (ONE - 1, edge, 0),
        (0, ONE, 1),
    ];
    for (i, (batch, empty, n)) in cases.into_iter().enumerate() {
        let s = steer_once(p, |s| (s.batch, s.empty) = (batch, empty));
        assert_eq!(s.recoveries, n, "case {i}: {s:?}");
        assert_eq!(s.u, if n == 1 { 8 } else { 4 }, "case {i}: {s:?}");
    }
}
