//! One endpoint's credit counters, updated through the pure functions of the parent.

use super::{
    allowance_blocks, grant, has_room, initial_peer_credit_balance, initial_resp_reservation,
    internal_allowance_for_blocks, invariant_holds, max_peer_credit, reply_fits_allowance,
    CreditError,
};
use crate::ring::RingSize;

/// Credit counters of one endpoint. `in_flight` comes from the ring layer
/// ([`RemoteConsumer::in_flight`](crate::ring::RemoteConsumer::in_flight)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditState {
    /// Credit the peer granted us for requests, in bytes.
    peer_credit_balance: u64,
    /// `R`: bytes of the peer's recv ring held back for replies we owe or may owe.
    /// Equals the peer's balance plus grants in transit plus the allowances of its
    /// requests we have not answered yet.
    resp_reservation: u64,
    /// `R_max`, the most `R` can ever be: the policy cap as far as `R` can reach it,
    /// [`max_peer_credit`] of the configured cap and `C` (aligned down, and at most
    /// `(C - 32) / 2` aligned down). Grants are the same as under the configured cap
    /// (they are aligned and made with a batch's metadata in flight), and the call
    /// rule ([`call_fits`](Self::call_fits)) holds calls to it.
    max_resp_reservation: u64,
    /// `C`: the peer's recv ring size.
    remote_ring_size: u64,
    /// The most the balance can ever reach ([`max_peer_credit`]): a call costing more
    /// is refused for good, not as a retry.
    max_peer_credit: u64,
}

/// What a call paid, to put in its header and remember until its response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallCredit {
    /// The request header's piggyback: response allowance in 32 B blocks.
    pub allowance_blocks: u32,
    /// Balance deducted; the replier releases the same amount from its reservation.
    pub internal_allowance: u64,
}

impl CreditState {
    /// Counters at connect, from our cap, both ring sizes and the peer's advertised
    /// [`initial_credit`](super::initial_credit).
    pub const fn connect(
        max_resp_reservation: u64,
        local_recv_ring: RingSize,
        remote_recv_ring: RingSize,
        remote_initial_credit: u64,
    ) -> Self {
        Self {
            peer_credit_balance: initial_peer_credit_balance(
                remote_initial_credit,
                local_recv_ring.get(),
            ),
            resp_reservation: initial_resp_reservation(
                max_resp_reservation,
                remote_recv_ring.get(),
            ),
            max_resp_reservation: max_peer_credit(max_resp_reservation, remote_recv_ring.get()),
            remote_ring_size: remote_recv_ring.get(),
            max_peer_credit: max_peer_credit(remote_initial_credit, local_recv_ring.get()),
        }
    }

    /// Credit available for requests.
    #[inline]
    pub const fn peer_credit_balance(&self) -> u64 {
        self.peer_credit_balance
    }

    /// `R`.
    #[inline]
    pub const fn resp_reservation(&self) -> u64 {
        self.resp_reservation
    }

    /// `R_max`: the policy cap on `R`, as far as `R` can reach it.
    #[inline]
    pub const fn max_resp_reservation(&self) -> u64 {
        self.max_resp_reservation
    }

    /// `C`.
    #[inline]
    pub const fn remote_ring_size(&self) -> u64 {
        self.remote_ring_size
    }

    /// The most credit the peer can ever grant us ([`max_peer_credit`]).
    #[inline]
    pub const fn max_peer_credit(&self) -> u64 {
        self.max_peer_credit
    }

    /// Whether a call allowing `response_allowance` response bytes could ever be paid
    /// for, with every credit returned.
    #[inline]
    pub const fn can_ever_pay(&self, response_allowance: u32) -> bool {
        internal_allowance_for_blocks(allowance_blocks(response_allowance)) <= self.max_peer_credit
    }

    /// [`invariant_holds`](super::invariant_holds) for our counters.
    #[inline]
    pub const fn invariant_holds(&self, in_flight: u64) -> bool {
        invariant_holds(in_flight, self.resp_reservation, self.remote_ring_size)
    }

