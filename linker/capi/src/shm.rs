//! What delegationrpc and ipc share in C: the message type and the handle checks.

use std::ffi::{c_char, CStr};

use copyrpc_linker::kind;
use copyrpc_linker::status::{COPYRPC_E_BAD_ARG, COPYRPC_E_NULL};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// One request or response of the shared-memory protocols: 64 bytes, the C program's
/// to fill.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct copyrpc_shm_msg {
    pub words: [u64; 8],
}

/// `p` as a live handle of the kind whose magic word is `magic`.
///
/// # Safety
///
/// `p` is NULL or points at a handle of this library (any kind) or 8 readable bytes;
/// `T` starts with its `u64` magic word (`repr(C)`).
pub(crate) unsafe fn handle<'a, T>(p: *mut T, magic: u64) -> Result<&'a mut T, i32> {
    if p.is_null() {
        return Err(COPYRPC_E_NULL);
    }
    // SAFETY: caller contract: the first 8 bytes are readable.
    let word = unsafe { p.cast::<u64>().read() };
    if word != magic {
        return Err(kind::refused(word, magic));
    }
    // SAFETY: the magic says the open function built a `T` here; one thread at a time.
    Ok(unsafe { &mut *p })
}

/// Writes `value` (a handle: `repr(C)`, its magic word first) into the caller's area `mem`
/// and hands the area back through `out`.
///
/// # Safety
///
/// `mem` passed [`check_area`] for a `T`; `out` is non-NULL and writable.
pub(crate) unsafe fn place<T, O>(mem: *mut std::ffi::c_void, out: *mut *mut O, value: T) -> i32 {
    let h = mem.cast::<T>();
    // SAFETY: the area holds a `T` (checked by the caller) and is the caller's to give;
    // `out` is writable (caller contract).
    unsafe {
        h.write(value);
        out.write(h.cast());
    }
    copyrpc_linker::status::COPYRPC_OK
}

/// Closes the handle at `p` whose magic word is `magic`: clears the word first (a second
/// close is then refused as a closed handle) and drops the handle's contents in place;
/// the memory is the caller's again.
///
/// # Safety
///
/// As [`handle`].
pub(crate) unsafe fn close<T>(p: *mut T, magic: u64) -> i32 {
    // SAFETY: forwarded.
    if let Err(e) = unsafe { handle(p, magic) } {
        return e;
    }
    crate::last_error::guard(|| {
        // SAFETY: the magic says a live `T` is here; it is dropped once (the word is
        // cleared first; its own drop is a no-op for a `u64`).
        unsafe {
            p.cast::<u64>().write(0);
            std::ptr::drop_in_place(p);
        }
        copyrpc_linker::status::COPYRPC_OK
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

/// Checks a caller's memory area for a handle of `size` bytes aligned to `align`.
pub(crate) fn check_area(mem: *mut u8, len: usize, size: usize, align: usize) -> Result<(), i32> {
    use copyrpc_linker::status::{COPYRPC_E_MISALIGNED, COPYRPC_E_TOO_SMALL};
    if mem.is_null() {
        return Err(COPYRPC_E_NULL);
    }
    if len < size {
        return Err(COPYRPC_E_TOO_SMALL);
    }
    if !(mem as usize).is_multiple_of(align) {
        return Err(COPYRPC_E_MISALIGNED);
    }
    Ok(())
}
