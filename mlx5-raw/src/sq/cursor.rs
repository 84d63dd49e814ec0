//! The write cursors of a WQE: one over a contiguous span, one that wraps at the ring's end.

use zerocopy::IntoBytes;

use crate::layout::SEND_WQE_DS;
use crate::mem::RingMem;

/// Where a WQE's bytes are written, segment by segment, from its first byte.
pub(super) trait WqeSink {
    /// Appends bytes.
    fn put(&mut self, bytes: &[u8]);
    /// Writes 16 zero bytes at WQE offset `at` (16-aligned), without moving the cursor.
    fn zero16_at(&mut self, at: usize);
    /// Bytes written so far (the cursor); segments start at multiples of 16.
    fn off(&self) -> usize;
    /// Moves the cursor forward to `to` over bytes already written.
    fn skip_to(&mut self, to: usize);

    /// Appends one 16-byte segment.
    #[inline]
    fn seg<T: IntoBytes + zerocopy::Immutable>(&mut self, seg: &T) {
        debug_assert_eq!(self.off() % SEND_WQE_DS, 0, "segment not 16-aligned");
        debug_assert_eq!(size_of_val(seg), SEND_WQE_DS);
        self.put(seg.as_bytes());
    }
}

/// The common case: the whole WQE lies before the end of the ring, so it is one slice
/// and each write is a plain bounds-checked copy.
pub(super) struct SpanCursor<'r> {
    buf: &'r mut [u8],
    off: usize,
}

impl<'r> SpanCursor<'r> {
    #[inline]
    pub(super) fn new(buf: &'r mut [u8]) -> Self {
        Self { buf, off: 0 }
    }
}

impl WqeSink for SpanCursor<'_> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.buf[self.off..][..bytes.len()].copy_from_slice(bytes);
        self.off += bytes.len();
    }

    #[inline]
    fn zero16_at(&mut self, at: usize) {
        debug_assert_eq!(at % SEND_WQE_DS, 0, "zero block not 16-aligned");
        self.buf[at..][..SEND_WQE_DS].fill(0);
    }

    #[inline]
    fn off(&self) -> usize {
        self.off
    }

    #[inline]
    fn skip_to(&mut self, to: usize) {
        debug_assert!(to >= self.off);
        self.off = to;
    }
}

/// A WQE that runs past the end of the ring: the one place that knows the ring wraps.
pub(super) struct WqeCursor<'r> {
    ring: &'r mut RingMem,
    /// Ring byte offset of the WQE's first byte (64-aligned).
    start: usize,
    off: usize,
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
}

impl WqeSink for WqeCursor<'_> {
    /// Crosses the end of the ring transparently (only inline payload can straddle it,
    /// because segment headers start 16-aligned in a 64-aligned ring).
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.ring.write(self.start + self.off, bytes);
        self.off += bytes.len();
    }

    /// 16-aligned, so within one WQEBB and never across the ring end.
    #[inline]
    fn zero16_at(&mut self, at: usize) {
        debug_assert_eq!(at % SEND_WQE_DS, 0, "zero block not 16-aligned");
        self.ring.write(self.start + at, &[0u8; SEND_WQE_DS]);
    }

    #[inline]
    fn off(&self) -> usize {
        self.off
    }

    #[inline]
    fn skip_to(&mut self, to: usize) {
        debug_assert!(to >= self.off);
        self.off = to;
    }
}
