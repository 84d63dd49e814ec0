//! The failure modes an earlier implementation of this design had, each pinned here
//! (the compile-time ones are `compile_fail` doctests on `RecvHandle`): oversize replies
//! are refused, requests are served in arrival order, moving the context is sound, SRQ
//! WQEs are retired by the `wqe_counter` each completion reports, the idle-peer probe
//! keeps its interval. And a context of MiBs is built in place (`Context::init`), not
//! on the stack.

mod copyrpc_common;

use copyrpc_common::{big_stack, pattern, serve_echo, Opts, Pair};
use copyrpc_core::copyrpc::{Error, RecvHandle};

#[test]
fn oversize_reply_is_refused_and_the_handle_comes_back() {
    big_stack(|| {
        let mut p: Pair<1, 64, 128> = Pair::new(Opts::new(1, 4096));
        let (ea, _) = (p.a.eps[0], p.b.eps[0]);
        let before = p.b.ctx.credit_snapshot(p.b.eps[0]).unwrap();
        // Allowance 10 B: one 32 B block, so replies of up to 52 B fit (64 B padded).
        p.a.ctx.call_with_allowance(ea, b"ask", 10, 1).unwrap();
        let h = loop {
            p.a.ctx.poll(|_, _| unreachable!());
            p.b.ctx.poll(|_, _| unreachable!());
            p.step();
            if let Some(h) = p.b.ctx.recv() {
                break h;
            }
            assert!(p.steps < 1000);
        };
        assert_eq!(h.max_reply_len(&p.b.ctx), 52);
        let err = h.reply(&mut p.b.ctx, &[9; 53]).unwrap_err();
        assert_eq!(err.error, Error::ReplyTooLarge);
        let h = err.handle.expect("the request can still be answered");
        let mid = p.b.ctx.credit_snapshot(p.b.eps[0]).unwrap();
        assert_eq!(mid.send_producer, before.send_producer, "nothing written");
        assert_eq!(mid.unanswered_requests, 1);
        h.reply(&mut p.b.ctx, &[9; 52]).unwrap();
        let mut got = Vec::new();
        while got.is_empty() {
            p.b.ctx.poll(|_, _| unreachable!());
            p.a.ctx.poll(|k, r| got.push((k, r.unwrap().to_vec())));
            p.step();
            assert!(p.steps < 2000);
        }
        assert_eq!(got, vec![(1, vec![9; 52])]);
    });
}

#[test]
fn requests_are_served_in_arrival_order() {
    big_stack(|| {
        let mut p: Pair<3, 256, 128> = Pair::new(Opts::new(3, 4096));
        let mut order = Vec::new();
        let mut held = Vec::new();
        let mut k = 0u64;
        while order.len() < 600 {
            // Round-robin over the endpoints, one poll (one batch each) per round, so
            // batches of the three endpoints arrive interleaved.
            for i in 0..3 {
                for _ in 0..2 {
                    if p.a
                        .ctx
                        .call_with_allowance(p.a.eps[i], &k.to_le_bytes(), 8, k)
                        .is_ok()
                    {
                        k += 1;
                    }
                }
                p.a.ctx.poll(|_, r| {
                    r.unwrap();
                });
            }
            p.step();
            p.b.ctx.poll(|_, _| unreachable!());
            while let Some(h) = p.b.ctx.recv() {
                let n = u64::from_le_bytes(h.data(&p.b.ctx).try_into().unwrap());
                order.push((h.endpoint().0, n));
                held.push(h);
            }
            // Answer the older half only: the rest stay held across batches.
            let keep = held.len() / 2;
            for h in held.drain(..held.len() - keep) {
                h.reply(&mut p.b.ctx, b"ok").unwrap();
            }
            assert!(p.steps < 20_000);
        }
        // Per endpoint, requests come out in the order they were called, and across
        // endpoints in the order their batches arrived: a call made in a later round
        // is never served before one of an earlier round.
        for i in 0..3u16 {
            let seq: Vec<u64> = order.iter().filter(|o| o.0 == i).map(|o| o.1).collect();
            assert!(seq.windows(2).all(|w| w[0] < w[1]), "endpoint {i}: {seq:?}");
        }
        let rounds: Vec<u64> = order.iter().map(|o| o.1 / 6).collect();
        assert!(
            rounds.windows(2).all(|w| w[0] <= w[1]),
            "later rounds never overtake earlier ones"
        );
    });
}

