//! ipc unit tests over heap buffers cast like a shared mapping (also run under Miri).
#![allow(unsafe_code)]

use super::*;
use crate::shm::spsc::RingCtl;
use crate::shm::{ClientState, EvictError, LayoutError, Owner, Slab, SlabEntry, Stall, ZeroedMem};
use std::vec::Vec;

type Req = [u64; 2];
type Resp = [u64; 2];

/// Memory for a region of `cfg`.
fn mem_for(cfg: &Config) -> ZeroedMem {
    ZeroedMem::new(IpcRegion::<Req, Resp>::required_len(cfg).unwrap())
}

fn region(mem: &mut ZeroedMem, cfg: &Config) -> IpcRegion<'static, Req, Resp> {
    let len = mem.len();
    // SAFETY: zeroed, aligned, alive for the whole test, accessed only via the region.
    unsafe { IpcRegion::init(mem.ptr(), len, cfg, 1) }.unwrap()
}

fn slab<U>(n: usize) -> Vec<SlabEntry<U>> {
    (0..n).map(|_| SlabEntry::new()).collect()
}

const CFG: Config = Config {
    max_clients: 2,
    depth: 4,
};

#[test]
fn out_of_order_replies_by_token() {
    let mut mem = mem_for(&CFG);
    let r = region(&mut mem, &CFG);
    let mut server = Server::new(r);
    let mut sm = slab::<u32>(8);
    let mut c = Client::connect(r, 5, Slab::new(&mut sm)).unwrap();
    for i in 0..4u64 {
        c.call(&[i, 0], 100 + i as u32).unwrap();
    }
    assert_eq!(
        c.call(&[9, 0], 0),
        Err(IpcCallError::Full),
        "depth bounds in flight"
    );
    assert_eq!(server.poll(), 1, "one client has requests waiting");
    let mut hs: Vec<_> = core::iter::from_fn(|| server.recv()).collect();
    assert_eq!(hs.len(), 4);
    let mut got = Vec::new();
    while let Some(h) = hs.pop() {
        let p = h.payload;
        server.reply(h, &[p[0], p[0] * 7]).unwrap();
        c.poll(|u, r| got.push((u, *r)));
    }
    assert_eq!(got.len(), 4);
    for (u, r) in got {
        assert_eq!(r, [(u - 100) as u64, (u - 100) as u64 * 7]);
    }
}

#[test]
fn closed_client_frees_its_id_and_stale_replies_are_refused() {
    let cfg = Config {
        max_clients: 1,
        depth: 2,
    };
    let mut mem = mem_for(&cfg);
    let r = region(&mut mem, &cfg);
    let mut server = Server::new(r);
    let (mut s1, mut s2, mut s3) = (slab::<()>(2), slab::<()>(2), slab::<()>(2));
    let mut a = Client::connect(r, 1, Slab::new(&mut s1)).unwrap();
    assert_eq!(
        Client::connect(r, 2, Slab::new(&mut s2)).unwrap_err(),
        IpcConnectError::NoFreeClientId
    );
    a.call(&[1, 1], ()).unwrap();
    a.call(&[2, 2], ()).unwrap();
    server.poll();
    let h = server.recv().unwrap();
    a.close();
    server.poll();
    let mut b = Client::connect(r, 2, Slab::new(&mut s2)).unwrap();
    assert_eq!((b.id(), b.epoch()), (0, 2));
    assert_eq!(server.reply(h, &[0, 0]), Err(IpcReplyError::ClientGone));
    assert_eq!(
        server.poll(),
        0,
        "the closed client's unread request was dropped"
    );
    b.call(&[3, 3], ()).unwrap();
    assert_eq!(server.poll(), 1);
    let h = server.recv().unwrap();
    assert_eq!(h.payload, [3, 3]);
    server.reply(h, &[4, 4]).unwrap();
    assert_eq!(b.poll(|(), r| assert_eq!(*r, [4, 4])), 1);
    // Eviction of a dead client frees the id too.
    let id = b.id();
    core::mem::forget(b);
    server.evict(id).unwrap();
    assert_eq!(server.evict(id), Err(EvictError::NotActive));
    server.poll();
    let c = Client::connect(r, 3, Slab::new(&mut s3)).unwrap();
    assert_eq!(c.epoch(), 3);
}

