//! Echo between two copyrpc contexts on the device model: 1, 8 and 64 endpoints,
//! payloads 0–4096 B across the padding and inline boundaries, replies out of order.

mod copyrpc_common;

use std::collections::HashMap;

use copyrpc_common::{big_stack, pattern, serve_echo, Opts, Pair, Rng};

/// Sends `per_ep` calls on every endpoint (at most `window` outstanding per endpoint),
/// echoes them on `b`, and checks every response against its request.
fn echo<const E: usize, const C: usize, const R: usize, const Q: usize>(
    o: Opts,
    per_ep: usize,
    window: usize,
    size: impl Fn(usize) -> usize,
) -> Pair<E, C, R, Q> {
    let mut p: Pair<E, C, R, Q> = Pair::new(o);
    let n = o.endpoints;
    let mut sent = vec![0usize; n];
    let mut outstanding = vec![0usize; n];
    let mut expect: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut done = 0;
    let total = n * per_ep;
    let mut guard = 0;
    while done < total {
        guard += 1;
        assert!(guard < 200_000, "echo stalled\n{}", p.dump());
        for i in 0..n {
            while sent[i] < per_ep && outstanding[i] < window {
                let k = (i * per_ep + sent[i]) as u64;
                let payload = pattern(k, size(k as usize));
                let allowance = payload.len() as u32;
                match p
                    .a
                    .ctx
                    .call_with_allowance(p.a.eps[i], &payload, allowance, k)
                {
                    Ok(_) => {
                        expect.insert(k, payload);
                        sent[i] += 1;
                        outstanding[i] += 1;
                    }
                    Err(e) => {
                        assert!(
                            matches!(
                                e.error,
                                copyrpc_core::copyrpc::Error::RingFull
                                    | copyrpc_core::copyrpc::Error::InsufficientCredit
                            ),
                            "{:?}",
                            e.error
                        );
                        assert_eq!(e.user_data, k, "user data handed back");
                        break;
                    }
                }
            }
        }
        p.a.ctx.poll(|k, r| {
            let bytes = r.expect("no failure in an echo run");
            let want = expect.remove(&k).expect("one response per call");
            assert_eq!(bytes, &want[..], "response {k} corrupted");
            outstanding[k as usize / per_ep] -= 1;
            done += 1;
        });
        p.b.ctx.poll(|_, _| panic!("b made no calls"));
        serve_echo(&mut p.b.ctx);
        p.step();
    }
    assert!(expect.is_empty());
    eprintln!(
        "steps {} a {:?}\nb {:?}",
        p.steps,
        p.a.ctx.stats(),
        p.b.ctx.stats()
    );
    assert_eq!(p.a.ctx.pending_calls(), 0);
    p
}

#[test]
fn one_endpoint_every_size_to_4096() {
    big_stack(|| {
        // 4096-byte payloads need a 4160-byte allowance: rings of 32 KiB.
        let o = Opts::new(1, 32 << 10);
        let sizes: Vec<usize> = (0..=64)
            .chain([
                148, 149, 180, 181, 204, 205, 220, 221, 1000, 2048, 4095, 4096,
            ])
            .chain((0..40).map(|i| i * 101 % 4097))
            .collect();
        let n = sizes.len();
        let p = echo::<1, 64, 1024, 130>(o, n, 4, |k| sizes[k]);
        assert_eq!(p.a.ctx.stats().endpoints_failed, 0);
        // Both the inline and the inline-head + SGE paths ran: sizes on both sides of
        // the 220-byte batch threshold went out, and every byte came back above.
        assert!(p.a.ctx.stats().batches_posted > 0);
    });
}

#[test]
fn padding_boundaries_20_and_21() {
    big_stack(|| {
        let o = Opts::new(1, 4096);
        let p = echo::<1, 64, 128, 130>(o, 200, 8, |k| [0, 20, 21, 52, 53, 1][k % 6]);
        // 20 B pads to 32 and 21 B to 64: the run only passes if both parse back.
        assert_eq!(p.b.ctx.stats().stray_responses, 0);
        // B's replies wrapped its send ring (flushes through the general path), yet B,
        // which has no calls pending (so never probes) and never ran short of ring room
        // for a credit batch, had no reason to READ A's consumer.
        let b = p.b.ctx.stats();
        assert!(b.wraps > 0, "the replies wrapped the ring");
        assert_eq!(
            (b.reads_posted, b.probes_posted),
            (0, 0),
            "B read with nothing to learn"
        );
    });
}

