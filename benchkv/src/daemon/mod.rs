//! The daemon loop: one per shard. Every daemon serves its shard through its ipc server
//! and its Flux node; daemon#0 of `delegation` also owns the delegation ring and the
//! transport to every other rank, and with `meta` each daemon owns the transport to the
//! ranks `r % K == id` (docs/spec/benchkv.md#threads, docs/spec/benchkv.md#backends).
//!
//! One turn runs the phases of docs/spec/benchkv.md#daemon-loop in that order, each only if
//! the daemon has that part:
//!
//! 1. transport: `poll` (answers to our calls: credit comes back first), retry what was
//!    parked, then `recv` requests of other ranks — served here, or forwarded over Flux
//!    to the owning shard;
//! 2. delegation ring: client requests for other ranks → transport `call`;
//! 3. ipc: this shard's clients — served here, or (meta) passed on toward the endpoint;
//! 4. Flux: answers from other daemons go back where their request came from; requests
//!    from other daemons are served here (or, meta, sent to their rank).
//!
//! Back-pressure: a Flux queue that is full, or a transport call or reply refused for room,
//! is *parked* in FIFO order and retried on later turns while the loop keeps polling;
//! nothing is dropped, and the daemon never spins inside a phase, so no poll runs nested
//! inside another (so there are no nested answers to buffer, unlike the first design:
//! docs/spec/benchkv.md#back-pressure). While transport calls are parked the delegation
//! ring is not drained, so clients feel the back-pressure as a full ring instead of the
//! daemon queueing without bound. A turn that finds nothing yields the core.
//!
//! Two Flux lanes (two meshes, each with its own in-flight bound and parked queue):
//! [`Lane::Holder`] carries a request toward the daemon that holds its rank's endpoint
//! (meta), [`Lane::Owner`] carries a request to the shard that serves it. They must not
//! share capacity. A holder-lane call completes only when a transport call completes, and
//! that needs the peer rank to serve a request, which may need its owner lane. With one
//! shared lane, every rank's queue between two daemons can fill with holder-bound calls
//! waiting for their transport while each transport waits for an owner-bound call stuck
//! behind them on the other rank: the meta deadlock of 3+ ranks under back-pressure
//! (docs/BENCHKV.md, "Why meta cannot deadlock", has the argument). The owner lane depends
//! on nothing: its requests are served on arrival and Flux replies never wait for room.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};

use copyrpc_core::budget::{steady, Controller, Observation, Params as BudgetParams};
use copyrpc_core::flux::{FluxError, Node};
use copyrpc_host::shm::deleg::DelegServer;
use copyrpc_host::shm::ipc::IpcServer;

use crate::metrics::DaemonMetrics;
use crate::msg::{owner_of, DelegatePayload, Request, Response, Status, OP_GET};
use crate::remote::{Remote, SendError};
use crate::route::{endpoint_daemon, Backend};
use crate::store::{value_for, Store};
use pending::{Origin, Pending};

mod pending;

/// What `--inject-fault` breaks: the first request each daemon serves, then one per
/// [`FAULT_EVERY`] (from the first, so a short run on a loaded machine still breaks one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectFault {
    /// Answer a GET with another key's value.
    CorruptGet,
    /// Never answer a request (the drain must come up short).
    DropRequest,
}

/// Requests served between two injected faults.
pub const FAULT_EVERY: u64 = 1000;

/// Loops between two samples of the outstanding count in a threaded run (the virtual
/// world samples every loop: its runs have few, and sampling costs no virtual time).
pub const SAMPLE_EVERY: u64 = 256;

