//! The stepped two-context echo that the instruction count (`copyrpc-instr`) and the
//! throughput bench (`benches/copyrpc_echo.rs`) share. The rig itself (two contexts on
//! one software device) is core-nostd's integration-test rig, included by path so there
//! is one of it.
//!
//! The core's work and the device model's work are kept in separate non-inlined
//! functions: [`core_call`], [`core_poll_caller`], [`core_serve`] (or
//! [`core_serve_in_poll`]) run only copyrpc and
//! the mlx5 driver side; [`device_step`] runs only the model. Callgrind's inclusive cost
//! of the `core_*` functions is then driver + core with the model excluded.

#[path = "../../core-nostd/tests/copyrpc_common/mod.rs"]
// A test rig made public as a library module: lints for public library API do not apply.
#[allow(
    missing_debug_implementations,
    clippy::len_without_is_empty,
    clippy::should_implement_trait,
    clippy::new_without_default
)]
pub mod rig;

use copyrpc_core::copyrpc::{Context, EndpointConfig, EndpointId, RecvHandle};
use rig::{Opts, Pair};

/// Endpoints, pending calls, requests held per endpoint (ring 64 KiB / 32).
pub type EchoPair = Pair<1, 256, 2048>;

/// Ring bytes of the rig's endpoint.
pub const RING: usize = 64 << 10;

/// A pair with one endpoint each way and no link latency (a step delivers what was
/// sent), so the loop measures work, not simulated waiting. The endpoints have the
/// library's default settings, the idle-peer probe included (the test rig's own
/// default probes every 64 polls).
pub fn pair() -> EchoPair {
    let mut o = Opts::new(1, RING);
    o.link.latency_ns = 0;
    o.cfg.probe_interval = EndpointConfig::for_ring(RING as u64).probe_interval;
    Pair::new(o)
}

/// Side A queues `n` calls (`k`, `k + 1`, ..). One frame for the batch, so the figure
/// is the core's work per call, not the rig's call overhead.
///
/// `SITE` makes one copy per calling pattern, so the binary calls `call_with_allowance`
/// from two places, as applications do: the compiler's inlining choices for one call
/// site are not the ones an application gets (docs/PERFORMANCE.md, "Inlining").
#[inline(never)]
pub fn core_call<const SITE: u8>(
    ctx: &mut Context<u64, 1, 256, 2048>,
    ep: EndpointId,
    payload: &[u8],
    k: u64,
    n: u32,
) {
    for i in k..k + u64::from(n) {
        if let Err(e) = ctx.call_with_allowance(ep, payload, payload.len() as u32, i) {
            panic!("call {i}: {:?}", e.error);
        }
    }
}

/// Side A polls: flushes its calls, takes responses; returns how many arrived.
#[inline(never)]
pub fn core_poll_caller(ctx: &mut Context<u64, 1, 256, 2048>) -> u64 {
    let mut got = 0;
    ctx.poll(|_, r| {
        r.expect("no failures in the echo");
        got += 1;
    });
    got
}

/// A waiting caller's spin, as a user writes it (`while ctx.idle() { spin_loop() }`),
/// counted; it ends when `idle` says there is work (at the latest when the next
/// idle-peer probe sweep falls due). Out of line so callgrind counts it on its own.
#[inline(never)]
pub fn core_idle_spin(ctx: &mut Context<u64, 1, 256, 2048>) -> u64 {
    let mut n = 0;
    while ctx.idle() {
        core::hint::spin_loop();
        n += 1;
    }
    n
}

/// How side B answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serve {
    /// `poll`, then `recv` and `reply_with` for each queued request: the reply goes
    /// out with the next poll.
    Recv,
    /// As `Recv`, then `flush`: the replies go out in the same turn.
    RecvFlush,
    /// `poll_serve`, answering each request as it is parsed: the reply goes out with
    /// the same poll.
    InPoll,
}

/// Side B polls (takes requests, flushes earlier replies) and answers every request
/// with its own bytes; with `FLUSH`, it then flushes so the replies go out now rather
/// than with the next poll. Returns how many it answered.
///
/// One copy per mode, so the binary calls `recv` and `reply_with` from two places (see
/// [`core_call`]).
#[inline(never)]
pub fn core_serve<const FLUSH: bool>(ctx: &mut Context<u64, 1, 256, 2048>) -> u64 {
    ctx.poll(|_, _| unreachable!("B makes no calls"));
    let mut n = 0;
    while let Some(h) = ctx.recv() {
        let len = h.data(ctx).len();
        h.reply_with(ctx, len, |req, out| out.copy_from_slice(req))
            .expect("an echo fits its allowance");
        n += 1;
    }
    if FLUSH {
        ctx.flush();
    }
    n
}

