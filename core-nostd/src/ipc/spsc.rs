//! A bounded single-producer single-consumer ring over caller memory: the building block
//! of [`ipc`](crate::ipc) (across processes) and [`flux`](crate::flux) (across threads).
//!
//! Lamport's ring with free-running `u64` indices and cached opposite indices (rtrb's
//! `cached_head`/`cached_tail`): the producer owns `tail`, the consumer owns `head`; each
//! keeps the last value it saw of the other's index on its own line and reloads it only
//! when that cached value says full / empty. rtrb measured the caching at roughly 2–3x
//! throughput on contended lines (rtrb `lib.rs`, "possibly full, then really full").
//!
//! Synchronisation is by atomics only — no volatile accesses or compiler fences, whose
//! ordering is an x86 accident, not a guarantee of Rust's memory model:
//!
//! - R1 (producer `tail` store, Release) pairs with A1 (consumer `tail` load, Acquire):
//!   the slot write happens before the consumer's read.
//! - R2 (consumer `head` store, Release) pairs with A2 (producer `head` load, Acquire):
//!   the consumer's read of a slot happens before the producer overwrites it.
//!
//! Index domain: `head <= tail <= head + capacity`, free-running, slot `i & (capacity - 1)`.
//! At 10^9 operations per second a `u64` wraps after 584 years.
//!
//! Progress: both sides wait-free (one attempt, `Full` / `None` on failure). A peer that
//! dies leaves the ring as it was: no slot is half-published, because publication is one
//! store of the index after the slot write.
//!
//! Unsafe code (module opt-out): slot cells are written and read through raw pointers
//! under the single-producer / single-consumer contract, which the `unsafe fn`s state
//! and the owning types (`ipc::Client`, `ipc::Server`, `flux::Node`) uphold.
#![allow(unsafe_code)]

use core::mem::MaybeUninit;

use crate::sync::{AtomicU64, Ordering, UnsafeCell};

/// One side's line: its own index and its cached copy of the other side's index.
/// 128-byte aligned against the adjacent-line prefetcher (crossbeam `CachePadded`, L9).
#[repr(C, align(128))]
#[derive(Debug)]
struct Side {
    /// This side's index (published to the other side).
    own: AtomicU64,
    /// The other side's index as last seen; private to this side (Relaxed).
    cached: AtomicU64,
}

/// Control block of one ring: the producer's line then the consumer's line (256 B).
#[repr(C)]
#[derive(Debug)]
pub struct RingCtl {
    prod: Side,
    cons: Side,
}

#[cfg(not(loom))]
const _: () = assert!(core::mem::size_of::<RingCtl>() == 256);

/// One slot of a ring.
#[repr(transparent)]
#[derive(Debug)]
pub struct Slot<T>(UnsafeCell<MaybeUninit<T>>);

// SAFETY: a slot's cell is accessed by the producer before R1 and by the consumer after
// A1 and before R2 (see the module docs), never concurrently; `T: Send` may move across.
unsafe impl<T: Send> Sync for Slot<T> {}

