//! `copyrpc-bulk --world virtual:2`: the client and the server as actors of the
//! virtual-time runtime (`copyrpc_host::vworld`), in this one process and thread, each
//! rank with a NIC of its own. The same steps as the threaded run — buffers prepared,
//! calls made one at a time, every reply's bytes and every PUT's checksum checked — but
//! the bandwidth is of virtual time: the NIC profile's link and packet times move the
//! bytes, and each pass of either loop is charged like a daemon loop of the cost model.
//! Deterministic: the same flags print the same bytes.
//!
//! `--deadline-s` bounds each call in virtual seconds; a rank that runs past it ends the
//! world at once, saying where it stood.

use std::sync::Arc;

use copyrpc_core::bulk::{Desc, Pattern};
use copyrpc_core::ops::OpHandle;
use copyrpc_host::fabric::sim::SimFabric;
use copyrpc_host::fabric::{Fabric, FabricOptions};
use copyrpc_host::rpc::RpcConfig;
use copyrpc_host::vworld::{
    ns, transpose, Actor, CostModel, Jitter, Runtime, Turn, VirtualNic, WorldSpec,
};

use super::client::{mib_per_s, Caller, PeerView, Prepared};
use super::server::{Due, Serving};
use super::{step_name, Args, Node, STOP};

/// What the two actors share: the lines to print, in the order they were made, and the
/// first error.
#[derive(Default)]
struct Shared {
    lines: Vec<String>,
    failure: Option<String>,
}

/// Where the client stands.
enum Doing {
    /// About to prepare step `step` (or, past the schedule, to send the STOP).
    Prepare,
    /// A call of the step to make; the step started at `t0`.
    Issue,
    /// Call `op` in flight since `since`.
    Wait { op: OpHandle, since: u64 },
    /// Every step and the STOP answered.
    Done,
}

struct ClientActor<'a> {
    node: Node,
    nic: VirtualNic,
    caller: Caller<'a>,
    a: &'a Args,
    schedule: Vec<(Pattern, usize)>,
    step: usize,
    iter: u32,
    doing: Doing,
    prepared: Prepared,
    descs: (Option<Desc>, Option<Desc>),
    t0: u64,
    cost: CostModel,
    jitter: Jitter,
}

struct ServerActor<'a> {
    node: Node,
    nic: VirtualNic,
    serving: Serving<'a>,
    /// What each request of the run must be, in order; the STOP last.
    dues: Vec<Due>,
    answered: usize,
    /// When the server last took or answered a request.
    last: u64,
    deadline_ns: u64,
    cost: CostModel,
    jitter: Jitter,
}

enum Bulk<'a> {
    Client(Box<ClientActor<'a>>),
    Server(Box<ServerActor<'a>>),
}

fn no_state() -> String {
    "a virtual rank".into()
}

impl Actor<Shared> for Bulk<'_> {
    fn turn(&mut self, t: u64, w: &mut Shared) -> Turn {
        let (nic, work, cqes, cost, done) = match self {
            Bulk::Client(c) => {
                c.nic.step(t);
                match c.pass(t, w) {
                    Ok((work, cqes)) => (
                        &c.nic,
                        work,
                        cqes,
                        (&c.cost, &mut c.jitter),
                        matches!(c.doing, Doing::Done),
                    ),
                    Err(e) => {
                        w.failure.get_or_insert(format!("rank 0/2: {e}"));
                        return Turn::Halt;
                    }
                }
            }
            Bulk::Server(s) => {
                s.nic.step(t);
                match s.pass(t) {
                    Ok((work, cqes)) => {
                        let done = s.answered == s.dues.len() && s.serving.idle();
                        (&s.nic, work, cqes, (&s.cost, &mut s.jitter), done)
                    }
                    Err(e) => {
                        w.failure.get_or_insert(format!("rank 1/2: {e}"));
                        return Turn::Halt;
                    }
                }
            }
        };
        let (cost, jitter) = cost;
        // Each rank is one loop over its one peer's endpoint and no clients.
        let mut next = t + jitter.ns(cost.daemon_loop(cost.loop_fixed(0, 1), work, cqes));
        let sent = nic.step(next);
        if sent.wqes > 0 {
            next += ns(cost.posts(sent.wqes));
        }
        if done {
            Turn::DoneAt(next)
        } else {
            Turn::At(next)
        }
    }

    fn awaited(&self) -> bool {
        true
    }
}

