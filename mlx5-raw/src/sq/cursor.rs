//! The wrap-aware write cursor of a WQE.

use zerocopy::IntoBytes;

use crate::layout::SEND_WQE_DS;
use crate::mem::RingMem;

/// The one place that knows the ring wraps: a write position inside one WQE.
pub(super) struct WqeCursor<'r> {
    ring: &'r mut RingMem,
    /// Ring byte offset of the WQE's first byte (64-aligned).
    start: usize,
    /// Bytes written so far; segments start at multiples of 16.
    pub(super) off: usize,
}

impl<'r> WqeCursor<'r> {
    #[inline]
    pub(super) fn new(ring: &'r mut RingMem, start: usize) -> Self {
        Self {
            ring,
            start,
            off: 0,
        }
    }

    /// Appends bytes; crosses the end of the ring transparently (only inline payload can
    /// straddle it, because segment headers start 16-aligned in a 64-aligned ring).
    #[inline]
    pub(super) fn put(&mut self, bytes: &[u8]) {
        self.ring.write(self.start + self.off, bytes);
        self.off += bytes.len();
    }

    /// Appends one 16-byte segment.
    #[inline]
    pub(super) fn seg<T: IntoBytes + zerocopy::Immutable>(&mut self, seg: &T) {
        debug_assert_eq!(self.off % SEND_WQE_DS, 0, "segment not 16-aligned");
        debug_assert_eq!(size_of_val(seg), SEND_WQE_DS);
        self.put(seg.as_bytes());
    }

    /// Writes 16 zero bytes at WQE offset `at` (16-aligned, so within one WQEBB and
    /// never across the ring end), without moving the cursor.
    #[inline]
    pub(super) fn zero16_at(&mut self, at: usize) {
        debug_assert_eq!(at % SEND_WQE_DS, 0, "zero block not 16-aligned");
        self.ring.write(self.start + at, &[0u8; SEND_WQE_DS]);
    }

    /// Moves the cursor forward to `to` over bytes already written.
    #[inline]
    pub(super) fn skip_to(&mut self, to: usize) {
        debug_assert!(to >= self.off);
        self.off = to;
    }
}
