//! The four patterns move 1 KiB, 1 MiB and 10 MiB on the device model, checked by
//! checksum; bad input is refused before anything is posted.

mod bulk_common;

use bulk_common::{big_stack, checksum, pattern, standard, Bulk};
use copyrpc_core::bulk::{BulkError, Pattern};

const SIZES: [usize; 3] = [1 << 10, 1 << 20, 10 << 20];

fn moves(pat: Pattern) {
    big_stack(move || {
        let mut b = Bulk::new(10 << 20, 1);
        for (i, &n) in SIZES.iter().enumerate() {
            let put = pattern(i as u64 + 1, n);
            let get_src = pattern(i as u64 + 100, n);
            b.cput.buf.write(0, &put);
            b.sget.buf.write(0, &get_src);
            b.cget.buf.write(0, &vec![0; n]);
            let (pl, gl) = (
                if pat.pulls() { n as u64 } else { 0 },
                if pat.pushes() { n as u64 } else { 0 },
            );
            let op = b.call(0, pat, pl, gl).unwrap();
            b.run_until("the bulk call's reply", 2_000_000, &mut standard, |b| {
                b.client.ops().is_done(op)
            });
            let got = b.client.ops().result(op).unwrap();
            assert_eq!(got, Ok(if pat.pushes() { n as u64 } else { pl }), "{n} B");
            if pat.pulls() {
                assert_eq!(
                    checksum(&b.sput.buf.read(0, n)),
                    checksum(&put),
                    "PUT {n} B"
                );
            }
            match pat {
                Pattern::Get => {
                    assert_eq!(
                        checksum(&b.cget.buf.read(0, n)),
                        checksum(&get_src),
                        "GET {n} B"
                    )
                }
                Pattern::Both => {
                    let want: Vec<u8> = put.iter().map(|x| x ^ 0x5a).collect();
                    assert_eq!(
                        checksum(&b.cget.buf.read(0, n)),
                        checksum(&want),
                        "BOTH {n} B"
                    )
                }
                _ => {}
            }
            let ops_so_far = b.server.mover().stats().posted;
            assert!(
                pat == Pattern::HeaderOnly || ops_so_far >= (n as u64).div_ceil(128 << 10),
                "{n} B: {ops_so_far} operations posted"
            );
            assert!(b.server.idle(), "the server holds nothing after the reply");
            assert_eq!(b.server.mover().free_slots(), 16);
        }
    });
}

#[test]
fn header_only() {
    big_stack(|| {
        let mut b = Bulk::new(4096, 1);
        for _ in 0..3 {
            let op = b.call(0, Pattern::HeaderOnly, 0, 0).unwrap();
            b.run_until("a header-only reply", 10_000, &mut standard, |b| {
                b.client.ops().is_done(op)
            });
            assert_eq!(b.client.ops().result(op), Some(Ok(0)));
        }
        assert_eq!(
            b.p.b.ctx.raw_completed(b.p.b.eps[0]),
            (0, 0),
            "nothing one-sided"
        );
    });
}

#[test]
fn put_moves_1k_1m_10m() {
    moves(Pattern::Put);
}

#[test]
fn get_moves_1k_1m_10m() {
    moves(Pattern::Get);
}

#[test]
fn both_moves_1k_1m_10m() {
    moves(Pattern::Both);
}

#[test]
fn bad_input_is_a_typed_error_and_nothing_is_posted() {
    big_stack(|| {
        let mut b = Bulk::new(4096, 1);
        let (rk, va) = (b.cput.keys.rkey, b.cput.keys.va);
        assert_eq!(b.creg.describe(rk, va, 4097), Err(BulkError::BeyondRegion));
        assert_eq!(
            b.creg.describe(rk ^ 0xff00, va, 16),
            Err(BulkError::UnknownKey)
        );
        assert_eq!(b.creg.describe(rk, va, 0), Err(BulkError::ZeroLength));
        let ep = b.p.a.eps[0];
        let zero = copyrpc_core::bulk::Desc {
            addr: va,
            len: 0,
            rkey: rk,
        };
        assert_eq!(
            b.client
                .call(&mut b.p.a.ctx, ep, Pattern::Put, Some(zero), None, &[]),
            Err(BulkError::ZeroLength)
        );
        assert_eq!(
            b.client
                .call(&mut b.p.a.ctx, ep, Pattern::Get, None, None, &[]),
            Err(BulkError::NoBuffer)
        );
        let link = copyrpc_core::bulk::Link::new(&b.p.b.ctx, b.p.b.eps[0]);
        assert_eq!(
            copyrpc_core::bulk::Server::<4, 4>::new(link, 1024, 5).err(),
            Some(BulkError::TooDeep),
            "more in flight than slots"
        );
        // A request whose put descriptor is longer than the server's buffer: refused
        // with a reply, nothing posted.
        let put = b.creg.describe(rk, va, 4096).unwrap();
        let op = b
            .client
            .call(
                &mut b.p.a.ctx,
                ep,
                Pattern::Put,
                Some(put),
                None,
                &0u32.to_le_bytes(),
            )
            .unwrap();
        for _ in 0..2000 {
            b.p.a.ctx.poll(|ud, r| {
                b.client.on_response(ud, r);
            });
            b.p.b.ctx.poll(|_, _| {});
            while let Some(h) = b.p.b.ctx.recv() {
                let small = b.sreg.local(b.sput.keys.lkey, b.sput.keys.va, 100).unwrap();
                // SAFETY: the server's put area is used by this request only.
                let r = unsafe { b.server.accept(&mut b.p.b.ctx, h, Some(small), None) };
                assert_eq!(r.err(), Some(BulkError::LengthMismatch));
            }
            b.server.progress(&mut b.p.b.ctx);
            b.p.step();
            if b.client.ops().is_done(op) {
                break;
            }
        }
        assert_eq!(
            b.client.ops().result(op),
            Some(Err(copyrpc_core::ops::OpError::Refused))
        );
        assert_eq!(b.p.b.ctx.raw_completed(b.p.b.eps[0]), (0, 0));
        assert_eq!(b.p.b.ctx.raw_pending(b.p.b.eps[0]), 0, "nothing posted");
        assert!(b.server.idle());
    });
}

