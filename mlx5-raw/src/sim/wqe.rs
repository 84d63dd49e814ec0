//! The send-WQE parser: reads a WQE byte for byte from SQ memory, wrap-aware
//! (docs/spec/mlx5.md#send-wqe, docs/spec/mlx5.md#device-side,
//! docs/spec/mlx5.md#device-model).
//!
//! Byte `k` of the WQE starting at counter `pi` is at `sq + ((pi * 64 + k) mod (wqe_cnt *
//! 64))` (docs/spec/mlx5.md#wrap-inside-the-queue); every read here goes through
//! [`Raw::ring_read`], so no segment code tests for the end of the queue.

use zerocopy::FromBytes;

use crate::layout::{
    CtrlSeg, FmCeSe, SendOpcode, INLINE_BYTE_COUNT_MASK, INLINE_SEG, SEND_WQE_BB, SEND_WQE_DS,
};

use super::raw::Raw;

/// Most data segments a WQE can hold (DS ≤ 63, one of them the ctrl segment).
pub(crate) const MAX_SEGS: usize = 62;

/// One gather/scatter element of a send WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seg {
    /// Inline bytes in the WQE: `len` bytes at SQ ring offset `ring_off` (may wrap).
    Inline { ring_off: usize, len: u32 },
    /// A data segment.
    Ptr { lkey: u32, addr: u64, len: u32 },
}

impl Seg {
    pub(crate) const fn len(&self) -> u32 {
        match *self {
            Self::Inline { len, .. } | Self::Ptr { len, .. } => len,
        }
    }
}

/// A parsed WQE.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wqe {
    pub index: u16,
    pub opcode: u8,
    pub ds: u8,
    /// WQEBBs, `ceil(ds / 4)`.
    pub bbs: u16,
    pub fm_ce_se: u8,
    pub imm: [u8; 4],
    pub raddr: u64,
    pub rkey: u32,
    pub segs: [Seg; MAX_SEGS],
    pub nseg: usize,
    /// Message length: the sum of the segments.
    pub len: u32,
}

impl Wqe {
    /// CE ≥ 2: a CQE on success.
    pub(crate) const fn signaled(&self) -> bool {
        FmCeSe::from_bits_retain(self.fm_ce_se).is_signaled()
    }

    /// SE bit.
    pub(crate) const fn solicited(&self) -> bool {
        FmCeSe::from_bits_retain(self.fm_ce_se).contains(FmCeSe::SOLICITED)
    }

    pub(crate) fn segs(&self) -> &[Seg] {
        &self.segs[..self.nseg]
    }
}

/// A WQE the device cannot execute: a local QP operation error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Malformed {
    /// The ctrl segment's opcode byte (reported in the error CQE).
    pub opcode: u8,
    /// WQEBBs to skip (at least 1, at most what was rung).
    pub bbs: u16,
    pub why: &'static str,
}

/// The ctrl segment at counter `pos`.
pub(crate) fn ctrl_at(sq: &Raw, pos: u16) -> CtrlSeg {
    let mut c = [0u8; 16];
    sq.ring_read(usize::from(pos) * SEND_WQE_BB, &mut c);
    CtrlSeg::read_from_bytes(&c).unwrap_or_else(|_| unreachable!("16 bytes"))
}

/// Parses the WQE at counter `pos` of an SQ of `wqe_cnt` WQEBBs for QP `qpn`, of which
/// `avail` WQEBBs (from `pos`) have been rung.
pub(crate) fn parse(
    sq: &Raw,
    wqe_cnt: u32,
    pos: u16,
    qpn: u32,
    avail: u32,
) -> Result<Wqe, Malformed> {
    let ctrl = ctrl_at(sq, pos);
    let opcode = ctrl.opcode();
    let ds = ctrl.ds();
    let bbs = u16::from(ds).div_ceil(4).max(1);
    let err = |why| Malformed {
        opcode,
        bbs: u32::from(bbs).min(avail).max(1) as u16,
        why,
    };
    if ctrl.wqe_index() != pos {
        return Err(err("wqe_index is not the SQ position the doorbell reached"));
    }
    if ctrl.qpn() != qpn {
        return Err(err("QPN in the ctrl segment is not this QP's"));
    }
    if ds == 0 {
        return Err(err("DS is 0"));
    }
    if u32::from(bbs) > avail {
        return Err(err("WQE runs past the doorbell record"));
    }
    if u32::from(bbs) > wqe_cnt {
        return Err(err("WQE is larger than the SQ"));
    }
    let (has_raddr, inline_ok, min_ds) = match SendOpcode::from_u8(opcode) {
        Some(SendOpcode::Nop) => (false, false, 1),
        Some(SendOpcode::RdmaWrite | SendOpcode::RdmaWriteImm) => (true, true, 2),
        Some(SendOpcode::Send | SendOpcode::SendImm) => (false, true, 1),
        Some(SendOpcode::RdmaRead) => (true, false, 2),
        None => return Err(err("opcode not modeled (atomics, UMR, ...)")),
    };
    if ds < min_ds {
        return Err(err("DS too small for the opcode"));
    }
    let base = usize::from(pos) * SEND_WQE_BB;
    let mut w = Wqe {
        index: pos,
        opcode,
        ds,
        bbs,
        fm_ce_se: ctrl.fm_ce_se,
        imm: ctrl.imm,
        raddr: 0,
        rkey: 0,
        segs: [Seg::Inline {
            ring_off: 0,
            len: 0,
        }; MAX_SEGS],
        nseg: 0,
        len: 0,
    };
    if opcode == SendOpcode::Nop.as_u8() {
        return Ok(w);
    }
    let mut k = 1usize;
    if has_raddr {
        let mut r = [0u8; 16];
        sq.ring_read(base + SEND_WQE_DS, &mut r);
        w.raddr = u64::from_be_bytes([r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]]);
        w.rkey = u32::from_be_bytes([r[8], r[9], r[10], r[11]]);
        k = 2;
    }
    let mut total: u64 = 0;
    while k < usize::from(ds) {
        let off = base + k * SEND_WQE_DS;
        let mut d = [0u8; 16];
        sq.ring_read(off, &mut d);
        let bc = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
        let seg = if bc & INLINE_SEG != 0 {
            if !inline_ok {
                return Err(err("inline data in an RDMA READ"));
            }
            if bc & !(INLINE_SEG | INLINE_BYTE_COUNT_MASK) != 0 {
                return Err(err("inline byte_count has reserved bits set"));
            }
            let len = bc & INLINE_BYTE_COUNT_MASK;
            let n_ds = (4 + len as usize).div_ceil(SEND_WQE_DS);
            if k + n_ds > usize::from(ds) {
                return Err(err("inline data runs past DS"));
            }
            k += n_ds;
            Seg::Inline {
                ring_off: off + 4,
                len,
            }
        } else {
            k += 1;
            Seg::Ptr {
                lkey: u32::from_be_bytes([d[4], d[5], d[6], d[7]]),
                addr: u64::from_be_bytes([d[8], d[9], d[10], d[11], d[12], d[13], d[14], d[15]]),
                len: bc,
            }
        };
        // Zero-length entries move no data (rdma-core never emits them;
        // docs/spec/mlx5.md#data-segment).
        if seg.len() != 0 {
            w.segs[w.nseg] = seg;
            w.nseg += 1;
            total += u64::from(seg.len());
        }
    }
    if total > 1 << 31 {
        return Err(err("message longer than 2^31 bytes"));
    }
    w.len = total as u32;
    Ok(w)
}
