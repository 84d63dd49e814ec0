//! Why an endpoint failed, for C: the core's `FailureCause` as a kind code and its
//! completion details.

use core::ffi::{c_char, CStr};

use copyrpc_core::copyrpc::{EndpointId, FailureCause, FailureKind, Side};
use mlx5_raw::layout::Syndrome;

use crate::ctx::{copyrpc_ctx, with_ctx};
use crate::status::{self, COPYRPC_E_NULL, COPYRPC_OK};

/// No failure.
pub const COPYRPC_CAUSE_NONE: i32 = 0;
/// Failed by the application.
pub const COPYRPC_CAUSE_APPLICATION: i32 = 1;
/// An error completion (`syndrome`, `vendor_syndrome`, `side` say which).
pub const COPYRPC_CAUSE_ERROR_COMPLETION: i32 = 2;
/// A completion copyrpc never causes.
pub const COPYRPC_CAUSE_UNEXPECTED_COMPLETION: i32 = 3;
/// The peer broke the protocol.
pub const COPYRPC_CAUSE_PROTOCOL_VIOLATION: i32 = 4;
/// A READ of the peer's consumer returned an impossible position.
pub const COPYRPC_CAUSE_BAD_CONSUMER_READ: i32 = 5;
/// A reply found the send state inconsistent.
pub const COPYRPC_CAUSE_REPLY_WRITE: i32 = 6;
/// The send queue rejected a WQE.
pub const COPYRPC_CAUSE_POST_REJECTED: i32 = 7;

/// Why an endpoint failed.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct copyrpc_cause {
    /// `COPYRPC_CAUSE_*`.
    pub kind: i32,
    /// For completions: 0 the send queue, 1 the receive side.
    pub side: i32,
    /// For error completions: the CQE syndrome.
    pub syndrome: u32,
    /// For error completions: the vendor syndrome.
    pub vendor_syndrome: u32,
}

/// Writes why endpoint `ep` failed into `*out` (`kind == COPYRPC_CAUSE_NONE` while it
/// works). Returns `COPYRPC_OK`, `COPYRPC_E_NULL`, `COPYRPC_E_NO_SUCH_ENDPOINT`, or a
/// handle refusal.
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_failure_cause(
    ctx: *mut copyrpc_ctx,
    ep: u16,
    out: *mut copyrpc_cause,
) -> i32 {
    with_ctx!(ctx, |h, _m| {
        // SAFETY: a live context of this class, used by this thread.
        let h = unsafe { &mut *h };
        if out.is_null() {
            return COPYRPC_E_NULL;
        }
        if let Err(e) = h.ctx.qpn(EndpointId(ep)) {
            return status::of(e);
        }
        // SAFETY: non-null, caller contract.
        unsafe { out.write(cause_of(h.ctx.failure_cause(EndpointId(ep)))) };
        COPYRPC_OK
    })
}

/// The C form of an endpoint's failure cause.
fn cause_of(cause: Option<FailureCause>) -> copyrpc_cause {
    let side = |s: Side| i32::from(s == Side::Recv);
    match cause {
        None => copyrpc_cause::default(),
        Some(FailureCause::Application) => copyrpc_cause {
            kind: COPYRPC_CAUSE_APPLICATION,
            ..Default::default()
        },
        Some(FailureCause::ErrorCompletion { side: s, error }) => copyrpc_cause {
            kind: COPYRPC_CAUSE_ERROR_COMPLETION,
            side: side(s),
            syndrome: u32::from(error.syndrome.as_u8()),
            vendor_syndrome: u32::from(error.vendor_syndrome),
        },
        Some(FailureCause::UnexpectedCompletion { side: s }) => copyrpc_cause {
            kind: COPYRPC_CAUSE_UNEXPECTED_COMPLETION,
            side: side(s),
            ..Default::default()
        },
        Some(FailureCause::ProtocolViolation) => copyrpc_cause {
            kind: COPYRPC_CAUSE_PROTOCOL_VIOLATION,
            ..Default::default()
        },
        Some(FailureCause::BadConsumerRead) => copyrpc_cause {
            kind: COPYRPC_CAUSE_BAD_CONSUMER_READ,
            ..Default::default()
        },
        Some(FailureCause::ReplyWrite) => copyrpc_cause {
            kind: COPYRPC_CAUSE_REPLY_WRITE,
            ..Default::default()
        },
        Some(FailureCause::PostRejected(_)) => copyrpc_cause {
            kind: COPYRPC_CAUSE_POST_REJECTED,
            ..Default::default()
        },
    }
}

/// What `*c` (from `copyrpc_failure_cause`) means, as a static string that is never
/// NULL: the kind, and for an error completion what its syndrome says (a retry
/// counter exceeded is the usual sign of a dead peer or link). "" for a NULL `c`.
///
/// # Safety
///
/// `c` is NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_cause_text(c: *const copyrpc_cause) -> *const c_char {
    // SAFETY: NULL or readable (caller contract).
    let Some(c) = (unsafe { c.as_ref() }) else {
        return c"".as_ptr();
    };
    cause_text(c).as_ptr()
}

fn cause_text(c: &copyrpc_cause) -> &'static CStr {
    let kind = match c.kind {
        COPYRPC_CAUSE_NONE => return c"no failure",
        // The syndrome says more than the kind.
        COPYRPC_CAUSE_ERROR_COMPLETION => return syndrome_text(c.syndrome),
        COPYRPC_CAUSE_APPLICATION => FailureKind::Application,
        COPYRPC_CAUSE_UNEXPECTED_COMPLETION => FailureKind::UnexpectedCompletion,
        COPYRPC_CAUSE_PROTOCOL_VIOLATION => FailureKind::ProtocolViolation,
        COPYRPC_CAUSE_BAD_CONSUMER_READ => FailureKind::BadConsumerRead,
        COPYRPC_CAUSE_REPLY_WRITE => FailureKind::ReplyWrite,
        COPYRPC_CAUSE_POST_REJECTED => FailureKind::PostRejected,
        _ => return c"unknown cause kind",
    };
    kind.text()
}

/// A syndrome as `copyrpc_cause` carries it (widened to 32 bits).
fn syndrome_text(raw: u32) -> &'static CStr {
    match u8::try_from(raw) {
        Ok(raw) => Syndrome::from_u8(raw).text(),
        Err(_) => Syndrome::Other(0).text(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cause_and_syndrome_has_its_own_text() {
        let mut texts: [&CStr; 8 + 256] = [c""; 8 + 256];
        for kind in 0..8 {
            texts[kind as usize] = cause_text(&copyrpc_cause {
                kind,
                ..Default::default()
            });
        }
        for raw in 0..=255u8 {
            texts[8 + usize::from(raw)] = syndrome_text(u32::from(raw));
        }
        // Distinct but for the unknown syndromes and kind 2's stand-in (syndrome 0).
        for (i, a) in texts.iter().enumerate() {
            assert!(!a.is_empty(), "text {i}");
            for (j, b) in texts.iter().enumerate().skip(i + 1) {
                let unknown = a.to_bytes().ends_with(b"unknown syndrome");
                assert!(a != b || unknown, "texts {i} and {j} are both {a:?}");
            }
        }
        let retry = syndrome_text(0x15).to_str().unwrap();
        assert!(retry.contains("retry counter exceeded"), "{retry}");
        assert_eq!(syndrome_text(0x1_0015), c"unknown syndrome");
        assert_eq!(
            cause_text(&copyrpc_cause {
                kind: 99,
                ..Default::default()
            }),
            c"unknown cause kind"
        );
    }
}
