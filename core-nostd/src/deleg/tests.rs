//! Unit tests over heap buffers cast like a shared mapping (also run under Miri).
#![allow(unsafe_code)]

use super::layout::{Claim, ReqSlot, RespSlot};
use super::*;
use crate::shm::{ClientState, EvictError, LayoutError, Stall, ZeroedMem as Mem};
use std::vec::Vec;

type Req = [u64; 2];
type Resp = [u64; 2];

const CFG: Config = Config {
    max_clients: 3,
    ring_depth: 4,
    resp_depth: 2,
};

fn region(mem: &mut Mem, cfg: &Config) -> DelegRegion<'static, Req, Resp> {
    let len = mem.len();
    let p = mem.ptr();
    // SAFETY: `mem` is zeroed, aligned and outlives every use in the test (each test
    // keeps it alive until the end and touches it only through the region).
    unsafe { DelegRegion::init(p, len, cfg, 7) }.unwrap()
}

const SC: ServerConfig = ServerConfig { hole_timeout: 10 };

/// A server that never times a hole out: only a dead claimer's hole is skipped.
fn patient_server<'r>(r: DelegRegion<'r, Req, Resp>) -> Server<'r, Req, Resp> {
    Server::new(
        r,
        ServerConfig {
            hole_timeout: u64::MAX,
        },
    )
}

/// `c` claims its next position, takes the slot for writing (the claim word's CAS that
/// `commit` starts with) and dies there: it never commits or closes. Returns the
/// position, its id and its epoch.
fn die_mid_write(r: DelegRegion<'_, Req, Resp>, mut c: Client<'_, Req, Resp>) -> (u64, u32, u32) {
    let res = c.reserve().unwrap();
    let pos = res.position();
    r.slot(pos).claim.store(
        Claim::writing(pos, r.depth_log2),
        crate::sync::Ordering::Relaxed,
    );
    core::mem::forget(res);
    let (id, epoch) = (c.id(), c.epoch());
    core::mem::forget(c);
    (pos, id, epoch)
}

#[test]
fn call_recv_reply_round_trip() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let shown = std::format!("{r:?}");
    assert!(
        shown.starts_with("DelegRegion") && shown.contains("ring_depth: 4"),
        "{shown}"
    );
    let mut server = Server::new(r, SC);
    let mut c = Client::connect(r, 42).unwrap();
    assert_eq!(c.id(), 0);
    let slot = c.call(&[1, 2]).unwrap();
    assert_eq!(server.poll(0), 1);
    let e = server.recv().unwrap();
    assert_eq!(e.payload, [1, 2]);
    assert_eq!(e.token.client_id(), 0);
    assert_eq!(e.token.resp_slot_idx(), slot);
    server.advance_tail();
    server.reply(e.token, &[3, 4]).unwrap();
    let mut got = Vec::new();
    assert_eq!(c.poll(|s, r| got.push((s, *r))), 1);
    assert_eq!(got, [(slot, [3, 4])]);
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn attach_refuses_bad_input() {
    let need = DelegRegion::<Req, Resp>::required_len(&CFG).unwrap();
    let mut mem = Mem::new(need);
    let (p, len) = (mem.ptr(), mem.len());
    // SAFETY: valid zeroed memory for the whole test.
    let e = unsafe { DelegRegion::<Req, Resp>::attach(p, len) }.unwrap_err();
    assert_eq!(e, LayoutError::BadMagic { found: 0 });
    let r = region(&mut mem, &CFG);
    // SAFETY: as above; a second init over a live region is refused, not UB.
    let e = unsafe { DelegRegion::<Req, Resp>::init(p, len, &CFG, 1) }.unwrap_err();
    assert_eq!(e, LayoutError::NotZeroed);
    // SAFETY: as above.
    let e = unsafe { DelegRegion::<Req, Resp>::attach(p, need - 1) }.unwrap_err();
    assert_eq!(
        e,
        LayoutError::Truncated {
            need,
            have: need - 1
        }
    );
    // SAFETY: as above.
    let e = unsafe { DelegRegion::<Req, Resp>::attach(p, 100) }.unwrap_err();
    assert_eq!(
        e,
        LayoutError::Truncated {
            need: 128,
            have: 100
        }
    );
    // SAFETY: in bounds; misalignment is refused before any access.
    let e = unsafe { DelegRegion::<Req, Resp>::attach(p.add(8), len - 8) }.unwrap_err();
    assert_eq!(e, LayoutError::Misaligned);
    // SAFETY: as above.
    let e = unsafe { DelegRegion::<[u64; 3], Resp>::attach(p, len) }.unwrap_err();
    assert_eq!(e, LayoutError::PayloadSize { req: 16, resp: 16 });
    // SAFETY: as above.
    assert!(unsafe { DelegRegion::<Req, Resp>::attach(p, need) }.is_ok());
    // Version 1, the layout without owner tokens, is refused as such.
    r.header().version.store(1, crate::sync::Ordering::Relaxed);
    // SAFETY: as above.
    let e = unsafe { DelegRegion::<Req, Resp>::attach(p, len) }.unwrap_err();
    assert_eq!(e, LayoutError::BadVersion { found: 1 });
    r.header()
        .version
        .store(super::VERSION, crate::sync::Ordering::Relaxed);
    r.header()
        .ring_depth
        .store(3, crate::sync::Ordering::Relaxed);
    // SAFETY: as above.
    let e = unsafe { DelegRegion::<Req, Resp>::attach(p, len) }.unwrap_err();
    assert_eq!(e, LayoutError::BadConfig);
    let bad = Config {
        ring_depth: 6,
        ..CFG
    };
    assert_eq!(
        DelegRegion::<Req, Resp>::required_len(&bad),
        Err(LayoutError::BadConfig)
    );
}

