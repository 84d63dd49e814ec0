//! `poll_serve`: requests answered as they are parsed. Echo across endpoints and sizes
//! with the replies leaving in the same poll; requests a handler leaves are queued for
//! `recv` in arrival order, and nothing is offered past them; an oversize reply is
//! refused with the request handed back.
//!
//! `flush`: replies written after `poll` leave without another poll, and an endpoint
//! that failed is left, calls and all, for the next poll to complete.

mod copyrpc_common;

use copyrpc_common::{big_stack, pattern, serve_echo, Opts, Pair};
use copyrpc_core::copyrpc::{Error, Incoming};

/// Echoes `r` (cut to its allowance); panics if the reply is refused.
fn echo(r: Incoming<'_>) {
    let len = r.data().len().min(r.max_reply_len());
    if let Err(e) = r.reply_with(len, |req, out| out.copy_from_slice(&req[..out.len()])) {
        panic!("echo refused: {:?}", e.error);
    }
}

#[test]
fn echo_in_poll_across_endpoints_and_sizes_replies_in_the_same_poll() {
    big_stack(|| {
        let mut p: Pair<8, 256, 2048> = Pair::new(Opts::new(8, 65536));
        let sizes = [0usize, 1, 8, 20, 21, 52, 53, 200, 204, 220, 221, 1000, 4096];
        let mut want = std::collections::HashMap::new();
        let mut k = 0u64;
        for round in 0..20 {
            for (i, &ep) in p.a.eps.iter().enumerate() {
                let len = sizes[(round + i) % sizes.len()];
                let payload = pattern(k, len);
                p.a.ctx
                    .call_with_allowance(ep, &payload, len as u32, k)
                    .unwrap();
                want.insert(k, payload);
                k += 1;
            }
            let mut same_poll = 0;
            while !want.is_empty() {
                p.a.ctx.poll(|k, r| {
                    let got = r.expect("no failures");
                    assert_eq!(Some(got), want.remove(&k).as_deref(), "call {k}");
                });
                let posted = p.b.ctx.stats().batches_posted;
                let served = p.b.ctx.stats().served_in_poll;
                p.b.ctx
                    .poll_serve(|_, _| unreachable!("b makes no calls"), echo);
                if p.b.ctx.stats().served_in_poll > served {
                    // The replies written by this poll's handler left with its flush.
                    assert!(p.b.ctx.stats().batches_posted > posted);
                    same_poll += 1;
                }
                assert!(
                    p.b.ctx.recv().is_none(),
                    "every request was answered in poll"
                );
                p.step();
                assert!(p.steps < 100_000, "stalled\n{}", p.dump());
            }
            assert!(same_poll > 0);
        }
        assert_eq!(p.b.ctx.stats().served_in_poll, k);
        assert_eq!(p.a.ctx.pending_calls(), 0);
    });
}

#[test]
fn left_requests_queue_for_recv_in_arrival_order_and_nothing_is_offered_past_them() {
    big_stack(|| {
        let mut p: Pair<3, 256, 256> = Pair::new(Opts::new(3, 8192));
        let mut k = 0u64;
        let mut answered = std::collections::BTreeSet::new();
        let mut responses = 0u64;
        let (mut offered_total, mut left_total) = (0, 0);
        while k < 900 || responses < k {
            if k < 900 {
                'calls: for &ep in &p.a.eps {
                    for _ in 0..3 {
                        match p.a.ctx.call_with_allowance(ep, &k.to_le_bytes(), 8, k) {
                            Ok(_) => k += 1,
                            // Out of credit or ring: the next round retries `k`.
                            Err(e) if e.error.is_retryable() => break 'calls,
                            Err(e) => panic!("call {k}: {:?}", e.error),
                        }
                    }
                }
            }
            p.a.ctx.poll(|k, r| {
                assert_eq!(r.unwrap(), k.to_le_bytes());
                responses += 1;
            });
            // Leave every request whose number is 5 mod 7; after a left one, this
            // poll must offer nothing more (it queues behind).
            let mut offered = Vec::new();
            let mut left_at = None;
            p.b.ctx.poll_serve(
                |_, _| unreachable!(),
                |r| {
                    let n = u64::from_le_bytes(r.data().try_into().unwrap());
                    assert!(left_at.is_none(), "offered {n} after leaving {left_at:?}");
                    offered.push(n);
                    if n % 7 == 5 {
                        left_at = Some(n);
                        drop(r);
                    } else {
                        echo(r);
                        assert!(answered.insert(n), "{n} answered twice");
                    }
                },
            );
            offered_total += offered.len();
            // What was queued comes out in arrival order, starting with the left one.
            let mut queued = Vec::new();
            let mut last_on_ep = [None; 3];
            while let Some(h) = p.b.ctx.recv() {
                let n = u64::from_le_bytes(h.data(&p.b.ctx).try_into().unwrap());
                let ep = usize::from(h.endpoint().0);
                assert!(last_on_ep[ep] < Some(n), "endpoint {ep}: {n} out of order");
                last_on_ep[ep] = Some(n);
                queued.push(n);
                h.reply(&mut p.b.ctx, &n.to_le_bytes()).unwrap();
                assert!(answered.insert(n), "{n} answered twice");
            }
            if let Some(n) = left_at {
                left_total += 1;
                assert_eq!(queued.first(), Some(&n), "the left request heads the queue");
            } else {
                assert!(queued.is_empty(), "nothing left, nothing queued");
            }
            p.step();
            assert!(p.steps < 100_000, "stalled\n{}", p.dump());
        }
        assert_eq!(answered.len() as u64, k, "every request answered once");
        assert!(offered_total > 0 && left_total > 10, "both paths ran");
        assert_eq!(p.a.ctx.pending_calls(), 0);
    });
}

