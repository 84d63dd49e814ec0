//! The requester: executes the SQ, transmits packets, handles ACK/NAK/READ responses,
//! retries, and completes WQEs in order.
//!
//! The window (`Qp::ents`) holds the WQEs fetched and not yet completed, oldest first;
//! only the newest can be partly transmitted. WQE memory stays the device's until a CQE
//! covers it, so a retransmission re-reads the WQE (and its gather memory) from the SQ,
//! as hardware does.

use crate::layout::{SendOpcode, Syndrome};

use super::config::{rnr_timer_ns, Access, QpState};
use super::cq::req_cqe;
use super::link::{ack, flag, op, LinkTx, PktHdr};
use super::mr::{lookup, Mr, MrFault};
use super::qp::{psn_le, Entry, Env, ErrCause, Qp, Status};
use super::raw::Raw;
use super::trace::{PacketDir, TraceKind};
use super::wqe::{parse, Seg, Wqe};

/// Doorbell, then by state: transmit (RTS) or flush newly rung WQEs (ERR); then
/// completions.
pub(crate) fn run(qp: &mut Qp, env: &mut Env<'_, '_>) {
    qp.read_doorbell(&mut env.ctx);
    match qp.state {
        QpState::Rts => {
            timers(qp, env);
            transmit(qp, env);
            complete(qp, env);
        }
        QpState::Err => qp.flush_rung(env),
        QpState::Reset => {}
    }
}

/// Whether some transmitted packet awaits its acknowledgement.
fn awaiting_ack(qp: &Qp) -> bool {
    qp.ents
        .iter()
        .any(|e| e.status == Status::Pending && e.sent > 0)
}

/// A failed entry stops transmission until it completes (and the QP goes to ERR).
fn halted(qp: &Qp) -> bool {
    qp.ents
        .iter()
        .any(|e| matches!(e.status, Status::Failed(_)))
}

fn reads_pending(qp: &Qp) -> u32 {
    qp.ents
        .iter()
        .filter(|e| e.is_read() && e.status == Status::Pending)
        .count() as u32
}

/// RNR wait and the acknowledgement timer.
fn timers(qp: &mut Qp, env: &mut Env<'_, '_>) {
    let now = env.ctx.now;
    if let Some(until) = qp.rnr_until {
        if now < until {
            return;
        }
        qp.rnr_until = None;
        qp.last_progress = now;
    }
    if !awaiting_ack(qp) || now.saturating_sub(qp.last_progress) < qp.attr.ack_timeout_ns {
        return;
    }
    let Some(k) =
        (0..qp.ents.len()).find(|&i| qp.ents.get(i).is_some_and(|e| e.status == Status::Pending))
    else {
        return;
    };
    let Some(first) = qp.ents.get(k).map(|e| e.first_psn) else {
        return;
    };
    if qp.retry_left == 0 {
        if let Some(e) = qp.ents.get_mut(k) {
            e.status = Status::Failed(Syndrome::TransportRetryExcErr);
        }
        return;
    }
    qp.retry_left -= 1;
    rewind(qp, k, first);
    qp.last_progress = now;
    env.ctx.trace(TraceKind::AckTimeout {
        qpn: qp.qpn,
        psn: first,
        left: qp.retry_left,
    });
}

/// Go back to `psn` inside entry `k`: later entries are forgotten (they are fetched
/// again), `k` is resent from `psn`.
fn rewind(qp: &mut Qp, k: usize, psn: u32) {
    qp.ents.truncate(k + 1);
    if let Some(e) = qp.ents.get_mut(k) {
        if e.is_read() {
            e.sent = 0;
            e.recv = 0;
        } else {
            e.sent = psn.wrapping_sub(e.first_psn).min(e.tx_pkts);
        }
        qp.next_psn = e.first_psn.wrapping_add(e.npkts);
        qp.fetch = e.wqe_index.wrapping_add(e.bbs);
    }
}