#[test]
fn seed_offsets() {
    let off = CFG.offsets::<Req, Resp>().unwrap();
    assert_eq!(off.req_slot_size, 64);
    assert_eq!(off.resp_slot_size, 64);
    assert_eq!(off.resp_area_offset, 256 + 4 * 64);
    assert_eq!(off.client_table_offset, 512 + 3 * 2 * 64);
    assert_eq!(off.region_len, 512 + 384 + 3 * 128);
    assert_eq!(req_slot_size::<[u8; 100]>(), 128);
    assert_eq!(resp_slot_size::<[u8; 120]>(), 128);
}

#[test]
fn client_ids_exhaust_and_are_reclaimed() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let mut server = Server::new(r, SC);
    let a = Client::connect(r, 1).unwrap();
    let mut b = Client::connect(r, 2).unwrap();
    let c = Client::connect(r, 3).unwrap();
    assert_eq!((a.id(), b.id(), c.id()), (0, 1, 2));
    assert_eq!(
        Client::connect(r, 4).unwrap_err(),
        ConnectError::NoFreeClientId
    );
    // b has a request answered later, after it left: the reply must not reach b's successor.
    b.call(&[9, 9]).unwrap();
    assert_eq!(server.poll(0), 1);
    let stale = server.recv().unwrap().token;
    server.advance_tail();
    b.close();
    // Not free until the server has seen the close.
    assert_eq!(
        Client::connect(r, 4).unwrap_err(),
        ConnectError::NoFreeClientId
    );
    server.poll(1);
    let mut d = Client::connect(r, 4).unwrap();
    assert_eq!(d.id(), 1);
    assert_eq!(d.epoch(), 2);
    assert_eq!(server.reply(stale, &[0, 0]), Err(ReplyError::ClientGone));
    assert_eq!(d.poll(|_, _| panic!("stale reply delivered")), 0);
    // The new client works.
    d.call(&[5, 5]).unwrap();
    server.poll(2);
    let e = server.recv().unwrap();
    assert_eq!(e.token.client_id(), 1);
    server.reply(e.token, &[6, 6]).unwrap();
    assert_eq!(d.poll(|_, r| assert_eq!(*r, [6, 6])), 1);
    // Many reconnects never exhaust the table.
    drop(d);
    for i in 0..20 {
        server.poll(3 + i);
        let x = Client::connect(r, 100).unwrap();
        assert_eq!(x.id(), 1);
    }
    assert_eq!(server.stats().reclaimed, 21);
    drop((a, c));
}

#[test]
fn response_slots_bound_calls_in_flight() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let mut server = Server::new(r, SC);
    let mut c = Client::connect(r, 1).unwrap();
    c.call(&[1, 0]).unwrap();
    c.call(&[2, 0]).unwrap();
    assert_eq!(c.call(&[3, 0]), Err(CallError::NoResponseSlot));
    assert_eq!(server.poll(0), 2);
    // Answer out of order.
    let first = server.recv().unwrap();
    let second = server.recv().unwrap();
    server.reply(second.token, &[2, 1]).unwrap();
    let mut got = Vec::new();
    c.poll(|_, r| got.push(*r));
    assert_eq!(got, [[2, 1]]);
    let s3 = c.call(&[3, 0]).unwrap();
    server.reply(first.token, &[1, 1]).unwrap();
    c.poll(|_, r| got.push(*r));
    assert_eq!(got, [[2, 1], [1, 1]]);
    server.poll(1);
    let third = server.recv().unwrap();
    assert_eq!(third.token.resp_slot_idx(), s3);
    let raw = third.token.into_raw();
    server.reply(ReplyToken::from_raw(raw), &[3, 1]).unwrap();
    assert_eq!(
        server.reply(ReplyToken::from_raw(raw), &[3, 2]),
        Err(ReplyError::Duplicate)
    );
    assert_eq!(
        server.reply(ReplyToken::from_raw((9, 0, 1, 1)), &[0, 0]),
        Err(ReplyError::BadToken)
    );
    c.poll(|_, r| assert_eq!(*r, [3, 1]));
}

/// A second reply to a call the client has already read must not answer the client's
/// next call on the same response slot (it would get the first call's answer and lose
/// its own).
#[test]
fn a_second_reply_after_the_first_was_read_answers_no_later_call() {
    let cfg = Config {
        max_clients: 1,
        ring_depth: 4,
        resp_depth: 1,
    };
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&cfg).unwrap());
    let r = region(&mut mem, &cfg);
    let mut server = Server::new(r, SC);
    let mut c = Client::connect(r, 1).unwrap();
    let mut got = Vec::new();
    c.call(&[1, 0]).unwrap();
    server.poll(1);
    let raw_a = server.recv().unwrap().token.into_raw();
    server.reply(ReplyToken::from_raw(raw_a), &[10, 0]).unwrap();
    assert_eq!(c.poll(|_, r| got.push(*r)), 1);
    // Read by the client, so `valid` is 0 again: the duplicate is caught by the call count.
    assert_eq!(
        server.reply(ReplyToken::from_raw(raw_a), &[11, 0]),
        Err(ReplyError::Duplicate)
    );
    let slot_b = c.call(&[2, 0]).unwrap();
    assert_eq!(slot_b, raw_a.1, "one response slot: the next call takes it");
    assert_eq!(c.poll(|_, r| got.push(*r)), 0, "nothing answers B yet");
    server.poll(2);
    let b = server.recv().unwrap();
    assert_eq!(
        server.reply(ReplyToken::from_raw(raw_a), &[12, 0]),
        Err(ReplyError::Duplicate),
        "A's token while B, on the same slot, is taken and unanswered"
    );
    server.reply(b.token, &[20, 0]).unwrap();
    assert_eq!(c.poll(|_, r| got.push(*r)), 1);
    assert_eq!(got, [[10, 0], [20, 0]], "each call its own answer, once");
    // A token for a call the server never took is refused too.
    let never = (raw_a.0, raw_a.1, raw_a.2, raw_a.3 + 7);
    assert_eq!(
        server.reply(ReplyToken::from_raw(never), &[0, 0]),
        Err(ReplyError::Duplicate)
    );
}

