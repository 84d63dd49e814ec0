//! copyrpc echo throughput on the software device model, at 1, 16 and 64 calls per
//! batch, on one endpoint pair stepped in this thread (no engine thread, no sleeps).
//!
//! `cargo bench -p host --bench copyrpc_echo`. One iteration: the caller writes `B`
//! calls, polls (one WRITE_IMM carries them all), the device runs, the server polls and
//! echoes every request, and so on until the caller holds all `B` responses. The time
//! includes the device model's own work (parsing WQEs, moving bytes through the link
//! queue, writing CQEs), so it bounds the driver + core cost from above; the numbers
//! and their reading are in docs/PERFORMANCE.md.

#[path = "../../core-nostd/tests/copyrpc_common/mod.rs"]
mod copyrpc_common;

use std::hint::black_box;
use std::time::Duration;

use copyrpc_common::{serve_echo, Opts, Pair};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mlx5_raw::sim::LinkConfig;

/// One endpoint pair, rings of 32 KiB: 64 calls of 32 B with 32 B response allowances
/// need 64 * 96 B of credit, within a quarter of the ring.
type P = Pair<1, 128, 1024>;

fn rig() -> Box<P> {
    let mut o = Opts::new(1, 32 << 10);
    o.link = LinkConfig::default();
    o.cfg.probe_interval = 0;
    o.budget = 64;
    Box::new(Pair::new(o))
}

/// Echoes `batch` calls of 32 B; returns the steps it took.
fn round(p: &mut P, batch: u64, payload: &[u8; 32]) -> u64 {
    let ea = p.a.eps[0];
    for k in 0..batch {
        p.a.ctx
            .call_with_allowance(ea, payload, 32, k)
            .expect("credit and ring room for a whole batch");
    }
    let mut got = 0;
    let start = p.steps;
    while got < batch {
        p.a.ctx.poll(|_, r| {
            black_box(r.expect("echo"));
            got += 1;
        });
        p.b.ctx.poll(|_, _| unreachable!("b makes no calls"));
        serve_echo(&mut p.b.ctx);
        p.step();
    }
    p.steps - start
}

fn echo(c: &mut Criterion) {
    let mut g = c.benchmark_group("copyrpc_echo");
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(30);
    for batch in [1u64, 16, 64] {
        // Built once per batch size; every round leaves it quiescent.
        let mut p = rig();
        let payload = [0x5a; 32];
        g.throughput(Throughput::Elements(batch));
        g.bench_with_input(BenchmarkId::from_parameter(batch), &batch, |b, &batch| {
            b.iter(|| round(&mut p, batch, &payload));
        });
    }
    g.finish();
}

criterion_group!(benches, echo);
criterion_main!(benches);
