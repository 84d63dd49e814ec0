//! Test memory standing in for device-shared buffers: heap allocations used only through
//! raw pointers (so that the driver's raw accesses and the test's never alias a Rust
//! reference), read back with plain or atomic loads; and test data patterns. Also
//! included by path in core-nostd's copyrpc test rig.

#![allow(dead_code)]

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

/// A zeroed, 4 KiB-aligned heap buffer (so 64-aligned for every queue placed at its
/// start).
pub struct DmaBuf {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: plain heap memory; tests share it with a producer thread through atomics.
unsafe impl Send for DmaBuf {}
// SAFETY: as above; all cross-thread accesses in the tests are ordered by atomics.
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    pub fn new(len: usize) -> Self {
        let layout = Layout::from_size_align(len.max(64), 4096).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        Self { ptr, layout }
    }

    pub fn filled(len: usize, byte: u8) -> Self {
        let b = Self::new(len);
        b.write(0, &vec![byte; len]);
        b
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Byte `off` (at most the length), as a raw pointer.
    pub fn at(&self, off: usize) -> *mut u8 {
        assert!(off <= self.len());
        self.ptr.wrapping_add(off)
    }

    pub fn ptr32(&self) -> *mut u32 {
        self.ptr.cast()
    }

    pub fn len(&self) -> usize {
        self.layout.size()
    }

    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.len());
        let mut v = vec![0u8; len];
        // SAFETY: in bounds; no reference to the buffer exists.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), v.as_mut_ptr(), len) };
        v
    }

    pub fn write(&self, off: usize, bytes: &[u8]) {
        assert!(off + bytes.len() <= self.len());
        // SAFETY: in bounds; no reference to the buffer exists.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(off), bytes.len()) };
    }

    /// Big-endian value of 32-bit word `i`, loaded atomically (Acquire), as the device
    /// model reads a doorbell record.
    pub fn be32(&self, i: usize) -> u32 {
        assert!((i + 1) * 4 <= self.len());
        // SAFETY: aligned (64-aligned base), in bounds; accessed atomically by the driver.
        u32::from_be(unsafe { AtomicU32::from_ptr(self.ptr32().add(i)) }.load(Ordering::Acquire))
    }

    /// Atomic Release store of one byte (a CQE `op_own`).
    pub fn store_u8_release(&self, off: usize, v: u8) {
        assert!(off < self.len());
        // SAFETY: in bounds; AtomicU8 has alignment 1.
        unsafe { AtomicU8::from_ptr(self.ptr.add(off)) }.store(v, Ordering::Release);
    }

    /// Atomic Relaxed load of one byte.
    pub fn load_u8(&self, off: usize) -> u8 {
        assert!(off < self.len());
        // SAFETY: in bounds; AtomicU8 has alignment 1.
        unsafe { AtomicU8::from_ptr(self.ptr.add(off)) }.load(Ordering::Relaxed)
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

/// A deterministic byte pattern (xorshift).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Bytes of a hex string like "00 12 34 09" (whitespace ignored).
pub fn hex(s: &str) -> Vec<u8> {
    let digits: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    assert!(digits.len().is_multiple_of(2));
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap())
        .collect()
}
