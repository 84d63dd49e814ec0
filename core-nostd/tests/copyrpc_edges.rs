//! End-to-end edges of flow control nothing else drives: a receiver that never calls
//! keeps its caller going with metadata-only batches; a ring held at its credit edge
//! keeps every held request's bytes intact and refuses only what the invariant
//! forbids; an idle poll visits no endpoint; a grant held back by a stale view of the
//! caller's consumer goes out after a READ of it; a credit-only batch fits beside the
//! unsignaled blocks of the smallest send queue.

mod copyrpc_common;

use copyrpc_common::{big_stack, pattern, serve_echo, Opts, Pair, Rng};
use copyrpc_core::copyrpc::{CreditSnapshot, Error, RecvHandle};
use copyrpc_core::credit::{allowance_blocks, internal_allowance_for_blocks};
use copyrpc_core::wire::{padded_message_size, FLOW_METADATA_SIZE};

const RING: u64 = 4096;

/// The payload of call `k`: its length and every byte depend on `k`, so a request
/// overwritten by a later one (or by anything else) no longer matches.
fn payload(k: u64) -> Vec<u8> {
    let len = 24 + (k as usize * 37) % 200;
    (0..len)
        .map(|i| (k as usize).wrapping_mul(131).wrapping_add(i * 7) as u8)
        .collect()
}

/// The call a payload belongs to, checking every byte.
fn call_of(data: &[u8], calls: u64) -> Option<u64> {
    (0..calls).find(|&k| payload(k) == data)
}

fn snap<const E: usize, const C: usize, const R: usize>(
    s: &copyrpc_common::Side<E, C, R>,
    i: usize,
) -> CreditSnapshot {
    s.ctx.credit_snapshot(s.eps[i]).unwrap()
}

/// The receiver holds every request unanswered: the caller's first credit is spent and
/// nothing of the receiver's own (no reply, no call) could carry more. With a
/// reservation cap above the quarter of the ring the first credit is, the receiver may
/// grant more, and it must do so in a batch carrying only metadata, or the caller stays
/// refused until a reply. (Three eighths: a cap near half the ring would let the caller's
/// own reservation for the receiver, which never calls, crowd its calls out of the ring.)
#[test]
fn a_receiver_that_never_calls_sends_credit_only_batches_to_a_caller_short_of_credit() {
    big_stack(|| {
        let mut o = Opts::new(1, RING as usize);
        o.cfg.max_resp_reservation = RING * 3 / 8;
        let mut p: Pair<1, 64, 128> = Pair::new(o);
        let ea = p.a.eps[0];
        let initial = snap(&p.a, 0).peer_credit_balance;
        assert_eq!(
            initial,
            RING / 4,
            "the first credit is the quarter of the ring"
        );
        let cost = internal_allowance_for_blocks(allowance_blocks(100));
        let mut held: Vec<RecvHandle> = Vec::new();
        let mut k = 0u64;
        let mut refused = 0;
        // Credit for more than the first grant's worth of calls, none of it from a reply,
        // until it runs out (the receiver tops the caller up to the cap as soon as it can,
        // and holds every call).
        while refused == 0 || k * cost <= initial {
            match p.a.ctx.call_with_allowance(ea, b"held", 100, k) {
                Ok(_) => k += 1,
                Err(e) => {
                    assert_eq!(e.error, Error::InsufficientCredit, "call {k}");
                    refused += 1;
                }
            }
            p.a.ctx.poll(|_, _| unreachable!("nothing is answered yet"));
            p.b.ctx.poll(|_, _| unreachable!());
            while let Some(h) = p.b.ctx.recv() {
                held.push(h);
            }
            p.step();
            assert!(
                p.steps < 5_000,
                "the caller stayed short of credit after {k} calls ({refused} refusals); \
                 the receiver sent {} credit-only batches\n{}",
                p.b.ctx.stats().credit_batches,
                p.dump()
            );
        }
        assert!(refused > 0, "the caller did run short of credit");
        // No response reached the caller (its callback would have panicked): the
        // credit came in batches without messages.
        assert!(
            p.b.ctx.stats().credit_batches > 0,
            "a metadata-only batch carried the grant"
        );
        // Now answer everything: the caller completes every call it made.
        let mut got = Vec::new();
        for h in held.drain(..) {
            h.reply(&mut p.b.ctx, b"done").unwrap();
        }
        while (got.len() as u64) < k {
            p.a.ctx.poll(|u, r| {
                assert_eq!(r.unwrap(), b"done");
                got.push(u);
            });
            p.b.ctx.poll(|_, _| unreachable!());
            while let Some(h) = p.b.ctx.recv() {
                h.reply(&mut p.b.ctx, b"done").unwrap();
            }
            p.step();
            assert!(p.steps < 10_000, "replies did not arrive\n{}", p.dump());
        }
        got.sort_unstable();
        assert_eq!(got, (0..k).collect::<Vec<_>>());
    });
}

