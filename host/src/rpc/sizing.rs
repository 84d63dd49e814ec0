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
}
