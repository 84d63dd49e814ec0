//! benchkv on the virtual world (`--world virtual:N`): N ranks, each with its K daemons
//! and C clients, as actors of the host's virtual-time runtime
//! ([`copyrpc_host::vworld`], where the scheduler, the clock, the cost model and the
//! causality argument live).
//!
//! Each rank is built by the same [`Rank`] builder as a threaded rank; what is benchkv's
//! here is the two kinds of actor and what a turn of each is charged:
//!
//! - a **daemon** ([`Daemon::turn_at`]) steps its NIC (if it holds endpoints) at the
//!   start of its turn, runs one loop (or one extra poll of its poll budget), and is
//!   charged `loop_ns + item_ns × items + cqe_ns × completions` (or `poll_ns`); the NIC
//!   is stepped again at the end, and the WQEs it sent add `post_ns` each;
//! - a **client** ([`Client::turn`]) issues and collects, stamping with virtual time, and
//!   is charged `client_ns + client_item_ns × items`, or `client_idle_ns` for a turn that
//!   found nothing. A client finishes once the runs are over and its answers are in.
//!
//! The world ends when every client has finished, or when the drain window after the
//! last run has passed (docs/BENCHKV.md).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use copyrpc_core::flux::Mesh;
use copyrpc_host::fabric::sim::{SimDevice, SimFabric};
use copyrpc_host::fabric::Fabric;
use copyrpc_host::rpc::RpcConfig;
use copyrpc_host::vworld::{
    ns, transpose, Actor, CostModel, Fault, FaultKind, Jitter, Runtime, Series, Turn, VirtualNic,
    WorldSpec,
};
use serde_json::json;

use crate::client::{Client, ClientReport, Failed, Turn as ClientTurn, NOT_MEASURING};
use crate::cluster::Cluster;
use crate::config::Config;
use crate::daemon::{Daemon, Parts};
use crate::metrics::DaemonMetrics;
use crate::msg::DelegatePayload;
use crate::rank::result::{assemble, describe, tally, Fail, Outcome, RankResult};
use crate::rank::{self, Rank, Runner, Slabs};
use crate::remote::{self, AnyRemote};
use crate::report::RunRecord;
use crate::route::endpoint_daemon;

/// Virtual time the clients get to collect their outstanding answers after the last
/// run, at most (`--drain-timeout` if shorter).
const DRAIN_LIMIT_NS: u64 = 100_000_000;

/// Bytes one NIC touches per peer besides the rings (the QP's send queue and its share
/// of the send CQ, the inbound link of `LINK_SLOTS` packets, the doorbell pages): from
/// the `/dev/shm` a 32-rank world uses (183 MiB for 992 NIC-peer pairs at 16 KiB rings,
/// docs/BENCHKV.md), rounded up.
const NIC_BYTES_PER_PEER: u64 = 160 << 10;