/// Side B with `poll_serve`: each request answered with its own bytes as it is parsed;
/// returns how many it answered.
#[inline(never)]
pub fn core_serve_in_poll(ctx: &mut Context<u64, 1, 256, 2048>) -> u64 {
    let mut n = 0;
    ctx.poll_serve(
        |_, _| unreachable!("B makes no calls"),
        |r| {
            let len = r.data().len();
            if r.reply_with(len, |req, out| out.copy_from_slice(req))
                .is_err()
            {
                panic!("an echo fits its allowance");
            }
            n += 1;
        },
    );
    n
}

/// The device model's share: one step.
#[inline(never)]
pub fn device_step(p: &mut EchoPair) {
    p.step();
}

/// The state both idle measurements start from: A has made `warm` answered calls
/// through the uncounted API (so its CQ slots can hold earlier laps' CQEs), then one
/// more, which B has taken and holds unanswered; returns B's handle for it.
fn hold_a_call(p: &mut EchoPair, warm: u64) -> RecvHandle {
    let ep = p.a.eps[0];
    for i in 0..warm {
        p.a.ctx
            .call_with_allowance(ep, b"warm", 4, i)
            .expect("one call in flight fits");
        let mut got = 0;
        let mut steps = 0;
        while got == 0 {
            p.a.ctx.poll(|_, r| {
                r.expect("no failures in the echo");
                got += 1;
            });
            p.b.ctx.poll_serve(
                |_, _| unreachable!("B makes no calls"),
                |r| {
                    r.reply_with(4, |req, out| out.copy_from_slice(req))
                        .expect("an echo fits its allowance");
                },
            );
            p.step();
            steps += 1;
            assert!(steps < 100, "warm-up call {i} stalled\n{}", p.dump());
        }
    }
    core_call::<0>(&mut p.a.ctx, ep, b"hold", warm, 1);
    let mut held = None;
    let mut steps = 0;
    while held.is_none() {
        core_poll_caller(&mut p.a.ctx);
        p.b.ctx.poll(|_, _| unreachable!("B makes no calls"));
        held = p.b.ctx.recv();
        device_step(p);
        steps += 1;
        assert!(steps < 100, "the call never arrived\n{}", p.dump());
    }
    held.expect("taken above")
}

/// Idle waiting: from `hold_a_call`'s state (after `warm` answered calls, so the CQ
/// slots the spin reads can hold a previous lap's CQEs, as in a context that has run a
/// while), A waits at least `spins` spins with nothing arriving: it spins on
/// `Context::idle` and polls when that says there is work (the device steps after each
/// poll, so the probe READs the default interval brings complete). A's instructions per
/// spin are then what a client pays per spin while it waits. Returns the spins made
/// (`idle` calls and polls) and the probes A posted.
pub fn idle(p: &mut EchoPair, warm: u64, spins: u64) -> (u64, u64) {
    let held = hold_a_call(p, warm);
    // A waits as a caller should: it spins on `idle` and polls only when that says
    // there is work (a probe sweep falls due every so often; the device steps then, so
    // the probe's READ goes out and comes back). A spin is one call of `idle`.
    let mut made = 0;
    while made < spins {
        made += core_idle_spin(&mut p.a.ctx) + 1;
        assert_eq!(core_poll_caller(&mut p.a.ctx), 0, "B holds the call");
        device_step(p);
    }
    held.reply(&mut p.b.ctx, b"late")
        .expect("the allowance covers it");
    (made, p.a.ctx.stats().probes_posted)
}

/// One `Context::idle` test, out of line so callgrind's cache simulation counts the
/// lines it touches on its own.
#[inline(never)]
pub fn core_idle_check(ctx: &mut Context<u64, 1, 256, 2048>) -> bool {
    ctx.idle()
}

/// Bytes `idle_cold` and `cold_rounds` walk between two measured steps: eight times a
/// 32 KiB L1D, so none of the contexts' lines survive in it.
const EVICT_BYTES: usize = 256 << 10;

/// Writes a byte of every line of `buf` (a walk over `EVICT_BYTES`, the other work a poll
/// loop runs between two measured steps).
fn evict(buf: &mut [u8], round: u64) {
    for line in buf.chunks_mut(64) {
        line[0] = line[0].wrapping_add(round as u8);
    }
    core::hint::black_box(buf);
}

