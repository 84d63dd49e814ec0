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
