//! The device model's requester: its timers fire exactly when they are due and not
//! before, its READ limit and its per-step budget hold. What the first mutation sample
//! of `sim/requester.rs` found no test reading (docs/TESTING.md).

mod common;
mod sim_common;

use mlx5_raw::layout::{CqeOpcode, FmCeSe, Syndrome};
use mlx5_raw::sim::{DeviceConfig, LinkConfig, TraceKind};
use mlx5_raw::{Payload, SqConfig};
use sim_common::{pattern, Opts, Rig};

const SIG: FmCeSe = FmCeSe::CQ_UPDATE;

/// A QP idle for longer than its ACK timeout, then sending: the timer starts with the
/// packet, so nothing is resent and no retry is spent.
#[test]
fn an_idle_qp_that_sends_starts_its_ack_timer_with_the_packet() {
    let mut r = Rig::new(Opts {
        tweak: |a, _| a.ack_timeout_ns = 20_000,
        // The ACK takes steps to come back, so a timer running from before the packet
        // would expire while it travels.
        link: LinkConfig {
            latency_ns: 5_000,
            ..LinkConfig::default()
        },
        ..Opts::signal_on_request()
    });
    r.steps(100); // 100 µs idle: five timeouts' worth
    r.trace.clear();
    let mut b = r.a.sq.batch();
    b.rdma_write(r.b.remote(0), Payload::inline(b"late"), SIG)
        .unwrap();
    b.finish();
    let c = r.a_sends(1);
    assert_eq!((c[0].opcode, c[0].error), (CqeOpcode::Req, None));
    let timeouts = r
        .trace
        .iter()
        .filter(|e| matches!(e.kind, TraceKind::AckTimeout { .. }))
        .count();
    assert_eq!(timeouts, 0, "{}", r.dump());
    assert_eq!(r.dev.qp_info(r.a.qpn).unwrap().retries_left, 7);
    assert_eq!(r.sent_by(r.a.qpn).len(), 1, "sent once");
}

/// A lost packet is resent when the ACK timer has run exactly its length since the
/// packet went out: not a step earlier, not a step later.
#[test]
fn the_ack_timer_fires_when_it_is_due() {
    let timeout = 50_000;
    let mut r = Rig::new(Opts {
        tweak: |a, _| a.ack_timeout_ns = 50_000,
        ..Opts::signal_on_request()
    });
    r.dev.set_link_cut(r.a.qpn, true).unwrap();
    r.trace.clear();
    let mut b = r.a.sq.batch();
    b.rdma_write(r.b.remote(0), Payload::inline(b"lost"), SIG)
        .unwrap();
    b.finish();
    r.run_until("the ACK timeout", 1_000, |r| {
        r.trace
            .iter()
            .any(|e| matches!(e.kind, TraceKind::AckTimeout { .. }))
    });
    let sent = r.sent_by(r.a.qpn)[0].0;
    let fired = r
        .trace
        .iter()
        .find(|e| matches!(e.kind, TraceKind::AckTimeout { .. }))
        .unwrap()
        .t;
    assert_eq!(fired - sent, timeout, "{}", r.dump());
    r.dev.set_link_cut(r.a.qpn, false).unwrap();
    assert_eq!(r.a_sends(1)[0].error, None);
    assert_eq!(r.b.data.read(0, 4), b"lost");
}

/// After an RNR NAK the requester resends at the step its RNR timer ends.
#[test]
fn an_rnr_wait_ends_when_its_timer_does() {
    let mut r = Rig::new(Opts::signal_on_request());
    r.trace.clear();
    let mut b = r.a.sq.batch();
    b.send(Payload::inline(b"rnr"), SIG).unwrap();
    b.finish();
    r.run_until("the RNR wait", 1_000, |r| {
        r.trace
            .iter()
            .any(|e| matches!(e.kind, TraceKind::RnrWait { .. }))
    });
    let until = r
        .trace
        .iter()
        .find_map(|e| match e.kind {
            TraceKind::RnrWait { until, .. } => Some(until),
            _ => None,
        })
        .unwrap();
    let buf = [r.b.sge(0, 64)];
    r.b.post_recv_sges(&buf);
    assert_eq!(r.b_recvs(1)[0].byte_cnt, 3);
    let sends = r.sent_by(r.a.qpn);
    assert_eq!(sends.len(), 2, "{sends:?}");
    assert_eq!(sends[1].0, until, "resent at the end of the wait");
}

/// At most `max_rd_atomic` READs are in flight: of three READs posted behind a WRITE
/// with a limit of 2, the first step sends the WRITE and two READ requests (the WRITE
/// does not count), and the third READ waits for a response.
#[test]
fn reads_in_flight_stop_at_max_rd_atomic_and_writes_do_not_count() {
    let mut r = Rig::new(Opts {
        tweak: |a, _| a.max_rd_atomic = 2,
        ..Opts::signal_on_request()
    });
    let src = pattern(51, 3 * 64);
    r.b.data.write(0, &src);
    let local: Vec<_> = (0..3).map(|i| [r.a.sge(1024 + 64 * i, 64)]).collect();
    r.trace.clear();
    let mut b = r.a.sq.batch();
    b.rdma_write(r.b.remote(4096), Payload::inline(b"w"), SIG)
        .unwrap();
    for (i, l) in local.iter().enumerate() {
        // SAFETY: each scatter entry lies in `a.data`, read only after the completions.
        unsafe { b.rdma_read(r.b.remote(64 * i as u64), l, SIG) }.unwrap();
    }
    b.finish();
    r.step();
    let first: Vec<String> = r.sent_by(r.a.qpn).into_iter().map(|p| p.1).collect();
    assert_eq!(
        first.iter().filter(|p| p.contains("READ_REQ")).count(),
        2,
        "{first:?}"
    );
    assert_eq!(first.iter().filter(|p| p.contains("WRITE")).count(), 1);
    // A READ request is a one-packet message: first and last.
    assert!(
        first
            .iter()
            .filter(|p| p.contains("READ_REQ"))
            .all(|p| p.contains(" first last")),
        "{first:?}"
    );
    let c = r.a_sends(4);
    assert!(c.iter().all(|c| c.error.is_none()), "{c:?}");
    assert_eq!(r.a.data.read(1024, 3 * 64), src);
}

