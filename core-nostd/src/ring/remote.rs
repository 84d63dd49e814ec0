//! The sender's knowledge of the receiver's consumer.

use super::RingError;

/// How far the peer is known to have consumed our writes into its recv ring.
///
/// Two sources feed it: the `ring_credit_return` deltas piggybacked on the peer's batches
/// and RDMA READs of the peer's absolute consumer position (the fallback:
/// docs/spec/wrap.md#consumer-tracking). Deltas summed since connect give the position of
/// the peer's last notification. Each source is a lower bound of the true consumer,
/// possibly stale relative to the other, so the position is the larger of the two. Adding a
/// READ result to the delta sum instead would count bytes twice and let us overwrite unread
/// data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteConsumer {
    /// Start position plus every `ring_credit_return` received.
    notified: u64,
    /// Largest position read by RDMA READ.
    read: u64,
}

impl RemoteConsumer {
    /// A consumer at `start`, the position both rings started at.
    pub const fn new(start: u64) -> Self {
        Self {
            notified: start,
            read: start,
        }
    }

    /// The best known consumer position.
    #[inline]
    pub const fn position(&self) -> u64 {
        if self.notified > self.read {
            self.notified
        } else {
            self.read
        }
    }

    /// Bytes written (flushed or not) that the peer is not known to have consumed.
    #[inline]
    pub fn in_flight(&self, producer: u64) -> u64 {
        // Both ways of moving the position check it against the producer, so this does
        // not wrap; if it ever did, the result would be huge and refuse every write
        // (where saturating at 0 would admit them).
        debug_assert!(self.position() <= producer);
        producer.wrapping_sub(self.position())
    }

    /// Applies a `ring_credit_return`. `producer` is our send producer: a peer claiming
    /// more than that is lying or desynced, and is refused without any change.
    pub fn on_credit_return(&mut self, delta: u64, producer: u64) -> Result<(), RingError> {
        match self.notified.checked_add(delta) {
            Some(notified) if notified <= producer => {
                self.notified = notified;
                Ok(())
            }
            _ => Err(RingError::CreditOverrun),
        }
    }

    /// Applies the result of an RDMA READ of the peer's consumer position.
    pub fn on_read(&mut self, pos: u64, producer: u64) -> Result<(), RingError> {
        if pos > producer {
            return Err(RingError::CreditOverrun);
        }
        self.read = self.read.max(pos);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_and_deltas_do_not_double_count() {
        let mut c = RemoteConsumer::new(1 << 32);
        c.on_credit_return(64, (1 << 32) + 512).unwrap();
        c.on_read((1 << 32) + 256, (1 << 32) + 512).unwrap();
        assert_eq!(c.position(), (1 << 32) + 256);
        // The next notification covers bytes the READ already saw.
        c.on_credit_return(128, (1 << 32) + 512).unwrap();
        assert_eq!(c.position(), (1 << 32) + 256);
        c.on_credit_return(256, (1 << 32) + 512).unwrap();
        assert_eq!(c.position(), (1 << 32) + 448);
        assert_eq!(c.in_flight((1 << 32) + 512), 64);
        // An older READ result does not move it back.
        c.on_read(1 << 32, (1 << 32) + 512).unwrap();
        assert_eq!(c.position(), (1 << 32) + 448);
    }

    #[test]
    fn refuses_credit_for_unproduced_bytes() {
        let mut c = RemoteConsumer::new(0);
        assert_eq!(c.on_credit_return(96, 64), Err(RingError::CreditOverrun));
        c.on_credit_return(64, 64).unwrap();
        assert_eq!(
            c.on_credit_return(u64::MAX, u64::MAX),
            Err(RingError::CreditOverrun),
            "the sum overflows"
        );
        assert_eq!(c.on_read(128, 64), Err(RingError::CreditOverrun));
        assert_eq!(c.position(), 64);
    }
}
