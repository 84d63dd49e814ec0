//! The shm bench's shape on the virtual runtime: one client and one server of
//! delegationrpc, Flux or ipc, each an [`Actor`] of [`crate::vworld::Runtime`], running
//! the real protocol code over real memory, in virtual time. It asks what the virtual
//! world's shared-memory model (the cost model's `line_ns` and `line_overlap`, and one
//! line per message taken) gives for the pinned two-thread bench's `rtt/*` and
//! `window32/*` (`benches/shm.rs`), so that model can be checked against this machine
//! (docs/BENCHKV.md, "Validation against measured figures").
//!
//! What a turn is charged:
//! - **CPU**: each step's instructions, measured by `scripts/shm-instr.sh` on its
//!   stepped one-thread rig at windows of 1 and 32 ([`MEASURED`]), split into a fixed
//!   part and a part per call (the two windows give both), turned into ns at the
//!   profile's `instructions_per_ns` and divided by `clock_ratio`. A client turn issues
//!   what its window allows (the call step, if it issued any) and polls (the poll step,
//!   always); a server turn serves what it finds (the serve step). A turn that found
//!   nothing pays the fixed part of its poll or serve step: the spin loop's period.
//! - **Lines**: the rules benchkv's world uses. A message another actor wrote is visible
//!   to a turn that starts after the writer's turn began; the turn that takes `n`
//!   messages pays [`CostModel::transfers`] of `n × lines` (`lines` = 1, the world's
//!   model, unless asked otherwise to find what count would fit).
//!
//! Nothing is random here (the profile's jitter is 0; with jitter the draws are seeded
//! by `seed`), so a run is a function of its flags. Every response is checked against
//! its call.

use copyrpc_core::deleg;
use copyrpc_core::flux::{Mesh, Node, NodeCtl, PairCtl};
use copyrpc_core::ipc;
use copyrpc_core::shm::spsc::Slot;
use copyrpc_core::shm::{Msg, Slab, SlabEntry};

use super::deleg::{DelegClient, DelegServer, ServerOptions};
use super::ipc::{IpcClient, IpcServer};
use crate::vworld::{Actor, CostModel, Jitter, Runtime, Turn};

/// The payload of every call and answer, as in the bench: two words, the first the
/// call's number.
pub type P = [u64; 2];

/// The protocols of the bench.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// delegationrpc: one MPSC request ring, per-client response slots.
    Deleg,
    /// Flux: two nodes of a mesh.
    Flux,
    /// ipc: one client's SPSC region (of depth = the window).
    Ipc,
}

impl Proto {
    /// Every protocol, in the order tables list them.
    pub const ALL: [Proto; 3] = [Proto::Ipc, Proto::Deleg, Proto::Flux];

    /// The bench's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Proto::Deleg => "deleg",
            Proto::Flux => "flux",
            Proto::Ipc => "ipc",
        }
    }

    /// Parses a name [`Proto::name`] gives.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// Instructions per call of one step at a window of 1 and of 32.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepInstr {
    /// Per call at a window of 1.
    pub w1: f64,
    /// Per call at a window of 32.
    pub w32: f64,
}

impl StepInstr {
    /// The fixed and per-call parts `(a, b)` with `w1 = a + b` and `w32 = a / 32 + b`.
    pub fn parts(self) -> (f64, f64) {
        let b = ((32.0 * self.w32 - self.w1) / 31.0).max(0.0);
        ((self.w1 - b).max(0.0), b)
    }
}

/// The three steps of one protocol.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProtoInstr {
    /// The client's calls.
    pub call: StepInstr,
    /// The server's take and answer.
    pub serve: StepInstr,
    /// The client's poll for answers.
    pub poll: StepInstr,
}

/// What `scripts/shm-instr.sh` printed for the call, serve and poll steps of each
/// protocol at windows 1 and 32 (release build, x86_64; when, in docs/PERFORMANCE.md,
/// "ipc at window 32: instructions per call"). Rerun it after a protocol's code changes.
pub const MEASURED: [(Proto, ProtoInstr); 3] = [
    (
        Proto::Ipc,
        ProtoInstr {
            call: StepInstr {
                w1: 67.0,
                w32: 47.6,
            },
            serve: StepInstr {
                w1: 203.0,
                w32: 87.7,
            },
            poll: StepInstr {
                w1: 81.0,
                w32: 48.1,
            },
        },
    ),
    (
        Proto::Deleg,
        ProtoInstr {
            call: StepInstr {
                w1: 150.9,
                w32: 127.7,
            },
            serve: StepInstr {
                w1: 204.3,
                w32: 105.9,
            },
            poll: StepInstr {
                w1: 270.1,
                w32: 32.2,
            },
        },
    ),
    (
        Proto::Flux,
        ProtoInstr {
            call: StepInstr {
                w1: 91.0,
                w32: 58.1,
            },
            serve: StepInstr {
                w1: 246.0,
                w32: 144.3,
            },
            poll: StepInstr {
                w1: 143.0,
                w32: 47.1,
            },
        },
    ),
];