    /// [`has_room`](super::has_room) for our counters: check before every call, and
    /// (after [`release_on_reply`](Self::release_on_reply)) it holds for every reply.
    #[inline]
    pub const fn has_room(&self, in_flight: u64, advance: u64) -> bool {
        has_room(
            in_flight,
            advance,
            self.resp_reservation,
            self.remote_ring_size,
        )
    }

    /// The call rule: whether a call may move the producer by `advance` with
    /// `in_flight` bytes unconsumed, `in_flight + advance + 2 R_max <= C`, where
    /// `R_max` is the most `R` can ever be (see the field `max_resp_reservation`).
    ///
    /// A call is held to `R_max`, not to the `R` of the moment: whether it fits then
    /// never depends on what the peer happens to hold. On an idle peer `R` stays where
    /// it is, so a call that fitted only below it waited for ever (`RingFull` on every
    /// retry); held to `R_max`, a message too large for the ring beside it never fits
    /// and is refused for good ([`max_request_payload`](super::max_request_payload)),
    /// and one within it always fits once what is in flight is consumed. `R <= R_max`,
    /// so [`has_room`](Self::has_room) holds too, and with it the invariant.
    #[inline]
    pub const fn call_fits(&self, in_flight: u64, advance: u64) -> bool {
        has_room(
            in_flight,
            advance,
            self.max_resp_reservation,
            self.remote_ring_size,
        )
    }

    /// The highest send-ring producer position a call's write may end at: with the
    /// peer's consumer known at `consumer`, [`call_fits`](Self::call_fits)`(producer -
    /// consumer, advance)` holds exactly when `producer + advance <= call_limit(consumer)`.
    ///
    /// `call_fits` asks `in_flight + advance + 2 R_max <= C`; with `in_flight =
    /// producer - consumer` that is `producer + advance <= consumer + C - 2 R_max`.
    /// `R_max` is fixed at connect, so the limit moves only with the consumer, up: a copy taken
    /// earlier stays a safe (lower) bound, and the caller can compare against a cached
    /// limit and recompute only when the cache refuses.
    #[inline]
    pub const fn call_limit(&self, consumer: u64) -> u64 {
        // 2 R_max <= C - 32, so neither overflows, nor is the limit ever 0.
        consumer.saturating_add(self.remote_ring_size) - 2 * self.max_resp_reservation
    }

    /// Deducts the cost of a call that allows `response_allowance` response bytes.
    /// Check ring room first, so a refused call leaves the balance untouched.
    ///
    /// [`CreditError::InsufficientCredit`] when the peer may still grant enough (retry
    /// after a poll), [`CreditError::AllowanceTooLarge`] when it never can.
    ///
    /// Inline: with the out-of-line refusal in it, the compiler stops inlining it into
    /// the call path on its own, and every call pays for the call (docs/PERFORMANCE.md,
    /// "Why the code is shaped this way"). Always: the C library's context classes made
    /// LLVM decline a plain `#[inline]` there.
    #[inline(always)]
    pub fn try_reserve_for_call(
        &mut self,
        response_allowance: u32,
    ) -> Result<CallCredit, CreditError> {
        let blocks = allowance_blocks(response_allowance);
        let cost = internal_allowance_for_blocks(blocks);
        if self.peer_credit_balance < cost {
            // Which refusal it is only matters once refused: kept out of the callers'
            // inlined path.
            return Err(call_refusal(cost, self.max_peer_credit));
        }
        self.peer_credit_balance -= cost;
        Ok(CallCredit {
            allowance_blocks: blocks,
            internal_allowance: cost,
        })
    }

    /// Adds a received `credit_grant`. Saturates: a peer granting absurd amounts only
    /// hurts itself, and its own invariant bounds what an honest peer grants.
    #[inline]
    pub fn on_grant_received(&mut self, grant: u64) {
        self.peer_credit_balance = self.peer_credit_balance.saturating_add(grant);
    }

    /// Computes the grant for a batch being flushed and adds it to `R`. `in_flight`
    /// must include the whole batch; see "When to grant" in the module docs.
    pub fn grant_for_batch(&mut self, in_flight: u64) -> u64 {
        let grant = grant(
            in_flight,
            self.resp_reservation,
            self.max_resp_reservation,
            self.remote_ring_size,
        );
        self.resp_reservation += grant;
        debug_assert!(grant == 0 || self.invariant_holds(in_flight));
        grant
    }