/// Sends packets of the newest entry and fetches new WQEs while the link has room.
fn transmit(qp: &mut Qp, env: &mut Env<'_, '_>) {
    if qp.rnr_until.is_some() {
        return;
    }
    let Some(mut tx) = qp.tx.take() else {
        return;
    };
    let mut budget = env.cfg.budget;
    while budget > 0 && tx.room() > 0 {
        let partial = qp.ents.len().checked_sub(1).filter(|&i| {
            qp.ents
                .get(i)
                .is_some_and(|e| e.status == Status::Pending && e.sent < e.tx_pkts)
        });
        if let Some(i) = partial {
            send_packet(qp, i, &mut tx, env);
            budget -= 1;
            continue;
        }
        if halted(qp) || qp.fetch == qp.db_pi || qp.ents.is_full() || !fetch(qp, env) {
            break;
        }
    }
    qp.tx = Some(tx);
}

/// Fetches and parses the WQE at `fetch` into the window. Returns false if it must wait
/// (READ limit).
fn fetch(qp: &mut Qp, env: &mut Env<'_, '_>) -> bool {
    let avail = u32::from(qp.db_pi.wrapping_sub(qp.fetch));
    let parsed = if u32::from(qp.db_pi.wrapping_sub(qp.una)) > qp.wqe_cnt {
        Err(super::wqe::Malformed {
            opcode: super::wqe::ctrl_at(&qp.sq, qp.fetch).opcode(),
            bbs: 1,
            why: "doorbell record more than wqe_cnt WQEBBs ahead of the oldest WQE",
        })
    } else {
        parse(&qp.sq, qp.wqe_cnt, qp.fetch, qp.qpn, avail)
    };
    let w = match parsed {
        Ok(w) => w,
        Err(m) => {
            fail_new(qp, m.opcode, m.bbs, Syndrome::LocalQpOpErr, m.why, env);
            return true;
        }
    };
    let is_read = w.opcode == SendOpcode::RdmaRead.as_u8();
    if is_read && reads_pending(qp) >= u32::from(qp.attr.max_rd_atomic) {
        return false;
    }
    let need = if is_read {
        Access::LOCAL_WRITE
    } else {
        Access::NONE
    };
    for s in w.segs() {
        if let Seg::Ptr { lkey, addr, len } = *s {
            if let Err(f) = lookup(env.mrs, lkey, qp.pd, addr, u64::from(len), need) {
                fail_new(qp, w.opcode, w.bbs, Syndrome::LocalProtErr, f.why(), env);
                return true;
            }
        }
    }
    let nop = w.opcode == SendOpcode::Nop.as_u8();
    let npkts = if nop {
        0
    } else {
        w.len.div_ceil(qp.mtu).max(1)
    };
    let e = Entry {
        wqe_index: w.index,
        bbs: w.bbs,
        opcode: w.opcode,
        signaled: w.signaled(),
        first_psn: qp.next_psn,
        npkts,
        tx_pkts: if is_read { 1 } else { npkts },
        sent: 0,
        recv: 0,
        len: w.len,
        status: if nop { Status::Done } else { Status::Pending },
    };
    qp.ents.push(e);
    qp.next_psn = qp.next_psn.wrapping_add(npkts);
    qp.fetch = qp.fetch.wrapping_add(w.bbs);
    env.ctx.stats.wqes += 1;
    env.ctx.trace(TraceKind::Wqe {
        qpn: qp.qpn,
        wqe_index: w.index,
        opcode: w.opcode,
        ds: w.ds,
        signaled: w.signaled(),
        len: u64::from(w.len),
        raddr: w.raddr,
        rkey: w.rkey,
    });
    true
}

/// Enters a WQE that failed a local check as a failed entry (its error CQE follows the
/// completion of every earlier WQE).
fn fail_new(
    qp: &mut Qp,
    opcode: u8,
    bbs: u16,
    s: Syndrome,
    why: &'static str,
    env: &mut Env<'_, '_>,
) {
    env.ctx.trace(TraceKind::WqeError {
        qpn: qp.qpn,
        wqe_index: qp.fetch,
        syndrome: s,
        why,
    });
    qp.ents.push(Entry {
        wqe_index: qp.fetch,
        bbs,
        opcode,
        signaled: true,
        first_psn: qp.next_psn,
        npkts: 0,
        tx_pkts: 0,
        sent: 0,
        recv: 0,
        len: 0,
        status: Status::Failed(s),
    });
    qp.fetch = qp.fetch.wrapping_add(bbs);
    env.ctx.stats.wqes += 1;
}