/// What a daemon is made of.
#[derive(Debug)]
pub struct Parts<R> {
    /// Daemon (shard) id.
    pub id: usize,
    /// K.
    pub daemons: usize,
    /// This rank.
    pub my_rank: u32,
    /// Which backend routes remote requests.
    pub backend: Backend,
    /// Requests taken per source per turn (`--take-per-turn`).
    pub take_per_turn: usize,
    /// The poll budget (`--poll-budget`, docs/spec/poll-budget.md#poll-budget): after the
    /// transport poll that drains the completion queue, up to this many extra polls that
    /// find nothing before the rest of the loop runs, to let completions accumulate (at
    /// most [`EXTRA_POLL_CAP`] × this many extra polls in all). 0: none.
    pub poll_budget: u32,
    /// Steer the poll budget with a controller (`--poll-budget adaptive|adaptive-seed`),
    /// starting from `poll_budget`.
    pub adaptive: Option<Adaptive>,
    /// Collect the loop metrics.
    pub metrics: bool,
    /// Loops between two samples of the outstanding count (`--metrics`).
    pub sample_every: u64,
    /// A loop that found nothing spins on (pinned: the core is the daemon's) instead of
    /// yielding the core.
    pub spin_when_idle: bool,
    /// Break answers on purpose (`--inject-fault`).
    pub fault: Option<InjectFault>,
    /// The shard.
    pub store: Store,
    /// The shard's ipc server.
    pub ipc: IpcServer<Request, Response>,
    /// The delegation ring (daemon#0 of `delegation`).
    pub deleg: Option<DelegServer<Request, Response>>,
    /// The transport to the ranks this daemon holds.
    pub remote: Option<R>,
}

/// Which controller steers an adaptive poll budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adaptive {
    /// `--poll-budget adaptive`: the answer rate over windows of time, each move tried
    /// before it is kept (`copyrpc_core::budget::steady`).
    Rate(steady::Params),
    /// `--poll-budget adaptive-seed`: docs/spec/poll-budget.md#controller as written.
    Seed(BudgetParams),
}

/// A running controller of [`Adaptive`].
#[derive(Debug, Clone)]
enum Ctl {
    Rate(steady::Controller),
    Seed(Controller),
}

/// A daemon's Flux node: the user data of a call is the pending index it answers.
pub type FluxNode<'m, 's> = Node<'m, 's, DelegatePayload, u32>;

/// Which Flux lane a request travels on (see the module docs for why there are two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Toward the daemon holding the endpoint of the request's rank (meta only).
    Holder,
    /// To the shard that serves the request: answered on arrival, depends on nothing.
    Owner,
}

/// A loop's step A makes at most this many times its budget in extra polls, found
/// something or not: completions arriving on every poll would otherwise hold the loop
/// there and starve the clients (the spec bounds only the empty ones).
pub const EXTRA_POLL_CAP: u32 = 4;

/// Step A of the loop under a poll budget (docs/spec/poll-budget.md#poll-budget): the first
/// poll drains the completion queue; then up to `budget` more polls that find nothing, to
/// let completions accumulate, before the loop moves on. A poll that finds something does
/// not use the budget (completions arriving is what the wait is for), but every extra poll
/// counts toward [`EXTRA_POLL_CAP`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StepA {
    /// Polls made, the draining one included.
    polls: u32,
    /// Extra polls that found nothing.
    empty: u32,
    /// Completions found.
    found: usize,
}

impl StepA {
    /// No poll of this step A made yet.
    pub fn is_fresh(&self) -> bool {
        self.polls == 0
    }

    /// A poll found `n` completions; `Some(found in this step A)` when the loop moves
    /// on (and step A starts again), `None` while it keeps polling.
    pub fn after_poll(&mut self, n: usize, budget: u32) -> Option<usize> {
        if self.polls > 0 && n == 0 {
            self.empty += 1;
        }
        self.polls += 1;
        self.found += n;
        // `polls - 1` extra polls made so far.
        if self.empty < budget && self.polls <= EXTRA_POLL_CAP.saturating_mul(budget) {
            return None;
        }
        Some(std::mem::take(self).found)
    }
}

