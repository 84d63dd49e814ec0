//! The copyrpc echo: every rank calls every other rank `calls_per_peer` times with
//! checksummed payloads of many sizes (0, the padding edges 20/21, the inline edge 220/221,
//! up to `max_payload`), keeps a window of calls in flight per peer, and answers every
//! call it receives with the request's own bytes. It checks that every response is the
//! bytes it sent, that requests from each peer arrive in order, and that the counts add
//! up on every rank.
//!
//! It runs over any [`Collectives`]: MPI ranks (`mpirun -np N copyrpc-echo`) or thread
//! ranks in one process. Polling yields the CPU when a pass finds nothing to do, since on
//! the 2-core machines every rank and every sim engine shares two cores.

use std::time::{Duration, Instant};

use copyrpc_core::credit;

use crate::error::{Error, Result};
use crate::exchange::{Collectives, ReduceOp};
use crate::fabric::Fabric;

use super::{RpcConfig, RpcNode};

mod world;

pub use world::{run_virtual, PassTotals, VirtualEcho, MAX_VIRTUAL_RANKS};

/// Endpoints per context (peers of one rank).
const EPS: usize = 64;
/// Pending calls of one rank, over all peers.
const CALLS: usize = 512;
/// Request tables per endpoint (ring / 32) for rings up to 16 KiB and up to
/// [`MAX_RING`]: two context types, so the common small ring does not carry a table
/// 16 times larger than it needs.
const SMALL_REQS: usize = 512;
const LARGE_REQS: usize = MAX_RING / 32;
/// The largest ring (`--rpc-ring`) the echo takes: its endpoints are built on the
/// caller's stack (an 8 Ki-entry table, 320 KiB), so any thread can run it.
pub const MAX_RING: usize = 256 << 10;

/// The longest deadline an echo accepts: a week, far below where `Instant` arithmetic
/// could overflow.
pub const MAX_DEADLINE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Settings of an echo run.
#[derive(Clone, Debug)]
pub struct EchoConfig {
    /// Calls each rank makes to each other rank.
    pub calls_per_peer: u32,
    /// Largest payload (bytes); sizes cycle through edge cases up to it.
    pub max_payload: usize,
    /// Calls in flight per peer.
    pub window: u32,
    /// Give up (with an error saying where it stood) after this long.
    pub deadline: Duration,
    /// Rings and queues.
    pub rpc: RpcConfig,
    /// Where each peer's sequence of payload sizes starts (0: the edge cases first).
    pub seed: u64,
}

impl Default for EchoConfig {
    fn default() -> Self {
        Self {
            calls_per_peer: 2000,
            max_payload: 1024,
            window: 16,
            deadline: Duration::from_secs(60),
            rpc: RpcConfig::for_ring(16 << 10),
            seed: 0,
        }
    }
}

impl EchoConfig {
    /// `--rpc-ring auto`: the ring at which `window` calls of `max_payload` in flight to
    /// one peer never wait for credit, at most [`MAX_RING`]. Set `window` and
    /// `max_payload` first.
    pub fn auto_ring(&mut self) {
        let p = u32::try_from(self.max_payload).unwrap_or(u32::MAX);
        let ring = super::sizing::ring_for_calls(u64::from(self.window), p, p).min(MAX_RING);
        self.rpc = RpcConfig::for_ring(ring);
    }

    /// The largest `max_payload` the rings can carry: every call asks for a response
    /// as long as its request, so it is the smaller of the largest response allowance
    /// the peer's credit can ever cover and the largest request payload the core ever
    /// sends beside our own reservation (`Context::max_request_payload`; both ranks run
    /// with the same `rpc`). Above it, calls would be refused for good.
    pub fn max_payload_limit(&self) -> usize {
        let ring = self.rpc.ring_bytes as u64;
        let cap = self.rpc.endpoint.max_resp_reservation;
        let bound = credit::max_peer_credit(credit::initial_credit(cap), ring);
        let allowance = credit::max_response_allowance(bound).map_or(0, u64::from);
        let request = credit::max_request_payload(cap, ring);
        usize::try_from(allowance.min(request)).unwrap_or(usize::MAX)
    }

