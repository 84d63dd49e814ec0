//! Loom model of Flux: two nodes as threads, rings of 2, each calling the other while
//! answering the other's calls out of order.
//!
//! `LOOM_MAX_PREEMPTIONS=2 RUSTFLAGS="--cfg loom" cargo test -p copyrpc-core --release --test loom_flux`
#![cfg(loom)]

mod loom_common;

use copyrpc_core::flux::{FluxRequest, Mesh, NodeCtl, PairCtl};
use copyrpc_core::shm::spsc::Slot;
use copyrpc_core::shm::{Msg, Slab, SlabEntry};
use loom::sync::Arc;
use loom::thread;

const N: usize = 2;
const CAP: usize = 2;

struct Mem {
    pairs: Vec<PairCtl>,
    req: Vec<Slot<Msg<u64>>>,
    resp: Vec<Slot<Msg<u64>>>,
    nodes: Vec<NodeCtl>,
}

fn run_node(mem: &Mem, id: usize) {
    let mesh = Mesh::new(N, CAP, &mem.pairs, &mem.req, &mem.resp, &mem.nodes).unwrap();
    let mut slab_mem: Vec<SlabEntry<u64>> = (0..2 * CAP).map(|_| SlabEntry::new()).collect();
    let mut node = mesh.node(id, Slab::new(&mut slab_mem)).unwrap();
    let peer = 1 - id;
    let base = 10 * id as u64;
    // Three calls through a ring of 2 (the third reuses a slot); user datum = payload + 100.
    const CALLS: u64 = 3;
    let mut held: Vec<FluxRequest<u64>> = Vec::new();
    let (mut sent, mut answered, mut received) = (0u64, 0u64, 0u64);
    while answered < CALLS || received < CALLS || !held.is_empty() {
        if sent < CALLS && node.call(peer, base + sent, base + sent + 100).is_ok() {
            sent += 1;
        }
        while let Some(h) = node.try_recv() {
            held.push(h);
            received += 1;
        }
        // Defer until two requests are held (or the last one came), then answer the
        // newer one first.
        if held.len() == 2 || (received == CALLS && !held.is_empty()) {
            while let Some(h) = held.pop() {
                let p = h.payload;
                node.reply(h, p * 2).unwrap();
            }
        }
        answered +=
            node.poll(|u, r| assert_eq!(r, (u - 100) * 2, "datum {u} got reply {r}")) as u64;
        thread::yield_now();
    }
    assert_eq!(node.in_flight(), 0);
}

#[test]
fn two_nodes_call_each_other_out_of_order() {
    loom_common::model(|| {
        let slots = Mesh::<u64>::slots_needed(N, CAP);
        let mem = Arc::new(Mem {
            pairs: (0..N * N).map(|_| PairCtl::new()).collect(),
            req: (0..slots).map(|_| Slot::new()).collect(),
            resp: (0..slots).map(|_| Slot::new()).collect(),
            nodes: (0..N).map(|_| NodeCtl::new()).collect(),
        });
        let m2 = mem.clone();
        let t = thread::spawn(move || run_node(&m2, 1));
        run_node(&mem, 0);
        t.join().unwrap();
    });
}
