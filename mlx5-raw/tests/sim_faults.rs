//! Every fault path of the device model, through the driver side: the CQE opcode and
//! syndrome docs/spec/mlx5.md#qp-errors-and-flush gives for the failing WQE, the
//! WR_FLUSH_ERR of every WQE after it (outstanding or rung later), the responder's side,
//! and the async events.

mod common;
mod sim_common;

use mlx5_raw::layout::{Completion, CqeOpcode, FmCeSe, Syndrome};
use mlx5_raw::sim::{Access, AsyncEvent, DeviceConfig, FlushMode, QpState, TraceKind, TraceSink};
use mlx5_raw::{Payload, Posted, Remote, Sge};
use sim_common::{pattern, Opts, Rig, Side};

const SIG: FmCeSe = FmCeSe::CQ_UPDATE;
const UNSIG: FmCeSe = FmCeSe::COMP_ONLY_ERR;

/// (opcode, syndrome, wqe_counter) of each completion.
fn summary(c: &[Completion]) -> Vec<(CqeOpcode, Option<u8>, u16)> {
    c.iter()
        .map(|c| (c.opcode, c.error.map(|e| e.syndrome.as_u8()), c.wqe_counter))
        .collect()
}

/// Posts `bad` through `post`, preceded by a good signaled WRITE and followed by an
/// unsignaled WRITE and a signaled NOP; runs until the error; checks: the good WQE
/// completes first, then REQ_ERR with `syndrome` for the bad one, then WR_FLUSH_ERR for
/// each following WQE, and a WQE posted after the error is flushed as it is rung.
fn error_then_flush(
    r: &mut Rig,
    syndrome: Syndrome,
    post: impl FnOnce(&mut mlx5_raw::SqBatch<'_>, &Side) -> Posted,
) {
    flush_after(r, true, syndrome, post);
}

/// As [`error_then_flush`]; without the good WQE first when the fault breaks every WQE
/// of the QP (a cut link, a dead peer, a peer refusing all WRITEs).
fn flush_after(
    r: &mut Rig,
    with_good: bool,
    syndrome: Syndrome,
    post: impl FnOnce(&mut mlx5_raw::SqBatch<'_>, &Side) -> Posted,
) {
    let good_remote = r.b.remote(60_000);
    let next_remote = r.b.remote(61_000);
    let mut b = r.a.sq.batch();
    let good = with_good.then(|| {
        b.rdma_write(good_remote, Payload::inline(b"good"), SIG)
            .unwrap()
    });
    let bad = post(&mut b, &r.b);
    let after1 = b
        .rdma_write(next_remote, Payload::inline(b"never"), UNSIG)
        .unwrap();
    let after2 = b.nop(SIG).unwrap();
    b.finish();
    let c = r.a_sends(3 + usize::from(with_good));
    let flush = Some(Syndrome::WrFlushErr.as_u8());
    let mut want = Vec::new();
    if let Some(good) = good {
        want.push((CqeOpcode::Req, None, good.wqe_index));
    }
    want.extend([
        (CqeOpcode::ReqErr, Some(syndrome.as_u8()), bad.wqe_index),
        (CqeOpcode::ReqErr, flush, after1.wqe_index),
        (CqeOpcode::ReqErr, flush, after2.wqe_index),
    ]);
    assert_eq!(summary(&c), want, "{}", r.dump());
    let c = &c[usize::from(with_good)..];
    // The error CQE names the failed WQE's opcode and this QP.
    assert_eq!(c[0].qpn, r.a.qpn);
    assert_eq!(c[1].error.unwrap().vendor_syndrome, 0xf9);
    assert_eq!(r.dev.qp_info(r.a.qpn).unwrap().state, QpState::Err);
    assert_eq!(
        r.b.data.read(61_000, 5),
        [0; 5],
        "flushed WQEs do not execute"
    );
    // Rung after the error: flushed too.
    let mut b = r.a.sq.batch();
    let late = b.nop(UNSIG).unwrap();
    b.finish();
    let c = r.a_sends(1);
    assert_eq!(summary(&c), [(CqeOpcode::ReqErr, flush, late.wqe_index)]);
}

fn events(r: &mut Rig) -> Vec<AsyncEvent> {
    std::iter::from_fn(|| r.dev.poll_event()).collect()
}

#[test]
fn rnr_retry_exceeded() {
    let mut r = Rig::new(Opts {
        tweak: |a, side| {
            if side == 'a' {
                a.rnr_retry = 2;
            } else {
                a.min_rnr_timer = 1; // 10 µs
            }
        },
        ..Opts::signal_on_request()
    });
    // b's SRQ is empty: the WRITE_IMM is NAKed RNR three times (first try + 2 retries).
    let t0 = r.now;
    error_then_flush(&mut r, Syndrome::RnrRetryExcErr, |b, bs| {
        b.rdma_write_imm(bs.remote(0), Payload::inline(b"x"), [1; 4], SIG)
            .unwrap()
    });
    let waits = r
        .trace
        .iter()
        .filter(|e| matches!(e.kind, TraceKind::RnrWait { .. }))
        .count();
    assert_eq!(waits, 2);
    assert!(r.now - t0 >= 2 * 10_000, "waited the RNR timer twice");
    // The responder is unaffected (Class B): still RTS, nothing consumed.
    assert_eq!(r.dev.qp_info(r.b.qpn).unwrap().state, QpState::Rts);
    r.poll();
    assert!(r.b_recv.is_empty());
    assert!(events(&mut r).contains(&AsyncEvent::QpFatal {
        qpn: r.a.qpn,
        syndrome: Syndrome::RnrRetryExcErr,
    }));
}

#[test]
fn rnr_with_infinite_retry_recovers_when_a_wqe_is_posted() {
    let mut r = Rig::new(Opts::signal_on_request()); // rnr_retry = 7
    let mut b = r.a.sq.batch();
    b.rdma_write_imm(r.b.remote(8), Payload::inline(b"late"), [7; 4], SIG)
        .unwrap();
    b.finish();
    r.steps(500);
    r.poll();
    assert!(r.a_send.is_empty() && r.b_recv.is_empty());
    let info = r.dev.qp_info(r.a.qpn).unwrap();
    assert_eq!(info.state, QpState::Rts);
    assert!(r
        .trace
        .iter()
        .any(|e| matches!(e.kind, TraceKind::RnrWait { left: None, .. })));
    r.b.srq.post_batch(1).unwrap();
    let c = r.b_recvs(1);
    assert_eq!(c[0].imm, Some([7; 4]));
    assert_eq!(summary(&r.a_sends(1)), [(CqeOpcode::Req, None, 0)]);
    assert_eq!(r.b.data.read(8, 4), b"late");
}

#[test]
fn remote_access_errors() {
    // bad rkey, out of bounds (by one byte), MR without REMOTE_WRITE, READ of an MR
    // without REMOTE_READ: REMOTE_ACCESS_ERR (0x13) and the responder QP to ERR.
    for case in 0..4 {
        let mut r = Rig::new(Opts::signal_on_request());
        let len = r.b.data.len() as u64;
        // SAFETY: a sub-range of b's data buffer, which outlives the device.
        let local_only = unsafe {
            r.dev
                .reg_mr(r.pd, r.b.data.ptr(), 4096, Access::LOCAL_WRITE)
                .unwrap()
        };
        let read_sge = [r.a.sge(0, 16)];
        error_then_flush(&mut r, Syndrome::RemoteAccessErr, |b, bs| match case {
            0 => {
                let bad = Remote {
                    rkey: bs.keys.rkey ^ 0x80,
                    ..bs.remote(0)
                };
                b.rdma_write(bad, Payload::inline(b"zz"), UNSIG).unwrap()
            }
            1 => b
                .rdma_write(bs.remote(len - 7), Payload::inline(b"8 bytes!"), UNSIG)
                .unwrap(),
            2 => b
                .rdma_write_imm(
                    Remote {
                        addr: local_only.va,
                        rkey: local_only.rkey,
                    },
                    Payload::inline(b"zz"),
                    [0; 4],
                    UNSIG,
                )
                .unwrap(),
            // SAFETY: the scatter entry lies in a's region and is not read by the test.
            _ => unsafe {
                b.rdma_read(
                    Remote {
                        addr: local_only.va,
                        rkey: local_only.rkey,
                    },
                    &read_sge,
                    UNSIG,
                )
            }
            .unwrap(),
        });
        assert_eq!(
            r.dev.qp_info(r.b.qpn).unwrap().state,
            QpState::Err,
            "case {case}"
        );
        let ev = events(&mut r);
        assert!(
            ev.contains(&AsyncEvent::QpAccessErr { qpn: r.b.qpn }),
            "{ev:?}"
        );
        r.poll();
        assert!(r.b_recv.is_empty(), "no receive WQE was taken");
    }
}

#[test]
fn remote_invalid_request_when_the_qp_does_not_allow_writes() {
    let mut r = Rig::new(Opts {
        tweak: |a, side| {
            if side == 'b' {
                a.access = Access::REMOTE_READ;
            }
        },
        ..Opts::signal_on_request()
    });
    flush_after(&mut r, false, Syndrome::RemoteInvalReqErr, |b, bs| {
        b.rdma_write(bs.remote(0), Payload::inline(b"no"), UNSIG)
            .unwrap()
    });
    assert_eq!(r.dev.qp_info(r.b.qpn).unwrap().state, QpState::Err);
    // The responder's own error names the invalid request, as the requester's does.
    assert!(
        events(&mut r).contains(&AsyncEvent::QpFatal {
            qpn: r.b.qpn,
            syndrome: Syndrome::RemoteInvalReqErr,
        }),
        "{}",
        r.dump()
    );
}

#[test]
fn send_longer_than_the_receive_buffer() {
    // Requester REMOTE_INVAL_REQ_ERR (0x12); responder RESP_ERR LOCAL_LENGTH_ERR (0x01)
    // on the SRQ WQE it took.
    let mut r = Rig::new(Opts::signal_on_request());
    let small = [r.b.sge(0, 10)];
    let idx = r.b.post_recv_sges(&small);
    let msg = pattern(1, 100);
    error_then_flush(&mut r, Syndrome::RemoteInvalReqErr, |b, _| {
        b.send(Payload::inline(&msg), UNSIG).unwrap()
    });
    r.poll();
    let rc = std::mem::take(&mut r.b_recv);
    assert_eq!(
        summary(&rc),
        [(
            CqeOpcode::RespErr,
            Some(Syndrome::LocalLengthErr.as_u8()),
            idx
        )]
    );
    assert_eq!(rc[0].qpn, r.b.qpn);
    assert_eq!(rc[0].srqn_uidx, r.b.srqn, "RESP_ERR names the SRQ (CQE v0)");
    assert_eq!(r.b.data.read(0, 10), [0; 10], "nothing placed");
}

#[test]
fn receive_wqe_with_a_bad_lkey() {
    // Requester REMOTE_OP_ERR (0x14); responder RESP_ERR LOCAL_PROT_ERR (0x04).
    let mut r = Rig::new(Opts::signal_on_request());
    let bad = [Sge {
        lkey: 0x00ab_cd01,
        ..r.b.sge(0, 64)
    }];
    let idx = r.b.post_recv_sges(&bad);
    error_then_flush(&mut r, Syndrome::RemoteOpErr, |b, _| {
        b.send(Payload::inline(b"hello"), UNSIG).unwrap()
    });
    r.poll();
    assert_eq!(
        summary(&r.b_recv),
        [(
            CqeOpcode::RespErr,
            Some(Syndrome::LocalProtErr.as_u8()),
            idx
        )]
    );
}

#[test]
fn local_protection_errors() {
    // bad lkey, gather beyond the region, READ into a region without LOCAL_WRITE:
    // LOCAL_PROT_ERR (0x04); nothing reaches the responder.
    for case in 0..3 {
        let mut r = Rig::new(Opts::signal_on_request());
        // SAFETY: part of a's data buffer, which outlives the device.
        let ro = unsafe {
            r.dev
                .reg_mr(r.pd, r.a.data.ptr(), 4096, Access::NONE)
                .unwrap()
        };
        let len = r.a.data.len() as u64;
        let sges = [
            Sge {
                lkey: r.a.keys.lkey + 0x1000,
                ..r.a.sge(0, 8)
            },
            r.a.sge(len - 8, 9),
            Sge {
                addr: ro.va,
                len: 8,
                lkey: ro.lkey,
            },
        ];
        error_then_flush(&mut r, Syndrome::LocalProtErr, |b, bs| {
            let s = std::slice::from_ref(&sges[case]);
            // SAFETY: the device rejects these entries before touching memory; the test
            // only reads the rig's data after completion.
            unsafe {
                if case == 2 {
                    b.rdma_read(bs.remote(0), s, UNSIG)
                } else {
                    b.rdma_write(bs.remote(0), Payload::gather(s), UNSIG)
                }
            }
            .unwrap()
        });
        assert_eq!(r.dev.qp_info(r.b.qpn).unwrap().state, QpState::Rts);
    }
}

#[test]
fn malformed_wqes_are_local_qp_operation_errors() {
    // Corrupt the ctrl segment of a posted WQE before the device fetches it: wrong
    // wqe_index, wrong QPN, DS = 0, an opcode the model does not execute (atomic CAS),
    // DS too small for the opcode, inline data in a READ.
    for case in 0..6 {
        let mut r = Rig::new(Opts::signal_on_request());
        let mut b = r.a.sq.batch();
        let good = b
            .rdma_write(r.b.remote(0), Payload::inline(b"ok"), SIG)
            .unwrap();
        let bad = b
            .rdma_write(r.b.remote(8), Payload::inline(b"bad"), SIG)
            .unwrap();
        let after = b
            .rdma_write(r.b.remote(16), Payload::inline(b"no"), UNSIG)
            .unwrap();
        let last = b.nop(SIG).unwrap();
        b.finish();
        let at = usize::from(bad.wqe_index) * 64;
        let mut ctrl = r.a.sq_buf.read(at, 32);
        match case {
            0 => ctrl[2] ^= 1,                   // wqe_index
            1 => ctrl[6] ^= 1,                   // QPN
            2 => ctrl[7] &= 0xc0,                // DS = 0
            3 => ctrl[3] = 0x11,                 // ATOMIC_CS
            4 => ctrl[7] = (ctrl[7] & 0xc0) | 1, // WRITE with DS 1 (no raddr)
            _ => ctrl[3] = 0x10,                 // READ whose data segment is inline
        }
        r.a.sq_buf.write(at, &ctrl);
        let c = r.a_sends(4);
        let flush = Some(Syndrome::WrFlushErr.as_u8());
        assert_eq!(
            summary(&c),
            [
                (CqeOpcode::Req, None, good.wqe_index),
                (CqeOpcode::ReqErr, Some(0x02), bad.wqe_index),
                (CqeOpcode::ReqErr, flush, after.wqe_index),
                (CqeOpcode::ReqErr, flush, last.wqe_index),
            ],
            "case {case}\n{}",
            r.dump()
        );
        assert_eq!(c[1].send_opcode, Some(ctrl[3]));
        assert_eq!(r.b.data.read(8, 3), [0; 3]);
    }
}

#[test]
fn cut_link_ends_in_transport_retry_exceeded() {
    let mut r = Rig::new(Opts {
        tweak: |a, _| {
            a.ack_timeout_ns = 20_000;
            a.retry_cnt = 3;
        },
        ..Opts::signal_on_request()
    });
    r.dev.set_link_cut(r.a.qpn, true).unwrap();
    let t0 = r.now;
    flush_after(&mut r, false, Syndrome::TransportRetryExcErr, |b, bs| {
        b.rdma_write(bs.remote(0), Payload::inline(b"lost"), UNSIG)
            .unwrap()
    });
    let timeouts = r
        .trace
        .iter()
        .filter(|e| matches!(e.kind, TraceKind::AckTimeout { .. }))
        .count();
    assert_eq!(timeouts, 3);
    assert!(r.now - t0 >= 4 * 20_000);
    assert_eq!(r.b.data.read(0, 4), [0; 4]);
}

#[test]
fn lost_ack_is_recovered_without_executing_twice() {
    // b executes a WRITE_IMM and a SEND and ACKs; the link is cut before a sees the ACK;
    // a times out, the link comes back, a resends: b re-ACKs the duplicates without
    // consuming SRQ WQEs or writing CQEs again.
    let mut r = Rig::new(Opts {
        tweak: |a, _| {
            a.ack_timeout_ns = 20_000;
            a.retry_cnt = 7;
        },
        ..Opts::signal_on_request()
    });
    r.b.srq.post_batch(2).unwrap();
    let mut b = r.a.sq.batch();
    b.rdma_write_imm(r.b.remote(0), Payload::inline(b"once"), [1; 4], SIG)
        .unwrap();
    b.send(Payload::EMPTY, SIG).unwrap();
    b.finish();
    r.step(); // a sends, b executes and queues the ACK into the link
    r.dev.set_link_cut(r.a.qpn, true).unwrap();
    r.steps(30);
    r.poll();
    assert!(r.a_send.is_empty());
    assert_eq!(r.b_recv.len(), 2);
    r.dev.set_link_cut(r.a.qpn, false).unwrap();
    let c = r.a_sends(2);
    assert!(c.iter().all(|c| c.error.is_none()), "{c:?}");
    r.steps(50);
    r.poll();
    assert_eq!(r.b_recv.len(), 2, "no duplicate responder CQE");
    assert_eq!(r.dev.srq_info(r.b.srqn).unwrap().consumed, 2);
    assert!(r.trace.iter().any(|e| matches!(
        e.kind,
        TraceKind::Packet {
            dir: mlx5_raw::sim::PacketDir::Dropped("duplicate PSN (re-acknowledged)"),
            ..
        }
    )));
}

#[test]
fn failed_qp_flushes_everything_without_an_error_cqe() {
    let mut r = Rig::new(Opts::signal_on_request());
    let mut b = r.a.sq.batch();
    let w: Vec<u16> = (0..3)
        .map(|i| {
            b.rdma_write(
                r.b.remote(i * 8),
                Payload::inline(b"x"),
                if i == 1 { SIG } else { UNSIG },
            )
            .unwrap()
            .wqe_index
        })
        .collect();
    b.finish();
    r.dev.fail_qp(r.a.qpn).unwrap();
    let c = r.a_sends(3);
    let flush = Some(Syndrome::WrFlushErr.as_u8());
    assert_eq!(
        summary(&c),
        w.iter()
            .map(|&i| (CqeOpcode::ReqErr, flush, i))
            .collect::<Vec<_>>()
    );
    assert!(events(&mut r).contains(&AsyncEvent::QpFatal {
        qpn: r.a.qpn,
        syndrome: Syndrome::WrFlushErr
    }));
}

#[test]
fn failed_peer_leaves_the_requester_to_retry_and_fail() {
    let mut r = Rig::new(Opts {
        tweak: |a, _| {
            a.ack_timeout_ns = 10_000;
            a.retry_cnt = 1;
        },
        ..Opts::signal_on_request()
    });
    r.dev.fail_qp(r.b.qpn).unwrap();
    r.step();
    flush_after(&mut r, false, Syndrome::TransportRetryExcErr, |b, bs| {
        b.rdma_write(bs.remote(0), Payload::inline(b"x"), UNSIG)
            .unwrap()
    });
}

#[test]
fn stalled_device_does_nothing_until_released() {
    let mut r = Rig::new(Opts::signal_on_request());
    let mut b = r.a.sq.batch();
    b.rdma_write(r.b.remote(0), Payload::inline(b"stall"), SIG)
        .unwrap();
    b.finish();
    let until = r.now + 50_000;
    r.dev.stall_until(until);
    while r.now < until {
        r.step();
        r.poll();
        assert!(r.a_send.is_empty());
    }
    assert_eq!(
        r.dev.qp_info(r.a.qpn).unwrap().doorbell,
        0,
        "not even the doorbell"
    );
    assert_eq!(r.a_sends(1)[0].error, None);
    assert_eq!(r.b.data.read(0, 5), b"stall");
}

#[test]
fn delayed_completions_keep_their_order() {
    let mut r = Rig::new(Opts::signal_on_request());
    r.dev.set_cq_delay(r.a.scqn, 40_000).unwrap();
    let mut b = r.a.sq.batch();
    for i in 0..3u64 {
        b.rdma_write(r.b.remote(i * 8), Payload::inline(b"d"), SIG)
            .unwrap();
    }
    b.finish();
    let t0 = r.now;
    // All three are written to the CQ's staging first, and reported held back.
    r.run_until("three CQEs held back", 1_000, |r| {
        r.dev.cq_info(r.a.scqn).unwrap().delayed == 3
    });
    assert!(r.a_send.is_empty(), "nothing visible while held back");
    let c = r.a_sends(3);
    assert!(r.now - t0 >= 40_000, "visible after {} ns", r.now - t0);
    assert_eq!(
        c.iter().map(|c| c.wqe_counter).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    // The data was placed long before the CQEs appeared.
    assert_eq!(r.b.data.read(16, 1), b"d");
    assert_eq!(r.dev.cq_info(r.a.scqn).unwrap().delayed, 0);
}

/// More completions held back at once than the CQ's staging holds (16): the oldest is
/// written early to make room, and every CQE still arrives once, in order.
#[test]
fn more_delayed_completions_than_the_staging_holds_arrive_in_order() {
    let mut r = Rig::new(Opts::signal_on_request());
    r.dev.set_cq_delay(r.a.scqn, 1_000_000).unwrap();
    let mut b = r.a.sq.batch();
    for i in 0..20u64 {
        b.rdma_write(r.b.remote(i * 8), Payload::inline(b"s"), SIG)
            .unwrap();
    }
    b.finish();
    let mut most = 0;
    r.run_until("20 completions through the staging", 100_000, |r| {
        most = most.max(r.dev.cq_info(r.a.scqn).unwrap().delayed);
        r.a_send.len() >= 20
    });
    let c = std::mem::take(&mut r.a_send);
    assert_eq!(
        c.iter().map(|c| c.wqe_counter).collect::<Vec<_>>(),
        (0..20).collect::<Vec<u16>>()
    );
    assert_eq!(most, 16, "the staging filled");
    assert_eq!(r.dev.cq_info(r.a.scqn).unwrap().delayed, 0);
}

/// A send that finds the SRQ empty is answered with an RNR NAK, which the step counts;
/// once a receive is posted, the retry lands.
#[test]
fn an_rnr_nak_is_counted_by_the_step_that_sends_it() {
    let mut r = Rig::new(Opts::signal_on_request());
    let mut b = r.a.sq.batch();
    b.send(Payload::inline(b"wait"), SIG).unwrap();
    b.finish();
    let mut naks = 0;
    for _ in 0..1_000 {
        naks += r.dev.step(r.now).rnr_naks;
        r.now += r.tick;
        if naks > 0 {
            break;
        }
    }
    assert_eq!(naks, 1, "one RNR NAK for the one send\n{}", r.dump());
    let buf = [r.b.sge(0, 64)];
    r.b.post_recv_sges(&buf);
    assert_eq!(r.b_recvs(1)[0].byte_cnt, 4);
    assert_eq!(r.b.data.read(0, 4), b"wait");
}

#[test]
fn cq_overrun_is_an_error_not_an_overwrite() {
    let mut r = Rig::new(Opts {
        cqe_cnt: 4,
        ..Opts::signal_on_request()
    });
    let mut b = r.a.sq.batch();
    for _ in 0..6 {
        b.nop(SIG).unwrap();
    }
    b.finish();
    r.steps(3); // nobody polls: the 5th CQE finds the CQ full
    let info = r.dev.cq_info(r.a.scqn).unwrap();
    assert!(info.overrun);
    assert_eq!((info.produced, info.dropped), (4, 2));
    assert!(events(&mut r).contains(&AsyncEvent::CqError { cqn: r.a.scqn }));
    assert!(r
        .trace
        .iter()
        .any(|e| matches!(e.kind, TraceKind::CqOverrun { .. })));
    // The four CQEs written are intact, in order; nothing more appears.
    let c = r.a.poll_send();
    assert_eq!(
        summary(&c),
        (0..4)
            .map(|i| (CqeOpcode::Req, None, i))
            .collect::<Vec<_>>()
    );
    r.steps(5);
    assert!(r.a.poll_send().is_empty());
}

#[test]
fn flush_mode_signaled_only() {
    let mut r = Rig::new(Opts {
        dev: DeviceConfig {
            flush: FlushMode::SignaledOnly,
            ..DeviceConfig::DEFAULT
        },
        ..Opts::signal_on_request()
    });
    let bad = [Sge {
        lkey: 0x7777_0001,
        ..r.a.sge(0, 8)
    }];
    let mut b = r.a.sq.batch();
    // SAFETY: rejected before any memory access.
    let p0 = b
        .rdma_write(r.b.remote(0), unsafe { Payload::gather(&bad) }, UNSIG)
        .unwrap();
    b.nop(UNSIG).unwrap();
    let p2 = b.nop(SIG).unwrap();
    b.nop(UNSIG).unwrap();
    b.finish();
    r.steps(10);
    let c = r.a.poll_send();
    assert_eq!(
        summary(&c),
        [
            (CqeOpcode::ReqErr, Some(0x04), p0.wqe_index),
            (CqeOpcode::ReqErr, Some(0x05), p2.wqe_index),
        ]
    );
}

/// A sink that counts, to show any `TraceSink` works.
#[derive(Default)]
struct Count(usize);
impl TraceSink for Count {
    fn record(&mut self, _: mlx5_raw::sim::TraceEvent) {
        self.0 += 1;
    }
}

#[test]
fn the_trace_says_why_an_exchange_hangs() {
    let mut r = Rig::new(Opts {
        tweak: |a, side| {
            if side == 'b' {
                a.min_rnr_timer = 3;
            }
        },
        ..Opts::signal_on_request()
    });
    let mut b = r.a.sq.batch();
    b.rdma_write_imm(r.b.remote(0), Payload::inline(b"?"), [0; 4], SIG)
        .unwrap();
    b.finish();
    r.steps(100);
    let text = r.dump();
    assert!(text.contains("RDMA_WRITE_IMM"), "{text}");
    assert!(text.contains("EMPTY for qp"), "{text}");
    assert!(text.contains("answering RNR"), "{text}");
    assert!(text.contains("RNR_NAK"), "{text}");
    assert!(text.contains("rnr_wait_until="), "{text}");
    let mut n = Count::default();
    r.dev.step_traced(r.now + 1_000_000, &mut n);
    assert!(n.0 > 0);
}

#[test]
fn zero_length_write_with_a_garbage_rkey_succeeds() {
    // docs/spec/mlx5.md#qp-errors-and-flush, last row (IBA C9-88): zero-length READ/WRITE
    // are not validated.
    let mut r = Rig::new(Opts::signal_on_request());
    r.b.srq.post_batch(1).unwrap();
    let garbage = Remote {
        addr: 0xdead_beef_0000,
        rkey: 0x00ee_ee01,
    };
    let mut b = r.a.sq.batch();
    let w = b.rdma_write(garbage, Payload::EMPTY, SIG).unwrap();
    let wi = b
        .rdma_write_imm(garbage, Payload::EMPTY, [5; 4], SIG)
        .unwrap();
    b.finish();
    assert_eq!(
        summary(&r.a_sends(2)),
        [
            (CqeOpcode::Req, None, w.wqe_index),
            (CqeOpcode::Req, None, wi.wqe_index)
        ]
    );
    let rc = r.b_recvs(1);
    assert_eq!((rc[0].opcode, rc[0].byte_cnt), (CqeOpcode::RespWrImm, 0));
    assert_eq!(r.dev.qp_info(r.b.qpn).unwrap().state, QpState::Rts);
}
