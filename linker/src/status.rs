//! The integer codes every C function returns: 0 or a positive count for success, a
//! negative `COPYRPC_E_*` for a refusal. Codes -1..=-4 clear up by polling (retry);
//! the rest are permanent for the arguments given.

use core::ffi::{c_char, CStr};
use core::sync::atomic::{AtomicPtr, Ordering};

use copyrpc_core::copyrpc::Error;

/// Success.
pub const COPYRPC_OK: i32 = 0;
/// The peer's recv ring has no room now: poll and retry.
pub const COPYRPC_E_RING_FULL: i32 = -1;
/// The peer has not granted credit for the response allowance yet: poll and retry.
pub const COPYRPC_E_INSUFFICIENT_CREDIT: i32 = -2;
/// Every pending-call slot is in use: poll and retry.
pub const COPYRPC_E_TOO_MANY_CALLS: i32 = -3;
/// The send queue is full: poll and retry.
pub const COPYRPC_E_SQ_FULL: i32 = -4;
/// A pointer argument is NULL.
pub const COPYRPC_E_NULL: i32 = -10;
/// The handle is not of the kind the function takes (its magic word differs), or was
/// closed.
pub const COPYRPC_E_WRONG_KIND: i32 = -11;
/// The memory area given for a handle is smaller than the header's `*_BYTES`.
pub const COPYRPC_E_TOO_SMALL: i32 = -12;
/// The memory area given for a handle is not aligned to the header's `*_ALIGN`.
pub const COPYRPC_E_MISALIGNED: i32 = -13;
/// A peer info failed its magic, version or checksum: it was not written by
/// `copyrpc_ep_local_info` of this library, or was damaged in transit.
pub const COPYRPC_E_BAD_PEER_INFO: i32 = -14;
/// A queue or endpoint description was not written by the setup API, or was used already.
pub const COPYRPC_E_BAD_DESC: i32 = -15;
/// An argument is out of range (a size, a kind, a name).
pub const COPYRPC_E_BAD_ARG: i32 = -16;
/// Called from inside the same handle's poll callback, or a fabric's exchange callback
/// (re-entrant use is refused); or a set-up call found the list of live handles locked
/// by another thread for too long (retry).
pub const COPYRPC_E_BUSY: i32 = -18;
/// The memory area given to an init or attach holds (or overlaps) a live handle, or the
/// fabric to close still serves a live context: end that first.
pub const COPYRPC_E_IN_USE: i32 = -19;
/// A setup step failed in the host (an errno, a fabric error): `copyrpc_last_error`
/// has the cause.
pub const COPYRPC_E_SYSTEM: i32 = -17;
/// The payload or response allowance can never fit the rings; `copyrpc_refusal_detail`
/// says which.
pub const COPYRPC_E_TOO_LARGE: i32 = -20;
/// The endpoint failed; `copyrpc_failure_cause` says why.
pub const COPYRPC_E_ENDPOINT_FAILED: i32 = -21;
/// The endpoint is not connected yet.
pub const COPYRPC_E_NOT_CONNECTED: i32 = -22;
/// A reply is larger than the allowance its request reserved.
pub const COPYRPC_E_REPLY_TOO_LARGE: i32 = -23;
/// The request was answered already, or is not one of this context's.
pub const COPYRPC_E_STALE_REQUEST: i32 = -24;
/// No such endpoint in this context.
pub const COPYRPC_E_NO_SUCH_ENDPOINT: i32 = -25;
/// The context holds `COPYRPC_CTX_ENDPOINTS` endpoints already.
pub const COPYRPC_E_TOO_MANY_ENDPOINTS: i32 = -26;
/// The endpoint is connected already.
pub const COPYRPC_E_ALREADY_CONNECTED: i32 = -27;
/// The queues, the rings or the peer's ring were refused by the core (a setup error);
/// `copyrpc_refusal_detail` names the rule.
pub const COPYRPC_E_BAD_SETUP: i32 = -28;
/// A shared-memory ring is full (after the bounded wait) or its server is gone;
/// `copyrpc_refusal_detail` says which.
pub const COPYRPC_E_SHM_UNAVAILABLE: i32 = -30;
/// A shared-memory reply was refused (duplicate, evicted client, bad slot).
pub const COPYRPC_E_SHM_REPLY: i32 = -31;
/// The header the program was built with is not of this library's ABI
/// (`copyrpc_init`).
pub const COPYRPC_E_VERSION: i32 = -32;
/// A callback unwound (a C++ exception) out of this context's poll, leaving its state
/// unfinished: every call but `copyrpc_ctx_fini` is refused.
pub const COPYRPC_E_UNWOUND: i32 = -33;

/// The core's text for the last refusal a code stands for several of (see
/// [`copyrpc_refusal_detail`]); null until the first.
static DETAIL: AtomicPtr<c_char> = AtomicPtr::new(core::ptr::null_mut());

/// The code of a core refusal. The codes that stand for several refusals
/// (`COPYRPC_E_BAD_SETUP`, `COPYRPC_E_TOO_LARGE`) keep the core's text for
/// `copyrpc_refusal_detail`.
#[cold]
pub fn of(e: Error) -> i32 {
    let code = code_of(e);
    if matches!(code, COPYRPC_E_BAD_SETUP | COPYRPC_E_TOO_LARGE) {
        // Relaxed: the pointer is to a static string, whose bytes need no ordering.
        DETAIL.store(e.text().as_ptr().cast_mut(), Ordering::Relaxed);
    }
    code
}

