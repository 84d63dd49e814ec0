//! What delegationrpc and ipc share in C: the message type, and the handles in caller
//! memory (placed, checked, closed).

use std::ffi::{c_char, c_void, CStr};
use std::mem::offset_of;

use copyrpc_linker::kind;
use copyrpc_linker::live::{self, Node};
use copyrpc_linker::status::{
    COPYRPC_E_BAD_ARG, COPYRPC_E_MISALIGNED, COPYRPC_E_NULL, COPYRPC_E_TOO_SMALL, COPYRPC_OK,
};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// One request or response of the shared-memory protocols: 64 bytes, the C program's
/// to fill.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct copyrpc_shm_msg {
    pub words: [u64; 8],
}

/// A shared-memory handle in the caller's memory: the magic word (first, as in every
/// handle kind), its entry in the list of live handles, and what it holds.
#[repr(C)]
pub(crate) struct Handle<T> {
    pub(crate) magic: u64,
    live: Node,
    pub(crate) inner: T,
}

const _: () = assert!(offset_of!(Handle<[u8; 64]>, live) == 8);

/// `p` as a live handle of the kind whose magic word is `magic`.
///
/// # Safety
///
/// `p` is NULL or points at a handle of this library (any kind) or 8 readable bytes;
/// a handle is used by one thread at a time.
pub(crate) unsafe fn handle<'a, T>(
    p: *mut Handle<T>,
    magic: u64,
) -> Result<&'a mut Handle<T>, i32> {
    if p.is_null() {
        return Err(COPYRPC_E_NULL);
    }
    // SAFETY: caller contract: the first 8 bytes are readable.
    let word = unsafe { p.cast::<u64>().read() };
    if word != magic {
        return Err(kind::refused(word, magic));
    }
    // SAFETY: the magic says the open function built a handle here; one thread at a time.
    Ok(unsafe { &mut *p })
}

/// An area listed for a handle of `T` being opened: taken off the list again when
/// dropped, unless [`place`](Self::place) made the handle live.
pub(crate) struct Reserved<T> {
    h: *mut Handle<T>,
}

impl<T> Reserved<T> {
    /// Checks the caller's area `mem` (`len` bytes, at least `size`, aligned to `align`)
    /// and lists it, after setting `*out` to NULL (so every refusal leaves it NULL):
    /// `COPYRPC_E_NULL`, `_TOO_SMALL`, `_MISALIGNED`, `_IN_USE` (it holds or overlaps
    /// a live handle), `_BUSY` (the list stayed locked).
    ///
    /// # Safety
    ///
    /// `mem` is writable for `len` bytes and not used otherwise until the handle's
    /// close; `out` is NULL or writable; `size` covers a `Handle<T>` and `align` its
    /// alignment.
    pub(crate) unsafe fn new<O>(
        mem: *mut c_void,
        len: usize,
        size: usize,
        align: usize,
        out: *mut *mut O,
    ) -> Result<Self, i32> {
        debug_assert!(size >= size_of::<Handle<T>>() && align >= align_of::<Handle<T>>());
        if out.is_null() {
            return Err(COPYRPC_E_NULL);
        }
        // SAFETY: non-null, writable (caller contract).
        unsafe { out.write(std::ptr::null_mut()) };
        if mem.is_null() {
            return Err(COPYRPC_E_NULL);
        }
        if len < size {
            return Err(COPYRPC_E_TOO_SMALL);
        }
        if !(mem as usize).is_multiple_of(align) {
            return Err(COPYRPC_E_MISALIGNED);
        }
        let h = mem.cast::<Handle<T>>();
        // SAFETY: the area holds a handle (checked above) and stays its own until the
        // close (caller contract).
        unsafe { live::enlist(&raw mut (*h).live, mem as usize, size)? };
        Ok(Self { h })
    }

    /// Writes the handle (`inner`, then the magic word last) and hands it back through
    /// `out`.
    ///
    /// # Safety
    ///
    /// `out` is non-NULL and writable.
    pub(crate) unsafe fn place<O>(self, out: *mut *mut O, magic: u64, inner: T) -> i32 {
        let h = self.h;
        std::mem::forget(self);
        // SAFETY: the area is listed for this handle (`new`); `out` is writable.
        unsafe {
            (&raw mut (*h).inner).write(inner);
            (&raw mut (*h).magic).write(magic);
            out.write(h.cast());
        }
        COPYRPC_OK
    }
}

impl<T> Drop for Reserved<T> {
    fn drop(&mut self) {
        // SAFETY: listed by `new`, and nothing was placed.
        unsafe { live::delist(&raw mut (*self.h).live) };
    }
}

/// Closes the handle at `p` whose magic word is `magic`: clears the word first (a second
/// close is then refused as a closed handle), drops what it holds in place and takes it
/// off the list; the memory is the caller's again.
///
/// # Safety
///
/// As [`handle`].
pub(crate) unsafe fn close<T>(p: *mut Handle<T>, magic: u64) -> i32 {
    // SAFETY: forwarded.
    if let Err(e) = unsafe { handle(p, magic) } {
        return e;
    }
    crate::last_error::guard(|| {
        // SAFETY: the magic says a live handle is here; what it holds is dropped once
        // (the word is cleared first). Delisted before the drop, which may panic.
        unsafe {
            (&raw mut (*p).magic).write(0);
            live::delist(&raw mut (*p).live);
            std::ptr::drop_in_place(&raw mut (*p).inner);
        }
        COPYRPC_OK
    })
}

/// A region name from C: NUL-terminated UTF-8 starting with '/'.
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string.
pub(crate) unsafe fn name<'a>(name: *const c_char) -> Result<&'a str, i32> {
    if name.is_null() {
        return Err(COPYRPC_E_NULL);
    }
    // SAFETY: caller contract.
    let s = unsafe { CStr::from_ptr(name) };
    s.to_str()
        .ok()
        .filter(|s| s.starts_with('/') && s.len() > 1)
        .ok_or(COPYRPC_E_BAD_ARG)
}
