//! What a rank builds before its threads start (docs/spec/benchkv.md#orchestration, steps
//! 3–5): the shared-memory servers the clients connect to, the Flux mesh's memory, the
//! fabric decision, and the lines describing the set-up in the report.

use copyrpc_core::flux::{Mesh, NodeCtl, PairCtl};
use copyrpc_core::shm::spsc::Slot;
use copyrpc_core::shm::Msg;
use copyrpc_host::fabric::{self, verbs, FabricKind, FabricOptions};
use copyrpc_host::shm::deleg::{DelegServer, ServerOptions};
use copyrpc_host::shm::ipc::IpcServer;
use copyrpc_host::shm::reap_dead_regions;
use serde_json::{json, Value};
use std::path::Path;

use crate::config::{Backend, Config};
use crate::msg::{DelegatePayload, Request, Response};
use crate::workload::Distribution;

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
        let least = crate::remote::pinned_bytes(cfg, 1);
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

/// The rank's ipc servers (one per daemon) and delegation ring (`delegation`), named
/// `/benchkv_<pid>_<rank>_...`: the pid keeps concurrent runs on one host apart.
#[derive(Debug)]
pub struct Servers {
    /// Region names of the ipc servers, by daemon.
    pub ipc_names: Vec<String>,
    /// The ipc servers, by daemon (taken by the daemons).
    pub ipc: Vec<IpcServer<Request, Response>>,
    /// Region name of the delegation ring.
    pub deleg_name: String,
    /// The delegation ring (taken by daemon#0).
    pub deleg: Option<DelegServer<Request, Response>>,
}

/// Unlinks the regions of benchkv processes that died without cleaning up (killed by
/// a signal or by `mpirun` tearing a failed job down): each holds up to megabytes of
/// `/dev/shm` until reboot otherwise. Regions of live processes are left alone.
/// Returns how many were removed.
/// The pid in a region name `benchkv_<pid>_...` (as listed in `/dev/shm`).
#[cfg(test)]
fn creator_pid(file_name: &str) -> Option<u32> {
    copyrpc_host::shm::region_creator(file_name, "benchkv_", '_')
}

pub fn reap_stale_regions(dir: &Path) -> usize {
    reap_dead_regions(dir, "benchkv_", '_')
}

