//! The inter-rank transport seam: how a daemon sends a request to another rank, gets the
//! answer back, and serves the requests other ranks send it.
//!
//! Daemons see only [`Remote`]. The daemon that holds rank `r`'s endpoint
//! ([`crate::route::endpoint_daemon`]: daemon#0 for every remote rank with `delegation`, daemon
//! `r % K` with `meta`, docs/spec/benchkv.md#backends) calls it in its loop:
//!
//! - phase 1 ([`crate::daemon`]): [`Remote::poll`] (flush + completions: answers to our
//!   calls come back with the token we gave), then [`Remote::recv`] for requests from
//!   other ranks, answered later with [`Remote::reply`];
//! - phase 2 (delegation) or the Flux phase (meta): [`Remote::call`] for client requests
//!   whose rank is not ours.
//!
//! A call or reply refused for room ([`SendError::Busy`]: copyrpc's `RingFull`,
//! `InsufficientCredit`, `TooManyCalls`, `SqFull`) is parked by the daemon and retried
//! after its next `poll`; nothing is dropped and the daemon never blocks inside a phase,
//! so there is no nested poll (the first design's `nested_resp_buf` exists only because
//! its retry loop polls inside a reply: docs/spec/benchkv.md#back-pressure).
//!
//! Implementations: [`Loopback`] (in-process, for tests and `--loopback-ranks`) and
//! [`CopyrpcRemote`] (a copyrpc context per daemon over the fabric's queues, endpoints
//! exchanged over MPI, or by the virtual world on one thread), which the runners build
//! (`crate::rank::transport` for the threaded one).

mod copyrpc;
mod loopback;

pub use self::copyrpc::{
    build_nodes, connect_all, finish, records, CopyrpcIncoming, CopyrpcRemote, RingSize, EPS,
};
pub use loopback::{Loopback, LoopbackIncoming};

use crate::msg::{Request, Response};

/// Why a transport did not take a call or reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// No room now (send queue full, too many calls): poll, then retry.
    Busy,
    /// No room in the peer's ring or no credit from it (copyrpc's `RingFull`,
    /// `InsufficientCredit`): as [`SendError::Busy`], counted apart because a ring sized
    /// for the load (`--rpc-ring auto`) should never give it.
    NoCredit,
    /// Never going to work (the endpoint failed, the payload cannot fit). The daemon
    /// answers the request with `Status::Unreachable`.
    Failed(String),
}

/// One daemon's endpoints to other ranks.
pub trait Remote {
    /// A request received from another rank, to be answered once with [`Remote::reply`].
    type Incoming;

    /// Sends `req` to rank `rank`; the answer comes back from [`Remote::poll`] with
    /// `token`. Nothing is sent when it returns an error.
    fn call(&mut self, rank: u32, req: &Request, token: u64) -> Result<(), SendError>;

    /// Moves the transport forward (sends what was written, reads completions) and hands
    /// every answer that arrived to `on_response(token, response)`. Returns the number of
    /// completions it processed (the CQE batch of `--metrics`). A call whose endpoint
    /// failed is answered here too, with a `Status::Unreachable` response.
    fn poll(&mut self, on_response: &mut dyn FnMut(u64, Response)) -> usize;

    /// The oldest request received from another rank and not yet handed out.
    fn recv(&mut self) -> Option<(Self::Incoming, Request)>;

    /// Answers `incoming`. On [`SendError::Busy`] the handle comes back to be retried.
    #[allow(clippy::result_large_err)]
    fn reply(
        &mut self,
        incoming: Self::Incoming,
        resp: &Response,
    ) -> Result<(), (Self::Incoming, SendError)>;
}

/// The transports a daemon can hold; one variant per implementation (enum dispatch keeps
/// the daemon loop free of virtual calls).
#[derive(Debug)]
pub enum AnyRemote {
    /// In-process loopback.
    Loopback(Loopback),
    /// copyrpc over the fabric (boxed: the context is large).
    Copyrpc(Box<CopyrpcRemote>),
}

/// [`AnyRemote`]'s received request.
#[derive(Debug)]
pub enum AnyIncoming {
    /// From a [`Loopback`].
    Loopback(LoopbackIncoming),
    /// From a [`CopyrpcRemote`].
    Copyrpc(CopyrpcIncoming),
}

impl Remote for AnyRemote {
    type Incoming = AnyIncoming;

    fn call(&mut self, rank: u32, req: &Request, token: u64) -> Result<(), SendError> {
        match self {
            Self::Loopback(l) => l.call(rank, req, token),
            Self::Copyrpc(c) => c.call(rank, req, token),
        }
    }

    fn poll(&mut self, on_response: &mut dyn FnMut(u64, Response)) -> usize {
        match self {
            Self::Loopback(l) => l.poll(on_response),
            Self::Copyrpc(c) => c.poll(on_response),
        }
    }

    fn recv(&mut self) -> Option<(AnyIncoming, Request)> {
        match self {
            Self::Loopback(l) => l.recv().map(|(i, r)| (AnyIncoming::Loopback(i), r)),
            Self::Copyrpc(c) => c.recv().map(|(i, r)| (AnyIncoming::Copyrpc(i), r)),
        }
    }

    fn reply(
        &mut self,
        incoming: AnyIncoming,
        resp: &Response,
    ) -> Result<(), (AnyIncoming, SendError)> {
        match (self, incoming) {
            (Self::Loopback(l), AnyIncoming::Loopback(i)) => l
                .reply(i, resp)
                .map_err(|(i, e)| (AnyIncoming::Loopback(i), e)),
            (Self::Copyrpc(c), AnyIncoming::Copyrpc(i)) => c
                .reply(i, resp)
                .map_err(|(i, e)| (AnyIncoming::Copyrpc(i), e)),
            (_, i) => Err((
                i,
                SendError::Failed("a request answered through another transport".into()),
            )),
        }
    }
}