#[test]
fn cancelled_reservation_is_skipped_without_timeout() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let mut server = patient_server(r);
    let mut a = Client::connect(r, 1).unwrap();
    let mut b = Client::connect(r, 2).unwrap();
    let res = a.reserve().unwrap();
    assert_eq!(res.position(), 0);
    b.call(&[2, 0]).unwrap();
    assert_eq!(server.poll(0), 0, "hole at 0 blocks position 1");
    drop(res);
    assert_eq!(server.poll(0), 1);
    assert_eq!(server.recv().unwrap().payload, [2, 0]);
    assert_eq!(server.stats().abandoned, 1);
}

#[test]
fn stalled_claimer_times_out_and_its_late_commit_is_refused() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let mut server = Server::new(r, SC);
    let mut a = Client::connect(r, 1).unwrap();
    let mut b = Client::connect(r, 2).unwrap();
    let stalled = a.reserve().unwrap();
    b.call(&[2, 0]).unwrap();
    assert_eq!(server.poll(100), 0);
    assert_eq!(server.poll(105), 0);
    assert_eq!(server.poll(110), 1, "abandoned after hole_timeout");
    assert_eq!(server.recv().unwrap().payload, [2, 0]);
    server.advance_tail();
    assert_eq!(stalled.commit(&[1, 0]), Err(CallError::Abandoned));
    assert_eq!(a.in_flight(), 0);
    // Lap the ring so the abandoned slot is reused; nothing of `a`'s leaks into it.
    for i in 0..8u64 {
        b.call(&[2, 10 + i]).unwrap();
        assert_eq!(server.poll(200), 1);
        let e = server.recv().unwrap();
        assert_eq!(e.payload, [2, 10 + i]);
        server.advance_tail();
        server.reply(e.token, &[0, 0]).unwrap();
        b.poll(|_, _| {});
    }
    // And `a` can call again.
    a.call(&[1, 1]).unwrap();
    server.poll(300);
    assert_eq!(server.recv().unwrap().payload, [1, 1]);
}

#[test]
fn evicted_writer_hole_is_skipped_at_once() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let mut server = patient_server(r);
    let mut a = Client::connect(r, 1).unwrap();
    let mut b = Client::connect(r, 2).unwrap();
    // `a` commits one request, then dies between its claim CAS and its commit.
    a.call(&[1, 0]).unwrap();
    let (_, a_id, _) = die_mid_write(r, a);
    b.call(&[2, 0]).unwrap();
    assert_eq!(server.poll(0), 1);
    assert!(server.recv().is_some());
    assert_eq!(server.poll(1), 0, "writing hole, writer not known dead");
    server.evict(a_id).unwrap();
    assert_eq!(server.poll(2), 1);
    assert_eq!(server.recv().unwrap().payload, [2, 0]);
    server.advance_tail();
    server.poll(3);
    // The dead id is free again (after the never-used id 2).
    let fresh = Client::connect(r, 3).unwrap();
    assert_eq!(fresh.id(), 2);
    let n = Client::connect(r, 4).unwrap();
    assert_eq!(n.id(), a_id);
    assert_eq!(server.evict(7), Err(EvictError::BadId));
}

#[test]
fn evicted_client_requests_are_dropped() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let mut server = Server::new(r, SC);
    let mut a = Client::connect(r, 1).unwrap();
    a.call(&[1, 0]).unwrap();
    let id = a.id();
    core::mem::forget(a);
    server.evict(id).unwrap();
    assert_eq!(server.poll(0), 1);
    assert!(server.recv().is_none());
    assert_eq!(server.stats().dropped, 1);
    server.poll(1);
    assert_eq!(server.stats().reclaimed, 1);
}

#[test]
fn server_gone_is_reported() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let server = Server::new(r, SC);
    let mut a = Client::connect(r, 1).unwrap();
    drop(server);
    assert_eq!(a.call(&[0, 0]), Err(CallError::ServerDisconnected));
    assert_eq!(
        Client::connect(r, 2).unwrap_err(),
        ConnectError::ServerDisconnected
    );
}

#[test]
fn full_ring_blocks_until_tail_moves() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let mut server = Server::new(r, SC);
    std::thread::scope(|s| {
        let h = s.spawn(move || {
            let mut clients: Vec<_> = (0..3).map(|i| Client::connect(r, i).unwrap()).collect();
            // 6 calls into a 4-slot ring: the 5th waits for the server's tail.
            for k in 0..2u64 {
                for (i, c) in clients.iter_mut().enumerate() {
                    c.call(&[i as u64, k]).unwrap();
                }
            }
            let mut got = 0;
            let mut stall = Stall::new("the clients' 6 answers");
            while got < 6 {
                for c in clients.iter_mut() {
                    got += c.poll(|_, r| assert_eq!(r[1], r[0] + 100));
                }
                stall.turn(got as u64);
            }
            clients
        });
        let mut done = 0;
        let mut stall = Stall::new("the server's 6 requests");
        while done < 6 {
            server.poll(0);
            while let Some(e) = server.recv() {
                let p = e.payload;
                server.reply(e.token, &[p[0], p[0] + 100]).unwrap();
                done += 1;
            }
            server.advance_tail();
            stall.turn(done);
        }
        drop(h.join().unwrap());
    });
}