/// Whether a refused call is one the invariant (or the balance) really forbids, as the
/// caller knows its counters: a refusal with room for even the worst-case advance is
/// one too many.
fn refusal_is_justified(s: &CreditSnapshot, error: Error, len: usize, allowance: u32) -> bool {
    match error {
        Error::InsufficientCredit => {
            s.peer_credit_balance < internal_allowance_for_blocks(allowance_blocks(allowance))
        }
        Error::RingFull => {
            // Metadata and message, or those plus the lap tail a wrap skips.
            let padded = padded_message_size(len as u32);
            let worst = 2 * (padded + FLOW_METADATA_SIZE);
            s.in_flight + worst + 2 * s.resp_reservation > RING
        }
        _ => false,
    }
}

/// The caller fills the receiver's ring while the receiver holds some requests for
/// many rounds and answers the others in random order. Every held request still reads
/// back byte for byte when finally answered (the consumer never passed an unanswered
/// one, so nothing overwrote it), `in_flight + 2R <= C` holds on both sides after every
/// step, the ring does reach its edge, and every refusal is one the invariant requires.
#[test]
fn a_ring_held_at_its_credit_edge_keeps_held_requests_intact_and_refuses_only_past_it() {
    big_stack(|| {
        let mut p: Pair<1, 256, 128> = Pair::new(Opts::new(1, RING as usize));
        let ea = p.a.eps[0];
        let mut rng = Rng(0x5eed_1234_abcd_0001);
        const CALLS: u64 = 600;
        // (call, handle, the round it arrived): the oldest are held longest.
        let mut held: Vec<(u64, RecvHandle, u64)> = Vec::new();
        let mut got: Vec<u64> = Vec::new();
        let (mut k, mut refusals, mut edge) = (0u64, 0u64, 0u64);
        let mut round = 0u64;
        while (got.len() as u64) < CALLS {
            round += 1;
            // Call until refused, checking each refusal against the counters.
            while k < CALLS {
                let data = payload(k);
                let allowance = 16 + (k % 5) as u32 * 16;
                let before = snap(&p.a, 0);
                match p.a.ctx.call_with_allowance(ea, &data, allowance, k) {
                    Ok(_) => k += 1,
                    Err(e) => {
                        assert!(
                            refusal_is_justified(&before, e.error, data.len(), allowance),
                            "call {k} refused with {:?} though the invariant allows it: {before:?}",
                            e.error
                        );
                        assert_eq!(snap(&p.a, 0), before, "a refused call changes nothing");
                        refusals += 1;
                        break;
                    }
                }
            }
            p.a.ctx.poll(|u, r| {
                let reply = r.expect("no call fails");
                assert_eq!(reply, &payload(u)[..reply.len()], "reply to {u}");
                got.push(u);
            });
            p.b.ctx.poll(|_, _| unreachable!());
            while let Some(h) = p.b.ctx.recv() {
                let call = call_of(h.data(&p.b.ctx), k).expect("a request arrives intact");
                held.push((call, h, round));
            }
            // Answer a random few, out of order; the oldest wait 40 rounds, so the
            // consumer stays behind them while the ring fills past them.
            let mut i = 0;
            while i < held.len() {
                let (call, _, since) = held[i];
                if round - since >= 40 || (round - since >= 2 && rng.below(4) == 0 && i > 0) {
                    let (call2, h, _) = held.swap_remove(i);
                    assert_eq!(call, call2);
                    let data = h.data(&p.b.ctx);
                    assert_eq!(
                        data,
                        &payload(call)[..],
                        "request {call}, held {} rounds, was overwritten",
                        round - since
                    );
                    let n = data.len().min(h.max_reply_len(&p.b.ctx));
                    h.reply_with(&mut p.b.ctx, n, |req, out| out.copy_from_slice(&req[..n]))
                        .unwrap();
                } else {
                    i += 1;
                }
            }
            p.step();
            for (s, side) in [(snap(&p.a, 0), "caller"), (snap(&p.b, 0), "receiver")] {
                assert!(
                    s.in_flight + 2 * s.resp_reservation <= RING,
                    "{side} broke in_flight + 2R <= C: {s:?}"
                );
            }
            let a = snap(&p.a, 0);
            // At the edge: not even the smallest call (a 32 B message and metadata)
            // would fit next to what is in flight and reserved.
            if a.in_flight + 2 * a.resp_reservation + 2 * 64 > RING {
                edge += 1;
            }
            assert!(
                round < 20_000,
                "stuck at {} of {CALLS}\n{}",
                got.len(),
                p.dump()
            );
        }
        assert!(refusals > 0 && edge > 0, "the ring never reached its edge");
        got.sort_unstable();
        assert_eq!(got, (0..CALLS).collect::<Vec<_>>());
    });
}

