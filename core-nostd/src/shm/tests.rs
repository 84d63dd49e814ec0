//! What the shm protocols' unit tests share: heap memory standing in for a mapping.
#![allow(unsafe_code)]

use std::vec::Vec;

#[repr(C, align(128))]
#[derive(Clone, Copy)]
struct Block([u8; 128]);

/// Zeroed, 128-aligned memory (the stricter of the layouts' alignments) standing in for
/// a shm mapping, with at least one spare block past the length asked for.
pub(crate) struct ZeroedMem(Vec<Block>);

impl ZeroedMem {
    /// At least `len` zero bytes.
    pub(crate) fn new(len: usize) -> Self {
        Self(std::vec![Block([0; 128]); len.div_ceil(128) + 1])
    }

    /// The base.
    pub(crate) fn ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr().cast()
    }

    /// Bytes available from [`ptr`](Self::ptr).
    pub(crate) fn len(&self) -> usize {
        self.0.len() * 128
    }
}
