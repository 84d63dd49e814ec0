//! Instructions per poll-budget update, for docs/PERFORMANCE.md: run under callgrind,
//! `scripts/budget-instr.sh` divides the inclusive count of `steady_rate` (the
//! `--poll-budget adaptive` controller, `budget::steady`) or `steady_seed` (given a second
//! argument `seed`: `budget::Controller` with `Params::SEED`) by the updates.
//!
//! The plant: loops of 900 ns finding 0, 1 or 2 answers, every other one held 300 ns by
//! its extra polls (for `Params::SEED` also an RTT sample
//! every fourth loop), after the warm-up, so the windows close and trials run.

use copyrpc_core::budget::{steady, Controller, Observation, Params};

#[inline(never)]
fn steady_rate(c: &mut steady::Controller, n: u64, t0: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..n {
        let (answers, waited, now) =
            core::hint::black_box(((i % 3) as u32, (i % 2) * 300, t0 + i * 900));
        acc += u64::from(c.update(answers, waited, now));
    }
    acc
}

#[inline(never)]
fn steady_seed(c: &mut Controller, n: u64, t0: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..n {
        let o = Observation {
            cqes: (i % 3) as u32,
            now_ns: t0 + i * 900,
            rtt_ns: (i % 4 == 0).then_some(6000 + (i % 7) * 100),
        };
        acc += u64::from(c.update(core::hint::black_box(o)));
    }
    acc
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let (acc, u) = if std::env::args().nth(2).as_deref() == Some("seed") {
        let p = Params::SEED;
        let mut c = Controller::new(p);
        // The warm-up, outside the measured function.
        let w = 2 * u64::from(p.warmup);
        for i in 0..w {
            c.update(Observation {
                cqes: (i % 2) as u32,
                now_ns: i * 900,
                rtt_ns: Some(6000),
            });
        }
        (steady_seed(&mut c, n, w * 900), c.budget())
    } else {
        let mut c = steady::Controller::new(steady::Params::DEFAULT);
        // Past the settling, outside the measured function.
        let w = steady::Params::DEFAULT.settle_ns / 900 + 1;
        for i in 0..w {
            c.update((i % 2) as u32, 0, i * 900);
        }
        (steady_rate(&mut c, n, w * 900), c.budget())
    };
    println!("{n} updates, final u {u} (checksum {acc})");
}
