//! delegationrpc: an MPSC request ring plus per-client response slots in one shared
//! region (docs/spec/deleg.md), over caller-supplied memory.
//!
//! Many clients (threads or processes) send requests to one server through one ring:
//! a client claims a position with `fetch_add` on `head`, waits until the ring has room
//! (`pos - tail < ring_depth`), writes its slot and commits it; the server reads committed
//! slots in position order, answers into the client's own response slot, and releases ring
//! space by publishing `tail`.
//!
//! # Layout (docs/spec/deleg.md#layout: the first layout unchanged, additions marked)
//!
//! ```text
//! 0    header, 128 B      magic u64 "DLGRPCV1" @0, version u32 = 2 @8, max_clients @12,
//!                         ring_depth @16, resp_depth @20, next_client_id @24,
//!                         server_alive u8 @28,
//!                         + server_owner u32 @32   (host: the server's pid)
//!                         + retire_requests u32 @36 (bumped by a closing client)
//!                         + req_size u32 @40, resp_size u32 @44 (payload type check)
//!                         + server_owner_token u64 @48 (host: the server's start time)
//! 128  ring control       head u64 @128 (clients fetch_add), tail u64 @192 (server)
//! 256  request slots      ring_depth x align_up(16 + size_of::<Req>(), 64):
//!                         committed u8 @+0, client_id u32 @+4, resp_slot_idx u32 @+8,
//!                         + claim u32 @+12 (the claim word, below), payload @+16
//! R    response slots     max_clients x resp_depth x align_up(8 + size_of::<Resp>(), 64),
//!                         R = 256 + ring_depth * req_slot_size;
//!                         slot (c, i) at R + (c * resp_depth + i) * resp_slot_size:
//!                         valid u8 @+0, + pending u8 @+1 (client-private), payload @+8
//! T  + client table       max_clients x 128 B, T = R + max_clients * resp_depth * resp_slot_size:
//!                         state u32 @+0 (epoch << 2 | Free/Active/Closing/Dead),
//!                         owner u32 @+4 (host: the client's pid),
//!                         drain_until u64 @+8 (server-private),
//!                         + owner_token u64 @+16 (host: the client's start time),
//!                         claim_pos u64 @+64 (own line: stored on every call)
//! ```
//!
//! Nothing the first layout defines moves: the additions use its padding bytes or sit after
//! its last part. Payloads are plain old data ([`Payload`](crate::shm::Payload)): any bytes
//! a broken or hostile peer leaves in a slot still read as a valid value.
//!
//! # Protocol
//!
//! Client `call` = [`Client::reserve`] + [`Reservation::commit`]:
//! 1. pick a free response slot (round robin over the client's `pending` bytes);
//! 2. `pos = head.fetch_add(1, Relaxed)`; record `claim_pos = pos + 1`;
//! 3. flow control: spin until `pos - tail < ring_depth` (a locally cached tail first),
//!    returning `ServerDisconnected` if `server_alive` drops meanwhile;
//! 4. CAS the slot's claim word `free(pos) -> writing(pos)`; if the word has moved on to a
//!    later lap the server abandoned this position: `Abandoned`, nothing is written;
//! 5. write `client_id`, `resp_slot_idx`, payload; `committed.store(1, Release)`.
//!
//! Server: [`Server::poll`] counts committed slots from its cursor (and resolves a hole at
//! the cursor, below); [`Server::recv`] reads one, clears `committed`, stores the claim word
//! `free(pos + ring_depth)` (the slot may be reused) and advances the cursor;
//! [`Server::advance_tail`] publishes the cursor as `tail` with Release, which is what
//! orders the server's reads of a slot before the next lap's claimer's writes (that
//! claimer waits for this `tail` with Acquire; the claim word only decides ownership); [`Server::reply`] writes the
//! payload into the client's response slot and stores `valid = 1` (Release). Client
//! [`Client::poll`] reads `valid` (Acquire) of its pending slots, copies the payload and
//! clears `valid` and `pending`.
//!
//! # Holes and dead clients (beyond the first design)
//!
//! A client that stops between step 2 and step 5 leaves a *hole*: the server must consume
//! in order, so in the first design it waits forever. Here:
//!
//! - **Hole timeout.** When the cursor meets a hole, the server first publishes `tail =
//!   cursor` (so the claimer cannot be blocked by flow control), then remembers the time
//!   the caller passed to `poll(now)` (an idle server reads `head` on one poll in 64, so
//!   it may first see a hole up to 64 polls late; the timeout counts from then). Once
//!   `now - since >= hole_timeout` and the claim word still says `free(pos)`, it CASes
//!   it to `free(pos + ring_depth)`: the position is
//!   abandoned and the cursor moves on. A late claimer's step-4 CAS then fails and it gets
//!   [`CallError::Abandoned`]: its request is neither delivered nor written into the slot,
//!   which may already belong to the next lap. The core reads no clock: `now` and
//!   `hole_timeout` are in whatever unit the caller uses (ns, or poll counts).
//! - **Writing holes.** If the claim word says `writing(pos)`, the claimer is between its
//!   CAS and its commit: a few stores. The server waits — unless the host has declared that
//!   client dead ([`Server::evict`]) and its `claim_pos` is this position, in which case the
//!   slot is abandoned at once (nobody will write it again).
//! - **Cancelled claims.** Dropping a [`Reservation`] without committing moves the claim
//!   word on itself; the server skips the position without waiting.
//! - **Client ids** are reclaimed. A client that closes (drop or [`Client::close`]) marks its
//!   entry `Closing` and bumps `retire_requests`; the host of the server evicts a client
//!   whose process is gone (it checks the owner pid and start time; the core cannot).
//!   A connecting client's host that finds no free id may declare the id of a dead owner
//!   `Dead` itself ([`DelegRegion::declare_dead`]: the same CAS and bump, R8/R5), so a
//!   respawned client need not wait for the server's reaper.
//!   For a retiring id the server records `drain_until` (the ring head, or the client's
//!   last claim if later), drops that client's remaining requests, refuses replies to it
//!   (their token carries the old epoch), and once its cursor passes `drain_until` marks
//!   the entry `Free`. A new client takes a free id with a CAS that bumps the epoch and
//!   clears its response slots. So reconnects never exhaust `max_clients`, and a stale
//!   reply can never land in the slot of the id's next owner.
//!
//! # Progress and failure story
//!
//! - **Client `call`**: lock-free up to the flow-control wait, then *blocking* on the
//!   server while the ring is full; it never waits on another client. If the server is
//!   gone it returns `ServerDisconnected`: the core sees the `server_alive` flag; a server
//!   killed without clearing it is detected by the host, whose wait callback
//!   ([`Client::call_with`]) checks `server_owner` and also bounds the wait (`RingFull`;
//!   the claimed position is parked and resumed by the next call, so a client holds at
//!   most one position beyond the ring). The wait checks `head`/`tail` against what the
//!   protocol can produce and returns `RingCorrupt` rather than spin on overwritten
//!   values (see `Client::wait_for_room`); the server likewise refuses to treat a `head`
//!   below its cursor as holes ([`Server::ring_corrupt`]).
//! - **Client `poll`**: wait-free, `O(resp_depth)`.
//! - **Server**: wait-free per call; progress past a hole needs either the claimer's commit,
//!   the hole timeout, or the eviction of the claimer. A dead client therefore costs at
//!   most `hole_timeout` (plus 64 idle polls) of stall per position it held (at most one: a client has one
//!   claim at a time), and never wedges the server. A claimer stalled (not dead) longer
//!   than the timeout loses that one request with `Abandoned` and may retry.
//! - **What is lost**: only requests never committed (abandoned) and requests/replies of a
//!   retiring client. Nothing already answered is lost, and no request is delivered twice.
//! - **Limits**: the claim word carries 31 bits of lap, so a claimer stalled for 2^31 laps
//!   of the ring could see an ABA; eviction must only be asked for dead processes (an
//!   evicted client that is in fact alive may write into a reused slot).
//!
//! # Cache lines
//!
//! `head` and `tail` sit on separate 64 B lines as the first layout has them (L9 asks for
//! 128 B separation against the adjacent-line prefetcher; the layout's offsets win). Each
//! client caches `tail` locally and reloads it only when the cached value says full.
//! The server reads `head` only on one idle poll in 64 (never while requests keep
//! coming), so the line every call `fetch_add`s stays with the clients: a server that
//! read it on every idle poll made each call's locked `fetch_add` wait for the line to
//! come back (window32 with one client: ~210 -> ~83 ns per call in one run,
//! docs/PERFORMANCE.md). Write prefetches (`prefetchw`) of the client's next slots and of
//! the server's response slots were measured too and gave nothing (or worse), so there
//! are none.

