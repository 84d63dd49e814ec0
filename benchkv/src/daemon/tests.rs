//! Daemons stepped turn by turn on one thread, with a client driven by hand between
//! turns: every path and every parking case is reached deterministically, without
//! timing.

use std::sync::atomic::{AtomicU32, Ordering};

use copyrpc_core::flux::{Mesh, NodeCtl, PairCtl, Slab, SlabEntry};
use copyrpc_core::ipc::spsc::Slot;
use copyrpc_host::shm::deleg::{DelegClient, DelegServer, ServerOptions};
use copyrpc_host::shm::ipc::{IpcClient, IpcServer};

use super::*;
use crate::remote::{AnyRemote, Loopback};
use crate::store::{value_for, value_matches};

const K: usize = 2;
const CAP: usize = 2;

fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "/benchkv_test_{}_{tag}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

struct MeshMem {
    pairs: Vec<PairCtl>,
    req: Vec<Slot<copyrpc_core::flux::Msg<DelegatePayload>>>,
    resp: Vec<Slot<copyrpc_core::flux::Msg<DelegatePayload>>>,
    nodes: Vec<NodeCtl>,
}

impl MeshMem {
    fn new() -> Self {
        Self {
            pairs: (0..K * K).map(|_| PairCtl::new()).collect(),
            req: (0..K * K * CAP).map(|_| Slot::new()).collect(),
            resp: (0..K * K * CAP).map(|_| Slot::new()).collect(),
            nodes: (0..K).map(|_| NodeCtl::new()).collect(),
        }
    }
    fn mesh(&self) -> Mesh<'_, DelegatePayload> {
        Mesh::new(K, CAP, &self.pairs, &self.req, &self.resp, &self.nodes).unwrap()
    }
}

/// Two daemons of rank 0 of two ranks (rank 1 is the loopback), one client, QD 4.
/// Requests alternate between both ranks and both shards, GETs and PUTs; the client
/// checks every answer. Returns the daemons' metrics.
fn drive(backend: Backend, requests: u64) -> [DaemonMetrics; K] {
    let qd = 4u32;
    let ipc_names: Vec<String> = (0..K).map(|_| unique("ipc")).collect();
    let ipc: Vec<_> = ipc_names
        .iter()
        .map(|n| {
            IpcServer::<Request, Response>::create(
                n,
                copyrpc_core::ipc::Config {
                    max_clients: 1,
                    depth: qd,
                },
                false,
            )
            .unwrap()
        })
        .collect();
    let deleg_name = unique("deleg");
    let deleg = (backend == Backend::Delegation).then(|| {
        DelegServer::<Request, Response>::create(
            &deleg_name,
            copyrpc_core::deleg::Config {
                max_clients: 1,
                // As deep as the client's response slots, so its call never waits for
                // room (this test has one thread).
                ring_depth: qd,
                resp_depth: qd,
            },
            ServerOptions::default(),
        )
        .unwrap()
    });
    let mem = MeshMem::new();
    let mesh = mem.mesh();
    let mut slabs: Vec<Vec<SlabEntry<u32>>> = (0..K)
        .map(|_| (0..K * CAP).map(|_| SlabEntry::new()).collect())
        .collect();
    let mut deleg = deleg;
    let mut daemons: Vec<Daemon<'_, '_, AnyRemote>> = ipc
        .into_iter()
        .zip(slabs.iter_mut())
        .enumerate()
        .map(|(d, (ipc, slab))| {
            let holds = crate::remote::endpoint_daemon(backend, 1, K) == d;
            let parts = Parts {
                id: d,
                daemons: K,
                my_rank: 0,
                backend,
                budget: usize::MAX,
                metrics: true,
                fault: None,
                store: Store::preloaded(64, K, d),
                ipc,
                deleg: if d == 0 { deleg.take() } else { None },
                remote: holds.then(|| AnyRemote::Loopback(Loopback::new(CAP))),
            };
            Daemon::new(parts, mesh.node(d, Slab::new(slab)).unwrap())
        })
        .collect();

    let mut ipc_c: Vec<IpcClient<Request, Response, (u64, bool)>> = ipc_names
        .iter()
        .map(|n| IpcClient::connect(n).unwrap())
        .collect();
    let mut deleg_c = (backend == Backend::Delegation)
        .then(|| DelegClient::<Request, Response>::connect(&deleg_name).unwrap());
    let mut slot_req = vec![(0u64, false); qd as usize];
    let (mut issued, mut answered, mut out) = (0u64, 0u64, 0u32);
    let check = |(key, is_read): (u64, bool), r: &Response| {
        if is_read {
            assert_eq!(r.status(), Some(Status::GetOk), "GET {key}");
            assert!(value_matches(key, r.value), "GET {key}: {:#x}", r.value);
        } else {
            assert_eq!(r.status(), Some(Status::PutOk), "PUT {key}");
        }
    };
    for _turn in 0..100_000 {
        while out < qd && issued < requests {
            let (rank, key, is_read) = ((issued / 2 % 2) as u32, issued % 64, issued % 3 != 0);
            let req = if is_read {
                Request::get(rank, key)
            } else {
                Request::put(rank, key, value_for(key, issued as u32))
            };
            match (&mut deleg_c, rank) {
                (Some(c), 1) => {
                    let slot = c.call(&req).unwrap();
                    slot_req[slot as usize] = (key, is_read);
                }
                _ => ipc_c[owner_of(key, K)].call(&req, (key, is_read)).unwrap(),
            }
            issued += 1;
            out += 1;
        }
        for d in &mut daemons {
            d.turn();
        }
        let mut got = 0;
        for c in &mut ipc_c {
            got += c.poll(|u, r| check(u, r));
        }
        if let Some(c) = &mut deleg_c {
            got += c.poll(|slot, r| check(slot_req[slot as usize], r));
        }
        answered += got as u64;
        out -= got as u32;
        if answered == requests {
            break;
        }
    }
    assert_eq!(answered, requests, "{backend:?}: answers missing");
    let metrics = daemons
        .iter()
        .map(|d| {
            assert_eq!(d.pending.len(), 0, "daemon {} still holds requests", d.p.id);
            d.m
        })
        .collect::<Vec<_>>();
    [metrics[0], metrics[1]]
}

#[test]
fn delegation_answers_everything_through_full_queues() {
    let m = drive(Backend::Delegation, 2000);
    assert!(m[0].remote_calls > 0, "{m:?}");
    assert!(
        m[0].remote_busy > 0,
        "the loopback of 2 never refused: {m:?}"
    );
    assert!(
        m[0].forwarded > 0,
        "inbound requests for shard 1 go over Flux"
    );
    assert_eq!(m[1].remote_calls, 0, "only daemon#0 holds endpoints");
}

#[test]
fn meta_answers_everything_through_full_queues() {
    let m = drive(Backend::Meta, 2000);
    assert!(m[1].remote_calls > 0, "rank 1 % 2 is daemon 1's: {m:?}");
    assert_eq!(m[0].remote_calls, 0);
    assert!(
        m[0].forwarded > 0,
        "daemon 0 passes rank-1 requests to daemon 1"
    );
    assert!(
        m[0].flux_full + m[1].flux_full + m[1].remote_busy > 0,
        "queues of 2 never refused: {m:?}"
    );
}
