//! Send/receive WQE segments (`mlx5dv.h`, docs/spec/mlx5.md#send-wqe, docs/spec/mlx5.md#srq).
//!
//! Every struct here is `#[repr(C)]`, alignment 1 (all fields are bytes or
//! `zerocopy::big_endian` integers), and pinned by size/offset asserts against the C
//! struct it mirrors. Multi-byte hardware fields are big-endian types, so a missed byte
//! swap does not compile.

use core::mem::{offset_of, size_of};

use zerocopy::big_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::consts::{
    INLINE_BYTE_COUNT_MASK, INLINE_SEG, QPN_MASK, WQE_CTRL_DS_MASK, WQE_CTRL_OPCODE_MASK,
    WQE_CTRL_WQE_INDEX_MASK, WQE_CTRL_WQE_INDEX_SHIFT,
};

/// Send WQE opcodes this crate builds (`MLX5_OPCODE_*`, `mlx5dv.h`). The value is the low
/// byte of `opmod_idx_opcode`, and the top byte of a requester CQE's `sop_drop_qpn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SendOpcode {
    /// `MLX5_OPCODE_NOP`: no operation (ctrl segment only).
    Nop = 0x00,
    /// `MLX5_OPCODE_RDMA_WRITE`.
    RdmaWrite = 0x08,
    /// `MLX5_OPCODE_RDMA_WRITE_IMM`: RDMA write; consumes a receive WQE at the responder.
    RdmaWriteImm = 0x09,
    /// `MLX5_OPCODE_SEND`.
    Send = 0x0a,
    /// `MLX5_OPCODE_SEND_IMM`.
    SendImm = 0x0b,
    /// `MLX5_OPCODE_RDMA_READ`.
    RdmaRead = 0x10,
}

impl SendOpcode {
    /// The opcode for a raw value, or `None` for opcodes this crate does not build
    /// (atomics, UMR, ...).
    pub const fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0x00 => Self::Nop,
            0x08 => Self::RdmaWrite,
            0x09 => Self::RdmaWriteImm,
            0x0a => Self::Send,
            0x0b => Self::SendImm,
            0x10 => Self::RdmaRead,
            _ => return None,
        })
    }

    /// The raw opcode byte.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }
}

bitflags::bitflags! {
    /// The ctrl segment's `fm_ce_se` byte: fence mode `[7:5]`, completion mode `[3:2]`,
    /// solicited `[1]` (docs/spec/mlx5.md#completion-and-fence-bits). Combine with `|`. A
    /// `bitflags` set over the byte: the operations are the same `or`/`and` on a `u8` the
    /// hand-written type had (docs/PERFORMANCE.md).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct FmCeSe: u8 {
        /// CE = 2: always generate a CQE (`MLX5_WQE_CTRL_CQ_UPDATE`). "Signaled".
        const CQ_UPDATE = 0x08;
        /// Solicited event, reported in the responder CQE (`MLX5_WQE_CTRL_SOLICITED`).
        const SOLICITED = 0x02;
        /// Small-and-fence, what `IBV_SEND_FENCE` maps to (`MLX5_WQE_CTRL_FENCE`,
        /// `4 << 5`).
        const FENCE = 0x80;
        // Every other bit may come from a peer's or the NIC's WQE (the device model
        // parses them): keep them rather than truncate.
        const _ = !0;
    }
}

impl FmCeSe {
    /// CE = 0: a CQE only if the WQE fails (`MLX5_COMP_ONLY_ERR`). "Unsignaled".
    pub const COMP_ONLY_ERR: Self = Self::empty();
    /// Mask of the CE (completion mode) bits.
    pub const CE_MASK: u8 = 0x0c;

    /// Whether this WQE asks for a CQE on success (CE ≥ 2).
    pub const fn is_signaled(self) -> bool {
        self.bits() & Self::CE_MASK >= Self::CQ_UPDATE.bits()
    }
}

