//! Faults in the middle of bulk transfers: a QP failure, a peer's key revoked, and
//! cancellation fail every affected operation exactly once, return every slot to the
//! free list, and hang nothing. A seeded run of mixed patterns holds that under
//! random faults: `BULK_FAULT_RUNS` runs (default 40; the acceptance is 1000:
//! `BULK_FAULT_RUNS=1000 cargo test -p copyrpc-core --release --test bulk_faults`).

mod bulk_common;

use bulk_common::{big_stack, checksum, pattern, standard, Bulk, Rng};
use copyrpc_core::bulk::Pattern;
use copyrpc_core::ops::{OpError, OpHandle};

const ROUNDS: u64 = 400_000;

/// Rounds until every op in `ops` has ended and the server holds nothing; checks that
/// each op ended exactly once and every slot is back.
fn drain(b: &mut Bulk, ops: &[OpHandle], cancelled: u64, what: &str) -> Vec<Result<u64, OpError>> {
    b.run_until(what, ROUNDS, &mut standard, |b| {
        ops.iter().all(|&h| b.client.ops().is_done(h)) && b.server.idle()
    });
    assert_eq!(
        b.responses + cancelled,
        ops.len() as u64,
        "{what}: every call ends exactly once (responses {}, cancelled {cancelled})",
        b.responses
    );
    assert_eq!(b.server.mover().free_slots(), 16, "{what}: a slot leaked");
    assert_eq!(
        b.server.mover().ops().live_count(),
        0,
        "{what}: a transfer op leaked"
    );
    let r: Vec<_> = ops
        .iter()
        .map(|&h| b.client.ops().result(h).unwrap())
        .collect();
    for &h in ops {
        assert_eq!(b.client.ops().result(h), Some(Err(OpError::Gone)));
    }
    r
}

/// Rounds until some operation of the server is in flight.
fn until_in_flight(b: &mut Bulk) {
    b.run_until("an operation in flight", ROUNDS, &mut standard, |b| {
        b.server.mover().free_slots() < 16
    });
}

#[test]
fn a_qp_failure_mid_transfer_fails_each_call_once_and_frees_every_slot() {
    big_stack(|| {
        let mut b = Bulk::new(2 << 20, 2);
        let put = b.call(0, Pattern::Put, 2 << 20, 0).unwrap();
        let get = b.call(1, Pattern::Get, 0, 2 << 20).unwrap();
        until_in_flight(&mut b);
        b.p.dev.fail_qp(b.p.b.qpns[0]).unwrap();
        let r = drain(&mut b, &[put, get], 0, "calls after the server's QP failed");
        assert!(r.iter().all(|x| x.is_err()), "{r:?}");
        assert!(
            b.server.mover().stats().failed > 0,
            "the failure hit in-flight operations"
        );
    });
}

#[test]
fn a_revoked_key_mid_transfer_fails_the_call_once_and_frees_every_slot() {
    big_stack(|| {
        let mut b = Bulk::new(4 << 20, 1);
        let op = b.call(0, Pattern::Put, 4 << 20, 0).unwrap();
        until_in_flight(&mut b);
        b.p.dev.dereg_mr(b.cput.keys.lkey).unwrap();
        let r = drain(&mut b, &[op], 0, "a call whose put key was revoked");
        assert!(r[0].is_err(), "{r:?}");
    });
}

/// The link reports a failed operation as failed even when it is the only one of its
/// transfer (the raw counters say how many of the completed ones failed: the last ones).
#[test]
fn a_single_operation_that_fails_is_reported_failed_and_not_answered_ok() {
    big_stack(|| {
        let mut b = Bulk::new(64 << 10, 1);
        let ok = b.call(0, Pattern::Put, 1024, 0).unwrap();
        drain(&mut b, &[ok], 0, "a put before the fault");
        assert_eq!(b.server.mover().stats().failed, 0);
        b.p.dev.dereg_mr(b.cget.keys.lkey).unwrap();
        let op = b.call(0, Pattern::Get, 0, 1024).unwrap();
        b.responses = 0;
        let r = drain(
            &mut b,
            &[op],
            0,
            "a one-operation get into a revoked buffer",
        );
        assert!(r[0].is_err(), "{r:?}");
        assert_eq!(
            b.server.mover().stats().failed,
            1,
            "{:?}",
            b.server.mover().stats()
        );
        assert_eq!(
            b.server.stats().replied[0],
            1,
            "only the first call was answered ok: {:?}",
            b.server.stats()
        );
        assert_eq!(
            b.server.stats().reply_lost,
            1,
            "the failure took the endpoint, and the answer with it"
        );
    });
}

