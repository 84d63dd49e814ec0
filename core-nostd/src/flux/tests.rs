use super::*;
use crate::shm::{SlabEntry, Stall};
use std::vec::Vec;

struct Mem<T> {
    pairs: Vec<PairCtl>,
    req: Vec<Slot<Msg<T>>>,
    resp: Vec<Slot<Msg<T>>>,
    nodes: Vec<NodeCtl>,
}

impl<T: Copy + Send> Mem<T> {
    fn new(n: usize, cap: usize) -> Self {
        let slots = Mesh::<T>::slots_needed(n, cap);
        Self {
            pairs: (0..n * n).map(|_| PairCtl::new()).collect(),
            req: (0..slots).map(|_| Slot::new()).collect(),
            resp: (0..slots).map(|_| Slot::new()).collect(),
            nodes: (0..n).map(|_| NodeCtl::new()).collect(),
        }
    }
    fn mesh(&self, n: usize, cap: usize) -> Mesh<'_, T> {
        Mesh::new(n, cap, &self.pairs, &self.req, &self.resp, &self.nodes).unwrap()
    }
}

fn slab_mem<U>(n: usize) -> Vec<SlabEntry<U>> {
    (0..n).map(|_| SlabEntry::new()).collect()
}

#[test]
fn deferred_out_of_order_replies_keep_every_user_datum() {
    let mem = Mem::<u64>::new(2, 8);
    let mesh = mem.mesh(2, 8);
    let (mut sa, mut sb) = (slab_mem::<u64>(8), slab_mem::<()>(1));
    let mut a = mesh.node(0, Slab::new(&mut sa)).unwrap();
    let mut b = mesh.node(1, Slab::new(&mut sb)).unwrap();
    // Eight calls, user datum = 1000 + payload.
    for p in 0..8u64 {
        a.call(1, p, 1000 + p).unwrap();
    }
    assert_eq!(a.call(1, 99, 0), Err(FluxError::Full));
    let mut handles: Vec<_> = core::iter::from_fn(|| b.try_recv()).collect();
    assert_eq!(handles.len(), 8);
    let mut got = Vec::new();
    // Reply in a scrambled order, polling between replies and making new calls into the
    // freed entries meanwhile: every datum must come back with its own call's reply.
    let order = [5usize, 0, 7, 2, 6, 1, 4, 3];
    let mut next = 100u64;
    for (k, &i) in order.iter().enumerate() {
        let h = core::mem::replace(
            &mut handles[i],
            FluxRequest {
                node: b.instance,
                from: 0,
                token: u64::MAX,
                payload: 0,
            },
        );
        let p = h.payload;
        b.reply(h, p * 10).unwrap();
        a.poll(|u, r| got.push((u, r)));
        if k % 2 == 0 {
            // Reuse the freed entry while older calls are still pending.
            a.call(1, next, 1000 + next).unwrap();
            let h = b.try_recv().unwrap();
            let p = h.payload;
            handles.push(h);
            next += 1;
            let _ = p;
        }
    }
    // Answer the late calls last, newest first.
    while let Some(h) = handles.pop() {
        if h.token == u64::MAX {
            continue;
        }
        let p = h.payload;
        b.reply(h, p * 10).unwrap();
    }
    a.poll(|u, r| got.push((u, r)));
    assert_eq!(got.len(), 8 + 4);
    for (u, r) in &got {
        assert_eq!(
            *r,
            (u - 1000) * 10,
            "user datum {u} came back with reply {r}"
        );
    }
    let mut us: Vec<_> = got.iter().map(|g| g.0).collect();
    us.sort_unstable();
    us.dedup();
    assert_eq!(us.len(), 12, "no datum lost or duplicated");
    assert_eq!(a.in_flight(), 0);
}