#[test]
fn a_reply_with_nothing_outstanding_or_no_such_client_is_refused_and_loses_nothing() {
    let cfg = Config {
        max_clients: 1,
        depth: 1,
    };
    let mut mem = mem_for(&cfg);
    let r = region(&mut mem, &cfg);
    let mut server = Server::new(r);
    let (mut s1, mut s2) = (slab::<u32>(1), slab::<u32>(1));
    let mut a = Client::connect(r, 1, Slab::new(&mut s1)).unwrap();
    a.call(&[1, 0], 1).unwrap();
    server.poll();
    let (raw, p) = server.recv().unwrap().into_raw();
    server
        .reply(IpcRequest::from_raw(raw, p), &[10, 0])
        .unwrap();
    // The same request again, before and after the client read the answer: refused, and
    // the answer waiting in the one-slot response ring is not overwritten.
    assert_eq!(
        server.reply(IpcRequest::from_raw(raw, p), &[11, 0]),
        Err(IpcReplyError::NothingOutstanding)
    );
    let mut got = Vec::new();
    assert_eq!(a.poll(|u, r| got.push((u, *r))), 1);
    a.call(&[2, 0], 2).unwrap();
    assert_eq!(
        server.reply(IpcRequest::from_raw(raw, p), &[12, 0]),
        Err(IpcReplyError::NothingOutstanding),
        "a reply to the first call while the second is not yet taken"
    );
    server.poll();
    let h = server.recv().unwrap();
    server.reply(h, &[20, 0]).unwrap();
    assert_eq!(a.poll(|u, r| got.push((u, *r))), 1);
    assert_eq!(
        got,
        [(1, [10, 0]), (2, [20, 0])],
        "each call its own answer, once"
    );
    // A client id past the table: an error, not an index out of bounds.
    let bad = IpcRequest::from_raw((cfg.max_clients, raw.1, raw.2), p);
    assert_eq!(
        server.reply(bad, &[0, 0]),
        Err(IpcReplyError::UnknownClient)
    );
    let huge = IpcRequest::from_raw((u32::MAX, raw.1, raw.2), p);
    assert_eq!(
        server.reply(huge, &[0, 0]),
        Err(IpcReplyError::UnknownClient)
    );

    // A client that leaves with a request taken and unanswered: the next owner of the id
    // starts with nothing outstanding, and its own request is answered.
    a.call(&[3, 0], 3).unwrap();
    server.poll();
    let (old, _) = server.recv().unwrap().into_raw();
    // The server's salt on epochs, so the stale request below can name b's epoch as
    // this server would.
    let salt = old.1 ^ a.epoch();
    a.close();
    server.poll();
    let mut b = Client::connect(r, 2, Slab::new(&mut s2)).unwrap();
    let stale = IpcRequest::from_raw((old.0, b.epoch() ^ salt, old.2), [0, 0]);
    assert_eq!(
        server.reply(stale, &[0, 0]),
        Err(IpcReplyError::NothingOutstanding),
        "the old epoch's unanswered request is not the new client's"
    );
    b.call(&[4, 0], 4).unwrap();
    server.poll();
    let h = server.recv().unwrap();
    server.reply(h, &[40, 0]).unwrap();
    let mut got = Vec::new();
    assert_eq!(b.poll(|u, r| got.push((u, *r))), 1);
    assert_eq!(got, [(4, [40, 0])]);
}

#[test]
fn attach_validates() {
    let mut mem = mem_for(&CFG);
    let len = mem.len();
    let p = mem.ptr();
    let need = IpcRegion::<Req, Resp>::required_len(&CFG).unwrap();
    // SAFETY: valid zeroed memory for the test, accessed only through regions.
    let e = unsafe { IpcRegion::<Req, Resp>::attach(p, len) }.unwrap_err();
    assert_eq!(e, LayoutError::BadMagic { found: 0 });
    let _r = region(&mut mem, &CFG);
    // SAFETY: as above.
    let ok = unsafe { IpcRegion::<Req, Resp>::attach(p, len) };
    assert!(ok.is_ok());
    // SAFETY: as above.
    let short = unsafe { IpcRegion::<Req, Resp>::attach(p, need - 128) };
    assert!(matches!(short, Err(LayoutError::Truncated { .. })));
    // SAFETY: as above.
    let other = unsafe { IpcRegion::<Req, [u8; 3]>::attach(p, len) };
    assert!(matches!(other, Err(LayoutError::PayloadSize { .. })));
}

