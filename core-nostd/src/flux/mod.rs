//! Flux: an N-to-N request/response mesh between the threads of one process
//! (docs/spec/ipc-flux.md#flux), over caller-supplied memory.
//!
//! Every ordered pair of nodes `(i, j)` has two SPSC rings ([`crate::shm::spsc`]): a
//! request ring `i -> j` and a response ring `j -> i`. Node `i`:
//!
//! - [`Node::call`]`(to, payload, user_data)` stores `user_data` in its own [`Slab`] under
//!   a fresh [`Token`] and pushes `(token, payload)` to `to`;
//! - [`Node::try_recv`] takes a request from any peer (round robin) as a [`FluxRequest`];
//!   [`Node::reply`]`(handle, payload)` pushes `(token, payload)` back to the caller —
//!   at any later time, in any order;
//! - [`Node::poll`]`(on_response)` takes every response and hands the call's user data
//!   back with it, removing it from the slab by its token.
//!
//! The token is the slab entry's index plus a generation, never a position of a ring
//! (the earlier implementation stored user data at `token % capacity`, so replies
//! returned out of order overwrote the data of calls still pending).
//!
//! Replies never fail for lack of room: a node keeps at most `capacity` calls in flight
//! towards each peer (`call` returns [`FluxError::Full`] beyond that), and the response
//! ring towards it has `capacity` slots.
//!
//! Progress: every operation is wait-free (one attempt). A node whose thread stops leaves
//! its peers' calls to it unanswered (they stay in flight); nothing else is affected.
//! Payloads are `Copy + Send` values; they never leave the process, so no byte-level
//! validity is needed.
//!
//! Unsafe code (module opt-out): only calls of the SPSC ring's `unsafe fn`s. Their
//! contract — one producer and one consumer per ring — holds because each ring end
//! belongs to exactly one node and [`Mesh::node`] hands each node out once.
#![allow(unsafe_code)]

use crate::shm::spsc::{RingCtl, Slot};
use crate::shm::{Msg, Slab, Token};
use crate::sync::{AtomicBool, Ordering};
use core::fmt;

/// The two rings between an ordered pair of nodes.
#[derive(Debug, Default)]
pub struct PairCtl {
    req: RingCtl,
    resp: RingCtl,
}

impl PairCtl {
    /// Empty rings.
    pub fn new() -> Self {
        Self::default()
    }
}

/// Per-node flag that the node has been taken (one owner per node).
#[derive(Debug, Default)]
pub struct NodeCtl {
    taken: AtomicBool,
}

impl NodeCtl {
    /// Not taken.
    pub fn new() -> Self {
        Self::default()
    }
}

/// Flux errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FluxError {
    /// `capacity` calls are in flight to that node (or its request ring is full): poll
    /// for responses first.
    Full,
    /// The node's slab is full: too many calls in flight in total.
    SlabFull,
    /// No such node.
    BadNode,
    /// The node was taken already.
    Taken,
    /// The memory does not match `nodes` and `capacity` (or capacity is not a power of two).
    BadMemory,
    /// The handle was received by another node (of this mesh or another).
    WrongNode,
}

impl fmt::Display for FluxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Full => "too many calls in flight to that node",
            Self::SlabFull => "user-data slab full",
            Self::BadNode => "no such node",
            Self::Taken => "node already taken",
            Self::BadMemory => "memory does not match the mesh shape",
            Self::WrongNode => "handle received by another node",
        })
    }
}

impl core::error::Error for FluxError {}

/// A reply [`Node::reply`] refused ([`FluxError::WrongNode`]), with the request back:
/// answer it on the node that received it. Consumed with the refusal, it could never
/// be answered, and its caller would wait for it forever. `Debug` without `T: Debug`
/// (it shows the error and the calling node, not the payload), so generic code can
/// `unwrap` a reply as it could before the request came back.
pub struct FluxReplyError<T> {
    /// Why.
    pub error: FluxError,
    /// The request, unanswered.
    pub request: FluxRequest<T>,
}

impl<T> fmt::Display for FluxReplyError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl<T> fmt::Debug for FluxReplyError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FluxReplyError")
            .field("error", &self.error)
            .field("from", &self.request.from)
            .finish_non_exhaustive()
    }
}

