//! Send queue driver: WQE builders, SQ-space accounting, signaling policy, doorbell.
//!
//! ```text
//!   pi (u64, free-running, WQEBBs) ──► wire value `pi as u16` in ctrl.wqe_index and [SND_DBR]
//!   ci (u64): first WQEBB not yet known complete;  ci <= pi,  pi - ci <= wqe_cnt <= 65 536
//! ```
//!
//! WQEs are built in place through [`SqBatch`], which borrows the queue: post any number
//! of WQEs, then [`SqBatch::finish`] rings one doorbell for all of them. Dropping a batch
//! without `finish` rolls the producer counter back; nothing was published, because the
//! device only fetches WQEs up to the doorbell record. While a batch is open the queue
//! cannot be used otherwise (no retiring, no second batch):
//!
//! ```
//! use mlx5_raw::layout::FmCeSe;
//! use mlx5_raw::{Payload, PostError, Remote, Sq};
//!
//! fn send_two(sq: &mut Sq, remote: Remote) -> Result<(), PostError> {
//!     let mut batch = sq.batch();
//!     batch.rdma_write_imm(remote, Payload::inline(b"hello"), [0, 0, 0, 1], FmCeSe::COMP_ONLY_ERR)?;
//!     batch.rdma_write(remote, Payload::EMPTY, FmCeSe::CQ_UPDATE)?;
//!     batch.finish(); // one doorbell
//!     Ok(())
//! }
//! ```
//!
//! ```compile_fail,E0499
//! fn retire_inside(sq: &mut mlx5_raw::Sq) {
//!     let batch = sq.batch();
//!     let _ = sq.retire(0); // the batch still borrows the queue
//!     batch.finish();
//! }
//! ```
//!
//! A WQE may span up to 8 WQEBBs (512 bytes, docs/spec/mlx5.md#send-wqe) and may run past
//! the end of the ring. The common WQE (contiguous bytes, inline or an inline head and one
//! data segment, before the ring end, with room free) is written by `post_contig` with
//! fixed-size stores into its one slice. Everything else goes to `post_general`, out of
//! line, whose segment code writes through one cursor (`WqeCursor`) and never tests for the
//! end of the queue: a WQE that fits before the end is written as one slice, and only one
//! that straddles it goes through the wrap-aware ring writes. Both lay a WQE out the same
//! way (`tests/sq.rs` compares every length at every ring position with a reference).
//!
//! Completions: a requester CQE carries the `wqe_index` of the completed WQE's first BB;
//! that WQE and everything before it are done ([`Sq::retire`]). The WQE's size is read
//! back from its ctrl segment, so no side table is kept.

mod batch;
mod cursor;
mod types;

use core::ptr::NonNull;

use zerocopy::IntoBytes;

use crate::barrier;
use crate::bf::SharedBf;
use crate::desc::SqDesc;
use crate::layout::{
    Completion, CqeOpcode, CtrlSeg, DataSeg, FmCeSe, InlineSegHdr, RaddrSeg, SendOpcode, QPN_MASK,
    SEND_WQE_BB, SEND_WQE_DS, SND_DBR,
};
use crate::mem::{DbRec, Mmio, RingMem};

pub use batch::SqBatch;
use cursor::{Span, WqeCursor, WqeDest, Wrapping};
use types::Repr;
pub use types::{Payload, PostError, Posted, Remote, RetireError, Sge, SqConfig, SqInitError};

/// Largest WQE this driver builds, in bytes (docs/spec/mlx5.md#send-wqe: the kernel's SGE
/// arithmetic and RDMA READ are limited to 512 B).
pub const MAX_WQE_BYTES: usize = 512;
/// Largest WQE in WQEBBs.
pub const MAX_WQE_BBS: u32 = (MAX_WQE_BYTES / SEND_WQE_BB) as u32;
/// Largest `max_inline` an [`SqConfig`] accepts: ctrl + raddr + inline header + data
/// must fit in [`MAX_WQE_BYTES`].
pub const MAX_INLINE: u32 = (MAX_WQE_BYTES - 2 * SEND_WQE_DS - 4) as u32;
/// Largest `inline_head` an [`SqConfig`] accepts: ctrl + raddr + inline segment + one
/// data segment must fit in [`MAX_WQE_BYTES`].
pub const MAX_INLINE_HEAD: u32 = (MAX_WQE_BYTES - 3 * SEND_WQE_DS - 4) as u32;
/// `x` rounded up to a multiple of `P`, a power of two, for a size far below
/// `usize::MAX` (a WQE's): an add and a mask. `next_multiple_of` and `div_ceil` make a
/// remainder test and a select of it each time a WQE is sized (docs/PERFORMANCE.md,
/// "Latency path").
#[inline(always)]
const fn round_up<const P: usize>(x: usize) -> usize {
    const { assert!(P.is_power_of_two()) };
    debug_assert!(x <= usize::MAX - P);
    (x + (P - 1)) & !(P - 1)
}

