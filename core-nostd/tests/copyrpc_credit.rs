//! Flow control on the device model: credit exhaustion and recovery, the READ
//! fallback, a flush that finds the send queue full, and credit conservation.

mod copyrpc_common;

use copyrpc_common::{big_stack, serve_echo, Opts, Pair};
use copyrpc_core::copyrpc::{CreditSnapshot, Error};
use mlx5_raw::{Remote, Sge};

type P = Pair<1, 64, 128>;

/// Steps and polls both sides (b echoing) until `a` has no pending call.
fn settle(p: &mut P, got: &mut Vec<u64>) {
    for _ in 0..5_000 {
        p.a.ctx.poll(|k, r| {
            r.unwrap();
            got.push(k);
        });
        p.b.ctx.poll(|_, _| unreachable!());
        serve_echo(&mut p.b.ctx);
        p.step();
        if p.a.ctx.pending_calls() == 0 && p.a.ctx.stats().batches_posted > 0 {
            // A few more rounds let trailing credit batches land.
            for _ in 0..50 {
                p.a.ctx.poll(|_, _| unreachable!());
                p.b.ctx.poll(|_, _| unreachable!());
                p.step();
            }
            return;
        }
    }
    panic!("did not settle\n{}", p.dump());
}

fn snap(p: &P) -> (CreditSnapshot, CreditSnapshot) {
    (
        p.a.ctx.credit_snapshot(p.a.eps[0]).unwrap(),
        p.b.ctx.credit_snapshot(p.b.eps[0]).unwrap(),
    )
}

/// With nothing in transit and nothing unanswered, each side's reservation equals the
/// other's balance: no credit was lost or made up.
fn assert_conserved(p: &P) {
    let (a, b) = snap(p);
    assert_eq!(
        a.peer_credit_balance, b.resp_reservation,
        "a's credit vs b's R"
    );
    assert_eq!(
        b.peer_credit_balance, a.resp_reservation,
        "b's credit vs a's R"
    );
    assert!(a.remote_consumer <= b.recv_consumer && b.remote_consumer <= a.recv_consumer);
    assert!(a.remote_consumer >= b.recv_notified && b.remote_consumer >= a.recv_notified);
}

#[test]
fn exhaustion_returns_insufficient_credit_and_recovers() {
    big_stack(|| {
        let o = Opts::new(1, 4096);
        let mut p: P = Pair::new(o);
        let ea = p.a.eps[0];
        let before = snap(&p).0.peer_credit_balance;
        assert_eq!(before, 1024, "initial credit: min(4096 / 4, cap)");
        // Each call reserves a 100-byte response: 4 blocks of 32 = 128 B, padded with
        // the header to 160, plus 32 B of metadata: 192 of credit.
        let mut k = 0;
        let err = loop {
            match p.a.ctx.call_with_allowance(ea, b"x", 100, k) {
                Ok(_) => k += 1,
                Err(e) => break e,
            }
        };
        assert_eq!(err.error, Error::InsufficientCredit);
        assert_eq!(err.user_data, k, "user data handed back");
        assert_eq!(k, 1024 / 192);
        let left = snap(&p).0.peer_credit_balance;
        assert_eq!(left, 1024 - k * 192);
        // Nothing comes back while b does not answer, however long we poll.
        for _ in 0..200 {
            p.a.ctx.poll(|_, _| unreachable!());
            p.b.ctx.poll(|_, _| unreachable!());
            p.step();
        }
        assert_eq!(
            p.a.ctx
                .call_with_allowance(ea, b"x", 100, 99)
                .unwrap_err()
                .error,
            Error::InsufficientCredit
        );
        let mut got = Vec::new();
        settle(&mut p, &mut got);
        assert_eq!(got.len() as u64, k);
        assert_eq!(
            snap(&p).0.peer_credit_balance,
            1024,
            "replies granted it back"
        );
        p.a.ctx.call_with_allowance(ea, b"x", 100, 100).unwrap();
        settle(&mut p, &mut got);
        assert_conserved(&p);
    });
}

#[test]
fn read_fallback_refreshes_a_stale_consumer() {
    big_stack(|| {
        let o = Opts::new(1, 4096);
        let mut p: P = Pair::new(o);
        let (ea, _) = (p.a.eps[0], p.b.eps[0]);
        // 200-byte requests with empty responses: ring space runs out before credit.
        let payload = [7u8; 200];
        let mut k = 0;
        let err = loop {
            match p.a.ctx.call_with_allowance(ea, &payload, 0, k) {
                Ok(_) => k += 1,
                Err(e) => break e,
            }
        };
        assert_eq!(err.error, Error::RingFull);
        // Deliver them; b takes every request and answers, but does not poll, so no
        // batch carries its consumer back to a.
        for _ in 0..100 {
            p.a.ctx.poll(|_, _| unreachable!());
            p.step();
        }
        p.b.ctx.poll(|_, _| unreachable!());
        let mut n = 0;
        while let Some(h) = p.b.ctx.recv() {
            h.reply(&mut p.b.ctx, b"").unwrap();
            n += 1;
        }
        assert_eq!(n, k);
        let b_batches = p.b.ctx.stats().batches_posted;
        let stale = snap(&p).0;
        let b_consumer = p.b.ctx.credit_snapshot(p.b.eps[0]).unwrap().recv_consumer;
        assert!(
            stale.remote_consumer < b_consumer,
            "a's view of b's consumer is stale"
        );
        assert_eq!(
            p.a.ctx
                .call_with_allowance(ea, &payload, 0, 1000)
                .unwrap_err()
                .error,
            Error::RingFull
        );
        // a's next poll READs b's consumer position; the NIC answers without b.
        let reads = p.a.ctx.stats().reads_completed;
        let mut steps = 0;
        while p.a.ctx.stats().reads_completed == reads {
            p.a.ctx.poll(|_, _| unreachable!());
            p.step();
            steps += 1;
            assert!(steps < 1000, "READ did not complete\n{}", p.dump());
        }
        assert_eq!(p.b.ctx.stats().batches_posted, b_batches, "b stayed silent");
        assert!(p.a.ctx.stats().reads_posted >= 1);
        let fresh = snap(&p).0;
        assert_eq!(
            fresh.remote_consumer,
            p.b.ctx.credit_snapshot(p.b.eps[0]).unwrap().recv_consumer
        );
        assert!(fresh.in_flight < stale.in_flight);
        p.a.ctx.call_with_allowance(ea, &payload, 0, 1000).unwrap();
        let mut got = Vec::new();
        settle(&mut p, &mut got);
        assert_eq!(got.len() as u64, k + 1);
        assert_conserved(&p);
    });
}