/// Cold idle checks: from `hold_a_call`'s state (as [`idle`]), `checks` times: touch a
/// buffer larger than the L1 data cache, then test `Context::idle` once (polling when it
/// says there is work, as `idle` does).
/// Under a cache simulation the check's misses are then the cache lines an idle test
/// reads, what a poll loop that runs other work between its checks pays in loads from
/// farther out. Returns the checks that found nothing to do.
pub fn idle_cold(p: &mut EchoPair, warm: u64, checks: u64) -> u64 {
    let held = hold_a_call(p, warm);
    let mut buf = vec![0u8; EVICT_BYTES];
    let mut quiet = 0;
    for i in 0..checks {
        evict(&mut buf, i);
        if core_idle_check(&mut p.a.ctx) {
            quiet += 1;
        } else {
            assert_eq!(core_poll_caller(&mut p.a.ctx), 0, "B holds the call");
            device_step(p);
        }
    }
    held.reply(&mut p.b.ctx, b"late")
        .expect("the allowance covers it");
    quiet
}

/// Cold rounds at batch 1: `rounds` rounds of one call each (as [`round`]), each after
/// a walk over a buffer larger than the L1 data cache. Under a cache simulation each
/// side's misses in its `core_*` functions are then the cache lines one call's round
/// trip touches on that side when the loop ran other work before it (its footprint,
/// rig stack frames included). Returns the device steps taken.
pub fn cold_rounds(p: &mut EchoPair, payload: &[u8], rounds: u64, serve: Serve) -> u64 {
    let mut buf = vec![0u8; EVICT_BYTES];
    (0..rounds)
        .map(|r| {
            evict(&mut buf, r);
            round(p, 1, payload, r, serve)
        })
        .sum()
}

/// How side A issues its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Rounds: `batch` calls, then poll until every response is back (one batch in
    /// flight; the caller waits idle while the batch travels).
    Rounds,
    /// A window of two batches: whenever at most `batch` calls are pending, `batch` more
    /// are queued, so each poll sends one batch while the previous one is answered.
    Window,
}

/// Runs `calls` calls (a multiple of `batch`) in `pattern`, numbered from `first`.
/// Returns the device steps it took.
pub fn run(
    p: &mut EchoPair,
    batch: u32,
    payload: &[u8],
    first: u64,
    calls: u64,
    serve: Serve,
    pattern: Pattern,
) -> u64 {
    match pattern {
        Pattern::Rounds => (0..calls / u64::from(batch))
            .map(|r| round(p, batch, payload, first + r * u64::from(batch), serve))
            .sum(),
        Pattern::Window => window(p, batch, payload, first, calls, serve),
    }
}

/// One turn of both sides: A polls, B answers (as `serve` says), the device steps.
/// Returns the responses A took.
fn turn(p: &mut EchoPair, serve: Serve) -> u64 {
    let got = core_poll_caller(&mut p.a.ctx);
    match serve {
        Serve::Recv => core_serve::<false>(&mut p.b.ctx),
        Serve::RecvFlush => core_serve::<true>(&mut p.b.ctx),
        Serve::InPoll => core_serve_in_poll(&mut p.b.ctx),
    };
    device_step(p);
    got
}

/// [`Pattern::Window`].
pub fn window(
    p: &mut EchoPair,
    batch: u32,
    payload: &[u8],
    first: u64,
    calls: u64,
    serve: Serve,
) -> u64 {
    let ep = p.a.eps[0];
    let (mut sent, mut got, mut steps) = (0u64, 0u64, 0u64);
    while got < calls {
        if sent < calls && p.a.ctx.pending_calls() <= batch as usize {
            core_call::<1>(&mut p.a.ctx, ep, payload, first + sent, batch);
            sent += u64::from(batch);
        }
        got += turn(p, serve);
        steps += 1;
        assert!(
            steps < 10_000 + 4 * calls,
            "echo window stalled\n{}",
            p.dump()
        );
    }
    steps
}

/// One round: A calls `batch` times, then both sides poll and the device steps until
/// every response is back. Returns the steps it took.
pub fn round(p: &mut EchoPair, batch: u32, payload: &[u8], first: u64, serve: Serve) -> u64 {
    let ep = p.a.eps[0];
    core_call::<0>(&mut p.a.ctx, ep, payload, first, batch);
    let (mut got, mut steps) = (0u64, 0u64);
    while got < u64::from(batch) {
        got += turn(p, serve);
        steps += 1;
        assert!(steps < 10_000, "echo round stalled\n{}", p.dump());
    }
    steps
}
