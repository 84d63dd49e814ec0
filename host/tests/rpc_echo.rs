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
            // Default-sized stacks: the node builds its context in place on the heap.
            std::thread::Builder::new()
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

/// `max_payload` above 4 096 B (rings sized for it): the bytes moved grow with it.
/// The echo's size table stopped at 4 096, so 8 000, 12 000, 16 000 and 16 384 each
/// moved the same bytes.
#[test]
fn item7_a_max_payload_above_4096_moves_more_bytes_the_larger_it_is() {
    let bytes = |max_payload| {
        let mut cfg = EchoConfig {
            calls_per_peer: 200,
            max_payload,
            window: 4,
            ..EchoConfig::default()
        };
        cfg.auto_ring();
        let reports = run_threads(2, &cfg);
        check(&reports, &cfg);
        reports[0].bytes
    };
    let (b4096, b8000, b16000) = (bytes(4096), bytes(8000), bytes(16_000));
    assert!(
        b4096 < b8000 && b8000 < b16000,
        "bytes moved: {b4096} at 4096, {b8000} at 8000, {b16000} at 16000"
    );
}

#[test]
fn one_rank_has_nobody_to_call_and_still_comes_up() {
    let cfg = EchoConfig::default();
    let reps = run_threads(1, &cfg);
    assert_eq!(reps[0].responses, 0);
    assert_eq!(reps[0].total_served, 0);
}

/// A send queue too small for copyrpc's flush to always make progress is refused when
/// the node comes up, with copyrpc's reason and the peer it was for, rather than
/// found later as an endpoint that never sends.
#[test]
fn a_send_queue_below_copyrpcs_minimum_is_refused_at_start() {
    let mut cfg = EchoConfig::default();
    // Two WQEs of four blocks: 8 blocks, below the 16 an endpoint needs.
    cfg.rpc.sq_wrs = 2;
    assert!(cfg.rpc.sq_wqebbs() < cfg.rpc.endpoint.min_sq_bbs());
    let handles: Vec<_> = ThreadExchange::group(2)
        .into_iter()
        .map(|x| {
            let cfg = cfg.clone();
            std::thread::spawn(move || {
                let f = SimFabric::open(&SimOptions {
                    region_bytes: 64 << 20,
                    ..SimOptions::default()
                })
                .unwrap();
                echo::run(&x, Fabric::Sim(Box::new(f)), &cfg)
            })
        })
        .collect();
    for h in handles {
        let e = h.join().expect("rank thread panicked").unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("create_endpoint") && msg.contains("send queue below 16 blocks"),
            "{msg}"
        );
    }
}

/// Two ranks with different ring sizes: the one whose connect refuses the peer's ring
/// says why, and the other learns at once that it failed, instead of waiting in the
/// set-up barrier for the collective's timeout.
#[test]
fn ranks_with_different_ring_sizes_all_fail_at_once_naming_the_cause() {
    let handles: Vec<_> = ThreadExchange::group(2)
        .into_iter()
        .enumerate()
        .map(|(r, x)| {
            let cfg = EchoConfig {
                rpc: copyrpc_host::rpc::RpcConfig::for_ring(if r == 0 {
                    16 << 10
                } else {
                    64 << 10
                }),
                ..EchoConfig::default()
            };
            std::thread::spawn(move || {
                let f = SimFabric::open(&SimOptions {
                    region_bytes: 64 << 20,
                    ..SimOptions::default()
                })
                .unwrap();
                let t0 = std::time::Instant::now();
                (echo::run(&x, Fabric::Sim(Box::new(f)), &cfg), t0.elapsed())
            })
        })
        .collect();
    let mut causes = Vec::new();
    for h in handles {
        let (r, took) = h.join().expect("rank thread panicked");
        let msg = format!(
            "{:#}",
            r.expect_err("a rank connected to a peer of another ring size")
        );
        assert!(took < std::time::Duration::from_secs(30), "{took:?}: {msg}");
        causes.push(msg);
    }
    assert!(
        causes
            .iter()
            .any(|m| m.contains("send ring smaller than the peer's recv ring")),
        "{causes:?}"
    );
    assert!(
        causes
            .iter()
            .any(|m| m.contains("rank 0 could not connect")),
        "{causes:?}"
    );
}