/// Several endpoints that have carried traffic both ways, then nothing: every further
/// poll must find no endpoint to visit (a dirty bit left set would make each idle poll
/// flush that endpoint for nothing), hand out nothing and change no counter.
#[test]
fn an_idle_poll_visits_no_endpoint() {
    big_stack(|| {
        const E: usize = 4;
        let mut p: Pair<E, 64, 128> = Pair::new(Opts::new(E, RING as usize));
        let mut got = 0;
        for i in 0..E {
            for k in 0..3u64 {
                let (ea, eb) = (p.a.eps[i], p.b.eps[i]);
                p.a.ctx
                    .call_with_allowance(ea, &[i as u8; 40], 48, k)
                    .unwrap();
                p.b.ctx
                    .call_with_allowance(eb, &[k as u8; 300], 48, k)
                    .unwrap();
            }
        }
        for i in 0..E {
            assert_eq!(p.a.ctx.pending_calls_on(p.a.eps[i]), 3, "endpoint {i}");
        }
        // Each endpoint has a batch to post: all are due before the first poll.
        assert_eq!(p.a.ctx.endpoints_due(), E as u32);
        while got < 2 * 3 * E {
            p.a.ctx.poll(|_, r| {
                r.unwrap();
                got += 1;
            });
            p.b.ctx.poll(|_, r| {
                r.unwrap();
                got += 1;
            });
            serve_echo(&mut p.a.ctx);
            serve_echo(&mut p.b.ctx);
            p.step();
            assert!(p.steps < 5_000, "echo did not finish\n{}", p.dump());
        }
        // Trailing credit returns and grants land, and their send completions.
        for _ in 0..200 {
            p.a.ctx.poll(|_, _| unreachable!());
            p.b.ctx.poll(|_, _| unreachable!());
            p.step();
        }
        assert_eq!(p.a.ctx.pending_calls_on(p.a.eps[0]), 0);
        assert_eq!(p.a.ctx.endpoints_due(), 0, "caller endpoints left to visit");
        assert_eq!(
            p.b.ctx.endpoints_due(),
            0,
            "receiver endpoints left to visit"
        );
        let stats = (*p.a.ctx.stats(), *p.b.ctx.stats());
        let credit = |p: &Pair<E, 64, 128>| -> Vec<_> {
            (0..E).map(|i| (snap(&p.a, i), snap(&p.b, i))).collect()
        };
        let before = credit(&p);
        for n in 0..10_000 {
            assert_eq!(p.a.ctx.poll(|_, _| unreachable!()), 0, "poll {n}");
            assert_eq!(p.b.ctx.poll(|_, _| unreachable!()), 0, "poll {n}");
            assert_eq!(p.a.ctx.endpoints_due() + p.b.ctx.endpoints_due(), 0);
            if n % 16 == 0 {
                p.step();
            }
        }
        assert_eq!(
            (*p.a.ctx.stats(), *p.b.ctx.stats()),
            stats,
            "no counter moved"
        );
        assert_eq!(credit(&p), before, "no endpoint state moved");
    });
}

