//! The ipc server: scans every client's request ring, replies into its response ring.
//!
//! Unsafe code (module opt-out): calls of the SPSC ring's `unsafe fn`s; the server is the
//! only consumer of every request ring and the only producer of every response ring.
#![allow(unsafe_code)]

use super::layout::{ClientParts, IpcRegion};
use super::IpcReplyError;
use crate::shm::{evict, ClientInfo, ClientState, EvictError, Msg, Payload, ServerSalt};
use crate::sync::Ordering;

/// A received request; answer it with [`Server::reply`].
#[derive(Debug)]
#[must_use = "the client waits for a reply"]
pub struct IpcRequest<Req> {
    client_id: u32,
    epoch: u32,
    token: u64,
    /// The request.
    pub payload: Req,
}

impl<Req> IpcRequest<Req> {
    /// The calling client.
    pub fn client_id(&self) -> u32 {
        self.client_id
    }

    /// `(client id, epoch, token)` and the payload, for keeping a request outside Rust
    /// (the C ABI).
    pub fn into_raw(self) -> ((u32, u32, u64), Req) {
        ((self.client_id, self.epoch, self.token), self.payload)
    }

    /// Rebuilds a request from [`into_raw`](Self::into_raw). Any value is safe: a reply
    /// to a client id whose epoch moved on is refused, as is one to a request another
    /// server received (the epoch is sealed by the receiving server), and a token the
    /// client does not hold is dropped by its `poll`.
    pub fn from_raw(raw: (u32, u32, u64), payload: Req) -> Self {
        Self {
            client_id: raw.0,
            epoch: raw.1,
            token: raw.2,
            payload,
        }
    }
}

/// The ipc server of one region.
#[derive(Debug)]
pub struct Server<'a, Req: Payload, Resp: Payload> {
    region: IpcRegion<'a, Req, Resp>,
    /// Next client `recv` looks at first (round robin), in `0..max_clients`.
    next: u32,
    /// Ids `< scan_end` have ever been handed out (from `next_client_id`).
    scan_end: u32,
    /// Seals the epochs of this server's requests ([`ServerSalt`]): a request another
    /// server received is refused.
    salt: ServerSalt,
    /// The parts of client `last` (the one `recv` looked at last, so the one it took a
    /// request from, if any), so that taking that client's next request and answering it
    /// skip the region lookups. Only references into the region, which are the same for
    /// an id whoever holds it: never stale.
    last: u32,
    last_parts: ClientParts<'a, Req, Resp>,
}

impl<'a, Req: Payload, Resp: Payload> Server<'a, Req, Resp> {
    /// Takes the server role over `region`.
    pub fn new(region: IpcRegion<'a, Req, Resp>) -> Self {
        // Relaxed: a flag.
        region.header.server_alive.store(true, Ordering::Relaxed);
        let last_parts = region
            .client(0)
            .expect("a validated region has at least one client id");
        Self {
            region,
            next: 0,
            scan_end: 0,
            salt: ServerSalt::next(),
            last: 0,
            last_parts,
        }
    }

