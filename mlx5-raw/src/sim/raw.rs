//! The model's only door to caller memory: [`Raw`], a checked byte range.
//!
//! Every pointer the device model dereferences — queue rings, doorbell records, CQEs,
//! registered regions, link queues — is a `Raw` built by an `unsafe` constructor in
//! `device.rs`/`link.rs` whose contract the caller of the public `unsafe fn` guarantees.
//! After construction every method is safe: offsets are bounds-checked (or reduced
//! modulo a power-of-two ring length), so no call reaches outside the range given at
//! construction. That is the "never touches memory outside a registered region" property
//! in one place: a registered region is one `Raw`, and data moves only through these
//! methods.
//!
//! Access discipline (the orderings are chosen by the callers, who name the pairing):
//! * hand-over words (doorbell records, link-queue indices, a CQE's `op_own`) are
//!   accessed only atomically ([`Raw::load_u32`], [`Raw::store_u32`], [`Raw::store_u8`],
//!   [`Raw::load_u64`], [`Raw::store_u64`]);
//! * everything else (WQE bytes, SRQ WQEs, CQE bodies, payload) is plain memory
//!   published by those words; copies use `ptr::copy` (memmove), so overlapping
//!   registrations cannot cause undefined behaviour in the copy itself;
//! * except the source of an RDMA READ: no protocol hands it over (a peer may READ a
//!   word its owner is storing to, as copyrpc's exported consumer position is), so it is
//!   read with relaxed atomic loads ([`Raw::copy_shared_to`]). A NIC's DMA read has no
//!   such concern; the model must not add undefined behaviour where the hardware has
//!   none.
//!
//! Pointers derived here always come from the base pointer given at construction
//! (`wrapping_add` of an offset then a bounds check), never from an integer: addresses
//! that arrive in WQEs and packets are translated to offsets by the MR table first. So
//! the model is clean under `-Zmiri-strict-provenance`.

use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

/// A byte range of caller memory the device model may access. `Copy`: it is an address
/// range, not an owner; the `unsafe` constructor's contract covers every copy.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Raw {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: a `Raw` is an address range whose validity does not depend on the thread: the
// contract of `Raw::new` (memory valid while the device holds it, every concurrent access
// by others follows the queue protocols, whose hand-over words are atomics) holds for
// whichever thread runs the device. Moving the device to an engine thread moves its
// `Raw`s with it.
unsafe impl Send for Raw {}

impl Raw {
    /// # Safety
    ///
    /// For as long as the device model holds this value (or any copy or sub-range of it):
    /// * `base` is valid for reads and writes of `len` bytes, and for atomic accesses at
    ///   the offsets the model accesses atomically;
    /// * no Rust reference to those bytes is alive while the model may access them, and
    ///   every other party (the driver, another process's device) accesses them only
    ///   under the protocol of the object they belong to: hand-over words atomically,
    ///   plain bytes only when those words say the bytes are theirs.
    pub(crate) const unsafe fn new(base: NonNull<u8>, len: usize) -> Self {
        Self { base, len }
    }

    /// Length in bytes.
    pub(crate) const fn len(&self) -> usize {
        self.len
    }

    /// The address of the first byte (for alignment checks and identity, never turned
    /// back into a pointer).
    pub(crate) fn addr(&self) -> usize {
        self.base.as_ptr().addr()
    }

    /// Panics unless `[off, off + len)` lies inside the range.
    fn check(&self, off: usize, len: usize) {
        assert!(
            off <= self.len && len <= self.len - off,
            "model access [{off}, +{len}) outside a {}-byte range",
            self.len
        );
    }

    /// Pointer to byte `off` (`off <= len`, checked by the caller).
    fn at(&self, off: usize) -> *mut u8 {
        // `wrapping_add` keeps this function safe; callers check `off <= len`, so the
        // result stays inside (or one past) the range described in `new`.
        self.base.as_ptr().wrapping_add(off)
    }

    /// The sub-range `[off, off + len)`. Panics if it does not fit.
    pub(crate) fn sub(&self, off: usize, len: usize) -> Raw {
        self.check(off, len);
        Raw {
            // SAFETY: `off <= self.len` (checked), so the pointer is inside the range or
            // one past it, derived from a non-null base without overflow.
            base: unsafe { NonNull::new_unchecked(self.at(off)) },
            len,
        }
    }

    /// Copies `dst.len()` bytes from offset `off`. Panics if out of range.
    pub(crate) fn read(&self, off: usize, dst: &mut [u8]) {
        self.check(off, dst.len());
        // SAFETY: the source lies inside the range (checked), valid for reads (`new`);
        // `dst` is a Rust reference, so it is not memory of a `Raw` (no references to
        // that exist while the model runs).
        unsafe { ptr::copy_nonoverlapping(self.at(off), dst.as_mut_ptr(), dst.len()) };
    }

    /// Copies `src` to offset `off`. Panics if out of range.
    pub(crate) fn write(&self, off: usize, src: &[u8]) {
        self.check(off, src.len());
        // SAFETY: the destination lies inside the range (checked), valid for writes
        // (`new`); `src` is a Rust reference, so it cannot overlap model memory.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), self.at(off), src.len()) };
    }