/// `Context::idle` is `poll`'s nothing-to-do test: `false` while a batch is queued to
/// post or a completion waits in a CQ, `true` once a poll has taken everything, and a
/// caller that only spins on it still reaches the poll that answers it.
#[test]
fn idle_is_false_exactly_while_a_poll_has_work() {
    big_stack(|| {
        let mut p: Pair<1, 64, 128> = Pair::new(Opts::new(1, RING as usize));
        let ea = p.a.eps[0];
        // A new connection has its first credit to announce; once that has settled,
        // there is nothing to do.
        for _ in 0..50 {
            p.a.ctx.poll(|_, _| unreachable!());
            p.b.ctx.poll(|_, _| unreachable!());
            p.step();
        }
        assert!(
            p.a.ctx.idle() && p.b.ctx.idle(),
            "nothing to do once settled"
        );
        p.a.ctx.call_with_allowance(ea, b"ping", 48, 7).unwrap();
        assert!(!p.a.ctx.idle(), "a queued batch is work");
        assert_eq!(p.a.ctx.poll(|_, _| unreachable!()), 0);
        // The batch is posted; B sees nothing until the device moves it.
        assert!(p.b.ctx.idle(), "nothing has arrived");
        let mut steps = 0;
        while p.b.ctx.idle() {
            p.step();
            steps += 1;
            assert!(steps < 100, "the batch never arrived\n{}", p.dump());
        }
        p.b.ctx.poll(|_, _| unreachable!("B made no call"));
        let h = p.b.ctx.recv().expect("the request");
        h.reply(&mut p.b.ctx, b"pong").unwrap();
        // A waits as a caller should: spin on idle, poll when told, until answered.
        let mut got = None;
        let mut spins = 0;
        while got.is_none() {
            if p.a.ctx.idle() {
                p.b.ctx.poll(|_, _| unreachable!());
                p.step();
            } else {
                p.a.ctx.poll(|k, r| got = Some((k, r.unwrap().to_vec())));
            }
            spins += 1;
            assert!(spins < 1_000, "the answer never came\n{}", p.dump());
        }
        assert_eq!(got, Some((7, b"pong".to_vec())));
    });
}

/// A flush that posted everything it had (a batch through the fast path, or wrap ranges
/// through the general one) and wants no credit batch and no READ says so, and the poll
/// clears the endpoint's dirty bit: after every poll of a windowed echo whose replies
/// and calls wrap the ring, neither side has an endpoint left to visit.
#[test]
fn a_poll_that_posts_everything_leaves_no_endpoint_due() {
    big_stack(|| {
        let mut p: Pair<1, 64, 128> = Pair::new(Opts::new(1, RING as usize));
        let (mut sent, mut got) = (0u64, 0u64);
        while got < 300 {
            while sent < 300 && sent < got + 8 {
                let len = [0usize, 20, 21, 52, 53, 1][sent as usize % 6];
                let payload = pattern(sent, len);
                match p
                    .a
                    .ctx
                    .call_with_allowance(p.a.eps[0], &payload, len as u32, sent)
                {
                    Ok(_) => sent += 1,
                    Err(e) if e.error.is_retryable() => break,
                    Err(e) => panic!("call {sent}: {:?}", e.error),
                }
            }
            p.a.ctx.poll(|k, r| {
                assert_eq!(
                    r.unwrap(),
                    &pattern(k, [0usize, 20, 21, 52, 53, 1][k as usize % 6])[..]
                );
                got += 1;
            });
            assert_eq!(p.a.ctx.endpoints_due(), 0, "caller endpoint left due");
            p.b.ctx.poll(|_, _| unreachable!("b makes no calls"));
            assert_eq!(p.b.ctx.endpoints_due(), 0, "receiver endpoint left due");
            serve_echo(&mut p.b.ctx);
            p.step();
            assert!(p.steps < 10_000, "stalled\n{}", p.dump());
        }
        // Both flush paths ran: batches on their own, and wraps.
        for s in [p.a.ctx.stats(), p.b.ctx.stats()] {
            assert!(s.wraps > 0 && s.batches_posted > s.wraps, "{s:?}");
        }
    });
}