    /// Refuses settings the echo cannot run with, before anything is set up.
    pub fn validate(&self) -> Result<()> {
        let limit = self.max_payload_limit();
        let bad = |reason: String| Err(Error::RpcConfig { reason });
        let ring = self.rpc.ring_bytes;
        if !ring.is_power_of_two() || !(super::sizing::RING_MIN..=MAX_RING).contains(&ring) {
            return bad(format!(
                "echo ring (--rpc-ring) {ring} B is not a power of two from {} KiB to {} KiB",
                super::sizing::RING_MIN >> 10,
                MAX_RING >> 10
            ));
        }
        if self.max_payload > limit {
            return bad(format!(
                "echo max_payload {} is above {limit}, the largest payload and response \
                 allowance rings of {} B with a reservation cap of {} B can carry",
                self.max_payload, self.rpc.ring_bytes, self.rpc.endpoint.max_resp_reservation
            ));
        }
        if self.calls_per_peer == 0 {
            return bad("echo calls_per_peer is 0: nothing would be checked".into());
        }
        if self.window == 0 || self.window as usize > CALLS {
            return bad(format!(
                "echo window {} is outside 1..={CALLS} (the pending-call table)",
                self.window
            ));
        }
        if self.deadline.is_zero() || self.deadline > MAX_DEADLINE {
            return bad(format!(
                "echo deadline {:?} is outside 1 s..={MAX_DEADLINE:?}",
                self.deadline
            ));
        }
        Ok(())
    }
}

/// What one rank saw, plus the totals over every rank.
#[derive(Clone, Debug, PartialEq)]
pub struct EchoReport {
    /// This rank.
    pub rank: usize,
    /// Number of ranks.
    pub ranks: usize,
    /// Responses this rank received and checked.
    pub responses: u64,
    /// Requests this rank answered.
    pub served: u64,
    /// Payload bytes of this rank's calls.
    pub bytes: u64,
    /// Responses received by every rank (all-reduce).
    pub total_responses: u64,
    /// Requests answered by every rank (all-reduce).
    pub total_served: u64,
    /// Wall time of this rank's exchange.
    pub elapsed: Duration,
}

const SIZES: [usize; 14] = [0, 1, 8, 20, 21, 52, 53, 200, 204, 220, 221, 512, 1000, 4096];

/// Payload size of call `k`, within `max`: the edge cases of [`SIZES`] (one above `max`
/// gives way to a size that moves with `k`), then `max` itself, then a size anywhere up
/// to `max` that moves with `k`. The last two make a `max` above the table count: with
/// the table alone, every `--max-payload` from 4 096 up moved the same bytes. `seed`
/// shifts where each peer's sequence starts (0: the edge cases first).
fn size_of_call(k: u32, max: usize, seed: u64) -> usize {
    let k = (u64::from(k).wrapping_add(seed)) as usize;
    let spread = |k: usize| k.wrapping_mul(2_654_435_761) % (max + 1);
    match k % (SIZES.len() + 2) {
        i if i < SIZES.len() && SIZES[i] <= max => SIZES[i],
        i if i == SIZES.len() => max,
        _ => spread(k),
    }
}

/// Byte `i` of call `k` from rank `src`: the first 8 bytes (when there are 8) name the
/// call, so the server can check arrival order; the rest is a checksum-like pattern.
///
/// Byte `i` is `(k·131 + i·7 + src) mod 256`, computed as an 8-bit running value: the
/// same bytes, and the same loop the C echo (`examples/c/echo.c`) runs, so comparing the
/// two measures the ABI, not their harnesses (in 64-bit arithmetic this loop vectorized
/// poorly and cost the Rust echo ~15 % of its calls/s against the C one).
fn fill(src: usize, k: u32, out: &mut [u8]) {
    let mut v = (k as usize).wrapping_mul(131).wrapping_add(src) as u8;
    for b in out.iter_mut() {
        *b = v;
        v = v.wrapping_add(7);
    }
    if out.len() >= 8 {
        out[..8].copy_from_slice(&((src as u64) << 32 | u64::from(k)).to_le_bytes());
    }
}

