//! The virtual-time world (`--world virtual:N`): N ranks, each with its K daemons and C
//! clients, in this process and on this one thread, in virtual time.
//!
//! It runs the code the threaded benchkv runs — [`Daemon::turn`], the client's
//! [`Client::turn`], delegationrpc, ipc and Flux over their `/dev/shm` regions, copyrpc
//! over the mlx5 device model — and replaces three things only:
//!
//! - **the scheduler**: every actor (each daemon, each client) has its own clock; the
//!   actor with the earliest clock runs next (ties: daemons before clients, lower index
//!   first), so a run is a deterministic function of the flags and the seed;
//! - **the clock**: a turn advances its actor's clock by the [`CostModel`]; clients stamp
//!   requests and answers with virtual time, so latencies are virtual;
//! - **the fabric**: each daemon that holds endpoints has a device of its own
//!   ([`Stepping::Manual`]), stepped at the start of each of its turns (delivering what
//!   arrived by then) and at the end (sending what the turn posted, stamped with the end
//!   time); the links carry the [`NicProfile`]'s one-way time and bandwidth.
//!
//! Why this is causal: a daemon reads its completion queue only at the start of its
//! turns, and only its own device writes there. A packet is stamped at the end of its
//! sender's turn plus the one-way time, which is after the sender's turn started; the
//! scheduler ran every turn that started earlier first, so whatever is due by the start
//! of a turn has been sent by then. What the model simplifies: shared-memory writes
//! (ipc, delegation, Flux) are seen at once by the reader's next turn, a turn's posts
//! leave at its end and their CPU cost is charged after them (docs/BENCHKV.md).

mod faults;
mod model;
mod series;

pub use faults::{Fault, FaultKind};
pub use model::{CostModel, NicProfile};

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::atomic::AtomicI64;
use std::sync::Arc;
use std::time::Instant;

use copyrpc_core::shm::{Slab, SlabEntry};
use copyrpc_host::fabric::sim::{
    SimDevice, SimFabric, SimLinkConfig as LinkConfig, SimOptions, Stepping, SIM_MAX_QPS,
};
use copyrpc_host::fabric::Fabric;
use copyrpc_host::rpc::PeerRecord;
use serde_json::json;

use crate::client::{Client, ClientReport, ClientSetup, Control, Counters, NOT_MEASURING};
use crate::config::{Backend, Config};
use crate::daemon::{Daemon, Parts};
use crate::metrics::DaemonMetrics;
use crate::orchestrate::{tally, Fail, Outcome};
use crate::remote::{self, endpoint_daemon, AnyRemote, CopyrpcRemote};
use crate::report::{Report, RunRecord, RunResult};
use crate::setup::{self, FluxMem, Servers};
use crate::store::Store;
use crate::workload::{client_seed, generate, Rng};
use model::ns;
use series::Series;

/// `--world virtual:N` and the figures of its model.
#[derive(Clone, Debug, PartialEq)]
pub struct VirtualSpec {
    /// N.
    pub ranks: u32,
    /// `--cost`.
    pub cost: CostModel,
    /// `--nic`.
    pub nic: NicProfile,
    /// `--vfault`, in time order.
    pub faults: Vec<Fault>,
    /// `--sample-every` (ns of virtual time) for `--plot`.
    pub sample_ns: u64,
}

/// Virtual time the clients get to collect their outstanding answers after the last
/// run, at most (`--drain-timeout` if shorter).
const DRAIN_LIMIT_NS: u64 = 100_000_000;

/// Largest world: the verbs bound (1 024 peers), which the sim NIC each daemon with
/// peers has holds too, whatever the backend.
pub const MAX_RANKS: u32 = 1024;
const _: () = assert!(MAX_RANKS as usize - 1 <= SIM_MAX_QPS);

/// Bytes one NIC touches per peer besides the rings (QP queues, link queue, the peer's
/// mapping): from the resident size of a 32-rank delegation run (836 MiB for 992
/// NIC-peer pairs, docs/BENCHKV.md), rounded up.
const NIC_BYTES_PER_PEER: u64 = 1 << 20;

