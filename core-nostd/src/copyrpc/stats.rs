//! Counters a context keeps, for tests and for telling which path ran.

/// Monotone event counters of one [`Context`](super::Context).
///
/// `repr(C)`, the four counters a batch moves first: they share a line of the context
/// with its receive queue's ends (docs/PERFORMANCE.md, "A cold round's cache lines").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Stats {
    /// Batches posted as WRITE_IMM (wrap markers and credit-only batches included).
    pub batches_posted: u64,
    /// Batches received (WRITE_IMM completions).
    pub batches_received: u64,
    /// SRQ WQEs returned to the free list by a receive completion's `wqe_counter`.
    pub srq_freed: u64,
    /// Requests answered by a [`poll_serve`](super::Context::poll_serve) handler as
    /// they were parsed (never queued for `recv`).
    pub served_in_poll: u64,
    /// Wrap markers posted.
    pub wraps: u64,
    /// Metadata-only batches posted to return ring credit or grant credit.
    pub credit_batches: u64,
    /// Flushes that found the send queue full and left the batch for the next poll.
    pub flushes_deferred: u64,
    /// RDMA READs of a peer's consumer position posted (fallback and liveness probes).
    pub reads_posted: u64,
    /// Of those, completed successfully and applied.
    pub reads_completed: u64,
    /// Of `reads_posted`, the liveness probes.
    pub probes_posted: u64,
    /// SRQ WQEs posted after the initial fill.
    pub srq_reposted: u64,
    /// Responses matching no pending call (dropped).
    pub stray_responses: u64,
    /// Completions naming no endpoint of this context.
    pub stray_completions: u64,
    /// Endpoints that failed.
    pub endpoints_failed: u64,
}

// The four counters a batch moves come first (the struct's comment, and
// `Context`'s layout).
const _: () = {
    use core::mem::offset_of;
    assert!(offset_of!(Stats, batches_posted) == 0);
    assert!(offset_of!(Stats, batches_received) == 8);
    assert!(offset_of!(Stats, srq_freed) == 16);
    assert!(offset_of!(Stats, served_in_poll) == 24);
};