/// Fails entry `i` (already in the window) with `s`.
fn fail_entry(qp: &mut Qp, i: usize, s: Syndrome, why: &'static str, env: &mut Env<'_, '_>) {
    if let Some(e) = qp.ents.get_mut(i) {
        e.status = Status::Failed(s);
        let wqe_index = e.wqe_index;
        env.ctx.trace(TraceKind::WqeError {
            qpn: qp.qpn,
            wqe_index,
            syndrome: s,
            why,
        });
    }
}

/// Re-reads the WQE of entry `e` from the SQ (it is still the device's).
fn reparse(qp: &Qp, e: &Entry) -> Result<Wqe, &'static str> {
    let avail = u32::from(qp.db_pi.wrapping_sub(e.wqe_index));
    match parse(&qp.sq, qp.wqe_cnt, e.wqe_index, qp.qpn, avail) {
        Ok(w) if w.opcode == e.opcode && w.len == e.len => Ok(w),
        _ => Err("WQE changed in SQ memory while outstanding"),
    }
}

/// Copies message bytes `[off, off + n)` of `w` (inline or gathered) to `dst`.
fn gather(
    qp: &Qp,
    w: &Wqe,
    off: u32,
    n: u32,
    dst: &Raw,
    mrs: &[Option<Mr>],
) -> Result<(), MrFault> {
    let mut pos = 0u32;
    let mut dst_off = 0usize;
    let end = off + n;
    for s in w.segs() {
        let s_end = pos + s.len();
        if s_end > off && pos < end {
            let from = off.max(pos) - pos;
            let len = end.min(s_end) - pos - from;
            match *s {
                Seg::Inline { ring_off, .. } => {
                    qp.sq
                        .ring_copy_to(ring_off + from as usize, dst, dst_off, len as usize);
                }
                Seg::Ptr { lkey, addr, .. } => {
                    let a = addr.wrapping_add(u64::from(from));
                    let (mr, mo) = lookup(mrs, lkey, qp.pd, a, u64::from(len), Access::NONE)?;
                    mr.raw.copy_to(mo, dst, dst_off, len as usize);
                }
            }
            dst_off += len as usize;
        }
        pos = s_end;
    }
    Ok(())
}

/// Places `src` (READ response payload) at message offset `off` of `w`'s scatter list.
fn scatter(qp: &Qp, w: &Wqe, off: u32, src: &Raw, mrs: &[Option<Mr>]) -> Result<(), MrFault> {
    let n = src.len() as u32;
    let end = off + n;
    let mut pos = 0u32;
    let mut src_off = 0usize;
    for s in w.segs() {
        let s_end = pos + s.len();
        if s_end > off && pos < end {
            let from = off.max(pos) - pos;
            let len = end.min(s_end) - pos - from;
            if let Seg::Ptr { lkey, addr, .. } = *s {
                let a = addr.wrapping_add(u64::from(from));
                let (mr, mo) = lookup(mrs, lkey, qp.pd, a, u64::from(len), Access::LOCAL_WRITE)?;
                src.copy_to(src_off, &mr.raw, mo, len as usize);
            }
            src_off += len as usize;
        }
        pos = s_end;
    }
    Ok(())
}

