//! ipc: per-client SPSC request and response rings in one shared region
//! (docs/spec/ipc-flux.md#ipc), over caller-supplied memory.
//!
//! Each client id owns two rings of `depth` slots: requests (client → server) and
//! responses (server → client). A client `call(req, user_data)` keeps `user_data` in its
//! own [`Slab`](crate::shm::Slab) and sends the slab token with the request; the server
//! `poll`s every client (refreshing how many requests each has waiting, skipping idle or
//! excluded ones cheaply), `recv`s round robin, and `reply`s by the request's token — in
//! any order. The client's `poll` hands `user_data` back with each response.
//!
//! # Layout
//!
//! ```text
//! 0     header, 128 B   magic u64 "CPRIPCV1" @0, version u32 = 3 @8, max_clients @12,
//!                       depth @16, next_client_id @24, server_alive u8 @28,
//!                       server_owner u32 @32 (host: the server's pid),
//!                       req_size @40, resp_size @44,
//!                       server_owner_token u64 @48 (host: the server's start time)
//! 128   client table    max_clients x 64 B: state u32 (epoch << 2 | Free/Active/
//!                       Closing/Dead) @+0, owner u32 (host: the client's pid) @+4,
//!                       owner_token u64 (host: the client's start time) @+8
//! C     request ring positions, max_clients x 256 B (producer's line, consumer's line,
//!                       128 B apart; each written only by its side)
//! C+256n response ring positions, max_clients x 256 B
//! S     cells           max_clients x depth x Cell, 64-aligned:
//!                       {req: {state u64, token u64, Req}, resp: {state u64, token u64, Resp}}
//!                       (state: 2 * lap empty, 2 * lap + 1 full; zero = empty lap 0;
//!                       all parts 128-aligned)
//! ```
//!
//! Request slot `i` and response slot `i` share a cell (one 64 B line for 16 B payloads):
//! with replies in order, the response to position `k` goes to position `k` too, so a
//! round trip moves one line each way — the client writes the request into it, the server
//! reads it and writes the response into it, the client reads it — which is the
//! one-line ping-pong floor's pattern. Neither side writes a slot it only reads (no
//! hand-back stores: `spsc::RingCtl::pop_no_handback`), so the line is not pulled back
//! and forth a second time. Out-of-order replies stay correct; they only lose the
//! sharing. The floor's pattern is exact only on a depth-1 region, where every call reuses
//! the one cell: on deeper rings consecutive single calls walk the cells, and the client's
//! write into cell `k + 1` (which the polling server holds shared) costs an invalidation
//! that writing the cell it just read (`k`) would not — measured ~15% on the round trip
//! (docs/PERFORMANCE.md).
//!
//! # Progress and failure story
//!
//! - Client `call` / `poll`, server `recv` / `reply`: wait-free (SPSC rings, one attempt).
//!   `poll` is `O(max_clients)` (one slot read per client); `recv` touches only clients
//!   its last `poll` saw busy.
//! - Calls in flight per client are bounded by `depth` (and the slab), so the server's
//!   reply always finds room, and both sides write ring slots without reading them first
//!   (`spsc::RingCtl::push_known_free`: the bound proves the slot was read). A
//!   client that breaks the bound (not ours: `call` enforces it) can only garble its own
//!   responses; the server never blocks and reads nothing back from them.
//! - A client that dies leaves its rings as they were (publication is one index store).
//!   The server's host evicts it ([`Server::evict`], after checking its pid); the next
//!   `poll` drops its unread requests and frees the id. A client that closes is freed the
//!   same way. A reused id gets a new epoch: replies to the old owner are refused
//!   (`ClientGone`), and the new owner skips responses published before it took the id
//!   and takes its ring positions from the server's side, not from a dead predecessor.
//! - A server that stops: clients see `server_alive == false` (or the host sees its pid
//!   gone) and get `ServerDisconnected`; calls in flight are lost with it.

mod client;
mod layout;
mod server;
#[cfg(all(test, not(loom)))]
mod tests;

pub use client::Client;
pub use layout::{
    Cell, ClientEntry, Config, Header, IpcRegion, Offsets, MAGIC, MAX_CLIENTS, MAX_DEPTH, VERSION,
};
pub use server::{IpcRequest, Server};

use core::fmt;

/// Why a client could not connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpcConnectError {
    /// Every id is in use.
    NoFreeClientId,
    /// The server is gone.
    ServerDisconnected,
    /// The slab for user data has no entries.
    EmptySlab,
}

/// Why a call failed; nothing was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpcCallError {
    /// `depth` calls (or the slab's capacity) in flight, or the server has not yet taken
    /// earlier requests: poll, then retry.
    Full,
    /// The server is gone.
    ServerDisconnected,
}

/// Why a reply was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpcReplyError {
    /// The client closed, was evicted, or its id was reused since the request.
    ClientGone,
    /// No client has this id: not a request this server handed out.
    UnknownClient,
    /// Every request this client sent has been answered: a second reply to one, or a
    /// request this server never received. Accepting it could overwrite an answer the
    /// client has not read yet (its response ring holds one per call in flight).
    NothingOutstanding,
}

impl fmt::Display for IpcConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NoFreeClientId => "no free client id",
            Self::ServerDisconnected => "server disconnected",
            Self::EmptySlab => "user-data slab has no entries",
        })
    }
}

impl fmt::Display for IpcCallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Full => "queue full",
            Self::ServerDisconnected => "server disconnected",
        })
    }
}

impl fmt::Display for IpcReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ClientGone => "client closed or evicted",
            Self::UnknownClient => "no client has this id",
            Self::NothingOutstanding => "every request of this client is already answered",
        })
    }
}

impl core::error::Error for IpcConnectError {}
impl core::error::Error for IpcCallError {}
impl core::error::Error for IpcReplyError {}
