//! What the C-program tests share: the library packaged as it ships
//! (`scripts/package-c.sh` over the `libcopyrpc.a` of this test run), a compiler run
//! against it, and bounded runs of the programs. (Each test binary uses part of it.)
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where cargo put this test run's `libcopyrpc.a`: `deps/`, next to the test binary (the
/// copy one level up is refreshed only by `cargo build`, so it can be stale).
pub fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let dir = exe
        .parent()
        .expect("test binaries live in <target>/<profile>/deps");
    assert!(
        dir.join("libcopyrpc.a").exists(),
        "{} has no libcopyrpc.a",
        dir.display()
    );
    dir.to_owned()
}

/// The packaged library's directory (`libcopyrpc.a`, `libcopyrpc.so*`), made once per
/// test binary, in a directory of its own (test binaries run at the same time).
pub fn packaged() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test's own path");
        let stem = exe.file_stem().expect("a file name").to_string_lossy();
        let out = deps_dir().join(format!("c-pkg-{stem}"));
        let _ = std::fs::remove_dir_all(&out);
        let o = Command::new(repo().join("scripts/package-c.sh"))
            .arg(deps_dir().join("libcopyrpc.a"))
            .arg(&out)
            .output()
            .expect("running scripts/package-c.sh");
        assert!(
            o.status.success(),
            "scripts/package-c.sh failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        out
    })
}

/// Builds `source` (C11, or C++17 for a `.cpp`) against the packaged shared library;
/// returns the executable.
pub fn build(source: &str, name: &str) -> PathBuf {
    let lib = packaged();
    let exe = lib.join(format!("c-{name}"));
    let cxx = source.ends_with(".cpp");
    let mut cmd = Command::new(if cxx { "g++" } else { "gcc" });
    cmd.arg(if cxx { "-std=c++17" } else { "-std=c11" })
        .args(["-O2", "-g", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(repo().join("linker/include"))
        .arg(repo().join(source))
        .arg("-L")
        .arg(lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lcopyrpc", "-o"])
        .arg(&exe);
    let out = cmd.output().expect("running the compiler");
    assert!(
        out.status.success(),
        "compiling {source}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs `prefix.. exe args`, killed after `limit` by coreutils' `timeout` (as
/// `copyrpc_host::exchange::launch::run_local` runs jobs); its output, or a panic naming
/// what hung.
pub fn run_with(prefix: &[&str], exe: &Path, args: &[&str], limit: Duration) -> Output {
    let out = Command::new("timeout")
        .args(["--kill-after=10", &limit.as_secs().to_string()])
        .args(prefix)
        .arg(exe)
        .args(args)
        // cargo points this at target/<profile>, whose libcopyrpc.so is cargo's own
        // cdylib; the program's rpath names the packaged one.
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

/// [`run_with`] without a prefix.
pub fn run(exe: &Path, args: &[&str], limit: Duration) -> Output {
    run_with(&[], exe, args, limit)
}

/// Exit status valgrind gives a program in which it found an error.
pub const VALGRIND_ERROR: i32 = 99;

/// [`run`] under valgrind's memcheck: any invalid read or write, branch on
/// uninitialised bytes, or definitely lost block is an error (exit
/// [`VALGRIND_ERROR`]); children of `fork` are checked too.
pub fn run_valgrind(exe: &Path, args: &[&str], limit: Duration) -> Output {
    run_with(
        &[
            "valgrind",
            "--quiet",
            "--error-exitcode=99",
            "--trace-children=yes",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite",
            "--show-leak-kinds=definite",
        ],
        exe,
        args,
        limit,
    )
}

/// The program exited 0 and printed `ok_lines` lines ending in ": ok".
pub fn assert_ok(what: &str, out: &Output, ok_lines: usize) {
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
