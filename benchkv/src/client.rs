//! A client thread: a closed loop keeping `QD` requests outstanding
//! (docs/spec/benchkv.md#client-loop).
//!
//! Routing: a request for this rank goes through ipc to the shard owner (`key % K`); a
//! request for another rank goes through the delegation ring to daemon#0 (`delegation`)
//! or, with `meta`, through ipc to the shard owner, which passes it on. Answers are
//! collected from every ipc client and the ring's response slots, and each completion
//! frees a place for the next request of the pattern.
//!
//! A call refused for room (an ipc ring or the response slots full) keeps its pattern
//! entry and is retried after the next poll; nothing is skipped. After `stop`, the client
//! issues nothing more and polls until every outstanding request is answered (the
//! drain), or until the drain timeout, when what is left is reported as undrained.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use copyrpc_core::deleg::CallError;
use copyrpc_core::ipc::IpcCallError;
use copyrpc_host::shm::deleg::DelegClient;
use copyrpc_host::shm::ipc::IpcClient;

use crate::histogram::Histogram;
use crate::msg::{owner_of, Request, Response, Status};
use crate::route::Backend;
use crate::store::{value_for, value_matches};
use crate::workload::Entry;

/// `Control::run` between runs: completions are not attributed to any run.
pub const NOT_MEASURING: usize = usize::MAX;

/// What the orchestrator and the threads share.
#[derive(Debug)]
pub struct Control {
    /// Index of the run being measured, or [`NOT_MEASURING`].
    pub run: AtomicUsize,
    /// Clients: stop issuing and drain.
    pub stop_clients: AtomicBool,
    /// Daemons: stop turning.
    pub stop_daemons: AtomicBool,
    /// Some thread failed; the orchestrator ends the runs early.
    pub failed: AtomicBool,
}

impl Default for Control {
    fn default() -> Self {
        Self {
            run: AtomicUsize::new(NOT_MEASURING),
            stop_clients: AtomicBool::new(false),
            stop_daemons: AtomicBool::new(false),
            failed: AtomicBool::new(false),
        }
    }
}

/// A client's live counters, read by the orchestrator for per-run rates and progress.
/// Each on its own cache lines: one writer, read once a second.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Counters {
    /// Requests sent.
    pub issued: AtomicU64,
    /// Answers received.
    pub completed: AtomicU64,
}

/// What a client is told.
#[derive(Debug)]
pub struct ClientSetup<'a> {
    /// This rank.
    pub my_rank: u32,
    /// K.
    pub daemons: usize,
    /// Routing of remote requests.
    pub backend: Backend,
    /// QD.
    pub queue_depth: u32,
    /// Check every answer.
    pub verify: bool,
    /// Runs (histograms kept).
    pub runs: usize,
    /// After `stop`, how long to wait for outstanding answers.
    pub drain_timeout: Duration,
    /// The pregenerated requests.
    pub pattern: Vec<Entry>,
    /// ipc region of each daemon.
    pub ipc_names: &'a [String],
    /// The delegation ring (`delegation` only).
    pub deleg_name: Option<&'a str>,
    /// Places left in the delegation ring when it is smaller than every client's depth
    /// together (`None`: it is not, and cannot fill). See [`take_ring_credit`].
    pub ring_credits: Option<&'a AtomicI64>,
    /// Live counters.
    pub counters: &'a Counters,
    /// Shared flags.
    pub control: &'a Control,
}

/// A client's results.
#[derive(Debug)]
pub struct ClientReport {
    /// Requests sent.
    pub issued: u64,
    /// Answers received.
    pub completed: u64,
    /// Requests still unanswered when the drain gave up.
    pub undrained: u64,
    /// Latency per run.
    pub hists: Vec<Histogram>,
    /// Answers whose status says the request failed (an unreachable rank, a bad op, a
    /// full store, a missing key), counted with or without `--verify`.
    pub error_answers: u64,
    /// Answers checked (`--verify`).
    pub checked: u64,
    /// Answers that failed the check.
    pub failures: u64,
    /// The first failure, described.
    pub first_failure: Option<String>,
}

