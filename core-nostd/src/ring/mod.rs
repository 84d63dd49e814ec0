//! Ring arithmetic over free-running virtual positions.
//!
//! Every position is a `u64` byte count since connect that only grows; the byte it names
//! lives at `pos & (size - 1)` (docs/spec/wrap.md#positions). Differences of positions are plain
//! subtractions, with no wrap-around cases. At 100 GB/s a `u64` lasts 5.8 years per
//! connection, so overflow is treated as unreachable. Every position is a multiple of
//! [`crate::wire::ALIGNMENT`].
//!
//! The sender's send ring and the receiver's recv ring have the same size and positions:
//! a batch at send positions `[start, end)` is written to the same offsets in the peer's
//! recv ring. So one [`RingSize`], the peer's recv ring size, governs both.
//!
//! | type | side | tracks |
//! |---|---|---|
//! | [`SendRing`] | sender | producer, current batch, wrap decisions |
//! | [`RecvRing`] | receiver | producer from IMM deltas, consumer, last notification |
//! | [`RemoteConsumer`] | sender | how far the receiver is known to have consumed |

mod recv;
mod remote;
mod send;

pub use recv::{RecvRing, RecvSpan};
pub use remote::RemoteConsumer;
pub use send::{FlushRange, Reserved, SendRing, Wrap, WritePlan};

use core::fmt;

use crate::wire::{ALIGNMENT, FLOW_METADATA_SIZE};

/// Why a ring operation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RingError {
    /// The size is not a power of two in `RingSize::MIN..=RingSize::MAX`.
    BadSize,
    /// A length or position is not a positive multiple of 32.
    Misaligned,
    /// The message cannot fit in one lap next to its batch metadata, at any position.
    MessageTooLarge,
    /// A received batch would cross the end of the ring, which no correct sender does.
    CrossesRingEnd,
    /// A received batch would overwrite bytes not yet consumed: the peer broke flow control.
    Overrun,
    /// Consuming past the received producer.
    BeyondProducer,
    /// The peer claims to have consumed bytes we never produced.
    CreditOverrun,
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::BadSize => "ring size is not a power of two in range",
            Self::Misaligned => "length or position is not a positive multiple of 32",
            Self::MessageTooLarge => "message does not fit in one lap",
            Self::CrossesRingEnd => "received batch crosses the ring end",
            Self::Overrun => "received batch overwrites unconsumed bytes",
            Self::BeyondProducer => "consumed past the received producer",
            Self::CreditOverrun => "peer returned credit for bytes never produced",
        })
    }
}

/// A ring size: a power of two in `MIN..=MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RingSize(u64);

impl RingSize {
    /// Smallest ring: batch metadata plus the smallest message must stay strictly below
    /// the lap end (see [`SendRing::plan`]), so 32 + 32 < size, and 64 is not enough.
    pub const MIN: u64 = 128;
    /// Largest ring: every WRITE_IMM covers at most one lap, and one lap must fit the
    /// 32-bit immediate in 32 B units (2^36 / 32 = 2^31 <= u32::MAX). That also keeps
    /// any batch's message count below the wrap sentinel.
    pub const MAX: u64 = 1 << 36;

    /// Checks and wraps a size in bytes.
    pub const fn new(bytes: u64) -> Result<Self, RingError> {
        if bytes.is_power_of_two() && bytes >= Self::MIN && bytes <= Self::MAX {
            Ok(Self(bytes))
        } else {
            Err(RingError::BadSize)
        }
    }

    /// The size in bytes.
    #[inline]
    pub const fn get(self) -> u64 {
        self.0
    }

    /// Byte offset of `pos` within the ring.
    #[inline]
    pub const fn offset(self, pos: u64) -> u64 {
        pos & (self.0 - 1)
    }

    /// The first position of the lap after the one holding `pos`.
    #[inline]
    pub const fn lap_start_after(self, pos: u64) -> u64 {
        (pos | (self.0 - 1)) + 1
    }

    /// Bytes from `pos` to the end of its lap, in `1..=size`.
    #[inline]
    pub const fn room_to_lap_end(self, pos: u64) -> u64 {
        self.0 - self.offset(pos)
    }
}

const _: () = assert!(RingSize::MIN > 2 * FLOW_METADATA_SIZE);
const _: () = assert!(RingSize::MIN.is_multiple_of(ALIGNMENT));
const _: () = assert!(RingSize::MAX / ALIGNMENT <= u32::MAX as u64);

#[inline]
const fn is_aligned(pos: u64) -> bool {
    pos.is_multiple_of(ALIGNMENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(RingSize::new(64), Err(RingError::BadSize));
        assert_eq!(RingSize::new(192), Err(RingError::BadSize));
        assert_eq!(RingSize::new(1 << 37), Err(RingError::BadSize));
        assert_eq!(RingSize::new(0), Err(RingError::BadSize));
        assert_eq!(RingSize::new(128).map(RingSize::get), Ok(128));
        assert!(RingSize::new(1 << 36).is_ok());
    }

    /// The host quotes these texts when it reports a refused batch.
    #[test]
    fn errors_display_distinct_nonempty_text() {
        let all = [
            RingError::BadSize,
            RingError::Misaligned,
            RingError::MessageTooLarge,
            RingError::CrossesRingEnd,
            RingError::Overrun,
            RingError::BeyondProducer,
            RingError::CreditOverrun,
        ];
        crate::test_text::distinct_texts(&all);
    }

    #[test]
    fn lap_arithmetic() {
        let size = RingSize::new(256).unwrap();
        assert_eq!(size.offset(0x1_0000_01a0), 0xa0);
        assert_eq!(size.lap_start_after(0x1_0000_01a0), 0x1_0000_0200);
        assert_eq!(size.lap_start_after(0x200), 0x300);
        assert_eq!(size.room_to_lap_end(0x1e0), 32);
        assert_eq!(size.room_to_lap_end(0x200), 256);
    }
}
