//! Daemon loop metrics (`--metrics`): what the bistability analysis looks at
//! (docs/spec/poll-budget.md#loop-metrics) — how often the loop turns and finds nothing,
//! how many completions each transport poll returns (the CQE batch), and how many calls are
//! in flight when sampled.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Upper bounds (inclusive) of the CQE-batch buckets: 0, 1, 2–10, 11–100, >100.
pub const CQE_BUCKET_LABELS: [&str; 5] = ["0", "1", "2-10", "11-100", ">100"];

/// One daemon's counters (plain `u64`s so ranks can gather them as bytes).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct DaemonMetrics {
    /// Loop iterations.
    pub loops: u64,
    /// Iterations in which no phase found work.
    pub idle_loops: u64,
    /// Requests served from this daemon's shard.
    pub served: u64,
    /// Requests this daemon forwarded over Flux.
    pub forwarded: u64,
    /// Requests this daemon sent to other ranks.
    pub remote_calls: u64,
    /// Loops by the completions their transport step returned: see [`CQE_BUCKET_LABELS`].
    pub cqe_batches: [u64; 5],
    /// Completions returned by the transport step, over all loops (the CQE-batch mean is
    /// this over the loops that polled a transport).
    pub cqes: u64,
    /// Outstanding-call samples taken.
    pub outstanding_samples: u64,
    /// Sum of the sampled outstanding counts.
    pub outstanding_sum: u64,
    /// Largest sampled outstanding count.
    pub outstanding_max: u64,
    /// Times a Flux call found the peer's queue full and was parked.
    pub flux_full: u64,
    /// Times a transport call or reply was refused for room and parked.
    pub remote_busy: u64,
    /// Of those, calls refused because the peer's ring or credit was short (the ring
    /// is too small for the calls in flight: see `--rpc-ring`).
    pub remote_no_credit: u64,
    /// Answers that could not be delivered (the client left, or the transport failed).
    pub reply_failures: u64,
    /// Requests still held (parked or awaiting an answer) when the daemon stopped.
    pub pending_at_stop: u64,
    /// The poll budget in force at the end.
    pub budget_u: u64,
    /// `--poll-budget adaptive`: the controller's bound on it.
    pub budget_u_max: u64,
    /// The controller's rho (loop time / RTT) × 2^16.
    pub budget_rho_q16: u64,
    /// The controller's CQE-batch EWMA × 2^16.
    pub budget_batch_q16: u64,
    /// The controller's empty-loop EWMA × 2^16.
    pub budget_empty_q16: u64,
    /// The controller's moves up, down, and collapse recoveries.
    pub budget_ups: u64,
    /// See `budget_ups`.
    pub budget_downs: u64,
    /// See `budget_ups`.
    pub budget_recoveries: u64,
}

impl DaemonMetrics {
    /// Records one loop whose transport step returned `n` completions.
    pub fn cqe_batch(&mut self, n: usize) {
        self.cqes += n as u64;
        let i = match n {
            0 => 0,
            1 => 1,
            2..=10 => 2,
            11..=100 => 3,
            _ => 4,
        };
        self.cqe_batches[i] += 1;
    }

    /// Records a sample of `n` calls in flight.
    pub fn sample_outstanding(&mut self, n: u64) {
        self.outstanding_samples += 1;
        self.outstanding_sum += n;
        self.outstanding_max = self.outstanding_max.max(n);
    }

    /// Mean completions per loop that polled a transport (the spec's "CQE batch avg").
    pub fn cqe_batch_mean(&self) -> f64 {
        let loops: u64 = self.cqe_batches.iter().sum();
        if loops == 0 {
            0.0
        } else {
            self.cqes as f64 / loops as f64
        }
    }

    /// Mean of the outstanding samples.
    pub fn outstanding_mean(&self) -> f64 {
        if self.outstanding_samples == 0 {
            0.0
        } else {
            self.outstanding_sum as f64 / self.outstanding_samples as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cqe_buckets_split_at_the_documented_bounds() {
        let mut m = DaemonMetrics::default();
        for n in [0, 1, 2, 10, 11, 100, 101, 5000] {
            m.cqe_batch(n);
        }
        assert_eq!(m.cqe_batches, [1, 1, 2, 2, 2]);
    }

    #[test]
    fn outstanding_samples_keep_mean_and_max() {
        let mut m = DaemonMetrics::default();
        m.sample_outstanding(4);
        m.sample_outstanding(10);
        assert_eq!(m.outstanding_max, 10);
        assert_eq!(m.outstanding_mean(), 7.0);
        assert_eq!(DaemonMetrics::default().outstanding_mean(), 0.0);
    }
}
