//! copyrpc over a fabric: the glue between the fabric's objects and the core's
//! [`Context`].
//!
//! [`RpcNode`] is a copyrpc context with one endpoint per peer rank it serves (all
//! other ranks, or a subset when a rank spreads its peers over several contexts, one per
//! polling thread): it creates the shared SRQ and CQs, a QP and a registered region (send
//! ring, recv ring, control word) per peer, and brings them up from the peers'
//! [`PeerRecord`]s, which every rank exchanges in one all-to-all. Several nodes of a rank
//! share one fabric ([`Arc<Fabric>`]); each fills its peers' entries of the rank's record
//! table ([`RpcNode::fill_records`]). The same code runs over the verbs fabric (a ConnectX) and
//! the sim fabric (the device model); only the object creation differs.
//!
//! [`echo`] is the end-to-end check built on it: every rank calls every other rank with
//! checksummed payloads and answers their calls, over MPI ranks or thread ranks.

pub mod echo;
mod parts;
pub mod sizing;
mod wiring;

pub use parts::{EndpointParts, NodeParts};

use std::sync::Arc;

use copyrpc_core::copyrpc::{
    send_cq_entries, Context, EndpointConfig, EndpointId, EndpointInfo, EndpointMem, Region,
};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use crate::error::{Error, Result};
use crate::exchange::Collectives;
use crate::fabric::{sim, verbs, Fabric, Qos, QpEndpoint};
use wiring::{NodeFabric, Wired, Wiring};

/// Bytes of an endpoint's control region (the exported consumer position and the READ
/// landing word, 16 bytes, on a cache line of their own).
pub(crate) const CONTROL_BYTES: usize = 64;

/// Sizes of a node's queues and rings.
#[derive(Clone, Copy, Debug)]
pub struct RpcConfig {
    /// Recv ring bytes per endpoint (a power of two); the send ring is the same size.
    pub ring_bytes: usize,
    /// SRQ WQEs (zero-length: one per incoming batch in flight).
    pub srq_wqes: u32,
    /// Entries of the recv CQ, and the least of the send CQ, which is sized for the
    /// flush of every send queue ([`RpcConfig::send_cq_entries`]).
    pub cqes: u32,
    /// Send WQEs per QP. The queue this makes ([`sq_wqebbs`](Self::sq_wqebbs)) must
    /// hold [`EndpointConfig::min_sq_bbs`] blocks (16 with the default settings: four
    /// WQEs), or every endpoint is refused with `SqTooSmall`.
    pub sq_wrs: u32,
    /// Endpoint settings (reservation cap, inline threshold, signaling).
    pub endpoint: EndpointConfig,
    /// Traffic class and service level of every connection (`--tclass`, `--sl`); both
    /// sides must use the same ([`RpcNode::connect`] refuses a peer that does not).
    pub qos: Qos,
}

impl RpcConfig {
    /// The default settings (docs/spec/copyrpc.md#defaults) for rings of `ring_bytes`.
    pub const fn for_ring(ring_bytes: usize) -> Self {
        Self {
            ring_bytes,
            srq_wqes: 1024,
            cqes: 4096,
            sq_wrs: 512,
            endpoint: EndpointConfig::for_ring(ring_bytes as u64),
            qos: Qos {
                traffic_class: 0,
                sl: 0,
            },
        }
    }
}

impl RpcConfig {
    /// 64-byte blocks of each endpoint's send queue as the fabrics build it: `sq_wrs`
    /// WQEs of the largest batch WQE (control and address segments, 220 B inline:
    /// 4 blocks), rounded up to a power of two. The verbs provider may round
    /// differently; [`RpcNode`] checks the queues it got against the send CQ.
    pub fn sq_wqebbs(&self) -> u32 {
        let wqe = 32 + (4 + self.endpoint.max_inline).next_multiple_of(16).max(16);
        self.sq_wrs
            .max(1)
            .saturating_mul(wqe.div_ceil(64))
            .checked_next_power_of_two()
            .unwrap_or(1 << 31)
    }

    /// Entries of the send CQ of a node with `peers` endpoints: at least `cqes`, and
    /// room for every block of every send queue, so that all of them failing at once
    /// (each flushing every outstanding WQE with a CQE) cannot overrun it
    /// ([`send_cq_entries`]).
    pub fn send_cq_entries(&self, peers: usize) -> u32 {
        let peers = u32::try_from(peers).unwrap_or(u32::MAX);
        self.cqes.max(send_cq_entries(peers, self.sq_wqebbs()))
    }
}

impl Default for RpcConfig {
    fn default() -> Self {
        Self::for_ring(16 << 10)
    }
}

