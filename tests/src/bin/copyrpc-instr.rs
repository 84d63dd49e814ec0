//! `copyrpc-instr BATCH ROUNDS [PAYLOAD [recv|inpoll [rounds|window]]]`: the stepped echo
//! of `copyrpc_tests::echo_rig` (BATCH x ROUNDS calls) for instruction counting under
//! callgrind (`scripts/instr.sh` runs it and divides). The words pick how side B answers
//! (`recv`: `recv` + `reply_with`, the default; `inpoll`: `poll_serve`) and how side A
//! calls (`rounds`, the default, or a `window` of two batches).
//! Prints the messages exchanged so the script can divide without guessing.
//!
//! `copyrpc-instr idle POLLS [WARM]`: A polls POLLS times while one call waits
//! unanswered (`echo_rig::idle`: it spins on `Context::idle` and polls when told),
//! after WARM answered calls (default 0) made through the uncounted API so its CQs'
//! slots hold earlier laps' CQEs; the script divides the cost of the spins and polls by
//! the spins it prints.
//!
//! `copyrpc-instr idle-cold CHECKS [WARM]`: from the same state, CHECKS single
//! `Context::idle` tests, each after touching a buffer larger than the L1 data cache
//! (`echo_rig::idle_cold`); under callgrind's cache simulation the misses of
//! `core_idle_check` divided by CHECKS are the cache lines a cold idle test reads.
//!
//! `copyrpc-instr cold ROUNDS [PAYLOAD [recv|flush|inpoll]]`: ROUNDS rounds of one call,
//! each after a walk over a buffer larger than the L1 data cache
//! (`echo_rig::cold_rounds`); under callgrind's cache simulation each side's misses
//! divided by ROUNDS are the cache lines a call's round trip touches on that side.
//!
//! `copyrpc-instr words ROUNDS [PAYLOAD [recv|flush|inpoll]]`: prints where the two
//! contexts are (`contexts a=ADDR b=ADDR bytes=N`), then runs ROUNDS rounds of one call;
//! under valgrind's lackey `scripts/hot-words.sh` counts the words of each context a
//! round touches, and the cache lines they fill.
//!
//! `copyrpc-instr driver ROUNDS [PAYLOAD]`: the same echo at batch 1 written directly on
//! the mlx5 driver, no RPC layer (`copyrpc_tests::driver_echo`): the floor under the
//! batch-1 rows.
//!
//! A bad argument is a usage error (exit 2) naming it, never a panic.

use std::process::ExitCode;

use copyrpc_tests::echo_rig::{Pattern, Serve};

const USAGE: &str = "usage: copyrpc-instr BATCH ROUNDS [PAYLOAD [recv|flush|inpoll [rounds|window]]]\n       copyrpc-instr idle POLLS [WARM]\n       copyrpc-instr idle-cold CHECKS [WARM]\n       copyrpc-instr cold ROUNDS [PAYLOAD [recv|flush|inpoll]]\n       copyrpc-instr words ROUNDS [PAYLOAD [recv|flush|inpoll]]\n       copyrpc-instr driver ROUNDS [PAYLOAD]";

/// What to run, from the command line.
enum Job {
    Idle {
        polls: u64,
        warm: u64,
    },
    IdleCold {
        checks: u64,
        warm: u64,
    },
    Driver {
        rounds: u64,
        payload: usize,
    },
    /// `cold`, or with `words` the same rounds without the walks, after a line saying
    /// where the two contexts are.
    Cold {
        rounds: u64,
        payload: usize,
        serve: Serve,
        words: bool,
    },
    Echo {
        batch: u32,
        rounds: u64,
        payload: usize,
        serve: Serve,
        pattern: Pattern,
    },
}

/// `name` as a number in `lo..=hi`, or a sentence saying why not.
fn number(name: &str, v: Option<&String>, lo: u64, hi: u64) -> Result<u64, String> {
    let v = v.ok_or(format!("{name} is missing"))?;
    match v.parse::<u64>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(format!(
            "{name} {v:?} must be a whole number in {lo}..={hi}"
        )),
    }
}

/// `name` as in [`number`], or `default` when absent.
fn optional(name: &str, v: Option<&String>, default: u64, lo: u64, hi: u64) -> Result<u64, String> {
    match v {
        None => Ok(default),
        v => number(name, v, lo, hi),
    }
}

/// A usage error for the first of `args` past the `n` a job takes.
fn at_most(args: &[String], n: usize) -> Result<(), String> {
    match args.get(n) {
        Some(extra) => Err(format!("unexpected argument {extra:?}")),
        None => Ok(()),
    }
}

/// How side B answers, from its word (`recv` when absent).
fn serve_mode(v: Option<&String>) -> Result<Serve, String> {
    match v.map(String::as_str) {
        None | Some("recv") => Ok(Serve::Recv),
        Some("flush") => Ok(Serve::RecvFlush),
        Some("inpoll") => Ok(Serve::InPoll),
        Some(other) => Err(format!(
            "unknown serve mode {other:?}: recv, flush or inpoll"
        )),
    }
}

