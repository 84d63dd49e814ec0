//! Endpoint exchange between ranks: who connects to whom needs each side's QP and memory
//! addresses before anything can flow.
//!
//! Two implementations with the same methods (no trait: a program picks one at start):
//!
//! | type | ranks are | for |
//! |---|---|---|
//! | [`MpiExchange`] | MPI processes (`mpirun -np N`), via rsmpi | multi-host and multi-process runs |
//! | [`ThreadExchange`] | threads of one process, sharing a board | single-process multi-rank runs and tests |
//!
//! Each offers `rank`, `size`, `barrier`, `all_to_all` and `all_gather` of fixed-size
//! [`Record`]s (e.g. [`QpEndpoint`](crate::fabric::QpEndpoint)), and
//! `all_reduce_u64` / `all_reduce_f64` with [`ReduceOp`]. Collectives must be called by
//! every rank in the same order, as in MPI.

mod mpi;
mod threads;

pub use self::mpi::MpiExchange;
pub use self::threads::ThreadExchange;

use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::error::{Error, Result};

/// Plain-old-data records the exchanges carry as raw bytes: any `#[repr(C)]` zerocopy
/// type (every rank must use the same type in a given collective).
pub trait Record: IntoBytes + FromBytes + Immutable + Copy {}

impl<T: IntoBytes + FromBytes + Immutable + Copy> Record for T {}

/// A reduction for `all_reduce_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// Sum (u64 wraps on overflow, as MPI's does).
    Sum,
    /// Maximum.
    Max,
}

impl ReduceOp {
    fn u64(self, a: u64, b: u64) -> u64 {
        match self {
            Self::Sum => a.wrapping_add(b),
            Self::Max => a.max(b),
        }
    }

    fn f64(self, a: f64, b: f64) -> f64 {
        match self {
            Self::Sum => a + b,
            Self::Max => a.max(b),
        }
    }
}

/// `records` (one per rank, in rank order) as one byte string.
fn encode<T: Record>(op: &'static str, records: &[T], size: usize) -> Result<Vec<u8>> {
    if records.len() != size {
        return Err(Error::ExchangeShape {
            op,
            expected: size,
            got: records.len(),
        });
    }
    Ok(records.as_bytes().to_vec())
}

/// The inverse of [`encode`] for `n` records.
fn decode<T: Record>(bytes: &[u8], n: usize) -> Vec<T> {
    let sz = std::mem::size_of::<T>();
    debug_assert_eq!(bytes.len(), n * sz);
    (0..n)
        .map(|i| {
            T::read_from_bytes(&bytes[i * sz..(i + 1) * sz])
                .unwrap_or_else(|_| unreachable!("slice has exactly size_of::<T>() bytes"))
        })
        .collect()
}