impl ClientActor<'_> {
    /// One pass: whatever the state allows, then the completions. Returns the items it
    /// handled (calls made, replies checked) and the completions polled.
    fn pass(&mut self, t: u64, w: &mut Shared) -> Result<(usize, u64), String> {
        let state = no_state;
        let peer = PeerView {
            rank: 1,
            state: &state,
        };
        let mut work = 0;
        if let Doing::Prepare = self.doing {
            let (pat, n) = self.current();
            if pat != Pattern::HeaderOnly {
                self.prepared = self.caller.prepare(pat, n);
                self.descs = self.caller.descs(pat, n)?;
            }
            self.t0 = t;
            self.doing = Doing::Issue;
        }
        if let Doing::Issue = self.doing {
            let step = self.current();
            let (extra, descs) = if step.0 == Pattern::HeaderOnly {
                (STOP.to_vec(), (None, None))
            } else {
                self.caller.clear_get(step.0, step.1);
                (self.prepared.put_sum.to_le_bytes().to_vec(), self.descs)
            };
            if let Some(op) = self
                .caller
                .try_call(&mut self.node, &peer, step, descs, &extra)?
            {
                self.doing = Doing::Wait { op, since: t };
                work += 1;
            }
        }
        let cqes = self.caller.poll(&mut self.node) as u64;
        // Completions are items of their own below (a reply checked); none is charged
        // twice.
        let _ = cqes;
        if let Doing::Wait { op, since } = self.doing {
            if self.caller.is_done(op) {
                work += 1;
                let step = self.current();
                let got = self.caller.result(&mut self.node, &peer, step, op)?;
                if step.0 == Pattern::HeaderOnly {
                    w.lines
                        .push(format!("rank 0/2: calls={} ok", self.caller.calls));
                    self.doing = Doing::Done;
                } else {
                    self.caller.check(step, got, &self.prepared)?;
                    self.iter += 1;
                    self.doing = Doing::Issue;
                    if self.iter == self.a.iters {
                        let secs = (t - self.t0).max(1) as f64 / 1e9;
                        let data = if step.0.pulls() {
                            self.prepared.put_sum
                        } else {
                            self.prepared.get_sum
                        };
                        w.lines.push(format!(
                            "rank 0/2: {} x {}: {:.3} MiB/s of virtual time, data {:#018x}: ok",
                            step_name(step.0, step.1),
                            self.a.iters,
                            mib_per_s(step, self.a.iters, secs),
                            data
                        ));
                        self.step += 1;
                        self.iter = 0;
                        self.doing = Doing::Prepare;
                    }
                }
            } else if t - since > self.a.deadline.as_nanos() as u64 {
                self.caller.cancel();
                let (pat, n) = self.current();
                return Err(format!(
                    "{}: no reply from rank 1 within {:?} of virtual time",
                    step_name(pat, n),
                    self.a.deadline
                ));
            }
        }
        Ok((work, 0))
    }

    /// The step the client is at: the schedule's, then the STOP.
    fn current(&self) -> (Pattern, usize) {
        self.schedule
            .get(self.step)
            .copied()
            .unwrap_or((Pattern::HeaderOnly, 0))
    }
}