/// A client that stopped on an error: why, and what it had sent and had answered by
/// then (its unanswered requests are lost with it, and the drain says so).
#[derive(Debug)]
pub struct Failed {
    /// The error, one sentence.
    pub why: String,
    /// Requests sent.
    pub issued: u64,
    /// Answers received.
    pub completed: u64,
}

impl Failed {
    /// A failure before anything was sent.
    pub fn before_start(why: String) -> Self {
        Self {
            why,
            issued: 0,
            completed: 0,
        }
    }
}

impl From<String> for Failed {
    /// A failure whose counts are unknown (a thread that panicked): none claimed.
    fn from(why: String) -> Self {
        Self::before_start(why)
    }
}

/// A call in flight: when it left and what it asked.
#[derive(Clone, Copy, Debug, Default)]
struct Inflight {
    issued_ns: u64,
    key: u64,
    value: u64,
    is_read: bool,
}

/// Completion bookkeeping, borrowed by the poll callbacks.
struct Tally {
    verify: bool,
    completed: u64,
    hists: Vec<Histogram>,
    error_answers: u64,
    checked: u64,
    failures: u64,
    first_failure: Option<String>,
}

impl Tally {
    fn complete(&mut self, f: &Inflight, resp: &Response, now_ns: u64, run: usize) {
        self.completed += 1;
        if let Some(h) = self.hists.get_mut(run) {
            h.record(now_ns.saturating_sub(f.issued_ns));
        }
        // The status alone, always: a run whose answers say "unreachable" must not pass
        // for a clean one because nobody asked to verify the values.
        if let Err(why) = check_status(f, resp) {
            self.error_answers += 1;
            self.first_failure.get_or_insert(why);
        }
        if self.verify {
            self.checked += 1;
            if let Err(why) = check(f, resp) {
                self.failures += 1;
                self.first_failure.get_or_insert(why);
            }
        }
    }
}

/// Takes a place in the delegation ring, or says there is none. The core's `call` waits
/// (spinning) for room in a full ring; with more threads than cores that spin holds a
/// core daemon#0 needs to empty the ring. Counting places keeps the client in its loop
/// instead, polling and yielding. Only used when the ring is smaller than the clients'
/// depths together: otherwise it can never fill, and the count would only add a shared
/// cache line to the path being measured.
fn take_ring_credit(credits: Option<&AtomicI64>) -> bool {
    let Some(c) = credits else {
        return true;
    };
    // Relaxed: a counter; the ring's own protocol orders the request and its slot.
    if c.fetch_sub(1, Ordering::Relaxed) > 0 {
        return true;
    }
    c.fetch_add(1, Ordering::Relaxed);
    false
}

/// Gives back `n` places (answers received, or a call that did not go out).
fn return_ring_credits(credits: Option<&AtomicI64>, n: usize) {
    if let (Some(c), true) = (credits, n > 0) {
        // Relaxed: as in take_ring_credit.
        c.fetch_add(n as i64, Ordering::Relaxed);
    }
}

/// `Ok` if `resp`'s status is the success `f` asks for (`GetOk` for a GET, `PutOk` for
/// a PUT).
fn check_status(f: &Inflight, resp: &Response) -> Result<(), String> {
    let status = resp.status();
    if f.is_read && status != Some(Status::GetOk) {
        return Err(format!(
            "GET key {}: status {:?} (word {})",
            f.key, status, resp.status
        ));
    }
    if !f.is_read && status != Some(Status::PutOk) {
        return Err(format!(
            "PUT key {} value {:#x}: status {:?} (word {})",
            f.key, f.value, status, resp.status
        ));
    }
    Ok(())
}

/// `Ok` if `resp` is what the store must have answered to `f`.
fn check(f: &Inflight, resp: &Response) -> Result<(), String> {
    check_status(f, resp)?;
    if f.is_read && !value_matches(f.key, resp.value) {
        return Err(format!(
            "GET key {}: value {:#x} is not a value of this key",
            f.key, resp.value
        ));
    }
    Ok(())
}

type Connections = (
    Vec<IpcClient<Request, Response, Inflight>>,
    Option<DelegClient<Request, Response>>,
);