/// Control segment, first 16 bytes of every send WQE. Mirrors `struct mlx5_wqe_ctrl_seg`
/// (`mlx5dv.h`; C declares it `packed, aligned(4)`, which `#[repr(C)]` with
/// alignment-1 fields reproduces byte for byte: offsets 0, 4, 8, 9, 11, 12).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct CtrlSeg {
    /// `[31:24]` opmod, `[23:8]` WQE index (u16 producer counter in WQEBBs), `[7:0]` opcode.
    pub opmod_idx_opcode: U32,
    /// `[31:8]` QPN, `[5:0]` DS (WQE size in 16-byte units, ctrl included).
    pub qpn_ds: U32,
    /// XOR signature; 0 unless the QP was created with WQE signatures.
    pub signature: u8,
    /// DCI stream channel (BE16); 0 for RC.
    pub dci_stream_channel_id: [u8; 2],
    /// Fence / completion / solicited bits ([`FmCeSe`]).
    pub fm_ce_se: u8,
    /// Immediate (SEND_IMM/WRITE_IMM), raw bytes copied verbatim onto the wire.
    pub imm: [u8; 4],
}
// mlx5_wqe_ctrl_seg
const _: () = assert!(size_of::<CtrlSeg>() == 16);
const _: () = assert!(offset_of!(CtrlSeg, opmod_idx_opcode) == 0);
const _: () = assert!(offset_of!(CtrlSeg, qpn_ds) == 4);
const _: () = assert!(offset_of!(CtrlSeg, signature) == 8);
const _: () = assert!(offset_of!(CtrlSeg, dci_stream_channel_id) == 9);
const _: () = assert!(offset_of!(CtrlSeg, fm_ce_se) == 11);
const _: () = assert!(offset_of!(CtrlSeg, imm) == 12);

impl CtrlSeg {
    /// A ctrl segment as `mlx5dv_set_ctrl_seg(seg, wqe_index, opcode, 0, qpn, fm_ce_se, ds,
    /// 0, imm)` writes it, with `dci_stream_channel_id` zeroed (rdma-core clears bytes
    /// 8..11 before setting `fm_ce_se`).
    ///
    /// `qpn` is shifted left by 8 as in C, so bits above 24 are dropped; `ds` must be
    /// ≤ 63 (it is OR-ed in unmasked, exactly like the C helper).
    pub const fn new(
        opcode: SendOpcode,
        wqe_index: u16,
        qpn: u32,
        ds: u8,
        fm_ce_se: FmCeSe,
        imm: [u8; 4],
    ) -> Self {
        Self {
            opmod_idx_opcode: U32::new(
                ((wqe_index as u32) << WQE_CTRL_WQE_INDEX_SHIFT) | opcode as u32,
            ),
            qpn_ds: U32::new((qpn << 8) | ds as u32),
            signature: 0,
            dci_stream_channel_id: [0; 2],
            fm_ce_se: fm_ce_se.bits(),
            imm,
        }
    }

    /// The raw opcode byte (`[7:0]` of `opmod_idx_opcode`).
    pub const fn opcode(&self) -> u8 {
        (self.opmod_idx_opcode.get() & WQE_CTRL_OPCODE_MASK) as u8
    }

    /// The opcode modifier (`[31:24]` of `opmod_idx_opcode`).
    pub const fn opmod(&self) -> u8 {
        (self.opmod_idx_opcode.get() >> 24) as u8
    }

    /// The u16 WQE index (`[23:8]` of `opmod_idx_opcode`).
    pub const fn wqe_index(&self) -> u16 {
        ((self.opmod_idx_opcode.get() & WQE_CTRL_WQE_INDEX_MASK) >> WQE_CTRL_WQE_INDEX_SHIFT) as u16
    }

    /// The 24-bit QPN (`[31:8]` of `qpn_ds`).
    pub const fn qpn(&self) -> u32 {
        (self.qpn_ds.get() >> 8) & QPN_MASK
    }

    /// The WQE size in 16-byte units (`[5:0]` of `qpn_ds`).
    pub const fn ds(&self) -> u8 {
        (self.qpn_ds.get() & WQE_CTRL_DS_MASK) as u8
    }
}

/// Remote address segment of RDMA READ/WRITE WQEs. Mirrors `struct mlx5_wqe_raddr_seg`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct RaddrSeg {
    /// Remote virtual address (BE64).
    pub raddr: U64,
    /// Remote key (BE32).
    pub rkey: U32,
    /// Reserved, 0.
    pub reserved: U32,
}
// mlx5_wqe_raddr_seg
const _: () = assert!(size_of::<RaddrSeg>() == 16);
const _: () = assert!(offset_of!(RaddrSeg, raddr) == 0);
const _: () = assert!(offset_of!(RaddrSeg, rkey) == 8);
const _: () = assert!(offset_of!(RaddrSeg, reserved) == 12);

