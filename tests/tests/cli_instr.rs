//! The instruction-count rig's command line (issue 23: no binary panics on a bad
//! argument): every bad value is a usage error, exit 2, naming the argument.

use std::process::Command;

fn instr(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_copyrpc-instr"))
        .args(args)
        .output()
        .expect("copyrpc-instr runs")
}

#[test]
fn bad_arguments_are_usage_errors_never_panics() {
    const HUGE: &str = "18446744073709551616";
    for (args, needle) in [
        (&[][..], "BATCH is missing"),
        (&["0", "1"], "BATCH"),
        (&["65", "1"], "BATCH"),
        (&["-1", "1"], "BATCH"),
        (&[HUGE, "1"], "BATCH"),
        (&["x", "1"], "BATCH"),
        (&["1"], "ROUNDS is missing"),
        (&["1", "0"], "ROUNDS"),
        (&["1", HUGE], "ROUNDS"),
        (&["1", "1", "99999"], "PAYLOAD"),
        (&["1", "1", "-5"], "PAYLOAD"),
        (&["1", "1", "32", "serve"], "serve mode"),
        (&["1", "1", "32", "recv", "burst"], "pattern"),
        (&["1", "1", "32", "recv", "rounds", "extra"], "unexpected"),
        (&["idle"], "POLLS is missing"),
        (&["idle", "0"], "POLLS"),
        (&["idle", HUGE], "POLLS"),
        (&["idle", "5", "x"], "WARM"),
        (&["idle", "5", HUGE], "WARM"),
        (&["idle", "5", "6", "7"], "unexpected"),
        (&["idle-cold"], "CHECKS is missing"),
        (&["idle-cold", "0"], "CHECKS"),
        (&["idle-cold", HUGE], "CHECKS"),
        (&["idle-cold", "5", "x"], "WARM"),
        (&["idle-cold", "5", "6", "7"], "unexpected"),
        (&["cold"], "ROUNDS is missing"),
        (&["cold", "0"], "ROUNDS"),
        (&["cold", "5", "2000"], "PAYLOAD"),
        (&["cold", "5", "32", "serve"], "serve mode"),
        (&["cold", "5", "32", "recv", "x"], "unexpected"),
        (&["words"], "ROUNDS is missing"),
        (&["words", "0"], "ROUNDS"),
        (&["words", "5", "2000"], "PAYLOAD"),
        (&["words", "5", "32", "serve"], "serve mode"),
        (&["words", "5", "32", "recv", "x"], "unexpected"),
        (&["driver"], "ROUNDS is missing"),
        (&["driver", "0"], "ROUNDS"),
        (&["driver", "5", "129"], "PAYLOAD"),
        (&["driver", "5", "32", "x"], "unexpected"),
    ] {
        let out = instr(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {needle:?} not in {err}");
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    }
}

#[test]
fn a_small_run_reports_its_message_count() {
    for (args, printed) in [
        (
            &["2", "3", "16", "inpoll", "window"][..],
            "calls=6 messages=12",
        ),
        (&["driver", "7", "128"][..], "calls=7 messages=14"),
        (&["idle-cold", "9", "3"][..], "checks=9 quiet=9"),
        (&["cold", "5", "64", "flush"][..], "calls=5 messages=10"),
    ] {
        let out = instr(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            printed,
            "{args:?}"
        );
    }
}

/// `words` says where the two contexts are (for `scripts/hot-words.sh`), in that
/// shape, before the run's count.
#[test]
fn words_prints_both_contexts_then_the_run() {
    let out = instr(&["words", "4", "32", "inpoll"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    let fields: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(fields.len(), 4, "{stdout}");
    assert_eq!(fields[0], "contexts");
    let a = fields[1].strip_prefix("a=0x").expect("a=0x...");
    let b = fields[2].strip_prefix("b=0x").expect("b=0x...");
    let bytes: usize = fields[3]
        .strip_prefix("bytes=")
        .expect("bytes=")
        .parse()
        .unwrap();
    let (a, b) = (
        usize::from_str_radix(a, 16).unwrap(),
        usize::from_str_radix(b, 16).unwrap(),
    );
    assert!(
        a.abs_diff(b) >= bytes,
        "the two contexts do not overlap: {stdout}"
    );
    assert_eq!(
        (a % 64, b % 64),
        (0, 0),
        "contexts are line-aligned: {stdout}"
    );
    assert_eq!(lines[1], "calls=4 messages=8");
}