#[test]
fn flush_that_finds_the_sq_full_keeps_its_credit_and_retries() {
    big_stack(|| {
        let mut o = Opts::new(1, 4096);
        // Sixteen WQEBBs (the smallest queue an endpoint takes): four batch WQEs of
        // four fill it.
        o.sq_wqe_cnt = 16;
        let mut p: P = Pair::new(o);
        let ea = p.a.eps[0];
        let mut got = Vec::new();
        // Give a something to return and grant: a round trip b -> a first.
        let eb = p.b.eps[0];
        p.b.ctx.call_with_allowance(eb, &[1; 40], 8, 500).unwrap();
        for _ in 0..100 {
            p.b.ctx.poll(|_, r| {
                r.unwrap();
            });
            p.a.ctx.poll(|_, _| unreachable!());
            p.step();
        }
        let h = p.a.ctx.recv().expect("b's request arrived");
        // Four batches fill a's SQ (no device step in between: nothing completes).
        for k in 0..4 {
            p.a.ctx.call_with_allowance(ea, &[2; 300], 16, k).unwrap();
            p.a.ctx.poll(|_, _| unreachable!());
        }
        assert_eq!(p.a.ctx.stats().flushes_deferred, 0);
        // The reply releases b's request: a now owes a credit return and can grant.
        h.reply(&mut p.a.ctx, &[3; 8]).unwrap();
        p.a.ctx.call_with_allowance(ea, &[2; 300], 16, 4).unwrap();
        let before = snap(&p).0;
        let posted = p.a.ctx.stats().batches_posted;
        p.a.ctx.poll(|_, _| unreachable!());
        let after = snap(&p).0;
        assert_eq!(
            p.a.ctx.stats().flushes_deferred,
            1,
            "the flush found the SQ full"
        );
        assert_eq!(p.a.ctx.stats().batches_posted, posted, "nothing posted");
        assert_eq!(after, before, "no credit return taken, no grant added to R");
        assert!(
            after.recv_consumer > after.recv_notified,
            "the return is still owed"
        );
        // Once completions free the queue, the next poll sends the same batch with the
        // return and grant it owes.
        for _ in 0..200 {
            p.a.ctx.poll(|k, r| {
                r.unwrap();
                got.push(k);
            });
            p.b.ctx.poll(|k, r| {
                r.unwrap();
                got.push(k);
            });
            serve_echo(&mut p.b.ctx);
            p.step();
        }
        let now = snap(&p).0;
        assert!(
            now.recv_notified >= after.recv_consumer,
            "the return went out"
        );
        settle(&mut p, &mut got);
        got.sort();
        assert_eq!(got, vec![0, 1, 2, 3, 4, 500]);
        assert_conserved(&p);
    });
}

#[test]
fn a_reply_moves_the_consumer_at_the_next_flush_or_at_once_when_it_was_the_last_held() {
    big_stack(|| {
        let mut p: P = Pair::new(Opts::new(1, 4096));
        let ea = p.a.eps[0];
        for k in 0..3u8 {
            p.a.ctx
                .call_with_allowance(ea, &[k; 40], 8, k.into())
                .unwrap();
        }
        let mut held = Vec::new();
        while held.len() < 3 {
            p.a.ctx.poll(|_, _| unreachable!());
            p.step();
            p.b.ctx.poll(|_, _| unreachable!());
            while let Some(h) = p.b.ctx.recv() {
                held.push(h);
            }
            assert!(p.steps < 1000, "the three requests did not arrive");
        }
        let consumer = |p: &P| snap(p).1.recv_consumer;
        let parsed_to = consumer(&p);
        // The oldest answered: the consumer may pass it, once the flush that sends the
        // reply runs, not before (the reply leaves two requests held).
        let first = held.remove(0);
        first.reply(&mut p.b.ctx, b"0").unwrap();
        assert_eq!(consumer(&p), parsed_to, "a reply alone does not move it");
        p.b.ctx.poll(|_, _| unreachable!());
        let past_first = consumer(&p);
        assert!(past_first > parsed_to, "the flush moved it past the first");
        // The newest answered: the second still holds the consumer.
        let third = held.pop().unwrap();
        third.reply(&mut p.b.ctx, b"2").unwrap();
        p.b.ctx.poll(|_, _| unreachable!());
        assert_eq!(consumer(&p), past_first, "the second still holds it");
        // The last one held: the consumer passes everything parsed at once, with no
        // flush in between, so a peer reading it sees the ring free.
        let second = held.pop().unwrap();
        second.reply(&mut p.b.ctx, b"1").unwrap();
        let all = consumer(&p);
        assert!(all > past_first, "moved by the reply itself");
        assert_eq!(snap(&p).1.unanswered_requests, 0);
        p.b.ctx.poll(|_, _| unreachable!());
        assert_eq!(consumer(&p), all, "nothing left for the flush to move");
        let mut got = Vec::new();
        settle(&mut p, &mut got);
        got.sort_unstable();
        assert_eq!(got, vec![0, 1, 2]);
        assert_conserved(&p);
    });
}