/// One daemon, running on its own thread.
pub struct Daemon<'m, 's, R: Remote> {
    p: Parts<R>,
    /// [`Lane::Holder`]'s node.
    to_holder: FluxNode<'m, 's>,
    /// [`Lane::Owner`]'s node.
    to_owner: FluxNode<'m, 's>,
    pending: Pending<R::Incoming>,
    /// Transport calls refused for room: `(rank, request, pending index)`.
    parked_calls: VecDeque<(u32, Request, u32)>,
    /// Holder-lane Flux calls refused for room: `(daemon, request, pending index)`.
    parked_holder: VecDeque<(usize, Request, u32)>,
    /// Owner-lane Flux calls refused for room; never queued behind the holder lane.
    parked_owner: VecDeque<(usize, Request, u32)>,
    /// Transport replies refused for room.
    parked_replies: VecDeque<(R::Incoming, Response)>,
    /// Answers collected by a poll, delivered after it returns.
    done: Vec<(u32, Response)>,
    /// Step A of this loop: the polls made so far.
    step_a: StepA,
    /// The poll budget in force (the controller's, when adaptive).
    budget: u32,
    /// When this loop's step A made its draining poll.
    step_a_t0: u64,
    /// The adaptive controller (`--poll-budget adaptive|adaptive-seed`).
    ctl: Option<Ctl>,
    /// Answers the polls of this loop's step A delivered.
    step_answers: usize,
    /// The time of the current turn, ns (as the caller of `turn_at` measures it).
    now_ns: u64,
    /// When each pending transport call left (`adaptive-seed` only; index = pending index).
    sent_at: Vec<u64>,
    /// The last round trip measured in this loop (`adaptive-seed` only).
    rtt_ns: Option<u64>,
    m: DaemonMetrics,
    /// Messages this daemon has taken from lines another thread wrote: requests from
    /// the ipc rings and the delegation ring, Flux requests and answers. Each hand-off
    /// moves a cache line between cores (docs/spec/ipc-flux.md), which the virtual world
    /// charges.
    shm_reads: u64,
}

