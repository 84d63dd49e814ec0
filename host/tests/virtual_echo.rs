//! The copyrpc echo on the virtual world: N ranks on one thread in virtual time, every
//! answer checked by the echo itself, and the same seed giving the same run.

use copyrpc_host::rpc::echo::{run_virtual, EchoConfig, VirtualEcho, MAX_VIRTUAL_RANKS};
use copyrpc_host::vworld::{CostModel, NicProfile, WorldSpec};

fn world(ranks: u32, jitter: f64) -> WorldSpec {
    WorldSpec {
        ranks,
        cost: CostModel {
            jitter,
            ..CostModel::default()
        },
        nic: NicProfile::default(),
        faults: Vec::new(),
        sample_ns: 1_000,
    }
}

fn echo(ranks: u32, seed: u64, jitter: f64) -> VirtualEcho {
    let mut cfg = EchoConfig {
        calls_per_peer: 300,
        seed,
        ..EchoConfig::default()
    };
    cfg.auto_ring();
    run_virtual(&cfg, &world(ranks, jitter)).expect("the virtual echo completes")
}

#[test]
fn four_virtual_ranks_answer_every_call_in_virtual_time() {
    let v = echo(4, 0, 0.0);
    assert_eq!(v.ranks.len(), 4);
    for r in &v.ranks {
        assert_eq!((r.responses, r.served), (900, 900), "{r:?}");
        assert_eq!((r.total_responses, r.total_served), (3600, 3600));
        assert!(r.elapsed.as_nanos() as u64 <= v.end_ns);
    }
    // 3 600 round trips of at least one one-way time each way, a window of 16 per peer.
    let one_way = NicProfile::default().one_way_ns();
    assert!(v.end_ns > 300 / 16 * 2 * one_way, "{}", v.end_ns);
    assert!(v.calls_per_s() > 0.0);
}

#[test]
fn the_same_seed_gives_the_same_run_and_another_seed_another() {
    let a = echo(3, 7, 0.2);
    assert_eq!(a, echo(3, 7, 0.2));
    let b = echo(3, 8, 0.2);
    assert_ne!((a.end_ns, a.ranks[0].bytes), (b.end_ns, b.ranks[0].bytes));
}

#[test]
fn a_world_too_small_or_too_large_for_one_context_is_refused() {
    let cfg = EchoConfig::default();
    for n in [0, 1, MAX_VIRTUAL_RANKS + 1] {
        let e = run_virtual(&cfg, &world(n, 0.0)).unwrap_err().to_string();
        assert!(e.contains("virtual echo"), "{n}: {e}");
    }
}
