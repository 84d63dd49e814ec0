//! One rank of benchkv as both runners build it (docs/spec/benchkv.md#orchestration, steps 2–5, 7
//! and 11): the
//! shared-memory servers its clients connect to, its two Flux meshes, each daemon's
//! parts and slabs, each client's set-up. The threaded runner builds one and runs each
//! daemon and client on a thread of its own; the virtual world builds N and runs them as
//! actors. What differs between the two is said once, by [`Runner`].
//!
//! [`result`] is the other end: what a rank reports, and the report assembled from every
//! rank's share. [`transport`] builds the threaded runner's transports between ranks.

pub mod result;
mod servers;
pub mod transport;

use std::sync::atomic::AtomicI64;

use copyrpc_core::flux::Mesh;
use copyrpc_core::shm::{Slab, SlabEntry};
use copyrpc_host::shm::deleg::DelegServer;
use copyrpc_host::shm::ipc::IpcServer;

use crate::client::{ClientSetup, Control, Counters};
use crate::config::{Backend, Config};
use crate::daemon::{Daemon, FluxNode, Parts, SAMPLE_EVERY};
use crate::msg::{DelegatePayload, Request, Response};
use crate::remote::AnyRemote;
use crate::store::Store;
use crate::workload::{client_seed, generate};
use servers::{FluxMem, Servers};

/// How the rank will run: what its daemons and clients do differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runner {
    /// A thread per daemon and client, on `pinned` cores or not.
    Threaded {
        /// Each thread has a core of its own (it may spin when idle).
        pinned: bool,
    },
    /// Actors of the virtual world, on one thread.
    Virtual,
}

/// A daemon's two Flux slabs (user data of its calls), one per lane.
pub type Slabs = [Vec<SlabEntry<u32>>; 2];

/// The memory of one rank that its daemons and clients share, and the servers its
/// daemons take.
#[derive(Debug)]
pub struct Rank {
    /// This rank.
    pub rank: u32,
    runner: Runner,
    ipc_names: Vec<String>,
    ipc: Vec<Option<IpcServer<Request, Response>>>,
    deleg_name: String,
    deleg: Option<DelegServer<Request, Response>>,
    flux: [FluxMem; 2],
    /// Run, stop and failure flags of the rank's clients and daemons.
    pub control: Control,
    ring_credits: AtomicI64,
    /// Each client's live counters.
    pub counters: Vec<Counters>,
}

impl Rank {
    /// Steps 3–5: rank `rank`'s ipc servers and delegation ring (after clearing stale
    /// regions of dead runs), its Flux memory, its clients' counters.
    pub fn new(cfg: &Config, rank: u32, runner: Runner) -> Result<Self, String> {
        let Servers {
            ipc_names,
            ipc,
            deleg_name,
            deleg,
        } = Servers::create(cfg, rank)?;
        let cap = cfg.ring_size as usize;
        Ok(Self {
            rank,
            runner,
            ipc_names,
            ipc: ipc.into_iter().map(Some).collect(),
            deleg_name,
            deleg,
            flux: [
                FluxMem::new(cfg.daemons, cap),
                FluxMem::new(cfg.daemons, cap),
            ],
            control: Control::default(),
            ring_credits: AtomicI64::new(i64::from(cfg.ring_size)),
            counters: (0..cfg.clients).map(|_| Counters::default()).collect(),
        })
    }

    /// The `/dev/shm` regions this rank created (named when a wait on it stalls).
    pub fn region_names(&self) -> Vec<String> {
        self.ipc_names
            .iter()
            .cloned()
            .chain([self.deleg_name.clone()])
            .collect()
    }