#[test]
// A new allocation (a new address for the context) is the point of the test.
#[allow(clippy::replace_box)]
fn moving_the_context_mid_traffic_is_sound() {
    big_stack(|| {
        let mut p: Pair<1, 64, 128> = Pair::new(Opts::new(1, 4096));
        let ea = p.a.eps[0];
        let mut got = Vec::new();
        for round in 0..6u64 {
            for j in 0..5 {
                let k = round * 10 + j;
                p.a.ctx
                    .call_with_allowance(ea, &pattern(k, 40), 40, k)
                    .unwrap();
            }
            p.a.ctx.poll(|_, _| unreachable!());
            // Move both contexts out of their boxes and into new ones, while calls,
            // requests and batches are in flight; a spacer keeps the old slot taken,
            // so the new box lands elsewhere.
            let old = &*p.a.ctx as *const _ as usize;
            let a = *p.a.ctx;
            let b = *p.b.ctx;
            let spacer = vec![0u8; std::mem::size_of_val(&a)];
            p.a.ctx = Box::new(a);
            p.b.ctx = Box::new(b);
            assert_ne!(&*p.a.ctx as *const _ as usize, old);
            drop(spacer);
            for _ in 0..100 {
                p.a.ctx.poll(|k, r| got.push((k, r.unwrap().to_vec())));
                p.b.ctx.poll(|_, _| unreachable!());
                serve_echo(&mut p.b.ctx);
                p.step();
            }
        }
        assert_eq!(got.len(), 30);
        for (k, bytes) in got {
            assert_eq!(bytes, pattern(k, 40));
        }
    });
}

#[test]
fn srq_wqes_are_retired_by_the_reported_wqe_counter() {
    big_stack(|| {
        let mut o = Opts::new(2, 4096);
        // Seven receive WQEs for hundreds of batches: every one is recycled many times,
        // and a WQE returned to the wrong slot would corrupt the free list at once.
        o.srq_wqe_cnt = 8;
        let mut p: Pair<2, 64, 128> = Pair::new(o);
        let mut done = 0;
        while done < 2_000 {
            for i in 0..2 {
                let _ = p.a.ctx.call_with_allowance(p.a.eps[i], b"srq", 8, 0);
            }
            p.a.ctx.poll(|_, r| {
                r.unwrap();
                done += 1;
            });
            p.b.ctx.poll(|_, _| unreachable!());
            serve_echo(&mut p.b.ctx);
            p.step();
            assert!(p.steps < 200_000, "stalled\n{}", p.dump());
        }
        for s in [&p.a, &p.b] {
            let st = s.ctx.stats();
            assert_eq!(st.srq_freed, st.batches_received, "one free per completion");
            assert!(st.srq_reposted > 100);
            assert_eq!(st.endpoints_failed, 0);
        }
    });
}