/// The measured steps of `proto`.
pub fn measured(proto: Proto) -> ProtoInstr {
    MEASURED
        .iter()
        .find(|(p, _)| *p == proto)
        .map(|(_, m)| *m)
        .expect("every protocol is measured")
}

/// When a turn's writes (calls, answers) become visible to the other side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visibility {
    /// The virtual world's rule (benchkv's and the echo's): to every turn that starts
    /// after the writer's turn began, though the writer pays its line transfers in that
    /// same turn.
    TurnStart,
    /// Only after the writer's own reads arrived: a turn that took messages waits for
    /// their lines, then writes, then runs its CPU part (which a core overlaps with the
    /// next transfer, so it delays nothing the other side waits for).
    AfterLines,
}

/// One run of the rig.
#[derive(Clone, Debug, PartialEq)]
pub struct ShmWorld {
    /// The protocol.
    pub proto: Proto,
    /// Calls in flight at most: 1 is the bench's `rtt/*`, 32 its `window32/*`.
    pub window: u32,
    /// Calls to make.
    pub calls: u64,
    /// The cost model (its `line_ns`, `line_overlap`, `jitter`, `clock_ratio`).
    pub cost: CostModel,
    /// The profile's instructions per ns.
    pub instructions_per_ns: f64,
    /// Line transfers in series per hand-off: a turn that takes `n` messages waits
    /// `hops × transfers(n)` (the world's model: 1).
    pub hops: u32,
    /// When a turn's writes become visible to the other side.
    pub rule: Visibility,
    /// Seeds the jitter's draws.
    pub seed: u64,
}

/// What a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShmReport {
    /// Calls answered (and checked).
    pub calls: u64,
    /// Virtual time when the client had its last answer, ns.
    pub end_ns: u64,
    /// Client turns.
    pub client_turns: u64,
    /// Server turns.
    pub server_turns: u64,
    /// Server turns that found nothing.
    pub server_idle: u64,
    /// Line transfers charged, both sides.
    pub lines: u64,
}

impl ShmReport {
    /// Virtual ns per call: the bench's figure.
    pub fn ns_per_call(&self) -> f64 {
        self.end_ns as f64 / self.calls.max(1) as f64
    }
}

/// The client's end of a protocol: issue call `k`; take answers, checking each.
trait ClientEnd {
    fn call(&mut self, k: u64) -> Result<(), String>;
    fn poll(&mut self) -> Result<u64, String>;
}

/// The server's end: take every request there is (held), then answer those held.
trait ServerEnd {
    fn take(&mut self) -> Result<u64, String>;
    fn answer(&mut self) -> Result<(), String>;
}

/// Records in `err` (the first only) an answer `r` that is not the echo of call `want`.
fn check(proto: &str, r: &P, want: u64, err: &mut Option<String>) {
    if r[0] != want || r[1] != !want {
        err.get_or_insert_with(|| {
            format!(
                "{proto}: an answer carried {} where its call sent {want}",
                r[0]
            )
        });
    }
}

struct IpcC(IpcClient<P, P, u64>);
impl ClientEnd for IpcC {
    fn call(&mut self, k: u64) -> Result<(), String> {
        self.0
            .call(&[k, !k], k)
            .map_err(|e| format!("ipc: call {k}: {e:?}"))
    }
    fn poll(&mut self) -> Result<u64, String> {
        let mut err = None;
        let n = self.0.poll(|u, r| check("ipc", r, u, &mut err));
        err.map_or(Ok(n as u64), Err)
    }
}
struct IpcS(IpcServer<P, P>, Vec<copyrpc_core::ipc::IpcRequest<P>>);
impl ServerEnd for IpcS {
    fn take(&mut self) -> Result<u64, String> {
        if self.0.poll() > 0 {
            while let Some(h) = self.0.recv() {
                self.1.push(h);
            }
        }
        Ok(self.1.len() as u64)
    }
    fn answer(&mut self) -> Result<(), String> {
        for h in self.1.drain(..) {
            let p = h.payload;
            self.0
                .reply(h, &p)
                .map_err(|e| format!("ipc: reply: {e:?}"))?;
        }
        Ok(())
    }
}