    /// Step 7's parts of daemon `d`: its ipc server, the delegation ring for daemon#0,
    /// `remote` (its transport to the ranks it holds). A threaded daemon preloads its
    /// shard on its own thread (first touch on its core), so its store comes empty.
    pub fn daemon_parts(
        &mut self,
        cfg: &Config,
        d: usize,
        remote: Option<AnyRemote>,
    ) -> Parts<AnyRemote> {
        let (metrics, sample_every, spin_when_idle, store) = match self.runner {
            Runner::Threaded { pinned } => (
                cfg.metrics,
                SAMPLE_EVERY,
                // A pinned daemon owns its core: it spins when idle. An unpinned one
                // yields (with more threads than cores it would starve the clients).
                pinned,
                Store::with_capacity(0),
            ),
            // The world samples every loop: its runs have few, and sampling costs no
            // virtual time.
            Runner::Virtual => (true, 1, false, Store::preloaded(cfg.keys, cfg.daemons, d)),
        };
        Parts {
            id: d,
            daemons: cfg.daemons,
            my_rank: self.rank,
            backend: cfg.backend,
            take_per_turn: cfg.take_per_turn,
            poll_budget: cfg.poll_budget,
            adaptive: cfg.adaptive,
            metrics,
            sample_every,
            spin_when_idle,
            fault: cfg.fault,
            store,
            ipc: self.ipc[d]
                .take()
                .expect("each daemon's parts are taken once"),
            deleg: if d == 0 { self.deleg.take() } else { None },
            remote,
        }
    }

    /// The holder and owner meshes (the two lanes of [`crate::daemon::Lane`]).
    pub fn meshes(&self) -> Result<[Mesh<'_, DelegatePayload>; 2], String> {
        Ok([self.flux[0].mesh()?, self.flux[1].mesh()?])
    }

    /// Step 11's set-up of client `c`, with its pregenerated pattern (step 2) over
    /// `ranks` ranks.
    pub fn client_setup(&self, cfg: &Config, c: usize, ranks: u32) -> ClientSetup<'_> {
        // A client that finds the delegation ring full waits inside its call; on one
        // thread nothing else would run meanwhile, so the virtual world always counts
        // the ring's places, and threads only when the clients can fill it.
        let can_fill = (cfg.clients as u64) * u64::from(cfg.queue_depth) > u64::from(cfg.ring_size);
        let counted = self.runner == Runner::Virtual || can_fill;
        ClientSetup {
            my_rank: self.rank,
            daemons: cfg.daemons,
            backend: cfg.backend,
            queue_depth: cfg.queue_depth,
            verify: cfg.verify,
            runs: cfg.runs,
            drain_timeout: cfg.drain_timeout,
            pattern: generate(
                &cfg.pattern_spec(ranks),
                client_seed(cfg.seed, self.rank, c),
            ),
            ipc_names: &self.ipc_names,
            deleg_name: (cfg.backend == Backend::Delegation).then_some(self.deleg_name.as_str()),
            ring_credits: counted.then_some(&self.ring_credits),
            counters: &self.counters[c],
            control: &self.control,
        }
    }
}

/// Empty Flux slabs for one daemon: room for every call it can have out on a lane.
pub fn slabs(cfg: &Config) -> Slabs {
    let n = cfg.daemons * cfg.ring_size as usize;
    std::array::from_fn(|_| (0..n).map(|_| SlabEntry::new()).collect())
}

/// Daemon `parts.id` on its nodes of `meshes`, with `slabs` for its calls' user data.
pub fn daemon<'m, 's>(
    parts: Parts<AnyRemote>,
    meshes: &[Mesh<'m, DelegatePayload>; 2],
    slabs: &'s mut Slabs,
) -> Result<Daemon<'m, 's, AnyRemote>, String> {
    let d = parts.id;
    let [holder_slab, owner_slab] = slabs;
    let node = |mesh: &Mesh<'m, DelegatePayload>, slab| -> Result<FluxNode<'m, 's>, String> {
        mesh.node(d, Slab::new(slab))
            .map_err(|e| format!("daemon {d}: Flux: {e}"))
    };
    let holder = node(&meshes[0], holder_slab)?;
    let owner = node(&meshes[1], owner_slab)?;
    Ok(Daemon::new(parts, holder, owner))
}
