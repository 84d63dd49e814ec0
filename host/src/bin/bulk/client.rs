//! Rank 0: for each step, prepares its buffers, says it is ready, then makes `iters`
//! calls, each checked, and prints the step's bandwidth.

use std::time::Instant;

use copyrpc_core::bulk::{BulkError, Client, Desc, Pattern};
use copyrpc_core::copyrpc::{EndpointId, Error};
use copyrpc_core::ops::{OpError, OpHandle};
use copyrpc_host::bulk::{BufferPool, PoolBuf};

use super::steps::Steps;
use super::{bytes, checksum, get_byte, step_name, Args, Fnv, Node, STOP};

/// What the client checks a step's calls against.
pub struct Prepared {
    /// Of the put buffer's `n` bytes (sent with each call for the server to check).
    pub put_sum: u64,
    /// Of what a pattern that pushes must leave in the get buffer.
    pub get_sum: u64,
}

/// Fills the first `n` bytes of `put` for `pat` and computes both checksums, in one
/// pass (no copy of the expected data is made: at 1 GiB that was a second gigabyte).
pub fn prepare(put: &mut [u8], pat: Pattern, n: usize, seed: u64) -> Prepared {
    let (mut put_sum, mut get_sum) = (Fnv::new(), Fnv::new());
    for (i, b) in put[..n].iter_mut().enumerate() {
        *b = (i.wrapping_mul(7) ^ n.wrapping_mul(31)) as u8 ^ seed as u8;
        if pat.pulls() {
            put_sum.byte(*b);
        }
        match pat {
            Pattern::Both => get_sum.byte(*b ^ 0x5a),
            Pattern::Get => get_sum.byte(get_byte(n, i)),
            Pattern::Put | Pattern::HeaderOnly => {}
        }
    }
    Prepared {
        put_sum: put_sum.get(),
        get_sum: get_sum.get(),
    }
}

/// Who the client calls, for its errors: the peer's rank and what is known of its state
/// (from `/proc` in a threaded run).
pub struct PeerView<'p> {
    pub rank: usize,
    pub state: &'p dyn Fn() -> String,
}

/// The client's buffers and its calls' state.
pub struct Caller<'a> {
    a: &'a Args,
    ep: EndpointId,
    c: Client<4>,
    putp: BufferPool,
    getp: BufferPool,
    pb: PoolBuf,
    gb: PoolBuf,
    /// Calls answered so far.
    pub calls: u64,
}

impl<'a> Caller<'a> {
    /// The client of rank 0's endpoint to rank 1, with buffers of `max` bytes.
    pub fn new(node: &mut Node, a: &'a Args, max: usize) -> Result<Self, String> {
        let ep = node.endpoint(1).ok_or("no endpoint to rank 1")?;
        let fabric_pool =
            |name| BufferPool::new(node.fabric(), name, 1, max).map_err(|e| e.to_string());
        let (mut putp, mut getp) = (
            fabric_pool("bulk-client-put")?,
            fabric_pool("bulk-client-get")?,
        );
        let (pb, gb) = (
            putp.lease().expect("one buffer"),
            getp.lease().expect("one buffer"),
        );
        Ok(Self {
            a,
            ep,
            c: Client::new(),
            putp,
            getp,
            pb,
            gb,
            calls: 0,
        })
    }

    /// Fills the put buffer for a step and says what its calls are checked against.
    pub fn prepare(&mut self, pat: Pattern, n: usize) -> Prepared {
        // SAFETY: no call is in flight: nothing targets the client's buffers.
        prepare(
            unsafe { bytes(&mut self.putp, &self.pb, n) },
            pat,
            n,
            self.a.seed,
        )
    }

    /// The buffers a step's calls name: (put, get).
    pub fn descs(&self, pat: Pattern, n: usize) -> Result<(Option<Desc>, Option<Desc>), String> {
        let pd = pat.pulls().then(|| self.putp.desc(&self.pb, n as u64));
        let gd = pat.pushes().then(|| self.getp.desc(&self.gb, n as u64));
        Ok((
            pd.transpose().map_err(|e| format!("{e:?}"))?,
            gd.transpose().map_err(|e| format!("{e:?}"))?,
        ))
    }

