//! Byte layouts of the copyrpc data plane. This is the only module that knows offsets.
//!
//! One RDMA WRITE-with-immediate carries one *batch* into the peer's recv ring:
//!
//! ```text
//! +------------------------------+  flow metadata, 32 B (FlowMetaView)
//! | ring_credit_return  u64 LE   |  @0
//! | credit_grant        u64 LE   |  @8
//! | message_count       u32 LE   |  @16   u32::MAX = wrap marker
//! | padding             12 B     |  @20   emitted as zero
//! +------------------------------+  message, padded_message_size(len) B
//! | call_id     u32 LE           |  @0    MSB set = response
//! | piggyback   u32 LE           |  @4    request: response allowance in 32 B blocks
//! | payload_len u32 LE           |  @8
//! | payload, zero padding to 32  |  @12
//! +------------------------------+  ... message_count messages in total
//! ```
//!
//! The immediate carries the batch's byte length divided by [`ALIGNMENT`] ([`Imm`]).
//!
//! One design note calls the first metadata field `consumer_pos` (an absolute position);
//! the other calls it `ring_credit_return`, the bytes of the sender's recv ring consumed
//! since its previous notification. We follow the second: the field is a delta
//! (docs/spec/wire.md#flow-metadata). Summed
//! since connect it equals the absolute position, which is how
//! [`crate::ring::RemoteConsumer`] reconciles it with an RDMA READ of the position.
//!
//! # Panic contract
//!
//! The views follow smoltcp's rules. A view made with `new_unchecked` does no checking,
//! and its accessors panic if the buffer is too short. `new_checked` (or `check_len` on
//! an unchecked view) verifies the length once; after it succeeds no accessor of that
//! view panics. A `Repr`'s `emit` never panics on a buffer of exactly `buffer_len()`
//! bytes. Use `new_unchecked` for TX buffers that are reused: `new_checked` judges the
//! bytes already present, which on a reused buffer are stale and say nothing about the
//! message about to be written. [`parse_batch`] and its iterator never panic, for any
//! input, and their work is bounded by the input length.
#![forbid(unsafe_code)]

mod batch;
mod flow_meta;
mod header;
mod imm;

pub use batch::{emit_message, parse_batch, Batch, BatchMessages, Message};
pub use flow_meta::{FlowMetaRepr, FlowMetaView};
pub use header::{HeaderRepr, HeaderView};
pub use imm::{decode_imm, encode_imm, Imm};

use core::fmt;

/// Every message, batch and ring position is a multiple of this many bytes.
pub const ALIGNMENT: u64 = 32;
/// Bytes of the per-message header.
pub const HEADER_SIZE: u64 = 12;
/// Bytes of the per-batch flow metadata.
pub const FLOW_METADATA_SIZE: u64 = 32;
/// Set in `call_id` of a response; clear in a request.
pub const RESPONSE_FLAG: u32 = 0x8000_0000;
/// `message_count` of a wrap marker: the receiver skips to the start of the next lap.
pub const WRAP_MESSAGE_COUNT: u32 = u32::MAX;
/// Largest call id a request may carry; the remaining bit is [`RESPONSE_FLAG`].
pub const MAX_CALL_ID: u32 = 0x7fff_ffff;

// Bit budget of call_id: the id and the response flag share the 32 bits exactly.
const _: () = assert!(MAX_CALL_ID & RESPONSE_FLAG == 0);
const _: () = assert!(MAX_CALL_ID | RESPONSE_FLAG == u32::MAX);
const _: () = assert!(ALIGNMENT.is_power_of_two());
const _: () = assert!(FLOW_METADATA_SIZE.is_multiple_of(ALIGNMENT));
const _: () = assert!(HEADER_SIZE < ALIGNMENT);

/// Why bytes could not be read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WireError {
    /// The buffer is shorter than the layout or the lengths inside it require.
    Truncated,
    /// A length or delta is not a multiple of [`ALIGNMENT`].
    Misaligned,
    /// A delta divided by [`ALIGNMENT`] does not fit the 32-bit immediate.
    ImmOverflow,
    /// A payload is longer than the `u32` length field can describe.
    PayloadTooLarge,
    /// A batch holds bytes after its last message: the sender's length accounting and
    /// ours disagree.
    TrailingBytes,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Truncated => "buffer shorter than the layout requires",
            Self::Misaligned => "length is not a multiple of 32",
            Self::ImmOverflow => "delta does not fit the 32-bit immediate",
            Self::PayloadTooLarge => "payload longer than u32::MAX",
            Self::TrailingBytes => "bytes after the last message of a batch",
        })
    }
}

/// Rounds `x` up to a multiple of [`ALIGNMENT`].
///
/// Every length in this crate is far below `u64::MAX - 31`; above that the result
/// saturates at the largest multiple of 32 instead of overflowing.
#[inline]
pub const fn align_up(x: u64) -> u64 {
    x.saturating_add(ALIGNMENT - 1) & !(ALIGNMENT - 1)
}

/// Rounds `x` down to a multiple of [`ALIGNMENT`].
#[inline]
pub const fn align_down(x: u64) -> u64 {
    x & !(ALIGNMENT - 1)
}

/// Ring bytes taken by a message with `payload_len` bytes of payload: header plus
/// payload, rounded up to [`ALIGNMENT`]. Returned as `u64` so `u32::MAX` cannot overflow.
#[inline]
pub const fn padded_message_size(payload_len: u32) -> u64 {
    align_up(HEADER_SIZE + payload_len as u64)
}

/// Whether `call_id` marks a response.
#[inline]
pub const fn is_response(call_id: u32) -> bool {
    call_id & RESPONSE_FLAG != 0
}

/// The `call_id` a response to request `call_id` carries.
#[inline]
pub const fn to_response_id(call_id: u32) -> u32 {
    call_id | RESPONSE_FLAG
}

/// The request id a response's `call_id` answers.
#[inline]
pub const fn from_response_id(call_id: u32) -> u32 {
    call_id & !RESPONSE_FLAG
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_golden() {
        assert_eq!(padded_message_size(0), 32);
        assert_eq!(padded_message_size(20), 32);
        assert_eq!(padded_message_size(21), 64);
        assert_eq!(padded_message_size(52), 64);
        assert_eq!(padded_message_size(53), 96);
        assert_eq!(padded_message_size(u32::MAX), 0x1_0000_0020);
    }

    #[test]
    fn align_edges() {
        assert_eq!(align_up(0), 0);
        assert_eq!(align_up(1), 32);
        assert_eq!(align_up(32), 32);
        assert_eq!(align_down(63), 32);
        assert_eq!(align_down(31), 0);
        assert_eq!(align_up(u64::MAX), u64::MAX - 31);
    }

    #[test]
    fn response_ids() {
        assert!(!is_response(MAX_CALL_ID));
        assert_eq!(to_response_id(5), 0x8000_0005);
        assert!(is_response(to_response_id(0)));
        assert_eq!(from_response_id(0x8000_0005), 5);
        assert_eq!(from_response_id(to_response_id(MAX_CALL_ID)), MAX_CALL_ID);
    }

    /// `to_response_id` sets the flag, whatever the id: given an id that already carries
    /// it (no request does, but the function is public), it stays a response id rather
    /// than turning back into a request's.
    #[test]
    fn to_response_id_keeps_an_already_set_flag() {
        for id in [0, 5, MAX_CALL_ID] {
            let r = to_response_id(id);
            assert_eq!(to_response_id(r), r);
            assert!(is_response(to_response_id(r)));
        }
    }
}
