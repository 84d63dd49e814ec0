//! The receiver's side: where batches land and how much of them was consumed.

use super::{is_aligned, RingError, RingSize};

/// Positions of a recv ring; the memory belongs to the caller and the peer writes it.
///
/// Invariant, checked in every mutator:
/// `last_notified_recv_pos <= last_recv_pos <= producer <= last_recv_pos + size`.
#[derive(Debug, Clone)]
pub struct RecvRing {
    size: RingSize,
    /// End of the last batch announced by an immediate. Free-running.
    producer: u64,
    /// Consumer: everything before it has been parsed and may be overwritten.
    last_recv_pos: u64,
    /// Consumer value last reported to the peer as `ring_credit_return`.
    last_notified_recv_pos: u64,
}

/// Where a just-announced batch lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvSpan {
    /// Position of its first byte (its flow metadata).
    pub start: u64,
    /// Offset of `start` in the ring: the batch is `ring[offset..offset + len]`.
    pub offset: u64,
    /// Its length, the decoded immediate.
    pub len: u64,
}

impl RecvRing {
    /// An empty ring at position 0, matching the peer's [`SendRing::new`](super::SendRing::new).
    pub const fn new(size: RingSize) -> Self {
        Self {
            size,
            producer: 0,
            last_recv_pos: 0,
            last_notified_recv_pos: 0,
        }
    }

    /// An empty ring at `pos`; see [`SendRing::starting_at`](super::SendRing::starting_at).
    pub const fn starting_at(size: RingSize, pos: u64) -> Result<Self, RingError> {
        if !is_aligned(pos) {
            return Err(RingError::Misaligned);
        }
        Ok(Self {
            size,
            producer: pos,
            last_recv_pos: pos,
            last_notified_recv_pos: pos,
        })
    }

    /// The ring size.
    #[inline]
    pub const fn size(&self) -> RingSize {
        self.size
    }

    /// End of the received data.
    #[inline]
    pub const fn producer(&self) -> u64 {
        self.producer
    }

    /// The consumer position.
    #[inline]
    pub const fn last_recv_pos(&self) -> u64 {
        self.last_recv_pos
    }

    /// The consumer position last reported to the peer.
    #[inline]
    pub const fn last_notified_recv_pos(&self) -> u64 {
        self.last_notified_recv_pos
    }

    /// Received bytes not yet consumed.
    #[inline]
    pub const fn unconsumed(&self) -> u64 {
        self.producer - self.last_recv_pos
    }

    fn check(&self) {
        debug_assert!(self.last_notified_recv_pos <= self.last_recv_pos);
        debug_assert!(self.last_recv_pos <= self.producer);
        debug_assert!(self.producer - self.last_recv_pos <= self.size.get());
        debug_assert!(is_aligned(self.producer) && is_aligned(self.last_recv_pos));
    }

    /// Records a batch announced by a CQE whose immediate decoded to `delta`.
    ///
    /// A batch that is misaligned, crosses the ring end or overwrites unconsumed bytes
    /// can only come from a peer that broke the protocol; it is refused and nothing
    /// changes.
    pub fn on_imm(&mut self, delta: u64) -> Result<RecvSpan, RingError> {
        if delta == 0 || !is_aligned(delta) {
            return Err(RingError::Misaligned);
        }
        let offset = self.size.offset(self.producer);
        if delta > self.size.get() - offset {
            return Err(RingError::CrossesRingEnd);
        }
        if self.unconsumed() + delta > self.size.get() {
            return Err(RingError::Overrun);
        }
        let span = RecvSpan {
            start: self.producer,
            offset,
            len: delta,
        };
        self.producer += delta;
        self.check();
        Ok(span)
    }

    /// Marks `bytes` (metadata or a padded message) as consumed.
    pub fn consume(&mut self, bytes: u64) -> Result<(), RingError> {
        if !is_aligned(bytes) {
            return Err(RingError::Misaligned);
        }
        if bytes > self.unconsumed() {
            return Err(RingError::BeyondProducer);
        }
        self.last_recv_pos += bytes;
        self.check();
        Ok(())
    }

    /// Consumes a wrap marker at the consumer: skips to the next lap's start, whose
    /// distance the marker's immediate already added to the producer.
    pub fn skip_wrap(&mut self) -> Result<(), RingError> {
        let bytes = self.size.room_to_lap_end(self.last_recv_pos);
        self.consume(bytes)
    }

