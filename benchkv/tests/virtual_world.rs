//! `--world virtual:N`: every rank in one process, in virtual time, running the same
//! daemon and client code as the threaded benchkv over the device model.

use std::process::{Command, Output};

use serde_json::Value;

fn benchkv(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_benchkv"))
        .args(["--keys", "4096", "--pattern-len", "1024"])
        .args(args)
        .output()
        .expect("benchkv runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn json_lines(out: &Output) -> Vec<Value> {
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn of_type<'a>(lines: &'a [Value], t: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["type"] == t).collect()
}

/// Runs the world and checks every request was answered and checked right.
fn verified_run(ranks: u32, backend: &str, extra: &[&str]) -> Vec<Value> {
    let world = format!("virtual:{ranks}");
    let mut args = vec![
        "--world",
        &world,
        "--backend",
        backend,
        "--verify",
        "-K",
        "2",
        "-C",
        "3",
        "--queue-depth",
        "8",
        "--duration",
        "400us",
        "--output",
        "json",
    ];
    args.extend_from_slice(extra);
    let out = benchkv(&args);
    assert!(
        out.status.success(),
        "{args:?}: {}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let lines = json_lines(&out);
    let s = of_type(&lines, "summary");
    assert_eq!(s.len(), 1);
    let issued = s[0]["issued"].as_u64().unwrap();
    assert!(issued > 0, "nothing issued: {}", s[0]);
    assert_eq!(s[0]["completed"].as_u64(), Some(issued), "{}", s[0]);
    assert_eq!(s[0]["verify_checked"].as_u64(), Some(issued), "{}", s[0]);
    assert_eq!(s[0]["verify_failures"], 0, "{}", s[0]);
    lines
}

/// Per-rank completions of run 1.
fn per_rank(lines: &[Value]) -> Vec<u64> {
    of_type(lines, "run")[0]["per_rank"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["requests"].as_u64().unwrap())
        .collect()
}

#[test]
fn two_and_eight_ranks_answer_and_verify_every_request_with_both_backends() {
    for backend in ["delegation", "meta"] {
        for ranks in [2, 8] {
            let lines = verified_run(ranks, backend, &[]);
            let counts = per_rank(&lines);
            assert_eq!(counts.len(), ranks as usize, "{backend} {ranks}: {lines:?}");
            assert!(
                counts.iter().all(|&c| c > 0),
                "a rank did nothing: {counts:?}"
            );
            // Every daemon that holds endpoints made remote calls: the copyrpc path ran.
            let remote: u64 = of_type(&lines, "metrics")
                .iter()
                .map(|m| m["remote_calls"].as_u64().unwrap())
                .sum();
            assert!(remote > 0, "{backend} {ranks}: no remote call");
        }
    }
}

#[test]
fn a_world_of_ninety_ranks_gives_a_daemon_two_contexts_and_room_on_its_nic() {
    // 90 ranks: each rank's one daemon has 89 peers, more than a copyrpc context holds
    // (64; the sim NIC used to hold 64 QPs, so a world past 65 ranks was refused), and
    // more than its NIC's region had room for (sized for 64 peers, it failed from about
    // 85 ranks with "region is full").
    let lines = verified_run(
        90,
        "delegation",
        &[
            "-K",
            "1",
            "-C",
            "1",
            "--queue-depth",
            "2",
            "--duration",
            "100us",
            "--rpc-ring",
            "16k",
        ],
    );
    let counts = per_rank(&lines);
    assert_eq!(counts.len(), 90);
    assert!(
        counts.iter().all(|&c| c > 0),
        "a rank did nothing: {counts:?}"
    );
}

#[test]
fn large_copyrpc_rings_answer_everything_and_hold_more_calls_per_peer() {
    let small = verified_run(
        2,
        "delegation",
        &["-C", "8", "--queue-depth", "32", "--rpc-ring", "16k"],
    );
    let large = verified_run(
        2,
        "delegation",
        &["-C", "8", "--queue-depth", "32", "--rpc-ring", "256k"],
    );
    assert_eq!(of_type(&large, "setup")[0]["copyrpc_ring_bytes"], 256 << 10);
    // 8 clients x QD 32 = 256 requests, about half for the peer: more than a 16 KiB ring's
    // credit (~40 calls) holds, so the small ring refuses calls for room and the large
    // one does not.
    let busy = |lines: &[Value]| -> u64 {
        of_type(lines, "metrics")
            .iter()
            .map(|m| m["remote_busy"].as_u64().unwrap())
            .sum()
    };
    assert!(busy(&small) > 0, "the 16 KiB ring never filled");
    assert_eq!(busy(&large), 0, "the 256 KiB ring filled");
    let no_credit = |lines: &[Value]| -> u64 {
        of_type(lines, "metrics")
            .iter()
            .map(|m| m["remote_no_credit"].as_u64().unwrap())
            .sum()
    };
    assert!(
        no_credit(&small) > 0,
        "the 16 KiB ring's refusals were for credit"
    );
    // The default, `auto`: 256 calls to one peer need 96 KiB of credit → 128 KiB rings.
    let auto = verified_run(2, "delegation", &["-C", "8", "--queue-depth", "32"]);
    let setup = &of_type(&auto, "setup")[0];
    assert_eq!(setup["copyrpc_ring_bytes"], 128 << 10);
    assert_eq!(setup["rpc_ring_auto"], true);
    assert_eq!(no_credit(&auto), 0, "auto rings waited for credit");
}

#[test]
fn the_same_seed_gives_byte_identical_output_and_another_seed_does_not() {
    let args = |seed: &'static str| {
        vec![
            "--world",
            "virtual:8",
            "-C",
            "2",
            "--queue-depth",
            "8",
            "--duration",
            "300us",
            "--metrics",
            "--seed",
            seed,
        ]
    };
    let a = benchkv(&args("7"));
    let b = benchkv(&args("7"));
    let c = benchkv(&args("8"));
    for o in [&a, &b, &c] {
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    assert!(!a.stdout.is_empty());
    assert_eq!(text(&a.stdout), text(&b.stdout), "same flags, same seed");
    // The per-rank table rows differ (other patterns, other keys and ranks).
    let rows = |o: &Output| -> Vec<String> {
        text(&o.stdout)
            .lines()
            .filter(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() == 8 && w[0] == "1"
            })
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        rows(&a).len(),
        9,
        "8 ranks and the total: {}",
        text(&a.stdout)
    );
    assert_ne!(
        rows(&a),
        rows(&c),
        "another seed gave the same per-rank counts"
    );
}

