//! Rank 0: for each step, prepares its buffers, says it is ready, then makes `iters`
//! calls, each checked, and prints the step's bandwidth.

use std::time::Instant;

use copyrpc_core::bulk::{BulkError, Client, Desc, Pattern};
use copyrpc_core::copyrpc::{EndpointId, Error};
use copyrpc_core::ops::OpError;
use copyrpc_host::bulk::{BufferPool, PoolBuf};

use super::steps::Steps;
use super::{bytes, checksum, get_byte, step_name, Args, Fnv, Node, STOP};

/// What the client checks a step's calls against.
struct Prepared {
    /// Of the put buffer's `n` bytes (sent with each call for the server to check).
    put_sum: u64,
    /// Of what a pattern that pushes must leave in the get buffer.
    get_sum: u64,
}

/// Fills the first `n` bytes of `put` for `pat` and computes both checksums, in one
/// pass (no copy of the expected data is made: at 1 GiB that was a second gigabyte).
fn prepare(put: &mut [u8], pat: Pattern, n: usize) -> Prepared {
    let (mut put_sum, mut get_sum) = (Fnv::new(), Fnv::new());
    for (i, b) in put[..n].iter_mut().enumerate() {
        *b = (i.wrapping_mul(7) ^ n.wrapping_mul(31)) as u8;
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

/// The client's buffers and its calls' state.
struct Caller<'a> {
    a: &'a Args,
    ep: EndpointId,
    c: Client<4>,
    putp: BufferPool,
    getp: BufferPool,
    pb: PoolBuf,
    gb: PoolBuf,
    calls: u64,
}

impl Caller<'_> {
    /// One call of `pat` for `n` bytes with buffers `descs` (put, get), waited for
    /// within `--deadline-s`; its result (the bytes the reply says moved), or why it
    /// failed, naming the cause and the peer.
    fn call(
        &mut self,
        node: &mut Node,
        steps: &Steps,
        (pat, n): (Pattern, usize),
        (put, get): (Option<Desc>, Option<Desc>),
        extra: &[u8],
    ) -> Result<u64, String> {
        let deadline = Instant::now() + self.a.deadline;
        let what = step_name(pat, n);
        let op = loop {
            match self.c.call(node.ctx(), self.ep, pat, put, get, extra) {
                Ok(op) => break op,
                Err(BulkError::Call(e)) if e.is_retryable() && Instant::now() < deadline => {
                    node.ctx().poll(|_, _| {});
                    std::thread::yield_now();
                }
                Err(BulkError::Call(Error::EndpointFailed)) => {
                    return Err(self.failed(node, steps, &what));
                }
                Err(e) => return Err(format!("{what}: the call was refused: {e:?}")),
            }
        };
        while !self.c.ops().is_done(op) {
            let c = &self.c;
            let handled = node.ctx().poll(|ud, r| {
                c.on_response(ud, r);
            });
            // On a shared core the device model's engine threads need the CPU to move
            // the bytes: give it up when there was nothing to do (as the echo does).
            if handled == 0 {
                std::thread::yield_now();
            }
            if Instant::now() > deadline {
                self.c.cancel_all();
                return Err(format!(
                    "{pat:?}: no reply from rank {} within {:?} for {n} B (--deadline-s: one \
                     transfer of a large size on the sim fabric can take longer; {})",
                    steps.peer(),
                    self.a.deadline,
                    steps.peer_state()
                ));
            }
        }
        self.calls += 1;
        match self.c.ops().result(op).unwrap_or(Err(OpError::Gone)) {
            Ok(moved) => Ok(moved),
            Err(OpError::Failed) if node.ctx().is_failed(self.ep) => {
                Err(self.failed(node, steps, &what))
            }
            Err(OpError::Failed) => Err(format!(
                "{what}: rank {} reports the transfer failed on its side (its line says why)",
                steps.peer()
            )),
            Err(e) => Err(format!("{what}: {e:?} ({})", steps.peer_state())),
        }
    }

    /// Why a call ended because the endpoint failed: its cause and the peer's state.
    fn failed(&self, node: &mut Node, steps: &Steps, what: &str) -> String {
        let cause = node
            .ctx()
            .failure_cause(self.ep)
            .map_or_else(|| "cause unknown".into(), |c| c.to_string());
        format!(
            "{what}: the endpoint to rank {} failed: {cause} ({})",
            steps.peer(),
            steps.peer_state()
        )
    }

    /// A step's `iters` calls, each checked, and its progress line.
    fn transfer(
        &mut self,
        node: &mut Node,
        steps: &Steps,
        (pat, n): (Pattern, usize),
        prepared: &Prepared,
    ) -> Result<(), String> {
        let what = step_name(pat, n);
        let pd = pat.pulls().then(|| self.putp.desc(&self.pb, n as u64));
        let gd = pat.pushes().then(|| self.getp.desc(&self.gb, n as u64));
        let descs = (
            pd.transpose().map_err(|e| format!("{e:?}"))?,
            gd.transpose().map_err(|e| format!("{e:?}"))?,
        );
        let t0 = Instant::now();
        for _ in 0..self.a.iters {
            if pat.pushes() {
                // SAFETY: no call is in flight.
                unsafe { bytes(&mut self.getp, &self.gb, n) }.fill(0);
            }
            let extra = prepared.put_sum.to_le_bytes();
            let got = self.call(node, steps, (pat, n), descs, &extra)?;
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
        }
        let s = t0.elapsed().as_secs_f64();
        let both = if pat == Pattern::Both { 2.0 } else { 1.0 };
        let moved = (n as f64) * f64::from(self.a.iters) * both;
        println!(
            "rank 0/2: {what} x {}: {:.3} MiB/s ok",
            self.a.iters,
            moved / s / f64::from(1 << 20)
        );
        Ok(())
    }
}

/// The client's run; its last line's text, or why it failed.
pub fn run(node: &mut Node, a: &Args, steps: &mut Steps, max: usize) -> Result<String, String> {
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
    let mut me = Caller {
        a,
        ep,
        c: Client::new(),
        putp,
        getp,
        pb,
        gb,
        calls: 0,
    };
    for (i, (pat, n)) in a.schedule().into_iter().enumerate() {
        // SAFETY: no call is in flight: nothing targets the client's buffers.
        let prepared = prepare(unsafe { bytes(&mut me.putp, &me.pb, n) }, pat, n);
        steps.ready(i as u32, &step_name(pat, n))?;
        me.transfer(node, steps, (pat, n), &prepared)?;
    }
    me.call(node, steps, (Pattern::HeaderOnly, 0), (None, None), STOP)?;
    me.putp.release(me.pb);
    me.getp.release(me.gb);
    Ok(format!("calls={}", me.calls))
}
