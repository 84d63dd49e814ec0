//! The echo on the virtual world (`copyrpc-echo --world virtual:N`): N ranks on this one
//! thread, each with a NIC of its own, every rank's loop an actor of
//! [`crate::vworld::Runtime`]. The same [`Echo`] passes run as in the threaded echo; a
//! pass is charged the [`CostModel`]'s echo figures (`echo_pass_ns + echo_item_ns ×
//! calls, responses and answers`, `echo_post_ns` per WQE it sent), so calls/s are
//! virtual and the output is a function of the flags and the seed.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::fabric::sim::SimFabric;
use crate::fabric::Fabric;
use crate::vworld::{
    ns, transpose, Actor, CostModel, Jitter, Runtime, Turn, VirtualNic, WorldSpec,
};

use super::{Echo, EchoConfig, EchoReport, Node, EPS, LARGE_REQS, SMALL_REQS};
use crate::rpc::CONTROL_BYTES;

/// The largest world: one context holds an endpoint to each of [`EPS`] peers.
pub const MAX_VIRTUAL_RANKS: u32 = EPS as u32 + 1;

/// What a virtual echo did: each rank's report (its `elapsed` is the virtual time at
/// which it had every answer and had answered every call), when the last was done, and
/// what its passes were charged for.
#[derive(Clone, Debug, PartialEq)]
pub struct VirtualEcho {
    /// By rank.
    pub ranks: Vec<EchoReport>,
    /// Virtual time at which every rank was done, ns.
    pub end_ns: u64,
    /// Every rank's passes together.
    pub passes: PassTotals,
}

/// The passes of a virtual echo and what the cost model charges them for: the counts
/// `scripts/calibrate.sh` fits the passes' measured instructions against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassTotals {
    /// Passes.
    pub passes: u64,
    /// The peers they looked at (summed over the passes).
    pub peers: u64,
    /// Calls made, responses taken and requests answered.
    pub items: u64,
    /// Responses taken (also counted in `items`).
    pub completions: u64,
    /// WQEs the passes posted.
    pub wqes: u64,
}

impl VirtualEcho {
    /// Calls answered per second of virtual time, over every rank.
    pub fn calls_per_s(&self) -> f64 {
        let calls: u64 = self.ranks.iter().map(|r| r.responses).sum();
        calls as f64 * 1e9 / self.end_ns.max(1) as f64
    }
}

/// Runs the echo among `spec.ranks` virtual ranks (`spec.faults` are not applied: the
/// echo has no fault events). `cfg.deadline` bounds the run in virtual time. Bad
/// settings are refused before anything is built.
pub fn run_virtual(cfg: &EchoConfig, spec: &WorldSpec) -> Result<VirtualEcho> {
    cfg.validate()?;
    if !(2..=MAX_VIRTUAL_RANKS).contains(&spec.ranks) {
        return Err(Error::RpcConfig {
            reason: format!(
                "a virtual echo of {} ranks: it needs 2..={MAX_VIRTUAL_RANKS} (a context holds \
                 {EPS} peers)",
                spec.ranks
            ),
        });
    }
    if cfg.rpc.ring_bytes / 32 <= SMALL_REQS {
        run_sized::<SMALL_REQS>(cfg, spec)
    } else {
        run_sized::<LARGE_REQS>(cfg, spec)
    }
}

/// One rank's echo and the clock of its turns.
struct EchoActor<'c, const REQS: usize> {
    echo: Echo<'c, REQS>,
    nic: VirtualNic,
    /// The other ranks, each of which a pass looks at.
    peers: usize,
    cost: CostModel,
    jitter: Jitter,
    /// When it was first done.
    done_ns: Option<u64>,
}

/// What the ranks share: the first error of any rank (the world stops at it), and the
/// passes' totals.
#[derive(Default)]
struct Shared {
    failure: Option<Error>,
    passes: PassTotals,
}

/// One echo pass, apart from the NIC steps around it: the code whose instructions
/// `scripts/calibrate.sh` measures as one pass (never inlined, so callgrind can name it).
#[inline(never)]
fn pass_work<const REQS: usize>(echo: &mut Echo<'_, REQS>) -> Result<super::Pass> {
    echo.pass()
}

