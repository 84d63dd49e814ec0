//! The software mlx5 device: the NIC for every machine without one.
//!
//! The model reads the bytes the driver side of this crate ([`Sq`](crate::Sq),
//! [`Cq`](crate::Cq), [`Srq`](crate::Srq)) writes, as a ConnectX would, and writes the
//! CQEs a ConnectX would. The driver cannot tell it from hardware: it gets the same raw
//! descriptions ([`SqDesc`](crate::SqDesc), [`CqDesc`](crate::CqDesc),
//! [`SrqDesc`](crate::SrqDesc)) and no trait, mock or cfg sits in its data path.
//!
//! `#![no_std]`, no allocation, no clock: every table is a const-capacity array inside
//! [`Device`], all queue, region and link memory comes from the caller (so it can live in
//! `/dev/shm`), and time is the `now` passed to [`Device::step`].
//!
//! ```text
//!   driver (Sq)  ── WQE bytes, [SND_DBR] ──►  requester ── packets ──► link queue ──┐
//!   driver (Cq)  ◄── CQE bytes, op_own ────   CQ producer                          │
//!   driver (Srq) ── SRQ WQEs, SRQ dbrec ──►   responder ◄──────────────────────────┘
//!                                             (ACK/NAK/READ responses go back the same way)
//! ```
//!
//! # Use
//!
//! 1. [`Device::new`], then [`alloc_pd`](Device::alloc_pd), [`reg_mr`](Device::reg_mr),
//!    [`create_cq`](Device::create_cq), [`create_srq`](Device::create_srq),
//!    [`create_qp`](Device::create_qp): each takes caller memory and returns the raw
//!    description for the driver.
//! 2. Format link memory with [`format_link`] (sized by [`link_bytes`]) and
//!    [`connect`](Device::connect) each QP to its peer (or
//!    [`connect_pair`](Device::connect_pair) two QPs of one device).
//! 3. Drive it: call [`step`](Device::step) with a counter for deterministic tests, or let
//!    the host crate's engine thread call it with real time. Across processes each
//!    process runs its own device over its own objects; only the link queues are shared,
//!    so every CQ and SRQ has a single producer, as in hardware.
//!
//! # What is modeled
//!
//! | area | modeled | not modeled / simplified |
//! |---|---|---|
//! | send WQEs | ctrl, raddr, data and inline segments byte for byte (docs/spec/mlx5.md#send-wqe), wrap at the SQ end and at the u16 counter, `wqe_index`/QPN/DS checks, CE and SE bits, immediates as raw bytes | WQE signatures; fences are no-ops (execution is sequential anyway); BlueFlame copies are never read (WQEs always come from SQ memory, docs/spec/mlx5.md#doorbell) |
//! | opcodes | NOP, SEND, SEND_IMM, RDMA_WRITE, RDMA_WRITE_IMM, RDMA_READ | atomics, SEND_INV, LOCAL_INV, UMR, BIND_MW: LOCAL_QP_OP_ERR |
//! | transports | RC | UC, UD, XRC, DC, raw Ethernet |
//! | receive side | SRQ consumed through `next_wqe_index` read at consume time (docs/spec/mlx5.md#srq); SEND scatter into the SRQ WQE's data segments up to the terminator; WRITE_IMM consumes a WQE and scatters nothing | per-QP RQs; scatter-to-CQE (inline CQE formats 1, 2); SRQ limit events |
//! | CQs | 64- and 128-byte CQEs, owner bit per lap, REQ / RESP_WR_IMM / RESP_SEND / RESP_SEND_IMM / REQ_ERR / RESP_ERR (docs/spec/mlx5.md#cqe64), CQE v0 (SRQN) or v1 (user index), overrun check against `[SET_CI]`: a full CQ goes to error and is reported ([`AsyncEvent::CqError`]), never overwritten | CQE compression; arming and completion events (EQs); resize |
//! | RC semantics | per-QP in-order placement and completion; unsignaled WQEs covered by the next signaled CQE; cumulative ACKs; RNR NAK with the responder's `min_rnr_timer`, retry up to `rnr_retry` (7 = forever), then RNR_RETRY_EXC_ERR; ack timeout × `retry_cnt` go-back-N, then TRANSPORT_RETRY_EXC_ERR; duplicate requests re-ACKed (READs re-executed); zero-length READ/WRITE unchecked (C9-88) | PSNs are 32-bit, not 24; one PSN per MTU-sized packet but no MTU negotiation; NAK-sequence-error is not sent (a gap is dropped and recovered by the timeout) |
//! | errors (docs/spec/mlx5.md#qp-errors-and-flush) | bad lkey / bounds / PD / missing LOCAL_WRITE: LOCAL_PROT_ERR; malformed WQE: LOCAL_QP_OP_ERR; bad rkey / bounds / access: REMOTE_ACCESS_ERR and the responder QP to ERR; op not enabled on the remote QP or receive buffer too small: REMOTE_INVAL_REQ_ERR (responder: LOCAL_LENGTH_ERR); bad receive lkey: REMOTE_OP_ERR (responder: LOCAL_PROT_ERR) | vendor syndromes (a fixed 0xf9 in flushes, 0 elsewhere); SQD/SQE states |
//! | flush | error CQE first, then every outstanding WQE and every WQE rung later with WR_FLUSH_ERR, in order, one per WQE ([`FlushMode::EveryWqe`], default) or per signaled WQE; the SEND being received completes with a RESP_ERR flush; SRQ WQEs are not flushed; LAST_WQE_REACHED event | |
//! | timing & faults | one-way latency and bandwidth per link direction ([`LinkConfig`], packets carry a deliver-at time); [`fail_qp`](Device::fail_qp), [`set_link_cut`](Device::set_link_cut), [`stall_until`](Device::stall_until), [`set_cq_delay`](Device::set_cq_delay) | packet loss other than a cut; reordering; congestion |
//! | memory | every access checked against the MR table and then against the region's bounds (`sim/raw.rs` is the only file that dereferences); payload moves only between registered regions, WQEs and link slots | ODP, memory windows, relaxed ordering, placement-order scrambling |
//!
//! # Memory-model edges (the device side of the crate-level table)
//!
//! | label | device side | pairs with |
//! |---|---|---|
//! | A-SQ-DB | Acquire load of `[SND_DBR]` before reading WQEs | R-SQ-DB (driver) |
//! | A-SRQ-DB | Acquire load of the SRQ record before reading SRQ WQEs | R-SRQ-DB (driver) |
//! | A-CQ-CI | Acquire load of `[CQ_SET_CI]` before reusing a CQE slot | R-CQ-CI (driver) |
//! | R-CQE | CQE bytes 0..62, then Release store of `op_own` | A-CQE (driver) |
//! | R/A-LINK-TAIL, R/A-LINK-HEAD, R/A-LINK-FMT | link queue (layout in `sim/link.rs`) | the other device |
//!
//! The device finishes reading a WQE (and its gather memory) before it writes the CQE
//! that retires it, and places payload before the CQE that reports it.
//!
//! # Trace
//!
//! [`Device::step_traced`] records decoded events ([`TraceEvent`]) into a [`TraceSink`];
//! [`Trace`] keeps the newest ones in caller storage and prints them. With
//! [`Device::qp_info`] that answers "why did this exchange hang?".
//!
//! # Where the `unsafe` is
//!
//! `sim/raw.rs` (every dereference, behind `unsafe fn Raw::new`), `sim/device.rs` and
//! `sim/link.rs` (the `unsafe fn`s that take caller memory and build `Raw`s from it).

mod config;
mod cq;
mod ctx;
mod device;
mod link;
mod mr;
mod qp;
mod raw;
mod requester;
mod responder;
mod srq;
mod trace;
mod wqe;

#[cfg(test)]
mod tests;

pub use config::{
    rnr_timer_ns, Access, AsyncEvent, CqMem, DeviceConfig, FlushMode, LinkConfig, MrKeys, Pd,
    QpAttr, QpState, SimError, SqMem, SrqMem, StepStats,
};
pub use device::{CqInfo, Device, Peer, QpInfo, SrqInfo};
pub use link::{format_link, link_bytes, link_slot_bytes, LinkDesc, LINK_HEADER_BYTES, LINK_MAGIC};
pub use trace::{send_opcode_name, PacketDir, Trace, TraceEvent, TraceKind, TraceSink};
