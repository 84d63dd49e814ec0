//! Completion ownership for one-sided and immediate-carrying operations
//! (docs/spec/ownership.md), without allocation.
//!
//! The model separates four things that an RDMA endpoint is tempted to keep in one
//! struct; here each is its own type with fixed capacity:
//!
//! | layer | here | owns |
//! |---|---|---|
//! | 1. future | [`OpHandle`] (and [`OpFuture`]) | nothing: an index plus the op's identity, checked on every use |
//! | 2. op state | a cell of [`OpTable`] | identity ([`OpId`], never reused), status, result, immediate, waker |
//! | 3. slot | [`SlotPool`] + [`SlotTable`] | one lease: its tenant op, its generation, the count of its work requests not yet completed |
//! | 4. wire WR | a [`WrId`] | slot index, generation and sub-index packed into the 64-bit wr_id |
//!
//! The invariants, and where each is enforced:
//!
//! - **I1** (identity exclusivity): [`OpTable::start`] gives every op a fresh [`OpId`]
//!   from a 64-bit counter; a cell is reused, its identity never is, and every access
//!   through a handle compares identities, so an old handle reads [`OpError::Gone`] and
//!   never a later op's result.
//! - **I2** (slot reuse): a slot leaves the free list on [`SlotPool::lease`] and comes back
//!   only through [`SlotPool::reclaim`], which refuses while any work request of the
//!   lease is outstanding. No index arithmetic picks a slot.
//! - **I3/I4** (late completions): a [`WrId`] carries its lease's generation; the slot word
//!   accepts a completion only for the generation it is armed with and only while that
//!   lease has work requests outstanding, so a completion of an earlier tenant is counted
//!   as stale and lands nowhere. The slot names its tenant by [`OpHandle`], so even a
//!   completion of the current lease cannot finish an op whose cell was retired and
//!   reused (the identity no longer matches).
//! - **I5** (receive windows): [`RecvWindow`] posts a replacement before a consumed
//!   receive is handed on, so a window that was full stays full while reposts succeed.
//!
//! [`ImmMatch`] is the imm-recv matching path: a WRITE_WITH_IMM that arrives before anyone
//! asked is queued as an event; an ask that comes first waits as a pending op.
//! [`OpTable::cancel_all`] fails every outstanding op exactly once and leaves slots alone:
//! they come back when their work requests complete (or are flushed), as I2 requires.
//!
//! Ownership of the progress loop: everything here is single-threaded (`&mut` or `Cell`)
//! except [`SlotTable`], whose per-slot word may be completed from another thread (a CQ
//! thread) while the owner leases and reclaims; that protocol has a loom model
//! (`tests/loom_ops.rs`).

mod fifo;
mod imm;
mod op;
mod slot;
mod window;

#[cfg(test)]
mod tests;

pub use fifo::Fifo;
pub use imm::{ImmEvent, ImmMatch};
pub use op::{OpError, OpFuture, OpHandle, OpId, OpTable};
pub use slot::{Lease, SlotCompletion, SlotPool, SlotTable, WrId};
pub use window::RecvWindow;