/// A flush that cannot post everything (the send queue is full) leaves its endpoint due,
/// so `endpoints_due` tells the caller there is work and the next poll posts it, not
/// only a later completion.
#[test]
fn a_flush_deferred_by_a_full_send_queue_leaves_its_endpoint_due() {
    big_stack(|| {
        let mut p: Pair<1, 64, 128> = Pair::new(Opts {
            sq_wqe_cnt: 16,
            ..Opts::new(1, RING as usize)
        });
        // Calls and polls with the device stopped: each poll posts a batch and none of
        // its WQEs completes, until a flush finds no room.
        let mut sent = 0u64;
        while p.a.ctx.stats().flushes_deferred == 0 {
            assert!(sent < 64, "the send queue never filled");
            p.a.ctx
                .call_with_allowance(p.a.eps[0], &pattern(sent, 8), 8, sent)
                .unwrap();
            sent += 1;
            p.a.ctx.poll(|_, _| unreachable!("nothing answered yet"));
        }
        assert!(
            p.a.ctx.endpoints_due() > 0,
            "deferred work, endpoint not due"
        );
        // Once the device runs, everything goes out and comes back.
        let mut got = 0u64;
        while got < sent {
            p.a.ctx.poll(|k, r| {
                assert_eq!(r.unwrap(), &pattern(k, 8)[..]);
                got += 1;
            });
            p.b.ctx.poll(|_, _| unreachable!("b makes no calls"));
            serve_echo(&mut p.b.ctx);
            p.step();
            assert!(p.steps < 10_000, "stalled\n{}", p.dump());
        }
        assert_eq!(p.a.ctx.endpoints_due(), 0);
    });
}

/// A pair whose receiver `b` may reserve up to `max` for `a`'s requests.
fn capped_pair(max: u64) -> Pair<1, 64, 128> {
    let mut o = Opts::new(1, RING as usize);
    o.cfg.max_resp_reservation = max;
    Pair::new(o)
}

/// `steps` steps of both sides: `a` counts its answers, `b` makes no call and holds
/// every request it gets.
fn hold_and_step(
    p: &mut Pair<1, 64, 128>,
    held: &mut Vec<RecvHandle>,
    answers: &mut u32,
    steps: usize,
) {
    for _ in 0..steps {
        p.a.ctx.poll(|_, r| {
            r.unwrap();
            *answers += 1;
        });
        p.b.ctx.poll(|_, _| unreachable!("b makes no calls"));
        held.extend(std::iter::from_fn(|| p.b.ctx.recv()));
        p.step();
    }
}

/// What the receiver owes a short caller once traffic stops: the caller is not short
/// (half the cap or more), or no batch-worthy grant (two units) is left under the cap.
fn assert_granted_to_cap(p: &Pair<1, 64, 128>, max: u64, case: &str) {
    let (sa, sb) = (snap(&p.a, 0), snap(&p.b, 0));
    assert!(
        sa.peer_credit_balance >= max / 2 || max - sb.resp_reservation < 64,
        "{case}: a's balance {} with b's reservation {}: the grant never went out\n\
         a {sa:?}\nb {sb:?}\nb {:?}",
        sa.peer_credit_balance,
        sb.resp_reservation,
        p.b.ctx.stats()
    );
}

/// `a` makes one call that `b` holds (allowance 256: 320 of credit), and `b` grants up
/// to its cap.
fn hold_one_call_until_the_cap(
    p: &mut Pair<1, 64, 128>,
    held: &mut Vec<RecvHandle>,
    answers: &mut u32,
    max: u64,
) {
    let ea = p.a.eps[0];
    p.a.ctx.call_with_allowance(ea, b"held", 256, 0).unwrap();
    hold_and_step(p, held, answers, 200);
    assert_eq!(
        snap(&p.b, 0).resp_reservation,
        max,
        "b granted up to its cap"
    );
}

/// `a` makes a call allowed 960 bytes and `b` answers it at once with 928: a 992-byte
/// batch (four blocks), under the quarter ring that would make `a`'s return a credit
/// batch of its own.
fn answer_one_call_with_928_bytes(
    p: &mut Pair<1, 64, 128>,
    held: &mut Vec<RecvHandle>,
    answers: &mut u32,
) {
    let ea = p.a.eps[0];
    p.a.ctx
        .call_with_allowance(ea, b"answered", 960, 1)
        .unwrap();
    hold_and_step(p, held, answers, 200);
    let h = held.pop().unwrap();
    h.reply(&mut p.b.ctx, &[7; 928]).unwrap();
}