/// Three client threads stamp `(client, seq)`; the server echoes a transform; every
/// client checks each response against its own record of what it sent.
#[test]
fn threaded_stress_conserves_requests() {
    let per_client: u64 = if cfg!(miri) { 12 } else { 20_000 };
    let cfg = Config {
        max_clients: 3,
        ring_depth: 8,
        resp_depth: 4,
    };
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&cfg).unwrap());
    let r = region(&mut mem, &cfg);
    // No hole timeout: a preempted claimer must not lose its request in this test.
    let mut server = patient_server(r);
    std::thread::scope(|s| {
        for t in 0..3u32 {
            s.spawn(move || {
                let mut c = Client::connect(r, t).unwrap();
                let me = c.id() as u64;
                let mut sent = [u64::MAX; 4];
                let (mut next, mut answered) = (0u64, 0u64);
                let mut stall = Stall::new("a client's calls");
                while answered < per_client {
                    while next < per_client && c.in_flight() < 4 {
                        let slot = c.call(&[me, next]).unwrap();
                        assert_eq!(sent[slot as usize], u64::MAX, "slot double-booked");
                        sent[slot as usize] = next;
                        next += 1;
                    }
                    answered += c.poll(|slot, resp| {
                        assert_eq!(resp[0], c_id_tag(me));
                        assert_eq!(resp[1], sent[slot as usize] * 3 + 1);
                        sent[slot as usize] = u64::MAX;
                    }) as u64;
                    stall.turn(next + answered);
                }
            });
        }
        let mut seen = [0u64; 3];
        let mut total = 0;
        let mut now = 0;
        let mut stall = Stall::new("the server's requests");
        while total < 3 * per_client {
            now += 1;
            server.poll(now);
            while let Some(e) = server.recv() {
                let [id, seq] = e.payload;
                assert_eq!(id, e.token.client_id() as u64);
                assert_eq!(seq, seen[id as usize], "per-client FIFO order");
                seen[id as usize] += 1;
                server.reply(e.token, &[c_id_tag(id), seq * 3 + 1]).unwrap();
                total += 1;
            }
            server.advance_tail();
            stall.turn(total);
        }
        assert_eq!(server.stats().abandoned, 0);
    });
}

fn c_id_tag(id: u64) -> u64 {
    0xC0DE_0000 + id
}

#[test]
fn answers_overtaking_an_old_call_are_delivered_and_slots_reused() {
    let cfg = Config {
        max_clients: 1,
        ring_depth: 8,
        resp_depth: 4,
    };
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&cfg).unwrap());
    let r = region(&mut mem, &cfg);
    let mut server = Server::new(r, SC);
    let mut c = Client::connect(r, 1).unwrap();
    for i in 0..4 {
        c.call(&[i, 0]).unwrap();
    }
    server.poll(0);
    let hs: Vec<_> = core::iter::from_fn(|| server.recv()).collect();
    server.advance_tail();
    let mut hs = hs.into_iter();
    let first = hs.next().unwrap();
    // Answer the newest three; the oldest stays out.
    for h in hs {
        let p = h.payload;
        server.reply(h.token, &p).unwrap();
    }
    let mut got = Vec::new();
    assert_eq!(
        c.poll(|_, r| got.push(r[0])),
        3,
        "overtaking answers delivered at once"
    );
    got.sort_unstable();
    assert_eq!(got, [1, 2, 3]);
    // A slot freed out of order is reused; everything is still delivered.
    let s = c.call(&[9, 0]).unwrap();
    server.poll(1);
    let h = server.recv().unwrap();
    assert_eq!(h.token.resp_slot_idx(), s);
    server.reply(h.token, &[9, 0]).unwrap();
    server.reply(first.token, &[0, 0]).unwrap();
    let mut rest = Vec::new();
    assert_eq!(c.poll(|_, r| rest.push(r[0])), 2);
    rest.sort_unstable();
    assert_eq!(rest, [0, 9]);
    assert_eq!(c.in_flight(), 0);
}

/// The idle server samples `head` on one poll in 64: a hole that appears after many idle
/// polls is still seen within 64 polls and abandoned `hole_timeout` after that.
#[test]
fn hole_after_idle_polls_is_seen_within_64_polls() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let mut server = Server::new(r, SC);
    let mut a = Client::connect(r, 1).unwrap();
    let mut b = Client::connect(r, 2).unwrap();
    for now in 0..37 {
        assert_eq!(server.poll(now), 0);
    }
    let stalled = a.reserve().unwrap();
    b.call(&[2, 0]).unwrap();
    let mut seen_at = None;
    for now in 100..164 {
        assert_eq!(server.poll(now), 0);
        if server.hole().is_some() {
            seen_at = Some(now);
            break;
        }
    }
    let seen_at = seen_at.expect("hole not seen within 64 idle polls");
    assert_eq!(server.hole(), Some((0, seen_at)));
    assert_eq!(
        server.poll(seen_at + SC.hole_timeout - 1),
        0,
        "abandoned early"
    );
    assert_eq!(server.poll(seen_at + SC.hole_timeout), 1);
    assert_eq!(server.recv().unwrap().payload, [2, 0]);
    assert_eq!(stalled.commit(&[1, 0]), Err(CallError::Abandoned));
}

#[test]
fn a_head_that_goes_back_is_reported_corrupt() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let _server = Server::new(r, SC);
    let mut a = Client::connect(r, 1).unwrap();
    a.call(&[1, 0]).unwrap();
    // An overwrite of `head` by one: the next claim gets the position `a` already has.
    r.ctrl.head.store(0, crate::sync::Ordering::Relaxed);
    assert_eq!(a.call(&[1, 1]), Err(CallError::RingCorrupt));
}

#[test]
fn a_client_declared_dead_has_its_hole_skipped_and_its_id_freed() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let mut server = patient_server(r);
    let a = Client::connect(r, 1).unwrap();
    let mut b = Client::connect(r, 2).unwrap();
    // `a` dies between its claim CAS and its commit, as in the eviction test; here its
    // host declares it dead instead of the server evicting it.
    let (_, a_id, a_epoch) = die_mid_write(r, a);
    b.call(&[2, 0]).unwrap();
    assert_eq!(server.poll(0), 0, "writing hole, writer not known dead");
    assert!(!r.declare_dead(a_id, a_epoch + 1), "another registration");
    assert!(!r.declare_dead(CFG.max_clients, a_epoch), "no such id");
    assert!(!r.declare_dead(u32::MAX, a_epoch), "no such id");
    assert_eq!(server.poll(1), 0, "refused declarations change nothing");
    assert!(r.declare_dead(a_id, a_epoch));
    assert!(!r.declare_dead(a_id, a_epoch), "already dead");
    assert_eq!(
        server.poll(2),
        1,
        "the dead writer's hole is skipped at once"
    );
    assert_eq!(server.recv().unwrap().payload, [2, 0]);
    server.advance_tail();
    server.poll(3);
    assert_eq!(r.client_info(a_id).state, ClientState::Free);
    let again = Client::connect(r, 3).unwrap();
    assert_eq!(
        (again.id(), again.epoch()),
        (2, 1),
        "the never-used id first"
    );
    let n = Client::connect(r, 4).unwrap();
    assert_eq!((n.id(), n.epoch()), (a_id, a_epoch + 1));
}

