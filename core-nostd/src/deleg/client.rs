//! The client side: connect, call (reserve + commit), poll responses, close.

use super::layout::{check_payload_align, Claim, DelegRegion};
use super::{CallError, ConnectError};
use crate::shm::{claim_client_id, close, record_owner, ClientState, Owner, Payload};
use crate::sync::{spin_loop, Ordering};

/// Spins of the flow-control wait between two calls of the caller's wait callback (it may
/// read a clock or a pid, which costs far more than a spin).
const WAIT_EVERY: u32 = 256;

/// Consecutive reloads that must show the same impossible `head`/`tail` before the wait
/// reports [`CallError::RingCorrupt`]: one reading may be stale (the loads are not
/// ordered after every store they are compared with), a persisting one is not.
const CORRUPT_CONFIRM: u32 = 64;

/// One delegationrpc client. `!Sync` by use: one thread calls and polls.
#[derive(Debug)]
pub struct Client<'a, Req: Payload, Resp: Payload> {
    region: DelegRegion<'a, Req, Resp>,
    id: u32,
    epoch: u32,
    /// Next response slot to try, in `0..resp_depth`.
    next_resp: u32,
    in_flight: u32,
    /// Last `tail` seen; refreshed only when it says "full" (L9, rtrb's cached head).
    cached_tail: u64,
    /// One past the last position this client claimed: `head` only grows, so a claim
    /// below it means `head` was overwritten.
    next_min_pos: u64,
    /// A claimed position whose flow-control wait the caller's callback cut short
    /// ([`CallError::RingFull`]); the next reserve resumes it instead of claiming anew,
    /// so a client never holds more than one position beyond the ring.
    parked: Option<u64>,
    closed: bool,
}

/// A claimed ring position that has passed flow control but is not yet written.
///
/// [`commit`](Self::commit) writes and publishes it. Dropping it cancels the claim: the
/// server skips the position without waiting for a hole timeout.
#[derive(Debug)]
#[must_use = "a dropped reservation cancels its ring position"]
pub struct Reservation<'c, 'a, Req: Payload, Resp: Payload> {
    client: &'c mut Client<'a, Req, Resp>,
    pos: u64,
    resp_slot: u32,
    done: bool,
}

impl<'a, Req: Payload, Resp: Payload> Client<'a, Req, Resp> {
    /// Registers with the region: a never-used id from `next_client_id` if any is left,
    /// else a freed id (its epoch bumped). `owner` is recorded in the client table (the
    /// host passes its pid and start time, so the server's host can tell when this
    /// process is gone).
    pub fn connect(
        region: DelegRegion<'a, Req, Resp>,
        owner: impl Into<Owner>,
    ) -> Result<Self, ConnectError> {
        let owner = owner.into();
        const { check_payload_align::<Req, Resp>() };
        let h = region.header;
        // Relaxed: a flag; nothing is published with it.
        if !h.server_alive.load(Ordering::Relaxed) {
            return Err(ConnectError::ServerDisconnected);
        }
        // Fresh ids first, as the first design does, but never past max_clients.
        claim_client_id(&h.next_client_id, region.cfg.max_clients, true, |id| {
            Self::try_take(region, id, owner)
        })
        .ok_or(ConnectError::NoFreeClientId)
    }

    fn try_take(region: DelegRegion<'a, Req, Resp>, id: u32, owner: Owner) -> Option<Self> {
        let e = region.client_entry(id);
        // A4/A6/R6 (`ClientState::activate`; A4 pairs with R4 in
        // Server::process_retirements): the server's last writes to this id's response
        // slots happen before we clear them below.
        let epoch = ClientState::activate(&e.state)?;
        // R7 in `record_owner` (pairs with A7 in `ClientInfo::read`, through
        // `DelegRegion::client_info`): a reader that sees this id sees our token. Until this
        // store the entry reads owner 0 (the server clears it before freeing the id),
        // which liveness checks skip.
        record_owner(&e.owner, &e.owner_token, owner);
        // Relaxed: read by the server only for an evicted client (see Server::hole).
        e.claim_pos.store(0, Ordering::Relaxed);
        for i in 0..region.cfg.resp_depth {
            let s = region.resp_slot(id, i);
            // Relaxed: our own slots; the server writes them only for calls we publish
            // later with a Release commit.
            s.valid.store(0, Ordering::Relaxed);
            s.pending.store(0, Ordering::Relaxed);
        }
        Some(Self {
            region,
            id,
            epoch,
            next_resp: 0,
            in_flight: 0,
            cached_tail: 0,
            next_min_pos: 0,
            parked: None,
            closed: false,
        })
    }