/// Keeps `text` for `copyrpc_refusal_detail`: for a code of the C library's own that
/// stands for several causes (`COPYRPC_E_SHM_UNAVAILABLE`).
#[cold]
pub fn set_detail(text: &'static CStr) {
    // Relaxed: as in `of`.
    DETAIL.store(text.as_ptr().cast_mut(), Ordering::Relaxed);
}

/// Which rule or cause lies behind the last refusal, in this process, that was
/// returned as `COPYRPC_E_BAD_SETUP` or `COPYRPC_E_TOO_LARGE` (for example "send ring
/// smaller than the peer's recv ring"), or as `COPYRPC_E_SHM_UNAVAILABLE` (whether
/// the ring stayed full, which a later call may get past, or the server is gone or
/// its region overwritten, which no retry mends): a static string, never NULL, ""
/// before the first. Process-wide, not per thread (the data path keeps no thread
/// state): read it right after the refusal, on the thread that made the call.
#[unsafe(no_mangle)]
pub extern "C" fn copyrpc_refusal_detail() -> *const c_char {
    let p = DETAIL.load(Ordering::Relaxed);
    if p.is_null() {
        c"".as_ptr()
    } else {
        p
    }
}

fn code_of(e: Error) -> i32 {
    match e {
        Error::RingFull => COPYRPC_E_RING_FULL,
        Error::InsufficientCredit => COPYRPC_E_INSUFFICIENT_CREDIT,
        Error::TooManyCalls => COPYRPC_E_TOO_MANY_CALLS,
        Error::SqFull => COPYRPC_E_SQ_FULL,
        Error::PayloadTooLarge | Error::AllowanceTooLarge => COPYRPC_E_TOO_LARGE,
        Error::EndpointFailed => COPYRPC_E_ENDPOINT_FAILED,
        Error::NotConnected => COPYRPC_E_NOT_CONNECTED,
        Error::ReplyTooLarge => COPYRPC_E_REPLY_TOO_LARGE,
        Error::StaleHandle => COPYRPC_E_STALE_REQUEST,
        Error::NoSuchEndpoint => COPYRPC_E_NO_SUCH_ENDPOINT,
        Error::TooManyEndpoints => COPYRPC_E_TOO_MANY_ENDPOINTS,
        Error::AlreadyConnected => COPYRPC_E_ALREADY_CONNECTED,
        _ => COPYRPC_E_BAD_SETUP,
    }
}

/// A sentence for a code (a static string, never NULL).
#[unsafe(no_mangle)]
pub extern "C" fn copyrpc_strerror(code: i32) -> *const core::ffi::c_char {
    let s: &'static core::ffi::CStr = match code {
        COPYRPC_OK => c"ok",
        COPYRPC_E_RING_FULL => c"the peer's recv ring is full (poll and retry)",
        COPYRPC_E_INSUFFICIENT_CREDIT => c"not enough credit from the peer yet (poll and retry)",
        COPYRPC_E_TOO_MANY_CALLS => c"every pending-call slot is in use (poll and retry)",
        COPYRPC_E_SQ_FULL => c"the send queue is full (poll and retry)",
        COPYRPC_E_NULL => c"a pointer argument is NULL",
        COPYRPC_E_WRONG_KIND => c"the handle is of another kind, or closed",
        COPYRPC_E_TOO_SMALL => c"the memory area is smaller than the handle needs",
        COPYRPC_E_MISALIGNED => c"the memory area is not aligned as the handle needs",
        COPYRPC_E_BAD_PEER_INFO => c"the peer info failed its magic, version or checksum",
        COPYRPC_E_BAD_DESC => {
            c"the description was not written by the setup API, or was used already"
        }
        COPYRPC_E_BAD_ARG => c"an argument is out of range",
        COPYRPC_E_BUSY => {
            c"called from inside the same handle's poll or exchange callback (or set-up lock taken)"
        }
        COPYRPC_E_SYSTEM => c"a host setup step failed (see copyrpc_last_error)",
        COPYRPC_E_TOO_LARGE => {
            c"the payload or allowance can never fit the rings (copyrpc_refusal_detail says which)"
        }
        COPYRPC_E_ENDPOINT_FAILED => c"the endpoint failed (see copyrpc_failure_cause)",
        COPYRPC_E_NOT_CONNECTED => c"the endpoint is not connected",
        COPYRPC_E_REPLY_TOO_LARGE => c"the reply exceeds the request's allowance",
        COPYRPC_E_STALE_REQUEST => c"the request was answered already or is not this context's",
        COPYRPC_E_NO_SUCH_ENDPOINT => c"no such endpoint",
        COPYRPC_E_TOO_MANY_ENDPOINTS => c"the context's endpoint table is full",
        COPYRPC_E_ALREADY_CONNECTED => c"the endpoint is connected already",
        COPYRPC_E_BAD_SETUP => {
            c"the core refused the queues or rings (copyrpc_refusal_detail says why)"
        }
        COPYRPC_E_SHM_UNAVAILABLE => {
            c"the shared-memory ring is full or its server is gone (copyrpc_refusal_detail says which)"
        }
        COPYRPC_E_SHM_REPLY => c"the shared-memory reply was refused",
        COPYRPC_E_IN_USE => {
            c"the memory holds a live handle, or the fabric serves a live context (end it first)"
        }
        COPYRPC_E_VERSION => c"the program's copyrpc.h is not of this library's ABI",
        COPYRPC_E_UNWOUND => {
            c"a callback unwound out of this context's poll: only copyrpc_ctx_fini is taken"
        }
        _ => c"unknown copyrpc code",
    };
    s.as_ptr()
}