#[test]
fn a_live_claimer_is_waited_for_while_another_client_is_dead() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let mut server = patient_server(r);
    let mut a = Client::connect(r, 1).unwrap();
    let c = Client::connect(r, 3).unwrap();
    // `a` (alive) holds position 0 reserved; `c` claims 1 and dies before committing.
    let slow = a.reserve().unwrap();
    let (_, c_id, _) = die_mid_write(r, c);
    server.evict(c_id).unwrap();
    for t in 0..3 {
        assert_eq!(
            server.poll(t),
            0,
            "position 0 is a live client's: waited for"
        );
    }
    assert_eq!(server.stats().abandoned, 0);
    slow.commit(&[1, 0]).unwrap();
    assert_eq!(server.poll(4), 1);
    assert_eq!(server.recv().unwrap().payload, [1, 0]);
    assert_eq!(
        server.stats().abandoned,
        0,
        "the dead one's hole comes next"
    );
}

#[test]
fn a_tail_no_run_produces_is_reported_corrupt_while_waiting_for_room() {
    // Two clients fill the ring (positions 0..4); a third waits for room, with a wait
    // that gives up (RingFull) after ten calls, long past the 64 readings that confirm
    // corruption. Each case overwrites a ring word to a value no run produces.
    type Overwrite = fn(&DelegRegion<'static, Req, Resp>);
    let cases: [(&str, Overwrite); 2] = [
        ("tail past head", |r| {
            r.ctrl.tail.store(100, crate::sync::Ordering::Relaxed)
        }),
        ("a claim more than a ring past tail", |r| {
            r.ctrl.head.store(10, crate::sync::Ordering::Relaxed)
        }),
    ];
    for (what, overwrite) in cases {
        let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
        let r = region(&mut mem, &CFG);
        let _server = Server::new(r, SC);
        let mut a = Client::connect(r, 1).unwrap();
        let mut b = Client::connect(r, 2).unwrap();
        for k in 0..2 {
            a.call(&[1, k]).unwrap();
            b.call(&[2, k]).unwrap();
        }
        let mut c = Client::connect(r, 3).unwrap();
        overwrite(&r);
        let mut waits = 0;
        let got = c.call_with(&[3, 0], || {
            waits += 1;
            if waits < 10 {
                Ok(())
            } else {
                Err(CallError::RingFull)
            }
        });
        assert_eq!(got, Err(CallError::RingCorrupt), "{what}");
        assert_eq!(waits, 0, "{what}: confirmed within the first spins");
    }
}

/// A waiting client whose tail reaches its own position while head reads below it
/// (head is past every claim, ours included, in any run) reports the ring corrupt,
/// as it does for a tail past head beyond its position. Before, a tail equal to the
/// position was taken for room without a look at head, and the call went on.
#[test]
fn a_tail_at_the_waiting_position_above_head_is_reported_corrupt() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let _server = Server::new(r, SC);
    let _full = fill_ring(r);
    let mut c = Client::connect(r, 3).unwrap();
    // c claims position 4 and waits for tail 1; its first wait overwrites tail to 4
    // and head to 3, below c's own claim.
    let mut waits = 0;
    let got = c.call_with(&[3, 0], || {
        waits += 1;
        if waits == 1 {
            r.ctrl.tail.store(4, crate::sync::Ordering::Relaxed);
            r.ctrl.head.store(3, crate::sync::Ordering::Relaxed);
        }
        if waits < 10 {
            Ok(())
        } else {
            Err(CallError::RingFull)
        }
    });
    assert_eq!(got, Err(CallError::RingCorrupt));
    assert_eq!(waits, 1, "confirmed within the spins after the overwrite");
}

/// A reading no run produces is confirmed over 64 samples before the ring is called
/// corrupt; meanwhile the wait's other exits still run, so a server gone at the same
/// time is reported as gone. (With corruption reported at the first suspect reading,
/// this returned `RingCorrupt`.)
#[test]
fn a_server_gone_while_the_ring_first_reads_corrupt_is_reported_gone() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let _server = Server::new(r, SC);
    let _full = fill_ring(r);
    let mut c = Client::connect(r, 3).unwrap();
    let mut waits = 0;
    let got = c.call_with(&[3, 0], || {
        waits += 1;
        // Tail past head, and the server gone, both from the next reading on.
        r.ctrl.tail.store(100, crate::sync::Ordering::Relaxed);
        r.header
            .server_alive
            .store(false, crate::sync::Ordering::Relaxed);
        Ok(())
    });
    assert_eq!(got, Err(CallError::ServerDisconnected));
    assert_eq!(waits, 1);
}

