//! The library as it ships (`scripts/package-c.sh` over this test run's `libcopyrpc.a`)
//! exports the API and nothing else: `nm -g --defined-only` of the static library and
//! `readelf --dyn-syms` of the shared one list exactly the functions `copyrpc.h`
//! declares; the shared library's SONAME is `libcopyrpc.so.<major>`, each function
//! carries the symbol version `COPYRPC_<major>.<minor>`, and it needs no libmpi.
//!
//! (That a program linked against the static library needs no libmpi either depends on
//! building the library on its own, without a crate that turns copyrpc-host's `mpi`
//! feature on in the same cargo run; `scripts/c-examples.sh` checks it on the installed
//! library.)

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use copyrpc_linker::version::{COPYRPC_VERSION_MAJOR, COPYRPC_VERSION_MINOR};

fn tool(cmd: &str, args: &[&str], file: &std::path::Path) -> String {
    let out = Command::new(cmd)
        .args(args)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("running {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The function names `copyrpc.h` declares.
fn declared() -> BTreeSet<String> {
    let h = std::fs::read_to_string(common::repo().join("linker/include/copyrpc.h"))
        .expect("reading copyrpc.h");
    let mut names = BTreeSet::new();
    for part in h.split("copyrpc_").skip(1) {
        let name: String = part
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // A declaration: the name is followed by its parameter list.
        if part[name.len()..].starts_with('(') {
            names.insert(format!("copyrpc_{name}"));
        }
    }
    assert!(names.len() > 40, "found only {names:?} in copyrpc.h");
    names
}

fn node() -> String {
    if COPYRPC_VERSION_MAJOR == 0 {
        format!("COPYRPC_0.{COPYRPC_VERSION_MINOR}")
    } else {
        format!("COPYRPC_{COPYRPC_VERSION_MAJOR}")
    }
}

#[test]
fn the_static_library_exports_the_api_only() {
    let a = common::packaged().join("libcopyrpc.a");
    let nm = tool("nm", &["-g", "--defined-only"], &a);
    let defined: BTreeSet<String> = nm
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3).then(|| f[2].to_owned())
        })
        .collect();
    assert_eq!(defined, declared(), "nm -g --defined-only {}", a.display());
}

#[test]
fn the_shared_library_exports_the_api_only_versioned_with_its_soname() {
    let so = common::packaged().join("libcopyrpc.so");
    let syms = tool("readelf", &["--dyn-syms", "-W"], &so);
    let node = node();
    let mut defined = BTreeSet::new();
    for l in syms.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        // Num: Value Size Type Bind Vis Ndx Name
        let numbered = f
            .first()
            .and_then(|n| n.strip_suffix(':'))
            .is_some_and(|n| n.parse::<u32>().is_ok());
        if f.len() < 8 || !numbered || f[6] == "UND" {
            continue;
        }
        let name = f[7];
        if name == node {
            // The version definition itself (an absolute symbol named after the node).
            continue;
        }
        let (base, version) = name
            .split_once("@@")
            .unwrap_or_else(|| panic!("{name}: exported without a symbol version"));
        assert_eq!(version, node, "{name}");
        defined.insert(base.to_owned());
    }
    assert_eq!(defined, declared(), "readelf --dyn-syms {}", so.display());

    let dynamic = tool("readelf", &["-d", "-W"], &so);
    let soname = format!("Library soname: [libcopyrpc.so.{COPYRPC_VERSION_MAJOR}]");
    assert!(dynamic.contains(&soname), "no {soname} in:\n{dynamic}");
    assert!(
        !dynamic.contains("libmpi"),
        "the shared library needs MPI:\n{dynamic}"
    );
}