/// What rank `a` tells rank `b` about the endpoint `a` made for `b` (88 bytes of plain
/// data, so the whole table travels in one all-to-all).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct PeerRecord {
    /// The QP's address on the fabric.
    pub qp: QpEndpoint,
    /// [`EndpointInfo::to_bytes`].
    pub info: [u8; EndpointInfo::BYTES],
    /// 1 when the record describes an endpoint (0 in a rank's slot for itself).
    pub present: u32,
    /// The sender's [`Qos::traffic_class`].
    pub traffic_class: u8,
    /// The sender's [`Qos::sl`].
    pub sl: u8,
    /// Zero.
    pub reserved: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<PeerRecord>() == 88);

/// One rank's copyrpc context with an endpoint per peer rank. See the module docs.
///
/// The context's tables are inline (`EPS × REQS` request entries, `CALLS` pending calls),
/// hundreds of KiB to MiBs; the node builds it in place on the heap (`Context::init`),
/// so any thread can create one.
///
/// Field order is drop order: the context (which holds the driver's view of queues and
/// rings) goes first, then the QPs and regions, then the queues ([`wiring`]), then the
/// fabric.
#[derive(Debug)]
pub struct RpcNode<U, const EPS: usize, const CALLS: usize, const REQS: usize> {
    ctx: Box<Context<U, EPS, CALLS, REQS>>,
    peers: Vec<Option<EndpointId>>,
    by_endpoint: Vec<usize>,
    wiring: Box<dyn Wiring>,
    fabric: Arc<Fabric>,
    rank: usize,
    qos: Qos,
}

fn rpc_err(
    what: &'static str,
    peer: Option<usize>,
) -> impl Fn(copyrpc_core::copyrpc::Error) -> Error {
    move |reason| Error::Rpc { what, peer, reason }
}

impl<U, const EPS: usize, const CALLS: usize, const REQS: usize> RpcNode<U, EPS, CALLS, REQS> {
    /// Creates the context on `fabric` with an endpoint for every rank of `0..ranks`
    /// except `rank`. Connect them with [`connect`](Self::connect) (or use
    /// [`establish`](Self::establish), which also does the exchange).
    pub fn new(fabric: Fabric, rank: usize, ranks: usize, cfg: &RpcConfig) -> Result<Self> {
        let peers: Vec<usize> = (0..ranks).filter(|&p| p != rank).collect();
        Self::for_peers(Arc::new(fabric), rank, ranks, &peers, cfg)
    }

    /// Creates the context on a (shared) fabric with an endpoint for each rank of
    /// `peers` (distinct, each in `0..ranks`, not `rank`).
    pub fn for_peers(
        fabric: Arc<Fabric>,
        rank: usize,
        ranks: usize,
        peers: &[usize],
        cfg: &RpcConfig,
    ) -> Result<Self> {
        if peers.len() > EPS || rank >= ranks {
            return Err(Error::RpcConfig {
                reason: format!(
                    "rank {rank} of {ranks}: {} peers, but this context holds {EPS} endpoints",
                    peers.len()
                ),
            });
        }
        let mut wanted = vec![false; ranks];
        for &p in peers {
            if p >= ranks || p == rank || std::mem::replace(&mut wanted[p], true) {
                return Err(Error::RpcConfig {
                    reason: format!(
                        "rank {rank} of {ranks}: peer list {peers:?} has {p}, which is out of range, this rank, or repeated"
                    ),
                });
            }
        }
        if !cfg.ring_bytes.is_power_of_two() || (cfg.ring_bytes / 32) > REQS {
            return Err(Error::RpcConfig {
                reason: format!(
                    "ring_bytes {} must be a power of two with ring_bytes/32 <= {REQS} (the context's request table)",
                    cfg.ring_bytes
                ),
            });
        }
        match &*fabric {
            Fabric::Sim(_) => Self::build::<sim::SimFabric>(fabric, rank, &wanted, cfg),
            Fabric::Verbs(_) => Self::build::<verbs::Device>(fabric, rank, &wanted, cfg),
        }
    }