#[test]
fn eight_endpoints() {
    big_stack(|| {
        let o = Opts::new(8, 4096);
        echo::<8, 256, 128, 130>(o, 300, 8, |k| k * 37 % 300);
    });
}

#[test]
fn sixty_four_endpoints() {
    big_stack(|| {
        let o = Opts::new(64, 4096);
        let p = echo::<64, 4096, 128, 130>(o, 40, 4, |k| k * 13 % 200);
        assert_eq!(p.a.ctx.stats().endpoints_failed, 0);
    });
}

/// 1 024 endpoints in one context (issue 21: a daemon serving 1 024 peer ranks), each
/// calling and answered, on a device of 2 050 QPs.
#[test]
fn a_thousand_and_twenty_four_endpoints() {
    big_stack(|| {
        let mut o = Opts::new(1024, 4096);
        // Small SQs keep the rig's send CQ (endpoints × SQ WQEs) at 16 Ki entries.
        o.sq_wqe_cnt = 16;
        let p = echo::<1024, 4096, 128, 2050>(o, 3, 2, |k| k * 13 % 120);
        assert_eq!(p.a.ctx.stats().endpoints_failed, 0);
        assert_eq!(p.b.ctx.stats().endpoints_failed, 0);
        // Every endpoint carried its calls: the last index is as alive as the first.
        assert!(p.a.ctx.stats().batches_posted >= 1024);
    });
}

#[test]
fn replies_out_of_order() {
    big_stack(|| {
        let o = Opts::new(2, 4096);
        let mut p: copyrpc_common::Pair<2, 64, 128> = Pair::new(o);
        let mut rng = Rng(7);
        let mut got = Vec::new();
        for round in 0..20u64 {
            for i in 0..2 {
                for j in 0..6u64 {
                    let k = round * 100 + i as u64 * 10 + j;
                    p.a.ctx
                        .call_with_allowance(p.a.eps[i], &k.to_le_bytes(), 8, k)
                        .unwrap();
                }
            }
            let mut held = Vec::new();
            for _ in 0..200 {
                p.a.ctx.poll(|k, r| got.push((k, r.unwrap().to_vec())));
                p.b.ctx.poll(|_, _| unreachable!());
                while let Some(h) = p.b.ctx.recv() {
                    held.push(h);
                }
                p.step();
                if held.len() == 12 {
                    break;
                }
            }
            assert_eq!(held.len(), 12);
            // Answer in a shuffled order, each with its own request's bytes.
            while !held.is_empty() {
                let h = held.swap_remove(rng.below(held.len() as u64) as usize);
                let echo = h.data(&p.b.ctx).to_vec();
                h.reply(&mut p.b.ctx, &echo).unwrap();
                if rng.below(3) == 0 {
                    p.b.ctx.poll(|_, _| unreachable!());
                    p.step();
                    p.a.ctx.poll(|k, r| got.push((k, r.unwrap().to_vec())));
                }
            }
            for _ in 0..200 {
                p.b.ctx.poll(|_, _| unreachable!());
                p.a.ctx.poll(|k, r| got.push((k, r.unwrap().to_vec())));
                p.step();
                if p.a.ctx.pending_calls() == 0 {
                    break;
                }
            }
            assert_eq!(p.a.ctx.pending_calls(), 0);
        }
        assert_eq!(got.len(), 240);
        let mut order_differs = false;
        for (n, (k, bytes)) in got.iter().enumerate() {
            assert_eq!(bytes, &k.to_le_bytes(), "response carries its own request");
            if n > 0 && got[n - 1].0 > *k && got[n - 1].0 / 100 == k / 100 {
                order_differs = true;
            }
        }
        assert!(order_differs, "replies really went out of order");
    });
}
