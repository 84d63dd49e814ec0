//! copyrpc: RPC over RDMA WRITE-with-immediate into per-connection rings
//! (docs/spec/copyrpc.md), on the raw mlx5 queues of [`mlx5_raw`].
//!
//! A [`Context`] owns one SRQ (zero-length receive WQEs: data arrives by WRITE into the
//! rings), one send CQ and one recv CQ shared by all its endpoints, a QPN → endpoint map,
//! the pending calls (a slab whose index is the call id) and the receive queue.
//!
//! ```text
//!   call()/reply() ──► send ring (batched, nothing posted)
//!   poll():  recv CQ ─► batch metadata (credit) ─► responses → callback, requests → recv()
//!            SRQ repost below 2/3 ─► send CQ (retire, READ results, errors)
//!            ─► every endpoint: one WRITE_IMM per batch, READ of the peer's consumer
//! ```
//!
//! | file | holds |
//! |---|---|
//! | `context` | [`Context`], setup ([`Queues`], [`EndpointMem`]), `call`, `recv`, failure |
//! | `endpoint` | one connection: its sides and state, failing it ([`FailureCause`]), what needs both sides |
//! | `tx` | the send side: send ring, credit, wrap ranges, the peer's consumer; calls, replies, batch posts |
//! | `rx` | the receive side: recv ring, held requests, the consumer exported to the peer |
//! | `liveness` | the READ in flight and the quiet clock of the idle-peer probe |
//! | `post` | what an endpoint posts (batches, READ fallback, raw ops) and the completions retiring it |
//! | `poll` | [`Context::poll`], [`Context::poll_bounded`] and completion handling |
//! | `handle` | [`RecvHandle`]: zero-copy request bytes, `reply` once |
//! | `serve` | [`Context::poll_serve`]: requests answered as they are parsed ([`Incoming`]) |
//! | `requests` | per-endpoint received requests; the ring consumer waits for the oldest unanswered |
//! | `pending` | the pending-call slab |
//! | `qpn_map` | QPN → endpoint, fixed capacity, no hashing |
//! | `raw` | raw RDMA READ/WRITE with completion counting |
//! | `mem` | [`Region`] and the checked access to registered memory |
//! | `info`, `config`, `error`, `stats` | [`EndpointInfo`], [`EndpointConfig`], [`Error`], [`Stats`] |
//!
//! # Setting one up
//!
//! 1. Create a PD, register memory, create the two CQs and the SRQ (verbs +
//!    `mlx5dv_init_obj`, or [`mlx5_raw::sim::Device`]); pass their descriptions to
//!    [`Context::new`] in [`Queues`].
//! 2. Per connection: create an RC QP on those CQs and that SRQ, allowing remote read and
//!    write, and pass its [`SqDesc`](mlx5_raw::SqDesc) and the endpoint's three regions
//!    to [`Context::create_endpoint`].
//! 3. Exchange [`EndpointInfo`]s ([`Context::local_info`], [`EndpointInfo::to_bytes`])
//!    out of band, move the QPs to RTS (the device's business), and call
//!    [`Context::connect`] on both sides. No message follows: both start with credit.
//! 4. Loop: `call`, `poll(|user_data, result| ..)`, `recv` and `reply`; or
//!    `poll_serve(.., |request| request.reply(..))` to answer requests as they arrive.
//!    Replies (and calls) written after a poll go out with the next one, or at once
//!    with [`Context::flush`].
//!
//! # Memory
//!
//! The context holds no pointer into itself and owns no registered memory: rings and
//! queues are the caller's, taken by `unsafe fn`s whose contracts say how long they
//! must stay valid. Moving the context (or boxing it, or sending it to another thread)
//! is therefore sound; dropping it leaves the memory to its owner, who must keep it
//! valid until the QPs are destroyed, as with any NIC.
//!
//! # Failure
//!
//! An error completion on an endpoint's QP (or [`Context::fail_endpoint`]) fails the
//! endpoint: every pending call on it completes once, through the same callback as a
//! response, with [`Error::EndpointFailed`] ([`Context::failure_cause`] says why); its queued requests are dropped; calls and
//! replies on it are refused. While calls wait and nothing arrives or is sent, an
//! endpoint READs the peer's consumer every `probe_interval` polls, so a dead peer or
//! link turns into an error completion rather than silence. The polls are counted by
//! the context, so an idle poll costs the same however many calls wait.

mod config;
mod context;
mod endpoint;
mod error;
mod handle;
mod info;
mod liveness;
mod mem;
mod pending;
mod poll;
mod post;
mod qpn_map;
mod raw;
mod requests;
mod rx;
mod serve;
mod stats;
mod tx;

pub use config::{send_cq_entries, EndpointConfig};
pub use context::{Context, CreditSnapshot, EndpointId, EndpointMem, Queues, MAX_ENDPOINTS};
pub use error::{CallError, Error, FailureCause, FailureKind, ReplyError, Side};
pub(crate) use handle::Parked;
pub use handle::RecvHandle;
pub use info::EndpointInfo;
pub use mem::Region;
pub use serve::{Incoming, ServeError};
pub use stats::Stats;