/// Virtual time the clients get after the last run to collect their answers:
/// `--drain-timeout`, at most [`DRAIN_LIMIT_NS`], and at least long enough for a cut
/// link's QPs to fail (eight ack timeouts) and answer.
fn drain_window_ns(cfg: &Config, spec: &WorldSpec) -> u64 {
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
fn request_fits_the_drain(spec: &WorldSpec, drain_ns: u64) -> Result<(), String> {
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
fn undrained_note(cfg: &Config, spec: &WorldSpec, longest_loop_ns: u64) -> String {
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
/// daemon fit by [`copyrpc_host::vworld::MAX_RANKS`]), and that its daemon loops are short enough to drain.
pub fn check_fits(cfg: &Config, spec: &WorldSpec) -> Result<(), String> {
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

/// What the actors of one world share: the rank's answers so far (for the series),
/// the clients' reports, daemon#0's time series, two figures for the report, and what
/// every turn did.
struct Shared {
    answers: Vec<u64>,
    reports: Vec<Vec<Result<ClientReport, Failed>>>,
    series: Series,
    rnr_naks: u64,
    /// The longest daemon loop (its costs and the WQEs it posted), for a drain that
    /// ends with clients still waiting: the figure the refusals above can only bound.
    longest_loop_ns: u64,
    turns: TurnTotals,
}

/// Every turn of a run by kind, with what the cost model charges each for: the counts
/// `scripts/calibrate.sh` fits the turns' measured instructions against.
#[derive(Clone, Copy, Debug, Default)]
struct TurnTotals {
    /// Whole daemon loops, the clients and endpoints they looked at (summed over the
    /// loops), and the items, completions and WQEs they were charged for.
    loops: u64,
    loop_clients: u64,
    loop_peers: u64,
    items: u64,
    cqes: u64,
    wqes: u64,
    /// Turns of a daemon the poll budget held in step A (one extra poll each).
    polls: u64,
    /// Cache lines another thread wrote that daemons and clients read (each charged
    /// `line_ns`, overlapped `line_overlap` at a time within a turn).
    lines: u64,
    /// Client turns that issued or collected something, their items, idle ones, and
    /// the requests outstanding at the start of every client turn (summed).
    client_busy: u64,
    client_items: u64,
    client_idle: u64,
    client_slots: u64,
}

impl TurnTotals {
    /// One line for stderr (stdout is the report, pinned byte for byte).
    fn line(&self, loop_wall_ns: u128) -> String {
        format!(
            "benchkv: turns: loops={} loop_clients={} loop_peers={} items={} cqes={} wqes={} \
             polls={} client_busy={} client_items={} client_idle={} client_slots={} \
             lines={} run_wall_ns={loop_wall_ns}",
            self.loops,
            self.loop_clients,
            self.loop_peers,
            self.items,
            self.cqes,
            self.wqes,
            self.polls,
            self.client_busy,
            self.client_items,
            self.client_idle,
            self.client_slots,
            self.lines
        )
    }
}

/// A daemon's loop, apart from the NIC steps around it: the code whose instructions
/// `scripts/calibrate.sh` measures as one turn (never inlined, so callgrind can name it).
#[inline(never)]
fn daemon_work(daemon: &mut Daemon<'_, '_, AnyRemote>, t: u64) -> usize {
    daemon.turn_at(t)
}

/// A client's turn, as [`daemon_work`] is a daemon's. Its issues are stamped `t`, its
/// answers `seen`: when the first answer's line, written by a daemon, has reached it.
#[inline(never)]
fn client_work(
    cl: &mut Client<'_>,
    (t, seen): (u64, u64),
    stopping: bool,
    run: usize,
) -> Result<ClientTurn, String> {
    // The turn asks the time once before issuing (if it issues) and once to stamp
    // the answers it collects.
    let mut stamps = usize::from(!stopping && cl.wants_to_issue());
    cl.turn(
        &mut || {
            let issue = stamps > 0;
            stamps = stamps.saturating_sub(1);
            if issue {
                t
            } else {
                seen
            }
        },
        stopping,
        run,
    )
}

/// A daemon and the NIC it steps.
struct DaemonActor<'m, 's> {
    rank: u32,
    daemon: Daemon<'m, 's, AnyRemote>,
    nic: Option<VirtualNic>,
    /// The clients whose ipc rings every loop looks at, and the endpoints it holds.
    clients: usize,
    peers: usize,
    cost: CostModel,
    jitter: Jitter,
    /// Daemon#0 of rank 0 feeds the time series.
    sampled: bool,
}

/// A client until it has finished (its report is then in [`Shared::reports`]).
struct ClientActor<'a> {
    rank: u32,
    /// Its number among every rank's clients (for its errors).
    index: usize,
    client: Option<Client<'a>>,
    cost: CostModel,
    jitter: Jitter,
    run_ns: u64,
    /// `--warmup`: no run counts what happens before it.
    warmup_ns: u64,
    end_ns: u64,
}

/// benchkv's actors.
enum Kv<'a, 'm, 's> {
    Daemon(Box<DaemonActor<'m, 's>>),
    Client(Box<ClientActor<'a>>),
}

impl Actor<Shared> for Kv<'_, '_, '_> {
    fn turn(&mut self, t: u64, w: &mut Shared) -> Turn {
        match self {
            Self::Daemon(a) => a.turn(t, w),
            Self::Client(c) => c.turn(t, w),
        }
    }

    fn awaited(&self) -> bool {
        matches!(self, Self::Client(_))
    }
}

impl DaemonActor<'_, '_> {
    fn turn(&mut self, t: u64, w: &mut Shared) -> Turn {
        if let Some(nic) = &self.nic {
            w.rnr_naks += u64::from(nic.step(t).rnr_naks);
        }
        let (loops, cqes) = (self.daemon.metrics().loops, self.daemon.metrics().cqes);
        let reads = self.daemon.shm_reads();
        let work = daemon_work(&mut self.daemon, t);
        let whole = self.daemon.metrics().loops != loops;
        let took = self.daemon.metrics().cqes - cqes;
        let lines = self.daemon.shm_reads() - reads;
        w.turns.lines += lines;
        let spent = if whole {
            w.turns.loops += 1;
            w.turns.loop_clients += self.clients as u64;
            w.turns.loop_peers += self.peers as u64;
            w.turns.items += work as u64;
            w.turns.cqes += took;
            let fixed = self.cost.loop_fixed(self.clients, self.peers);
            self.jitter.ns(self.cost.daemon_loop(fixed, work, took))
        } else {
            w.turns.polls += 1;
            self.jitter.ns(self.cost.poll_ns)
        };
        let mut next = t + spent + self.cost.transfers(lines);
        if let Some(nic) = &self.nic {
            let st = nic.step(next);
            w.rnr_naks += u64::from(st.rnr_naks);
            if st.wqes > 0 {
                w.turns.wqes += u64::from(st.wqes);
                next += ns(self.cost.posts(st.wqes));
            }
        }
        if whole {
            w.longest_loop_ns = w.longest_loop_ns.max(next - t);
        }
        if self.sampled {
            let m = self.daemon.metrics();
            w.series.offer(
                t,
                m.loops,
                m.cqes,
                self.daemon.outstanding() as u64,
                w.answers[0],
                self.daemon.poll_budget(),
            );
        }
        Turn::At(next)
    }
}

impl ClientActor<'_> {
    fn turn(&mut self, t: u64, w: &mut Shared) -> Turn {
        let Some(cl) = self.client.as_mut() else {
            return Turn::Finished;
        };
        let r = self.rank as usize;
        let stopping = t >= self.end_ns;
        let run = if stopping || t < self.warmup_ns {
            NOT_MEASURING
        } else {
            ((t - self.warmup_ns) / self.run_ns) as usize
        };
        let outstanding = cl.outstanding();
        let seen = t + self.cost.transfers(1);
        match client_work(cl, (t, seen), stopping, run) {
            Ok(turn) => {
                w.answers[r] += turn.completed as u64;
                if stopping && cl.outstanding() == 0 {
                    let cl = self.client.take().expect("checked above");
                    w.reports[r].push(Ok(cl.report()));
                    return Turn::Finished;
                }
                let items = turn.issued + turn.completed;
                if items > 0 {
                    w.turns.client_busy += 1;
                    w.turns.client_items += items as u64;
                } else {
                    w.turns.client_idle += 1;
                }
                w.turns.client_slots += outstanding;
                w.turns.lines += turn.completed as u64;
                let spent = self.cost.client_turn(outstanding, items);
                let lines = self.cost.transfers(turn.completed as u64);
                Turn::At(t + self.jitter.ns(spent) + lines)
            }
            Err(e) => {
                let f = cl.failed(format!("client {}: {e}", self.index));
                w.reports[r].push(Err(f));
                self.client = None;
                Turn::Finished
            }
        }
    }
}

/// Runs the world; every rank's results come back as one report (rank 0's view).
pub fn run(cfg: &Config, spec: &WorldSpec) -> Result<Outcome, Fail> {
    if Cluster::launched_by_mpi() {
        return Err(Fail::Usage(
            "--world virtual runs every rank inside this one process; start it without mpirun"
                .to_string(),
        ));
    }
    check_fits(cfg, spec).map_err(Fail::Usage)?;
    let wall = Instant::now();
    let (n, k) = (spec.ranks, cfg.daemons);
    let mut ranks = (0..n)
        .map(|r| Rank::new(cfg, r, Runner::Virtual))
        .collect::<Result<Vec<_>, _>>()?;
    let net = Network::connect(cfg, spec)?;
    let mut parts: Vec<Vec<Parts<AnyRemote>>> = Vec::with_capacity(n as usize);
    for (r, remotes) in ranks.iter_mut().zip(net.remotes) {
        parts.push(
            (0..k)
                .zip(remotes)
                .map(|(d, x)| r.daemon_parts(cfg, d, x))
                .collect(),
        );
    }
    let meshes = ranks
        .iter()
        .map(Rank::meshes)
        .collect::<Result<Vec<_>, _>>()?;
    let mut slabs: Vec<Slabs> = (0..n as usize * k).map(|_| rank::slabs(cfg)).collect();
    let mut rt = Runtime::new();
    add_daemons(&mut rt, cfg, spec, parts, &meshes, &mut slabs, &net.nics)?;
    add_clients(&mut rt, cfg, spec, &ranks)?;
    let mut w = Shared {
        answers: vec![0; n as usize],
        reports: (0..n).map(|_| Vec::with_capacity(cfg.clients)).collect(),
        series: Series::new(spec.sample_ns),
        rnr_naks: 0,
        longest_loop_ns: 0,
        turns: TurnTotals::default(),
    };
    let end_ns = cfg.warmup.as_nanos() as u64 + cfg.duration.as_nanos() as u64 * cfg.runs as u64;
    let give_up_ns = end_ns + drain_window_ns(cfg, spec);
    let loop_wall = Instant::now();
    let end = rt.run(
        &mut w,
        &spec.faults,
        |f, actors, _| apply_fault(f, actors, &net.qp_of, k),
        give_up_ns,
        Some(("benchkv", end_ns)),
    )?;
    let loop_wall_ns = loop_wall.elapsed().as_nanos();
    let mut metrics: Vec<Vec<Result<DaemonMetrics, String>>> = (0..n).map(|_| Vec::new()).collect();
    for a in rt.into_actors() {
        match a {
            Kv::Daemon(d) => metrics[d.rank as usize].push(Ok(d.daemon.finish())),
            Kv::Client(c) => {
                // Clients that never drained report what they still wait for.
                if let Some(cl) = c.client {
                    w.reports[c.rank as usize].push(Ok(cl.report()));
                }
            }
        }
    }
    eprintln!(
        "benchkv: virtual world of {n} ranks: {:.3} ms of virtual time in {:.2} s wall, one core",
        end.end_ns as f64 / 1e6,
        wall.elapsed().as_secs_f64()
    );
    eprintln!("{}", w.turns.line(loop_wall_ns));
    let mut out = outcome(cfg, spec, w.reports, metrics, end.end_ns, w.rnr_naks);
    if end.unfinished > 0 {
        out.errors
            .push(undrained_note(cfg, spec, w.longest_loop_ns));
    }
    with_series(&mut out, cfg, spec, &w.series);
    Ok(out)
}

/// The NICs (one per daemon that holds endpoints), the copyrpc transports over them,
/// wired as the MPI exchange would wire them, and which QP carries each link.
struct Network {
    nics: Vec<Vec<Option<VirtualNic>>>,
    remotes: Vec<Vec<Option<AnyRemote>>>,
    /// Which daemon and QP of rank a carry its link to rank b (for `--vfault cut`).
    qp_of: BTreeMap<(u32, u32), (usize, u32)>,
}

impl Network {
    fn connect(cfg: &Config, spec: &WorldSpec) -> Result<Self, String> {
        let (n, k) = (spec.ranks, cfg.daemons);
        // Rings of both directions per peer, with room for the queues and links, for as
        // many peers as one NIC can have (every other rank): the region is sparse, so
        // only what is carved takes memory.
        let opts = spec.sim_options(
            (n as usize - 1).max(1) * (2 * cfg.copyrpc_ring.bytes() + (512 << 10)) + (16 << 20),
        );
        let rpc = spec.rpc_config(&RpcConfig::for_ring(cfg.copyrpc_ring.bytes()));
        let mut nics = Vec::with_capacity(n as usize);
        let mut nodes = Vec::with_capacity(n as usize);
        let mut sent = Vec::with_capacity(n as usize);
        for r in 0..n {
            let peers: Vec<Vec<usize>> = (0..k)
                .map(|d| {
                    (0..n)
                        .filter(|&p| p != r && endpoint_daemon(cfg.backend, p, k) == d)
                        .map(|p| p as usize)
                        .collect()
                })
                .collect();
            let mut fabs = Vec::with_capacity(k);
            for p in &peers {
                fabs.push(if p.is_empty() {
                    None
                } else {
                    let f = SimFabric::open(&opts).map_err(|e| format!("rank {r}'s NIC: {e}"))?;
                    Some(VirtualNic::new(Arc::new(Fabric::Sim(Box::new(f)))))
                });
            }
            let built = remote::build_nodes(
                |d| {
                    Arc::clone(
                        fabs[d]
                            .as_ref()
                            .expect("a NIC for every daemon with peers")
                            .fabric(),
                    )
                },
                r as usize,
                n as usize,
                &peers,
                &rpc,
            )?;
            sent.push(remote::records(&built, n as usize)?);
            nodes.push(built);
            nics.push(fabs);
        }
        let mut qp_of = BTreeMap::new();
        let mut remotes = Vec::with_capacity(n as usize);
        for (r, (built, got)) in nodes.into_iter().zip(transpose(&sent)).enumerate() {
            let mut rs = remote::finish(built, &got)?;
            for (d, rem) in rs.iter_mut().enumerate() {
                if let Some(rem) = rem {
                    for p in 0..n {
                        if let Some(qpn) = rem.qpn_to(p) {
                            qp_of.insert((r as u32, p), (d, qpn));
                        }
                    }
                }
            }
            remotes.push(
                rs.into_iter()
                    .map(|x| x.map(|c| AnyRemote::Copyrpc(Box::new(c))))
                    .collect(),
            );
        }
        Ok(Self {
            nics,
            remotes,
            qp_of,
        })
    }
}

/// The daemons, in rank-major order: actor ids `0..N × K`.
fn add_daemons<'a, 'm, 's>(
    rt: &mut Runtime<Kv<'a, 'm, 's>>,
    cfg: &Config,
    spec: &WorldSpec,
    parts: Vec<Vec<Parts<AnyRemote>>>,
    meshes: &'m [[Mesh<'m, DelegatePayload>; 2]],
    slabs: &'s mut [Slabs],
    nics: &[Vec<Option<VirtualNic>>],
) -> Result<(), String> {
    let mut slab_it = slabs.iter_mut();
    for (r, ps) in parts.into_iter().enumerate() {
        for p in ps {
            let d = p.id;
            let daemon = rank::daemon(
                p,
                &meshes[r],
                slab_it.next().expect("a slab pair per daemon"),
            )?;
            let id = r * cfg.daemons + d;
            // As `Network::connect` gives out the endpoints.
            let peers = (0..spec.ranks)
                .filter(|&q| q as usize != r && endpoint_daemon(cfg.backend, q, cfg.daemons) == d)
                .count();
            rt.add(Kv::Daemon(Box::new(DaemonActor {
                rank: r as u32,
                daemon,
                nic: nics[r][d].clone(),
                clients: cfg.clients,
                peers,
                cost: spec.cost,
                jitter: Jitter::for_actor(cfg.seed, id, spec.cost.jitter),
                sampled: id == 0,
            })));
        }
    }
    Ok(())
}