/// Calls `a -> b` with `payload` and no response allowance until refused; every
/// accepted call is left pending.
fn call_until_refused<const C: usize>(p: &mut Pair<1, C, 128>, payload: &[u8]) -> Error {
    let ea = p.a.eps[0];
    let mut k = 0;
    loop {
        match p.a.ctx.call_with_allowance(ea, payload, 0, k) {
            Ok(_) => k += 1,
            Err(e) => return e.error,
        }
        assert!(k < 10_000, "calls never refused");
    }
}

/// A response allowance no credit can ever cover is refused for good, up front: with a
/// 4 KiB ring the peer's reservation cap (ring / 4 = 1024) bounds our balance, so an
/// allowance costing more (anything above 960 B: 32 B blocks + 64) used to come back as
/// the retryable `InsufficientCredit` forever. Allowances that can still be paid stay
/// retryable.
#[test]
fn item2_allowance_above_what_credit_can_ever_cover_is_refused_for_good() {
    big_stack(|| {
        let mut p: P = Pair::new(Opts::new(1, 4096));
        let ea = p.a.eps[0];
        assert_eq!(p.a.ctx.max_response_allowance(ea), Ok(Some(960)));
        let before = snap(&p).0;
        for allowance in [961, 1024, 2048, 3000, 4000] {
            let err =
                p.a.ctx
                    .call_with_allowance(ea, b"x", allowance, 7)
                    .unwrap_err();
            assert_eq!(err.error, Error::AllowanceTooLarge, "allowance {allowance}");
            assert!(!err.error.is_retryable());
            assert_eq!(err.user_data, 7);
        }
        assert_eq!(snap(&p).0, before, "a refused call changes nothing");
        // Allowances the ring itself cannot carry keep their own error.
        assert_eq!(
            p.a.ctx
                .call_with_allowance(ea, b"x", 4096, 8)
                .unwrap_err()
                .error,
            Error::PayloadTooLarge
        );
        // The largest payable allowance goes through, and with the balance spent a
        // payable call is still only told to retry.
        p.a.ctx.call_with_allowance(ea, b"x", 960, 9).unwrap();
        let err = p.a.ctx.call_with_allowance(ea, b"x", 0, 10).unwrap_err();
        assert_eq!(err.error, Error::InsufficientCredit);
        assert!(err.error.is_retryable());
        // Neither a full ring nor a full ring with all credit back makes it payable.
        let mut got = Vec::new();
        settle(&mut p, &mut got);
        assert_eq!(
            snap(&p).0.peer_credit_balance,
            1024,
            "every credit returned"
        );
        assert_eq!(
            p.a.ctx
                .call_with_allowance(ea, b"x", 961, 11)
                .unwrap_err()
                .error,
            Error::AllowanceTooLarge
        );
        assert_eq!(call_until_refused(&mut p, &[5; 200]), Error::RingFull);
        assert_eq!(
            p.a.ctx
                .call_with_allowance(ea, &[5; 200], 961, 12)
                .unwrap_err()
                .error,
            Error::AllowanceTooLarge,
            "a full ring does not hide a permanent refusal"
        );
    });
}

/// The bound follows whichever limit is lower: with a reservation cap above half the
/// ring, the peer's invariant (`2R <= C - 32`) caps the credit instead, and a call
/// refused for a full pending-call table is still told when it could never be made.
#[test]
fn item2_the_invariant_bounds_the_allowance_when_the_cap_does_not() {
    big_stack(|| {
        let mut o = Opts::new(1, 4096);
        o.cfg.max_resp_reservation = 1 << 20;
        let mut p: Pair<1, 1, 128> = Pair::new(o);
        let ea = p.a.eps[0];
        // (4096 - 32) / 2 = 2032 -> 2016 aligned; less 64 for header and metadata.
        assert_eq!(p.a.ctx.max_response_allowance(ea), Ok(Some(1952)));
        // The same bound on our own reservation leaves a request 64 B of the ring:
        // one message of up to 20 B in flight.
        assert_eq!(p.a.ctx.max_request_payload(ea), Ok(20));
        assert_eq!(
            p.a.ctx
                .call_with_allowance(ea, b"x", 1953, 0)
                .unwrap_err()
                .error,
            Error::AllowanceTooLarge
        );
        p.a.ctx.call_with_allowance(ea, b"x", 0, 1).unwrap();
        assert_eq!(
            p.a.ctx
                .call_with_allowance(ea, b"x", 0, 3)
                .unwrap_err()
                .error,
            Error::TooManyCalls
        );
        assert_eq!(
            p.a.ctx
                .call_with_allowance(ea, b"x", 1953, 4)
                .unwrap_err()
                .error,
            Error::AllowanceTooLarge
        );
        for len in [21, 5000] {
            assert_eq!(
                p.a.ctx
                    .call_with_allowance(ea, &vec![0; len], 0, 5)
                    .unwrap_err()
                    .error,
                Error::PayloadTooLarge,
                "{len} B"
            );
        }
    });
}

