//! Bulk transfer bandwidth on the software device model against `memcpy` of the same
//! sizes in the same run (on one machine the model's every byte is a CPU copy, so memcpy
//! is the ceiling).
//!
//! `cargo bench -p copyrpc-host --bench bulk`; figures and their reading are in
//! docs/PERFORMANCE.md ("Bulk transfers"). Groups, each at 64 KiB, 1 MiB and 10 MiB:
//!
//! - `bulk/put`: a client PUT (the server pulls with RDMA READ, then replies);
//! - `bulk/get`: a client GET (the server pushes with RDMA WRITE, then replies);
//! - `bulk/memcpy`: `copy_nonoverlapping` between two buffers of the size.
//!
//! The transfers run on the copyrpc test rig (two contexts on one device model, stepped
//! by the bench thread), so a figure is the model's cost per byte plus the RPC around it.

#[path = "../../core-nostd/tests/bulk_common/mod.rs"]
#[allow(clippy::all, unsafe_op_in_unsafe_fn, missing_debug_implementations)]
mod bulk_common;

use std::hint::black_box;

use bulk_common::{standard, Bulk};
use copyrpc_core::bulk::Pattern;
use criterion::{BenchmarkId, Criterion, Throughput};

const SIZES: [usize; 3] = [64 << 10, 1 << 20, 10 << 20];

fn one(b: &mut Bulk, pat: Pattern, n: usize) {
    let (pl, gl) = if pat == Pattern::Put {
        (n as u64, 0)
    } else {
        (0, n as u64)
    };
    let op = b.call(0, pat, pl, gl).unwrap();
    b.run_until("a bulk reply", 100_000_000, &mut standard, |b| {
        b.client.ops().is_done(op)
    });
    assert_eq!(b.client.ops().result(op), Some(Ok(n as u64)));
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("bulk");
    g.sample_size(10);
    for &n in &SIZES {
        g.throughput(Throughput::Bytes(n as u64));
        let mut rig = Bulk::new(10 << 20, 1);
        for pat in [Pattern::Put, Pattern::Get] {
            let name = if pat == Pattern::Put { "put" } else { "get" };
            g.bench_with_input(BenchmarkId::new(name, n), &n, |bch, &n| {
                bch.iter(|| one(&mut rig, pat, n))
            });
        }
        let src = vec![0x5au8; n];
        let mut dst = vec![0u8; n];
        g.bench_with_input(BenchmarkId::new("memcpy", n), &n, |bch, _| {
            bch.iter(|| {
                dst.copy_from_slice(black_box(&src));
                black_box(&mut dst);
            })
        });
    }
    g.finish();
}

/// The device model is built on the stack before it is boxed: criterion runs on a
/// thread with a big one (criterion_main! would run it on the main thread).
fn main() {
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(|| {
            let mut c = Criterion::default().configure_from_args();
            benches(&mut c);
            c.final_summary();
        })
        .unwrap()
        .join()
        .unwrap();
}