/// A delegationrpc server and its one client, as [`deleg_pair`] makes them.
pub type DelegPair = (DelegServer<P, P>, DelegClient<P, P>);

/// The delegationrpc region the shm bench, `shm_instr` and this rig all create, so the rig
/// runs the shape it is checked against: one client, 64 ring slots, 32 calls in flight,
/// and a region left by a killed run replaced. Server first, then its client.
pub fn deleg_pair(region: &str) -> Result<DelegPair, String> {
    let cfg = deleg::Config {
        max_clients: 1,
        ring_depth: 64,
        resp_depth: 32,
    };
    let opts = ServerOptions {
        replace_stale: true,
        ..ServerOptions::default()
    };
    let s = DelegServer::create(region, cfg, opts).map_err(|e| e.to_string())?;
    let c = DelegClient::connect(region).map_err(|e| e.to_string())?;
    Ok((s, c))
}

/// delegationrpc's answers name the response slot, not the call: the slot's call.
struct DelegC(DelegClient<P, P>, Vec<u64>);
impl ClientEnd for DelegC {
    fn call(&mut self, k: u64) -> Result<(), String> {
        let slot = self
            .0
            .call(&[k, !k])
            .map_err(|e| format!("deleg: call {k}: {e:?}"))?;
        let s = slot as usize;
        if s >= self.1.len() {
            self.1.resize(s + 1, 0);
        }
        self.1[s] = k;
        Ok(())
    }
    fn poll(&mut self) -> Result<u64, String> {
        let (mut err, calls) = (None, &self.1);
        let n = self.0.poll(|s, r| {
            let want = calls.get(s as usize).copied().unwrap_or(u64::MAX);
            check("deleg", r, want, &mut err);
        });
        err.map_or(Ok(n as u64), Err)
    }
}
struct DelegS(DelegServer<P, P>, Vec<copyrpc_core::deleg::RecvEntry<P>>);
impl ServerEnd for DelegS {
    fn take(&mut self) -> Result<u64, String> {
        if self.0.poll() > 0 {
            while let Some(e) = self.0.recv() {
                self.1.push(e);
            }
        }
        Ok(self.1.len() as u64)
    }
    fn answer(&mut self) -> Result<(), String> {
        if self.1.is_empty() {
            return Ok(());
        }
        for e in self.1.drain(..) {
            let p = e.payload;
            self.0
                .reply(e.token, &p)
                .map_err(|e| format!("deleg: reply: {e:?}"))?;
        }
        self.0.advance_tail();
        Ok(())
    }
}

struct FluxC<'a>(Node<'a, 'a, P, u64>);
impl ClientEnd for FluxC<'_> {
    fn call(&mut self, k: u64) -> Result<(), String> {
        self.0
            .call(1, [k, !k], k)
            .map_err(|e| format!("flux: call {k}: {e:?}"))
    }
    fn poll(&mut self) -> Result<u64, String> {
        let mut err = None;
        let n = self.0.poll(|u, r| check("flux", &r, u, &mut err));
        err.map_or(Ok(n as u64), Err)
    }
}
struct FluxS<'a>(
    Node<'a, 'a, P, u64>,
    Vec<copyrpc_core::flux::FluxRequest<P>>,
);
impl ServerEnd for FluxS<'_> {
    fn take(&mut self) -> Result<u64, String> {
        while let Some(h) = self.0.try_recv() {
            self.1.push(h);
        }
        Ok(self.1.len() as u64)
    }
    fn answer(&mut self) -> Result<(), String> {
        for h in self.1.drain(..) {
            let p = h.payload;
            self.0
                .reply(h, p)
                .map_err(|_| "flux: reply refused".to_string())?;
        }
        Ok(())
    }
}

/// What both actors share: the report and the first error.
#[derive(Default)]
struct Shared {
    report: ShmReport,
    error: Option<String>,
}

/// Ends the run on `e`, which the run returns.
fn halt(w: &mut Shared, e: String) -> Turn {
    w.error.get_or_insert(e);
    Turn::Halt
}

/// A step's cost in ns: its fixed part if `fixed`, and `n` calls' part.
#[derive(Clone, Copy)]
struct StepNs {
    fixed: f64,
    per: f64,
}