/// Every call either goes through within a bounded number of polls of an idle peer
/// (one that only answers) or is refused for good at once: over ring sizes, caps on
/// the reservation (the default quarter, less, more, the least), response allowances
/// up to the largest payable and lap positions (a random filler call, answered, before
/// each tried call moves the producer round the ring), for payloads around the limit
/// and anywhere below the ring's size. A payload between about half the ring and the
/// ring was refused with `RingFull` on every retry: the reservation `2R` the credit
/// rule holds back never shrinks on an idle peer, so the message never fit beside it.
/// And a call whose allowance needs all the credit the peer can grant was refused with
/// `InsufficientCredit` on every retry once a grant had been cut short (a 256 B ring
/// with its default cap; a cap of half the ring).
#[test]
fn item1_every_call_goes_through_within_bounded_polls_or_is_refused_for_good_at_once() {
    big_stack(|| {
        let mut rng = copyrpc_common::Rng(0x5eed_0051);
        for ring in [256u64, 512, 1024, 4096, 16 << 10] {
            // The cap may not be under two blocks (`BadReservation`).
            for cap in [ring / 4, ring / 8, ring / 2, 64]
                .into_iter()
                .filter(|&c| c >= 64)
            {
                let mut o = Opts::new(1, ring as usize);
                o.cfg.max_resp_reservation = cap;
                let mut p: Pair<1, 64, 512> = Pair::new(o);
                let ea = p.a.eps[0];
                let limit = p.a.ctx.max_request_payload(ea).unwrap() as u64;
                assert_eq!(
                    limit,
                    copyrpc_core::credit::max_request_payload(cap, ring),
                    "ring {ring} cap {cap}"
                );
                let most = p.a.ctx.max_response_allowance(ea).unwrap().unwrap_or(0);
                for k in 0..40u64 {
                    let filler = 1 + rng.below(limit) as usize;
                    let ctx = format!("ring {ring} cap {cap} filler {filler}");
                    assert_eq!(call_answered(&mut p, filler, 0, 2 * k), Ok(true), "{ctx}");
                    let len = match rng.below(4) {
                        0 | 1 => (limit + rng.below(64)).saturating_sub(32),
                        2 => rng.below(limit + 1),
                        _ => rng.below(ring),
                    } as usize;
                    let allowance = [0, 64.min(most), most][rng.below(3) as usize];
                    let ctx = format!("{ctx}: {len} B, allowance {allowance}");
                    match call_answered(&mut p, len, allowance, 2 * k + 1) {
                        Ok(went) => assert_eq!(went, len as u64 <= limit, "{ctx}"),
                        Err(e) => panic!("{ctx}: {e}"),
                    }
                }
            }
        }
    });
}

/// Calls `len` bytes with `allowance` on `p`'s endpoint until it is taken, polling
/// both sides (b echoing) after each retryable refusal, and waits for its answer:
/// `Ok(true)` answered, `Ok(false)` refused for good at the first try with
/// `PayloadTooLarge`; `Err` for anything else (a permanent refusal after a retryable
/// one, a retryable one past the bound, no answer).
fn call_answered(
    p: &mut Pair<1, 64, 512>,
    len: usize,
    allowance: u32,
    user: u64,
) -> Result<bool, String> {
    let ea = p.a.eps[0];
    let payload = vec![0x51u8; len];
    let mut tries = 0;
    while let Err(e) = p.a.ctx.call_with_allowance(ea, &payload, allowance, user) {
        match (e.error.is_retryable(), tries) {
            (false, 0) if e.error == Error::PayloadTooLarge => return Ok(false),
            (false, _) => return Err(format!("{:?} after {tries} retries", e.error)),
            (true, 2_000) => {
                let snap = (
                    p.a.ctx.credit_snapshot(ea),
                    p.b.ctx.credit_snapshot(p.b.eps[0]),
                );
                return Err(format!("{:?} on every retry: {snap:?}", e.error));
            }
            (true, _) => tries += 1,
        }
        p.a.ctx.poll(|_, _| unreachable!("nothing pending"));
        p.b.ctx.poll(|_, _| unreachable!());
        serve_echo(&mut p.b.ctx);
        p.step();
    }
    let mut got = None;
    for _ in 0..100_000 {
        p.a.ctx.poll(|k, r| got = Some((k, r.map(<[u8]>::len))));
        p.b.ctx.poll(|_, _| unreachable!());
        serve_echo(&mut p.b.ctx);
        p.step();
        if let Some(got) = got {
            // The echo is cut to what the allowance's blocks carry: 32 B each, and
            // the 20 B the header leaves of the first padded block.
            let blocks = copyrpc_core::credit::allowance_blocks(allowance) as usize;
            let want = len.min(32 * blocks + 20);
            return match got {
                (k, Ok(n)) if k == user && n == want => Ok(true),
                other => Err(format!("answered {other:?}, wanted ({user}, Ok({want}))")),
            };
        }
    }
    Err(format!("no answer\n{}", p.dump()))
}

