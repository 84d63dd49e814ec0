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