#[test]
fn taking_and_addressing_errors() {
    let mem = Mem::<u8>::new(2, 2);
    let mesh = mem.mesh(2, 2);
    let mut s0 = slab_mem::<()>(4);
    let mut s1 = slab_mem::<()>(1);
    let mut s2 = slab_mem::<()>(1);
    let mut a = mesh.node(0, Slab::new(&mut s0)).unwrap();
    assert_eq!(
        mesh.node(0, Slab::new(&mut s1)).unwrap_err(),
        FluxError::Taken
    );
    assert_eq!(
        mesh.node(5, Slab::new(&mut s1)).unwrap_err(),
        FluxError::BadNode
    );
    let mut b = mesh.node(1, Slab::new(&mut s2)).unwrap();
    assert_eq!(a.call(2, 0, ()), Err(FluxError::BadNode));
    b.call(0, 1, ()).unwrap();
    assert_eq!(b.call(0, 2, ()), Err(FluxError::SlabFull));
    let h = a.try_recv().unwrap();
    assert_eq!(h.from(), 1);
    let foreign = FluxRequest {
        node: a.instance,
        from: 1,
        token: 0,
        payload: 0,
    };
    let back = b.reply(foreign, 0).unwrap_err();
    assert_eq!(back.error, FluxError::WrongNode);
    assert_eq!(back.to_string(), FluxError::WrongNode.to_string());
    assert_eq!(
        std::format!("{back:?}"),
        "FluxReplyError { error: WrongNode, from: 1, .. }"
    );
    a.reply(h, 7).unwrap();
    assert_eq!(b.poll(|(), r| assert_eq!(r, 7)), 1);
    assert_eq!(
        Mesh::<u8>::new(2, 3, &mem.pairs, &mem.req, &mem.resp, &mem.nodes).unwrap_err(),
        FluxError::BadMemory
    );
}

/// Four threads call each other all-to-all with deferred replies; every user datum returns
/// with the reply to its own call.
#[test]
fn all_to_all_threads_conserve_calls() {
    const N: usize = 4;
    let calls: u64 = if cfg!(miri) { 6 } else { 20_000 };
    let mem = Mem::<(u64, u64)>::new(N, 4);
    let mesh = mem.mesh(N, 4);
    let mut slabs: Vec<_> = (0..N).map(|_| slab_mem::<(usize, u64)>(16)).collect();
    let done = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for (id, slab) in slabs.iter_mut().enumerate() {
            let done = &done;
            s.spawn(move || {
                let mut node = mesh.node(id, Slab::new(slab)).unwrap();
                let mut deferred: Vec<FluxRequest<(u64, u64)>> = Vec::new();
                let (mut sent, mut answered, mut served) = (0u64, 0u64, 0u64);
                let mut finished = false;
                let mut stall = Stall::new("a node's calls, replies and peers");
                loop {
                    if sent < calls {
                        let to = (id + 1 + (sent as usize % (N - 1))) % N;
                        if node.call(to, (id as u64, sent), (to, sent)).is_ok() {
                            sent += 1;
                        }
                    }
                    while let Some(h) = node.try_recv() {
                        deferred.push(h);
                    }
                    // Reply to the newest first: out of order on purpose.
                    while deferred.len() > 2 {
                        let h = deferred.pop().unwrap();
                        let (from, seq) = h.payload;
                        assert_eq!(from as usize, h.from());
                        node.reply(h, (seq, seq ^ 0xABCD)).unwrap();
                        served += 1;
                    }
                    if sent == calls && answered == calls && !finished {
                        finished = true;
                        done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    if finished && done.load(std::sync::atomic::Ordering::SeqCst) == N {
                        break;
                    }
                    if deferred.len() <= 2 && (answered < calls || !deferred.is_empty()) {
                        for h in deferred.drain(..) {
                            let (_, seq) = h.payload;
                            node.reply(h, (seq, seq ^ 0xABCD)).unwrap();
                            served += 1;
                        }
                    }
                    answered += node.poll(|(to, seq), (rseq, check)| {
                        assert_eq!(rseq, seq, "reply to another call (from {to})");
                        assert_eq!(check, seq ^ 0xABCD);
                    }) as u64;
                    let peers = done.load(std::sync::atomic::Ordering::SeqCst) as u64;
                    stall.turn(sent + answered + served + peers);
                }
                assert_eq!(node.in_flight(), 0);
            });
        }
    });
}