/// Both sides call each other, a window of 32 calls each way, payloads up to 4 000 B
/// with a response allowance as long (the echo's pattern, on its default 16 KiB rings:
/// an allowance of 4 000 B costs the whole cap). A reply's batch grants what the
/// invariant leaves, which can be less than the call it answers cost; with the peer
/// holding over half the cap no credit-only batch topped it up, and both sides were
/// refused with `InsufficientCredit` for ever, nothing in flight, after 286 calls.
#[test]
fn a_call_costing_the_whole_cap_is_paid_for_after_a_grant_the_invariant_cut() {
    big_stack(|| {
        // The echo's sizes (host/src/rpc/echo.rs) up to 4 000 B.
        const SIZES: [usize; 14] = [0, 1, 8, 20, 21, 52, 53, 200, 204, 220, 221, 512, 1000, 4096];
        let size = |k: u64| match k as usize % (SIZES.len() + 2) {
            i if i < SIZES.len() && SIZES[i] <= 4000 => SIZES[i],
            i if i == SIZES.len() => 4000,
            _ => (k as usize).wrapping_mul(2_654_435_761) % 4001,
        };
        let mut p: Pair<1, 64, 512> = Pair::new(Opts::new(1, 16 << 10));
        let eps = [p.a.eps[0], p.b.eps[0]];
        let (mut next, mut pending, mut answered) = ([0u64; 2], [0u32; 2], [0u64; 2]);
        const CALLS: u64 = 1000;
        let mut quiet = 0;
        while answered != [CALLS; 2] {
            let mut moved = 0;
            for side in 0..2 {
                let ctx = if side == 0 {
                    &mut p.a.ctx
                } else {
                    &mut p.b.ctx
                };
                while next[side] < CALLS && pending[side] < 32 {
                    let len = size(next[side]);
                    let payload = vec![side as u8; len];
                    match ctx.call_with_allowance(eps[side], &payload, len as u32, next[side]) {
                        Ok(_) => (next[side], pending[side]) = (next[side] + 1, pending[side] + 1),
                        Err(e) => {
                            assert!(e.error.is_retryable(), "{:?}", e.error);
                            break;
                        }
                    }
                }
                let mut got = 0;
                ctx.poll(|_, r| {
                    r.unwrap();
                    got += 1;
                });
                (pending[side], answered[side]) =
                    (pending[side] - got, answered[side] + u64::from(got));
                moved += got as usize + serve_echo(ctx);
            }
            p.step();
            quiet = if moved == 0 { quiet + 1 } else { 0 };
            assert!(
                quiet < 20_000,
                "no progress for 20 000 steps: {answered:?} answered, {pending:?} pending\n\
                 a {:?}\nb {:?}",
                p.a.ctx.credit_snapshot(eps[0]),
                p.b.ctx.credit_snapshot(eps[1])
            );
        }
    });
}

/// A caller that stops calling has nothing to carry the credit return for the replies it
/// consumed: once they are a quarter of its recv ring, it must send a batch of metadata
/// alone to return them, or the responder's view of that ring stays full. (The reply
/// credit cap is raised above the quarter of the ring the first credit is, so that the
/// replies of one round of calls can reach it.)
#[test]
fn a_caller_that_stops_calling_returns_the_replies_it_consumed_in_a_credit_only_batch() {
    big_stack(|| {
        const RING: u64 = 4096;
        let mut o = Opts::new(1, RING as usize);
        o.cfg.max_resp_reservation = RING * 3 / 8;
        let mut p: P = Pair::new(o);
        let ea = p.a.eps[0];
        let mut k = 0u64;
        let mut rounds = 0;
        loop {
            rounds += 1;
            assert!(
                rounds <= 20,
                "the caller's credit never covered a quarter ring"
            );
            // As many 192-byte replies as the credit covers; their bytes are what the
            // caller's recv ring takes.
            let first = k;
            while p.a.ctx.call_with_allowance(ea, b"x", 192, k).is_ok() {
                k += 1;
            }
            assert!(k > first, "round {rounds}: no credit at all");
            p.a.ctx.poll(|_, _| unreachable!("nothing answered yet"));
            let posted = snap(&p).0;
            assert_eq!(
                posted.recv_notified, posted.recv_consumer,
                "the calls' batch returned everything consumed before it"
            );
            let mut got = 0;
            for _ in 0..5_000 {
                p.a.ctx.poll(|_, r| {
                    assert_eq!(r.unwrap(), [7u8; 192]);
                    got += 1;
                });
                p.b.ctx.poll(|_, _| unreachable!("b never calls"));
                while let Some(h) = p.b.ctx.recv() {
                    h.reply_with(&mut p.b.ctx, 192, |_, out| out.fill(7))
                        .unwrap();
                }
                p.step();
                if got == k - first {
                    break;
                }
            }
            assert_eq!(
                got,
                k - first,
                "round {rounds}: replies missing\n{}",
                p.dump()
            );
            // Let any credit-only batch land.
            for _ in 0..200 {
                p.a.ctx.poll(|_, _| unreachable!());
                p.b.ctx.poll(|_, _| unreachable!());
                p.step();
            }
            let (a, b) = snap(&p);
            let consumed = a.recv_consumer - posted.recv_notified;
            if consumed < RING / 4 {
                // Below the quarter no return is due yet: the next round's calls carry it.
                continue;
            }
            // What a has not returned can only be metadata-only batches of b's that
            // arrived after a's return (b tops a's credit up once a has nothing
            // unanswered at b), 32 B each, far below a return's quarter ring.
            let left = a.recv_consumer - a.recv_notified;
            assert!(
                left <= 32 * p.b.ctx.stats().credit_batches,
                "round {rounds}: {consumed} B of replies consumed after the last call \
                 (a quarter ring is {}), {left} B never returned; {} credit-only batches",
                RING / 4,
                p.a.ctx.stats().credit_batches
            );
            assert!(p.a.ctx.stats().credit_batches > 0);
            assert_eq!(b.remote_consumer, a.recv_notified, "b saw the return");
            assert_conserved(&p);
            break;
        }
    });
}

