//! The orchestrator (docs/spec/benchkv.md#orchestration): sets a rank up, runs the timed
//! runs, stops, drains, and gathers every rank's results.
//!
//! Steps, in the spec's numbering:
//! - 1: cores: the usable set, split among ranks sharing the host; pin or not (`--pin`);
//! - 2: one pregenerated pattern per client;
//! - 3: K ipc servers `/benchkv_<pid>_<rank>_ipc_<d>` (the pid keeps concurrent runs
//!   apart);
//! - 4: the delegation ring `/benchkv_<pid>_<rank>_deleg` (`delegation`);
//! - 5: the Flux mesh of K nodes, `--ring-size` slots per queue;
//! - 6 and 8: the transports to other ranks ([`crate::rank::transport::connect`], where the
//!   copyrpc endpoint exchange over MPI belongs);
//! - 7: daemon threads: each preloads its shard, takes its Flux node;
//! - 9: the ready barrier: every daemon and client of the rank has set up (a thread that
//!   failed still arrives, so nobody waits forever);
//! - 10: the MPI barrier: every rank is ready;
//! - 11: client threads (started before 9 here, since they connect during set-up);
//! - 12: runs: an MPI barrier, then `--duration` of measurement, progress each second;
//! - 13: stop: clients stop issuing and drain, then (after an MPI barrier, so no rank
//!   still waits on us) the daemons stop;
//! - 14: join, and gather runs, latency histograms, totals and metrics from every rank.
//!
//! Every wait on other ranks is bounded by the [`Watchdog`]: set-up waits by
//! `--setup-timeout`, everything from the stop on (drain, barrier, joins, gathers) by
//! `--drain-timeout` plus [`STOP_MARGIN`]. A bound that passes ends the rank with
//! [`crate::watchdog::EXIT_STUCK`] and a line naming the wait and the peer that stalled.

use std::sync::atomic::Ordering;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use copyrpc_host::exchange::Collectives;
use copyrpc_host::{affinity, topology};
use serde_json::{json, Value};

use crate::client::{self, ClientReport, Control, Counters, NOT_MEASURING};
use crate::cluster::Cluster;
use crate::config::{plan_pinning, Config};
use crate::metrics::DaemonMetrics;
use crate::output;
use crate::rank::result::{assemble, describe, tally, Fail, Outcome, RankResult};
use crate::rank::{self, transport, Rank, Runner};
use crate::remote::{AnyRemote, RingSize};
use crate::report::RunRecord;
use crate::store::Store;
use crate::watchdog::{PeerId, Watchdog};

/// What the stop adds to `--drain-timeout` before the watchdog gives up: the joins, the
/// barrier and the gathers once every client has drained or timed out.
pub const STOP_MARGIN: Duration = Duration::from_secs(5);

/// Runs print a progress line each second when longer than this.
const PROGRESS_AFTER: Duration = Duration::from_secs(3);

/// Runs the benchmark on this rank. Errors are set-up failures, one sentence each.
pub fn run(cfg: &Config) -> Result<Outcome, Fail> {
    let cluster = Cluster::from_env()?;
    let (rank, size) = (cluster.rank() as u32, cluster.size() as u32);
    if cfg.loopback_ranks > 1 && size > 1 {
        return Err(Fail::Usage(format!(
            "--loopback-ranks stands in for other ranks inside one process; it cannot be \
             combined with {size} MPI ranks"
        )));
    }
    let dog = Watchdog::start(rank as usize);
    cluster.set_collective_timeout(
        cfg.setup_timeout.max(cfg.drain_timeout + STOP_MARGIN) + STOP_MARGIN * 2,
    );
    let (fabric, mut remotes) = agree_and_connect(cfg, &cluster, &dog)?;
    let (pins, setup) = place(cfg, &cluster, &fabric)?;
    let mut r = Rank::new(
        cfg,
        rank,
        Runner::Threaded {
            pinned: pins.is_some(),
        },
    )?;
    dog.set_regions(r.region_names());
    let parts: Vec<_> = (0..cfg.daemons)
        .map(|d| r.daemon_parts(cfg, d, remotes[d].take()))
        .collect();
    let mut errors = Vec::new();
    let (runs, clients, daemons) =
        run_threads(cfg, &cluster, &dog, &r, parts, pins.as_deref(), &mut errors)?;
    dog.stage("gathering every rank's results (step 14)");
    let (summary, hists, metrics, first_failure) = tally(cfg.runs, clients, daemons, &mut errors);
    let mine = RankResult {
        summary,
        runs,
        hists,
        metrics,
    };
    let everyone = gather(cfg, &cluster, &mine).map_err(|e| format!("gathering results: {e}"))?;
    dog.disarm();
    Ok(Outcome {
        rank,
        report: assemble(setup, cfg.runs, everyone, cfg.metrics),
        first_failure,
        errors,
        series_svg: None,
        extra_json: Vec::new(),
    })
}

