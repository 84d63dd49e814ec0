//! The write cursor of a WQE, over one of two destinations: a contiguous span, or the
//! ring itself when the WQE runs past its end.

use zerocopy::IntoBytes;

use crate::layout::SEND_WQE_DS;
use crate::mem::RingMem;

/// Where a WQE's bytes land: `write(at, bytes)` copies `bytes` to WQE offset `at`.
pub(super) trait WqeDest {
    fn write(&mut self, at: usize, bytes: &[u8]);
}

/// The common case: the whole WQE lies before the end of the ring, so it is one slice
/// and each write is a plain bounds-checked copy.
pub(super) struct Span<'r>(pub(super) &'r mut [u8]);

impl WqeDest for Span<'_> {
    #[inline]
    fn write(&mut self, at: usize, bytes: &[u8]) {
        self.0[at..][..bytes.len()].copy_from_slice(bytes);
    }
}

/// A WQE that runs past the end of the ring: the one place that knows the ring wraps.
pub(super) struct Wrapping<'r> {
    pub(super) ring: &'r mut RingMem,
    /// Ring byte offset of the WQE's first byte (64-aligned).
    pub(super) start: usize,
}

impl WqeDest for Wrapping<'_> {
    /// Crosses the end of the ring transparently (only inline payload can straddle it,
    /// because segment headers start 16-aligned in a 64-aligned ring).
    #[inline]
    fn write(&mut self, at: usize, bytes: &[u8]) {
        self.ring.write(self.start + at, bytes);
    }
}

/// A write position inside one WQE.
pub(super) struct WqeCursor<D> {
    dest: D,
    /// Bytes written so far; segments start at multiples of 16.
    pub(super) off: usize,
}

impl<D: WqeDest> WqeCursor<D> {
    #[inline]
    pub(super) fn new(dest: D) -> Self {
        Self { dest, off: 0 }
    }

    /// Appends bytes.
    #[inline]
    pub(super) fn put(&mut self, bytes: &[u8]) {
        self.dest.write(self.off, bytes);
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
        self.dest.write(at, &[0u8; SEND_WQE_DS]);
    }

    /// Moves the cursor forward to `to` over bytes already written.
    #[inline]
    pub(super) fn skip_to(&mut self, to: usize) {
        debug_assert!(to >= self.off);
        self.off = to;
    }
}