fn connect(s: &ClientSetup<'_>) -> Result<Connections, String> {
    let ipc = s
        .ipc_names
        .iter()
        .map(|n| IpcClient::connect(n).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let deleg = match s.deleg_name {
        Some(n) => Some(DelegClient::connect(n).map_err(|e| e.to_string())?),
        None => None,
    };
    Ok((ipc, deleg))
}

/// Connects, waits at `ready` with every other thread of the rank (also when the
/// connection failed, so nobody waits for it forever), then runs until `stop_clients`
/// and the drain. Errors are fatal for the run (a region that cannot be opened, a server
/// gone).
pub fn run(s: ClientSetup<'_>, ready: &Barrier) -> Result<ClientReport, Failed> {
    let client = Client::connect(s);
    ready.wait();
    let mut client = client.map_err(Failed::before_start)?;
    let base = Instant::now();
    let mut now_ns = || base.elapsed().as_nanos() as u64;
    let mut drain_deadline = None;
    loop {
        // Relaxed: flags; the counters they guard travel through the join.
        let stopping = client.s.control.stop_clients.load(Ordering::Relaxed);
        if stopping {
            let deadline =
                *drain_deadline.get_or_insert_with(|| Instant::now() + client.s.drain_timeout);
            if client.outstanding() == 0 || Instant::now() >= deadline {
                break;
            }
        }
        // Relaxed: which run a completion counts for may be off by one turn at a run
        // boundary; the run's rate comes from the counters, not from here.
        let run = client.s.control.run.load(Ordering::Relaxed);
        let t = client
            .turn(&mut now_ns, stopping, run)
            .map_err(|why| client.failed(why))?;
        if t.issued == 0 && t.completed == 0 {
            // Two cores: let the daemons run.
            std::thread::yield_now();
        }
    }
    Ok(client.report())
}

/// What one client turn did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Turn {
    /// Requests sent.
    pub issued: usize,
    /// Answers received.
    pub completed: usize,
}

/// One closed-loop client: its connections, its place in the pattern, its tally. The
/// thread of [`run`] turns it in real time; benchkv's virtual world turns the same code
/// at virtual instants.
pub struct Client<'a> {
    s: ClientSetup<'a>,
    ipc: Vec<IpcClient<Request, Response, Inflight>>,
    deleg: Option<DelegClient<Request, Response>>,
    deleg_slots: Vec<Inflight>,
    tally: Tally,
    issued: u64,
    next: usize,
    version: u32,
}

impl std::fmt::Debug for Client<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("issued", &self.issued)
            .field("completed", &self.tally.completed)
            .finish()
    }
}

impl<'a> Client<'a> {
    /// Opens the client's ipc regions and delegation ring.
    pub fn connect(s: ClientSetup<'a>) -> Result<Self, String> {
        let (ipc, deleg) = connect(&s)?;
        Ok(Self {
            deleg_slots: vec![Inflight::default(); s.queue_depth.next_power_of_two() as usize],
            tally: Tally {
                verify: s.verify,
                completed: 0,
                hists: vec![Histogram::new(); s.runs],
                error_answers: 0,
                checked: 0,
                failures: 0,
                first_failure: None,
            },
            s,
            ipc,
            deleg,
            issued: 0,
            next: 0,
            version: 0,
        })
    }

    /// This client stopped on `why`: what it had done by then.
    pub fn failed(&self, why: String) -> Failed {
        Failed {
            why,
            issued: self.issued,
            completed: self.tally.completed,
        }
    }

    /// Requests sent and not yet answered.
    pub fn outstanding(&self) -> u64 {
        self.issued - self.tally.completed
    }

    /// Whether a turn that is not stopping would issue: fewer than the queue depth out.
    pub fn wants_to_issue(&self) -> bool {
        self.outstanding() < u64::from(self.s.queue_depth)
    }

