//! Echo throughput of two copyrpc contexts on the stepped software device, at batch 1,
//! 16 and 64 (calls queued before a poll), with the server answering through `recv`
//! and `reply_with` (`recv/*`; with `flush` after the replies, `flush/*`) or inside
//! `poll_serve` (`inpoll/*`). One thread does
//! everything (both contexts and the device), so this measures the work per call of
//! core + driver + model together; `scripts/instr.sh` separates the core's share in
//! instructions.
//!
//! `cargo bench -p copyrpc-tests --bench copyrpc_echo`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use copyrpc_tests::echo_rig::{pair, round, Serve};

fn echo(c: &mut Criterion) {
    let mut g = c.benchmark_group("copyrpc_echo_sim");
    for (name, serve) in [
        ("recv", Serve::Recv),
        ("flush", Serve::RecvFlush),
        ("inpoll", Serve::InPoll),
    ] {
        for batch in [1u32, 16, 64] {
            g.throughput(Throughput::Elements(u64::from(batch)));
            g.bench_with_input(BenchmarkId::new(name, batch), &batch, |b, &batch| {
                // Built on the main thread's 8 MiB stack: the rig's values are large.
                let mut p = pair();
                let payload = [0x5au8; 32];
                let mut k = 0u64;
                b.iter(|| {
                    round(&mut p, batch, &payload, k, serve);
                    k += u64::from(batch);
                });
            });
        }
    }
    g.finish();
}

criterion_group!(benches, echo);
criterion_main!(benches);
