//! What the data path does besides delivering answers, pinned where no answer would
//! show it: when the SRQ is refilled, which bytes a message's padding carries, how many
//! READs of the peer's consumer are in flight, and what an unknown QP's completions
//! count as.

mod copyrpc_common;

use copyrpc_common::{big_stack, pattern, serve_echo, Opts, Pair};
use copyrpc_core::copyrpc::{EndpointInfo, Error};
use copyrpc_core::wire::{
    emit_message, encode_imm, padded_message_size, to_response_id, FlowMetaRepr, FlowMetaView,
    FLOW_METADATA_SIZE,
};
use mlx5_raw::layout::FmCeSe;
use mlx5_raw::{Payload, Remote, Sge};

const RING: usize = 4096;

/// Stale bytes left in a send ring: any of them reaching a recv ring was sent.
const STALE: u8 = 0xa5;

/// The SRQ is refilled in batches, not per completion: the first refill comes with the
/// completion that takes the posted count below two thirds of the SRQ, and gives back
/// every WQE taken so far. (Per completion would cost a doorbell per batch received;
/// later would risk running the SRQ dry under a burst.)
#[test]
fn the_srq_is_refilled_once_a_third_of_it_is_used_and_then_to_the_full() {
    for srq in [64u32, 256] {
        big_stack(move || {
            let mut p: Pair<1, 64, 128> = Pair::new(Opts {
                srq_wqe_cnt: srq,
                ..Opts::new(1, RING)
            });
            // The SRQ's free list keeps one WQE as its tail: the rest is posted at start.
            let full = p.dev.srq_info(p.b.srqn).unwrap().available;
            assert_eq!(u32::from(full), srq - 1);
            // The smallest k with (full - k) * 3 < full * 2. `full` (63, 255) is a
            // multiple of 3, so a refill at exactly two thirds would come one sooner.
            let first_refill_at = u64::from(full / 3 + 1);
            let (ea, eb) = (p.a.eps[0], p.b.eps[0]);
            let mut refilled_at = None;
            for k in 0..first_refill_at + 4 {
                p.a.ctx.call(ea, b"srq", k).unwrap();
                let mut done = false;
                while !done {
                    p.a.ctx.poll(|u, r| {
                        assert_eq!((u, r.unwrap()), (k, &b"srq"[..]));
                        done = true;
                    });
                    let before = *p.b.ctx.stats();
                    // One batch per poll, so the refill's poll names its completion.
                    p.b.ctx
                        .poll_bounded(1, |_, _| unreachable!("b makes no calls"));
                    let after = *p.b.ctx.stats();
                    assert!(after.srq_freed - before.srq_freed <= 1);
                    if after.srq_reposted > before.srq_reposted {
                        assert_eq!(refilled_at, None, "one refill in this run");
                        refilled_at = Some(after.srq_freed);
                        assert_eq!(
                            after.srq_reposted, after.srq_freed,
                            "the refill gives back every WQE taken"
                        );
                        assert_eq!(p.dev.srq_info(p.b.srqn).unwrap().available, full);
                    } else if refilled_at.is_none() {
                        assert_eq!(after.srq_reposted, 0);
                    }
                    serve_echo(&mut p.b.ctx);
                    p.step();
                    assert!(p.steps < 100_000, "call {k} stalled\n{}", p.dump());
                }
            }
            assert_eq!(
                refilled_at,
                Some(first_refill_at),
                "SRQ of {srq}: refilled after the completion that left fewer than two \
                 thirds posted"
            );
            assert!(!p.b.ctx.is_failed(eb));
        });
    }
}

