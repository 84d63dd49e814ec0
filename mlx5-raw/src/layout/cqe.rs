//! Completion queue entries (`mlx5dv.h`, docs/spec/mlx5.md#cqe64) and a decoder that never
//! panics.
//!
//! [`decode`] turns any 64-byte block into a [`Completion`] value. The contract, in the
//! smoltcp style: `decode` never panics, whatever the bytes; a slice that is not exactly
//! 64 bytes is [`CqeDecodeError::Length`]; a compressed-session CQE (format 3) is
//! [`CqeDecodeError::Compressed`], because its fields mean something else (the byte count
//! is the number of CQEs in the session) and expanding it needs the following slots.
//! Inline-scatter CQEs (formats 1 and 2) decode, with [`Completion::format`] saying where
//! the payload is, and with the fields that the inline payload overwrites reported as
//! absent rather than misread.

use core::mem::{offset_of, size_of};

use zerocopy::big_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::consts::{CQE_OWNER_MASK, CQE_SE_MASK, QPN_MASK};

/// The 64-byte CQE. Mirrors `struct mlx5_cqe64` (`mlx5dv.h`; the anonymous union of
/// bytes 0..32 is laid out with its first member's names, Ethernet/TM fields unnamed).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct Cqe64 {
    /// Reserved (Ethernet packet info).
    pub rsvd0: [u8; 2],
    /// Striding-RQ WQE id (BE16).
    pub wqe_id: U16,
    /// Reserved (LRO, RSS hash; tag-matching union).
    pub rsvd4: [u8; 13],
    /// `[6:0]` DLID path bits (UD).
    pub ml_path: u8,
    /// Reserved (checksum).
    pub rsvd20: [u8; 4],
    /// Source LID (BE16).
    pub slid: U16,
    /// `[23:0]` remote (source) QPN, `[27:24]` SL, `[29:28]` GRH flags (BE32).
    pub flags_rqpn: U32,
    /// L3/L4 OK bits (Ethernet).
    pub hds_ip_ext: u8,
    /// L4 header type (Ethernet).
    pub l4_hdr_type_etc: u8,
    /// VLAN (BE16, Ethernet).
    pub vlan_info: U16,
    /// `[23:0]` SRQN (CQE v0) or QP user index (CQE v1) (BE32).
    pub srqn_uidx: U32,
    /// Immediate for RESP_WR_IMM / RESP_SEND_IMM, raw bytes as the sender put them;
    /// invalidated rkey for RESP_SEND_INV; else pkey index.
    pub imm_inval_pkey: [u8; 4],
    /// Application (tag matching).
    pub app: u8,
    /// Application op (tag matching).
    pub app_op: u8,
    /// Application info (BE16).
    pub app_info: U16,
    /// Bytes received / RDMA-write length (responder), bytes read (READ) (BE32).
    pub byte_cnt: U32,
    /// Raw HCA timestamp (BE64).
    pub timestamp: U64,
    /// `[23:0]` local QPN; requester CQEs: `[31:24]` send WQE opcode (BE32).
    pub sop_drop_qpn: U32,
    /// SQ: WQE index of the completed WQE's first BB; SRQ: WQE index; RQ: counter (BE16).
    pub wqe_counter: U16,
    /// CQE signature / validity iteration count.
    pub signature: u8,
    /// `[7:4]` opcode, `[3:2]` format, `[1]` SE, `[0]` owner.
    pub op_own: u8,
}
// mlx5_cqe64
const _: () = assert!(size_of::<Cqe64>() == 64);
const _: () = assert!(offset_of!(Cqe64, wqe_id) == 2);
const _: () = assert!(offset_of!(Cqe64, rsvd4) == 4);
const _: () = assert!(offset_of!(Cqe64, ml_path) == 17);
const _: () = assert!(offset_of!(Cqe64, rsvd20) == 18);
const _: () = assert!(offset_of!(Cqe64, slid) == 22);
const _: () = assert!(offset_of!(Cqe64, flags_rqpn) == 24);
const _: () = assert!(offset_of!(Cqe64, hds_ip_ext) == 28);
const _: () = assert!(offset_of!(Cqe64, l4_hdr_type_etc) == 29);
const _: () = assert!(offset_of!(Cqe64, vlan_info) == 30);
const _: () = assert!(offset_of!(Cqe64, srqn_uidx) == 32);
const _: () = assert!(offset_of!(Cqe64, imm_inval_pkey) == 36);
const _: () = assert!(offset_of!(Cqe64, app) == 40);
const _: () = assert!(offset_of!(Cqe64, app_op) == 41);
const _: () = assert!(offset_of!(Cqe64, app_info) == 42);
const _: () = assert!(offset_of!(Cqe64, byte_cnt) == 44);
const _: () = assert!(offset_of!(Cqe64, timestamp) == 48);
const _: () = assert!(offset_of!(Cqe64, sop_drop_qpn) == 56);
const _: () = assert!(offset_of!(Cqe64, wqe_counter) == 60);
const _: () = assert!(offset_of!(Cqe64, signature) == 62);
const _: () = assert!(offset_of!(Cqe64, op_own) == 63);

