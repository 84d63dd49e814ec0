//! The CQ producer: CQE bytes as `mlx5_cqe64` / `mlx5_err_cqe`, owner bit, overrun check,
//! optional delayed visibility.

use core::sync::atomic::Ordering;

use zerocopy::big_endian::{U16, U32, U64};

use crate::layout::{
    decode_cqe, Cqe64, CqeOpcode, ErrCqe, Syndrome, CQE_INVALID_OP_OWN, CQE_SE_MASK, CQ_CI_MASK,
    QPN_MASK,
};

use super::config::AsyncEvent;
use super::ctx::Ctx;
use super::raw::Raw;
use super::trace::TraceKind;

/// CQEs a CQ holds back while completions are delayed; beyond this the oldest is
/// written early (order is always kept).
pub(crate) const STAGED: usize = 16;

#[derive(Clone, Copy, Debug)]
struct Staged {
    ready_at: u64,
    cqe: [u8; 64],
}

/// Device-side state of a CQ.
#[derive(Debug)]
pub(crate) struct SimCq {
    raw: Raw,
    /// The two-word doorbell record; `[0]` is SET_CI.
    dbrec: Raw,
    cqe_cnt: u32,
    log_cnt: u32,
    cqe_size: u32,
    pub cqn: u32,
    /// Producer index, free-running mod 2^32. Invariant (unless overrun):
    /// `(pi - ci) mod 2^24 <= cqe_cnt` for the consumer's `ci`.
    pub pi: u32,
    /// A CQE could not be written: the CQ is in error and writes nothing more.
    pub overrun: bool,
    /// CQEs not written because of the overrun.
    pub dropped: u32,
    /// Extra delay before a CQE becomes visible (fault injection), ns.
    pub delay_ns: u64,
    staged: [Staged; STAGED],
    /// Oldest staged entry, `0 .. STAGED`.
    sh: usize,
    /// Staged entries, `0 ..= STAGED`.
    sl: usize,
}

impl SimCq {
    /// `raw` covers `cqe_cnt * cqe_size` bytes, `dbrec` 8 bytes (checked by the caller).
    pub(crate) fn new(raw: Raw, dbrec: Raw, cqe_cnt: u32, cqe_size: u32, cqn: u32) -> Self {
        // Relaxed: the CQ is not shared yet; handing the description out (and the thread
        // hand-over of the device, if any) orders these for the consumer.
        dbrec.store_u32(0, 0, Ordering::Relaxed);
        dbrec.store_u32(4, 0, Ordering::Relaxed);
        for slot in 0..cqe_cnt as usize {
            // `cq.c mlx5_alloc_cq_buf`: every op_own = MLX5_CQE_INVALID << 4.
            let off = slot * cqe_size as usize + cqe_size as usize - 1;
            raw.store_u8(off, CQE_INVALID_OP_OWN, Ordering::Relaxed);
        }
        Self {
            raw,
            dbrec,
            cqe_cnt,
            log_cnt: cqe_cnt.trailing_zeros(),
            cqe_size,
            cqn,
            pi: 0,
            overrun: false,
            dropped: 0,
            delay_ns: 0,
            staged: [Staged {
                ready_at: 0,
                cqe: [0; 64],
            }; STAGED],
            sh: 0,
            sl: 0,
        }
    }

    /// CQEs held back by a completion delay.
    pub(crate) fn staged(&self) -> usize {
        self.sl
    }

    /// Produces `cqe` (its owner bit is filled in here): now, or after the delay.
    pub(crate) fn push(&mut self, cqe: [u8; 64], ctx: &mut Ctx<'_>) {
        if self.delay_ns == 0 && self.sl == 0 {
            self.write(&cqe, ctx);
            return;
        }
        if self.sl == STAGED {
            let old = self.staged[self.sh].cqe;
            self.sh = (self.sh + 1) % STAGED;
            self.sl -= 1;
            self.write(&old, ctx);
        }
        self.staged[(self.sh + self.sl) % STAGED] = Staged {
            ready_at: ctx.now.saturating_add(self.delay_ns),
            cqe,
        };
        self.sl += 1;
    }

    /// Writes every held-back CQE whose time has come.
    pub(crate) fn flush_staged(&mut self, ctx: &mut Ctx<'_>) {
        while self.sl > 0 && self.staged[self.sh].ready_at <= ctx.now {
            let cqe = self.staged[self.sh].cqe;
            self.sh = (self.sh + 1) % STAGED;
            self.sl -= 1;
            self.write(&cqe, ctx);
        }
    }

    /// The consumer index from the doorbell record (24 bits).
    pub(crate) fn consumer_index(&self) -> u32 {
        // A-CQ-CI (pairs with R-CQ-CI in `Cq::update_ci`): the consumer's reads of every
        // CQE it consumed happen before this CQ rewrites those slots.
        u32::from_be(self.dbrec.load_u32(0, Ordering::Acquire)) & CQ_CI_MASK
    }

