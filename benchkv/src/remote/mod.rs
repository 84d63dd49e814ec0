//! The inter-rank transport seam: how a daemon sends a request to another rank, gets the
//! answer back, and serves the requests other ranks send it.
//!
//! Daemons see only [`Remote`]. The daemon that holds rank `r`'s endpoint
//! ([`endpoint_daemon`]: daemon#0 for every remote rank with `delegation`, daemon
//! `r % K` with `meta`, seed 000 §1.4) calls it in its loop:
//!
//! - phase 1 ([`crate::daemon`]): [`Remote::poll`] (flush + completions: answers to our
//!   calls come back with the token we gave), then [`Remote::recv`] for requests from
//!   other ranks, answered later with [`Remote::reply`];
//! - phase 2 (delegation) or the Flux phase (meta): [`Remote::call`] for client requests
//!   whose rank is not ours.
//!
//! A call or reply refused for room ([`SendError::Busy`]: copyrpc's `RingFull`,
//! `InsufficientCredit`, `TooManyCalls`, `SqFull`) is parked by the daemon and retried
//! after its next `poll`; nothing is dropped and the daemon never blocks inside a phase,
//! so there is no nested poll (the seed's `nested_resp_buf` exists only because its
//! retry loop polls inside a reply).
//!
//! Implementations: [`Loopback`] (in-process, for tests and `--loopback-ranks`) and
//! [`CopyrpcRemote`] (a copyrpc context per daemon over the fabric's queues, endpoints
//! exchanged over MPI), which [`connect`] builds whenever there is more than one MPI rank.

mod copyrpc;
mod loopback;

pub use self::copyrpc::{
    build_nodes, finish, rank_rpc_config, records, CopyrpcIncoming, CopyrpcRemote, RingSize,
};
pub use loopback::{Loopback, LoopbackIncoming};

use copyrpc_host::exchange::Collectives;
use copyrpc_host::fabric::{self, FabricOptions};

use crate::cluster::Cluster;
use crate::config::{Backend, Config};
use crate::msg::{Request, Response};

/// Why a transport did not take a call or reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// No room now (send queue full, too many calls): poll, then retry.
    Busy,
    /// No room in the peer's ring or no credit from it (copyrpc's `RingFull`,
    /// `InsufficientCredit`): as [`SendError::Busy`], counted apart because a ring sized
    /// for the load (`--rpc-ring auto`) should never give it.
    NoCredit,
    /// Never going to work (the endpoint failed, the payload cannot fit). The daemon
    /// answers the request with `Status::Unreachable`.
    Failed(String),
}

/// One daemon's endpoints to other ranks.
pub trait Remote {
    /// A request received from another rank, to be answered once with [`Remote::reply`].
    type Incoming;

    /// Sends `req` to rank `rank`; the answer comes back from [`Remote::poll`] with
    /// `token`. Nothing is sent when it returns an error.
    fn call(&mut self, rank: u32, req: &Request, token: u64) -> Result<(), SendError>;

    /// Moves the transport forward (sends what was written, reads completions) and hands
    /// every answer that arrived to `on_response(token, response)`. Returns the number of
    /// completions it processed (the CQE batch of `--metrics`). A call whose endpoint
    /// failed is answered here too, with a `Status::Unreachable` response.
    fn poll(&mut self, on_response: &mut dyn FnMut(u64, Response)) -> usize;

    /// The oldest request received from another rank and not yet handed out.
    fn recv(&mut self) -> Option<(Self::Incoming, Request)>;

    /// Answers `incoming`. On [`SendError::Busy`] the handle comes back to be retried.
    #[allow(clippy::result_large_err)]
    fn reply(
        &mut self,
        incoming: Self::Incoming,
        resp: &Response,
    ) -> Result<(), (Self::Incoming, SendError)>;
}

/// The transports a daemon can hold; one variant per implementation (enum dispatch keeps
/// the daemon loop free of virtual calls).
#[derive(Debug)]
pub enum AnyRemote {
    /// In-process loopback.
    Loopback(Loopback),
    /// copyrpc over the fabric (boxed: the context is large).
    Copyrpc(Box<CopyrpcRemote>),
}

/// [`AnyRemote`]'s received request.
#[derive(Debug)]
pub enum AnyIncoming {
    /// From a [`Loopback`].
    Loopback(LoopbackIncoming),
    /// From a [`CopyrpcRemote`].
    Copyrpc(CopyrpcIncoming),
}