impl Cqe64 {
    /// An all-zero CQE (a starting point for building one field by field).
    pub const ZEROED: Self = Self {
        rsvd0: [0; 2],
        wqe_id: U16::ZERO,
        rsvd4: [0; 13],
        ml_path: 0,
        rsvd20: [0; 4],
        slid: U16::ZERO,
        flags_rqpn: U32::ZERO,
        hds_ip_ext: 0,
        l4_hdr_type_etc: 0,
        vlan_info: U16::ZERO,
        srqn_uidx: U32::ZERO,
        imm_inval_pkey: [0; 4],
        app: 0,
        app_op: 0,
        app_info: U16::ZERO,
        byte_cnt: U32::ZERO,
        timestamp: U64::ZERO,
        sop_drop_qpn: U32::ZERO,
        wqe_counter: U16::ZERO,
        signature: 0,
        op_own: 0,
    };

    /// The CQE opcode (`op_own[7:4]`, `mlx5dv_get_cqe_opcode`).
    pub const fn opcode(&self) -> CqeOpcode {
        CqeOpcode::from_u4(self.op_own >> 4)
    }

    /// The owner bit (`op_own[0]`, `mlx5dv_get_cqe_owner`).
    pub const fn owner(&self) -> bool {
        self.op_own & CQE_OWNER_MASK != 0
    }

    /// The raw format (`op_own[3:2]`, `mlx5dv_get_cqe_format`).
    pub const fn format_bits(&self) -> u8 {
        (self.op_own >> 2) & 3
    }
}

/// Error CQE, the layout of REQ_ERR (13) and RESP_ERR (14) CQEs. Mirrors
/// `struct mlx5_err_cqe` (`mlx5dv.h`; C declares the multi-byte fields as host integers,
/// the values are big-endian as in `linux/mlx5/device.h`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct ErrCqe {
    /// Reserved.
    pub rsvd0: [u8; 32],
    /// `[23:0]` SRQN / user index (BE32).
    pub srqn: U32,
    /// Reserved (bytes 52, 53 hold hardware-internal syndromes).
    pub rsvd1: [u8; 18],
    /// Vendor (firmware-specific) syndrome.
    pub vendor_err_synd: u8,
    /// Error syndrome ([`Syndrome`]).
    pub syndrome: u8,
    /// `[31:24]` opcode of the failed send WQE (REQ_ERR), `[23:0]` QPN (BE32).
    pub s_wqe_opcode_qpn: U32,
    /// WQE index / counter of the failed or flushed WQE (BE16).
    pub wqe_counter: U16,
    /// Signature.
    pub signature: u8,
    /// `0xD?` / `0xE?` | owner.
    pub op_own: u8,
}
// mlx5_err_cqe
const _: () = assert!(size_of::<ErrCqe>() == 64);
const _: () = assert!(offset_of!(ErrCqe, rsvd0) == 0);
const _: () = assert!(offset_of!(ErrCqe, srqn) == 32);
const _: () = assert!(offset_of!(ErrCqe, rsvd1) == 36);
const _: () = assert!(offset_of!(ErrCqe, vendor_err_synd) == 54);
const _: () = assert!(offset_of!(ErrCqe, syndrome) == 55);
const _: () = assert!(offset_of!(ErrCqe, s_wqe_opcode_qpn) == 56);
const _: () = assert!(offset_of!(ErrCqe, wqe_counter) == 60);
const _: () = assert!(offset_of!(ErrCqe, signature) == 62);
const _: () = assert!(offset_of!(ErrCqe, op_own) == 63);