/// Per-WQE plan computed before anything is written.
struct Plan<'a> {
    inline: &'a [u8],
    tail_sge: Option<DataSeg>,
    gather: &'a [Sge],
    ds: usize,
}

/// Writes a WQE as `plan` lays it out: ctrl, raddr, inline data, data segments.
#[inline]
fn write_wqe<D: WqeDest>(
    cur: &mut WqeCursor<D>,
    ctrl: &CtrlSeg,
    remote: Option<Remote>,
    plan: &Plan<'_>,
) {
    cur.seg(ctrl);
    if let Some(r) = remote {
        cur.seg(&RaddrSeg::new(r.addr, r.rkey));
    }
    if !plan.inline.is_empty() {
        // Zero the inline segment's last 16 bytes first (one fixed-size store
        // instead of a variable-length fill): the header and data written next
        // overwrite their part, leaving the padding to the 16-byte boundary zero.
        let inline_end = (cur.off + 4 + plan.inline.len()).next_multiple_of(SEND_WQE_DS);
        cur.zero16_at(inline_end - SEND_WQE_DS);
        cur.put(InlineSegHdr::new(plan.inline.len() as u32).as_bytes());
        cur.put(plan.inline);
        cur.skip_to(inline_end);
    }
    if let Some(d) = &plan.tail_sge {
        cur.seg(d);
    }
    for s in plan.gather.iter().filter(|s| s.len != 0) {
        cur.seg(&DataSeg::new(s.len, s.lkey, s.addr));
    }
    debug_assert_eq!(cur.off, plan.ds * SEND_WQE_DS);
}

/// [`write_wqe`] for a WQE that runs past the end of the ring: rare (a WQE wraps once
/// a lap at most), so kept out of line, which lets the common path keep the plan in
/// registers.
#[cold]
#[inline(never)]
fn write_wrapping_wqe(
    ring: &mut RingMem,
    start: usize,
    ctrl: &CtrlSeg,
    remote: Option<Remote>,
    plan: &Plan<'_>,
) {
    write_wqe(
        &mut WqeCursor::new(Wrapping { ring, start }),
        ctrl,
        remote,
        plan,
    );
}

/// [`write_wqe`] for a WQE without gather entries (ctrl, raddr, inline data, at most one
/// data segment) into `wqe`, exactly its bytes, before the ring end: each segment is one
/// fixed-size store into a slice split off the front instead of a cursor write at a
/// running offset, whose bounds checks and offset arithmetic `write_wqe` pays per
/// segment (docs/PERFORMANCE.md, "Why the code is shaped this way"). The layout is
/// `write_wqe`'s (the tests compare both).
#[inline(always)]
fn write_contig(
    wqe: &mut [u8],
    ctrl: &CtrlSeg,
    remote: Option<Remote>,
    inline: &[u8],
    tail: Option<DataSeg>,
) -> Option<()> {
    let (seg, mut rest) = wqe.split_first_chunk_mut::<SEND_WQE_DS>()?;
    *seg = zerocopy::transmute!(*ctrl);
    if let Some(r) = remote {
        let (seg, after) = rest.split_first_chunk_mut::<SEND_WQE_DS>()?;
        *seg = zerocopy::transmute!(RaddrSeg::new(r.addr, r.rkey));
        rest = after;
    }
    if !inline.is_empty() {
        let (seg, after) = rest.split_at_mut_checked(round_up::<SEND_WQE_DS>(4 + inline.len()))?;
        // The last 16 bytes zeroed first, so the padding after the data is zero; header
        // and data then overwrite their part (as in `write_wqe`).
        *seg.last_chunk_mut::<SEND_WQE_DS>()? = [0; SEND_WQE_DS];
        let (hdr, data) = seg.split_first_chunk_mut::<4>()?;
        *hdr = zerocopy::transmute!(InlineSegHdr::new(inline.len() as u32));
        data.get_mut(..inline.len())?.copy_from_slice(inline);
        rest = after;
    }
    if let Some(d) = tail {
        *rest.first_chunk_mut::<SEND_WQE_DS>()? = zerocopy::transmute!(d);
    }
    Some(())
}