/// The requester sends at most the configured budget of packets a step: a WRITE of
/// eight packets goes out over four steps with a budget of 2.
#[test]
fn a_multi_packet_write_is_paced_by_the_step_budget() {
    let budget = 2;
    let mut r = Rig::new(Opts::signal_on_request().paced(budget));
    let src = pattern(61, 8 * 256);
    r.a.data.write(0, &src);
    let gather = [r.a.sge(0, 8 * 256)];
    r.trace.clear();
    let mut b = r.a.sq.batch();
    // SAFETY: the gather entry lies in `a.data`, untouched until the completion.
    b.rdma_write(r.b.remote(0), unsafe { Payload::gather(&gather) }, SIG)
        .unwrap();
    b.finish();
    assert_eq!(r.a_sends(1)[0].error, None);
    assert_eq!(r.b.data.read(0, 8 * 256), src);
    let mut per_step = std::collections::BTreeMap::<u64, u32>::new();
    for (t, _) in r.sent_by(r.a.qpn) {
        *per_step.entry(t).or_default() += 1;
    }
    assert_eq!(per_step.values().sum::<u32>(), 8);
    assert!(
        per_step.values().all(|&n| n <= budget),
        "packets a step: {per_step:?}"
    );
}

/// Steps the rig until side a has `n` send completions, summing what the steps report
/// as fetched WQEs.
fn wqes_until_sends(r: &mut Rig, n: usize) -> u32 {
    let mut wqes = 0;
    for _ in 0..10_000 {
        wqes += r.dev.step(r.now).wqes;
        r.now += r.tick;
        r.poll();
        if r.a_send.len() >= n {
            return wqes;
        }
    }
    panic!("{n} send completions not reached\n{}", r.dump());
}

/// A step counts the WQEs it fetched, the ones it fails at fetch (a bad key) too.
#[test]
fn a_step_counts_the_wqes_it_fetches_good_or_failed() {
    let mut r = Rig::new(Opts::signal_on_request());
    let mut b = r.a.sq.batch();
    b.rdma_write(r.b.remote(0), Payload::inline(b"one"), SIG)
        .unwrap();
    b.finish();
    assert_eq!(wqes_until_sends(&mut r, 1), 1);
    assert_eq!(r.a_send.pop().unwrap().error, None);

    let mut r = Rig::new(Opts::signal_on_request());
    let bad = [mlx5_raw::Sge {
        lkey: 0x00ab_cd01,
        ..r.a.sge(0, 64)
    }];
    let mut b = r.a.sq.batch();
    // SAFETY: the entry names `a.data` (with a key no MR has): nothing is read.
    b.rdma_write(r.b.remote(0), unsafe { Payload::gather(&bad) }, SIG)
        .unwrap();
    b.finish();
    assert_eq!(wqes_until_sends(&mut r, 1), 1);
    let e = r.a_send.pop().unwrap().error.expect("a protection error");
    assert_eq!(e.syndrome, Syndrome::LocalProtErr);
}

/// A WQE the application rewrites while the device still sends it (its opcode, with
/// the same length) fails as a local QP operation error at its next packet instead
/// of going on as something else.
#[test]
fn a_wqe_rewritten_while_outstanding_fails() {
    let mut r = Rig::new(Opts {
        mtu: 256,
        dev: DeviceConfig {
            budget: 1,
            ..DeviceConfig::DEFAULT
        },
        ..Opts::signal_on_request()
    });
    r.a.data.write(0, &pattern(71, 4 * 256));
    let gather = [r.a.sge(0, 4 * 256)];
    let mut b = r.a.sq.batch();
    // SAFETY: the gather entry lies in `a.data`, untouched until the completion.
    let p = b
        .rdma_write(r.b.remote(0), unsafe { Payload::gather(&gather) }, SIG)
        .unwrap();
    b.finish();
    r.step();
    assert_eq!(r.sent_by(r.a.qpn).len(), 1, "one packet of four out");
    let at = usize::from(p.wqe_index) * 64;
    let mut ctrl = r.a.sq_buf.read(at, 4);
    ctrl[3] = 0x09; // WRITE_IMM: the same segments, the same length
    r.a.sq_buf.write(at, &ctrl);
    let c = r.a_sends(1);
    assert_eq!(c[0].wqe_counter, p.wqe_index);
    assert_eq!(
        c[0].error.map(|e| e.syndrome),
        Some(Syndrome::LocalQpOpErr),
        "{}",
        r.dump()
    );
}

/// Inline data longer than a packet: the second packet carries the inline bytes from
/// where the first stopped.
#[test]
fn inline_data_longer_than_the_mtu_arrives_whole() {
    let mut r = Rig::new(Opts {
        mtu: 256,
        sq_cfg: SqConfig {
            max_inline: 400,
            ..SqConfig::COPYRPC
        },
        ..Opts::signal_on_request()
    });
    let msg = pattern(81, 300);
    let mut b = r.a.sq.batch();
    b.rdma_write(r.b.remote(0), Payload::inline(&msg), SIG)
        .unwrap();
    b.finish();
    assert_eq!(r.a_sends(1)[0].error, None);
    assert_eq!(r.sent_by(r.a.qpn).len(), 2, "two packets");
    assert_eq!(r.b.data.read(0, 300), msg);
}
