//! The send side of an endpoint: the send ring and its memory, the peer's credit, wrap
//! ranges waiting for send-queue room, and the peer's consumer as we know it. A reply
//! writer is a borrow of it ([`Tx::write_reply`]), so the recv side, where a request's
//! bytes are, stays borrowable while the reply is built.
//!
//! Metadata (credit return and grant) is computed only when the batch's WQE is about to
//! be posted ([`Tx::post_range`]), after the send queue was found to have room for it.
//! A flush that finds the queue full therefore takes nothing: the batch stays open (or
//! its wrap ranges stay queued) and the next poll posts it with whatever credit is due
//! then, so no credit return or grant is ever computed for a WQE that is not posted.

mod call;
mod range;
mod reply;

use mlx5_raw::Remote;

use super::mem::Dma;
use super::Error;
use crate::credit::{self, CreditState};
use crate::ops::Fifo;
use crate::ring::{FlushRange, RemoteConsumer, RingError, RingSize, SendRing, Wrap};
use crate::wire::{padded_message_size, ALIGNMENT, FLOW_METADATA_SIZE};

pub(crate) use reply::ReplyFail;

/// Ranges a wrap queued that are not posted yet. At most two wraps can be pending
/// (a third would need more than a lap in flight, which the invariant forbids), each
/// with a flushed batch and a marker.
pub(crate) const RANGES: usize = 8;

/// The send side of an endpoint (module docs).
///
/// `repr(C)`: the wrap ranges come last, their counters first, so the fields a call
/// and a flush touch lie together and the ranges' storage, which only a wrap touches,
/// ends the struct (docs/PERFORMANCE.md, "A cold round's cache lines").
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Tx {
    ring: SendRing,
    mem: Dma,
    credit: CreditState,
    /// The peer's consumer as we know it (piggybacked returns and READ results).
    consumer: RemoteConsumer,
    /// A lower bound of `credit.call_limit(consumer.position())`: where a call's write
    /// may end. Refreshed when it refuses a call; the exact limit moves only with the
    /// consumer, up, so testing against this copy never admits a call the call rule
    /// (`CreditState::call_fits`) would refuse.
    call_limit: u64,
    /// Our recv ring's size: that of the peer's send ring, which carries our replies.
    reply_ring: RingSize,
    /// Where the peer's recv ring is.
    peer_recv: Remote,
    /// A call found the ring full, or a grant was blocked only by a stale view of the
    /// peer's consumer: read it at the next flush.
    want_read: bool,
    /// A call was refused for want of credit with none pending on the endpoint: return
    /// the bytes consumed so far in a batch of their own (if nothing else carries them
    /// first), so that the peer sees the room it needs to grant (in what was padding).
    credit_wanted: bool,
    /// A call that must wrap was refused for room (0: none): the padded size of its
    /// message, for [`wrap_if_wanted`](Self::wrap_if_wanted) at the next flush.
    wrap_for: u32,
    /// Wrap ranges waiting for send-queue room, in posting order.
    ranges: Fifo<FlushRange, RANGES>,
}

// The wrap ranges end the send side (the struct's comment).
const _: () = assert!(
    core::mem::offset_of!(Tx, ranges) + core::mem::size_of::<Fifo<FlushRange, RANGES>>()
        == core::mem::size_of::<Tx>()
);

impl Tx {
    /// Placeholder sizes until `connect` learns the peer's; nothing runs before it.
    pub(crate) fn new(mem: Dma) -> Self {
        let size = RingSize::new(RingSize::MIN).unwrap_or_else(|_| unreachable!());
        Self {
            ring: SendRing::new(size),
            mem,
            credit: CreditState::connect(0, size, size, 0),
            consumer: RemoteConsumer::new(0),
            call_limit: 0,
            ranges: Fifo::new(),
            reply_ring: size,
            peer_recv: Remote { addr: 0, rkey: 0 },
            want_read: false,
            credit_wanted: false,
            wrap_for: 0,
        }
    }

    /// Bytes of the send ring's memory.
    pub(crate) fn mem_len(&self) -> usize {
        self.mem.len()
    }

    /// Starts over for a peer whose recv ring (`remote`, at `peer_recv`) granted
    /// `initial_credit`; `local` is our recv ring's size.
    pub(crate) fn connect(
        &mut self,
        max_resp_reservation: u64,
        local: RingSize,
        remote: RingSize,
        initial_credit: u64,
        peer_recv: Remote,
    ) {
        self.ring = SendRing::new(remote);
        self.consumer = RemoteConsumer::new(0);
        self.credit = CreditState::connect(max_resp_reservation, local, remote, initial_credit);
        self.reply_ring = local;
        self.peer_recv = peer_recv;
        self.refresh_call_limit();
    }

    /// Recomputes [`call_limit`](Self::call_limit) from the current counters.
    #[inline]
    fn refresh_call_limit(&mut self) {
        self.call_limit = self.credit.call_limit(self.consumer.position());
    }