impl Remote for AnyRemote {
    type Incoming = AnyIncoming;

    fn call(&mut self, rank: u32, req: &Request, token: u64) -> Result<(), SendError> {
        match self {
            Self::Loopback(l) => l.call(rank, req, token),
            Self::Copyrpc(c) => c.call(rank, req, token),
        }
    }

    fn poll(&mut self, on_response: &mut dyn FnMut(u64, Response)) -> usize {
        match self {
            Self::Loopback(l) => l.poll(on_response),
            Self::Copyrpc(c) => c.poll(on_response),
        }
    }

    fn recv(&mut self) -> Option<(AnyIncoming, Request)> {
        match self {
            Self::Loopback(l) => l.recv().map(|(i, r)| (AnyIncoming::Loopback(i), r)),
            Self::Copyrpc(c) => c.recv().map(|(i, r)| (AnyIncoming::Copyrpc(i), r)),
        }
    }

    fn reply(
        &mut self,
        incoming: AnyIncoming,
        resp: &Response,
    ) -> Result<(), (AnyIncoming, SendError)> {
        match (self, incoming) {
            (Self::Loopback(l), AnyIncoming::Loopback(i)) => l
                .reply(i, resp)
                .map_err(|(i, e)| (AnyIncoming::Loopback(i), e)),
            (Self::Copyrpc(c), AnyIncoming::Copyrpc(i)) => c
                .reply(i, resp)
                .map_err(|(i, e)| (AnyIncoming::Copyrpc(i), e)),
            (_, i) => Err((
                i,
                SendError::Failed("a request answered through another transport".into()),
            )),
        }
    }
}

/// What a threaded-world rank with `peers` peers registers with the NIC
/// (`copyrpc_host::rpc::sizing::pinned_bytes` of [`rank_rpc_config`]): every endpoint's
/// rings and SQ, every context's CQs and SRQ, contexts of [`copyrpc::EPS`] endpoints
/// (the `delegation` layout; `meta` spreads them over K daemons, up to K - 1 contexts
/// more).
pub fn pinned_bytes(cfg: &Config, peers: u32) -> u64 {
    let rpc = rank_rpc_config(cfg, peers);
    copyrpc_host::rpc::sizing::pinned_bytes(&rpc, u64::from(peers), self::copyrpc::EPS as u64)
}

/// The daemon that holds rank `rank`'s endpoint (seed 000 §1.4).
pub fn endpoint_daemon(backend: Backend, rank: u32, daemons: usize) -> usize {
    match backend {
        Backend::Delegation => 0,
        Backend::Meta => rank as usize % daemons,
    }
}

