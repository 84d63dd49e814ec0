//! What the API tells a caller: why an endpoint failed (`failure_cause`), which setup
//! or raw-post step was refused (distinct `Error` variants), and a poll that hands out
//! at most so many completions per call (`poll_bounded`).

mod copyrpc_common;

use copyrpc_common::{big_stack, serve_echo, Opts, Pair};
use copyrpc_core::copyrpc::{Error, FailureCause, Side};
use mlx5_raw::layout::Syndrome;
use mlx5_raw::{Remote, Sge};

type P = Pair<1, 64, 128>;

/// Polls both sides (B echoing) until `done` holds; bounded.
fn run_until(p: &mut P, what: &str, mut done: impl FnMut(&mut P) -> bool) {
    while !done(p) {
        p.a.ctx.poll(|_, _| {});
        p.b.ctx.poll(|_, _| {});
        serve_echo(&mut p.b.ctx);
        p.step();
        assert!(p.steps < 20_000, "gave up waiting for {what}\n{}", p.dump());
    }
}

#[test]
fn a_failed_endpoint_reports_why() {
    big_stack(|| {
        let mut p: P = Pair::new(Opts::new(1, 4096));
        let (ea, eb) = (p.a.eps[0], p.b.eps[0]);
        assert_eq!(p.a.ctx.failure_cause(ea), None);
        // The application's own failure.
        p.b.ctx.fail_endpoint(eb).unwrap();
        assert_eq!(p.b.ctx.failure_cause(eb), Some(FailureCause::Application));
        // A dead link: the pending call's WRITE (or the probe READ) runs out of retries.
        p.a.ctx.call(ea, b"into the void", 1).unwrap();
        let qa = p.a.qpns[0];
        p.dev.set_link_cut(qa, true).unwrap();
        run_until(&mut p, "A's endpoint to fail", |p| p.a.ctx.is_failed(ea));
        match p.a.ctx.failure_cause(ea) {
            Some(FailureCause::ErrorCompletion {
                side: Side::Send,
                error,
            }) => assert_eq!(error.syndrome, Syndrome::TransportRetryExcErr),
            other => panic!("expected a send-side retry-exceeded completion, got {other:?}"),
        }
        // The first cause stays, whatever the application does next.
        p.a.ctx.fail_endpoint(ea).unwrap();
        assert!(matches!(
            p.a.ctx.failure_cause(ea),
            Some(FailureCause::ErrorCompletion { .. })
        ));
    });
}

#[test]
fn refusals_name_the_step_that_is_wrong() {
    big_stack(|| {
        let mut p: P = Pair::new(Opts::new(1, 4096));
        let (ea, eb) = (p.a.eps[0], p.b.eps[0]);
        let ib = p.b.ctx.local_info(eb).unwrap();
        assert_eq!(p.a.ctx.connect(ea, &ib), Err(Error::AlreadyConnected));
        let to_b = Remote {
            addr: p.b.scratch(0),
            rkey: p.b.keys.rkey,
        };
        let lkey = p.a.keys.lkey;
        let huge = [Sge {
            addr: p.a.scratch(0),
            len: 1 << 31,
            lkey,
        }];
        // SAFETY: refused before anything is posted (the entry is 2 GiB); no device
        // operation touches the memory.
        let r = unsafe { p.a.ctx.post_rdma_write(ea, to_b, &huge) };
        assert_eq!(r, Err(Error::SgeTooLong));
        let many = [Sge {
            addr: p.a.scratch(0),
            len: 8,
            lkey,
        }; 64];
        // SAFETY: as above: 64 entries do not fit one WQE, nothing is posted.
        let r = unsafe { p.a.ctx.post_rdma_read(ea, to_b, &many) };
        assert_eq!(r, Err(Error::TooManySges));
        assert_eq!(p.a.ctx.raw_pending(ea), 0);
        for e in [
            Error::AlreadyConnected,
            Error::SgeTooLong,
            Error::TooManySges,
        ] {
            assert!(!e.is_retryable(), "{e} is permanent");
        }
    });
}

#[test]
fn a_bounded_poll_hands_out_a_burst_over_several_calls_once_each_in_order() {
    big_stack(|| {
        let mut p: P = Pair::new(Opts::new(1, 4096));
        let ea = p.a.eps[0];
        const N: u64 = 10;
        const MAX: u32 = 3;
        for k in 0..N {
            p.a.ctx
                .call_with_allowance(ea, &k.to_le_bytes(), 8, k)
                .unwrap();
        }
        // B answers each request in a batch of its own (a flush after each reply), so
        // A's recv CQ receives N completions, one response each.
        let mut answered = 0;
        while answered < N {
            p.a.ctx
                .poll(|_, _| unreachable!("no response before B answers"));
            p.b.ctx.poll(|_, _| unreachable!());
            while let Some(h) = p.b.ctx.recv() {
                h.reply_with(&mut p.b.ctx, 8, |req, out| out.copy_from_slice(req))
                    .unwrap();
                p.b.ctx.flush();
                answered += 1;
            }
            p.step();
            assert!(p.steps < 5_000, "B never received the calls\n{}", p.dump());
        }
        // Let every reply land in A's recv CQ before A reads any.
        let landed = |p: &P| {
            let c = p.dev.cq_info(p.a.recv_cqn).unwrap();
            c.produced.wrapping_sub(c.consumer_index)
        };
        while landed(&p) < N as u32 {
            p.b.ctx.poll(|_, _| unreachable!());
            p.step();
            assert!(p.steps < 10_000, "the replies never landed\n{}", p.dump());
        }
        let mut got = Vec::new();
        let mut calls = 0;
        while (got.len() as u64) < N {
            let mut this_call = 0;
            p.a.ctx.poll_bounded(MAX, |k, r| {
                assert_eq!(r.unwrap(), &k.to_le_bytes(), "response to call {k}");
                got.push(k);
                this_call += 1;
            });
            assert!(
                this_call <= MAX as usize,
                "{this_call} responses in one call"
            );
            calls += 1;
            assert!(calls <= N, "responses stopped coming: {got:?}");
        }
        assert_eq!(got, (0..N).collect::<Vec<_>>(), "each once, in order");
        assert_eq!(
            calls,
            N.div_ceil(u64::from(MAX)),
            "as few calls as the bound allows"
        );
        assert_eq!(p.a.ctx.pending_calls(), 0);
    });
}
