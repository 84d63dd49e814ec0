//! What a copyrpc node needs from a fabric, once per fabric: the shared queues (SRQ, two
//! CQs), a QP and a registered region per endpoint, the QP's address for the peer, and
//! connecting it. [`RpcNode`](super::RpcNode) is written once over [`NodeFabric`]; the
//! sim and verbs fabrics each implement it here, so the node's set-up, record filling
//! and connecting are not repeated per fabric.
//!
//! The objects a node creates stay alive in a [`Wired`] until the node drops, after its
//! context (field order in `RpcNode`); the node sees them only as [`Wiring`].

use std::fmt::Debug;
use std::sync::Arc;

use copyrpc_core::copyrpc::Queues;
use mlx5_raw::SqDesc;

use super::RpcConfig;
use crate::error::Result;
use crate::fabric::{sim, verbs, Fabric, Qos, QpEndpoint};

/// A registered region: where it starts and its keys.
pub(crate) struct MrParts {
    pub(crate) base: *mut u8,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
}

/// One fabric's part of a copyrpc node (see the module docs).
pub(crate) trait NodeFabric: Debug + Sized + 'static {
    /// The shared queues and anything they need kept alive.
    type Shared: Debug + Send;
    /// One endpoint's QP.
    type Qp: Debug + Send;
    /// One endpoint's registered region.
    type Mr: Debug + Send;

    /// This fabric inside the enum, if it is this kind.
    fn of(f: &Fabric) -> Option<&Self>;
    /// Creates the SRQ and the two CQs every endpoint of the node shares, the send CQ
    /// of `send_cqes` entries.
    fn shared(&self, cfg: &RpcConfig, send_cqes: u32) -> Result<(Queues, Self::Shared)>;
    /// A QP on the shared queues, and a region of `len` bytes registered for RDMA.
    fn endpoint(
        &self,
        cfg: &RpcConfig,
        shared: &Self::Shared,
        name: &str,
        len: usize,
    ) -> Result<(Self::Qp, SqDesc, Self::Mr)>;
    /// Base and keys of a region.
    fn mr_parts(mr: &Self::Mr) -> MrParts;
    /// What the peer needs to connect to `qp`.
    fn address(&self, qp: &Self::Qp) -> QpEndpoint;
    /// Brings `qp` up towards the peer's address, with `qos`.
    fn connect(&self, qp: &Self::Qp, remote: &QpEndpoint, qos: Qos) -> Result<()>;
}

impl NodeFabric for sim::SimFabric {
    /// The lkey region, and the send CQ, recv CQ and SRQ numbers (the queues themselves
    /// live in the fabric's region).
    type Shared = (sim::SimMr, [u32; 3]);
    type Qp = sim::SimQp;
    type Mr = sim::SimMr;

    fn of(f: &Fabric) -> Option<&Self> {
        match f {
            Fabric::Sim(s) => Some(s),
            Fabric::Verbs(_) => None,
        }
    }

    fn shared(&self, cfg: &RpcConfig, send_cqes: u32) -> Result<(Queues, Self::Shared)> {
        let send_cq = self.create_cq(send_cqes)?;
        let recv_cq = self.create_cq(cfg.cqes.max(cfg.srq_wqes))?;
        let srq = self.create_srq(cfg.srq_wqes, 1)?;
        let lkey_mr = self.alloc_mr("srq-lkey", 64, mlx5_raw::sim::Access::ALL)?;
        let q = Queues {
            srq,
            srq_lkey: lkey_mr.lkey(),
            send_cq,
            recv_cq,
        };
        Ok((q, (lkey_mr, [send_cq.cqn, recv_cq.cqn, srq.srqn])))
    }

    fn endpoint(
        &self,
        cfg: &RpcConfig,
        (_, [send_cqn, recv_cqn, srqn]): &Self::Shared,
        name: &str,
        len: usize,
    ) -> Result<(Self::Qp, SqDesc, Self::Mr)> {
        let qp = self.create_qp(&sim::SimQpOptions {
            max_send_wr: cfg.sq_wrs,
            ..sim::SimQpOptions::new(*send_cqn, *recv_cqn, Some(*srqn))
        })?;
        let mr = self.alloc_mr(name, len, mlx5_raw::sim::Access::ALL)?;
        Ok((qp, qp.sq_desc(), mr))
    }

    fn mr_parts(mr: &Self::Mr) -> MrParts {
        MrParts {
            base: mr.as_ptr(),
            lkey: mr.lkey(),
            rkey: mr.rkey(),
        }
    }

    fn address(&self, qp: &Self::Qp) -> QpEndpoint {
        sim::SimFabric::endpoint(self, qp)
    }

    fn connect(&self, qp: &Self::Qp, remote: &QpEndpoint, qos: Qos) -> Result<()> {
        sim::SimFabric::connect_qos(self, qp, remote, qos)
    }
}

/// A verbs node's shared queues, owned (the QPs were created against them).
#[derive(Debug)]
pub(crate) struct VerbsShared {
    /// The node's thread domain: one thread drives a copyrpc context, so its QPs get a
    /// UAR of their own. `None` when the device could not make one (see
    /// [`verbs::ThreadDomain`]): the QPs then sit on the device's PD and shared
    /// registers, which `mlx5_raw::SharedBf` serialises.
    domain: Option<verbs::ThreadDomain>,
    _lkey_mr: verbs::Mr,
    srq: verbs::Srq,
    send_cq: verbs::Cq,
    recv_cq: verbs::Cq,
}

impl NodeFabric for verbs::Device {
    type Shared = VerbsShared;
    type Qp = verbs::Qp;
    type Mr = verbs::Mr;

