//! Endpoint exchange between ranks: who connects to whom needs each side's QP and memory
//! addresses before anything can flow.
//!
//! Two implementations with the same methods; a program picks one at start, and code that
//! runs over either (the copyrpc echo, benchkv's orchestration) takes [`Collectives`]:
//!
//! | type | ranks are | for |
//! |---|---|---|
//! | `MpiExchange` | MPI processes (`mpirun -np N`), via rsmpi (feature `mpi`, on by default) | multi-host and multi-process runs |
//! | [`ThreadExchange`] | threads of one process, sharing a board | single-process multi-rank runs and tests |
//!
//! Each offers `rank`, `size`, `barrier`, `all_to_all` and `all_gather` of fixed-size
//! [`Record`]s (e.g. [`QpEndpoint`](crate::fabric::QpEndpoint)), and
//! `all_reduce_u64` / `all_reduce_f64` with [`ReduceOp`]. Collectives must be called by
//! every rank in the same order, as in MPI. [`options`] compares the options every rank
//! of a job must share.

pub mod launch;
#[cfg(feature = "mpi")]
mod mpi;
pub mod options;
mod threads;

#[cfg(feature = "mpi")]
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

/// The collectives both exchanges offer, for setup code that runs over either (nothing on
/// a data path goes through it).
pub trait Collectives {
    /// This rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// Every rank reaches it before any leaves.
    fn barrier(&self) -> Result<()>;
    /// `records[i]` to rank `i`; what each rank sent here, in rank order.
    fn all_to_all<T: Record>(&self, records: &[T]) -> Result<Vec<T>>;
    /// Every rank's `record`, in rank order.
    fn all_gather<T: Record>(&self, record: &T) -> Result<Vec<T>>;
    /// All-reduce of one u64.
    fn all_reduce_u64(&self, value: u64, op: ReduceOp) -> Result<u64>;
    /// All-reduce of one f64.
    fn all_reduce_f64(&self, value: f64, op: ReduceOp) -> Result<f64>;
}

macro_rules! collectives_by_inherent_methods {
    ($t:ty) => {
        impl Collectives for $t {
            fn rank(&self) -> usize {
                <$t>::rank(self)
            }
            fn size(&self) -> usize {
                <$t>::size(self)
            }
            fn barrier(&self) -> Result<()> {
                <$t>::barrier(self)
            }
            fn all_to_all<T: Record>(&self, records: &[T]) -> Result<Vec<T>> {
                <$t>::all_to_all(self, records)
            }
            fn all_gather<T: Record>(&self, record: &T) -> Result<Vec<T>> {
                <$t>::all_gather(self, record)
            }
            fn all_reduce_u64(&self, value: u64, op: ReduceOp) -> Result<u64> {
                <$t>::all_reduce_u64(self, value, op)
            }
            fn all_reduce_f64(&self, value: f64, op: ReduceOp) -> Result<f64> {
                <$t>::all_reduce_f64(self, value, op)
            }
        }
    };
}
#[cfg(feature = "mpi")]
collectives_by_inherent_methods!(MpiExchange);
collectives_by_inherent_methods!(ThreadExchange);
