//! Chaos under `mpirun` (issue 23): three ranks, one of them SIGKILLed or SIGSTOPped in the
//! middle of a run. The job must end by itself, non-zero, within the drain timeout plus
//! the stop margin (plus start-up), with a message naming the rank that stalled; the next
//! run on the same machine must clean up what the dead job left in `/dev/shm` and pass
//! `--verify`.
//!
//! The victim is found by an environment tag this test gives the job (mpirun passes it to
//! every rank) and the rank number Open MPI puts in each rank's environment.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use copyrpc_host::exchange::launch::run_local_ok;

/// Drain timeout of the victim's job; the watchdog adds 5 s after it.
const DRAIN: &str = "2s";
/// How long the job may take to end once the victim is hit: drain + margin + slack for a
/// loaded 2-core machine and mpirun's tear-down.
const END_WITHIN: Duration = Duration::from_secs(60);

struct Job {
    child: Child,
    tag: String,
    stderr: mpsc::Receiver<String>,
}

fn start(tag: &str) -> Job {
    let mut child = Command::new("mpirun")
        .args(["-np", "3", "-x", "BENCHKV_CHAOS_TAG"])
        .arg(env!("CARGO_BIN_EXE_benchkv"))
        .args([
            "--pin",
            "off",
            "--keys",
            "4096",
            "--duration",
            "8s",
            "--drain-timeout",
            DRAIN,
            "--verify",
        ])
        .env("BENCHKV_CHAOS_TAG", tag)
        // Root allowed, oversubscription, shared-memory transport: what every other MPI
        // test here runs with (`run_local`), so `cargo test` works outside scripts/test.sh.
        .envs(copyrpc_host::exchange::launch::LOCAL_OMPI_ENV)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun runs (scripts/setup.sh installs Open MPI)");
    let err = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Job {
        child,
        tag: tag.to_owned(),
        stderr: rx,
    }
}

/// Lines of stderr until one contains `needle` (returned with everything before it).
fn wait_for_line(job: &Job, needle: &str, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match job.stderr.recv_timeout(left) {
            Ok(l) => {
                let hit = l.contains(needle);
                seen.push(l);
                if hit {
                    return seen;
                }
            }
            Err(_) => panic!("no stderr line with {needle:?} within {within:?}: {seen:#?}"),
        }
    }
}

/// The pid of rank `rank` of the job tagged `tag`.
fn rank_pid(tag: &str, rank: u32) -> u32 {
    let want_tag = format!("BENCHKV_CHAOS_TAG={tag}");
    let want_rank = format!("OMPI_COMM_WORLD_RANK={rank}");
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let vars: Vec<&[u8]> = env.split(|&b| b == 0).collect();
        if vars.contains(&want_tag.as_bytes()) && vars.contains(&want_rank.as_bytes()) {
            return pid;
        }
    }
    panic!("rank {rank} of job {tag} not found in /proc");
}

/// Waits (bounded) for the job to end; returns its status and the rest of its stderr.
fn finish(mut job: Job, within: Duration) -> (ExitStatus, Vec<String>) {
    let deadline = Instant::now() + within;
    let mut lines = Vec::new();
    loop {
        while let Ok(l) = job.stderr.try_recv() {
            lines.push(l);
        }
        if let Some(st) = job.child.try_wait().unwrap() {
            // The reader thread ends at EOF; take what it still holds.
            while let Ok(l) = job.stderr.recv_timeout(Duration::from_secs(5)) {
                lines.push(l);
            }
            return (st, lines);
        }
        if Instant::now() > deadline {
            let _ = job.child.kill();
            panic!(
                "job {} did not end within {within:?} after the fault: {lines:#?}",
                job.tag
            );
        }
        // Waiting for another process to exit: a bounded poll, not a synchronisation.
        let _ = job
            .stderr
            .recv_timeout(Duration::from_millis(50))
            .map(|l| lines.push(l));
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a pid we found; a vanished pid only returns ESRCH.
    unsafe { libc::kill(pid as i32, sig) };
}

/// No `/dev/shm` region of `pid` (benchkv's or the sim fabric's) is left.
fn no_regions_of(pid: u32) -> bool {
    let (b, s) = (format!("benchkv_{pid}_"), format!("copyrpc-sim-{pid}-"));
    std::fs::read_dir("/dev/shm").unwrap().flatten().all(|e| {
        let n = e.file_name().to_string_lossy().into_owned();
        !n.starts_with(&b) && !n.starts_with(&s)
    })
}

/// Waits (bounded) until none of `pids` exists: dead processes are reaped by their
/// parent (mpirun, or init once it is gone), and until then their pids still exist.
fn wait_gone(pids: &[u32]) {
    let t0 = Instant::now();
    while pids
        .iter()
        .any(|p| Path::new(&format!("/proc/{p}")).exists())
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "a process of the job never went away: {pids:?}"
        );
        std::thread::yield_now();
    }
}

