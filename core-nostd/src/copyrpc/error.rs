//! What copyrpc refuses, and why.

use core::ffi::CStr;
use core::fmt;

use mlx5_raw::layout::CqeError;
use mlx5_raw::PostError;

/// Why a call, a reply or a setup step was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The peer's recv ring has no room for the message now; poll and retry (the
    /// next poll reads the peer's consumer position if the piggybacked one is stale).
    RingFull,
    /// The peer has not granted enough credit for the response allowance; poll and
    /// retry.
    InsufficientCredit,
    /// The payload is above
    /// [`Context::max_request_payload`](super::Context::max_request_payload): beside
    /// the room the credit rule keeps for the replies this side may owe, the peer's
    /// ring can never take it, so the call is refused for good. Or the response
    /// allowance can never fit the reply ring.
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
    /// The send queue has no room for the operation; poll and retry.
    SqFull,
    /// The context's table sizes are out of range: `EPS` must be in 1 ..= 1 024
    /// ([`MAX_ENDPOINTS`](super::MAX_ENDPOINTS)), `CALLS`
    /// at least 1, `REQS` a power of two.
    BadTableSize,
    /// The driver rejected the SRQ description (null, misaligned, stride, WQE count,
    /// not fresh).
    BadSrq,
    /// The driver rejected the send CQ description.
    BadSendCq,
    /// The driver rejected the recv CQ description.
    BadRecvCq,
    /// The recv CQ has fewer entries than the SRQ has WQEs: a full SRQ's completions
    /// could overrun it.
    RecvCqTooSmall,
    /// The SRQ could not be filled: its WQE list is corrupt (the memory is not a fresh
    /// SRQ's).
    SrqFill,
    /// The driver rejected the endpoint's send queue description, or the inline sizes
    /// or signal interval of its [`EndpointConfig`](super::EndpointConfig).
    BadSq,
    /// The send queue is too small for the endpoint's flush to always make progress:
    /// it needs [`EndpointConfig::min_sq_bbs`](super::EndpointConfig::min_sq_bbs) blocks.
    SqTooSmall,
    /// The recv ring's length is not a power of two in 128 B ..= 64 GiB.
    BadRecvRing,
    /// `REQS` is below the recv ring size / 32: a ring full of the smallest requests
    /// would overflow the request table. Raise `REQS` or shrink the ring.
    TooFewRequestSlots,
    /// The control region is shorter than 16 bytes or not 8-aligned.
    BadControlRegion,
    /// `max_resp_reservation` is below 64 bytes (two blocks): no call could ever be
    /// granted an allowance.
    BadReservation,
    /// A region of the endpoint's memory has a null address.
    NullRegion,
    /// The peer's recv ring size (in its [`EndpointInfo`](super::EndpointInfo)) is not a
    /// power of two in 128 B ..= 64 GiB.
    BadPeerRing,
    /// Our send ring is smaller than the peer's recv ring, which it mirrors.
    SendRingTooSmall,
    /// `connect` on an endpoint that is already connected (or failed).
    AlreadyConnected,
    /// A raw operation's scatter/gather list is too long for one WQE.
    TooManySges,
    /// A raw operation's scatter/gather entry is 2 GiB or longer.
    SgeTooLong,
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

impl Error {
    /// The refusal in a few words, NUL-terminated for C (`copyrpc_setup_refusal`);
    /// [`Display`](fmt::Display) writes the same text.
    pub const fn text(self) -> &'static CStr {
        match self {
            Self::RingFull => c"peer recv ring full",
            Self::InsufficientCredit => c"not enough credit from the peer",
            Self::PayloadTooLarge => {
                c"payload above max_request_payload, or allowance above the ring: can never fit"
            }
            Self::AllowanceTooLarge => {
                c"response allowance above the most credit the peer can ever grant"
            }
            Self::EndpointFailed => c"endpoint failed",
            Self::NotConnected => c"endpoint not connected",
            Self::TooManyCalls => c"pending-call table full",
            Self::ReplyTooLarge => c"reply larger than the request's allowance",
            Self::StaleHandle => c"handle of no live request",
            Self::NoSuchEndpoint => c"no such endpoint",
            Self::TooManyEndpoints => c"endpoint table full",
            Self::SqFull => c"send queue full",
            Self::BadTableSize => {
                c"context table sizes out of range (EPS 1..=1024, CALLS >= 1, REQS a power of two)"
            }
            Self::BadSrq => c"SRQ description rejected by the driver",
            Self::BadSendCq => c"send CQ description rejected by the driver",
            Self::BadRecvCq => c"recv CQ description rejected by the driver",
            Self::RecvCqTooSmall => c"recv CQ has fewer entries than the SRQ has WQEs",
            Self::SrqFill => c"SRQ could not be filled (corrupt WQE list)",
            Self::BadSq => c"send queue description or inline/signal configuration rejected",
            Self::SqTooSmall => {
                c"send queue below 16 blocks or 4 of the endpoint's largest batch WQEs"
            }
            Self::BadRecvRing => c"recv ring length not a power of two in 128 B..=64 GiB",
            Self::TooFewRequestSlots => c"REQS below the recv ring size / 32",
            Self::BadControlRegion => c"control region shorter than 16 B or not 8-aligned",
            Self::BadReservation => c"max_resp_reservation below 64 B",
            Self::NullRegion => c"memory region with a null address",
            Self::BadPeerRing => c"peer's recv ring size not a power of two in 128 B..=64 GiB",
            Self::SendRingTooSmall => c"send ring smaller than the peer's recv ring",
            Self::AlreadyConnected => c"endpoint already connected",
            Self::TooManySges => c"scatter/gather list too long for one WQE",
            Self::SgeTooLong => c"scatter/gather entry of 2 GiB or more",
        }
    }
}

