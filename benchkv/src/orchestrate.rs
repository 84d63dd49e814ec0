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
//! - 6 and 8: the transports to other ranks ([`crate::remote::connect`], where the
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

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use copyrpc_core::shm::{Slab, SlabEntry};
use copyrpc_host::exchange::Collectives;
use copyrpc_host::{affinity, topology};

use crate::client::{self, ClientReport, ClientSetup, Control, Counters, NOT_MEASURING};
use crate::cluster::Cluster;
use crate::config::{plan_pinning, Backend, Config};
use crate::daemon::{Daemon, Parts};
use crate::histogram::Histogram;
use crate::metrics::DaemonMetrics;
use crate::output;
use crate::remote::{self, AnyRemote};
use crate::report::{RankSummary, Report, RunRecord, RunResult};
use crate::setup::{self, FluxMem, Servers};
use crate::store::Store;
use crate::watchdog::{PeerId, Watchdog};
use crate::workload::{client_seed, generate};

/// What the stop adds to `--drain-timeout` before the watchdog gives up: the joins, the
/// barrier and the gathers once every client has drained or timed out.
pub const STOP_MARGIN: Duration = Duration::from_secs(5);

/// Runs print a progress line each second when longer than this.
const PROGRESS_AFTER: Duration = Duration::from_secs(3);

/// What a finished benchmark hands `main`.
#[derive(Debug)]
pub struct Outcome {
    /// This rank (only rank 0 prints the report).
    pub rank: u32,
    /// The gathered report (identical on every rank).
    pub report: Report,
    /// This rank's first wrong answer, described (`--verify`).
    pub first_failure: Option<String>,
    /// This rank's thread errors.
    pub errors: Vec<String>,
    /// What `--plot` writes instead of the report's charts (the virtual world's time
    /// series).
    pub series_svg: Option<String>,
    /// Extra JSON lines after the report's (the virtual world's time series).
    pub extra_json: Vec<serde_json::Value>,
}

/// Why a run did not happen.
#[derive(Debug)]
pub enum Fail {
    /// The flags ask for something this rank cannot do (too few cores for `--pin on`, a
    /// fabric that is absent, a rank count the build cannot serve): a usage error.
    Usage(String),
    /// Set-up went wrong (a shared-memory region, MPI).
    Setup(String),
}

impl From<String> for Fail {
    fn from(s: String) -> Self {
        Self::Setup(s)
    }
}