#[test]
fn oversize_reply_in_poll_is_refused_and_the_request_comes_back() {
    big_stack(|| {
        let mut p: Pair<1, 64, 128> = Pair::new(Opts::new(1, 4096));
        let ea = p.a.eps[0];
        // Allowance 10 B: one 32 B block, so replies of up to 52 B fit.
        p.a.ctx.call_with_allowance(ea, b"first", 10, 1).unwrap();
        p.a.ctx.call_with_allowance(ea, b"second", 10, 2).unwrap();
        let mut seen = 0;
        while seen < 2 {
            p.a.ctx.poll(|_, _| unreachable!("no reply yet"));
            let before = p.b.ctx.credit_snapshot(p.b.eps[0]).unwrap();
            p.b.ctx.poll_serve(
                |_, _| unreachable!(),
                |r| {
                    seen += 1;
                    assert_eq!(r.max_reply_len(), 52);
                    let err = r.reply(&[7; 53]).unwrap_err();
                    assert_eq!(err.error, Error::ReplyTooLarge);
                    let r = err.incoming.expect("the request comes back");
                    if r.data() == b"first" {
                        r.reply(&[7; 52]).unwrap();
                    }
                    // "second" is dropped unanswered: it queues for recv.
                },
            );
            if seen > 0 {
                let after = p.b.ctx.credit_snapshot(p.b.eps[0]).unwrap();
                // The 52 B reply (12 B header, 64 B padded) opened a batch (32 B).
                assert_eq!(after.send_producer, before.send_producer + 32 + 64);
                assert_eq!(after.unanswered_requests, 1);
            }
            p.step();
            assert!(p.steps < 1000);
        }
        let h = p.b.ctx.recv().expect("the dropped request was queued");
        assert_eq!(h.data(&p.b.ctx), b"second");
        h.reply(&mut p.b.ctx, b"late").unwrap();
        let mut got = Vec::new();
        while got.len() < 2 {
            p.b.ctx.poll(|_, _| unreachable!());
            p.a.ctx.poll(|k, r| got.push((k, r.unwrap().to_vec())));
            p.step();
            assert!(p.steps < 2000);
        }
        got.sort();
        assert_eq!(got, vec![(1, vec![7; 52]), (2, b"late".to_vec())]);
    });
}

#[test]
fn flush_sends_replies_written_after_poll_without_another_poll() {
    big_stack(|| {
        let mut p: Pair<2, 256, 2048> = Pair::new(Opts::new(2, 65536));
        let mut k = 0u64;
        for _ in 0..50 {
            let calls = k..k + 6;
            for i in calls.clone() {
                let ep = p.a.eps[i as usize % 2];
                p.a.ctx.call(ep, &pattern(i, 40), i).unwrap();
            }
            k += 6;
            // A sends; B polls until every request is queued for recv.
            let mut queued = 0;
            let mut handles = Vec::new();
            while queued < 6 {
                p.a.ctx.poll(|_, _| unreachable!("nothing answered yet"));
                p.step();
                p.b.ctx.poll(|_, _| unreachable!("b makes no calls"));
                while let Some(h) = p.b.ctx.recv() {
                    queued += 1;
                    handles.push(h);
                }
                assert!(p.steps < 100_000, "stalled\n{}", p.dump());
            }
            let posted = p.b.ctx.stats().batches_posted;
            for h in handles {
                let len = h.data(&p.b.ctx).len();
                h.reply_with(&mut p.b.ctx, len, |req, out| out.copy_from_slice(req))
                    .unwrap();
            }
            assert_eq!(
                p.b.ctx.stats().batches_posted,
                posted,
                "a reply only writes"
            );
            p.b.ctx.flush();
            assert_eq!(
                p.b.ctx.stats().batches_posted,
                posted + 2,
                "one batch per endpoint, posted by flush"
            );
            // B does not poll again: every response reaches A all the same.
            let mut got = Vec::new();
            while got.len() < 6 {
                p.step();
                p.a.ctx.poll(|i, r| {
                    assert_eq!(r.expect("no failures"), &pattern(i, 40)[..]);
                    got.push(i);
                });
                assert!(p.steps < 100_000, "stalled\n{}", p.dump());
            }
            got.sort_unstable();
            assert_eq!(got, calls.collect::<Vec<_>>());
        }
    });
}

