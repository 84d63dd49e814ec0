//! The copyrpc binaries' command lines: every bad value of every flag is a one-line
//! error naming the flag and exit status 2, before MPI starts, never a panic; and a
//! `--max-payload` the rings cannot carry is refused at once instead of stalling until
//! the deadline.
//!
//! Each run is bounded (`run_local`: killed after `TIMEOUT_S`).

use std::path::Path;
use std::process::Output;

use copyrpc_host::exchange::launch::run_local;

const ECHO: &str = env!("CARGO_BIN_EXE_copyrpc-echo");
const SELFTEST: &str = env!("CARGO_BIN_EXE_copyrpc-mpi-selftest");
const TIMEOUT_S: u32 = 30;

fn run(np: Option<usize>, exe: &str, args: &[&str]) -> Output {
    run_local(np, Path::new(exe), args, TIMEOUT_S).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Exit status 2, `needle` (the flag) on stderr, and no trace of a panic.
fn assert_refused(out: &Output, args: &[&str], needle: &str) {
    let err = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?}: usage errors exit 2\nstdout: {}\nstderr: {err}",
        text(&out.stdout)
    );
    assert!(err.contains(needle), "{args:?}: {needle:?} not in: {err}");
    let lower = err.to_lowercase();
    assert!(
        !lower.contains("panicked") && !lower.contains("backtrace"),
        "{args:?} panicked: {err}"
    );
}

const HUGE: &str = "340282366920938463463374607431768211456"; // 2^128
const U64_MAX: &str = "18446744073709551615";