    /// Bytes consumed since the previous call: the `ring_credit_return` of the next
    /// outgoing batch. Marks them as notified.
    pub fn take_credit_return(&mut self) -> u64 {
        let bytes = self.last_recv_pos - self.last_notified_recv_pos;
        self.last_notified_recv_pos = self.last_recv_pos;
        self.check();
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(size: u64) -> RecvRing {
        RecvRing::new(RingSize::new(size).unwrap())
    }

    #[test]
    fn batches_and_wrap_marker() {
        let mut r = ring(256);
        assert_eq!(
            r.on_imm(128),
            Ok(RecvSpan {
                start: 0,
                offset: 0,
                len: 128
            })
        );
        r.consume(32).unwrap();
        r.consume(96).unwrap();
        assert_eq!(
            r.on_imm(128),
            Ok(RecvSpan {
                start: 128,
                offset: 128,
                len: 128
            })
        );
        r.skip_wrap().unwrap();
        assert_eq!(r.last_recv_pos(), 256);
        assert_eq!(r.take_credit_return(), 256);
        assert_eq!(r.take_credit_return(), 0);
        assert_eq!(r.on_imm(64).unwrap().offset, 0);
    }

    #[test]
    fn refuses_protocol_violations() {
        let mut r = ring(256);
        assert_eq!(r.on_imm(0), Err(RingError::Misaligned));
        assert_eq!(r.on_imm(48), Err(RingError::Misaligned));
        assert_eq!(r.on_imm(288), Err(RingError::CrossesRingEnd));
        r.on_imm(192).unwrap();
        r.consume(64).unwrap();
        // 128 unconsumed; 64 more reaches the ring end without overrun
        r.on_imm(64).unwrap();
        assert_eq!(r.on_imm(96), Err(RingError::Overrun));
        assert_eq!(r.producer(), 256);
        assert_eq!(r.consume(224), Err(RingError::BeyondProducer));
        assert_eq!(r.consume(33), Err(RingError::Misaligned));
    }

    /// The room to the ring end is `size - offset`: at offset 0 it equals the size, so
    /// only a nonzero offset tells it from `size + offset` (or from no offset at all).
    #[test]
    fn crossing_the_ring_end_is_refused_at_a_nonzero_offset() {
        let mut r = ring(256);
        r.on_imm(64).unwrap();
        r.consume(64).unwrap();
        // 224 B from offset 64 would run 32 B past the end, though nothing is unconsumed.
        assert_eq!(r.on_imm(224), Err(RingError::CrossesRingEnd));
        assert_eq!(r.producer(), 64, "a refused batch changes nothing");
        // Exactly to the end is fine.
        assert_eq!(
            r.on_imm(192),
            Ok(RecvSpan {
                start: 64,
                offset: 64,
                len: 192
            })
        );
    }

    /// A batch may fill the ring up to the last free byte; one 32 B block more is an
    /// overrun.
    #[test]
    fn a_batch_that_fills_the_ring_exactly_is_accepted() {
        let mut r = ring(256);
        r.on_imm(128).unwrap();
        assert_eq!(r.on_imm(128).map(|s| s.offset), Ok(128));
        assert_eq!(r.unconsumed(), 256);
        r.consume(32).unwrap();
        assert_eq!(r.on_imm(64), Err(RingError::Overrun));
        assert_eq!(r.on_imm(32).map(|s| s.offset), Ok(0));
    }

    #[test]
    fn skip_wrap_cannot_pass_the_producer() {
        let mut r = ring(256);
        r.on_imm(64).unwrap();
        r.consume(32).unwrap();
        assert_eq!(r.skip_wrap(), Err(RingError::BeyondProducer));
        assert_eq!(r.last_recv_pos(), 32);
    }

    #[test]
    fn positions_beyond_two_to_the_32() {
        let start = (1u64 << 32) - 32;
        let mut r = RecvRing::starting_at(RingSize::new(128).unwrap(), start).unwrap();
        assert_eq!(r.on_imm(32).unwrap().offset, 96);
        r.skip_wrap().unwrap();
        assert_eq!(r.last_recv_pos(), 1 << 32);
        assert_eq!(r.on_imm(64).unwrap().offset, 0);
        r.consume(64).unwrap();
        assert_eq!(r.take_credit_return(), 96);
    }
}
