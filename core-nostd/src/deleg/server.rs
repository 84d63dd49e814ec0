//! The server side: poll / recv / advance_tail / reply, hole resolution, id reclamation.

use super::layout::{check_payload_align, Claim, DelegRegion};
use super::ReplyError;
use crate::shm::{evict, ClientInfo, ClientState, EvictError, Payload, ServerSalt};
use crate::sync::Ordering;

/// An idle `poll` reads `head` (to tell "nothing sent" from a hole) only once in this many
/// idle polls, so a server waiting for work does not keep pulling the line that every
/// call's `fetch_add` must then take back. A new hole is seen at most this many polls late;
/// its timeout counts from then.
const HEAD_EVERY: u32 = 64;

/// Consecutive `head` samples below the cursor after which [`Server::ring_corrupt`] says
/// so (one sample may be stale: a cancelled position is seen void without ordering).
const CORRUPT_CONFIRM: u32 = 16;

/// Server settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConfig {
    /// How long a hole at the cursor may stay unclaimed before the position is
    /// abandoned, in the unit of the `now` passed to [`Server::poll`].
    pub hole_timeout: u64,
}

/// Counters for diagnostics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Requests delivered by `recv`.
    pub received: u64,
    /// Positions skipped: cancelled by their claimer, timed out, or held by an evicted client.
    pub abandoned: u64,
    /// Requests dropped because their client closed or was evicted.
    pub dropped: u64,
    /// Requests dropped because they named no valid client or response slot.
    pub malformed: u64,
    /// Client ids freed for reuse.
    pub reclaimed: u64,
}

/// Where to send a reply: client, response slot, the client id's epoch, and which of the
/// slot's calls it answers (sealed by the server that gave the token out, so that
/// another server refuses it as [`ReplyError::Duplicate`]: it names no call taken
/// there). Not `Clone`: one request, one reply.
/// [`into_raw`](Self::into_raw) / [`from_raw`](Self::from_raw) store it elsewhere (e.g.
/// as copyrpc user data); a duplicated raw token is refused by [`Server::reply`] as
/// [`ReplyError::Duplicate`], before or after the client read the first reply, and
/// after the client made its next call on the slot.
#[derive(Debug, PartialEq, Eq)]
pub struct ReplyToken {
    client_id: u32,
    resp_slot_idx: u32,
    epoch: u32,
    call: u32,
}

impl ReplyToken {
    /// The requesting client's id.
    pub fn client_id(&self) -> u32 {
        self.client_id
    }
    /// The response slot the client waits on.
    pub fn resp_slot_idx(&self) -> u32 {
        self.resp_slot_idx
    }
    /// `(client_id, resp_slot_idx, epoch, call)`.
    pub fn into_raw(self) -> (u32, u32, u32, u32) {
        (self.client_id, self.resp_slot_idx, self.epoch, self.call)
    }
    /// Rebuilds a token from [`into_raw`](Self::into_raw). Any value is safe: one that
    /// names no call the server took and has not answered is refused by `reply`.
    pub fn from_raw(raw: (u32, u32, u32, u32)) -> Self {
        Self {
            client_id: raw.0,
            resp_slot_idx: raw.1,
            epoch: raw.2,
            call: raw.3,
        }
    }
}

/// One received request.
#[derive(Debug)]
pub struct RecvEntry<Req> {
    /// Where the reply goes.
    pub token: ReplyToken,
    /// The request.
    pub payload: Req,
}

/// The delegationrpc server. One per region; `!Sync` by use.
#[derive(Debug)]
pub struct Server<'a, Req: Payload, Resp: Payload> {
    region: DelegRegion<'a, Req, Resp>,
    cfg: ServerConfig,
    /// Next position to consume; `tail_published <= cursor <= head`.
    cursor: u64,
    tail_published: u64,
    /// The hole at the cursor being timed: `(pos, first seen at)`.
    hole: Option<(u64, u64)>,
    /// Polls that found nothing at the cursor (free-running): `head` is read on one in
    /// [`HEAD_EVERY`] of them.
    idle_polls: u32,
    retire_seen: u32,
    /// Ids retiring and not yet freed (rescanned while non-zero).
    retiring: u32,
    /// Evicted ids not yet freed (their claims resolve holes at once).
    dead: u32,
    /// Consecutive `head` samples found below the cursor (impossible: the cursor passes
    /// only claimed positions).
    head_behind: u32,
    /// Seals the call numbers of this server's tokens ([`ServerSalt`], here on the
    /// call, whose check is the token's last): a token of another server is refused.
    salt: ServerSalt,
    stats: ServerStats,
}

