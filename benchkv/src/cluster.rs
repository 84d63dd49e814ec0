//! The ranks of a run: MPI under `mpirun`, or this process alone.
//!
//! Plain `benchkv` does not initialise MPI at all, so the default run needs no MPI
//! runtime behaviour (singleton start-up, its warnings) and starts fast; a launcher's
//! environment variables say when we run under one.

use copyrpc_host::exchange::{MpiExchange, Record};

/// This process's place among the ranks.
#[derive(Debug)]
pub enum Cluster {
    /// One rank, no MPI.
    Single,
    /// `MPI_COMM_WORLD`.
    Mpi(MpiExchange),
}

/// Environment variables a launcher sets: Open MPI, MPICH/Hydra (PMI), PMIx.
const LAUNCHER_VARS: [&str; 4] = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"];

impl Cluster {
    /// MPI if a launcher started us, else a single rank.
    pub fn from_env() -> Result<Self, String> {
        if LAUNCHER_VARS.iter().any(|v| std::env::var_os(v).is_some()) {
            MpiExchange::init()
                .map(Self::Mpi)
                .map_err(|e| format!("MPI initialisation failed: {e}"))
        } else {
            Ok(Self::Single)
        }
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        match self {
            Self::Single => 0,
            Self::Mpi(m) => m.rank() as u32,
        }
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        match self {
            Self::Single => 1,
            Self::Mpi(m) => m.size() as u32,
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

    /// Waits for every rank.
    pub fn barrier(&self) -> Result<(), String> {
        match self {
            Self::Single => Ok(()),
            Self::Mpi(m) => m.barrier().map_err(|e| e.to_string()),
        }
    }

    /// Every rank's `record`, in rank order.
    pub fn all_gather<T: Record>(&self, record: &T) -> Result<Vec<T>, String> {
        match self {
            Self::Single => Ok(vec![*record]),
            Self::Mpi(m) => m.all_gather(record).map_err(|e| e.to_string()),
        }
    }
}