#[test]
fn a_call_left_unanswered_is_probed_every_interval_and_idle_polls_post_nothing() {
    big_stack(|| {
        let mut o = Opts::new(2, 4096);
        o.cfg.probe_interval = 16;
        let mut p: Pair<2, 64, 128> = Pair::new(o);
        // Endpoint 1 carries one call that B takes and holds; endpoint 0 stays idle.
        p.a.ctx.call(p.a.eps[1], b"hold", 7).unwrap();
        let mut held = None;
        for _ in 0..200 {
            p.a.ctx.poll(|_, _| unreachable!("held"));
            p.b.ctx.poll(|_, _| unreachable!("B makes no calls"));
            if held.is_none() {
                held = p.b.ctx.recv();
            }
            p.step();
        }
        let h = held.expect("the request arrived");
        let probes = p.a.ctx.stats().probes_posted;
        // A probe every 16 polls without news, each after the previous READ completed:
        // polls with nothing to send still count while the call is pending.
        assert!((8..=13).contains(&probes), "{probes} probes in 200 polls");
        assert_eq!(
            p.a.ctx.stats().reads_posted,
            probes,
            "the idle endpoint reads nothing"
        );
        assert_eq!(p.b.ctx.stats().probes_posted, 0, "B has nothing pending");
        h.reply(&mut p.b.ctx, b"late").unwrap();
        let mut got = Vec::new();
        while got.is_empty() {
            p.b.ctx.poll(|_, _| unreachable!());
            p.a.ctx.poll(|k, r| got.push((k, r.unwrap().to_vec())));
            p.step();
            assert!(p.steps < 1000);
        }
        assert_eq!(got, vec![(7, b"late".to_vec())]);
        // Nothing pending, nothing to send: further polls post nothing at all.
        let (posted, reads) = (p.a.ctx.stats().batches_posted, p.a.ctx.stats().reads_posted);
        for _ in 0..200 {
            assert_eq!(p.a.ctx.poll(|_, _| unreachable!()), 0);
            p.b.ctx.poll(|_, _| unreachable!());
            p.step();
        }
        let s = p.a.ctx.stats();
        assert!(s.batches_posted <= posted + 1, "at most one credit batch");
        assert_eq!(s.reads_posted, reads);
    });
}

#[test]
fn a_call_after_a_long_quiet_spell_is_probed_only_after_its_interval() {
    big_stack(|| {
        let mut o = Opts::new(1, 4096);
        o.cfg.probe_interval = 16;
        let mut p: Pair<1, 64, 128> = Pair::new(o);
        let turn = |p: &mut Pair<1, 64, 128>| {
            p.a.ctx.poll(|_, _| unreachable!("B holds the call"));
            p.b.ctx.poll(|_, _| unreachable!("B makes no calls"));
            p.step();
        };
        // 1000 polls with nothing pending: the probe clock runs, nothing is due.
        for _ in 0..1000 {
            turn(&mut p);
        }
        assert_eq!(p.a.ctx.stats().probes_posted, 0);
        // A call B takes and holds. The polls before it do not count toward its probe:
        // none goes out while the batch is sent, nor in the 15 polls after it.
        p.a.ctx.call(p.a.eps[0], b"hold", 1).unwrap();
        let mut held = None;
        for _ in 0..15 {
            turn(&mut p);
            held = held.or_else(|| p.b.ctx.recv());
        }
        assert_eq!(p.a.ctx.stats().probes_posted, 0, "probed too early");
        // Then it comes, within a quarter interval of being due (the probe sweep).
        for _ in 0..6 {
            turn(&mut p);
        }
        assert_eq!(p.a.ctx.stats().probes_posted, 1);
        let h = held.expect("the request arrived");
        h.reply(&mut p.b.ctx, b"late").unwrap();
    });
}