/// Runs the benchmark on this rank. Errors are set-up failures, one sentence each.
pub fn run(cfg: &Config) -> Result<Outcome, Fail> {
    if let Some(v) = &cfg.world {
        if Cluster::launched_by_mpi() {
            return Err(Fail::Usage(
                "--world virtual runs every rank inside this one process; start it \
                 without mpirun"
                    .to_string(),
            ));
        }
        return crate::vworld::run(cfg, v);
    }
    let cluster = Cluster::from_env()?;
    let (rank, size) = (cluster.rank() as u32, cluster.size() as u32);
    if cfg.loopback_ranks > 1 && size > 1 {
        return Err(Fail::Usage(format!(
            "--loopback-ranks stands in for other ranks inside one process; it cannot be \
             combined with {size} MPI ranks"
        )));
    }
    let ranks = cfg.ranks(size);
    let dog = Watchdog::start(rank as usize);
    cluster.set_collective_timeout(
        cfg.setup_timeout.max(cfg.drain_timeout + STOP_MARGIN) + STOP_MARGIN * 2,
    );
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
    let fabric = setup::resolve_fabric(cfg).map_err(Fail::Usage)?;
    dog.arm(
        "set-up: the endpoint exchange with every rank (orchestration steps 6, 8)",
        cfg.setup_timeout,
    );
    let mut remotes = remote::connect(cfg, &cluster).map_err(Fail::Usage)?;
    dog.disarm();

    // Step 1.
    let cores = affinity::usable_cores().map_err(|e| format!("usable cores: {e}"))?;
    // The NIC's NUMA node first: daemons, pinned first, drive it.
    let nic = setup::nic_device(cfg, &fabric);
    let nic_node = nic.as_deref().and_then(topology::nic_numa_node);
    let cores = match nic_node.and_then(topology::node_cpus) {
        Some(near) => topology::near_first(&cores, &near),
        None => cores,
    };
    let (local_rank, local_size) = cluster.local();
    let threads = cfg.daemons + cfg.clients;
    let pins =
        plan_pinning(cfg.pin, threads, &cores, local_rank, local_size).map_err(Fail::Usage)?;

    // Step 2.
    let spec = cfg.pattern_spec(ranks);
    let patterns: Vec<_> = (0..cfg.clients)
        .map(|c| generate(&spec, client_seed(cfg.seed, rank, c)))
        .collect();

    // Steps 3-5.
    let Servers {
        ipc_names,
        ipc: mut ipc_servers,
        deleg_name,
        mut deleg,
    } = Servers::create(cfg, rank)?;
    dog.set_regions(
        ipc_names
            .iter()
            .cloned()
            .chain([deleg_name.clone()])
            .collect(),
    );
    let k = cfg.daemons;
    let cap = cfg.ring_size as usize;
    // Two meshes: the holder and owner lanes of the daemon loop (crate::daemon::Lane).
    let (holder_mem, owner_mem) = (FluxMem::new(k, cap), FluxMem::new(k, cap));
    let (holder_mesh, owner_mesh) = (holder_mem.mesh()?, owner_mem.mesh()?);

    let control = Control::default();
    let ring_credits = AtomicI64::new(i64::from(cfg.ring_size));
    let ring_can_fill =
        (cfg.clients as u64) * u64::from(cfg.queue_depth) > u64::from(cfg.ring_size);
    let counters: Vec<Counters> = (0..cfg.clients).map(|_| Counters::default()).collect();
    let ready = Barrier::new(threads + 1);
    let mut setup = setup::describe(cfg, size, &fabric, pins.as_deref());
    // What the figures were measured on: every daemon and client busy-polls, and so does
    // the sim fabric's engine thread when ranks talk through it; `cpus` is this rank's
    // affinity mask (mpirun binds each rank to one core by default).
    let busy = threads + usize::from(size > 1 && fabric.starts_with("sim"));
    setup.extend([
        ("cpus", serde_json::json!(cores.len())),
        ("busy_threads", serde_json::json!(busy)),
        ("host_cpus", serde_json::json!(affinity::online_cpus())),
        (
            "host_busy_threads",
            serde_json::json!(local_size.max(1) * busy),
        ),
    ]);
    if let Some(d) = &nic {
        setup.push(("nic_numa_node", serde_json::json!(nic_node)));
        setup.push((
            "link_layer",
            serde_json::json!(topology::link_layer(d, cfg.port)),
        ));
    }

    let mut errors = Vec::new();
    let mut run_records = Vec::new();
    let (client_reports, daemon_metrics) = std::thread::scope(|sc| {
        let fail = |control: &Control, e: String| {
            // Relaxed: a flag; the error itself travels through the join.
            control.failed.store(true, Ordering::Relaxed);
            e
        };
        // Step 7.
        let daemons: Vec<_> = (0..k)
            .map(|d| {
                let parts = Parts {
                    id: d,
                    daemons: k,
                    my_rank: rank,
                    backend: cfg.backend,
                    take_per_turn: cfg.take_per_turn,
                    poll_budget: cfg.poll_budget,
                    adaptive: cfg.adaptive,
                    metrics: cfg.metrics,
                    sample_every: crate::daemon::SAMPLE_EVERY,
                    // A pinned daemon owns its core: it spins when idle. An unpinned one
                    // yields (with more threads than cores it would starve the clients).
                    spin_when_idle: pins.is_some(),
                    fault: cfg.fault,
                    store: Store::with_capacity(0),
                    ipc: ipc_servers.remove(0),
                    deleg: if d == 0 { deleg.take() } else { None },
                    remote: remotes[d].take(),
                };
                let core = pins.as_ref().map(|p| p[d]);
                let (meshes, control, ready, keys) =
                    ((&holder_mesh, &owner_mesh), &control, &ready, cfg.keys);
                sc.spawn(move || -> Result<DaemonMetrics, String> {
                    let pin = core.map(affinity::pin_current_thread).transpose();
                    let mut parts: Parts<AnyRemote> = parts;
                    parts.store = Store::preloaded(keys, k, d);
                    let mut slabs: [Vec<SlabEntry<u32>>; 2] =
                        std::array::from_fn(|_| (0..k * cap).map(|_| SlabEntry::new()).collect());
                    let [holder_slab, owner_slab] = &mut slabs;
                    let holder = meshes.0.node(d, Slab::new(holder_slab));
                    let owner = meshes.1.node(d, Slab::new(owner_slab));
                    ready.wait();
                    pin.map_err(|e| fail(control, format!("daemon {d}: pinning: {e}")))?;
                    let holder =
                        holder.map_err(|e| fail(control, format!("daemon {d}: Flux: {e}")))?;
                    let owner =
                        owner.map_err(|e| fail(control, format!("daemon {d}: Flux: {e}")))?;
                    Ok(Daemon::new(parts, holder, owner).run(&control.stop_daemons))
                })
            })
            .collect();
        // Step 11 (connecting before the ready barrier).
        let clients: Vec<_> = patterns
            .into_iter()
            .enumerate()
            .map(|(c, pattern)| {
                let s = ClientSetup {
                    my_rank: rank,
                    daemons: k,
                    backend: cfg.backend,
                    queue_depth: cfg.queue_depth,
                    verify: cfg.verify,
                    runs: cfg.runs,
                    drain_timeout: cfg.drain_timeout,
                    pattern,
                    ipc_names: &ipc_names,
                    deleg_name: (cfg.backend == Backend::Delegation).then_some(deleg_name.as_str()),
                    ring_credits: ring_can_fill.then_some(&ring_credits),
                    counters: &counters[c],
                    control: &control,
                };
                let core = pins.as_ref().map(|p| p[k + c]);
                let (control, ready) = (&control, &ready);
                sc.spawn(move || -> Result<ClientReport, String> {
                    if let Some(core) = core {
                        if let Err(e) = affinity::pin_current_thread(core) {
                            ready.wait();
                            return Err(fail(control, format!("client {c}: pinning: {e}")));
                        }
                    }
                    client::run(s, ready).map_err(|e| fail(control, format!("client {c}: {e}")))
                })
            })
            .collect();

        // Steps 9, 10, 12. Errors here must not skip the stop below, or the scope would
        // wait for threads that never end.
        dog.arm(
            "set-up: this rank's daemons and clients (step 9)",
            cfg.setup_timeout,
        );
        ready.wait();
        let measured = (|| -> Result<(), String> {
            dog.stage("set-up: the ready barrier of every rank (step 10)");
            cluster.barrier().map_err(|e| e.to_string())?;
            for r in 0..cfg.runs {
                dog.arm(
                    format!("the barrier before run {}", r + 1),
                    cfg.setup_timeout,
                );
                cluster.barrier().map_err(|e| e.to_string())?;
                dog.disarm();
                run_records.push(timed_run(cfg, r, rank, &control, &counters));
            }
            Ok(())
        })();
        if let Err(e) = measured {
            errors.push(e);
        }

        // Step 13.
        dog.arm(
            "the drain (step 13): clients collecting their outstanding answers",
            cfg.drain_timeout + STOP_MARGIN,
        );
        // Relaxed: flags; what the threads report travels through the joins.
        control.stop_clients.store(true, Ordering::Relaxed);
        let client_reports: Vec<_> = clients.into_iter().map(|h| join(h, "client")).collect();
        dog.stage("the barrier after the drain (step 13): every rank drained");
        if let Err(e) = cluster.barrier() {
            errors.push(e.to_string());
        }
        dog.stage("the daemons to stop (step 13)");
        control.stop_daemons.store(true, Ordering::Relaxed);
        let daemon_metrics: Vec<_> = daemons.into_iter().map(|h| join(h, "daemon")).collect();
        (client_reports, daemon_metrics)
    });
    drop(deleg);
    dog.stage("gathering every rank's results (step 14)");

    // Step 14.
    let (summary, hists, metrics, first_failure) =
        tally(cfg.runs, client_reports, daemon_metrics, &mut errors);
    // A run cut short by a set-up error still reports every run slot, empty.
    run_records.resize(cfg.runs, RunRecord::default());

    let mut runs = Vec::with_capacity(cfg.runs);
    for (rec, h) in run_records.iter().zip(&hists) {
        runs.push(RunResult {
            ranks: cluster.all_gather(rec).map_err(gather_err)?,
            hists: cluster.all_gather(h).map_err(gather_err)?,
        });
    }
    let ranks_summary = cluster.all_gather(&summary).map_err(gather_err)?;
    let metrics = if cfg.metrics {
        let mut per_rank = vec![Vec::with_capacity(k); size as usize];
        for m in &metrics {
            for (r, x) in cluster
                .all_gather(m)
                .map_err(gather_err)?
                .into_iter()
                .enumerate()
            {
                per_rank[r].push(x);
            }
        }
        Some(per_rank)
    } else {
        None
    };
    dog.disarm();
    Ok(Outcome {
        rank,
        report: Report {
            setup,
            runs,
            ranks: ranks_summary,
            metrics,
        },
        first_failure,
        errors,
        series_svg: None,
        extra_json: Vec::new(),
    })
}

