//! Daemons stepped turn by turn on one thread, with a client driven by hand between
//! turns: every path and every parking case is reached deterministically, without
//! timing.

use std::sync::atomic::{AtomicU32, Ordering};

use copyrpc_core::flux::{Mesh, NodeCtl, PairCtl};
use copyrpc_core::shm::spsc::Slot;
use copyrpc_core::shm::{Msg, Slab, SlabEntry};
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
    req: Vec<Slot<Msg<DelegatePayload>>>,
    resp: Vec<Slot<Msg<DelegatePayload>>>,
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
    drive_ranks(backend, 2, 4, requests)
}

/// Two daemons of rank 0 of `ranks` ranks (the others are loopbacks), one client of
/// depth `qd`; requests cycle through every rank and both shards. Fails if an answer is
/// missing after 100 000 turns (a deadlock shows as that, not as a hang).
fn drive_ranks(backend: Backend, ranks: u64, qd: u32, requests: u64) -> [DaemonMetrics; K] {
    drive_with_budget(backend, ranks, qd, requests, 0)
}

/// [`drive_ranks`] with a poll budget (docs/spec/poll-budget.md#poll-budget) on every
/// daemon. With a budget, also checks on idle daemon#0 that the extra polls are turns but
/// not loops.
fn drive_with_budget(
    backend: Backend,
    ranks: u64,
    qd: u32,
    requests: u64,
    poll_budget: u32,
) -> [DaemonMetrics; K] {
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
    let (holder_mem, owner_mem) = (MeshMem::new(), MeshMem::new());
    let (holder_mesh, owner_mesh) = (holder_mem.mesh(), owner_mem.mesh());
    let mut slabs: Vec<[Vec<SlabEntry<u32>>; 2]> = (0..K)
        .map(|_| std::array::from_fn(|_| (0..K * CAP).map(|_| SlabEntry::new()).collect()))
        .collect();
    let mut deleg = deleg;
    let mut daemons: Vec<Daemon<'_, '_, AnyRemote>> = ipc
        .into_iter()
        .zip(slabs.iter_mut())
        .enumerate()
        .map(|(d, (ipc, [holder_slab, owner_slab]))| {
            let holds =
                (1..ranks as u32).any(|r| crate::route::endpoint_daemon(backend, r, K) == d);
            let parts = Parts {
                id: d,
                daemons: K,
                my_rank: 0,
                backend,
                take_per_turn: usize::MAX,
                poll_budget,
                adaptive: None,
                metrics: true,
                sample_every: SAMPLE_EVERY,
                spin_when_idle: false,
                fault: None,
                store: Store::preloaded(64, K, d),
                ipc,
                deleg: if d == 0 { deleg.take() } else { None },
                remote: holds.then(|| AnyRemote::Loopback(Loopback::new(CAP))),
            };
            Daemon::new(
                parts,
                holder_mesh.node(d, Slab::new(holder_slab)).unwrap(),
                owner_mesh.node(d, Slab::new(owner_slab)).unwrap(),
            )
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
            let rank = (issued / 2 % ranks) as u32;
            let (key, is_read) = (issued % 64, issued % 3 != 0);
            let req = if is_read {
                Request::get(rank, key)
            } else {
                Request::put(rank, key, value_for(key, issued as u32))
            };
            match (&mut deleg_c, rank) {
                (Some(c), r) if r != 0 => {
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
    if poll_budget > 0 {
        // Finish the step A daemon#0 may be in, then: `poll_budget` empty polls that
        // are not loops, and the next call completes exactly one loop.
        let d0 = &mut daemons[0];
        let start = d0.m.loops;
        for _ in 0..=poll_budget {
            if d0.m.loops != start {
                break;
            }
            d0.turn();
        }
        let before = d0.m.loops;
        for i in 0..poll_budget {
            assert_eq!(d0.turn(), 0, "extra poll {i} found work on an idle daemon");
            assert_eq!(d0.m.loops, before, "extra poll {i} counted as a loop");
        }
        d0.turn();
        assert_eq!(
            d0.m.loops,
            before + 1,
            "the poll after the budget runs the loop"
        );
        assert_eq!(d0.m.idle_loops, d0.m.idle_loops.min(d0.m.loops));
    }
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
fn seed_001_poll_budget_polls_again_before_the_loop_and_still_answers_everything() {
    for backend in [Backend::Delegation, Backend::Meta] {
        let m = drive_with_budget(backend, 3, 8, 1000, 3);
        let holder = if backend == Backend::Delegation { 0 } else { 1 };
        assert!(m[holder].remote_calls > 0, "{backend:?}: {m:?}");
    }
}

/// Polls until step A ends; the finds of each poll in turn. Returns the polls made and
/// what step A reported.
fn step_a_run(budget: u32, finds: &[usize]) -> (usize, usize) {
    let mut a = StepA::default();
    for (i, &n) in finds.iter().enumerate() {
        if let Some(found) = a.after_poll(n, budget) {
            assert_eq!(a, StepA::default(), "step A starts again after it ends");
            return (i + 1, found);
        }
    }
    panic!("step A still polling after {} polls", finds.len());
}

#[test]
fn step_a_without_a_budget_is_one_poll() {
    assert_eq!(step_a_run(0, &[0]), (1, 0));
    assert_eq!(step_a_run(0, &[7]), (1, 7));
}

#[test]
fn step_a_drains_then_makes_budget_empty_polls() {
    // The draining poll does not use the budget, found something or not.
    assert_eq!(step_a_run(3, &[0; 10]), (4, 0));
    assert_eq!(step_a_run(3, &[5, 0, 0, 0, 0]), (4, 5));
}

#[test]
fn step_a_polls_that_find_completions_do_not_use_the_budget() {
    // The extra polls let completions accumulate; only empty ones count.
    assert_eq!(step_a_run(2, &[5, 3, 0, 1, 0, 9]), (5, 9));
}

#[test]
fn step_a_ends_at_the_cap_when_every_poll_finds_something() {
    let cap = EXTRA_POLL_CAP as usize * 2;
    assert_eq!(step_a_run(2, &[1; 64]), (cap + 1, cap + 1));
    // One empty poll short of the budget at the cap still ends there.
    let mut finds = vec![1; 64];
    finds[3] = 0;
    assert_eq!(step_a_run(2, &finds), (cap + 1, cap));
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

/// Issue 23, item 1: meta with 4 ranks (3 loopbacks), queues of 2 and a client deep
/// enough to fill them. With one Flux lane both daemons' queues to each other filled
/// with holder-bound calls waiting for a transport whose answers needed an owner-bound
/// call stuck behind them, and no answer came back (deadlock within a few hundred turns).
#[test]
fn item1_meta_back_pressure_with_four_ranks_does_not_deadlock() {
    let m = drive_ranks(Backend::Meta, 4, 32, 5000);
    assert!(
        m[0].flux_full + m[1].flux_full > 0,
        "queues never filled: {m:?}"
    );
    assert!(
        m[0].remote_busy + m[1].remote_busy > 0,
        "transport never refused: {m:?}"
    );
}

#[test]
fn item1_delegation_back_pressure_with_four_ranks_drains() {
    let m = drive_ranks(Backend::Delegation, 4, 32, 5000);
    assert!(m[0].remote_busy > 0, "transport never refused: {m:?}");
}