/// A message's padding is zeroed before it is sent, in calls and in replies: a ring's
/// old bytes never travel. (The receiver skips padding, so no answer shows it; a peer
/// that dumps or checksums what it received would.)
#[test]
fn padding_carries_zeros_not_the_ring_s_old_bytes() {
    big_stack(|| {
        let mut p: Pair<1, 64, 128> = Pair::new(Opts::new(1, RING));
        // Each side's endpoint 0: send ring at 0, recv ring at RING (`Pair`'s layout).
        p.a.data.write(0, &[STALE; RING]);
        p.b.data.write(0, &[STALE; RING]);
        let ea = p.a.eps[0];
        // Every length modulo the 32-byte alignment, staying within one lap.
        let mut sent = 0u64;
        let mut got = 0u64;
        for len in 1..=33usize {
            p.a.ctx
                .call(ea, &pattern(len as u64, len), len as u64)
                .unwrap();
            sent += 1;
            while got < sent {
                p.a.ctx.poll(|u, r| {
                    assert_eq!(r.unwrap(), &pattern(u, u as usize)[..]);
                    got += 1;
                });
                p.b.ctx.poll(|_, _| unreachable!("b makes no calls"));
                serve_echo(&mut p.b.ctx);
                p.step();
                assert!(p.steps < 100_000, "call {len} stalled\n{}", p.dump());
            }
        }
        assert_eq!(p.a.ctx.stats().wraps + p.b.ctx.stats().wraps, 0, "one lap");
        for (side, recv) in [
            ("b", p.b.data.read(RING, RING)),
            ("a", p.a.data.read(RING, RING)),
        ] {
            assert!(
                recv.iter().any(|&b| b != 0),
                "{side}'s recv ring got traffic"
            );
            let stale = recv.iter().filter(|&&b| b == STALE).count();
            // A pattern byte may equal STALE: allow exactly those.
            let expected = (1..=33u64)
                .map(|len| {
                    pattern(len, len as usize)
                        .iter()
                        .filter(|&&b| b == STALE)
                        .count()
                })
                .sum::<usize>();
            assert_eq!(stale, expected, "{side} received stale ring bytes");
        }
    });
}

/// However often a READ of the peer's consumer is wanted, one is in flight at a time:
/// a caller refused for ring room on every poll does not post a READ per poll.
#[test]
fn one_read_of_the_consumer_is_in_flight_at_a_time() {
    big_stack(|| {
        let mut p: Pair<1, 64, 128> = Pair::new(Opts::new(1, RING));
        let ea = p.a.eps[0];
        let mut refused = 0;
        // b never polls: its consumer stays at 0, so the ring fills and stays full, and
        // every refused call wants another READ.
        for k in 0..400u64 {
            match p.a.ctx.call_with_allowance(ea, &[7; 200], 0, k) {
                Ok(_) => {}
                Err(e) => {
                    assert_eq!(e.error, Error::RingFull, "call {k}");
                    refused += 1;
                }
            }
            p.a.ctx.poll(|_, _| unreachable!("b never answers"));
            let st = p.a.ctx.stats();
            assert!(
                st.reads_posted <= st.reads_completed + 1,
                "after call {k}: {} READs posted, {} completed",
                st.reads_posted,
                st.reads_completed
            );
            p.step();
        }
        let st = p.a.ctx.stats();
        assert!(refused > 300, "the ring stayed full ({refused} refusals)");
        assert!(
            st.reads_completed > 10,
            "READs went out and came back: {st:?}"
        );
        assert!(!p.a.ctx.is_failed(ea));
    });
}

/// Completions of a QP on `b`'s SRQ and CQs that is none of its endpoints (a QP the
/// application uses for something else) are counted as strays, one each, whatever their
/// opcode, and touch no endpoint; the SRQ WQE each consumed is freed.
#[test]
fn completions_of_a_qp_no_endpoint_owns_are_counted_as_strays_one_each() {
    big_stack(|| {
        let mut p: Pair<2, 64, 128> = Pair::new(Opts {
            raw_a0: true,
            raw_b0: true,
            ..Opts::new(2, RING)
        });
        let mut sq = p.raw_a.take().expect("a's first QP is raw");
        let remote = Remote {
            addr: p.b.scratch(0),
            rkey: p.b.keys.rkey,
        };
        // A WRITE_IMM (the opcode of a batch, read in brief) and a SEND (decoded in full).
        let mut batch = sq.batch();
        batch
            .rdma_write_imm(
                remote,
                Payload::inline(b"not a batch"),
                [0, 0, 0, 1],
                FmCeSe::CQ_UPDATE,
            )
            .unwrap();
        batch
            .send(Payload::inline(b"not copyrpc"), FmCeSe::CQ_UPDATE)
            .unwrap();
        batch.finish();
        let mut last = 0;
        for _ in 0..200 {
            p.a.ctx.poll(|_, _| unreachable!("a made no call"));
            p.b.ctx.poll(|_, _| unreachable!("b made no call"));
            let st = p.b.ctx.stats();
            assert!(st.stray_completions >= last && st.stray_completions <= 2);
            last = st.stray_completions;
            p.step();
        }
        let st = *p.b.ctx.stats();
        assert_eq!(st.stray_completions, 2, "one stray per completion");
        assert_eq!(st.srq_freed, 2, "each completion's SRQ WQE freed");
        assert_eq!((st.batches_received, st.endpoints_failed), (0, 0));
        assert_eq!(st.stray_responses, 0);
        // a's raw QP reports both on a's send CQ, which it cannot place either.
        assert_eq!(p.a.ctx.stats().stray_completions, 2);
        // The endpoints beside them still work.
        p.a.ctx.call(p.a.eps[0], b"ping", 1).unwrap();
        let mut done = false;
        while !done {
            p.a.ctx.poll(|u, r| {
                assert_eq!((u, r.unwrap()), (1, &b"ping"[..]));
                done = true;
            });
            p.b.ctx.poll(|_, _| unreachable!());
            serve_echo(&mut p.b.ctx);
            p.step();
            assert!(p.steps < 10_000, "the endpoint beside the strays stalled");
        }
    });
}