/// A send queue over raw queue memory. See the module docs.
#[derive(Debug)]
pub struct Sq {
    ring: RingMem,
    /// `[SND_DBR]` of the QP doorbell record.
    dbrec: DbRec,
    /// Doorbell/BlueFlame window (`2 * bf_size` bytes, or 8 when `bf_size == 0`); `None`
    /// when the device only watches the doorbell record.
    bf: Option<Mmio>,
    bf_size: u32,
    /// 0 or `bf_size`: which of the two BlueFlame buffers the next doorbell uses (a
    /// register of this QP's own; a shared one keeps it in `bf_lock`).
    bf_offset: u32,
    /// The lock and half of a register shared with other QPs (`SqDesc::bf_lock`).
    bf_lock: Option<NonNull<SharedBf>>,
    qpn: u32,
    /// Ring size in WQEBBs, a power of two ≤ 65 536.
    wqe_cnt: u32,
    cfg: SqConfig,
    /// Producer counter in WQEBBs, free-running (never wraps in practice); the wire
    /// value is `pi as u16`. Invariant: `ci <= pi <= ci + wqe_cnt`.
    pi: u64,
    /// First WQEBB not yet known complete, free-running.
    ci: u64,
    /// WQEs / WQEBBs posted since the last signaled WQE.
    unsig_wqes: u32,
    unsig_bbs: u32,
}

// SAFETY: `Sq` exclusively owns its queue memory, doorbell word and register window
// (constructor contract), none of which is tied to a thread; moving it to another thread
// moves that ownership. A shared register's `SharedBf` is only used through `&` and is
// `Sync` (a spin lock), so QPs on other threads may use it at the same time. It is not `Sync`: all mutation goes through `&mut self`.
unsafe impl Send for Sq {}

impl Sq {
    /// Takes over a send queue.
    ///
    /// # Safety
    ///
    /// For as long as the returned `Sq` lives (and until the device has stopped using
    /// the queue, i.e. the QP is destroyed or reset after the `Sq` is dropped):
    /// * `desc.buf` is valid for reads and writes of `wqe_cnt * 64` bytes, and only this
    ///   `Sq` and the device access it (no Rust references to it exist);
    /// * `desc.dbrec` points at the QP's two-word doorbell record, valid for atomic
    ///   accesses; only this `Sq` writes `[SND_DBR]`, and the device only reads it;
    /// * `desc.bf_reg` is null, or the QP's BlueFlame/doorbell register, valid for
    ///   volatile 8-byte writes of `2 * bf_size` bytes (8 bytes if `bf_size == 0`); if
    ///   other QPs (of any thread) write the same register, `desc.bf_lock` points at one
    ///   [`SharedBf`] that every one of them was given, valid for as long as any of them
    ///   lives; else it is null and nothing else writes the register;
    /// * `desc.qpn` is the QP's number and the QP is not posted to by anything else
    ///   (`ibv_post_send` on the same QP would desynchronise the counters);
    /// * no WQE has been posted to the QP yet (the doorbell record's SQ word is 0).
    pub unsafe fn new(desc: &SqDesc, cfg: SqConfig) -> Result<Self, SqInitError> {
        if desc.dbrec.is_null() {
            return Err(SqInitError::NullPointer);
        }
        let Some(buf) = NonNull::new(desc.buf) else {
            return Err(SqInitError::NullPointer);
        };
        if !desc.wqe_cnt.is_power_of_two() || desc.wqe_cnt > 1 << 16 {
            return Err(SqInitError::WqeCnt(desc.wqe_cnt));
        }
        if desc.stride as usize != SEND_WQE_BB {
            return Err(SqInitError::Stride(desc.stride));
        }
        if !desc.bf_size.is_multiple_of(SEND_WQE_BB as u32) {
            return Err(SqInitError::BfSize(desc.bf_size));
        }
        if desc.qpn > QPN_MASK {
            return Err(SqInitError::Qpn(desc.qpn));
        }
        if cfg.max_inline > MAX_INLINE
            || cfg.inline_head > cfg.max_inline
            || cfg.inline_head > MAX_INLINE_HEAD
            || cfg.signal_interval == 0
        {
            return Err(SqInitError::Config(cfg));
        }
        if !desc.dbrec.addr().is_multiple_of(4) || !desc.bf_reg.addr().is_multiple_of(8) {
            return Err(SqInitError::Misaligned);
        }
        // The record has two words; the SQ's is [SND_DBR]. `wrapping_add` keeps this safe;
        // the pointer is valid per the caller's contract.
        let Some(snd) = NonNull::new(desc.dbrec.wrapping_add(SND_DBR)) else {
            return Err(SqInitError::NullPointer);
        };
        let bf_len = if desc.bf_size == 0 {
            8
        } else {
            2 * desc.bf_size as usize
        };
        // SAFETY: the caller guarantees exclusive access to `buf` (wqe_cnt * 64 bytes, a
        // power of two), to the `[SND_DBR]` word (aligned, checked above) and to the
        // register window of `bf_len` bytes (8-aligned, checked above); see `# Safety`.
        let (ring, dbrec, bf) = unsafe {
            (
                RingMem::new(buf, desc.wqe_cnt as usize * SEND_WQE_BB),
                DbRec::new(snd),
                NonNull::new(desc.bf_reg).map(|p| Mmio::new(p, bf_len)),
            )
        };
        Ok(Self {
            ring,
            dbrec,
            bf,
            bf_size: desc.bf_size,
            bf_offset: 0,
            bf_lock: NonNull::new(desc.bf_lock.cast_mut()),
            qpn: desc.qpn,
            wqe_cnt: desc.wqe_cnt,
            cfg,
            pi: 0,
            ci: 0,
            unsig_wqes: 0,
            unsig_bbs: 0,
        })
    }

