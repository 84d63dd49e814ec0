//! `mpirun -np 2 copyrpc-bulk` on the sim fabric: two processes, each with its own device
//! model, moving 10 MiB by each bulk pattern (PUT, GET, both), every transfer checked by
//! checksum on the side that receives it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use copyrpc_host::exchange::launch::{run_local, run_local_ok, LOCAL_OMPI_ENV};

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

/// The pid of rank `rank` of the job whose ranks carry `BULK_TAG=tag`.
fn rank_pid(tag: &str, rank: u32) -> u32 {
    let want_tag = format!("BULK_TAG={tag}");
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

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a pid we found; a vanished pid only returns ESRCH.
    unsafe { libc::kill(pid as i32, sig) };
}

/// The server (rank 1) SIGSTOPped in the middle of a run. The client used to say only
/// "Put: Failed" and then wait in the final barrier until the collective's own bound
/// (300 s). Now its call ends at `--deadline-s` naming the peer and its state, and its
/// wait for the stopped rank at the end is bounded by the watchdog: exit 3, with a line
/// naming the wait and the stopped rank, within the deadline and the margin.
#[test]
fn a_stopped_rank_ends_the_other_with_exit_3_naming_it_and_the_wait() {
    let tag = format!("stop{}", std::process::id());
    let mut child = Command::new("mpirun")
        .args(["-np", "2", "-x", "BULK_TAG"])
        .arg(EXE)
        .args(["--pattern", "put", "--sizes", "1K,1M", "--iters", "2000"])
        .args(["--deadline-s", "3"])
        .env("BULK_TAG", &tag)
        .envs(LOCAL_OMPI_ENV)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun runs (scripts/setup.sh installs Open MPI)");
    let (tx, rx) = mpsc::channel();
    for (out, name) in [
        (
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            "out",
        ),
        (Box::new(child.stderr.take().unwrap()), "err"),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send((name, line)).is_err() {
                    break;
                }
            }
        });
    }
    drop(tx);
    // Mid-run: the first step (1 KiB) is done, the second (1 MiB x 2000) takes far
    // longer than the test.
    let mut lines = Vec::new();
    let started = Instant::now();
    while !lines
        .iter()
        .any(|(_, l): &(&str, String)| l.starts_with("rank 0/2: put 1024 B x 2000"))
    {
        let left = Duration::from_secs(120).saturating_sub(started.elapsed());
        match rx.recv_timeout(left) {
            Ok(l) => lines.push(l),
            Err(_) => {
                let _ = child.kill();
                panic!("no progress line of the first step: {lines:#?}");
            }
        }
    }
    let victim = rank_pid(&tag, 1);
    signal(victim, libc::SIGSTOP);
    let hit = Instant::now();
    // Until the job ends (both pipes closed), bounded: deadline 3 s + margin 5 s, and
    // slack for a loaded machine and mpirun's tear-down.
    let end_within = Duration::from_secs(60);
    loop {
        match rx.recv_timeout(end_within.saturating_sub(hit.elapsed())) {
            Ok(l) => lines.push(l),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                signal(victim, libc::SIGKILL);
                signal(victim, libc::SIGCONT);
                panic!("the job did not end within {end_within:?} of the stop: {lines:#?}");
            }
        }
    }
    let status = child.wait().unwrap();
    let ended = hit.elapsed();
    signal(victim, libc::SIGKILL);
    signal(victim, libc::SIGCONT);
    let text: Vec<String> = lines.iter().map(|(n, l)| format!("{n}: {l}")).collect();
    let text = text.join("\n");
    assert_eq!(status.code(), Some(3), "{text}");
    let fail = lines
        .iter()
        .find(|(n, l)| *n == "out" && l.starts_with("rank 0/2: FAIL"))
        .map(|(_, l)| l.clone())
        .unwrap_or_else(|| panic!("no FAIL line of rank 0:\n{text}"));
    assert!(
        fail.contains("rank 1") && fail.contains(&format!("pid {victim} STOPPED")),
        "rank 0's failure names neither the peer nor its state: {fail}"
    );
    assert!(
        text.contains(&format!(
            "copyrpc-bulk: rank 0: error: gave up after 8.0 s waiting for rank 1 to finish \
             its part (the run's last exchange): rank 1 is not making progress (rank 1: pid \
             {victim} STOPPED)"
        )),
        "{text}"
    );
    eprintln!("the job ended {ended:?} after the stop");
}