    /// This client's id, in `0..max_clients`.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// How many times this id has been registered (starts at 1).
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Calls made and not yet answered.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Sends `req`; returns the response slot (the call's ticket until its response is
    /// polled). Blocks only while the ring is full (see the module docs), and without
    /// bound if the server stops serving without clearing `server_alive`: a host that can
    /// tell uses [`call_with`](Self::call_with).
    pub fn call(&mut self, req: &Req) -> Result<u32, CallError> {
        self.reserve()?.commit(req)
    }

    /// [`call`](Self::call) whose wait for room in a full ring calls `wait` every few
    /// hundred spins and ends with its error: the host checks there that the server's
    /// process lives (`ServerDisconnected`) and bounds the wait (`RingFull`), which the
    /// core, without a clock or pids, cannot.
    pub fn call_with(
        &mut self,
        req: &Req,
        wait: impl FnMut() -> Result<(), CallError>,
    ) -> Result<u32, CallError> {
        self.reserve_with(wait)?.commit(req)
    }

    /// Steps 1–3 of a call: a response slot, a ring position, and room for it.
    pub fn reserve(&mut self) -> Result<Reservation<'_, 'a, Req, Resp>, CallError> {
        self.reserve_with(|| Ok(()))
    }

    /// [`reserve`](Self::reserve) with the wait callback of [`call_with`](Self::call_with).
    /// If `wait` fails, the claimed position stays with this client (see `RingFull`).
    pub fn reserve_with(
        &mut self,
        wait: impl FnMut() -> Result<(), CallError>,
    ) -> Result<Reservation<'_, 'a, Req, Resp>, CallError> {
        let r = self.region;
        // Relaxed: a flag; nothing is published with it.
        if !r.header.server_alive.load(Ordering::Relaxed) {
            return Err(CallError::ServerDisconnected);
        }
        let resp_slot = self.free_resp_slot().ok_or(CallError::NoResponseSlot)?;
        let pos = match self.parked.take() {
            Some(pos) => pos,
            None => self.claim()?,
        };
        if pos.wrapping_sub(self.cached_tail) >= r.cfg.ring_depth as u64 {
            self.wait_for_room(pos, wait)?;
        }
        Ok(Reservation {
            client: self,
            pos,
            resp_slot,
            done: false,
        })
    }

    /// Step 2: a new ring position.
    #[inline]
    fn claim(&mut self) -> Result<u64, CallError> {
        let r = self.region;
        // Relaxed: fetch_add only hands out unique positions; the slot's claim word and
        // `committed` carry every synchronisation (docs/spec/deleg.md#client-call, step 2).
        let pos = r.ctrl.head.fetch_add(1, Ordering::Relaxed);
        if pos < self.next_min_pos {
            // The RMW reads the latest `head`; below our own last claim it went back.
            return Err(Self::corrupt());
        }
        self.next_min_pos = pos + 1;
        // Relaxed: read by the server only for a dead (evicted or declared dead) client,
        // whose stores its death orders before the host's check (see
        // DelegRegion::declare_dead), and by retirement after R8/A8; a stale value only
        // delays the hole's resolution.
        r.client_entry(self.id)
            .claim_pos
            .store(pos + 1, Ordering::Relaxed);
        Ok(pos)
    }

    #[cold]
    fn corrupt() -> CallError {
        CallError::RingCorrupt
    }

    /// Step 3, out of line: spins until `pos` is within `ring_depth` of `tail`.
    ///
    /// Ends early — keeping `pos` parked — when `server_alive` drops or `wait` fails, and
    /// with `RingCorrupt` when `head`/`tail` persistently read values no run produces:
    /// `tail` below a value seen before or above `head`, or `pos - tail` beyond the ring
    /// plus one waiting claim per client id (positions at or past `tail + ring_depth`
    /// are claims still waiting here, at most one per client; a dead client's is drained
    /// before its id is reused). A `tail` past `pos` is not corruption: the server
    /// abandoned our position while we were descheduled; commit then reports `Abandoned`.
    #[cold]
    #[inline(never)]
    fn wait_for_room(
        &mut self,
        pos: u64,
        mut wait: impl FnMut() -> Result<(), CallError>,
    ) -> Result<(), CallError> {
        let r = self.region;
        let depth = r.cfg.ring_depth as u64;
        let limit = depth + u64::from(r.cfg.max_clients);
        let mut spins = 0u32;
        let mut suspect = 0u32;
        loop {
            // A2 (pairs with R2 in Server::advance_tail): the server released every slot
            // below tail, including the previous lap of ours.
            let tail = r.ctrl.tail.load(Ordering::Acquire);
            let bad = if tail < self.cached_tail {
                true
            } else if tail >= pos {
                // At our position too: head, past our claim in any run, must be above it.
                // Relaxed: only compared; head never goes back, so a stale read is caught
                // by the next reload.
                tail > r.ctrl.head.load(Ordering::Relaxed)
            } else {
                pos - tail >= limit
            };
            if bad {
                suspect += 1;
                if suspect >= CORRUPT_CONFIRM {
                    return Err(Self::corrupt());
                }
            } else {
                suspect = 0;
                self.cached_tail = tail;
                if tail > pos || pos - tail < depth {
                    return Ok(());
                }
            }
            // Relaxed: a flag.
            if !r.header.server_alive.load(Ordering::Relaxed) {
                self.parked = Some(pos);
                return Err(CallError::ServerDisconnected);
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(WAIT_EVERY) {
                if let Err(e) = wait() {
                    self.parked = Some(pos);
                    return Err(e);
                }
            }
            spin_loop();
        }
    }

    fn free_resp_slot(&mut self) -> Option<u32> {
        let depth = self.region.cfg.resp_depth;
        if self.in_flight >= depth {
            return None;
        }
        for k in 0..depth {
            let i = (self.next_resp + k) & (depth - 1);
            // Relaxed: `pending` is written and read only by this client.
            if self
                .region
                .resp_slot(self.id, i)
                .pending
                .load(Ordering::Relaxed)
                == 0
            {
                return Some(i);
            }
        }
        None
    }

    /// Delivers every response that has arrived: `f(resp_slot, &resp)`. Returns how many.
    ///
    /// Scans the pending slots (the first design scans all `resp_depth` slots; pending ones
    /// only here). An in-order variant that stops at the first unanswered slot was measured
    /// and gave no gain within this machine's noise (docs/PERFORMANCE.md), so answers that
    /// overtake older calls are delivered at once.
    pub fn poll(&mut self, mut f: impl FnMut(u32, &Resp)) -> usize {
        if self.in_flight == 0 {
            return 0;
        }
        let depth = self.region.cfg.resp_depth;
        let mut n = 0;
        for i in 0..depth {
            let s = self.region.resp_slot(self.id, i);
            // Relaxed: client-private byte.
            if s.pending.load(Ordering::Relaxed) == 0 {
                continue;
            }
            // A3 (pairs with R3 in Server::reply): the payload is written.
            if s.valid.load(Ordering::Acquire) == 0 {
                continue;
            }
            let resp = s.read_payload();
            // Relaxed: the server writes this slot again only after we publish a new call
            // on it (Release commit), which follows these stores in program order.
            s.valid.store(0, Ordering::Relaxed);
            s.pending.store(0, Ordering::Relaxed);
            self.in_flight -= 1;
            n += 1;
            f(i, &resp);
            if self.in_flight == 0 {
                break;
            }
        }
        n
    }

    /// Leaves: the id is freed by the server once its ring positions are drained. Calls
    /// still in flight are dropped. Same as dropping the client.
    pub fn close(mut self) {
        self.do_close();
    }

    fn do_close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let r = self.region;
        let e = r.client_entry(self.id);
        // R8 in `close` (pairs with A8 in Server::process_retirements): a server scan that
        // sees Closing sees every claim we made. A failed CAS: nothing to do.
        let ok = close(&e.state, self.epoch);
        if ok {
            // R5 (pairs with A5 in Server::process_retirements): our Closing state and every
            // claim we made are visible to the server when it sees the bump.
            r.header.retire_requests.fetch_add(1, Ordering::Release);
        }
    }
}

impl<Req: Payload, Resp: Payload> Drop for Client<'_, Req, Resp> {
    fn drop(&mut self) {
        self.do_close();
    }
}

