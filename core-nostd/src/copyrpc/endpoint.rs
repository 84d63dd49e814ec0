//! One connection: its rings, credit and queued wrap ranges; writing calls and replies
//! into the send ring, and consuming the recv ring. What it posts is in `post`.
//!
//! Metadata (credit return and grant) is computed only when the batch's WQE is about to
//! be posted, after the send queue was found to have room for it. A flush that finds
//! the queue full therefore takes nothing: the batch stays open (or its wrap ranges stay
//! queued) and the next poll posts it with whatever credit is due then. That removes
//! the earlier design's failure, where a credit return and grant were computed, the post
//! failed, and they were lost or counted twice.

use mlx5_raw::{Remote, Sq};

use super::config::EndpointConfig;
use super::fifo::Fifo;
use super::mem::{Control, Dma};
use super::requests::{Req, Requests};
use super::Error;
use crate::credit::{self, CallCredit, CreditState};
use crate::ring::{FlushRange, RecvRing, RemoteConsumer, RingSize, SendRing, Wrap};
use crate::wire::{
    emit_message, padded_message_size, HeaderRepr, HeaderView, ALIGNMENT, FLOW_METADATA_SIZE,
    HEADER_SIZE,
};

/// Offset of the exported consumer position in the control region.
pub(crate) const CONSUMER_WORD: usize = Control::CONSUMER;
/// Offset of the word our READ of the peer's consumer lands in.
pub(crate) const READ_WORD: usize = Control::READ;
/// Bytes the control region needs.
pub(crate) const CONTROL_BYTES: usize = Control::BYTES;

/// Ranges a wrap queued that are not posted yet. At most two wraps can be pending
/// (a third would need more than a lap in flight, which the invariant forbids), each
/// with a flushed batch and a marker.
pub(crate) const RANGES: usize = 8;
/// Raw READ/WRITE operations outstanding per endpoint.
pub(crate) const RAW_OPS: usize = 64;

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
    pub(crate) recv: Remote,
    pub(crate) consumer: Remote,
}

/// Everything of an endpoint but its send queue, so a WQE batch (which borrows the
/// queue) can be built while the rings are updated.
#[derive(Debug)]
pub(crate) struct EpData<const REQS: usize> {
    pub(crate) cfg: EndpointConfig,
    pub(crate) state: EpState,
    pub(crate) send_mem: Dma,
    pub(crate) recv_mem: Dma,
    pub(crate) ctrl: Control,
    pub(crate) send: SendRing,
    pub(crate) recv: RecvRing,
    pub(crate) consumer: RemoteConsumer,
    pub(crate) credit: CreditState,
    /// A lower bound of `credit.call_limit(consumer.position())`: where a call's write
    /// may end. Refreshed when a grant lowers the exact limit (`post_range`) and when it
    /// refuses a call; between those the exact limit only rises, so testing against
    /// this copy never admits a call `has_room` would refuse.
    pub(crate) call_limit: u64,
    pub(crate) peer: Peer,
    /// Wrap ranges waiting for send-queue room, in posting order.
    pub(crate) ranges: Fifo<FlushRange, RANGES>,
    pub(crate) requests: Requests<REQS>,
    /// Recv-ring position parsed up to (end of the last batch processed).
    pub(crate) parsed: u64,
    /// A reply popped the oldest request while others are held: the consumer may move,
    /// at the next flush (`advance_consumer`), once for all the replies since.
    pub(crate) consumer_behind: bool,
    /// Free-running SQ position of the READ in flight, and whether it is a probe.
    pub(crate) read: Option<u64>,
    /// A call found the ring full: read the peer's consumer at the next flush.
    pub(crate) want_read: bool,
    /// The context's poll count when this endpoint last showed life or had reason not
    /// to expect any: a batch or READ result arrived, a batch or probe went out, or
    /// no call was pending. A probe is due `probe_interval` polls after it.
    pub(crate) quiet_since: u64,
    /// SQ positions of raw READ/WRITE WQEs in flight.
    pub(crate) raw: Fifo<u64, RAW_OPS>,
    pub(crate) raw_done: u64,
    pub(crate) raw_failed: u64,
    /// WQEBBs the largest batch WQE takes.
    pub(crate) batch_bbs: u32,
}

