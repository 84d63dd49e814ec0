//! Loom model of a slot's lease and reclaim (owner thread) against completions of its
//! work requests (a CQ thread), `ops::slot`'s protocol:
//!
//! - R1/A1: what the owner wrote before arming a lease is seen by a completer whose
//!   completion was counted (the arm is a Release store, the count-down an AcqRel CAS);
//! - R2/A2: what the completer wrote before the lease's last completion is seen by the
//!   owner once it reclaims the slot (Acquire load);
//! - a late duplicate completion of the first lease, racing with the slot's second lease,
//!   is always stale: it never counts down the second lease.
//!
//! `LOOM_MAX_PREEMPTIONS=2 RUSTFLAGS="--cfg loom" cargo test -p copyrpc-core --release --test loom_ops`
#![cfg(loom)]

mod loom_common;

use copyrpc_core::ops::{Lease, OpTable, SlotCompletion, SlotPool, SlotTable};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;
use loom_common::model;

struct Shared {
    words: SlotTable<1>,
    /// Written by the owner before it arms the lease.
    setup: UnsafeCell<u32>,
    /// Written by the completer before the lease's last completion.
    status: UnsafeCell<u32>,
}

// SAFETY: `setup` is written only before the arm that publishes it and read only after
// a counted completion; `status` is written only before the last completion and read
// only after the reclaim that observes it. Loom checks exactly these claims.
unsafe impl Sync for Shared {}

#[test]
fn lease_and_reclaim_against_a_concurrent_completion() {
    model(|| {
        let s = Arc::new(Shared {
            words: SlotTable::new(),
            setup: UnsafeCell::new(0),
            status: UnsafeCell::new(0),
        });
        // The first lease of slot 0 has generation 1: the completer can name its work
        // requests without being told, so nothing but the slot word orders the threads.
        let first = Lease {
            slot: 0,
            generation: 1,
        };
        let cq = {
            let s = s.clone();
            thread::spawn(move || {
                while s.words.complete(first.wr_id(0), true) == SlotCompletion::Stale {
                    thread::yield_now();
                }
                // SAFETY: the counted completion acquired the owner's arm (A1), which
                // follows its write of `setup`; the owner writes it no more.
                let setup = s.setup.with(|p| unsafe { *p });
                assert_eq!(setup, 7, "a completer ran before the lease it completes");
                // SAFETY: the owner reads `status` only after the last completion.
                s.status.with_mut(|p| unsafe { *p = 9 });
                let last = s.words.complete(first.wr_id(1), false);
                assert_eq!(
                    last,
                    SlotCompletion::Last {
                        slot: 0,
                        failed: true
                    }
                );
                // A late duplicate of the first lease's first request.
                s.words.complete(first.wr_id(0), true)
            })
        };
        let ops = OpTable::<2>::new();
        let mut pool = SlotPool::<1>::new();
        let tenant = ops.start().unwrap();
        // SAFETY: no completer reads `setup` before the arm below publishes it.
        s.setup.with_mut(|p| unsafe { *p = 7 });
        let lease = pool.lease(&s.words, tenant, 2).unwrap();
        assert_eq!(lease, first);
        let reclaimed = loop {
            if let Some(r) = pool.reclaim(&s.words, 0) {
                break r;
            }
            thread::yield_now();
        };
        assert_eq!(reclaimed, (tenant, true));
        // SAFETY: reclaim observed the last completion with Acquire (A2).
        assert_eq!(s.status.with(|p| unsafe { *p }), 9);
        // The slot is leased again while the duplicate may still be in flight.
        let next = ops.start().unwrap();
        let second = pool.lease(&s.words, next, 1).unwrap();
        assert_ne!(second.generation, first.generation);
        let dup = cq.join().unwrap();
        assert_eq!(dup, SlotCompletion::Stale, "a late completion counted");
        assert_eq!(
            s.words.complete(second.wr_id(0), true),
            SlotCompletion::Last {
                slot: 0,
                failed: false
            },
            "the second lease was counted down (or marked) by the first's duplicate"
        );
        assert_eq!(pool.reclaim(&s.words, 0), Some((next, false)));
    });
}
