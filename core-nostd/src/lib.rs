//! copyrpc core: everything above the raw mlx5 queues that does not need an OS.
//!
//! `#![no_std]` with no `alloc`: memory comes from the caller or from fixed-capacity
//! containers, nothing reads a clock and nothing prints. The crate builds for
//! `x86_64-unknown-none` and `aarch64-unknown-none` (CI checks both).
//!
//! | module | holds |
//! |---|---|
//! | [`wire`] | typed views of the 12 B message header, the 32 B flow metadata, IMM encoding, padding |
//! | [`ring`] | free-running virtual positions over power-of-two rings; send and recv ring state |
//! | [`credit`] | the flow-control invariant `in_flight + 2R <= C`, grants, allowances, reservations |
//! | [`shm`] | what the shm protocols share: the SPSC ring, the user-data slab and its tokens, the ring message, the client-id registry (states, owners, eviction), region checks and errors |
//! | [`deleg`] | delegationrpc: MPSC request ring + per-client response slots over a shared region (docs/spec/deleg.md#layout), hole recovery, client-id reuse |
//! | [`ipc`] | per-client SPSC request/response rings over a shared region (the ring is [`shm::spsc`], which Flux uses too) |
//! | [`copyrpc`] | the RPC engine over raw mlx5 queues: context, endpoints, call / poll / recv / reply, batching, wrap, credit, READ fallback, raw READ/WRITE |
//! | [`budget`] | the adaptive poll budget (docs/spec/poll-budget.md): `Params::SEED` (fixed-point EWMAs, hysteresis, warm-up self-identification) and `steady` (answer rate over windows of time, tried moves); time passed in |
//! | [`ops`] | completion ownership (docs/spec/ownership.md): op identities never reused, slots leased and returned only when their work requests completed, generation-tagged wr_ids, primed receive windows, imm-recv matching, `cancel_all` |
//! | [`bulk`] | the four RPC patterns (docs/spec/bulk.md): buffer descriptors in copyrpc requests, the server pulling by READ and pushing by WRITE in bounded, slot-leased chunks |
//! | [`flux`] | N-to-N request/response mesh between threads over caller memory; user data in a per-node slab keyed by generation tokens |
//! | `sync` | the only source of atomics and `UnsafeCell`: `core`'s, or loom's under `--cfg loom` |
//!
//! Modules that opt out of `deny(unsafe_code)` at file level, each saying why:
//! `deleg::layout` (casting a shared mapping to the layout structs, payload cells),
//! `shm::region` (reading the common header words of a mapping), `shm::spsc` (ring slot
//! cells under the single-producer/single-consumer contract), `ipc::layout` (casting a
//! shared mapping), `ipc::client` and `ipc::server` (calls of the ring's `unsafe fn`s),
//! `flux` (calls of the ring's `unsafe fn`s), `copyrpc::{mem, context, pending, post,
//! raw, tx::range}` (registered memory behind `unsafe fn` constructors, the pending
//! table built in place, and the driver's `unsafe fn`s for DMA payloads),
//! `bulk::{mover, link, server}` (transfers over caller buffers the device reads and
//! writes, behind `unsafe fn`s). `sync` opts out of nothing: its `UnsafeCell` wrapper is
//! safe, and each caller's closure holds its own `unsafe` block. Test modules that build
//! fake registered memory opt out too.
#![cfg_attr(not(test), no_std)]
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod budget;
pub mod bulk;
pub mod copyrpc;
pub mod credit;
pub mod deleg;
pub mod flux;
pub mod ipc;
pub mod ops;
pub mod ring;
pub mod shm;
pub mod wire;

mod sync;
#[cfg(test)]
mod test_text;