impl<R: Remote> std::fmt::Debug for Daemon<'_, '_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("id", &self.p.id)
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl<'m, 's, R: Remote> Daemon<'m, 's, R> {
    /// A daemon over `parts` and its nodes of the two Flux lanes (same id in both meshes).
    pub fn new(parts: Parts<R>, to_holder: FluxNode<'m, 's>, to_owner: FluxNode<'m, 's>) -> Self {
        let (budget, adaptive) = (parts.poll_budget, parts.adaptive);
        Self {
            p: parts,
            to_holder,
            to_owner,
            pending: Pending::default(),
            parked_calls: VecDeque::new(),
            parked_holder: VecDeque::new(),
            parked_owner: VecDeque::new(),
            parked_replies: VecDeque::new(),
            done: Vec::new(),
            step_a: StepA::default(),
            budget,
            step_a_t0: 0,
            ctl: adaptive.map(|a| match a {
                Adaptive::Rate(p) => Ctl::Rate(steady::Controller::new(p)),
                Adaptive::Seed(p) => Ctl::Seed(Controller::new(p)),
            }),
            step_answers: 0,
            now_ns: 0,
            sent_at: Vec::new(),
            rtt_ns: None,
            m: DaemonMetrics::default(),
            shm_reads: 0,
        }
    }

    /// Messages taken so far from lines another thread wrote (see the field).
    pub fn shm_reads(&self) -> u64 {
        self.shm_reads
    }

    /// Turns until `stop`; returns the metrics.
    pub fn run(mut self, stop: &AtomicBool) -> DaemonMetrics {
        let start = std::time::Instant::now();
        // Relaxed: a flag; everything the daemon reports is handed over by the join.
        while !stop.load(Ordering::Relaxed) {
            // The clock is read only when the controller needs it.
            let now = if self.ctl.is_some() {
                start.elapsed().as_nanos() as u64
            } else {
                0
            };
            if self.turn_at(now) == 0 && !self.p.spin_when_idle {
                // Unpinned: other threads may need this core (the clients, on 2 cores).
                std::thread::yield_now();
            }
        }
        self.finish()
    }

    /// The metrics at the end: what is still held counts as pending at stop.
    pub fn finish(mut self) -> DaemonMetrics {
        self.m.pending_at_stop = self.pending.len() as u64;
        self.record_budget();
        self.m
    }

    /// The poll budget in force.
    pub fn poll_budget(&self) -> u32 {
        self.budget
    }

    fn record_budget(&mut self) {
        self.m.budget_u = u64::from(self.budget);
        match &self.ctl {
            Some(Ctl::Seed(c)) => {
                let s = c.snapshot();
                self.m.budget_u_max = u64::from(s.u_max);
                self.m.budget_rho_q16 = s.rho;
                self.m.budget_batch_q16 = s.batch;
                self.m.budget_empty_q16 = s.empty;
                self.m.budget_ups = s.ups;
                self.m.budget_downs = s.downs;
                self.m.budget_recoveries = s.recoveries;
            }
            Some(Ctl::Rate(c)) => {
                let s = c.snapshot();
                self.m.budget_u_max = u64::from(self.p.adaptive.map_or(0, |a| match a {
                    Adaptive::Rate(p) => p.u_max,
                    Adaptive::Seed(_) => 0,
                }));
                self.m.budget_ups = s.ups;
                self.m.budget_downs = s.downs;
                self.m.budget_recoveries = s.recoveries;
            }
            None => {}
        }
    }

    /// The metrics so far.
    pub fn metrics(&self) -> &DaemonMetrics {
        &self.m
    }

    /// Requests held: awaiting an answer from another daemon or rank, or parked.
    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }

    /// One call of the loop; returns how much work it found. Normally a whole loop
    /// (every phase once); while the poll budget holds the loop in step A, only a
    /// transport poll (and 0 when it found nothing). [`DaemonMetrics::loops`] counts
    /// whole loops.
    #[cfg(test)]
    pub fn turn(&mut self) -> usize {
        self.turn_at(self.now_ns)
    }

    /// One call of the loop at `now_ns` (any origin, not decreasing), the time the
    /// adaptive poll budget measures loops and round trips by; returns how much work it
    /// found. Normally a whole loop (every phase once); while the poll budget
    /// (docs/spec/poll-budget.md#poll-budget) holds the loop in step A, only a transport poll (and 0 when it found nothing).
    /// [`DaemonMetrics::loops`] counts whole loops.
    pub fn turn_at(&mut self, now_ns: u64) -> usize {
        self.now_ns = now_ns;
        let Some(remote) = self.p.remote.as_mut() else {
            return self.rest_of_loop(0);
        };
        if self.step_a.is_fresh() {
            self.step_a_t0 = now_ns;
        }
        let done = &mut self.done;
        let before = done.len();
        let n = remote.poll(&mut |token, resp| done.push((token as u32, resp)));
        self.step_answers += self.done.len() - before;
        if matches!(self.ctl, Some(Ctl::Seed(_))) {
            for &(idx, _) in &self.done[before..] {
                if let Some(t) = self.sent_at.get_mut(idx as usize).filter(|t| **t != 0) {
                    self.rtt_ns = Some(now_ns.saturating_sub(*t));
                    *t = 0;
                }
            }
        }
        let Some(cqes) = self.step_a.after_poll(n, self.budget) else {
            return 0;
        };
        self.rest_of_loop(cqes)
    }

    /// The loop after step A found `cqes` completions: every other phase once.
    fn rest_of_loop(&mut self, cqes: usize) -> usize {
        let mut work = 0;
        if self.p.remote.is_some() {
            self.m.cqe_batch(cqes);
            work += cqes + self.phase_remote();
        }
        if self.p.deleg.is_some() {
            work += self.phase_deleg();
        }
        work += self.phase_ipc();
        work += self.phase_flux();
        self.m.loops += 1;
        if work == 0 {
            self.m.idle_loops += 1;
        }
        let answers = std::mem::take(&mut self.step_answers);
        match self.ctl.as_mut() {
            Some(Ctl::Seed(c)) => {
                self.budget = c.update(Observation {
                    cqes: cqes.min(u32::MAX as usize) as u32,
                    now_ns: self.now_ns,
                    rtt_ns: self.rtt_ns.take(),
                });
            }
            Some(Ctl::Rate(c)) => {
                let waited = self.now_ns.saturating_sub(self.step_a_t0);
                self.budget = c.update(answers.min(u32::MAX as usize) as u32, waited, self.now_ns);
            }
            None => {}
        }
        if self.p.metrics && self.m.loops.is_multiple_of(self.p.sample_every.max(1)) {
            self.m.sample_outstanding(self.pending.len() as u64);
        }
        work
    }

    /// Phase 1 after its poll: deliver the answers, retry what was parked, take requests
    /// from other ranks.
    fn phase_remote(&mut self) -> usize {
        let mut work = self.deliver_done();
        work += self.retry_replies() + self.retry_calls();
        let mut taken = 0;
        while taken < self.p.take_per_turn {
            let Some((inc, mut req)) = self.p.remote.as_mut().and_then(|r| r.recv()) else {
                break;
            };
            taken += 1;
            // It has arrived, so it is this rank's whatever rank the sender addressed
            // (the loopback's pretend ranks are all served here); forwarding must not
            // send it out again.
            req.rank = self.p.my_rank;
            let owner = owner_of(req.key, self.p.daemons);
            if owner == self.p.id {
                let resp = self.serve(&req);
                self.reply_remote(inc, resp);
            } else {
                let idx = self.pending.insert(Origin::Remote(inc));
                self.flux_call(Lane::Owner, owner, req, idx);
            }
        }
        work + taken
    }

    fn phase_deleg(&mut self) -> usize {
        let Some(deleg) = self.p.deleg.as_mut() else {
            return 0;
        };
        if deleg.poll() == 0 {
            return 0;
        }
        let mut taken = 0;
        while taken < self.p.take_per_turn && self.parked_calls.is_empty() {
            let Some(e) = self.p.deleg.as_mut().and_then(|d| d.recv()) else {
                break;
            };
            taken += 1;
            let idx = self.pending.insert(Origin::Deleg(e.token));
            self.dispatch(e.payload, idx);
        }
        self.shm_reads += taken as u64;
        if let Some(d) = self.p.deleg.as_mut() {
            d.advance_tail();
        }
        taken
    }

    fn phase_ipc(&mut self) -> usize {
        if self.p.ipc.poll() == 0 {
            return 0;
        }
        let mut taken = 0;
        while taken < self.p.take_per_turn {
            let Some(h) = self.p.ipc.recv() else {
                break;
            };
            taken += 1;
            self.shm_reads += 1;
            let req = h.payload;
            if self.is_mine(&req) {
                if self.drop_this() {
                    // Served but never answered: the client waits in vain.
                    self.m.served += 1;
                    continue;
                }
                let resp = self.serve(&req);
                if self.p.ipc.reply(h, &resp).is_err() {
                    self.m.reply_failures += 1;
                }
            } else {
                let idx = self.pending.insert(Origin::Ipc(h));
                self.dispatch(req, idx);
            }
        }
        taken
    }

    fn phase_flux(&mut self) -> usize {
        let mut work = 0;
        for lane in [Lane::Owner, Lane::Holder] {
            let done = &mut self.done;
            let node = match lane {
                Lane::Holder => &mut self.to_holder,
                Lane::Owner => &mut self.to_owner,
            };
            let n = node.poll(|idx, payload| {
                let resp = match payload {
                    DelegatePayload::Resp(r) => r,
                    // A request where an answer belongs: answer the waiting call with an
                    // error rather than leave it hanging.
                    DelegatePayload::Req(_) => Response::new(Status::BadOp, 0),
                };
                done.push((idx, resp));
            });
            self.shm_reads += n as u64;
            work += n + self.deliver_done() + self.retry_flux(lane);
        }
        // The owner lane first: what it takes is answered at once.
        for lane in [Lane::Owner, Lane::Holder] {
            let mut taken = 0;
            while taken < self.p.take_per_turn {
                let Some(h) = self.node(lane).try_recv() else {
                    break;
                };
                taken += 1;
                self.shm_reads += 1;
                match h.payload {
                    DelegatePayload::Req(req) if self.is_mine(&req) => {
                        let resp = self.serve(&req);
                        self.flux_reply(lane, h, resp);
                    }
                    // Owner-lane requests are always ours (they were sent to the key's
                    // shard after their rank was set to ours); one that is not was
                    // misrouted, and passing it on would make this lane depend on the
                    // other, so it is answered as a bad request.
                    DelegatePayload::Req(_) if lane == Lane::Owner => {
                        self.flux_reply(lane, h, Response::new(Status::BadOp, 0));
                    }
                    DelegatePayload::Req(req) => {
                        let idx = self.pending.insert(Origin::Flux(lane, h));
                        self.dispatch(req, idx);
                    }
                    DelegatePayload::Resp(_) => {
                        self.flux_reply(lane, h, Response::new(Status::BadOp, 0))
                    }
                }
            }
            work += taken;
        }
        work
    }

    fn node(&mut self, lane: Lane) -> &mut FluxNode<'m, 's> {
        match lane {
            Lane::Holder => &mut self.to_holder,
            Lane::Owner => &mut self.to_owner,
        }
    }

    fn parked(&mut self, lane: Lane) -> &mut VecDeque<(usize, Request, u32)> {
        match lane {
            Lane::Holder => &mut self.parked_holder,
            Lane::Owner => &mut self.parked_owner,
        }
    }

    fn is_mine(&self, req: &Request) -> bool {
        req.rank == self.p.my_rank && owner_of(req.key, self.p.daemons) == self.p.id
    }

    fn serve(&mut self, req: &Request) -> Response {
        self.m.served += 1;
        let mut resp = self.p.store.handle(req);
        if self.p.fault == Some(InjectFault::CorruptGet)
            && req.op == OP_GET
            && (self.m.served - 1).is_multiple_of(FAULT_EVERY)
        {
            // Another key's tag: what a misrouted request would read.
            resp.value = value_for(req.key.wrapping_add(1), 0);
        }
        resp
    }

    /// True when `--inject-fault drop-request` says to lose this request.
    fn drop_this(&self) -> bool {
        self.p.fault == Some(InjectFault::DropRequest) && self.m.served.is_multiple_of(FAULT_EVERY)
    }

    /// Sends request `idx` one hop toward where it is served.
    fn dispatch(&mut self, req: Request, idx: u32) {
        if req.rank != self.p.my_rank {
            let holder = endpoint_daemon(self.p.backend, req.rank, self.p.daemons);
            if holder == self.p.id {
                self.remote_call(req.rank, req, idx);
            } else {
                self.flux_call(Lane::Holder, holder, req, idx);
            }
        } else {
            let owner = owner_of(req.key, self.p.daemons);
            if owner == self.p.id {
                let resp = self.serve(&req);
                self.answer(idx, resp);
            } else {
                self.flux_call(Lane::Owner, owner, req, idx);
            }
        }
    }

    /// Replies to whoever waits on `idx`.
    fn answer(&mut self, idx: u32, resp: Response) {
        let ok = match self.pending.take(idx) {
            // An answer for nothing we hold (a duplicate): nobody to tell.
            None => true,
            Some(Origin::Ipc(h)) => self.p.ipc.reply(h, &resp).is_ok(),
            Some(Origin::Deleg(t)) => self
                .p
                .deleg
                .as_mut()
                .is_some_and(|d| d.reply(t, &resp).is_ok()),
            Some(Origin::Flux(lane, h)) => {
                self.flux_reply(lane, h, resp);
                true
            }
            Some(Origin::Remote(inc)) => {
                self.reply_remote(inc, resp);
                true
            }
        };
        if !ok {
            self.m.reply_failures += 1;
        }
    }

    fn deliver_done(&mut self) -> usize {
        let mut done = std::mem::take(&mut self.done);
        let n = done.len();
        for (idx, resp) in done.drain(..) {
            self.answer(idx, resp);
        }
        self.done = done;
        n
    }

    fn flux_reply(
        &mut self,
        lane: Lane,
        h: copyrpc_core::flux::FluxRequest<DelegatePayload>,
        resp: Response,
    ) {
        // Never refused for room: the caller's in-flight bound sizes our response queue.
        if self
            .node(lane)
            .reply(h, DelegatePayload::Resp(resp))
            .is_err()
        {
            self.m.reply_failures += 1;
        }
    }

    fn flux_call(&mut self, lane: Lane, to: usize, req: Request, idx: u32) {
        if !self.parked(lane).is_empty() || !self.try_flux_call(lane, to, req, idx) {
            self.parked(lane).push_back((to, req, idx));
        }
    }

    /// False if refused for room (to be retried); other failures answer the request.
    fn try_flux_call(&mut self, lane: Lane, to: usize, req: Request, idx: u32) -> bool {
        match self.node(lane).call(to, DelegatePayload::Req(req), idx) {
            Ok(()) => {
                self.m.forwarded += 1;
                true
            }
            Err(FluxError::Full | FluxError::SlabFull) => {
                self.m.flux_full += 1;
                false
            }
            Err(_) => {
                self.answer(idx, Response::new(Status::Unreachable, 0));
                true
            }
        }
    }

    fn retry_flux(&mut self, lane: Lane) -> usize {
        let mut n = 0;
        while let Some(&(to, req, idx)) = self.parked(lane).front() {
            if !self.try_flux_call(lane, to, req, idx) {
                break;
            }
            self.parked(lane).pop_front();
            n += 1;
        }
        n
    }

    fn remote_call(&mut self, rank: u32, req: Request, idx: u32) {
        if !self.parked_calls.is_empty() {
            self.parked_calls.push_back((rank, req, idx));
            return;
        }
        if !self.try_remote_call(rank, req, idx) {
            self.parked_calls.push_back((rank, req, idx));
        }
    }

    /// False if refused for room (to be retried); other failures answer the request.
    fn try_remote_call(&mut self, rank: u32, req: Request, idx: u32) -> bool {
        let r = match self.p.remote.as_mut() {
            Some(remote) => remote.call(rank, &req, u64::from(idx)),
            None => Err(SendError::Failed(format!(
                "daemon {} holds no endpoint for rank {rank}",
                self.p.id
            ))),
        };
        match r {
            Ok(()) => {
                self.m.remote_calls += 1;
                if matches!(self.ctl, Some(Ctl::Seed(_))) {
                    let i = idx as usize;
                    if self.sent_at.len() <= i {
                        self.sent_at.resize(i + 1, 0);
                    }
                    // 0 marks "no sample": a call sent at time 0 is stamped 1 ns later.
                    self.sent_at[i] = self.now_ns.max(1);
                }
                true
            }
            Err(SendError::Busy) => {
                self.m.remote_busy += 1;
                false
            }
            Err(SendError::NoCredit) => {
                self.m.remote_busy += 1;
                self.m.remote_no_credit += 1;
                false
            }
            Err(SendError::Failed(_)) => {
                self.answer(idx, Response::new(Status::Unreachable, 0));
                true
            }
        }
    }

    fn retry_calls(&mut self) -> usize {
        let mut n = 0;
        while let Some(&(rank, req, idx)) = self.parked_calls.front() {
            if !self.try_remote_call(rank, req, idx) {
                break;
            }
            self.parked_calls.pop_front();
            n += 1;
        }
        n
    }

    fn reply_remote(&mut self, inc: R::Incoming, resp: Response) {
        if !self.parked_replies.is_empty() {
            self.parked_replies.push_back((inc, resp));
            return;
        }
        if let Some((inc, resp)) = self.try_reply_remote(inc, resp) {
            self.parked_replies.push_back((inc, resp));
        }
    }

    /// Gives the reply back if refused for room.
    fn try_reply_remote(
        &mut self,
        inc: R::Incoming,
        resp: Response,
    ) -> Option<(R::Incoming, Response)> {
        let Some(remote) = self.p.remote.as_mut() else {
            self.m.reply_failures += 1;
            return None;
        };
        match remote.reply(inc, &resp) {
            Ok(()) => None,
            Err((inc, SendError::Busy | SendError::NoCredit)) => {
                self.m.remote_busy += 1;
                Some((inc, resp))
            }
            Err((_, SendError::Failed(_))) => {
                self.m.reply_failures += 1;
                None
            }
        }
    }

    fn retry_replies(&mut self) -> usize {
        let mut n = 0;
        while let Some((inc, resp)) = self.parked_replies.pop_front() {
            if let Some(back) = self.try_reply_remote(inc, resp) {
                self.parked_replies.push_front(back);
                break;
            }
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests;