    /// Before a call of a pattern that pushes: the get buffer zeroed, so the check
    /// after it sees only what this call wrote.
    pub fn clear_get(&mut self, pat: Pattern, n: usize) {
        if pat.pushes() {
            // SAFETY: no call is in flight.
            unsafe { bytes(&mut self.getp, &self.gb, n) }.fill(0);
        }
    }

    /// One attempt at a call: `Ok(None)` when the ring or credit has no room yet (poll,
    /// then try again).
    pub fn try_call(
        &mut self,
        node: &mut Node,
        peer: &PeerView<'_>,
        (pat, n): (Pattern, usize),
        (put, get): (Option<Desc>, Option<Desc>),
        extra: &[u8],
    ) -> Result<Option<OpHandle>, String> {
        match self.c.call(node.ctx(), self.ep, pat, put, get, extra) {
            Ok(op) => Ok(Some(op)),
            Err(BulkError::Call(e)) if e.is_retryable() => Ok(None),
            Err(BulkError::Call(Error::EndpointFailed)) => {
                Err(self.failed(node, peer, &step_name(pat, n)))
            }
            Err(e) => Err(format!(
                "{}: the call was refused: {e:?}",
                step_name(pat, n)
            )),
        }
    }

    /// Takes the responses that arrived; how many completions the poll handled.
    pub fn poll(&mut self, node: &mut Node) -> usize {
        let c = &self.c;
        node.ctx().poll(|ud, r| {
            c.on_response(ud, r);
        })
    }

    /// Whether call `op` has ended.
    pub fn is_done(&self, op: OpHandle) -> bool {
        self.c.ops().is_done(op)
    }

    /// The end of call `op`: the bytes its reply says moved, or why it failed, naming
    /// the cause and the peer.
    pub fn result(
        &mut self,
        node: &mut Node,
        peer: &PeerView<'_>,
        (pat, n): (Pattern, usize),
        op: OpHandle,
    ) -> Result<u64, String> {
        self.calls += 1;
        let what = step_name(pat, n);
        match self.c.ops().result(op).unwrap_or(Err(OpError::Gone)) {
            Ok(moved) => Ok(moved),
            Err(OpError::Failed) if node.ctx().is_failed(self.ep) => {
                Err(self.failed(node, peer, &what))
            }
            Err(OpError::Failed) => Err(format!(
                "{what}: rank {} reports the transfer failed on its side (its line says why)",
                peer.rank
            )),
            Err(e) => Err(format!("{what}: {e:?} ({})", (peer.state)())),
        }
    }

    /// A call's reply checked: the size it says moved, and what a pattern that pushes
    /// left in the get buffer.
    pub fn check(
        &mut self,
        (pat, n): (Pattern, usize),
        got: u64,
        prepared: &Prepared,
    ) -> Result<(), String> {
        let what = step_name(pat, n);
        if got != n as u64 {
            return Err(format!("{what}: the reply says {got} B"));
        }
        if pat.pushes() {
            // SAFETY: the call ended: the server's WRITEs landed before its reply.
            let g = unsafe { bytes(&mut self.getp, &self.gb, n) };
            if checksum(g) != prepared.get_sum {
                return Err(format!("{what}: wrong bytes in the get buffer"));
            }
        }
        Ok(())
    }

    /// Gives every call up (a deadline passed).
    pub fn cancel(&self) {
        self.c.cancel_all();
    }

    /// Returns the buffers to their pools.
    pub fn release(mut self) {
        self.putp.release(self.pb);
        self.getp.release(self.gb);
    }