#[test]
fn threaded_clients_conserve_requests() {
    let per: u64 = if cfg!(miri) { 10 } else { 20_000 };
    let cfg = Config {
        max_clients: 3,
        depth: 4,
    };
    let mut mem = mem_for(&cfg);
    let r = region(&mut mem, &cfg);
    let mut server = Server::new(r);
    std::thread::scope(|s| {
        for t in 0..3u32 {
            s.spawn(move || {
                let mut sm = slab::<u64>(4);
                let mut c = Client::connect(r, t, Slab::new(&mut sm)).unwrap();
                let me = c.id() as u64;
                let (mut next, mut done) = (0u64, 0u64);
                let mut stall = Stall::new("a client's calls");
                while done < per {
                    if next < per && c.call(&[me, next], next).is_ok() {
                        next += 1;
                    }
                    done += c.poll(|seq, r| assert_eq!(*r, [me, seq * 2])) as u64;
                    stall.turn(next + done);
                }
            });
        }
        let mut seen = [0u64; 3];
        let mut held = Vec::new();
        let mut stall = Stall::new("the server's requests");
        while seen.iter().sum::<u64>() < 3 * per {
            server.poll();
            while let Some(h) = server.recv() {
                let [id, seq] = h.payload;
                assert_eq!(seq, seen[id as usize], "per-client order");
                seen[id as usize] += 1;
                held.push(h);
            }
            // Reply newest first.
            while let Some(h) = held.pop() {
                let [id, seq] = h.payload;
                server.reply(h, &[id, seq * 2]).unwrap();
            }
            stall.turn(seen.iter().sum());
        }
    });
}

#[test]
fn recv_takes_turns_among_the_clients() {
    // Three clients with two requests each: one from each client before any client's
    // second (the scan starts after the client last served), with their ids and counts.
    let cfg = Config {
        max_clients: 3,
        depth: 4,
    };
    let mut mem = mem_for(&cfg);
    let r = region(&mut mem, &cfg);
    let mut server = Server::new(r);
    let mut sms: Vec<Vec<SlabEntry<u32>>> = (0..3).map(|_| slab::<u32>(4)).collect();
    let mut cs: Vec<_> = sms
        .iter_mut()
        .enumerate()
        .map(|(i, sm)| Client::connect(r, 10 + i as u32, Slab::new(sm)).unwrap())
        .collect();
    for (i, c) in cs.iter_mut().enumerate() {
        for k in 0..2u64 {
            c.call(&[i as u64, k], 0).unwrap();
        }
        assert_eq!(c.in_flight(), 2);
    }
    assert_eq!(server.poll(), 3);
    let order: Vec<(u32, [u64; 2])> = core::iter::from_fn(|| server.recv())
        .map(|h| (h.client_id(), h.payload))
        .collect();
    let ids: Vec<u32> = order.iter().map(|o| o.0).collect();
    let first = ids[0];
    assert_eq!(
        ids[..3].iter().filter(|&&id| id == first).count(),
        1,
        "{order:?}"
    );
    assert_eq!(ids[..3], ids[3..], "{order:?}");
    for j in 0..3 {
        // Each client's first request in the first turn, its second in the next.
        let (a, b) = (order[j].1, order[j + 3].1);
        assert_eq!((a[0], a[1], b[1]), (b[0], 0, 1), "{order:?}");
    }
}

#[test]
fn config_bounds_are_refused_past_each_limit_and_accepted_at_it() {
    let ok = |max_clients, depth| Config { max_clients, depth }.validate();
    assert_eq!(ok(1, 1), Ok(()));
    assert_eq!(ok(MAX_CLIENTS, MAX_DEPTH), Ok(()));
    for (n, d) in [
        (0, 4),
        (MAX_CLIENTS + 1, 4),
        (2, 0),
        (2, 6),
        (2, MAX_DEPTH * 2),
    ] {
        assert_eq!(
            ok(n, d),
            Err(LayoutError::BadConfig),
            "{n} clients, depth {d}"
        );
        let cfg = Config {
            max_clients: n,
            depth: d,
        };
        assert_eq!(
            cfg.offsets::<Req, Resp>().map(|o| o.region_len),
            Err(LayoutError::BadConfig),
            "no layout for {n} clients, depth {d}"
        );
    }
}

#[test]
fn offsets_place_each_part_after_the_last_on_128_byte_lines() {
    // The layout mod.rs documents: the header's line, 64 B per client row (rounded up to
    // a line), 256 B per ring control block, then the cells. Three clients, so the
    // client table ends off a line boundary.
    let cfg = Config {
        max_clients: 3,
        depth: 4,
    };
    let o = cfg.offsets::<Req, Resp>().unwrap();
    let cell = size_of::<Cell<Req, Resp>>();
    assert_eq!(cell, 64, "both slots of a 16 B payload in one line");
    assert_eq!(
        (o.clients, o.req_ctl, o.resp_ctl, o.cells),
        (128, 384, 384 + 3 * 256, 384 + 6 * 256)
    );
    assert_eq!(o.region_len, o.cells + 12 * cell);
    // One 64 B cell ends off a line: the length rounds up to the next one.
    let odd = Config {
        max_clients: 1,
        depth: 1,
    }
    .offsets::<Req, Resp>()
    .unwrap();
    let end = odd.cells + cell;
    assert_ne!(end % 128, 0, "the case needs an end off a line");
    assert_eq!(odd.region_len, end.next_multiple_of(128));
}