/// Virtual time the clients get after the last run to collect their answers:
/// `--drain-timeout`, at most [`DRAIN_LIMIT_NS`], and at least long enough for a cut
/// link's QPs to fail (eight ack timeouts) and answer.
fn drain_window_ns(cfg: &Config, spec: &VirtualSpec) -> u64 {
    let transport_gives_up = (spec.nic.ack_timeout_ns * 9.0) as u64;
    (cfg.drain_timeout.as_nanos() as u64)
        .min(DRAIN_LIMIT_NS)
        .max(transport_gives_up)
}

/// Refuses costs under which no request could be answered within the drain: its answer
/// takes at least two client turns (issuing it, collecting the answer) and a daemon loop
/// that handles it, and across ranks also a completion and a posted WQE, each as short
/// as the jitter can make it. Without this an `item_ns` of a second ran and then failed
/// with "drain incomplete", naming no figure.
fn request_fits_the_drain(spec: &VirtualSpec, drain_ns: u64) -> Result<(), String> {
    let c = &spec.cost;
    let mut terms = vec![
        ("client_ns", 2.0 * c.client_ns),
        ("client_item_ns", 2.0 * c.client_item_ns),
        ("loop_ns", c.loop_ns),
        ("item_ns", c.item_ns),
    ];
    if spec.ranks > 1 {
        terms.extend([("cqe_ns", c.cqe_ns), ("post_ns", c.post_ns)]);
    }
    let least_ns = terms.iter().map(|t| t.1).sum::<f64>() * (1.0 - c.jitter);
    if least_ns <= drain_ns as f64 {
        return Ok(());
    }
    let largest = terms
        .iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map_or("", |t| t.0);
    let remote = if spec.ranks > 1 {
        ", a completion of cqe_ns and a WQE of post_ns"
    } else {
        ""
    };
    Err(format!(
        "--cost: one request's answer takes at least {:.1} ms of virtual time (two client \
         turns of client_ns + client_item_ns, a daemon loop of loop_ns + item_ns{remote}, \
         less the jitter), and the clients' drain gets {:.1} ms (--drain-timeout, at most \
         {} ms): lower {largest}",
        least_ns / 1e6,
        drain_ns as f64 / 1e6,
        DRAIN_LIMIT_NS / 1_000_000
    ))
}

/// What a drain that ran out with clients still waiting had to work with: its window,
/// and the longest daemon loop (a remote request's answer crosses three: the client's
/// daemon forwards it, the owner's serves it, the client's daemon hands the answer
/// back). Costs between [`request_fits_the_drain`]'s bound and that path pass the
/// refusals, and without this the run said only "drain incomplete".
fn undrained_note(cfg: &Config, spec: &VirtualSpec, longest_loop_ns: u64) -> String {
    format!(
        "virtual world: clients still waited for answers when the drain's {:.1} ms of \
         virtual time ran out (--drain-timeout, at most {} ms); the longest daemon loop \
         took {:.3} ms (--cost loop_ns + item_ns per item + cqe_ns per completion + \
         post_ns per WQE), and a remote request's answer crosses three loops",
        drain_window_ns(cfg, spec) as f64 / 1e6,
        DRAIN_LIMIT_NS / 1_000_000,
        longest_loop_ns as f64 / 1e6
    )
}