#[test]
fn a_head_below_the_cursor_is_reported_after_the_confirming_samples_only() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let mut server = Server::new(r, SC);
    let mut a = Client::connect(r, 1).unwrap();
    for k in 0..2 {
        a.call(&[1, k]).unwrap();
    }
    assert_eq!(server.poll(0), 2);
    while let Some(e) = server.recv() {
        server.reply(e.token, &[0, 0]).unwrap();
    }
    server.advance_tail();
    assert_eq!(server.cursor(), 2);
    // `head` overwritten below the cursor: no position is abandoned for it, and it is
    // called corruption once `head` read low on 16 samples in a row (one idle poll in
    // 64 samples it), not before.
    r.ctrl.head.store(0, crate::sync::Ordering::Relaxed);
    let mut polls = 0u64;
    while !server.ring_corrupt() {
        assert_eq!(server.poll(polls), 0);
        polls += 1;
        assert!(polls <= 64 * 16, "not reported in {polls} polls");
    }
    assert!(polls > 64 * 15, "reported after {polls} polls");
    assert_eq!(server.stats().abandoned, 0);
    // The word put back: the next sample clears it.
    r.ctrl.head.store(2, crate::sync::Ordering::Relaxed);
    for t in 0..64 {
        assert_eq!(server.poll(polls + t), 0);
    }
    assert!(!server.ring_corrupt());
}

#[test]
fn a_body_naming_no_client_or_no_response_slot_is_counted_and_skipped() {
    // What a broken or hostile writer can leave in a committed slot: a client id past
    // the table, or a response slot past the client's. Either alone is malformed; the
    // server counts it, answers nothing for it, and goes on to the next request.
    let cfg = Config {
        max_clients: 3,
        ring_depth: 4,
        resp_depth: 4,
    };
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&cfg).unwrap());
    let r = region(&mut mem, &cfg);
    let mut server = Server::new(r, SC);
    let mut a = Client::connect(r, 1).unwrap();
    for k in 0..3 {
        a.call(&[1, k]).unwrap();
    }
    assert!(core::ptr::eq(r.req_slot(1), r.slot(1)));
    // Only this thread touches the region, and the server has not read these yet.
    r.slot(0).write_body(cfg.max_clients, 0, &[9, 0]);
    r.slot(1).write_body(a.id(), cfg.resp_depth, &[9, 1]);
    assert_eq!(server.poll(0), 3);
    let e = server.recv().expect("the third request");
    assert_eq!(e.payload, [1, 2]);
    assert!(server.recv().is_none());
    let s = server.stats();
    assert_eq!((s.malformed, s.received, s.dropped), (2, 1, 0));
}

#[test]
fn errors_display_distinct_nonempty_text() {
    use crate::test_text::distinct_texts;
    distinct_texts(&[
        ConnectError::NoFreeClientId,
        ConnectError::ServerDisconnected,
    ]);
    distinct_texts(&[
        CallError::ServerDisconnected,
        CallError::NoResponseSlot,
        CallError::Abandoned,
        CallError::RingFull,
        CallError::RingCorrupt,
    ]);
    distinct_texts(&[
        ReplyError::ClientGone,
        ReplyError::BadToken,
        ReplyError::Duplicate,
    ]);
}

/// `a` and `b` fill CFG's four-slot ring with two calls each; returns them.
fn fill_ring<'r>(r: DelegRegion<'r, Req, Resp>) -> (Client<'r, Req, Resp>, Client<'r, Req, Resp>) {
    let mut a = Client::connect(r, 1).unwrap();
    let mut b = Client::connect(r, 2).unwrap();
    for k in 0..2 {
        a.call(&[1, k]).unwrap();
        b.call(&[2, k]).unwrap();
    }
    (a, b)
}

/// Serves everything the server has, then publishes its cursor as `tail`.
fn serve_all(server: &mut Server<'_, Req, Resp>, now: u64) -> usize {
    server.poll(now);
    let mut n = 0;
    while let Some(e) = server.recv() {
        server.reply(e.token, &[0, 0]).unwrap();
        n += 1;
    }
    server.advance_tail();
    n
}

#[test]
fn a_client_waiting_for_room_goes_on_when_tail_moves_and_not_when_it_goes_back() {
    // Single-threaded: the server runs inside the waiting client's `wait`.
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    assert!(core::ptr::eq(r.ring_control(), r.ctrl));
    let mut server = Server::new(r, SC);
    let (mut a, mut b) = fill_ring(r);
    let mut c = Client::connect(r, 3).unwrap();
    let mut waits = 0;
    c.call_with(&[3, 0], || {
        waits += 1;
        assert_eq!(serve_all(&mut server, 0), 4, "the full ring's four");
        Ok(())
    })
    .expect("room once the server moved tail");
    assert_eq!(waits, 1);
    assert_eq!(serve_all(&mut server, 1), 1, "c's request, at position 4");
    a.poll(|_, _| {});
    b.poll(|_, _| {});
    c.poll(|_, _| {});
    // c has seen tail 4. The ring fills again (positions 5..9); c's next call, at 9,
    // waits, and meanwhile tail reads 2: below what c saw, which no run produces.
    for k in 0..2 {
        a.call(&[1, 10 + k]).unwrap();
        b.call(&[2, 10 + k]).unwrap();
    }
    // The wait gives up after ten calls (so a client that missed the corruption fails
    // the test instead of spinning in it).
    let mut waits = 0;
    let got = c.call_with(&[3, 1], || {
        waits += 1;
        r.ctrl.tail.store(2, crate::sync::Ordering::Relaxed);
        if waits < 10 {
            Ok(())
        } else {
            Err(CallError::RingFull)
        }
    });
    assert_eq!(got, Err(CallError::RingCorrupt));
}

/// A hole at the cursor publishes the cursor as `tail` first, so the claimer, if it is
/// waiting for room, can go on and commit: the hole is then its own doing. Here the
/// server took the full ring without publishing `tail`, and runs only inside the
/// waiting client's `wait`.
#[test]
fn a_hole_publishes_tail_so_its_waiting_claimer_commits() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let mut server = Server::new(r, SC);
    let (_a, _b) = fill_ring(r);
    assert_eq!(server.poll(0), 4);
    for _ in 0..4 {
        server.recv().unwrap();
    }
    let mut c = Client::connect(r, 3).unwrap();
    let mut waits = 0;
    let got = c.call_with(&[3, 0], || {
        waits += 1;
        assert_eq!(server.poll(0), 0, "c's claim at 4, not committed");
        if waits < 10 {
            Ok(())
        } else {
            Err(CallError::RingFull)
        }
    });
    assert!(got.is_ok(), "{got:?}");
    assert_eq!(waits, 1, "the first hole poll published tail 4");
    assert_eq!(server.poll(1), 1);
    assert_eq!(server.recv().unwrap().payload, [3, 0]);
}

