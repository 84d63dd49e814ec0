//! Loom model of a BlueFlame register shared by two QPs on two threads (mlx5-raw's
//! `SharedBf`, issue 21). Each doorbell copies its WQE into the register's current half
//! chunk by chunk (`write_block64`: a store per chunk), then flips the half. With the
//! register's lock around the copy and the flip (Acquire on taking, pairs with the
//! Release of the previous holder's unlock), every half ends holding the chunks of one
//! WQE; without it, loom finds the interleaving where a half holds chunk 0 of one QP's
//! WQE and chunk 1 of the other's, which the device would read as one WQE.
//!
//! `LOOM_MAX_PREEMPTIONS=2 RUSTFLAGS="--cfg loom" cargo test -p copyrpc-core --release --test loom_bf`
#![cfg(loom)]

mod loom_common;

use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use loom_common::model;

/// Two halves of two chunks each, and the half the next doorbell uses (for the
/// unlocked model, an atomic each QP reads and flips without holding anything).
struct Register {
    chunks: [[AtomicU64; 2]; 2],
    half: AtomicU32,
}

impl Register {
    fn new() -> Self {
        Self {
            chunks: [
                [AtomicU64::new(0), AtomicU64::new(0)],
                [AtomicU64::new(0), AtomicU64::new(0)],
            ],
            half: AtomicU32::new(0),
        }
    }

    /// QP `qp`'s doorbell: copy both chunks of its WQE (chunk `c` holds `qp << 8 | c`)
    /// into the current half, then flip it. Relaxed: a write-combining store orders
    /// nothing; the lock (when held) is what orders.
    fn doorbell(&self, qp: u64) {
        let h = self.half.load(Ordering::Relaxed) as usize;
        for c in 0..2 {
            self.chunks[h][c].store(qp << 8 | c as u64, Ordering::Relaxed);
        }
        self.half.store(h as u32 ^ 1, Ordering::Relaxed);
    }

    /// Each half holds nothing or both chunks of one WQE.
    fn check(&self) {
        for (h, half) in self.chunks.iter().enumerate() {
            let (a, b) = (
                half[0].load(Ordering::Relaxed),
                half[1].load(Ordering::Relaxed),
            );
            if a == 0 && b == 0 {
                continue;
            }
            assert_eq!(
                (a >> 8, a & 0xff, b & 0xff),
                (b >> 8, 0, 1),
                "half {h} holds chunks of two WQEs: {a:#x} {b:#x}"
            );
        }
    }
}

fn run(locked: bool) {
    model(move || {
        let reg = Arc::new(Register::new());
        let lock = Arc::new(Mutex::new(()));
        let qps: Vec<_> = [1u64, 2]
            .into_iter()
            .map(|qp| {
                let (reg, lock) = (Arc::clone(&reg), Arc::clone(&lock));
                thread::spawn(move || {
                    if locked {
                        // A-BF / R-BF: the lock's acquire and release.
                        let _g = lock.lock().unwrap();
                        reg.doorbell(qp);
                    } else {
                        reg.doorbell(qp);
                    }
                })
            })
            .collect();
        for q in qps {
            q.join().unwrap();
        }
        // Joined: every store happens-before these loads.
        reg.check();
    });
}

#[test]
fn with_the_register_lock_no_half_is_spliced() {
    run(true);
}

#[test]
fn without_it_loom_finds_a_spliced_half() {
    let r = std::panic::catch_unwind(|| run(false));
    assert!(
        r.is_err(),
        "no interleaving spliced a half without the lock"
    );
}