#[test]
fn the_nic_spacings_are_deterministic_and_the_nic_wide_one_slows_a_busy_nic() {
    // A NIC-wide spacing of 1 µs (a million packets a second for all of a rank's QPs)
    // and spaced ACKs: the same flags print the same bytes, and the NIC-wide limit costs
    // a world whose daemons send more packets than that.
    let args = |nic: &'static str| {
        vec![
            "--world",
            "virtual:8",
            "-C",
            "4",
            "--queue-depth",
            "8",
            "--duration",
            "300us",
            "--nic",
            nic,
            "--output",
            "json",
        ]
    };
    let spaced = "nic_packet_ns=1000,ack_ns=200,qp_packet_ns=300";
    let a = benchkv(&args(spaced));
    let b = benchkv(&args(spaced));
    let free = benchkv(&args("nic_packet_ns=0,ack_ns=200,qp_packet_ns=300"));
    for o in [&a, &b, &free] {
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    assert_eq!(text(&a.stdout), text(&b.stdout), "same flags, same bytes");
    let rps = |o: &Output| {
        of_type(&json_lines(o), "run")[0]["total_rps"]
            .as_f64()
            .unwrap()
    };
    assert!(
        rps(&a) < 0.9 * rps(&free),
        "NIC-wide limit {} req/s against {} without",
        rps(&a),
        rps(&free)
    );
}