/// Checks that the world fits in memory before anything is built (endpoints per
/// daemon fit by [`MAX_RANKS`]), and that its daemon loops are short enough to drain.
pub fn check_fits(cfg: &Config, spec: &VirtualSpec) -> Result<(), String> {
    let (n, k) = (spec.ranks, cfg.daemons);
    let store = u64::from(n) * crate::resources::store_bytes(cfg.keys, k);
    let patterns = u64::from(n) * crate::resources::pattern_bytes(cfg.clients, cfg.pattern_len);
    let per_peer = NIC_BYTES_PER_PEER + 2 * cfg.copyrpc_ring.bytes() as u64;
    // Per peer, and each NIC's object tables (touched when built in place).
    let tables = std::mem::size_of::<SimDevice>() as u64
        * u64::from(n)
        * k.min(n as usize - 1).max(1) as u64;
    // A loop that finds nothing costs `loop_ns` plus its `--poll-budget` empty polls:
    // that long at least, and a request's answer needs a few loops on both sides. A
    // loop whose floor fills a quarter of the drain could never drain (65 536 polls of
    // 1 us: 65 ms a loop, against at most 100 ms), and the run failed with "drain
    // incomplete".
    let loop_floor_ns = spec.cost.loop_ns + f64::from(cfg.poll_budget) * spec.cost.poll_ns;
    let drain_ns = drain_window_ns(cfg, spec);
    if loop_floor_ns * 4.0 > drain_ns as f64 {
        return Err(format!(
            "--cost loop_ns={} with --poll-budget {} of poll_ns={}: a daemon loop takes at \
             least {:.1} ms of virtual time, and the clients' drain gets {:.1} ms \
             (--drain-timeout, at most {} ms): lower --poll-budget, poll_ns or loop_ns",
            spec.cost.loop_ns,
            cfg.poll_budget,
            spec.cost.poll_ns,
            loop_floor_ns / 1e6,
            drain_ns as f64 / 1e6,
            DRAIN_LIMIT_NS / 1_000_000
        ));
    }
    request_fits_the_drain(spec, drain_ns)?;
    let nics = u64::from(n) * (u64::from(n) - 1) * per_peer + tables;
    let need = store + patterns + nics;
    if let Some(avail) = crate::resources::mem_available() {
        if need > avail / 4 * 3 {
            return Err(format!(
                "--world virtual:{n}: this world needs about {} MiB (stores {} MiB for \
                 --keys {}, patterns {} MiB for --pattern-len {}, NICs {} MiB) and the \
                 machine has {} MiB available; use fewer ranks, keys or a shorter pattern",
                need >> 20,
                store >> 20,
                cfg.keys,
                patterns >> 20,
                cfg.pattern_len,
                nics >> 20,
                avail >> 20
            ));
        }
    }
    Ok(())
}

/// Who runs next: `(clock, actor)`, the smallest first.
type Queue = BinaryHeap<Reverse<(u64, usize)>>;

/// A daemon actor: the daemon and the NIC it steps.
struct DaemonActor<'m, 's> {
    rank: u32,
    daemon: Daemon<'m, 's, AnyRemote>,
    nic: Option<Arc<Fabric>>,
}

fn sim(f: &Fabric) -> &SimFabric {
    match f {
        Fabric::Sim(s) => s,
        _ => unreachable!("the virtual world opens sim fabrics only"),
    }
}