impl ErrCqe {
    /// An all-zero error CQE.
    pub const ZEROED: Self = Self {
        rsvd0: [0; 32],
        srqn: U32::ZERO,
        rsvd1: [0; 18],
        vendor_err_synd: 0,
        syndrome: 0,
        s_wqe_opcode_qpn: U32::ZERO,
        wqe_counter: U16::ZERO,
        signature: 0,
        op_own: 0,
    };
}

/// CQE opcodes (`op_own[7:4]`; `MLX5_CQE_*`, `mlx5dv.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CqeOpcode {
    /// 0 `MLX5_CQE_REQ`: a signaled send WQE completed.
    Req,
    /// 1 `MLX5_CQE_RESP_WR_IMM`: RDMA WRITE with immediate received.
    RespWrImm,
    /// 2 `MLX5_CQE_RESP_SEND`.
    RespSend,
    /// 3 `MLX5_CQE_RESP_SEND_IMM`.
    RespSendImm,
    /// 4 `MLX5_CQE_RESP_SEND_INV`.
    RespSendInv,
    /// 13 `MLX5_CQE_REQ_ERR`: send WQE failed or was flushed.
    ReqErr,
    /// 14 `MLX5_CQE_RESP_ERR`: receive WQE failed or was flushed.
    RespErr,
    /// 15 `MLX5_CQE_INVALID`: software-initialised slot.
    Invalid,
    /// Any other 4-bit value (5 RESIZE_CQ, 6 NO_PACKET, 12 SIG_ERR, reserved ones).
    Other(u8),
}

impl CqeOpcode {
    /// The opcode for the 4-bit value `v & 0xf`.
    pub const fn from_u4(v: u8) -> Self {
        match v & 0xf {
            0 => Self::Req,
            1 => Self::RespWrImm,
            2 => Self::RespSend,
            3 => Self::RespSendImm,
            4 => Self::RespSendInv,
            13 => Self::ReqErr,
            14 => Self::RespErr,
            15 => Self::Invalid,
            o => Self::Other(o),
        }
    }

    /// The 4-bit value.
    pub const fn as_u8(self) -> u8 {
        match self {
            Self::Req => 0,
            Self::RespWrImm => 1,
            Self::RespSend => 2,
            Self::RespSendImm => 3,
            Self::RespSendInv => 4,
            Self::ReqErr => 13,
            Self::RespErr => 14,
            Self::Invalid => 15,
            Self::Other(o) => o & 0xf,
        }
    }

    /// REQ_ERR or RESP_ERR: the CQE has the [`ErrCqe`] layout.
    pub const fn is_error(self) -> bool {
        matches!(self, Self::ReqErr | Self::RespErr)
    }

    /// A responder (receive-side) completion, success or error.
    pub const fn is_responder(self) -> bool {
        matches!(
            self,
            Self::RespWrImm
                | Self::RespSend
                | Self::RespSendImm
                | Self::RespSendInv
                | Self::RespErr
        )
    }
}

/// Error syndromes of REQ_ERR/RESP_ERR CQEs (`MLX5_CQE_SYNDROME_*`, docs/spec/mlx5.md#error-cqe).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// 0x01: receive buffer too small / bad local length.
    LocalLengthErr,
    /// 0x02: malformed WQE (bad DS, opcode, QPN or index).
    LocalQpOpErr,
    /// 0x04: bad lkey, out of MR bounds, missing local access, PD mismatch.
    LocalProtErr,
    /// 0x05: QP in error, WQE flushed.
    WrFlushErr,
    /// 0x06: memory window bind error.
    MwBindErr,
    /// 0x10: unexpected response.
    BadRespErr,
    /// 0x11: local access error.
    LocalAccessErr,
    /// 0x12: responder NAK "invalid request".
    RemoteInvalReqErr,
    /// 0x13: responder NAK "remote access error" (bad rkey, bounds, permissions).
    RemoteAccessErr,
    /// 0x14: responder could not complete the operation.
    RemoteOpErr,
    /// 0x15: ack timeout × retry_cnt.
    TransportRetryExcErr,
    /// 0x16: RNR NAKs × rnr_retry.
    RnrRetryExcErr,
    /// 0x22: remote aborted (with vendor 0x93: ODP page fault).
    RemoteAbortedErr,
    /// Any other value (reported as a general error by verbs).
    Other(u8),
}

