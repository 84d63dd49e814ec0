//! The responder: checks and executes incoming WRITE / SEND / READ requests, consumes
//! SRQ WQEs, writes responder CQEs, and queues ACK/NAK and READ responses.
//!
//! Responses go through a small queue (`Qp::out`) drained into the link as it has room,
//! so a responder never blocks on the link while holding a request: consecutive ACKs
//! coalesce (an ACK is cumulative), and READs are bounded by the peer's
//! `max_rd_atomic`. A request is only taken from the link when the queue has room.

use crate::layout::{CqeOpcode, Syndrome};

use super::config::{Access, QpState};
use super::cq::{err_cqe, resp_cqe, RespCqe};
use super::link::{ack, flag, op, PktHdr};
use super::mr::lookup;
use super::qp::{psn_le, Env, ErrCause, Out, Qp, SendCtx, WriteCtx};
use super::raw::Raw;
use super::srq::Scatter;
use super::trace::{PacketDir, TraceKind};

/// Whether a request can be taken (room for its response, and one more).
pub(crate) fn has_room(qp: &Qp) -> bool {
    qp.out.free() >= 2
}

fn push_ack(qp: &mut Qp, psn: u32) {
    if let Some(Out::Ack { psn: p }) = qp.out.back_mut() {
        *p = psn;
        return;
    }
    qp.out.push(Out::Ack { psn });
}

/// NAKs `psn` with an error and moves the QP to ERR.
fn nak_error(qp: &mut Qp, psn: u32, code: u8, env: &mut Env<'_, '_>) {
    qp.out.push(Out::Nak {
        psn,
        syndrome: code,
        rnr_timer: 0,
    });
    let (s, cause) = match code {
        ack::NAK_REM_ACCESS => (Syndrome::RemoteAccessErr, ErrCause::ResponderAccess),
        ack::NAK_INV_REQ => (Syndrome::RemoteInvalReqErr, ErrCause::Responder),
        _ => (Syndrome::RemoteOpErr, ErrCause::Responder),
    };
    qp.enter_err(s, cause, env);
}

/// A RESP_ERR CQE for SRQ WQE `idx`, then the NAK and ERR.
fn recv_error(qp: &mut Qp, idx: u16, s: Syndrome, psn: u32, code: u8, env: &mut Env<'_, '_>) {
    let c = err_cqe(false, s, 0, 0, qp.qpn, idx, qp.resp_uidx(env));
    env.cqe(qp.rcq, c);
    nak_error(qp, psn, code, env);
}

fn dropped(hdr: &PktHdr, why: &'static str) -> TraceKind {
    TraceKind::Packet {
        dir: PacketDir::Dropped(why),
        src_qpn: hdr.src_qpn,
        dst_qpn: hdr.dst_qpn,
        op: hdr.op,
        flags: hdr.flags,
        psn: hdr.psn,
        len: hdr.payload_len,
        syndrome: 0,
    }
}

/// One request packet (the caller checked `has_room` and the QP state).
pub(crate) fn request(qp: &mut Qp, hdr: &PktHdr, payload: &Raw, env: &mut Env<'_, '_>) {
    if hdr.psn != qp.epsn {
        if psn_le(hdr.psn, qp.epsn) {
            // Duplicate (a retransmission): READs are executed again, completed messages
            // acknowledged again, nothing is placed or consumed twice.
            if hdr.op == op::READ_REQ {
                read(qp, hdr, false, env);
            } else if hdr.flags & flag::LAST != 0 {
                push_ack(qp, qp.epsn.wrapping_sub(1));
            }
            env.ctx
                .trace(dropped(hdr, "duplicate PSN (re-acknowledged)"));
        } else {
            env.ctx
                .trace(dropped(hdr, "PSN ahead of expected (a packet was lost)"));
        }
        return;
    }
    match hdr.op {
        op::WRITE => write(qp, hdr, payload, env),
        op::SEND => send(qp, hdr, payload, env),
        _ => read(qp, hdr, true, env),
    }
}

