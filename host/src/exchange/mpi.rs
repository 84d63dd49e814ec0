//! The exchange over MPI (rsmpi).

use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives};

use super::{decode, encode, Record, ReduceOp};
use crate::error::{Error, Result};

/// Ranks are the processes of `MPI_COMM_WORLD`. Initialises MPI on creation and
/// finalises it on drop, so there is one per process.
///
/// MPI reports failures by aborting the job (`MPI_ERRORS_ARE_FATAL`), so the
/// collectives' only errors are argument errors found before the call.
pub struct MpiExchange {
    // Dropped after `world` (field order): MPI_Finalize comes last.
    world: SimpleCommunicator,
    _universe: Universe,
}

impl std::fmt::Debug for MpiExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiExchange")
            .field("rank", &self.rank())
            .field("size", &self.size())
            .finish()
    }
}

impl MpiExchange {
    /// `MPI_Init`. Works under `mpirun` and as a singleton (size 1). Fails if MPI was
    /// already initialised in this process.
    pub fn init() -> Result<Self> {
        let universe = mpi::initialize().ok_or(Error::MpiAlreadyInitialized)?;
        let world = universe.world();
        Ok(Self {
            world,
            _universe: universe,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.world.size() as usize
    }

    /// `MPI_Barrier`.
    pub fn barrier(&self) -> Result<()> {
        self.world.barrier();
        Ok(())
    }

    /// Sends `records[i]` to rank `i`; returns what each rank sent to this one, in rank
    /// order (`MPI_Alltoall` over bytes).
    pub fn all_to_all<T: Record>(&self, records: &[T]) -> Result<Vec<T>> {
        let n = self.size();
        let send = encode("all_to_all", records, n)?;
        let mut recv = vec![0u8; send.len()];
        self.world.all_to_all_into(&send[..], &mut recv[..]);
        Ok(decode(&recv, n))
    }

    /// Every rank's `record`, in rank order (`MPI_Allgather` over bytes).
    pub fn all_gather<T: Record>(&self, record: &T) -> Result<Vec<T>> {
        let n = self.size();
        let mut recv = vec![0u8; n * std::mem::size_of::<T>()];
        self.world.all_gather_into(record.as_bytes(), &mut recv[..]);
        Ok(decode(&recv, n))
    }

    /// `MPI_Allreduce` of one u64.
    pub fn all_reduce_u64(&self, value: u64, op: ReduceOp) -> Result<u64> {
        let mut out = 0u64;
        self.world.all_reduce_into(&value, &mut out, system_op(op));
        Ok(out)
    }

    /// `MPI_Allreduce` of one f64.
    pub fn all_reduce_f64(&self, value: f64, op: ReduceOp) -> Result<f64> {
        let mut out = 0f64;
        self.world.all_reduce_into(&value, &mut out, system_op(op));
        Ok(out)
    }
}

fn system_op(op: ReduceOp) -> SystemOperation {
    match op {
        ReduceOp::Sum => SystemOperation::sum(),
        ReduceOp::Max => SystemOperation::max(),
    }
}
