//! The shm bench's shape in virtual time (`copyrpc_host::shm::world`): every answer
//! checked, the figures a function of the flags, and each piece of the line model
//! visible in them.

use copyrpc_host::shm::world::{run, Proto, ShmReport, ShmWorld, Visibility};
use copyrpc_host::vworld::{default_profile, CostModel};

fn spec(proto: Proto, window: u32, cost: &str) -> ShmWorld {
    let p = default_profile();
    ShmWorld {
        proto,
        window,
        calls: 2_000,
        cost: CostModel::with_profile(p.cost, cost).unwrap(),
        instructions_per_ns: p.instructions_per_ns,
        hops: 1,
        rule: Visibility::TurnStart,
        seed: 1,
    }
}

fn go(s: &ShmWorld, tag: &str) -> ShmReport {
    let region = format!(
        "/vshm-{}-{}-{}-{tag}",
        std::process::id(),
        s.proto.name(),
        s.window
    );
    run(s, &region).unwrap_or_else(|e| panic!("{tag}: {e}"))
}

#[test]
fn every_protocol_answers_every_call_at_both_windows_and_repeats_exactly() {
    for proto in Proto::ALL {
        for window in [1, 32] {
            let s = spec(proto, window, "jitter=0.2");
            let a = go(&s, "a");
            let b = go(&s, "b");
            assert_eq!(a.calls, 2_000, "{proto:?} w{window}");
            assert_eq!(a, b, "{proto:?} w{window}: the same flags gave two runs");
            // Each call's request and answer was taken once: two hand-offs, one line each.
            assert_eq!(a.lines, 4_000, "{proto:?} w{window}");
            let other = go(&ShmWorld { seed: 2, ..s }, "c");
            assert_ne!(
                a.end_ns, other.end_ns,
                "{proto:?} w{window}: the seed draws nothing"
            );
        }
    }
}

#[test]
fn the_line_transfer_is_what_a_round_trip_mostly_waits_for() {
    for proto in Proto::ALL {
        let with = go(&spec(proto, 1, ""), "with").ns_per_call();
        let without = go(&spec(proto, 1, "line_ns=0"), "without").ns_per_call();
        // At least one transfer of the default 60 ns a call, which removing it takes off.
        assert!(
            with >= without + 55.0,
            "{proto:?}: {with} with lines, {without} without"
        );
    }
}

#[test]
fn writes_after_the_lines_put_a_round_trips_two_transfers_in_series() {
    let start = go(&spec(Proto::Ipc, 1, ""), "start").ns_per_call();
    let after = go(
        &ShmWorld {
            rule: Visibility::AfterLines,
            ..spec(Proto::Ipc, 1, "")
        },
        "after",
    )
    .ns_per_call();
    // The world's rule lets the answer leave before the server's own read has arrived,
    // so a round trip overlaps its two transfers; after-lines pays both.
    assert!(
        after >= start + 40.0,
        "turn-start {start}, after-lines {after}"
    );
    assert!(after >= 120.0, "two 60 ns transfers in series: {after}");
}

#[test]
fn hops_multiply_the_wait_of_each_hand_off() {
    let one = go(&spec(Proto::Deleg, 1, ""), "h1").ns_per_call();
    let three = go(
        &ShmWorld {
            hops: 3,
            ..spec(Proto::Deleg, 1, "")
        },
        "h3",
    )
    .ns_per_call();
    assert!(three >= one + 100.0, "1 hop {one}, 3 hops {three}");
}

#[test]
fn bad_specs_are_refused_with_what_is_wrong() {
    let s = spec(Proto::Ipc, 1, "");
    for (bad, why) in [
        (
            ShmWorld {
                window: 8,
                ..s.clone()
            },
            "window 8",
        ),
        (
            ShmWorld {
                calls: 0,
                ..s.clone()
            },
            "at least 1",
        ),
        (
            ShmWorld {
                hops: 0,
                ..s.clone()
            },
            "at least 1",
        ),
        (
            ShmWorld {
                instructions_per_ns: f64::NAN,
                ..s.clone()
            },
            "instructions_per_ns",
        ),
    ] {
        let e = run(&bad, &format!("/vshm-bad-{}", std::process::id())).unwrap_err();
        assert!(e.contains(why), "{e}");
    }
}