/// `Some(srq slot)` if an SRQ WQE is available; else queues the RNR NAK (no state
/// change, Class B) or, without an SRQ, the invalid-request NAK.
fn srq_ready(qp: &mut Qp, hdr: &PktHdr, env: &mut Env<'_, '_>) -> Option<usize> {
    let Some(si) = qp.srq else {
        nak_error(qp, hdr.psn, ack::NAK_INV_REQ, env);
        return None;
    };
    let srq = env.srqs.get(si).and_then(|s| s.as_ref())?;
    if srq.available() == 0 {
        let srqn = srq.srqn;
        env.ctx.stats.rnr_naks += 1;
        env.ctx.trace(TraceKind::SrqEmpty {
            srqn,
            qpn: qp.qpn,
            psn: hdr.psn,
        });
        qp.out.push(Out::Nak {
            psn: hdr.psn,
            syndrome: ack::RNR_NAK,
            rnr_timer: qp.attr.min_rnr_timer,
        });
        return None;
    }
    Some(si)
}

/// Takes the head SRQ WQE; `None` (after NAK and ERR) if the list is malformed.
fn srq_take(qp: &mut Qp, si: usize, psn: u32, env: &mut Env<'_, '_>) -> Option<u16> {
    let srq = env.srqs.get_mut(si).and_then(|s| s.as_mut())?;
    match srq.take() {
        Ok(idx) => {
            let srqn = srq.srqn;
            env.ctx.trace(TraceKind::SrqTake {
                srqn,
                qpn: qp.qpn,
                index: idx,
            });
            Some(idx)
        }
        Err(()) => {
            nak_error(qp, psn, ack::NAK_REM_OP, env);
            None
        }
    }
}

fn write(qp: &mut Qp, hdr: &PktHdr, payload: &Raw, env: &mut Env<'_, '_>) {
    if hdr.flags & flag::FIRST != 0 {
        if !qp.attr.access.contains(Access::REMOTE_WRITE) {
            return nak_error(qp, hdr.psn, ack::NAK_INV_REQ, env);
        }
        // Zero-length writes are not checked (IBA C9-88).
        if hdr.msg_len > 0
            && lookup(
                env.mrs,
                hdr.rkey,
                qp.pd,
                hdr.raddr,
                u64::from(hdr.msg_len),
                Access::REMOTE_WRITE,
            )
            .is_err()
        {
            return nak_error(qp, hdr.psn, ack::NAK_REM_ACCESS, env);
        }
        qp.wctx = Some(WriteCtx {
            raddr: hdr.raddr,
            rkey: hdr.rkey,
            len: hdr.msg_len,
        });
    }
    let Some(wc) = qp.wctx else {
        return env
            .ctx
            .trace(dropped(hdr, "WRITE packet without its first packet"));
    };
    let last = hdr.flags & flag::LAST != 0;
    let imm = hdr.flags & flag::IMM != 0;
    // WRITE_IMM needs a receive WQE; the need is on the last packet
    // (docs/spec/mlx5.md#write-with-immediate).
    let srq = if last && imm {
        match srq_ready(qp, hdr, env) {
            Some(s) => Some(s),
            None => return,
        }
    } else {
        None
    };
    let n = payload.len() as u64;
    if n > 0 {
        let a = wc.raddr.wrapping_add(u64::from(hdr.offset));
        let in_message = u64::from(hdr.offset) + n <= u64::from(wc.len);
        match lookup(env.mrs, wc.rkey, qp.pd, a, n, Access::REMOTE_WRITE) {
            Ok((mr, mo)) if in_message => payload.copy_to(0, &mr.raw, mo, n as usize),
            _ => return nak_error(qp, hdr.psn, ack::NAK_REM_ACCESS, env),
        }
    }
    qp.epsn = qp.epsn.wrapping_add(1);
    if !last {
        return;
    }
    qp.wctx = None;
    if let Some(si) = srq {
        let Some(idx) = srq_take(qp, si, hdr.psn, env) else {
            return;
        };
        let c = resp_cqe(
            &RespCqe {
                opcode: CqeOpcode::RespWrImm,
                qpn: qp.qpn,
                remote_qpn: hdr.src_qpn,
                wqe_counter: idx,
                byte_cnt: wc.len,
                imm: hdr.imm,
                srqn_uidx: qp.resp_uidx(env),
                solicited: hdr.flags & flag::SE != 0,
            },
            env.ctx.now,
        );
        env.cqe(qp.rcq, c);
    }
    push_ack(qp, hdr.psn);
}