#[test]
fn flush_leaves_a_failed_endpoint_for_poll_to_complete_once() {
    big_stack(|| {
        let mut p: Pair<2, 256, 2048> = Pair::new(Opts::new(2, 65536));
        let (dead, live) = (p.a.eps[0], p.a.eps[1]);
        for i in 0..4u64 {
            p.a.ctx.call(dead, &pattern(i, 8), i).unwrap();
        }
        p.a.ctx.call(live, &pattern(9, 8), 9).unwrap();
        let failed_before = p.a.ctx.stats().endpoints_failed;
        p.a.ctx.fail_endpoint(dead).unwrap();
        assert_eq!(p.a.ctx.stats().endpoints_failed, failed_before + 1);
        let posted = p.a.ctx.stats().batches_posted;
        p.a.ctx.flush();
        assert_eq!(
            p.a.ctx.stats().batches_posted,
            posted + 1,
            "the live endpoint's batch went out, the failed one's did not"
        );
        assert_eq!(p.a.ctx.pending_calls(), 5, "flush completes nothing");
        p.a.ctx.flush();
        assert_eq!(p.a.ctx.pending_calls(), 5);
        // The next poll completes each call of the failed endpoint once, with an error.
        let mut failed = Vec::new();
        p.a.ctx.poll(|i, r| {
            assert_eq!(r.err(), Some(Error::EndpointFailed), "call {i}");
            failed.push(i);
        });
        failed.sort_unstable();
        assert_eq!(failed, [0, 1, 2, 3]);
        // The live call is answered as usual.
        let mut got = None;
        while got.is_none() {
            p.step();
            serve_echo(&mut p.b.ctx);
            p.b.ctx.flush();
            p.b.ctx.poll(|_, _| unreachable!("b makes no calls"));
            p.a.ctx.poll(|i, r| {
                assert!(r.is_ok() && got.replace(i).is_none());
            });
            assert!(p.steps < 100_000, "stalled\n{}", p.dump());
        }
        assert_eq!((got, p.a.ctx.pending_calls()), (Some(9), 0));
    });
}

/// `Incoming` names the endpoint a request came in on and the call id its caller was
/// given, and `poll_serve` returns the completions it handled: one poll that finds
/// requests on two endpoints handles at least two (one receive per endpoint's batch), and
/// an idle one none.
#[test]
fn incoming_names_its_endpoint_and_call_id_and_poll_serve_counts_its_completions() {
    big_stack(|| {
        let mut p: Pair<3, 64, 128> = Pair::new(Opts::new(3, 4096));
        // Two calls on endpoint 2, one on endpoint 1: (b's endpoint, call id, payload).
        let mut want = Vec::new();
        for (i, n) in [(2usize, 10u64), (2, 11), (1, 12)] {
            let id =
                p.a.ctx
                    .call_with_allowance(p.a.eps[i], &n.to_le_bytes(), 8, n)
                    .unwrap();
            want.push((p.b.eps[i], id, n));
        }
        assert_ne!(want[0].1, want[1].1, "two calls, two call ids");
        p.a.ctx.poll(|_, _| unreachable!("nothing answered yet"));
        // Both batches arrive before b looks, so one poll finds both.
        for _ in 0..50 {
            p.step();
        }
        let mut seen = Vec::new();
        let handled = p.b.ctx.poll_serve(
            |_, _| unreachable!("b makes no calls"),
            |r| {
                let n = u64::from_le_bytes(r.data().try_into().unwrap());
                seen.push((r.endpoint(), r.call_id(), n));
                r.reply(&n.to_le_bytes()).unwrap();
            },
        );
        seen.sort_by_key(|s| s.2);
        assert_eq!(seen, want, "endpoint and call id of each request");
        assert!(
            handled >= 2,
            "two endpoints' batches handled, poll_serve said {handled}"
        );
        let mut got = 0;
        while got < 3 {
            p.step();
            p.b.ctx
                .poll_serve(|_, _| unreachable!(), |_| unreachable!("no more calls"));
            p.a.ctx.poll(|k, r| {
                assert_eq!(r.unwrap(), k.to_le_bytes());
                got += 1;
            });
            assert!(p.steps < 1000, "stalled\n{}", p.dump());
        }
        // Every send completion retired: nothing left for either side to do.
        for _ in 0..50 {
            p.step();
            p.a.ctx.poll(|_, _| unreachable!());
            p.b.ctx
                .poll_serve(|_, _| unreachable!(), |_| unreachable!());
        }
        assert_eq!(
            p.b.ctx
                .poll_serve(|_, _| unreachable!(), |_| unreachable!()),
            0,
            "an idle poll_serve handles nothing"
        );
    });
}