/// A get of `len` bytes from lane 0, in flight: the server's source filled with
/// `seed`'s pattern, the call made, rounds until an operation of it is posted.
fn get_in_flight(len: usize, seed: u64) -> (Bulk, OpHandle) {
    let mut b = Bulk::new(len, 1);
    b.sget.buf.write(0, &pattern(seed, len));
    let op = b.call(0, Pattern::Get, 0, len as u64).unwrap();
    until_in_flight(&mut b);
    (b, op)
}

/// The caller reuses the client's get buffer once its call ended: whatever the server
/// still runs must not land in it.
fn reuse_get_buffer_and_check(b: &mut Bulk, len: usize) {
    b.cget.buf.write(0, &vec![0xA5u8; len]);
    for _ in 0..2_000 {
        b.round(&mut standard);
    }
    assert!(b.server.idle(), "the server still moves bytes");
    let hit = b
        .cget
        .buf
        .read(0, len)
        .iter()
        .filter(|&&x| x != 0xA5)
        .count();
    assert_eq!(hit, 0, "{hit} bytes of the reused buffer were written");
}

/// A link counts the operations it posted until `drain` reports them.
#[test]
fn a_link_counts_its_operations_until_drained() {
    use copyrpc_core::bulk::{Dir, Link, OneSided};
    use copyrpc_core::ops::WrId;
    big_stack(|| {
        let mut b = Bulk::new(4096, 1);
        // The client's endpoint carries no raw operation of its own: this link's alone.
        let ep = b.p.a.eps[0];
        let mut link = Link::new(&b.p.a.ctx, ep);
        assert_eq!(link.outstanding(), 0);
        let (remote, local) = (
            mlx5_raw::Remote {
                addr: b.sput.keys.va,
                rkey: b.sput.keys.rkey,
            },
            mlx5_raw::Sge {
                addr: b.cget.keys.va,
                len: 64,
                lkey: b.cget.keys.lkey,
            },
        );
        for k in 0..2 {
            // SAFETY: both buffers are registered and untouched until drained.
            unsafe {
                link.poster(&mut b.p.a.ctx)
                    .post(Dir::Read, WrId(k), remote, local)
            }
            .unwrap();
        }
        assert_eq!(link.outstanding(), 2);
        let mut done = Vec::new();
        for _ in 0..ROUNDS {
            b.p.a.ctx.poll(|_, _| {});
            link.drain(&b.p.a.ctx, |wr, ok| done.push((wr.0, ok)));
            if done.len() == 2 {
                break;
            }
            b.p.step();
        }
        assert_eq!(done, [(0, true), (1, true)]);
        assert_eq!(link.outstanding(), 0);
    });
}

/// A server that cancels a get mid-transfer lets go of the request (and answers it) only
/// once its WRITEs in flight have completed: the server's buffer is its caller's again
/// then, and the client's when the call ends.
#[test]
fn a_server_cancel_answers_only_after_its_writes_in_flight_completed() {
    big_stack(|| {
        const LEN: usize = 2 << 20;
        let (mut b, op) = get_in_flight(LEN, 5);
        assert!(!b.server.idle(), "idle with a transfer in flight");
        assert!(
            !b.server.mover().idle(),
            "the mover idle with a transfer in flight"
        );
        assert_eq!(b.server.cancel_all(), 1);
        assert!(!b.server.mover().idle(), "its slots are still the device's");
        // The server lets go of the request (its buffers are the caller's again) only
        // once no operation of it is in flight.
        b.run_until("the cancelled get to end", ROUNDS, &mut standard, |b| {
            assert!(
                b.server.held() == 1 || b.server.mover().free_slots() == 16,
                "the request was let go with operations in flight"
            );
            b.client.ops().is_done(op)
        });
        assert_eq!(b.client.ops().result(op), Some(Err(OpError::Failed)));
        reuse_get_buffer_and_check(&mut b, LEN);
    });
}

