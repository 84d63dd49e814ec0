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

use copyrpc_core::copyrpc::RecvHandle;
use copyrpc_host::exchange::Collectives;
use copyrpc_host::fabric::Fabric;
use copyrpc_host::rpc::{PeerRecord, RpcConfig, RpcNode};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::SendError;
use crate::msg::{Request, Response, Status};

/// Endpoints per context: remote ranks one daemon serves.
pub const EPS: usize = 64;
/// Calls in flight per context, over all its endpoints, with [`RingSize::Small`].
pub const CALLS: usize = 4096;
/// Requests held per endpoint: ring bytes / 32, with [`RingSize::Small`].
pub const REQS: usize = 512;
/// Ring bytes per endpoint and direction with [`RingSize::Small`].
pub const RING_BYTES: usize = REQS * 32;
/// [`RingSize::Large`]'s calls in flight per context.
const LARGE_CALLS: usize = 16_384;
/// [`RingSize::Large`]'s requests held per endpoint.
const LARGE_REQS: usize = 8192;

/// The copyrpc ring of every endpoint (`--copyrpc-ring`). The context's tables are sized
/// at compile time by the ring, so each size is its own type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RingSize {
    /// 16 KiB per direction: about 40 calls of benchkv in flight per peer; 4096 per
    /// daemon.
    #[default]
    Small,
    /// 256 KiB per direction: about 700 calls per peer, 16 384 per daemon (seed 002's
    /// rings are 1 MiB, seed 001's 4 MiB); 8 MiB of tables per daemon.
    Large,
}

impl RingSize {
    /// Bytes per endpoint and direction.
    pub const fn bytes(self) -> usize {
        match self {
            Self::Small => RING_BYTES,
            Self::Large => LARGE_REQS * 32,
        }
    }
}

/// A daemon's copyrpc context with its endpoints, of either ring size.
#[derive(Debug)]
pub enum Node {
    /// [`RingSize::Small`].
    Small(Box<RpcNode<u64, EPS, CALLS, REQS>>),
    /// [`RingSize::Large`].
    Large(Box<RpcNode<u64, EPS, LARGE_CALLS, LARGE_REQS>>),
}

/// Runs `$body` with `$n` bound to the node, whichever its size (the context methods
/// are generic over the sizes, so each arm is its own instance).
macro_rules! with_node {
    ($node:expr, $n:ident => $body:expr) => {
        match $node {
            Node::Small($n) => $body,
            Node::Large($n) => $body,
        }
    };
}

/// A daemon's copyrpc endpoints.
#[derive(Debug)]
pub struct CopyrpcRemote {
    node: Node,
}

/// A request received over copyrpc, answered once through [`CopyrpcRemote::reply`].
#[derive(Debug)]
pub struct CopyrpcIncoming {
    handle: RecvHandle,
}