impl ServerActor<'_> {
    fn pass(&mut self, t: u64) -> Result<(usize, u64), String> {
        let state = no_state;
        let peer = PeerView {
            rank: 0,
            state: &state,
        };
        let due = self.dues.get(self.answered).copied().flatten();
        let mut bad = None;
        let pass = self.serving.pass(&mut self.node, &peer, due, &mut bad)?;
        if let Some(why) = bad {
            return Err(why);
        }
        self.answered += pass.answered as usize;
        if pass.took > 0 || pass.answered > 0 {
            self.last = t;
        } else if self.answered < self.dues.len() && t - self.last > self.deadline_ns {
            let what = due.map_or_else(|| "its STOP".to_string(), |(p, n)| step_name(p, n));
            return Err(format!(
                "no request from rank 0 for {} ms of virtual time while {what} was due",
                self.deadline_ns / 1_000_000
            ));
        }
        Ok(((pass.took + pass.answered) as usize, 0))
    }
}

/// Runs the two ranks; the lines to print (rank 0's steps and both ranks' last lines,
/// then the world's), or the first error.
pub fn run(a: &Args, spec: &WorldSpec, max: usize) -> Result<Vec<String>, String> {
    let region = FabricOptions::default().sim.region_bytes + 2 * max.next_multiple_of(4096);
    let opts = spec.sim_options(region);
    let rpc = spec.rpc_config(&RpcConfig {
        qos: a.qos,
        ..RpcConfig::default()
    });
    let mut ranks = Vec::with_capacity(2);
    let mut sent = Vec::with_capacity(2);
    for r in 0..2 {
        let f = SimFabric::open(&opts).map_err(|e| format!("rank {r}'s NIC: {e}"))?;
        let nic = VirtualNic::new(Arc::new(Fabric::Sim(Box::new(f))));
        let node = Node::for_peers(Arc::clone(nic.fabric()), r, 2, &[1 - r], &rpc)
            .map_err(|e| e.to_string())?;
        sent.push(node.records().map_err(|e| e.to_string())?);
        ranks.push((node, nic));
    }
    for ((node, _), got) in ranks.iter_mut().zip(transpose(&sent)) {
        node.connect(&got).map_err(|e| e.to_string())?;
    }
    let ((mut cnode, cnic), (mut snode, snic)) = {
        let mut it = ranks.into_iter();
        (it.next().expect("rank 0"), it.next().expect("rank 1"))
    };
    let caller = Caller::new(&mut cnode, a, max)?;
    let serving = Serving::new(&mut snode, a, max)?;
    let schedule = a.schedule();
    let mut dues: Vec<Due> = schedule
        .iter()
        .flat_map(|&s| std::iter::repeat_n(Some(s), a.iters as usize))
        .collect();
    dues.push(None);
    let deadline_ns = a.deadline.as_nanos() as u64;
    let mut rt = Runtime::new();
    rt.add(Bulk::Client(Box::new(ClientActor {
        node: cnode,
        nic: cnic,
        caller,
        a,
        schedule,
        step: 0,
        iter: 0,
        doing: Doing::Prepare,
        prepared: Prepared {
            put_sum: 0,
            get_sum: 0,
        },
        descs: (None, None),
        t0: 0,
        cost: spec.cost,
        jitter: Jitter::for_actor(a.seed, 0, spec.cost.jitter),
    })));
    rt.add(Bulk::Server(Box::new(ServerActor {
        node: snode,
        nic: snic,
        serving,
        dues,
        answered: 0,
        last: 0,
        deadline_ns,
        cost: spec.cost,
        jitter: Jitter::for_actor(a.seed, 1, spec.cost.jitter),
    })));
    let mut w = Shared::default();
    let end = rt.run(&mut w, &[], |_, _, _| Ok(()), u64::MAX, None)?;
    if let Some(e) = w.failure {
        return Err(e);
    }
    if end.unfinished > 0 {
        return Err("the virtual world ended with a rank not done".into());
    }
    let mut served = 0;
    for actor in rt.into_actors() {
        match actor {
            Bulk::Client(c) => c.caller.release(),
            Bulk::Server(s) => {
                served = s.serving.served;
                s.serving.release();
            }
        }
    }
    w.lines.push(format!("rank 1/2: served={served} ok"));
    w.lines.push(format!(
        "virtual:2: every call answered and checked in {:.3} ms of virtual time",
        end.end_ns as f64 / 1e6
    ));
    Ok(w.lines)
}