#[test]
fn cancel_all_on_both_sides_mid_transfer_ends_each_call_once() {
    big_stack(|| {
        let mut b = Bulk::new(2 << 20, 2);
        let a = b.call(0, Pattern::Both, 2 << 20, 2 << 20).unwrap();
        let c = b.call(1, Pattern::Get, 0, 2 << 20).unwrap();
        until_in_flight(&mut b);
        assert!(b.server.cancel_all() > 0);
        // The server answers the cancelled requests as failed; the client takes it.
        let r = drain(&mut b, &[a, c], 0, "calls whose transfers were cancelled");
        assert!(r.contains(&Err(OpError::Failed)), "{r:?}");
        // Client-side cancel: the call ends, cancelled, with its late reply.
        let d = b.call(0, Pattern::Put, 0, 0).unwrap_err();
        assert_eq!(d, copyrpc_core::bulk::BulkError::NoBuffer);
        let e = b.call(0, Pattern::Put, 1 << 20, 0).unwrap();
        let n = b.client.cancel_all() as u64;
        assert_eq!(n, 1);
        assert_eq!(b.client.cancel_all(), 0, "cancelled twice");
        b.responses = 0;
        let r = drain(&mut b, &[e], n, "a call cancelled by the client");
        assert_eq!(r, [Err(OpError::Cancelled)]);
        assert_eq!(
            b.late_responses, 1,
            "the late reply ended the cancelled call"
        );
    });
}

/// A cancelled get's buffer is the server's until the call ends: once the handle reads
/// as ended, nothing the server sends can land in it.
#[test]
fn a_cancelled_get_ends_only_when_the_server_is_done_with_its_buffer() {
    big_stack(|| {
        const LEN: usize = 2 << 20;
        let (mut b, op) = get_in_flight(LEN, 7);
        assert_eq!(b.client.cancel_all(), 1);
        assert_eq!(
            b.client.in_flight(),
            1,
            "cancelled, the buffer still the server's"
        );
        assert!(
            !b.client.ops().is_done(op),
            "ended while the server still writes"
        );
        b.run_until("the cancelled get to end", ROUNDS, &mut standard, |b| {
            b.client.ops().is_done(op)
        });
        assert_eq!(b.client.ops().result(op), Some(Err(OpError::Cancelled)));
        assert_eq!(b.client.in_flight(), 0);
        reuse_get_buffer_and_check(&mut b, LEN);
    });
}

/// A request handed to the server of another endpoint is answered as a bad request,
/// and nothing is posted for it: its transfers would reach the wrong peer.
#[test]
fn a_request_from_another_endpoint_is_refused_and_answered() {
    use bulk_common::copyrpc_common::{Opts, Pair};
    use copyrpc_core::bulk::{BulkError, Client, Link, Server};
    big_stack(|| {
        let mut p: Pair<2, 64, 128> = Pair::new(Opts::new(2, 4096));
        let mut client: Client<4> = Client::new();
        let link = Link::new(&p.b.ctx, p.b.eps[0]);
        let mut server: Server<4, 4> = Server::new(link, 4096, 1).unwrap();
        let op = client
            .call(
                &mut p.a.ctx,
                p.a.eps[1],
                Pattern::HeaderOnly,
                None,
                None,
                b"x",
            )
            .unwrap();
        let mut accepted = None;
        while !client.ops().is_done(op) {
            p.a.ctx.poll(|ud, r| {
                client.on_response(ud, r);
            });
            p.b.ctx.poll(|_, _| {});
            while let Some(h) = p.b.ctx.recv() {
                assert_eq!(h.endpoint(), p.b.eps[1]);
                // SAFETY: no buffers are named.
                accepted = Some(unsafe { server.accept(&mut p.b.ctx, h, None, None) });
            }
            server.progress(&mut p.b.ctx);
            p.step();
            assert!(p.steps < 400_000, "the call never ended\n{}", p.dump());
        }
        assert_eq!(accepted, Some(Err(BulkError::WrongEndpoint)));
        assert_eq!(client.ops().result(op), Some(Err(OpError::Refused)));
        assert_eq!(server.held(), 0);
        assert_eq!(server.stats().replied, [0, 0, 1, 0]);
    });
}