impl CopyrpcRemote {
    /// See [`super::Remote::call`].
    pub fn call(&mut self, rank: u32, req: &Request, token: u64) -> Result<(), SendError> {
        with_node!(&mut self.node, n => {
            let Some(ep) = n.endpoint(rank as usize) else {
                return Err(SendError::Failed(format!(
                    "no copyrpc endpoint to rank {rank} in this daemon"
                )));
            };
            let allowance = std::mem::size_of::<Response>() as u32;
            match n.ctx().call_with_allowance(ep, req.as_bytes(), allowance, token) {
                Ok(_) => Ok(()),
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
        with_node!(&mut self.node, n => {
            let ep = n.endpoint(rank as usize)?;
            n.ctx().qpn(ep).ok()
        })
    }

    /// See [`super::Remote::poll`].
    pub fn poll(&mut self, on_response: &mut dyn FnMut(u64, Response)) -> usize {
        with_node!(&mut self.node, n => n.ctx().poll(|token, r| {
            let resp = match r {
                Ok(bytes) => Response::read_from_bytes(bytes)
                    .unwrap_or_else(|_| Response::new(Status::Unreachable, 0)),
                Err(_) => Response::new(Status::Unreachable, 0),
            };
            on_response(token, resp);
        }))
    }

    /// See [`super::Remote::recv`]. A request whose bytes are not a `Request` is handed
    /// out as one with an unknown op, which the owner answers with `BadOp`.
    pub fn recv(&mut self) -> Option<(CopyrpcIncoming, Request)> {
        with_node!(&mut self.node, n => {
            let ctx = n.ctx();
            let handle = ctx.recv()?;
            let req = Request::read_from_bytes(handle.data(ctx)).unwrap_or_else(|_| {
                let mut bad = Request::new_zeroed();
                bad.op = u32::MAX;
                bad
            });
            Some((CopyrpcIncoming { handle }, req))
        })
    }

    /// See [`super::Remote::reply`]. copyrpc replies never wait for room (the caller's
    /// credit reserved it); if the request's endpoint has failed meanwhile, there is
    /// nobody to answer and the reply is dropped with the endpoint.
    pub fn reply(
        &mut self,
        incoming: CopyrpcIncoming,
        resp: &Response,
    ) -> Result<(), (CopyrpcIncoming, SendError)> {
        let r = with_node!(&mut self.node, n => incoming.handle.reply(n.ctx(), resp.as_bytes()));
        match r {
            Ok(()) => Ok(()),
            Err(e) => match e.handle {
                None => Ok(()),
                Some(handle) => Err((
                    CopyrpcIncoming { handle },
                    SendError::Failed(format!("copyrpc reply: {}", e.error)),
                )),
            },
        }
    }
}

/// Builds the copyrpc transports of this rank: for each daemon, a context with an
/// endpoint to every remote rank in `peers_of[daemon]` (empty: `None`), all on one
/// fabric, brought up with one all-to-all of endpoint records and a barrier.
pub fn connect_all(
    fabric: Fabric,
    x: &impl Collectives,
    peers_of: &[Vec<usize>],
    ring: RingSize,
) -> Result<Vec<Option<CopyrpcRemote>>, String> {
    let (rank, ranks) = (x.rank(), x.size());
    let fabric = Arc::new(fabric);
    let nodes = build_nodes(|_| Arc::clone(&fabric), rank, ranks, peers_of, ring)?;
    let table = records(&nodes, ranks)?;
    let got = x.all_to_all(&table).map_err(|e| e.to_string())?;
    let remotes = finish(nodes, &got)?;
    x.barrier().map_err(|e| e.to_string())?;
    Ok(remotes)
}

/// The first step of [`connect_all`], without the exchange: one node per daemon that
/// holds endpoints, on the fabric `fabric_of(daemon)` gives (the threaded run gives all
/// one fabric; the virtual world gives each daemon a device of its own).
pub fn build_nodes(
    mut fabric_of: impl FnMut(usize) -> Arc<Fabric>,
    rank: usize,
    ranks: usize,
    peers_of: &[Vec<usize>],
    ring: RingSize,
) -> Result<Vec<Option<Node>>, String> {
    let cfg = RpcConfig::for_ring(ring.bytes());
    // Each context is built in place on the heap, so this thread's stack size does not
    // matter.
    let mut nodes = Vec::with_capacity(peers_of.len());
    for (d, peers) in peers_of.iter().enumerate() {
        nodes.push(if peers.is_empty() {
            None
        } else {
            let f = fabric_of(d);
            let e = |e: copyrpc_host::error::Error| e.to_string();
            Some(match ring {
                RingSize::Small => Node::Small(Box::new(
                    RpcNode::for_peers(f, rank, ranks, peers, &cfg).map_err(e)?,
                )),
                RingSize::Large => Node::Large(Box::new(
                    RpcNode::for_peers(f, rank, ranks, peers, &cfg).map_err(e)?,
                )),
            })
        });
    }
    Ok(nodes)
}

/// This rank's endpoint records, indexed by the peer rank they are for (what the
/// all-to-all sends).
pub fn records(nodes: &[Option<Node>], ranks: usize) -> Result<Vec<PeerRecord>, String> {
    let mut table = vec![PeerRecord::new_zeroed(); ranks];
    for n in nodes.iter().flatten() {
        with_node!(n, n => n.fill_records(&mut table)).map_err(|e| e.to_string())?;
    }
    Ok(table)
}

/// The last step: connects every node to the records `got` (indexed by the sending rank).
pub fn finish(
    nodes: Vec<Option<Node>>,
    got: &[PeerRecord],
) -> Result<Vec<Option<CopyrpcRemote>>, String> {
    let mut out = Vec::with_capacity(nodes.len());
    for n in nodes {
        out.push(match n {
            Some(mut node) => {
                with_node!(&mut node, n => n.connect(got)).map_err(|e| e.to_string())?;
                Some(CopyrpcRemote { node })
            }
            None => None,
        });
    }
    Ok(out)
}
