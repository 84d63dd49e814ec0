//! Credit-based flow control (docs/spec/credit.md), as pure functions.
//!
//! Each side keeps, for its direction of writes into the peer's recv ring of size `C`:
//!
//! * `in_flight = producer - remote_consumer`: bytes written, flushed or not, that the
//!   peer is not known to have consumed;
//! * `R = resp_reservation`: ring bytes set aside for responses to requests the peer
//!   may send with the credit we granted;
//!
//! and holds the invariant `in_flight + 2R <= C` ([`invariant_holds`]).
//!
//! # Why 2R, and why the allowance has +32
//!
//! A request that asks for a response of `ra` bytes costs the caller
//! [`internal_allowance`]`(ra) = padded(ra) + 32` from its balance. The 32 B pay for the
//! metadata the response may need (a new batch, or the new lap's batch after a wrap).
//! Writing a message of padded size `s` then moves the producer by at most
//! [`worst_case_advance`]`(s) = 2(s + 32)`: `s + 32` for metadata and message, plus, if
//! it wraps, the tail skipped to the lap end, which is less than what did not fit,
//! itself at most `s + 32` (see [`crate::ring::SendRing::plan`]). So a reply covered by
//! an allowance `a >= s + 32` needs at most `2a` bytes, and holding `2R` back keeps
//! that much free for every reply we owe. The design notes attribute the factor to both
//! sides holding reservations at once, or to metadata and wrap margin; the bound above
//! is what makes it necessary (docs/spec/credit.md#why-2r).
//!
//! # Replies never need a space check
//!
//! Before writing a reply the replier releases the request's allowance `a` (`R -= a`,
//! [`CreditState::release_on_reply`]), then writes at most `2a` bytes. From
//! `in_flight + 2R <= C`: `in_flight + 2a + 2(R - a) <= C`, so [`has_room`] holds for
//! the reply and the invariant holds after it. The replier releases exactly what the
//! caller paid: both compute [`internal_allowance`] from the allowance blocks in the
//! request header.
//!
//! # When to grant
//!
//! [`grant`] hands out all slack the invariant leaves (`(C - in_flight)/2 - R`), so the
//! `in_flight` it sees must include every byte the current operation writes. A wrap
//! forces flushes in the middle of a call or reply; [`SendRing::reserve_message`]
//! returns those ranges with the producer already past the new message, so filling
//! their metadata (grant included) after it returns is safe. Computing a grant from the
//! producer seen *before* the reservation would give away the space the write then
//! takes; the credit model test checks that this breaks the invariant.
//!
//! [`SendRing::reserve_message`]: crate::ring::SendRing::reserve_message
//!
//! # Failure story
//!
//! RC delivers every batch once and in order, so credit is neither lost nor duplicated
//! while the QP lives. If the QP fails, the connection and its credit die together.
//! A peer that claims an allowance it did not pay for is caught when the release
//! would take `R` below zero ([`CreditError::ReservationUnderflow`]); one that returns
//! ring credit for bytes never written is caught by
//! [`crate::ring::RemoteConsumer::on_credit_return`].

mod state;

pub use state::{CallCredit, CreditState};

use core::fmt;

use crate::wire::{align_down, align_up, ALIGNMENT, FLOW_METADATA_SIZE, HEADER_SIZE};

/// The smaller of two values, in a `const fn` (`Ord::min` is not const). One helper
/// for the five minimums below: its `<` against `<=` is the only place where the two
/// cannot be told apart (equal inputs), rather than one such place per minimum.
#[inline(always)]
const fn min(a: u64, b: u64) -> u64 {
    if a < b {
        a
    } else {
        b
    }
}

/// Why a credit operation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CreditError {
    /// The peer has not granted enough credit for the response allowance; poll and retry.
    InsufficientCredit,
    /// The response allowance costs more than the peer can ever grant
    /// ([`max_peer_credit`]): retrying cannot help.
    AllowanceTooLarge,
    /// A reply (plus metadata) is larger than the allowance its request paid for.
    ReplyTooLarge,
    /// Releasing an allowance would take the reservation below zero: the peer claimed
    /// more allowance than it was granted.
    ReservationUnderflow,
}

