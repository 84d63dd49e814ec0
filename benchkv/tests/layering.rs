//! benchkv's dependency rule (top of `src/main.rs`) is checked by
//! `scripts/check_benchkv_layers.py`, a step of `scripts/check-layering.sh`. These tests
//! plant breaches in a copy of the sources and see the check refuse each one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn check(src: &Path) -> Output {
    Command::new("python3")
        .arg(repo().join("scripts/check_benchkv_layers.py"))
        .arg(src)
        .output()
        .expect("python3 runs the layering check")
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// A copy of `src/` with `line` added after the first `use` line of `file`.
fn planted(tag: &str, file: &str, line: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("benchkv-layers-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy_tree(&repo().join("benchkv/src"), &dir);
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let at = text.find("\nuse ").expect("a use line") + 1;
    std::fs::write(&path, format!("{}{line}\n{}", &text[..at], &text[at..])).unwrap();
    dir
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn the_sources_as_they_are_pass() {
    let out = check(&repo().join("benchkv/src"));
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn an_upward_import_a_command_line_import_and_a_cycle_are_each_refused() {
    for (tag, file, line, needle) in [
        // A key-value part reaching up to a runner.
        (
            "up",
            "daemon/mod.rs",
            "use crate::rank::Runner;",
            "a layer above it",
        ),
        // A runner naming the command line instead of the configuration.
        (
            "cli",
            "orchestrate.rs",
            "use crate::cli::Cli;",
            "only config parses it",
        ),
        // Two key-value parts importing each other (client already imports store).
        (
            "cycle",
            "store.rs",
            "use crate::client::Counters;",
            "import cycle",
        ),
        // A module the rule does not place.
        (
            "unplaced",
            "msg.rs",
            "use crate::galaxy::Star;",
            "has no layer",
        ),
    ] {
        let dir = planted(tag, file, line);
        let out = check(&dir);
        let said = text(&out.stdout);
        assert!(
            !out.status.success(),
            "{tag}: the planted `{line}` passed: {said}"
        );
        assert!(said.contains(file) || tag == "cycle", "{tag}: {said}");
        assert!(said.contains(needle), "{tag}: {said}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
