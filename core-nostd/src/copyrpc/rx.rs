//! The receive side of an endpoint: the recv ring and its memory, the requests held in
//! it, how far batches were parsed, and the consumer position exported for the peer.
//!
//! The consumer waits for the oldest unanswered request: a reply that answers the
//! last request held moves it at once, other replies leave it to the next flush
//! (`consumer_behind`), once for all of them.

use super::mem::{Control, Dma};
use super::requests::{Req, Requests};
use crate::ring::{RecvRing, RecvSpan, RingError, RingSize};
use crate::wire::HEADER_SIZE;

/// The receive side of an endpoint (module docs).
///
/// `repr(C)`, the request table last (its counters first): the fields a batch's
/// arrival and a reply touch lie together, ahead of the table's `40 REQS` bytes.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Rx<const REQS: usize> {
    ring: RecvRing,
    mem: Dma,
    /// The exported consumer word and the landing word of our READ.
    ctrl: Control,
    /// Recv-ring position parsed up to (end of the last batch processed).
    parsed: u64,
    /// A reply popped the oldest request while others are held: the consumer may move,
    /// at the next flush ([`catch_up`](Self::catch_up)), once for all the replies since.
    consumer_behind: bool,
    requests: Requests<REQS>,
}

// The request table ends the receive side (the struct's comment).
const _: () = assert!(
    core::mem::offset_of!(Rx<2048>, requests) + core::mem::size_of::<Requests<2048>>()
        == core::mem::size_of::<Rx<2048>>()
);

impl<const REQS: usize> Rx<REQS> {
    /// Placeholder ring size until `connect`; nothing runs before it.
    pub(crate) fn new(mem: Dma, ctrl: Control) -> Self {
        let size = RingSize::new(RingSize::MIN).unwrap_or_else(|_| unreachable!());
        Self {
            ring: RecvRing::new(size),
            mem,
            ctrl,
            requests: Requests::new(),
            parsed: 0,
            consumer_behind: false,
        }
    }

    /// The recv ring's memory (for the peer's description of it).
    pub(crate) const fn mem(&self) -> &Dma {
        &self.mem
    }

    /// The control region: the exported consumer, and where our READs land.
    #[inline]
    pub(crate) const fn ctrl(&self) -> &Control {
        &self.ctrl
    }

    /// Starts the ring, `local` bytes, at position 0 and exports that consumer.
    pub(crate) fn connect(&mut self, local: RingSize) {
        self.ring = RecvRing::new(local);
        self.ctrl.store_consumer(0);
    }

    /// The ring's counters.
    #[inline]
    pub(crate) const fn ring(&self) -> &RecvRing {
        &self.ring
    }

    /// The requests held.
    #[inline(always)]
    pub(crate) const fn requests(&self) -> &Requests<REQS> {
        &self.requests
    }

    /// The requests held, to hand out, link or drop (the consumer is not moved).
    #[inline(always)]
    pub(crate) fn requests_mut(&mut self) -> &mut Requests<REQS> {
        &mut self.requests
    }

    /// Bytes consumed since the last call: the next batch's credit return.
    #[inline(always)]
    pub(crate) fn take_credit_return(&mut self) -> u64 {
        self.ring.take_credit_return()
    }

    /// Whether enough consumed bytes wait to be returned to warrant a batch of their own.
    #[inline(always)]
    pub(crate) fn credit_return_due(&self) -> bool {
        self.unreturned() >= self.ring.size().get() / 4
    }

    /// Bytes consumed and not yet returned to the peer.
    #[inline(always)]
    pub(crate) fn unreturned(&self) -> u64 {
        self.ring.last_recv_pos() - self.ring.last_notified_recv_pos()
    }

    /// A request's payload, in place in the ring.
    #[inline(always)]
    pub(crate) fn request_bytes(&self, req: &Req) -> &[u8] {
        let off = self.ring.size().offset(req.start) as usize + HEADER_SIZE as usize;
        self.mem.bytes(off, req.len as usize)
    }

    /// A batch announced by an immediate of `delta` bytes arrived: its span, its bytes
    /// and the request table (borrowed apart, to list its requests while reading it).
    /// Refused (nothing changed) if the peer broke the ring protocol.
    #[inline(always)]
    pub(crate) fn arrive(
        &mut self,
        delta: u64,
    ) -> Result<(RecvSpan, &[u8], &mut Requests<REQS>), RingError> {
        let span = self.ring.on_imm(delta)?;
        let bytes = self.mem.bytes(span.offset as usize, span.len as usize);
        Ok((span, bytes, &mut self.requests))
    }

    /// The batch ending at `end` was processed: its answered bytes are consumed.
    #[inline(always)]
    pub(crate) fn parsed_to(&mut self, end: u64) {
        self.parsed = end;
        self.advance_consumer();
    }

    /// Request `seq` was answered: it is released and, if the consumer can move past
    /// it, the consumer moves now (the last request held) or at the next flush.
    #[inline(always)]
    pub(crate) fn answered(&mut self, seq: u32) {
        if self.requests.release(seq) {
            if self.requests.len() == 0 {
                // Caught up: the consumer and its export move now, so a peer that READs
                // it sees every answered byte free even before this side polls again.
                self.advance_consumer();
            } else {
                self.consumer_behind = true;
            }
        }
    }

    /// Whether replies since the last flush left the consumer behind.
    #[inline(always)]
    pub(crate) const fn consumer_behind(&self) -> bool {
        self.consumer_behind
    }

    /// Before a batch's credit return is computed: moves the consumer the replies since
    /// the last flush left behind.
    #[inline(always)]
    pub(crate) fn catch_up(&mut self) {
        if self.consumer_behind {
            self.consumer_behind = false;
            self.advance_consumer();
        }
    }

    /// The endpoint failed: exports a consumer no ring can have reached (`u64::MAX`,
    /// above any producer), so the peer's next READ of it (a liveness probe, or a READ
    /// for room) fails its endpoint too (`BadConsumerRead`) and completes its pending
    /// calls, instead of waiting on a peer whose QP still answers READs. Nothing moves
    /// the export afterwards: a failed endpoint parses no batch and sends no reply.
    #[cold]
    pub(crate) fn export_failed(&mut self) {
        self.consumer_behind = false;
        self.ctrl.store_consumer(u64::MAX);
    }

    /// Moves the consumer to the oldest unanswered request (or everything parsed) and
    /// exports it for the peer's READs. Run after each parsed batch, by the reply that
    /// answers the last request held, and by the flush after other replies
    /// (`consumer_behind`). The export is never ahead of the ring's own consumer, which
    /// the size check of an arriving batch relies on.
    #[inline]
    fn advance_consumer(&mut self) {
        let target = self.requests.oldest_start().unwrap_or(self.parsed);
        let cur = self.ring.last_recv_pos();
        if target > cur && self.ring.consume(target - cur).is_ok() {
            self.ctrl.store_consumer(target);
        }
    }
}