#[test]
fn try_recv_takes_turns_among_the_peers() {
    // Three callers, each with two requests queued for node 0: one from each peer
    // before any peer's second (round robin), not both of peer 1's first.
    let mem = Mem::<u64>::new(4, 4);
    let mesh = mem.mesh(4, 4);
    let mut slabs: Vec<Vec<SlabEntry<u64>>> = (0..4).map(|_| slab_mem::<u64>(4)).collect();
    let mut nodes: Vec<_> = slabs
        .iter_mut()
        .enumerate()
        .map(|(i, s)| mesh.node(i, Slab::new(s)).unwrap())
        .collect();
    for (from, node) in nodes.iter_mut().enumerate().skip(1) {
        for k in 0..2u64 {
            node.call(0, from as u64 * 10 + k, k).unwrap();
        }
    }
    let order: Vec<(usize, u64)> = core::iter::from_fn(|| nodes[0].try_recv())
        .map(|r| (r.from, r.payload))
        .collect();
    assert_eq!(
        order,
        [(1, 10), (2, 20), (3, 30), (1, 11), (2, 21), (3, 31)],
        "{order:?}"
    );
}

#[test]
fn counts_and_texts() {
    let mem = Mem::<u64>::new(3, 4);
    let mesh = mem.mesh(3, 4);
    assert_eq!((mesh.len(), mesh.is_empty()), (3, false));
    let (mut sa, mut sb) = (slab_mem::<u64>(4), slab_mem::<u64>(4));
    let mut a = mesh.node(0, Slab::new(&mut sa)).unwrap();
    let mut b = mesh.node(1, Slab::new(&mut sb)).unwrap();
    assert_eq!((a.id(), b.id(), a.in_flight()), (0, 1, 0));
    a.call(1, 5, 50).unwrap();
    a.call(2, 6, 60).unwrap();
    assert_eq!(a.in_flight(), 2);
    let r = b.try_recv().unwrap();
    b.reply(r, 7).unwrap();
    a.poll(|_, _| {});
    assert_eq!(a.in_flight(), 1);
    let errors = [
        FluxError::Full,
        FluxError::SlabFull,
        FluxError::BadNode,
        FluxError::Taken,
        FluxError::BadMemory,
        FluxError::WrongNode,
    ];
    crate::test_text::distinct_texts(&errors);
}

/// Node 1 of one mesh answering a request node 1 of another mesh received: refused
/// (`WrongNode`), so the other mesh's response ring, full with an answer node 0 has not
/// read, is not written. Before, the ids matched, the reply was pushed into a slot the
/// in-flight bound did not free, and node 0 lost its own answer.
#[test]
fn a_request_answered_by_the_same_node_id_of_another_mesh_is_refused() {
    let (mx, my) = (Mem::<u64>::new(2, 1), Mem::<u64>::new(2, 1));
    let (x, y) = (mx.mesh(2, 1), my.mesh(2, 1));
    let (mut s0, mut s1, mut s2, mut s3) = (
        slab_mem::<u64>(1),
        slab_mem::<u64>(1),
        slab_mem::<u64>(1),
        slab_mem::<u64>(1),
    );
    let mut x0 = x.node(0, Slab::new(&mut s0)).unwrap();
    let mut x1 = x.node(1, Slab::new(&mut s1)).unwrap();
    let mut y0 = y.node(0, Slab::new(&mut s2)).unwrap();
    let mut y1 = y.node(1, Slab::new(&mut s3)).unwrap();
    y0.call(1, 7, 70).unwrap();
    let hy = y1.try_recv().unwrap();
    y1.reply(hy, 700).unwrap();
    x0.call(1, 5, 50).unwrap();
    let hx = x1.try_recv().unwrap();
    let back = y1.reply(hx, 500).unwrap_err();
    assert_eq!(back.error, FluxError::WrongNode);
    let mut got = Vec::new();
    assert_eq!(y0.poll(|u, r| got.push((u, r))), 1);
    assert_eq!(got, [(70, 700)], "y's node 0 gets its own answer");
    // The refused request came back, and the node that received it answers it.
    assert_eq!((back.request.from(), back.request.payload), (0, 5));
    x1.reply(back.request, 500).unwrap();
    got.clear();
    assert_eq!(x0.poll(|u, r| got.push((u, r))), 1);
    assert_eq!(
        got,
        [(50, 500)],
        "x's node 0 gets the answer the refusal kept"
    );
}
