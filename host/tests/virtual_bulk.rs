//! `copyrpc-bulk --world virtual:2`: both ranks in one process, in virtual time, every
//! transfer checked (the server checks a PUT's checksum, the client what a GET or BOTH
//! left in its buffer), and the same flags giving the same bytes.

use std::process::{Command, Output};

const EXE: &str = env!("CARGO_BIN_EXE_copyrpc-bulk");

fn bulk(args: &[&str]) -> Output {
    Command::new(EXE)
        .args(["--world", "virtual:2"])
        .args(args)
        .output()
        .expect("copyrpc-bulk runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn every_pattern_moves_and_checks_its_bytes_in_virtual_time() {
    let out = bulk(&["--sizes", "1K,1M", "--iters", "2"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for p in ["put", "get", "both"] {
        for n in [1024, 1 << 20] {
            let want = format!("rank 0/2: {p} {n} B x 2: ");
            let line = stdout
                .lines()
                .find(|l| l.starts_with(&want))
                .unwrap_or_else(|| panic!("no {p} {n} line:\n{stdout}"));
            assert!(
                line.contains("MiB/s of virtual time") && line.ends_with(": ok"),
                "{line}"
            );
        }
    }
    // 2 x 2 calls of each of 3 patterns, and the STOP.
    assert!(stdout.contains("rank 0/2: calls=13 ok"), "{stdout}");
    assert!(stdout.contains("rank 1/2: served=13 ok"), "{stdout}");
}

#[test]
fn the_same_flags_print_the_same_bytes_and_another_seed_others() {
    let args = ["--sizes", "4K,64K", "--iters", "2", "--cost", "jitter=0.2"];
    let a = bulk(&args);
    assert!(a.status.success(), "{}", text(&a.stdout));
    assert_eq!(bulk(&args).stdout, a.stdout);
    let mut seeded = args.to_vec();
    seeded.extend(["--seed", "5"]);
    let b = bulk(&seeded);
    assert!(b.status.success(), "{}", text(&b.stdout));
    assert_ne!(b.stdout, a.stdout);
}

#[test]
fn bad_world_flags_are_refused_naming_the_flag() {
    for (args, needle) in [
        (&["--world", "virtual:0"][..], "--world"),
        (&["--world", "virtual:1"], "--world"),
        (&["--world", "virtual:3"], "--world"),
        (&["--world", "virtual:two"], "--world"),
        (&["--world", "cluster"], "--world"),
        (&["--cost", "loop_ns=5"], "--cost"),
        (&["--nic", "gbps=5"], "--nic"),
        (&["--world", "virtual:2", "--cost", "loop_ns=nan"], "--cost"),
        (&["--world", "virtual:2", "--fabric", "verbs"], "--world"),
    ] {
        let out = Command::new(EXE)
            .args(args)
            .output()
            .expect("copyrpc-bulk runs");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} ran");
    }
}
