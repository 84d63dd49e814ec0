//! Instructions per `Controller::update` (`Params::ADAPTED`, or `Params::SEED` with a
//! second argument `seed`), for docs/PERFORMANCE.md: run under callgrind,
//! `scripts/budget-instr.sh` divides the inclusive count of `steady` by the updates.
//!
//! The plant alternates busy and empty loops with an RTT sample every fourth loop, after
//! the warm-up, so every branch of steering runs.

use copyrpc_core::budget::{Controller, Observation, Params};

#[inline(never)]
fn steady(c: &mut Controller, n: u64, t0: u64) -> u64 {
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
    let p = match std::env::args().nth(2).as_deref() {
        Some("seed") => Params::SEED,
        _ => Params::ADAPTED,
    };
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
    let acc = steady(&mut c, n, w * 900);
    println!("{n} updates, final u {} (checksum {acc})", c.budget());
}
