//! Raw access to memory shared with the device: queue rings, doorbell records and the
//! BlueFlame/doorbell MMIO window.
//!
//! This is where every pointer into device-shared memory is dereferenced. The three types
//! are created only by the driver constructors (`Sq::new`, `Cq::new`, `Srq::new`), whose
//! `# Safety` contracts are what make the `unsafe fn new` contracts below hold. After
//! construction, every method is safe: offsets are reduced modulo the ring size or
//! checked, so no call can reach outside the memory described at construction.
//!
//! Access discipline (the crate docs list the pairings):
//! * ring bytes (WQEs, SRQ WQEs, CQE bodies) are plain memory; the single-byte `op_own`
//!   of a CQE is read and written only through [`RingByte::load_acquire`] /
//!   [`RingByte::store_relaxed`] (`AtomicU8::from_ptr`) while the device may access it;
//! * a doorbell record word is only stored, atomically, with Release ([`DbRec`]);
//! * the MMIO window is only written, with volatile stores ([`Mmio`]).

use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicU32, AtomicU8, Ordering};

/// A power-of-two-sized byte ring in device-shared memory (an SQ, CQ or SRQ buffer).
/// Offsets passed to the methods are taken modulo the length; copies wrap at the end.
#[derive(Debug)]
pub(crate) struct RingMem {
    base: NonNull<u8>,
    /// Length in bytes, a power of two.
    len: usize,
    /// `(len - 1) & !1`: reduces an offset modulo `len` and to even in one `and`, for
    /// the SRQ links' `u16` accesses (computed from `len` each time, it would cost every
    /// SRQ completion and every WQE reposted; docs/PERFORMANCE.md, "Latency path").
    even_mask: usize,
}

impl RingMem {
    /// # Safety
    ///
    /// * `base` is valid for reads and writes of `len` bytes, and for atomic byte
    ///   accesses, for as long as the returned value lives;
    /// * `len` is a power of two, at least 64 (every queue ring is: one WQEBB, CQE or
    ///   two SRQ WQEs of 32 bytes at the least);
    /// * no Rust reference to those bytes exists while it lives, and nothing other than
    ///   the device (or the device model) accesses them; the device accesses them only
    ///   under the queue protocol (it reads WQEs published by a doorbell record, writes
    ///   CQEs into slots released by the consumer index, `op_own` last and atomically).
    pub(crate) const unsafe fn new(base: NonNull<u8>, len: usize) -> Self {
        Self {
            base,
            len,
            even_mask: len.wrapping_sub(1) & !1,
        }
    }

    fn at(&self, off: usize) -> *mut u8 {
        // `wrapping_add` keeps this function safe; `off & (len - 1) < len` keeps the result
        // inside the allocation described in `new`.
        self.base.as_ptr().wrapping_add(off & (self.len - 1))
    }

    /// Copies `src` to ring offset `off`, continuing at offset 0 past the end.
    ///
    /// Panics if `src` is longer than the ring (callers size-check before writing).
    #[inline]
    pub(crate) fn write(&mut self, off: usize, src: &[u8]) {
        assert!(src.len() <= self.len, "write larger than the ring");
        let off = off & (self.len - 1);
        if src.len() <= self.len - off {
            // SAFETY: `off + src.len() <= len`, so the destination lies inside the ring
            // (valid for writes per `new`); `src` is not ring memory (no Rust reference
            // to ring memory exists, `new` contract).
            unsafe {
                ptr::copy_nonoverlapping(src.as_ptr(), self.base.as_ptr().add(off), src.len())
            };
            return;
        }
        self.write_wrapping(off, src);
    }

    /// [`write`](Self::write) across the end of the ring; the caller checked
    /// `src.len() <= len` and reduced `off` below `len`.
    #[cold]
    fn write_wrapping(&mut self, off: usize, src: &[u8]) {
        assert!(src.len() <= self.len, "write larger than the ring");
        let off = off & (self.len - 1);
        let first = src.len().min(self.len - off);
        // SAFETY: `off + first <= len` and `src.len() - first <= len`, so both
        // destinations lie inside the ring (valid for writes per `new`). `src` cannot
        // overlap the ring: no Rust reference to ring memory exists (`new` contract).
        unsafe {
            ptr::copy_nonoverlapping(src.as_ptr(), self.base.as_ptr().add(off), first);
            ptr::copy_nonoverlapping(
                src.as_ptr().add(first),
                self.base.as_ptr(),
                src.len() - first,
            );
        }
    }

