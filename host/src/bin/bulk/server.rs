//! Rank 1: for each step, says it is ready, then serves the step's `iters` requests,
//! checking what a PUT pulled; then the client's STOP.

use std::time::Instant;

use copyrpc_core::bulk::{Link, Pattern, Request, Server};
use copyrpc_core::copyrpc::EndpointId;
use copyrpc_host::bulk::{BufferPool, PoolBuf};

use super::client::PeerView;
use super::steps::Steps;
use super::{bytes, checksum, get_byte, step_name, Args, Node, SLOTS, STOP};

/// What one pass of the server did.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServerPass {
    /// Anything at all (a completion, a request, an answer).
    pub progressed: bool,
    /// Requests taken.
    pub took: u32,
    /// Requests answered.
    pub answered: u32,
}

/// The server's buffers and what it has served.
pub struct Serving<'a> {
    a: &'a Args,
    ep: EndpointId,
    s: Server<4, SLOTS>,
    putp: BufferPool,
    getp: BufferPool,
    pb: PoolBuf,
    gb: PoolBuf,
    /// The size the get buffer holds a GET's data for (0: none).
    filled_for: usize,
    /// The client's checksum of the last request's PUT data.
    sum: Option<u64>,
    /// Requests answered so far.
    pub served: u64,
}

/// What a step expects of each request: its pattern and size (`None`: the STOP).
pub type Due = Option<(Pattern, usize)>;

impl Serving<'_> {
    /// Serves requests until `count` of them (as `due` says) are answered and posted.
    /// The wait for each starts when the previous one was answered, or now: the ready
    /// exchange just said the client is about to send.
    fn serve(
        &mut self,
        node: &mut Node,
        steps: &Steps,
        due: Due,
        count: u32,
    ) -> Result<(), String> {
        let what = due.map_or_else(|| "its STOP".to_string(), |(p, n)| step_name(p, n));
        let d = self.a.deadline;
        let mut answered = 0;
        let mut last = Instant::now();
        let mut bad: Option<String> = None;
        let state = || steps.peer_state();
        let peer = PeerView {
            rank: steps.peer(),
            state: &state,
        };
        while answered < count || !self.s.idle() {
            let pass = self.pass(node, &peer, due, &mut bad)?;
            if pass.answered > 0 || pass.took > 0 {
                last = Instant::now();
            }
            answered += pass.answered;
            if !pass.progressed {
                std::thread::yield_now();
            }
            if last.elapsed() > d {
                // The client gives up on a call at the same bound: a transfer still
                // running then has no one waiting for it.
                return Err(if self.s.idle() {
                    format!(
                        "no request from rank {} for {d:?} while {what} was due ({})",
                        steps.peer(),
                        steps.peer_state()
                    )
                } else {
                    format!(
                        "a transfer still running {d:?} after its request (--deadline-s; \
                         {what}; {})",
                        steps.peer_state()
                    )
                });
            }
        }
        // Every reply posted before this rank blocks in the next exchange, or the client
        // would wait for one that sits in our send ring.
        node.flush_all(Instant::now() + d, |_, _| {})
            .map_err(|e| e.to_string())?;
        bad.map_or(Ok(()), Err)
    }

    /// One pass of the server's loop: the completions, every request that arrived
    /// (checked against `due`; the first problem goes to `bad`), the transfers moved on,
    /// every request whose transfers ended answered.
    pub fn pass(
        &mut self,
        node: &mut Node,
        peer: &PeerView<'_>,
        due: Due,
        bad: &mut Option<String>,
    ) -> Result<ServerPass, String> {
        let mut out = ServerPass {
            progressed: node.ctx().poll(|_, _| {}) > 0,
            ..ServerPass::default()
        };
        if node.ctx().is_failed(self.ep) {
            let cause = node
                .ctx()
                .failure_cause(self.ep)
                .map_or_else(|| "cause unknown".into(), |c| c.to_string());
            let what = due.map_or_else(|| "its STOP".to_string(), |(p, n)| step_name(p, n));
            return Err(format!(
                "serving {what}: the endpoint to rank {} failed: {cause} ({})",
                peer.rank,
                (peer.state)()
            ));
        }
        while let Some(h) = node.ctx().recv() {
            out.progressed = true;
            out.took += 1;
            if let Err(why) = self.accept(node, h, due) {
                bad.get_or_insert(why);
            }
        }
        self.s.progress(node.ctx());
        while let Some((id, req)) = self.s.next_ready() {
            if let Err(why) = self.check(&req) {
                bad.get_or_insert(why);
            }
            self.s
                .respond(node.ctx(), id, req.get.len)
                .map_err(|e| format!("{e:?}"))?;
            self.served += 1;
            out.answered += 1;
            out.progressed = true;
        }
        Ok(out)
    }

    /// Whether no request is being served.
    pub fn idle(&self) -> bool {
        self.s.idle()
    }

    /// Takes one request: checks it is the one `due`, fills the get buffer for a GET.
    fn accept(
        &mut self,
        node: &mut Node,
        h: copyrpc_core::copyrpc::RecvHandle,
        due: Due,
    ) -> Result<(), String> {
        let Some((req, extra)) = Request::parse(h.data(node.ctx())) else {
            // SAFETY: no buffer is named: nothing is posted.
            let _ = unsafe { self.s.accept(node.ctx(), h, None, None) };
            return Err("a request that does not parse".into());
        };
        let len = req.put.len.max(req.get.len) as usize;
        let expected = match due {
            None => req.pattern == Pattern::HeaderOnly && extra == STOP,
            Some((p, n)) => req.pattern == p && len == n,
        };
        // The client's checksum of a PUT's bytes: the request's caller bytes, read now
        // (the ring copy is gone once the request is answered).
        self.sum = extra
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        let put = req
            .pattern
            .pulls()
            .then(|| self.putp.local(&self.pb, req.put.len).ok())
            .flatten();
        let get = req
            .pattern
            .pushes()
            .then(|| self.getp.local(&self.gb, req.get.len).ok())
            .flatten();
        if req.pattern == Pattern::Get && self.filled_for != req.get.len as usize {
            let n = req.get.len as usize;
            // SAFETY: one request at a time (the client waits for each reply), so no
            // operation targets the get buffer now.
            let g = unsafe { bytes(&mut self.getp, &self.gb, n) };
            for (i, b) in g.iter_mut().enumerate() {
                *b = get_byte(n, i);
            }
            self.filled_for = n;
        }
        // SAFETY: the pool buffers serve one request at a time and are touched only
        // between `next_ready` and `respond`.
        if let Err(e) = unsafe { self.s.accept(node.ctx(), h, put, get) } {
            return Err(format!("refused a {:?} request: {e:?}", req.pattern));
        }
        if !expected {
            let what = due.map_or_else(|| "the STOP".to_string(), |(p, n)| step_name(p, n));
            return Err(format!(
                "rank 0 sent {} where {what} was due: the ranks run different --pattern or \
                 --sizes",
                step_name(req.pattern, len)
            ));
        }
        Ok(())
    }

    /// Checks a request whose PUT data arrived, and makes BOTH's reply data.
    fn check(&mut self, req: &Request) -> Result<(), String> {
        let n = req.put.len as usize;
        if !req.pattern.pulls() {
            return Ok(());
        }
        // SAFETY: the READs of this request completed (`next_ready`).
        let p = unsafe { bytes(&mut self.putp, &self.pb, n) };
        let ok = Some(checksum(p)) == self.sum;
        if req.pattern == Pattern::Both {
            // SAFETY: as above, and the get buffer is not in use before `respond`.
            let g = unsafe { bytes(&mut self.getp, &self.gb, n) };
            for (o, i) in g.iter_mut().zip(p.iter()) {
                *o = i ^ 0x5a;
            }
            self.filled_for = 0;
        }
        if ok {
            Ok(())
        } else {
            Err(format!(
                "{:?} {n} B: the pulled bytes' checksum differs",
                req.pattern
            ))
        }
    }
}