/// A static text as `&str`: every text here and in `Syndrome::text` is ASCII (the tests
/// below), so the fallback is never written.
fn ascii(t: &'static CStr) -> &'static str {
    t.to_str().unwrap_or("copyrpc error")
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(ascii(self.text()))
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

/// Which queue of an endpoint's QP a completion came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The send queue (our WRITEs and READs).
    Send,
    /// The receive side (the peer's WRITE_IMMs, through the SRQ).
    Recv,
}

/// Why an endpoint failed ([`Context::failure_cause`](super::Context::failure_cause)).
/// Whatever the cause, its calls complete with [`Error::EndpointFailed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureCause {
    /// [`Context::fail_endpoint`](super::Context::fail_endpoint): the application saw a
    /// failure copyrpc cannot (a peer process that died, a timeout of its own).
    Application,
    /// An error completion on the endpoint's QP, with its syndromes. A flush
    /// (`WrFlushErr`) follows an earlier error, or a QP moved to the error state from
    /// outside; a retry-exceeded syndrome is the usual sign of a dead peer or link
    /// (the idle-peer probe turns silence into one).
    ErrorCompletion {
        /// The queue that reported it.
        side: Side,
        /// The CQE's syndrome and vendor syndrome.
        error: CqeError,
    },
    /// A completion copyrpc never causes (receive side: a SEND, or a WRITE_IMM
    /// scattered into the CQE) or one that retires no WQE it posted (send side).
    UnexpectedCompletion {
        /// The queue that reported it.
        side: Side,
    },
    /// A batch from the peer broke the protocol: its immediate, metadata or messages
    /// are invalid, it overruns the ring, or it holds more requests than the table.
    ProtocolViolation,
    /// Our READ of the peer's consumer returned a position the peer cannot have: a
    /// corrupted word, or the mark a peer leaves when its endpoint fails (`u64::MAX`).
    BadConsumerRead,
    /// A reply could not be written: the endpoint's credit or ring state contradicted
    /// itself (unreachable while copyrpc's invariants hold).
    ReplyWrite,
    /// The send queue refused a batch or READ WQE for a reason other than room.
    PostRejected(PostError),
}

/// A [`FailureCause`] without its details: what C reports as `copyrpc_cause.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// [`FailureCause::Application`].
    Application,
    /// [`FailureCause::ErrorCompletion`].
    ErrorCompletion,
    /// [`FailureCause::UnexpectedCompletion`].
    UnexpectedCompletion,
    /// [`FailureCause::ProtocolViolation`].
    ProtocolViolation,
    /// [`FailureCause::BadConsumerRead`].
    BadConsumerRead,
    /// [`FailureCause::ReplyWrite`].
    ReplyWrite,
    /// [`FailureCause::PostRejected`].
    PostRejected,
}

impl FailureKind {
    /// The kind in a few words, NUL-terminated for C (`copyrpc_cause_text`); a
    /// [`FailureCause`]'s `Display` writes it before the details.
    pub const fn text(self) -> &'static CStr {
        match self {
            Self::Application => c"failed by the application (fail_endpoint)",
            Self::ErrorCompletion => c"error completion",
            Self::UnexpectedCompletion => c"a completion copyrpc never causes",
            Self::ProtocolViolation => {
                c"the peer broke the protocol (a bad immediate, metadata or message)"
            }
            Self::BadConsumerRead => {
                c"a READ of the peer's consumer returned an impossible position (the peer failed its endpoint, or the word is corrupt)"
            }
            Self::ReplyWrite => c"a reply found the endpoint's send state inconsistent",
            Self::PostRejected => c"the send queue rejected a WQE",
        }
    }
}

