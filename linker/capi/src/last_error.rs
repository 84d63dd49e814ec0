//! The cause of the last `COPYRPC_E_SYSTEM` on this thread, as text: the host's error
//! with its context (errno text, region names, what was waited for).

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};

use copyrpc_linker::status::COPYRPC_E_SYSTEM;

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `why` and returns `COPYRPC_E_SYSTEM`.
pub(crate) fn system(why: impl Display) -> i32 {
    let text = why.to_string().replace('\0', " ");
    let c = CString::new(text).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
    COPYRPC_E_SYSTEM
}

/// Runs a set-up step; a panic becomes `COPYRPC_E_SYSTEM` with its message instead of
/// unwinding into C (which would abort).
pub(crate) fn guard(f: impl FnOnce() -> i32) -> i32 {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        system(format_args!("internal error: {msg}"))
    })
}

/// The cause of the last `COPYRPC_E_SYSTEM` returned on this thread ("" if none);
/// valid until the next one.
#[unsafe(no_mangle)]
pub extern "C" fn copyrpc_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}
