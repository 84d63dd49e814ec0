//! What a rank's clients connect to and its daemons talk through (docs/spec/benchkv.md#orchestration,
//! steps 3–5): the ipc servers and delegation ring in `/dev/shm`, and the Flux meshes' memory.

use std::path::Path;

use copyrpc_core::flux::{Mesh, NodeCtl, PairCtl};
use copyrpc_core::shm::spsc::Slot;
use copyrpc_core::shm::Msg;
use copyrpc_host::shm::deleg::{DelegServer, ServerOptions};
use copyrpc_host::shm::ipc::IpcServer;
use copyrpc_host::shm::reap_dead_regions;

use crate::config::{Backend, Config};
use crate::msg::{DelegatePayload, Request, Response};

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

/// The pid in a region name `benchkv_<pid>_...` (as listed in `/dev/shm`).
#[cfg(test)]
fn creator_pid(file_name: &str) -> Option<u32> {
    copyrpc_host::shm::region_creator(file_name, "benchkv_", '_')
}

/// Unlinks the regions of benchkv processes that died without cleaning up (killed by
/// a signal or by `mpirun` tearing a failed job down): each holds up to megabytes of
/// `/dev/shm` until reboot otherwise. Regions of live processes are left alone.
/// Returns how many were removed.
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