    /// Copies from ring offset `off` into `dst`, continuing at offset 0 past the end.
    ///
    /// Panics if `dst` is longer than the ring.
    #[inline]
    pub(crate) fn read(&self, off: usize, dst: &mut [u8]) {
        assert!(dst.len() <= self.len, "read larger than the ring");
        let off = off & (self.len - 1);
        if dst.len() <= self.len - off {
            // SAFETY: `off + dst.len() <= len`, so the source lies inside the ring (valid
            // for reads per `new`); `dst` is a Rust reference, so it is not ring memory.
            unsafe {
                ptr::copy_nonoverlapping(self.base.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
            };
            return;
        }
        self.read_wrapping(off, dst);
    }

    /// [`read`](Self::read) across the end of the ring; the caller checked
    /// `dst.len() <= len`.
    #[cold]
    fn read_wrapping(&self, off: usize, dst: &mut [u8]) {
        assert!(dst.len() <= self.len, "read larger than the ring");
        let off = off & (self.len - 1);
        let first = dst.len().min(self.len - off);
        // SAFETY: as in `write`, both sources lie inside the ring (valid for reads), and
        // `dst` is a Rust reference, so it is not ring memory.
        unsafe {
            ptr::copy_nonoverlapping(self.base.as_ptr().add(off), dst.as_mut_ptr(), first);
            ptr::copy_nonoverlapping(
                self.base.as_ptr(),
                dst.as_mut_ptr().add(first),
                dst.len() - first,
            );
        }
    }

    /// Reads `N` bytes at `off` (wrapping).
    #[inline]
    pub(crate) fn read_array<const N: usize>(&self, off: usize) -> [u8; N] {
        let mut a = [0u8; N];
        self.read(off, &mut a);
        a
    }

    /// The big-endian `u16` at ring offset `off` (taken modulo the length), which is
    /// even: an even offset below a power-of-two length of at least 64 (`new`) leaves
    /// both bytes inside the ring, so, unlike [`read_array`](Self::read_array), there is
    /// no wrap to test (an SRQ WQE's link, read once per WQE reposted).
    #[inline]
    pub(crate) fn load_u16_be(&self, off: usize) -> u16 {
        let off = self.even_u16_off(off);
        // SAFETY: `off + 2 <= len` (`even_u16_off`), so both bytes lie inside the ring
        // (valid for reads per `new`); `read_unaligned` needs no alignment.
        u16::from_be(unsafe { self.base.as_ptr().add(off).cast::<u16>().read_unaligned() })
    }

    /// Stores `v` big-endian at ring offset `off` (taken modulo the length), which is
    /// even; see [`load_u16_be`](Self::load_u16_be).
    #[inline]
    pub(crate) fn store_u16_be(&mut self, off: usize, v: u16) {
        let off = self.even_u16_off(off);
        // SAFETY: `off + 2 <= len` (`even_u16_off`), so both bytes lie inside the ring
        // (valid for writes per `new`); `write_unaligned` needs no alignment.
        unsafe {
            self.base
                .as_ptr()
                .add(off)
                .cast::<u16>()
                .write_unaligned(v.to_be())
        };
    }

    /// `off` reduced modulo the length, for a 2-byte access at an even offset: then
    /// `off + 2 <= len`, as `len` is a power of two of at least 64 (`new`; a test of it
    /// here would cost every SRQ completion and repost; docs/PERFORMANCE.md, "Latency
    /// path").
    #[inline(always)]
    fn even_u16_off(&self, off: usize) -> usize {
        debug_assert!(off.is_multiple_of(2), "odd u16 offset {off}");
        debug_assert!(self.len >= 64, "a ring shorter than `new` allows");
        // Clearing bit 0 keeps a (contract-breaking) odd offset inside the ring too.
        off & self.even_mask
    }

    /// A handle on the byte at `off` (taken modulo the length) that loads it without
    /// masking the offset again: a poller keeps the one it tests on every poll.
    #[inline]
    pub(crate) fn byte(&self, off: usize) -> RingByte {
        // `at` reduces the offset into the ring, so the pointer is in bounds.
        RingByte(NonNull::new(self.at(off)).unwrap_or(self.base))
    }

    /// The `len` bytes at ring offset `off` (taken modulo the length) as one slice, or
    /// `None` when they run past the end of the ring.
    ///
    /// # Safety
    ///
    /// For as long as the returned slice lives, the device must not access these bytes:
    /// the caller owns them under the queue protocol (for an SQ: WQE building blocks
    /// past the producer index, which no doorbell record has published yet).
    #[inline]
    pub(crate) unsafe fn span_mut(&mut self, off: usize, len: usize) -> Option<&mut [u8]> {
        let off = off & (self.len - 1);
        if len > self.len - off {
            return None;
        }
        // SAFETY: `off + len <= self.len`, so the span lies inside the ring, valid for
        // reads and writes (`new` contract); `&mut self` excludes every other Rust access
        // through this value, and the caller guarantees the device leaves the bytes alone
        // while the slice lives.
        Some(unsafe { core::slice::from_raw_parts_mut(self.base.as_ptr().add(off), len) })
    }
}

/// One byte of a [`RingMem`], from [`RingMem::byte`]. Valid for as long as the ring it
/// came from: a driver keeps both in the same struct and never lets the handle out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RingByte(NonNull<u8>);

impl RingByte {
    /// The handle on the byte `step` bytes further on, without reducing the offset
    /// modulo the ring again (a CQ poller's step to the next slot within a lap).
    ///
    /// # Safety
    ///
    /// That byte lies inside the same ring.
    #[inline(always)]
    pub(crate) unsafe fn forward(self, step: usize) -> Self {
        // SAFETY: the caller guarantees the result is inside the ring this byte is in,
        // one allocation (`RingMem::new`).
        Self(unsafe { self.0.add(step) })
    }

