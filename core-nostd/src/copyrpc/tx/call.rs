//! Writing a request into the send ring, after every check that could refuse it.

use super::{queue_wrap_ranges, Tx, RANGES};
use crate::copyrpc::endpoint::Flush;
use crate::copyrpc::Error;
use crate::credit::{self, CallCredit};
use crate::wire::{emit_message, padded_message_size, FLOW_METADATA_SIZE};

impl Tx {
    /// Writes a request into the send ring, after every check that could refuse it.
    /// Returns whether it opened a batch or wrapped (the endpoint then needs a flush;
    /// an append to an open batch does not change that).
    ///
    /// Always inlined: see `Context::reply_with` and `Context::call_with_allowance`.
    /// So is a call that opens a batch ([`write_call_opening`](Self::write_call_opening)),
    /// all but its wrapping case: out of line, every call at one call in flight paid
    /// for its frame, arguments and recomputed sizes, and inlined it costs the larger
    /// batches almost nothing (docs/PERFORMANCE.md, "Latency path").
    #[inline(always)]
    pub(crate) fn write_call(
        &mut self,
        call_id: u32,
        payload: &[u8],
        response_allowance: u32,
    ) -> Result<Flush, Error> {
        let len = u32::try_from(payload.len()).map_err(|_| Error::PayloadTooLarge)?;
        let padded = padded_message_size(len);
        if !self.ring.fits_open_batch(padded) {
            return self.write_call_opening(call_id, payload, padded, response_allowance);
        }
        let paid = self.pay_for_call(padded, padded, response_allowance)?;
        let size = self.ring.size();
        let pos = self.ring.append_to_open_batch(padded);
        let buf = self.mem.ring_bytes_mut(size, pos, padded as usize);
        emit_message(buf, call_id, paid.allowance_blocks, payload)
            .map_err(|_| Error::PayloadTooLarge)?;
        // Joined an open batch, whose endpoint is already in the dirty set (an open
        // batch keeps its bit set: `Dirty`'s invariant).
        Ok(Flush::Covered)
    }

    /// [`write_call`](Self::write_call) for a request that opens a batch, wrapping the
    /// ring first if it must (out of line, in
    /// [`pay_for_opening_general`](Self::pay_for_opening_general)).
    #[inline(always)]
    fn write_call_opening(
        &mut self,
        call_id: u32,
        payload: &[u8],
        padded: u64,
        response_allowance: u32,
    ) -> Result<Flush, Error> {
        // The refusals in the order the append path gives them: the allowance first.
        self.check_allowance(response_allowance)?;
        // A message that opens a batch can wrap, queueing up to two ranges.
        if self.ranges.len() + 2 > RANGES {
            return Err(self.refuse_ranges_full(padded, response_allowance));
        }
        // The common opening (every call at one call in flight): a new batch that does
        // not wrap. Tested once, as the append path tests `fits_open_batch`; `plan` and
        // `reserve_message` would each test it again (docs/PERFORMANCE.md, "Latency
        // path").
        let (paid, pos) = if self.ring.fits_new_batch(padded) {
            let paid =
                self.pay_for_call(FLOW_METADATA_SIZE + padded, padded, response_allowance)?;
            (paid, self.ring.open_batch_with(padded))
        } else {
            self.pay_for_opening_general(padded, response_allowance)?
        };
        let buf = self
            .mem
            .ring_bytes_mut(self.ring.size(), pos, padded as usize);
        emit_message(buf, call_id, paid.allowance_blocks, payload)
            .map_err(|_| Error::PayloadTooLarge)?;
        // Alone in its batch: it opened it (or wrapped into a new one).
        Ok(Flush::needed_if(self.ring.batch_count() == 1))
    }

    /// [`write_call_opening`](Self::write_call_opening)'s payment and reservation for a
    /// batch that wraps the ring (or does not fit at all): once a lap, out of line.
    #[inline(never)]
    fn pay_for_opening_general(
        &mut self,
        padded: u64,
        response_allowance: u32,
    ) -> Result<(CallCredit, u64), Error> {
        let plan = self.ring.plan(padded).map_err(|_| Error::PayloadTooLarge)?;
        let paid = match self.pay_for_call(plan.advance, padded, response_allowance) {
            Err(Error::RingFull) if plan.wraps => {
                // Changes nothing now (a refused call never does): the flush the
                // refusal asks for decides (`wrap_if_wanted`). Ring sizes are below
                // 2^32, and so is a message that plans.
                self.wrap_for = padded as u32;
                return Err(Error::RingFull);
            }
            r => r?,
        };
        let reserved = self
            .ring
            .reserve_message(padded)
            .map_err(|_| Error::PayloadTooLarge)?;
        if let Some(w) = reserved.wrap {
            queue_wrap_ranges(&mut self.ranges, w)?;
        }
        Ok((paid, reserved.pos))
    }