impl<Req: Payload, Resp: Payload> Reservation<'_, '_, Req, Resp> {
    /// The claimed ring position.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Steps 4–5: takes the slot (unless the server abandoned the position), writes and
    /// commits. Returns the response slot.
    pub fn commit(mut self, req: &Req) -> Result<u32, CallError> {
        self.done = true;
        let (pos, resp_slot) = (self.pos, self.resp_slot);
        let client = &mut *self.client;
        let r = client.region;
        let slot = r.slot(pos);
        let lg = r.depth_log2;
        // Relaxed: the CAS only decides who owns the position, the claimer or the
        // server's abandon (an RMW reads the latest word, so exactly one wins). Ordering
        // comes from elsewhere: the server's reads of the previous lap happen before our
        // writes through `tail` (A2 in wait_for_room, or the earlier A2 that set
        // `cached_tail`), and our writes before its reads through `committed` (R1).
        // AcqRel here, with Release on the server's claim store, covered for A2 and hid
        // it from every model (issue 25).
        match slot.claim.compare_exchange(
            Claim::free(pos, lg),
            Claim::writing(pos, lg),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => {}
            // Relaxed failure: we only learn that the word moved on; nothing to read.
            Err(_) => return Err(CallError::Abandoned),
        }
        slot.write_body(client.id, resp_slot, req);
        // R1 (pairs with A1 in Server::poll/recv): publishes client_id, resp_slot_idx and
        // the payload (docs/spec/deleg.md#client-call, step 5).
        slot.committed.store(1, Ordering::Release);
        // Relaxed: client-private.
        r.resp_slot(client.id, resp_slot)
            .pending
            .store(1, Ordering::Relaxed);
        client.in_flight += 1;
        client.next_resp = (resp_slot + 1) & (r.cfg.resp_depth - 1);
        Ok(resp_slot)
    }
}

impl<Req: Payload, Resp: Payload> Drop for Reservation<'_, '_, Req, Resp> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let r = self.client.region;
        let lg = r.depth_log2;
        // Relaxed: we wrote nothing into the slot, so there is nothing to publish; the
        // server only learns that the position is void, and the next lap's claimer
        // synchronises with the server's tail (A2) before its own CAS.
        let _ = r.slot(self.pos).claim.compare_exchange(
            Claim::free(self.pos, lg),
            Claim::free(self.pos + (1u64 << lg), lg),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
}