/// Runs the pair by hand until `op` ends (bounded): the server accepts each request
/// with the server's get area of `get_len` bytes (`None`: no buffer) after showing its
/// bytes to `seen`, and `ready` answers each one the server has ready. Returns how many
/// were ready.
fn serve_by_hand(
    b: &mut Bulk,
    op: copyrpc_core::ops::OpHandle,
    get_len: Option<u64>,
    mut seen: impl FnMut(&[u8]),
    mut ready: impl FnMut(&mut Bulk, copyrpc_core::bulk::ReqId),
) -> usize {
    let mut n = 0;
    for _ in 0..400_000 {
        if b.client.ops().is_done(op) {
            return n;
        }
        let client = &b.client;
        b.p.a.ctx.poll(|ud, r| {
            client.on_response(ud, r);
        });
        b.p.b.ctx.poll(|_, _| {});
        while let Some(h) = b.p.b.ctx.recv() {
            seen(h.data(&b.p.b.ctx));
            let get =
                get_len.and_then(|len| b.sreg.local(b.sget.keys.lkey, b.sget.keys.va, len).ok());
            // SAFETY: the server's get area is touched by nothing else meanwhile.
            unsafe { b.server.accept(&mut b.p.b.ctx, h, None, get) }.unwrap();
        }
        b.server.progress(&mut b.p.b.ctx);
        while let Some((id, _)) = b.server.next_ready() {
            ready(b, id);
            n += 1;
        }
        b.p.step();
    }
    panic!("the call never ended\n{}", b.p.dump());
}

/// `respond` with fewer bytes than the client's get buffer writes only those, and the
/// reply says how many; more than the client's buffer (or the server's) is refused and
/// the request stays held for a proper answer.
#[test]
fn a_get_answered_short_writes_only_its_bytes_and_a_long_answer_is_refused() {
    big_stack(|| {
        const LEN: usize = 8192;
        let mut b = Bulk::new(LEN, 1);
        let src = pattern(3, LEN);
        b.sget.buf.write(0, &src);
        b.cget.buf.write(0, &[0xEE; LEN]);
        let op = b.call(0, Pattern::Get, 0, LEN as u64).unwrap();
        let answered = serve_by_hand(
            &mut b,
            op,
            // The server's own get buffer: half the client's.
            Some(LEN as u64 / 2),
            |_| {},
            |b, id| {
                assert!(!b.server.idle(), "a request held, waiting for its answer");
                let ctx = &mut b.p.b.ctx;
                assert_eq!(
                    b.server.respond(ctx, id, LEN as u64 + 1),
                    Err(BulkError::BeyondRegion),
                    "more than the client's buffer"
                );
                assert_eq!(
                    b.server.respond(ctx, id, LEN as u64 / 2 + 1),
                    Err(BulkError::BeyondRegion),
                    "more than the server's buffer"
                );
                assert_eq!(b.server.respond(ctx, id, 0), Err(BulkError::ZeroLength));
                b.server.respond(ctx, id, 1000).unwrap();
            },
        );
        assert_eq!(answered, 1);
        assert_eq!(b.client.ops().result(op), Some(Ok(1000)));
        let got = b.cget.buf.read(0, LEN);
        assert_eq!(got[..1000], src[..1000]);
        assert!(
            got[1000..].iter().all(|&x| x == 0xEE),
            "written past 1000 B"
        );
    });
}

/// The caller bytes a request carries arrive intact after its fixed part, up to
/// `MAX_EXTRA` of them; one more is refused before anything is sent. The server counts
/// each answer once.
#[test]
fn caller_bytes_arrive_intact_and_one_too_many_is_refused() {
    use copyrpc_core::bulk::{Request, MAX_EXTRA};
    big_stack(|| {
        let mut b = Bulk::new(4096, 1);
        let ep = b.p.a.eps[0];
        let long = pattern(11, MAX_EXTRA + 1);
        assert_eq!(
            b.client
                .call(&mut b.p.a.ctx, ep, Pattern::HeaderOnly, None, None, &long),
            Err(BulkError::TooLong)
        );
        for n in [1, MAX_EXTRA] {
            let extra = &long[..n];
            let op = b
                .client
                .call(&mut b.p.a.ctx, ep, Pattern::HeaderOnly, None, None, extra)
                .unwrap();
            let mut seen = None;
            serve_by_hand(
                &mut b,
                op,
                None,
                |data| seen = Request::parse(data).map(|(_, x)| x.to_vec()),
                |b, id| b.server.respond(&mut b.p.b.ctx, id, 0).unwrap(),
            );
            assert_eq!(b.client.ops().result(op), Some(Ok(0)), "{n} caller bytes");
            assert_eq!(seen.as_deref(), Some(extra), "{n} caller bytes");
        }
        assert_eq!(b.server.stats().replied, [2, 0, 0, 0]);
    });
}
