//! Completion queue poller: owner-bit protocol, consumer-index doorbell.
//!
//! ```text
//!   ci (u32, free-running, wraps mod 2^32): next slot to look at = ci & (cqe_cnt - 1)
//!   expected owner = (ci & cqe_cnt) != 0      (cqe_cnt ≤ 2^24 divides 2^32, so the
//!                                               parity survives the u32 wrap)
//!   [SET_CI] = be32(ci & 0xffffff)            written by `update_ci`, after a batch
//! ```
//!
//! Polling follows rdma-core `get_sw_cqe` / `mlx5_get_next_cqe` (docs/spec/mlx5.md#owner-bit):
//! Acquire-load `op_own`; the slot is the software's if the opcode is not INVALID and the
//! owner bit equals the lap parity; then [`barrier::from_device`]; then read the body.
//! rdma-core's reason for the barrier's place: the body may only be read after the owner
//! check has observed the device's write, because the device writes the CQE as one PCIe
//! write whose parts the CPU may otherwise observe out of order.
//!
//! Unlike rdma-core (and like DPDK's mlx5 PMD), `poll` stamps each CQE it takes back to
//! `op_own = MLX5_CQE_INVALID << 4`, the value a fresh CQ's slots hold, so on every lap
//! a slot not yet rewritten fails the opcode test alone; `update_ci` puts a to-device
//! barrier before the index that hands the stamped slots back.
//!
//! A polled CQE is lent as a [`CqeRef`] borrowing the poller, so it cannot outlive the
//! next poll, and the consumer-index doorbell (which hands the slot back to the device)
//! cannot be written while it is alive:
//!
//! ```
//! fn drain(cq: &mut mlx5_raw::Cq) {
//!     while let Some(cqe) = cq.poll() {
//!         let _ = cqe.decode();
//!     }
//!     cq.update_ci();
//! }
//! ```
//!
//! ```compile_fail,E0499
//! fn keep(cq: &mut mlx5_raw::Cq) {
//!     let first = cq.poll();
//!     let second = cq.poll(); // `first` still borrows the CQ
//!     drop((first, second));
//! }
//! ```
//!
//! ```compile_fail,E0499
//! fn early_ci(cq: &mut mlx5_raw::Cq) {
//!     if let Some(cqe) = cq.poll() {
//!         cq.update_ci(); // would hand the slot back while `cqe` still reads it
//!         let _ = cqe.decode();
//!     }
//! }
//! ```

use core::ptr::NonNull;

use crate::barrier;
use crate::desc::CqDesc;
use crate::layout::cqe::{brief_with_op_own, decode_with_op_own};
use crate::layout::{
    Completion, Cqe64, CqeBrief, CqeDecodeError, CqeOpcode, CQE_INVALID, CQE_INVALID_OP_OWN,
    CQE_OWNER_MASK, CQ_CI_MASK, CQ_SET_CI,
};
use crate::mem::{DbRec, RingByte, RingMem};

/// Why [`Cq::new`] rejected a description.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqInitError {
    /// `buf` or `dbrec` is null.
    NullPointer,
    /// `dbrec` is not 4-byte aligned.
    Misaligned,
    /// `cqe_cnt` is not a power of two in `1 ..= 2^24`.
    CqeCnt(u32),
    /// `cqe_size` is not 64 or 128.
    CqeSize(u32),
}

/// A completion queue poller over raw CQ memory. See the module docs.
///
/// `repr(C)` with what an empty poll reads first: `own` and `sw_owner` lie in the
/// struct's first 16 bytes, so an owner that places the `Cq` behind its own hot words
/// knows which cache line a poll that finds nothing touches (copyrpc's `Context` puts
/// the recv CQ's in the line of its poll count, the send CQ's in the next with its dirty
/// set; docs/PERFORMANCE.md, "Latency path").
#[derive(Debug)]
#[repr(C)]
pub struct Cq {
    /// The `op_own` byte of slot `ci` (ring offset `cqe64_off(ci) + 63`), kept with `ci`
    /// so an empty poll loads it without recomputing or masking its offset.
    own: RingByte,
    /// Consumer index, free-running mod 2^32.
    ci: u32,
    /// The owner bit that makes slot `ci` the software's on this lap: `(ci & cqe_cnt)
    /// != 0`, as `CQE_OWNER_MASK` or 0.
    sw_owner: u8,
    /// Entries, a power of two ≤ 2^24.
    cqe_cnt: u32,
    /// 64 or 128.
    cqe_size: u32,
    cqn: u32,
    /// Value of `ci` last written to `[SET_CI]`.
    db_ci: u32,
    /// `[CQ_SET_CI]` of the CQ doorbell record.
    dbrec: DbRec,
    /// The CQE ring, `cqe_cnt * cqe_size` bytes (`ring()`): the base alone, not a
    /// `RingMem`, whose length and SRQ mask would take the struct past 48 bytes.
    base: NonNull<u8>,
}