fn parse(args: &[String]) -> Result<Job, String> {
    if let Some(word @ ("cold" | "words")) = args.first().map(String::as_str) {
        at_most(args, 4)?;
        let rounds = number("ROUNDS", args.get(1), 1, 100_000_000)?;
        let payload = optional("PAYLOAD", args.get(2), 32, 0, 1024)? as usize;
        let serve = serve_mode(args.get(3))?;
        return Ok(Job::Cold {
            rounds,
            payload,
            serve,
            words: word == "words",
        });
    }
    if args.first().map(String::as_str) == Some("idle") {
        at_most(args, 3)?;
        let polls = number("POLLS", args.get(1), 1, 1 << 32)?;
        let warm = optional("WARM", args.get(2), 0, 0, 100_000_000)?;
        return Ok(Job::Idle { polls, warm });
    }
    if args.first().map(String::as_str) == Some("idle-cold") {
        at_most(args, 3)?;
        let checks = number("CHECKS", args.get(1), 1, 100_000_000)?;
        let warm = optional("WARM", args.get(2), 0, 0, 100_000_000)?;
        return Ok(Job::IdleCold { checks, warm });
    }
    if args.first().map(String::as_str) == Some("driver") {
        at_most(args, 3)?;
        let rounds = number("ROUNDS", args.get(1), 1, 100_000_000)?;
        // Up to 128 B the batch (32 B metadata, 16 B header, payload padded to 32 B)
        // stays within the send queue's 220 B inline limit, as copyrpc's small calls do.
        let payload = optional("PAYLOAD", args.get(2), 32, 0, 128)? as usize;
        return Ok(Job::Driver { rounds, payload });
    }
    at_most(args, 5)?;
    // The rig's context holds 256 calls and a window keeps two batches in flight; its
    // 64 KiB rings take 64 messages of 1 KiB in a batch.
    let batch = number("BATCH", args.first(), 1, 64)? as u32;
    let rounds = number("ROUNDS", args.get(1), 1, 100_000_000)?;
    let payload = optional("PAYLOAD", args.get(2), 32, 0, 1024)? as usize;
    let serve = serve_mode(args.get(3))?;
    let pattern = match args.get(4).map(String::as_str) {
        None | Some("rounds") => Pattern::Rounds,
        Some("window") => Pattern::Window,
        Some(other) => return Err(format!("unknown pattern {other:?}: rounds or window")),
    };
    Ok(Job::Echo {
        batch,
        rounds,
        payload,
        serve,
        pattern,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let job = match parse(&args) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("copyrpc-instr: error: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match job {
        Job::Idle { polls, warm } => on_big_stack(move || {
            let mut p = copyrpc_tests::echo_rig::pair();
            let (spins, probes) = copyrpc_tests::echo_rig::idle(&mut p, warm, polls);
            println!("spins={spins} probes={probes}");
        }),
        Job::IdleCold { checks, warm } => on_big_stack(move || {
            let mut p = copyrpc_tests::echo_rig::pair();
            let quiet = copyrpc_tests::echo_rig::idle_cold(&mut p, warm, checks);
            println!("checks={checks} quiet={quiet}");
        }),
        Job::Cold {
            rounds,
            payload,
            serve,
            words,
        } => on_big_stack(move || {
            let payload = vec![0x5a; payload];
            let mut p = copyrpc_tests::echo_rig::pair();
            if words {
                println!(
                    "contexts a={:p} b={:p} bytes={}",
                    &*p.a.ctx,
                    &*p.b.ctx,
                    core::mem::size_of_val(&*p.a.ctx)
                );
                copyrpc_tests::echo_rig::run(
                    &mut p,
                    1,
                    &payload,
                    0,
                    rounds,
                    serve,
                    Pattern::Rounds,
                );
            } else {
                copyrpc_tests::echo_rig::cold_rounds(&mut p, &payload, rounds, serve);
            }
            println!("calls={rounds} messages={}", 2 * rounds);
        }),
        Job::Driver { rounds, payload } => {
            let payload = vec![0x5a; payload];
            let mut p = copyrpc_tests::driver_echo::pair();
            copyrpc_tests::driver_echo::run(&mut p, &payload, rounds);
            println!("calls={rounds} messages={}", 2 * rounds);
        }
        Job::Echo {
            batch,
            rounds,
            payload,
            serve,
            pattern,
        } => on_big_stack(move || {
            let payload = vec![0x5a; payload];
            let mut p = copyrpc_tests::echo_rig::pair();
            let k = rounds * u64::from(batch);
            copyrpc_tests::echo_rig::run(&mut p, batch, &payload, 0, k, serve, pattern);
            // Requests plus responses, each handled once by each side.
            println!("calls={k} messages={}", 2 * k);
        }),
    }
    ExitCode::SUCCESS
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
