//! The cause of the last `COPYRPC_E_SYSTEM` on this thread, as text: the host's error
//! with its context (errno text, region names, what was waited for).

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};

use copyrpc_linker::status::COPYRPC_E_SYSTEM;

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// What `copyrpc_last_error` says once the thread's storage is destroyed (in an `atexit`
/// handler, or a thread-local destructor of the C program's): no cause can be kept
/// then, and panicking instead would abort the process at its exit.
const GONE: &CStr =
    c"the cause was not kept: the thread was exiting (atexit handler or thread-local destructor)";

/// Records `why` and returns `COPYRPC_E_SYSTEM`.
pub(crate) fn system(why: impl Display) -> i32 {
    let text = why.to_string().replace('\0', " ");
    let c = CString::new(text).unwrap_or_default();
    // Dropping the cause when the storage is gone is all that is left to do: the code
    // still says what happened, and `copyrpc_last_error` then returns `GONE`.
    let _ = LAST.try_with(|l| *l.borrow_mut() = c);
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
/// valid until the next one. Called while the thread exits (from an `atexit` handler),
/// a fixed sentence saying the cause was not kept.
#[unsafe(no_mangle)]
pub extern "C" fn copyrpc_last_error() -> *const c_char {
    LAST.try_with(|l| l.borrow().as_ptr())
        .unwrap_or(GONE.as_ptr())
}