#[test]
fn from_parts_takes_parts_of_the_configured_sizes_only() {
    let header = Header::new::<Req, Resp>(&CFG);
    let n = CFG.max_clients as usize;
    let slots = n * CFG.depth as usize;
    let clients: Vec<ClientEntry> = (0..n + 1).map(|_| ClientEntry::new()).collect();
    let ctl: Vec<RingCtl> = (0..n + 1).map(|_| RingCtl::new()).collect();
    let cells: Vec<Cell<Req, Resp>> = (0..slots + 1).map(|_| Cell::new()).collect();
    let parts = |c: usize, q: usize, s: usize, k: usize| {
        IpcRegion::from_parts(&header, &clients[..c], &ctl[..q], &ctl[..s], &cells[..k])
            .map(|r| r.config())
    };
    assert_eq!(parts(n, n, n, slots), Ok(CFG));
    for (c, q, s, k) in [
        (n + 1, n, n, slots),
        (n - 1, n, n, slots),
        (n, n + 1, n, slots),
        (n, n, n - 1, slots),
        (n, n, n, slots + 1),
        (n, n, n, slots - 1),
    ] {
        assert_eq!(
            parts(c, q, s, k),
            Err(LayoutError::BadConfig),
            "{c} client rows, {q} + {s} ring blocks, {k} cells"
        );
    }
    let r = IpcRegion::from_parts(
        &header,
        &clients[..n],
        &ctl[..n],
        &ctl[..n],
        &cells[..slots],
    )
    .unwrap();
    let shown = std::format!("{r:?}");
    assert!(
        shown.contains("IpcRegion") && shown.contains("depth: 4"),
        "{shown}"
    );
}

#[test]
fn a_client_dropped_without_close_frees_its_id_and_a_dropped_server_refuses_calls() {
    let cfg = Config {
        max_clients: 2,
        depth: 2,
    };
    let mut mem = mem_for(&cfg);
    let r = region(&mut mem, &cfg);
    assert_eq!(r.header().server_owner(), Owner::from(1), "init's owner");
    let mut server = Server::new(r);
    let (mut s1, mut s2, mut s3) = (slab::<()>(2), slab::<()>(2), slab::<()>(2));
    let a = Client::connect(r, 7, Slab::new(&mut s1)).unwrap();
    let mut b = Client::connect(r, 8, Slab::new(&mut s2)).unwrap();
    let rows = |s: &Server<Req, Resp>| {
        s.clients()
            .map(|i| (i.id, i.state, i.epoch, i.owner))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        rows(&server),
        [
            (0, ClientState::Active, 1, 7),
            (1, ClientState::Active, 1, 8)
        ]
    );
    drop(a);
    server.poll();
    assert_eq!(rows(&server)[0].1, ClientState::Free, "dropping closes");
    let c = Client::connect(r, 9, Slab::new(&mut s3)).unwrap();
    assert_eq!((c.id(), c.epoch()), (0, 2));
    drop(server);
    assert_eq!(b.call(&[1, 1], ()), Err(IpcCallError::ServerDisconnected));
    assert_eq!(b.in_flight(), 0, "a refused call is not in flight");
}

#[test]
fn errors_display_distinct_nonempty_text() {
    use crate::test_text::distinct_texts;
    distinct_texts(&[
        IpcConnectError::NoFreeClientId,
        IpcConnectError::ServerDisconnected,
        IpcConnectError::EmptySlab,
    ]);
    distinct_texts(&[IpcCallError::Full, IpcCallError::ServerDisconnected]);
    distinct_texts(&[
        IpcReplyError::ClientGone,
        IpcReplyError::UnknownClient,
        IpcReplyError::NothingOutstanding,
    ]);
}