impl RaddrSeg {
    /// A remote address segment.
    pub const fn new(raddr: u64, rkey: u32) -> Self {
        Self {
            raddr: U64::new(raddr),
            rkey: U32::new(rkey),
            reserved: U32::ZERO,
        }
    }
}

/// Data (pointer) segment: one gather or scatter entry. Mirrors `struct mlx5_wqe_data_seg`
/// (`mlx5dv_set_data_seg`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct DataSeg {
    /// Length in bytes (BE32). Bit 31 must be 0 here: set, it means inline.
    pub byte_count: U32,
    /// Local key (BE32).
    pub lkey: U32,
    /// Local virtual address (BE64).
    pub addr: U64,
}
// mlx5_wqe_data_seg
const _: () = assert!(size_of::<DataSeg>() == 16);
const _: () = assert!(offset_of!(DataSeg, byte_count) == 0);
const _: () = assert!(offset_of!(DataSeg, lkey) == 4);
const _: () = assert!(offset_of!(DataSeg, addr) == 8);

impl DataSeg {
    /// A data segment as `mlx5dv_set_data_seg(seg, byte_count, lkey, addr)` writes it.
    pub const fn new(byte_count: u32, lkey: u32, addr: u64) -> Self {
        Self {
            byte_count: U32::new(byte_count),
            lkey: U32::new(lkey),
            addr: U64::new(addr),
        }
    }

    /// The scatter-list terminator of RQ/SRQ WQEs: `{0, MLX5_INVALID_LKEY, 0}`.
    pub const TERMINATOR: Self = Self::new(0, super::consts::INVALID_LKEY, 0);
}

/// Header of an inline data segment; the payload follows immediately (not 16-aligned)
/// and the segment is padded to a multiple of 16 bytes. Mirrors
/// `struct mlx5_wqe_inl_data_seg` (C declares `uint32_t`; the value is BE32).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct InlineSegHdr {
    /// `len | MLX5_INLINE_SEG` (BE32).
    pub byte_count: U32,
}
// mlx5_wqe_inl_data_seg
const _: () = assert!(size_of::<InlineSegHdr>() == 4);
const _: () = assert!(offset_of!(InlineSegHdr, byte_count) == 0);

impl InlineSegHdr {
    /// The header for `len` inline bytes (`len` must be ≤ [`INLINE_BYTE_COUNT_MASK`]).
    pub const fn new(len: u32) -> Self {
        Self {
            byte_count: U32::new((len & INLINE_BYTE_COUNT_MASK) | INLINE_SEG),
        }
    }

    /// Whether bit 31 (inline) is set.
    pub const fn is_inline(&self) -> bool {
        self.byte_count.get() & INLINE_SEG != 0
    }

    /// The inline length.
    pub const fn len(&self) -> u32 {
        self.byte_count.get() & INLINE_BYTE_COUNT_MASK
    }

    /// Whether the inline length is 0.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// First 16 bytes of every SRQ WQE: the free-list link. Mirrors
/// `struct mlx5_wqe_srq_next_seg`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct SrqNextSeg {
    /// Reserved.
    pub rsvd0: [u8; 2],
    /// Index of the next WQE in the SRQ linked list (BE16).
    pub next_wqe_index: U16,
    /// Signature (only with `MLX5_SRQ_SIGNATURE`).
    pub signature: u8,
    /// Reserved.
    pub rsvd1: [u8; 11],
}
// mlx5_wqe_srq_next_seg
const _: () = assert!(size_of::<SrqNextSeg>() == 16);
const _: () = assert!(offset_of!(SrqNextSeg, rsvd0) == 0);
const _: () = assert!(offset_of!(SrqNextSeg, next_wqe_index) == 2);
const _: () = assert!(offset_of!(SrqNextSeg, signature) == 4);
const _: () = assert!(offset_of!(SrqNextSeg, rsvd1) == 5);

impl SrqNextSeg {
    /// A next segment linking to `next`.
    pub const fn new(next: u16) -> Self {
        Self {
            rsvd0: [0; 2],
            next_wqe_index: U16::new(next),
            signature: 0,
            rsvd1: [0; 11],
        }
    }
}