    fn of(f: &Fabric) -> Option<&Self> {
        match f {
            Fabric::Verbs(d) => Some(d),
            Fabric::Sim(_) => None,
        }
    }

    fn shared(&self, cfg: &RpcConfig, send_cqes: u32) -> Result<(Queues, Self::Shared)> {
        let send_cq = self.create_cq(send_cqes)?;
        let recv_cq = self.create_cq(cfg.cqes.max(cfg.srq_wqes))?;
        let srq = self.create_srq(cfg.srq_wqes, 1)?;
        let lkey_mr = self.alloc_mr("srq-lkey", 4096, verbs::Access::LOCAL_WRITE)?;
        let q = Queues {
            srq: srq.desc(),
            srq_lkey: lkey_mr.lkey(),
            send_cq: send_cq.desc(),
            recv_cq: recv_cq.desc(),
        };
        let shared = VerbsShared {
            domain: self.thread_domain().ok(),
            _lkey_mr: lkey_mr,
            srq,
            send_cq,
            recv_cq,
        };
        Ok((q, shared))
    }

    fn endpoint(
        &self,
        cfg: &RpcConfig,
        s: &Self::Shared,
        name: &str,
        len: usize,
    ) -> Result<(Self::Qp, SqDesc, Self::Mr)> {
        let qp = self.create_qp(&verbs::QpOptions {
            max_send_wr: cfg.sq_wrs,
            thread_domain: s.domain.as_ref(),
            ..verbs::QpOptions::new(&s.send_cq, &s.recv_cq, Some(&s.srq))
        })?;
        let mr = self.alloc_mr(name, len, verbs::Access::RDMA)?;
        let sq = qp.sq_desc();
        Ok((qp, sq, mr))
    }

    fn mr_parts(mr: &Self::Mr) -> MrParts {
        MrParts {
            base: mr.as_ptr(),
            lkey: mr.lkey(),
            rkey: mr.rkey(),
        }
    }

    fn address(&self, qp: &Self::Qp) -> QpEndpoint {
        qp.endpoint()
    }

    fn connect(&self, qp: &Self::Qp, remote: &QpEndpoint, qos: Qos) -> Result<()> {
        qp.connect(remote, &verbs::ConnectOptions::with_qos(qos))
    }
}

/// The fabric objects of a node, seen without their fabric's type.
pub(crate) trait Wiring: Debug + Send {
    /// The address of the endpoint made for `peer` (`None`: no endpoint to it).
    fn address(&self, peer: usize) -> Option<QpEndpoint>;
    /// Connects the endpoint made for `peer`, with `qos`.
    fn connect(&self, peer: usize, remote: &QpEndpoint, qos: Qos) -> Result<()>;
    /// Creates one more endpoint (QP and a region of `len` bytes, named `name`) on the
    /// shared queues, as entry `self.len()`; returns its send queue and region.
    fn add(&mut self, cfg: &RpcConfig, name: &str, len: usize) -> Result<(SqDesc, MrParts)>;
    /// Entries (endpoints and gaps).
    fn len(&self) -> usize;
}

/// A node's objects on fabric `F`, indexed by peer rank. Field order is drop order: the
/// QPs and regions before the shared queues they were created on, the fabric last.
#[derive(Debug)]
pub(crate) struct Wired<F: NodeFabric> {
    pub(crate) eps: Vec<Option<(F::Qp, F::Mr)>>,
    /// The queues the QPs were created on.
    pub(crate) shared: F::Shared,
    pub(crate) fabric: Arc<Fabric>,
}

impl<F: NodeFabric> Wired<F> {
    fn fabric(&self) -> &F {
        F::of(&self.fabric).unwrap_or_else(|| unreachable!("a Wired<F> holds an F fabric"))
    }
}

impl<F: NodeFabric> Wiring for Wired<F>
where
    Wired<F>: Send,
{
    fn address(&self, peer: usize) -> Option<QpEndpoint> {
        let (qp, _) = self.eps.get(peer)?.as_ref()?;
        Some(self.fabric().address(qp))
    }

    fn connect(&self, peer: usize, remote: &QpEndpoint, qos: Qos) -> Result<()> {
        match self.eps.get(peer).and_then(Option::as_ref) {
            Some((qp, _)) => self.fabric().connect(qp, remote, qos),
            None => Ok(()),
        }
    }

    fn add(&mut self, cfg: &RpcConfig, name: &str, len: usize) -> Result<(SqDesc, MrParts)> {
        let (qp, sq, mr) = self.fabric().endpoint(cfg, &self.shared, name, len)?;
        let parts = F::mr_parts(&mr);
        self.eps.push(Some((qp, mr)));
        Ok((sq, parts))
    }

    fn len(&self) -> usize {
        self.eps.len()
    }
}

/// The shared queues of a node on `fabric` (of kind `F`), with no endpoint yet and a
/// send CQ of `send_cqes` entries (`RpcConfig::send_cq_entries` of the endpoints the
/// caller will add).
pub(crate) fn bare<F: NodeFabric>(
    fabric: Arc<Fabric>,
    cfg: &RpcConfig,
    send_cqes: u32,
) -> Result<(Queues, Box<dyn Wiring>)>
where
    Wired<F>: Send,
{
    let f = F::of(&fabric).unwrap_or_else(|| unreachable!("dispatched on the fabric kind"));
    let (queues, shared) = f.shared(cfg, send_cqes)?;
    let wired = Wired::<F> {
        eps: Vec::new(),
        shared,
        fabric: Arc::clone(&fabric),
    };
    Ok((queues, Box::new(wired)))
}