impl fmt::Display for CreditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::InsufficientCredit => "not enough credit from the peer",
            Self::AllowanceTooLarge => {
                "response allowance above the most credit the peer can grant"
            }
            Self::ReplyTooLarge => "reply larger than the request's allowance",
            Self::ReservationUnderflow => "released more reservation than was held",
        })
    }
}

/// `in_flight + 2R <= C`, without overflow.
#[inline]
pub const fn invariant_holds(in_flight: u64, resp_reservation: u64, remote_ring_size: u64) -> bool {
    has_room(in_flight, 0, resp_reservation, remote_ring_size)
}

/// Whether moving the producer by `advance` (a [`WritePlan`](crate::ring::WritePlan)'s
/// advance, wrap waste included) keeps `in_flight + advance + 2R <= C`.
///
/// A reply calls this after releasing its allowance, and it then always holds.
#[inline]
pub const fn has_room(
    in_flight: u64,
    advance: u64,
    resp_reservation: u64,
    remote_ring_size: u64,
) -> bool {
    let Some(reserved) = resp_reservation.checked_mul(2) else {
        return false;
    };
    let Some(used) = in_flight.checked_add(advance) else {
        return false;
    };
    match used.checked_add(reserved) {
        Some(total) => total <= remote_ring_size,
        None => false,
    }
}

/// Upper bound on the producer advance for a message of padded size `padded`: metadata
/// and message, plus a skipped tail that is smaller than both (module docs).
#[inline]
pub const fn worst_case_advance(padded: u64) -> u64 {
    padded.saturating_add(FLOW_METADATA_SIZE).saturating_mul(2)
}

/// Credit to grant in a batch's metadata: the smaller of what the invariant and the
/// policy cap leave, rounded down to [`ALIGNMENT`]; 0 when either is exhausted.
#[inline]
pub const fn grant(
    in_flight: u64,
    resp_reservation: u64,
    max_resp_reservation: u64,
    remote_ring_size: u64,
) -> u64 {
    let by_invariant =
        (remote_ring_size.saturating_sub(in_flight) / 2).saturating_sub(resp_reservation);
    let by_policy = max_resp_reservation.saturating_sub(resp_reservation);
    align_down(min(by_invariant, by_policy))
}

/// The request header's allowance field: `response_allowance` bytes in 32 B blocks,
/// rounded up.
#[inline]
pub const fn allowance_blocks(response_allowance: u32) -> u32 {
    // `div_ceil` as an add and a shift, in u64 where the addition cannot overflow.
    ((response_allowance as u64 + (ALIGNMENT - 1)) >> ALIGNMENT.trailing_zeros()) as u32
}

/// Balance a call costs and reservation its reply releases, for a response of up to
/// `response_allowance` payload bytes: the padded response plus 32 B of metadata.
///
/// Caller and replier must agree, so both pass the allowance the header carries
/// (`blocks * 32`, see [`internal_allowance_for_blocks`]), not the caller's own
/// unrounded request.
#[inline]
pub const fn internal_allowance(response_allowance: u64) -> u64 {
    align_up(
        align_up(HEADER_SIZE.saturating_add(response_allowance)).saturating_add(FLOW_METADATA_SIZE),
    )
}

/// [`internal_allowance`] of the allowance a header's `blocks` describe.
///
/// In closed form: `12 + 32b` rounds up to `32b + 32`, plus 32 of metadata (no
/// saturation can occur for a `u32` count of blocks).
#[inline]
pub const fn internal_allowance_for_blocks(blocks: u32) -> u64 {
    blocks as u64 * ALIGNMENT + ALIGNMENT + FLOW_METADATA_SIZE
}

/// The sum of [`internal_allowance_for_blocks`] over `requests` headers whose blocks
/// add up to `blocks`: the closed form is linear, so a running count and sum give it
/// without adding allowances one by one.
#[inline]
pub const fn internal_allowance_sum(requests: u64, blocks: u64) -> u64 {
    blocks * ALIGNMENT + requests * (ALIGNMENT + FLOW_METADATA_SIZE)
}