impl<T> core::error::Error for FluxReplyError<T> {}

/// The shared part of a mesh of `n` nodes with rings of `capacity` slots.
#[derive(Debug)]
pub struct Mesh<'a, T> {
    n: usize,
    cap: usize,
    pairs: &'a [PairCtl],
    req: &'a [Slot<Msg<T>>],
    resp: &'a [Slot<Msg<T>>],
    nodes: &'a [NodeCtl],
}

impl<T> Clone for Mesh<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Mesh<'_, T> {}

impl<'a, T: Copy + Send> Mesh<'a, T> {
    /// Slots each of the two slot slices needs: `n * n * capacity`.
    pub const fn slots_needed(n: usize, capacity: usize) -> usize {
        n * n * capacity
    }

    /// Builds a mesh over `pairs` (`n * n`, indexed `from * n + to`), request and response
    /// slots (`n * n * capacity` each) and `nodes` (`n`).
    pub fn new(
        n: usize,
        capacity: usize,
        pairs: &'a [PairCtl],
        req: &'a [Slot<Msg<T>>],
        resp: &'a [Slot<Msg<T>>],
        nodes: &'a [NodeCtl],
    ) -> Result<Self, FluxError> {
        let ok = n > 0
            && capacity.is_power_of_two()
            && pairs.len() == n * n
            && req.len() == Self::slots_needed(n, capacity)
            && resp.len() == req.len()
            && nodes.len() == n;
        if !ok {
            return Err(FluxError::BadMemory);
        }
        Ok(Self {
            n,
            cap: capacity,
            pairs,
            req,
            resp,
            nodes,
        })
    }

    /// Nodes in the mesh.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True for a mesh without nodes (never: `new` refuses it).
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Takes node `id` (once per mesh), with `slab` holding its pending calls' user data.
    pub fn node<'s, U>(
        &self,
        id: usize,
        slab: Slab<'s, U>,
    ) -> Result<Node<'a, 's, T, U>, FluxError> {
        let ctl = self.nodes.get(id).ok_or(FluxError::BadNode)?;
        // Relaxed: the flag only makes ownership unique; a node is taken once for the
        // mesh's lifetime (its tokens live in its slab, so it cannot be handed on), and
        // moving the `Node` to its thread synchronises like any `Send` value.
        if ctl
            .taken
            .compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return Err(FluxError::Taken);
        }
        Ok(Node {
            mesh: *self,
            id,
            slab,
            next_peer: 0,
            instance: crate::sync::next_instance(),
        })
    }

    fn pair(&self, from: usize, to: usize) -> &'a PairCtl {
        &self.pairs[from * self.n + to]
    }

    fn ring_slots(&self, slots: &'a [Slot<Msg<T>>], from: usize, to: usize) -> &'a [Slot<Msg<T>>] {
        let base = (from * self.n + to) * self.cap;
        &slots[base..base + self.cap]
    }
}

/// A received request: reply to it with [`Node::reply`] on the node that received it
/// (any other node, of this mesh or another, refuses it with [`FluxError::WrongNode`]
/// and hands it back).
#[derive(Debug)]
#[must_use = "the caller waits for a reply"]
pub struct FluxRequest<T> {
    /// The receiving node's instance number.
    node: u32,
    from: usize,
    token: u64,
    /// The request.
    pub payload: T,
}

impl<T> FluxRequest<T> {
    /// The calling node.
    pub fn from(&self) -> usize {
        self.from
    }
}

/// One node of the mesh, owned by one thread (`Send`, not shared).
#[derive(Debug)]
pub struct Node<'a, 's, T, U> {
    mesh: Mesh<'a, T>,
    id: usize,
    slab: Slab<'s, U>,
    next_peer: usize,
    /// This node's instance number ([`crate::sync::next_instance`]), in the requests it
    /// receives. Not its id: node 1 of another mesh has the same id, and a reply there
    /// would push into a response ring whose slot its in-flight bound does not cover
    /// (overwriting a response not read yet).
    instance: u32,
}

impl<T: Copy + Send, U> Node<'_, '_, T, U> {
    /// This node's id.
    pub fn id(&self) -> usize {
        self.id
    }

    /// Calls in flight from this node (all peers).
    pub fn in_flight(&self) -> usize {
        self.slab.len()
    }