/// A grant under two blocks is not worth a batch of its own while the peer has calls
/// unanswered here (their replies will carry grants): when the invariant leaves the
/// responder less than that to give while its reservation is under the cap, it sends no
/// credit-only batch however short the caller runs (it asks for READs instead, in case
/// its view of the caller's consumer is stale; here it is not).
///
/// The responder's replies fill the caller's recv ring behind two calls of the
/// responder's that the caller holds unanswered (the first pins the consumer), so each
/// reply's batch grants back less than the call it answers cost, all the invariant
/// leaves, until the caller cannot pay for another such call. It makes one it can pay
/// for, which the responder holds. Then the caller answers the first call: its consumer
/// moves past that call's 64 B, and the responder could grant 32 B. (The responder's
/// own calls cannot fill the ring that far: the call rule keeps them beside the cap's
/// reservation, which leaves a grant up to the cap. With nothing of the caller's held,
/// the responder does send the 32 B: `a_call_costing_the_whole_cap_...`.)
#[test]
fn a_grant_smaller_than_two_blocks_is_not_sent_in_a_batch_of_its_own() {
    big_stack(|| {
        const RING: u64 = 4096;
        const CAP: u64 = RING * 3 / 8;
        let mut o = Opts::new(1, RING as usize);
        o.cfg.max_resp_reservation = CAP;
        let mut p: P = Pair::new(o);
        let (ea, eb) = (p.a.eps[0], p.b.eps[0]);
        let gap = |p: &P| {
            let b = snap(p).1;
            RING - b.in_flight - 2 * b.resp_reservation
        };
        let mut held_a = Vec::new();
        let mut held_b = Vec::new();
        let mut answered = 0u64;
        let mut round = |p: &mut P, held_a: &mut Vec<_>, serve: bool| {
            p.a.ctx.poll(|_, r| {
                r.unwrap();
                answered += 1;
            });
            p.b.ctx.poll(|_, r| assert!(r.is_ok()));
            if serve {
                serve_echo(&mut p.b.ctx);
            } else {
                while let Some(h) = p.b.ctx.recv() {
                    held_b.push(h);
                }
            }
            while let Some(h) = p.a.ctx.recv() {
                held_a.push(h);
            }
            p.step();
        };
        // 52 B: a 64 B message.
        p.b.ctx.call_with_allowance(eb, &[1; 52], 0, 0).unwrap();
        p.b.ctx.call_with_allowance(eb, b"pin", 0, 1).unwrap();
        // a calls (each call costs 192 B of credit: 100 B of allowance) as long as it
        // can pay; b answers every call.
        let mut calls = 0;
        for _ in 0..2_000 {
            while p.a.ctx.call_with_allowance(ea, b"x", 100, calls).is_ok() {
                calls += 1;
            }
            round(&mut p, &mut held_a, true);
        }
        assert_eq!(held_a.len(), 2, "a holds b's calls");
        assert!(gap(&p) < 64, "b granted all it could: {} B left", gap(&p));
        // A call without response allowance (64 B of credit), which b holds.
        p.a.ctx.call_with_allowance(ea, b"held", 0, calls).unwrap();
        calls += 1;
        for _ in 0..50 {
            round(&mut p, &mut held_a, false);
        }
        let first = held_a.remove(0);
        first.reply(&mut p.a.ctx, b"").unwrap();
        for _ in 0..300 {
            round(&mut p, &mut held_a, false);
        }
        assert_eq!(
            answered + 1,
            calls,
            "b answered every call of a but the last"
        );
        let (a, b) = snap(&p);
        assert_eq!(b.unanswered_requests, 1);
        assert!(
            a.peer_credit_balance < 192,
            "a cannot pay for another 100 B allowance ({} B)",
            a.peer_credit_balance
        );
        assert_eq!(
            p.a.ctx
                .call_with_allowance(ea, b"x", 100, calls)
                .unwrap_err()
                .error,
            Error::InsufficientCredit
        );
        assert!(
            b.resp_reservation + 64 <= CAP,
            "b's reservation ({} B) is two blocks or more under its cap: only the \
             invariant keeps it from granting",
            b.resp_reservation
        );
        assert!(
            (64..128).contains(&gap(&p)),
            "b could grant 32 B: the invariant leaves {} B",
            gap(&p)
        );
        assert_eq!(
            p.b.ctx.stats().credit_batches,
            0,
            "b sent batches of metadata alone"
        );
        assert!(p.b.ctx.stats().reads_posted > 0, "b asked for a's consumer");
    });
}

