//! `poll`: the one place completions are read and batches go out, in the order of
//! docs/spec/copyrpc.md#poll.

use mlx5_raw::layout::{Completion, CqeBrief, CqeOpcode};

use super::context::{Context, EndpointId};
use super::endpoint::{EpData, Flush};
use super::pending::Pending;
use super::requests::Link;
use super::serve::{Incoming, Outcome};
use super::stats::Stats;
use super::{Error, FailureCause, Side};
use crate::wire::{decode_imm, from_response_id, parse_batch, Imm, FLOW_METADATA_SIZE};

/// Why a received batch failed its endpoint.
#[derive(Debug, Clone, Copy)]
enum Violation {
    /// The batch broke the protocol.
    Protocol,
    /// A `poll_serve` handler's reply could not be written.
    Reply,
}

impl Violation {
    #[cold]
    fn cause(self) -> FailureCause {
        match self {
            Self::Protocol => FailureCause::ProtocolViolation,
            Self::Reply => FailureCause::ReplyWrite,
        }
    }
}

/// Where a batch's messages go: responses to their pending calls and `on_response`,
/// requests to `on_request` (with `SERVE`, while offered; see `serve`) or the
/// endpoint's request table.
struct Delivery<'a, U, const CALLS: usize, R, Q> {
    pending: &'a mut Pending<U, CALLS>,
    stats: &'a mut Stats,
    on_response: &'a mut R,
    on_request: &'a mut Q,
}