/// Whether a reply of padded size `reply_padded` (plus its metadata) fits in
/// `internal_allowance`.
#[inline]
pub const fn reply_fits_allowance(reply_padded: u64, internal_allowance: u64) -> bool {
    match reply_padded.checked_add(FLOW_METADATA_SIZE) {
        Some(needed) => needed <= internal_allowance,
        None => false,
    }
}

/// The `initial_credit` we advertise at connect: our reservation cap, aligned.
///
/// One design note advertises `min(max_resp_reservation, ring_size / 4)`, the other
/// `max_resp_reservation` (docs/spec/credit.md#lifecycle). The advertiser cannot know the
/// peer's recv ring size, which bounds its own initial reservation, so it sends the cap and
/// the peer clamps with its ring size ([`initial_peer_credit_balance`]). The balance then
/// equals our initial reservation exactly, whatever the two ring sizes are.
#[inline]
pub const fn initial_credit(max_resp_reservation: u64) -> u64 {
    align_down(max_resp_reservation)
}

/// Our initial reservation: `min(max_resp_reservation, C / 4)`, aligned down, where `C`
/// is the peer's recv ring size. `2R <= C / 2` leaves the invariant half the ring.
#[inline]
pub const fn initial_resp_reservation(max_resp_reservation: u64, remote_ring_size: u64) -> u64 {
    align_down(min(max_resp_reservation, remote_ring_size / 4))
}

/// Our initial balance for requests to the peer: the peer's advertised credit clamped
/// to a quarter of our recv ring, which is the peer's [`initial_resp_reservation`]
/// towards us. Equal to the peer's reservation, so no credit exists that it did not
/// reserve for.
#[inline]
pub const fn initial_peer_credit_balance(
    remote_initial_credit: u64,
    local_recv_ring_size: u64,
) -> u64 {
    initial_resp_reservation(remote_initial_credit, local_recv_ring_size)
}

/// The most credit the peer can ever hold out to us, whatever it returns: a bound on
/// our balance, so a call costing more can never be paid.
///
/// Our balance is part of the peer's reservation `R` towards us, and the peer keeps
/// `R` within its cap (advertised as `remote_initial_credit`, already aligned) and
/// within its invariant `in_flight + 2R <= C`, `C` being our recv ring. It grants only
/// while flushing a batch, whose metadata is then in flight, so `R` stays at most
/// `(C - 32) / 2` rounded down to [`ALIGNMENT`].
#[inline]
pub const fn max_peer_credit(remote_initial_credit: u64, local_recv_ring_size: u64) -> u64 {
    let by_invariant = align_down(local_recv_ring_size.saturating_sub(FLOW_METADATA_SIZE) / 2);
    min(align_down(remote_initial_credit), by_invariant)
}

/// The largest response allowance a call can ever pay for when the peer can grant at
/// most `max_peer_credit` ([`max_peer_credit`]); `None` when not even an empty response
/// can be paid for.
#[inline]
pub const fn max_response_allowance(max_peer_credit: u64) -> Option<u32> {
    // internal_allowance_for_blocks(b) = 32b + 64 <= max  <=>  b <= (max - 64) / 32
    let Some(spare) = max_peer_credit.checked_sub(ALIGNMENT + FLOW_METADATA_SIZE) else {
        return None;
    };
    let bytes = align_down(spare);
    // Whole blocks, so every allowance up to `bytes` rounds up to at most `bytes`; from
    // 2^32 on (the blocks of `u32::MAX`) every allowance can be paid for.
    Some(min(bytes, u32::MAX as u64) as u32)
}

