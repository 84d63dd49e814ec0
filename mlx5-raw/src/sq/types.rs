//! Value types of the send queue: configuration, errors, payload descriptions.

/// Payload and signaling policy of a send queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqConfig {
    /// Payloads of at most this many bytes are sent fully inline.
    pub max_inline: u32,
    /// A registered payload longer than `max_inline` goes as its first `inline_head`
    /// bytes inline plus one data segment for the rest. `inline_head <= max_inline`.
    pub inline_head: u32,
    /// Every `signal_interval`-th WQE asks for a CQE (CE = CQ_UPDATE), counted from the
    /// last signaled one. ≥ 1.
    pub signal_interval: u32,
}

impl SqConfig {
    /// copyrpc's settings (docs/spec/copyrpc.md#wqes): fully inline up to 220 bytes (ctrl + raddr +
    /// inline = 256 B, one BlueFlame buffer), else 204 bytes inline + one SGE (also 256
    /// B); signal every 64 WQEs.
    pub const COPYRPC: Self = Self {
        max_inline: 220,
        inline_head: 204,
        signal_interval: 64,
    };
}

impl Default for SqConfig {
    fn default() -> Self {
        Self::COPYRPC
    }
}

/// Why [`Sq::new`](super::Sq::new) rejected a description or configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqInitError {
    /// `buf` or `dbrec` is null.
    NullPointer,
    /// `dbrec` is not 4-byte aligned or `bf_reg` not 8-byte aligned.
    Misaligned,
    /// `wqe_cnt` is not a power of two in `1 ..= 65 536` (the u16 wire counter must
    /// identify every outstanding WQEBB).
    WqeCnt(u32),
    /// `stride` is not 64.
    Stride(u32),
    /// `bf_size` is not a multiple of 64.
    BfSize(u32),
    /// `qpn` does not fit in 24 bits.
    Qpn(u32),
    /// `max_inline >` [`MAX_INLINE`](super::MAX_INLINE), `inline_head > max_inline`,
    /// `inline_head >` [`MAX_INLINE_HEAD`](super::MAX_INLINE_HEAD), or
    /// `signal_interval == 0`.
    Config(SqConfig),
}

/// Why a WQE was not posted. Nothing was written to the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostError {
    /// Not enough free WQEBBs: retire completions ([`Sq::retire`](super::Sq::retire)) and try again.
    SqFull {
        /// WQEBBs this WQE needs.
        needed: u32,
        /// WQEBBs free now.
        free: u32,
    },
    /// An inline-only payload is longer than `max_inline`.
    InlineTooLong {
        /// Payload length.
        len: usize,
        /// The configured maximum.
        max: u32,
    },
    /// The WQE would exceed [`MAX_WQE_BYTES`](super::MAX_WQE_BYTES) (too many SGEs), or more WQEBBs than the
    /// whole ring.
    WqeTooLarge {
        /// WQE size in 16-byte units.
        ds: usize,
    },
    /// A gather entry (or the SGE part of a registered payload) is 2^31 bytes or longer:
    /// bit 31 of `byte_count` means inline.
    SgeTooLong {
        /// The length.
        len: u64,
    },
}

/// Why [`Sq::retire`](super::Sq::retire) rejected a completion. Nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetireError {
    /// `wqe_counter` is not within the outstanding WQEBBs (stale, duplicate, or for
    /// another queue).
    NotOutstanding {
        /// The counter given.
        wqe_counter: u16,
    },
    /// The WQEBB at `wqe_counter` is not the start of a WQE of this QP (its ctrl segment
    /// has another index, QPN or an impossible size).
    NotAWqeStart {
        /// The counter given.
        wqe_counter: u16,
    },
    /// The completion is not a requester completion (REQ / REQ_ERR) of this QP.
    WrongCompletion,
}

/// Remote side of an RDMA READ/WRITE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remote {
    /// Remote virtual address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// One gather (send) or scatter (READ) entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Local virtual address.
    pub addr: u64,
    /// Length in bytes; entries of length 0 are skipped (never emitted), lengths of
    /// 2^31 or more are rejected.
    pub len: u32,
    /// Local key.
    pub lkey: u32,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Repr<'a> {
    Inline(&'a [u8]),
    Registered { bytes: &'a [u8], lkey: u32 },
    Gather(&'a [Sge]),
}

/// The data of a WRITE / WRITE_IMM / SEND / SEND_IMM.
#[derive(Clone, Copy, Debug)]
pub struct Payload<'a>(pub(super) Repr<'a>);

impl<'a> Payload<'a> {
    /// No data: a zero-length operation (WRITE has DS = 2, SEND DS = 1).
    pub const EMPTY: Payload<'static> = Payload(Repr::Inline(&[]));

    /// Bytes copied into the WQE; fails with [`PostError::InlineTooLong`] above
    /// `max_inline`. The slice can be dropped or reused as soon as the post returns.
    pub const fn inline(bytes: &'a [u8]) -> Self {
        Self(Repr::Inline(bytes))
    }

    /// Bytes in registered memory: inline if at most `max_inline`, else the first
    /// `inline_head` bytes inline and the rest by one data segment pointing into `bytes`.
    ///
    /// # Safety
    ///
    /// `bytes` lies inside a memory region registered under `lkey` in this QP's
    /// protection domain (for the software device: a region it knows under `lkey`), and
    /// if the payload is longer than `max_inline`, those bytes stay registered, mapped
    /// and unmodified until the WQE is retired by a completion ([`Sq::retire`](super::Sq::retire) with its
    /// index or a later one), because the device reads them by DMA after the post returns.
    pub const unsafe fn registered(bytes: &'a [u8], lkey: u32) -> Self {
        Self(Repr::Registered { bytes, lkey })
    }

    /// A gather list of data segments (zero-length entries skipped).
    ///
    /// # Safety
    ///
    /// Every entry's `[addr, addr + len)` lies inside a memory region registered under its
    /// `lkey` in this QP's protection domain, and stays registered, mapped and unmodified
    /// until the WQE is retired by a completion, because the device reads it by DMA after
    /// the post returns.
    pub const unsafe fn gather(sges: &'a [Sge]) -> Self {
        Self(Repr::Gather(sges))
    }
}

/// What was posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Posted {
    /// The WQE's index: the u16 producer counter of its first WQEBB. A requester CQE
    /// for it carries this as `wqe_counter`.
    pub wqe_index: u16,
    /// WQE size in 16-byte units.
    pub ds: u8,
    /// WQEBBs used.
    pub bbs: u8,
    /// Whether CE = CQ_UPDATE was set (explicitly or by the signaling policy).
    pub signaled: bool,
}
