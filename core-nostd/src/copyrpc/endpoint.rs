//! One connection: its rings, credit, queued WRITEs, and the WQEs it posts.
//!
//! Metadata (credit return and grant) is computed only when the batch's WQE is about to
//! be posted, after the send queue was found to have room for it. A flush that finds
//! the queue full therefore takes nothing: the batch stays open (or its wrap ranges stay
//! queued) and the next poll posts it with whatever credit is due then. That removes
//! the earlier design's failure, where a credit return and grant were computed, the post
//! failed, and they were lost or counted twice.
#![allow(unsafe_code)]

use mlx5_raw::layout::{Completion, FmCeSe};
use mlx5_raw::{Payload, PostError, Remote, Sge, Sq, SqBatch};

use super::config::EndpointConfig;
use super::mem::Dma;
use super::requests::Requests;
use super::stats::Stats;
use super::Error;
use crate::credit::{self, CreditState};
use crate::ring::{FlushRange, RecvRing, RemoteConsumer, RingSize, SendRing, Wrap};
use crate::wire::{
    emit_message, encode_imm, padded_message_size, FlowMetaRepr, FlowMetaView, HeaderRepr,
    HeaderView, ALIGNMENT, FLOW_METADATA_SIZE, HEADER_SIZE,
};

/// Offset of the exported consumer position in the control region.
pub(crate) const CONSUMER_WORD: usize = 0;
/// Offset of the word our READ of the peer's consumer lands in.
pub(crate) const READ_WORD: usize = 8;
/// Bytes the control region needs.
pub(crate) const CONTROL_BYTES: usize = 16;

/// Ranges a wrap queued that are not posted yet. At most two wraps can be pending
/// (a third would need more than a lap in flight, which the invariant forbids), each
/// with a flushed batch and a marker.
const RANGES: usize = 8;
/// Raw READ/WRITE operations outstanding per endpoint.
const RAW_OPS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EpState {
    Created,
    Connected,
    /// `drained`: every pending call has been completed with an error.
    Failed {
        drained: bool,
    },
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer {
    recv: Remote,
    consumer: Remote,
}

/// A small FIFO of `N` items.
#[derive(Debug)]
pub(crate) struct Fifo<T: Copy, const N: usize> {
    buf: [Option<T>; N],
    head: usize,
    len: usize,
}

impl<T: Copy, const N: usize> Fifo<T, N> {
    const fn new() -> Self {
        Self {
            buf: [None; N],
            head: 0,
            len: 0,
        }
    }

    pub(crate) const fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, v: T) -> Result<(), T> {
        if self.len == N {
            return Err(v);
        }
        self.buf[(self.head + self.len) % N] = Some(v);
        self.len += 1;
        Ok(())
    }

    fn front(&self) -> Option<T> {
        if self.len == 0 {
            None
        } else {
            self.buf[self.head]
        }
    }

    fn pop(&mut self) -> Option<T> {
        let v = self.front()?;
        self.head = (self.head + 1) % N;
        self.len -= 1;
        Some(v)
    }
}

/// Everything of an endpoint but its send queue, so a WQE batch (which borrows the
/// queue) can be built while the rings are updated.
#[derive(Debug)]
pub(crate) struct EpData<const REQS: usize> {
    pub(crate) cfg: EndpointConfig,
    pub(crate) state: EpState,
    pub(crate) send_mem: Dma,
    pub(crate) recv_mem: Dma,
    pub(crate) ctrl: Dma,
    pub(crate) send: SendRing,
    pub(crate) recv: RecvRing,
    pub(crate) consumer: RemoteConsumer,
    pub(crate) credit: CreditState,
    peer: Peer,
    /// Wrap ranges waiting for send-queue room, in posting order.
    ranges: Fifo<FlushRange, RANGES>,
    pub(crate) requests: Requests<REQS>,
    /// Recv-ring position parsed up to (end of the last batch processed).
    pub(crate) parsed: u64,
    /// Internal allowances of requests received and not answered.
    pub(crate) unreplied: u64,
    /// Free-running SQ position of the READ in flight, and whether it is a probe.
    read: Option<u64>,
    /// A call found the ring full: read the peer's consumer at the next flush.
    pub(crate) want_read: bool,
    /// Polls since anything arrived while calls were pending.
    pub(crate) idle_polls: u32,
    /// SQ positions of raw READ/WRITE WQEs in flight.
    raw: Fifo<u64, RAW_OPS>,
    pub(crate) raw_done: u64,
    pub(crate) raw_failed: u64,
    /// WQEBBs the largest batch WQE takes.
    batch_bbs: u32,
}

