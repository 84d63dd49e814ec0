//! Ring wraps: more than a thousand laps of both rings with checksummed payloads of
//! random sizes; nothing lost, duplicated or corrupted.

mod copyrpc_common;

use std::collections::HashMap;

use copyrpc_common::{big_stack, pattern, Opts, Pair, Rng};
use copyrpc_core::copyrpc::Error;

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// `len` bytes: an 8-byte checksum of the rest, then a pattern.
fn checked(seed: u64, len: usize) -> Vec<u8> {
    let body = pattern(seed, len.saturating_sub(8));
    let mut v = fnv(&body).to_le_bytes()[..len.min(8)].to_vec();
    v.extend_from_slice(&body);
    v
}

fn verify(bytes: &[u8]) -> bool {
    if bytes.len() < 8 {
        return true;
    }
    bytes[..8] == fnv(&bytes[8..]).to_le_bytes()
}

#[test]
fn a_thousand_wraps_with_checksums() {
    big_stack(|| {
        let o = Opts::new(1, 1024);
        let mut p: Pair<1, 64, 32> = Pair::new(o);
        let mut rng = Rng(0x5eed);
        let mut expect: HashMap<u64, u64> = HashMap::new();
        let (mut next, mut done) = (0u64, 0u64);
        let (ea, eb) = (p.a.eps[0], p.b.eps[0]);
        while p.a.ctx.stats().wraps < 1000 || p.b.ctx.stats().wraps < 1000 {
            assert!(p.steps < 2_000_000, "stalled\n{}", p.dump());
            for _ in 0..4 {
                let len = rng.below(100) as usize;
                let payload = checked(next, len);
                match p.a.ctx.call_with_allowance(ea, &payload, 100, next) {
                    Ok(_) => {
                        // The reply is the request reversed, checksum first again.
                        let mut reply = payload.get(8..).unwrap_or(&[]).to_vec();
                        reply.reverse();
                        expect.insert(next, fnv(&reply));
                        next += 1;
                    }
                    Err(e) => {
                        assert!(matches!(
                            e.error,
                            Error::RingFull | Error::InsufficientCredit
                        ));
                        break;
                    }
                }
            }
            p.a.ctx.poll(|k, r| {
                let bytes = r.unwrap();
                assert!(verify(bytes), "response {k} corrupted");
                if bytes.len() >= 8 {
                    assert_eq!(Some(fnv(&bytes[8..])), expect.remove(&k));
                } else {
                    expect.remove(&k).unwrap();
                }
                done += 1;
            });
            p.b.ctx.poll(|_, _| unreachable!());
            while let Some(h) = p.b.ctx.recv() {
                assert_eq!(h.endpoint(), eb);
                let req = h.data(&p.b.ctx);
                assert!(verify(req), "request corrupted");
                let len = req.len();
                h.reply_with(&mut p.b.ctx, len, |req, out| {
                    if req.len() < 8 {
                        out.copy_from_slice(req);
                        return;
                    }
                    let body = &mut out[8..];
                    body.copy_from_slice(&req[8..]);
                    body.reverse();
                    let sum = fnv(body);
                    out[..8].copy_from_slice(&sum.to_le_bytes());
                })
                .unwrap();
            }
            p.step();
        }
        // Short payloads echo unchanged; their expected sums were of the reversed tail,
        // so only check counts for those.
        let sa = *p.a.ctx.stats();
        let sb = *p.b.ctx.stats();
        eprintln!(
            "{} calls, {} responses, {} steps\na {sa:?}\nb {sb:?}",
            next, done, p.steps
        );
        assert!(sa.wraps >= 1000 && sb.wraps >= 1000);
        assert_eq!(sa.stray_responses + sb.stray_responses, 0);
        assert!(next - done <= 64, "at most the window is still in flight");
    });
}
