//! `mpirun -np 2 copyrpc-bulk` on the sim fabric: two processes, each with its own device
//! model, moving 10 MiB by each bulk pattern (PUT, GET, both), every transfer checked by
//! checksum on the side that receives it.

use std::path::Path;

use copyrpc_host::exchange::launch::{run_local, run_local_ok};

const EXE: &str = env!("CARGO_BIN_EXE_copyrpc-bulk");
const TIMEOUT_S: u32 = 180;

#[test]
fn two_ranks_move_10_mib_by_each_pattern_under_mpirun() {
    let out = run_local_ok(
        Some(2),
        Path::new(EXE),
        &["--pattern", "all", "--sizes", "10M", "--iters", "1"],
        TIMEOUT_S,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("FAIL"), "a rank failed:\n{stdout}");
    for p in ["put", "get", "both"] {
        let want = format!("rank 0/2: {p} 10485760 B x 1: ");
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&want))
            .unwrap_or_else(|| panic!("no {p} progress line:\n{stdout}"));
        assert!(line.ends_with("MiB/s ok"), "{line}");
    }
    assert!(stdout.contains("rank 0/2: calls=4 ok"), "{stdout}");
    assert!(stdout.contains("rank 1/2: served=4 ok"), "{stdout}");
}

#[test]
fn one_rank_is_refused_with_the_fix_named() {
    let out = run_local(Some(1), Path::new(EXE), &["--sizes", "1K"], TIMEOUT_S)
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(
        stdout.contains("FAIL needs exactly 2 ranks (mpirun -np 2)"),
        "{stdout}"
    );
}

/// A transfer slower than `--deadline-s` (16 MiB in 1-byte operations) ends both
/// ranks at about that bound, each saying why. The server used to go on with the
/// cancelled transfer, and the client's failure was printed only after the final
/// barrier: the job ran until the barrier's own 300 s bound.
#[test]
fn a_transfer_past_the_deadline_ends_both_ranks_naming_it() {
    let args = [
        "--pattern",
        "put",
        "--sizes",
        "16M",
        "--chunk",
        "1",
        "--iters",
        "1",
        "--deadline-s",
        "2",
    ];
    let out = run_local(Some(2), Path::new(EXE), &args, 120).unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("rank 0/2: FAIL Put: no reply from rank 1 within 2s"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("rank 1/2: FAIL a transfer still running 2s after its request"),
        "{stdout}\n{stderr}"
    );
    assert!(!stderr.contains("did not complete within"), "{stderr}");
}

/// Bad sizes name the flag they came from (they said only `size "0"`).
#[test]
fn bad_sizes_name_their_flag() {
    for (flag, v) in [
        ("--chunk", "0"),
        ("--sizes", ""),
        ("--sizes", "1K,2G"),
        ("--tclass", "256"),
        ("--sl", "16"),
        ("--port", "0"),
        ("--gid-index", "256"),
    ] {
        let out = std::process::Command::new(EXE)
            .args([flag, v])
            .output()
            .expect("copyrpc-bulk runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {v:?}: {err}");
        assert!(err.contains(&format!("{flag}:")), "{flag} {v:?}: {err}");
    }
}

/// Ranks with another `--sl` are refused when they connect, each naming the flag and
/// both values (the endpoint records carry them), instead of running in two classes.
#[test]
fn ranks_with_another_sl_refuse_to_connect_naming_the_flag() {
    let exe = Path::new(EXE);
    let out = copyrpc_host::exchange::launch::run_local_mpmd(
        &[
            (exe, &["--sizes", "1K", "--sl", "3"]),
            (exe, &["--sizes", "1K", "--sl", "0"]),
        ],
        TIMEOUT_S,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    for r in 0..2 {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("rank {r}/2: FAIL")))
            .unwrap_or_else(|| panic!("rank {r} did not fail:\n{stdout}"));
        assert!(line.contains("--sl 3") && line.contains("--sl 0"), "{line}");
    }
}