/// A hole is timed from the poll that first sees it at its position. A hole timed at an
/// earlier position (whose request `recv` then took without a poll between) does not
/// lend its start to the next one: the new claimer gets its full timeout.
#[test]
fn a_hole_at_a_new_position_is_timed_afresh() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let mut server = Server::new(r, SC);
    let mut a = Client::connect(r, 1).unwrap();
    let mut b = Client::connect(r, 2).unwrap();
    let ra = a.reserve().unwrap();
    assert_eq!(server.poll(0), 0);
    assert_eq!(server.hole(), Some((0, 0)));
    ra.commit(&[1, 0]).unwrap();
    assert_eq!(server.recv().unwrap().payload, [1, 0]);
    let rb = b.reserve().unwrap();
    assert_eq!(rb.position(), 1);
    // Past position 0's timeout (10) counted from 0. The idle polls read head on one
    // in 64, so 64 of them surely look at the hole.
    for _ in 0..64 {
        assert_eq!(server.poll(100), 0);
    }
    assert_eq!(
        server.hole(),
        Some((1, 100)),
        "timed from its own first poll"
    );
    rb.commit(&[2, 0])
        .expect("not abandoned: its timeout has not run");
    assert_eq!(server.poll(101), 1);
    assert_eq!(server.stats().abandoned, 0);
}

#[test]
fn a_waiting_claim_the_server_abandons_ends_abandoned_and_loses_nothing_else() {
    // c's position (4) waits for room; inside its wait the server serves the full ring,
    // finds 4 unclaimed past its hole timeout, abandons it and publishes tail 5. c sees
    // tail past its position: not corruption, and its commit reports the abandonment.
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let mut server = Server::new(r, SC);
    let (_a, _b) = fill_ring(r);
    let mut c = Client::connect(r, 3).unwrap();
    let mut now = 0;
    let got = c.call_with(&[3, 0], || {
        assert_eq!(serve_all(&mut server, now), 4);
        for _ in 0..2 {
            now += SC.hole_timeout;
            assert_eq!(server.poll(now), 0);
        }
        server.advance_tail();
        assert_eq!(server.stats().abandoned, 1);
        Ok(())
    });
    assert_eq!(got, Err(CallError::Abandoned));
    assert_eq!(c.in_flight(), 0);
    // c calls again, at position 5, and is served.
    c.call(&[3, 1]).unwrap();
    assert_eq!(serve_all(&mut server, now), 1);
    assert_eq!(c.poll(|_, _| {}), 1);
}

#[test]
fn from_parts_takes_parts_of_the_configured_sizes_only() {
    let header = Header::new::<Req, Resp>(&CFG);
    let ctrl = RingControl::new();
    let (d, n, k) = (
        CFG.ring_depth as usize,
        CFG.max_clients as usize,
        CFG.resp_depth as usize,
    );
    let ring: Vec<ReqSlot<Req>> = (0..d + 1).map(|_| ReqSlot::new()).collect();
    let resp: Vec<RespSlot<Resp>> = (0..n * k + 1).map(|_| RespSlot::new()).collect();
    let clients: Vec<ClientEntry> = (0..n + 1).map(|_| ClientEntry::new()).collect();
    let parts = |r: usize, s: usize, c: usize| {
        DelegRegion::from_parts(&header, &ctrl, &ring[..r], &resp[..s], &clients[..c])
            .map(|r| r.config())
    };
    assert_eq!(parts(d, n * k, n), Ok(CFG));
    for (r, s, c) in [
        (d + 1, n * k, n),
        (d - 1, n * k, n),
        (d, n * k + 1, n),
        (d, n * k - 1, n),
        (d, n * k, n + 1),
        (d, n * k, n - 1),
    ] {
        assert_eq!(
            parts(r, s, c),
            Err(LayoutError::BadConfig),
            "{r} request slots, {s} response slots, {c} client rows"
        );
    }
}

#[test]
fn a_claimer_that_started_writing_is_never_abandoned() {
    // Position 0's claimer has taken its slot (the claim word says "writing") but not
    // committed; at position 0 that word differs from "free" only in its low bit. The
    // server times the hole out, fails to abandon it, and takes the request once it is
    // committed.
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    assert_eq!(
        r.header().server_owner(),
        crate::shm::Owner::from(7),
        "init's"
    );
    let mut server = Server::new(r, SC);
    let mut a = Client::connect(r, 1).unwrap();
    let mut b = Client::connect(r, 2).unwrap();
    let res = a.reserve().unwrap();
    let (pos, slot_idx) = (res.position(), 0);
    assert_eq!(pos, 0);
    let lg = r.depth_log2;
    assert_eq!(Claim::writing(0, lg), Claim::free(0, lg) | 1);
    // What `commit` does, in two halves: the claim CAS now, the body and `committed`
    // after the timeout.
    r.slot(pos)
        .claim
        .store(Claim::writing(pos, lg), crate::sync::Ordering::Relaxed);
    core::mem::forget(res);
    b.call(&[2, 0]).unwrap();
    for now in [0, 10, 20, 40] {
        assert_eq!(server.poll(now), 0, "at {now}: a writer is waited for");
    }
    assert_eq!(server.stats().abandoned, 0);
    r.slot(pos).write_body(a.id(), slot_idx, &[1, 0]);
    r.slot(pos)
        .committed
        .store(1, crate::sync::Ordering::Release);
    assert_eq!(server.poll(50), 2);
    assert_eq!(server.recv().unwrap().payload, [1, 0]);
    assert_eq!(server.recv().unwrap().payload, [2, 0]);
}

