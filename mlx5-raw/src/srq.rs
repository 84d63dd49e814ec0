//! Shared receive queue posting with rdma-core v44 free-list semantics
//! (docs/spec/mlx5.md#srq).
//!
//! ```text
//!   WQE i = buf + i * stride: [ next seg (16 B): next_wqe_index BE16 at +2 ][ data segs ]
//!   free list: head → … → tail; head == tail means full (tail is the spare sentinel)
//!   post:   idx = head; head = next[idx]                                (counter += 1)
//!   free:   next[tail] = idx; tail = idx          (completion order, `mlx5_free_srq_wqe`)
//!   doorbell (after a batch): [dbrec] = be32(counter), counter = WQEs ever posted mod 2^16
//! ```
//!
//! The device follows `next_wqe_index` when it consumes a WQE and reports the consumed
//! WQE's index as the CQE's `wqe_counter`. The sentinel makes reading the link at consume
//! time safe: the last posted WQE always links to a slot the software still owns.
//!
//! **In order.** `new` links the ring `i → i + 1 mod wqe_cnt`. While every completion
//! frees the WQE after the tail (the device consumes in list order, and a WRITE with
//! immediate, all copyrpc receives, takes its WQE with its last packet, as it
//! completes), `free`'s link write would store the value the link already
//! holds, so it is skipped; and the list stays `head, head + 1, …, tail`, so a post moves
//! the head by arithmetic instead of reading one link per WQE. The SRQ memory is then the
//! same, byte for byte, as rdma-core's after the same calls, but a steady-state
//! completion and repost touch none of it. The first completion out of that order is
//! linked as above and ends the mode for good (a list relinked out of order has no cheap
//! way back); from then on every post reads the links and reports a corrupt one.
//!
//! copyrpc receives only RDMA WRITE with immediate, which scatters nothing, so every
//! WQE is a receive with an empty scatter list: its first data segment is the
//! `MLX5_INVALID_LKEY` terminator `{0, 0x100, 0}`, which is what rdma-core's
//! `mlx5_post_srq_recv` writes for a work request of no SGEs (the terminator goes in
//! the first unused entry when there is one, and with no SGEs that is entry 0). That
//! segment is the same for every post, so it is written once, when the queue is taken over, and a post only moves the free
//! list. That relies on the device never writing a receive WQE: the HCA reads WQEs and
//! reports completions in CQEs only (rdma-core's SRQ code likewise never reads back a
//! posted WQE's scatter list, and `mlx5_free_srq_wqe` rewrites only the link).

use core::ptr::NonNull;

use zerocopy::IntoBytes;

use crate::barrier;
use crate::desc::SrqDesc;
use crate::layout::DataSeg;
use crate::mem::{DbRec, RingMem};

/// Offset of `next_wqe_index` in an SRQ WQE (`struct mlx5_wqe_srq_next_seg`).
const NEXT_OFF: usize = 2;
/// Offset of the first data segment.
const DATA_OFF: usize = 16;

/// Why [`Srq::new`] rejected a description.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SrqInitError {
    /// `buf` or `dbrec` is null.
    NullPointer,
    /// `dbrec` is not 4-byte aligned.
    Misaligned,
    /// `stride` is not a power of two ≥ 32.
    Stride(u32),
    /// `wqe_cnt` is not a power of two in `2 ..= 65 536`.
    WqeCnt(u32),
    /// `head`/`tail` are not those of a fresh SRQ (`0`, `wqe_cnt - 1`).
    NotFresh {
        /// `desc.head`.
        head: u32,
        /// `desc.tail`.
        tail: u32,
    },
}

/// Why a receive WQE was not posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SrqPostError {
    /// `head == tail`: every WQE but the sentinel is posted. Free completed ones first.
    Full,
    /// The free list links out of range (`next` of WQE `index`): the SRQ memory was
    /// corrupted. Links are read only once the list is out of order (module docs).
    CorruptLink {
        /// The WQE whose link is bad.
        index: u16,
        /// Its `next_wqe_index`.
        next: u16,
    },
}

/// Why [`Srq::free`] rejected an index. Nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SrqFreeError {
    /// The index is not below `wqe_cnt`.
    OutOfRange(u16),
    /// No WQE is posted, or the index is the sentinel: it cannot be a completed WQE
    /// (a duplicate or foreign completion).
    NotPosted(u16),
}

/// A shared receive queue over raw SRQ memory. See the module docs.
#[derive(Debug)]
pub struct Srq {
    ring: RingMem,
    dbrec: DbRec,
    /// Bytes per WQE, a power of two ≥ 32.
    stride: u32,
    /// WQEs in the list, a power of two in 2 ..= 65 536.
    wqe_cnt: u32,
    /// Data segments per WQE: `(stride - 16) / 16`.
    max_gs: u32,
    srqn: u32,
    /// Next WQE to post; range `0 .. wqe_cnt`.
    head: u16,
    /// The sentinel (last WQE of the free list); range `0 .. wqe_cnt`.
    tail: u16,
    /// WQEs ever posted, mod 2^16 (rdma-core's `uint16_t counter`).
    counter: u16,
    /// `counter` at the last doorbell.
    db_counter: u16,
    /// Posted and not yet freed; range `0 ..= wqe_cnt - 1`.
    outstanding: u32,
    /// Every link still holds what `new` wrote, `next[i] = i + 1 mod wqe_cnt`, so the
    /// free list is `head, head + 1, …, tail` (module docs, "In order").
    in_order: bool,
}

