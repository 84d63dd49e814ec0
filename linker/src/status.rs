//! The integer codes every C function returns: 0 or a positive count for success, a
//! negative `COPYRPC_E_*` for a refusal. Codes -1..=-4 clear up by polling (retry);
//! the rest are permanent for the arguments given.

use core::ffi::{c_char, CStr};
use core::fmt::Write;
use core::sync::atomic::{AtomicPtr, AtomicU8, Ordering};

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

/// Bytes of [`LIMIT_TEXT`], its final NUL included.
const LIMIT_TEXT_BYTES: usize = 160;

/// The text of the last `COPYRPC_E_TOO_LARGE` whose limit is known: what was asked and
/// the most it can be, written here by [`too_large`] (the data path keeps no thread
/// state and allocates nothing, so the text has one place in the process). The last
/// byte is never written: it is always NUL-terminated, even while a concurrent refusal
/// writes it.
static LIMIT_TEXT: [AtomicU8; LIMIT_TEXT_BYTES] = [const { AtomicU8::new(0) }; LIMIT_TEXT_BYTES];

/// The code of a core refusal. The codes that stand for several refusals
/// (`COPYRPC_E_BAD_SETUP`, `COPYRPC_E_TOO_LARGE`) keep the core's text for
/// `copyrpc_refusal_detail`.
#[cold]
pub fn of(e: Error) -> i32 {
    let code = code_of(e);
    if matches!(code, COPYRPC_E_BAD_SETUP | COPYRPC_E_TOO_LARGE) {
        // Release (pairs with the Acquire in `copyrpc_refusal_detail`); a static
        // string's bytes need no ordering, but `too_large`'s text shares the pointer.
        DETAIL.store(e.text().as_ptr().cast_mut(), Ordering::Release);
    }
    code
}

/// A fixed-size text being written: what does not fit is dropped.
struct Text {
    buf: [u8; LIMIT_TEXT_BYTES - 1],
    len: usize,
}

impl Write for Text {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// `COPYRPC_E_TOO_LARGE` for `what` (a request payload, a response allowance) of
/// `asked` bytes where the endpoint's limit is `limit` bytes (`None`: not even 0 fits),
/// with both numbers in the text `copyrpc_refusal_detail` returns.
#[cold]
#[inline(never)]
pub fn too_large(what: &str, asked: u64, limit: Option<u32>, ask_for: &str) -> i32 {
    let mut t = Text {
        buf: [0; LIMIT_TEXT_BYTES - 1],
        len: 0,
    };
    let _ = match limit {
        Some(l) => write!(
            t,
            "{what} of {asked} B above this endpoint's limit of {l} B ({ask_for}): it can never fit"
        ),
        None => write!(
            t,
            "{what} of {asked} B: this endpoint's rings hold none at all ({ask_for}): it can never fit"
        ),
    };
    for (i, cell) in LIMIT_TEXT.iter().take(LIMIT_TEXT_BYTES - 1).enumerate() {
        // Relaxed: published by the Release store of the pointer below.
        cell.store(
            t.buf.get(i).copied().filter(|_| i < t.len).unwrap_or(0),
            Ordering::Relaxed,
        );
    }
    // Release (pairs with the Acquire in `copyrpc_refusal_detail`): the text above is
    // written before a reader that sees the pointer reads it.
    DETAIL.store(
        LIMIT_TEXT.as_ptr().cast::<c_char>().cast_mut(),
        Ordering::Release,
    );
    COPYRPC_E_TOO_LARGE
}

/// Keeps `text` for `copyrpc_refusal_detail`: for a code of the C library's own that
/// stands for several causes (`COPYRPC_E_SHM_UNAVAILABLE`).
#[cold]
pub fn set_detail(text: &'static CStr) {
    // Release: as in `of`.
    DETAIL.store(text.as_ptr().cast_mut(), Ordering::Release);
}

/// Which rule or cause lies behind the last refusal, in this process, that was
/// returned as `COPYRPC_E_BAD_SETUP` or `COPYRPC_E_TOO_LARGE` (for example "send ring
/// smaller than the peer's recv ring", or "payload of 8160 B above this endpoint's limit
/// of 8148 B ..."), or as `COPYRPC_E_SHM_UNAVAILABLE` (the delegation server gone, or
/// its region overwritten): a string that is never NULL, "" before the first.
/// Process-wide, not per thread (the data path keeps no thread state), and rewritten
/// by the next such refusal: read it right after the refusal, on the thread that made
/// the call.
#[unsafe(no_mangle)]
pub extern "C" fn copyrpc_refusal_detail() -> *const c_char {
    // Acquire (pairs with the Release stores in `of`, `too_large` and `set_detail`).
    let p = DETAIL.load(Ordering::Acquire);
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
