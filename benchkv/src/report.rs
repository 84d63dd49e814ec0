//! What a finished benchmark reports, gathered from every rank: the records each rank
//! contributes (plain `#[repr(C)]` data for the all-gather) and the assembled [`Report`]
//! the output formats print.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::histogram::Histogram;
use crate::metrics::DaemonMetrics;

/// One rank's share of one run.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct RunRecord {
    /// Answers received during the run.
    pub completed: u64,
    /// Length of the run as this rank measured it.
    pub elapsed_ns: u64,
}

impl RunRecord {
    /// Requests per second.
    pub fn rps(&self) -> f64 {
        if self.elapsed_ns == 0 {
            0.0
        } else {
            self.completed as f64 * 1e9 / self.elapsed_ns as f64
        }
    }
}

/// One rank's totals.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct RankSummary {
    /// Requests sent by the clients.
    pub issued: u64,
    /// Answers received by the clients.
    pub completed: u64,
    /// Requests unanswered when the drain gave up.
    pub undrained: u64,
    /// Answers whose status says the request failed (counted with or without
    /// `--verify`).
    pub error_answers: u64,
    /// Answers checked by `--verify`.
    pub checked: u64,
    /// Answers that failed the check.
    pub failures: u64,
    /// Threads that failed (1 per failed thread).
    pub thread_errors: u64,
    /// Answers the daemons could not deliver.
    pub reply_failures: u64,
    /// Requests the daemons still held when they stopped.
    pub pending_at_stop: u64,
}

impl RankSummary {
    /// Whether every request was answered: the counts match, the drain left none, and
    /// no thread failed (a failed client thread's report is lost with it, so its
    /// requests are in neither count and matching counts prove nothing).
    pub fn every_request_answered(&self) -> bool {
        self.thread_errors == 0 && self.undrained == 0 && self.issued == self.completed
    }
}

/// One run over all ranks.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Per rank, in rank order.
    pub ranks: Vec<RunRecord>,
    /// Latency per rank, in rank order.
    pub hists: Vec<Histogram>,
}

impl RunResult {
    /// Requests per second summed over ranks.
    pub fn total_rps(&self) -> f64 {
        self.ranks.iter().map(RunRecord::rps).sum()
    }

    /// Answers over all ranks.
    pub fn total_completed(&self) -> u64 {
        self.ranks.iter().map(|r| r.completed).sum()
    }

    /// The longest rank's run length, in seconds.
    pub fn seconds(&self) -> f64 {
        self.ranks.iter().map(|r| r.elapsed_ns).max().unwrap_or(0) as f64 / 1e9
    }

    /// Latency over all ranks.
    pub fn merged_hist(&self) -> Histogram {
        let mut h = Histogram::new();
        for x in &self.hists {
            h.merge(x);
        }
        h
    }
}

/// Everything printed at the end.
#[derive(Clone, Debug)]
pub struct Report {
    /// Lines describing the setup (key, value), in order.
    pub setup: Vec<(&'static str, serde_json::Value)>,
    /// Runs, in order.
    pub runs: Vec<RunResult>,
    /// Per rank, in rank order.
    pub ranks: Vec<RankSummary>,
    /// Per rank, per daemon (`--metrics`).
    pub metrics: Option<Vec<Vec<DaemonMetrics>>>,
}

impl Report {
    /// Totals over ranks.
    pub fn total(&self) -> RankSummary {
        self.ranks
            .iter()
            .fold(RankSummary::default(), |a, r| RankSummary {
                issued: a.issued + r.issued,
                completed: a.completed + r.completed,
                undrained: a.undrained + r.undrained,
                error_answers: a.error_answers + r.error_answers,
                checked: a.checked + r.checked,
                failures: a.failures + r.failures,
                thread_errors: a.thread_errors + r.thread_errors,
                reply_failures: a.reply_failures + r.reply_failures,
                pending_at_stop: a.pending_at_stop + r.pending_at_stop,
            })
    }

    /// Why the run failed, if it did: every issued request must be answered, every
    /// answer delivered, every check passed and every thread healthy.
    pub fn problems(&self) -> Vec<String> {
        let t = self.total();
        let mut p = Vec::new();
        if t.thread_errors > 0 {
            p.push(format!("{} thread(s) failed", t.thread_errors));
        }
        if t.undrained > 0 || t.completed != t.issued {
            p.push(format!(
                "drain incomplete: {} issued, {} completed",
                t.issued, t.completed
            ));
        }
        if t.error_answers > 0 {
            p.push(format!(
                "{} of {} answers said the request failed (unreachable rank, bad op, \
                 full store or missing key)",
                t.error_answers, t.completed
            ));
        }
        if t.failures > 0 {
            p.push(format!(
                "verify: {} of {} answers wrong",
                t.failures, t.checked
            ));
        }
        if t.reply_failures > 0 {
            p.push(format!(
                "{} answers could not be delivered",
                t.reply_failures
            ));
        }
        if t.pending_at_stop > 0 {
            p.push(format!(
                "{} requests still held by daemons at stop",
                t.pending_at_stop
            ));
        }
        p
    }
}
