//! The three output formats of a [`Report`] (stdout), and the progress line (stderr, so
//! machine formats stay clean).
//!
//! - `table`: setup lines, one row per rank and a total row per run, the drain and verify
//!   lines, and with `--metrics` one row per daemon.
//! - `json`: one object per line, each with a `"type"`: `"setup"` (first), `"run"` (one
//!   per run, totals and a `per_rank` array), `"summary"` (drain and verify), and with
//!   `--metrics` `"metrics"` (one per rank and daemon). Latencies are integer
//!   nanoseconds, `null` when a run recorded none.
//! - `csv`: a header row and one row per run and rank plus a `total` row per run; the
//!   set-up ([`setup_lines`]) and the drain and verify summary go to stderr.

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::histogram::Histogram;
use crate::metrics::{DaemonMetrics, CQE_BUCKET_LABELS};
use crate::report::{Report, RunRecord};

/// p50, p99, p99.9 in ns.
fn percentiles(h: &Histogram) -> [Option<u64>; 3] {
    [h.quantile(0.5), h.quantile(0.99), h.quantile(0.999)]
}

fn us(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), |ns| format!("{:.2}", ns as f64 / 1e3))
}

/// Said under the set-up when a rank ran more busy-polling threads than its CPUs, or the
/// host more than it has: they then take turns on the cores, and req/s and latency
/// measure the scheduler as much as the code (scale questions: `--world virtual:N`).
fn oversubscribed(setup: &[(&'static str, Value)]) -> Option<String> {
    let get = |key| setup.iter().find(|(k, _)| *k == key)?.1.as_u64();
    let said = |busy: u64, cpus: u64, whose: &str| {
        format!(
            "{busy} busy-polling threads on {whose}{cpus} CPU(s): they take turns, so req/s \
             and latency include the scheduler's time slices (for scale, --world virtual:N)"
        )
    };
    let (busy, cpus) = (get("busy_threads")?, get("cpus")?);
    if busy > cpus {
        return Some(said(busy, cpus, "each rank's "));
    }
    let (busy, cpus) = (get("host_busy_threads")?, get("host_cpus")?);
    (busy > cpus).then(|| said(busy, cpus, "the host's "))
}

/// Decimal places that show a run's length to two digits or more: a 5 ms virtual run
/// reads 0.0050, not 0.01, and a 70 us one 0.000070, not 0.00.
fn seconds_places(secs: f64) -> usize {
    match secs {
        s if s >= 1.0 => 2,
        s if s >= 0.001 => 4,
        _ => 6,
    }
}

/// A set-up value as the table and the CSV's stderr line show it (strings unquoted).
fn setup_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The set-up for stderr beside CSV output, which has no place for it: a line per key
/// (values may hold spaces and commas), and the table's note when threads outnumber
/// their CPUs.
pub fn setup_lines(r: &Report) -> String {
    let mut o = String::new();
    for (k, v) in &r.setup {
        let _ = writeln!(o, "benchkv: setup: {k} = {}", setup_value(v));
    }
    if let Some(why) = oversubscribed(&r.setup) {
        let _ = writeln!(o, "benchkv: note: {why}");
    }
    o
}

/// The human table.
pub fn table(r: &Report) -> String {
    let mut o = String::new();
    // Keys in a column as wide as the longest (host_busy_threads is 17).
    let w = r.setup.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in &r.setup {
        let _ = writeln!(o, "{k:<w$} {}", setup_value(v));
    }
    if let Some(why) = oversubscribed(&r.setup) {
        let _ = writeln!(o, "{:<w$} {why}", "note");
    }
    let _ = writeln!(
        o,
        "\n{:>4} {:>5} {:>12} {:>8} {:>14} {:>9} {:>9} {:>9}",
        "run", "rank", "requests", "seconds", "req/s", "p50 us", "p99 us", "p99.9 us"
    );
    for (i, run) in r.runs.iter().enumerate() {
        let row =
            |o: &mut String, rank: &str, rec: &RunRecord, secs: f64, rps: f64, h: &Histogram| {
                let [p50, p99, p999] = percentiles(h);
                let _ = writeln!(
                    o,
                    "{:>4} {:>5} {:>12} {:>8.*} {:>14.0} {:>9} {:>9} {:>9}",
                    i + 1,
                    rank,
                    rec.completed,
                    seconds_places(secs),
                    secs,
                    rps,
                    us(p50),
                    us(p99),
                    us(p999)
                );
            };
        for (rank, (rec, h)) in run.ranks.iter().zip(&run.hists).enumerate() {
            row(
                &mut o,
                &rank.to_string(),
                rec,
                rec.elapsed_ns as f64 / 1e9,
                rec.rps(),
                h,
            );
        }
        if run.ranks.len() > 1 {
            let total = RunRecord {
                completed: run.total_completed(),
                elapsed_ns: 0,
            };
            row(
                &mut o,
                "all",
                &total,
                run.seconds(),
                run.total_rps(),
                &run.merged_hist(),
            );
        }
    }
    let t = r.total();
    let _ = writeln!(
        o,
        "\ndrain: {} issued, {} completed, {} outstanding{}",
        t.issued,
        t.completed,
        t.issued - t.completed.min(t.issued),
        if t.every_request_answered() {
            " (every request answered)".to_string()
        } else if t.thread_errors > 0 {
            format!(
                " (counted over the threads that finished: {} thread(s) failed, and a \
                 failed client's requests are in neither count)",
                t.thread_errors
            )
        } else {
            String::new()
        }
    );
    if t.error_answers > 0 {
        let _ = writeln!(
            o,
            "errors: {} answers said the request failed",
            t.error_answers
        );
    }
    if t.checked > 0 || t.failures > 0 {
        let _ = writeln!(
            o,
            "verify: {} answers checked, {} wrong",
            t.checked, t.failures
        );
    }
    if let Some(m) = &r.metrics {
        let _ = writeln!(
            o,
            "\n{:>4} {:>6} {:>12} {:>6} {:>10} {:>9} {:>9} {:>44} {:>8} {:>13} {:>9} {:>9} {:>9}",
            "rank",
            "daemon",
            "loops",
            "idle%",
            "served",
            "forwarded",
            "remote",
            format!("cqe batches [{}]", CQE_BUCKET_LABELS.join(" ")),
            "cqe avg",
            "outst mean/max",
            "flux full",
            "rem busy",
            "no credit"
        );
        for (rank, ds) in m.iter().enumerate() {
            for (d, x) in ds.iter().enumerate() {
                let idle = if x.loops == 0 {
                    0.0
                } else {
                    100.0 * x.idle_loops as f64 / x.loops as f64
                };
                let cqe = x.cqe_batches.map(|c| c.to_string()).join(" ");
                let _ = writeln!(
                    o,
                    "{rank:>4} {d:>6} {:>12} {idle:>6.1} {:>10} {:>9} {:>9} {cqe:>44} {:>8.2} {:>13} {:>9} {:>9} {:>9}",
                    x.loops,
                    x.served,
                    x.forwarded,
                    x.remote_calls,
                    x.cqe_batch_mean(),
                    format!("{:.1}/{}", x.outstanding_mean(), x.outstanding_max),
                    x.flux_full,
                    x.remote_busy,
                    x.remote_no_credit
                );
            }
        }
        let adaptive: Vec<(usize, usize, &DaemonMetrics)> = m
            .iter()
            .enumerate()
            .flat_map(|(r, ds)| ds.iter().enumerate().map(move |(d, x)| (r, d, x)))
            .filter(|(_, _, x)| x.budget_u_max > 0)
            .collect();
        if !adaptive.is_empty() {
            let _ = writeln!(
                o,
                "\nadaptive poll budget (the self-identifying controller), at the end:\n{:>4} {:>6} {:>5} {:>5} {:>7} {:>9} {:>7} {:>5} {:>5} {:>10}",
                "rank", "daemon", "u", "u_max", "rho", "batch", "empty", "ups", "downs", "recoveries"
            );
            for (r, d, x) in adaptive {
                let q = |v: u64| v as f64 / 65536.0;
                let _ = writeln!(
                    o,
                    "{r:>4} {d:>6} {:>5} {:>5} {:>7.2} {:>9.2} {:>7.2} {:>5} {:>5} {:>10}",
                    x.budget_u,
                    x.budget_u_max,
                    q(x.budget_rho_q16),
                    q(x.budget_batch_q16),
                    q(x.budget_empty_q16),
                    x.budget_ups,
                    x.budget_downs,
                    x.budget_recoveries
                );
            }
        }
    }
    o
}

fn metrics_json(rank: usize, daemon: usize, m: &DaemonMetrics) -> Value {
    let cqe: serde_json::Map<String, Value> = CQE_BUCKET_LABELS
        .iter()
        .zip(m.cqe_batches)
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({
        "type": "metrics",
        "rank": rank,
        "daemon": daemon,
        "loops": m.loops,
        "idle_loops": m.idle_loops,
        "served": m.served,
        "forwarded": m.forwarded,
        "remote_calls": m.remote_calls,
        "cqe_batches": cqe,
        "cqe_batch_mean": m.cqe_batch_mean(),
        "outstanding_samples": m.outstanding_samples,
        "outstanding_mean": m.outstanding_mean(),
        "outstanding_max": m.outstanding_max,
        "flux_full": m.flux_full,
        "remote_busy": m.remote_busy,
        "remote_no_credit": m.remote_no_credit,
        "reply_failures": m.reply_failures,
        "pending_at_stop": m.pending_at_stop,
        "poll_budget": m.budget_u,
        "budget_u_max": m.budget_u_max,
        "budget_rho": m.budget_rho_q16 as f64 / 65536.0,
        "budget_batch_ewma": m.budget_batch_q16 as f64 / 65536.0,
        "budget_empty_ewma": m.budget_empty_q16 as f64 / 65536.0,
        "budget_ups": m.budget_ups,
        "budget_downs": m.budget_downs,
        "budget_recoveries": m.budget_recoveries,
    })
}

/// JSON lines.
pub fn json_lines(r: &Report) -> String {
    let mut lines = Vec::new();
    let mut setup = serde_json::Map::new();
    setup.insert("type".into(), json!("setup"));
    for (k, v) in &r.setup {
        setup.insert((*k).into(), v.clone());
    }
    lines.push(Value::Object(setup));
    for (i, run) in r.runs.iter().enumerate() {
        let [p50, p99, p999] = percentiles(&run.merged_hist());
        let per_rank: Vec<Value> = run
            .ranks
            .iter()
            .zip(&run.hists)
            .enumerate()
            .map(|(rank, (rec, h))| {
                let [p50, p99, p999] = percentiles(h);
                json!({
                    "rank": rank,
                    "requests": rec.completed,
                    "seconds": rec.elapsed_ns as f64 / 1e9,
                    "rps": rec.rps(),
                    "p50_ns": p50, "p99_ns": p99, "p999_ns": p999,
                })
            })
            .collect();
        lines.push(json!({
            "type": "run",
            "run": i + 1,
            "requests": run.total_completed(),
            "seconds": run.seconds(),
            "total_rps": run.total_rps(),
            "p50_ns": p50, "p99_ns": p99, "p999_ns": p999,
            "per_rank": per_rank,
        }));
    }
    let t = r.total();
    lines.push(json!({
        "type": "summary",
        "issued": t.issued,
        "completed": t.completed,
        "undrained": t.undrained,
        "drained": t.every_request_answered(),
        "verify_checked": t.checked,
        "verify_failures": t.failures,
        "error_answers": t.error_answers,
        "thread_errors": t.thread_errors,
        "reply_failures": t.reply_failures,
        "pending_at_stop": t.pending_at_stop,
        "per_rank": r.ranks.iter().enumerate().map(|(rank, s)| json!({
            "rank": rank, "issued": s.issued, "completed": s.completed, "undrained": s.undrained,
        })).collect::<Vec<_>>(),
    }));
    if let Some(m) = &r.metrics {
        for (rank, ds) in m.iter().enumerate() {
            for (d, x) in ds.iter().enumerate() {
                lines.push(metrics_json(rank, d, x));
            }
        }
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// CSV of the runs.
pub fn csv(r: &Report) -> String {
    let mut o = String::from("run,rank,requests,seconds,rps,p50_ns,p99_ns,p999_ns\n");
    let opt = |v: Option<u64>| v.map_or_else(String::new, |x| x.to_string());
    for (i, run) in r.runs.iter().enumerate() {
        let mut row = |rank: String, req: u64, secs: f64, rps: f64, h: &Histogram| {
            let [a, b, c] = percentiles(h);
            let _ = writeln!(
                o,
                "{},{rank},{req},{secs:.6},{rps:.1},{},{},{}",
                i + 1,
                opt(a),
                opt(b),
                opt(c)
            );
        };
        for (rank, (rec, h)) in run.ranks.iter().zip(&run.hists).enumerate() {
            row(
                rank.to_string(),
                rec.completed,
                rec.elapsed_ns as f64 / 1e9,
                rec.rps(),
                h,
            );
        }
        row(
            "total".into(),
            run.total_completed(),
            run.seconds(),
            run.total_rps(),
            &run.merged_hist(),
        );
    }
    o
}

/// The once-a-second line during long runs (stderr).
pub fn progress(run: usize, runs: usize, elapsed: f64, duration: f64, rps: f64) -> String {
    format!(
        "benchkv: run {}/{runs}  {elapsed:.0}/{duration:.0} s  {:.3} Mreq/s (rank 0)",
        run + 1,
        rps / 1e6
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{RankSummary, RunResult};

    fn report() -> Report {
        let mut h = Histogram::new();
        h.record(1000);
        h.record(3000);
        Report {
            setup: vec![("backend", json!("meta")), ("daemons", json!(2))],
            runs: vec![RunResult {
                ranks: vec![
                    RunRecord {
                        completed: 10,
                        elapsed_ns: 1_000_000_000,
                    },
                    RunRecord {
                        completed: 30,
                        elapsed_ns: 2_000_000_000,
                    },
                ],
                hists: vec![h, Histogram::new()],
            }],
            ranks: vec![
                RankSummary {
                    issued: 12,
                    completed: 12,
                    ..Default::default()
                };
                2
            ],
            metrics: Some(vec![vec![DaemonMetrics::default()]; 2]),
        }
    }

    #[test]
    fn json_lines_parse_and_carry_totals() {
        let out = json_lines(&report());
        let v: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(v[0]["type"], "setup");
        assert_eq!(v[0]["daemons"], 2);
        assert_eq!(v[1]["type"], "run");
        assert_eq!(v[1]["requests"], 40);
        assert_eq!(v[1]["total_rps"], 25.0);
        assert_eq!(v[1]["per_rank"][1]["p50_ns"], Value::Null);
        assert_eq!(v[2]["type"], "summary");
        assert_eq!(v[2]["drained"], true);
        assert_eq!(v.iter().filter(|x| x["type"] == "metrics").count(), 2);
    }

    #[test]
    fn csv_has_a_row_per_rank_and_a_total() {
        let out = csv(&report());
        let rows: Vec<&str> = out.lines().collect();
        assert_eq!(rows.len(), 4);
        assert!(
            rows[3].starts_with("1,total,40,2.000000,25.0,"),
            "{}",
            rows[3]
        );
        assert!(rows[2].ends_with(",,,"), "empty latency cells: {}", rows[2]);
    }

    #[test]
    fn table_names_the_drain() {
        let out = table(&report());
        assert!(out.contains("24 issued, 24 completed, 0 outstanding (every request answered)"));
        assert!(out.contains("all"), "a total row for two ranks");
    }

    /// Two client threads failed after half a million requests: their reports were
    /// lost with them, the counts read 0 and 0, and the line said "every request
    /// answered" beside "FAILED: 2 thread(s) failed".
    #[test]
    fn item5_the_drain_line_claims_no_answer_when_threads_failed() {
        let mut r = report();
        for s in &mut r.ranks {
            *s = RankSummary {
                thread_errors: 1,
                ..Default::default()
            };
        }
        let out = table(&r);
        let line = out.lines().find(|l| l.starts_with("drain:")).unwrap();
        assert!(!line.contains("every request answered"), "{line}");
        assert!(line.contains("2 thread(s) failed"), "{line}");
        let v: Vec<Value> = json_lines(&r)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(v[2]["drained"], false);
    }

    #[test]
    fn short_runs_show_their_length() {
        let mut r = report();
        let line = |r: &Report, rank: &str| {
            table(r)
                .lines()
                .find(|l| l.split_whitespace().nth(1) == Some(rank))
                .unwrap()
                .to_string()
        };
        assert!(line(&r, "0").contains(" 1.00 "), "{}", line(&r, "0"));
        r.runs[0].ranks[0].elapsed_ns = 5_000_000;
        assert!(line(&r, "0").contains(" 0.0050 "), "{}", line(&r, "0"));
        r.runs[0].ranks[0].elapsed_ns = 70_000;
        assert!(line(&r, "0").contains(" 0.000070 "), "{}", line(&r, "0"));
    }

    #[test]
    fn table_says_when_busy_threads_outnumber_the_cpus() {
        let mut r = report();
        r.setup.extend([
            ("cpus", json!(2)),
            ("busy_threads", json!(2)),
            ("host_cpus", json!(4)),
            ("host_busy_threads", json!(4)),
        ]);
        assert!(!table(&r).contains("busy-polling"), "2 on 2 and 4 on 4 fit");
        r.setup[5].1 = json!(6);
        let t = table(&r);
        assert!(
            t.contains("\nbusy_threads      2\n") && t.contains("\nhost_busy_threads 6\n"),
            "keys in one column: {t}"
        );
        let host = "note              6 busy-polling threads on the host's 4 CPU(s)";
        assert!(table(&r).contains(host), "{}", table(&r));
        r.setup[3].1 = json!(3);
        let rank = "note              3 busy-polling threads on each rank's 2 CPU(s)";
        assert!(table(&r).contains(rank), "{}", table(&r));
        let lines = setup_lines(&r);
        assert!(
            lines.starts_with("benchkv: setup: backend = meta\nbenchkv: setup: daemons = 2\n")
                && lines.contains("\nbenchkv: setup: busy_threads = 3\n")
                && lines.ends_with("\nbenchkv: note: 3 busy-polling threads on each rank's 2 CPU(s): they take turns, so req/s and latency include the scheduler's time slices (for scale, --world virtual:N)\n"),
            "{lines}"
        );
    }
}