/// Processes one received batch of endpoint `ep`: metadata first (credit before the
/// messages it makes room for), then each message in ring order; requests are offered
/// while `offer` holds, and listed otherwise. Returns the sequence range of the
/// requests listed.
#[inline]
fn on_batch<U, const CALLS: usize, const REQS: usize, const SERVE: bool, R, Q>(
    ep: u16,
    d: &mut EpData<REQS>,
    imm: [u8; 4],
    mut offer: bool,
    to: Delivery<'_, U, CALLS, R, Q>,
) -> Result<(u32, u32), Violation>
where
    R: FnMut(U, Result<&[u8], Error>),
    Q: FnMut(Incoming<'_>),
{
    let (span, bytes, requests) =
        d.rx.arrive(decode_imm(Imm::from_bytes(imm)))
            .map_err(|_| Violation::Protocol)?;
    let first = requests.tail();
    let batch = parse_batch(bytes).map_err(|_| Violation::Protocol)?;
    let meta = batch.meta();
    d.tx.on_metadata(meta.ring_credit_return, meta.credit_grant)
        .map_err(|_| Violation::Protocol)?;
    let mut pos = span.start + FLOW_METADATA_SIZE;
    for m in batch.messages() {
        // Not `map_err(..)?`: rebuilding the result around a message cost every
        // message a few instructions.
        let Ok(m) = m else {
            return Err(Violation::Protocol);
        };
        if m.is_response() {
            match to.pending.remove(ep, from_response_id(m.call_id)) {
                Some(u) => (to.on_response)(u, Ok(m.payload)),
                None => count_stray_response(to.stats),
            }
        } else {
            if SERVE && offer {
                let mut outcome = Outcome::Left;
                (to.on_request)(Incoming {
                    ep: EndpointId(ep),
                    call_id: m.call_id,
                    blocks: m.piggyback,
                    data: m.payload,
                    writer: &mut d.tx,
                    outcome: &mut outcome,
                });
                match outcome {
                    Outcome::Replied => {
                        to.stats.served_in_poll += 1;
                        pos += m.padded_len();
                        continue;
                    }
                    // The rest of the batch fails with the endpoint; its pending calls
                    // complete through the fail-drain, once each.
                    Outcome::Failed => return Err(Violation::Reply),
                    // Later requests queue behind it (arrival order).
                    Outcome::Left => offer = false,
                }
            }
            // Linked to the next sequence number; `link_requests` ends the chain at
            // the batch's last request.
            let seq = requests.tail();
            requests
                .push(
                    pos,
                    m.call_id,
                    m.piggyback,
                    m.payload.len() as u32,
                    Link::to(ep, seq.wrapping_add(1)),
                )
                .ok_or(Violation::Protocol)?;
        }
        pos += m.padded_len();
    }
    d.rx.parsed_to(span.start + span.len);
    Ok((first, d.rx.requests().tail()))
}

/// A response matching no pending call. Out of line and cold: inlined, the compiler
/// kept the counter in a register across the message loop, loading it (and its cache
/// line) on every batch.
#[cold]
#[inline(never)]
fn count_stray_response(stats: &mut Stats) {
    stats.stray_responses += 1;
}

impl<U, const EPS: usize, const CALLS: usize, const REQS: usize> Context<U, EPS, CALLS, REQS> {
    /// Makes progress, in the spec's order (docs/spec/copyrpc.md#poll):
    ///
    /// 1. recv CQ: each batch's metadata, then its messages; requests are queued for
    ///    [`recv`](Self::recv), responses go to `on_response` with their user data;
    /// 2. SRQ: reposted in one doorbell once fewer than 2/3 of its WQEs are posted;
    /// 3. send CQ: WQEs retired, READ results applied, errors fail their endpoint;
    /// 4. every endpoint flushed: queued batches posted, one doorbell per endpoint;
    /// 5. every pending call of a failed endpoint completed with an error, once.
    ///
    /// Each step is bounded (at most one CQ's worth of completions per CQ), so `poll`
    /// always returns. Returns the number of completions handled.
    ///
    /// A poll that finds both CQs empty and no endpoint with anything to post returns
    /// at once: that test is the whole cost of an idle poll.
    #[inline]
    pub fn poll(&mut self, on_response: impl FnMut(U, Result<&[u8], Error>)) -> usize {
        let Some(recv) = self.start_poll() else {
            return 0;
        };
        self.poll_inner::<false>(recv, u32::MAX, on_response, |_| {})
    }

    /// The check a caller spins on while it waits: `true` when [`poll`](Self::poll)
    /// would find nothing to do (no completion in either CQ, no endpoint with anything
    /// to post, no idle-peer probe sweep due), `false` when it should call `poll`. It
    /// reads the two CQs' next owner bytes and two words of the context, writes nothing
    /// but the poll count, and needs no closure, so a waiting loop
    /// (`while ctx.idle() { spin_loop() }`) costs a fraction of a `poll` that returns
    /// early (docs/PERFORMANCE.md, "Latency path"). It counts as a poll toward the
    /// probe sweep, so peers are still probed while a caller only spins on it; the
    /// `poll` that follows a `false` counts again, which only brings the next sweep
    /// earlier.
    #[inline(always)]
    pub fn idle(&mut self) -> bool {
        self.start_poll().is_none()
    }

    /// [`poll`](Self::poll), taking at most `max` completions from the recv CQ (each an
    /// arrived batch: its responses go to `on_response`, its requests to the receive
    /// queue); the rest stay in the CQ, in arrival order, for the next call. For a loop
    /// that serves several protocols and bounds each one's turn. The other steps run as
    /// in `poll` (send completions hand nothing out; a failed endpoint's pending calls
    /// still complete in one go). `max == 0` reads no batch but still runs them.
    /// Returns the number of completions handled, of both CQs.
    ///
    /// A batch is one unit: every message it carries is handed out with it, so `max`
    /// bounds batches, not responses.
    pub fn poll_bounded(
        &mut self,
        max: u32,
        on_response: impl FnMut(U, Result<&[u8], Error>),
    ) -> usize {
        let Some(recv) = self.start_poll() else {
            return 0;
        };
        self.poll_inner::<false>(recv, max, on_response, |_| {})
    }

    /// Counts a poll and says whether it has something to do: `None` when there is no
    /// CQE in either CQ, every endpoint's flush would find nothing due (`Dirty`'s
    /// invariant) and no probe sweep is due (the SRQ needs nothing either: only a recv
    /// completion consumes its WQEs); else whether the recv CQ showed a CQE. The recv
    /// CQ is tested first, so a poll that finds a batch tests it once and goes straight
    /// to it (the answer is passed on instead of asked again), and one that finds it
    /// empty leaves a CQE landing after the test for the next poll (docs/PERFORMANCE.md,
    /// "Latency path").
    #[inline(always)]
    pub(crate) fn start_poll(&mut self) -> Option<bool> {
        self.polls = self.polls.wrapping_add(1);
        if !self.recv_cq.is_empty() {
            return Some(true);
        }
        // Only the words `EPS` endpoints can use: one for up to 64.
        let idle = (0..EPS.div_ceil(64)).all(|w| self.dirty.word(w) == 0)
            && self.polls < self.next_sweep
            && self.send_cq.is_empty();
        (!idle).then_some(false)
    }

    /// Marks every endpoint with pending calls for a visit, so the flush posts the
    /// idle-peer probe of any whose interval ran out while nothing else called for a
    /// visit. Every `probe_sweep` polls: a probe goes out at most a quarter of its
    /// interval late.
    #[cold]
    fn sweep_probes(&mut self) {
        self.next_sweep = self.polls.saturating_add(self.probe_sweep);
        for (i, e) in self.eps.iter().enumerate() {
            if e.is_some() && self.pending.on_ep(i as u16) > 0 {
                self.dirty.note(i as u16, Flush::Needed);
            }
        }
    }

    /// [`poll`](Self::poll), and with `SERVE` [`poll_serve`](Self::poll_serve), once
    /// [`start_poll`](Self::start_poll) said there is something to do, with
    /// its answer `recv` (the recv CQ showed a CQE); at most `max_recv` recv
    /// completions are taken.
    #[inline]
    pub(crate) fn poll_inner<const SERVE: bool>(
        &mut self,
        recv: bool,
        max_recv: u32,
        mut on_response: impl FnMut(U, Result<&[u8], Error>),
        mut on_request: impl FnMut(Incoming<'_>),
    ) -> usize {
        let mut handled = 0;
        // Each CQ's loop, consumer-index test and (recv) SRQ test only when the CQ shows
        // a CQE: a busy poll at one call in flight has work in one CQ at most, and the
        // owner test alone is cheaper than setting up the loop (docs/PERFORMANCE.md,
        // "Latency path").
        if recv {
            handled += self.poll_recv_cq::<SERVE>(max_recv, &mut on_response, &mut on_request);
        }
        if !self.send_cq.is_empty() {
            handled += self.poll_send_cq();
        }

        if self.polls >= self.next_sweep {
            self.sweep_probes();
        }
        // Steps 4 and 5 per endpoint, in index order: an endpoint's drain depends only
        // on its own flush.
        self.flush_dirty(true, |pending, ep| {
            pending.drain_ep(ep, |u| on_response(u, Err(Error::EndpointFailed)));
            true
        });
        handled
    }

    /// Steps 1 and 2 of [`poll`](Self::poll): at most `max_recv` recv completions, then
    /// the SRQ repost if it fell below its mark. Returns the completions taken.
    #[inline(always)]
    fn poll_recv_cq<const SERVE: bool>(
        &mut self,
        max_recv: u32,
        on_response: &mut impl FnMut(U, Result<&[u8], Error>),
        on_request: &mut impl FnMut(Incoming<'_>),
    ) -> usize {
        let mut handled = 0;
        for _ in 0..self.recv_cq.cqe_cnt().min(max_recv) {
            let Some(cqe) = self.recv_cq.poll() else {
                break;
            };
            handled += 1;
            // A batch (a successful WRITE_IMM) is read in a few loads; anything else is
            // decoded in full, out of line.
            match cqe.brief(CqeOpcode::RespWrImm) {
                Some(b) => self.on_batch_completion::<SERVE>(b, on_response, on_request),
                None => {
                    if let Ok(c) = cqe.decode() {
                        self.on_other_recv_completion(&c);
                    }
                }
            }
        }
        self.recv_cq.update_ci();

        // Only a recv completion frees SRQ WQEs: with none this poll, the last poll's
        // repost left the count as it is (a repost that failed on a corrupt link would
        // fail the same way again).
        let srq_cap = self.srq.capacity();
        if handled > 0 && self.srq.outstanding() * 3 < srq_cap * 2 {
            if let Ok(n) = self.srq.post_batch(srq_cap - self.srq.outstanding()) {
                self.stats.srq_reposted += u64::from(n);
            }
        }
        handled
    }

    /// Step 3 of [`poll`](Self::poll): the send CQ, one CQ's worth at most. Returns the
    /// completions taken.
    #[inline(always)]
    fn poll_send_cq(&mut self) -> usize {
        let mut handled = 0;
        for _ in 0..self.send_cq.cqe_cnt() {
            let Some(cqe) = self.send_cq.poll() else {
                break;
            };
            let c = cqe.decode();
            handled += 1;
            if let Ok(c) = c {
                self.on_send_completion(&c);
            }
        }
        self.send_cq.update_ci();
        handled
    }

    /// Posts what is due on every endpoint with something to send, as step 4 of
    /// [`poll`](Self::poll) does, without reading either CQ. For a loop that answers
    /// after `poll` ([`recv`](Self::recv) and a reply) and wants the replies on the wire
    /// now instead of at its next poll, a turn of the loop later.
    ///
    /// What it cannot post (the send queue is full) stays queued for the next poll, as
    /// in `poll`. An endpoint that fails here is reported by the next poll, which
    /// completes its pending calls with [`Error::EndpointFailed`]; `flush` takes no
    /// callback, so it completes nothing. It does not count toward the idle-peer probe
    /// (that counts polls).
    pub fn flush(&mut self) {
        // A failed endpoint stays in the set, undrained, for poll.
        self.flush_dirty(false, |_, _| false);
    }

    /// Flushes the endpoints in the dirty set (`turn`: for a poll, see
    /// `Endpoint::flush`), only those: the others' flush would find nothing due and
    /// they have nothing to drain (`Dirty`'s invariant). An endpoint failed and not yet
    /// drained goes to `drain`, which completes its pending calls and returns true, or
    /// returns false to leave it in the set for the next poll.
    #[inline]
    fn flush_dirty(
        &mut self,
        turn: bool,
        mut drain: impl FnMut(&mut Pending<U, CALLS>, u16) -> bool,
    ) {
        for w in 0..EPS.div_ceil(64) {
            let mut bits = self.dirty.word(w);
            while bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let Some(e) = self.eps.get_mut(i).and_then(Option::as_mut) else {
                    self.dirty.clear(i);
                    continue;
                };
                let pending = self.pending.on_ep(i as u16);
                let idle = match e.flush(pending, turn, self.polls, &mut self.stats) {
                    Ok(idle) => idle,
                    Err(error) => {
                        let cause = FailureCause::PostRejected(error);
                        self.dirty.note(i as u16, e.d.fail(cause, &mut self.stats));
                        false
                    }
                };
                if e.d.undrained() {
                    if drain(&mut self.pending, i as u16) {
                        e.d.set_drained();
                        self.dirty.clear(i);
                    }
                } else if idle {
                    self.dirty.clear(i);
                }
            }
        }
    }

    /// Fails endpoint `ep` for `cause` ([`EpData::fail`]), for the drain to see.
    #[cold]
    pub(crate) fn fail(&mut self, ep: u16, cause: FailureCause) {
        if let Some(e) = self.eps[usize::from(ep)].as_mut() {
            self.dirty.note(ep, e.d.fail(cause, &mut self.stats));
        }
    }

    /// A batch arrived: the SRQ WQE it consumed is freed, and the batch is processed
    /// (`on_batch`) if its endpoint is connected.
    #[inline]
    fn on_batch_completion<const SERVE: bool>(
        &mut self,
        c: CqeBrief,
        on_response: &mut impl FnMut(U, Result<&[u8], Error>),
        on_request: &mut impl FnMut(Incoming<'_>),
    ) {
        // The SRQ WQE this completion consumed is the one its wqe_counter names,
        // whatever order the WQEs were posted in.
        if self.srq.free(c.wqe_counter).is_ok() {
            self.stats.srq_freed += 1;
        }
        let Some(ep) = self.map.get(c.qpn) else {
            self.stats.stray_completions += 1;
            return;
        };
        let Some(e) = self.eps[usize::from(ep)].as_mut() else {
            return;
        };
        if !e.d.is_connected() {
            return;
        }
        self.stats.batches_received += 1;
        e.d.batch_arrived(self.polls);
        // Offered only while nothing waits in the receive queue (arrival order).
        let offer = self.rq_head.is_none();
        let to = Delivery {
            pending: &mut self.pending,
            stats: &mut self.stats,
            on_response,
            on_request,
        };
        match on_batch::<U, CALLS, REQS, SERVE, _, _>(ep, &mut e.d, c.imm, offer, to) {
            Ok((first, end)) => {
                self.dirty.note(ep, e.d.batch_processed());
                self.link_requests(ep, first, end);
            }
            Err(v) => self.fail(ep, v.cause()),
        }
    }

    /// Any other receive completion: an error or flush (the QP failed), or one copyrpc
    /// never causes (a SEND, a WRITE_IMM scattered into the CQE). Its endpoint fails.
    #[cold]
    fn on_other_recv_completion(&mut self, c: &Completion) {
        if c.opcode.is_responder() && self.srq.free(c.wqe_counter).is_ok() {
            self.stats.srq_freed += 1;
        }
        let side = Side::Recv;
        let cause = match c.error {
            Some(error) => FailureCause::ErrorCompletion { side, error },
            None => FailureCause::UnexpectedCompletion { side },
        };
        match self.map.get(c.qpn) {
            Some(ep) => self.fail(ep, cause),
            None => self.stats.stray_completions += 1,
        }
    }

    fn on_send_completion(&mut self, c: &Completion) {
        let Some(ep) = self.map.get(c.qpn) else {
            self.stats.stray_completions += 1;
            return;
        };
        let Some(e) = self.eps[usize::from(ep)].as_mut() else {
            return;
        };
        match e.on_send_completion(c, self.polls, &mut self.stats) {
            Ok(flush) => self.dirty.note(ep, flush),
            Err(cause) => self.fail(ep, cause),
        }
    }
}