#[test]
fn a_message_between_threads_pays_for_its_cache_line() {
    // One rank, one client, one request at a time: each goes to the daemon over ipc and
    // comes back, two hand-offs of a line between cores. The client sees its answer a
    // line transfer after its turn starts, and the daemon's turn pays for the request's
    // line: with the transfer free, the answer comes that much sooner and more requests
    // fit in the run.
    let run = |cost: &str| {
        let out = benchkv(&[
            "--world",
            "virtual:1",
            "-C",
            "1",
            "--queue-depth",
            "1",
            "--duration",
            "200us",
            "--cost",
            cost,
            "--output",
            "json",
        ]);
        assert!(out.status.success(), "{cost}: {}", text(&out.stderr));
        let lines = json_lines(&out);
        let r = of_type(&lines, "run")[0].clone();
        (
            r["p50_ns"].as_f64().unwrap(),
            r["total_rps"].as_f64().unwrap(),
        )
    };
    let line = copyrpc_host::vworld::CostModel::default().line_ns;
    assert!(line > 0.0, "the built-in profile charges line transfers");
    let (p50, rps) = run("jitter=0");
    let (p50_free, rps_free) = run("line_ns=0");
    assert!(
        p50 >= p50_free + line - 1.0,
        "p50 {p50} ns with transfers, {p50_free} ns without; a line is {line} ns"
    );
    assert!(
        rps < 0.9 * rps_free,
        "{rps} req/s with transfers, {rps_free} without"
    );
}

