//! A BlueFlame register shared by several QPs.
//!
//! rdma-core (v44, `mlx5_get_qp_uar`) gives a context's first QPs BlueFlame registers
//! of their own, and later ones (from the 17th with default settings) registers shared
//! between QPs, whose `post_send` then takes a lock (`need_lock`). Two QPs on one
//! register must not copy into it at the same time, or the device reads a WQE spliced
//! from two (its 64-byte chunks from either), and they must alternate its two halves
//! together: the half in use belongs to the register, not to the QP.
//!
//! [`SharedBf`] is both: a spin lock (`spin::Mutex`, no_std, no allocation) around the
//! register's current half. Every [`Sq`](crate::Sq) on the register is given the same
//! `SharedBf` ([`SqDesc::bf_lock`](crate::SqDesc::bf_lock)) and holds it from the
//! write-combining fence before the copy to the flush after it, as rdma-core holds its
//! BlueFlame lock. The doorbell record and the WQEs are each QP's own and stay outside
//! the lock.
//!
//! Ordering: the lock's Acquire on taking pairs with its Release on the previous
//! holder's unlock, so that holder's register writes and its `wc_flush` (which empties
//! the write-combining buffer before the unlock) happen before ours; the half it
//! flipped is the half we read.
//!
//! An uncontended lock costs one compare-and-swap and one release store per doorbell
//! that reaches the register; a QP whose register is its own passes a null `bf_lock`
//! and pays nothing.

use core::fmt;

/// The lock and current half of one BlueFlame register (module docs). Place it where
/// every QP on the register can reach it for as long as any of them posts (the host
/// keeps one per register address of a device).
pub struct SharedBf {
    /// 0 or `bf_size`: the half the next doorbell on this register uses.
    offset: spin::Mutex<u32>,
}

impl SharedBf {
    /// A register whose next doorbell uses the first half.
    pub const fn new() -> Self {
        Self {
            offset: spin::Mutex::new(0),
        }
    }

    /// Runs `f` with the register held, as a doorbell holds it, and gives it the half
    /// the next doorbell will use: for code that reads the register back (a software
    /// device, a test) or writes it outside an [`Sq`](crate::Sq).
    pub fn with_register<R>(&self, f: impl FnOnce(u32) -> R) -> R {
        let half = self.offset.lock();
        f(*half)
    }

    /// Runs `write(half)` with the register held, then moves to the other half
    /// (`half ^ bf_size`).
    #[inline]
    pub(crate) fn with_half(&self, bf_size: u32, write: impl FnOnce(usize)) {
        // Acquire (taking) / Release (dropping the guard): see the module docs.
        let mut half = self.offset.lock();
        write(*half as usize);
        *half ^= bf_size;
    }
}

impl Default for SharedBf {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SharedBf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedBf").finish_non_exhaustive()
    }
}