impl<T> Slot<T> {
    /// An empty slot.
    pub fn new() -> Self {
        Self(UnsafeCell::new(MaybeUninit::uninit()))
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl Default for RingCtl {
    fn default() -> Self {
        Self::new()
    }
}

impl RingCtl {
    /// An empty ring at index 0.
    pub fn new() -> Self {
        let side = || Side {
            own: AtomicU64::new(0),
            cached: AtomicU64::new(0),
        };
        Self {
            prod: side(),
            cons: side(),
        }
    }

    /// Producer: appends `v` if there is room.
    ///
    /// # Safety
    ///
    /// The caller is this ring's only producer for as long as it pushes (no other thread
    /// or process pushes concurrently), `slots.len()` is a power of two and the same for
    /// every call on this ring, and for `T` that is not valid for any bytes, the slots
    /// were written only by this ring's producer.
    pub unsafe fn push<T: Copy>(&self, slots: &[Slot<T>], v: T) -> Result<(), T> {
        let cap = slots.len() as u64;
        debug_assert!(cap.is_power_of_two());
        // Relaxed: only this producer writes tail.
        let tail = self.prod.own.load(Ordering::Relaxed);
        // Relaxed: producer-private cache.
        let mut head = self.prod.cached.load(Ordering::Relaxed);
        if tail.wrapping_sub(head) >= cap {
            // A2 (pairs with R2 in pop): the consumer finished reading the slot we reuse.
            head = self.cons.own.load(Ordering::Acquire);
            // Relaxed: producer-private cache.
            self.prod.cached.store(head, Ordering::Relaxed);
            if tail.wrapping_sub(head) >= cap {
                return Err(v);
            }
        }
        debug_assert!(
            tail.wrapping_sub(head) < cap,
            "index domain: head <= tail < head + cap"
        );
        let slot = &slots[(tail & (cap - 1)) as usize];
        // SAFETY: slot `tail` is outside `head..tail`, so the consumer does not read it
        // (A2 ordered its last read before this), and we are the only producer.
        slot.0.with_mut(|p| unsafe { p.write(MaybeUninit::new(v)) });
        // R1 (pairs with A1 in pop): publishes the slot write.
        self.prod.own.store(tail.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// Consumer: takes the oldest element, if any.
    ///
    /// # Safety
    ///
    /// The caller is this ring's only consumer, `slots` is the same slice the producer
    /// uses, and either `T` is valid for any bytes or only this ring's producer wrote the
    /// slots.
    pub unsafe fn pop<T: Copy>(&self, slots: &[Slot<T>]) -> Option<T> {
        let cap = slots.len() as u64;
        // Relaxed: only this consumer writes head.
        let head = self.cons.own.load(Ordering::Relaxed);
        // Relaxed: consumer-private cache.
        let mut tail = self.cons.cached.load(Ordering::Relaxed);
        if head == tail {
            // A1 (pairs with R1 in push): the slot writes below tail are visible.
            tail = self.prod.own.load(Ordering::Acquire);
            // Relaxed: consumer-private cache.
            self.cons.cached.store(tail, Ordering::Relaxed);
            if head == tail {
                return None;
            }
        }
        // A hostile peer may publish a tail past head + cap; clamp the damage to a wrong
        // value (any bytes are valid for the shm payloads), never an out-of-bounds access.
        let slot = &slots[(head & (cap - 1)) as usize];
        // SAFETY: `head < tail`: the producer wrote this slot before R1 (seen through A1)
        // and will not write it again before R2 below; the caller guarantees the value is
        // initialised (producer-written or valid for any bytes).
        let v = slot.0.with(|p| unsafe { (*p).assume_init() });
        // R2 (pairs with A2 in push): our read happens before the slot is rewritten.
        self.cons.own.store(head.wrapping_add(1), Ordering::Release);
        Some(v)
    }

    /// Consumer: refreshes the cached tail and returns how many elements are ready.
    pub fn refresh_available(&self) -> u64 {
        // A1 (pairs with R1 in push).
        let tail = self.prod.own.load(Ordering::Acquire);
        // Relaxed: consumer-private cache; only the consumer calls this.
        self.cons.cached.store(tail, Ordering::Relaxed);
        // Relaxed: our own index.
        tail.wrapping_sub(self.cons.own.load(Ordering::Relaxed))
    }

    /// Consumer: elements ready according to the cached tail (no shared-line access).
    pub fn cached_available(&self) -> u64 {
        // Relaxed: both are the consumer's own words.
        self.cons
            .cached
            .load(Ordering::Relaxed)
            .wrapping_sub(self.cons.own.load(Ordering::Relaxed))
    }

    /// The producer's index (pushes so far), read by the producer itself.
    pub fn producer_index(&self) -> u64 {
        // Relaxed: read by the side that writes it, or as a snapshot.
        self.prod.own.load(Ordering::Relaxed)
    }

    /// The consumer's index (pops so far), read by the consumer itself.
    pub fn consumer_index(&self) -> u64 {
        // Relaxed: read by the side that writes it, or as a snapshot.
        self.cons.own.load(Ordering::Relaxed)
    }

    /// Consumer: drops everything published so far (a retired client's requests).
    pub fn discard_all(&self) {
        // A1 (pairs with R1 in push): nothing further will be read from these slots.
        let tail = self.prod.own.load(Ordering::Acquire);
        // Relaxed: consumer-private cache.
        self.cons.cached.store(tail, Ordering::Relaxed);
        // R2 (pairs with A2 in push): frees the slots.
        self.cons.own.store(tail, Ordering::Release);
    }

    /// Consumer: skips to the producer's index; the new consumer of a reused ring
    /// ignores what was published for its predecessor.
    pub fn skip_to_producer(&self) {
        self.discard_all();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::vec::Vec;

    #[test]
    fn fifo_full_empty_and_wrap() {
        let ctl = RingCtl::new();
        let slots: Vec<Slot<u32>> = (0..4).map(|_| Slot::new()).collect();
        // SAFETY: one thread is both the only producer and the only consumer.
        unsafe {
            assert_eq!(ctl.pop(&slots), None);
            for round in 0..5u32 {
                for i in 0..4 {
                    ctl.push(&slots, round * 10 + i).unwrap();
                }
                assert_eq!(ctl.push(&slots, 99), Err(99));
                assert_eq!(ctl.refresh_available(), 4);
                for i in 0..4 {
                    assert_eq!(ctl.pop(&slots), Some(round * 10 + i));
                }
                assert_eq!(ctl.pop(&slots), None);
            }
        }
        assert_eq!(ctl.producer_index(), 20);
    }

    #[test]
    fn two_threads_transfer_in_order() {
        let n: u64 = if cfg!(miri) { 200 } else { 200_000 };
        let ctl = RingCtl::new();
        let slots: Vec<Slot<u64>> = (0..8).map(|_| Slot::new()).collect();
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut i = 0;
                while i < n {
                    // SAFETY: this thread is the only producer.
                    if unsafe { ctl.push(&slots, i) }.is_ok() {
                        i += 1;
                    } else {
                        std::thread::yield_now();
                    }
                }
            });
            let mut want = 0;
            while want < n {
                // SAFETY: this thread is the only consumer; the producer wrote every slot.
                match unsafe { ctl.pop(&slots) } {
                    Some(v) => {
                        assert_eq!(v, want);
                        want += 1;
                    }
                    None => std::thread::yield_now(),
                }
            }
        });
    }
}
