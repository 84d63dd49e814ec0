//! Raw mlx5 data path: WQE/CQE/doorbell layouts and the driver side over queue memory.
//!
//! `#![no_std]`, no allocation, no clock, no I/O. Unsafe lives in `src/mem.rs` (every
//! dereference of queue memory, doorbell records and the BlueFlame window),
//! `src/barrier.rs` (the barrier instructions) and the `unsafe fn` constructors and
//! DMA-lifetime contracts of `src/sq/`. `src/layout/` is `#![forbid(unsafe_code)]`.
#![cfg_attr(not(test), no_std)]
#![warn(missing_docs)]

pub mod barrier;
pub mod desc;
pub mod layout;
mod mem;
pub mod sq;

pub use desc::{CqDesc, SqDesc, SrqDesc};
pub use sq::{
    Payload, PostError, Posted, Remote, RetireError, Sge, Sq, SqBatch, SqConfig, SqInitError,
};
