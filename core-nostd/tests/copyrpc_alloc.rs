//! No heap allocation in the steady-state call / poll / recv / reply / flush loop: a counting
//! global allocator watches the thread while two contexts echo thousands of calls
//! through the device model, wraps and credit batches included.

mod copyrpc_common;
#[path = "../../mlx5-raw/tests/counting_alloc/mod.rs"]
mod counting_alloc;

use copyrpc_common::{big_stack, serve_echo, Opts, Pair};

#[test]
fn steady_state_allocates_nothing() {
    big_stack(|| {
        let o = Opts::new(2, 2048);
        let mut p: Pair<2, 64, 64> = Pair::new(o);
        let payload = [0x5au8; 96];
        let mut sent = 0u64;
        let mut done = 0u64;
        let mut bytes = 0usize;
        let mut round = |p: &mut Pair<2, 64, 64>, sent: &mut u64, done: &mut u64| {
            for i in 0..2 {
                while p.a.ctx.pending_calls_on(p.a.eps[i]) < 4 {
                    let len = (*sent % 97) as usize;
                    if p.a
                        .ctx
                        .call_with_allowance(p.a.eps[i], &payload[..len], 96, *sent)
                        .is_err()
                    {
                        break;
                    }
                    *sent += 1;
                }
            }
            p.a.ctx.poll(|_, r| {
                bytes += r.map_or(0, <[u8]>::len);
                *done += 1;
            });
            // Alternate rounds answer inside poll_serve and through recv.
            if sent.is_multiple_of(2) {
                p.b.ctx.poll_serve(
                    |_, _| unreachable!(),
                    |r| {
                        let len = r.data().len().min(r.max_reply_len());
                        let res = r.reply_with(len, |q, o| o.copy_from_slice(&q[..o.len()]));
                        assert!(res.is_ok(), "echo fits");
                    },
                );
            } else {
                p.b.ctx.poll(|_, _| unreachable!());
            }
            serve_echo(&mut p.b.ctx);
            p.b.ctx.flush();
            p.step();
        };
        // Warm-up, unwatched: the test's own first-use allocations (thread locals,
        // lazily initialised std state) happen here.
        for _ in 0..200 {
            round(&mut p, &mut sent, &mut done);
        }
        let wraps_before = p.a.ctx.stats().wraps;
        let done_before = done;
        counting_alloc::watch(true);
        for _ in 0..5_000 {
            round(&mut p, &mut sent, &mut done);
        }
        counting_alloc::watch(false);
        let allocs = counting_alloc::take();
        eprintln!("{} responses, {bytes} bytes", done - done_before);
        assert!(done - done_before > 2_000, "the loop did real work");
        assert!(
            p.a.ctx.stats().wraps > wraps_before + 50,
            "wraps ran inside"
        );
        assert!(
            p.b.ctx.stats().served_in_poll > 1_000,
            "poll_serve ran inside"
        );
        assert_eq!(allocs, 0, "heap allocations in the steady-state loop");
    });
}