impl<const REQS: usize> Actor<Shared> for EchoActor<'_, REQS> {
    fn turn(&mut self, t: u64, w: &mut Shared) -> Turn {
        self.nic.step(t);
        let pass = match pass_work(&mut self.echo) {
            Ok(p) => p,
            Err(e) => {
                w.failure = Some(e);
                return Turn::Halt;
            }
        };
        w.passes.passes += 1;
        w.passes.peers += self.peers as u64;
        w.passes.items += pass.work as u64;
        w.passes.completions += pass.completions as u64;
        let spent = self.jitter.ns(self.cost.echo_pass(self.peers, pass.work));
        let mut next = t + spent;
        let sent = self.nic.step(next);
        if sent.wqes > 0 {
            w.passes.wqes += u64::from(sent.wqes);
            next += ns(self.cost.echo_posts(sent.wqes));
        }
        if self.echo.done() {
            self.done_ns.get_or_insert(next);
            Turn::DoneAt(next)
        } else {
            Turn::At(next)
        }
    }

    fn awaited(&self) -> bool {
        true
    }
}

fn run_sized<const REQS: usize>(cfg: &EchoConfig, spec: &WorldSpec) -> Result<VirtualEcho> {
    let n = spec.ranks as usize;
    // Both rings of every endpoint, with room for its queues: sparse, so only what is
    // carved takes memory.
    let opts = spec
        .sim_options((n - 1) * (2 * cfg.rpc.ring_bytes + CONTROL_BYTES + (512 << 10)) + (16 << 20));
    let rpc = spec.rpc_config(&cfg.rpc);
    let mut nodes = Vec::with_capacity(n);
    let mut sent = Vec::with_capacity(n);
    for r in 0..n {
        let nic = VirtualNic::new(Arc::new(Fabric::Sim(Box::new(SimFabric::open(&opts)?))));
        let peers: Vec<usize> = (0..n).filter(|&p| p != r).collect();
        let node = Node::<REQS>::for_peers(Arc::clone(nic.fabric()), r, n, &peers, &rpc)?;
        sent.push(node.records()?);
        nodes.push((node, nic));
    }
    for ((node, _), got) in nodes.iter_mut().zip(transpose(&sent)) {
        node.connect(&got)?;
    }
    let mut rt = Runtime::new();
    for (id, (node, nic)) in nodes.into_iter().enumerate() {
        rt.add(EchoActor {
            echo: Echo::new(node, n, cfg),
            nic,
            peers: n - 1,
            cost: spec.cost,
            jitter: Jitter::for_actor(cfg.seed, id, spec.cost.jitter),
            done_ns: None,
        });
    }
    let mut shared = Shared::default();
    let give_up_ns = u64::try_from(cfg.deadline.as_nanos()).unwrap_or(u64::MAX);
    let end = rt
        .run(
            &mut shared,
            &[],
            |_, _, _| Ok(()),
            give_up_ns,
            Some(("copyrpc-echo", give_up_ns)),
        )
        .map_err(|reason| Error::RpcConfig { reason })?;
    if let Some(e) = shared.failure {
        return Err(e);
    }
    let actors = rt.into_actors();
    if end.unfinished > 0 {
        let stuck = actors
            .iter()
            .find(|a| !a.echo.done())
            .expect("a rank not done");
        return Err(stuck.echo.stuck());
    }
    let end_ns = actors
        .iter()
        .filter_map(|a| a.done_ns)
        .max()
        .unwrap_or(end.end_ns);
    let total_responses = actors.iter().map(|a| a.echo.responses).sum();
    let total_served = actors.iter().map(|a| a.echo.served).sum();
    Ok(VirtualEcho {
        ranks: actors
            .iter()
            .map(|a| EchoReport {
                total_responses,
                total_served,
                elapsed: Duration::from_nanos(a.done_ns.unwrap_or(end_ns)),
                ..a.echo.report()
            })
            .collect(),
        end_ns,
        passes: shared.passes,
    })
}