/// An endpoint: its send queue and the rest.
#[derive(Debug)]
pub(crate) struct Endpoint<const REQS: usize> {
    pub(crate) sq: Sq,
    pub(crate) d: EpData<REQS>,
}

/// WQEBBs of the largest batch WQE: fully inline up to `max_inline` bytes, or an
/// `inline_head` inline and one data segment.
const fn batch_wqe_bbs(max_inline: u32, inline_head: u32) -> u32 {
    // ctrl + raddr, then the inline header and data in 16 B units
    let full = 2 + (4 + max_inline).div_ceil(16);
    let split = 2 + (4 + inline_head).div_ceil(16) + 1;
    let ds = if full > split { full } else { split };
    ds.div_ceil(4)
}

impl<const REQS: usize> EpData<REQS> {
    pub(crate) fn new(cfg: EndpointConfig, send_mem: Dma, recv_mem: Dma, ctrl: Dma) -> Self {
        // Placeholder sizes until `connect` learns the peer's; nothing runs before it.
        let size = RingSize::new(RingSize::MIN).unwrap_or_else(|_| unreachable!());
        Self {
            state: EpState::Created,
            send: SendRing::new(size),
            recv: RecvRing::new(size),
            consumer: RemoteConsumer::new(0),
            credit: CreditState::connect(0, size, size, 0),
            peer: Peer {
                recv: Remote { addr: 0, rkey: 0 },
                consumer: Remote { addr: 0, rkey: 0 },
            },
            ranges: Fifo::new(),
            requests: Requests::new(),
            parsed: 0,
            unreplied: 0,
            read: None,
            want_read: false,
            idle_polls: 0,
            raw: Fifo::new(),
            raw_done: 0,
            raw_failed: 0,
            batch_bbs: batch_wqe_bbs(cfg.max_inline, cfg.inline_head),
            cfg,
            send_mem,
            recv_mem,
            ctrl,
        }
    }

    pub(crate) fn connect(&mut self, info: &super::EndpointInfo) -> Result<(), Error> {
        let remote = RingSize::new(info.recv_ring_size).map_err(|_| Error::BadConfig)?;
        let local = RingSize::new(self.recv_mem.len() as u64).map_err(|_| Error::BadConfig)?;
        if self.send_mem.len() < remote.get() as usize || self.state != EpState::Created {
            return Err(Error::BadConfig);
        }
        self.send = SendRing::new(remote);
        self.recv = RecvRing::new(local);
        self.consumer = RemoteConsumer::new(0);
        self.credit = CreditState::connect(
            self.cfg.max_resp_reservation,
            local,
            remote,
            info.initial_credit,
        );
        self.peer = Peer {
            recv: Remote {
                addr: info.recv_ring_addr,
                rkey: info.recv_ring_rkey,
            },
            consumer: Remote {
                addr: info.consumer_addr,
                rkey: info.consumer_rkey,
            },
        };
        self.ctrl.store_u64(CONSUMER_WORD, 0);
        self.state = EpState::Connected;
        Ok(())
    }

    pub(crate) fn in_flight(&self) -> u64 {
        self.consumer.in_flight(self.send.producer())
    }

    fn ring_off(&self, pos: u64) -> usize {
        self.send.size().offset(pos) as usize
    }

    fn queue_wrap(&mut self, wrap: Option<Wrap>) -> Result<(), Error> {
        if let Some(w) = wrap {
            for r in w.flushed.into_iter().chain(Some(w.marker)) {
                // Unreachable while the invariant holds (see RANGES); failing the
                // endpoint beats corrupting the stream if it ever did.
                self.ranges.push(r).map_err(|_| Error::EndpointFailed)?;
            }
        }
        Ok(())
    }

