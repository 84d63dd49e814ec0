//! What a rank hands back when its threads (or actors) are done, and the report both
//! runners assemble from every rank's share (docs/spec/benchkv.md#orchestration, step 14).

use serde_json::{json, Value};

use crate::client::ClientReport;
use crate::config::Config;
use crate::histogram::Histogram;
use crate::metrics::DaemonMetrics;
use crate::report::{RankSummary, Report, RunRecord, RunResult};
use crate::workload::Distribution;

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

/// One rank's share of the report.
#[derive(Clone, Debug)]
pub struct RankResult {
    /// Its totals.
    pub summary: RankSummary,
    /// Its answers and run length, per run.
    pub runs: Vec<RunRecord>,
    /// Its latencies, per run.
    pub hists: Vec<Histogram>,
    /// Its daemons' loop metrics, by daemon.
    pub metrics: Vec<DaemonMetrics>,
}

/// This rank's totals from its threads' reports; thread errors go to `errors`. Also
/// returns the first wrong answer a client saw.
pub fn tally(
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

/// The report of every rank's share, in rank order; the daemons' metrics only when
/// `with_metrics`.
pub fn assemble(
    setup: Vec<(&'static str, serde_json::Value)>,
    runs: usize,
    ranks: Vec<RankResult>,
    with_metrics: bool,
) -> Report {
    let mut out: Vec<RunResult> = (0..runs)
        .map(|_| RunResult {
            ranks: Vec::with_capacity(ranks.len()),
            hists: Vec::with_capacity(ranks.len()),
        })
        .collect();
    let mut summaries = Vec::with_capacity(ranks.len());
    let mut metrics = Vec::with_capacity(ranks.len());
    for r in ranks {
        for ((run, rec), h) in out.iter_mut().zip(r.runs).zip(r.hists) {
            run.ranks.push(rec);
            run.hists.push(h);
        }
        summaries.push(r.summary);
        metrics.push(r.metrics);
    }
    Report {
        setup,
        runs: out,
        ranks: summaries,
        metrics: with_metrics.then_some(metrics),
    }
}

/// The set-up as `(name, value)` pairs, for every output format.
pub fn describe(
    cfg: &Config,
    mpi_size: u32,
    fabric: &str,
    pins: Option<&[usize]>,
) -> Vec<(&'static str, Value)> {
    let mut setup = vec![
        ("backend", json!(cfg.backend.as_str())),
        ("mpi_ranks", json!(mpi_size)),
        ("ranks", json!(cfg.ranks(mpi_size))),
        ("loopback_ranks", json!(cfg.loopback_ranks)),
        ("daemons", json!(cfg.daemons)),
        ("clients", json!(cfg.clients)),
        ("queue_depth", json!(cfg.queue_depth)),
        ("duration_s", json!(cfg.duration.as_secs_f64())),
        ("runs", json!(cfg.runs)),
        ("keys", json!(cfg.keys)),
    ];
    match cfg.distribution {
        Distribution::Uniform => setup.push(("distribution", json!("uniform"))),
        Distribution::Zipf { theta } => {
            setup.push(("distribution", json!("zipf")));
            setup.push(("zipf_theta", json!(theta)));
        }
    }
    let budget = if let Some(label) = cfg.adaptive_label() {
        json!(label)
    } else if cfg.poll_budget == 0 {
        json!("off")
    } else {
        json!(cfg.poll_budget)
    };
    let take = if cfg.take_per_turn == usize::MAX {
        json!("all")
    } else {
        json!(cfg.take_per_turn)
    };
    setup.extend([
        ("read_ratio", json!(cfg.read_ratio)),
        ("ring_size", json!(cfg.ring_size)),
        ("poll_budget", budget),
        ("take_per_turn", take),
        ("copyrpc_ring_bytes", json!(cfg.copyrpc_ring.bytes())),
        ("rpc_ring_auto", json!(cfg.rpc_ring_auto)),
        ("rpc_ring_calls_per_peer", json!(cfg.copyrpc_ring.calls())),
        ("seed", json!(cfg.seed)),
        ("verify", json!(cfg.verify)),
        ("fabric", json!(fabric)),
        ("pinned", json!(pins.is_some())),
        ("cores", json!(pins.unwrap_or_default())),
    ]);
    setup
}
