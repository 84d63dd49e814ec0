//! Ring sizes from the command line (`--rpc-ring auto|BYTES`, benchkv and copyrpc-echo),
//! and the `auto` size: the ring at which a given number of calls in flight to one peer
//! never waits for ring credit.
//!
//! What a call holds of its peer's ring while it is in flight (docs/spec/credit.md,
//! [`copyrpc_core::credit`]): its request's padded bytes (`in_flight`, at most half the
//! ring beside the reservations), and its response allowance plus metadata out of the
//! credit the peer granted, which is at most the peer's reservation cap, a quarter of the
//! ring (`EndpointConfig::for_ring`). So `n` calls fit when both
//! `n × request ≤ ring / 2` and `n × internal_allowance ≤ ring / 4`.

use copyrpc_core::credit::{allowance_blocks, internal_allowance_for_blocks};
use copyrpc_core::wire::padded_message_size;

use super::RpcConfig;

/// Smallest ring the flag takes: room for one 220 B batch and its reply beside the
/// reservations.
pub const RING_MIN: usize = 4 << 10;
/// Largest ring the flag takes (the bistability runs used 4 MiB,
/// docs/spec/poll-budget.md#bistability).
pub const RING_MAX: usize = 4 << 20;
/// Smallest ring `auto` chooses (below it the per-WQE costs dominate anyway).
pub const AUTO_MIN: usize = 16 << 10;

/// The ring (bytes, a power of two in [`AUTO_MIN`]`..=`[`RING_MAX`]) at which `calls`
/// in flight to one peer, each a request of `request` payload bytes asking for a
/// response of `response` bytes, never wait for ring credit; [`RING_MAX`] if even that
/// is short.
pub fn ring_for_calls(calls: u64, request: u32, response: u32) -> usize {
    let by_credit = calls.saturating_mul(4 * call_credit(response));
    let by_requests = calls.saturating_mul(2 * padded_message_size(request));
    let need = by_credit.max(by_requests).max(AUTO_MIN as u64);
    need.checked_next_power_of_two()
        .map_or(RING_MAX, |n| usize::try_from(n).unwrap_or(RING_MAX))
        .min(RING_MAX)
}

/// How many calls of that shape a ring of `ring` bytes holds in flight to one peer
/// without waiting (the inverse of [`ring_for_calls`], for reports and errors).
pub fn calls_for_ring(ring: usize, request: u32, response: u32) -> u64 {
    let ring = ring as u64;
    (ring / 4 / call_credit(response)).min(ring / 2 / padded_message_size(request))
}

/// The credit a call asking for `response` bytes costs: what its header's allowance
/// blocks say, as caller and replier both count it.
fn call_credit(response: u32) -> u64 {
    internal_allowance_for_blocks(allowance_blocks(response))
}

/// The least calls one peer's endpoint is sized for when a rank's calls are spread over
/// many peers ([`calls_per_peer`]): one seed client's queue depth.
pub const PEER_CALLS_FLOOR: u64 = 32;

/// How far above its even share one peer's calls may go before they wait for credit:
/// each peer is sized for twice its share, so a peer that draws more than its share
/// (uniform keys over 63 peers: ~24 calls each from 46 × 32) still does not wait.
pub const PEER_SHARE_HEADROOM: u64 = 2;

/// The calls in flight one peer's endpoint is sized for when the rank has `calls` in
/// flight over `peers` peers: [`PEER_SHARE_HEADROOM`] times the even share, at least
/// [`PEER_CALLS_FLOOR`], at most `calls` (one peer can have no more than all of them).
///
/// With one peer this is `calls`: every call can go to it. With many it is what a peer
/// really has in flight, not every call of the rank: sizing each of 1 023 peers for all
/// 1 472 calls of the bistability runs (46 clients × QD 32) pinned 2.4 GiB a rank. A peer that draws
/// more than this (a hot key on one rank) waits for credit, counted as
/// `remote_no_credit`, and loses nothing.
pub fn calls_per_peer(calls: u64, peers: u64) -> u64 {
    let share = calls
        .div_ceil(peers.max(1))
        .saturating_mul(PEER_SHARE_HEADROOM);
    share.max(PEER_CALLS_FLOOR).min(calls).max(1)
}

/// Send WQEs for an endpoint with `calls` calls in flight: at worst a batch WQE for each
/// call and each reply, so twice that, a power of two in 64..=512 (512, the fabrics' default, is
/// what a peer with every call of a seed-001 rank needs). A queue that fills refuses
/// with `SqFull`, which callers retry after a poll.
pub fn sq_wrs_for_calls(calls: u64) -> u32 {
    let want = u32::try_from(calls.saturating_mul(2).clamp(64, 512)).unwrap_or(512);
    want.next_power_of_two().min(512)
}