    /// Writes a request into the send ring, after every check that could refuse it.
    pub(crate) fn write_call(
        &mut self,
        call_id: u32,
        payload: &[u8],
        response_allowance: u32,
    ) -> Result<(), Error> {
        let len = u32::try_from(payload.len()).map_err(|_| Error::PayloadTooLarge)?;
        let padded = padded_message_size(len);
        // The reply travels in the peer's send ring, which has our recv ring's size.
        if padded_message_size(response_allowance).saturating_add(FLOW_METADATA_SIZE)
            >= self.recv.size().get()
        {
            return Err(Error::PayloadTooLarge);
        }
        let plan = self.send.plan(padded).map_err(|_| Error::PayloadTooLarge)?;
        if self.ranges.len() + 2 > RANGES {
            return Err(Error::RingFull);
        }
        if !self.credit.has_room(self.in_flight(), plan.advance) {
            self.want_read = true;
            return Err(Error::RingFull);
        }
        let paid = self
            .credit
            .try_reserve_for_call(response_allowance)
            .map_err(|_| Error::InsufficientCredit)?;
        let reserved = self
            .send
            .reserve_message(padded)
            .map_err(|_| Error::PayloadTooLarge)?;
        self.queue_wrap(reserved.wrap)?;
        let off = self.ring_off(reserved.pos);
        let buf = self.send_mem.bytes_mut(off, padded as usize);
        emit_message(buf, call_id, paid.allowance_blocks, payload)
            .map_err(|_| Error::PayloadTooLarge)?;
        Ok(())
    }

    /// Writes a reply of `len` bytes to request `seq`, filled by `fill(request, out)`.
    /// On error nothing changed.
    pub(crate) fn write_reply(
        &mut self,
        seq: u32,
        len: usize,
        fill: impl FnOnce(&[u8], &mut [u8]),
    ) -> Result<(), Error> {
        let req = *self.requests.get(seq).ok_or(Error::StaleHandle)?;
        let len32 = u32::try_from(len).map_err(|_| Error::ReplyTooLarge)?;
        let padded = padded_message_size(len32);
        let allowance = credit::internal_allowance_for_blocks(req.blocks);
        if !credit::reply_fits_allowance(padded, allowance) {
            return Err(Error::ReplyTooLarge);
        }
        let plan = self.send.plan(padded).map_err(|_| Error::ReplyTooLarge)?;
        self.credit
            .release_on_reply(req.blocks, padded)
            .map_err(|_| Error::EndpointFailed)?;
        // No room check: the released allowance guarantees it (credit module docs).
        debug_assert!(self.credit.has_room(self.in_flight(), plan.advance));
        let reserved = self
            .send
            .reserve_message(padded)
            .map_err(|_| Error::EndpointFailed)?;
        self.queue_wrap(reserved.wrap)?;
        let out_off = self.ring_off(reserved.pos);
        let in_off = self.recv.size().offset(req.start) as usize + HEADER_SIZE as usize;
        let request = self.recv_mem.bytes(in_off, req.len as usize);
        let out = self.send_mem.bytes_mut(out_off, padded as usize);
        let (head, rest) = out.split_at_mut(HEADER_SIZE as usize);
        HeaderRepr {
            call_id: crate::wire::to_response_id(req.call_id),
            piggyback: 0,
            payload_len: len32,
        }
        .emit(&mut HeaderView::new_unchecked(head));
        let (body, padding) = rest.split_at_mut(len);
        fill(request, body);
        padding.fill(0);
        self.unreplied = self.unreplied.saturating_sub(allowance);
        self.release_request(seq);
        Ok(())
    }

    /// Releases a request's ring bytes (after its reply, or when dropped unanswered).
    pub(crate) fn release_request(&mut self, seq: u32) {
        self.requests.release(seq);
        self.advance_consumer();
    }

    /// Moves the consumer to the oldest unanswered request (or everything parsed) and
    /// exports it for the peer's READs.
    pub(crate) fn advance_consumer(&mut self) {
        let target = self.requests.oldest_start().unwrap_or(self.parsed);
        let cur = self.recv.last_recv_pos();
        if target > cur && self.recv.consume(target - cur).is_ok() {
            self.ctrl.store_u64(CONSUMER_WORD, target);
        }
    }

