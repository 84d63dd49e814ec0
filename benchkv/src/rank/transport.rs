//! The transports between ranks, as the threaded runner builds them: copyrpc over the
//! fabric with its endpoints exchanged over MPI, or the in-process loopback of
//! `--loopback-ranks`.

use copyrpc_host::exchange::Collectives;
use copyrpc_host::fabric::{self, verbs, FabricKind, FabricOptions};

use crate::cluster::Cluster;
use crate::config::Config;
use crate::remote::{connect_all, AnyRemote, Loopback};
use crate::route::endpoint_daemon;

/// What a rank with `peers` peers registers, an estimate: both rings of every endpoint,
/// its SQ (128 KiB) and its share of the send CQ (sized for a flush of every SQ: 128
/// KiB), and the context's other queues (16 MiB).
pub fn pinned_bytes(cfg: &Config, peers: u32) -> u64 {
    u64::from(peers) * (2 * cfg.copyrpc_ring.bytes() as u64 + (320 << 10)) + (16 << 20)
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
        // Orchestration steps 6 and 8 (docs/spec/benchkv.md#orchestration): the fabric, a context per daemon that holds endpoints,
        // and the endpoint exchange over MPI.
        let mut opts = FabricOptions::default();
        opts.verbs.device = cfg.device.clone();
        opts.verbs.port = cfg.port;
        opts.verbs.gid_index = cfg.gid_index;
        // RLIMIT_MEMLOCK is checked against this at open.
        opts.verbs.pinned_bytes = pinned_bytes(cfg, ranks.saturating_sub(1));
        // The sim fabric carves the same objects from one region (virtual size; only
        // carved pieces claim /dev/shm): at least its default, and room for what this
        // rank pins.
        let pinned = usize::try_from(opts.verbs.pinned_bytes).unwrap_or(usize::MAX);
        opts.sim.region_bytes = opts.sim.region_bytes.max(pinned.saturating_add(64 << 20));
        let (fabric, _) =
            fabric::open(cfg.fabric, &opts).map_err(|e| format!("--fabric {}: {e}", cfg.fabric))?;
        let remotes = connect_all(fabric, cluster, &peers_of, cfg.copyrpc_ring)?;
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
