//! The ranks of a run: MPI under `mpirun`, or this process alone.
//!
//! Plain `benchkv` does not initialise MPI at all, so the default run needs no MPI
//! runtime behaviour (singleton start-up, its warnings) and starts fast; a launcher's
//! environment variables say when we run under one.

use copyrpc_host::error::{Error, Result};
use copyrpc_host::exchange::{Collectives, MpiExchange, Record, ReduceOp};

/// This process's place among the ranks.
#[derive(Debug)]
pub enum Cluster {
    /// One rank, no MPI.
    Single,
    /// `MPI_COMM_WORLD`.
    Mpi(MpiExchange),
}

impl Cluster {
    /// MPI if a launcher started us, else a single rank.
    pub fn from_env() -> Result<Self, String> {
        if Self::launched_by_mpi() {
            MpiExchange::init()
                .map(Self::Mpi)
                .map_err(|e| format!("MPI initialisation failed: {e}"))
        } else {
            Ok(Self::Single)
        }
    }

    /// True when an MPI launcher started this process.
    pub fn launched_by_mpi() -> bool {
        copyrpc_host::vworld::launched_by_mpi()
    }

    /// Bounds each MPI collective (the job aborts past it; see `MpiExchange`). The
    /// orchestrator sets it above its own watchdog's bounds, so the watchdog, which
    /// names the stuck peer, speaks first; this is the backstop.
    pub fn set_collective_timeout(&self, t: std::time::Duration) {
        if let Self::Mpi(m) = self {
            m.set_timeout(t);
        }
    }

    /// `(local rank, ranks on this host)`, from the launcher (1 rank if it does not say):
    /// ranks sharing a host split its cores.
    pub fn local(&self) -> (usize, usize) {
        let var = |names: &[&str]| {
            names
                .iter()
                .find_map(|n| std::env::var(n).ok()?.parse::<usize>().ok())
        };
        match self {
            Self::Single => (0, 1),
            Self::Mpi(_) => {
                let rank = var(&["OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"]).unwrap_or(0);
                let size = var(&["OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"]).unwrap_or(1);
                (rank.min(size.saturating_sub(1)), size.max(1))
            }
        }
    }
}

/// The transports' set-up (the endpoint exchange) runs over either kind of cluster.
impl Collectives for Cluster {
    fn rank(&self) -> usize {
        match self {
            Self::Single => 0,
            Self::Mpi(m) => m.rank(),
        }
    }

    fn size(&self) -> usize {
        match self {
            Self::Single => 1,
            Self::Mpi(m) => m.size(),
        }
    }

    fn barrier(&self) -> Result<()> {
        match self {
            Self::Single => Ok(()),
            Self::Mpi(m) => m.barrier(),
        }
    }

    fn all_to_all<T: Record>(&self, records: &[T]) -> Result<Vec<T>> {
        match self {
            Self::Single if records.len() != 1 => Err(Error::ExchangeShape {
                op: "all_to_all",
                expected: 1,
                got: records.len(),
            }),
            Self::Single => Ok(records.to_vec()),
            Self::Mpi(m) => m.all_to_all(records),
        }
    }

    fn all_gather<T: Record>(&self, record: &T) -> Result<Vec<T>> {
        match self {
            Self::Single => Ok(vec![*record]),
            Self::Mpi(m) => m.all_gather(record),
        }
    }

    fn all_reduce_u64(&self, value: u64, op: ReduceOp) -> Result<u64> {
        match self {
            Self::Single => Ok(value),
            Self::Mpi(m) => m.all_reduce_u64(value, op),
        }
    }

    fn all_reduce_f64(&self, value: f64, op: ReduceOp) -> Result<f64> {
        match self {
            Self::Single => Ok(value),
            Self::Mpi(m) => m.all_reduce_f64(value, op),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_rank_exchanges_with_itself() {
        let c = Cluster::Single;
        assert_eq!((c.rank(), c.size(), c.local()), (0, 1, (0, 1)));
        c.barrier().unwrap();
        assert_eq!(c.all_to_all(&[7u64]).unwrap(), vec![7]);
        assert_eq!(c.all_gather(&9u32).unwrap(), vec![9]);
        assert_eq!(c.all_reduce_u64(3, ReduceOp::Sum).unwrap(), 3);
        assert!(matches!(
            c.all_to_all(&[1u64, 2]),
            Err(Error::ExchangeShape { got: 2, .. })
        ));
    }
}
