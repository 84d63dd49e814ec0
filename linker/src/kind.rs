//! The magic word that starts every handle of the C library: which kind it is, and
//! whether its poll is running. While a poll runs, the word carries [`polling`]'s mark,
//! so a call on the same handle from inside the poll's callback is refused with
//! `COPYRPC_E_BUSY` instead of aliasing the state the poll holds.

use crate::status::{COPYRPC_E_BUSY, COPYRPC_E_WRONG_KIND};

/// Set while the handle's poll runs. Every magic is eight ASCII bytes, so the top bit
/// is otherwise clear.
const POLLING: u64 = 1 << 63;

/// The word of a handle of kind `magic` whose poll is running.
pub const fn polling(magic: u64) -> u64 {
    magic | POLLING
}

/// The code for a handle whose word is `found` where kind `magic` was expected.
#[cold]
pub fn refused(found: u64, magic: u64) -> i32 {
    if found == polling(magic) {
        COPYRPC_E_BUSY
    } else {
        COPYRPC_E_WRONG_KIND
    }
}