/// The clients, in rank-major order after the daemons.
fn add_clients<'a>(
    rt: &mut Runtime<Kv<'a, '_, '_>>,
    cfg: &Config,
    spec: &WorldSpec,
    ranks: &'a [Rank],
) -> Result<(), String> {
    let nd = ranks.len() * cfg.daemons;
    let run_ns = cfg.duration.as_nanos() as u64;
    for r in ranks {
        for c in 0..cfg.clients {
            let s = r.client_setup(cfg, c, spec.ranks);
            let cl = Client::connect(s).map_err(|e| format!("rank {} client {c}: {e}", r.rank))?;
            let id = nd + r.rank as usize * cfg.clients + c;
            rt.add(Kv::Client(Box::new(ClientActor {
                rank: r.rank,
                index: id - nd,
                client: Some(cl),
                cost: spec.cost,
                jitter: Jitter::for_actor(cfg.seed, id, spec.cost.jitter),
                run_ns,
                warmup_ns: cfg.warmup.as_nanos() as u64,
                end_ns: cfg.warmup.as_nanos() as u64 + run_ns * cfg.runs as u64,
            })));
        }
    }
    Ok(())
}

/// One report, as the gathers of the threaded run would assemble it.
fn outcome(
    cfg: &Config,
    spec: &WorldSpec,
    reports: Vec<Vec<Result<ClientReport, Failed>>>,
    metrics: Vec<Vec<Result<DaemonMetrics, String>>>,
    end_ns: u64,
    rnr_naks: u64,
) -> Outcome {
    let n = spec.ranks;
    let run_ns = cfg.duration.as_nanos() as u64;
    let mut errors = Vec::new();
    let mut first_failure = None;
    let mut results = Vec::with_capacity(n as usize);
    for (r, (cr, dm)) in reports.into_iter().zip(metrics).enumerate() {
        let mut errs = Vec::new();
        let (summary, hists, metrics, ff) = tally(cfg.runs, cr, dm, &mut errs);
        errors.extend(errs.into_iter().map(|e| format!("rank {r}: {e}")));
        if first_failure.is_none() {
            first_failure = ff.map(|f| format!("rank {r}: {f}"));
        }
        let runs = hists
            .iter()
            .map(|h| RunRecord {
                completed: h.count(),
                elapsed_ns: run_ns,
            })
            .collect();
        results.push(RankResult {
            summary,
            runs,
            hists,
            metrics,
        });
    }
    let mut describe = describe(cfg, n, "sim (virtual time)", None);
    describe.retain(|(k, _)| !matches!(*k, "mpi_ranks" | "pinned" | "cores"));
    describe.extend([
        ("world", json!(format!("virtual:{n}"))),
        ("cost", json!(spec.cost.describe())),
        ("cost_profile", json!(cfg.cost_source)),
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
        ("virtual_end_us", json!(end_ns / 1000)),
        ("rnr_naks", json!(rnr_naks)),
    ]);
    if !cfg.warmup.is_zero() {
        describe.push(("warmup_us", json!(cfg.warmup.as_nanos() as u64 / 1000)));
    }
    Outcome {
        rank: 0,
        report: assemble(describe, cfg.runs, results, true),
        first_failure,
        errors,
        series_svg: None,
        extra_json: Vec::new(),
    }
}

