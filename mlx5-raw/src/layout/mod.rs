//! Byte layouts of mlx5 WQE segments and CQEs, with the constants of `mlx5dv.h`.
//!
//! Each `#[repr(C)]` struct mirrors a C struct of the installed
//! `/usr/include/infiniband/mlx5dv.h`, uses `zerocopy::big_endian` types for every
//! multi-byte hardware field, and has compile-time size and offset asserts. All of them
//! have alignment 1, so a view can be taken at any byte offset of queue memory with
//! zerocopy (`Cqe64::ref_from_bytes`, `CtrlSeg::read_from_bytes`, ...).
//!
//! Panic contract (smoltcp's, adapted): nothing in this module panics on any input.
//! [`cqe::decode`] checks the length itself and reports formats it cannot represent as
//! [`CqeDecodeError`]. This module contains no `unsafe`.
#![forbid(unsafe_code)]

pub mod consts;
pub mod cqe;
pub mod wqe;

pub use consts::*;
pub use cqe::{
    brief as brief_cqe, decode as decode_cqe, Completion, Cqe64, CqeBrief, CqeDecodeError,
    CqeError, CqeFormat, CqeOpcode, ErrCqe, Syndrome,
};
pub use wqe::{CtrlSeg, DataSeg, FmCeSe, InlineSegHdr, RaddrSeg, SendOpcode, SrqNextSeg};
