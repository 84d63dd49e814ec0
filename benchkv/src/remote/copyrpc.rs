//! The real inter-rank transport: a copyrpc context over the fabric's queues
//! ([`copyrpc_host::rpc::RpcNode`]), one per daemon that holds endpoints, with an
//! endpoint to each remote rank that daemon serves.
//!
//! Requests and responses travel as their `#[repr(C)]` bytes (24 and 16 bytes): a call
//! reserves exactly a response's size. A peer's bytes are decoded with zerocopy, so a
//! malformed message is a `BadOp` answer or an `Unreachable` result, never undefined
//! behaviour. A call whose endpoint fails completes through `poll` with
//! `Status::Unreachable` (copyrpc hands every pending call back exactly once), so the
//! client that issued it is answered and the drain count stays exact.

use std::sync::Arc;

use copyrpc_core::copyrpc::{Error, RecvHandle};
use copyrpc_host::exchange::Collectives;
use copyrpc_host::fabric::Fabric;
use copyrpc_host::placement;
use copyrpc_host::rpc::{sizing, PeerRecord, RpcConfig, RpcNode};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::SendError;
use crate::msg::{Request, Response, Status};

/// Endpoints per context. A daemon serving more remote ranks holds several contexts
/// (one per 64 peers), so no endpoint limit is set here: the rings' memory is the limit.
pub const EPS: usize = 64;

/// The ring of every endpoint, bytes per direction (`--rpc-ring`): a power of two in
/// [`sizing::RING_MIN`]`..=`[`sizing::RING_MAX`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingSize(usize);

impl RingSize {
    /// `bytes` if the contexts can take it.
    pub fn new(bytes: usize) -> Result<Self, String> {
        if bytes.is_power_of_two() && (sizing::RING_MIN..=sizing::RING_MAX).contains(&bytes) {
            Ok(Self(bytes))
        } else {
            Err(format!(
                "a copyrpc ring of {bytes} B: must be a power of two from {} KiB to {} MiB",
                sizing::RING_MIN >> 10,
                sizing::RING_MAX >> 20
            ))
        }
    }

    /// `auto`: the ring at which `calls` benchkv requests in flight to one peer never
    /// wait for ring credit.
    pub fn for_calls(calls: u64) -> Self {
        Self(sizing::ring_for_calls(calls, REQUEST_BYTES, RESPONSE_BYTES))
    }

    /// Bytes per endpoint and direction.
    pub const fn bytes(self) -> usize {
        self.0
    }

    /// benchkv calls a ring of this size holds in flight to one peer without waiting.
    pub fn calls(self) -> u64 {
        sizing::calls_for_ring(self.0, REQUEST_BYTES, RESPONSE_BYTES)
    }
}

impl Default for RingSize {
    fn default() -> Self {
        Self(sizing::AUTO_MIN)
    }
}

/// A benchkv request's bytes on the wire (its payload).
const REQUEST_BYTES: u32 = std::mem::size_of::<Request>() as u32;
/// A benchkv response's bytes: each call's response allowance.
const RESPONSE_BYTES: u32 = std::mem::size_of::<Response>() as u32;

