//! The copyrpc echo with ranks as threads of one process, each rank with its own sim
//! fabric (its own `/dev/shm` region and engine thread), exchanging endpoint records
//! through [`ThreadExchange`]. The same code as `mpirun -np N copyrpc-echo`
//! (tests/mpi_echo.rs).

use copyrpc_host::exchange::ThreadExchange;
use copyrpc_host::fabric::sim::{SimFabric, SimOptions};
use copyrpc_host::fabric::Fabric;
use copyrpc_host::rpc::echo::{self, EchoConfig, EchoReport};

fn run_threads(ranks: usize, cfg: &EchoConfig) -> Vec<EchoReport> {
    let handles: Vec<_> = ThreadExchange::group(ranks)
        .into_iter()
        .map(|x| {
            let cfg = cfg.clone();
            // The context's inline tables are built on the stack (see `RpcNode`).
            std::thread::Builder::new()
                .stack_size(16 << 20)
                .spawn(move || {
                    let f = SimFabric::open(&SimOptions {
                        region_bytes: 64 << 20,
                        trace_events: 1024,
                        ..SimOptions::default()
                    })
                    .unwrap();
                    echo::run(&x, Fabric::Sim(Box::new(f)), &cfg)
                })
                .unwrap()
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("rank thread panicked").unwrap())
        .collect()
}

fn check(reports: &[EchoReport], cfg: &EchoConfig) {
    let n = reports.len() as u64;
    let per_rank = u64::from(cfg.calls_per_peer) * (n - 1);
    for (r, rep) in reports.iter().enumerate() {
        assert_eq!(rep.rank, r);
        assert_eq!(rep.ranks, reports.len());
        assert_eq!(rep.responses, per_rank, "{rep:?}");
        assert_eq!(rep.served, per_rank, "{rep:?}");
        assert_eq!(rep.total_responses, per_rank * n, "{rep:?}");
        assert_eq!(rep.total_served, per_rank * n, "{rep:?}");
        assert!(rep.bytes > 0);
    }
}

#[test]
fn two_thread_ranks_echo_over_the_sim_fabric() {
    let cfg = EchoConfig {
        calls_per_peer: 3000,
        ..EchoConfig::default()
    };
    check(&run_threads(2, &cfg), &cfg);
}

#[test]
fn three_thread_ranks_echo_with_large_payloads() {
    let cfg = EchoConfig {
        calls_per_peer: 1000,
        max_payload: 4000,
        window: 32,
        ..EchoConfig::default()
    };
    check(&run_threads(3, &cfg), &cfg);
}

#[test]
fn one_rank_has_nobody_to_call_and_still_comes_up() {
    let cfg = EchoConfig::default();
    let reps = run_threads(1, &cfg);
    assert_eq!(reps[0].responses, 0);
    assert_eq!(reps[0].total_served, 0);
}