/// A response to a call the context never made (a confused or forged peer) is counted
/// as a stray response, one per message, and dropped: no callback sees it, the
/// endpoint goes on.
#[test]
fn responses_to_calls_never_made_are_counted_as_stray_and_dropped() {
    big_stack(|| {
        let mut o = Opts::new(1, RING);
        o.raw_a0 = true;
        let mut p: Pair<1, 64, 128> = Pair::new(o);
        // b's endpoint 0 is connected to a's raw QP, speaking copyrpc by hand.
        let eb = p.b.eps[0];
        let ring = RING as u64;
        let a_va = p.a.keys.va;
        let forged = EndpointInfo {
            qpn: p.a.qpns[0],
            recv_ring_addr: a_va + ring,
            recv_ring_rkey: p.a.keys.rkey,
            recv_ring_size: ring,
            consumer_addr: a_va + 2 * ring,
            consumer_rkey: p.a.keys.rkey,
            initial_credit: ring / 4,
        };
        p.b.ctx.connect(eb, &forged).unwrap();
        let b_recv = Remote {
            addr: p.b.keys.va + ring,
            rkey: p.b.keys.rkey,
        };
        // Two batches at the start of b's recv ring, the second with two responses.
        let mut pos = 0u64;
        let mut sq = p.raw_a.take().expect("a's first QP is raw");
        for ids in [&[7u32][..], &[8, 9]] {
            let mut bytes = vec![0u8; 256];
            FlowMetaRepr {
                ring_credit_return: 0,
                credit_grant: 0,
                message_count: ids.len() as u32,
            }
            .emit(&mut FlowMetaView::new_unchecked(
                &mut bytes[..FLOW_METADATA_SIZE as usize],
            ));
            let mut len = FLOW_METADATA_SIZE as usize;
            for &id in ids {
                len += emit_message(&mut bytes[len..], to_response_id(id), 0, b"forged").unwrap();
            }
            assert_eq!(
                len as u64,
                FLOW_METADATA_SIZE + ids.len() as u64 * padded_message_size(6)
            );
            let imm = encode_imm(len as u64).unwrap().to_bytes();
            let mut batch = sq.batch();
            let to = Remote {
                addr: b_recv.addr + pos,
                ..b_recv
            };
            batch
                .rdma_write_imm(to, Payload::inline(&bytes[..len]), imm, FmCeSe::CQ_UPDATE)
                .unwrap();
            batch.finish();
            pos += len as u64;
            for _ in 0..50 {
                p.b.ctx
                    .poll(|_, _| unreachable!("b made no call: nothing to answer"));
                assert!(p.b.ctx.recv().is_none(), "a response is no request");
                p.step();
            }
        }
        let st = *p.b.ctx.stats();
        assert_eq!(st.batches_received, 2);
        assert_eq!(st.stray_responses, 3, "one per response message");
        assert!(!p.b.ctx.is_failed(eb), "{:?}", p.b.ctx.failure_cause(eb));
    });
}