/// Daemon#0's time series, as JSON lines and as the `--plot` SVG.
fn with_series(out: &mut Outcome, cfg: &Config, spec: &WorldSpec, series: &Series) {
    out.extra_json = series
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
        .collect();
    out.series_svg = Some(series.svg(&format!(
        "virtual:{} {} K={} C={} QD={} poll budget {}",
        spec.ranks,
        cfg.backend.as_str(),
        cfg.daemons,
        cfg.clients,
        cfg.queue_depth,
        if let Some(label) = cfg.adaptive_label() {
            label.to_string()
        } else {
            cfg.poll_budget.to_string()
        }
    )));
}

fn apply_fault(
    f: &Fault,
    actors: &[Kv<'_, '_, '_>],
    qp_of: &BTreeMap<(u32, u32), (usize, u32)>,
    k: usize,
) -> Result<(), String> {
    let nic = |rank: u32, d: usize| match &actors[rank as usize * k + d] {
        Kv::Daemon(a) => a.nic.as_ref(),
        Kv::Client(_) => unreachable!("the daemons come first"),
    };
    match f.kind {
        FaultKind::Stall { rank, for_ns } => {
            for d in 0..k {
                if let Some(nic) = nic(rank, d) {
                    nic.stall_until(f.at_ns + for_ns);
                }
            }
        }
        FaultKind::Cut { a, b } => {
            for (from, to) in [(a, b), (b, a)] {
                if let Some(&(d, qpn)) = qp_of.get(&(from, to)) {
                    nic(from, d)
                        .expect("a daemon with a QP has a NIC")
                        .set_link_cut(qpn, true)
                        .map_err(|e| format!("--vfault cut: {e}"))?;
                }
            }
        }
    }
    Ok(())
}