mod client;
mod layout;
mod server;
#[cfg(test)]
mod tests;

pub use client::{Client, Reservation};
pub use layout::{
    req_slot_size, resp_slot_size, ClientEntry, Config, DelegRegion, Header, Offsets, ReqSlot,
    RespSlot, RingControl, CLIENT_ENTRY_SIZE, HEADER_SIZE, MAGIC, MAX_CLIENTS, MAX_DEPTH,
    RING_CONTROL_OFFSET, RING_OFFSET, VERSION,
};
pub use server::{RecvEntry, ReplyToken, Server, ServerConfig, ServerStats};

use core::fmt;

/// Why a client could not connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectError {
    /// All `max_clients` ids are in use (ids of closed or evicted clients return once the
    /// server has drained them).
    NoFreeClientId,
    /// `server_alive` is false.
    ServerDisconnected,
}

/// Why a call failed. Nothing was delivered in any case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallError {
    /// `server_alive` is false, or the caller's wait callback found the server's process
    /// gone ([`Client::call_with`]).
    ServerDisconnected,
    /// All of this client's `resp_depth` response slots have a call out; poll first.
    NoResponseSlot,
    /// The server gave up waiting for this claimed position (hole timeout); the request
    /// was not written. Safe to retry.
    Abandoned,
    /// The ring stayed full until the caller's wait callback gave up: the server released
    /// no slot (`tail` did not advance far enough). The claimed ring position is kept and
    /// the next call on this client resumes waiting for it.
    RingFull,
    /// `head` or `tail` hold values no run of the protocol can produce (a position behind
    /// one already claimed, `tail` moving back or past `head`, more positions claimed
    /// beyond the ring than there are clients): the region was overwritten.
    RingCorrupt,
}

/// Why a reply was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyError {
    /// The client closed or was evicted since the request (the token's epoch is stale).
    ClientGone,
    /// The token names no slot of this region.
    BadToken,
    /// The token's call is not one the server took and has not answered: it was answered
    /// already (whether or not the client has read the answer, or called again on the
    /// slot since), or it was never taken.
    Duplicate,
}

impl core::error::Error for ConnectError {}
impl core::error::Error for CallError {}
impl core::error::Error for ReplyError {}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NoFreeClientId => "no free client id",
            Self::ServerDisconnected => "server disconnected",
        })
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ServerDisconnected => "server disconnected",
            Self::NoResponseSlot => "every response slot has a call in flight",
            Self::Abandoned => "the server abandoned this ring position",
            Self::RingFull => {
                "ring full: waited for the server to release a slot (advance tail) and gave up; the claimed position is kept for the next call"
            }
            Self::RingCorrupt => {
                "ring corrupt: head/tail hold impossible positions (region overwritten)"
            }
        })
    }
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ClientGone => "client closed or evicted",
            Self::BadToken => "token names no response slot",
            Self::Duplicate => "the token's call is already answered (or was never taken)",
        })
    }
}
