//! The measurement rig (`echo_rig`, behind `copyrpc-instr` and the echo bench) does
//! what its figures claim: every call is answered in each calling pattern and answering
//! mode, and the idle run really waits on a held call, probing at the default interval.

use copyrpc_tests::echo_rig::{self, Pattern, Serve};

#[test]
fn every_pattern_and_mode_answers_every_call() {
    // The device model is built on the stack before it is boxed.
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(|| {
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
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn the_idle_run_holds_a_call_and_probes_at_the_default_interval() {
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(|| {
            // A spins on `idle`, which sends it to `poll` each probe sweep (a quarter
            // interval); 4096 polls without news make the probe due.
            let mut p = echo_rig::pair();
            let (spins, probes) = echo_rig::idle(&mut p, 3000);
            assert!((3000..4096).contains(&spins), "{spins} spins");
            assert_eq!(probes, 0, "no probe before the interval");
            let mut p = echo_rig::pair();
            let (spins, probes) = echo_rig::idle(&mut p, 5200);
            assert!((5200..8192).contains(&spins), "{spins} spins");
            assert_eq!(probes, 1, "one probe by {spins} spins");
        })
        .unwrap()
        .join()
        .unwrap();
}