#[test]
fn a_large_context_is_built_in_place_on_a_small_stack() {
    use copyrpc_core::copyrpc::{Context, Queues};
    use mlx5_raw::{CqDesc, SrqDesc};
    // 64 endpoints x 512 request entries (16 KiB each) and 4096 pending calls: over
    // 1 MiB of context. `Context::init` into a heap slot never passes it through this
    // thread's 256 KiB stack; built by value (`Context::new`) it would overflow it and
    // abort the test binary. The queues are plain zeroed memory, as a fresh CQ and SRQ
    // are; nothing is posted to them.
    type Big = Context<u64, 64, 4096, 512>;
    assert!(std::mem::size_of::<Big>() > 1 << 20);
    std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(|| {
            let (srq_cnt, cqe_cnt) = (64u32, 128u32);
            let mut srq = vec![0u64; srq_cnt as usize * 64 / 8];
            let mut scq = vec![0u64; cqe_cnt as usize * 64 / 8];
            let mut rcq = vec![0u64; cqe_cnt as usize * 64 / 8];
            let mut dbrecs = vec![0u32; 48];
            let dbrec = dbrecs.as_mut_ptr();
            let cq = |buf: &mut Vec<u64>, db: usize, cqn: u32| CqDesc {
                buf: buf.as_mut_ptr().cast(),
                cqe_cnt,
                cqe_size: 64,
                dbrec: dbrec.wrapping_add(db),
                cqn,
            };
            let queues = Queues {
                srq: SrqDesc {
                    buf: srq.as_mut_ptr().cast(),
                    stride: 64,
                    wqe_cnt: srq_cnt,
                    dbrec: dbrec.wrapping_add(32),
                    head: 0,
                    tail: srq_cnt - 1,
                    srqn: 1,
                },
                srq_lkey: 7,
                send_cq: cq(&mut scq, 0, 2),
                recv_cq: cq(&mut rcq, 16, 3),
            };
            let mut slot = Box::<Big>::new_uninit();
            // SAFETY: the buffers are fresh, zeroed, outlive the context (dropped after
            // it, below), and nothing else (no device) touches them.
            let ctx = unsafe { Context::init(&mut slot, &queues) }.unwrap();
            assert_eq!(ctx.pending_calls(), 0);
            assert_eq!(
                ctx.poll(|_, _| unreachable!()),
                0,
                "empty queues, empty poll"
            );
            assert!(ctx.recv().is_none());
            // SAFETY: `init` returned Ok.
            let ctx = unsafe { slot.assume_init() };
            drop(ctx);
            drop((srq, scq, rcq, dbrecs));
        })
        .unwrap()
        .join()
        .unwrap();
}

/// A `RecvHandle` names the endpoint its request came in on and the call id its caller
/// was given, and survives `into_raw` / `from_raw` (how the C ABI keeps it): the rebuilt
/// handle reads the same bytes and its reply reaches the caller. A reply through a raw
/// handle whose call id does not match the request at its sequence number is refused as
/// stale, as is one through a handle already answered (which reads no bytes).
#[test]
fn a_recv_handle_names_its_call_and_survives_a_raw_round_trip() {
    big_stack(|| {
        let mut p: Pair<2, 64, 128> = Pair::new(Opts::new(2, 4096));
        let (ea, eb) = (p.a.eps[1], p.b.eps[1]);
        // Three calls, so the last one's call id and sequence number are neither 0 nor 1.
        let mut ids = Vec::new();
        for k in 0..3u64 {
            ids.push(p.a.ctx.call(ea, &pattern(k, 20), k).unwrap());
        }
        let mut handles = Vec::new();
        while handles.len() < 3 {
            p.a.ctx.poll(|_, _| unreachable!());
            p.b.ctx.poll(|_, _| unreachable!());
            p.step();
            while let Some(h) = p.b.ctx.recv() {
                handles.push(h);
            }
            assert!(p.steps < 1000, "stalled\n{}", p.dump());
        }
        for (h, &id) in handles.iter().zip(&ids) {
            assert_eq!((h.endpoint(), h.call_id()), (eb, id));
        }
        let last = handles.pop().unwrap();
        let raw = last.into_raw();
        assert_eq!((raw.0, raw.2), (eb.0, ids[2]));
        assert!(
            raw.1 >= 2,
            "the third request's sequence number, got {}",
            raw.1
        );
        // The same sequence number with another call id is not this request.
        let (ep, seq, id) = raw;
        let wrong = RecvHandle::from_raw(&p.b.ctx, (ep, seq, id ^ 1));
        let err = wrong.reply(&mut p.b.ctx, b"no").unwrap_err();
        assert_eq!(err.error, Error::StaleHandle);
        // On an endpoint index the context does not have: refused too.
        let nowhere = RecvHandle::from_raw(&p.b.ctx, (7, seq, id));
        assert_eq!(nowhere.data(&p.b.ctx), b"");
        let err = nowhere.reply(&mut p.b.ctx, b"no").unwrap_err();
        assert_eq!(err.error, Error::StaleHandle);
        let h = RecvHandle::from_raw(&p.b.ctx, raw);
        assert_eq!(h.data(&p.b.ctx), &pattern(2, 20)[..]);
        h.reply(&mut p.b.ctx, b"two").unwrap();
        let again = RecvHandle::from_raw(&p.b.ctx, raw);
        assert_eq!(again.data(&p.b.ctx), b"", "an answered request is gone");
        assert_eq!(
            again.reply(&mut p.b.ctx, b"twice").unwrap_err().error,
            Error::StaleHandle
        );
        for h in handles {
            h.reply(&mut p.b.ctx, b"early").unwrap();
        }
        let mut got = Vec::new();
        while got.len() < 3 {
            p.b.ctx.poll(|_, _| unreachable!());
            p.a.ctx.poll(|k, r| got.push((k, r.unwrap().to_vec())));
            p.step();
            assert!(p.steps < 2000, "stalled\n{}", p.dump());
        }
        got.sort();
        assert_eq!(
            got,
            vec![
                (0, b"early".to_vec()),
                (1, b"early".to_vec()),
                (2, b"two".to_vec())
            ]
        );
    });
}

