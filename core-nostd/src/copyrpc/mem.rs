//! Registered memory the context shares with the NIC: the one place copyrpc turns a
//! caller's address into bytes.
//!
//! A [`Region`] is a plain description (address, length, keys), safe to build and copy.
//! [`Dma`] is the checked accessor the context keeps after an `unsafe` constructor has
//! taken the caller's word that the memory stays valid; from then on every access is
//! bounds-checked, so no safe method reaches outside the region. [`Control`] wraps the
//! control region's `Dma` after checking once that both words fit and are aligned.
//!
//! Which bytes copyrpc touches while the device may too (the discipline that keeps
//! references and DMA apart):
//!
//! * send ring: copyrpc writes only between the producer and the end of the bytes it has
//!   reserved, which no posted WQE covers; the device reads only posted ranges;
//! * recv ring: copyrpc reads only between its consumer and the producer announced by
//!   immediates; the peer writes there only after the consumer has moved past (flow
//!   control), and the device placed those bytes before the CQE that announced them;
//! * control words: the exported consumer position is written atomically (the peer's
//!   READ may fetch it at any time); the READ landing word is read only after the READ's
//!   completion.
#![allow(unsafe_code)]

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::ring::RingSize;

/// A registered memory range, as `ibv_reg_mr` (or the device model's `reg_mr`)
/// describes it.
#[derive(Debug, Clone, Copy)]
pub struct Region {
    /// First byte, as a pointer in this process.
    pub addr: *mut u8,
    /// Length in bytes.
    pub len: usize,
    /// The address WQEs use for `addr` (the MR's `iova`; for a plain `ibv_reg_mr`
    /// and for the device model, `addr as u64`).
    pub va: u64,
    /// Local key of the MR holding the range.
    pub lkey: u32,
    /// Remote key of the MR holding the range.
    pub rkey: u32,
}

/// Checked access to one [`Region`]; see the module docs for who touches which bytes.
#[derive(Debug)]
pub(crate) struct Dma {
    base: NonNull<u8>,
    len: usize,
    va: u64,
    lkey: u32,
    rkey: u32,
}

impl Dma {
    /// # Safety
    ///
    /// For as long as the returned value lives, `region.addr` is valid for reads and
    /// writes of `region.len` bytes, no Rust reference to those bytes exists outside
    /// this value, and besides this value only the device accesses them, under the
    /// discipline in the module docs.
    pub(crate) unsafe fn new(region: &Region) -> Option<Self> {
        Some(Self {
            base: NonNull::new(region.addr)?,
            len: region.len,
            va: region.va,
            lkey: region.lkey,
            rkey: region.rkey,
        })
    }

    #[inline]
    pub(crate) const fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) const fn lkey(&self) -> u32 {
        self.lkey
    }

    #[inline]
    pub(crate) const fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The WQE address of byte `off`.
    #[inline]
    pub(crate) const fn va_at(&self, off: usize) -> u64 {
        self.va + off as u64
    }

    #[inline]
    fn check(&self, off: usize, len: usize) {
        assert!(
            off <= self.len && len <= self.len - off,
            "access outside the region"
        );
    }

    /// Bytes `[off, off + len)` for reading. Panics outside the region.
    #[inline]
    pub(crate) fn bytes(&self, off: usize, len: usize) -> &[u8] {
        self.check(off, len);
        // SAFETY: in bounds (checked), valid for reads (`new` contract); the device does
        // not write these bytes while the borrow of `self` lives (module docs: only
        // received, unconsumed recv-ring bytes and unposted send-ring bytes are lent).
        unsafe { core::slice::from_raw_parts(self.base.as_ptr().add(off), len) }
    }

    /// Bytes `[off, off + len)` of a ring of `size` bytes laid at the start of the
    /// region, where `off` is `pos`'s offset in the ring. Panics if the ring does not fit
    /// the region or the range runs past the ring's end.
    ///
    /// The bounds test is put in the ring's terms: a caller that has just reserved the
    /// range (`len < size.room_to_lap_end(pos)`) computes it from the ring size and
    /// position it already holds in registers, instead of reloading them to form an
    /// offset and test it against the region.
    #[inline]
    pub(crate) fn ring_bytes_mut(&mut self, size: RingSize, pos: u64, len: usize) -> &mut [u8] {
        let off = size.offset(pos);
        assert!(
            size.get() <= self.len as u64 && len as u64 <= size.room_to_lap_end(pos),
            "access outside the ring"
        );
        // SAFETY: `off + len <= size <= self.len` (asserted; `off < size` by
        // `offset`), so the range is in bounds, and valid for writes (`new` contract);
        // `&mut self` excludes every other borrow through this value, and the device
        // does not access unposted send-ring bytes (module docs).
        unsafe { core::slice::from_raw_parts_mut(self.base.as_ptr().add(off as usize), len) }
    }
}

/// The control region of an endpoint: two 8-aligned u64 words, checked once when it is
/// built, so the per-reply export of the consumer position needs no bounds check.
#[derive(Debug)]
pub(crate) struct Control {
    dma: Dma,
}

impl Control {
    /// Offset of the exported consumer position.
    pub(crate) const CONSUMER: usize = 0;
    /// Offset of the word our READ of the peer's consumer lands in.
    pub(crate) const READ: usize = 8;
    /// Bytes the region needs.
    pub(crate) const BYTES: usize = 16;

    /// `None` unless the region holds [`BYTES`](Self::BYTES) bytes at an 8-aligned
    /// address.
    pub(crate) fn new(dma: Dma) -> Option<Self> {
        (dma.len >= Self::BYTES && dma.base.as_ptr().addr().is_multiple_of(8))
            .then_some(Self { dma })
    }

    #[inline]
    pub(crate) const fn dma(&self) -> &Dma {
        &self.dma
    }

    /// The word at `off` (one of the two constants), as an atomic.
    #[inline]
    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off == Self::CONSUMER || off == Self::READ);
        let p = self.dma.base.as_ptr().wrapping_add(off & 8);
        // SAFETY: `off & 8` is 0 or 8, and `new` checked that the region holds 16 bytes
        // at an 8-aligned address, so the word is in bounds and aligned; the region is
        // valid for atomic accesses for as long as `self` lives (`Dma::new` contract).
        unsafe { AtomicU64::from_ptr(p.cast::<u64>()) }
    }

    /// Release store of the consumer position the peer READs (little-endian). The
    /// device reads the word for a peer's READ at any time, so the store is atomic;
    /// Release publishes nothing by itself but keeps the value monotone to readers.
    #[inline]
    pub(crate) fn store_consumer(&self, value: u64) {
        self.word(Self::CONSUMER)
            .store(value.to_le(), Ordering::Release);
    }

    /// Acquire load of the landing word of our READ, after its completion was polled
    /// (with Acquire), so the device's write happened before.
    #[inline]
    pub(crate) fn load_read_word(&self) -> u64 {
        u64::from_le(self.word(Self::READ).load(Ordering::Acquire))
    }
}