impl StepNs {
    fn of(s: StepInstr, ns_per_instr: f64) -> Self {
        let (a, b) = s.parts();
        Self {
            fixed: a * ns_per_instr,
            per: b * ns_per_instr,
        }
    }
    fn ns(self, n: u64) -> f64 {
        self.fixed + self.per * n as f64
    }
}

struct Client<'a> {
    end: Box<dyn ClientEnd + 'a>,
    call: StepNs,
    poll: StepNs,
    calls: u64,
    window: u64,
    sent: u64,
    done: u64,
    cost: CostModel,
    hops: u64,
    rule: Visibility,
    /// Answers taken by the read half of a turn whose writes wait for its lines.
    held: Option<u64>,
    jitter: Jitter,
}

impl Client<'_> {
    /// Issues what the window allows; how many.
    fn issue(&mut self) -> Result<u64, String> {
        let mut issued = 0;
        while self.sent < self.calls && self.sent - self.done < self.window {
            self.end.call(self.sent)?;
            self.sent += 1;
            issued += 1;
        }
        Ok(issued)
    }

    fn cpu(&self, issued: u64, answers: u64) -> f64 {
        (if issued > 0 {
            self.call.ns(issued)
        } else {
            0.0
        }) + self.poll.ns(answers)
    }
}

impl Actor<Shared> for Client<'_> {
    fn turn(&mut self, now: u64, w: &mut Shared) -> Turn {
        if let Some(n) = self.held.take() {
            // The write half: the answers' lines have arrived; the calls go out now.
            let issued = match self.issue() {
                Ok(k) => k,
                Err(e) => return halt(w, e),
            };
            return Turn::At(now + self.jitter.ns(self.cpu(issued, n)));
        }
        let issued = match self.rule {
            Visibility::TurnStart => match self.issue() {
                Ok(k) => k,
                Err(e) => return halt(w, e),
            },
            Visibility::AfterLines => 0,
        };
        let n = match self.end.poll() {
            Ok(n) => n,
            Err(e) => return halt(w, e),
        };
        self.done += n;
        let wait = self.hops * self.cost.transfers(n);
        let r = &mut w.report;
        r.client_turns += 1;
        r.lines += n * self.hops;
        r.calls = self.done;
        if self.done == self.calls {
            r.end_ns = now + wait + self.jitter.ns(self.cpu(issued, n));
            return Turn::Finished;
        }
        match self.rule {
            Visibility::TurnStart => Turn::At(now + wait + self.jitter.ns(self.cpu(issued, n))),
            Visibility::AfterLines if wait > 0 => {
                self.held = Some(n);
                Turn::At(now + wait)
            }
            Visibility::AfterLines => match self.issue() {
                Ok(issued) => Turn::At(now + self.jitter.ns(self.cpu(issued, n))),
                Err(e) => halt(w, e),
            },
        }
    }

    fn awaited(&self) -> bool {
        true
    }
}

struct Server<'a> {
    end: Box<dyn ServerEnd + 'a>,
    serve: StepNs,
    cost: CostModel,
    hops: u64,
    rule: Visibility,
    /// Requests taken by the read half of a turn whose answers wait for its lines.
    held: Option<u64>,
    jitter: Jitter,
}

impl Actor<Shared> for Server<'_> {
    fn turn(&mut self, now: u64, w: &mut Shared) -> Turn {
        if let Some(n) = self.held.take() {
            if let Err(e) = self.end.answer() {
                return halt(w, e);
            }
            return Turn::At(now + self.jitter.ns(self.serve.ns(n)));
        }
        let n = match self.end.take() {
            Ok(n) => n,
            Err(e) => return halt(w, e),
        };
        let wait = self.hops * self.cost.transfers(n);
        let r = &mut w.report;
        r.server_turns += 1;
        r.server_idle += u64::from(n == 0);
        r.lines += n * self.hops;
        if self.rule == Visibility::AfterLines && wait > 0 {
            self.held = Some(n);
            return Turn::At(now + wait);
        }
        if let Err(e) = self.end.answer() {
            return halt(w, e);
        }
        Turn::At(now + wait + self.jitter.ns(self.serve.ns(n)))
    }

    fn awaited(&self) -> bool {
        false
    }
}

/// Windows the rig runs: the bench's two.
pub const WINDOWS: [u32; 2] = [1, 32];