/// Places `src` at offset `off` of a receive scatter list.
fn place(sc: &Scatter, pd: u32, off: u32, src: &Raw, env: &Env<'_, '_>) -> bool {
    let n = src.len() as u32;
    let end = off + n;
    let mut pos = 0u32;
    let mut src_off = 0usize;
    for s in &sc.sges[..sc.n] {
        let s_end = pos + s.len;
        if s_end > off && pos < end {
            let from = off.max(pos) - pos;
            let len = end.min(s_end) - pos - from;
            let a = s.addr.wrapping_add(u64::from(from));
            let Ok((mr, mo)) = lookup(env.mrs, s.lkey, pd, a, u64::from(len), Access::LOCAL_WRITE)
            else {
                return false;
            };
            src.copy_to(src_off, &mr.raw, mo, len as usize);
            src_off += len as usize;
        }
        pos = s_end;
    }
    src_off == n as usize
}

fn send(qp: &mut Qp, hdr: &PktHdr, payload: &Raw, env: &mut Env<'_, '_>) {
    if hdr.flags & flag::FIRST != 0 {
        let Some(si) = srq_ready(qp, hdr, env) else {
            return;
        };
        let Some(idx) = srq_take(qp, si, hdr.psn, env) else {
            return;
        };
        let Some(srq) = env.srqs.get(si).and_then(|s| s.as_ref()) else {
            return;
        };
        let (sc, pd) = (srq.scatter(idx), srq.pd);
        if sc.capacity() < u64::from(hdr.msg_len) {
            return recv_error(
                qp,
                idx,
                Syndrome::LocalLengthErr,
                hdr.psn,
                ack::NAK_INV_REQ,
                env,
            );
        }
        let bad_key = sc.sges[..sc.n].iter().any(|s| {
            lookup(
                env.mrs,
                s.lkey,
                pd,
                s.addr,
                u64::from(s.len),
                Access::LOCAL_WRITE,
            )
            .is_err()
        });
        if bad_key {
            return recv_error(
                qp,
                idx,
                Syndrome::LocalProtErr,
                hdr.psn,
                ack::NAK_REM_OP,
                env,
            );
        }
        qp.sctx = Some(SendCtx { idx });
    }
    let Some(sc) = qp.sctx else {
        return env
            .ctx
            .trace(dropped(hdr, "SEND packet without its first packet"));
    };
    let Some((scatter, pd)) = qp
        .srq
        .and_then(|si| env.srqs.get(si))
        .and_then(|s| s.as_ref())
        .map(|s| (s.scatter(sc.idx), s.pd))
    else {
        return;
    };
    if !place(&scatter, pd, hdr.offset, payload, env) {
        qp.sctx = None;
        return recv_error(
            qp,
            sc.idx,
            Syndrome::LocalProtErr,
            hdr.psn,
            ack::NAK_REM_OP,
            env,
        );
    }
    qp.epsn = qp.epsn.wrapping_add(1);
    if hdr.flags & flag::LAST == 0 {
        return;
    }
    qp.sctx = None;
    let imm = hdr.flags & flag::IMM != 0;
    let c = resp_cqe(
        &RespCqe {
            opcode: if imm {
                CqeOpcode::RespSendImm
            } else {
                CqeOpcode::RespSend
            },
            qpn: qp.qpn,
            remote_qpn: hdr.src_qpn,
            wqe_counter: sc.idx,
            byte_cnt: hdr.msg_len,
            imm: if imm { hdr.imm } else { [0; 4] },
            srqn_uidx: qp.resp_uidx(env),
            solicited: hdr.flags & flag::SE != 0,
        },
        env.ctx.now,
    );
    env.cqe(qp.rcq, c);
    push_ack(qp, hdr.psn);
}