    /// Opens a batch of WQEs, rung with one doorbell by [`SqBatch::finish`].
    pub fn batch(&mut self) -> SqBatch<'_> {
        SqBatch::new(self)
    }

    /// Retires every WQE up to and including the one whose first WQEBB has index
    /// `wqe_counter` (the `wqe_counter` of a REQ or REQ_ERR CQE of this QP). Returns the
    /// number of WQEBBs freed. Completions must be retired in CQ order; a counter that is
    /// not outstanding is rejected without effect.
    pub fn retire(&mut self, wqe_counter: u16) -> Result<u32, RetireError> {
        // The u16 counter names one WQEBB in [ci, ci + 65536); pi - ci <= wqe_cnt <= 65536.
        let w = self.ci + u64::from(wqe_counter.wrapping_sub(self.ci as u16));
        if w >= self.pi {
            return Err(RetireError::NotOutstanding { wqe_counter });
        }
        let ctrl = self.read_ctrl(w);
        let bbs = u64::from(ctrl.ds()).div_ceil(4);
        if ctrl.wqe_index() != wqe_counter
            || ctrl.qpn() != self.qpn
            || bbs == 0
            || w + bbs > self.pi
        {
            return Err(RetireError::NotAWqeStart { wqe_counter });
        }
        let freed = (w + bbs - self.ci) as u32;
        self.ci = w + bbs;
        self.debug_check();
        Ok(freed)
    }

    /// [`retire`](Self::retire) for a decoded completion, checking that it is a requester
    /// completion (REQ or REQ_ERR) of this QP.
    pub fn retire_completion(&mut self, c: &Completion) -> Result<u32, RetireError> {
        if !matches!(c.opcode, CqeOpcode::Req | CqeOpcode::ReqErr) || c.qpn != self.qpn {
            return Err(RetireError::WrongCompletion);
        }
        self.retire(c.wqe_counter)
    }

    /// The QP number.
    pub const fn qpn(&self) -> u32 {
        self.qpn
    }

    /// Ring size in WQEBBs.
    pub const fn wqe_cnt(&self) -> u32 {
        self.wqe_cnt
    }

    /// The configuration.
    pub const fn config(&self) -> SqConfig {
        self.cfg
    }

    /// The wire producer counter: the `wqe_index` the next WQE gets, and the value of
    /// the last doorbell record written (outside a batch).
    pub const fn producer_index(&self) -> u16 {
        self.pi as u16
    }

    /// The free-running producer counter in WQEBBs.
    #[inline]
    pub const fn producer_counter(&self) -> u64 {
        self.pi
    }

    /// WQEBBs posted and not yet retired.
    #[inline]
    pub const fn outstanding_bbs(&self) -> u32 {
        (self.pi - self.ci) as u32
    }

    /// WQEBBs free for posting.
    #[inline]
    pub const fn free_bbs(&self) -> u32 {
        self.wqe_cnt - self.outstanding_bbs()
    }

    /// The counter invariant: `ci <= pi <= ci + wqe_cnt`.
    fn debug_check(&self) {
        debug_assert!(self.ci <= self.pi && self.pi - self.ci <= u64::from(self.wqe_cnt));
        // Unsignaled WQEBBs stay below half the ring (the progress rule in `post`).
        debug_assert!(self.unsig_bbs == 0 || self.unsig_bbs < self.wqe_cnt / 2);
    }

    fn read_ctrl(&self, pos: u64) -> CtrlSeg {
        let bytes: [u8; 16] = self.ring.read_array(self.ring_off(pos));
        zerocopy::transmute!(bytes)
    }

    fn ring_off(&self, pos: u64) -> usize {
        (pos as usize & (self.wqe_cnt as usize - 1)) * SEND_WQE_BB
    }

    /// Contiguous payload bytes as a WQE carries them: all inline up to `max_inline`,
    /// beyond it (registered bytes only, `lkey` given) the first `inline_head` inline
    /// and the rest by one data segment.
    #[inline(always)]
    fn split_contig<'a>(
        &self,
        bytes: &'a [u8],
        lkey: Option<u32>,
    ) -> Result<(&'a [u8], Option<DataSeg>), PostError> {
        if bytes.len() <= self.cfg.max_inline as usize {
            return Ok((bytes, None));
        }
        let Some(lkey) = lkey else {
            return Err(PostError::InlineTooLong {
                len: bytes.len(),
                max: self.cfg.max_inline,
            });
        };
        // `inline_head <= max_inline < bytes.len()` (`new` checked the config), so the
        // split succeeds; its refusal is never taken.
        let Some((head, rest)) = bytes.split_at_checked(self.cfg.inline_head as usize) else {
            return Err(PostError::InlineTooLong {
                len: bytes.len(),
                max: self.cfg.max_inline,
            });
        };
        let len = u32::try_from(rest.len()).ok().filter(|l| *l < 1 << 31);
        let Some(len) = len else {
            return Err(PostError::SgeTooLong {
                len: rest.len() as u64,
            });
        };
        // `as` exposes the provenance: the device (the software model, another thread)
        // turns this address back into a pointer to read the bytes.
        Ok((head, Some(DataSeg::new(len, lkey, rest.as_ptr() as u64))))
    }

    #[inline]
    fn plan<'a>(&self, has_raddr: bool, payload: Repr<'a>) -> Result<Plan<'a>, PostError> {
        let (inline, tail_sge, gather): (&[u8], Option<DataSeg>, &[Sge]) = match payload {
            Repr::Inline(bytes) => {
                let (inline, tail) = self.split_contig(bytes, None)?;
                (inline, tail, &[])
            }
            Repr::Registered { bytes, lkey } => {
                let (inline, tail) = self.split_contig(bytes, Some(lkey))?;
                (inline, tail, &[])
            }
            Repr::Gather(sges) => (&[], None, sges),
        };
        let mut n_gather = 0;
        for s in gather {
            if s.len >= 1 << 31 {
                return Err(PostError::SgeTooLong {
                    len: u64::from(s.len),
                });
            }
            n_gather += usize::from(s.len != 0);
        }
        let inline_ds = if inline.is_empty() {
            0
        } else {
            (4 + inline.len()).div_ceil(SEND_WQE_DS)
        };
        let ds =
            1 + usize::from(has_raddr) + inline_ds + usize::from(tail_sge.is_some()) + n_gather;
        if ds * SEND_WQE_DS > MAX_WQE_BYTES || ds.div_ceil(4) > self.wqe_cnt as usize {
            return Err(PostError::WqeTooLarge { ds });
        }
        Ok(Plan {
            inline,
            tail_sge,
            gather,
            ds,
        })
    }

    /// Builds one WQE at `pi` and advances `pi`. Nothing is written on error.
    #[inline(always)]
    fn post(
        &mut self,
        opcode: SendOpcode,
        remote: Option<Remote>,
        payload: Repr<'_>,
        imm: [u8; 4],
        flags: FmCeSe,
    ) -> Result<Posted, PostError> {
        let contig = match payload {
            Repr::Inline(bytes) => Some((bytes, None)),
            Repr::Registered { bytes, lkey } => Some((bytes, Some(lkey))),
            Repr::Gather(_) => None,
        };
        if let (Some(r), Some((bytes, _))) = (remote, contig) {
            if let Some(posted) = self.post_remote_inline(opcode, r, bytes, imm, flags) {
                return Ok(posted);
            }
        }
        if let Some((bytes, lkey)) = contig {
            if let Some(posted) = self.post_contig(opcode, remote, bytes, lkey, imm, flags) {
                return Ok(posted);
            }
        }
        self.post_general(opcode, remote, payload, imm, flags)
    }

    /// The common case of [`post`](Self::post): a WQE of contiguous bytes (all inline,
    /// or an inline head and one data segment) that fits in the free WQEBBs before the
    /// ring end, written straight into the ring. Returns `None`, having written and
    /// changed nothing, for every other case (a gather-free payload that is refused,
    /// needs more room than is free, or runs past the ring end):
    /// [`post_general`](Self::post_general) then builds it or says why not. Both lay the
    /// WQE out alike (the tests compare them byte for byte).
    #[inline(always)]
    fn post_contig(
        &mut self,
        opcode: SendOpcode,
        remote: Option<Remote>,
        bytes: &[u8],
        lkey: Option<u32>,
        imm: [u8; 4],
        flags: FmCeSe,
    ) -> Option<Posted> {
        let (inline, tail) = self.split_contig(bytes, lkey).ok()?;
        let inline_bytes = if inline.is_empty() {
            0
        } else {
            round_up::<SEND_WQE_DS>(4 + inline.len())
        };
        let wqe_bytes = SEND_WQE_DS
            * (1 + usize::from(remote.is_some()) + usize::from(tail.is_some()))
            + inline_bytes;
        // `SqConfig` limits (checked by `new`) keep every such WQE within
        // MAX_WQE_BYTES, so only the queue's room can refuse it.
        debug_assert!(wqe_bytes <= MAX_WQE_BYTES);
        let (ctrl, start, posted) = self.place(opcode, wqe_bytes, imm, flags)?;
        // SAFETY: as in `post_general`: the blocks start at the producer index, past
        // every WQE a doorbell record published, so the device does not read them
        // until this batch's doorbell, after the span is dropped.
        let wqe = unsafe { self.ring.span_mut(start, wqe_bytes) }?;
        // The span is exactly the WQE's bytes, so every split inside succeeds.
        let written = write_contig(wqe, &ctrl, remote, inline, tail);
        debug_assert!(written.is_some());
        self.advance(u32::from(posted.bbs), posted.signaled);
        Some(posted)
    }

    /// For the two paths that write a WQE of `wqe_bytes` in place with fixed-size
    /// stores: its ctrl segment, its ring offset and what the post reports, or `None`
    /// when the free WQEBBs cannot take it. Nothing changes until the caller writes the
    /// WQE and calls `advance`.
    #[inline(always)]
    fn place(
        &self,
        opcode: SendOpcode,
        wqe_bytes: usize,
        imm: [u8; 4],
        flags: FmCeSe,
    ) -> Option<(CtrlSeg, usize, Posted)> {
        let bbs = (round_up::<SEND_WQE_BB>(wqe_bytes) / SEND_WQE_BB) as u32;
        if bbs > self.free_bbs() {
            return None;
        }
        let (signaled, fm_ce_se) = self.signal(flags, bbs);
        let posted = Posted {
            wqe_index: self.pi as u16,
            ds: (wqe_bytes / SEND_WQE_DS) as u8,
            // At most MAX_WQE_BBS (8).
            bbs: bbs as u8,
            signaled,
        };
        let ctrl = CtrlSeg::new(opcode, posted.wqe_index, self.qpn, posted.ds, fm_ce_se, imm);
        Some((ctrl, self.ring_off(self.pi), posted))
    }

    /// The WQE a batch protocol posts all the time: an RDMA operation whose bytes (one
    /// or more) all go inline, in the free WQEBBs before the ring end. ctrl, raddr and
    /// the inline header are one 36-byte block; the data follows, its last 16 bytes
    /// zeroed first so the padding is zero. `None`, having written and changed
    /// nothing, for anything else; [`post_contig`](Self::post_contig) and
    /// [`post_general`](Self::post_general) lay the same WQE out alike (the tests
    /// compare them byte for byte).
    #[inline(always)]
    fn post_remote_inline(
        &mut self,
        opcode: SendOpcode,
        remote: Remote,
        bytes: &[u8],
        imm: [u8; 4],
        flags: FmCeSe,
    ) -> Option<Posted> {
        let len = bytes.len();
        if len == 0 || len > self.cfg.max_inline as usize {
            return None;
        }
        // ctrl, raddr, then the inline header and data padded to a DS.
        let wqe_bytes = 2 * SEND_WQE_DS + round_up::<SEND_WQE_DS>(4 + len);
        let (ctrl, start, posted) = self.place(opcode, wqe_bytes, imm, flags)?;
        // SAFETY: as in `post_general`: the blocks start at the producer index, past
        // every WQE a doorbell record published, so the device does not read them
        // until this batch's doorbell, after the span is dropped. `None` (the WQE would
        // run past the ring end) leaves everything unchanged: nothing above wrote.
        let wqe = unsafe { self.ring.span_mut(start, wqe_bytes) }?;
        // The padding (< 16 bytes) lies in the last 16: zeroed first, then header and
        // data overwrite their part of them.
        *wqe.last_chunk_mut::<SEND_WQE_DS>()? = [0; SEND_WQE_DS];
        let (head, data) = wqe.split_first_chunk_mut::<{ 2 * SEND_WQE_DS + 4 }>()?;
        let raddr = RaddrSeg::new(remote.addr, remote.rkey);
        let hdr = InlineSegHdr::new(len as u32);
        let mut block = [0u8; 2 * SEND_WQE_DS + 4];
        block[..SEND_WQE_DS].copy_from_slice(ctrl.as_bytes());
        block[SEND_WQE_DS..2 * SEND_WQE_DS].copy_from_slice(raddr.as_bytes());
        block[2 * SEND_WQE_DS..].copy_from_slice(hdr.as_bytes());
        *head = block;
        data.get_mut(..len)?.copy_from_slice(bytes);
        self.advance(u32::from(posted.bbs), posted.signaled);
        Some(posted)
    }

    /// [`post`](Self::post) for what [`post_contig`](Self::post_contig) leaves: gather
    /// lists, WQEs that run past the ring end, and every refusal. Out of line: the
    /// common path does not carry its plan and cursor.
    #[inline(never)]
    fn post_general(
        &mut self,
        opcode: SendOpcode,
        remote: Option<Remote>,
        payload: Repr<'_>,
        imm: [u8; 4],
        flags: FmCeSe,
    ) -> Result<Posted, PostError> {
        let plan = self.plan(remote.is_some(), payload)?;
        let bbs = plan.ds.div_ceil(4) as u32;
        let free = self.free_bbs();
        if bbs > free {
            return Err(PostError::SqFull { needed: bbs, free });
        }
        let (signaled, fm_ce_se) = self.signal(flags, bbs);
        let wqe_index = self.pi as u16;
        let ds = plan.ds as u8;

        let ctrl = CtrlSeg::new(opcode, wqe_index, self.qpn, ds, fm_ce_se, imm);
        let start = self.ring_off(self.pi);
        // SAFETY: the WQE's blocks start at the producer index, past every WQE a doorbell
        // record published, so the device does not read them until this batch's
        // doorbell, after the span is dropped.
        match unsafe { self.ring.span_mut(start, plan.ds * SEND_WQE_DS) } {
            Some(span) => write_wqe(&mut WqeCursor::new(Span(span)), &ctrl, remote, &plan),
            None => write_wrapping_wqe(&mut self.ring, start, &ctrl, remote, &plan),
        }
        self.advance(bbs, signaled);
        Ok(Posted {
            wqe_index,
            ds,
            bbs: bbs as u8,
            signaled,
        })
    }

    /// Whether a WQE of `bbs` WQEBBs posted now with `flags` is signaled, and the
    /// `fm_ce_se` it carries. Signal every `signal_interval`-th WQE; also before the
    /// unsignaled WQEBBs reach half the ring, so that when the queue is full a signaled
    /// WQE is outstanding (for wqe_cnt ≥ 16) and polling the CQ always frees space.
    #[inline(always)]
    fn signal(&self, flags: FmCeSe, bbs: u32) -> (bool, FmCeSe) {
        let signaled = flags.is_signaled()
            || self.unsig_wqes + 1 >= self.cfg.signal_interval
            || self.unsig_bbs + bbs >= self.wqe_cnt / 2;
        let fm_ce_se = if signaled {
            flags | FmCeSe::CQ_UPDATE
        } else {
            flags
        };
        (signaled, fm_ce_se)
    }

    /// Moves the producer past a WQE of `bbs` WQEBBs just written, and the signaling
    /// counters with it.
    #[inline(always)]
    fn advance(&mut self, bbs: u32, signaled: bool) {
        self.pi += u64::from(bbs);
        if signaled {
            (self.unsig_wqes, self.unsig_bbs) = (0, 0);
        } else {
            self.unsig_wqes += 1;
            self.unsig_bbs += bbs;
        }
        self.debug_check();
    }

    /// The doorbell, as the checklist of rdma-core `post_send_db` (docs/spec/mlx5.md#doorbell).
    /// `last` is the free-running position and DS of the batch's last WQE; `count` the
    /// number of WQEs in the batch.
    ///
    /// Steps 1–3 inline, the register (steps 4–7) out of line: a queue without a
    /// register (the device watches the record) then pays two stores and a test per
    /// doorbell instead of the frame the BlueFlame copy needs
    /// (docs/PERFORMANCE.md, "Latency path").
    #[inline(always)]
    fn ring_doorbell(&mut self, last: (u64, u8), count: u32) {
        // 1. WQE stores: done (`post`), ctrl segments final.
        // 2. Make them visible to the device before the doorbell record.
        barrier::to_device();
        // 3. Doorbell record. R-SQ-DB (pairs with the device model's Acquire load of
        //    [SND_DBR]): publishes every WQE byte written before it.
        self.dbrec.store_be_release(u32::from(self.pi as u16));
        if self.bf.is_some() {
            self.ring_register(last, count);
        }
        // Else the device watches the record; no register to ring.
    }

    /// Steps 4–7 of [`ring_doorbell`](Self::ring_doorbell), after the doorbell record:
    /// the BlueFlame copy of a lone WQE or the 8-byte doorbell.
    #[inline(never)]
    fn ring_register(&mut self, last: (u64, u8), count: u32) {
        match self.bf_lock {
            None => {
                self.write_register(self.bf_offset as usize, last, count);
                // 7. Alternate BlueFlame buffers (a no-op when bf_size is 0).
                self.bf_offset ^= self.bf_size;
            }
            Some(shared) => {
                // SAFETY: `new`'s contract: the `SharedBf` outlives every QP given it; it
                // is only ever used through `&` (it is `Sync`).
                let shared = unsafe { shared.as_ref() };
                // Steps 4–7 under the register's lock, on the register's half
                // (`SharedBf`).
                shared.with_half(self.bf_size, |half| self.write_register(half, last, count));
            }
        }
    }

    /// Steps 4–6 on the register half at `off`.
    #[inline(always)]
    fn write_register(&mut self, off: usize, last: (u64, u8), count: u32) {
        let Some(bf) = self.bf.as_mut() else {
            return;
        };
        // 4. Record before register.
        barrier::wc_start();
        // 5. BlueFlame for a lone WQE that fits one buffer, else the 8-byte doorbell.
        let (last_pos, last_ds) = last;
        let wqe_bytes = usize::from(last_ds) * SEND_WQE_DS;
        if count == 1 && self.bf_size != 0 && wqe_bytes <= self.bf_size as usize {
            let bbs = wqe_bytes.div_ceil(SEND_WQE_BB);
            for i in 0..bbs {
                // Source wraps at the end of the ring per 64-byte chunk (`mlx5_bf_copy`).
                let src = (last_pos as usize + i) & (self.wqe_cnt as usize - 1);
                let mut block = [0u8; SEND_WQE_BB];
                self.ring.read(src * SEND_WQE_BB, &mut block);
                bf.write_block64(off + i * SEND_WQE_BB, &block);
            }
        } else {
            let first8: [u8; 8] = self
                .ring
                .read_array((last_pos as usize & (self.wqe_cnt as usize - 1)) * SEND_WQE_BB);
            bf.write8(off, first8);
        }
        // 6. Flush the write-combining buffer (before a shared register's unlock).
        barrier::wc_flush();
    }
}