/// Bytes of one CQE and one SQ block.
const ENTRY: u64 = 64;
/// Bytes of an SRQ WQE with one scatter entry (next segment and a data segment).
const SRQ_STRIDE: u64 = 32;
/// The page an allocation is registered in whole.
const PAGE: u64 = 4096;

/// Bytes a rank registers with a verbs NIC (what `RLIMIT_MEMLOCK` must cover) for
/// `peers` endpoints of `cfg`, in contexts of at most `per_context` endpoints.
///
/// Per endpoint: its region (both rings and the control line, whole pages) and its send
/// queue ([`RpcConfig::sq_wqebbs`] blocks of 64 B). Per context: the send CQ (a 64 B CQE
/// per SQ block of its endpoints, [`RpcConfig::send_cq_entries`]; exactly that since
/// the CQ is asked for `n - 1`), the recv CQ, the SRQ (rdma-core allocates
/// `2 × srq_wqes + 1` WQEs rounded up to a power of two, the rest for its wait queue:
/// `mlx5_alloc_srq_buf` in providers/mlx5/srq.c) and the SRQ's lkey page. Doorbell
/// records and UAR pages are left out (a page here and there).
pub fn pinned_bytes(cfg: &RpcConfig, peers: u64, per_context: u64) -> u64 {
    let per_context = per_context.max(1);
    let region = (2 * cfg.ring_bytes as u64 + super::CONTROL_BYTES as u64).next_multiple_of(PAGE);
    let sq = u64::from(cfg.sq_wqebbs()) * ENTRY;
    let endpoints = peers * (region + sq);
    let recv_cq = u64::from(cfg.cqes.max(cfg.srq_wqes)).next_power_of_two() * ENTRY;
    let srq = (2 * u64::from(cfg.srq_wqes) + 1).next_power_of_two() * SRQ_STRIDE;
    let context = |eps: u64| {
        let send_cq = u64::from(cfg.send_cq_entries(usize::try_from(eps).unwrap_or(usize::MAX)));
        send_cq * ENTRY + recv_cq + srq + PAGE
    };
    let (full, rest) = (peers / per_context, peers % per_context);
    let contexts = full * context(per_context) + if rest > 0 { context(rest) } else { 0 };
    endpoints + contexts
}

