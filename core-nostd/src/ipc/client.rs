//! The ipc client: one request ring (producer) and one response ring (consumer).
//!
//! Unsafe code (module opt-out): calls of the SPSC ring's `unsafe fn`s; this client is the
//! only producer of its request ring and the only consumer of its response ring, because
//! it holds the id's registration (epoch) exclusively.
#![allow(unsafe_code)]

use super::layout::{ClientParts, IpcRegion};
use super::{IpcCallError, IpcConnectError};
use crate::shm::{
    claim_client_id, close, record_owner, ClientState, Msg, Owner, Payload, Slab, Token,
};
use crate::sync::Ordering;

/// One ipc client; `call` and `poll` from one thread.
#[derive(Debug)]
pub struct Client<'a, 's, Req: Payload, Resp: Payload, U> {
    region: IpcRegion<'a, Req, Resp>,
    /// This id's row, rings and cells, looked up once.
    parts: ClientParts<'a, Req, Resp>,
    id: u32,
    epoch: u32,
    slab: Slab<'s, U>,
    closed: bool,
}

impl<'a, 's, Req: Payload, Resp: Payload, U> Client<'a, 's, Req, Resp, U> {
    /// Registers under the lowest free id, after reserving a never-used one (if any is
    /// left) so that there is one to find; a freed id gets its epoch bumped. `slab`
    /// holds the user data of calls in flight; at most `min(slab capacity, depth)` calls
    /// are in flight.
    pub fn connect(
        region: IpcRegion<'a, Req, Resp>,
        owner: impl Into<Owner>,
        slab: Slab<'s, U>,
    ) -> Result<Self, IpcConnectError> {
        let owner = owner.into();
        let h = region.header;
        // Relaxed: a flag.
        if !h.server_alive.load(Ordering::Relaxed) {
            return Err(IpcConnectError::ServerDisconnected);
        }
        if slab.capacity() == 0 {
            return Err(IpcConnectError::EmptySlab);
        }
        // The lowest free id: the fresh one reserved is only offered in its turn.
        let (id, epoch) = claim_client_id(&h.next_client_id, region.cfg.max_clients, false, |id| {
            // A4/A6/R6 (`ClientState::activate`; A4 pairs with R4 in Server::retire): the
            // server's drain of this id's rings and its last replies happen before we
            // take them over.
            ClientState::activate(&region.client_entry(id).state).map(|epoch| (id, epoch))
        })
        .ok_or(IpcConnectError::NoFreeClientId)?;
        let parts = region
            .client(id)
            .expect("claim_client_id hands out ids below max_clients");
        let e = parts.entry;
        // R7 in `record_owner` (pairs with A7 in ClientEntry::info): a reader that sees the
        // id sees the token; until now the entry read owner 0, which liveness checks skip.
        record_owner(&e.owner, &e.owner_token, owner);
        // SAFETY: A4 orders the server's drain of our request ring and its last reply to
        // the previous owner before this; the server pushes to us only after we send a
        // request, and we are the id's only user now.
        unsafe {
            // Start where the server's drain left the request ring, not where a previous
            // owner that died may have failed to record its position.
            parts.req.adopt_producer();
            // Drop responses published for the previous owner.
            parts.resp.adopt_consumer(&parts.resp_slots());
        }
        Ok(Self {
            region,
            parts,
            id,
            epoch,
            slab,
            closed: false,
        })
    }

    /// This client's id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Registrations of this id so far (starts at 1).
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Calls in flight.
    pub fn in_flight(&self) -> usize {
        self.slab.len()
    }

    /// Sends `req`; `user_data` comes back with the response.
    pub fn call(&mut self, req: &Req, user_data: U) -> Result<(), IpcCallError> {
        // Relaxed: a flag.
        if !self.region.header.server_alive.load(Ordering::Relaxed) {
            return Err(IpcCallError::ServerDisconnected);
        }
        if self.slab.len() >= self.region.cfg.depth as usize {
            return Err(IpcCallError::Full);
        }
        let token = self
            .slab
            .insert(user_data)
            .map_err(|_| IpcCallError::Full)?;
        let msg = Msg {
            token: token.0,
            payload: *req,
        };
        // SAFETY: only producer of our request ring (see module docs), fixed slot range;
        // the slot is free: with `in_flight < depth` before this call (checked above),
        // one of our last `depth` requests has been answered, and the server pops in
        // order, so it read this slot before sending an answer we acquired (the
        // `push_known_free` contract).
        unsafe { self.parts.req.push_known_free(&self.parts.req_slots(), msg) };
        Ok(())
    }

    /// Delivers every response: `f(user_data, &resp)`. Returns how many.
    pub fn poll(&mut self, mut f: impl FnMut(U, &Resp)) -> usize {
        let mut n = 0;
        let ctl = self.parts.resp;
        let slots = self.parts.resp_slots();
        // SAFETY: only consumer of our response ring; payloads are `Payload` (valid for
        // any bytes), tokens are plain u64; the server fills it only with
        // `push_known_free` (the `pop_no_handback` contract).
        while let Some(m) = unsafe { ctl.pop_no_handback(&slots) } {
            // A response with a stale or foreign token finds nothing and is dropped.
            if let Some(u) = self.slab.remove(Token(m.token)) {
                f(u, &m.payload);
                n += 1;
            }
        }
        n
    }

    /// Leaves; the server frees the id on its next poll. Same as dropping.
    pub fn close(mut self) {
        self.do_close();
    }

    fn do_close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        // R5 in `close` (pairs with A5 in Server::poll): our last request pushes are
        // visible to the server that sees Closing. A failed CAS means the server evicted us
        // already.
        let _ = close(&self.parts.entry.state, self.epoch);
    }
}

impl<Req: Payload, Resp: Payload, U> Drop for Client<'_, '_, Req, Resp, U> {
    fn drop(&mut self) {
        self.do_close();
    }
}