/// The largest request payload a call can ever send, holding a reservation of up to
/// `max_resp_reservation` towards a peer whose recv ring is `remote_ring_size` bytes:
/// every payload up to it goes through once what is in flight is consumed, and a larger
/// one is refused for good (`PayloadTooLarge`, not `RingFull`).
///
/// A request that does not fit before the lap end starts a fresh lap
/// (`Tx::wrap_if_wanted`), so with nothing in flight it needs its metadata and message,
/// `32 + padded`, beside `2R`. `R` never exceeds [`max_peer_credit`] of our cap and
/// the peer's ring (the bound the peer computes for the same `R` from its side), and
/// on an idle peer it stays where it is (only the replies to the peer's own calls lower
/// it), so a payload that needs `R` lower than that may wait for ever: a 4 KiB ring with
/// the default cap (`C / 4`) took 2 004 B and returned `RingFull` for 2 005 B on every
/// retry. Hence `padded <= C - 32 - 2 R_max`, and within what one lap holds beside a
/// batch's metadata ([`crate::ring::SendRing::plan`]).
#[inline]
pub const fn max_request_payload(max_resp_reservation: u64, remote_ring_size: u64) -> u64 {
    let r = max_peer_credit(max_resp_reservation, remote_ring_size);
    let beside_r = remote_ring_size
        .saturating_sub(FLOW_METADATA_SIZE)
        .saturating_sub(r.saturating_mul(2));
    // One lap holds a batch's metadata, the message and at least 32 B more (`plan`'s
    // strict `<`); every R a connection can hold (at least 32 B) keeps within it, the
    // clamp only matters for a cap below one block.
    let in_a_lap = remote_ring_size.saturating_sub(2 * FLOW_METADATA_SIZE);
    align_down(min(beside_r, in_a_lap)).saturating_sub(HEADER_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host quotes these texts when it reports a refused call or reply.
    #[test]
    fn errors_display_distinct_nonempty_text() {
        let all = [
            CreditError::InsufficientCredit,
            CreditError::AllowanceTooLarge,
            CreditError::ReplyTooLarge,
            CreditError::ReservationUnderflow,
        ];
        crate::test_text::distinct_texts(&all);
    }

    #[test]
    fn allowance_sum_is_the_sum_of_the_allowances() {
        let blocks = [0u32, 1, 7, 128, 4095, u32::MAX];
        let mut sum = 0;
        let mut blocks_sum = 0;
        for (i, &b) in blocks.iter().enumerate() {
            sum += internal_allowance_for_blocks(b);
            blocks_sum += u64::from(b);
            assert_eq!(internal_allowance_sum(i as u64 + 1, blocks_sum), sum);
        }
        assert_eq!(internal_allowance_sum(0, 0), 0);
    }

    #[test]
    fn allowance_blocks_is_div_ceil() {
        for ra in (0..4096).chain([u32::MAX - 32, u32::MAX - 31, u32::MAX - 1, u32::MAX]) {
            assert_eq!(allowance_blocks(ra), ra.div_ceil(32), "{ra}");
        }
    }

    #[test]
    fn allowance_for_blocks_closed_form_matches_the_definition() {
        for b in (0..4096).chain([u32::MAX / 32, u32::MAX - 1, u32::MAX]) {
            assert_eq!(
                internal_allowance_for_blocks(b),
                internal_allowance(u64::from(b) * ALIGNMENT),
                "{b}"
            );
        }
    }

    #[test]
    fn allowance_golden() {
        assert_eq!(allowance_blocks(0), 0);
        assert_eq!(allowance_blocks(1), 1);
        assert_eq!(allowance_blocks(32), 1);
        assert_eq!(allowance_blocks(33), 2);
        assert_eq!(allowance_blocks(u32::MAX), 0x0800_0000);
        // 0 B response: 32 B message + 32 B metadata
        assert_eq!(internal_allowance(0), 64);
        assert_eq!(internal_allowance(20), 64);
        assert_eq!(internal_allowance(21), 96);
        assert_eq!(internal_allowance_for_blocks(1), 96);
        assert_eq!(
            internal_allowance_for_blocks(u32::MAX),
            (u32::MAX as u64) * 32 + 64
        );
    }

    #[test]
    fn grant_golden() {
        // (1024 - 128) / 2 - 64 = 384, policy 256 - 64 = 192
        assert_eq!(grant(128, 64, 256, 1024), 192);
        // (1024 - 600) / 2 - 64 = 148 -> 128 after alignment
        assert_eq!(grant(600, 64, 1024, 1024), 128);
        assert_eq!(grant(1000, 64, 1024, 1024), 0);
        assert_eq!(grant(2000, 0, 1024, 1024), 0);
        assert_eq!(grant(0, 300, 256, 1024), 0);
    }

    #[test]
    fn invariant_and_room() {
        assert!(invariant_holds(512, 256, 1024));
        assert!(!invariant_holds(544, 256, 1024));
        assert!(has_room(256, 256, 256, 1024));
        assert!(!has_room(256, 288, 256, 1024));
        assert!(!has_room(0, 0, u64::MAX, u64::MAX));
        assert!(!has_room(u64::MAX, 1, 0, u64::MAX));
    }

    #[test]
    fn reply_limits() {
        assert!(reply_fits_allowance(64, 96));
        assert!(!reply_fits_allowance(96, 96));
        assert!(!reply_fits_allowance(u64::MAX, u64::MAX));
        assert_eq!(worst_case_advance(64), 192);
    }

    #[test]
    fn allowance_and_payload_bounds() {
        assert_eq!(max_peer_credit(1024, 4096), 1024);
        assert_eq!(max_peer_credit(1 << 20, 4096), 2016);
        assert_eq!(max_peer_credit(1000, 4096), 992);
        assert_eq!(max_peer_credit(1 << 20, 128), 32);
        assert_eq!(max_response_allowance(1024), Some(960));
        assert_eq!(max_response_allowance(64), Some(0));
        assert_eq!(max_response_allowance(63), None);
        assert_eq!(max_response_allowance(u64::MAX), Some(u32::MAX));
        // Exactly the largest allowance whose cost fits, for every small bound.
        for max in 64..4096u64 {
            let ra = max_response_allowance(max).unwrap();
            assert!(internal_allowance_for_blocks(allowance_blocks(ra)) <= max);
            assert!(internal_allowance_for_blocks(allowance_blocks(ra + 1)) > max);
        }
    }

    #[test]
    fn request_payload_limit_golden() {
        // 4 KiB ring, the default cap C / 4: 32 + padded + 2 * 1024 <= 4096 -> 2016.
        assert_eq!(max_request_payload(1024, 4096), 2004);
        assert_eq!(max_request_payload(4096, 16 << 10), 8148);
        // A cap above half the ring: the invariant's bound, 2016, is R's most.
        assert_eq!(max_request_payload(1 << 20, 4096), 20);
        assert_eq!(max_request_payload(u64::MAX, 128), 20);
        // A cap below one block: one lap's room beside the metadata and a marker.
        assert_eq!(max_request_payload(0, 4096), 4020);
        assert_eq!(max_request_payload(31, 128), 52);
        assert_eq!(max_request_payload(100, 1 << 36), (1 << 36) - 32 - 192 - 12);
    }

    /// Exactly the largest payload whose message, metadata and twice the most `R` can
    /// be fit the ring, and one lap can hold it: for every cap and payload around the
    /// limit on small rings.
    #[test]
    fn the_request_limit_is_the_largest_payload_beside_the_most_r() {
        for c in (7..=14).map(|s| 1u64 << s) {
            for cap in (0..=c).step_by(5).chain([c / 4, c / 2, u64::MAX]) {
                let r = max_peer_credit(cap, c);
                let limit = max_request_payload(cap, c);
                let fits = |p: u64| {
                    FLOW_METADATA_SIZE + padded(p) + 2 * r <= c
                        && padded(p) < c - FLOW_METADATA_SIZE
                };
                assert!(fits(limit), "cap {cap} C {c}: {limit}");
                assert!(!fits(limit + 1), "cap {cap} C {c}: {limit} + 1");
            }
        }
    }

    fn padded(len: u64) -> u64 {
        crate::wire::padded_message_size(len as u32)
    }

    #[test]
    fn initial_values() {
        assert_eq!(initial_credit(1000), 992);
        assert_eq!(initial_resp_reservation(1 << 20, 4096), 1024);
        assert_eq!(initial_resp_reservation(100, 4096), 96);
        assert_eq!(initial_peer_credit_balance(1 << 20, 512), 128);
    }
}