    /// Calls in flight from this node to `to`.
    fn in_flight_to(&self, to: usize) -> u64 {
        let out = self.mesh.pair(self.id, to);
        let back = self.mesh.pair(to, self.id);
        // Both indices are this node's own (producer of `out.req`, consumer of `back.resp`).
        out.req
            .producer_index()
            .wrapping_sub(back.resp.consumer_index())
    }

    /// Sends `payload` to node `to`; `user_data` comes back with the response.
    pub fn call(&mut self, to: usize, payload: T, user_data: U) -> Result<(), FluxError> {
        if to >= self.mesh.n {
            return Err(FluxError::BadNode);
        }
        if self.in_flight_to(to) >= self.mesh.cap as u64 {
            return Err(FluxError::Full);
        }
        let token = self
            .slab
            .insert(user_data)
            .map_err(|_| FluxError::SlabFull)?;
        let msg = Msg {
            token: token.0,
            payload,
        };
        let ring = &self.mesh.pair(self.id, to).req;
        // SAFETY: this node is the only producer of the `id -> to` request ring (nodes are
        // taken once), with the fixed slot range of that pair; the slot is free: fewer
        // than `capacity` calls to `to` are unanswered (checked above), so one of our last
        // `capacity` requests to it was answered, and `to` pops in order, so it read
        // this slot before the answer we popped (the `push_known_free` contract).
        unsafe { ring.push_known_free(self.mesh.ring_slots(self.mesh.req, self.id, to), msg) };
        Ok(())
    }

    /// Takes one request from any peer (round robin), if any.
    pub fn try_recv(&mut self) -> Option<FluxRequest<T>> {
        let n = self.mesh.n;
        for k in 0..n {
            let from = (self.next_peer + k) % n;
            let ring = &self.mesh.pair(from, self.id).req;
            let slots = self.mesh.ring_slots(self.mesh.req, from, self.id);
            // SAFETY: this node is the only consumer of the `from -> id` request ring;
            // only its producer wrote the slots, always with `push_known_free` (the
            // `pop_no_handback` contract).
            if let Some(m) = unsafe { ring.pop_no_handback(slots) } {
                self.next_peer = (from + 1) % n;
                return Some(FluxRequest {
                    node: self.instance,
                    from,
                    token: m.token,
                    payload: m.payload,
                });
            }
        }
        None
    }

    /// Answers a request received by this node. A request another node received is
    /// refused with [`FluxError::WrongNode`] and comes back in the error.
    pub fn reply(&mut self, handle: FluxRequest<T>, payload: T) -> Result<(), FluxReplyError<T>> {
        // The push below is sound only into the ring of a call this node received.
        if handle.node != self.instance {
            return Err(FluxReplyError {
                error: FluxError::WrongNode,
                request: handle,
            });
        }
        let to = handle.from;
        let ring = &self.mesh.pair(self.id, to).resp;
        let msg = Msg {
            token: handle.token,
            payload,
        };
        // SAFETY: this node is the only producer of the `id -> to` response ring, and the
        // slot is free by the caller's in-flight bound (`push_known_free`, response ring):
        // `to` made this call with fewer than `capacity` calls to us unanswered.
        unsafe { ring.push_known_free(self.mesh.ring_slots(self.mesh.resp, self.id, to), msg) };
        Ok(())
    }

    /// Takes every response that has arrived: `on_response(user_data, payload)`.
    /// Returns how many. A response whose token matches no pending call is dropped.
    pub fn poll(&mut self, mut on_response: impl FnMut(U, T)) -> usize {
        let n = self.mesh.n;
        let mut count = 0;
        for from in 0..n {
            let ring = &self.mesh.pair(from, self.id).resp;
            let slots = self.mesh.ring_slots(self.mesh.resp, from, self.id);
            // SAFETY: this node is the only consumer of the `from -> id` response ring;
            // only its producer wrote the slots, always with `push_known_free` (the
            // `pop_no_handback` contract).
            while let Some(m) = unsafe { ring.pop_no_handback(slots) } {
                if let Some(u) = self.slab.remove(Token(m.token)) {
                    on_response(u, m.payload);
                    count += 1;
                }
            }
        }
        count
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