#[test]
fn a_warmup_is_run_and_counted_in_no_run() {
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--world",
            "virtual:2",
            "-C",
            "2",
            "--queue-depth",
            "4",
            "--duration",
            "300us",
            "--output",
            "json",
        ];
        args.extend_from_slice(extra);
        let out = benchkv(&args);
        assert!(out.status.success(), "{extra:?}: {}", text(&out.stderr));
        json_lines(&out)
    };
    let cold = run(&[]);
    let warm = run(&["--warmup", "500us"]);
    let setup = |l: &[Value]| of_type(l, "setup")[0].clone();
    // The world ran the warmup too, and says so.
    assert_eq!(setup(&warm)["warmup_us"], 500);
    assert_eq!(setup(&warm)["virtual_end_us"].as_u64().unwrap() / 100, 8);
    assert!(setup(&cold).get("warmup_us").is_none());
    // The run counts 300 µs either way, but another 300 µs: a warm one.
    let run0 = |l: &[Value]| of_type(l, "run")[0].clone();
    assert_eq!(run0(&warm)["seconds"], run0(&cold)["seconds"]);
    assert_ne!(run0(&warm)["requests"], run0(&cold)["requests"]);
    // The same flags, the same bytes.
    assert_eq!(warm, run(&["--warmup", "500us"]));
    let out = benchkv(&["--warmup", "1ms"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--warmup applies only with --world virtual:N"));
}

#[test]
fn the_poll_budget_runs_in_virtual_time_and_adds_loops_with_nothing_in_them() {
    let without = verified_run(4, "delegation", &[]);
    let with = verified_run(4, "delegation", &["--poll-budget", "16"]);
    // Daemon#0 of each rank holds the transport (delegation), so only its loops poll.
    let loops = |lines: &[Value]| -> u64 {
        of_type(lines, "metrics")
            .iter()
            .filter(|m| m["daemon"] == 0)
            .map(|m| m["loops"].as_u64().unwrap())
            .sum()
    };
    // Each extra poll costs virtual time, so the same run has fewer whole loops.
    assert!(
        loops(&with) < loops(&without),
        "{} vs {}",
        loops(&with),
        loops(&without)
    );
    assert_eq!(of_type(&with, "setup")[0]["poll_budget"], 16);
}

#[test]
fn a_stalled_nic_delays_but_loses_nothing_and_a_cut_link_fails_its_calls_once() {
    let lines = verified_run(3, "delegation", &["--vfault", "stall:1@100us+200us"]);
    let s = of_type(&lines, "summary")[0];
    assert_eq!(s["drained"], true, "{s}");

    let out = benchkv(&[
        "--world",
        "virtual:3",
        "--verify",
        "-C",
        "2",
        "--queue-depth",
        "4",
        "--duration",
        "400us",
        "--vfault",
        "cut:0-1@100us",
        "--output",
        "json",
    ]);
    // Calls on the cut link are answered `Unreachable` once the QPs give up: every
    // request is answered, the wrong ones are counted and the run fails, saying why.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let lines = json_lines(&out);
    let s = of_type(&lines, "summary")[0];
    assert_eq!(s["completed"], s["issued"], "{s}");
    assert!(s["verify_failures"].as_u64().unwrap() > 0, "{s}");
    assert!(
        text(&out.stderr).contains("Unreachable"),
        "{}",
        text(&out.stderr)
    );

    // Without --verify the statuses still count: such a run does not pass for a clean
    // one (it did: exit 0, "every request answered").
    let out = benchkv(&[
        "--world",
        "virtual:2",
        "--duration",
        "1ms",
        "--vfault",
        "cut:0-1@1us",
        "--output",
        "json",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let s = of_type(&json_lines(&out), "summary")[0].clone();
    assert!(s["error_answers"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["verify_failures"], 0, "{s}");
    assert!(
        err.contains("said the request failed") && err.contains("Unreachable"),
        "{err}"
    );
}

/// The built-in cost profile with every CPU figure (and `instructions_per_ns`) scaled by
/// `k`: what `clock_ratio` 1/k does (it leaves `line_ns`, a memory figure, alone).
fn scaled_profile(k: f64) -> String {
    copyrpc_host::vworld::DEFAULT_PROFILE
        .lines()
        .map(|l| match l.split_once(" = ") {
            Some((key, v))
                if (key.ends_with("_ns") && key != "line_ns") || key == "instructions_per_ns" =>
            {
                format!("{key} = {}", v.parse::<f64>().unwrap() * k)
            }
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_cost_profile_sets_the_figures_it_gives() {
    let dir = std::env::temp_dir().join(format!("benchkv-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (same, double) = (dir.join("same.cost"), dir.join("double.cost"));
    std::fs::write(&same, scaled_profile(1.0)).unwrap();
    std::fs::write(&double, scaled_profile(2.0)).unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--world",
            "virtual:2",
            "-C",
            "2",
            "--queue-depth",
            "2",
            "--duration",
            "300us",
            "--output",
            "json",
        ];
        args.extend_from_slice(extra);
        let out = benchkv(&args);
        assert!(out.status.success(), "{extra:?}: {}", text(&out.stderr));
        json_lines(&out)
    };
    let report = |lines: &[Value]| -> Vec<Value> {
        // The run's figures (the setup line names the profile file, which differs).
        lines
            .iter()
            .filter(|l| l["type"] != "setup")
            .cloned()
            .collect()
    };
    let builtin = run(&[]);
    let s = same.to_str().unwrap();
    let d = double.to_str().unwrap();
    // The built-in figures from a file: the same run.
    assert_eq!(report(&run(&["--cost-profile", s])), report(&builtin));
    // Every figure twice as large: what the clock ratio 1/2 gives, and a slower run.
    let doubled = run(&["--cost-profile", d]);
    assert_eq!(
        report(&doubled),
        report(&run(&["--cost", "clock_ratio=0.5"]))
    );
    let rps = |l: &[Value]| of_type(l, "run")[0]["total_rps"].as_f64().unwrap();
    assert!(
        rps(&doubled) < rps(&builtin),
        "{} against {}",
        rps(&doubled),
        rps(&builtin)
    );
    let cfg = |l: &[Value]| of_type(l, "setup")[0]["cost_profile"].clone();
    assert_eq!(cfg(&doubled), Value::from(d));
    assert!(cfg(&builtin).as_str().unwrap().starts_with("built-in ("));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_cost_profile_is_refused_naming_the_file_and_the_field() {
    let dir = std::env::temp_dir().join(format!("benchkv-badprofile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = scaled_profile(1.0);
    for (name, body, needle) in [
        (
            "version.cost",
            good.replace("copyrpc-cost-profile 1", "copyrpc-cost-profile 9"),
            "format version `9`",
        ),
        (
            "negative.cost",
            good.replacen("item_ns = ", "item_ns = -", 1),
            "item_ns = -",
        ),
        (
            "nan.cost",
            good.replacen("\nloop_ns = ", "\nloop_ns = NaN #", 1),
            "loop_ns = NaN",
        ),
        (
            "inf.cost",
            good.replacen("\npoll_ns = ", "\npoll_ns = inf #", 1),
            "poll_ns = inf",
        ),
        (
            "malformed.cost",
            good.replacen("\npost_ns = ", "\npost_ns ", 1),
            "is not `key = value`",
        ),
        (
            "missing.cost",
            good.lines()
                .filter(|l| !l.starts_with("echo_item_ns"))
                .collect::<Vec<_>>()
                .join("\n"),
            "no `echo_item_ns` line",
        ),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, body).unwrap();
        let out = benchkv(&[
            "--world",
            "virtual:2",
            "--cost-profile",
            path.to_str().unwrap(),
        ]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(
            err.contains(&format!("--cost-profile {}", path.display())),
            "{name}: {err}"
        );
        assert!(err.contains(needle), "{name}: {err}");
        assert!(out.stdout.is_empty(), "{name} ran");
    }
    let out = benchkv(&[
        "--world",
        "virtual:2",
        "--cost-profile",
        "/nonexistent/x.cost",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--cost-profile /nonexistent/x.cost: cannot read it"));
    let out = benchkv(&["--cost-profile", "/nonexistent/x.cost"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--cost-profile applies only with --world virtual:N"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_world_cost_nic_and_fault_flags_are_refused_before_anything_runs() {
    for (args, needle) in [
        (&["--world", "virtual:0"][..], "--world"),
        (&["--world", "virtual:x"], "--world"),
        (&["--world", "virtual:-1"], "--world"),
        (&["--world", "virtual:100000"], "--world"),
        (&["--world", "galaxy"], "--world"),
        (&["--world", "virtual:2", "--cost", "loop_ns=0"], "--cost"),
        (&["--world", "virtual:2", "--cost", "item_ns=-3"], "--cost"),
        (
            &["--world", "virtual:2", "--cost", "loop_ns=1e300"],
            "--cost",
        ),
        (&["--world", "virtual:2", "--cost", "speed=3"], "--cost"),
        // Loops whose floor (loop_ns and the empty polls) outlasts a quarter of the drain.
        (
            &[
                "--world",
                "virtual:2",
                "--poll-budget",
                "65536",
                "--cost",
                "poll_ns=1000",
            ],
            "--poll-budget",
        ),
        (
            &["--world", "virtual:2", "--cost", "loop_ns=1e9"],
            "loop_ns",
        ),
        // One request's answer outlasting the drain, named by its largest figure.
        (
            &["--world", "virtual:2", "--cost", "item_ns=1e9"],
            "lower item_ns",
        ),
        (
            &["--world", "virtual:2", "--cost", "post_ns=6e7,cqe_ns=5e7"],
            "lower post_ns",
        ),
        (
            &["--world", "virtual:1", "--cost", "client_ns=6e7"],
            "lower client_ns",
        ),
        (&["--world", "virtual:2", "--nic", "gbps=0"], "--nic"),
        (
            &["--world", "virtual:2", "--nic", "latency_ns=nan"],
            "--nic",
        ),
        (
            &["--world", "virtual:2", "--vfault", "stall:2@1ms+1ms"],
            "--vfault",
        ),
        (
            &["--world", "virtual:2", "--vfault", "cut:0-0@1ms"],
            "--vfault",
        ),
        (&["--world", "virtual:2", "--fabric", "verbs"], "--world"),
        (
            &["--world", "virtual:2", "--loopback-ranks", "2"],
            "--world",
        ),
        (&["--cost", "loop_ns=5"], "--cost"),
        (&["--vfault", "stall:0@1ms+1ms"], "--vfault"),
        // More memory than the machine has.
        (
            &[
                "--world",
                "virtual:64",
                "--backend",
                "meta",
                "-K",
                "2",
                "--keys",
                "100000000",
            ],
            "MiB",
        ),
    ] {
        let out = benchkv(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} ran: {}", text(&out.stdout));
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// Costs that pass the refusals (one request's least path fits the drain) but whose
/// loops outlast it: the run fails, and says how long the longest daemon loop took
/// (4 items of 40 ms here) against the drain's window. A run that drains says nothing
/// of it.
#[test]
fn a_drain_that_runs_out_names_the_longest_daemon_loop() {
    let out = benchkv(&["--world", "virtual:2", "--cost", "item_ns=4e7"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("drain incomplete"), "{err}");
    let took = err
        .split("the longest daemon loop took ")
        .nth(1)
        .and_then(|rest| rest.split(" ms").next())
        .and_then(|ms| ms.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no loop figure: {err}"));
    assert!(took >= 40.0, "{took} ms: {err}");
    assert!(err.contains("drain's 100.0 ms of virtual time"), "{err}");
    let out = benchkv(&["--world", "virtual:2"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("longest daemon loop"), "{err}");
}

#[test]
fn plot_draws_the_outstanding_time_series() {
    let path = std::env::temp_dir().join(format!("benchkv-vplot-{}.svg", std::process::id()));
    let out = benchkv(&[
        "--world",
        "virtual:2",
        "--duration",
        "200us",
        "--plot",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let svg = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(svg.starts_with("<svg"), "{svg}");
    assert_eq!(svg.matches("<polyline").count(), 4, "{svg}");
    assert!(svg.contains("outstanding"));
}

#[test]
fn the_adaptive_budget_steers_in_virtual_time_and_everything_is_answered() {
    let lines = verified_run(
        4,
        "delegation",
        &["--poll-budget", "adaptive", "--duration", "3ms"],
    );
    assert_eq!(of_type(&lines, "setup")[0]["poll_budget"], "adaptive");
    for m in of_type(&lines, "metrics")
        .into_iter()
        .filter(|m| m["daemon"] == 0)
    {
        // Past the warm-up: its bound was identified, and u stays under it.
        let u_max = m["budget_u_max"].as_u64().unwrap();
        assert!((8..=64).contains(&u_max), "{m}");
        assert!(m["poll_budget"].as_u64().unwrap() <= u_max, "{m}");
    }
    // The time series carries u.
    let samples = of_type(&lines, "sample");
    assert!(!samples.is_empty());
    assert!(samples.iter().all(|s| s["poll_budget"].is_u64()));
}

/// Mean answers per µs of rank 0 over the samples in `[from_us, to_us)`.
fn answer_rate(lines: &[Value], from_us: f64, to_us: f64) -> f64 {
    let xs: Vec<f64> = of_type(lines, "sample")
        .iter()
        .filter(|s| (from_us..to_us).contains(&s["t_us"].as_f64().unwrap()))
        .map(|s| s["answers_per_us"].as_f64().unwrap())
        .collect();
    assert!(!xs.is_empty(), "no samples in {from_us}..{to_us} µs");
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// The bistability settings (docs/spec/poll-budget.md#bistability) on a NIC no
/// ConnectX is, which collapses: 14 µs between two packets of a QP and 7 µs of NIC
/// latency (the old 7 µs packet time, which every ACK also paid on the answer's QP),
/// and free cache-line transfers (with them the loops are long enough to hold): a plant
/// for the budget's tests, not a claim about hardware,
/// JSON out.
const SEED_001_PLANT: &[&str] = &[
    "-C",
    "46",
    "--queue-depth",
    "32",
    "--rpc-ring",
    "256k",
    "--cost",
    "item_ns=40,jitter=0.3,line_ns=0",
    "--nic",
    "qp_packet_ns=14000,nic_ns=7000",
    "--output",
    "json",
];

#[test]
fn seed_001_bistability_a_cold_start_collapses_at_four_ranks_and_holds_at_two() {
    // The bistability settings on the collapsing plant above:
    // both worlds start with the same synchronised wave; with 3 peers the waves
    // disperse into 1-message batches that saturate the QPs and the answer rate falls to
    // a fraction of the first wave's, with 1 peer the two daemons stay phase-locked.
    let run = |np: &str| {
        let mut args = vec![
            "--world",
            np,
            "--duration",
            "3ms",
            "--sample-every",
            "100us",
        ];
        args.extend_from_slice(SEED_001_PLANT);
        let out = benchkv(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        json_lines(&out)
    };
    let (two, four) = (run("virtual:2"), run("virtual:4"));
    let (early2, late2) = (
        answer_rate(&two, 0.0, 600.0),
        answer_rate(&two, 2000.0, 3000.0),
    );
    let (early4, late4) = (
        answer_rate(&four, 0.0, 600.0),
        answer_rate(&four, 2000.0, 3000.0),
    );
    assert!(
        late2 > 0.7 * early2,
        "2 ranks fell: {early2:.2} -> {late2:.2} answers/µs"
    );
    assert!(
        late4 < 0.4 * early4,
        "4 ranks held: {early4:.2} -> {late4:.2} answers/µs"
    );
    let mean = |l: &[Value]| of_type(l, "metrics")[0]["cqe_batch_mean"].as_f64().unwrap();
    assert!(mean(&four) < 1.0, "4 ranks' CQE batch mean {}", mean(&four));
}

/// Per-rank M req/s of each 1 ms run after the first `skip`, averaged (the steady state
/// without the cold start; docs/PERFORMANCE.md, "Adaptive poll budget").
fn steady_rate(plant: &[&str], runs: &str, skip: usize, budget: &str) -> f64 {
    let mut args = vec!["--duration", "1ms", "--runs", runs, "--output", "json"];
    args.extend_from_slice(plant);
    args.extend_from_slice(&["--poll-budget", budget]);
    let out = benchkv(&args);
    assert!(out.status.success(), "{budget}: {}", text(&out.stderr));
    let lines = json_lines(&out);
    assert_eq!(of_type(&lines, "summary")[0]["drained"], true, "{budget}");
    let rates: Vec<f64> = of_type(&lines, "run")
        .iter()
        .skip(skip)
        .map(|r| r["total_rps"].as_f64().unwrap())
        .collect();
    assert!(!rates.is_empty());
    rates.iter().sum::<f64>() / rates.len() as f64 / 4e6
}

/// The budget the regression test runs as "adaptive": `BUDGET_REGRESSION_AS=1` (or `off`,
/// `16`) puts a fixed budget in the controller's place, to show the test fails without it.
fn adaptive_or_stand_in() -> String {
    std::env::var("BUDGET_REGRESSION_AS").unwrap_or_else(|_| "adaptive".into())
}

/// Issue 48: the adaptive budget against the fixed budgets that each lose one of two
/// plants. With 5 µs extra polls on the default NIC (nothing collapses) any budget costs
/// half the rate, so 1 and the bound (16) lose; on the collapsing plant of docs/spec/poll-budget.md#bistability
/// (12 µs QP packets, 1 µs extra polls, on the calibrated costs) no budget collapses from
/// the second run on, where a fixed 1 holds, so 0 loses. Deterministic, so no flake.
#[test]
fn the_adaptive_budget_beats_a_fixed_budget_of_one_zero_and_its_bound() {
    let adaptive = adaptive_or_stand_in();
    let costly: &[&str] = &[
        "--world",
        "virtual:4",
        "-C",
        "16",
        "--queue-depth",
        "16",
        "--cost",
        "item_ns=40,jitter=0.3,poll_ns=5000",
    ];
    // Runs 1 and 2: the settling and identification (docs/PERFORMANCE.md).
    let a = steady_rate(costly, "8", 2, &adaptive);
    for fixed in ["1", "16"] {
        let f = steady_rate(costly, "8", 2, fixed);
        assert!(
            a > 1.3 * f,
            "costly polls: {adaptive} {a:.2} M req/s per rank, fixed {fixed} {f:.2}"
        );
    }
    let collapsing: &[&str] = &[
        "--world",
        "virtual:4",
        "-C",
        "46",
        "--queue-depth",
        "32",
        "--rpc-ring",
        "256k",
        "--cost",
        "jitter=0.3,client_idle_ns=500,poll_ns=1000",
        "--nic",
        "qp_packet_ns=12000",
    ];
    let a = steady_rate(collapsing, "6", 1, &adaptive);
    let off = steady_rate(collapsing, "6", 1, "off");
    assert!(
        a > 3.0 * off,
        "collapsing plant: {adaptive} {a:.2} M req/s per rank, off {off:.2}"
    );
}

/// Every rank's NIC maps its own region and every peer's, which is thousands of
/// mappings in a large world: they must not each hold a file descriptor, or a world of
/// 32 ranks outgrows a soft `RLIMIT_NOFILE` of 256 (many systems start at 1 024).
#[test]
fn a_world_of_32_ranks_runs_within_256_file_descriptors() {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_benchkv"));
    cmd.args(["--keys", "4096", "--pattern-len", "1024"]).args([
        "--world",
        "virtual:32",
        "--duration",
        "1ms",
        "--output",
        "json",
    ]);
    // SAFETY: only setrlimit (async-signal-safe) runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 256,
                rlim_max: 256,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let out = cmd.output().expect("benchkv runs");
    assert!(
        out.status.success(),
        "virtual:32 under 256 descriptors failed:\n{}",
        text(&out.stderr)
    );
}