    /// The 64 bytes that end with this one (a CQE whose `op_own` this is).
    ///
    /// # Safety
    ///
    /// The 63 bytes before this one lie inside the same ring, and for as long as the
    /// returned reference lives (`'a` outlives neither the ring nor the caller's
    /// ownership of the bytes) the device does not write them: the caller owns the slot
    /// under the queue protocol (for a CQE: its owner byte was seen with Acquire, and
    /// the consumer index that would hand it back is not advanced while it lives).
    #[inline(always)]
    pub(crate) unsafe fn block64_ending<'a>(self) -> &'a [u8; 64] {
        // SAFETY: `[self - 63, self]` lies inside the ring (caller), which is valid for
        // reads (`RingMem::new`); `[u8; 64]` has alignment 1; the caller guarantees no
        // write to the bytes while the reference lives.
        unsafe { &*self.0.as_ptr().sub(63).cast::<[u8; 64]>() }
    }

    /// Atomic Acquire load (of a CQE's `op_own`).
    #[inline]
    pub(crate) fn load_acquire(self) -> u8 {
        // SAFETY: the pointer came from `RingMem::at`, so it lies inside a ring that is
        // valid for atomic byte accesses for as long as it lives (`RingMem::new`
        // contract), and the ring outlives the handle (type docs). AtomicU8 has
        // alignment 1; other accesses to this byte while the device may write it are
        // atomic too (this module is the only accessor).
        unsafe { AtomicU8::from_ptr(self.0.as_ptr()) }.load(Ordering::Acquire)
    }

    /// Atomic Relaxed store (stamping a CQE's `op_own` INVALID: every slot of a fresh
    /// CQ, and each CQE as it is taken). The caller orders it before the store that
    /// hands the byte to the device.
    #[inline]
    pub(crate) fn store_relaxed(self, v: u8) {
        // SAFETY: as in `load_acquire`: inside a ring valid for atomic byte accesses
        // that outlives the handle; other accesses to the byte while the device may
        // write it are atomic.
        unsafe { AtomicU8::from_ptr(self.0.as_ptr()) }.store(v, Ordering::Relaxed)
    }
}

/// One 32-bit big-endian doorbell-record word (SQ `[SND_DBR]`, CQ `[SET_CI]`, SRQ).
#[derive(Debug)]
pub(crate) struct DbRec {
    word: NonNull<u32>,
}

impl DbRec {
    /// # Safety
    ///
    /// `word` is 4-byte aligned and valid for atomic 32-bit accesses for as long as the
    /// returned value lives; every other access to it (the device model's) is atomic; no
    /// other software writes it.
    pub(crate) const unsafe fn new(word: NonNull<u32>) -> Self {
        Self { word }
    }

    /// Stores `value` as big-endian with Release ordering. The caller names the pairing.
    pub(crate) fn store_be_release(&mut self, value: u32) {
        // SAFETY: aligned and valid for atomic accesses, all concurrent accesses atomic
        // (`new` contract).
        unsafe { AtomicU32::from_ptr(self.word.as_ptr()) }.store(value.to_be(), Ordering::Release);
    }
}

/// The BlueFlame / doorbell register window of a QP: write-only, volatile.
#[derive(Debug)]
pub(crate) struct Mmio {
    base: NonNull<u8>,
    /// Bytes writable from `base`, a multiple of 8.
    len: usize,
}

impl Mmio {
    /// # Safety
    ///
    /// `base` is 8-byte aligned and valid for volatile 8-byte writes of `len` bytes
    /// (a UAR/BlueFlame mapping, or, for a software device, memory it reads only after
    /// synchronising with this thread by other means) for as long as the value lives.
    pub(crate) const unsafe fn new(base: NonNull<u8>, len: usize) -> Self {
        Self { base, len }
    }