/// A handle answered on a context other than the one that received it is refused as
/// stale and comes back, and reads nothing there, even when that context holds a live
/// request with the same endpoint, sequence number and call id (two contexts serving
/// the same traffic in step): before handles knew their context, it answered that
/// request with the other one's reply.
#[test]
fn a_handle_answered_on_another_context_is_refused_there() {
    big_stack(|| {
        let mut p: Pair<1, 64, 128> = Pair::new(Opts::new(1, 4096));
        let mut q: Pair<1, 64, 128> = Pair::new(Opts::new(1, 4096));
        let take = |x: &mut Pair<1, 64, 128>, payload: &[u8]| {
            x.a.ctx.call(x.a.eps[0], payload, 0).unwrap();
            loop {
                x.a.ctx.poll(|_, _| unreachable!());
                x.b.ctx.poll(|_, _| unreachable!());
                x.step();
                if let Some(h) = x.b.ctx.recv() {
                    break h;
                }
                assert!(x.steps < 1000, "stalled\n{}", x.dump());
            }
        };
        let hp = take(&mut p, b"to p");
        let hq = take(&mut q, b"to q");
        let (rp, rq) = (hp.into_raw(), hq.into_raw());
        assert_eq!(
            rp, rq,
            "the premise: the two requests' raw handles coincide"
        );
        let (hp, hq) = (
            RecvHandle::from_raw(&p.b.ctx, rp),
            RecvHandle::from_raw(&q.b.ctx, rq),
        );
        assert_eq!(hp.data(&q.b.ctx), b"", "p's handle reads nothing on q");
        assert_eq!(hp.max_reply_len(&q.b.ctx), 0);
        let err = hp.reply(&mut q.b.ctx, b"p's answer").unwrap_err();
        assert_eq!(err.error, Error::StaleHandle);
        let hp = err.handle.expect("a stale handle comes back");
        // Each request is still its own context's, and answered with its own reply.
        assert_eq!(hq.data(&q.b.ctx), b"to q");
        hq.reply(&mut q.b.ctx, b"q's answer").unwrap();
        hp.reply(&mut p.b.ctx, b"p's answer").unwrap();
        for (x, want) in [(&mut p, b"p's answer"), (&mut q, b"q's answer")] {
            let mut got = Vec::new();
            while got.is_empty() {
                x.b.ctx.poll(|_, _| unreachable!());
                x.a.ctx.poll(|_, r| got.push(r.unwrap().to_vec()));
                x.step();
                assert!(x.steps < 2000, "stalled\n{}", x.dump());
            }
            assert_eq!(got, vec![want.to_vec()]);
        }
    });
}

/// `Context::qpn` is the endpoint's own QP (the number its peer connects to), a
/// different one for each endpoint.
#[test]
fn qpn_is_each_endpoints_own_qp_number() {
    big_stack(|| {
        let p: Pair<3, 64, 128> = Pair::new(Opts::new(3, 4096));
        let mut seen = std::collections::BTreeSet::new();
        for side in [&p.a, &p.b] {
            for &ep in &side.eps {
                let qpn = side.ctx.qpn(ep).unwrap();
                assert_eq!(qpn, side.ctx.local_info(ep).unwrap().qpn);
                assert!(seen.insert(qpn), "QP number {qpn} twice");
            }
        }
        assert_eq!(seen.len(), 6);
    });
}