impl Servers {
    /// Creates them for `cfg` on rank `rank` (after clearing stale regions of dead runs).
    pub fn create(cfg: &Config, rank: u32) -> Result<Self, String> {
        reap_stale_regions(Path::new("/dev/shm"));
        let prefix = format!("/benchkv_{}_{rank}", std::process::id());
        let ipc_names: Vec<String> = (0..cfg.daemons)
            .map(|d| format!("{prefix}_ipc_{d}"))
            .collect();
        let depth = cfg.slot_depth();
        let ipc = ipc_names
            .iter()
            .map(|n| {
                let shape = copyrpc_core::ipc::Config {
                    max_clients: cfg.clients as u32,
                    depth,
                };
                IpcServer::create(n, shape, true).map_err(|e| format!("ipc server {n}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let deleg_name = format!("{prefix}_deleg");
        let deleg = match cfg.backend {
            Backend::Delegation => {
                let shape = copyrpc_core::deleg::Config {
                    max_clients: cfg.clients as u32,
                    ring_depth: cfg.ring_size,
                    resp_depth: depth,
                };
                let opts = ServerOptions {
                    replace_stale: true,
                    ..ServerOptions::default()
                };
                Some(
                    DelegServer::create(&deleg_name, shape, opts)
                        .map_err(|e| format!("delegation ring {deleg_name}: {e}"))?,
                )
            }
            Backend::Meta => None,
        };
        Ok(Self {
            ipc_names,
            ipc,
            deleg_name,
            deleg,
        })
    }
}

/// The memory of a Flux mesh of `k` nodes with `cap` slots per queue.
#[derive(Debug)]
pub struct FluxMem {
    k: usize,
    cap: usize,
    pairs: Vec<PairCtl>,
    req: Vec<Slot<Msg<DelegatePayload>>>,
    resp: Vec<Slot<Msg<DelegatePayload>>>,
    nodes: Vec<NodeCtl>,
}

impl FluxMem {
    /// Empty queues for `k` nodes.
    pub fn new(k: usize, cap: usize) -> Self {
        Self {
            k,
            cap,
            pairs: (0..k * k).map(|_| PairCtl::new()).collect(),
            req: (0..k * k * cap).map(|_| Slot::new()).collect(),
            resp: (0..k * k * cap).map(|_| Slot::new()).collect(),
            nodes: (0..k).map(|_| NodeCtl::new()).collect(),
        }
    }

    /// The mesh over this memory.
    pub fn mesh(&self) -> Result<Mesh<'_, DelegatePayload>, String> {
        Mesh::new(
            self.k,
            self.cap,
            &self.pairs,
            &self.req,
            &self.resp,
            &self.nodes,
        )
        .map_err(|e| format!("Flux mesh: {e}"))
    }
}

/// The set-up as `(name, value)` pairs, for every output format.
pub fn describe(
    cfg: &Config,
    mpi_size: u32,
    fabric: &str,
    pins: Option<&[usize]>,
) -> Vec<(&'static str, Value)> {
    let mut setup = vec![
        ("backend", json!(cfg.backend.as_str())),
        ("mpi_ranks", json!(mpi_size)),
        ("ranks", json!(cfg.ranks(mpi_size))),
        ("loopback_ranks", json!(cfg.loopback_ranks)),
        ("daemons", json!(cfg.daemons)),
        ("clients", json!(cfg.clients)),
        ("queue_depth", json!(cfg.queue_depth)),
        ("duration_s", json!(cfg.duration.as_secs_f64())),
        ("runs", json!(cfg.runs)),
        ("keys", json!(cfg.keys)),
    ];
    match cfg.distribution {
        Distribution::Uniform => setup.push(("distribution", json!("uniform"))),
        Distribution::Zipf { theta } => {
            setup.push(("distribution", json!("zipf")));
            setup.push(("zipf_theta", json!(theta)));
        }
    }
    let budget = if let Some(label) = cfg.adaptive_label() {
        json!(label)
    } else if cfg.poll_budget == 0 {
        json!("off")
    } else {
        json!(cfg.poll_budget)
    };
    let take = if cfg.take_per_turn == usize::MAX {
        json!("all")
    } else {
        json!(cfg.take_per_turn)
    };
    setup.extend([
        ("read_ratio", json!(cfg.read_ratio)),
        ("ring_size", json!(cfg.ring_size)),
        ("poll_budget", budget),
        ("take_per_turn", take),
        ("copyrpc_ring_bytes", json!(cfg.copyrpc_ring.bytes())),
        ("rpc_ring_auto", json!(cfg.rpc_ring_auto)),
        ("rpc_ring_calls_per_peer", json!(cfg.copyrpc_ring.calls())),
        ("seed", json!(cfg.seed)),
        ("verify", json!(cfg.verify)),
        ("fabric", json!(fabric)),
        ("pinned", json!(pins.is_some())),
        ("cores", json!(pins.unwrap_or_default())),
    ]);
    setup
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_names_give_their_creator() {
        assert_eq!(creator_pid("benchkv_1234_0_ipc_1"), Some(1234));
        assert_eq!(creator_pid("benchkv_x_0"), None);
        assert_eq!(creator_pid("copyrpc-sim-5"), None);
    }

    #[test]
    fn only_regions_of_dead_processes_are_reaped() {
        let dir = std::env::temp_dir().join(format!("benchkv-reap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dead = {
            let mut c = std::process::Command::new("true").spawn().unwrap();
            let pid = c.id();
            c.wait().unwrap();
            pid
        };
        let me = std::process::id();
        // A live process that is not us: its region (younger than it) stays.
        let mut live = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let other = live.id();
        for n in [
            format!("benchkv_{dead}_0_ipc_0"),
            format!("benchkv_{dead}_0_deleg"),
            // Our pid, but not created by this process: left by an earlier process
            // that had our pid (pids wrap), so it is reaped too.
            format!("benchkv_{me}_0_ipc_0"),
            format!("benchkv_{other}_0_ipc_0"),
            "other_region".to_string(),
        ] {
            std::fs::write(dir.join(n), b"").unwrap();
        }
        let reaped = reap_stale_regions(&dir);
        let _ = live.kill();
        let _ = live.wait();
        assert_eq!(reaped, 3);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            vec![
                format!("benchkv_{other}_0_ipc_0"),
                "other_region".to_string()
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
