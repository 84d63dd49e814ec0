//! Bulk transfers: the four RPC patterns of docs/spec/bulk.md on copyrpc messages plus one-sided
//! operations on registered buffers, with completion ownership from [`crate::ops`].
//!
//! ```text
//! client                                        server
//!   Regions::describe(buf) -> Desc
//!   Client::call(pattern, put, get) ── copyrpc request (Request: pattern, tag, put, get) ──►
//!                                                Server::accept(handle, put_local, get_local)
//!                         ◄── RDMA READ of put, split, `depth` in flight ── (Put, Both)
//!                                                Server::next_ready → caller handles the data
//!                         ◄── RDMA WRITE into get, split ────────────────── (Get, Both)
//!   on_response → op ends ◄── copyrpc reply (Reply: status, tag, bytes) ── Server::respond
//! ```
//!
//! The server does all one-sided work, so the client never waits on a completion it
//! does not own: its op ends with the reply, which the server sends only after every
//! operation of the request completed. No byte is staged: operations go between the
//! registered buffers the two callers named.
//!
//! | file | holds |
//! |---|---|
//! | `wire` | [`Desc`], [`Request`], [`Reply`]: the payload bytes, size-asserted |
//! | `region` | [`Regions`]: the checks that turn a bad buffer into a typed error before anything is posted |
//! | `mover` | [`Mover`]: transfers split into operations on leased slots, bounded in flight; the [`OneSided`] boundary |
//! | `link` | [`Link`]: [`OneSided`] on a copyrpc endpoint's raw READ/WRITE, completions mapped back to wr_ids |
//! | `server`, `client` | the two sides of a request |
//!
//! Layering: `bulk` is a layer above `copyrpc` and `ops`, not one of the protocol
//! modules `scripts/check-layering.sh` keeps apart; no protocol module imports it.
//!
//! A [`Link`] must be the only user of its endpoint's raw READ/WRITE: it attributes the
//! endpoint's raw completion counters to its own operations.

mod client;
mod link;
mod mover;
mod region;
mod server;
mod wire;

#[cfg(test)]
mod tests;

pub use client::{Client, MAX_EXTRA, TOKEN_MARK};
pub use link::{Link, LinkPoster, LINK_DEPTH};
pub use mover::{Dir, Mover, MoverStats, OneSided, PostRefused};
pub use region::{Local, Regions, RegisteredRange};
pub use server::{ReqId, Server, ServerStats};
pub use wire::{Desc, Pattern, Reply, Request, Status, DESC_SIZE, REPLY_SIZE, REQUEST_SIZE};

use crate::copyrpc;
use crate::ops::OpError;

/// Why a bulk call or transfer was refused before anything was posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkError {
    /// A transfer of zero bytes.
    ZeroLength,
    /// The buffer runs past the end of its registered region (or starts before it).
    BeyondRegion,
    /// No registered region has that key.
    UnknownKey,
    /// Local and remote lengths differ.
    LengthMismatch,
    /// More operations in flight asked for than there are slots (or zero).
    TooDeep,
    /// The region table is full.
    TooManyRegions,
    /// The pattern needs a buffer that was not given.
    NoBuffer,
    /// A request or reply that does not parse.
    BadMessage,
    /// More caller bytes than [`MAX_EXTRA`].
    TooLong,
    /// A request id that names no request waiting for `respond`.
    NoSuchRequest,
    /// A request that arrived on another endpoint than the server's.
    WrongEndpoint,
    /// The op layer refused (no op cell, no slot).
    Op(OpError),
    /// copyrpc refused the call.
    Call(copyrpc::Error),
}
