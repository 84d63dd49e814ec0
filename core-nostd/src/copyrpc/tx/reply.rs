//! Writing a reply into the send ring: its room was paid for by the request's
//! allowance, so the only refusal is a reply larger than that allowance.

use super::{queue_wrap_ranges, Tx};
use crate::copyrpc::endpoint::Flush;
use crate::copyrpc::Error;
use crate::credit;
use crate::wire::{
    padded_message_size, HeaderRepr, HeaderView, ALIGNMENT, FLOW_METADATA_SIZE, HEADER_SIZE,
};

/// Why [`Tx::write_reply`] wrote nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplyFail {
    /// Larger than the request's allowance: nothing changed, the handle goes back.
    Refused,
    /// The endpoint must fail.
    Failed(Error),
}

impl Tx {
    /// Writes a reply of `len` bytes to call `call_id`, whose request carried
    /// `blocks` allowance blocks, filled by `fill(out)`; releases the allowance.
    /// Returns whether it opened a batch or wrapped (the endpoint then needs a flush).
    /// [`ReplyFail::Refused`]: over the allowance, nothing changed.
    ///
    /// Always inlined: see `Context::reply_with` and `Context::call_with_allowance`.
    #[inline(always)]
    pub(crate) fn write_reply(
        &mut self,
        call_id: u32,
        blocks: u32,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Flush, ReplyFail> {
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
        debug_assert!(padded < self.ring.size().get() - FLOW_METADATA_SIZE);
        // No room check: the released allowance guarantees it (credit module docs).
        debug_assert!(self.ring.plan(padded).is_ok_and(|p| self
            .credit
            .has_room(self.consumer.in_flight(self.ring.producer()), p.advance)));
        let pos = if self.ring.fits_open_batch(padded) {
            self.ring.append_to_open_batch(padded)
        } else {
            let reserved = self
                .ring
                .reserve_message(padded)
                .map_err(|_| ReplyFail::Failed(Error::EndpointFailed))?;
            if let Some(w) = reserved.wrap {
                queue_wrap_ranges(&mut self.ranges, w).map_err(ReplyFail::Failed)?;
            }
            reserved.pos
        };
        let out = self
            .mem
            .ring_bytes_mut(self.ring.size(), pos, padded as usize);
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
        Ok(Flush::needed_if(self.ring.batch_count() == 1))
    }
}