    /// One call of `pat` for `n` bytes with buffers `descs` (put, get), waited for
    /// within `--deadline-s`; its result (the bytes the reply says moved), or why it
    /// failed, naming the cause and the peer.
    fn call(
        &mut self,
        node: &mut Node,
        peer: &PeerView<'_>,
        step: (Pattern, usize),
        descs: (Option<Desc>, Option<Desc>),
        extra: &[u8],
    ) -> Result<u64, String> {
        let (pat, n) = step;
        let deadline = Instant::now() + self.a.deadline;
        let op = loop {
            if let Some(op) = self.try_call(node, peer, step, descs, extra)? {
                break op;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{}: no room to call rank {} within {:?} ({})",
                    step_name(pat, n),
                    peer.rank,
                    self.a.deadline,
                    (peer.state)()
                ));
            }
            node.ctx().poll(|_, _| {});
            std::thread::yield_now();
        };
        while !self.is_done(op) {
            // On a shared core the device model's engine threads need the CPU to move
            // the bytes: give it up when there was nothing to do (as the echo does).
            if self.poll(node) == 0 {
                std::thread::yield_now();
            }
            if Instant::now() > deadline {
                self.cancel();
                return Err(format!(
                    "{pat:?}: no reply from rank {} within {:?} for {n} B (--deadline-s: one \
                     transfer of a large size on the sim fabric can take longer; {})",
                    peer.rank,
                    self.a.deadline,
                    (peer.state)()
                ));
            }
        }
        self.result(node, peer, step, op)
    }

    /// Why a call ended because the endpoint failed: its cause and the peer's state.
    fn failed(&self, node: &mut Node, peer: &PeerView<'_>, what: &str) -> String {
        let cause = node
            .ctx()
            .failure_cause(self.ep)
            .map_or_else(|| "cause unknown".into(), |c| c.to_string());
        format!(
            "{what}: the endpoint to rank {} failed: {cause} ({})",
            peer.rank,
            (peer.state)()
        )
    }

    /// A step's `iters` calls, each checked, and its progress line.
    fn transfer(
        &mut self,
        node: &mut Node,
        peer: &PeerView<'_>,
        step: (Pattern, usize),
        prepared: &Prepared,
    ) -> Result<(), String> {
        let (pat, n) = step;
        let descs = self.descs(pat, n)?;
        let t0 = Instant::now();
        for _ in 0..self.a.iters {
            self.clear_get(pat, n);
            let extra = prepared.put_sum.to_le_bytes();
            let got = self.call(node, peer, step, descs, &extra)?;
            self.check(step, got, prepared)?;
        }
        println!(
            "rank 0/2: {} x {}: {:.3} MiB/s ok",
            step_name(pat, n),
            self.a.iters,
            mib_per_s(step, self.a.iters, t0.elapsed().as_secs_f64())
        );
        Ok(())
    }
}

/// The bandwidth of `iters` calls of a step that took `secs` (BOTH moves its bytes
/// twice).
pub fn mib_per_s((pat, n): (Pattern, usize), iters: u32, secs: f64) -> f64 {
    let both = if pat == Pattern::Both { 2.0 } else { 1.0 };
    (n as f64) * f64::from(iters) * both / secs / f64::from(1 << 20)
}

/// The client's run; its last line's text, or why it failed.
pub fn run(node: &mut Node, a: &Args, steps: &mut Steps, max: usize) -> Result<String, String> {
    let mut me = Caller::new(node, a, max)?;
    for (i, (pat, n)) in a.schedule().into_iter().enumerate() {
        let prepared = me.prepare(pat, n);
        steps.ready(i as u32, &step_name(pat, n))?;
        let state = || steps.peer_state();
        let peer = PeerView {
            rank: steps.peer(),
            state: &state,
        };
        me.transfer(node, &peer, (pat, n), &prepared)?;
    }
    let state = || steps.peer_state();
    let peer = PeerView {
        rank: steps.peer(),
        state: &state,
    };
    me.call(node, &peer, (Pattern::HeaderOnly, 0), (None, None), STOP)?;
    let calls = me.calls;
    me.release();
    Ok(format!("calls={calls}"))
}