/// A rank may split its peers over several contexts (one per polling thread, as benchkv's
/// meta backend does) on one shared fabric: the nodes fill one record table, and each
/// connects only its own peers. Every rank calls every peer once through whichever node
/// holds it and answers through the node the request arrived on.
#[test]
fn peers_split_over_two_contexts_of_one_fabric() {
    use std::sync::Arc;

    use copyrpc_host::rpc::{PeerRecord, RpcConfig, RpcNode};
    use zerocopy::FromZeros;

    type Node = RpcNode<u64, 4, 64, 512>;
    fn assert_send<T: Send>() {}
    assert_send::<Node>();

    let ranks = 4;
    let handles: Vec<_> = ThreadExchange::group(ranks)
        .into_iter()
        .map(|x| {
            std::thread::Builder::new()
                .spawn(move || {
                    let me = x.rank();
                    let fabric = Arc::new(Fabric::Sim(Box::new(
                        SimFabric::open(&SimOptions {
                            region_bytes: 32 << 20,
                            ..SimOptions::default()
                        })
                        .unwrap(),
                    )));
                    let cfg = RpcConfig::default();
                    let split: [Vec<usize>; 2] = [0, 1]
                        .map(|parity| (0..ranks).filter(|&p| p != me && p % 2 == parity).collect());
                    let mut nodes: Vec<Node> = split
                        .iter()
                        .map(|peers| {
                            Node::for_peers(Arc::clone(&fabric), me, ranks, peers, &cfg).unwrap()
                        })
                        .collect();
                    let mut table = vec![PeerRecord::new_zeroed(); ranks];
                    for n in &nodes {
                        n.fill_records(&mut table).unwrap();
                    }
                    let got = x.all_to_all(&table).unwrap();
                    for n in &mut nodes {
                        n.connect(&got).unwrap();
                    }
                    x.barrier().unwrap();
                    for (n, peers) in nodes.iter_mut().zip(&split) {
                        for &p in peers {
                            let ep = n.endpoint(p).unwrap();
                            let msg = (me * 100 + p) as u64;
                            n.ctx().call(ep, &msg.to_le_bytes(), msg).unwrap();
                        }
                    }
                    let (mut answers, mut served) = (0, 0);
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                    while answers < ranks - 1 || served < ranks - 1 {
                        assert!(std::time::Instant::now() < deadline, "rank {me} stuck");
                        for n in &mut nodes {
                            n.ctx().poll(|ud, r| {
                                let r = r.unwrap();
                                // The peer answers with its rank appended.
                                assert_eq!(&r[..8], &ud.to_le_bytes());
                                assert_eq!(r[8] as u64, ud % 100);
                                answers += 1;
                            });
                            while let Some(h) = n.ctx().recv() {
                                let from = n.peer_of(h.endpoint()).unwrap();
                                let req = h.data(n.ctx()).to_vec();
                                assert_eq!(
                                    u64::from_le_bytes(req[..8].try_into().unwrap()),
                                    (from * 100 + me) as u64
                                );
                                let mut resp = req;
                                resp.push(me as u8);
                                h.reply(n.ctx(), &resp).unwrap();
                                served += 1;
                            }
                        }
                        std::thread::yield_now();
                    }
                    // Flush the last replies before anyone tears down.
                    for n in &mut nodes {
                        n.flush_all(deadline, |_, _| panic!("every call was answered"))
                            .unwrap();
                    }
                    x.barrier().unwrap();
                    drop(nodes);
                    (answers, served)
                })
                .unwrap()
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), (ranks - 1, ranks - 1));
    }
}