#[test]
fn recv_goes_on_after_the_client_last_served_when_a_client_joins() {
    // Two clients with two requests each; after client 0 is served, client 2 joins (the
    // scan grows to three ids). The next request is client 1's, not client 0's second.
    let cfg = Config {
        max_clients: 3,
        depth: 2,
    };
    let mut mem = mem_for(&cfg);
    let r = region(&mut mem, &cfg);
    let mut server = Server::new(r);
    let mut sms: Vec<Vec<SlabEntry<u32>>> = (0..3).map(|_| slab::<u32>(2)).collect();
    let mut it = sms.iter_mut();
    let mut cs: Vec<_> = (0..2)
        .map(|i| Client::connect(r, 10 + i, Slab::new(it.next().unwrap())).unwrap())
        .collect();
    for (i, c) in cs.iter_mut().enumerate() {
        for k in 0..2u64 {
            c.call(&[i as u64, k], 0).unwrap();
        }
    }
    assert_eq!(server.poll(), 2);
    assert_eq!(server.recv().map(|h| h.client_id()), Some(0));
    cs.push(Client::connect(r, 12, Slab::new(it.next().unwrap())).unwrap());
    cs[2].call(&[2, 0], 0).unwrap();
    assert_eq!(server.poll(), 3);
    let order: Vec<u32> = core::iter::from_fn(|| server.recv())
        .map(|h| h.client_id())
        .collect();
    assert_eq!(order, [1, 2, 0, 1]);
}

/// Two servers fed the same traffic hand out requests with the same client id and
/// token: a request one server received, answered on the other, is refused there
/// (`ClientGone`: its epoch is sealed by its own server) and that server's client gets
/// nothing from it; each request is then answered on its own server. Before the seal the
/// other server's client took the foreign answer as its own call's.
#[test]
fn a_request_answered_on_another_server_is_refused_there() {
    let (mut m1, mut m2) = (mem_for(&CFG), mem_for(&CFG));
    let (r1, r2) = (region(&mut m1, &CFG), region(&mut m2, &CFG));
    let (mut s1, mut s2) = (Server::new(r1), Server::new(r2));
    let (mut sl1, mut sl2) = (slab::<u32>(2), slab::<u32>(2));
    let mut c1 = Client::connect(r1, 1, Slab::new(&mut sl1)).unwrap();
    let mut c2 = Client::connect(r2, 1, Slab::new(&mut sl2)).unwrap();
    c1.call(&[1, 0], 1).unwrap();
    c2.call(&[2, 0], 2).unwrap();
    s1.poll();
    s2.poll();
    let (raw1, p1) = s1.recv().unwrap().into_raw();
    let (raw2, p2) = s2.recv().unwrap().into_raw();
    assert_eq!(
        (raw1.0, raw1.2),
        (raw2.0, raw2.2),
        "the premise: same id and token"
    );
    assert_eq!(
        s2.reply(IpcRequest::from_raw(raw1, p1), &[10, 0]),
        Err(IpcReplyError::ClientGone)
    );
    assert_eq!(
        c2.poll(|_, _| panic!("server 1's answer reached client 2")),
        0
    );
    s2.reply(IpcRequest::from_raw(raw2, p2), &[20, 0]).unwrap();
    s1.reply(IpcRequest::from_raw(raw1, p1), &[10, 0]).unwrap();
    let mut got = Vec::new();
    assert_eq!(c1.poll(|u, r| got.push((u, *r))), 1);
    assert_eq!(c2.poll(|u, r| got.push((u, *r))), 1);
    assert_eq!(got, [(1, [10, 0]), (2, [20, 0])]);
}

/// The server keeps the ring parts of the client `recv` took from last: a reply to an
/// earlier client, taken before `recv` moved on, still goes to that client's ring, and
/// the cached client's own reply to its ring.
#[test]
fn a_reply_reaches_its_client_after_recv_moved_on_to_another() {
    let mut mem = mem_for(&CFG);
    let r = region(&mut mem, &CFG);
    let mut server = Server::new(r);
    let (mut sa, mut sb) = (slab::<u32>(4), slab::<u32>(4));
    let mut a = Client::connect(r, 1, Slab::new(&mut sa)).unwrap();
    let mut b = Client::connect(r, 2, Slab::new(&mut sb)).unwrap();
    a.call(&[1, 0], 1).unwrap();
    b.call(&[2, 0], 2).unwrap();
    assert_eq!(server.poll(), 2);
    let ha = server.recv().unwrap();
    let hb = server.recv().unwrap();
    assert_eq!((ha.client_id(), hb.client_id()), (a.id(), b.id()));
    server.reply(ha, &[10, 0]).unwrap();
    server.reply(hb, &[20, 0]).unwrap();
    let mut got = Vec::new();
    assert_eq!(a.poll(|u, r| got.push((u, *r))), 1);
    assert_eq!(b.poll(|u, r| got.push((u, *r))), 1);
    assert_eq!(got, [(1, [10, 0]), (2, [20, 0])]);
}