/// A peer whose batches keep arriving is alive: a caller waiting on it is not probed
/// while they come, however long its call waits, and is probed once they stop.
#[test]
fn a_peer_whose_batches_keep_arriving_is_not_probed() {
    big_stack(|| {
        let mut p: Pair<1, 64, 128> = Pair::new(Opts::new(1, RING));
        let (ea, eb) = (p.a.eps[0], p.b.eps[0]);
        let interval = 64; // `Opts::new`'s probe interval, in polls
        p.a.ctx.call_with_allowance(ea, b"held", 8, 0).unwrap();
        let mut held_by_b = Vec::new();
        let mut held_by_a = Vec::new();
        // b holds a's call and, every three quarters of the interval, makes a call of
        // its own that a holds: a sends nothing (no reply, no credit to return), it only
        // receives. (Eight calls: b's first credit pays for them.)
        let (polls, every) = (6 * interval, interval * 3 / 4);
        for i in 0..polls {
            if i % every == 0 {
                p.b.ctx.call_with_allowance(eb, b"tick", 8, i).unwrap();
            }
            p.a.ctx.poll(|_, _| unreachable!("b answers nothing"));
            p.b.ctx.poll(|_, _| unreachable!("a answers nothing"));
            held_by_a.extend(std::iter::from_fn(|| p.a.ctx.recv()));
            held_by_b.extend(std::iter::from_fn(|| p.b.ctx.recv()));
            p.step();
        }
        assert_eq!(held_by_b.len(), 1);
        assert!(held_by_a.len() as u64 >= polls / every - 1);
        let st = *p.a.ctx.stats();
        assert!(st.batches_received >= polls / every - 1);
        assert_eq!(st.probes_posted, 0, "a probed a peer that kept sending");
        // Once b stops, a's call has waited a quiet interval within a few more.
        for _ in 0..3 * interval {
            p.a.ctx.poll(|_, _| unreachable!("b answers nothing"));
            p.b.ctx.poll(|_, _| unreachable!("a answers nothing"));
            p.step();
        }
        assert!(
            p.a.ctx.stats().probes_posted > 0,
            "a never probed a quiet peer"
        );
        assert!(!p.a.ctx.is_failed(ea), "a probe of a live peer succeeds");
    });
}

/// A receiver whose send queue is full of its own raw operations when its caller runs
/// short of credit posts the credit-only batch once the queue has room, not before
/// (posting into a full queue would fail the endpoint), and a credit batch held back
/// for room is not a deferred flush (that counts batches and wraps held back).
#[test]
fn a_credit_batch_waits_for_send_queue_room_behind_raw_operations() {
    big_stack(|| {
        let mut o = Opts::new(1, RING);
        o.cfg.max_resp_reservation = RING as u64 * 3 / 8;
        o.sq_wqe_cnt = 16;
        // Each QP sends a packet per 20 steps: b's queue of raw writes drains slowly
        // while a's calls arrive.
        o.link.packet_ns = 20_000;
        o.ack_timeout_ns = 10_000_000;
        let mut p: Pair<1, 64, 128> = Pair::new(o);
        let (ea, eb) = (p.a.eps[0], p.b.eps[0]);
        let to_a = Remote {
            addr: p.a.scratch(0),
            rkey: p.a.keys.rkey,
        };
        let src = [Sge {
            addr: p.b.scratch(0),
            len: 8,
            lkey: p.b.keys.lkey,
        }];
        let mut raw = 0;
        // SAFETY: the gather entry lies in b's registered scratch area, which the test
        // never writes.
        while unsafe { p.b.ctx.post_rdma_write(eb, to_a, &src) }.is_ok() {
            raw += 1;
        }
        assert!(raw >= 8, "b's queue took {raw} raw writes");
        let mut held = Vec::new();
        let mut k = 0u64;
        let mut short_while_full = 0;
        while p.b.ctx.stats().credit_batches == 0 {
            if p.a.ctx.call_with_allowance(ea, b"held", 100, k).is_ok() {
                k += 1;
            }
            p.a.ctx.poll(|u, r| panic!("call {u} answered: {r:?}"));
            p.b.ctx
                .poll(|_, _| unreachable!("b's raw writes are no calls"));
            held.extend(std::iter::from_fn(|| p.b.ctx.recv()));
            if p.b.ctx.raw_pending(eb) == raw {
                let s = p.a.ctx.credit_snapshot(ea).unwrap();
                if s.peer_credit_balance < RING as u64 * 3 / 16 {
                    short_while_full += 1;
                }
            }
            p.step();
            assert!(!p.b.ctx.is_failed(eb), "{:?}", p.b.ctx.failure_cause(eb));
            assert!(p.steps < 20_000, "no credit batch\n{}", p.dump());
        }
        assert!(
            short_while_full > 0,
            "a ran short while b's queue was still full (the case under test)"
        );
        assert!(!p.b.ctx.is_failed(eb), "{:?}", p.b.ctx.failure_cause(eb));
        assert_eq!(p.b.ctx.stats().flushes_deferred, 0);
        // The grant lets a call again, with every request still held.
        let before = k;
        while k == before {
            if p.a.ctx.call_with_allowance(ea, b"held", 100, k).is_ok() {
                k += 1;
            }
            p.a.ctx.poll(|_, _| unreachable!("nothing is answered"));
            p.b.ctx.poll(|_, _| unreachable!());
            held.extend(std::iter::from_fn(|| p.b.ctx.recv()));
            p.step();
            assert!(p.steps < 40_000, "the grant never arrived\n{}", p.dump());
        }
        assert!(!p.b.ctx.is_failed(eb));
        assert_eq!(p.b.ctx.stats().flushes_deferred, 0);
    });
}