/// A credit return that is due when the send ring has no room for even a batch of
/// metadata (the caller's own call, held by the responder, pins the consumer) makes the
/// caller ask for the peer's consumer with a READ at once, not only at the next idle
/// probe: the READ is the only way room can show up before another message arrives.
#[test]
fn a_credit_return_with_no_ring_room_asks_for_the_peers_consumer() {
    big_stack(|| {
        const RING: u64 = 4096;
        let mut o = Opts::new(1, RING as usize);
        o.cfg.max_resp_reservation = RING * 3 / 8;
        let mut p: P = Pair::new(o);
        let (ea, eb) = (p.a.eps[0], p.b.eps[0]);
        let (mut held_a, mut held_b) = (Vec::new(), Vec::new());
        let mut got = 0u64;
        // b answers one-byte calls with 192 B when told to; it holds the rest.
        let round =
            |p: &mut P, held_a: &mut Vec<_>, held_b: &mut Vec<_>, answer: bool, got: &mut u64| {
                p.a.ctx.poll(|_, r| {
                    assert_eq!(r.unwrap(), [7u8; 192]);
                    *got += 1;
                });
                p.b.ctx.poll(|_, r| assert_eq!(r.unwrap(), b""));
                while let Some(h) = p.a.ctx.recv() {
                    held_a.push(h);
                }
                while let Some(h) = p.b.ctx.recv() {
                    held_b.push(h);
                }
                if answer {
                    for h in std::mem::take(held_b) {
                        if h.data(&p.b.ctx).len() == 1 {
                            h.reply_with(&mut p.b.ctx, 192, |_, out| out.fill(7))
                                .unwrap();
                        } else {
                            held_b.push(h);
                        }
                    }
                }
                p.step();
            };
        let gap = |p: &P| {
            let a = snap(p).0;
            RING - a.in_flight - 2 * a.resp_reservation
        };
        // A round of answered calls raises a's credit to the cap.
        let mut k = 0;
        while p.a.ctx.call_with_allowance(ea, b"x", 192, k).is_ok() {
            k += 1;
        }
        for _ in 0..50 {
            round(&mut p, &mut held_a, &mut held_b, true, &mut got);
        }
        assert_eq!(got, k);
        assert_eq!(snap(&p).0.peer_credit_balance, RING * 3 / 8);
        // One held call and five small ones (32 B each, with a 192 B allowance) in a
        // batch that leaves a's ring 32 B short of its bound.
        let big = vec![9u8; (gap(&p) - 256) as usize];
        p.a.ctx.call_with_allowance(ea, &big, 8, 100).unwrap();
        for i in 0..5 {
            p.a.ctx.call_with_allowance(ea, b"x", 192, 200 + i).unwrap();
        }
        for _ in 0..20 {
            round(&mut p, &mut held_a, &mut held_b, false, &mut got);
        }
        assert_eq!(gap(&p), 32);
        // A call of b's returns the 32 B of a's batch metadata b consumed; a's reply
        // to it (with the grant that restores b's credit) takes that room back.
        p.b.ctx.call_with_allowance(eb, b"z", 8, 0).unwrap();
        for _ in 0..20 {
            round(&mut p, &mut held_a, &mut held_b, false, &mut got);
        }
        assert_eq!(held_a.len(), 1);
        held_a.pop().unwrap().reply(&mut p.a.ctx, b"").unwrap();
        for _ in 0..20 {
            round(&mut p, &mut held_a, &mut held_b, false, &mut got);
        }
        assert_eq!(gap(&p), 0, "a's ring is at its bound");
        assert_eq!(held_b.len(), 6, "b holds the big call and the five");
        // b answers the five: 5 × 224 B and a batch's metadata, over a quarter ring.
        let st0 = *p.a.ctx.stats();
        let mut rounds = 0;
        while got < k + 5 {
            round(&mut p, &mut held_a, &mut held_b, true, &mut got);
            rounds += 1;
            assert!(rounds < 100, "replies missing\n{}", p.dump());
        }
        for _ in 0..20 {
            round(&mut p, &mut held_a, &mut held_b, false, &mut got);
        }
        let a = snap(&p).0;
        let st = p.a.ctx.stats();
        assert!(
            a.recv_consumer - a.recv_notified >= RING / 4,
            "a return is due"
        );
        assert_eq!(st.credit_batches, st0.credit_batches, "no room for it");
        assert!(
            st.reads_posted - st0.reads_posted > st.probes_posted - st0.probes_posted,
            "a asked for b's consumer only in idle probes ({} READs)",
            st.reads_posted - st0.reads_posted
        );
    });
}

/// A READ of the peer's consumer posted behind a signaled raw WRITE is done only at its
/// own completion, not at the WRITE's: with a link slow enough per packet that the
/// WRITE's acknowledgement and the READ's response land in different polls, the value
/// taken is the one the READ brought. (Batches are unsignaled; only raw operations and
/// READs complete.)
#[test]
fn a_read_behind_a_raw_write_is_done_at_its_own_completion() {
    big_stack(|| {
        let mut o = Opts::new(1, 4096);
        o.link.packet_ns = 4_000;
        let mut p: P = Pair::new(o);
        let ea = p.a.eps[0];
        let payload = [7u8; 200];
        let mut k = 0;
        while p.a.ctx.call_with_allowance(ea, &payload, 0, k).is_ok() {
            k += 1;
        }
        for _ in 0..300 {
            p.a.ctx.poll(|_, _| unreachable!());
            p.step();
        }
        // b answers without posting, so a's view of its consumer goes stale.
        p.b.ctx.poll(|_, _| unreachable!());
        let mut n = 0;
        while let Some(h) = p.b.ctx.recv() {
            h.reply(&mut p.b.ctx, b"").unwrap();
            n += 1;
        }
        assert_eq!(n, k);
        let stale = snap(&p).0;
        let b_consumer = snap(&p).1.recv_consumer;
        assert!(stale.remote_consumer < b_consumer);
        // A refused call asks for a READ; a raw WRITE goes out before it.
        assert_eq!(
            p.a.ctx
                .call_with_allowance(ea, &payload, 0, 1000)
                .unwrap_err()
                .error,
            Error::RingFull
        );
        let to_b = Remote {
            addr: p.b.scratch(0),
            rkey: p.b.keys.rkey,
        };
        let src = [Sge {
            addr: p.a.scratch(0),
            len: 2000,
            lkey: p.a.keys.lkey,
        }];
        // SAFETY: the gather entry lies in a's registered scratch area, which nothing
        // changes until `raw_pending` reaches 0.
        unsafe { p.a.ctx.post_rdma_write(ea, to_b, &src) }.unwrap();
        let reads = p.a.ctx.stats().reads_posted;
        p.a.ctx.poll(|_, _| unreachable!());
        assert_eq!(p.a.ctx.stats().reads_posted, reads + 1);
        let done = p.a.ctx.stats().reads_completed;
        let mut steps = 0;
        let mut write_first = false;
        while p.a.ctx.stats().reads_completed == done {
            p.a.ctx.poll(|_, _| unreachable!());
            write_first |= p.a.ctx.stats().reads_completed == done && p.a.ctx.raw_pending(ea) == 0;
            p.step();
            steps += 1;
            assert!(steps < 2000, "READ did not complete\n{}", p.dump());
        }
        assert!(!p.a.ctx.is_failed(ea), "{:?}", p.a.ctx.failure_cause(ea));
        assert_eq!(snap(&p).0.remote_consumer, b_consumer, "the READ's value");
        assert!(
            write_first,
            "the WRITE completed in an earlier poll than the READ"
        );
    });
}