/// Transmits the next packet of entry `i`.
fn send_packet(qp: &mut Qp, i: usize, tx: &mut LinkTx, env: &mut Env<'_, '_>) {
    let Some(e) = qp.ents.get(i).copied() else {
        return;
    };
    let w = match reparse(qp, &e) {
        Ok(w) => w,
        Err(why) => return fail_entry(qp, i, Syndrome::LocalQpOpErr, why, env),
    };
    let was_waiting = awaiting_ack(qp);
    let mut hdr = PktHdr {
        src_qpn: qp.qpn,
        dst_qpn: qp.remote_qpn,
        raddr: w.raddr,
        rkey: w.rkey,
        msg_len: w.len,
        imm: w.imm,
        ..PktHdr::default()
    };
    if e.is_read() {
        hdr.op = op::READ_REQ;
        hdr.flags = flag::FIRST | flag::LAST;
        hdr.psn = e.first_psn;
    } else {
        let k = e.sent;
        let off = k * qp.mtu;
        let n = (w.len - off).min(qp.mtu);
        if let Err(f) = gather(qp, &w, off, n, &tx.payload(), env.mrs) {
            return fail_entry(qp, i, Syndrome::LocalProtErr, f.why(), env);
        }
        let last = k + 1 == e.npkts;
        let with_imm = matches!(
            SendOpcode::from_u8(w.opcode),
            Some(SendOpcode::RdmaWriteImm | SendOpcode::SendImm)
        );
        hdr.op = match SendOpcode::from_u8(w.opcode) {
            Some(SendOpcode::Send | SendOpcode::SendImm) => op::SEND,
            _ => op::WRITE,
        };
        hdr.flags = if k == 0 { flag::FIRST } else { 0 }
            | if last { flag::LAST } else { 0 }
            | if last && with_imm { flag::IMM } else { 0 }
            | if last && w.solicited() { flag::SE } else { 0 };
        hdr.psn = e.first_psn.wrapping_add(k);
        hdr.offset = off;
        hdr.payload_len = n;
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
        syndrome: 0,
    });
    env.ctx.stats.packets_sent += 1;
    if let Some(e) = qp.ents.get_mut(i) {
        e.sent += 1;
    }
    if !was_waiting {
        qp.last_progress = env.ctx.now;
    }
}

/// Marks acknowledged every fully sent, non-READ entry whose last PSN is `<= psn`.
fn ack_upto(qp: &mut Qp, psn: u32, now: u64) {
    let mut progress = false;
    for i in 0..qp.ents.len() {
        let Some(e) = qp.ents.get_mut(i) else { break };
        if e.status != Status::Pending || e.npkts == 0 {
            continue;
        }
        if e.is_read() || !psn_le(e.last_psn(), psn) {
            break;
        }
        e.status = Status::Done;
        progress = true;
    }
    if progress {
        made_progress(qp, now);
    }
}

fn made_progress(qp: &mut Qp, now: u64) {
    qp.last_progress = now;
    qp.retry_left = qp.attr.retry_cnt;
    qp.rnr_left = qp.attr.rnr_retry;
}

/// The window index of the entry that owns `psn`.
fn entry_of(qp: &Qp, psn: u32) -> Option<usize> {
    (0..qp.ents.len()).find(|&i| {
        qp.ents
            .get(i)
            .is_some_and(|e| e.status == Status::Pending && e.contains(psn))
    })
}

/// An ACK/NAK or READ response for this QP's requester.
pub(crate) fn response(qp: &mut Qp, hdr: &PktHdr, payload: &Raw, env: &mut Env<'_, '_>) {
    let now = env.ctx.now;
    if hdr.op == op::READ_RESP {
        return read_response(qp, hdr, payload, env);
    }
    if hdr.syndrome == ack::ACK {
        return ack_upto(qp, hdr.psn, now);
    }
    // A NAK acknowledges everything before it.
    ack_upto(qp, hdr.psn.wrapping_sub(1), now);
    let Some(k) = entry_of(qp, hdr.psn) else {
        return env.ctx.trace(TraceKind::Packet {
            dir: PacketDir::Dropped("NAK for no outstanding PSN"),
            src_qpn: hdr.src_qpn,
            dst_qpn: hdr.dst_qpn,
            op: hdr.op,
            flags: hdr.flags,
            psn: hdr.psn,
            len: 0,
            syndrome: hdr.syndrome,
        });
    };
    let s = match hdr.syndrome {
        ack::RNR_NAK => {
            let infinite = qp.attr.rnr_retry == 7;
            if !infinite && qp.rnr_left == 0 {
                return fail_entry(
                    qp,
                    k,
                    Syndrome::RnrRetryExcErr,
                    "RNR retries exhausted",
                    env,
                );
            }
            if !infinite {
                qp.rnr_left -= 1;
            }
            let until = now.saturating_add(rnr_timer_ns(hdr.rnr_timer));
            rewind(qp, k, hdr.psn);
            qp.rnr_until = Some(until);
            env.ctx.trace(TraceKind::RnrWait {
                qpn: qp.qpn,
                psn: hdr.psn,
                left: (!infinite).then_some(qp.rnr_left),
                until,
            });
            return;
        }
        ack::NAK_INV_REQ => Syndrome::RemoteInvalReqErr,
        ack::NAK_REM_ACCESS => Syndrome::RemoteAccessErr,
        _ => Syndrome::RemoteOpErr,
    };
    fail_entry(qp, k, s, "responder NAK", env);
}

