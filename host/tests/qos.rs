//! `--tclass` / `--sl` end to end on the sim fabric: what a node is configured with
//! reaches every QP it connects, and ranks that disagree are refused, each naming the
//! flag and both values, before any QP is brought up.

use copyrpc_host::exchange::ThreadExchange;
use copyrpc_host::fabric::sim::{SimFabric, SimOptions};
use copyrpc_host::fabric::{Fabric, Qos};
use copyrpc_host::rpc::{RpcConfig, RpcNode};

type Node = RpcNode<u64, 4, 64, 512>;

/// `ranks` thread ranks, rank `r` with `qos[r]`, each establishing a node; the nodes or
/// their errors, by rank.
fn establish(qos: &[Qos]) -> Vec<Result<Node, String>> {
    let handles: Vec<_> = ThreadExchange::group(qos.len())
        .into_iter()
        .zip(qos.iter().copied())
        .map(|(x, qos)| {
            std::thread::spawn(move || {
                let f = SimFabric::open(&SimOptions {
                    region_bytes: 64 << 20,
                    ..SimOptions::default()
                })
                .unwrap();
                let cfg = RpcConfig {
                    qos,
                    ..RpcConfig::for_ring(16 << 10)
                };
                Node::establish(Fabric::Sim(Box::new(f)), &x, &cfg).map_err(|e| e.to_string())
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("rank thread panicked"))
        .collect()
}

#[test]
fn tclass_and_sl_reach_every_qp_of_the_node() {
    let qos = Qos::new(106, 3).unwrap();
    let nodes = establish(&[qos; 3]);
    for (r, node) in nodes.into_iter().enumerate() {
        let mut node = node.unwrap_or_else(|e| panic!("rank {r}: {e}"));
        for peer in (0..3).filter(|&p| p != r) {
            let ep = node.endpoint(peer).expect("an endpoint to every peer");
            let qpn = node.ctx().qpn(ep).unwrap();
            let Fabric::Sim(f) = node.fabric() else {
                unreachable!("a sim node")
            };
            assert_eq!(f.qos_of(qpn), Some(qos), "rank {r}'s QP to rank {peer}");
        }
    }
}

#[test]
fn ranks_with_another_tclass_or_sl_are_refused_naming_the_flag() {
    for (other, flag, mine, theirs) in [
        (Qos::new(0, 3).unwrap(), "--tclass", "106", "0"),
        (Qos::new(106, 5).unwrap(), "--sl", "3", "5"),
    ] {
        let qos = Qos::new(106, 3).unwrap();
        let out = establish(&[qos, other]);
        for (r, res) in out.iter().enumerate() {
            let e = res
                .as_ref()
                .err()
                .unwrap_or_else(|| panic!("rank {r} came up"));
            assert!(e.contains(flag), "rank {r}: {e}");
            assert!(
                e.contains(&format!("{flag} {mine}")) && e.contains(&format!("{flag} {theirs}")),
                "rank {r}: {e}"
            );
        }
    }
}

#[test]
fn a_service_level_past_15_is_refused_naming_the_flag() {
    let e = Qos::new(0, 16).unwrap_err().to_string();
    assert!(e.contains("--sl 16"), "{e}");
    assert_eq!(
        Qos::new(255, 15).unwrap(),
        Qos {
            traffic_class: 255,
            sl: 15
        }
    );
}
