//! The magic word that starts every handle of the C library: which kind it is, and
//! whether its poll is running. While a poll runs, the word carries [`polling`]'s mark,
//! so a call on the same handle from inside the poll's callback is refused with
//! `COPYRPC_E_BUSY` instead of aliasing the state the poll holds. A handle whose
//! callback unwound out of its poll (a C++ exception) and whose state that left
//! unfinished carries [`unwound`]'s mark: every call but its end is refused with
//! `COPYRPC_E_UNWOUND`.

use crate::status::{COPYRPC_E_BUSY, COPYRPC_E_UNWOUND, COPYRPC_E_WRONG_KIND};

/// Set while the handle's poll runs. Every magic is eight ASCII bytes, so the top two
/// bits are otherwise clear.
const POLLING: u64 = 1 << 63;
/// Set once a callback unwound out of the handle's poll.
const UNWOUND: u64 = 1 << 62;

/// The word of a handle of kind `magic` whose poll is running.
pub const fn polling(magic: u64) -> u64 {
    magic | POLLING
}

/// The word of a handle of kind `magic` that a callback unwound out of.
pub const fn unwound(magic: u64) -> u64 {
    magic | UNWOUND
}

/// The code for a handle whose word is `found` where kind `magic` was expected.
#[cold]
pub fn refused(found: u64, magic: u64) -> i32 {
    if found == polling(magic) {
        COPYRPC_E_BUSY
    } else if found == unwound(magic) {
        COPYRPC_E_UNWOUND
    } else {
        COPYRPC_E_WRONG_KIND
    }
}

/// Writes a handle's word when a poll is left: `magic` again if it returned, or, run
/// by drop while a callback unwinds out of the poll, `on_unwind` (the handle's usable
/// word when the poll's state is whole at every callback, else [`unwound`]'s).
#[derive(Debug)]
pub struct Restore {
    word: *mut u64,
    on_unwind: u64,
}

impl Restore {
    /// Marks the word at `word` polling for kind `magic`; the guard restores it.
    ///
    /// # Safety
    ///
    /// `word` is a live handle's word, used by this thread, and stays valid until the
    /// guard is finished or dropped.
    #[inline(always)]
    pub unsafe fn mark(word: *mut u64, magic: u64, on_unwind: u64) -> Self {
        // SAFETY: caller contract.
        unsafe { word.write(polling(magic)) };
        Self { word, on_unwind }
    }

    /// The poll returned: the word is `magic` again.
    #[inline(always)]
    pub fn finish(self, magic: u64) {
        // SAFETY: `mark`'s contract.
        unsafe { self.word.write(magic) };
        core::mem::forget(self);
    }
}

impl Drop for Restore {
    // Runs only when a callback unwinds out of the poll (`finish` forgets the guard).
    #[cold]
    fn drop(&mut self) {
        // SAFETY: `mark`'s contract.
        unsafe { self.word.write(self.on_unwind) };
    }
}