fn read_response(qp: &mut Qp, hdr: &PktHdr, payload: &Raw, env: &mut Env<'_, '_>) {
    let drop = |why| TraceKind::Packet {
        dir: PacketDir::Dropped(why),
        src_qpn: hdr.src_qpn,
        dst_qpn: hdr.dst_qpn,
        op: hdr.op,
        flags: hdr.flags,
        psn: hdr.psn,
        len: hdr.payload_len,
        syndrome: 0,
    };
    // READ responses come after the ACKs of everything before the READ.
    let Some(k) = (0..qp.ents.len()).find(|&i| {
        qp.ents
            .get(i)
            .is_some_and(|e| e.is_read() && e.status == Status::Pending)
    }) else {
        return env
            .ctx
            .trace(drop("READ response with no READ outstanding"));
    };
    let Some(e) = qp.ents.get(k).copied() else {
        return;
    };
    if e.sent == 0 || hdr.psn != e.first_psn.wrapping_add(e.recv) {
        return env
            .ctx
            .trace(drop("READ response out of sequence (duplicate)"));
    }
    if u64::from(hdr.offset) + payload.len() as u64 > u64::from(e.len) {
        return env.ctx.trace(drop("READ response beyond the READ length"));
    }
    ack_upto(qp, e.first_psn.wrapping_sub(1), env.ctx.now);
    let w = match reparse(qp, &e) {
        Ok(w) => w,
        Err(why) => return fail_entry(qp, k, Syndrome::LocalQpOpErr, why, env),
    };
    if let Err(f) = scatter(qp, &w, hdr.offset, payload, env.mrs) {
        return fail_entry(qp, k, Syndrome::LocalProtErr, f.why(), env);
    }
    if let Some(e) = qp.ents.get_mut(k) {
        e.recv += 1;
        if e.recv == e.npkts {
            e.status = Status::Done;
        }
    }
    made_progress(qp, env.ctx.now);
}

/// Completes window entries from the oldest while they are done, in order: a CQE for
/// signaled ones (covering unsignaled predecessors), the error CQE and the move to ERR
/// for a failed one.
pub(crate) fn complete(qp: &mut Qp, env: &mut Env<'_, '_>) {
    while let Some(e) = qp.ents.front().copied() {
        match e.status {
            Status::Pending => break,
            Status::Done => {
                qp.ents.pop();
                qp.una = e.wqe_index.wrapping_add(e.bbs);
                if e.signaled {
                    let byte_cnt = if e.is_read() { e.len } else { 0 };
                    let c = req_cqe(
                        qp.qpn,
                        e.opcode,
                        e.wqe_index,
                        byte_cnt,
                        qp.req_uidx(),
                        env.ctx.now,
                    );
                    env.cqe(qp.scq, c);
                }
            }
            Status::Failed(s) => {
                qp.ents.pop();
                qp.una = e.wqe_index.wrapping_add(e.bbs);
                let c =
                    super::cq::err_cqe(true, s, 0, e.opcode, qp.qpn, e.wqe_index, qp.req_uidx());
                env.cqe(qp.scq, c);
                qp.enter_err(s, ErrCause::Requester, env);
                break;
            }
        }
    }
}
