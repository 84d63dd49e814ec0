//! The MPI exchange across real processes: `mpirun -np N copyrpc-mpi-selftest` (the
//! binary in `src/bin/`), with a bounded run time, asserting every rank's report.
//!
//! MPI is a CI requirement (`scripts/setup.sh` installs Open MPI), so a missing `mpirun`
//! fails this test. The Open MPI settings (run as root, oversubscribe the 2-core
//! machines, shared-memory transport only) are passed as `OMPI_*` environment variables,
//! which `scripts/test.sh` exports too and other MPIs ignore.

use std::path::Path;
use std::process::Output;

use copyrpc_host::exchange::launch::{run_local, run_local_ok};

const EXE: &str = env!("CARGO_BIN_EXE_copyrpc-mpi-selftest");
/// Generous: a 2-rank Open MPI start takes about 0.2 s here.
const TIMEOUT_S: u32 = 120;

/// `args[0]` is "mpirun" (with "-np", N) or the program alone; the job must succeed.
fn run(args: &[&str]) -> Output {
    let np = (args[0] == "mpirun").then(|| args[2].parse().unwrap());
    let rest = if np.is_some() { &args[4..] } else { &args[1..] };
    run_local_ok(np, Path::new(EXE), rest, TIMEOUT_S).unwrap_or_else(|e| panic!("{e}"))
}

/// Every rank 0..n printed exactly one `rank r/n: ... ok` line, and nothing failed.
fn assert_ranks_ok(out: &Output, n: usize) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("FAIL"), "a rank failed:\n{stdout}");
    for r in 0..n {
        let prefix = format!("rank {r}/{n}: ");
        let lines: Vec<_> = stdout.lines().filter(|l| l.starts_with(&prefix)).collect();
        assert_eq!(lines.len(), 1, "rank {r} reports once:\n{stdout}");
        assert!(lines[0].ends_with(": ok"), "rank {r}: {}", lines[0]);
        assert!(lines[0].contains("all_to_all x3 ok"), "{}", lines[0]);
    }
    assert_eq!(stdout.lines().count(), n, "one line per rank:\n{stdout}");
}

#[test]
fn two_ranks_under_mpirun() {
    let out = run(&["mpirun", "-np", "2", EXE]);
    assert_ranks_ok(&out, 2);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("sum_u64=3 max_u64=10 sum_f64=1.5"),
        "{stdout}"
    );
}

#[test]
fn three_ranks_under_mpirun() {
    // An odd count, so a rank's peers are not just "the other one".
    let out = run(&["mpirun", "-np", "3", EXE]);
    assert_ranks_ok(&out, 3);
}

#[test]
fn singleton_without_mpirun() {
    let out = run(&[EXE]);
    assert_ranks_ok(&out, 1);
}

/// Issue 23: a rank that stops (SIGSTOP) before a barrier used to leave the others in
/// `MPI_Barrier` forever. Every collective is now bounded: the others abort the job after
/// the timeout, saying which collective they waited in.
#[test]
fn a_stopped_rank_makes_the_barrier_abort_the_job_at_the_timeout() {
    let t0 = std::time::Instant::now();
    let out = run_local(
        Some(3),
        Path::new(EXE),
        &["--stall-rank", "1", "--timeout-ms", "1500"],
        TIMEOUT_S,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the job succeeded: {err}");
    assert!(
        err.contains("error: MPI barrier did not complete within 1.5 s"),
        "no rank named the stuck barrier:\n{err}"
    );
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(60),
        "took {:?}",
        t0.elapsed()
    );
    // The two ranks that aborted removed their regions; only the stopped rank's (killed
    // by mpirun, no clean-up) may be left.
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("copyrpc-selftest-"))
        .collect();
    for n in &left {
        let _ = std::fs::remove_file(format!("/dev/shm/{n}"));
    }
    assert!(
        left.len() <= 1,
        "regions left by the aborting ranks: {left:?}\n{err}"
    );
}

/// A stall the job cannot end is refused: a rank that does not exist, or a single rank.
#[test]
fn a_stall_rank_past_the_ranks_or_alone_is_refused() {
    for (np, args) in [(2, ["--stall-rank", "7"]), (1, ["--stall-rank", "0"])] {
        let out =
            run_local(Some(np), Path::new(EXE), &args, TIMEOUT_S).unwrap_or_else(|e| panic!("{e}"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "-np {np} {args:?}: {err}");
        assert!(err.contains("--stall-rank"), "-np {np} {args:?}: {err}");
    }
}