/// Why [`EpData::write_reply`] wrote nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplyFail {
    /// Larger than the request's allowance: nothing changed, the handle goes back.
    Refused,
    /// The endpoint must fail.
    Failed(Error),
}

/// The part of an endpoint (`EpData`) a reply writes, borrowed field by field so the
/// recv ring, where the request's bytes are, stays borrowable while the reply is built.
macro_rules! reply_writer {
    ($d:expr) => {
        $crate::copyrpc::endpoint::ReplyWriter {
            send: &mut $d.send,
            send_mem: &mut $d.send_mem,
            credit: &mut $d.credit,
            ranges: &mut $d.ranges,
            consumer: &$d.consumer,
        }
    };
}
pub(crate) use reply_writer;

/// The send side of an endpoint, as a reply needs it (see [`reply_writer!`]).
#[derive(Debug)]
pub(crate) struct ReplyWriter<'a> {
    pub(crate) send: &'a mut SendRing,
    pub(crate) send_mem: &'a mut Dma,
    pub(crate) credit: &'a mut CreditState,
    pub(crate) ranges: &'a mut Fifo<FlushRange, RANGES>,
    pub(crate) consumer: &'a RemoteConsumer,
}

impl ReplyWriter<'_> {
    /// Writes a reply of `len` bytes to call `call_id`, whose request carried
    /// `blocks` allowance blocks, filled by `fill(out)`; releases the allowance.
    /// Returns whether it opened a batch or wrapped (the endpoint then needs a flush).
    /// [`ReplyFail::Refused`]: over the allowance, nothing changed.
    ///
    /// Always inlined: see `Context::reply_with` and `Context::call_with_allowance`.
    #[inline(always)]
    pub(crate) fn write(
        &mut self,
        call_id: u32,
        blocks: u32,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<bool, ReplyFail> {
        let Ok(len32) = u32::try_from(len) else {
            return Err(ReplyFail::Refused);
        };
        let padded = padded_message_size(len32);
        // The allowance test and the release in one: refused before anything changes.
        match self.credit.release_on_reply(blocks, padded) {
            Ok(_) => {}
            Err(credit::CreditError::ReplyTooLarge) => return Err(ReplyFail::Refused),
            Err(_) => return Err(ReplyFail::Failed(Error::EndpointFailed)),
        }
        // `plan`'s only refusal for an aligned size, too large for any lap, cannot
        // happen: the release succeeded, so `padded < allowance <= R`, and `R <= C / 2`
        // always (it starts at most at C / 4 and a grant never takes `2R` past `C`).
        debug_assert!(padded < self.send.size().get() - FLOW_METADATA_SIZE);
        // No room check: the released allowance guarantees it (credit module docs).
        debug_assert!(self.send.plan(padded).is_ok_and(|p| self
            .credit
            .has_room(self.consumer.in_flight(self.send.producer()), p.advance)));
        let pos = if self.send.fits_open_batch(padded) {
            self.send.append_to_open_batch(padded)
        } else {
            let reserved = self
                .send
                .reserve_message(padded)
                .map_err(|_| ReplyFail::Failed(Error::EndpointFailed))?;
            if let Some(w) = reserved.wrap {
                queue_wrap_ranges(self.ranges, w).map_err(ReplyFail::Failed)?;
            }
            reserved.pos
        };
        let out = self
            .send_mem
            .ring_bytes_mut(self.send.size(), pos, padded as usize);
        // The padding is shorter than ALIGNMENT and ends the message: zero the last 32 B
        // with one fixed-size store first; header and payload then overwrite their part.
        let (_, last) = out.split_at_mut(out.len() - ALIGNMENT as usize);
        if let Some(last) = last.first_chunk_mut::<{ ALIGNMENT as usize }>() {
            *last = [0; ALIGNMENT as usize];
        }
        let (head, rest) = out.split_at_mut(HEADER_SIZE as usize);
        HeaderRepr {
            call_id: crate::wire::to_response_id(call_id),
            piggyback: 0,
            payload_len: len32,
        }
        .emit(&mut HeaderView::new_unchecked(head));
        fill(&mut rest[..len]);
        // The reply is its batch's only message exactly when it opened the batch (or
        // wrapped, which leaves it alone in a new one).
        Ok(self.send.batch_count() == 1)
    }
}