// SAFETY: `Srq` exclusively owns its SRQ memory and doorbell word (constructor
// contract), which are not tied to a thread. Not `Sync`: mutation needs `&mut self`.
unsafe impl Send for Srq {}

impl Srq {
    /// Takes over a fresh SRQ and links its free list as rdma-core's
    /// `mlx5_alloc_srq_buf` does (`next[i] = i + 1`, `next[tail] = 0`), which leaves a
    /// verbs-created SRQ unchanged and initialises a zeroed one. Receive WQEs get the
    /// empty scatter list (the terminator alone; module docs).
    ///
    /// `_lkey` is not written (no zero-length segment in this key leads the WQE, as
    /// rdma-core never writes one); it stays in the signature so the callers and the C
    /// ABI's `srq_lkey` are unchanged until the next ABI break.
    ///
    /// # Safety
    ///
    /// For as long as the returned `Srq` lives (and until the device has stopped using
    /// the SRQ):
    /// * `desc.buf` is valid for reads and writes of `wqe_cnt * stride` bytes; only this
    ///   `Srq` and the device access it (no Rust references to it exist);
    /// * `desc.dbrec` is the SRQ doorbell record, valid for atomic accesses; only this
    ///   `Srq` writes it;
    /// * nothing has been posted to the SRQ yet (its doorbell record is 0), and nothing
    ///   else posts to it (`ibv_post_srq_recv` would desynchronise the free list).
    pub unsafe fn new(desc: &SrqDesc, _lkey: u32) -> Result<Self, SrqInitError> {
        let (Some(buf), Some(dbrec)) = (NonNull::new(desc.buf), NonNull::new(desc.dbrec)) else {
            return Err(SrqInitError::NullPointer);
        };
        if !desc.stride.is_power_of_two() || desc.stride < 32 {
            return Err(SrqInitError::Stride(desc.stride));
        }
        if !desc.wqe_cnt.is_power_of_two() || !(2..=1 << 16).contains(&desc.wqe_cnt) {
            return Err(SrqInitError::WqeCnt(desc.wqe_cnt));
        }
        if desc.head != 0 || desc.tail != desc.wqe_cnt - 1 {
            return Err(SrqInitError::NotFresh {
                head: desc.head,
                tail: desc.tail,
            });
        }
        if !desc.dbrec.addr().is_multiple_of(4) {
            return Err(SrqInitError::Misaligned);
        }
        // SAFETY: the caller guarantees exclusive access to `buf` (`wqe_cnt * stride`
        // bytes, a power of two) and to the aligned doorbell word; see `# Safety`.
        let (ring, dbrec) = unsafe {
            (
                RingMem::new(buf, desc.wqe_cnt as usize * desc.stride as usize),
                DbRec::new(dbrec),
            )
        };
        let mut srq = Self {
            ring,
            dbrec,
            stride: desc.stride,
            wqe_cnt: desc.wqe_cnt,
            max_gs: (desc.stride - 16) / 16,
            srqn: desc.srqn,
            head: 0,
            tail: (desc.wqe_cnt - 1) as u16,
            counter: 0,
            db_counter: 0,
            outstanding: 0,
            in_order: true,
        };
        for i in 0..desc.wqe_cnt {
            // next[i] = i + 1 for i < tail; next[tail] = 0 (rdma-core leaves the zero of
            // its freshly allocated buffer there), closing the ring 0 → … → tail → 0.
            let next = if i + 1 == desc.wqe_cnt {
                0
            } else {
                (i + 1) as u16
            };
            srq.set_next(i as u16, next);
            let off = srq.wqe_off(i as u16) + DATA_OFF;
            srq.ring.write(off, DataSeg::TERMINATOR.as_bytes());
        }
        Ok(srq)
    }

    fn wqe_off(&self, idx: u16) -> usize {
        usize::from(idx) * self.stride as usize
    }

    /// The WQE after `idx` in ring order, the one its link names while `in_order`.
    #[inline(always)]
    fn after(&self, idx: u16) -> u16 {
        (u32::from(idx).wrapping_add(1) & (self.wqe_cnt - 1)) as u16
    }

    // The link is 2-aligned (`NEXT_OFF` is even, the stride a power of two ≥ 32), so
    // the ring's plain u16 accesses apply: no wrap test per link, which `read_array` /
    // `write` paid once per completion and once per WQE reposted (docs/PERFORMANCE.md,
    // "Latency path").
    #[inline]
    fn next_of(&self, idx: u16) -> u16 {
        self.ring.load_u16_be(self.wqe_off(idx) + NEXT_OFF)
    }

