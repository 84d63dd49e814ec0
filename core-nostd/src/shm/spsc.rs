//! A bounded single-producer single-consumer ring over caller memory: the building block
//! of [`ipc`](crate::ipc) (across processes) and [`flux`](crate::flux) (across threads).
//!
//! Each slot carries its own state word next to the payload (FastForward's idea, with
//! the per-slot stamp of crossbeam's `ArrayQueue`), so a hand-off moves one cache line
//! per direction: the consumer polls the slot itself, not a shared `tail`, and the
//! producer checks the slot it is about to write, not a shared `head`. The Lamport form
//! (shared head/tail indices, rtrb's cached copies) costs a second serial line transfer
//! per hand-off — index, then slot; on this machine it measured ~2x the one-line
//! ping-pong round trip against ~1.1–1.3x for this form (docs/PERFORMANCE.md).
//!
//! Slot state: `2 * lap` = empty for lap `lap`, `2 * lap + 1` = full for lap `lap`, where
//! position `pos` uses slot `pos & (capacity - 1)` in lap `pos / capacity`. Zeroed memory
//! is "every slot empty for lap 0", so a fresh shm region needs no initialisation.
//!
//! Synchronisation is by atomics only — no volatile accesses or compiler fences, whose
//! ordering is an x86 accident, not a guarantee of Rust's memory model:
//!
//! - R1 (producer's `full(lap)` store, Release) pairs with A1 (consumer's state load,
//!   Acquire): the payload write happens before the consumer's read.
//! - R2 (consumer's `empty(lap + 1)` store, Release) pairs with A2 (producer's state
//!   load, Acquire): the consumer's read happens before the slot is rewritten.
//! - Known-free mode (what ipc and Flux use): a caller whose in-flight bound already
//!   orders the consumer's read before the producer's rewrite (through the replies in the
//!   other direction: see `push_known_free`) skips both A2 and R2 —
//!   [`push_known_free`](RingCtl::push_known_free) with
//!   [`pop_no_handback`](RingCtl::pop_no_handback). Then each slot is written by the
//!   producer only, and a hand-off costs the reader one line transfer and nothing else.
//!
//! Each side's position (`pos`, free-running `u64`) lives on its own 128-byte line in
//! [`RingCtl`], written only by that side and read by the other only for recovery
//! (`discard_all`, `adopt_*`) and diagnostics.
//!
//! Progress: both sides wait-free (one attempt, `Full` / `None` on failure). A peer that
//! dies leaves every slot either published or not (publication is one store), so the
//! survivor never reads half a message.
//!
//! Unsafe code (module opt-out): slot cells are written and read through raw pointers
//! under the single-producer / single-consumer contract, which the `unsafe fn`s state
//! and the owning types (`ipc::Client`, `ipc::Server`, `flux::Node`) uphold.
#![allow(unsafe_code)]

use core::mem::MaybeUninit;

use crate::sync::{AtomicU64, Ordering, UnsafeCell};

/// One side's line: its position and, on the consumer side, a readiness hint.
#[repr(C, align(128))]
#[derive(Debug)]
struct Side {
    /// This side's position; written only by this side (Relaxed: program order on one
    /// thread, or the recovery handshakes of ipc).
    pos: AtomicU64,
    /// Consumer only: 1 if the last `refresh_ready` saw a message waiting.
    hint: AtomicU64,
}

/// Positions of one ring: the producer's line then the consumer's line (256 B).
#[repr(C)]
#[derive(Debug)]
pub struct RingCtl {
    prod: Side,
    cons: Side,
}

#[cfg(not(loom))]
const _: () = assert!(core::mem::size_of::<RingCtl>() == 256);

/// One slot: the state word and the payload, adjacent (one line for payloads up to 56 B).
#[repr(C)]
#[derive(Debug)]
pub struct Slot<T> {
    state: AtomicU64,
    val: UnsafeCell<MaybeUninit<T>>,
}