/// Runs the echo on this rank. Every rank of `x` must call it with the same `cfg`.
pub fn run(x: &impl Collectives, fabric: Fabric, cfg: &EchoConfig) -> Result<EchoReport> {
    cfg.validate()?;
    if cfg.rpc.ring_bytes / 32 <= SMALL_REQS {
        run_sized::<SMALL_REQS>(x, fabric, cfg)
    } else {
        run_sized::<LARGE_REQS>(x, fabric, cfg)
    }
}

/// [`run`] with a request table of `REQS` entries per endpoint.
fn run_sized<const REQS: usize>(
    x: &impl Collectives,
    fabric: Fabric,
    cfg: &EchoConfig,
) -> Result<EchoReport> {
    let node = Node::<REQS>::establish(fabric, x, &cfg.rpc)?;
    let mut echo = Echo::new(node, x.size(), cfg);
    let start = Instant::now();
    while !echo.done() {
        if start.elapsed() > cfg.deadline {
            return Err(echo.stuck());
        }
        if echo.pass()?.work == 0 {
            std::thread::yield_now();
        }
    }
    // The last replies may still sit in the send rings: no peer may wait on a reply
    // this rank never posted while it waits in the barrier below.
    echo.node.flush_all(start + cfg.deadline, |_, _| {})?;
    let elapsed = start.elapsed();
    // Every rank is done sending before any tears its fabric down.
    x.barrier()?;
    let total_responses = x.all_reduce_u64(echo.responses, ReduceOp::Sum)?;
    let total_served = x.all_reduce_u64(echo.served, ReduceOp::Sum)?;
    Ok(EchoReport {
        total_responses,
        total_served,
        elapsed,
        ..echo.report()
    })
}

/// One rank's echo node: its calls carry (peer, call number).
type Node<const REQS: usize> = RpcNode<(usize, u32), EPS, CALLS, REQS>;

/// What one pass of a rank's echo loop did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// Calls issued, responses checked and requests answered.
    pub work: usize,
    /// Completions the pass's poll processed.
    pub completions: usize,
}

/// One rank's side of the echo, a loop pass at a time: the threaded run turns it until
/// it is done, the virtual world turns it as an actor.
struct Echo<'c, const REQS: usize> {
    node: Node<REQS>,
    cfg: &'c EchoConfig,
    rank: usize,
    ranks: usize,
    peers: Vec<usize>,
    /// Next call to issue, calls in flight, next request expected: per peer.
    next: Vec<u32>,
    in_flight: Vec<u32>,
    expect_from: Vec<u32>,
    responses: u64,
    served: u64,
    bytes: u64,
    /// Calls (and as many requests) each rank makes and answers in all.
    want: u64,
    buf: Vec<u8>,
    /// What a response must hold, rebuilt per response without allocating.
    expected: Vec<u8>,
}

impl<'c, const REQS: usize> Echo<'c, REQS> {
    fn new(node: Node<REQS>, ranks: usize, cfg: &'c EchoConfig) -> Self {
        let rank = node.rank();
        let peers: Vec<usize> = (0..ranks).filter(|&p| p != rank).collect();
        Self {
            want: u64::from(cfg.calls_per_peer) * peers.len() as u64,
            node,
            cfg,
            rank,
            ranks,
            peers,
            next: vec![0; ranks],
            in_flight: vec![0; ranks],
            expect_from: vec![0; ranks],
            responses: 0,
            served: 0,
            bytes: 0,
            buf: vec![0; cfg.max_payload.max(8)],
            expected: vec![0; cfg.max_payload.max(8)],
        }
    }

    fn done(&self) -> bool {
        self.responses >= self.want && self.served >= self.want
    }

    fn fail(&self, what: String) -> Error {
        Error::Echo {
            rank: self.rank,
            what,
        }
    }

    /// The error of a rank that ran out of time, saying where it stood.
    fn stuck(&self) -> Error {
        self.fail(format!(
            "deadline: {}/{} responses, {}/{} served, next {:?}, in flight {:?}{}",
            self.responses,
            self.want,
            self.served,
            self.want,
            self.next,
            self.in_flight,
            trace_of(self.node.fabric())
        ))
    }

    /// This rank's counts (the totals are the caller's to add).
    fn report(&self) -> EchoReport {
        EchoReport {
            rank: self.rank,
            ranks: self.ranks,
            responses: self.responses,
            served: self.served,
            bytes: self.bytes,
            total_responses: 0,
            total_served: 0,
            elapsed: Duration::ZERO,
        }
    }

