//! The exchange over MPI (rsmpi).
//!
//! Every collective is bounded: it is started as its non-blocking form (`MPI_Ibarrier`,
//! `MPI_Iallgather`, ...) and tested until it completes or [`MpiExchange::timeout`]
//! passes. A blocking `MPI_Barrier` waits forever for a rank that is stopped (SIGSTOP),
//! hung, or gone in a way the launcher has not noticed. At the bound the rank prints which
//! collective it waited in and for how long, and aborts the job (`MPI_Abort`, exit status
//! [`EXIT_STUCK`]): MPI offers no way to withdraw from a started collective, and the
//! buffers it writes must not be released under it, so returning an error is not sound.

use std::cell::Cell;
use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::request::{Request, Scope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives};

use super::{decode, encode, Record, ReduceOp};
use crate::error::{Error, Result};

/// Ranks are the processes of `MPI_COMM_WORLD`. Initialises MPI on creation and
/// finalises it on drop, so there is one per process.
///
/// MPI reports failures by aborting the job (`MPI_ERRORS_ARE_FATAL`), and so does a
/// collective that outlives [`MpiExchange::timeout`] (module docs), so the collectives'
/// only errors are argument errors found before the call.
pub struct MpiExchange {
    // Dropped after `world` (field order): MPI_Finalize comes last.
    world: SimpleCommunicator,
    _universe: Universe,
    timeout: Cell<Duration>,
}

/// Exit status of a job aborted because a collective outlived [`MpiExchange::timeout`].
pub const EXIT_STUCK: i32 = 3;

/// The default bound on one collective: long enough for any set-up this project does
/// (a 64-rank endpoint exchange takes well under a second), short enough that a stuck
/// job ends by itself.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

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
            timeout: Cell::new(DEFAULT_TIMEOUT),
        })
    }

    /// How long one collective may wait for the other ranks before the job is aborted.
    pub fn timeout(&self) -> Duration {
        self.timeout.get()
    }

    /// Sets [`timeout`](Self::timeout) (at least 1 ms).
    pub fn set_timeout(&self, t: Duration) {
        self.timeout.set(t.max(Duration::from_millis(1)));
    }

    /// Tests `req` until it completes, or aborts the job at the timeout (see the module
    /// docs). Yields between tests: the other ranks may share this core.
    fn finish<'a, D: ?Sized, S: Scope<'a>>(&self, op: &str, mut req: Request<'a, D, S>) {
        let bound = self.timeout.get();
        let deadline = Instant::now() + bound;
        loop {
            match req.test() {
                Ok(_) => return,
                Err(r) => req = r,
            }
            if Instant::now() >= deadline {
                eprintln!(
                    "copyrpc: rank {}/{}: error: MPI {op} did not complete within {:.1} s: \
                     another rank is stopped, hung or gone; aborting the job",
                    self.rank(),
                    self.size(),
                    bound.as_secs_f64()
                );
                // No destructor runs after the abort: remove this process's /dev/shm
                // regions now (their mappings stay valid until the process is gone).
                let n = crate::shm::unlink_created();
                if n > 0 {
                    eprintln!(
                        "copyrpc: rank {}: removed {n} /dev/shm region(s) before the abort",
                        self.rank()
                    );
                }
                self.world.abort(EXIT_STUCK);
            }
            std::thread::yield_now();
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.world.size() as usize
    }

    /// A barrier (`MPI_Ibarrier`, bounded).
    pub fn barrier(&self) -> Result<()> {
        self.finish("barrier", self.world.immediate_barrier());
        Ok(())
    }

    /// Sends `records[i]` to rank `i`; returns what each rank sent to this one, in rank
    /// order (`MPI_Alltoall` over bytes).
    pub fn all_to_all<T: Record>(&self, records: &[T]) -> Result<Vec<T>> {
        let n = self.size();
        let send = encode("all_to_all", records, n)?;
        let mut recv = vec![0u8; send.len()];
        mpi::request::scope(|sc| {
            let req = self
                .world
                .immediate_all_to_all_into(sc, &send[..], &mut recv[..]);
            self.finish("all-to-all", req);
        });
        Ok(decode(&recv, n))
    }

    /// Every rank's `record`, in rank order (`MPI_Allgather` over bytes).
    pub fn all_gather<T: Record>(&self, record: &T) -> Result<Vec<T>> {
        let n = self.size();
        let mut recv = vec![0u8; n * std::mem::size_of::<T>()];
        mpi::request::scope(|sc| {
            let req = self
                .world
                .immediate_all_gather_into(sc, record.as_bytes(), &mut recv[..]);
            self.finish("all-gather", req);
        });
        Ok(decode(&recv, n))
    }

    /// `MPI_Allreduce` of one u64.
    pub fn all_reduce_u64(&self, value: u64, op: ReduceOp) -> Result<u64> {
        let mut out = 0u64;
        mpi::request::scope(|sc| {
            let req = self
                .world
                .immediate_all_reduce_into(sc, &value, &mut out, system_op(op));
            self.finish("all-reduce", req);
        });
        Ok(out)
    }

    /// `MPI_Allreduce` of one f64.
    pub fn all_reduce_f64(&self, value: f64, op: ReduceOp) -> Result<f64> {
        let mut out = 0f64;
        mpi::request::scope(|sc| {
            let req = self
                .world
                .immediate_all_reduce_into(sc, &value, &mut out, system_op(op));
            self.finish("all-reduce", req);
        });
        Ok(out)
    }
}

fn system_op(op: ReduceOp) -> SystemOperation {
    match op {
        ReduceOp::Sum => SystemOperation::sum(),
        ReduceOp::Max => SystemOperation::max(),
    }
}
