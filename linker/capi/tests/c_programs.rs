//! The C programs, built with gcc against this build's library as it ships
//! (`scripts/package-c.sh`) and run: under valgrind, `tests/c/abi_errors.c` (refusals
//! instead of crashes, every function exercised), `tests/c/misuse.c` (issue 50's misuse
//! cases) and `tests/c/throw.cpp` (C++ exceptions out of callbacks); and
//! the examples `examples/c/echo.c` (two processes over the device model),
//! `examples/c/busy_poll.c` (the same in manual mode, never yielding) and
//! `examples/c/deleg.c` (a delegation server and 4 client processes), with fewer calls
//! than their defaults so a debug build runs them quickly. `scripts/c-examples.sh` runs
//! the examples at full size from an installed prefix.

mod common;

use std::time::Duration;

use common::{assert_ok, build, run, run_valgrind, VALGRIND_ERROR};

/// Runs `exe` under valgrind; a memcheck error fails the test with valgrind's report.
fn assert_valgrind_clean(what: &str, exe: &std::path::Path, ok_lines: usize) {
    let out = run_valgrind(exe, &[], Duration::from_secs(600));
    assert_ne!(
        out.status.code(),
        Some(VALGRIND_ERROR),
        "{what}: valgrind found errors:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ok(what, &out, ok_lines);
}

#[test]
fn abi_refuses_bad_input_without_crashing() {
    let exe = build("linker/capi/tests/c/abi_errors.c", "abi_errors");
    assert_valgrind_clean("abi_errors", &exe, 1);
}

/// Issue 50's misuse cases, one line each (tests/c/misuse.c), valgrind-clean.
#[test]
fn misuse_is_refused_with_its_code() {
    let exe = build("linker/capi/tests/c/misuse.c", "misuse");
    assert_valgrind_clean("misuse", &exe, 6);
}

/// A C++ exception out of each kind of callback (tests/c/throw.cpp), valgrind-clean.
#[test]
fn cxx_exceptions_leave_the_callbacks_poll() {
    let exe = build("linker/capi/tests/c/throw.cpp", "throw");
    assert_valgrind_clean("throw", &exe, 3);
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

/// The busy-poll loop in manual mode: two processes, and both sides in one.
#[test]
fn c_busy_poll_answers_every_call() {
    let exe = build("examples/c/busy_poll.c", "busy_poll");
    for args in [&["20000"][..], &["20000", "1"]] {
        let out = run(&exe, args, Duration::from_secs(300));
        assert_ok(&format!("busy_poll {args:?}"), &out, 2);
        let stdout = String::from_utf8_lossy(&out.stdout);
        for rank in 0..2 {
            assert!(
                stdout.contains(&format!("rank {rank}/2: responses=20000 served=20000 ")),
                "busy_poll {args:?}: rank {rank} did not answer and get answered 20000 times:\n{stdout}"
            );
        }
    }
    let out = run(&exe, &["20000", "2"], Duration::from_secs(60));
    assert_eq!(
        out.status.code(),
        Some(2),
        "a bad argument is a usage error"
    );
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