/// Set-up with the other ranks: identities, the same options, this machine's room, the
/// fabric, and the transports (docs/spec/benchkv.md#orchestration, steps 6 and 8). Returns the fabric in words.
fn agree_and_connect(
    cfg: &Config,
    cluster: &Cluster,
    dog: &Watchdog,
) -> Result<(String, Vec<Option<AnyRemote>>), Fail> {
    dog.arm(
        "set-up: every rank's identity (all-gather)",
        cfg.setup_timeout,
    );
    let peers = cluster
        .all_gather(&PeerId::me())
        .map_err(|e| format!("exchanging rank identities: {e}"))?;
    dog.set_peers(peers);
    dog.arm(
        "set-up: every rank's workload options (all-gather)",
        cfg.setup_timeout,
    );
    let all = cluster
        .all_gather(&cfg.fingerprint())
        .map_err(|e| format!("exchanging workload options: {e}"))?;
    if let Some(why) = crate::config::mismatch(cfg, &all) {
        return Err(Fail::Usage(why));
    }
    let local_ranks = cluster.local().1 as u32 * cfg.loopback_ranks.max(1);
    crate::resources::check_threaded(cfg, local_ranks, &crate::resources::Machine::read())
        .map_err(Fail::Usage)?;
    let fabric = transport::resolve_fabric(cfg).map_err(Fail::Usage)?;
    dog.arm(
        "set-up: the endpoint exchange with every rank (orchestration steps 6, 8)",
        cfg.setup_timeout,
    );
    let remotes = transport::connect(cfg, cluster).map_err(Fail::Usage)?;
    dog.disarm();
    Ok((fabric, remotes))
}