/// A send queue below `EndpointConfig::min_sq_bbs` (16 blocks with the default settings) is
/// refused when the endpoint is made, rather than holding a wanted credit-only batch
/// back later; the rig's `Pair::new` unwraps that refusal.
#[test]
#[should_panic(expected = "SqTooSmall")]
fn a_send_queue_below_its_minimum_is_refused() {
    let _p: Pair<1, 64, 128> = Pair::new(Opts {
        sq_wqe_cnt: 8,
        ..Opts::new(1, RING)
    });
}

/// A wrap made while the send queue is full queues its ranges, and they wait for room
/// like any batch: nothing is posted into a queue without room for it (that would fail
/// the endpoint), and once the device runs every call is answered, in order of the ring.
#[test]
fn wrap_ranges_made_while_the_send_queue_is_full_wait_for_room() {
    big_stack(|| {
        let mut p: Pair<1, 64, 128> = Pair::new(Opts {
            sq_wqe_cnt: 16,
            ..Opts::new(1, RING)
        });
        let ea = p.a.eps[0];
        let ring = RING as u64;
        let mut sent = 0u64;
        let mut got = 0u64;
        let run = |p: &mut Pair<1, 64, 128>, sent: u64, got: &mut u64| {
            while *got < sent {
                p.a.ctx.poll(|u, r| {
                    let r = r.unwrap();
                    assert_eq!(r, &pattern(u, 200)[..r.len()]);
                    *got += 1;
                });
                p.b.ctx.poll(|_, _| unreachable!("b makes no calls"));
                serve_echo(&mut p.b.ctx);
                p.step();
                assert!(p.steps < 100_000, "stalled\n{}", p.dump());
            }
        };
        // 256-byte batches of one call (four blocks each: four fill the queue), each
        // paying for an 8-byte answer. Echoes until a's producer is past five eighths of
        // the lap.
        let call = |p: &mut Pair<1, 64, 128>, k: u64| {
            p.a.ctx.call_with_allowance(ea, &pattern(k, 200), 8, k)
        };
        while p.a.ctx.credit_snapshot(ea).unwrap().send_producer % ring < ring * 5 / 8 {
            call(&mut p, sent).unwrap();
            sent += 1;
            run(&mut p, sent, &mut got);
        }
        // Device stopped: calls (one per poll) until a flush finds the queue full, then
        // more until one wraps the ring.
        let lap = |p: &Pair<1, 64, 128>| p.a.ctx.credit_snapshot(ea).unwrap().send_producer / ring;
        let first = lap(&p);
        let wraps = p.a.ctx.stats().wraps;
        while p.a.ctx.stats().flushes_deferred == 0 || lap(&p) == first {
            assert!(sent < 1_000, "no wrap behind a full queue");
            match call(&mut p, sent) {
                Ok(_) => sent += 1,
                Err(e) => panic!(
                    "call {sent} refused before the wrap: {e:?} {:?} {:?}",
                    p.a.ctx.credit_snapshot(ea),
                    p.a.ctx.stats()
                ),
            }
            p.a.ctx.poll(|_, _| unreachable!("the device is stopped"));
            assert!(!p.a.ctx.is_failed(ea), "{:?}", p.a.ctx.failure_cause(ea));
        }
        // A few more polls with the ranges queued and the queue full.
        for _ in 0..10 {
            p.a.ctx.poll(|_, _| unreachable!("the device is stopped"));
            assert!(!p.a.ctx.is_failed(ea), "{:?}", p.a.ctx.failure_cause(ea));
        }
        // The wrap's marker is not posted yet (`wraps` counts posted markers).
        assert_eq!(p.a.ctx.stats().wraps, wraps);
        run(&mut p, sent, &mut got);
        assert_eq!(p.a.ctx.stats().wraps, wraps + 1);
        assert!(!p.a.ctx.is_failed(ea));
        assert_eq!(p.a.ctx.endpoints_due(), 0);
    });
}