/// A READ of the peer's consumer posted in one flush behind batch WQEs (queued wrap
/// ranges, the open batch, a credit-only batch and its wrap marker) is taken at its own
/// completion, not at one of theirs. The flush places the READ at its base plus the
/// blocks of the WQEs it posted first (`used` in `post_due_general`); a completion
/// retiring only those must not count as the READ's. Batch WQEs are unsignaled unless
/// the driver signals one (every `signal_interval`-th, or at half the queue): here every
/// WQE is, the link is slow per packet (so a batch's acknowledgement and the READ's
/// response land in different polls), and each READ's landing word is poisoned right
/// after it is posted, before the device can write it. A READ taken early reads the
/// poison, an impossible consumer, and fails the endpoint; one placed too late is never
/// taken, and no other READ follows it.
#[test]
fn a_read_behind_batches_of_the_same_flush_is_taken_at_its_own_completion() {
    big_stack(|| {
        for (seed, ring) in (1..=16u64).flat_map(|s| [(s, 512usize), (s, 1024), (s, 4096)]) {
            let mut o = Opts::new(1, ring);
            o.link.packet_ns = 4_000;
            o.cfg.signal_interval = 1;
            let mut p: P = Pair::new(o);
            let (ea, eb) = (p.a.eps[0], p.b.eps[0]);
            // a's control region follows its two rings; the READ lands in its second word.
            let read_word = p.a.data.at(2 * ring + 8).cast::<u64>();
            let mut rng = copyrpc_common::Rng(seed * 0x9e37_79b9);
            let (mut k, mut pending, mut poisoned) = (0u64, 0u64, 0u64);
            let mut b_mode = 0;
            for step in 0..4_000 {
                for _ in 0..rng.below(4) {
                    let len = 1 + rng.below(ring as u64 / 3) as usize;
                    let allowance = rng.below(ring as u64 / 16) as u32;
                    match p.a.ctx.call_with_allowance(ea, &vec![3; len], allowance, k) {
                        Ok(_) => (k, pending) = (k + 1, pending + 1),
                        Err(e) => assert!(
                            e.error.is_retryable(),
                            "ring {ring}: {len} B, allowance {allowance}: {:?}",
                            e.error
                        ),
                    }
                }
                if rng.below(2) == 0 {
                    // b's calls make a reply, and a's replies fill b's side of a's ring.
                    let _ =
                        p.b.ctx
                            .call_with_allowance(eb, &[4; 40], ring as u32 / 16, 0);
                }
                let posted = p.a.ctx.stats().reads_posted;
                p.a.ctx.poll(|_, r| {
                    // An early READ fails the endpoint, and the calls with it.
                    r.expect("a call of a's ended with an error");
                    pending -= 1;
                });
                serve_echo(&mut p.a.ctx);
                if p.a.ctx.stats().reads_posted > posted {
                    // SAFETY: a's registered memory; the device writes this word only when
                    // the READ just posted lands, in a later `step`, and nothing else
                    // touches it (this test is single-threaded).
                    unsafe { read_word.write_volatile(u64::MAX / 2) };
                    poisoned += 1;
                }
                // b's phases: it answers and polls; it holds a's calls (a's ring fills, a
                // READ is wanted while a credit return is due); or it answers without
                // polling, so its consumer moves with nothing sent, and only a READ of
                // a's shows a the room.
                if rng.below(16) == 0 {
                    b_mode = rng.below(3);
                }
                if b_mode != 2 {
                    p.b.ctx.poll(|_, r| assert!(r.is_ok()));
                }
                if b_mode != 1 {
                    serve_echo(&mut p.b.ctx);
                }
                p.step();
                assert!(
                    !p.a.ctx.is_failed(ea),
                    "seed {seed} step {step}: {:?}",
                    p.a.ctx.failure_cause(ea)
                );
            }
            let mut steps = 0;
            while pending > 0 || p.a.ctx.stats().reads_completed < p.a.ctx.stats().reads_posted {
                p.a.ctx.poll(|_, r| {
                    // An early READ fails the endpoint, and the calls with it.
                    r.expect("a call of a's ended with an error");
                    pending -= 1;
                });
                p.b.ctx.poll(|_, _| {});
                serve_echo(&mut p.b.ctx);
                serve_echo(&mut p.a.ctx);
                p.step();
                steps += 1;
                let st = p.a.ctx.stats();
                assert!(
                    steps < 100_000,
                    "seed {seed}: {pending} calls pending, {} of {} READs taken",
                    st.reads_completed,
                    st.reads_posted
                );
            }
            assert!(poisoned > 20, "seed {seed}: only {poisoned} READs");
        }
    });
}