/// Builds each daemon's transport (index = daemon id; `None` for a daemon that holds no
/// remote rank), on the main thread before the daemons start; the daemons take them.
///
/// Where the copyrpc wiring goes: with `cluster.size() > 1`, open the fabric
/// (`cfg.fabric`, `cfg.device`), build one copyrpc context per daemon that holds an
/// endpoint (the peers `r` with `endpoint_daemon(cfg.backend, r, cfg.daemons) == d`),
/// exchange their records over `cluster` (it implements the host's `Collectives`: seed
/// §9 steps 6 and 8) and return `AnyRemote::Copyrpc(..)` values. Every rank calls this
/// at the same point, so collectives inside it line up.
pub fn connect(cfg: &Config, cluster: &Cluster) -> Result<Vec<Option<AnyRemote>>, String> {
    let (mpi_size, my_rank) = (cluster.size() as u32, cluster.rank() as u32);
    let ranks = cfg.ranks(mpi_size);
    let peers_of: Vec<Vec<usize>> = (0..cfg.daemons)
        .map(|d| {
            (0..ranks)
                .filter(|&r| r != my_rank && endpoint_daemon(cfg.backend, r, cfg.daemons) == d)
                .map(|r| r as usize)
                .collect()
        })
        .collect();
    if mpi_size > 1 {
        // Seed §9 steps 6 and 8: the fabric, a context per daemon that holds endpoints,
        // and the endpoint exchange over MPI.
        let mut opts = FabricOptions::default();
        opts.verbs.device = cfg.device.clone();
        opts.verbs.port = cfg.port;
        opts.verbs.gid_index = cfg.gid_index;
        opts.verbs.hugepages = cfg.hugepages;
        // RLIMIT_MEMLOCK is checked against this at open.
        opts.verbs.pinned_bytes = pinned_bytes(cfg, ranks.saturating_sub(1));
        // The sim fabric carves the same objects from one region (virtual size; only
        // carved pieces claim /dev/shm): at least its default, and room for what this
        // rank pins plus each QP's inbound link (512 KiB a peer covers the default
        // 64 slots of 4 KiB).
        let pinned = usize::try_from(opts.verbs.pinned_bytes).unwrap_or(usize::MAX);
        let links = (ranks as usize).saturating_mul(512 << 10);
        opts.sim.region_bytes = opts
            .sim
            .region_bytes
            .max(pinned.saturating_add(links).saturating_add(64 << 20));
        let (fabric, _) =
            fabric::open(cfg.fabric, &opts).map_err(|e| format!("--fabric {}: {e}", cfg.fabric))?;
        if let fabric::Fabric::Verbs(d) = &fabric {
            eprintln!("benchkv: rank {my_rank}: {}", d.describe());
        }
        let rpc = rank_rpc_config(cfg, ranks.saturating_sub(1));
        let fabric = std::sync::Arc::new(fabric);
        let remotes =
            self::copyrpc::connect_all(std::sync::Arc::clone(&fabric), cluster, &peers_of, &rpc)?;
        if cfg.hugepages {
            let report = match &*fabric {
                fabric::Fabric::Verbs(d) => d.huge_pages().map(|r| r.to_string()),
                _ => Some(
                    "the sim fabric's rings live in its /dev/shm region, on 4 KiB pages".into(),
                ),
            };
            if let Some(r) = report {
                eprintln!("benchkv: rank {my_rank}: --hugepages: {r}");
            }
        }
        return Ok(remotes
            .into_iter()
            .map(|r| r.map(|c| AnyRemote::Copyrpc(Box::new(c))))
            .collect());
    }
    Ok(peers_of
        .iter()
        .map(|peers| {
            (!peers.is_empty()).then(|| AnyRemote::Loopback(Loopback::new(cfg.ring_size as usize)))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(args: &[&str]) -> Config {
        use clap::Parser;
        let cli =
            crate::cli::Cli::try_parse_from(std::iter::once("benchkv").chain(args.iter().copied()))
                .unwrap();
        Config::from_cli(&cli).unwrap()
    }

    /// Seed 001's rank (46 clients × QD 32) at 2, 64 and 1 024 ranks: one peer gets the
    /// ring `--rpc-ring auto` reports (every call may go to it), many peers each their
    /// share; the rank's pinned bytes stay within 256 MiB at 1 024 ranks.
    #[test]
    fn threaded_ranks_size_each_peer_by_its_share_of_the_calls() {
        let cfg = config(&[
            "-C",
            "46",
            "--queue-depth",
            "32",
            "--tclass",
            "106",
            "--sl",
            "3",
        ]);
        let r = |ranks: u32| {
            let rpc = rank_rpc_config(&cfg, ranks - 1);
            (rpc.ring_bytes, rpc.sq_wrs)
        };
        assert_eq!(r(2), (cfg.copyrpc_ring.bytes(), 512));
        assert_eq!(r(2), (1 << 20, 512));
        assert_eq!(r(64), (32 << 10, 128));
        assert_eq!(r(1024), (16 << 10, 64));
        assert!(
            pinned_bytes(&cfg, 1023) <= 256 << 20,
            "{}",
            pinned_bytes(&cfg, 1023)
        );
        let q = rank_rpc_config(&cfg, 1).qos;
        assert_eq!((q.traffic_class, q.sl), (106, 3));
        // A ring given by hand is kept; the send queue still follows the share.
        let fixed = config(&["-C", "46", "--queue-depth", "32", "--rpc-ring", "64k"]);
        assert_eq!(
            (
                rank_rpc_config(&fixed, 1023).ring_bytes,
                rank_rpc_config(&fixed, 1023).sq_wrs
            ),
            (64 << 10, 64)
        );
    }

    #[test]
    fn endpoints_spread_by_backend() {
        assert_eq!(endpoint_daemon(Backend::Delegation, 5, 3), 0);
        assert_eq!(endpoint_daemon(Backend::Meta, 5, 3), 2);
        assert_eq!(endpoint_daemon(Backend::Meta, 3, 3), 0);
    }
}