/// Runs the world; every rank's results come back as one report (rank 0's view).
pub fn run(cfg: &Config, spec: &VirtualSpec) -> Result<Outcome, Fail> {
    check_fits(cfg, spec).map_err(Fail::Usage)?;
    let wall = Instant::now();
    let (n, k, c) = (spec.ranks, cfg.daemons, cfg.clients);
    let cap = cfg.ring_size as usize;
    let cost = spec.cost;

    // Each rank's shared memory: ipc servers, the delegation ring, two Flux meshes.
    let mut ipc_names = Vec::new();
    let mut deleg_names = Vec::new();
    let mut ipc_servers = Vec::new();
    let mut deleg_servers = Vec::new();
    for r in 0..n {
        let s = Servers::create(cfg, r)?;
        ipc_names.push(s.ipc_names);
        deleg_names.push(s.deleg_name);
        ipc_servers.push(s.ipc);
        deleg_servers.push(s.deleg);
    }
    let flux: Vec<(FluxMem, FluxMem)> = (0..n)
        .map(|_| (FluxMem::new(k, cap), FluxMem::new(k, cap)))
        .collect();
    let mut meshes = Vec::with_capacity(flux.len());
    for (h, o) in &flux {
        meshes.push((h.mesh()?, o.mesh()?));
    }
    let mut slabs: Vec<[Vec<SlabEntry<u32>>; 2]> = (0..n as usize * k)
        .map(|_| std::array::from_fn(|_| (0..k * cap).map(|_| SlabEntry::new()).collect()))
        .collect();

    // The NICs (one per daemon that holds endpoints) and copyrpc, wired as the MPI
    // exchange would: every rank's records, then each rank connects to what the others
    // sent it.
    let opts = SimOptions {
        // Rings of both directions per peer, with room for the queues and links, for
        // as many peers as one NIC can have (every other rank): the region is sparse,
        // so only what is carved takes memory. (It was sized for 64 peers, and a world
        // of 85 ranks or more failed with "region is full".)
        region_bytes: (n as usize - 1).max(1) * (2 * cfg.copyrpc_ring.bytes() + (512 << 10))
            + (16 << 20),
        link: LinkConfig {
            latency_ns: spec.nic.one_way_ns(),
            bandwidth_bytes_per_s: spec.nic.bytes_per_s(),
            packet_ns: ns(spec.nic.wqe_ns),
        },
        stepping: Stepping::Manual,
        ack_timeout_ns: Some(spec.nic.ack_timeout_ns.round() as u64),
        min_rnr_timer: Some(spec.nic.rnr_timer_code()),
        ..SimOptions::default()
    };
    let peers_of = |r: u32| -> Vec<Vec<usize>> {
        (0..k)
            .map(|d| {
                (0..n)
                    .filter(|&p| p != r && endpoint_daemon(cfg.backend, p, k) == d)
                    .map(|p| p as usize)
                    .collect()
            })
            .collect()
    };
    let mut nics: Vec<Vec<Option<Arc<Fabric>>>> = Vec::with_capacity(n as usize);
    let mut nodes = Vec::with_capacity(n as usize);
    let mut tables: Vec<Vec<PeerRecord>> = Vec::with_capacity(n as usize);
    for r in 0..n {
        let peers = peers_of(r);
        let mut fabs = Vec::with_capacity(k);
        for p in &peers {
            fabs.push(if p.is_empty() {
                None
            } else {
                let f = SimFabric::open(&opts).map_err(|e| format!("rank {r}'s NIC: {e}"))?;
                Some(Arc::new(Fabric::Sim(Box::new(f))))
            });
        }
        let built = remote::build_nodes(
            |d| Arc::clone(fabs[d].as_ref().expect("a NIC for every daemon with peers")),
            r as usize,
            n as usize,
            &peers,
            cfg.copyrpc_ring,
        )?;
        tables.push(remote::records(&built, n as usize)?);
        nodes.push(built);
        nics.push(fabs);
    }
    let mut remotes: Vec<Vec<Option<CopyrpcRemote>>> = Vec::with_capacity(n as usize);
    for (r, built) in nodes.into_iter().enumerate() {
        let got: Vec<PeerRecord> = tables.iter().map(|t| t[r]).collect();
        remotes.push(remote::finish(built, &got)?);
    }
    // Which daemon and QP of rank a carry its link to rank b (for --vfault cut).
    let mut qp_of: BTreeMap<(u32, u32), (usize, u32)> = BTreeMap::new();
    for (r, rs) in remotes.iter_mut().enumerate() {
        for (d, rem) in rs.iter_mut().enumerate() {
            if let Some(rem) = rem {
                for p in 0..n {
                    if let Some(qpn) = rem.qpn_to(p) {
                        qp_of.insert((r as u32, p), (d, qpn));
                    }
                }
            }
        }
    }

    // Daemons, in rank-major order.
    let mut actors: Vec<DaemonActor<'_, '_>> = Vec::with_capacity(n as usize * k);
    let mut slab_it = slabs.iter_mut();
    for r in 0..n as usize {
        let (holder, owner) = &meshes[r];
        for d in 0..k {
            let [hs, os] = slab_it.next().expect("a slab pair per daemon");
            let parts = Parts {
                id: d,
                daemons: k,
                my_rank: r as u32,
                backend: cfg.backend,
                take_per_turn: cfg.take_per_turn,
                poll_budget: cfg.poll_budget,
                adaptive: cfg.adaptive,
                metrics: true,
                sample_every: 1,
                spin_when_idle: false,
                fault: cfg.fault,
                store: Store::preloaded(cfg.keys, k, d),
                ipc: ipc_servers[r].remove(0),
                deleg: if d == 0 {
                    deleg_servers[r].take()
                } else {
                    None
                },
                remote: remotes[r][d]
                    .take()
                    .map(|x| AnyRemote::Copyrpc(Box::new(x))),
            };
            let h = holder
                .node(d, Slab::new(hs))
                .map_err(|e| format!("Flux: {e}"))?;
            let o = owner
                .node(d, Slab::new(os))
                .map_err(|e| format!("Flux: {e}"))?;
            actors.push(DaemonActor {
                rank: r as u32,
                daemon: Daemon::new(parts, h, o),
                nic: nics[r][d].clone(),
            });
        }
    }

    // Clients. The delegation ring is always credit-counted here: a full ring must
    // never make a client wait inside `call`, since nothing else runs meanwhile.
    let controls: Vec<Control> = (0..n).map(|_| Control::default()).collect();
    let credits: Vec<AtomicI64> = (0..n)
        .map(|_| AtomicI64::new(i64::from(cfg.ring_size)))
        .collect();
    let counters: Vec<Vec<Counters>> = (0..n)
        .map(|_| (0..c).map(|_| Counters::default()).collect())
        .collect();
    let spec_p = cfg.pattern_spec(n);
    let mut clients: Vec<(u32, Option<Client<'_>>)> = Vec::with_capacity(n as usize * c);
    for r in 0..n {
        for (i, counter) in counters[r as usize].iter().enumerate() {
            let s = ClientSetup {
                my_rank: r,
                daemons: k,
                backend: cfg.backend,
                queue_depth: cfg.queue_depth,
                verify: cfg.verify,
                runs: cfg.runs,
                drain_timeout: cfg.drain_timeout,
                pattern: generate(&spec_p, client_seed(cfg.seed, r, i)),
                ipc_names: &ipc_names[r as usize],
                deleg_name: (cfg.backend == Backend::Delegation)
                    .then_some(deleg_names[r as usize].as_str()),
                ring_credits: Some(&credits[r as usize]),
                counters: counter,
                control: &controls[r as usize],
            };
            let cl = Client::connect(s).map_err(|e| format!("rank {r} client {i}: {e}"))?;
            clients.push((r, Some(cl)));
        }
    }

    // The scheduler.
    let nd = actors.len();
    let nc = clients.len();
    let mut rngs: Vec<Rng> = (0..nd + nc)
        .map(|id| Rng::new(cfg.seed ^ (id as u64).wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x5157))
        .collect();
    let mut vary = |id: usize, x: f64| -> u64 {
        if cost.jitter == 0.0 {
            return ns(x);
        }
        let u = (rngs[id].next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        ns(x * (1.0 + cost.jitter * (2.0 * u - 1.0)))
    };
    let mut q: Queue = BinaryHeap::with_capacity(nd + nc + spec.faults.len());
    for id in 0..nd + nc {
        q.push(Reverse((0, id)));
    }
    for (i, f) in spec.faults.iter().enumerate() {
        q.push(Reverse((f.at_ns, nd + nc + i)));
    }
    let run_ns = cfg.duration.as_nanos() as u64;
    let end_ns = run_ns * cfg.runs as u64;
    let give_up_ns = end_ns + drain_window_ns(cfg, spec);
    let mut answers = vec![0u64; n as usize];
    let mut reports: Vec<Vec<Result<ClientReport, String>>> =
        (0..n).map(|_| Vec::with_capacity(c)).collect();
    let mut left = nc;
    let mut series = Series::new(spec.sample_ns);
    let mut last_progress = Instant::now();
    let mut t_now = 0;
    let mut rnr_naks = 0u64;
    // The longest daemon loop (its costs and the WQEs it posted), for a drain that ends
    // with clients still waiting: the figure the refusals above can only bound.
    let mut longest_loop_ns = 0u64;
    while left > 0 {
        let Some(Reverse((t, id))) = q.pop() else {
            break;
        };
        t_now = t;
        if t > give_up_ns {
            break;
        }
        if id < nd {
            let a = &mut actors[id];
            let nic = a.nic.as_deref().map(sim);
            if let Some(s) = nic {
                rnr_naks += u64::from(s.step(t).unwrap_or_default().rnr_naks);
            }
            let (loops, cqes) = (a.daemon.metrics().loops, a.daemon.metrics().cqes);
            let work = a.daemon.turn_at(t);
            let whole = a.daemon.metrics().loops != loops;
            let took = (a.daemon.metrics().cqes - cqes) as f64;
            let spent = if whole {
                vary(
                    id,
                    cost.loop_ns + cost.item_ns * work as f64 + cost.cqe_ns * took,
                )
            } else {
                vary(id, cost.poll_ns)
            };
            let mut next = t + spent;
            if let Some(s) = nic {
                let st = s.step(next).unwrap_or_default();
                rnr_naks += u64::from(st.rnr_naks);
                if st.wqes > 0 {
                    next += ns(cost.post_ns * f64::from(st.wqes));
                }
            }
            if whole {
                longest_loop_ns = longest_loop_ns.max(next - t);
            }
            if id == 0 {
                let m = a.daemon.metrics();
                series.offer(
                    t,
                    m.loops,
                    m.cqes,
                    a.daemon.outstanding() as u64,
                    answers[0],
                    a.daemon.poll_budget(),
                );
            }
            q.push(Reverse((next, id)));
        } else if id < nd + nc {
            let (r, slot) = &mut clients[id - nd];
            let Some(cl) = slot.as_mut() else { continue };
            let stopping = t >= end_ns;
            let run = if stopping {
                NOT_MEASURING
            } else {
                (t / run_ns) as usize
            };
            let res = cl.turn(&mut || t, stopping, run);
            let done = match res {
                Ok(turn) => {
                    answers[*r as usize] += turn.completed as u64;
                    let items = turn.issued + turn.completed;
                    if stopping && cl.outstanding() == 0 {
                        true
                    } else {
                        let spent = if items > 0 {
                            vary(id, cost.client_ns + cost.client_item_ns * items as f64)
                        } else {
                            vary(id, cost.client_idle_ns)
                        };
                        q.push(Reverse((t + spent, id)));
                        false
                    }
                }
                Err(e) => {
                    reports[*r as usize].push(Err(format!("client {}: {e}", id - nd)));
                    *slot = None;
                    left -= 1;
                    continue;
                }
            };
            if done {
                let cl = slot.take().expect("checked above");
                reports[*r as usize].push(Ok(cl.report()));
                left -= 1;
            }
        } else {
            apply_fault(&spec.faults[id - nd - nc], &actors, &qp_of, k)?;
        }
        if last_progress.elapsed().as_secs() >= 2 {
            last_progress = Instant::now();
            eprintln!(
                "benchkv: virtual {:.3} ms of {:.3} ms (wall {:.1} s)",
                t as f64 / 1e6,
                end_ns as f64 / 1e6,
                wall.elapsed().as_secs_f64()
            );
        }
    }
    // Clients that never drained report what they still wait for.
    for (r, slot) in &mut clients {
        if let Some(cl) = slot.take() {
            reports[*r as usize].push(Ok(cl.report()));
        }
    }
    let mut metrics: Vec<Vec<Result<DaemonMetrics, String>>> = (0..n).map(|_| Vec::new()).collect();
    for a in actors {
        metrics[a.rank as usize].push(Ok(a.daemon.finish()));
    }
    drop(meshes);

    // One report, as the gathers of the threaded run would assemble it.
    let mut errors = Vec::new();
    let mut first_failure = None;
    let mut runs: Vec<RunResult> = (0..cfg.runs)
        .map(|_| RunResult {
            ranks: Vec::new(),
            hists: Vec::new(),
        })
        .collect();
    let mut ranks = Vec::new();
    let mut per_rank_metrics = Vec::new();
    for (r, (cr, dm)) in reports.into_iter().zip(metrics).enumerate() {
        let mut errs = Vec::new();
        let (summary, hists, m, ff) = tally(cfg.runs, cr, dm, &mut errs);
        errors.extend(errs.into_iter().map(|e| format!("rank {r}: {e}")));
        if first_failure.is_none() {
            first_failure = ff.map(|f| format!("rank {r}: {f}"));
        }
        for (run, h) in runs.iter_mut().zip(hists) {
            run.ranks.push(RunRecord {
                completed: h.count(),
                elapsed_ns: run_ns,
            });
            run.hists.push(h);
        }
        ranks.push(summary);
        per_rank_metrics.push(m);
    }
    // Clients still waiting when the drain's window ran out.
    if left > 0 {
        errors.push(undrained_note(cfg, spec, longest_loop_ns));
    }
    let mut describe = setup::describe(cfg, n, "sim (virtual time)", None);
    describe.retain(|(k, _)| !matches!(*k, "mpi_ranks" | "pinned" | "cores"));
    describe.extend([
        ("world", json!(format!("virtual:{n}"))),
        ("cost", json!(cost.describe())),
        ("nic", json!(spec.nic.describe())),
        ("one_way_ns", json!(spec.nic.one_way_ns())),
        (
            "faults",
            json!(spec
                .faults
                .iter()
                .map(|f| format!("{f:?}"))
                .collect::<Vec<_>>()),
        ),
        ("virtual_end_us", json!(t_now / 1000)),
        ("rnr_naks", json!(rnr_naks)),
    ]);
    eprintln!(
        "benchkv: virtual world of {n} ranks: {:.3} ms of virtual time in {:.2} s wall, one core",
        t_now as f64 / 1e6,
        wall.elapsed().as_secs_f64()
    );
    Ok(Outcome {
        rank: 0,
        report: Report {
            setup: describe,
            runs,
            ranks,
            metrics: Some(per_rank_metrics),
        },
        first_failure,
        errors,
        extra_json: series
            .samples
            .iter()
            .map(|x| {
                json!({
                    "type": "sample",
                    "t_us": x.t_ns as f64 / 1e3,
                    "outstanding": x.outstanding,
                    "cqe_batch": x.cqe_batch,
                    "answers_per_us": x.rate_per_us,
                    "poll_budget": x.budget,
                })
            })
            .collect(),
        series_svg: Some(series.svg(&format!(
            "virtual:{n} {} K={k} C={c} QD={} poll budget {}",
            cfg.backend.as_str(),
            cfg.queue_depth,
            if let Some(label) = cfg.adaptive_label() {
                label.to_string()
            } else {
                cfg.poll_budget.to_string()
            }
        ))),
    })
}

fn apply_fault(
    f: &Fault,
    actors: &[DaemonActor<'_, '_>],
    qp_of: &BTreeMap<(u32, u32), (usize, u32)>,
    k: usize,
) -> Result<(), String> {
    match f.kind {
        FaultKind::Stall { rank, for_ns } => {
            for a in &actors[rank as usize * k..(rank as usize + 1) * k] {
                if let Some(nic) = &a.nic {
                    sim(nic).engine().with(|d| d.stall_until(f.at_ns + for_ns));
                }
            }
        }
        FaultKind::Cut { a, b } => {
            for (from, to) in [(a, b), (b, a)] {
                if let Some(&(d, qpn)) = qp_of.get(&(from, to)) {
                    let nic = actors[from as usize * k + d]
                        .nic
                        .as_ref()
                        .expect("a daemon with a QP has a NIC");
                    sim(nic)
                        .engine()
                        .with(|dev| dev.set_link_cut(qpn, true))
                        .map_err(|e| format!("--vfault cut: QP {qpn:#x}: {e:?}"))?;
                }
            }
        }
    }
    Ok(())
}