/// Steps until `a` has at least one answer.
fn step_until_answered(p: &mut Pair<1, 64, 128>, held: &mut Vec<RecvHandle>, answers: &mut u32) {
    while *answers == 0 {
        hold_and_step(p, held, answers, 1);
        assert!(p.steps < 10_000);
    }
}

/// A grant blocked only by a stale view of the caller's consumer is followed by a
/// READ of it, and the grant goes out: the receiver replies to some calls (its replies
/// fill the caller's ring past what the cap lets it grant against), holds the rest, and
/// sends nothing else; the caller, short of credit, consumes the replies but has less
/// than a quarter ring to return, so it sends nothing either. Only the READ tells the
/// receiver the ring is empty, and only then can it grant the rest of its cap.
#[test]
fn a_grant_blocked_by_a_stale_consumer_view_is_sent_after_a_read() {
    big_stack(|| {
        let max = RING * 7 / 16;
        let mut p = capped_pair(max);
        let ea = p.a.eps[0];
        let (mut held, mut answers) = (Vec::new(), 0);
        // Three calls held (allowance 256: 320 of credit each), then, once b has
        // granted up to its cap, two more (352: 416 each) that spend the rest.
        for k in 0..3 {
            p.a.ctx.call_with_allowance(ea, b"held", 256, k).unwrap();
        }
        hold_and_step(&mut p, &mut held, &mut answers, 200);
        assert_eq!(held.len(), 3);
        assert_eq!(
            snap(&p.b, 0).resp_reservation,
            max,
            "b granted up to its cap"
        );
        for k in 3..5 {
            p.a.ctx
                .call_with_allowance(ea, b"answered", 352, k)
                .unwrap();
        }
        hold_and_step(&mut p, &mut held, &mut answers, 200);
        assert_eq!(snap(&p.a, 0).peer_credit_balance, 0);
        // b answers the last two in full, in one batch.
        for h in held.drain(3..).collect::<Vec<_>>() {
            h.reply(&mut p.b.ctx, &[7; 352]).unwrap();
        }
        let reads = p.b.ctx.stats().reads_posted;
        hold_and_step(&mut p, &mut held, &mut answers, 2_000);
        assert_eq!(answers, 2);
        assert!(p.b.ctx.stats().reads_posted > reads, "b read a's consumer");
        assert_granted_to_cap(&p, max, "two answers in one batch");
    });
}

/// As above, with the want arising when a batch arrives rather than at a flush: the
/// receiver's reply (and the grant it carries, cut by the ring the reply fills) crosses
/// a call, which leaves the caller short; the call's credit return predates the reply,
/// so the receiver, taking the call, can grant nothing until a READ shows the reply
/// consumed. The receiver's endpoint must be visited for that READ although the batch
/// that arrived asked for nothing else.
#[test]
fn a_grant_blocked_when_a_call_crosses_a_reply_is_sent_after_a_read() {
    big_stack(|| {
        let max = RING * 7 / 16;
        let mut p = capped_pair(max);
        let ea = p.a.eps[0];
        let (mut held, mut answers) = (Vec::new(), 0);
        hold_one_call_until_the_cap(&mut p, &mut held, &mut answers, max);
        // An answer b sends at once...
        answer_one_call_with_928_bytes(&mut p, &mut held, &mut answers);
        p.b.ctx.poll(|_, _| unreachable!());
        // ... while a's next call is already on its way, with a's consumer from before
        // the answer.
        p.a.ctx
            .call_with_allowance(ea, b"crossing", 352, 2)
            .unwrap();
        p.a.ctx
            .poll(|_, _| unreachable!("the answer is not there yet"));
        let reads = p.b.ctx.stats().reads_posted;
        hold_and_step(&mut p, &mut held, &mut answers, 2_000);
        assert_eq!((held.len(), answers), (2, 1));
        assert!(p.b.ctx.stats().reads_posted > reads, "b read a's consumer");
        assert_granted_to_cap(&p, max, "a call crossing an answer");
    });
}

