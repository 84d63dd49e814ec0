//! Dispatch slots (layer 3 of docs/spec/ownership.md#layers): leased from a free list,
//! returned only after every work request of the lease completed, and named on the wire by
//! a generation-tagged wr_id (layer 4).
//!
//! Each slot has one atomic word, `generation << 32 | FAILED | outstanding`. The owner
//! thread arms it when it leases the slot and reads it when it reclaims the slot; a
//! completion (on the owner's thread or a CQ thread) counts it down with a CAS that also
//! checks the generation. Orderings:
//!
//! - (R1) [`SlotPool::lease`] stores the armed word with Release; (A1) the completion's
//!   CAS is AcqRel, so a completer that counts a lease down sees what the owner did
//!   before arming it.
//! - (R2) the completion's CAS releases what the completer did before it (a status it
//!   recorded, memory it saw the device write); (A2) [`SlotPool::reclaim`] loads the word
//!   with Acquire before it puts the slot back, so the next tenant starts after all that.

use super::fifo::Fifo;
use super::op::{OpError, OpHandle};
use crate::sync::{AtomicU64, Ordering};

const FAILED: u64 = 1 << 31;
const COUNT: u64 = 0xffff;

/// A work request's 64-bit id: `generation << 32 | slot << 16 | sub`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WrId(pub u64);

impl WrId {
    /// The slot the work request belongs to.
    pub const fn slot(self) -> u16 {
        (self.0 >> 16) as u16
    }

    /// The generation of the lease that posted it.
    pub const fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// Which of the lease's work requests it is.
    pub const fn sub(self) -> u16 {
        self.0 as u16
    }
}

/// A slot as leased: index and generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// Slot index.
    pub slot: u16,
    /// The lease's generation (never 0).
    pub generation: u32,
}

impl Lease {
    /// The wr_id of the lease's `sub`-th work request.
    pub const fn wr_id(self, sub: u16) -> WrId {
        WrId(((self.generation as u64) << 32) | ((self.slot as u64) << 16) | sub as u64)
    }
}

/// What a completion did to its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotCompletion {
    /// Not for any live lease: an earlier tenant's, a duplicate, or garbage. Ignored.
    Stale,
    /// Counted; the lease has more outstanding.
    More,
    /// The lease's last outstanding work request; `failed` if any of them failed. The
    /// owner may now [`reclaim`](SlotPool::reclaim) the slot.
    Last {
        /// The slot.
        slot: u16,
        /// Whether any work request of the lease completed in error.
        failed: bool,
    },
}

/// The per-slot words: the part a completion touches, shareable across threads.
#[derive(Debug)]
pub struct SlotTable<const S: usize> {
    words: [AtomicU64; S],
}

impl<const S: usize> Default for SlotTable<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const S: usize> SlotTable<S> {
    /// All slots idle.
    pub fn new() -> Self {
        Self {
            words: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Counts one completion of `wr` (`ok` false for an error or flush).
    pub fn complete(&self, wr: WrId, ok: bool) -> SlotCompletion {
        let Some(w) = self.words.get(wr.slot() as usize) else {
            return SlotCompletion::Stale;
        };
        let mut cur = w.load(Ordering::Relaxed);
        loop {
            if (cur >> 32) as u32 != wr.generation() || cur & COUNT == 0 {
                return SlotCompletion::Stale;
            }
            let new = (cur - 1) | if ok { 0 } else { FAILED };
            // R2 / A1: see the module docs.
            match w.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) if new & COUNT == 0 => {
                    return SlotCompletion::Last {
                        slot: wr.slot(),
                        failed: new & FAILED != 0,
                    }
                }
                Ok(_) => return SlotCompletion::More,
                Err(seen) => cur = seen,
            }
        }
    }
}

/// The owner's side of `S` slots: the free list, generations and tenants.
#[derive(Debug)]
pub struct SlotPool<const S: usize> {
    free: Fifo<u16, S>,
    generation: [u32; S],
    tenant: [Option<OpHandle>; S],
}

impl<const S: usize> Default for SlotPool<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const S: usize> SlotPool<S> {
    const FITS: () = assert!(S > 0 && S <= u16::MAX as usize, "1..=65535 slots");

    /// Every slot on the free list (they enter it here, I2).
    pub fn new() -> Self {
        let () = Self::FITS;
        let mut free = Fifo::new();
        for i in 0..S {
            let _ = free.push(i as u16);
        }
        Self {
            free,
            generation: [1; S],
            tenant: [None; S],
        }
    }

    /// Leases a free slot for `tenant`, armed for `wrs` work requests (1..=65535), which
    /// the caller posts with [`Lease::wr_id`] ids. A lease whose requests could not all be
    /// posted is finished by completing the unposted ones here (`table.complete`).
    pub fn lease(
        &mut self,
        table: &SlotTable<S>,
        tenant: OpHandle,
        wrs: u16,
    ) -> Result<Lease, OpError> {
        debug_assert!(wrs > 0, "a lease covers at least one work request");
        let slot = self.free.pop().ok_or(OpError::NoSlot)?;
        let i = slot as usize;
        self.tenant[i] = Some(tenant);
        let generation = self.generation[i];
        // R1: see the module docs.
        table.words[i].store(
            (u64::from(generation) << 32) | u64::from(wrs),
            Ordering::Release,
        );
        Ok(Lease { slot, generation })
    }

    /// Puts `slot` back on the free list if its lease has no work request outstanding;
    /// returns the tenant it had and whether any request failed. `None` (nothing done)
    /// for a slot not leased or still busy.
    pub fn reclaim(&mut self, table: &SlotTable<S>, slot: u16) -> Option<(OpHandle, bool)> {
        let i = slot as usize;
        self.tenant.get(i).copied().flatten()?;
        // A2: see the module docs.
        let w = table.words[i].load(Ordering::Acquire);
        if (w >> 32) as u32 != self.generation[i] || w & COUNT != 0 {
            return None;
        }
        let tenant = self.tenant[i].take()?;
        // The next lease gets a new generation: the word keeps this one (with nothing
        // outstanding) until then, so late ids of this lease stay stale either way.
        self.generation[i] = self.generation[i].wrapping_add(1).max(1);
        let _ = self.free.push(slot);
        Some((tenant, w & FAILED != 0))
    }

    /// The op leasing `slot`, if any.
    pub fn tenant(&self, slot: u16) -> Option<OpHandle> {
        self.tenant.get(slot as usize).copied().flatten()
    }

    /// Slots on the free list.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// Slots leased (off the free list).
    pub fn leased_count(&self) -> usize {
        S - self.free.len()
    }
}