#[test]
fn item5_every_bad_value_of_every_echo_flag_is_a_clear_error_not_a_panic() {
    let mut table: Vec<(Vec<&str>, &str)> = Vec::new();
    for (flag, bad) in [
        (
            "--calls",
            &["0", "-1", U64_MAX, "4294967296", HUGE, "ten", "", "1.5"][..],
        ),
        (
            "--max-payload",
            &["-1", U64_MAX, "1000000000000", HUGE, "1k", ""],
        ),
        (
            "--rpc-ring",
            &["3k", "2k", "512k", "8m", "1g", "abc", "", "-16k"],
        ),
        (
            "--deadline-s",
            &["0", "-1", U64_MAX, "604801", HUGE, "soon", "", "1.5"],
        ),
        ("--fabric", &["0", "rxe", ""]),
        ("--port", &["0", "-1", "256", U64_MAX, "one", ""]),
        ("--gid-index", &["-1", "256", U64_MAX, "v2", ""]),
        ("--device", &["", "../mlx5_0"]),
        ("--tclass", &["256", "-1", "af41", ""]),
        ("--sl", &["16", "-1", "255", ""]),
        ("--window", &["0", "513", "-1", ""]),
    ] {
        for v in bad {
            table.push((vec![flag, v], flag));
        }
        // The flag last, with no value.
        table.push((vec!["--calls", "5", flag], flag));
    }
    table.push((vec!["--no-such-flag"], "--no-such-flag"));
    table.push((vec!["-x", "1"], "-x"));
    table.push((vec!["--calls", "5", "stray"], "stray"));
    table.push((vec!["--fabric", "sim", "--device", "mlx5_0"], "--device"));
    // Above what 16 KiB rings carry, with 16 KiB rings (auto would grow the ring).
    for v in ["4033", "4200"] {
        table.push((
            vec!["--rpc-ring", "16k", "--max-payload", v],
            "--max-payload",
        ));
        table.push((
            vec!["--max-payload", v, "--rpc-ring", "16k"],
            "--max-payload",
        ));
    }
    for (args, needle) in &table {
        let out = run(None, ECHO, args);
        assert_refused(&out, args, needle);
    }
    // The range is in the message, so the user sees what would be accepted.
    let out = run(None, ECHO, &["--max-payload", U64_MAX, "--rpc-ring", "16k"]);
    assert!(
        text(&out.stderr).contains("carries is 4032"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn item5_help_is_not_an_error() {
    let out = run(None, ECHO, &["--help"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("--max-payload"));
    for flag in [
        "--device",
        "--port",
        "--gid-index",
        "--rpc-ring",
        "--tclass",
        "--sl",
        "--window",
    ] {
        assert!(text(&out.stdout).contains(flag), "{flag} not in --help");
    }
}

#[test]
fn item5_the_mpi_selftest_refuses_arguments_it_does_not_take() {
    for args in [&["--calls", "5"][..], &["-1"], &[U64_MAX]] {
        let out = run(None, SELFTEST, args);
        assert_refused(&out, args, args[0]);
    }
}

/// Above 4032 B (16 KiB rings, reservation cap 4 KiB: 126 blocks of response allowance
/// cost the whole 4096 B of credit a peer can hold) a call could never be paid for. Two
/// ranks used to retry such calls until their deadline; the run must instead fail
/// before it starts, well within a deadline it was given generously.
#[test]
fn item2_a_max_payload_the_rings_cannot_carry_fails_at_once_naming_the_limit() {
    let args = [
        "--max-payload",
        "4200",
        "--rpc-ring",
        "16k",
        "--deadline-s",
        "60",
    ];
    let out = run(Some(2), ECHO, &args);
    assert!(!out.status.success(), "{args:?} succeeded");
    let err = text(&out.stderr);
    assert!(
        err.contains("--max-payload 4200 does not fit --rpc-ring 16 KiB")
            && err.contains("carries is 4032"),
        "{err}"
    );
    assert!(!text(&out.stdout).contains("FAIL deadline"));
    // A ring too small for the default payload names the default, not a flag the user
    // never gave as if they had.
    let out = run(Some(1), ECHO, &["--rpc-ring", "4k"]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--max-payload 1024 (the default) does not fit --rpc-ring 4 KiB"),
        "{err}"
    );
}

/// The limit is not too strict: two ranks echo with payloads (and response allowances)
/// up to exactly the largest `--max-payload` accepted.
#[test]
fn the_largest_accepted_max_payload_echoes() {
    let args = [
        "--rpc-ring",
        "16k",
        "--max-payload",
        "4032",
        "--calls",
        "400",
        "--deadline-s",
        "25",
    ];
    let out = run(Some(2), ECHO, &args);
    let stdout = text(&out.stdout);
    assert!(
        out.status.success() && stdout.matches(": ok").count() == 2,
        "{args:?}: {}\n{stdout}\n{}",
        out.status,
        text(&out.stderr)
    );
}

/// A sysfs tree with one RoCE port whose table holds RoCE v1 and v2 link-local and
/// IPv4 entries (indices 0..=3) and one empty slot (4), for libibverbs' `SYSFS_PATH`.
fn roce_sysfs(tag: &str) -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!("copyrpc-cli-sysfs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let port = root.join("class/infiniband/mlx5_0/ports/1");
    for d in ["gids", "gid_attrs/types", "gid_attrs/ndevs"] {
        std::fs::create_dir_all(port.join(d)).unwrap();
    }
    std::fs::write(port.join("link_layer"), "Ethernet\n").unwrap();
    let ll = "fe80:0000:0000:0000:0a00:27ff:fe4e:66a1";
    let v4 = "0000:0000:0000:0000:0000:ffff:0a00:0001";
    let zero = "0000:0000:0000:0000:0000:0000:0000:0000";
    for (i, (ty, gid)) in [
        (Some("IB/RoCE v1"), ll),
        (Some("RoCE v2"), ll),
        (Some("IB/RoCE v1"), v4),
        (Some("RoCE v2"), v4),
        (None, zero),
    ]
    .iter()
    .enumerate()
    {
        std::fs::write(port.join(format!("gids/{i}")), format!("{gid}\n")).unwrap();
        if let Some(ty) = ty {
            std::fs::write(port.join(format!("gid_attrs/types/{i}")), format!("{ty}\n")).unwrap();
            std::fs::write(port.join(format!("gid_attrs/ndevs/{i}")), "eth0\n").unwrap();
        }
    }
    root
}

/// A `--gid-index` past the port's table, of an empty slot or of a RoCE v1 entry is
/// refused before MPI, naming the flag, with exit status 2 (the table read from
/// `SYSFS_PATH`, where libibverbs would read it).
#[test]
fn a_gid_index_past_the_table_or_of_a_roce_v1_entry_exits_2_naming_the_flag() {
    let root = roce_sysfs("gid");
    let sysfs = format!("SYSFS_PATH={}", root.display());
    for (index, needle) in [
        ("9", "past the port's GID table"),
        ("0", "RoCE v1"),
        ("4", "empty"),
    ] {
        for device in [&["--device", "mlx5_0"][..], &[]] {
            let mut args = vec![
                sysfs.as_str(),
                ECHO,
                "--fabric",
                "verbs",
                "--gid-index",
                index,
            ];
            args.extend_from_slice(device);
            let out = run(None, "env", &args);
            assert_refused(&out, &args, &format!("--gid-index {index}"));
            assert!(
                text(&out.stderr).contains(needle),
                "{args:?}: {}",
                text(&out.stderr)
            );
        }
    }
    // A RoCE v2 index passes the check, and the run goes on to the open, which finds no
    // device behind the fixture (exit 1, not 2).
    let args = [
        sysfs.as_str(),
        ECHO,
        "--fabric",
        "verbs",
        "--gid-index",
        "3",
    ];
    let out = run(None, "env", &args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{args:?}: {}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stdout).contains("no RDMA device"),
        "{}",
        text(&out.stdout)
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// `--world virtual:N`: every rank's line says every call was answered (the echo checks
/// each answer's bytes itself); the same flags print the same bytes, another seed others.
#[test]
fn a_virtual_echo_of_four_ranks_answers_everything_and_is_deterministic() {
    let args = [
        "--world",
        "virtual:4",
        "--calls",
        "200",
        "--cost",
        "jitter=0.2",
    ];
    let out = run(None, ECHO, &args);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    for (r, l) in lines[..4].iter().enumerate() {
        assert!(
            l.starts_with(&format!("rank {r}/4: responses=600 served=600 "))
                && l.contains("total_responses=2400")
                && l.ends_with(": ok"),
            "{l}"
        );
    }
    assert!(
        lines[4].starts_with("virtual:4: 2400 calls in "),
        "{}",
        lines[4]
    );
    assert_eq!(
        run(None, ECHO, &args).stdout,
        out.stdout,
        "same flags, same bytes"
    );
    let mut seeded = args.to_vec();
    seeded.extend(["--seed", "9"]);
    assert_ne!(
        run(None, ECHO, &seeded).stdout,
        out.stdout,
        "another seed, another run"
    );
}

#[test]
fn bad_virtual_world_flags_are_refused_naming_the_flag() {
    for (args, needle) in [
        (&["--world", "virtual:0"][..], "--world"),
        (&["--world", "virtual:1"], "--world"),
        (&["--world", "virtual:66"], "--world"),
        (&["--world", "virtual:two"], "--world"),
        (&["--world", "galaxy"], "--world"),
        (&["--cost", "loop_ns=5"], "--cost"),
        (&["--nic", "gbps=5"], "--nic"),
        (&["--world", "virtual:2", "--cost", "loop_ns=-1"], "--cost"),
        (&["--world", "virtual:2", "--nic", "speed=1"], "--nic"),
        (&["--world", "virtual:2", "--fabric", "verbs"], "--world"),
        (&["--cost-profile", "x.cost"], "--cost-profile"),
        (
            &[
                "--world",
                "virtual:2",
                "--cost-profile",
                "/nonexistent/x.cost",
            ],
            "--cost-profile /nonexistent/x.cost: cannot read it",
        ),
        (
            &["--world", "virtual:2", "--nic", "wqe_ns=7000"],
            "wqe_ns was split",
        ),
    ] {
        assert_refused(&run(None, ECHO, args), args, needle);
    }
    // A profile of another format version, or with a negative figure, names the file and
    // the field.
    let dir = std::env::temp_dir().join(format!("echo-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = copyrpc_host::vworld::DEFAULT_PROFILE;
    for (name, body, needle) in [
        (
            "v2.cost",
            good.replace("copyrpc-cost-profile 1", "copyrpc-cost-profile 2"),
            "format version `2`",
        ),
        (
            "neg.cost",
            good.replacen("echo_item_ns = ", "echo_item_ns = -", 1),
            "echo_item_ns = -",
        ),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, body).unwrap();
        let p = path.to_str().unwrap();
        let args = ["--world", "virtual:2", "--cost-profile", p];
        let out = run(None, ECHO, &args);
        assert_refused(&out, &args, &format!("--cost-profile {p}: line"));
        assert_refused(&out, &args, needle);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