impl<'a> Serving<'a> {
    /// The server of rank 1's endpoint to rank 0, with buffers of `max` bytes.
    pub fn new(node: &mut Node, a: &'a Args, max: usize) -> Result<Self, String> {
        let fabric_pool =
            |name| BufferPool::new(node.fabric(), name, 1, max).map_err(|e| e.to_string());
        let (mut putp, mut getp) = (
            fabric_pool("bulk-server-put")?,
            fabric_pool("bulk-server-get")?,
        );
        let (pb, gb) = (
            putp.lease().expect("one buffer"),
            getp.lease().expect("one buffer"),
        );
        let ep = node.endpoint(0).ok_or("no endpoint to rank 0")?;
        let link = Link::new(node.ctx(), ep);
        let s = Server::<4, SLOTS>::new(link, a.chunk, a.depth).map_err(|e| format!("{e:?}"))?;
        Ok(Self {
            a,
            ep,
            s,
            putp,
            getp,
            pb,
            gb,
            filled_for: 0,
            served: 0,
            sum: None,
        })
    }

    /// Returns the buffers to their pools.
    pub fn release(mut self) {
        self.putp.release(self.pb);
        self.getp.release(self.gb);
    }
}

/// The server's run; its last line's text, or why it failed.
pub fn run(node: &mut Node, a: &Args, steps: &mut Steps, max: usize) -> Result<String, String> {
    let mut v = Serving::new(node, a, max)?;
    for (i, (pat, n)) in a.schedule().into_iter().enumerate() {
        steps.ready(i as u32, &step_name(pat, n))?;
        v.serve(node, steps, Some((pat, n)), a.iters)?;
    }
    v.serve(node, steps, None, 1)?;
    let served = v.served;
    v.release();
    Ok(format!("served={served}"))
}
