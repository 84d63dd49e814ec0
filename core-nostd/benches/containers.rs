//! The hand-written QPN → endpoint map against the `heapless` map it could have been
//! (ARCHITECTURE.md, "hand-written pieces"): the lookup every receive completion makes.
//!
//! `cargo bench -p copyrpc-core --bench containers`. QPNs as a NIC hands them out to one
//! process: a run of consecutive numbers from an arbitrary base (`dense`), or every other
//! one (`stride2`: two contexts creating QPs in turn). Each iteration looks up every
//! mapped QPN once, in a scrambled order, so the figure is per lookup × endpoints.

#[path = "../src/copyrpc/qpn_map.rs"]
#[allow(dead_code, unused_imports, missing_debug_implementations)]
mod qpn_map;

use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use heapless::index_map::FnvIndexMap;
use qpn_map::QpnMap;

const CAP: usize = 1024;
const BASE: u32 = 0x0001_a2c5;

fn qpns(n: usize, stride: u32) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n as u32).map(|i| BASE + i * stride).collect();
    // Completions do not arrive in creation order: a fixed odd-multiplier shuffle.
    let len = v.len();
    for i in 0..len {
        v.swap(i, (i * 617 + 13) % len);
    }
    v
}

/// Every key looked up once through `get` (generic, so each map's lookup is inlined as
/// it would be in the poll loop), the sum kept so no lookup can be optimised away.
fn lookups(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    keys: &[u32],
    get: impl Fn(u32) -> Option<u16>,
) {
    g.bench_with_input(BenchmarkId::new(name, keys.len()), keys, |b, keys| {
        b.iter(|| {
            keys.iter().fold(0u32, |s, &q| {
                s.wrapping_add(u32::from(get(black_box(q)).unwrap()))
            })
        })
    });
}

fn benches(c: &mut Criterion) {
    for (layout, stride) in [("dense", 1), ("stride2", 2)] {
        let mut g = c.benchmark_group(format!("qpn_lookup/{layout}"));
        for n in [64usize, 1024] {
            let keys = qpns(n, stride);
            g.throughput(Throughput::Elements(n as u64));
            let mut ours = Box::new(QpnMap::<CAP>::new());
            let mut theirs = Box::new(FnvIndexMap::<u32, u16, CAP>::new());
            // heapless probes Robin-Hood style and slows as it fills: the same map at
            // twice the capacity, as a user would size it.
            let mut roomy = Box::new(FnvIndexMap::<u32, u16, { 2 * CAP }>::new());
            for (ep, &q) in keys.iter().enumerate() {
                ours.insert(q, ep as u16).unwrap();
                theirs.insert(q, ep as u16).unwrap();
                roomy.insert(q, ep as u16).unwrap();
            }
            lookups(&mut g, "QpnMap", &keys, |q| ours.get(q));
            lookups(&mut g, "heapless_FnvIndexMap", &keys, |q| {
                theirs.get(&q).copied()
            });
            lookups(&mut g, "heapless_FnvIndexMap_2x", &keys, |q| {
                roomy.get(&q).copied()
            });
        }
        g.finish();
    }
}

criterion::criterion_group!(group, benches);
criterion::criterion_main!(group);
