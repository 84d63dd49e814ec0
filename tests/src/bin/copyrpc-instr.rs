//! `copyrpc-instr BATCH ROUNDS [PAYLOAD [recv|inpoll [rounds|window]]]`: the stepped echo
//! of `copyrpc_tests::echo_rig` (BATCH x ROUNDS calls) for instruction counting under
//! callgrind (`scripts/instr.sh` runs it and divides). The words pick how side B answers
//! (`recv`: `recv` + `reply_with`, the default; `inpoll`: `poll_serve`) and how side A
//! calls (`rounds`, the default, or a `window` of two batches).
//! Prints the messages exchanged so the script can divide without guessing.
//!
//! `copyrpc-instr idle POLLS`: A polls POLLS times while one call waits unanswered
//! (`echo_rig::idle`); the script divides A's poll cost by POLLS.

use copyrpc_tests::echo_rig::{Pattern, Serve};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("idle") {
        let polls: u64 = args
            .get(1)
            .and_then(|a| a.parse().ok())
            .expect("usage: copyrpc-instr idle POLLS");
        return on_big_stack(move || {
            let mut p = copyrpc_tests::echo_rig::pair();
            let probes = copyrpc_tests::echo_rig::idle(&mut p, polls);
            println!("polls={polls} probes={probes}");
        });
    }
    let serve = match args.get(3).map(String::as_str) {
        None | Some("recv") => Serve::Recv,
        Some("flush") => Serve::RecvFlush,
        Some("inpoll") => Serve::InPoll,
        Some(other) => panic!("unknown serve mode {other:?}: recv, flush or inpoll"),
    };
    let pattern = match args.get(4).map(String::as_str) {
        None | Some("rounds") => Pattern::Rounds,
        Some("window") => Pattern::Window,
        Some(other) => panic!("unknown pattern {other:?}: rounds or window"),
    };
    args.truncate(3);
    let args: Vec<u64> = args
        .iter()
        .map(|a| {
            a.parse()
                .expect("usage: copyrpc-instr BATCH ROUNDS [PAYLOAD [recv|inpoll [rounds|window]]]")
        })
        .collect();
    let (batch, rounds) = (args[0] as u32, args[1]);
    let payload = vec![0x5a; args.get(2).copied().unwrap_or(32) as usize];
    on_big_stack(move || {
        let mut p = copyrpc_tests::echo_rig::pair();
        let k = rounds * u64::from(batch);
        copyrpc_tests::echo_rig::run(&mut p, batch, &payload, 0, k, serve, pattern);
        // Requests plus responses, each handled once by each side.
        println!("calls={k} messages={}", 2 * k);
    });
}

/// Runs `f` on a thread with room for the device model, a large value built on the
/// stack before it is boxed.
fn on_big_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap();
}