/// The next job on this machine cleans up and verifies.
fn next_run_is_clean(victims: &[u32]) {
    // Until the victims are gone their regions are, rightly, not swept.
    wait_gone(victims);
    let out = run_local_ok(
        Some(3),
        Path::new(env!("CARGO_BIN_EXE_benchkv")),
        &[
            "--pin",
            "off",
            "--keys",
            "4096",
            "--duration",
            "300ms",
            "--verify",
        ],
        180,
    )
    .unwrap_or_else(|e| panic!("the run after the fault failed: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("0 wrong"), "{text}");
    for &p in victims {
        assert!(no_regions_of(p), "regions of dead pid {p} left in /dev/shm");
    }
}

/// One chaos job at a time: two 3-rank jobs at once on 2 cores would slow each other
/// past any sensible bound.
static ONE_JOB: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn hit_rank_1(tag: &str, sig: i32) -> (ExitStatus, String, Vec<u32>) {
    let job = start(tag);
    // Mid-run: the first progress line (runs longer than 3 s print one each second).
    wait_for_line(&job, "run 1/1", Duration::from_secs(120));
    let victim = rank_pid(tag, 1);
    let others = [rank_pid(tag, 0), rank_pid(tag, 2)];
    signal(victim, sig);
    let t0 = Instant::now();
    let (st, lines) = finish(job, END_WITHIN);
    // A stopped victim is killed by mpirun's tear-down; make sure, for the next run.
    signal(victim, libc::SIGKILL);
    signal(victim, libc::SIGCONT);
    eprintln!("job ended {:?} after the signal", t0.elapsed());
    let mut pids = vec![victim];
    pids.extend(others);
    (st, lines.join("\n"), pids)
}

#[test]
fn a_sigkilled_rank_ends_the_job_naming_it_and_the_next_run_is_clean() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let tag = format!("kill{}", std::process::id());
    let (st, err, pids) = hit_rank_1(&tag, libc::SIGKILL);
    assert!(!st.success(), "the job succeeded without rank 1: {err}");
    assert!(
        err.contains("rank 1"),
        "nothing names the killed rank 1:\n{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    next_run_is_clean(&pids);
}

#[test]
fn item7_a_sigstopped_rank_ends_the_job_naming_it_and_the_next_run_is_clean() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let tag = format!("stop{}", std::process::id());
    let (st, err, pids) = hit_rank_1(&tag, libc::SIGSTOP);
    assert!(
        !st.success(),
        "the job succeeded with rank 1 stopped: {err}"
    );
    assert!(
        err.contains("rank 1 is not making progress") && err.contains("STOPPED"),
        "the survivors did not name the stopped rank 1:\n{err}"
    );
    assert!(
        err.contains("the barrier after the drain"),
        "the message does not say what was waited for:\n{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // The survivors end by their watchdog or by mpirun's SIGTERM: either way they
    // remove their own regions (the sim fabric's too), before any sweep.
    wait_gone(&pids[1..]);
    for &p in &pids[1..] {
        assert!(
            no_regions_of(p),
            "regions of surviving rank pid {p} left in /dev/shm:\n{err}"
        );
    }
    next_run_is_clean(&pids);
}

/// Ctrl-C on `mpirun`: it passes SIGTERM to the ranks, and each unlinks its own regions
/// before it ends, without waiting for a later run's sweep.
#[test]
fn ctrl_c_on_mpirun_leaves_no_region_of_any_rank() {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let tag = format!("int{}", std::process::id());
    let job = start(&tag);
    wait_for_line(&job, "run 1/1", Duration::from_secs(120));
    let pids: Vec<u32> = (0..3).map(|r| rank_pid(&tag, r)).collect();
    signal(job.child.id(), libc::SIGINT);
    let (st, lines) = finish(job, END_WITHIN);
    let err = lines.join("\n");
    assert!(!st.success(), "the job succeeded after Ctrl-C: {err}");
    wait_gone(&pids);
    // No other benchkv or copyrpc process ran since (ONE_JOB), so nothing swept them.
    for &p in &pids {
        assert!(
            no_regions_of(p),
            "regions of rank pid {p} left in /dev/shm:\n{err}"
        );
        assert!(
            err.contains(&format!("region(s) of pid {p}")),
            "rank pid {p} did not say it removed its regions:\n{err}"
        );
    }
}
