//! What copyrpc refuses, and why.

use core::fmt;

/// Why a call, a reply or a setup step was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The peer's recv ring has no room for the message now; poll and retry (the
    /// next poll reads the peer's consumer position if the piggybacked one is stale).
    RingFull,
    /// The peer has not granted enough credit for the response allowance; poll and
    /// retry.
    InsufficientCredit,
    /// The payload (or response allowance) can never fit the ring.
    PayloadTooLarge,
    /// The response allowance costs more credit than the peer can ever grant (its
    /// reservation cap, or half our recv ring): no poll can make room, so the call is
    /// refused for good. Lower the allowance
    /// ([`Context::max_response_allowance`](super::Context::max_response_allowance)).
    AllowanceTooLarge,
    /// The endpoint's QP failed (or it was failed by [`Context::fail_endpoint`]); every
    /// pending call on it has completed or will complete with this error.
    ///
    /// [`Context::fail_endpoint`]: super::Context::fail_endpoint
    EndpointFailed,
    /// The endpoint is not connected yet.
    NotConnected,
    /// Every pending-call slot is in use; poll and retry.
    TooManyCalls,
    /// A reply is larger than the allowance its request reserved.
    ReplyTooLarge,
    /// A handle that does not belong to this context's live requests.
    StaleHandle,
    /// No such endpoint.
    NoSuchEndpoint,
    /// The endpoint table (or the QPN map) is full.
    TooManyEndpoints,
    /// A configuration or memory description is unusable (sizes, alignment, null).
    BadConfig,
    /// A queue description was rejected by the driver.
    BadQueue,
    /// The send queue has no room for the operation; poll and retry.
    SqFull,
}

impl Error {
    /// A refusal for room that clears up by polling (the peer returns ring space or
    /// credit, calls complete, the send queue drains): retry after the next `poll`.
    ///
    /// A call that no amount of returned room could admit (a payload or allowance too
    /// large for the rings and the credit they allow) is refused with a permanent
    /// error instead, whichever of these conditions also holds at the time.
    pub const fn is_retryable(self) -> bool {
        matches!(
            self,
            Self::RingFull | Self::InsufficientCredit | Self::TooManyCalls | Self::SqFull
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::RingFull => "peer recv ring full",
            Self::InsufficientCredit => "not enough credit from the peer",
            Self::PayloadTooLarge => "payload can never fit the ring",
            Self::AllowanceTooLarge => {
                "response allowance above the most credit the peer can ever grant"
            }
            Self::EndpointFailed => "endpoint failed",
            Self::NotConnected => "endpoint not connected",
            Self::TooManyCalls => "pending-call table full",
            Self::ReplyTooLarge => "reply larger than the request's allowance",
            Self::StaleHandle => "handle of no live request",
            Self::NoSuchEndpoint => "no such endpoint",
            Self::TooManyEndpoints => "endpoint table full",
            Self::BadConfig => "unusable configuration or memory",
            Self::BadQueue => "queue description rejected",
            Self::SqFull => "send queue full",
        })
    }
}

/// A refused call: the reason, and the user data handed back untouched.
#[derive(Debug, PartialEq, Eq)]
pub struct CallError<U> {
    /// Why.
    pub error: Error,
    /// What the caller passed.
    pub user_data: U,
}

/// A refused reply: the reason, and the handle handed back so the request can still be
/// answered (for [`Error::ReplyTooLarge`], with a smaller payload).
#[derive(Debug)]
pub struct ReplyError {
    /// Why.
    pub error: Error,
    /// The request, still unanswered. `None` when the endpoint failed: the request was
    /// released and cannot be answered any more.
    pub handle: Option<super::RecvHandle>,
}
