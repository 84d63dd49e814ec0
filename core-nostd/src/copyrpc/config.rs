//! Settings of a context and of its endpoints.

use crate::credit;
use mlx5_raw::SqConfig;

/// Per-endpoint settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointConfig {
    /// Cap on the response reservation `R` (default: ring size / 4, docs/spec/credit.md#grant).
    pub max_resp_reservation: u64,
    /// Response allowance of [`Context::call`](super::Context::call), in payload bytes.
    pub default_response_allowance: u32,
    /// Batches of at most this many bytes go fully inline in the WQE (≤ 220: one
    /// BlueFlame buffer).
    pub max_inline: u32,
    /// Larger batches send this many leading bytes inline and the rest by one SGE.
    pub inline_head: u32,
    /// Every this many WQEs asks for a completion (default 64, docs/spec/copyrpc.md#wqes).
    pub signal_interval: u32,
    /// While calls are pending on the endpoint and nothing arrives or is sent, an RDMA
    /// READ of the peer's consumer position is posted every this many polls (up to a
    /// quarter interval later: the context checks every quarter of the smallest
    /// interval among its endpoints): a dead peer or link then surfaces as an error
    /// completion instead of silence. 0 disables it.
    pub probe_interval: u32,
}

impl EndpointConfig {
    /// The defaults (docs/spec/copyrpc.md#defaults) for a ring of `ring_size` bytes (both
    /// sides' rings that size). The default response allowance is 256 bytes, or less on a
    /// ring whose credit cannot pay for 256 (1 KiB and below): a default no call can pay
    /// for would refuse every `call` with `AllowanceTooLarge`.
    pub const fn for_ring(ring_size: u64) -> Self {
        let cap = ring_size / 4;
        let payable = match credit::max_response_allowance(credit::max_peer_credit(cap, ring_size))
        {
            Some(a) => a,
            None => 0,
        };
        Self {
            max_resp_reservation: cap,
            default_response_allowance: if payable < 256 { payable } else { 256 },
            max_inline: SqConfig::COPYRPC.max_inline,
            inline_head: SqConfig::COPYRPC.inline_head,
            signal_interval: SqConfig::COPYRPC.signal_interval,
            probe_interval: 4096,
        }
    }

    /// The fewest 64-byte blocks an endpoint's send queue may have: 16 (below that the
    /// driver cannot keep a signaled WQE outstanding in a full queue) and four of the
    /// largest batch WQEs. With no signaled WQE outstanding, the unsignaled blocks stay
    /// below half the queue (mlx5-raw's progress rule) and no completion will free any,
    /// so a flush must find room for what it wants to post in the other half: a batch,
    /// or a credit-only batch behind a wrap marker (two WQEs). A smaller queue could
    /// hold a wanted credit-only batch back for good.
    pub const fn min_sq_bbs(&self) -> u32 {
        let four = 4 * super::endpoint::batch_wqe_bbs(self.max_inline, self.inline_head);
        if four > 16 {
            four
        } else {
            16
        }
    }

    pub(crate) const fn sq_config(&self) -> SqConfig {
        SqConfig {
            max_inline: self.max_inline,
            inline_head: self.inline_head,
            signal_interval: self.signal_interval,
        }
    }
}

/// Entries the send CQ shared by `endpoints` QPs, each with a send queue of `sq_wqebbs`
/// 64-byte blocks, needs so that all of them failing at once cannot overrun it: a QP
/// moving to error completes every outstanding WQE with a flush CQE, signaled or not
/// (mlx5; the device model's `FlushMode::EveryWqe`), and a WQE takes at least one
/// block. Normal running needs far less (one signaled WQE in `signal_interval`), so this
/// bound is the whole requirement. A power of two (what a CQ takes), at least 64;
/// saturates at 2^31.
pub const fn send_cq_entries(endpoints: u32, sq_wqebbs: u32) -> u32 {
    let need = (endpoints as u64) * (sq_wqebbs as u64);
    let need = if need < 64 { 64 } else { need };
    if need >= 1 << 31 {
        1 << 31
    } else {
        (need as u32).next_power_of_two()
    }
}

#[cfg(test)]
mod tests {
    use super::{send_cq_entries, EndpointConfig};

    #[test]
    fn the_smallest_send_queue_holds_four_batch_wqes_and_sixteen_blocks() {
        let mut cfg = EndpointConfig::for_ring(4096);
        // Default settings: a 256-byte batch WQE (4 blocks).
        assert_eq!(cfg.min_sq_bbs(), 16);
        cfg.max_inline = 236;
        assert_eq!(cfg.min_sq_bbs(), 20);
        (cfg.max_inline, cfg.inline_head) = (0, 0);
        assert_eq!(cfg.min_sq_bbs(), 16);
    }

    /// The default allowance is one a call can pay for on every ring size:
    /// 256 from 2 KiB up, the most the credit allows below (192 at 1 KiB, 64 at 512),
    /// 0 where not even an empty response can be paid for.
    #[test]
    fn the_default_response_allowance_can_be_paid_for_on_every_ring() {
        use crate::credit::{max_peer_credit, max_response_allowance};
        for shift in 6..=22 {
            let ring = 1u64 << shift;
            let cfg = EndpointConfig::for_ring(ring);
            let max = max_response_allowance(max_peer_credit(ring / 4, ring));
            assert!(
                max.is_some_and(|m| cfg.default_response_allowance <= m)
                    || (max.is_none() && cfg.default_response_allowance == 0),
                "ring {ring}: default {} over {max:?}",
                cfg.default_response_allowance
            );
        }
        assert_eq!(
            EndpointConfig::for_ring(1024).default_response_allowance,
            192
        );
        assert_eq!(EndpointConfig::for_ring(512).default_response_allowance, 64);
        assert_eq!(
            EndpointConfig::for_ring(2048).default_response_allowance,
            256
        );
        assert_eq!(
            EndpointConfig::for_ring(16 << 10).default_response_allowance,
            256
        );
    }

    #[test]
    fn send_cq_holds_every_block_of_every_sq() {
        assert_eq!(send_cq_entries(64, 2048), 131_072);
        assert_eq!(send_cq_entries(3, 100), 512);
        assert_eq!(send_cq_entries(1, 1), 64);
        assert_eq!(send_cq_entries(0, 0), 64);
        assert_eq!(send_cq_entries(u32::MAX, u32::MAX), 1 << 31);
    }
}