/// As above, with the cut grant in a credit-only batch: the receiver answers two calls
/// in turn; the caller's next call carries the return for the first answer but not the
/// second, so the receiver, its view of the caller's consumer half refreshed, grants
/// what that view allows in a credit-only batch, and the caller is still short. The
/// receiver must visit the endpoint again after that batch, to find it now wants a
/// READ. Over a grid of answer and call sizes (each size a case of where the cut falls).
#[test]
fn a_credit_only_batch_cut_by_a_stale_consumer_view_is_followed_by_a_read() {
    big_stack(|| {
        let max = RING * 7 / 16;
        let mut cases = 0;
        for a1 in [256u32, 384, 512, 640, 768] {
            for a2 in [256u32, 384, 512, 640, 768] {
                for ax in [64u32, 192, 352] {
                    cases += u32::from(credit_batch_case(max, a1, a2, ax));
                }
            }
        }
        assert!(cases > 10, "{cases} cases ran to the end");
    });
}

/// One case of the test above; false if the caller could not make its calls.
fn credit_batch_case(max: u64, a1: u32, a2: u32, ax: u32) -> bool {
    let mut p = capped_pair(max);
    let ea = p.a.eps[0];
    let (mut held, mut answers) = (Vec::new(), 0);
    p.a.ctx.call_with_allowance(ea, b"held", 256, 0).unwrap();
    hold_and_step(&mut p, &mut held, &mut answers, 200);
    for (k, a) in [(1, a1), (2, a2)] {
        if p.a.ctx.call_with_allowance(ea, b"answered", a, k).is_err() {
            return false;
        }
    }
    hold_and_step(&mut p, &mut held, &mut answers, 200);
    // The first answer, until a has it.
    let h = held.remove(1);
    h.reply(&mut p.b.ctx, &vec![7; a1 as usize]).unwrap();
    step_until_answered(&mut p, &mut held, &mut answers);
    // The second, crossing a's next call.
    let h = held.remove(1);
    h.reply(&mut p.b.ctx, &vec![7; a2 as usize]).unwrap();
    p.b.ctx.poll(|_, _| unreachable!());
    if p.a.ctx.call_with_allowance(ea, b"crossing", ax, 3).is_err() {
        return false;
    }
    p.a.ctx.poll(|_, r| {
        r.unwrap();
        answers += 1;
    });
    hold_and_step(&mut p, &mut held, &mut answers, 2_000);
    assert_eq!(answers, 2);
    assert_granted_to_cap(&p, max, &format!("answers {a1} and {a2}, call {ax}"));
    true
}

/// A credit-only batch needs room for two WQEs, and a 16-block send queue with 6
/// unsignaled blocks and no signaled WQE outstanding (nothing will complete) has 10:
/// the receiver's first credit batch (2 blocks) and one answer (4), then a call that
/// leaves the caller short, whose credit return lets the receiver grant. The grant must
/// go out. (It did not while the room test asked for three batch WQEs, 12 blocks: the
/// receiver held its grant back for good and the caller stayed short.)
#[test]
fn a_credit_only_batch_fits_beside_the_unsignaled_blocks_of_a_small_send_queue() {
    big_stack(|| {
        let max = RING * 7 / 16;
        let mut o = Opts::new(1, RING as usize);
        o.cfg.max_resp_reservation = max;
        o.sq_wqe_cnt = 16;
        let mut p: Pair<1, 64, 128> = Pair::new(o);
        let ea = p.a.eps[0];
        let (mut held, mut answers) = (Vec::new(), 0);
        // b's grant up to its cap goes in a credit-only batch.
        hold_one_call_until_the_cap(&mut p, &mut held, &mut answers, max);
        // One answer, which a takes before calling again.
        answer_one_call_with_928_bytes(&mut p, &mut held, &mut answers);
        step_until_answered(&mut p, &mut held, &mut answers);
        let credit_batches = p.b.ctx.stats().credit_batches;
        assert_eq!(
            p.b.ctx.stats().batches_posted,
            2,
            "b posted two batches, unsignaled"
        );
        // The call that leaves a short; its credit return frees b's view of a's ring.
        p.a.ctx.call_with_allowance(ea, b"short", 352, 2).unwrap();
        hold_and_step(&mut p, &mut held, &mut answers, 2_000);
        assert_eq!(held.len(), 2);
        assert!(
            p.b.ctx.stats().credit_batches > credit_batches,
            "no credit batch"
        );
        assert_granted_to_cap(&p, max, "a 16-block send queue");
    });
}