    /// One pass of the loop: issue what the window allows, take the responses, answer
    /// every request that arrived.
    fn pass(&mut self) -> Result<Pass> {
        let (cfg, rank) = (self.cfg, self.rank);
        let mut pass = Pass::default();
        for &p in &self.peers {
            while self.next[p] < cfg.calls_per_peer && self.in_flight[p] < cfg.window {
                let k = self.next[p];
                let len = size_of_call(k, cfg.max_payload, cfg.seed);
                fill(rank, k, &mut self.buf[..len]);
                let id = self.node.endpoint(p).expect("an endpoint per peer");
                match self
                    .node
                    .ctx()
                    .call_with_allowance(id, &self.buf[..len], len as u32, (p, k))
                {
                    Ok(_) => {
                        self.next[p] += 1;
                        self.in_flight[p] += 1;
                        self.bytes += len as u64;
                        pass.work += 1;
                    }
                    Err(e) if e.error.is_retryable() => break,
                    Err(e) => return Err(self.fail(format!("call {k} to rank {p}: {}", e.error))),
                }
            }
        }
        let mut bad: Option<String> = None;
        let (in_flight, responses, expected) =
            (&mut self.in_flight, &mut self.responses, &mut self.expected);
        let n = self.node.ctx().poll(|(p, k), r| {
            in_flight[p] -= 1;
            *responses += 1;
            let len = size_of_call(k, cfg.max_payload, cfg.seed);
            let want = &mut expected[..len];
            fill(rank, k, want);
            match r {
                Ok(got) if got == &want[..] => {}
                Ok(got) => {
                    bad.get_or_insert(format!(
                        "response to call {k} from rank {p}: {} bytes differ from the {len} sent",
                        got.len()
                    ));
                }
                Err(e) => {
                    bad.get_or_insert(format!("call {k} to rank {p} failed: {e}"));
                }
            }
        });
        pass.work += n;
        pass.completions = n;
        if let Some(why) = bad {
            // Why any endpoint failed (copyrpc keeps the first cause).
            let mut causes = String::new();
            for &p in &self.peers {
                let id = self.node.endpoint(p).expect("an endpoint per peer");
                if let Some(c) = self.node.ctx().failure_cause(id) {
                    causes.push_str(&format!("; endpoint to rank {p} failed: {c}"));
                }
            }
            return Err(self.fail(format!("{why}{causes}")));
        }
        while let Some(h) = self.node.ctx().recv() {
            let id = h.endpoint();
            let p = self.node.peer_of(id).expect("requests come from peers");
            let data = h.data(self.node.ctx());
            if data.len() >= 8 {
                let head = u64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
                let (src, k) = ((head >> 32) as usize, head as u32);
                if src != p || k != self.expect_from[p] {
                    return Err(self.fail(format!(
                        "request from rank {p}: names rank {src} call {k}, expected call {}",
                        self.expect_from[p]
                    )));
                }
            }
            self.expect_from[p] += 1;
            let len = data.len();
            h.reply_with(self.node.ctx(), len, |req, out| out.copy_from_slice(req))
                .map_err(|e| self.fail(format!("reply to rank {p}: {}", e.error)))?;
            self.served += 1;
            pass.work += 1;
        }
        Ok(pass)
    }
}

fn trace_of(f: &Fabric) -> String {
    match f {
        Fabric::Sim(s) => format!("\nsim trace:\n{}", s.engine().trace_dump()),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::size_of_call;

    /// Every size is within `max`, `max` itself is sent, and so are sizes above the
    /// table's largest edge case when `max` is above it.
    #[test]
    fn item7_the_sizes_reach_a_max_payload_above_the_table() {
        for max in [0, 20, 4096, 4097, 8000, 12_000, 16_000, 16_384] {
            let sizes: Vec<usize> = (0..2000).map(|k| size_of_call(k, max, 0)).collect();
            assert!(sizes.iter().all(|&s| s <= max), "max {max}");
            assert!(sizes.contains(&max), "max {max} never sent");
            if max > 4096 {
                let above = sizes.iter().filter(|&&s| s > 4096).count();
                assert!(above >= 100, "max {max}: {above} of 2000 above 4096");
            }
        }
    }
}