    /// docs/spec/mlx5.md#owner-bit, docs/spec/mlx5.md#device-model step 5: overrun check,
    /// bytes 0..62, then `op_own` with Release.
    fn write(&mut self, cqe: &[u8; 64], ctx: &mut Ctx<'_>) {
        let ci = self.consumer_index();
        let used = self.pi.wrapping_sub(ci) & CQ_CI_MASK;
        if self.overrun || used >= self.cqe_cnt {
            if !self.overrun {
                self.overrun = true;
                ctx.events.push(AsyncEvent::CqError { cqn: self.cqn });
            }
            self.dropped = self.dropped.saturating_add(1);
            ctx.trace(TraceKind::CqOverrun {
                cqn: self.cqn,
                pi: self.pi,
                ci,
            });
            return;
        }
        let slot = (self.pi & (self.cqe_cnt - 1)) as usize * self.cqe_size as usize;
        let off = slot + self.cqe_size as usize - 64;
        if self.cqe_size == 128 {
            // No inline scatter / GRH: the first half is zero.
            self.raw.write(slot, &[0u8; 64]);
        }
        self.raw.write(off, &cqe[..63]);
        let owner = ((self.pi >> self.log_cnt) & 1) as u8;
        // R-CQE (pairs with A-CQE, the Acquire load of `op_own` in `Cq::poll`): publishes
        // the body written above and every payload byte placed before this CQE.
        self.raw
            .store_u8(off + 63, (cqe[63] & !1) | owner, Ordering::Release);
        if let Ok(c) = decode_cqe(cqe) {
            ctx.trace(TraceKind::Cqe {
                cqn: self.cqn,
                pi: self.pi,
                opcode: c.opcode,
                qpn: c.qpn,
                wqe_counter: c.wqe_counter,
                byte_cnt: c.byte_cnt,
                syndrome: c.error.map(|e| e.syndrome),
            });
        }
        self.pi = self.pi.wrapping_add(1);
        ctx.stats.cqes += 1;
    }
}

/// A requester CQE (REQ, docs/spec/mlx5.md#cqe64): `sop_drop_qpn = opcode << 24 | qpn`.
pub(crate) fn req_cqe(
    qpn: u32,
    send_opcode: u8,
    wqe_counter: u16,
    byte_cnt: u32,
    srqn_uidx: u32,
    now: u64,
) -> [u8; 64] {
    let mut c = Cqe64::ZEROED;
    c.srqn_uidx = U32::new(srqn_uidx & QPN_MASK);
    c.byte_cnt = U32::new(byte_cnt);
    c.timestamp = U64::new(now);
    c.sop_drop_qpn = U32::new(u32::from(send_opcode) << 24 | (qpn & QPN_MASK));
    c.wqe_counter = U16::new(wqe_counter);
    c.op_own = CqeOpcode::Req.as_u8() << 4;
    zerocopy::transmute!(c)
}

/// What a responder CQE reports.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RespCqe {
    pub opcode: CqeOpcode,
    pub qpn: u32,
    pub remote_qpn: u32,
    pub wqe_counter: u16,
    pub byte_cnt: u32,
    pub imm: [u8; 4],
    pub srqn_uidx: u32,
    pub solicited: bool,
}

/// A responder CQE (RESP_WR_IMM / RESP_SEND / RESP_SEND_IMM,
/// docs/spec/mlx5.md#write-with-immediate).
pub(crate) fn resp_cqe(r: &RespCqe, now: u64) -> [u8; 64] {
    let mut c = Cqe64::ZEROED;
    c.flags_rqpn = U32::new(r.remote_qpn & QPN_MASK);
    c.srqn_uidx = U32::new(r.srqn_uidx & QPN_MASK);
    c.imm_inval_pkey = r.imm;
    c.byte_cnt = U32::new(r.byte_cnt);
    c.timestamp = U64::new(now);
    c.sop_drop_qpn = U32::new(r.qpn & QPN_MASK);
    c.wqe_counter = U16::new(r.wqe_counter);
    c.op_own = r.opcode.as_u8() << 4 | if r.solicited { CQE_SE_MASK } else { 0 };
    zerocopy::transmute!(c)
}

/// An error CQE (docs/spec/mlx5.md#error-cqe): REQ_ERR with the send opcode, or RESP_ERR.
#[allow(clippy::too_many_arguments)]
pub(crate) fn err_cqe(
    requester: bool,
    syndrome: Syndrome,
    vendor: u8,
    send_opcode: u8,
    qpn: u32,
    wqe_counter: u16,
    srqn_uidx: u32,
) -> [u8; 64] {
    let mut c = ErrCqe::ZEROED;
    c.srqn = U32::new(srqn_uidx & QPN_MASK);
    c.vendor_err_synd = vendor;
    c.syndrome = syndrome.as_u8();
    let op = if requester {
        u32::from(send_opcode) << 24
    } else {
        0
    };
    c.s_wqe_opcode_qpn = U32::new(op | (qpn & QPN_MASK));
    c.wqe_counter = U16::new(wqe_counter);
    c.op_own = if requester {
        CqeOpcode::ReqErr
    } else {
        CqeOpcode::RespErr
    }
    .as_u8()
        << 4;
    zerocopy::transmute!(c)
}