    /// Volatile 8-byte store of `bytes` (memory order preserved) at `off`.
    ///
    /// Panics if `off` is not 8-aligned or `off + 8` exceeds the window.
    pub(crate) fn write8(&mut self, off: usize, bytes: [u8; 8]) {
        assert!(
            off.is_multiple_of(8) && off + 8 <= self.len,
            "doorbell write outside the window"
        );
        // SAFETY: in bounds and 8-aligned (base is 8-aligned per `new`), valid for
        // volatile writes. `from_ne_bytes` keeps the in-memory byte order, as
        // `mmio_write64_be(reg, *(__be64 *)ctrl)` does.
        unsafe {
            ptr::write_volatile(
                self.base.as_ptr().add(off).cast::<u64>(),
                u64::from_ne_bytes(bytes),
            )
        };
    }

    /// Copies a 64-byte block to `off` with one 64-byte store: NEON `ld1`/`st1` of four
    /// 16-byte registers, as rdma-core's `mmio_memcpy_x64` does on Arm, so the
    /// write-combining buffer sees the chunk whole.
    ///
    /// Panics if `off` is not 8-aligned or `off + 64` exceeds the window.
    #[cfg(target_arch = "aarch64")]
    pub(crate) fn write_block64(&mut self, off: usize, block: &[u8; 64]) {
        assert!(
            off.is_multiple_of(8) && off + 64 <= self.len,
            "BlueFlame write outside the window"
        );
        // SAFETY: `off + 64` is in the window (checked), which `new`'s contract makes
        // valid for writes; `block` is 64 readable bytes. The asm reads only `block`,
        // writes only the 64 register bytes, and clobbers only v0–v3 (declared); an asm
        // block is never elided or merged, so the store is as volatile as `write8`'s.
        unsafe {
            core::arch::asm!(
                "ld1 {{v0.16b, v1.16b, v2.16b, v3.16b}}, [{src}]",
                "st1 {{v0.16b, v1.16b, v2.16b, v3.16b}}, [{dst}]",
                src = in(reg) block.as_ptr(),
                dst = in(reg) self.base.as_ptr().add(off),
                out("v0") _,
                out("v1") _,
                out("v2") _,
                out("v3") _,
                options(nostack, preserves_flags),
            );
        }
    }

    /// Copies a 64-byte block to `off` as eight ascending 8-byte volatile stores
    /// (`mmio_memcpy_x64` on x86: the write-combining buffer gathers them).
    #[cfg(not(target_arch = "aarch64"))]
    pub(crate) fn write_block64(&mut self, off: usize, block: &[u8; 64]) {
        for (i, chunk) in block.chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            self.write8(off + i * 8, b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64-byte ring over a local buffer (the smallest `new` allows).
    fn ring(buf: &mut [u8; 64]) -> RingMem {
        // SAFETY: `buf` is valid for reads, writes and atomic byte accesses for the whole
        // test, which reaches it only through the ring; 64 is a power of two.
        unsafe { RingMem::new(NonNull::from(buf).cast(), 64) }
    }

    /// No driver reads across the end today (every read is inside one WQEBB), so the
    /// wrapping copies are pinned here: bytes written across the end land at the end and
    /// at offset 0, and read back the same way, from any offset and any lap; and neither
    /// copy touches a byte past its span (the ring's other bytes, or the caller's buffer).
    #[test]
    fn copies_across_the_end_continue_at_offset_0() {
        let mut buf = [0u8; 64];
        let mut r = ring(&mut buf);
        let src: [u8; 10] = core::array::from_fn(|i| 0xa0 + i as u8);
        for off in [55, 57, 63, 64 + 59, 1 << 20 | 61] {
            let mut before = [0u8; 64];
            r.read(0, &mut before);
            r.write(off, &src);
            let start = off & 63;
            let wrapped = 10 - (64 - start);
            let mut after = [0u8; 64];
            r.read(0, &mut after);
            assert_eq!(after[start..], src[..64 - start], "offset {off}: the end");
            assert_eq!(after[..wrapped], src[64 - start..], "offset {off}: 0");
            assert_eq!(
                after[wrapped..start],
                before[wrapped..start],
                "offset {off}: the rest"
            );
            // Read back into the front of a larger buffer whose tail must stay as it was.
            let mut guarded = [0xee_u8; 32];
            r.read(off, &mut guarded[..10]);
            assert_eq!(guarded[..10], src, "offset {off}");
            assert!(
                guarded[10..].iter().all(|&b| b == 0xee),
                "offset {off}: past dst"
            );
            assert_eq!(r.read_array::<1>(start), [0xa0], "offset {off}");
            assert_eq!(r.read_array::<1>(0), [src[64 - start]], "offset {off}");
        }
    }
}
