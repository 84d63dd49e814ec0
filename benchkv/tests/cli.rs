//! The built binary, end to end: one-rank runs of both backends with `--verify`, the
//! loopback's remote paths, tiny queues (back-pressure), the JSON and CSV formats, and
//! refusals of bad flags.
//!
//! Every run uses `--pin off` (tests run in parallel, and pinned threads of several
//! processes would share cores) and a small key space (the preload is not what is
//! tested).

use std::process::{Command, Output};

use serde_json::Value;

fn benchkv(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_benchkv"))
        .args(["--pin", "off", "--keys", "4096"])
        .args(args)
        .output()
        .expect("benchkv runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs with `--output json` and returns the parsed lines; the run must succeed.
fn json_run(args: &[&str]) -> Vec<Value> {
    let mut a = vec!["--output", "json"];
    a.extend_from_slice(args);
    let out = benchkv(&a);
    assert!(
        out.status.success(),
        "benchkv {args:?} failed ({}):\n{}\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

fn of_type<'a>(lines: &'a [Value], t: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["type"] == t).collect()
}

/// The summary says every issued request was answered and every answer checked right.
fn assert_drained_and_verified(lines: &[Value]) -> &Value {
    let s = of_type(lines, "summary");
    assert_eq!(s.len(), 1, "one summary line");
    let s = s[0];
    let issued = s["issued"].as_u64().unwrap();
    assert!(issued > 0, "nothing issued: {s}");
    assert_eq!(s["completed"].as_u64(), Some(issued), "drain: {s}");
    assert_eq!(s["undrained"], 0);
    assert_eq!(s["drained"], true);
    assert_eq!(
        s["verify_checked"].as_u64(),
        Some(issued),
        "every answer checked: {s}"
    );
    assert_eq!(s["verify_failures"], 0);
    assert_eq!(s["reply_failures"], 0);
    assert_eq!(s["pending_at_stop"], 0);
    s
}

fn metric_sum(lines: &[Value], field: &str) -> u64 {
    of_type(lines, "metrics")
        .iter()
        .map(|m| m[field].as_u64().unwrap())
        .sum()
}

#[test]
fn one_rank_delegation_verifies_and_drains() {
    let l = json_run(&["--backend", "delegation", "--verify", "--duration", "700ms"]);
    assert_drained_and_verified(&l);
    let run = of_type(&l, "run")[0];
    assert!(run["total_rps"].as_f64().unwrap() > 0.0);
}

#[test]
fn one_rank_meta_verifies_and_drains() {
    let l = json_run(&[
        "--backend",
        "meta",
        "--verify",
        "--duration",
        "700ms",
        "-K",
        "2",
    ]);
    assert_drained_and_verified(&l);
}

#[test]
fn loopback_ranks_take_the_remote_paths_of_both_backends() {
    for backend in ["delegation", "meta"] {
        let l = json_run(&[
            "--backend",
            backend,
            "--verify",
            "--duration",
            "600ms",
            "--loopback-ranks",
            "3",
            "-K",
            "2",
            "-C",
            "2",
            "--metrics",
            "--zipf-theta",
            "1.1",
            "--distribution",
            "zipf",
        ]);
        assert_drained_and_verified(&l);
        assert!(
            metric_sum(&l, "remote_calls") > 0,
            "{backend}: no remote call"
        );
        assert!(
            metric_sum(&l, "forwarded") > 0,
            "{backend}: nothing over Flux"
        );
        let cqe: u64 = of_type(&l, "metrics")
            .iter()
            .map(|m| {
                m["cqe_batches"]["1"].as_u64().unwrap() + m["cqe_batches"]["2-10"].as_u64().unwrap()
            })
            .sum();
        assert!(cqe > 0, "{backend}: the transport never completed anything");
    }
}

#[test]
fn tiny_queues_park_and_still_answer_every_request() {
    for backend in ["delegation", "meta"] {
        let l = json_run(&[
            "--backend",
            backend,
            "--verify",
            "--duration",
            "600ms",
            "--loopback-ranks",
            "2",
            "-K",
            "2",
            "-C",
            "4",
            "--ring-size",
            "2",
            "--queue-depth",
            "1",
            "--metrics",
        ]);
        assert_drained_and_verified(&l);
        let parked = metric_sum(&l, "remote_busy") + metric_sum(&l, "flux_full");
        assert!(
            parked > 0,
            "{backend}: queues of 2 never filled, back-pressure untested"
        );
    }
}

/// Issue 23, item 1, in one process: meta with two daemons, four ranks (three of them
/// loopbacks) and queues of 2 deadlocked before the two Flux lanes (25 requests answered
/// in 2 s, the rest stuck); every request must now be answered.
#[test]
fn item1_meta_loopback_four_ranks_tiny_queues_drain() {
    let l = json_run(&[
        "--backend",
        "meta",
        "-K",
        "2",
        "-C",
        "4",
        "--ring-size",
        "2",
        "--loopback-ranks",
        "4",
        "--verify",
        "--duration",
        "500ms",
        "--drain-timeout",
        "20s",
        "--metrics",
    ]);
    assert_drained_and_verified(&l);
    assert!(metric_sum(&l, "flux_full") > 0, "Flux queues never filled");
}

#[test]
fn json_lines_follow_the_schema() {
    let l = json_run(&[
        "--duration",
        "300ms",
        "--runs",
        "2",
        "--metrics",
        "-K",
        "2",
        "--verify",
    ]);
    assert_eq!(l[0]["type"], "setup", "setup first");
    let setup = &l[0];
    for (k, check) in [
        ("backend", Value::is_string as fn(&Value) -> bool),
        ("mpi_ranks", Value::is_u64),
        ("ranks", Value::is_u64),
        ("daemons", Value::is_u64),
        ("clients", Value::is_u64),
        ("queue_depth", Value::is_u64),
        ("duration_s", Value::is_f64),
        ("runs", Value::is_u64),
        ("keys", Value::is_u64),
        ("distribution", Value::is_string),
        ("read_ratio", Value::is_f64),
        ("ring_size", Value::is_u64),
        ("seed", Value::is_u64),
        ("verify", Value::is_boolean),
        ("fabric", Value::is_string),
        ("pinned", Value::is_boolean),
        ("cpus", Value::is_u64),
        ("busy_threads", Value::is_u64),
        ("host_cpus", Value::is_u64),
        ("host_busy_threads", Value::is_u64),
    ] {
        assert!(check(&setup[k]), "setup.{k} = {}", setup[k]);
    }
    let runs = of_type(&l, "run");
    assert_eq!(runs.len(), 2);
    for (i, r) in runs.iter().enumerate() {
        assert_eq!(r["run"].as_u64(), Some(i as u64 + 1));
        assert!(r["requests"].is_u64() && r["seconds"].is_f64() && r["total_rps"].is_f64());
        for p in ["p50_ns", "p99_ns", "p999_ns"] {
            assert!(r[p].is_u64(), "run.{p} = {}", r[p]);
        }
        assert!(r["p50_ns"].as_u64() <= r["p99_ns"].as_u64());
        assert!(r["p99_ns"].as_u64() <= r["p999_ns"].as_u64());
        let per_rank = r["per_rank"].as_array().unwrap();
        assert_eq!(per_rank.len(), 1);
        assert_eq!(per_rank[0]["rank"], 0);
        assert!(per_rank[0]["rps"].is_f64() && per_rank[0]["requests"].is_u64());
        let sum: u64 = per_rank
            .iter()
            .map(|x| x["requests"].as_u64().unwrap())
            .sum();
        assert_eq!(r["requests"].as_u64(), Some(sum), "total = sum over ranks");
    }
    let s = assert_drained_and_verified(&l);
    assert!(s["per_rank"].as_array().unwrap()[0]["issued"].is_u64());
    let m = of_type(&l, "metrics");
    assert_eq!(m.len(), 2, "one metrics line per daemon");
    for x in m {
        for k in [
            "rank",
            "daemon",
            "loops",
            "idle_loops",
            "served",
            "outstanding_max",
        ] {
            assert!(x[k].is_u64(), "metrics.{k} = {}", x[k]);
        }
        assert!(x["outstanding_mean"].is_f64());
        let cqe = x["cqe_batches"].as_object().unwrap();
        let keys: Vec<&str> = cqe.keys().map(String::as_str).collect();
        for b in ["0", "1", "2-10", "11-100", ">100"] {
            assert!(keys.contains(&b), "cqe bucket {b} missing: {keys:?}");
        }
        assert!(x["loops"].as_u64().unwrap() >= x["idle_loops"].as_u64().unwrap());
    }
    assert_eq!(l.len(), 1 + 2 + 1 + 2, "no other lines");
}

#[test]
fn csv_has_a_header_and_a_row_per_rank_and_total() {
    let out = benchkv(&["--output", "csv", "--duration", "300ms", "--runs", "2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    let rows: Vec<Vec<&str>> = s.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(
        rows[0],
        ["run", "rank", "requests", "seconds", "rps", "p50_ns", "p99_ns", "p999_ns"]
    );
    assert_eq!(rows.len(), 1 + 2 * 2);
    assert_eq!(rows[2][..2], ["1", "total"]);
    assert_eq!(rows[4][..2], ["2", "total"]);
    for r in &rows[1..] {
        assert_eq!(r.len(), 8);
        assert!(r[2].parse::<u64>().unwrap() > 0);
    }
    let err = text(&out.stderr);
    assert!(err.contains("drain:"), "summary on stderr: {err}");
    for key in ["backend", "cpus", "busy_threads", "host_cpus"] {
        let line = format!("benchkv: setup: {key} = ");
        assert!(err.contains(&line), "{key} missing: {err}");
    }
}

#[test]
fn table_reports_the_drain_and_the_verify_count() {
    let out = benchkv(&["--duration", "300ms", "--verify", "-C", "2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("(every request answered)"), "{s}");
    assert!(s.contains(", 0 wrong"), "{s}");
    assert!(s.contains("req/s"), "{s}");
}

#[test]
fn long_runs_print_progress_each_second() {
    let out = benchkv(&["--duration", "3.3s", "--output", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let progress = text(&out.stderr)
        .lines()
        .filter(|l| l.contains("run 1/1") && l.contains("Mreq/s"))
        .count();
    // One per whole second still inside the run: 3, or 2 if a sleep overshot.
    assert!(
        (2..=3).contains(&progress),
        "one line per second: {}",
        text(&out.stderr)
    );
    // stdout stays machine-readable.
    for l in text(&out.stdout).lines() {
        serde_json::from_str::<Value>(l).unwrap();
    }
}

#[test]
fn bad_flags_and_impossible_combinations_are_clear_errors() {
    for (args, needle) in [
        (&["--backend", "rdma"][..], "--backend"),
        (&["--no-such-flag"], "--no-such-flag"),
        (&["--daemons", "0"], "--daemons"),
        (&["--queue-depth", "x"], "--queue-depth"),
        (&["--duration", "0"], "duration"),
        (&["--ring-size", "3"], "--ring-size"),
        (&["--read-ratio", "2"], "--read-ratio"),
        (&["--zipf-theta", "0.9"], "--zipf-theta"),
        (&["--poll-budget", "0"], "poll budget"),
        (&["--poll-budget", "65537"], "poll-budget"),
        (&["--take-per-turn", "0"], "take"),
        (&["--fabric", "sim", "--device", "mlx5_0"], "--device"),
        (&["--pin", "on", "-C", "1000"], "--pin on"),
        (&["--fabric", "nope"], "--fabric"),
    ] {
        let out = benchkv(args);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: usage errors exit 2: {err}"
        );
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    }
}

/// Issue 23: every flag that takes a value, with every kind of bad value (zero, negative,
/// past u64, huge, not a number, empty, NaN): a usage error (exit 2) naming the flag,
/// before anything runs; never a panic or a backtrace.
#[test]
fn every_flag_with_bad_values_is_a_clear_error_never_a_panic() {
    const HUGE: &str = "18446744073709551616";
    let bad_counts = ["0", "-1", HUGE, "99999999999", "abc", "", "1.5"];
    let table: &[(&str, &[&str])] = &[
        ("--daemons", &bad_counts),
        ("--clients", &bad_counts),
        ("--queue-depth", &bad_counts),
        ("--runs", &bad_counts),
        ("--keys", &bad_counts),
        ("--loopback-ranks", &bad_counts),
        ("--pattern-len", &bad_counts),
        (
            "--ring-size",
            &["0", "-1", "3", HUGE, "4294967296", "abc", ""],
        ),
        ("--seed", &["-1", HUGE, "abc", ""]),
        (
            "--duration",
            &[
                "0", "-1", "nan", "inf", "1e30", "25h", "2d", "", "abc", "1e-10", "0.5us",
            ],
        ),
        ("--drain-timeout", &["0", "-1", "nan", "1e30", ""]),
        ("--setup-timeout", &["0", "-1", "nan", "1e30", ""]),
        ("--read-ratio", &["-0.1", "1.1", "nan", "inf", "abc", ""]),
        ("--poll-budget", &["0", "-1", HUGE, "65537", "abc", ""]),
        ("--take-per-turn", &["0", "-1", HUGE, "abc", ""]),
        ("--port", &["0", "-1", "256", "abc", ""]),
        ("--gid-index", &["-1", "256", "v2", ""]),
        ("--tclass", &["-1", "256", "af41", ""]),
        ("--sl", &["-1", "16", "255", ""]),
        ("--rpc-ring", &["", "3k", "16", "abc", "8m", "1g", "-4k"]),
        ("--backend", &["", "rdma", "0"]),
        ("--fabric", &["", "ib", "0"]),
        ("--distribution", &["", "normal"]),
        ("--output", &["", "xml"]),
        ("--pin", &["", "maybe"]),
        ("--plot", &["", "/nonexistent-dir/plot.svg"]),
    ];
    for (flag, values) in table {
        for v in *values {
            // `--flag=value`: a value that starts with `-` is otherwise taken for a flag
            // (clap then names the value, not the flag; checked below too).
            let arg = format!("{flag}={v}");
            let out = benchkv(&["--duration", "100ms", &arg]);
            let err = text(&out.stderr);
            let what = format!("{flag} {v:?}");
            assert_eq!(out.status.code(), Some(2), "{what}: exit 2 expected: {err}");
            let name = flag.trim_start_matches("--");
            assert!(
                err.contains(name),
                "{what}: the error does not name the flag: {err}"
            );
            assert!(
                !err.contains("panicked") && !err.contains("backtrace"),
                "{what} panicked: {err}"
            );
            assert!(
                out.stdout.is_empty(),
                "{what}: something ran: {}",
                text(&out.stdout)
            );
        }
    }
    let out = benchkv(&["--zipf-theta", "-1", "--distribution", "zipf"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = benchkv(&["--daemons", "-1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("'-1'"), "{}", text(&out.stderr));
    for missing in ["--daemons", "--plot", "--duration"] {
        let out = benchkv(&[missing]);
        assert_eq!(out.status.code(), Some(2), "{missing} without a value");
        assert!(text(&out.stderr).contains(missing));
    }
}

/// Values each inside its flag's range can add up past the machine: refused before
/// anything is built (they ended in an allocation abort with a backtrace, and a thread
/// spawn panic that left the rank's /dev/shm regions).
#[test]
fn a_workload_the_machine_cannot_hold_is_refused_before_the_run() {
    // 1 024 clients × 2^24 entries × 16 B: 256 GiB of patterns.
    let out = benchkv(&[
        "--duration",
        "100ms",
        "-C",
        "1024",
        "--pattern-len",
        "16777216",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--pattern-len") && err.contains("MiB available"),
        "{err}"
    );
    assert!(
        out.stdout.is_empty(),
        "something ran: {}",
        text(&out.stdout)
    );
}

/// A named --device is the one to use: under the default `--fabric auto` a device that
/// is not there is an error, not a silent run on the software model.
#[test]
fn a_named_device_that_is_not_there_is_refused_under_auto() {
    let out = benchkv(&["--duration", "100ms", "--device", "copyrpc-no-such-nic"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("copyrpc-no-such-nic"), "{err}");
    assert!(out.stdout.is_empty(), "it ran: {}", text(&out.stdout));
}

/// A --plot path that is a FIFO is refused: opening it would wait for a reader.
#[test]
fn a_plot_path_that_is_a_fifo_is_refused_without_waiting() {
    let dir = std::env::temp_dir().join(format!("benchkv-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("plot.svg");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // Bounded: before the check this open waited for ever (`timeout` exits 124).
    let out = Command::new("timeout")
        .args([
            "60",
            env!("CARGO_BIN_EXE_benchkv"),
            "--pin",
            "off",
            "--keys",
            "4096",
        ])
        .args(["--duration", "100ms", "--plot", fifo.to_str().unwrap()])
        .output()
        .expect("timeout runs benchkv");
    let _ = std::fs::remove_dir_all(&dir);
    let err = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "exit 124: it waited on the FIFO; {err}"
    );
    assert!(err.contains("--plot") && err.contains("FIFO"), "{err}");
}

/// Issue 23, item 6: a --plot path that cannot be written is refused before the run, not
/// reported after a whole run whose results are then lost.
#[test]
fn item6_unwritable_plot_path_is_refused_before_the_run() {
    let out = benchkv(&["--plot", "/nonexistent-dir/x.svg", "--duration", "30s"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--plot /nonexistent-dir/x.svg"), "{err}");
    assert!(
        err.contains("No such file or directory"),
        "the cause is kept: {err}"
    );
    assert!(
        out.stdout.is_empty(),
        "the run happened: {}",
        text(&out.stdout)
    );
    // A writable path is left as it was found: not created by the check.
    let p = std::env::temp_dir().join(format!("benchkv-plot-check-{}.svg", std::process::id()));
    let out = benchkv(&["--plot", p.to_str().unwrap(), "--daemons", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!p.exists(), "the check left {p:?} behind");
}

#[test]
fn help_lists_every_flag() {
    let out = benchkv(&["--help"]);
    assert!(out.status.success());
    let h = text(&out.stdout);
    for f in [
        "--backend",
        "--fabric",
        "--device",
        "--daemons",
        "--clients",
        "--queue-depth",
        "--duration",
        "--runs",
        "--keys",
        "--distribution",
        "--zipf-theta",
        "--read-ratio",
        "--ring-size",
        "--poll-budget",
        "--metrics",
        "--output",
        "--verify",
        "--seed",
        "--pin",
        "--loopback-ranks",
        "--plot",
        "--drain-timeout",
        "--setup-timeout",
        "--pattern-len",
        "--rpc-ring",
        "--gid-index",
        "--port",
        "--tclass",
        "--sl",
    ] {
        assert!(h.contains(f), "--help lacks {f}");
    }
}

/// A `--gid-index` past the port's GID table or of a RoCE v1 entry is refused before
/// MPI with exit 2 naming the flag; the table is read from `SYSFS_PATH`, as libibverbs
/// reads it, here a fixture with one RoCE port (v1 and v2 link-local, v1 and v2 IPv4).
#[test]
fn a_gid_index_past_the_table_or_of_a_roce_v1_entry_exits_2() {
    let root = std::env::temp_dir().join(format!("benchkv-sysfs-{}", std::process::id()));
    let port = root.join("class/infiniband/mlx5_0/ports/1");
    for d in ["gids", "gid_attrs/types"] {
        std::fs::create_dir_all(port.join(d)).unwrap();
    }
    std::fs::write(port.join("link_layer"), "Ethernet\n").unwrap();
    for (i, (ty, gid)) in [
        ("IB/RoCE v1", "fe80:0000:0000:0000:0a00:27ff:fe4e:66a1"),
        ("RoCE v2", "fe80:0000:0000:0000:0a00:27ff:fe4e:66a1"),
        ("IB/RoCE v1", "0000:0000:0000:0000:0000:ffff:0a00:0001"),
        ("RoCE v2", "0000:0000:0000:0000:0000:ffff:0a00:0001"),
    ]
    .iter()
    .enumerate()
    {
        std::fs::write(port.join(format!("gids/{i}")), format!("{gid}\n")).unwrap();
        std::fs::write(port.join(format!("gid_attrs/types/{i}")), format!("{ty}\n")).unwrap();
    }
    for (index, needle) in [("4", "past the port's GID table"), ("2", "RoCE v1")] {
        let out = Command::new(env!("CARGO_BIN_EXE_benchkv"))
            .env("SYSFS_PATH", &root)
            .args([
                "--fabric",
                "verbs",
                "--device",
                "mlx5_0",
                "--gid-index",
                index,
            ])
            .output()
            .expect("benchkv runs");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--gid-index {index}: {err}");
        assert!(
            err.contains(&format!("--gid-index {index}")) && err.contains(needle),
            "{err}"
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn plot_writes_an_svg_with_both_charts() {
    let path = std::env::temp_dir().join(format!("benchkv-plot-{}.svg", std::process::id()));
    let p = path.to_str().unwrap();
    let out = benchkv(&[
        "--duration",
        "200ms",
        "--runs",
        "2",
        "--metrics",
        "--loopback-ranks",
        "2",
        "--plot",
        p,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("run 2") && svg.contains("CQE batch"), "{svg}");
}

#[test]
fn verbs_without_a_device_is_a_usage_error() {
    if std::path::Path::new("/sys/class/infiniband").exists() {
        // A machine with RDMA devices: `verbs` may be valid here; nothing to refuse.
        return;
    }
    let out = benchkv(&["--fabric", "verbs", "--duration", "100ms"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--fabric verbs: no RDMA device") && err.contains("--fabric sim"),
        "{err}"
    );
}

#[test]
fn verbs_with_a_low_memlock_limit_names_the_limit() {
    // `prlimit` (util-linux) lowers RLIMIT_MEMLOCK for the one process, as a user's
    // shell or a cluster's limits.conf would; the refusal names it whether or not there
    // is a device (here there is none, and that is named too).
    let out = Command::new("prlimit")
        .args(["--memlock=65536:65536", env!("CARGO_BIN_EXE_benchkv")])
        .args(["--pin", "off", "--fabric", "verbs", "--duration", "100ms"])
        .output()
        .expect("prlimit runs (util-linux)");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("RLIMIT_MEMLOCK is 65536 bytes") && err.contains("ulimit -l"),
        "{err}"
    );
}

#[test]
fn wrong_answers_fail_the_verify() {
    let out = benchkv(&[
        "--verify",
        "--duration",
        "300ms",
        "--read-ratio",
        "1",
        "--inject-fault",
        "corrupt-get",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("FAILED: verify:") && err.contains("wrong"),
        "{err}"
    );
    assert!(
        err.contains("not a value of this key"),
        "the first failure is described: {err}"
    );
}

#[test]
fn unanswered_requests_fail_the_drain() {
    let out = benchkv(&[
        "--duration",
        "300ms",
        "--inject-fault",
        "drop-request",
        "--drain-timeout",
        "200ms",
        "--output",
        "json",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("FAILED: drain incomplete"), "{err}");
    let summary: Value = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["type"] == "summary")
        .unwrap();
    assert_eq!(summary["drained"], false);
    assert!(summary["undrained"].as_u64().unwrap() > 0, "{summary}");
}

#[test]
fn the_adaptive_poll_budget_answers_everything_and_reports_its_state() {
    let l = json_run(&[
        "--verify",
        "--duration",
        "300ms",
        "--loopback-ranks",
        "3",
        "-C",
        "2",
        "--poll-budget",
        "adaptive",
        "--metrics",
    ]);
    assert_drained_and_verified(&l);
    assert_eq!(l[0]["poll_budget"], "adaptive");
    let m: Vec<&Value> = l.iter().filter(|x| x["type"] == "metrics").collect();
    // Daemon#0 holds the transport and runs the controller: past its warm-up (128
    // loops) in 300 ms, so its bound was identified.
    let d0 = m.iter().find(|x| x["daemon"] == 0).unwrap();
    let u_max = d0["budget_u_max"].as_u64().unwrap();
    assert!((8..=64).contains(&u_max), "{d0}");
    assert!(d0["poll_budget"].as_u64().unwrap() <= u_max, "{d0}");
}

#[test]
fn one_request_per_turn_or_a_poll_budget_still_answers_everything() {
    for (backend, knob, value) in [
        ("delegation", "--take-per-turn", "1"),
        ("meta", "--take-per-turn", "1"),
        ("delegation", "--poll-budget", "16"),
        ("meta", "--poll-budget", "16"),
    ] {
        let l = json_run(&[
            "--backend",
            backend,
            "--verify",
            "--duration",
            "300ms",
            "--loopback-ranks",
            "2",
            "-K",
            "2",
            "-C",
            "2",
            knob,
            value,
        ]);
        assert_drained_and_verified(&l);
        let field = knob.trim_start_matches("--").replace('-', "_");
        assert_eq!(
            l[0][field.as_str()],
            value.parse::<u32>().unwrap(),
            "{knob}"
        );
    }
}

/// Exit 2 with `flag` named on stderr, before anything ran.
fn assert_refused_naming(args: &[&str], flag: &str) {
    let out = benchkv(args);
    let err = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?}: exit 2 expected: {err}"
    );
    assert!(err.contains(flag), "{args:?}: {flag} not named: {err}");
    assert!(out.stdout.is_empty(), "{args:?}: something ran");
}

/// `-K -1` and `--read-ratio -0.1` used to get clap's "unexpected argument '-1'",
/// naming no flag.
#[test]
fn negative_numbers_are_refused_naming_their_flag() {
    assert_refused_naming(&["-K", "-1"], "--daemons");
    assert_refused_naming(&["--read-ratio", "-0.1"], "--read-ratio");
    assert_refused_naming(&["--queue-depth", "-4"], "--queue-depth");
}

/// `--duration 1h` was "not a duration" though the limit is a day.
#[test]
fn durations_in_minutes_and_hours_are_read_and_a_day_is_the_limit() {
    // 1 minute of drain allowance: read, and a short virtual run ends well within it.
    let lines = json_run(&[
        "--world",
        "virtual:2",
        "--duration",
        "100us",
        "--drain-timeout",
        "1m",
        "--setup-timeout",
        "1h",
    ]);
    assert_drained_and_verified_or_unverified(&lines);
    assert_refused_naming(&["--duration", "25h"], "--duration");
    assert_refused_naming(&["--duration", "2 fortnights"], "--duration");
}

fn assert_drained_and_verified_or_unverified(lines: &[Value]) {
    let s = of_type(lines, "summary");
    assert_eq!(s.len(), 1);
    assert_eq!(s[0]["drained"], true, "{}", s[0]);
}

/// `--nic gbps=1e-9` rounded to 0 B/s, which the link reads as "no limit": the run went
/// at full speed; `--cost ,,,` and a key given twice were taken silently.
#[test]
fn a_bandwidth_below_a_byte_per_second_and_empty_or_repeated_keys_are_refused() {
    for (flag, value) in [
        ("--nic", "gbps=1e-9"),
        ("--cost", ",,,"),
        ("--cost", "loop_ns=500,,item_ns=20"),
        ("--cost", "loop_ns=500,loop_ns=600"),
        ("--nic", "latency_ns=500,latency_ns=600"),
    ] {
        assert_refused_naming(&["--world", "virtual:2", flag, value], flag);
    }
}

/// `--plot /proc/version` passed the check before the run and failed the write after
/// it (EIO, exit 1); a read-only file likewise.
#[test]
fn a_plot_path_that_cannot_take_the_plot_is_refused_before_the_run() {
    assert_refused_naming(&["--plot", "/proc/version"], "--plot");
    assert_refused_naming(&["--plot", "/dev/null"], "--plot");
    let ro = std::env::temp_dir().join(format!("benchkv-ro-{}.svg", std::process::id()));
    std::fs::write(&ro, b"").unwrap();
    let mut p = std::fs::metadata(&ro).unwrap().permissions();
    p.set_readonly(true);
    std::fs::set_permissions(&ro, p).unwrap();
    assert_refused_naming(&["--plot", ro.to_str().unwrap()], "--plot");
    std::fs::remove_file(&ro).unwrap();
}

/// A sim-fabric region a killed run left (`copyrpc-sim-<pid>-<n>`, its process gone) is
/// swept by the next benchkv run of any kind. One-rank and `--loopback-ranks` runs never
/// open the sim fabric, whose opening was the only sweep, so the region stayed.
#[test]
fn item8_every_run_sweeps_a_sim_region_a_killed_run_left() {
    for extra in [&[][..], &["--loopback-ranks", "2"][..]] {
        let mut child = Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let path = std::path::PathBuf::from(format!("/dev/shm/copyrpc-sim-{dead}-0"));
        std::fs::write(&path, b"").unwrap();
        let mut args = vec!["--duration", "200ms"];
        args.extend_from_slice(extra);
        let out = benchkv(&args);
        let left = path.exists();
        let _ = std::fs::remove_file(&path);
        assert!(out.status.success(), "{extra:?}: {}", text(&out.stderr));
        assert!(!left, "{extra:?}: {} is still there", path.display());
    }
}
