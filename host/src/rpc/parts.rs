//! A node's fabric objects without its context, for a context that lives elsewhere:
//! the C ABI places the context in C memory and builds it from the descriptions these
//! hand out. [`RpcNode`](super::RpcNode) is the same wiring with the context inside.

use std::sync::Arc;

use copyrpc_core::copyrpc::{EndpointMem, Queues};
use mlx5_raw::SqDesc;

use super::wiring::{self, Wiring};
use super::{split, RpcConfig, CONTROL_BYTES};
use crate::error::{Error, Result};
use crate::fabric::{sim, verbs, Fabric, Qos, QpEndpoint};

/// The shared queues of one context, and the QPs and regions of its endpoints. Dropping
/// it destroys them: drop the context that uses them first.
#[derive(Debug)]
pub struct NodeParts {
    // Field order is drop order: the QPs, regions and queues, then the fabric.
    wiring: Box<dyn Wiring>,
    queues: Queues,
    fabric: Arc<Fabric>,
    cfg: RpcConfig,
    /// Endpoints the send CQ has room to flush (see [`NodeParts::new`]).
    max_endpoints: usize,
}

/// One endpoint's parts: what `Context::create_endpoint` takes, and its QP's address.
#[derive(Debug, Clone, Copy)]
pub struct EndpointParts {
    /// The QP's send queue.
    pub sq: SqDesc,
    /// Send ring, recv ring and control word, in one registered region.
    pub mem: EndpointMem,
    /// What the peer connects to.
    pub address: QpEndpoint,
}

impl NodeParts {
    /// Creates the SRQ and CQs of one context on `fabric`, sized by `cfg`, for up to
    /// `max_endpoints` endpoints: the send CQ has room for every block of that many send
    /// queues ([`RpcConfig::send_cq_entries`]), so all of them failing at once cannot
    /// overrun it, and [`NodeParts::add_endpoint`] refuses one more.
    pub fn new(fabric: Arc<Fabric>, cfg: &RpcConfig, max_endpoints: usize) -> Result<Self> {
        let send_cqes = cfg.send_cq_entries(max_endpoints);
        let (queues, wiring) = match &*fabric {
            Fabric::Sim(_) => wiring::bare::<sim::SimFabric>(Arc::clone(&fabric), cfg, send_cqes)?,
            Fabric::Verbs(_) => wiring::bare::<verbs::Device>(Arc::clone(&fabric), cfg, send_cqes)?,
        };
        Ok(Self {
            wiring,
            queues,
            fabric,
            cfg: *cfg,
            max_endpoints,
        })
    }

    /// The shared queues, for `Context::init`.
    pub fn queues(&self) -> Queues {
        self.queues
    }

    /// A new endpoint's QP and region, with rings of `cfg.ring_bytes`.
    pub fn add_endpoint(&mut self) -> Result<EndpointParts> {
        let i = self.wiring.len();
        if i >= self.max_endpoints {
            return Err(Error::RpcConfig {
                reason: format!(
                    "this node's send CQ was sized for {} endpoints (every send queue \
                     failing at once must fit in it); make the node for more",
                    self.max_endpoints
                ),
            });
        }
        let ring = self.cfg.ring_bytes;
        let (sq, m) = self.wiring.add(
            &self.cfg,
            &format!("copyrpc-c-ep-{i}"),
            2 * ring + CONTROL_BYTES,
        )?;
        let address = self.wiring.address(i).ok_or_else(|| Error::RpcConfig {
            reason: format!("endpoint {i} has no address right after it was made"),
        })?;
        Ok(EndpointParts {
            sq,
            mem: split(m.base, m.lkey, m.rkey, ring),
            address,
        })
    }

    /// Connects the QP whose number is `qpn` to the peer's address.
    pub fn connect(&self, qpn: u32, remote: &QpEndpoint) -> Result<()> {
        let i = (0..self.wiring.len())
            .find(|&i| self.wiring.address(i).is_some_and(|a| a.qpn == qpn))
            .ok_or_else(|| Error::RpcConfig {
                reason: format!("no endpoint of this node has qp {qpn:#x}"),
            })?;
        self.wiring.connect(i, remote, self.cfg.qos)
    }

    /// The traffic class and service level the next [`connect`](Self::connect)s use.
    pub fn set_qos(&mut self, qos: Qos) {
        self.cfg.qos = qos;
    }

    /// The fabric.
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::{open_sim, FabricOptions};

    #[test]
    fn the_send_cq_holds_every_endpoints_flush_and_one_endpoint_more_is_refused() {
        let fabric = Arc::new(open_sim(&FabricOptions::default()).unwrap());
        let cfg = RpcConfig::for_ring(4096);
        let mut parts = NodeParts::new(fabric, &cfg, 3).unwrap();
        assert!(parts.queues().send_cq.cqe_cnt >= cfg.send_cq_entries(3));
        assert!(cfg.send_cq_entries(3) > cfg.cqes, "sized past the default");
        for _ in 0..3 {
            parts.add_endpoint().unwrap();
        }
        let e = parts.add_endpoint().unwrap_err();
        assert!(
            matches!(&e, Error::RpcConfig { reason } if reason.contains("sized for 3")),
            "{e}"
        );
    }

    /// What `set_qos` sets is what the next connects bring the QPs up with (the C ABI's
    /// `copyrpc_fabric_set_qos`).
    #[test]
    fn set_qos_reaches_the_qps_connected_after_it() {
        let open = || Arc::new(open_sim(&FabricOptions::default()).unwrap());
        let cfg = RpcConfig::for_ring(4096);
        let (fa, fb) = (open(), open());
        let mut a = NodeParts::new(Arc::clone(&fa), &cfg, 1).unwrap();
        let mut b = NodeParts::new(Arc::clone(&fb), &cfg, 1).unwrap();
        let (ea, eb) = (a.add_endpoint().unwrap(), b.add_endpoint().unwrap());
        let qos = Qos::new(106, 3).unwrap();
        a.set_qos(qos);
        b.set_qos(qos);
        a.connect(ea.address.qpn, &eb.address).unwrap();
        b.connect(eb.address.qpn, &ea.address).unwrap();
        for (f, qpn) in [(&fa, ea.address.qpn), (&fb, eb.address.qpn)] {
            let Fabric::Sim(s) = &**f else {
                unreachable!("a sim fabric")
            };
            assert_eq!(s.qos_of(qpn), Some(qos));
        }
    }
}