/// A payload that fits the ring but not beside a skipped lap tail: each size is called
/// and answered 20 times in a row on a 4 KiB ring, retrying `RingFull`. A call that must
/// wrap was refused for ever at some lap positions (1 500 B: two round trips, then
/// `RingFull` with nothing in flight); it now wraps ahead and goes out from the next
/// lap. Sizes from 500 B (no wrap trouble) to the largest a fresh lap takes beside 2R.
#[test]
fn every_size_a_fresh_lap_takes_keeps_going_round_the_ring() {
    big_stack(|| {
        for len in [500usize, 980, 1100, 1500, 1800, 1950] {
            let mut p: Pair<1, 16, 128> = Pair::new(Opts::new(1, 4096));
            let ea = p.a.eps[0];
            let payload = vec![7u8; len];
            for round in 0..20u64 {
                let mut tries = 0;
                while let Err(e) = p.a.ctx.call_with_allowance(ea, &payload, 0, round) {
                    assert_eq!(e.error, Error::RingFull, "len {len} round {round}");
                    tries += 1;
                    assert!(
                        tries < 2000,
                        "len {len}: round {round} refused {tries} times: {:?}",
                        p.a.ctx.credit_snapshot(ea)
                    );
                    p.a.ctx.poll(|_, _| {});
                    p.b.ctx.poll(|_, _| {});
                    serve_echo(&mut p.b.ctx);
                    p.step();
                }
                let mut got = None;
                while got.is_none() {
                    p.a.ctx.poll(|k, r| got = Some((k, r.is_ok())));
                    p.b.ctx.poll(|_, _| {});
                    serve_echo(&mut p.b.ctx);
                    p.step();
                    assert!(p.steps < 1_000_000, "len {len}: no answer\n{}", p.dump());
                }
                assert_eq!(
                    got,
                    Some((round, true)),
                    "len {len}: round {round}'s answer"
                );
            }
        }
    });
}

/// One side fails its endpoint (`fail_endpoint`: its application saw the peer as
/// dead, or gave up). The other side's pending call must end, with `EndpointFailed`,
/// although the failed side's QP still answers READs: its next liveness probe reads
/// the mark the failed endpoint exports.
#[test]
fn a_peer_that_fails_its_endpoint_ends_our_pending_calls() {
    big_stack(|| {
        let mut p: Pair<1, 64, 128> = Pair::new(Opts::new(1, 4096));
        let (ea, eb) = (p.a.eps[0], p.b.eps[0]);
        p.b.ctx.fail_endpoint(eb).unwrap();
        p.a.ctx.call(ea, b"anyone there?", 7).unwrap();
        let mut got = None;
        while got.is_none() {
            p.a.ctx.poll(|k, r| got = Some((k, r.map(<[u8]>::to_vec))));
            p.b.ctx.poll(|_, _| {});
            p.step();
            assert!(p.steps < 400_000, "the call never ended\n{}", p.dump());
        }
        assert_eq!(got, Some((7, Err(Error::EndpointFailed))));
        assert_eq!(
            p.a.ctx.failure_cause(ea),
            Some(copyrpc_core::copyrpc::FailureCause::BadConsumerRead)
        );
    });
}

