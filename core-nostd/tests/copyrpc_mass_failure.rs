//! 64 endpoints of one context fail at once, each with its send queue full of
//! unacknowledged batches (a link-down on a busy node): every QP flushes every WQE into
//! the one send CQ in the same device step. With the send CQ sized as the host sizes it
//! ([`send_cq_entries`]: every block of every SQ) nothing overruns and every endpoint
//! completes as failed, every call exactly once; with the old fixed 4 096 entries the
//! CQ overruns, which is what the sizing is for (issue 21).

mod copyrpc_common;

use std::collections::HashSet;

use copyrpc_common::{big_stack, Opts, Pair};
use copyrpc_core::copyrpc::send_cq_entries;
use mlx5_raw::sim::CqInfo;

const EPS: usize = 64;
const SQ_WQEBBS: u32 = 256;

type P = Pair<EPS, 65_536, 8192, 130>;

/// What happened: the send CQ at the end, calls made, calls completed as failed (ids
/// checked for duplicates), endpoints failed.
struct Outcome {
    cq: CqInfo,
    made: usize,
    failed: usize,
    endpoints_failed: u64,
}

fn run(send_cqes: Option<u32>) -> Outcome {
    // 256 KiB rings and 16 B responses: credit for ~680 calls an endpoint, so the SQ is
    // what fills.
    let mut o = Opts::new(EPS, 256 << 10);
    o.sq_wqe_cnt = SQ_WQEBBS;
    o.send_cqes = send_cqes;
    // Nothing is acknowledged (the links are cut) and nothing times out during the
    // test: the WQEs stay outstanding until the QPs are failed.
    o.ack_timeout_ns = 10_000_000_000;
    o.cfg.probe_interval = 0;
    let mut p: P = Pair::new(o);
    for &q in &p.a.qpns {
        p.dev.set_link_cut(q, true).unwrap();
    }
    // Fill: one call per endpoint per poll, so each call goes out as a batch (a WQE) of
    // its own, until every endpoint is refused (credit, ring or SQ room).
    let mut made = 0usize;
    let mut done: HashSet<u64> = HashSet::new();
    let mut failed = 0usize;
    let mut on_resp = |k: u64, r: Result<&[u8], copyrpc_core::copyrpc::Error>| {
        assert!(r.is_err(), "call {k} answered over a cut link");
        assert!(done.insert(k), "call {k} completed twice");
        failed += 1;
    };
    let mut refused_rounds = 0;
    for _ in 0..2000 {
        let mut any = false;
        for i in 0..EPS {
            let k = made as u64;
            if p.a
                .ctx
                .call_with_allowance(p.a.eps[i], &[i as u8; 24], 16, k)
                .is_ok()
            {
                made += 1;
                any = true;
            }
        }
        p.a.ctx.poll(&mut on_resp);
        p.step();
        refused_rounds = if any { 0 } else { refused_rounds + 1 };
        if refused_rounds > 4 {
            break;
        }
    }
    assert!(refused_rounds > 4, "calls never ran out of room");
    // The mass failure: every QP to ERR in the same step.
    for &q in &p.a.qpns {
        p.dev.fail_qp(q).unwrap();
    }
    for _ in 0..200 {
        p.step();
        p.a.ctx.poll(&mut on_resp);
    }
    Outcome {
        cq: p.dev.cq_info(p.a.send_cqn).unwrap(),
        made,
        failed,
        endpoints_failed: p.a.ctx.stats().endpoints_failed,
    }
}

#[test]
fn sixty_four_qps_failing_at_once_complete_every_endpoint_without_overrun() {
    big_stack(|| {
        let entries = send_cq_entries(EPS as u32, SQ_WQEBBS);
        let out = run(None);
        eprintln!(
            "host sizing: {entries} entries, {} CQEs written, {} calls",
            out.cq.produced, out.made
        );
        assert!(!out.cq.overrun, "send CQ overran: {:?}", out.cq);
        assert_eq!(out.cq.dropped, 0);
        // The flush was a real burst: more CQEs than the old fixed size held.
        assert!(out.cq.produced > 4096, "only {} CQEs", out.cq.produced);
        assert_eq!(out.endpoints_failed, EPS as u64, "every endpoint failed");
        assert_eq!(out.failed, out.made, "every call completed once, as failed");
    });
}

#[test]
fn the_old_fixed_send_cq_overruns_in_the_same_failure() {
    big_stack(|| {
        let out = run(Some(4096));
        assert!(out.cq.overrun, "4096 entries held the flush: {:?}", out.cq);
        // Completions were lost, so not every call could be answered.
        assert!(out.failed < out.made, "{} of {}", out.failed, out.made);
    });
}