/// The call refusal of a credit refusal; out of line, as only refused calls need it.
#[cold]
#[inline(never)]
fn call_credit_refusal(e: credit::CreditError) -> Error {
    match e {
        credit::CreditError::AllowanceTooLarge => Error::AllowanceTooLarge,
        _ => Error::InsufficientCredit,
    }
}

/// Queues the ranges a wrap closed, in posting order.
#[cold]
fn queue_wrap_ranges(ranges: &mut Fifo<FlushRange, RANGES>, w: Wrap) -> Result<(), Error> {
    for r in w.flushed.into_iter().chain(Some(w.marker)) {
        // Unreachable while the invariant holds (see RANGES); failing the
        // endpoint beats corrupting the stream if it ever did.
        ranges.push(r).map_err(|_| Error::EndpointFailed)?;
    }
    Ok(())
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
    pub(crate) fn new(cfg: EndpointConfig, send_mem: Dma, recv_mem: Dma, ctrl: Control) -> Self {
        // Placeholder sizes until `connect` learns the peer's; nothing runs before it.
        let size = RingSize::new(RingSize::MIN).unwrap_or_else(|_| unreachable!());
        Self {
            state: EpState::Created,
            send: SendRing::new(size),
            recv: RecvRing::new(size),
            consumer: RemoteConsumer::new(0),
            credit: CreditState::connect(0, size, size, 0),
            call_limit: 0,
            peer: Peer {
                recv: Remote { addr: 0, rkey: 0 },
                consumer: Remote { addr: 0, rkey: 0 },
            },
            ranges: Fifo::new(),
            requests: Requests::new(),
            parsed: 0,
            consumer_behind: false,
            read: None,
            want_read: false,
            quiet_since: 0,
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
        self.refresh_call_limit();
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
        self.ctrl.store_consumer(0);
        self.state = EpState::Connected;
        Ok(())
    }

    /// Recomputes [`call_limit`](Self::call_limit) from the current counters.
    #[inline]
    pub(crate) fn refresh_call_limit(&mut self) {
        self.call_limit = self.credit.call_limit(self.consumer.position());
    }

    /// `credit.has_room(in_flight, advance)`, tested against the cached limit first.
    #[inline]
    fn call_has_room(&mut self, advance: u64) -> bool {
        // A plain add, like every producer move: positions never come near 2^64 (the
        // ring module's overflow note), and `advance` is below one lap.
        let end = self.send.producer() + advance;
        if end > self.call_limit {
            self.refresh_call_limit();
            if end > self.call_limit {
                debug_assert!(!self.credit.has_room(self.in_flight(), advance));
                return false;
            }
        }
        debug_assert!(self.credit.has_room(self.in_flight(), advance));
        true
    }

    #[inline]
    pub(crate) fn in_flight(&self) -> u64 {
        self.consumer.in_flight(self.send.producer())
    }

    #[inline]
    fn queue_wrap(&mut self, wrap: Option<Wrap>) -> Result<(), Error> {
        match wrap {
            None => Ok(()),
            Some(w) => queue_wrap_ranges(&mut self.ranges, w),
        }
    }

    /// Writes a request into the send ring, after every check that could refuse it.
    /// Returns whether it opened a batch or wrapped (the endpoint then needs a flush;
    /// an append to an open batch does not change that).
    ///
    /// Always inlined: see `Context::reply_with` and `Context::call_with_allowance`.
    /// Only the append to an open batch is: a call that opens one (once a batch) goes
    /// out of line to [`write_call_opening`](Self::write_call_opening), so a loop of
    /// calls keeps the append path's values in registers.
    #[inline(always)]
    pub(crate) fn write_call(
        &mut self,
        call_id: u32,
        payload: &[u8],
        response_allowance: u32,
    ) -> Result<bool, Error> {
        let len = u32::try_from(payload.len()).map_err(|_| Error::PayloadTooLarge)?;
        let padded = padded_message_size(len);
        if !self.send.fits_open_batch(padded) {
            return self.write_call_opening(call_id, payload, response_allowance);
        }
        let paid = self.pay_for_call(padded, response_allowance)?;
        let size = self.send.size();
        let pos = self.send.append_to_open_batch(padded);
        let buf = self.send_mem.ring_bytes_mut(size, pos, padded as usize);
        emit_message(buf, call_id, paid.allowance_blocks, payload)
            .map_err(|_| Error::PayloadTooLarge)?;
        // Joined an open batch, whose endpoint is already in the dirty set (an open
        // batch keeps its bit set: `Dirty`'s invariant).
        Ok(false)
    }

    /// [`write_call`](Self::write_call) for a request that opens a batch, wrapping the
    /// ring first if it must.
    #[inline(never)]
    fn write_call_opening(
        &mut self,
        call_id: u32,
        payload: &[u8],
        response_allowance: u32,
    ) -> Result<bool, Error> {
        // Recomputed rather than passed in: keeping `padded` live across the call cost
        // the inlined caller 1.4 instructions per call (measured).
        let len = u32::try_from(payload.len()).map_err(|_| Error::PayloadTooLarge)?;
        let padded = padded_message_size(len);
        // The refusals in the order the append path gives them: the allowance first.
        self.check_allowance(response_allowance)?;
        // A message that opens a batch can wrap, queueing up to two ranges.
        if self.ranges.len() + 2 > RANGES {
            return Err(Error::RingFull);
        }
        let advance = self
            .send
            .plan(padded)
            .map_err(|_| Error::PayloadTooLarge)?
            .advance;
        let paid = self.pay_for_call(advance, response_allowance)?;
        let size = self.send.size();
        let reserved = self
            .send
            .reserve_message(padded)
            .map_err(|_| Error::PayloadTooLarge)?;
        self.queue_wrap(reserved.wrap)?;
        let buf = self
            .send_mem
            .ring_bytes_mut(size, reserved.pos, padded as usize);
        emit_message(buf, call_id, paid.allowance_blocks, payload)
            .map_err(|_| Error::PayloadTooLarge)?;
        // Alone in its batch: it opened it (or wrapped into a new one).
        Ok(self.send.batch_count() == 1)
    }

    /// Refuses a response allowance no reply could carry: the reply travels in the
    /// peer's send ring, which has our recv ring's size.
    #[inline(always)]
    fn check_allowance(&self, response_allowance: u32) -> Result<(), Error> {
        if padded_message_size(response_allowance).saturating_add(FLOW_METADATA_SIZE)
            >= self.recv.size().get()
        {
            return Err(Error::PayloadTooLarge);
        }
        Ok(())
    }

    /// The checks a call passes before anything changes, and its payment: a response
    /// allowance the peer's ring can carry, room for the producer to move by `advance`,
    /// and the peer's credit for the allowance (deducted).
    #[inline(always)]
    fn pay_for_call(&mut self, advance: u64, response_allowance: u32) -> Result<CallCredit, Error> {
        self.check_allowance(response_allowance)?;
        if !self.call_has_room(advance) {
            return Err(self.refuse_ring_full(response_allowance));
        }
        self.credit
            .try_reserve_for_call(response_allowance)
            .map_err(call_credit_refusal)
    }

    /// A call found no ring room: [`Error::RingFull`] (and a READ of the peer's
    /// consumer at the next flush), unless its allowance can never be paid for, which
    /// no room would change.
    #[cold]
    #[inline(never)]
    fn refuse_ring_full(&mut self, response_allowance: u32) -> Error {
        if !self.credit.can_ever_pay(response_allowance) {
            return Error::AllowanceTooLarge;
        }
        self.want_read = true;
        Error::RingFull
    }

    /// Why a call may not be made on this endpoint while every pending-call slot is
    /// taken: [`Error::TooManyCalls`], unless it could never be made at all.
    #[cold]
    #[inline(never)]
    pub(crate) fn refuse_no_slot(&self, payload_len: usize, response_allowance: u32) -> Error {
        let fits = u32::try_from(payload_len)
            .is_ok_and(|len| self.send.plan(padded_message_size(len)).is_ok());
        if !fits || self.check_allowance(response_allowance).is_err() {
            Error::PayloadTooLarge
        } else if !self.credit.can_ever_pay(response_allowance) {
            Error::AllowanceTooLarge
        } else {
            Error::TooManyCalls
        }
    }

    /// The largest response allowance a call can ever pay for.
    pub(crate) fn max_response_allowance(&self) -> Option<u32> {
        credit::max_response_allowance(self.credit.max_peer_credit())
    }

    /// Writes a reply of `len` bytes to request `seq` (whose entry is `req`), filled by
    /// `fill(request, out)`, and releases the request. Returns, as `write_call`,
    /// whether it opened a batch or wrapped. [`ReplyFail::Refused`]: the reply exceeds
    /// the request's allowance and nothing changed; [`ReplyFail::Failed`]: the caller
    /// fails the endpoint.
    ///
    /// The consumer moves here only when this reply answers the last request held;
    /// otherwise the flush that sends the reply moves it first (`consumer_behind`), once
    /// for all the replies it carries. A reply always leaves something to flush, so that
    /// flush comes.
    ///
    /// Always inlined: see `Context::reply_with` and `Context::call_with_allowance`.
    #[inline(always)]
    pub(crate) fn write_reply(
        &mut self,
        seq: u32,
        req: &Req,
        len: usize,
        fill: impl FnOnce(&[u8], &mut [u8]),
    ) -> Result<bool, ReplyFail> {
        let in_off = self.recv.size().offset(req.start) as usize + HEADER_SIZE as usize;
        let request = self.recv_mem.bytes(in_off, req.len as usize);
        let opened = reply_writer!(self).write(req.call_id, req.blocks, len, |out| {
            fill(request, out);
        })?;
        if self.requests.release(seq) {
            if self.requests.len() == 0 {
                // Caught up: the consumer and its export move now, so a peer that READs
                // it sees every answered byte free even before this side polls again.
                self.advance_consumer();
            } else {
                self.consumer_behind = true;
            }
        }
        Ok(opened)
    }

    /// Moves the consumer to the oldest unanswered request (or everything parsed) and
    /// exports it for the peer's READs. Run after each parsed batch, by the reply that
    /// answers the last request held, and by the flush after other replies
    /// (`consumer_behind`). The export is never ahead of the ring's own consumer, which
    /// the size check of an arriving batch relies on.
    #[inline]
    pub(crate) fn advance_consumer(&mut self) {
        let target = self.requests.oldest_start().unwrap_or(self.parsed);
        let cur = self.recv.last_recv_pos();
        if target > cur && self.recv.consume(target - cur).is_ok() {
            self.ctrl.store_consumer(target);
        }
    }

    /// Whether a metadata-only batch should go out: enough consumed bytes to return, or
    /// the peer looks short of credit and we can grant some. Also arms a READ when a
    /// grant is blocked only by a stale view of the peer's consumer.
    #[inline]
    pub(crate) fn wants_credit_batch(&mut self) -> bool {
        let unreturned = self.recv.last_recv_pos() - self.recv.last_notified_recv_pos();
        if unreturned >= self.recv.size().get() / 4 {
            return true;
        }
        let r = self.credit.resp_reservation();
        let max = self.credit.max_resp_reservation();
        // R is the peer's balance plus grants in transit plus our unanswered
        // allowances; with nothing in transit this is the peer's balance exactly.
        if max.saturating_sub(r) < 2 * ALIGNMENT {
            return false;
        }
        let (requests, blocks) = self.requests.unanswered();
        let unreplied = credit::internal_allowance_sum(u64::from(requests), blocks);
        let peer_balance = r.saturating_sub(unreplied);
        if peer_balance >= max / 2 {
            return false;
        }
        let grant = credit::grant(self.in_flight(), r, max, self.credit.remote_ring_size());
        if grant >= 2 * ALIGNMENT {
            return true;
        }
        self.want_read = true;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_batch_wqe_is_four_basic_blocks_with_seed_settings() {
        // 220 B inline: 16 + 16 + 224 = 256 B; 204 B inline + SGE: 16 + 16 + 208 + 16.
        assert_eq!(batch_wqe_bbs(220, 204), 4);
        assert_eq!(batch_wqe_bbs(0, 0), 1);
        assert_eq!(batch_wqe_bbs(236, 0), 5);
    }
}