/// The bytes an empty poll reads (`own`, `sw_owner`) end within the first 16.
pub const CQ_HOT_BYTES: usize = 16;
const _: () = assert!(core::mem::offset_of!(Cq, own) + 8 <= CQ_HOT_BYTES);
const _: () = assert!(core::mem::offset_of!(Cq, sw_owner) < CQ_HOT_BYTES);
// At most 48 bytes (48 on 64-bit targets): two `Cq`s and 16 bytes of their owner's words
// fit two cache lines, each `Cq`'s first 16 in a different one (copyrpc's `Context`).
const _: () = assert!(core::mem::size_of::<Cq>() <= 48);

// SAFETY: `Cq` exclusively owns its CQ memory and consumer-index word (constructor
// contract), which are not tied to a thread. Not `Sync`: polling needs `&mut self`.
unsafe impl Send for Cq {}

impl Cq {
    /// Takes over a completion queue, and stamps every slot's `op_own` with
    /// `MLX5_CQE_INVALID << 4` (0xF0) as rdma-core's `mlx5_alloc_cq_buf` does, so that a
    /// zero-filled buffer (a DevX umem, or the software device's memory) reads as empty
    /// too: an all-zero `op_own` would otherwise look like a lap-0 REQ CQE.
    ///
    /// # Safety
    ///
    /// For as long as the returned `Cq` lives (and until the device has stopped writing
    /// the CQ):
    /// * `desc.buf` is valid for reads and writes of `cqe_cnt * cqe_size` bytes, and for
    ///   atomic byte accesses; only this `Cq` and the device access it (no Rust
    ///   references to it exist); the device writes each CQE's `op_own` byte last, and
    ///   (if it is the software model) atomically with Release ordering;
    /// * `desc.dbrec` points at the CQ's doorbell record, valid for atomic accesses; only
    ///   this `Cq` writes `[CQ_SET_CI]`;
    /// * no CQE has been written to the CQ yet (no QP using it has posted or received
    ///   anything), and its `[CQ_SET_CI]` word is 0;
    /// * CQE compression is not enabled on the CQ.
    pub unsafe fn new(desc: &CqDesc) -> Result<Self, CqInitError> {
        if desc.dbrec.is_null() {
            return Err(CqInitError::NullPointer);
        }
        let Some(buf) = NonNull::new(desc.buf) else {
            return Err(CqInitError::NullPointer);
        };
        if !desc.cqe_cnt.is_power_of_two() || desc.cqe_cnt > 1 << 24 {
            return Err(CqInitError::CqeCnt(desc.cqe_cnt));
        }
        if desc.cqe_size != 64 && desc.cqe_size != 128 {
            return Err(CqInitError::CqeSize(desc.cqe_size));
        }
        if !desc.dbrec.addr().is_multiple_of(4) {
            return Err(CqInitError::Misaligned);
        }
        // `wrapping_add` keeps this safe; validity is the caller's contract.
        let Some(set_ci) = NonNull::new(desc.dbrec.wrapping_add(CQ_SET_CI)) else {
            return Err(CqInitError::NullPointer);
        };
        // SAFETY: the caller guarantees exclusive access to `buf` (`cqe_cnt * cqe_size`
        // bytes, a power of two) and to the aligned `[CQ_SET_CI]` word; see `# Safety`.
        let (ring, dbrec) = unsafe {
            (
                RingMem::new(buf, desc.cqe_cnt as usize * desc.cqe_size as usize),
                DbRec::new(set_ci),
            )
        };
        let ring_byte0 = ring.byte(0);
        let mut cq = Self {
            base: buf,
            dbrec,
            cqe_cnt: desc.cqe_cnt,
            cqe_size: desc.cqe_size,
            cqn: desc.cqn,
            ci: 0,
            own: ring_byte0,
            sw_owner: 0,
            db_ci: 0,
        };
        cq.seek(0);
        for slot in 0..cq.cqe_cnt {
            let off = cq.cqe64_off(slot) + 63;
            // Relaxed: no CQE exists yet (constructor contract); the first consumer-index
            // doorbell or the handing over of the `Cq` orders these stores for the device.
            ring.byte(off).store_relaxed(CQE_INVALID_OP_OWN);
        }
        Ok(cq)
    }

