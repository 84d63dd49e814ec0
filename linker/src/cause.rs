//! Why an endpoint failed, for C: the core's `FailureCause` as a kind code and its
//! completion details.

use copyrpc_core::copyrpc::{EndpointId, FailureCause, Side};

use crate::ctx::{copyrpc_ctx, handle};
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
/// works).
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
    // SAFETY: forwarded.
    let h = match unsafe { handle(ctx) } {
        Ok(h) => h,
        Err(e) => return e,
    };
    if out.is_null() {
        return COPYRPC_E_NULL;
    }
    if let Err(e) = h.ctx.qpn(EndpointId(ep)) {
        return status::of(e);
    }
    let side = |s: Side| i32::from(s == Side::Recv);
    let c = match h.ctx.failure_cause(EndpointId(ep)) {
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
    };
    // SAFETY: non-null, caller contract.
    unsafe { out.write(c) };
    COPYRPC_OK
}