/// A READ request: checks access, queues the responses. `fresh` is false for a
/// retransmitted (duplicate) request, which is re-executed without state changes.
fn read(qp: &mut Qp, hdr: &PktHdr, fresh: bool, env: &mut Env<'_, '_>) {
    let ok_qp = qp.attr.access.contains(Access::REMOTE_READ);
    let ok_mr = hdr.msg_len == 0
        || lookup(
            env.mrs,
            hdr.rkey,
            qp.pd,
            hdr.raddr,
            u64::from(hdr.msg_len),
            Access::REMOTE_READ,
        )
        .is_ok();
    if !(ok_qp && ok_mr) {
        if fresh {
            let code = if ok_qp {
                ack::NAK_REM_ACCESS
            } else {
                ack::NAK_INV_REQ
            };
            nak_error(qp, hdr.psn, code, env);
        }
        return;
    }
    let npkts = hdr.msg_len.div_ceil(qp.mtu).max(1);
    qp.out.push(Out::Read {
        psn: hdr.psn,
        raddr: hdr.raddr,
        rkey: hdr.rkey,
        len: hdr.msg_len,
        npkts,
        sent: 0,
    });
    if fresh {
        qp.epsn = qp.epsn.wrapping_add(npkts);
    }
}

/// Sends queued responses while the link has room (also in ERR: the NAK that caused it
/// must still go out).
pub(crate) fn drain(qp: &mut Qp, env: &mut Env<'_, '_>) {
    if qp.state == QpState::Reset || qp.out.len() == 0 {
        return;
    }
    let Some(mut tx) = qp.tx.take() else {
        return;
    };
    let mut budget = env.cfg.budget;
    while budget > 0 && tx.room() > 0 {
        let Some(item) = qp.out.front().copied() else {
            break;
        };
        budget -= 1;
        let mut hdr = PktHdr {
            src_qpn: qp.qpn,
            dst_qpn: qp.remote_qpn,
            ..PktHdr::default()
        };
        match item {
            Out::Ack { psn } => {
                hdr.op = op::ACK;
                hdr.psn = psn;
                qp.out.pop();
            }
            Out::Nak {
                psn,
                syndrome,
                rnr_timer,
            } => {
                hdr.op = op::ACK;
                hdr.psn = psn;
                hdr.syndrome = syndrome;
                hdr.rnr_timer = rnr_timer;
                qp.out.pop();
            }
            Out::Read {
                psn,
                raddr,
                rkey,
                len,
                npkts,
                sent,
            } => {
                let off = sent * qp.mtu;
                let n = (len - off).min(qp.mtu);
                let a = raddr.wrapping_add(u64::from(off));
                if n > 0 {
                    let Ok((mr, mo)) =
                        lookup(env.mrs, rkey, qp.pd, a, u64::from(n), Access::REMOTE_READ)
                    else {
                        // Deregistered while the READ was queued.
                        qp.out.pop();
                        nak_error(qp, psn.wrapping_add(sent), ack::NAK_REM_ACCESS, env);
                        continue;
                    };
                    // The READ source may be stored to concurrently by its owner.
                    mr.raw.copy_shared_to(mo, &tx.payload(), 0, n as usize);
                }
                hdr.op = op::READ_RESP;
                hdr.psn = psn.wrapping_add(sent);
                hdr.flags = if sent == 0 { flag::FIRST } else { 0 }
                    | if sent + 1 == npkts { flag::LAST } else { 0 };
                hdr.msg_len = len;
                hdr.offset = off;
                hdr.payload_len = n;
                if let Some(Out::Read { sent: s, .. }) = qp.out.get_mut(0) {
                    *s += 1;
                }
                if sent + 1 == npkts {
                    qp.out.pop();
                }
            }
        }
        let sent = tx.commit(&mut hdr, env.ctx.now, &mut env.ctx.nic);
        env.ctx.trace(TraceKind::Packet {
            dir: if sent.is_some() {
                PacketDir::Sent
            } else {
                PacketDir::Dropped("link cut")
            },
            src_qpn: hdr.src_qpn,
            dst_qpn: hdr.dst_qpn,
            op: hdr.op,
            flags: hdr.flags,
            psn: hdr.psn,
            len: hdr.payload_len,
            syndrome: hdr.syndrome,
        });
        env.ctx.stats.packets_sent += 1;
    }
    qp.tx = Some(tx);
}