impl<'a, Req: Payload, Resp: Payload> Server<'a, Req, Resp> {
    /// Takes the server role over `region` (whose header says `server_alive`). The ring
    /// must be fresh or left by a server of this same process.
    pub fn new(region: DelegRegion<'a, Req, Resp>, cfg: ServerConfig) -> Self {
        const { check_payload_align::<Req, Resp>() };
        // Relaxed: only this side writes tail.
        let tail = region.ctrl.tail.load(Ordering::Relaxed);
        // Relaxed: announces liveness; no data published with it.
        region.header.server_alive.store(true, Ordering::Relaxed);
        Self {
            region,
            cfg,
            cursor: tail,
            tail_published: tail,
            hole: None,
            idle_polls: 0,
            retire_seen: 0,
            // Scan the table once at start: ids may be retiring from an earlier server.
            retiring: 1,
            dead: 0,
            head_behind: 0,
            salt: ServerSalt::next(),
            stats: ServerStats::default(),
        }
    }

    /// The region.
    pub fn region(&self) -> DelegRegion<'a, Req, Resp> {
        self.region
    }

    /// Counters.
    pub fn stats(&self) -> ServerStats {
        self.stats
    }

    /// Next position to consume.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// True once `head` has read below the cursor on several samples in a row: the ring
    /// control block was overwritten. `poll` then abandons nothing (every position would
    /// look like a hole) and reports no work; the host should stop serving the region.
    pub fn ring_corrupt(&self) -> bool {
        self.head_behind >= CORRUPT_CONFIRM
    }

    /// The hole being timed at the cursor: `(position, first seen at)`.
    pub fn hole(&self) -> Option<(u64, u64)> {
        self.hole
    }

    /// Scans for committed requests from the cursor and returns how many are ready in a
    /// row. Resolves a hole at the cursor as the module docs describe; `now` is the
    /// caller's clock (any monotonic unit matching `hole_timeout`). Also frees retired ids.
    ///
    /// Unlike the first design, which snapshots `head` on every poll, `head` is read only when the
    /// cursor's slot is not committed (to tell "nothing sent" from a hole): a committed
    /// slot can only belong to the cursor's lap, because the next lap's claimer waits for
    /// `tail` to pass it. So while requests keep coming, the server never pulls the line
    /// every client `fetch_add`s. And while none come, it reads `head` on one idle poll in
    /// 64 (`HEAD_EVERY`; on every poll while an evicted client may hold the cursor), and not at
    /// all while it times a hole it has already seen (`head` only grows).
    pub fn poll(&mut self, now: u64) -> usize {
        self.process_retirements();
        let n = self.count_ready();
        if n > 0 {
            self.hole = None;
            return n;
        }
        let mut head = None;
        loop {
            let slot = self.region.slot(self.cursor);
            // Relaxed: only counts; `recv` loads `committed` again with A1 before it reads
            // the body (scripts/orderings.sh: Acquire here was caught by no model). A
            // committed slot at the cursor's index is the cursor's own position (the next
            // lap's claimer waits for `tail` to pass the cursor), so no `head` is needed.
            if slot.committed.load(Ordering::Relaxed) == 1 {
                break;
            }
            let known_hole = matches!(self.hole, Some((p, _)) if p == self.cursor);
            if !known_hole {
                let h = match head {
                    Some(h) => h,
                    None => {
                        let sample = self.dead > 0 || self.idle_polls.is_multiple_of(HEAD_EVERY);
                        self.idle_polls = self.idle_polls.wrapping_add(1);
                        if !sample {
                            return 0;
                        }
                        // Relaxed: head only says whether the cursor's position was
                        // claimed; the slot's `committed` (A1) synchronises its contents.
                        let h = self.region.ctrl.head.load(Ordering::Relaxed);
                        head = Some(h);
                        h
                    }
                };
                if self.cursor == h {
                    self.hole = None;
                    self.head_behind = 0;
                    return 0;
                }
                if h < self.cursor {
                    // Not a hole: nobody can claim below head. Resolving it would abandon
                    // positions not yet handed out, and the cursor would run ahead of head.
                    self.hole = None;
                    self.head_behind = self.head_behind.saturating_add(1);
                    return 0;
                }
                self.head_behind = 0;
            }
            if !self.resolve_hole(now) {
                return 0;
            }
        }
        self.hole = None;
        self.count_ready()
    }

    /// Committed slots from the cursor, skipping void ones, up to the first hole or one lap.
    fn count_ready(&self) -> usize {
        let mut n = 0;
        let end = self.cursor + u64::from(self.region.cfg.ring_depth);
        for p in self.cursor..end {
            let slot = self.region.slot(p);
            // Relaxed: only counts; `recv` reads the body after its own A1 load.
            if slot.committed.load(Ordering::Relaxed) == 1 {
                n += 1;
            } else if !self.is_void(p) {
                break;
            }
        }
        n
    }

    /// True if position `p` (not committed) was cancelled or abandoned: its claim word has
    /// moved to the next lap.
    fn is_void(&self, p: u64) -> bool {
        let lg = self.region.depth_log2;
        // Relaxed: nothing is read from a void slot.
        self.region.slot(p).claim.load(Ordering::Relaxed) == Claim::free(p + (1 << lg), lg)
    }

    /// The cursor's slot is not committed. Returns true if the position was skipped.
    fn resolve_hole(&mut self, now: u64) -> bool {
        let p = self.cursor;
        let lg = self.region.depth_log2;
        let slot = self.region.slot(p);
        if self.is_void(p) {
            self.skip(p);
            return true;
        }
        // Unblock the claimer: with tail = p its flow-control wait ends, so from here on
        // the hole is its own doing.
        if self.tail_published != p {
            self.advance_tail();
        }
        // A dead claimer (evicted by the host) will never commit: skip at once, whatever
        // state it reached.
        if self.dead > 0 && self.claimed_by_dead(p) {
            // Relaxed: we read nothing from the slot; the next lap's claimer gets in only
            // through a `tail` past it, which R2 publishes after this store.
            slot.claim
                .store(Claim::free(p + (1 << lg), lg), Ordering::Relaxed);
            self.skip(p);
            return true;
        }
        match self.hole {
            Some((hp, since)) if hp == p => {
                if now.wrapping_sub(since) < self.cfg.hole_timeout {
                    return false;
                }
            }
            _ => {
                self.hole = Some((p, now));
                return false;
            }
        }
        // Abandon. Succeeds only if the claimer has not started writing; its later CAS
        // then fails (both are RMWs on one word: exactly one wins) and it reports
        // Abandoned. Relaxed: we read nothing from the slot, and the next lap's claimer
        // gets in only through a `tail` past it (R2, stored after this CAS). Relaxed
        // failure: the claimer is writing; we wait for its commit (A1 in `recv`).
        if slot
            .claim
            .compare_exchange(
                Claim::free(p, lg),
                Claim::free(p + (1 << lg), lg),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            self.skip(p);
            return true;
        }
        false
    }

    fn skip(&mut self, p: u64) {
        debug_assert_eq!(p, self.cursor);
        self.cursor = p + 1;
        self.hole = None;
        self.stats.abandoned += 1;
    }

    fn claimed_by_dead(&self, p: u64) -> bool {
        self.region.clients.iter().any(|e| {
            // Relaxed: Dead is written by evict (this thread) or by `DelegRegion::declare_dead`,
            // whose bump (A5) made `self.dead` count it; a later one only falls back to
            // the timeout until the next scan.
            let (st, _) = ClientState::unpack(e.state.load(Ordering::Relaxed));
            // Relaxed: the dead process stored it before dying; a stale value only means
            // we fall back to the timeout.
            st == ClientState::Dead && e.claim_pos.load(Ordering::Relaxed) == p + 1
        })
    }

    /// Takes the request at the cursor, if committed. Skips void positions and drops
    /// requests of retiring clients.
    pub fn recv(&mut self) -> Option<RecvEntry<Req>> {
        let cfg = self.region.cfg;
        let lg = self.region.depth_log2;
        loop {
            let p = self.cursor;
            let slot = self.region.slot(p);
            // A1 (pairs with R1 in Reservation::commit): the body is written.
            if slot.committed.load(Ordering::Acquire) != 1 {
                if self.is_void(p) {
                    self.skip(p);
                    continue;
                }
                return None;
            }
            let (client_id, resp_slot_idx, payload) = slot.read_body();
            // Relaxed, both stores: R2 (the `tail` store in advance_tail, after these)
            // orders them and the reads above before the next lap's claimer, which gets
            // in only through a `tail` past this position (A2). Release on the claim word
            // as well was caught by no model (scripts/orderings.sh): R2 covered for it.
            slot.committed.store(0, Ordering::Relaxed);
            slot.claim
                .store(Claim::free(p + (1 << lg), lg), Ordering::Relaxed);
            self.cursor = p + 1;
            if client_id >= cfg.max_clients || resp_slot_idx >= cfg.resp_depth {
                self.stats.malformed += 1;
                continue;
            }
            // Relaxed: the client registered (CAS) before committing (R1), and A1 above
            // makes that visible; only the server moves a retiring id to Free.
            let (st, epoch) = ClientState::unpack(
                self.region.clients[client_id as usize]
                    .state
                    .load(Ordering::Relaxed),
            );
            if st != ClientState::Active {
                self.stats.dropped += 1;
                continue;
            }
            self.stats.received += 1;
            // The slot's next call: one past the calls answered on it. Read only, so the
            // line the client polls is written by the reply alone, as before. Relaxed: a
            // word only this thread writes.
            let call = self
                .region
                .resp_slot(client_id, resp_slot_idx)
                .served
                .load(Ordering::Relaxed)
                .wrapping_add(1);
            return Some(RecvEntry {
                token: ReplyToken {
                    client_id,
                    resp_slot_idx,
                    epoch,
                    call: self.salt.seal(call),
                },
                payload,
            });
        }
    }

    /// Publishes the cursor as `tail`: every slot before it may be reused by clients.
    pub fn advance_tail(&mut self) {
        // R2 (pairs with A2 in Client::wait_for_room): the server's reads of every slot
        // below the cursor, and its stores releasing them (`committed` = 0 and the claim
        // word's next lap), happen before a client that sees this tail claims the slot
        // again (model: loom_deleg_races::client_laps_the_ring_without_waiting_for_its_replies).
        self.region.ctrl.tail.store(self.cursor, Ordering::Release);
        self.tail_published = self.cursor;
    }

    /// Writes the response for `token` and flags it valid.
    pub fn reply(&mut self, token: ReplyToken, resp: &Resp) -> Result<(), ReplyError> {
        let cfg = self.region.cfg;
        if token.client_id >= cfg.max_clients || token.resp_slot_idx >= cfg.resp_depth {
            return Err(ReplyError::BadToken);
        }
        let e = &self.region.clients[token.client_id as usize];
        // Relaxed: the epoch can only change through Free, which only this thread sets.
        let (st, epoch) = ClientState::unpack(e.state.load(Ordering::Relaxed));
        if st != ClientState::Active || epoch != token.epoch {
            return Err(ReplyError::ClientGone);
        }
        let s = self.region.resp_slot(token.client_id, token.resp_slot_idx);
        // Relaxed: the server's own word. Not the call after the last answered on the
        // slot: a second reply (the client may have read the first and called again on
        // the slot, which `valid` cannot show), or a call never taken.
        let call = self.salt.open(token.call);
        if call != s.served.load(Ordering::Relaxed).wrapping_add(1) {
            return Err(ReplyError::Duplicate);
        }
        // Relaxed: if 1, the client has not consumed an earlier reply on this slot (it
        // clears it before publishing a new call here), so this reply is a duplicate.
        if s.valid.load(Ordering::Relaxed) != 0 {
            return Err(ReplyError::Duplicate);
        }
        s.write_payload(resp);
        // R3 (pairs with A3 in Client::poll): publishes the payload (docs/spec/deleg.md#server).
        s.valid.store(1, Ordering::Release);
        // Relaxed: the server's own word; the call is answered.
        s.served.store(call, Ordering::Relaxed);
        Ok(())
    }

    /// Declares client `id` dead (its process is gone: the host checked the owner pid).
    /// Its hole, if any, is skipped at once; its id is freed once drained.
    pub fn evict(&mut self, id: u32) -> Result<(), EvictError> {
        // A racing Closing from the client, or Dead from another client's host
        // (`DelegRegion::declare_dead`), is fine either way: both bump retire_requests, and
        // a lost CAS still leaves the next scan to retire the id.
        let won = evict(
            self.region.clients.get(id as usize).map(|e| &e.state),
            &[ClientState::Active, ClientState::Closing],
        )?;
        self.retiring += 1;
        if won {
            self.dead += 1;
        }
        Ok(())
    }

    /// The client table, for the host's liveness checks (see [`DelegRegion::client_info`]).
    pub fn clients(&self) -> impl Iterator<Item = ClientInfo> + '_ {
        let r = self.region;
        (0..r.cfg.max_clients).map(move |id| r.client_info(id))
    }

    fn process_retirements(&mut self) {
        // A5 (pairs with R5 in Client::do_close): the client's Closing state and its
        // claims are visible.
        let req = self.region.header.retire_requests.load(Ordering::Acquire);
        if req == self.retire_seen && self.retiring == 0 {
            return;
        }
        self.retire_seen = req;
        let mut retiring = 0;
        let mut dead = 0;
        for e in self.region.clients {
            // A8 (pairs with R8 in Client::do_close and DelegRegion::declare_dead): a scan
            // may see Closing/Dead before the bump that announces it (a rescan runs for
            // another id's bump, or at start); the claims made before it — `head` and
            // `claim_pos` read below — must be visible then too, or `drain_until` could
            // fall short and free the id with a request of its old owner still in the
            // ring, which would then be delivered under the next owner's epoch (found by
            // the loom model `dead_id_declared_by_connecting_host_is_reused`).
            let word = e.state.load(Ordering::Acquire);
            let (st, epoch) = ClientState::unpack(word);
            if st != ClientState::Closing && st != ClientState::Dead {
                continue;
            }
            // Relaxed: server-private field.
            let mut until = e.drain_until.load(Ordering::Relaxed);
            if until == u64::MAX {
                // Relaxed: every claim of a closing client happened before R5/A5; for a
                // dead one, claim_pos bounds its last claim if head is stale.
                let head = self.region.ctrl.head.load(Ordering::Relaxed);
                until = head.max(e.claim_pos.load(Ordering::Relaxed));
                e.drain_until.store(until, Ordering::Relaxed);
            }
            if self.cursor >= until {
                // Relaxed: server-private field.
                e.drain_until.store(u64::MAX, Ordering::Relaxed);
                // Relaxed: published by R4 below; the next owner's entry reads 0 (not yet
                // recorded) rather than the dead owner's pid until its R7.
                e.owner.store(0, Ordering::Relaxed);
                e.owner_token.store(0, Ordering::Relaxed);
                // R4 (pairs with A4 in ClientState::activate, from Client::try_take): our
                // last writes to this id's response slots happen before the next owner
                // clears them.
                e.state
                    .store(ClientState::Free.pack(epoch), Ordering::Release);
                self.stats.reclaimed += 1;
            } else {
                retiring += 1;
                if st == ClientState::Dead {
                    dead += 1;
                }
            }
        }
        self.retiring = retiring;
        self.dead = dead;
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