    /// Bytes written towards the peer it is not known to have consumed.
    #[inline]
    pub(crate) fn in_flight(&self) -> u64 {
        self.consumer.in_flight(self.ring.producer())
    }

    /// The credit counters, for diagnostics and the allowance limits.
    #[inline]
    pub(crate) const fn credit(&self) -> &CreditState {
        &self.credit
    }

    /// Our send producer.
    #[inline]
    pub(crate) const fn producer(&self) -> u64 {
        self.ring.producer()
    }

    /// The peer's consumer as we know it.
    #[inline]
    pub(crate) const fn consumer_position(&self) -> u64 {
        self.consumer.position()
    }

    /// A batch's metadata arrived: the peer consumed `credit_return` more bytes and
    /// granted `grant` credit.
    #[inline(always)]
    pub(crate) fn on_metadata(&mut self, credit_return: u64, grant: u64) -> Result<(), RingError> {
        self.consumer
            .on_credit_return(credit_return, self.ring.producer())?;
        self.credit.on_grant_received(grant);
        Ok(())
    }

    /// Our READ of the peer's consumer returned `value`.
    pub(crate) fn on_consumer_read(&mut self, value: u64) -> Result<(), RingError> {
        self.consumer.on_read(value, self.ring.producer())
    }

    /// Whether a READ of the peer's consumer is wanted.
    #[inline(always)]
    pub(crate) const fn read_wanted(&self) -> bool {
        self.want_read
    }

    /// Whether a refused wrapping call left [`wrap_if_wanted`](Self::wrap_if_wanted)
    /// something to decide.
    #[inline]
    pub(crate) const fn wrap_wanted(&self) -> bool {
        self.wrap_for != 0
    }

    /// Wants a READ of the peer's consumer at the next flush (or, `false`, no more).
    #[inline]
    pub(crate) fn want_read(&mut self, wanted: bool) {
        self.want_read = wanted;
    }

    /// Whether a call was refused for credit since the last credit-only batch.
    #[inline(always)]
    pub(crate) const fn credit_wanted(&self) -> bool {
        self.credit_wanted
    }

    /// A credit-only batch went out: the refusal that wanted one is answered.
    #[inline]
    pub(crate) fn credit_sent(&mut self) {
        self.credit_wanted = false;
    }

    /// A call was refused for credit with none pending on the endpoint (see
    /// `credit_wanted`).
    #[inline]
    pub(crate) fn want_credit(&mut self) {
        self.credit_wanted = true;
    }

    /// Wrap ranges queued for send-queue room.
    #[inline(always)]
    pub(crate) const fn queued_ranges(&self) -> usize {
        self.ranges.len()
    }

    /// Whether another wrap (two more ranges) could still be queued.
    #[inline]
    pub(crate) const fn can_queue_wrap(&self) -> bool {
        self.ranges.len() + 2 <= RANGES
    }

    /// Messages in the open batch (0: none open, or one opened without messages).
    #[inline(always)]
    pub(crate) const fn batch_count(&self) -> u32 {
        self.ring.batch_count()
    }

    /// Whether a batch is open (even one without messages).
    #[inline(always)]
    pub(crate) const fn batch_open(&self) -> bool {
        self.ring.meta_pos().is_some()
    }

    /// Whether the ring has room for a metadata-only batch now.
    pub(crate) fn credit_batch_room(&self) -> bool {
        self.ring
            .plan(0)
            .is_ok_and(|p| self.credit.has_room(self.in_flight(), p.advance))
    }