/// A reply the call cannot have (another call's tag, more bytes than `get` holds, a
/// pulled count other than `put`'s length, malformed bytes) ends the call with
/// `BadReply`: never a byte count beyond the caller's buffer.
#[test]
fn a_reply_that_does_not_fit_its_call_ends_it_as_a_bad_reply() {
    use bulk_common::copyrpc_common::{Opts, Pair};
    use copyrpc_core::bulk::{Client, Desc, Reply, Request, Status, REPLY_SIZE};
    const LEN: u64 = 4096;
    // (pattern, how the fake server changes the right reply's tag and byte count,
    // what the call must end with)
    type Forge = fn(u32, u64) -> Option<(u32, u64)>;
    let cases: [(Pattern, Forge, Result<u64, OpError>); 8] = [
        (Pattern::Get, |t, n| Some((t, n)), Ok(LEN)),
        (Pattern::Get, |t, n| Some((t, n - 1)), Ok(LEN - 1)),
        (
            Pattern::Get,
            |t, n| Some((t, n + 1)),
            Err(OpError::BadReply),
        ),
        (
            Pattern::Get,
            |t, n| Some((t ^ 1, n)),
            Err(OpError::BadReply),
        ),
        (Pattern::Put, |t, n| Some((t, n)), Ok(LEN)),
        (
            Pattern::Put,
            |t, n| Some((t, n - 1)),
            Err(OpError::BadReply),
        ),
        (
            Pattern::HeaderOnly,
            |t, _| Some((t, 1)),
            Err(OpError::BadReply),
        ),
        (Pattern::Get, |_, _| None, Err(OpError::BadReply)),
    ];
    big_stack(move || {
        for (i, (pattern, forge, want)) in cases.into_iter().enumerate() {
            let mut p: Pair<1, 64, 128> = Pair::new(Opts::new(1, 4096));
            let mut client: Client<4> = Client::new();
            let buf = Desc {
                addr: 0x1000,
                len: LEN,
                rkey: 7,
            };
            let (put, get) = (pattern.pulls(), pattern.pushes());
            let op = client
                .call(
                    &mut p.a.ctx,
                    p.a.eps[0],
                    pattern,
                    put.then_some(buf),
                    get.then_some(buf),
                    b"",
                )
                .unwrap();
            while !client.ops().is_done(op) {
                p.a.ctx.poll(|ud, r| {
                    client.on_response(ud, r);
                });
                p.b.ctx.poll(|_, _| {});
                while let Some(h) = p.b.ctx.recv() {
                    let (req, _) = Request::parse(h.data(&p.b.ctx)).unwrap();
                    let right = if get { req.get.len } else { req.put.len };
                    let mut out = [0xffu8; REPLY_SIZE];
                    if let Some((tag, bytes)) = forge(req.tag, right) {
                        Reply {
                            status: Status::Ok,
                            tag,
                            bytes,
                        }
                        .emit(&mut out);
                    }
                    h.reply(&mut p.b.ctx, &out).unwrap();
                }
                p.step();
                assert!(p.steps < 400_000, "case {i}: the call never ended");
            }
            assert_eq!(client.ops().result(op), Some(want), "case {i}: {pattern:?}");
        }
    });
}

/// The application's own calls share the context with bulk calls and number their
/// user data as they like: a response to one of them is not a bulk reply, even when its
/// number equals a pending bulk call's handle, and the bulk call goes on waiting for its
/// own reply (its buffers stay the server's until then).
#[test]
fn the_applications_own_responses_never_end_a_bulk_call() {
    use bulk_common::copyrpc_common::{Opts, Pair};
    use copyrpc_core::bulk::{Client, Desc, Reply, Request, Status, REPLY_SIZE};
    big_stack(|| {
        let mut p: Pair<1, 64, 128> = Pair::new(Opts::new(1, 4096));
        let mut client: Client<4> = Client::new();
        let get = Desc {
            addr: 0x1000,
            len: 64,
            rkey: 7,
        };
        let op = client
            .call(&mut p.a.ctx, p.a.eps[0], Pattern::Get, None, Some(get), b"")
            .unwrap();
        // The application's calls, numbered from 0 up past the bulk call's handle as a
        // bare number (`OpHandle::to_u64`: its identity above 16 bits of index).
        let own = op.to_u64();
        let mut answered = [false; 2];
        for user in [0, own] {
            p.a.ctx
                .call_with_allowance(p.a.eps[0], b"plain", 16, user)
                .unwrap();
        }
        let mut held = None;
        let mut rounds = 0;
        while !client.ops().is_done(op) {
            p.a.ctx.poll(|ud, r| {
                if !client.on_response(ud, r) {
                    assert_eq!(r.unwrap(), b"plain answer", "user data {ud:#x}");
                    answered[usize::from(ud == own)] = true;
                }
            });
            p.b.ctx.poll(|_, _| {});
            while let Some(h) = p.b.ctx.recv() {
                if h.data(&p.b.ctx) == b"plain" {
                    h.reply(&mut p.b.ctx, b"plain answer").unwrap();
                } else {
                    held = Some(h);
                }
            }
            // The bulk request is answered only once both plain answers are in.
            if answered == [true; 2] {
                if let Some(h) = held.take() {
                    let (req, _) = Request::parse(h.data(&p.b.ctx)).unwrap();
                    let mut out = [0u8; REPLY_SIZE];
                    Reply {
                        status: Status::Ok,
                        tag: req.tag,
                        bytes: 64,
                    }
                    .emit(&mut out);
                    h.reply(&mut p.b.ctx, &out).unwrap();
                }
            } else {
                assert!(
                    !client.ops().is_done(op),
                    "a plain answer ended the bulk call"
                );
            }
            p.step();
            rounds += 1;
            assert!(rounds < 400_000, "the calls never ended");
        }
        assert_eq!(answered, [true; 2]);
        assert_eq!(client.ops().result(op), Some(Ok(64)));
    });
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    None,
    FailServerQp,
    FailClientQp,
    RevokePut,
    RevokeGet,
    CancelServer,
    CancelClient,
}