    /// The checks a call passes before anything changes, and its payment: a response
    /// allowance the peer's ring can carry, room for the producer to move by `advance`
    /// (for a message of `padded` bytes), and the peer's credit for the allowance
    /// (deducted).
    #[inline(always)]
    fn pay_for_call(
        &mut self,
        advance: u64,
        padded: u64,
        response_allowance: u32,
    ) -> Result<CallCredit, Error> {
        self.check_allowance(response_allowance)?;
        if !self.call_has_room(advance) {
            return Err(self.refuse_ring_full(padded, response_allowance));
        }
        self.credit
            .try_reserve_for_call(response_allowance)
            .map_err(call_credit_refusal)
    }

    /// `credit.call_fits(in_flight, advance)`, tested against the cached limit first.
    #[inline]
    fn call_has_room(&mut self, advance: u64) -> bool {
        // A plain add, like every producer move: positions never come near 2^64 (the
        // ring module's overflow note), and `advance` is below one lap.
        let end = self.ring.producer() + advance;
        if end > self.call_limit {
            self.refresh_call_limit();
            if end > self.call_limit {
                debug_assert!(!self.credit.call_fits(self.in_flight(), advance));
                return false;
            }
        }
        debug_assert!(self.credit.call_fits(self.in_flight(), advance));
        true
    }

    /// Run by the flush after a call that must wrap was refused for room. Its advance
    /// (the skipped tail, metadata and message) stays the same while the producer stays
    /// put, and can exceed what the ring ever frees beside `2R`: a 1 500-byte call on a
    /// 4 KiB ring, refused with nothing in flight, was refused for ever (a livelock
    /// behind a retryable error). So if the call still cannot fit before the lap end,
    /// would fit on a fresh lap once everything in flight is consumed, and the skipped
    /// tail fits now, the lap ends here: a wrap marker is queued for this flush, and the
    /// retry, at the next lap's start, pays only for metadata and message.
    #[cold]
    #[inline(never)]
    pub(crate) fn wrap_if_wanted(&mut self) {
        let padded = u64::from(core::mem::take(&mut self.wrap_for));
        let still_wraps = self.ring.plan(padded).is_ok_and(|p| p.wraps);
        let tail = self.ring.size().room_to_lap_end(self.ring.producer());
        if padded != 0
            && still_wraps
            && self.credit.call_fits(0, FLOW_METADATA_SIZE + padded)
            && self.credit.has_room(self.in_flight(), tail)
            && self.can_queue_wrap()
        {
            let w = self.ring.wrap();
            // Room for both ranges was checked just above.
            let _ = queue_wrap_ranges(&mut self.ranges, w);
        }
    }

    /// A call of a `padded`-byte message found no ring room: [`Error::RingFull`] (and a
    /// READ of the peer's consumer at the next flush), unless no room could ever
    /// admit it ([`permanent_refusal`](Self::permanent_refusal)).
    #[cold]
    #[inline(never)]
    fn refuse_ring_full(&mut self, padded: u64, response_allowance: u32) -> Error {
        if let Some(e) = self.permanent_refusal(padded, response_allowance) {
            return e;
        }
        self.want_read = true;
        Error::RingFull
    }

    /// A call that opens a batch found the wrap ranges' queue full: [`Error::RingFull`]
    /// (the send queue drains it), unless no room could ever admit it.
    #[cold]
    #[inline(never)]
    fn refuse_ranges_full(&self, padded: u64, response_allowance: u32) -> Error {
        self.permanent_refusal(padded, response_allowance)
            .unwrap_or(Error::RingFull)
    }

    /// Why a call of a `padded`-byte message allowing `response_allowance` response
    /// bytes can never be made, if it cannot: a message above the request limit
    /// (`credit::max_request_payload`: the call rule never admits it, whatever is
    /// consumed), or an allowance no credit can ever pay for.
    fn permanent_refusal(&self, padded: u64, response_allowance: u32) -> Option<Error> {
        if padded > padded_message_size(self.max_request_payload()) {
            Some(Error::PayloadTooLarge)
        } else if !self.credit.can_ever_pay(response_allowance) {
            Some(Error::AllowanceTooLarge)
        } else {
            None
        }
    }

    /// Why a call may not be made on this endpoint while every pending-call slot is
    /// taken: [`Error::TooManyCalls`], unless it could never be made at all.
    #[cold]
    #[inline(never)]
    pub(crate) fn refuse_no_slot(&self, payload_len: usize, response_allowance: u32) -> Error {
        let too_large = payload_len > self.max_request_payload() as usize;
        if too_large || self.check_allowance(response_allowance).is_err() {
            Error::PayloadTooLarge
        } else if !self.credit.can_ever_pay(response_allowance) {
            Error::AllowanceTooLarge
        } else {
            Error::TooManyCalls
        }
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