/// A peer that lives but never polls is not a failure copyrpc can see: its NIC still
/// answers the probes' READs, so our call waits and new calls are refused as
/// retryable (ring or credit) for as long as it stays so. The application's own
/// deadline and `fail_endpoint` end the wait: every pending call completes once.
#[test]
fn a_live_peer_that_never_polls_leaves_calls_waiting_until_the_application_fails_it() {
    big_stack(|| {
        let mut p: Pair<1, 64, 128> = Pair::new(Opts::new(1, 4096));
        let ea = p.a.eps[0];
        let mut sent = 0u64;
        let mut refused = None;
        let mut ended = Vec::new();
        // Many probe intervals of the device's time, b never polled.
        for _ in 0..200_000 {
            match p.a.ctx.call(ea, &[0u8; 200], sent) {
                Ok(_) => sent += 1,
                Err(e) => refused = Some(e.error),
            }
            p.a.ctx.poll(|k, r| ended.push((k, r.map(<[u8]>::to_vec))));
            p.step();
        }
        assert!(ended.is_empty(), "a call ended while b lived: {ended:?}");
        assert!(!p.a.ctx.is_failed(ea), "{:?}", p.a.ctx.failure_cause(ea));
        let e = refused.expect("the ring or the credit ran out");
        assert!(e.is_retryable(), "{e:?}");
        assert!(p.a.ctx.stats().probes_posted > 0, "no probe ran");
        p.a.ctx.fail_endpoint(ea).unwrap();
        p.a.ctx.poll(|k, r| ended.push((k, r.map(<[u8]>::to_vec))));
        ended.sort_by_key(|e| e.0);
        let want: Vec<_> = (0..sent).map(|k| (k, Err(Error::EndpointFailed))).collect();
        assert_eq!(ended, want, "every waiting call ends once");
    });
}

/// An endpoint failed before it was ever connected says so: `connect` and the
/// allowance query give `EndpointFailed`, not "already connected" or "not even an
/// empty response fits".
#[test]
fn an_endpoint_failed_before_connect_says_it_failed() {
    big_stack(|| {
        let mut o = Opts::new(1, 4096);
        o.connect = false;
        let mut p: Pair<1, 64, 128> = Pair::new(o);
        let (ea, eb) = (p.a.eps[0], p.b.eps[0]);
        let ib = p.b.ctx.local_info(eb).unwrap();
        p.a.ctx.fail_endpoint(ea).unwrap();
        assert_eq!(p.a.ctx.connect(ea, &ib), Err(Error::EndpointFailed));
        assert_eq!(
            p.a.ctx.max_response_allowance(ea),
            Err(Error::EndpointFailed)
        );
    });
}

/// Before `connect`, a call is refused as `NotConnected` (not `EndpointFailed`); a peer
/// whose recv ring is larger than our send ring is refused as `SendRingTooSmall` and
/// leaves the endpoint unconnected; the peer's own info connects, once.
#[test]
fn connect_refuses_a_peer_ring_larger_than_our_send_ring_and_calls_wait_for_it() {
    big_stack(|| {
        let mut o = Opts::new(1, 4096);
        o.connect = false;
        let mut p: Pair<1, 64, 128> = Pair::new(o);
        let (ea, eb) = (p.a.eps[0], p.b.eps[0]);
        let refused = p.a.ctx.call(ea, b"early", 1).unwrap_err();
        assert_eq!((refused.error, refused.user_data), (Error::NotConnected, 1));
        let (ia, ib) = (
            p.a.ctx.local_info(ea).unwrap(),
            p.b.ctx.local_info(eb).unwrap(),
        );
        let mut larger = ib;
        larger.recv_ring_size = 2 * ib.recv_ring_size;
        assert_eq!(p.a.ctx.connect(ea, &larger), Err(Error::SendRingTooSmall));
        assert_eq!(
            p.a.ctx.call(ea, b"x", 2).unwrap_err().error,
            Error::NotConnected
        );
        p.a.ctx.connect(ea, &ib).unwrap();
        p.b.ctx.connect(eb, &ia).unwrap();
        assert_eq!(p.a.ctx.connect(ea, &ib), Err(Error::AlreadyConnected));
        p.a.ctx.call(ea, b"now", 3).unwrap();
        let mut got = None;
        while got.is_none() {
            p.a.ctx.poll(|k, r| got = Some((k, r.unwrap().to_vec())));
            p.b.ctx.poll(|_, _| unreachable!());
            serve_echo(&mut p.b.ctx);
            p.step();
            assert!(p.steps < 1000, "stalled\n{}", p.dump());
        }
        assert_eq!(got, Some((3, b"now".to_vec())));
    });
}