impl FailureCause {
    /// Which kind of failure this is.
    pub const fn kind(&self) -> FailureKind {
        match self {
            Self::Application => FailureKind::Application,
            Self::ErrorCompletion { .. } => FailureKind::ErrorCompletion,
            Self::UnexpectedCompletion { .. } => FailureKind::UnexpectedCompletion,
            Self::ProtocolViolation => FailureKind::ProtocolViolation,
            Self::BadConsumerRead => FailureKind::BadConsumerRead,
            Self::ReplyWrite => FailureKind::ReplyWrite,
            Self::PostRejected(_) => FailureKind::PostRejected,
        }
    }
}

impl fmt::Display for FailureCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = ascii(self.kind().text());
        match self {
            Self::ErrorCompletion { side, error } => write!(
                f,
                "{kind} on the {} side: {} (syndrome {:#04x}, vendor syndrome {:#04x})",
                side.name(),
                ascii(error.syndrome.text()),
                error.syndrome.as_u8(),
                error.vendor_syndrome
            ),
            Self::UnexpectedCompletion { side } => {
                write!(f, "{kind}, on the {} side", side.name())
            }
            Self::PostRejected(e) => write!(f, "{kind}: {e:?}"),
            _ => f.write_str(kind),
        }
    }
}

impl Side {
    const fn name(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Recv => "receive",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_text::distinct_texts;
    use mlx5_raw::layout::Syndrome;
    use std::string::ToString;

    /// The host quotes these texts when it reports a refused call, a failed endpoint or
    /// a setup step: each must say which one it is.
    #[test]
    fn errors_display_distinct_nonempty_text() {
        use Error::*;
        let all = [
            RingFull,
            InsufficientCredit,
            PayloadTooLarge,
            AllowanceTooLarge,
            EndpointFailed,
            NotConnected,
            TooManyCalls,
            ReplyTooLarge,
            StaleHandle,
            NoSuchEndpoint,
            TooManyEndpoints,
            SqFull,
            BadTableSize,
            BadSrq,
            BadSendCq,
            BadRecvCq,
            RecvCqTooSmall,
            SrqFill,
            BadSq,
            SqTooSmall,
            BadRecvRing,
            TooFewRequestSlots,
            BadControlRegion,
            BadReservation,
            NullRegion,
            BadPeerRing,
            SendRingTooSmall,
            AlreadyConnected,
            TooManySges,
            SgeTooLong,
        ];
        distinct_texts(&all);
        for e in all {
            let c = e.text().to_str().expect("UTF-8");
            assert!(c.is_ascii(), "{e:?}: {c}");
            assert_eq!(e.to_string(), c, "Display writes the C text");
        }
    }

    /// C's `copyrpc_cause_text` quotes these.
    #[test]
    fn failure_kinds_have_distinct_ascii_texts() {
        let all = [
            FailureKind::Application,
            FailureKind::ErrorCompletion,
            FailureKind::UnexpectedCompletion,
            FailureKind::ProtocolViolation,
            FailureKind::BadConsumerRead,
            FailureKind::ReplyWrite,
            FailureKind::PostRejected,
        ];
        let texts: std::vec::Vec<&str> = all
            .iter()
            .map(|k| k.text().to_str().expect("UTF-8"))
            .collect();
        distinct_texts(&texts);
        assert!(texts.iter().all(|t| t.is_ascii()));
    }

    /// As above for failure causes; a completion's text names its side and its syndrome.
    #[test]
    fn failure_causes_display_distinct_nonempty_text_naming_the_side() {
        let error = CqeError {
            syndrome: Syndrome::LocalLengthErr,
            vendor_syndrome: 0x39,
        };
        let all = [
            FailureCause::Application,
            FailureCause::ErrorCompletion {
                side: Side::Send,
                error,
            },
            FailureCause::ErrorCompletion {
                side: Side::Recv,
                error,
            },
            FailureCause::UnexpectedCompletion { side: Side::Send },
            FailureCause::UnexpectedCompletion { side: Side::Recv },
            FailureCause::ProtocolViolation,
            FailureCause::BadConsumerRead,
            FailureCause::ReplyWrite,
            FailureCause::PostRejected(PostError::SqFull { needed: 2, free: 1 }),
        ];
        let texts = distinct_texts(&all);
        for (c, t) in all.iter().zip(&texts) {
            assert!(t.is_ascii(), "{t}");
            assert!(t.starts_with(ascii(c.kind().text())), "{t}");
        }
        assert!(
            texts[1].contains("local length error")
                && texts[1].contains("(syndrome 0x01, vendor syndrome 0x39)"),
            "{}",
            texts[1]
        );
        assert!(texts[1].contains("send side") && texts[2].contains("receive side"));
        assert!(texts[3].contains("send side") && texts[4].contains("receive side"));
    }
}
