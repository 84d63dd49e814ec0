//! Raw mlx5 data path: WQE/CQE/doorbell layouts and the driver side over queue memory.
//!
//! `#![no_std]`, no allocation, no clock, no I/O. The crate knows the bytes of mlx5 send
//! WQEs, SRQ WQEs and CQEs (`mlx5dv.h`) and drives a queue given only its memory: what
//! `mlx5dv_init_obj` hands out for a verbs QP/CQ/SRQ, or what the software device model
//! shares with it. The same code runs against a ConnectX and against the model.
//!
//! | module | holds |
//! |---|---|
//! | [`layout`] | `#[repr(C)]` views of WQE segments and CQEs, constants, the CQE decoder (no `unsafe`) |
//! | [`barrier`] | named device barriers: [`barrier::to_device`], [`barrier::from_device`], [`barrier::ordering_write`], [`barrier::wc_start`], [`barrier::wc_flush`] |
//! | [`desc`] | [`SqDesc`], [`CqDesc`], [`SrqDesc`]: raw queue descriptions |
//! | [`sq`] | [`Sq`]: WQE builders in a borrowing [`SqBatch`], signaling policy, SQ-space accounting, doorbell / BlueFlame |
//! | [`cq`] | [`Cq`]: owner-bit poller lending [`CqeRef`]s, consumer-index doorbell |
//! | [`srq`] | [`Srq`]: free-list posting (rdma-core v44), batched doorbell |
//! | [`sim`] | the software device model: reads these same bytes, executes RC, writes CQEs (its own table of what is modeled) |
//!
//! # Where the `unsafe` is
//!
//! * `src/mem.rs`: every dereference of queue memory, doorbell records and the
//!   BlueFlame window (`RingMem`, `DbRec`, `Mmio`), behind `unsafe fn new` contracts;
//! * `src/barrier.rs`: the `asm!` barrier instructions;
//! * `src/sq/mod.rs`, `src/cq.rs`, `src/srq.rs`: the `unsafe fn new` constructors
//!   (which build the `mem.rs` types from a description) and `unsafe impl Send`; in
//!   `cq.rs` also the lending of a polled CQE slot;
//! * `src/sq/types.rs`, `src/sq/batch.rs`: `unsafe fn`s without unsafe blocks, whose
//!   contracts carry the DMA lifetime of gather/scatter memory
//!   ([`Payload::registered`](sq::Payload::registered), [`Payload::gather`](sq::Payload::gather),
//!   [`SqBatch::rdma_read`](sq::SqBatch::rdma_read)).
//!
//! * `src/sim/raw.rs`, `src/sim/device.rs`, `src/sim/link.rs`: the device model's access
//!   to caller memory (see [`sim`]).
//!
//! `src/layout/` is `#![forbid(unsafe_code)]`.
//!
//! # Memory-model contract with the device
//!
//! Queue memory is shared with the NIC, or with the software device model running on
//! another thread, so the driver is written to be data-race-free under the Rust memory
//! model, not only under x86-TSO. The words that hand work over are accessed only
//! atomically; everything else is plain memory published by them:
//!
//! | edge | driver side | device side | publishes |
//! |---|---|---|---|
//! | R-SQ-DB | Release store of `dbrec[SND_DBR] = be32(pi & 0xffff)`, after [`barrier::to_device`] | Acquire load of `dbrec[SND_DBR]` | WQE bytes |
//! | R-SRQ-DB | Release store of the SRQ `dbrec = be32(counter)`, after [`barrier::to_device`] | Acquire load of the SRQ record | SRQ data segments and `next_wqe_index` links |
//! | A-CQE | Acquire load of a CQE's `op_own` (`AtomicU8`), then [`barrier::from_device`], then the body | body, Release, then the `op_own` store | CQE body (and data the device placed before it) |
//! | R-CQ-CI | Release store of `dbrec[CQ_SET_CI] = be32(ci & 0xffffff)` | Acquire load of `[CQ_SET_CI]` before reusing a slot | the driver's reads of consumed CQEs |
//!
//! The driver never reads a doorbell record, and writes a CQE `op_own` only when
//! stamping a fresh CQ. The device model must read WQEs only after the Acquire of R-SQ-DB
//! and finish reading a WQE before writing the CQE that retires it; the driver then
//! rewrites that WQE slot only after A-CQE. The BlueFlame/doorbell register is written
//! with volatile stores between [`barrier::wc_start`] and [`barrier::wc_flush`]; a
//! software device should not read it concurrently (pass a null `bf_reg`, so the driver
//! rings only the doorbell record).
//!
//! # Threads
//!
//! [`Sq`], [`Cq`] and [`Srq`] are `Send` (each owns its queue memory and can be moved to
//! the thread that polls it) and not `Sync` (every operation takes `&mut self`):
//!
//! ```
//! fn is_send<T: Send>() {}
//! is_send::<mlx5_raw::Sq>();
//! is_send::<mlx5_raw::Cq>();
//! is_send::<mlx5_raw::Srq>();
//! ```
//!
//! ```compile_fail,E0277
//! fn is_sync<T: Sync>() {}
//! is_sync::<mlx5_raw::Cq>();
//! ```
#![cfg_attr(not(test), no_std)]
#![warn(missing_docs)]

pub mod barrier;
pub mod bf;
pub mod cq;
pub mod desc;
pub mod layout;
mod mem;
pub mod sim;
pub mod sq;
pub mod srq;

pub use bf::SharedBf;
pub use cq::{Cq, CqInitError, CqeRef};
pub use desc::{CqDesc, SqDesc, SrqDesc};
pub use sq::{
    Payload, PostError, Posted, Remote, RetireError, Sge, Sq, SqBatch, SqConfig, SqInitError,
};
pub use srq::{Srq, SrqFreeError, SrqInitError, SrqPostError};