    /// Whether a metadata-only batch should go out: enough consumed bytes to return, or
    /// the peer looks short of credit and we can grant some. Also arms a READ when a
    /// grant is blocked only by a stale view of the peer's consumer.
    fn wants_credit_batch(&mut self) -> bool {
        let unreturned = self.recv.last_recv_pos() - self.recv.last_notified_recv_pos();
        if unreturned >= self.recv.size().get() / 4 {
            return true;
        }
        let r = self.credit.resp_reservation();
        let max = self.credit.max_resp_reservation();
        // R is the peer's balance plus grants in transit plus our unanswered
        // allowances; with nothing in transit this is the peer's balance exactly.
        let peer_balance = r.saturating_sub(self.unreplied);
        if peer_balance >= max / 2 || max.saturating_sub(r) < 2 * ALIGNMENT {
            return false;
        }
        let grant = credit::grant(self.in_flight(), r, max, self.credit.remote_ring_size());
        if grant >= 2 * ALIGNMENT {
            return true;
        }
        self.want_read = true;
        false
    }

    /// Fills a range's metadata and posts it. The caller checked the send queue room.
    fn post_range(
        &mut self,
        batch: &mut SqBatch<'_>,
        r: FlushRange,
        stats: &mut Stats,
    ) -> Result<u32, PostError> {
        let in_flight = self.in_flight();
        let meta = FlowMetaRepr {
            ring_credit_return: self.recv.take_credit_return(),
            credit_grant: self.credit.grant_for_batch(in_flight),
            message_count: r.message_count,
        };
        let meta_off = self.ring_off(r.meta_pos);
        meta.emit(&mut FlowMetaView::new_unchecked(
            self.send_mem
                .bytes_mut(meta_off, FLOW_METADATA_SIZE as usize),
        ));
        let off = self.ring_off(r.start);
        let Ok(imm) = encode_imm(r.imm_delta()) else {
            return Err(PostError::WqeTooLarge { ds: 0 });
        };
        let bytes = self.send_mem.bytes(off, r.write_len() as usize);
        // SAFETY: `bytes` lies in the send ring, registered under this lkey
        // (`Context::create_endpoint` contract). They stay unmodified while the device
        // may read them: the producer rewrites a send-ring byte only after the peer's
        // consumer has passed it, which it can only do after this WRITE delivered it.
        let payload = unsafe { Payload::registered(bytes, self.send_mem.lkey()) };
        let remote = Remote {
            addr: self.peer.recv.addr + off as u64,
            rkey: self.peer.recv.rkey,
        };
        let posted =
            batch.rdma_write_imm(remote, payload, imm.to_bytes(), FmCeSe::COMP_ONLY_ERR)?;
        stats.batches_posted += 1;
        if r.is_wrap() {
            stats.wraps += 1;
        }
        Ok(u32::from(posted.bbs))
    }

    fn post_read(&mut self, batch: &mut SqBatch<'_>, pos: u64) -> Result<u32, PostError> {
        let sge = [Sge {
            addr: self.ctrl.va_at(READ_WORD),
            len: 8,
            lkey: self.ctrl.lkey(),
        }];
        // SAFETY: the READ word lies in the control region, registered with local
        // write under this lkey (`create_endpoint` contract), and nothing reads it
        // until this WQE's completion is polled (`on_send_completion`).
        let posted = unsafe { batch.rdma_read(self.peer.consumer, &sge, FmCeSe::CQ_UPDATE) }?;
        self.read = Some(pos);
        Ok(u32::from(posted.bbs))
    }
}