/// The report's set-up lines.
type SetupLines = Vec<(&'static str, Value)>;

/// Step 1: the cores of this rank's threads (the NIC's NUMA node first: daemons, pinned
/// first, drive it), and the set-up lines of the report.
fn place(
    cfg: &Config,
    cluster: &Cluster,
    fabric: &str,
) -> Result<(Option<Vec<usize>>, SetupLines), Fail> {
    let cores = affinity::usable_cores().map_err(|e| format!("usable cores: {e}"))?;
    let nic = transport::nic_device(cfg, fabric);
    let nic_node = nic.as_deref().and_then(topology::nic_numa_node);
    let cores = match nic_node.and_then(topology::node_cpus) {
        Some(near) => topology::near_first(&cores, &near),
        None => cores,
    };
    let (local_rank, local_size) = cluster.local();
    let threads = cfg.daemons + cfg.clients;
    let pins =
        plan_pinning(cfg.pin, threads, &cores, local_rank, local_size).map_err(Fail::Usage)?;
    let size = cluster.size() as u32;
    let mut lines = describe(cfg, size, fabric, pins.as_deref());
    // Past two ranks each peer gets its share of the calls, not all of them: the line
    // says what the endpoints really got.
    let ranks = cfg.ranks(size);
    if ranks > 2 && size > 1 {
        let rpc = transport::rank_rpc_config(cfg, ranks - 1);
        let calls = RingSize::new(rpc.ring_bytes).map_or(0, RingSize::calls);
        for (k, v) in lines.iter_mut() {
            match *k {
                "copyrpc_ring_bytes" => *v = json!(rpc.ring_bytes),
                "rpc_ring_calls_per_peer" => *v = json!(calls),
                _ => {}
            }
        }
    }
    // What the figures were measured on: every daemon and client busy-polls, and so does
    // the sim fabric's engine thread when ranks talk through it; `cpus` is this rank's
    // affinity mask (mpirun binds each rank to one core by default).
    let busy = threads + usize::from(size > 1 && fabric.starts_with("sim"));
    lines.extend([
        ("cpus", json!(cores.len())),
        ("busy_threads", json!(busy)),
        ("host_cpus", json!(affinity::online_cpus())),
        ("host_busy_threads", json!(local_size.max(1) * busy)),
    ]);
    if let Some(d) = &nic {
        lines.push(("nic_numa_node", json!(nic_node)));
        lines.push(("link_layer", json!(topology::link_layer(d, cfg.port))));
    }
    Ok((pins, lines))
}

/// The results of this rank's threads: per run its record, every client's report,
/// every daemon's metrics.
type ThreadResults = (
    Vec<RunRecord>,
    Vec<Result<ClientReport, String>>,
    Vec<Result<DaemonMetrics, String>>,
);

/// Steps 7 and 9–13: the daemon and client threads, the timed runs, the stop and drain.
/// Every wait on other ranks is bounded by the watchdog.
fn run_threads(
    cfg: &Config,
    cluster: &Cluster,
    dog: &Watchdog,
    r: &Rank,
    parts: Vec<crate::daemon::Parts<AnyRemote>>,
    pins: Option<&[usize]>,
    errors: &mut Vec<String>,
) -> Result<ThreadResults, Fail> {
    let meshes = r.meshes()?;
    let (k, control) = (cfg.daemons, &r.control);
    let ready = Barrier::new(k + cfg.clients + 1);
    let mut records = Vec::new();
    let (clients, daemons) = std::thread::scope(|sc| {
        let daemons: Vec<_> = parts
            .into_iter()
            .map(|p| {
                let core = pins.map(|c| c[p.id]);
                let (meshes, ready) = (&meshes, &ready);
                sc.spawn(move || daemon_thread(cfg, p, meshes, core, control, ready))
            })
            .collect();
        let clients: Vec<_> = (0..cfg.clients)
            .map(|c| {
                let s = r.client_setup(cfg, c, cfg.ranks(cluster.size() as u32));
                let core = pins.map(|p| p[k + c]);
                let ready = &ready;
                sc.spawn(move || -> Result<ClientReport, String> {
                    if let Some(core) = core {
                        if let Err(e) = affinity::pin_current_thread(core) {
                            ready.wait();
                            return Err(failed(control, format!("client {c}: pinning: {e}")));
                        }
                    }
                    client::run(s, ready).map_err(|e| failed(control, format!("client {c}: {e}")))
                })
            })
            .collect();
        // Errors here must not skip the stop below, or the scope would wait for threads
        // that never end.
        dog.arm(
            "set-up: this rank's daemons and clients (step 9)",
            cfg.setup_timeout,
        );
        ready.wait();
        if let Err(e) = timed_runs(cfg, cluster, dog, r, &mut records) {
            errors.push(e);
        }
        // Step 13.
        dog.arm(
            "the drain (step 13): clients collecting their outstanding answers",
            cfg.drain_timeout + STOP_MARGIN,
        );
        // Relaxed: flags; what the threads report travels through the joins.
        control.stop_clients.store(true, Ordering::Relaxed);
        let clients: Vec<_> = clients.into_iter().map(|h| join(h, "client")).collect();
        dog.stage("the barrier after the drain (step 13): every rank drained");
        if let Err(e) = cluster.barrier() {
            errors.push(e.to_string());
        }
        dog.stage("the daemons to stop (step 13)");
        control.stop_daemons.store(true, Ordering::Relaxed);
        let daemons: Vec<_> = daemons.into_iter().map(|h| join(h, "daemon")).collect();
        (clients, daemons)
    });
    // A run cut short by a set-up error still reports every run slot, empty.
    records.resize(cfg.runs, RunRecord::default());
    Ok((records, clients, daemons))
}

/// Step 7 on the daemon's own thread: pinned first, so its shard and slabs are first
/// touched on its core; then the ready barrier, then its loop until the stop.
fn daemon_thread(
    cfg: &Config,
    mut parts: crate::daemon::Parts<AnyRemote>,
    meshes: &[copyrpc_core::flux::Mesh<'_, crate::msg::DelegatePayload>; 2],
    core: Option<usize>,
    control: &Control,
    ready: &Barrier,
) -> Result<DaemonMetrics, String> {
    let d = parts.id;
    let pin = core.map(affinity::pin_current_thread).transpose();
    parts.store = Store::preloaded(cfg.keys, cfg.daemons, d);
    let mut slabs = rank::slabs(cfg);
    let daemon = rank::daemon(parts, meshes, &mut slabs);
    ready.wait();
    pin.map_err(|e| failed(control, format!("daemon {d}: pinning: {e}")))?;
    let daemon = daemon.map_err(|e| failed(control, e))?;
    Ok(daemon.run(&control.stop_daemons))
}

/// Marks the rank failed (a run ends early) and passes the error on.
fn failed(control: &Control, e: String) -> String {
    // Relaxed: a flag; the error itself travels through the join.
    control.failed.store(true, Ordering::Relaxed);
    e
}

/// Steps 10 and 12: the ready barrier of every rank, then each run between barriers.
fn timed_runs(
    cfg: &Config,
    cluster: &Cluster,
    dog: &Watchdog,
    r: &Rank,
    records: &mut Vec<RunRecord>,
) -> Result<(), String> {
    dog.stage("set-up: the ready barrier of every rank (step 10)");
    cluster.barrier().map_err(|e| e.to_string())?;
    for run in 0..cfg.runs {
        dog.arm(
            format!("the barrier before run {}", run + 1),
            cfg.setup_timeout,
        );
        cluster.barrier().map_err(|e| e.to_string())?;
        dog.disarm();
        records.push(timed_run(cfg, run, r.rank, &r.control, &r.counters));
    }
    Ok(())
}

/// Step 14: every rank's share, in rank order.
fn gather(
    cfg: &Config,
    cluster: &Cluster,
    mine: &RankResult,
) -> Result<Vec<RankResult>, copyrpc_host::error::Error> {
    let size = cluster.size();
    let mut all: Vec<RankResult> = (0..size)
        .map(|_| RankResult {
            summary: Default::default(),
            runs: Vec::with_capacity(cfg.runs),
            hists: Vec::with_capacity(cfg.runs),
            metrics: Vec::with_capacity(cfg.daemons),
        })
        .collect();
    for (rec, h) in mine.runs.iter().zip(&mine.hists) {
        for (r, x) in all.iter_mut().zip(cluster.all_gather(rec)?) {
            r.runs.push(x);
        }
        for (r, x) in all.iter_mut().zip(cluster.all_gather(h)?) {
            r.hists.push(x);
        }
    }
    for (r, x) in all.iter_mut().zip(cluster.all_gather(&mine.summary)?) {
        r.summary = x;
    }
    if cfg.metrics {
        for m in &mine.metrics {
            for (r, x) in all.iter_mut().zip(cluster.all_gather(m)?) {
                r.metrics.push(x);
            }
        }
    }
    Ok(all)
}

fn join<T>(
    h: std::thread::ScopedJoinHandle<'_, Result<T, String>>,
    what: &str,
) -> Result<T, String> {
    h.join()
        .unwrap_or_else(|_| Err(format!("a {what} thread panicked")))
}

fn completed(counters: &[Counters]) -> u64 {
    // Relaxed: statistics; a value a few requests old only shifts them between runs.
    counters
        .iter()
        .map(|c| c.completed.load(Ordering::Relaxed))
        .sum()
}

/// One timed run on this rank: the completions between its start and end.
fn timed_run(
    cfg: &Config,
    run: usize,
    rank: u32,
    control: &Control,
    counters: &[Counters],
) -> RunRecord {
    let progress = rank == 0 && cfg.duration > PROGRESS_AFTER;
    // Relaxed: clients read it to pick the histogram; being a turn late is harmless.
    control.run.store(run, Ordering::Relaxed);
    let start = Instant::now();
    let c0 = completed(counters);
    let (mut last_t, mut last_c) = (start, c0);
    loop {
        let left = cfg.duration.saturating_sub(start.elapsed());
        // Relaxed: a flag. A failed thread ends the run early; its error is reported.
        if left.is_zero() || control.failed.load(Ordering::Relaxed) {
            break;
        }
        // Measuring, not synchronising: the run is `duration` of wall-clock time.
        std::thread::sleep(left.min(Duration::from_secs(1)));
        if progress && !cfg.duration.saturating_sub(start.elapsed()).is_zero() {
            let (now, c) = (Instant::now(), completed(counters));
            let rps = (c - last_c) as f64 / now.duration_since(last_t).as_secs_f64();
            eprintln!(
                "{}",
                output::progress(
                    run,
                    cfg.runs,
                    start.elapsed().as_secs_f64(),
                    cfg.duration.as_secs_f64(),
                    rps
                )
            );
            (last_t, last_c) = (now, c);
        }
    }
    let c1 = completed(counters);
    let elapsed = start.elapsed();
    control.run.store(NOT_MEASURING, Ordering::Relaxed);
    RunRecord {
        completed: c1 - c0,
        elapsed_ns: elapsed.as_nanos() as u64,
    }
}
