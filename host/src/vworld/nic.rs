//! A NIC of the virtual world: a sim device that no engine thread drives, stepped by
//! the actor that owns it at the virtual times of its turns.

use std::sync::Arc;

use crate::fabric::sim::{SimFabric, StepStats};
use crate::fabric::Fabric;

/// A manually stepped sim fabric (opened with `Stepping::Manual`).
#[derive(Debug, Clone)]
pub struct VirtualNic(Arc<Fabric>);

impl VirtualNic {
    /// Wraps `fabric`, which must be a sim fabric opened with manual stepping: the
    /// virtual world opens no other.
    pub fn new(fabric: Arc<Fabric>) -> Self {
        assert!(
            matches!(*fabric, Fabric::Sim(_)),
            "a virtual NIC is a sim fabric"
        );
        Self(fabric)
    }

    /// The fabric, to build queues and QPs on.
    pub fn fabric(&self) -> &Arc<Fabric> {
        &self.0
    }

    /// The sim fabric behind it.
    pub fn sim(&self) -> &SimFabric {
        match &*self.0 {
            Fabric::Sim(s) => s,
            _ => unreachable!("checked in new"),
        }
    }

    /// Moves the device to `now_ns`: delivers what has arrived by then, sends what was
    /// posted. What it did (empty when the device is not manually stepped).
    pub fn step(&self, now_ns: u64) -> StepStats {
        self.sim().step(now_ns).unwrap_or_default()
    }

    /// Stops the device until `until_ns` (a `stall` fault).
    pub fn stall_until(&self, until_ns: u64) {
        self.sim().engine().with(|d| d.stall_until(until_ns));
    }

    /// Cuts (or mends) the link of QP `qpn`.
    pub fn set_link_cut(&self, qpn: u32, cut: bool) -> Result<(), String> {
        self.sim()
            .engine()
            .with(|d| d.set_link_cut(qpn, cut))
            .map_err(|e| format!("QP {qpn:#x}: {e:?}"))
    }
}