/// Runs `spec`; `region` names its `/dev/shm` regions (unique per run: two runs at once
/// must not share one). Errors say what failed.
pub fn run(spec: &ShmWorld, region: &str) -> Result<ShmReport, String> {
    if !WINDOWS.contains(&spec.window) {
        return Err(format!(
            "shm world: window {} (the bench runs 1 and 32)",
            spec.window
        ));
    }
    if spec.calls == 0 || spec.hops == 0 {
        return Err("shm world: calls and hops must be at least 1".into());
    }
    if !(spec.instructions_per_ns.is_finite() && spec.instructions_per_ns > 0.0) {
        return Err(format!(
            "shm world: instructions_per_ns {} must be a positive number",
            spec.instructions_per_ns
        ));
    }
    let m = measured(spec.proto);
    let ns_per_instr = 1.0 / (spec.instructions_per_ns * spec.cost.clock_ratio);
    let window = u64::from(spec.window);
    // Flux's nodes borrow their mesh's memory, which must outlive the actors.
    const CAP: usize = 64;
    let slots = Mesh::<P>::slots_needed(2, CAP);
    let pairs: Vec<PairCtl> = (0..4).map(|_| PairCtl::new()).collect();
    let req: Vec<Slot<Msg<P>>> = (0..slots).map(|_| Slot::new()).collect();
    let resp: Vec<Slot<Msg<P>>> = (0..slots).map(|_| Slot::new()).collect();
    let nodes: Vec<NodeCtl> = (0..2).map(|_| NodeCtl::new()).collect();
    let mut slab_a: Vec<SlabEntry<u64>> = (0..CAP).map(|_| SlabEntry::new()).collect();
    let mut slab_b: Vec<SlabEntry<u64>> = (0..CAP).map(|_| SlabEntry::new()).collect();
    let (client, server): (Box<dyn ClientEnd + '_>, Box<dyn ServerEnd + '_>) = match spec.proto {
        Proto::Ipc => {
            let cfg = ipc::Config {
                max_clients: 1,
                depth: spec.window,
            };
            let s = IpcServer::<P, P>::create(region, cfg, true).map_err(|e| e.to_string())?;
            let c = IpcClient::<P, P, u64>::connect(region).map_err(|e| e.to_string())?;
            (Box::new(IpcC(c)), Box::new(IpcS(s, Vec::new())))
        }
        Proto::Deleg => {
            let (s, c) = deleg_pair(region)?;
            (
                Box::new(DelegC(c, Vec::new())),
                Box::new(DelegS(s, Vec::new())),
            )
        }
        Proto::Flux => {
            let mesh = Mesh::new(2, CAP, &pairs, &req, &resp, &nodes)
                .map_err(|e| format!("flux: mesh: {e:?}"))?;
            let a = mesh
                .node(0, Slab::new(&mut slab_a))
                .map_err(|e| format!("flux: node 0: {e:?}"))?;
            let b = mesh
                .node(1, Slab::new(&mut slab_b))
                .map_err(|e| format!("flux: node 1: {e:?}"))?;
            (Box::new(FluxC(a)), Box::new(FluxS(b, Vec::new())))
        }
    };
    let hops = u64::from(spec.hops);
    let mut rt: Runtime<Box<dyn Actor<Shared> + '_>> = Runtime::new();
    rt.add(Box::new(Client {
        end: client,
        call: StepNs::of(m.call, ns_per_instr),
        poll: StepNs::of(m.poll, ns_per_instr),
        calls: spec.calls,
        window,
        sent: 0,
        done: 0,
        cost: spec.cost,
        hops,
        rule: spec.rule,
        held: None,
        jitter: Jitter::for_actor(spec.seed, 0, spec.cost.jitter),
    }));
    rt.add(Box::new(Server {
        end: server,
        serve: StepNs::of(m.serve, ns_per_instr),
        cost: spec.cost,
        hops,
        rule: spec.rule,
        held: None,
        jitter: Jitter::for_actor(spec.seed, 1, spec.cost.jitter),
    }));
    let mut shared = Shared::default();
    // A call takes well under a microsecond; a run that has not ended by then is stuck.
    let give_up_ns = spec.calls.saturating_mul(1_000_000);
    let end = rt.run(&mut shared, &[], |_, _, _| Ok(()), give_up_ns, None)?;
    if let Some(e) = shared.error {
        return Err(e);
    }
    if end.unfinished > 0 {
        return Err(format!(
            "shm world: {}: the client had {} of {} answers at {} ns of virtual time",
            spec.proto.name(),
            shared.report.calls,
            spec.calls,
            end.end_ns
        ));
    }
    Ok(shared.report)
}