impl Syndrome {
    /// The syndrome for a raw value.
    pub const fn from_u8(v: u8) -> Self {
        match v {
            0x01 => Self::LocalLengthErr,
            0x02 => Self::LocalQpOpErr,
            0x04 => Self::LocalProtErr,
            0x05 => Self::WrFlushErr,
            0x06 => Self::MwBindErr,
            0x10 => Self::BadRespErr,
            0x11 => Self::LocalAccessErr,
            0x12 => Self::RemoteInvalReqErr,
            0x13 => Self::RemoteAccessErr,
            0x14 => Self::RemoteOpErr,
            0x15 => Self::TransportRetryExcErr,
            0x16 => Self::RnrRetryExcErr,
            0x22 => Self::RemoteAbortedErr,
            o => Self::Other(o),
        }
    }

    /// The raw value.
    pub const fn as_u8(self) -> u8 {
        match self {
            Self::LocalLengthErr => 0x01,
            Self::LocalQpOpErr => 0x02,
            Self::LocalProtErr => 0x04,
            Self::WrFlushErr => 0x05,
            Self::MwBindErr => 0x06,
            Self::BadRespErr => 0x10,
            Self::LocalAccessErr => 0x11,
            Self::RemoteInvalReqErr => 0x12,
            Self::RemoteAccessErr => 0x13,
            Self::RemoteOpErr => 0x14,
            Self::TransportRetryExcErr => 0x15,
            Self::RnrRetryExcErr => 0x16,
            Self::RemoteAbortedErr => 0x22,
            Self::Other(o) => o,
        }
    }

    /// What the syndrome tells whoever reads the failure, in a few words:
    /// NUL-terminated so a C caller can print it as it is. A retry counter exceeded is
    /// the usual sign of a dead peer or link.
    pub const fn text(self) -> &'static core::ffi::CStr {
        match self {
            Self::LocalLengthErr => c"local length error (a receive buffer too small)",
            Self::LocalQpOpErr => c"malformed WQE (local QP operation error)",
            Self::LocalProtErr => c"local protection error (bad lkey or buffer outside its MR)",
            Self::WrFlushErr => c"work request flushed (the QP was already in error)",
            Self::MwBindErr => c"memory window bind error",
            Self::BadRespErr => c"unexpected response",
            Self::LocalAccessErr => c"local access error",
            Self::RemoteInvalReqErr => c"the peer refused an invalid request",
            Self::RemoteAccessErr => {
                c"remote access error (bad rkey, bounds or permissions at the peer)"
            }
            Self::RemoteOpErr => c"the peer could not complete the operation",
            Self::TransportRetryExcErr => {
                c"transport retry counter exceeded (no ACK: the peer or the link is gone)"
            }
            Self::RnrRetryExcErr => {
                c"RNR retry counter exceeded (the peer posted no receive in time)"
            }
            Self::RemoteAbortedErr => c"the remote side aborted",
            Self::Other(_) => c"unknown syndrome",
        }
    }
}

/// Where a responder CQE's payload is (`op_own[3:2]`, docs/spec/mlx5.md#scatter-to-cqe). Compressed
/// sessions (format 3) are a [`CqeDecodeError`], not a format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CqeFormat {
    /// 0: data (if any) is in the receive buffer.
    Normal,
    /// 1 (`MLX5_INLINE_SCATTER_32`): ≤ 32 payload bytes in CQE bytes 0..32.
    InlineScatter32,
    /// 2 (`MLX5_INLINE_SCATTER_64`): ≤ 64 payload bytes in the first half of a 128-byte
    /// CQE.
    InlineScatter64,
}

/// The error part of a REQ_ERR/RESP_ERR completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CqeError {
    /// Syndrome (byte 55).
    pub syndrome: Syndrome,
    /// Vendor syndrome (byte 54), firmware-specific.
    pub vendor_syndrome: u8,
}