    /// Releases the reservation of a request whose header carried `allowance_blocks`,
    /// before writing its reply of padded size `reply_padded`. Returns the amount
    /// released. On error nothing changes.
    pub fn release_on_reply(
        &mut self,
        allowance_blocks: u32,
        reply_padded: u64,
    ) -> Result<u64, CreditError> {
        let allowance = internal_allowance_for_blocks(allowance_blocks);
        if !reply_fits_allowance(reply_padded, allowance) {
            return Err(CreditError::ReplyTooLarge);
        }
        self.resp_reservation = self
            .resp_reservation
            .checked_sub(allowance)
            .ok_or(CreditError::ReservationUnderflow)?;
        Ok(allowance)
    }
}

/// Why a call costing `cost`, more than the balance, is refused.
#[cold]
#[inline(never)]
const fn call_refusal(cost: u64, max_peer_credit: u64) -> CreditError {
    if cost > max_peer_credit {
        CreditError::AllowanceTooLarge
    } else {
        CreditError::InsufficientCredit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credit::worst_case_advance;
    use crate::wire::padded_message_size;

    fn size(bytes: u64) -> RingSize {
        RingSize::new(bytes).unwrap()
    }

    #[test]
    fn connect_matches_the_peer_reservation_across_sizes() {
        // A: 4 KiB recv ring, cap 2 KiB; B: 1 KiB recv ring, cap 128.
        let a = CreditState::connect(
            2048,
            size(4096),
            size(1024),
            super::super::initial_credit(128),
        );
        let b = CreditState::connect(
            128,
            size(1024),
            size(4096),
            super::super::initial_credit(2048),
        );
        assert_eq!(a.resp_reservation(), 256); // min(2048, 1024/4)
        assert_eq!(b.peer_credit_balance(), 256); // min(2048, 1024/4)
        assert_eq!(b.resp_reservation(), 128); // min(128, 4096/4)
        assert_eq!(a.peer_credit_balance(), 128); // min(128, 4096/4)
    }

    #[test]
    fn call_and_reply_move_the_same_amount() {
        let mut caller = CreditState::connect(1024, size(4096), size(4096), 1024);
        let mut replier = CreditState::connect(1024, size(4096), size(4096), 1024);
        let paid = caller.try_reserve_for_call(100).unwrap();
        assert_eq!(
            paid,
            CallCredit {
                allowance_blocks: 4,
                internal_allowance: 192
            }
        );
        assert_eq!(caller.peer_credit_balance(), 1024 - 192);
        // 128 allowance bytes: a 148-byte payload pads to 160, + 32 = 192
        let reply = padded_message_size(148);
        assert_eq!(replier.release_on_reply(4, reply), Ok(192));
        assert_eq!(replier.resp_reservation(), 1024 - 192);
        assert_eq!(
            replier.release_on_reply(4, padded_message_size(149)),
            Err(CreditError::ReplyTooLarge)
        );
    }

    #[test]
    fn refusals_change_nothing() {
        // The peer's cap (96) is all it will ever grant: 33 B (2 blocks, 128) never fit.
        let mut s = CreditState::connect(256, size(1024), size(1024), 96);
        assert_eq!(s.peer_credit_balance(), 96);
        assert_eq!(
            s.try_reserve_for_call(33),
            Err(CreditError::AllowanceTooLarge)
        );
        assert_eq!(s.peer_credit_balance(), 96);
        // A 256 B recv ring starts the balance at a quarter (64) of a bound of 96: a
        // 96 B call is short of credit for now.
        let mut t = CreditState::connect(256, size(256), size(1024), 1 << 20);
        assert_eq!((t.peer_credit_balance(), t.max_peer_credit()), (64, 96));
        assert_eq!(
            t.try_reserve_for_call(1),
            Err(CreditError::InsufficientCredit)
        );
        assert_eq!(t.peer_credit_balance(), 64);
        assert!(s.try_reserve_for_call(32).is_ok());
        assert_eq!(s.peer_credit_balance(), 0);
        assert_eq!(s.resp_reservation(), 256);
        assert_eq!(
            s.release_on_reply(8, 32),
            Err(CreditError::ReservationUnderflow)
        );
        assert_eq!(s.resp_reservation(), 256);
    }

    #[test]
    fn item2_a_call_no_grant_can_ever_cover_is_refused_for_good() {
        // The peer's cap (1024) bounds the balance: 30 blocks cost 1024, 31 cost 1056.
        let mut s = CreditState::connect(1024, size(4096), size(4096), 1024);
        assert_eq!(s.max_peer_credit(), 1024);
        assert!(s.can_ever_pay(960) && !s.can_ever_pay(961));
        assert_eq!(
            s.try_reserve_for_call(961),
            Err(CreditError::AllowanceTooLarge)
        );
        assert_eq!(
            s.try_reserve_for_call(u32::MAX),
            Err(CreditError::AllowanceTooLarge)
        );
        assert_eq!(s.peer_credit_balance(), 1024, "refusals change nothing");
        s.try_reserve_for_call(960).unwrap();
        assert_eq!(
            s.try_reserve_for_call(0),
            Err(CreditError::InsufficientCredit),
            "payable once credit comes back"
        );
        // A cap above half our recv ring: the peer's invariant bounds it instead.
        let s = CreditState::connect(1024, size(4096), size(4096), 1 << 20);
        assert_eq!(s.max_peer_credit(), 2016);
    }

    #[test]
    fn call_limit_admits_exactly_what_the_call_rule_admits() {
        for (cap, ring) in [(4096, 1024), (256, 4096), (64, 64 << 10), (1000, 4096)] {
            let mut s = CreditState::connect(cap, size(ring), size(ring), 0);
            // A grant goes out with a batch, so at least its metadata is in flight.
            for grant_in_flight in [32, 64, ring / 2] {
                s.grant_for_batch(grant_in_flight);
                for consumer in [0, 96, 1 << 40] {
                    let limit = s.call_limit(consumer);
                    for in_flight in [0, 32, ring / 4, ring] {
                        let producer = consumer + in_flight;
                        for advance in [32, 64, ring / 2, ring, 2 * ring] {
                            let fits = s.call_fits(in_flight, advance);
                            assert_eq!(
                                fits,
                                producer + advance <= limit,
                                "cap {cap} ring {ring} consumer {consumer} \
                                 in_flight {in_flight} advance {advance}"
                            );
                            assert!(!fits || s.has_room(in_flight, advance), "R <= R_max");
                        }
                    }
                }
            }
        }
    }

    /// The call rule holds a call to the most `R` can be, not to `R` now: at connect
    /// with a cap above `C / 4`, `R` is `C / 4`, and a call that fits beside it but
    /// not beside the cap is refused (it would wait for ever once grants raise `R`).
    #[test]
    fn a_call_is_held_to_the_most_the_reservation_can_be() {
        let s = CreditState::connect(1536, size(4096), size(4096), 1024);
        assert_eq!(s.resp_reservation(), 1024);
        assert!(s.has_room(0, 2048));
        assert!(!s.call_fits(0, 2048));
        assert!(s.call_fits(0, 4096 - 2 * 1536));
        assert!(!s.call_fits(32, 4096 - 2 * 1536));
        assert_eq!(s.call_limit(0), 1024);
    }

    #[test]
    fn grant_fills_the_invariant_and_the_released_reply_fits() {
        let mut s = CreditState::connect(4096, size(1024), size(1024), 0);
        assert_eq!(s.resp_reservation(), 256);
        assert_eq!(s.grant_for_batch(64), 224); // (1024 - 64) / 2 - 256
        assert!(s.invariant_holds(64) && !s.invariant_holds(96));
        let reply = padded_message_size(40); // 64 B, within 2 blocks (allowance 128)
        s.release_on_reply(2, reply).unwrap();
        assert!(s.has_room(64, worst_case_advance(reply)));
        assert!(s.invariant_holds(64 + worst_case_advance(reply)));
    }
}