    /// Client `id`'s parts: the cached ones if it is the client `recv` looked at last.
    #[inline]
    fn parts(&self, id: u32) -> Option<ClientParts<'a, Req, Resp>> {
        if id == self.last {
            Some(self.last_parts)
        } else {
            self.region.client(id)
        }
    }

    /// As [`parts`](Self::parts), and caches them.
    #[inline]
    fn parts_cached(&mut self, id: u32) -> Option<ClientParts<'a, Req, Resp>> {
        if id != self.last {
            self.last_parts = self.region.client(id)?;
            self.last = id;
        }
        Some(self.last_parts)
    }

    /// Scans every client: frees the ids of closed or evicted clients (dropping their
    /// unread requests) and notes which active clients have a request waiting (one slot
    /// read per client). Returns how many clients have requests waiting.
    pub fn poll(&mut self) -> usize {
        self.poll_with_skip(|_| false)
    }

    /// As [`poll`](Self::poll), but does not look at the request rings of clients for
    /// which `skip(id)` is true (e.g. clients known to be idle).
    pub fn poll_with_skip(&mut self, mut skip: impl FnMut(u32) -> bool) -> usize {
        let max = self.region.cfg.max_clients;
        // Relaxed: only bounds the scan; each entry's state synchronises.
        self.scan_end = self
            .region
            .header
            .next_client_id
            .load(Ordering::Relaxed)
            .min(max);
        let mut total = 0;
        for id in 0..self.scan_end {
            // Every id below `max_clients` has its parts.
            let Some(c) = self.region.client(id) else {
                break;
            };
            // A5 (pairs with R5 in Client::do_close): a closing client's pushes are
            // visible before we discard them.
            let (st, epoch) = ClientState::unpack(c.entry.state.load(Ordering::Acquire));
            match st {
                ClientState::Free => {}
                ClientState::Active => {
                    if !skip(id) && c.req.refresh_ready(&c.req_slots()) {
                        total += 1;
                    }
                }
                ClientState::Closing | ClientState::Dead => Self::retire(c, epoch),
            }
        }
        total
    }

    fn retire(c: ClientParts<'a, Req, Resp>, epoch: u32) {
        // Requests of a client that left are dropped; replies to it are refused (epoch).
        // SAFETY: the server is the only consumer of every request ring; payloads are
        // `Payload` (valid for any bytes).
        unsafe {
            c.req.discard_all(&c.req_slots());
        }
        // The next owner starts with no request outstanding: the responses count on from
        // the requests taken (replies to this epoch are refused from here on).
        let taken = c.req.consumer_index();
        // SAFETY: the server is the only producer of every response ring; the id's
        // client has left, and the next one adopts the ring after R4 below.
        unsafe { c.resp.restart_producer_at(taken) };
        let e = c.entry;
        // Relaxed: published by R4 below; the next owner reads 0 until its R7.
        e.owner.store(0, Ordering::Relaxed);
        e.owner_token.store(0, Ordering::Relaxed);
        // R4 (pairs with A4 in ClientState::activate, from Client::connect): the drain
        // and our last replies happen before the next owner of the id takes the rings.
        e.state
            .store(ClientState::Free.pack(epoch), Ordering::Release);
    }

    /// Takes one request from a client the last `poll` saw busy, round robin; a client
    /// stays "busy" until a `recv` finds its ring empty.
    pub fn recv(&mut self) -> Option<IpcRequest<Req>> {
        let n = self.scan_end;
        // `next < n` whenever `n > 0`: it is set below from this `n`, and `scan_end` never
        // shrinks (it follows `next_client_id`).
        let mut after = self.next;
        for _ in 0..n {
            let id = after;
            after = if id + 1 < n { id + 1 } else { 0 };
            let Some(c) = self.parts_cached(id) else {
                continue;
            };
            if !c.req.hinted_ready() {
                continue;
            }
            // SAFETY: the server is the only consumer of every request ring; payloads are
            // `Payload` (valid for any bytes); clients fill their rings only with
            // `push_known_free` (the `pop_no_handback` contract).
            let Some(m) = (unsafe { c.req.pop_no_handback(&c.req_slots()) }) else {
                continue;
            };
            // Relaxed: the client registered before pushing (A1 in pop covers it); only
            // this thread moves an id to Free.
            let (st, epoch) = ClientState::unpack(c.entry.state.load(Ordering::Relaxed));
            if st != ClientState::Active {
                continue;
            }
            self.next = after;
            return Some(IpcRequest {
                client_id: id,
                epoch: self.salt.seal(epoch),
                token: m.token,
                payload: m.payload,
            });
        }
        None
    }

    /// Answers `h` (in any order relative to other requests).
    ///
    /// Each request is answered once. The server counts, per client, requests taken
    /// (`recv`) against replies sent, and refuses a reply with none outstanding
    /// ([`IpcReplyError::NothingOutstanding`]); a second reply while the same client has
    /// other requests outstanding cannot be told from theirs and takes the place of one.
    pub fn reply(&mut self, h: IpcRequest<Req>, resp: &Resp) -> Result<(), IpcReplyError> {
        let c = self
            .parts(h.client_id)
            .ok_or(IpcReplyError::UnknownClient)?;
        // Relaxed: only this thread frees ids, so the epoch cannot change under us.
        let (st, epoch) = ClientState::unpack(c.entry.state.load(Ordering::Relaxed));
        if st != ClientState::Active || epoch != self.salt.open(h.epoch) {
            return Err(IpcReplyError::ClientGone);
        }
        // Both positions are this thread's own (consumer of the requests, producer of
        // the responses), and `retire` lined them up for the epoch: their difference is
        // the requests taken and not yet answered.
        let taken = c.req.consumer_index();
        let answered = c.resp.producer_index();
        if taken == answered {
            return Err(IpcReplyError::NothingOutstanding);
        }
        let msg = Msg {
            token: h.token,
            payload: *resp,
        };
        // SAFETY: the server is the only producer of every response ring, and the slot is
        // free by the client's in-flight bound (`push_known_free`, response ring): it sent
        // this request with fewer than `depth` calls unanswered. A client that breaks its
        // bound can only garble its own responses; the server reads nothing from them.
        unsafe { c.resp.push_known_free(&c.resp_slots(), msg) };
        Ok(())
    }

    /// Declares client `id` dead (its process is gone); freed on the next poll.
    pub fn evict(&mut self, id: u32) -> Result<(), EvictError> {
        // A racing close is handled the same way as a won CAS: the next poll frees the id.
        evict(
            self.region.clients.get(id as usize).map(|e| &e.state),
            &[ClientState::Active],
        )?;
        Ok(())
    }

    /// The client table.
    pub fn clients(&self) -> impl Iterator<Item = ClientInfo> + '_ {
        self.region
            .clients
            .iter()
            .enumerate()
            .map(|(i, e)| e.info(i as u32))
    }
}

impl<Req: Payload, Resp: Payload> Drop for Server<'_, Req, Resp> {
    fn drop(&mut self) {
        // Relaxed: clients that see false stop calling; nothing is published with it
        // (they load it Relaxed).
        self.region
            .header
            .server_alive
            .store(false, Ordering::Relaxed);
    }
}
