//! `mpirun -np N copyrpc-echo` on the sim fabric: N processes, each with its own device
//! model and `/dev/shm` region, connected through records exchanged over MPI, echo over
//! copyrpc. Every rank's line is checked, not only rank 0's.
//!
//! MPI is a CI requirement (`scripts/setup.sh` installs Open MPI), so a missing `mpirun`
//! fails this test rather than skipping it.

use std::path::Path;
use std::process::Output;

use copyrpc_host::exchange::launch::{run_local, run_local_ok};

const EXE: &str = env!("CARGO_BIN_EXE_copyrpc-echo");
const TIMEOUT_S: u32 = 120;

/// `mpirun -np <np> copyrpc-echo <args>`, which must succeed.
fn run(np: usize, args: &[&str]) -> Output {
    run_local_ok(Some(np), Path::new(EXE), args, TIMEOUT_S).unwrap_or_else(|e| panic!("{e}"))
}

/// Every rank printed one `ok` line with the counts `calls` per peer imply.
fn assert_ranks_ok(out: &Output, n: u64, calls: u64) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("FAIL"), "a rank failed:\n{stdout}");
    let per_rank = calls * (n - 1);
    for r in 0..n {
        let prefix = format!("rank {r}/{n}: ");
        let lines: Vec<_> = stdout.lines().filter(|l| l.starts_with(&prefix)).collect();
        assert_eq!(lines.len(), 1, "rank {r} reports once:\n{stdout}");
        let l = lines[0];
        assert!(l.ends_with(": ok"), "{l}");
        for want in [
            format!("responses={per_rank} "),
            format!("served={per_rank} "),
            format!("total_responses={} ", per_rank * n),
            format!("total_served={} ", per_rank * n),
        ] {
            assert!(l.contains(&want), "rank {r}: want {want:?} in {l}");
        }
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("using the software device model (sim)")
            || stderr.contains("`sim` requested"),
        "the fabric choice is reported:\n{stderr}"
    );
}

#[test]
fn two_ranks_echo_under_mpirun_on_the_sim_fabric() {
    let out = run(2, &["--calls", "5000"]);
    assert_ranks_ok(&out, 2, 5000);
}

#[test]
fn three_ranks_echo_under_mpirun_with_an_explicit_sim_fabric() {
    let out = run(
        3,
        &[
            "--fabric",
            "sim",
            "--calls",
            "1000",
            "--max-payload",
            "4000",
        ],
    );
    assert_ranks_ok(&out, 3, 1000);
}

#[test]
fn verbs_without_a_device_fails_every_rank_with_the_fix_named() {
    let out = run_local(Some(2), Path::new(EXE), &["--fabric", "verbs"], TIMEOUT_S)
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("rank 0/2: FAIL") && stdout.contains("rank 1/2: FAIL"),
        "{stdout}"
    );
    assert!(stdout.contains("--fabric sim"), "{stdout}");
}

/// Ranks started with another `--calls` (an `mpirun A : B`) fail at once naming it,
/// instead of one waiting out the deadline for calls the other never makes.
#[test]
fn ranks_started_with_different_calls_fail_at_once_naming_the_option() {
    let exe = Path::new(EXE);
    let out = copyrpc_host::exchange::launch::run_local_mpmd(
        &[
            (exe, &["--fabric", "sim", "--calls", "100"]),
            (exe, &["--fabric", "sim", "--calls", "5000"]),
        ],
        TIMEOUT_S,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "the mismatched job ran: {stdout}");
    assert!(
        stdout.contains("was started with another --calls than this rank's"),
        "no rank named the differing --calls:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !stdout.contains("FAIL echo on"),
        "it waited for the deadline:\n{stdout}"
    );
}

/// Ranks started with another `--tclass` or `--sl` fail at once naming it: connected,
/// their traffic would sit in two classes of the fabric.
#[test]
fn ranks_started_with_different_tclass_or_sl_fail_naming_the_flag() {
    let exe = Path::new(EXE);
    for (flag, a, b) in [("--tclass", "0", "106"), ("--sl", "3", "0")] {
        let out = copyrpc_host::exchange::launch::run_local_mpmd(
            &[
                (exe, &["--fabric", "sim", "--calls", "100", flag, a]),
                (exe, &["--fabric", "sim", "--calls", "100", flag, b]),
            ],
            TIMEOUT_S,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "the mismatched job ran: {stdout}");
        assert!(
            stdout.contains(&format!("was started with another {flag} than this rank's")),
            "no rank named the differing {flag}:\n{stdout}"
        );
    }
}