/// One seeded run; returns whether its fault struck while an operation was in flight.
fn one_run(seed: u64) -> bool {
    const LANE: usize = 512 << 10;
    let mut rng = Rng(seed | 1);
    let mut b = Bulk::new(LANE, 4);
    let pats = [
        Pattern::HeaderOnly,
        Pattern::Put,
        Pattern::Get,
        Pattern::Both,
    ];
    let mut ops = Vec::new();
    let mut want = Vec::new();
    for k in 0..4 {
        let pat = pats[rng.below(4) as usize];
        let n = 1 + rng.below(LANE as u64) as usize;
        let put = pattern(seed + k as u64, n);
        let src = pattern(seed + 50 + k as u64, n);
        b.cput.buf.write(k * LANE, &put);
        b.sget.buf.write(k * LANE, &src);
        let (pl, gl) = (
            if pat.pulls() { n as u64 } else { 0 },
            if pat.pushes() { n as u64 } else { 0 },
        );
        ops.push(b.call(k, pat, pl, gl).unwrap());
        want.push((pat, n, put, src));
    }
    let faults = [
        Fault::None,
        Fault::FailServerQp,
        Fault::FailClientQp,
        Fault::RevokePut,
        Fault::RevokeGet,
        Fault::CancelServer,
        Fault::CancelClient,
    ];
    let fault = faults[rng.below(faults.len() as u64) as usize];
    // Four transfers of up to 512 KiB take some 5 to 30 rounds on this link: most faults
    // strike mid-transfer, some before the first operation or after the last.
    let at = rng.below(48);
    for _ in 0..at {
        b.round(&mut standard);
    }
    let mut cancelled = 0;
    let struck = !matches!(fault, Fault::None) && b.server.mover().free_slots() < 16;
    match fault {
        Fault::None => {}
        Fault::FailServerQp => b.p.dev.fail_qp(b.p.b.qpns[0]).unwrap(),
        Fault::FailClientQp => b.p.dev.fail_qp(b.p.a.qpns[0]).unwrap(),
        Fault::RevokePut => b.p.dev.dereg_mr(b.cput.keys.lkey).unwrap(),
        Fault::RevokeGet => b.p.dev.dereg_mr(b.cget.keys.lkey).unwrap(),
        Fault::CancelServer => {
            b.server.cancel_all();
        }
        Fault::CancelClient => cancelled = b.client.cancel_all() as u64,
    }
    let what = format!("seed {seed}, {fault:?} at round {at}");
    let r = drain(&mut b, &ops, cancelled, &what);
    if matches!(fault, Fault::None) {
        for (k, (res, (pat, n, put, src))) in r.iter().zip(&want).enumerate() {
            assert!(res.is_ok(), "{what}: lane {k} {pat:?} {res:?}");
            if pat.pulls() {
                assert_eq!(
                    checksum(&b.sput.buf.read(k * LANE, *n)),
                    checksum(put),
                    "{what}"
                );
            }
            if *pat == Pattern::Get {
                assert_eq!(
                    checksum(&b.cget.buf.read(k * LANE, *n)),
                    checksum(src),
                    "{what}"
                );
            }
        }
    }
    struck
}

#[test]
fn seeded_fault_runs_of_mixed_patterns() {
    let runs: u64 = std::env::var("BULK_FAULT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    big_stack(move || {
        let struck = (0..runs)
            .filter(|seed| one_run(0x9e37_79b9 + seed * 7919))
            .count() as u64;
        // Faults that always land before or after the transfers would test nothing.
        assert!(
            struck * 10 >= runs,
            "only {struck} of {runs} faults struck an operation in flight"
        );
        eprintln!("{struck} of {runs} faults struck an operation in flight");
    });
}
