//! The transports between ranks, as the threaded runner builds them: copyrpc over the
//! fabric with its endpoints exchanged over MPI, or the in-process loopback of
//! `--loopback-ranks`.

use copyrpc_host::exchange::Collectives;
use copyrpc_host::fabric::{self, verbs, FabricKind, FabricOptions};

use crate::cluster::Cluster;
use crate::config::Config;
use copyrpc_host::rpc::{sizing, RpcConfig};

use crate::remote::{connect_all, AnyRemote, Loopback, RingSize};
use crate::route::endpoint_daemon;

/// The copyrpc settings of a threaded-world rank with `peers` peers: each endpoint
/// sized for the calls that peer can really have in flight, the rank's C × QD spread
/// over its peers ([`sizing::calls_per_peer`]): the ring (with `--rpc-ring auto`) and
/// the send queue ([`sizing::sq_wrs_for_calls`]); `--tclass` and `--sl`. With one peer
/// the ring is `cfg.copyrpc_ring`, as the set-up line reports it. The virtual world
/// keeps `cfg.copyrpc_ring` and sizes its send queues itself (`crate::vworld`).
pub fn rank_rpc_config(cfg: &Config, peers: u32) -> RpcConfig {
    let calls = cfg.clients as u64 * u64::from(cfg.queue_depth);
    let per_peer = sizing::calls_per_peer(calls, u64::from(peers));
    let ring = if cfg.rpc_ring_auto {
        RingSize::for_calls(per_peer)
    } else {
        cfg.copyrpc_ring
    };
    RpcConfig {
        sq_wrs: sizing::sq_wrs_for_calls(per_peer),
        qos: cfg.qos,
        ..RpcConfig::for_ring(ring.bytes())
    }
}

/// What a threaded-world rank with `peers` peers registers with the NIC
/// (`copyrpc_host::rpc::sizing::pinned_bytes` of [`rank_rpc_config`]): every endpoint's
/// rings and SQ, every context's CQs and SRQ, contexts of [`crate::remote::EPS`] endpoints
/// (the `delegation` layout; `meta` spreads them over K daemons, up to K - 1 contexts
/// more).
pub fn pinned_bytes(cfg: &Config, peers: u32) -> u64 {
    let rpc = rank_rpc_config(cfg, peers);
    copyrpc_host::rpc::sizing::pinned_bytes(&rpc, u64::from(peers), crate::remote::EPS as u64)
}

/// Builds each daemon's transport (index = daemon id; `None` for a daemon that holds no
/// remote rank), on the main thread before the daemons start; the daemons take them.
///
/// Where the copyrpc wiring goes: with `cluster.size() > 1`, open the fabric
/// (`cfg.fabric`, `cfg.device`), build one copyrpc context per daemon that holds an
/// endpoint (the peers `r` with `endpoint_daemon(cfg.backend, r, cfg.daemons) == d`),
/// exchange their records over `cluster` (it implements the host's `Collectives`:
/// docs/spec/benchkv.md#orchestration, steps 6 and 8) and return `AnyRemote::Copyrpc(..)` values. Every rank calls this
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
        // Orchestration steps 6 and 8 (docs/spec/benchkv.md#orchestration): the fabric, a
        // context per daemon that holds endpoints, and the endpoint exchange over MPI.
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
        let remotes = connect_all(std::sync::Arc::clone(&fabric), cluster, &peers_of, &rpc)?;
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

/// The fabric `--fabric`/`--device` resolve to, in words. It is opened only by a
/// transport that needs it; asking for `verbs` without a device is refused here already.
pub fn resolve_fabric(cfg: &Config) -> Result<String, String> {
    let mut opts = FabricOptions::default();
    opts.verbs.device = cfg.device.clone();
    let sel = fabric::select(cfg.fabric, &opts).map_err(|e| format!("--fabric: {e}"))?;
    if sel.kind == FabricKind::Verbs {
        // The least any multi-rank run registers (one peer), against RLIMIT_MEMLOCK:
        // named here, before MPI, with or without a device (the open checks the full
        // figure for the world's size).
        let least = pinned_bytes(cfg, 1);
        let memlock = verbs::check_memlock(least, verbs::memlock_limit())
            .err()
            .map(|limit| {
                copyrpc_host::error::Error::VerbsMemlock {
                    device: "--fabric verbs".into(),
                    need: least,
                    limit,
                }
                .to_string()
            });
        match verbs::probe().map_err(|e| format!("--fabric verbs: {e}"))? {
            verbs::Probe::NoDevice { detail } => {
                return Err(format!(
                    "--fabric verbs: no RDMA device ({detail}); use --fabric sim or auto{}",
                    memlock.map(|m| format!("\n{m}")).unwrap_or_default()
                ))
            }
            verbs::Probe::Devices(devs) => {
                if let Some(m) = memlock {
                    return Err(m);
                }
                if let Some(name) = &cfg.device {
                    if !devs.iter().any(|d| &d.name == name) {
                        return Err(format!(
                            "--device {name}: no such RDMA device (present: {:?})",
                            devs.iter().map(|d| d.name.as_str()).collect::<Vec<_>>()
                        ));
                    }
                }
            }
        }
    }
    Ok(format!("{} ({})", sel.kind, sel.reason))
}

/// The RDMA device a verbs run uses (`--device`, or the first mlx5 device), `None` on
/// the sim fabric: where the NUMA node and link layer are read from.
pub fn nic_device(cfg: &Config, fabric_desc: &str) -> Option<String> {
    if !fabric_desc.starts_with("verbs") {
        return None;
    }
    if let Some(d) = &cfg.device {
        return Some(d.clone());
    }
    match verbs::probe().ok()? {
        verbs::Probe::Devices(devs) => devs.into_iter().find(|d| d.mlx5).map(|d| d.name),
        verbs::Probe::NoDevice { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn config(args: &[&str]) -> Config {
        use clap::Parser;
        let cli =
            crate::cli::Cli::try_parse_from(std::iter::once("benchkv").chain(args.iter().copied()))
                .unwrap();
        Config::from_cli(&cli).unwrap()
    }

    /// The bistability runs' rank (46 clients × QD 32) at 2, 64 and 1 024 ranks: one peer gets the
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
}