#[test]
fn with_a_dead_client_every_idle_poll_reads_head() {
    // Idle polls read `head` one time in 64, but every time while a dead client may hold
    // the cursor: its hole is then skipped at the first poll that sees it, whatever the
    // idle count.
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let mut server = patient_server(r);
    let a = Client::connect(r, 1).unwrap();
    let mut b = Client::connect(r, 2).unwrap();
    assert_eq!(server.poll(0), 0, "idle poll 0, which samples head anyway");
    // a dies mid-write at position 0 and is evicted; b commits position 1.
    let (pos, a_id, _) = die_mid_write(r, a);
    assert_eq!(pos, 0);
    server.evict(a_id).unwrap();
    b.call(&[2, 0]).unwrap();
    // Idle poll 1, not a multiple of 64: the hole is seen, found dead and skipped.
    assert_eq!(server.poll(1), 1);
    let e = server.recv().unwrap();
    assert_eq!(e.payload, [2, 0]);
    assert_eq!(server.stats().abandoned, 1);
    server.reply(e.token, &[0, 0]).unwrap();
    b.poll(|_, _| {});
    // The skipped slot is free for its next lap: b's calls at positions 2..=5 (slot 0
    // again at 4) all land.
    for k in 1..5 {
        b.call(&[2, k]).unwrap();
        server.advance_tail();
        assert_eq!(server.poll(1 + k), 1, "position {}", 1 + k);
        let e = server.recv().unwrap();
        assert_eq!(e.payload, [2, k]);
        server.reply(e.token, &[0, 0]).unwrap();
        assert_eq!(b.poll(|_, _| {}), 1);
    }
}

/// The server's view of its client table (what the host's liveness checks read): one
/// row per id, with its state, epoch and owner, and a closed client's row freed by the
/// next poll.
#[test]
fn the_servers_client_rows_follow_connects_and_closes() {
    let mut mem = Mem::new(DelegRegion::<Req, Resp>::required_len(&CFG).unwrap());
    let r = region(&mut mem, &CFG);
    let mut server = Server::new(r, SC);
    let a = Client::connect(r, 7).unwrap();
    let _b = Client::connect(r, 8).unwrap();
    let rows = |s: &Server<Req, Resp>| {
        s.clients()
            .map(|i| (i.id, i.state, i.epoch, i.owner))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        rows(&server),
        [
            (0, ClientState::Active, 1, 7),
            (1, ClientState::Active, 1, 8),
            (2, ClientState::Free, 0, 0)
        ]
    );
    a.close();
    server.poll(0);
    assert_eq!(rows(&server)[0].1, ClientState::Free, "freed by the poll");
}

/// A response slot's `served` word counts the calls answered on it, whatever the
/// server's salt (the second server here: the first of a process may have salt 0).
/// It stored the sealed call for a while, which a later server on the region would
/// have read as a count.
#[test]
fn served_counts_the_calls_answered_on_a_slot() {
    let cfg = Config {
        max_clients: 1,
        ring_depth: 4,
        resp_depth: 1,
    };
    let len = DelegRegion::<Req, Resp>::required_len(&cfg).unwrap();
    let (mut m1, mut m2) = (Mem::new(len), Mem::new(len));
    let _first = Server::new(region(&mut m1, &cfg), SC);
    let r = region(&mut m2, &cfg);
    let mut server = Server::new(r, SC);
    let mut c = Client::connect(r, 1).unwrap();
    for k in 1..=3u64 {
        c.call(&[k, 0]).unwrap();
        assert_eq!(server.poll(k), 1);
        let e = server.recv().unwrap();
        server.advance_tail();
        server.reply(e.token, &[k, 1]).unwrap();
        assert_eq!(c.poll(|_, _| {}), 1);
        let served = r
            .resp_slot(0, 0)
            .served
            .load(crate::sync::Ordering::Relaxed);
        assert_eq!(u64::from(served), k);
    }
}

/// Two servers fed the same traffic hand out tokens with the same client, slot, epoch
/// and call: a token of one, answered on the other, is refused there (`Duplicate`: its
/// call is sealed by its own server, so it names no call taken there) and that server's
/// client gets nothing from it; each token then answers on its own server. Before the
/// seal the other server's client took the foreign answer as its own call's.
#[test]
fn a_token_answered_on_another_server_is_refused_there() {
    let len = DelegRegion::<Req, Resp>::required_len(&CFG).unwrap();
    let (mut m1, mut m2) = (Mem::new(len), Mem::new(len));
    let (r1, r2) = (region(&mut m1, &CFG), region(&mut m2, &CFG));
    let (mut s1, mut s2) = (Server::new(r1, SC), Server::new(r2, SC));
    let mut c1 = Client::connect(r1, 42).unwrap();
    let mut c2 = Client::connect(r2, 42).unwrap();
    c1.call(&[1, 0]).unwrap();
    c2.call(&[2, 0]).unwrap();
    assert_eq!((s1.poll(0), s2.poll(0)), (1, 1));
    let (t1, t2) = (s1.recv().unwrap().token, s2.recv().unwrap().token);
    let (raw1, raw2) = (t1.into_raw(), t2.into_raw());
    assert_eq!(
        (raw1.0, raw1.1, raw1.2),
        (raw2.0, raw2.1, raw2.2),
        "the premise: same client, slot and epoch"
    );
    assert_eq!(
        s2.reply(ReplyToken::from_raw(raw1), &[10, 0]),
        Err(ReplyError::Duplicate)
    );
    assert_eq!(
        c2.poll(|_, _| panic!("server 1's answer reached client 2")),
        0
    );
    s2.reply(ReplyToken::from_raw(raw2), &[20, 0]).unwrap();
    s1.reply(ReplyToken::from_raw(raw1), &[10, 0]).unwrap();
    let mut got = Vec::new();
    assert_eq!(c1.poll(|_, r| got.push(*r)), 1);
    assert_eq!(c2.poll(|_, r| got.push(*r)), 1);
    assert_eq!(got, [[10, 0], [20, 0]]);
}