    /// Whether a metadata-only batch should go out, as far as credit goes: the peer
    /// looks short of credit and we can grant some. `unanswered` is asked (only if it
    /// matters) for our unanswered requests and their allowance blocks. Wants a READ
    /// when a grant is blocked only by a stale view of the peer's consumer.
    ///
    /// With none of the peer's requests unanswered here, no reply of ours will carry a
    /// grant, so any grant the invariant leaves goes out, up to the cap: the peer may
    /// need all of it. A call whose allowance costs the whole cap was refused with
    /// `InsufficientCredit` for ever when a reply's grant had been cut by the invariant
    /// and the peer held over half the cap (the echo with 4 000 B payloads on 16 KiB
    /// rings), or when, with a cap of two blocks, it held one.
    #[inline(always)]
    pub(crate) fn wants_grant(&mut self, unanswered: impl FnOnce() -> (u32, u64)) -> bool {
        let r = self.credit.resp_reservation();
        let max = self.credit.max_resp_reservation();
        // R is the peer's balance plus grants in transit plus our unanswered
        // allowances; with nothing in transit this is the peer's balance exactly.
        if max.saturating_sub(r) < ALIGNMENT {
            return false;
        }
        let (requests, blocks) = unanswered();
        if requests == 0 {
            return self.wants_top_up(r, max);
        }
        if max - r < 2 * ALIGNMENT {
            return false;
        }
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

    /// [`wants_grant`](Self::wants_grant) with none of the peer's requests unanswered
    /// and `R` below the cap `max`: whether the invariant leaves a grant now. If it does
    /// not, the peer's next batch (its credit return, which a call refused for credit
    /// sends, `credit_wanted`) brings this back. Out of line: it runs only while the
    /// peer is short.
    #[cold]
    #[inline(never)]
    fn wants_top_up(&self, r: u64, max: u64) -> bool {
        credit::grant(self.in_flight(), r, max, self.credit.remote_ring_size()) >= ALIGNMENT
    }

    /// Refuses a response allowance no reply could carry: the reply travels in the
    /// peer's send ring, which has our recv ring's size.
    #[inline(always)]
    fn check_allowance(&self, response_allowance: u32) -> Result<(), Error> {
        if padded_message_size(response_allowance).saturating_add(FLOW_METADATA_SIZE)
            >= self.reply_ring.get()
        {
            return Err(Error::PayloadTooLarge);
        }
        Ok(())
    }

    /// The largest request payload a call can ever send (at most `u32::MAX`, the
    /// header's length field).
    pub(crate) fn max_request_payload(&self) -> u32 {
        let limit = credit::max_request_payload(
            self.credit.max_resp_reservation(),
            self.credit.remote_ring_size(),
        );
        u32::try_from(limit).unwrap_or(u32::MAX)
    }

    /// The largest response allowance a call can ever pay for.
    pub(crate) fn max_response_allowance(&self) -> Option<u32> {
        credit::max_response_allowance(self.credit.max_peer_credit())
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

#[cfg(test)]
// A `Dma` over a stack buffer stands in for the registered ring memory.
#[allow(unsafe_code)]
mod tests {
    use super::*;
    use crate::copyrpc::Region;

    /// A connected `Tx` whose reservation `R` starts at `C / 4` = 1 024 (C = 4 KiB) and
    /// whose cap is `max`; `wants_grant` never touches the ring memory.
    fn tx(buf: &mut [u8; 64], max: u64) -> Tx {
        let region = Region {
            addr: buf.as_mut_ptr(),
            len: buf.len(),
            va: 0,
            lkey: 0,
            rkey: 0,
        };
        // SAFETY: `buf` outlives the returned `Tx` in every test below and nothing else
        // touches it; no device exists.
        let mem = unsafe { Dma::new(&region) }.unwrap();
        let mut t = Tx::new(mem);
        let c = RingSize::new(4096).unwrap();
        t.connect(max, c, c, 4096, Remote { addr: 0, rkey: 0 });
        assert_eq!(t.credit().resp_reservation(), 1024);
        t
    }

    /// Unanswered requests holding 20 blocks: the peer's balance is far below `max / 2`.
    fn short_peer() -> (u32, u64) {
        (1, 20)
    }

    #[test]
    fn a_grant_of_exactly_two_alignment_units_is_wanted() {
        let mut buf = [0u8; 64];
        // max - R = 64: the smallest grant worth a batch, and room for it.
        let mut t = tx(&mut buf, 1024 + 2 * ALIGNMENT);
        assert!(t.wants_grant(short_peer));
        assert!(!t.read_wanted());
        // One unit less and no grant is worth a batch; nor is a READ wanted, since the
        // cap, not a stale consumer, is what limits it.
        let mut t = tx(&mut buf, 1024 + 2 * ALIGNMENT - 1);
        assert!(!t.wants_grant(short_peer));
        assert!(!t.read_wanted());
    }

    #[test]
    fn a_cap_short_of_two_units_wants_no_grant_and_no_read() {
        let mut buf = [0u8; 64];
        // An unaligned cap (the configuration allows one) 40 B above R: a 32 B grant
        // could be computed, but it is below the batch-worthy 64 and the consumer is
        // not what blocks it.
        let mut t = tx(&mut buf, 1024 + 40);
        assert!(!t.wants_grant(short_peer));
        assert!(!t.read_wanted());
        // A peer with balance to spare and calls unanswered here wants nothing either,
        // at any headroom: the replies will carry grants.
        let mut t = tx(&mut buf, 1024 + 512);
        assert!(!t.wants_grant(|| (1, 0)));
        assert!(!t.read_wanted());
        assert!(t.wants_grant(short_peer));
    }

    /// With nothing of the peer's unanswered, no reply will carry a grant: any the
    /// invariant leaves goes out, a single unit too, up to the cap, whatever the peer
    /// holds (it may need all of it for one call). No READ is wanted for it: a refused
    /// call of the peer's returns its consumed bytes instead.
    #[test]
    fn with_nothing_unanswered_any_grant_up_to_the_cap_is_wanted() {
        let mut buf = [0u8; 64];
        let mut t = tx(&mut buf, 1024 + 512);
        assert!(t.wants_grant(|| (0, 0)));
        let mut t = tx(&mut buf, 1024 + ALIGNMENT);
        assert!(t.wants_grant(|| (0, 0)));
        let mut t = tx(&mut buf, 1024 + ALIGNMENT - 1);
        assert!(!t.wants_grant(|| (0, 0)), "no whole unit to grant");
        assert!(!t.read_wanted());
    }
}