// SAFETY: a slot's cell is written by the producer before R1 and read by the consumer
// after A1 and before R2 (or, in known-free mode, before the caller's causal chain lets
// the producer rewrite it; module docs), never concurrently; `T: Send` may move across.
unsafe impl<T: Send> Sync for Slot<T> {}

impl<T> Slot<T> {
    /// An empty slot (lap 0).
    pub fn new() -> Self {
        Self {
            state: AtomicU64::new(0),
            val: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Where a ring's slots live: a plain slice, or one side of a slice of paired cells (ipc
/// keeps request slot `i` and response slot `i` of a client in one cache line).
pub trait Slots<T> {
    /// Number of slots (a power of two, the same on every call on one ring).
    fn count(&self) -> usize;
    /// Slot `i`, for `i < count()`.
    fn at(&self, i: usize) -> &Slot<T>;
}

impl<T> Slots<T> for [Slot<T>] {
    #[inline]
    fn count(&self) -> usize {
        self.len()
    }
    #[inline]
    fn at(&self, i: usize) -> &Slot<T> {
        &self[i]
    }
}

impl Default for RingCtl {
    fn default() -> Self {
        Self::new()
    }
}

#[inline]
fn empty(pos: u64, lg: u32) -> u64 {
    (pos >> lg) << 1
}

#[inline]
fn full(pos: u64, lg: u32) -> u64 {
    empty(pos, lg) | 1
}

#[inline]
fn geometry<T, S: Slots<T> + ?Sized>(slots: &S) -> (u64, u32) {
    let cap = slots.count() as u64;
    debug_assert!(cap.is_power_of_two());
    (cap - 1, cap.trailing_zeros())
}

impl RingCtl {
    /// An empty ring at position 0.
    pub fn new() -> Self {
        let side = || Side {
            pos: AtomicU64::new(0),
            hint: AtomicU64::new(0),
        };
        Self {
            prod: side(),
            cons: side(),
        }
    }

    /// Producer: appends `v` if the slot at the producer's position is free.
    ///
    /// # Safety
    ///
    /// The caller is this ring's only producer while it pushes (no other thread or
    /// process pushes concurrently), and `slots` is the same power-of-two slice on every
    /// call on this ring, by both sides.
    pub unsafe fn push<T: Copy, S: Slots<T> + ?Sized>(&self, slots: &S, v: T) -> Result<(), T> {
        let (mask, lg) = geometry(slots);
        // Relaxed: only the producer writes it.
        let p = self.prod.pos.load(Ordering::Relaxed);
        let slot = slots.at((p & mask) as usize);
        // A2 (pairs with R2 in pop): the consumer finished reading the previous lap.
        if slot.state.load(Ordering::Acquire) != empty(p, lg) {
            return Err(v);
        }
        // SAFETY: the slot is empty for our lap: the consumer does not read it until R1,
        // and we are the only producer.
        slot.val
            .with_mut(|q| unsafe { q.write(MaybeUninit::new(v)) });
        // R1 (pairs with A1 in pop): publishes the payload.
        slot.state.store(full(p, lg), Ordering::Release);
        // Relaxed: producer-private position.
        self.prod.pos.store(p.wrapping_add(1), Ordering::Relaxed);
        Ok(())
    }

    /// Producer: appends `v` without reading the slot's state first, for a producer that
    /// knows the slot is free. Saves the read miss of `push`'s check (the consumer wrote
    /// the state last), which on a ping-pong is a whole extra line transfer per hand-off.
    ///
    /// # Safety
    ///
    /// As [`push`](Self::push), and the consumer's read of this slot's previous lap
    /// happens before this call (so neither side needs the R2 hand-back store: see
    /// [`pop_no_handback`](Self::pop_no_handback)). ipc and Flux establish it with the
    /// caller's in-flight bound, in both directions:
    ///
    /// - request ring: with fewer than `capacity` calls unanswered, one of the caller's
    ///   last `capacity` requests was answered; the callee pops in order, so it read
    ///   this slot before that answer, which the caller acquired;
    /// - response ring: when the caller sent the request being answered it had fewer than
    ///   `capacity` calls unanswered, so of the calls answered by the last `capacity`
    ///   responses before this one, at least one had been consumed — and the caller
    ///   consumes in order, so the response this slot last held was consumed before that
    ///   request was sent, which the callee acquired.
    pub unsafe fn push_known_free<T: Copy, S: Slots<T> + ?Sized>(&self, slots: &S, v: T) {
        let (mask, lg) = geometry(slots);
        // Relaxed: only the producer writes it.
        let p = self.prod.pos.load(Ordering::Relaxed);
        let slot = slots.at((p & mask) as usize);
        // SAFETY: free for our lap per the caller contract; we are the only producer.
        slot.val
            .with_mut(|q| unsafe { q.write(MaybeUninit::new(v)) });
        // R1 (pairs with A1 in pop): publishes the payload.
        slot.state.store(full(p, lg), Ordering::Release);
        // Relaxed: producer-private position.
        self.prod.pos.store(p.wrapping_add(1), Ordering::Relaxed);
    }

    /// Consumer: takes the message at the consumer's position, if published.
    ///
    /// # Safety
    ///
    /// The caller is this ring's only consumer, `slots` is the producer's slice, and
    /// either `T` is valid for any bytes or only this ring's producer wrote the slots.
    pub unsafe fn pop<T: Copy, S: Slots<T> + ?Sized>(&self, slots: &S) -> Option<T> {
        // SAFETY: forwarded from this function's contract.
        let (v, c, lg, slot) = unsafe { self.take(slots) }?;
        // R2 (pairs with A2 in push): our read happens before the slot is rewritten.
        slot.state
            .store(empty(c.wrapping_add(1 << lg), lg), Ordering::Release);
        Some(v)
    }

    /// Consumer: as [`pop`](Self::pop), but without the hand-back store (R2): the slot's
    /// state stays `full(lap)`, which the consumer's next lap (expecting `full(lap + 1)`)
    /// never mistakes for a message. Nothing is written, so the line the producer wrote
    /// stays shared instead of being pulled over and written back: on a ping-pong this is
    /// the difference between one line bouncing per hand-off and two writes to it.
    ///
    /// # Safety
    ///
    /// As [`pop`](Self::pop), and this ring's producer only ever uses
    /// [`push_known_free`](Self::push_known_free), whose contract (the consumer's read of
    /// the previous lap happens before the slot is rewritten) is what makes the skipped
    /// hand-back unnecessary; a checking [`push`](Self::push) would wait for it forever.
    pub unsafe fn pop_no_handback<T: Copy, S: Slots<T> + ?Sized>(&self, slots: &S) -> Option<T> {
        // SAFETY: forwarded from this function's contract; by the `push_known_free`
        // contract the producer rewrites the slot only after our read (the caller's
        // in-flight bound, acquired through the other direction's ring), so no hand-back.
        unsafe { self.take(slots) }.map(|(v, ..)| v)
    }

    /// The consumer half both pops share: reads the message at the consumer's position
    /// if it is published for this lap and advances the position; returns the value, the
    /// position it was read at, log2 of the slot count, and the slot (for a hand-back).
    ///
    /// # Safety
    ///
    /// As [`pop`](Self::pop) or [`pop_no_handback`](Self::pop_no_handback): one of the
    /// two decides how the slot is handed back.
    #[inline]
    unsafe fn take<'s, T: Copy, S: Slots<T> + ?Sized>(
        &self,
        slots: &'s S,
    ) -> Option<(T, u64, u32, &'s Slot<T>)> {
        let (mask, lg) = geometry(slots);
        // Relaxed: only the consumer writes it.
        let c = self.cons.pos.load(Ordering::Relaxed);
        let slot = slots.at((c & mask) as usize);
        // A1 (pairs with R1 in push and push_known_free): the payload is written.
        if slot.state.load(Ordering::Acquire) != full(c, lg) {
            // Relaxed: consumer-private hint.
            self.cons.hint.store(0, Ordering::Relaxed);
            return None;
        }
        // SAFETY: full for our lap: the producer wrote the value before R1 (seen by A1)
        // and does not rewrite the slot before the caller's hand-back (pop's R2, or the
        // push_known_free contract); the caller guarantees the value is initialised
        // (producer-written, or valid for any bytes).
        let v = slot.val.with(|q| unsafe { (*q).assume_init() });
        // Relaxed: consumer-private position.
        self.cons.pos.store(c.wrapping_add(1), Ordering::Relaxed);
        Some((v, c, lg, slot))
    }

    /// Consumer: checks whether a message is waiting and records it as the hint.
    ///
    /// Call only from the consumer (it writes the consumer's line).
    pub fn refresh_ready<T, S: Slots<T> + ?Sized>(&self, slots: &S) -> bool {
        let (mask, lg) = geometry(slots);
        // Relaxed: consumer-private position.
        let c = self.cons.pos.load(Ordering::Relaxed);
        // Relaxed: a hint; `pop` re-checks with Acquire before reading.
        let ready = slots.at((c & mask) as usize).state.load(Ordering::Relaxed) == full(c, lg);
        // Relaxed: consumer-private hint.
        self.cons.hint.store(ready as u64, Ordering::Relaxed);
        ready
    }

    /// Consumer: the hint left by the last `refresh_ready` or `pop` (no slot access).
    pub fn hinted_ready(&self) -> bool {
        // Relaxed: consumer-private hint.
        self.cons.hint.load(Ordering::Relaxed) != 0
    }

    /// The producer's position (pushes so far). Exact for the producer itself.
    pub fn producer_index(&self) -> u64 {
        // Relaxed: read by its writer, or as a snapshot.
        self.prod.pos.load(Ordering::Relaxed)
    }

    /// The consumer's position (pops so far). Exact for the consumer itself.
    pub fn consumer_index(&self) -> u64 {
        // Relaxed: read by its writer, or as a snapshot.
        self.cons.pos.load(Ordering::Relaxed)
    }

    /// Consumer: drops every published message (a retired producer's). Returns how many.
    ///
    /// # Safety
    ///
    /// As [`pop`](Self::pop).
    pub unsafe fn discard_all<T: Copy, S: Slots<T> + ?Sized>(&self, slots: &S) -> u64 {
        let mut n = 0;
        // SAFETY: forwarded contract. At most `capacity` messages are published.
        while unsafe { self.pop(slots) }.is_some() {
            n += 1;
        }
        n
    }

    /// A new producer takes over the ring after the consumer drained it
    /// ([`discard_all`](Self::discard_all)): its position becomes the consumer's, so it
    /// does not depend on the last position store of a producer that died.
    ///
    /// # Safety
    ///
    /// No other producer is active, the consumer has drained everything published (and
    /// that drain happens before this call), and no concurrent `pop` can find a message.
    pub unsafe fn adopt_producer(&self) {
        // Relaxed: ordered after the drain by the caller's handshake (ipc: A4/R4).
        let c = self.cons.pos.load(Ordering::Relaxed);
        // Relaxed: producer-private position.
        self.prod.pos.store(c, Ordering::Relaxed);
    }

    /// The producer continues at position `pos`, with no message published between its
    /// old position and `pos`: the ipc server lines a retired client's response count
    /// up with its request count, so the next owner starts with nothing outstanding.
    ///
    /// # Safety
    ///
    /// The caller is the only producer, no consumer pops concurrently, and the next
    /// consumer takes the ring over with [`adopt_consumer`](Self::adopt_consumer) after a
    /// handshake that orders this store before it (ipc: R4/A4).
    pub unsafe fn restart_producer_at(&self, pos: u64) {
        // Relaxed: producer-private position, published by the caller's handshake.
        self.prod.pos.store(pos, Ordering::Relaxed);
    }

    /// A new consumer takes over the ring: messages published for its predecessor are
    /// dropped and every slot is reset to empty for the lap the producer will use next.
    ///
    /// # Safety
    ///
    /// No other consumer is active, and the producer does not push concurrently (ipc: the
    /// server pushes only to a registered client, which this one is not yet visibly), and
    /// its last push happens before this call.
    pub unsafe fn adopt_consumer<T, S: Slots<T> + ?Sized>(&self, slots: &S) {
        let (mask, lg) = geometry(slots);
        // Relaxed: ordered after the producer's last push by the caller's handshake.
        let p = self.prod.pos.load(Ordering::Relaxed);
        for k in 0..slots.count() as u64 {
            let pos = p.wrapping_add(k);
            // Relaxed: published to the producer by the caller's handshake (registration
            // Release/Acquire) before it pushes again.
            slots
                .at((pos & mask) as usize)
                .state
                .store(empty(pos, lg), Ordering::Relaxed);
        }
        // Relaxed: consumer-private position and hint.
        self.cons.pos.store(p, Ordering::Relaxed);
        self.cons.hint.store(0, Ordering::Relaxed);
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
            assert_eq!(ctl.pop(&slots[..]), None);
            for round in 0..5u32 {
                for i in 0..4 {
                    ctl.push(&slots[..], round * 10 + i).unwrap();
                }
                assert_eq!(ctl.push(&slots[..], 99), Err(99));
                assert!(ctl.refresh_ready(&slots[..]));
                for i in 0..4 {
                    assert_eq!(ctl.pop(&slots[..]), Some(round * 10 + i));
                }
                assert_eq!(ctl.pop(&slots[..]), None);
                assert!(!ctl.hinted_ready());
            }
        }
        assert_eq!(ctl.producer_index(), 20);
        assert_eq!(ctl.consumer_index(), 20);
    }

    #[test]
    fn takeover_after_a_producer_and_a_consumer_die() {
        let ctl = RingCtl::new();
        let slots: Vec<Slot<u32>> = (0..4).map(|_| Slot::new()).collect();
        // SAFETY: single thread plays every role in turn.
        unsafe {
            ctl.push(&slots[..], 1).unwrap();
            ctl.push(&slots[..], 2).unwrap();
            // The producer "died" after publishing but before its position store.
            ctl.prod.pos.store(1, Ordering::Relaxed);
            assert_eq!(ctl.discard_all(&slots[..]), 2);
            ctl.adopt_producer();
            ctl.push(&slots[..], 3).unwrap();
            // The consumer "dies" with one message unread and a stale position.
            ctl.push(&slots[..], 4).unwrap();
            assert_eq!(ctl.pop(&slots[..]), Some(3));
            ctl.cons.pos.store(2, Ordering::Relaxed);
            ctl.adopt_consumer(&slots[..]);
            assert_eq!(
                ctl.pop(&slots[..]),
                None,
                "the predecessor's message is dropped"
            );
            for v in 10..14 {
                ctl.push(&slots[..], v).unwrap();
            }
            for v in 10..14 {
                assert_eq!(ctl.pop(&slots[..]), Some(v));
            }
        }
    }

    #[test]
    fn two_threads_transfer_in_order() {
        let n: u64 = if cfg!(miri) { 200 } else { 200_000 };
        let ctl = RingCtl::new();
        let slots: Vec<Slot<u64>> = (0..8).map(|_| Slot::new()).collect();
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut i = 0;
                let mut stall = crate::shm::Stall::new("the producer's pushes");
                while i < n {
                    // SAFETY: this thread is the only producer.
                    if unsafe { ctl.push(&slots[..], i) }.is_ok() {
                        i += 1;
                    } else {
                        stall.turn(i);
                    }
                }
            });
            let mut want = 0;
            let mut stall = crate::shm::Stall::new("the consumer's pops");
            while want < n {
                // SAFETY: this thread is the only consumer; the producer wrote every slot.
                match unsafe { ctl.pop(&slots[..]) } {
                    Some(v) => {
                        assert_eq!(v, want);
                        want += 1;
                    }
                    None => stall.turn(want),
                }
            }
        });
    }
}