/// `--rpc-ring`: `auto` (`None`), or bytes with an optional unit — `k`/`KiB` (1024),
/// `m`/`MiB` (1024²), case-insensitive, `B` or nothing for bytes — a power of two in
/// [`RING_MIN`]`..=`[`RING_MAX`]. Errors say what was wrong and what is accepted; the
/// caller prefixes its flag name.
pub fn parse_ring(s: &str) -> Result<Option<usize>, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("auto") {
        return Ok(None);
    }
    let lower = t.to_ascii_lowercase();
    let digits = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &lower[digits.len()..];
    let scale: u64 = match unit {
        "" | "b" => 1,
        "k" | "kib" | "kb" => 1 << 10,
        "m" | "mib" | "mb" => 1 << 20,
        _ => {
            return Err(format!(
                "`{s}`: unknown unit `{unit}` (use auto, or bytes with k/KiB or m/MiB, e.g. 256k, 1MiB)"
            ))
        }
    };
    let n: u64 = digits
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not auto or a size such as 64k, 1m or 4194304"))?;
    let bytes = n.saturating_mul(scale);
    if !bytes.is_power_of_two() || !(RING_MIN as u64..=RING_MAX as u64).contains(&bytes) {
        return Err(format!(
            "`{s}` ({bytes} B) must be a power of two from {} KiB to {} MiB",
            RING_MIN >> 10,
            RING_MAX >> 20
        ));
    }
    Ok(Some(bytes as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_refusals() {
        assert_eq!(parse_ring("auto"), Ok(None));
        assert_eq!(parse_ring("AUTO"), Ok(None));
        assert_eq!(parse_ring("16k"), Ok(Some(16 << 10)));
        assert_eq!(parse_ring("256KiB"), Ok(Some(256 << 10)));
        assert_eq!(parse_ring("1m"), Ok(Some(1 << 20)));
        assert_eq!(parse_ring("4MiB"), Ok(Some(4 << 20)));
        assert_eq!(parse_ring("65536"), Ok(Some(65536)));
        for bad in ["3k", "2k", "8m", "1g", "k", "", "-4k", "1.5m", "16 kibi"] {
            assert!(parse_ring(bad).is_err(), "{bad} accepted");
        }
        assert!(parse_ring("3k").unwrap_err().contains("power of two"));
        assert!(parse_ring("1g").unwrap_err().contains("unit"));
    }

    /// The send CQ holds the flush of every SQ block: 512 WRs of 4 blocks (220 B inline)
    /// per SQ, 64 peers → 128 Ki entries (issue 21: 8 192 entries shared by ~60 SQs of
    /// 2 048 blocks could overrun).
    #[test]
    fn send_cq_covers_every_sq_block() {
        let cfg = super::super::RpcConfig::for_ring(16 << 10);
        assert_eq!(cfg.sq_wqebbs(), 2048);
        assert_eq!(cfg.send_cq_entries(64), 131_072);
        assert_eq!(cfg.send_cq_entries(1), 4096, "never below cqes");
        assert_eq!(cfg.send_cq_entries(3), 8192);
    }

    /// benchkv's shape: 24 B requests, 16 B responses, so 96 B of credit a call.
    #[test]
    fn auto_holds_the_calls_it_was_asked_for() {
        // The bistability runs' 46 clients × QD 32 to one peer → 1 MiB.
        assert_eq!(ring_for_calls(46 * 32, 24, 16), 1 << 20);
        assert!(calls_for_ring(1 << 20, 24, 16) >= 46 * 32);
        // The old fixed 16 KiB held ~42.
        assert_eq!(calls_for_ring(16 << 10, 24, 16), 42);
        for calls in [1u64, 42, 43, 256, 1000, 4096, 10_000] {
            let r = ring_for_calls(calls, 24, 16);
            assert!(r.is_power_of_two() && (AUTO_MIN..=RING_MAX).contains(&r));
            if r < RING_MAX {
                assert!(calls_for_ring(r, 24, 16) >= calls, "{calls} calls, {r} B");
                // And it is the smallest such power of two (above the floor).
                if r > AUTO_MIN {
                    assert!(
                        calls_for_ring(r / 2, 24, 16) < calls,
                        "{calls} calls, {r} B"
                    );
                }
            }
        }
        // Large requests: the request half of the ring binds.
        let r = ring_for_calls(100, 4000, 16);
        assert!(calls_for_ring(r, 4000, 16) >= 100);
        assert_eq!(ring_for_calls(u64::MAX, 24, 16), RING_MAX);
    }

    /// The bistability runs' rank (46 clients × QD 32, benchkv's 24 B requests and 16 B responses,
    /// 64 endpoints a context) at 2, 64 and 1 024 ranks: each peer's ring and send queue
    /// sized by its share of the calls, and what the rank pins. 1 024 ranks stay within
    /// 256 MiB; sizing every peer for all 1 472 calls pinned 2.4 GiB there.
    #[test]
    fn sizing_table_for_2_64_and_1024_ranks() {
        let calls = 46 * 32;
        let row = |ranks: u64| {
            let peers = ranks - 1;
            let per_peer = calls_per_peer(calls, peers);
            let mut cfg = RpcConfig::for_ring(ring_for_calls(per_peer, 24, 16));
            cfg.sq_wrs = sq_wrs_for_calls(per_peer);
            (
                per_peer,
                cfg.ring_bytes,
                cfg.sq_wrs,
                pinned_bytes(&cfg, peers, 64),
            )
        };
        const MIB: u64 = 1 << 20;
        let two = row(2);
        assert_eq!(
            (two.0, two.1, two.2),
            (1472, 1 << 20, 512),
            "one peer: every call"
        );
        assert_eq!(two.3, 2_891_776, "{} MiB", two.3 as f64 / MIB as f64);
        let r64 = row(64);
        assert_eq!((r64.0, r64.1, r64.2), (48, 32 << 10, 128));
        assert_eq!(r64.3, 8_945_664);
        let r1024 = row(1024);
        assert_eq!((r1024.0, r1024.1, r1024.2), (32, 16 << 10, 64));
        assert_eq!(r1024.3, 77_606_912);
        assert!(r1024.3 <= 256 * MIB);
        // The old sizing: every peer's ring for all the rank's calls, 512-WR SQs.
        let old = RpcConfig::for_ring(ring_for_calls(calls, 24, 16));
        assert!(pinned_bytes(&old, 1023, 64) > 2 * 1024 * MIB);
        // The floor and the cap.
        assert_eq!(calls_per_peer(4, 1), 4, "never more than the rank's calls");
        assert_eq!(calls_per_peer(1472, 1023), PEER_CALLS_FLOOR);
        assert_eq!(calls_per_peer(0, 5), 1);
        assert_eq!(sq_wrs_for_calls(1), 64);
        assert_eq!(sq_wrs_for_calls(100), 256);
        assert_eq!(sq_wrs_for_calls(u64::MAX), 512);
        // Each row's queue is one copyrpc accepts, and its ring holds its calls.
        for r in [two, r64, r1024] {
            let cfg = RpcConfig {
                sq_wrs: r.2,
                ..RpcConfig::for_ring(r.1)
            };
            assert!(cfg.sq_wqebbs() >= cfg.endpoint.min_sq_bbs());
            assert!(calls_for_ring(r.1, 24, 16) >= r.0);
        }
    }
}
