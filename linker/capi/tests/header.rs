//! `linker/include/copyrpc.h` is cbindgen's output for the current sources, and it
//! compiles as C11 and C++17 with every warning an error.
//!
//! After changing the C ABI: `UPDATE_HEADER=1 cargo test -p copyrpc-c --test header`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn header_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/copyrpc.h")
}

fn generate() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let cfg = cbindgen::Config::from_file(Path::new(dir).join("cbindgen.toml"))
        .expect("linker/capi/cbindgen.toml parses");
    let bindings = cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(cfg)
        .generate()
        .expect("cbindgen generates the header");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("the header is UTF-8")
}

#[test]
fn header_is_current() {
    let fresh = generate();
    let path = header_path();
    if std::env::var_os("UPDATE_HEADER").is_some() {
        std::fs::write(&path, &fresh).expect("write the header");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != fresh {
        let first = checked_in
            .lines()
            .zip(fresh.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(checked_in.lines().count().min(fresh.lines().count()));
        panic!(
            "{} is stale (first difference at line {}); regenerate it with \
             UPDATE_HEADER=1 cargo test -p copyrpc-c --test header",
            path.display(),
            first + 1
        );
    }
}

fn compile(cc: &str, args: &[&str]) {
    let path = header_path();
    let out = Command::new(cc)
        .args(args)
        .args(["-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only"])
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(
        out.status.success(),
        "{cc} {args:?} rejects {}:\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn header_compiles_as_c11() {
    compile("gcc", &["-x", "c", "-std=c11"]);
}

#[test]
fn header_compiles_as_cxx17() {
    compile("g++", &["-x", "c++", "-std=c++17"]);
}