/// A decoded CQE. Fields a CQE kind does not carry are `None` (or 0 for `byte_cnt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Completion {
    /// CQE opcode.
    pub opcode: CqeOpcode,
    /// Owner bit as found in `op_own` (the poller has already checked it).
    pub owner: bool,
    /// SE bit: the sender requested a solicited event.
    pub solicited: bool,
    /// Payload location for responder CQEs; `Normal` otherwise.
    pub format: CqeFormat,
    /// Local QPN (`sop_drop_qpn[23:0]`, error CQEs: `s_wqe_opcode_qpn[23:0]`).
    pub qpn: u32,
    /// `wqe_counter`: SQ WQE index of the completed WQE's first BB, SRQ WQE index, or RQ
    /// counter.
    pub wqe_counter: u16,
    /// Byte count (responder: bytes received / written; READ: bytes read). 0 in error
    /// CQEs, whose layout has no byte count.
    pub byte_cnt: u32,
    /// Immediate (RESP_WR_IMM, RESP_SEND_IMM) or invalidated rkey (RESP_SEND_INV), raw
    /// bytes.
    pub imm: Option<[u8; 4]>,
    /// Remote (source) QPN of a successful responder CQE; `None` for other kinds and when
    /// inline-scatter-32 data overwrites it.
    pub remote_qpn: Option<u32>,
    /// SRQN (CQE v0) or QP user index (CQE v1), 24 bits.
    pub srqn_uidx: u32,
    /// Send WQE opcode, for REQ (`sop_drop_qpn[31:24]`) and REQ_ERR
    /// (`s_wqe_opcode_qpn[31:24]`). See [`SendOpcode::from_u8`](super::SendOpcode::from_u8).
    pub send_opcode: Option<u8>,
    /// Syndromes of REQ_ERR/RESP_ERR.
    pub error: Option<CqeError>,
}

impl Completion {
    /// Whether this is an error (or flush) completion.
    pub const fn is_error(&self) -> bool {
        self.error.is_some()
    }
}

/// Why [`decode`] rejected a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CqeDecodeError {
    /// The slice is not exactly 64 bytes.
    Length {
        /// Length of the slice given.
        len: usize,
    },
    /// A compressed-session title (format 3). Its `byte_cnt` is the session length and
    /// its mini-CQEs live in the following slots; this crate does not enable or expand
    /// compression, so seeing one means the CQ was misconfigured.
    Compressed {
        /// `byte_cnt` of the title: the number of CQEs in the session.
        session_len: u32,
    },
}

impl core::fmt::Display for CqeDecodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Length { len } => write!(f, "CQE slice is {len} bytes, not 64"),
            Self::Compressed { session_len } => {
                write!(f, "compressed CQE session of {session_len} entries (compression is not supported)")
            }
        }
    }
}

/// The part of a successful completion a poll loop acts on, read straight from the bytes
/// without building a [`Completion`]: see [`brief`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CqeBrief {
    /// The local QPN (`sop_drop_qpn[23:0]`).
    pub qpn: u32,
    /// `wqe_counter`: the SQ index of a REQ's WQE, the SRQ index of a RESP_WR_IMM's.
    pub wqe_counter: u16,
    /// The immediate of a RESP_WR_IMM (raw bytes); zeros for a REQ.
    pub imm: [u8; 4],
}

/// `op_own` with the owner and SE bits cleared: opcode and format.
const OP_FORMAT_MASK: u8 = 0xfc;

/// For the two completions a copyrpc poll loop sees all the time, a successful REQ
/// (`want` = [`CqeOpcode::Req`]) or RESP_WR_IMM (`want` = [`CqeOpcode::RespWrImm`]) in
/// the normal format, the fields [`decode`] would report for it (`qpn`, `wqe_counter`,
/// `imm`) in a few loads; `None` for anything else (another opcode, an error, inline
/// scatter, compression), which [`decode`] is for. The tests hold it to `decode` on every
/// byte pattern of `op_own`.
#[inline(always)]
pub fn brief(bytes: &[u8; 64], want: CqeOpcode) -> Option<CqeBrief> {
    brief_with_op_own(bytes, bytes[63], want)
}

