//! The Rust twin of `examples/c/busy_poll.c` run with both sides in one process: the same
//! loop (step the device, call while 16 are in flight, poll, answer each request with
//! its own bytes), the same payloads (sizes cycling through the framing edges up to
//! 1024 bytes, each byte computed the same way, every response compared), on the
//! core's API directly over the same fabric objects (`RpcNode` of the C library's
//! default class: 16 endpoints, 512 calls, 512 requests). So callgrind's counts of the
//! two differ by what the C ABI adds, which `scripts/c-instr.sh` prints.
//!
//! `cargo run --release -p copyrpc-c --example busy_poll_rs -- [CALLS]` (default 100000
//! per side). Nothing depends on timing (one thread, instant links): the instruction
//! counts repeat exactly.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use copyrpc_core::copyrpc::EndpointId;
use copyrpc_host::fabric::sim::{SimOptions, Stepping};
use copyrpc_host::fabric::{open_sim, Fabric, FabricOptions};
use copyrpc_host::rpc::{RpcConfig, RpcNode};
use copyrpc_host::sim_engine::monotonic_ns;
use zerocopy::FromZeros;

const WINDOW: u64 = 16;
const MAX_PAYLOAD: usize = 1024;
const RING_BYTES: usize = 16384;
const SIZES: [usize; 14] = [0, 1, 8, 20, 21, 52, 53, 200, 204, 220, 221, 512, 1000, 4096];

type Node = RpcNode<u64, 16, 512, 512>;

fn size_of_call(k: u64) -> usize {
    let s = SIZES[(k % SIZES.len() as u64) as usize];
    if s <= MAX_PAYLOAD {
        s
    } else {
        ((k * 37) % (MAX_PAYLOAD as u64 + 1)) as usize
    }
}

/// `SEVENS[j]` = 7 × j mod 256: byte i of call k from rank src, (k × 131 + src + 7 × i)
/// mod 256, is `SEVENS[183 × v + i]` for v = k × 131 + src (7 × 183 = 1 mod 256), so a
/// fill is one copy, as in `busy_poll.c`.
static SEVENS: [u8; 256 + MAX_PAYLOAD] = {
    let mut t = [0u8; 256 + MAX_PAYLOAD];
    let mut j = 0;
    while j < t.len() {
        t[j] = (7 * j) as u8;
        j += 1;
    }
    t
};

/// Byte i of call k from rank src, as in the C examples.
#[inline(never)]
fn fill(src: u64, k: u64, out: &mut [u8]) {
    let v = (k.wrapping_mul(131).wrapping_add(src)) as u8;
    let j = usize::from(v.wrapping_mul(183));
    out.copy_from_slice(&SEVENS[j..j + out.len()]);
    if out.len() >= 8 {
        let head = src << 32 | (k & 0xffff_ffff);
        out[..8].copy_from_slice(&head.to_le_bytes());
    }
}

struct Side {
    node: Box<Node>,
    ep: EndpointId,
    rank: u64,
    calls: u64,
    next: u64,
    responses: u64,
    served: u64,
    expect: u64,
    in_flight: u64,
    bad: u64,
    buf: [u8; MAX_PAYLOAD],
    want: [u8; MAX_PAYLOAD],
}

/// A response as `examples/c/busy_poll.c`'s `on_response` checks it.
#[inline(never)]
fn on_response(
    rank: u64,
    want: &mut [u8; MAX_PAYLOAD],
    bad: &mut u64,
    k: u64,
    r: Result<&[u8], copyrpc_core::copyrpc::Error>,
) {
    let n = size_of_call(k);
    fill(rank, k, &mut want[..n]);
    if !matches!(r, Ok(d) if d == &want[..n]) {
        if *bad == 0 {
            eprintln!("busy_poll_rs rank {rank}: response to call {k}: {r:?}");
        }
        *bad += 1;
    }
}

#[inline(never)]
fn step(node: &Node) {
    if let Fabric::Sim(s) = node.fabric() {
        s.step(monotonic_ns());
    }
}