    /// The CQE ring.
    #[inline(always)]
    fn ring(&self) -> RingMem {
        // SAFETY: `base` and `cqe_cnt * cqe_size` (a power of two, at least 64) are the
        // ring `new` checked and took over under its contract, which holds while `self`
        // lives; every caller uses the handle within one method of `self`, and it adds no
        // access that `Cq`'s own handles (`own`) do not make.
        unsafe { RingMem::new(self.base, self.cqe_cnt as usize * self.cqe_size as usize) }
    }

    /// Byte offset of the `mlx5_cqe64` of `slot` (the second half of a 128-byte CQE).
    fn cqe64_off(&self, slot: u32) -> usize {
        let slot = (slot & (self.cqe_cnt - 1)) as usize;
        slot * self.cqe_size as usize + (self.cqe_size as usize - 64)
    }

    /// Points the poller at slot `ci`.
    #[inline]
    fn seek(&mut self, ci: u32) {
        self.ci = ci;
        self.own = self.ring().byte(self.cqe64_off(ci) + 63);
        self.sw_owner = if ci & self.cqe_cnt != 0 {
            CQE_OWNER_MASK
        } else {
            0
        };
    }

    /// Points the poller at slot `ci + 1`: within a lap the next slot's `op_own` is one
    /// CQE further and the owner parity stays, so only the lap end recomputes them
    /// (`seek`'s mask, multiply and parity, and reducing the offset into the ring
    /// again, cost every CQE; docs/PERFORMANCE.md, "Latency path").
    #[inline(always)]
    fn seek_next(&mut self) {
        let ci = self.ci.wrapping_add(1);
        if ci & (self.cqe_cnt - 1) == 0 {
            self.seek(ci);
        } else {
            self.ci = ci;
            // SAFETY: slot `ci` is not the first of a lap, so it follows slot `ci - 1`
            // in the ring: its `op_own` lies one CQE after the current one, at
            // `(ci mod cqe_cnt) * cqe_size + cqe_size - 1 < cqe_cnt * cqe_size`, inside
            // the ring.
            self.own = unsafe { self.own.forward(self.cqe_size as usize) };
        }
        self.debug_check();
    }

    /// `own` is slot `ci`'s `op_own` (what `seek` would compute).
    #[inline(always)]
    fn debug_check(&self) {
        debug_assert!(self.own == self.ring().byte(self.cqe64_off(self.ci) + 63));
    }