/// Defines [`Node`], one variant per request-table class: a context's request table
/// (`REQS` entries per endpoint, at least ring / 32) and pending-call table (`CALLS`) are
/// inline and sized at compile time, while the ring itself is a run-time size. So a few
/// classes cover every ring, each the smallest table for rings up to its bound, and a
/// context never carries a table 256 times larger than its ring needs (4 MiB tables for
/// 16 KiB rings, 64 endpoints: 320 MiB of address space).
macro_rules! node_classes {
    ($($(#[$doc:meta])* $name:ident: ring <= $ring:expr, calls $calls:expr;)*) => {
        /// One copyrpc context (up to [`EPS`] endpoints) of a daemon, in the class its
        /// ring needs.
        #[derive(Debug)]
        pub enum Node {
            $($(#[$doc])* $name(Box<RpcNode<u64, EPS, { $calls }, { $ring / 32 }>>),)*
        }

        impl Node {
            /// A context for `peers` on `fabric`, of the smallest class that holds the
            /// ring of `cfg`.
            fn build(
                fabric: Arc<Fabric>,
                rank: usize,
                ranks: usize,
                peers: &[usize],
                cfg: &RpcConfig,
            ) -> Result<Self, String> {
                let e = |e: copyrpc_host::error::Error| e.to_string();
                $(if cfg.ring_bytes <= $ring {
                    return Ok(Node::$name(Box::new(
                        RpcNode::for_peers(fabric, rank, ranks, peers, cfg).map_err(e)?,
                    )));
                })*
                Err(format!(
                    "no copyrpc context class holds a ring of {} B (at most {} MiB)",
                    cfg.ring_bytes,
                    sizing::RING_MAX >> 20
                ))
            }
        }
    };
}

/// Runs `$body` with `$n` bound to the node, whichever its class (the context methods
/// are generic over the sizes, so each arm is its own instance).
macro_rules! with_node {
    ($node:expr, $n:ident => $body:expr) => {
        match $node {
            Node::Upto16k($n) => $body,
            Node::Upto256k($n) => $body,
            Node::Upto1m($n) => $body,
            Node::Upto4m($n) => $body,
        }
    };
}

node_classes! {
    /// Rings up to 16 KiB (512 requests an endpoint, 4 096 calls a context).
    Upto16k: ring <= 16 << 10, calls 4096;
    /// Up to 256 KiB (8 Ki requests an endpoint, 16 Ki calls).
    Upto256k: ring <= 256 << 10, calls 16_384;
    /// Up to 1 MiB (32 Ki requests, 64 Ki calls): the first design's default ring
    /// (docs/spec/copyrpc.md#defaults).
    Upto1m: ring <= 1 << 20, calls 65_536;
    /// Up to 4 MiB (128 Ki requests, 64 Ki calls): the ring of the bistability runs
    /// (docs/spec/poll-budget.md#bistability).
    Upto4m: ring <= 4 << 20, calls 65_536;
}

/// A daemon's copyrpc endpoints: its contexts and which one holds each remote rank.
#[derive(Debug)]
pub struct CopyrpcRemote {
    nodes: Vec<Node>,
    /// `route[rank]`: the index in `nodes` of the context with the endpoint to `rank`,
    /// or `u32::MAX`.
    route: Vec<u32>,
    /// The context `recv` looks at first (round robin, so no context starves).
    next_recv: usize,
}

/// A request received over copyrpc, answered once through [`CopyrpcRemote::reply`].
#[derive(Debug)]
pub struct CopyrpcIncoming {
    node: usize,
    handle: RecvHandle,
}

impl CopyrpcRemote {
    fn node_of(&mut self, rank: u32) -> Option<&mut Node> {
        let i = *self.route.get(rank as usize)?;
        self.nodes.get_mut(i as usize)
    }

    /// See [`super::Remote::call`].
    pub fn call(&mut self, rank: u32, req: &Request, token: u64) -> Result<(), SendError> {
        let Some(node) = self.node_of(rank) else {
            return Err(SendError::Failed(format!(
                "no copyrpc endpoint to rank {rank} in this daemon"
            )));
        };
        with_node!(node, n => {
            let Some(ep) = n.endpoint(rank as usize) else {
                return Err(SendError::Failed(format!(
                    "no copyrpc endpoint to rank {rank} in this daemon"
                )));
            };
            match n.ctx().call_with_allowance(ep, req.as_bytes(), RESPONSE_BYTES, token) {
                Ok(_) => Ok(()),
                Err(e) if matches!(e.error, Error::RingFull | Error::InsufficientCredit) => {
                    Err(SendError::NoCredit)
                }
                Err(e) if e.error.is_retryable() => Err(SendError::Busy),
                Err(e) => Err(SendError::Failed(format!(
                    "copyrpc call to rank {rank}: {}",
                    e.error
                ))),
            }
        })
    }

    /// The QP number of this daemon's endpoint to `rank`, if it holds one (the virtual
    /// world cuts links by QP).
    pub fn qpn_to(&mut self, rank: u32) -> Option<u32> {
        with_node!(self.node_of(rank)?, n => {
            let ep = n.endpoint(rank as usize)?;
            n.ctx().qpn(ep).ok()
        })
    }

    /// See [`super::Remote::poll`].
    pub fn poll(&mut self, on_response: &mut dyn FnMut(u64, Response)) -> usize {
        let mut done = 0;
        for node in &mut self.nodes {
            done += with_node!(node, n => n.ctx().poll(|token, r| {
                let resp = match r {
                    Ok(bytes) => Response::read_from_bytes(bytes)
                        .unwrap_or_else(|_| Response::new(Status::Unreachable, 0)),
                    Err(_) => Response::new(Status::Unreachable, 0),
                };
                on_response(token, resp);
            }));
        }
        done
    }

    /// See [`super::Remote::recv`]. A request whose bytes are not a `Request` is handed
    /// out as one with an unknown op, which the owner answers with `BadOp`.
    pub fn recv(&mut self) -> Option<(CopyrpcIncoming, Request)> {
        let count = self.nodes.len();
        for k in 0..count {
            let i = (self.next_recv + k) % count;
            let got = with_node!(&mut self.nodes[i], n => {
                let ctx = n.ctx();
                ctx.recv().map(|handle| {
                    let req = Request::read_from_bytes(handle.data(ctx)).unwrap_or_else(|_| {
                        let mut bad = Request::new_zeroed();
                        bad.op = u32::MAX;
                        bad
                    });
                    (handle, req)
                })
            });
            if let Some((handle, req)) = got {
                self.next_recv = (i + 1) % count;
                return Some((CopyrpcIncoming { node: i, handle }, req));
            }
        }
        None
    }

    /// See [`super::Remote::reply`]. copyrpc replies never wait for room (the caller's
    /// credit reserved it); if the request's endpoint has failed meanwhile, there is
    /// nobody to answer and the reply is dropped with the endpoint.
    pub fn reply(
        &mut self,
        incoming: CopyrpcIncoming,
        resp: &Response,
    ) -> Result<(), (CopyrpcIncoming, SendError)> {
        let node = incoming.node;
        let r =
            with_node!(&mut self.nodes[node], n => incoming.handle.reply(n.ctx(), resp.as_bytes()));
        match r {
            Ok(()) => Ok(()),
            Err(e) => match e.handle {
                None => Ok(()),
                Some(handle) => Err((
                    CopyrpcIncoming { node, handle },
                    SendError::Failed(format!("copyrpc reply: {}", e.error)),
                )),
            },
        }
    }
}

/// Builds the copyrpc transports of this rank: for each daemon, a context per
/// [`EPS`] remote ranks in `peers_of[daemon]` (none: `None`), all on one fabric,
/// brought up with one all-to-all of endpoint records and a barrier.
pub fn connect_all(
    fabric: Arc<Fabric>,
    x: &impl Collectives,
    peers_of: &[Vec<usize>],
    rpc: &RpcConfig,
) -> Result<Vec<Option<CopyrpcRemote>>, String> {
    let (rank, ranks) = (x.rank(), x.size());
    let nodes = build_nodes(|_| Arc::clone(&fabric), rank, ranks, peers_of, rpc)?;
    let table = records(&nodes, ranks)?;
    let got = x.all_to_all(&table).map_err(|e| e.to_string())?;
    let remotes = finish(nodes, &got)?;
    x.barrier().map_err(|e| e.to_string())?;
    Ok(remotes)
}

/// One daemon's contexts, before the exchange: each with the peers it serves.
#[derive(Debug)]
pub struct DaemonNodes {
    nodes: Vec<(Node, Vec<usize>)>,
}

/// The first step of [`connect_all`], without the exchange: for each daemon, its
/// contexts (one per [`EPS`] peers; none without peers), on the fabric
/// `fabric_of(daemon)` gives (the threaded run gives all one fabric; the virtual world
/// gives each daemon a device of its own).
pub fn build_nodes(
    mut fabric_of: impl FnMut(usize) -> Arc<Fabric>,
    rank: usize,
    ranks: usize,
    peers_of: &[Vec<usize>],
    cfg: &RpcConfig,
) -> Result<Vec<DaemonNodes>, String> {
    // Each context is built in place on the heap, so this thread's stack size does not
    // matter.
    let mut out = Vec::with_capacity(peers_of.len());
    for (d, peers) in peers_of.iter().enumerate() {
        let mut nodes = Vec::new();
        if !peers.is_empty() {
            let f = fabric_of(d);
            for chunk in peers.chunks(EPS) {
                let node = build_on_big_stack(Arc::clone(&f), rank, ranks, chunk, cfg)?;
                nodes.push((node, chunk.to_vec()));
            }
        }
        out.push(DaemonNodes { nodes });
    }
    Ok(out)
}

/// [`Node::build`] on a thread of its own whose stack holds an endpoint's request table:
/// the core builds each endpoint (its table inline, 40 B × ring / 32: 5 MiB for 4 MiB
/// rings) on the caller's stack before moving it into the context, and a debug build
/// copies it more than once, which overflows an 8 MiB main thread.
///
/// That thread creates and first touches the context's queues, rings and tables, so on
/// a NIC it runs on the NIC's NUMA node (`copyrpc_host::placement::run_on_node`: its
/// CPUs, its memory as preferred node) and they land there. Where it cannot be bound
/// (a kernel refusing `set_mempolicy`), the rank says so and builds unbound.
fn build_on_big_stack(
    fabric: Arc<Fabric>,
    rank: usize,
    ranks: usize,
    peers: &[usize],
    cfg: &RpcConfig,
) -> Result<Node, String> {
    let stack = 16 * 40 * (cfg.ring_bytes / 32) + (8 << 20);
    let node = match &*fabric {
        Fabric::Verbs(d) => d.numa_node(),
        _ => None,
    };
    let build = |node| {
        let fabric = Arc::clone(&fabric);
        placement::run_on_node(node, "copyrpc-setup", stack, || {
            Node::build(fabric, rank, ranks, peers, cfg)
        })
    };
    match build(node) {
        Ok(built) => built,
        Err(copyrpc_host::error::Error::Placement { node, what, source }) => {
            eprintln!(
                "benchkv: rank {rank}: the copyrpc set-up could not be placed on the NIC's \
                 NUMA node {node} ({what}: {source}); its rings and queues may land on \
                 another node"
            );
            build(None).map_err(|e| format!("building a copyrpc context: {e}"))?
        }
        Err(e) => Err(format!("building a copyrpc context: {e}")),
    }
}

/// This rank's endpoint records, indexed by the peer rank they are for (what the
/// all-to-all sends).
pub fn records(daemons: &[DaemonNodes], ranks: usize) -> Result<Vec<PeerRecord>, String> {
    let mut table = vec![PeerRecord::new_zeroed(); ranks];
    for (n, _) in daemons.iter().flat_map(|d| &d.nodes) {
        with_node!(n, n => n.fill_records(&mut table)).map_err(|e| e.to_string())?;
    }
    Ok(table)
}

/// The last step: connects every context to the records `got` (indexed by the sending
/// rank).
pub fn finish(
    daemons: Vec<DaemonNodes>,
    got: &[PeerRecord],
) -> Result<Vec<Option<CopyrpcRemote>>, String> {
    let mut out = Vec::with_capacity(daemons.len());
    for d in daemons {
        if d.nodes.is_empty() {
            out.push(None);
            continue;
        }
        let mut route = vec![u32::MAX; got.len()];
        let mut nodes = Vec::with_capacity(d.nodes.len());
        for (i, (mut node, peers)) in d.nodes.into_iter().enumerate() {
            with_node!(&mut node, n => n.connect(got)).map_err(|e| e.to_string())?;
            for p in peers {
                if let Some(r) = route.get_mut(p) {
                    *r = i as u32;
                }
            }
            nodes.push(node);
        }
        out.push(Some(CopyrpcRemote {
            nodes,
            route,
            next_recv: 0,
        }));
    }
    Ok(out)
}