/// One pass of the loop, as `pass` in `examples/c/busy_poll.c`.
#[inline(never)]
fn pass(s: &mut Side) -> Result<(), String> {
    step(&s.node);
    let ep = s.ep;
    while s.next < s.calls && s.in_flight < WINDOW {
        let len = size_of_call(s.next);
        fill(s.rank, s.next, &mut s.buf[..len]);
        match s
            .node
            .ctx()
            .call_with_allowance(ep, &s.buf[..len], len as u32, s.next)
        {
            Ok(_) => {
                s.next += 1;
                s.in_flight += 1;
            }
            Err(e) if e.error.is_retryable() => break,
            Err(e) => return Err(format!("call: {}", e.error)),
        }
    }
    let (rank, want, bad) = (s.rank, &mut s.want, &mut s.bad);
    let (mut got, ctx) = (0, s.node.ctx());
    ctx.poll(|k, r| {
        got += 1;
        on_response(rank, want, bad, k, r);
    });
    s.in_flight -= got;
    s.responses += got;
    if s.bad > 0 {
        return Err("a response differs".into());
    }
    let peer = 1 - s.rank;
    while let Some(h) = ctx.recv() {
        let d = h.data(ctx);
        if d.len() >= 8 {
            let head = u64::from_le_bytes(d[..8].try_into().unwrap_or_default());
            if head >> 32 != peer || head & 0xffff_ffff != s.expect & 0xffff_ffff {
                return Err(format!("request {head:#x} out of order at {}", s.expect));
            }
        }
        s.expect += 1;
        let len = d.len();
        h.reply_with(ctx, len, |req, out| out.copy_from_slice(req))
            .map_err(|e| format!("reply: {}", e.error))?;
        s.served += 1;
    }
    Ok(())
}

fn side(rank: u64, calls: u64) -> Result<Side, String> {
    let opts = FabricOptions {
        sim: SimOptions {
            stepping: Stepping::Manual,
            ..SimOptions::default()
        },
        ..FabricOptions::default()
    };
    let fabric = Arc::new(open_sim(&opts).map_err(|e| e.to_string())?);
    let node = Node::for_peers(
        fabric,
        rank as usize,
        2,
        &[1 - rank as usize],
        &RpcConfig::for_ring(RING_BYTES),
    )
    .map_err(|e| e.to_string())?;
    let ep = node.endpoint(1 - rank as usize).ok_or("no endpoint")?;
    Ok(Side {
        node: Box::new(node),
        ep,
        rank,
        calls,
        next: 0,
        responses: 0,
        served: 0,
        expect: 0,
        in_flight: 0,
        bad: 0,
        buf: [0; MAX_PAYLOAD],
        want: [0; MAX_PAYLOAD],
    })
}

fn run(calls: u64) -> Result<(), String> {
    let (mut a, mut b) = (side(0, calls)?, side(1, calls)?);
    let (ra, rb) = (
        a.node.records().map_err(|e| e.to_string())?,
        b.node.records().map_err(|e| e.to_string())?,
    );
    let zero = copyrpc_host::rpc::PeerRecord::new_zeroed();
    a.node.connect(&[zero, rb[0]]).map_err(|e| e.to_string())?;
    b.node.connect(&[ra[1], zero]).map_err(|e| e.to_string())?;
    let start = Instant::now();
    let (mut passes, limit) = (0u64, 1000 + 64 * calls);
    let done = |s: &Side| s.responses == s.calls && s.served == s.calls;
    while !done(&a) || !done(&b) {
        pass(&mut a)?;
        pass(&mut b)?;
        passes += 1;
        if passes > limit {
            return Err(format!(
                "no progress: {} and {} of {calls} answered",
                a.responses, b.responses
            ));
        }
    }
    let t = start.elapsed().as_secs_f64();
    let mut out = std::io::stdout().lock();
    for s in [&a, &b] {
        writeln!(
            out,
            "rank {}/2: responses={} served={} in {t:.3}s: {:.0} calls/s: ok",
            s.rank,
            s.responses,
            s.served,
            s.responses as f64 / t
        )
        .map_err(|e| format!("writing the result: {e}"))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let calls = match std::env::args().nth(1).map(|s| s.parse::<u64>()) {
        None => 100_000,
        Some(Ok(n)) if (1..=u64::from(u32::MAX)).contains(&n) => n,
        Some(_) => {
            eprintln!(
                "usage: busy_poll_rs [CALLS]  (1..={} calls per side)",
                u32::MAX
            );
            return ExitCode::from(2);
        }
    };
    match run(calls) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("busy_poll_rs: {e}");
            ExitCode::FAILURE
        }
    }
}
