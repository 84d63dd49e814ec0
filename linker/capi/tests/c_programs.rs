//! The C programs, built with gcc against this build's `libcopyrpc.so` and run:
//! `tests/c/abi_errors.c` (refusals instead of crashes, every function exercised) and
//! the examples `examples/c/echo.c` (two processes over the device model) and
//! `examples/c/deleg.c` (a delegation server and 4 client processes), with fewer calls
//! than their defaults so a debug build runs them quickly. `scripts/c-examples.sh` runs
//! the examples at full size from an installed prefix.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where cargo put `libcopyrpc.so` for this test run: `deps/`, next to us (the copy one
/// level up is refreshed only by `cargo build`, so it can be stale).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let dir = exe
        .parent()
        .expect("test binaries live in <target>/<profile>/deps");
    assert!(
        dir.join("libcopyrpc.so").exists(),
        "{} has no libcopyrpc.so",
        dir.display()
    );
    dir.to_owned()
}

/// Builds `source` into the test's temp dir; returns the executable.
fn build(source: &str, name: &str) -> PathBuf {
    let lib = lib_dir();
    let exe = lib.join(format!("c-{name}"));
    let out = Command::new("gcc")
        .args(["-std=c11", "-O2", "-g", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(repo().join("linker/include"))
        .arg(repo().join(source))
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lcopyrpc", "-o"])
        .arg(&exe)
        .output()
        .expect("running gcc");
    assert!(
        out.status.success(),
        "gcc {source}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs `exe args`, killed after `limit` by coreutils' `timeout` (as
/// `copyrpc_host::exchange::launch::run_local` runs jobs); its output, or a panic naming
/// what hung.
fn run(exe: &Path, args: &[&str], limit: Duration) -> Output {
    let out = Command::new("timeout")
        .args(["--kill-after=10", &limit.as_secs().to_string()])
        .arg(exe)
        .args(args)
        // cargo points this at target/<profile> too, whose libcopyrpc.so may be stale;
        // the program's rpath names the one this run built.
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap_or_else(|e| panic!("starting timeout {}: {e}", exe.display()));
    if matches!(out.status.code(), Some(124 | 137)) {
        panic!(
            "{} {args:?} still ran after {limit:?}; its stderr:\n{}",
            exe.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

fn assert_ok(what: &str, out: &Output, ok_lines: usize) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let oks = stdout.lines().filter(|l| l.ends_with(": ok")).count();
    assert_eq!(oks, ok_lines, "{what}: lines ending in ': ok':\n{stdout}");
}

#[test]
fn abi_refuses_bad_input_without_crashing() {
    let exe = build("linker/capi/tests/c/abi_errors.c", "abi_errors");
    let out = run(&exe, &[], Duration::from_secs(120));
    assert_ok("abi_errors", &out, 1);
}

#[test]
fn c_echo_answers_every_call() {
    let exe = build("examples/c/echo.c", "echo");
    let out = run(&exe, &["20000"], Duration::from_secs(300));
    assert_ok("echo 20000", &out, 2);
    let stdout = String::from_utf8_lossy(&out.stdout);
    for rank in 0..2 {
        assert!(
            stdout.contains(&format!("rank {rank}/2: responses=20000 served=20000 ")),
            "rank {rank} did not answer and get answered 20000 times:\n{stdout}"
        );
    }
}

#[test]
fn c_deleg_answers_every_call() {
    let exe = build("examples/c/deleg.c", "deleg");
    let out = run(&exe, &["20000"], Duration::from_secs(300));
    assert_ok("deleg 20000", &out, 5);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("server: 80000 calls from 4 clients answered: ok"),
        "{stdout}"
    );
}
