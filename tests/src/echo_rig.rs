//! The stepped two-context echo that the instruction count (`copyrpc-instr`) and the
//! throughput bench (`benches/copyrpc_echo.rs`) share. The rig itself (two contexts on
//! one software device) is core-nostd's integration-test rig, included by path so there
//! is one of it.
//!
//! The core's work and the device model's work are kept in separate non-inlined
//! functions: [`core_call`], [`core_poll_caller`], [`core_serve`] run only copyrpc and
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

use copyrpc_core::copyrpc::{Context, EndpointId};
use rig::{Opts, Pair};

/// Endpoints, pending calls, requests held per endpoint (ring 64 KiB / 32).
pub type EchoPair = Pair<1, 256, 2048>;

/// Ring bytes of the rig's endpoint.
pub const RING: usize = 64 << 10;

/// A pair with one endpoint each way and no link latency (a step delivers what was
/// sent), so the loop measures work, not simulated waiting.
pub fn pair() -> EchoPair {
    let mut o = Opts::new(1, RING);
    o.link.latency_ns = 0;
    o.cfg.probe_interval = 0;
    Pair::new(o)
}

/// Side A queues one call.
#[inline(never)]
pub fn core_call(ctx: &mut Context<u64, 1, 256, 2048>, ep: EndpointId, payload: &[u8], k: u64) {
    ctx.call_with_allowance(ep, payload, payload.len() as u32, k)
        .unwrap_or_else(|e| panic!("call {k}: {:?}", e.error));
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

/// Side B polls (takes requests, flushes earlier replies) and answers every request
/// with its own bytes; returns how many it answered.
#[inline(never)]
pub fn core_serve(ctx: &mut Context<u64, 1, 256, 2048>) -> u64 {
    ctx.poll(|_, _| unreachable!("B makes no calls"));
    let mut n = 0;
    while let Some(h) = ctx.recv() {
        let len = h.data(ctx).len();
        h.reply_with(ctx, len, |req, out| out.copy_from_slice(req))
            .expect("an echo fits its allowance");
        n += 1;
    }
    n
}

/// The device model's share: one step.
#[inline(never)]
pub fn device_step(p: &mut EchoPair) {
    p.step();
}

/// One round: A calls `batch` times, then both sides poll and the device steps until
/// every response is back. Returns the steps it took.
pub fn round(p: &mut EchoPair, batch: u32, payload: &[u8], first: u64) -> u64 {
    let ep = p.a.eps[0];
    for i in 0..u64::from(batch) {
        core_call(&mut p.a.ctx, ep, payload, first + i);
    }
    let (mut got, mut steps) = (0u64, 0u64);
    while got < u64::from(batch) {
        got += core_poll_caller(&mut p.a.ctx);
        core_serve(&mut p.b.ctx);
        device_step(p);
        steps += 1;
        assert!(steps < 10_000, "echo round stalled\n{}", p.dump());
    }
    steps
}