    /// The node on fabric `F`: shared queues, the context, and an endpoint (QP and
    /// region) for each `wanted` peer.
    fn build<F: NodeFabric>(
        fabric: Arc<Fabric>,
        rank: usize,
        wanted: &[bool],
        cfg: &RpcConfig,
    ) -> Result<Self>
    where
        Wired<F>: Send,
    {
        let f = F::of(&fabric).unwrap_or_else(|| unreachable!("dispatched on the fabric kind"));
        let peer_count = wanted.iter().filter(|&&w| w).count();
        let (queues, shared) = f.shared(cfg, cfg.send_cq_entries(peer_count))?;
        // Built in place on the heap: the context can be MiBs (`Context::init`).
        let mut slot = Box::<Context<U, EPS, CALLS, REQS>>::new_uninit();
        // SAFETY: the queues were just created on this fabric for this context alone;
        // they stay alive (in the fabric, or in `shared`, kept by the node's wiring)
        // until the node drops, after the context (field order).
        unsafe { Context::init(&mut slot, &queues) }.map_err(rpc_err("Context::init", None))?;
        // SAFETY: `init` returned Ok, so every field is written.
        let mut ctx = unsafe { slot.assume_init() };
        let mut peers = Vec::with_capacity(wanted.len());
        let mut eps = Vec::with_capacity(wanted.len());
        let mut by_endpoint = vec![usize::MAX; EPS];
        // Blocks of every send queue so far: each may flush into the send CQ at once.
        let mut sq_blocks = 0u64;
        for (peer, &want) in wanted.iter().enumerate() {
            if !want {
                peers.push(None);
                eps.push(None);
                continue;
            }
            let (qp, sq, mr) = f.endpoint(
                cfg,
                &shared,
                &format!("copyrpc-peer-{peer}"),
                2 * cfg.ring_bytes + CONTROL_BYTES,
            )?;
            sq_blocks += u64::from(sq.wqe_cnt);
            if sq_blocks > u64::from(queues.send_cq.cqe_cnt) {
                return Err(Error::RpcConfig {
                    reason: format!(
                        "the send CQ's {} entries cannot hold the flush of {sq_blocks} send-queue \
                         blocks (the fabric made SQs of {} blocks, {} expected): all endpoints \
                         failing at once would overrun it",
                        queues.send_cq.cqe_cnt,
                        sq.wqe_cnt,
                        cfg.sq_wqebbs()
                    ),
                });
            }
            let m = F::mr_parts(&mr);
            let mem = split(m.base, m.lkey, m.rkey, cfg.ring_bytes);
            // SAFETY: `sq` describes a fresh QP on the context's queues, `mem` a fresh
            // region registered in the same PD and split into three disjoint parts; the
            // node keeps both alive until after the context (field order), and nothing
            // else in this process touches them.
            let id = unsafe { ctx.create_endpoint(&sq, &mem, cfg.endpoint) }
                .map_err(rpc_err("create_endpoint", Some(peer)))?;
            by_endpoint[usize::from(id.0)] = peer;
            peers.push(Some(id));
            eps.push(Some((qp, mr)));
        }
        let wiring = Box::new(Wired::<F> {
            eps,
            shared,
            fabric: Arc::clone(&fabric),
        });
        Ok(Self {
            ctx,
            peers,
            by_endpoint,
            wiring,
            fabric,
            rank,
            qos: cfg.qos,
        })
    }

    /// This node's records, one per rank (`records[p]` is for rank `p`; zeroed for ranks
    /// this node has no endpoint to).
    pub fn records(&self) -> Result<Vec<PeerRecord>> {
        let mut out = vec![PeerRecord::new_zeroed(); self.peers.len()];
        self.fill_records(&mut out)?;
        Ok(out)
    }

    /// Writes this node's record for each of its peers into `table[peer]`, leaving the
    /// other entries alone, so the nodes of one rank build one table for the all-to-all.
    pub fn fill_records(&self, table: &mut [PeerRecord]) -> Result<()> {
        if table.len() != self.peers.len() {
            return Err(Error::RpcConfig {
                reason: format!(
                    "a record table of {} entries for {} ranks",
                    table.len(),
                    self.peers.len()
                ),
            });
        }
        for (peer, p) in self.peers.iter().enumerate() {
            let (Some(id), Some(qp)) = (p, self.wiring.address(peer)) else {
                continue;
            };
            let info = self
                .ctx
                .local_info(*id)
                .map_err(rpc_err("local_info", Some(peer)))?;
            table[peer] = PeerRecord {
                qp,
                info: info.to_bytes(),
                present: 1,
                traffic_class: self.qos.traffic_class,
                sl: self.qos.sl,
                reserved: [0; 2],
            };
        }
        Ok(())
    }

