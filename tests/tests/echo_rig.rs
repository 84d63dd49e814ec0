//! The measurement rig (`echo_rig`, behind `copyrpc-instr` and the echo bench) does
//! what its figures claim: every call is answered in each calling pattern and answering
//! mode, and the idle run really waits on a held call, probing at the default interval.

use copyrpc_tests::echo_rig::{self, Pattern, Serve};

/// Runs `f` on a thread with a 256 MiB stack: the device model is built on the stack
/// before it is boxed.
fn on_big_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn every_pattern_and_mode_answers_every_call() {
    on_big_stack(|| {
        for pattern in [Pattern::Rounds, Pattern::Window] {
            for serve in [Serve::Recv, Serve::RecvFlush, Serve::InPoll] {
                let mut p = echo_rig::pair();
                let steps = echo_rig::run(&mut p, 16, &[7; 32], 0, 320, serve, pattern);
                assert!(steps >= 20, "{pattern:?} {serve:?}: {steps} steps");
                assert_eq!(p.a.ctx.pending_calls(), 0, "{pattern:?} {serve:?}");
                assert_eq!(
                    p.b.ctx.stats().batches_received,
                    p.a.ctx.stats().batches_posted
                );
            }
        }
    });
}

#[test]
fn the_idle_run_holds_a_call_and_probes_at_the_default_interval() {
    on_big_stack(|| {
        // A spins on `idle`, which sends it to `poll` each probe sweep (a quarter
        // interval); 4096 polls without news make the probe due.
        let mut p = echo_rig::pair();
        let (spins, probes) = echo_rig::idle(&mut p, 0, 3000);
        assert!((3000..4096).contains(&spins), "{spins} spins");
        assert_eq!(probes, 0, "no probe before the interval");
        let mut p = echo_rig::pair();
        let (spins, probes) = echo_rig::idle(&mut p, 0, 5200);
        assert!((5200..8192).contains(&spins), "{spins} spins");
        assert_eq!(probes, 1, "one probe by {spins} spins");
        // After 600 answered calls, more than the recv CQ's 512 entries: the spin
        // reads slots of an earlier lap, and the wait is the same.
        let mut p = echo_rig::pair();
        let (spins, probes) = echo_rig::idle(&mut p, 600, 3000);
        assert!((3000..4096).contains(&spins), "{spins} spins after warming");
        assert_eq!(probes, 0, "no probe before the interval after warming");
        assert_eq!(
            p.b.ctx.stats().served_in_poll,
            600,
            "every warm-up call answered"
        );
    });
}

#[test]
fn the_cold_idle_checks_find_the_held_call_quiet_until_the_probe_sweep() {
    on_big_stack(|| {
        // Each check counts as a poll, and the probe sweep every 1024 polls is the
        // only thing that can find work (a poll follows, which posts nothing: no
        // probe is due before 4096 polls). From a fresh pair the first sweep falls
        // after 1000 checks and the second before 3000.
        let mut p = echo_rig::pair();
        assert_eq!(echo_rig::idle_cold(&mut p, 0, 1000), 1000);
        let mut p = echo_rig::pair();
        assert_eq!(echo_rig::idle_cold(&mut p, 0, 3000), 2998);
        assert_eq!(p.a.ctx.stats().probes_posted, 0);
        assert_eq!(p.a.ctx.pending_calls(), 1, "the held call still waits");
        // Warmed past a CQ lap, at most one sweep falls in 1000 checks.
        let mut p = echo_rig::pair();
        let quiet = echo_rig::idle_cold(&mut p, 600, 1000);
        assert!((999..=1000).contains(&quiet), "{quiet} quiet checks");
        assert_eq!(p.a.ctx.pending_calls(), 1, "the held call still waits");
    });
}

#[test]
fn cold_rounds_answer_every_call_in_each_mode() {
    on_big_stack(|| {
        for serve in [Serve::Recv, Serve::RecvFlush, Serve::InPoll] {
            let mut p = echo_rig::pair();
            let steps = echo_rig::cold_rounds(&mut p, &[9; 32], 50, serve);
            assert!(steps >= 4 * 50, "{serve:?}: {steps} steps");
            assert_eq!(p.a.ctx.pending_calls(), 0, "{serve:?}");
            assert_eq!(p.a.ctx.stats().batches_posted, 50, "{serve:?}: one a call");
        }
    });
}

#[test]
fn the_driver_only_echo_answers_every_call_over_several_laps() {
    // 4 000 calls: the 96 B (32 B payload) and 192 B (128 B) batches go round the 64 KiB
    // rings more than 5 and 11 times, the 255 WQEs of each SRQ are consumed 15 times
    // over (so reposted), and the 64-WQEBB send queues fill many times (so their
    // signaled completions retire). Four turns a call, as copyrpc's rounds in `flush`
    // and `inpoll` mode: post, arrival at B (which answers at once), a step for the
    // answer's delivery, its arrival at A.
    for payload in [32, 128] {
        let mut p = copyrpc_tests::driver_echo::pair();
        let steps = copyrpc_tests::driver_echo::run(&mut p, &vec![3; payload], 4000);
        assert_eq!(steps, 4 * 4000, "{payload} B");
        for srqn in [p.rig.a.srqn, p.rig.b.srqn] {
            let info = p.rig.dev.srq_info(srqn).expect("the SRQ exists");
            assert_eq!(info.consumed, 4000, "{payload} B: one WQE per batch");
        }
    }
}