    /// Takes the next CQE if the device has written it, advancing the consumer index
    /// (the doorbell record is written later, by [`update_ci`](Self::update_ci)).
    #[inline]
    pub fn poll(&mut self) -> Option<CqeRef<'_>> {
        let ci = self.ci;
        self.debug_check();
        let own = self.own;
        // A-CQE (pairs with the device's `op_own` write; in the software model its
        // Release store after the CQE body): the owner check.
        let op_own = own.load_acquire();
        if !self.is_software_owned(op_own) {
            return None;
        }
        // Body after owner: "read the CQE body only after the owner check" (cq.c).
        barrier::from_device();
        // The consumed slot reads INVALID again until the device rewrites it on its next
        // lap (as a fresh CQ's slots do; DPDK's mlx5 PMD stamps consumed CQEs the same
        // way), so an empty poll there is decided by the opcode compare alone instead of
        // the opcode and the owner parity, on every empty test of a CQ that has gone
        // round (docs/PERFORMANCE.md, "Latency path"). The
        // byte loaded above travels in the `CqeRef`. This store is ordered before the
        // `[SET_CI]` store that hands the slot back by `update_ci`'s `to_device`
        // barrier; the device writes the slot only after reading that index.
        own.store_relaxed(CQE_INVALID_OP_OWN);
        self.seek_next();
        // SAFETY: `own` is the last byte of slot `ci`'s `mlx5_cqe64`, whose 64 bytes lie
        // inside the ring (`cqe64_off` is 64-aligned and at most `len - 64`). The slot is
        // the software's: its owner byte was observed (Acquire) for this lap, and the
        // device does not write it again until `[SET_CI]` passes `ci`, which only
        // `update_ci(&mut self)` writes — impossible while the returned `CqeRef`, whose
        // lifetime is this `&mut self` borrow, lives.
        let bytes = unsafe { own.block64_ending() };
        Some(CqeRef {
            bytes,
            op_own,
            index: ci,
        })
    }

    /// Whether the slot whose `op_own` byte reads `op_own` holds a CQE for this lap.
    #[inline]
    fn is_software_owned(&self, op_own: u8) -> bool {
        op_own >> 4 != CQE_INVALID && op_own & CQE_OWNER_MASK == self.sw_owner
    }

    /// Whether [`poll`](Self::poll) would find nothing now: the owner check alone, for
    /// a poll loop that skips its work while every queue is quiet. The load is Acquire
    /// as in `poll`, though nothing is read on its strength: a CQE it sees is read only
    /// through `poll`, which checks again.
    #[inline]
    pub fn is_empty(&self) -> bool {
        !self.is_software_owned(self.own.load_acquire())
    }

    /// Polls up to `max` CQEs, handing each to `f`, then writes the consumer-index
    /// doorbell once. Returns the number polled.
    pub fn poll_batch(&mut self, max: usize, mut f: impl FnMut(CqeRef<'_>)) -> usize {
        let mut n = 0;
        while n < max {
            let Some(cqe) = self.poll() else { break };
            f(cqe);
            n += 1;
        }
        self.update_ci();
        n
    }

    /// Writes `[CQ_SET_CI] = be32(ci & 0xffffff)` if it changed, handing the slots
    /// polled since the last call back to the device. Call it at least every `cqe_cnt`
    /// polls: the device must never have more than `cqe_cnt` CQEs unconsumed (overrun).
    #[inline]
    pub fn update_ci(&mut self) {
        let ci = self.ci;
        if self.db_ci != ci {
            // Recorded first: after the doorbell store (through a pointer the compiler
            // cannot tell apart from `self`) it would reload `ci` on every call.
            self.db_ci = ci;
            // The INVALID stamps `poll` wrote into the consumed slots reach the device
            // before the index that lets it rewrite them (DPDK: `rte_io_wmb` before its
            // CQ doorbell); on x86-64 this emits nothing.
            barrier::to_device();
            // R-CQ-CI (pairs with the device model's Acquire load of [SET_CI] before it
            // reuses a slot): everything this thread read from the consumed CQEs, and its
            // stamps, happen before the device overwrites them.
            self.dbrec.store_be_release(ci & CQ_CI_MASK);
        }
    }

    /// The consumer index (free-running mod 2^32).
    pub const fn consumer_index(&self) -> u32 {
        self.ci
    }

    /// Number of entries.
    pub const fn cqe_cnt(&self) -> u32 {
        self.cqe_cnt
    }

    /// Entry size, 64 or 128.
    pub const fn cqe_size(&self) -> u32 {
        self.cqe_size
    }

    /// The CQ number.
    pub const fn cqn(&self) -> u32 {
        self.cqn
    }
}

/// A polled CQE, lent until the next poll of its [`Cq`].
///
/// The slot's `op_own` byte in the ring already reads INVALID (`Cq::poll` stamps it);
/// the value the device wrote is kept here, and every accessor uses it.
#[derive(Clone, Copy, Debug)]
pub struct CqeRef<'cq> {
    /// The slot; its byte 63 is the stamp, not the CQE's `op_own`.
    bytes: &'cq [u8; 64],
    /// The `op_own` byte as the device wrote it.
    op_own: u8,
    index: u32,
}

impl<'cq> CqeRef<'cq> {
    /// The 64 bytes of the `mlx5_cqe64` as the device wrote them (a copy: in the ring,
    /// the `op_own` byte already reads INVALID).
    pub fn bytes(&self) -> [u8; 64] {
        let mut b = *self.bytes;
        b[63] = self.op_own;
        b
    }

    /// The typed view (a copy, as [`bytes`](Self::bytes)).
    pub fn cqe64(&self) -> Cqe64 {
        zerocopy::transmute!(self.bytes())
    }

    /// The CQE opcode.
    pub const fn opcode(&self) -> CqeOpcode {
        CqeOpcode::from_u4(self.op_own >> 4)
    }

    /// Decodes it ([`layout::cqe::decode`](crate::layout::cqe::decode)). A
    /// [`CqeDecodeError::Compressed`] means the CQ was created with compression, which
    /// this poller does not expand: the CQ cannot be polled further.
    #[inline]
    pub fn decode(&self) -> Result<Completion, CqeDecodeError> {
        decode_with_op_own(self.bytes, self.op_own)
    }

    /// [`layout::cqe::brief`](crate::layout::cqe::brief): the QPN, `wqe_counter` and
    /// immediate of a successful `want` (REQ or RESP_WR_IMM) completion in the normal
    /// format, without decoding the rest; `None` for anything else.
    #[inline(always)]
    pub fn brief(&self, want: CqeOpcode) -> Option<CqeBrief> {
        brief_with_op_own(self.bytes, self.op_own, want)
    }

    /// The consumer index at which it was found.
    pub const fn index(&self) -> u32 {
        self.index
    }
}