/// [`brief`] with `op_own` given apart from the bytes, whose own byte 63 is ignored: a
/// poller that stamps a consumed slot's `op_own` INVALID before reading the body keeps
/// the byte it loaded (`Cq::poll`).
#[inline(always)]
pub(crate) fn brief_with_op_own(bytes: &[u8; 64], op_own: u8, want: CqeOpcode) -> Option<CqeBrief> {
    let cqe: &Cqe64 = zerocopy::transmute_ref!(bytes);
    if op_own & OP_FORMAT_MASK != want.as_u8() << 4
        || !matches!(want, CqeOpcode::Req | CqeOpcode::RespWrImm)
    {
        return None;
    }
    Some(CqeBrief {
        qpn: cqe.sop_drop_qpn.get() & QPN_MASK,
        wqe_counter: cqe.wqe_counter.get(),
        imm: if matches!(want, CqeOpcode::RespWrImm) {
            cqe.imm_inval_pkey
        } else {
            [0; 4]
        },
    })
}

/// Decodes one 64-byte CQE (the `mlx5_cqe64`, i.e. the second half of a 128-byte CQE).
///
/// Never panics. See the module docs for what is an error and what is a variant.
#[inline(always)]
pub fn decode(bytes: &[u8]) -> Result<Completion, CqeDecodeError> {
    let Ok(block) = <&[u8; 64]>::try_from(bytes) else {
        return Err(CqeDecodeError::Length { len: bytes.len() });
    };
    decode_with_op_own(block, block[63])
}

/// [`decode`] with `op_own` given apart from the bytes, whose own byte 63 is ignored
/// (see [`brief_with_op_own`]).
#[inline(always)]
pub(crate) fn decode_with_op_own(
    bytes: &[u8; 64],
    op_own: u8,
) -> Result<Completion, CqeDecodeError> {
    let cqe: &Cqe64 = zerocopy::transmute_ref!(bytes);
    let opcode = CqeOpcode::from_u4(op_own >> 4);
    let format = match (op_own >> 2) & 3 {
        0 => CqeFormat::Normal,
        1 => CqeFormat::InlineScatter32,
        2 => CqeFormat::InlineScatter64,
        // 3 = MLX5_COMPRESSED (the only value left of two bits).
        _ => {
            return Err(CqeDecodeError::Compressed {
                session_len: cqe.byte_cnt.get(),
            })
        }
    };
    let owner = op_own & CQE_OWNER_MASK != 0;
    let solicited = op_own & CQE_SE_MASK != 0;

    if opcode.is_error() {
        // Same 64 bytes, error layout: both types are plain bytes of equal size.
        let err: &ErrCqe = zerocopy::transmute_ref!(bytes);
        let opq = err.s_wqe_opcode_qpn.get();
        return Ok(Completion {
            opcode,
            owner,
            solicited,
            format,
            qpn: opq & QPN_MASK,
            wqe_counter: err.wqe_counter.get(),
            byte_cnt: 0,
            imm: None,
            remote_qpn: None,
            srqn_uidx: err.srqn.get() & QPN_MASK,
            send_opcode: if matches!(opcode, CqeOpcode::ReqErr) {
                Some((opq >> 24) as u8)
            } else {
                None
            },
            error: Some(CqeError {
                syndrome: Syndrome::from_u8(err.syndrome),
                vendor_syndrome: err.vendor_err_synd,
            }),
        });
    }

    let sop = cqe.sop_drop_qpn.get();
    let imm = match opcode {
        CqeOpcode::RespWrImm | CqeOpcode::RespSendImm | CqeOpcode::RespSendInv => {
            Some(cqe.imm_inval_pkey)
        }
        _ => None,
    };
    let remote_qpn = match (opcode.is_responder(), format) {
        // Inline-32 payload occupies bytes 0..32, which include flags_rqpn.
        (true, CqeFormat::Normal | CqeFormat::InlineScatter64) => {
            Some(cqe.flags_rqpn.get() & QPN_MASK)
        }
        _ => None,
    };
    Ok(Completion {
        opcode,
        owner,
        solicited,
        format,
        qpn: sop & QPN_MASK,
        wqe_counter: cqe.wqe_counter.get(),
        byte_cnt: cqe.byte_cnt.get(),
        imm,
        remote_qpn,
        srqn_uidx: cqe.srqn_uidx.get() & QPN_MASK,
        send_opcode: if matches!(opcode, CqeOpcode::Req) {
            Some((sop >> 24) as u8)
        } else {
            None
        },
        error: None,
    })
}