    /// Copies `len` bytes from `self[off..]` to `dst[dst_off..]`. Panics if either range
    /// does not fit.
    pub(crate) fn copy_to(&self, off: usize, dst: &Raw, dst_off: usize, len: usize) {
        self.check(off, len);
        dst.check(dst_off, len);
        // SAFETY: both ranges are inside their `Raw`s (checked), valid for reads resp.
        // writes (`new`). `ptr::copy` allows the two to overlap.
        unsafe { ptr::copy(self.at(off), dst.at(dst_off), len) };
    }

    /// Copies `len` bytes from `self[off..]` to `dst[dst_off..]` reading the source with
    /// relaxed atomic loads: 8-aligned words as `AtomicU64` (so an owner's 8-byte atomic
    /// stores to the same word are not a data race), the rest byte by byte. `dst` must
    /// be memory the model owns now (a link slot). Panics if either range does not fit.
    pub(crate) fn copy_shared_to(&self, off: usize, dst: &Raw, dst_off: usize, len: usize) {
        self.check(off, len);
        dst.check(dst_off, len);
        let mut i = 0;
        while i < len {
            let src = self.at(off + i);
            let word = src.addr().is_multiple_of(8) && len - i >= 8;
            if word {
                // SAFETY: in range (checked), 8-aligned (tested), valid for atomic access
                // (`new`); the destination is in `dst` (checked) and the model's own now.
                unsafe {
                    let v = AtomicU64::from_ptr(src.cast()).load(Ordering::Relaxed);
                    ptr::write_unaligned(dst.at(dst_off + i).cast::<u64>(), v);
                }
                i += 8;
            } else {
                // SAFETY: as above, one byte (`AtomicU8` has alignment 1).
                unsafe {
                    let v = AtomicU8::from_ptr(src).load(Ordering::Relaxed);
                    dst.at(dst_off + i).write(v);
                }
                i += 1;
            }
        }
    }

    /// Reads from a power-of-two ring at `off` (taken modulo the length), continuing at
    /// 0 past the end. Panics if `dst` is longer than the ring.
    pub(crate) fn ring_read(&self, off: usize, dst: &mut [u8]) {
        debug_assert!(self.len.is_power_of_two());
        assert!(dst.len() <= self.len, "ring read larger than the ring");
        let off = off & (self.len - 1);
        let first = dst.len().min(self.len - off);
        let (a, b) = dst.split_at_mut(first);
        self.read(off, a);
        self.read(0, b);
    }

    /// Copies `len` bytes from a power-of-two ring at `off` (modulo the length, wrapping)
    /// into `dst[dst_off..]`. Panics if `len` exceeds the ring or `dst` is too short.
    pub(crate) fn ring_copy_to(&self, off: usize, dst: &Raw, dst_off: usize, len: usize) {
        debug_assert!(self.len.is_power_of_two());
        assert!(len <= self.len, "ring copy larger than the ring");
        let off = off & (self.len - 1);
        let first = len.min(self.len - off);
        self.copy_to(off, dst, dst_off, first);
        self.copy_to(0, dst, dst_off + first, len - first);
    }

    /// Panics unless `[off, off + size)` is in range and `size`-aligned in memory.
    fn check_atomic(&self, off: usize, size: usize) {
        self.check(off, size);
        assert!(
            self.addr().wrapping_add(off).is_multiple_of(size),
            "misaligned atomic access at offset {off}"
        );
    }

    /// Atomic load of the native-endian `u32` at `off` (4-aligned).
    pub(crate) fn load_u32(&self, off: usize, order: Ordering) -> u32 {
        self.check_atomic(off, 4);
        // SAFETY: in range and 4-aligned (checked), valid for atomic accesses (`new`);
        // every concurrent access to a hand-over word is atomic (`new` contract).
        unsafe { AtomicU32::from_ptr(self.at(off).cast()) }.load(order)
    }

    /// Atomic store of a native-endian `u32` at `off` (4-aligned).
    pub(crate) fn store_u32(&self, off: usize, v: u32, order: Ordering) {
        self.check_atomic(off, 4);
        // SAFETY: as in `load_u32`.
        unsafe { AtomicU32::from_ptr(self.at(off).cast()) }.store(v, order);
    }

    /// Atomic load of the native-endian `u64` at `off` (8-aligned).
    pub(crate) fn load_u64(&self, off: usize, order: Ordering) -> u64 {
        self.check_atomic(off, 8);
        // SAFETY: as in `load_u32`, 8-aligned.
        unsafe { AtomicU64::from_ptr(self.at(off).cast()) }.load(order)
    }

    /// Atomic store of a native-endian `u64` at `off` (8-aligned).
    pub(crate) fn store_u64(&self, off: usize, v: u64, order: Ordering) {
        self.check_atomic(off, 8);
        // SAFETY: as in `load_u32`, 8-aligned.
        unsafe { AtomicU64::from_ptr(self.at(off).cast()) }.store(v, order);
    }

    /// Atomic store of the byte at `off` (a CQE `op_own`).
    pub(crate) fn store_u8(&self, off: usize, v: u8, order: Ordering) {
        self.check(off, 1);
        // SAFETY: in range (checked); `AtomicU8` has alignment 1; valid for atomic
        // accesses and all concurrent accesses atomic (`new` contract).
        unsafe { AtomicU8::from_ptr(self.at(off)) }.store(v, order);
    }
}