/// This rank's totals from its threads' reports; thread errors go to `errors`.
pub(crate) fn tally(
    runs: usize,
    clients: Vec<Result<ClientReport, String>>,
    daemons: Vec<Result<DaemonMetrics, String>>,
    errors: &mut Vec<String>,
) -> (
    RankSummary,
    Vec<Histogram>,
    Vec<DaemonMetrics>,
    Option<String>,
) {
    let mut summary = RankSummary::default();
    let mut hists = vec![Histogram::new(); runs];
    let mut first_failure = None;
    for r in clients {
        match r {
            Ok(c) => {
                summary.issued += c.issued;
                summary.completed += c.completed;
                summary.undrained += c.undrained;
                summary.error_answers += c.error_answers;
                summary.checked += c.checked;
                summary.failures += c.failures;
                for (h, x) in hists.iter_mut().zip(&c.hists) {
                    h.merge(x);
                }
                first_failure = first_failure.or(c.first_failure);
            }
            Err(e) => {
                summary.thread_errors += 1;
                errors.push(e);
            }
        }
    }
    let mut metrics = Vec::with_capacity(daemons.len());
    for m in daemons {
        match m {
            Ok(m) => {
                summary.reply_failures += m.reply_failures;
                summary.pending_at_stop += m.pending_at_stop;
                metrics.push(m);
            }
            Err(e) => {
                summary.thread_errors += 1;
                errors.push(e);
                // Every rank gathers K records: a failed daemon still contributes one.
                metrics.push(DaemonMetrics::default());
            }
        }
    }
    (summary, hists, metrics, first_failure)
}

fn gather_err(e: copyrpc_host::error::Error) -> String {
    format!("gathering results: {e}")
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