    #[inline]
    fn set_next(&mut self, idx: u16, next: u16) {
        let off = self.wqe_off(idx) + NEXT_OFF;
        self.ring.store_u16_be(off, next);
    }

    /// Posts one receive WQE (no doorbell; see [`ring_doorbell`](Self::ring_doorbell)).
    /// Returns its index, which the responder CQE that consumes it reports as
    /// `wqe_counter`.
    pub fn post(&mut self) -> Result<u16, SrqPostError> {
        if self.head == self.tail {
            return Err(SrqPostError::Full);
        }
        let idx = self.head;
        let next = if self.in_order {
            self.after(idx)
        } else {
            self.next_of(idx)
        };
        if u32::from(next) >= self.wqe_cnt {
            return Err(SrqPostError::CorruptLink { index: idx, next });
        }
        // The data segments were written by `new` and never change (module docs).
        self.head = next;
        self.counter = self.counter.wrapping_add(1);
        self.outstanding += 1;
        Ok(idx)
    }

    /// Writes the doorbell record for every WQE posted since the last doorbell.
    pub fn ring_doorbell(&mut self) {
        if self.db_counter == self.counter {
            return;
        }
        // WQE stores (data segments, and links written by `free`) before the record.
        barrier::to_device();
        // R-SRQ-DB (pairs with the device model's Acquire load of the SRQ record):
        // publishes the data segments and links of every WQE posted so far.
        self.dbrec.store_be_release(u32::from(self.counter));
        self.db_counter = self.counter;
    }

    /// Posts up to `n` receive WQEs (fewer if the SRQ fills) and rings one doorbell.
    /// Returns how many were posted.
    ///
    /// The same walk as `n` calls of [`post`](Self::post), with the head, counter and
    /// count kept in registers until the end (a repost is tens of WQEs per poll); in
    /// order (module docs) no walk: the head moves by the count.
    pub fn post_batch(&mut self, n: u32) -> Result<u32, SrqPostError> {
        if self.in_order {
            // The free list is head, head + 1, …, tail: all but the sentinel can go.
            let free = u32::from(self.tail).wrapping_sub(u32::from(self.head)) & (self.wqe_cnt - 1);
            let posted = n.min(free);
            self.head = (u32::from(self.head).wrapping_add(posted) & (self.wqe_cnt - 1)) as u16;
            self.counter = self.counter.wrapping_add(posted as u16);
            self.outstanding += posted;
            self.ring_doorbell();
            return Ok(posted);
        }
        let mut head = self.head;
        let mut posted: u32 = 0;
        let mut result = Ok(());
        while posted < n && head != self.tail {
            let next = self.next_of(head);
            if u32::from(next) >= self.wqe_cnt {
                result = Err(SrqPostError::CorruptLink { index: head, next });
                break;
            }
            head = next;
            posted += 1;
        }
        // What was posted before a corrupt link stays posted, as with `post`.
        self.head = head;
        self.counter = self.counter.wrapping_add(posted as u16);
        self.outstanding += posted;
        self.ring_doorbell();
        result.map(|()| posted)
    }

    /// Returns the WQE a responder CQE consumed (its `wqe_counter`) to the free list,
    /// appending it at the tail (completion order; rdma-core v44 `mlx5_free_srq_wqe`).
    /// In order (module docs) the tail's link already names it and is not rewritten.
    pub fn free(&mut self, idx: u16) -> Result<(), SrqFreeError> {
        // In order: the oldest posted WQE, which the tail's link already names.
        if self.in_order && idx == self.after(self.tail) && self.outstanding != 0 {
            self.tail = idx;
            self.outstanding -= 1;
            return Ok(());
        }
        self.free_linked(idx)
    }

    /// [`free`](Self::free) out of order (or with an index it rejects): the link write.
    #[inline(never)]
    fn free_linked(&mut self, idx: u16) -> Result<(), SrqFreeError> {
        if u32::from(idx) >= self.wqe_cnt {
            return Err(SrqFreeError::OutOfRange(idx));
        }
        if self.outstanding == 0 || idx == self.tail {
            return Err(SrqFreeError::NotPosted(idx));
        }
        self.set_next(self.tail, idx);
        // Only reached with `idx` not after the tail (or out of order already).
        self.in_order = false;
        self.tail = idx;
        self.outstanding -= 1;
        Ok(())
    }

    /// WQEs posted (rung or not) and not yet freed.
    pub const fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// Most WQEs that can be posted at once: `wqe_cnt - 1` (one sentinel).
    pub const fn capacity(&self) -> u32 {
        self.wqe_cnt - 1
    }

    /// WQEs ever posted, mod 2^16 (the doorbell value once rung).
    pub const fn counter(&self) -> u16 {
        self.counter
    }

    /// The SRQ number.
    pub const fn srqn(&self) -> u32 {
        self.srqn
    }

    /// Data segments per WQE (`(stride - 16) / 16`).
    pub const fn max_gs(&self) -> u32 {
        self.max_gs
    }
}