    /// Brings every endpoint up from what the peers sent (`received[p]` from rank `p`).
    ///
    /// A peer whose records carry another traffic class or service level is refused
    /// before any QP is touched, naming the flag (`--tclass`, `--sl`) and both values.
    pub fn connect(&mut self, received: &[PeerRecord]) -> Result<()> {
        if received.len() != self.peers.len() {
            return Err(Error::RpcConfig {
                reason: format!(
                    "{} peer records for {} ranks",
                    received.len(),
                    self.peers.len()
                ),
            });
        }
        for (peer, (p, rec)) in self.peers.iter().zip(received).enumerate() {
            if p.is_none() {
                continue;
            }
            if rec.present != 1 {
                return Err(Error::RpcConfig {
                    reason: format!("rank {peer} sent no endpoint for rank {}", self.rank),
                });
            }
            let theirs = Qos {
                traffic_class: rec.traffic_class,
                sl: rec.sl,
            };
            if let Some((flag, mine, other)) = self.qos.difference(&theirs) {
                return Err(Error::RpcConfig {
                    reason: format!(
                        "rank {peer} connects with {flag} {other}, rank {} with {flag} {mine}: \
                         every rank needs the same {flag}",
                        self.rank
                    ),
                });
            }
        }
        for (peer, (p, rec)) in self.peers.iter().zip(received).enumerate() {
            let Some(id) = p else { continue };
            let info = EndpointInfo::from_bytes(&rec.info);
            self.wiring.connect(peer, &rec.qp, self.qos)?;
            self.ctx
                .connect(*id, &info)
                .map_err(rpc_err("connect", Some(peer)))?;
        }
        Ok(())
    }

    /// [`new`](Self::new), the all-to-all of records, and [`connect`](Self::connect),
    /// ending with an all-gather of every rank's outcome, so no rank sends before every
    /// peer is up, and a rank whose connect failed (a peer with another ring size, say)
    /// takes every rank down with it at once, each naming it, instead of leaving the
    /// others in a barrier until the collective's timeout.
    pub fn establish(fabric: Fabric, x: &impl Collectives, cfg: &RpcConfig) -> Result<Self> {
        let mut node = Self::new(fabric, x.rank(), x.size(), cfg)?;
        let received = x.all_to_all(&node.records()?)?;
        let connected = node.connect(&received);
        let ok = x.all_gather(&u32::from(connected.is_ok()))?;
        connected?;
        if let Some(rank) = ok.iter().position(|&o| o == 0) {
            return Err(Error::RpcConfig {
                reason: format!(
                    "rank {rank} could not connect its endpoints (its own error says why, \
                     e.g. a peer whose rings differ in size: every rank needs the same \
                     ring size)"
                ),
            });
        }
        Ok(node)
    }

    /// The endpoint to `peer`, if it is another rank.
    pub fn endpoint(&self, peer: usize) -> Option<EndpointId> {
        *self.peers.get(peer)?
    }

    /// Polls until a poll defers no flush, so every reply and call written so far has
    /// been posted (responses that arrive meanwhile go to `on_response`). For the end of
    /// a run: a peer must not wait for a reply that sits unposted in our send ring while
    /// this rank waits in a barrier. Gives up with an error at `deadline`.
    pub fn flush_all(
        &mut self,
        deadline: std::time::Instant,
        mut on_response: impl FnMut(U, std::result::Result<&[u8], copyrpc_core::copyrpc::Error>),
    ) -> Result<()> {
        loop {
            let deferred = self.ctx.stats().flushes_deferred;
            self.ctx.poll(&mut on_response);
            if self.ctx.stats().flushes_deferred == deferred {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                return Err(Error::RpcConfig {
                    reason: format!(
                        "rank {}: send queues still full at the deadline; replies could not be posted",
                        self.rank
                    ),
                });
            }
            std::thread::yield_now();
        }
    }

    /// The rank an endpoint leads to.
    pub fn peer_of(&self, id: EndpointId) -> Option<usize> {
        self.by_endpoint
            .get(usize::from(id.0))
            .copied()
            .filter(|&p| p != usize::MAX)
    }

    /// The context (call, poll, recv, reply).
    pub fn ctx(&mut self) -> &mut Context<U, EPS, CALLS, REQS> {
        &mut self.ctx
    }

    /// The fabric (for the sim engine's trace and faults).
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }
}

/// Send ring, recv ring and control word of one endpoint, laid out in one registered
/// region of `2 * ring + CONTROL_BYTES` bytes.
pub(crate) fn split(base: *mut u8, lkey: u32, rkey: u32, ring: usize) -> EndpointMem {
    let part = |off: usize, len: usize| {
        let addr = base.wrapping_add(off);
        Region {
            addr,
            len,
            va: addr as u64,
            lkey,
            rkey,
        }
    };
    EndpointMem {
        send_ring: part(0, ring),
        recv_ring: part(ring, ring),
        control: part(2 * ring, CONTROL_BYTES),
    }
}