    /// One pass of the closed loop: unless `stopping`, fill the queue depth from the
    /// pattern (a call refused for room is retried next turn), then collect every answer.
    /// `now()` stamps issues and completions (latency = their difference); completions
    /// count for run `run`.
    pub fn turn(
        &mut self,
        now: &mut dyn FnMut() -> u64,
        stopping: bool,
        run: usize,
    ) -> Result<Turn, String> {
        let s = &self.s;
        let mut turn = Turn::default();
        let outstanding = self.issued - self.tally.completed;
        if !stopping && outstanding < u64::from(s.queue_depth) {
            let t = now();
            for _ in outstanding..u64::from(s.queue_depth) {
                let e = s.pattern[self.next];
                let (req, value) = if e.is_read {
                    (Request::get(e.rank, e.key), 0)
                } else {
                    self.version = self.version.wrapping_add(1);
                    let v = value_for(e.key, self.version);
                    (Request::put(e.rank, e.key, v), v)
                };
                let f = Inflight {
                    issued_ns: t,
                    key: e.key,
                    value,
                    is_read: e.is_read,
                };
                let remote = e.rank != s.my_rank;
                let sent = match (&mut self.deleg, remote && s.backend == Backend::Delegation) {
                    (Some(_), true) if !take_ring_credit(s.ring_credits) => false,
                    (Some(d), true) => match d.call(&req) {
                        Ok(slot) => {
                            self.deleg_slots[slot as usize] = f;
                            true
                        }
                        // RingFull: the ring stayed full for the call's whole wait; the
                        // client keeps its position and the next call resumes it.
                        Err(
                            CallError::NoResponseSlot | CallError::Abandoned | CallError::RingFull,
                        ) => {
                            return_ring_credits(s.ring_credits, 1);
                            false
                        }
                        Err(CallError::ServerDisconnected) => {
                            return Err(format!("delegation ring {}: server gone", d.name()))
                        }
                        Err(e @ CallError::RingCorrupt) => {
                            return Err(format!("delegation ring {}: {e}", d.name()))
                        }
                    },
                    _ => {
                        let c = &mut self.ipc[owner_of(e.key, s.daemons)];
                        match c.call(&req, f) {
                            Ok(()) => true,
                            Err(IpcCallError::Full) => false,
                            // Said from the region and the server's process: a zeroed
                            // region reads as a server gone although it may still run.
                            Err(IpcCallError::ServerDisconnected) => {
                                return Err(format!(
                                    "ipc region {}: {}",
                                    c.name(),
                                    c.disconnect_cause()
                                ))
                            }
                        }
                    }
                };
                if !sent {
                    break;
                }
                self.next = (self.next + 1) % s.pattern.len();
                self.issued += 1;
                turn.issued += 1;
            }
            // Relaxed: a statistic read once a second.
            s.counters.issued.store(self.issued, Ordering::Relaxed);
        }
        let t = now();
        let tally = &mut self.tally;
        let mut n = 0;
        for c in &mut self.ipc {
            n += c.poll(|f, resp| tally.complete(&f, resp, t, run));
        }
        if let Some(d) = self.deleg.as_mut() {
            let slots = &self.deleg_slots;
            let got = d.poll(|slot, resp| tally.complete(&slots[slot as usize], resp, t, run));
            return_ring_credits(s.ring_credits, got);
            n += got;
        }
        if n > 0 {
            // Relaxed: a statistic.
            s.counters
                .completed
                .store(self.tally.completed, Ordering::Relaxed);
        }
        turn.completed = n;
        Ok(turn)
    }

    /// The client's results; what is still outstanding counts as undrained.
    pub fn report(self) -> ClientReport {
        ClientReport {
            issued: self.issued,
            completed: self.tally.completed,
            undrained: self.issued - self.tally.completed,
            hists: self.tally.hists,
            error_answers: self.tally.error_answers,
            checked: self.tally.checked,
            failures: self.tally.failures,
            first_failure: self.tally.first_failure,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inflight(key: u64, is_read: bool) -> Inflight {
        Inflight {
            issued_ns: 0,
            key,
            value: 0,
            is_read,
        }
    }

    #[test]
    fn check_accepts_what_the_store_answers_and_refuses_the_rest() {
        let mut s = crate::store::Store::preloaded(100, 1, 0);
        let get = s.handle(&Request::get(0, 5));
        assert!(check(&inflight(5, true), &get).is_ok());
        assert!(check(&inflight(6, true), &get)
            .unwrap_err()
            .contains("not a value"));
        let missing = s.handle(&Request::get(0, 500));
        assert!(check(&inflight(500, true), &missing)
            .unwrap_err()
            .contains("NotFound"));
        let put = s.handle(&Request::put(0, 5, value_for(5, 9)));
        assert!(check(&inflight(5, false), &put).is_ok());
        assert!(check(&inflight(5, false), &get).is_err(), "GetOk for a PUT");
    }
}