impl<const REQS: usize> Endpoint<REQS> {
    /// Posts what is due: queued wrap ranges, the open batch, a credit-only batch, a
    /// READ of the peer's consumer. Stops (keeping everything for the next poll) when
    /// the send queue lacks room. `pending` is the number of calls awaiting a response.
    pub(crate) fn flush(&mut self, pending: u32, stats: &mut Stats) -> Result<(), PostError> {
        let d = &mut self.d;
        if d.state != EpState::Connected {
            return Ok(());
        }
        if pending > 0 {
            d.idle_polls = d.idle_polls.saturating_add(1);
        } else {
            d.idle_polls = 0;
        }
        let need = d.batch_bbs;
        let base = self.sq.producer_counter();
        let mut used: u64 = 0;
        let mut batch = self.sq.batch();
        let mut deferred = false;
        while let Some(r) = d.ranges.front() {
            if batch.free_bbs() < need {
                deferred = true;
                break;
            }
            used += u64::from(d.post_range(&mut batch, r, stats)?);
            d.ranges.pop();
        }
        if !deferred && d.send.batch_count() > 0 {
            if batch.free_bbs() < need {
                deferred = true;
            } else if let Some(r) = d.send.take_flush() {
                used += u64::from(d.post_range(&mut batch, r, stats)?);
            }
        }
        if !deferred && d.wants_credit_batch() {
            let room = d
                .send
                .plan(0)
                .is_ok_and(|p| d.credit.has_room(d.in_flight(), p.advance));
            // A wrap here can add two ranges before the batch itself.
            if room && batch.free_bbs() >= 3 * need && d.ranges.len() + 2 <= RANGES {
                if let Ok(res) = d.send.open_batch() {
                    if let Some(w) = res.wrap {
                        for r in w.flushed.into_iter().chain(Some(w.marker)) {
                            used += u64::from(d.post_range(&mut batch, r, stats)?);
                        }
                    }
                    if let Some(r) = d.send.take_flush() {
                        used += u64::from(d.post_range(&mut batch, r, stats)?);
                        stats.credit_batches += 1;
                    }
                }
            } else if !room {
                d.want_read = true;
            }
        }
        if deferred {
            stats.flushes_deferred += 1;
        }
        let probe =
            d.cfg.probe_interval != 0 && pending > 0 && d.idle_polls >= d.cfg.probe_interval;
        if (d.want_read || probe) && d.read.is_none() && batch.free_bbs() >= 1 {
            d.post_read(&mut batch, base + used)?;
            d.want_read = false;
            stats.reads_posted += 1;
            if probe {
                d.idle_polls = 0;
                stats.probes_posted += 1;
            }
        }
        batch.finish();
        Ok(())
    }

    /// Handles a send completion of this endpoint's QP. Returns false if it reports an
    /// error (the caller fails the endpoint).
    pub(crate) fn on_send_completion(&mut self, c: &Completion, stats: &mut Stats) -> bool {
        let ok = !c.is_error();
        if self.sq.retire_completion(c).is_err() {
            return false;
        }
        let ci = self.sq.producer_counter() - u64::from(self.sq.outstanding_bbs());
        let d = &mut self.d;
        if let Some(pos) = d.read {
            if ci > pos {
                d.read = None;
                if ok {
                    let value = d.ctrl.load_u64(READ_WORD);
                    if d.consumer.on_read(value, d.send.producer()).is_err() {
                        return false;
                    }
                    d.idle_polls = 0;
                    stats.reads_completed += 1;
                }
            }
        }
        while let Some(pos) = d.raw.front() {
            if pos >= ci {
                break;
            }
            d.raw.pop();
            d.raw_done += 1;
            if !ok {
                d.raw_failed += 1;
            }
        }
        ok
    }

    /// Posts one signaled raw READ or WRITE.
    ///
    /// # Safety
    ///
    /// As [`SqBatch::rdma_read`] (for a READ) or [`Payload::gather`] (for a WRITE):
    /// every entry of `local` lies in memory registered under its lkey, left alone by
    /// Rust code until [`raw_pending`](super::Context::raw_pending) says the operation
    /// finished.
    pub(crate) unsafe fn post_raw(
        &mut self,
        read: bool,
        remote: Remote,
        local: &[Sge],
    ) -> Result<(), Error> {
        if self.d.state != EpState::Connected {
            return Err(match self.d.state {
                EpState::Created => Error::NotConnected,
                _ => Error::EndpointFailed,
            });
        }
        if self.d.raw.len() == RAW_OPS {
            return Err(Error::SqFull);
        }
        let pos = self.sq.producer_counter();
        let mut batch = self.sq.batch();
        let posted = if read {
            // SAFETY: forwarded from this function's contract.
            unsafe { batch.rdma_read(remote, local, FmCeSe::CQ_UPDATE) }
        } else {
            // SAFETY: forwarded from this function's contract.
            batch.rdma_write(remote, unsafe { Payload::gather(local) }, FmCeSe::CQ_UPDATE)
        };
        match posted {
            Ok(_) => {
                batch.finish();
                let _ = self.d.raw.push(pos);
                Ok(())
            }
            Err(PostError::SqFull { .. }) => Err(Error::SqFull),
            Err(_) => Err(Error::BadConfig),
        }
    }

    pub(crate) fn raw_pending(&self) -> u32 {
        self.d.raw.len() as u32
    }
}
