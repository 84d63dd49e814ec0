//! Received requests of one endpoint, in arrival order, until their replies release
//! their ring bytes.
//!
//! The recv ring is consumed in order, but replies come in any order (seed 002: in-order
//! intake, out-of-order responses). A request's bytes must stay readable until it is
//! answered, so the consumer (and the credit returned to the peer) stops at the oldest
//! unanswered request; answered ones behind it are popped when it is.
//!
//! So an application that holds one request while it waits for later ones from the same
//! peer can fill that peer's ring and wait forever: copy out what must outlive the
//! exchange, and answer.

/// Where a request is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReqState {
    /// Parsed, waiting in the context's receive queue.
    Queued,
    /// Handed out by `recv`; its handle is alive.
    Delivered,
    /// Answered (or dropped with its failed endpoint): its bytes may be reused.
    Done,
}

/// A link in the context-wide receive queue: (endpoint index, request sequence), or
/// none; one word (endpoint in bits 32..48, sequence below), so following it is a load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Link(u64);

impl Link {
    /// No link (an endpoint index ≥ 2^16 cannot exist: `EPS` ≤ 256).
    pub(crate) const NONE: Self = Self(u64::MAX);

    #[inline]
    pub(crate) const fn to(ep: u16, seq: u32) -> Self {
        Self(((ep as u64) << 32) | seq as u64)
    }

    #[inline]
    pub(crate) const fn get(self) -> Option<(u16, u32)> {
        if self.0 == u64::MAX {
            None
        } else {
            Some(((self.0 >> 32) as u16, self.0 as u32))
        }
    }

    #[inline]
    pub(crate) const fn is_none(self) -> bool {
        self.0 == u64::MAX
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Req {
    /// Position of the message (its header) in the recv ring.
    pub(crate) start: u64,
    pub(crate) call_id: u32,
    /// The header's allowance blocks, as the caller paid for them.
    pub(crate) blocks: u32,
    pub(crate) len: u32,
    pub(crate) state: ReqState,
    /// The next request in the context's receive queue.
    pub(crate) next: Link,
}

const EMPTY: Req = Req {
    start: 0,
    call_id: 0,
    blocks: 0,
    len: 0,
    state: ReqState::Done,
    next: Link::NONE,
};

/// `N` requests (a power of two), indexed by a free-running sequence number.
#[derive(Debug)]
pub(crate) struct Requests<const N: usize> {
    entries: [Req; N],
    /// Oldest request not yet popped.
    head: u32,
    /// Sequence number of the next request.
    tail: u32,
    /// Entries behind the front marked done (answered out of order), not yet popped:
    /// while there are none, popping the front pops only it.
    done_behind: u32,
}

impl<const N: usize> Requests<N> {
    pub(crate) const fn new() -> Self {
        assert!(N.is_power_of_two() && N <= 1 << 30);
        Self {
            entries: [EMPTY; N],
            head: 0,
            tail: 0,
            done_behind: 0,
        }
    }

    #[inline]
    fn live(&self, seq: u32) -> bool {
        seq.wrapping_sub(self.head) < self.tail.wrapping_sub(self.head)
    }

    /// Appends a queued request; `None` when all `N` entries are in use. Its receive
    /// queue link is `next` (the caller fixes the last one of a batch up).
    #[inline]
    pub(crate) fn push(
        &mut self,
        start: u64,
        call_id: u32,
        blocks: u32,
        len: u32,
        next: Link,
    ) -> Option<u32> {
        if self.tail.wrapping_sub(self.head) as usize == N {
            return None;
        }
        let seq = self.tail;
        self.entries[seq as usize & (N - 1)] = Req {
            start,
            call_id,
            blocks,
            len,
            state: ReqState::Queued,
            next,
        };
        self.tail = seq.wrapping_add(1);
        Some(seq)
    }

    #[inline]
    pub(crate) fn get(&self, seq: u32) -> Option<&Req> {
        if self.live(seq) {
            Some(&self.entries[seq as usize & (N - 1)])
        } else {
            None
        }
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, seq: u32) -> Option<&mut Req> {
        if self.live(seq) {
            Some(&mut self.entries[seq as usize & (N - 1)])
        } else {
            None
        }
    }

    /// Marks `seq` answered and pops every answered request at the front. Returns
    /// whether the front moved (only then can the consumer advance).
    #[inline]
    pub(crate) fn release(&mut self, seq: u32) -> bool {
        if !self.live(seq) {
            return false;
        }
        let e = &mut self.entries[seq as usize & (N - 1)];
        if seq != self.head {
            if e.state != ReqState::Done {
                e.state = ReqState::Done;
                self.done_behind += 1;
            }
            return false;
        }
        // The front is popped at once: its state is never read again.
        self.head = seq.wrapping_add(1);
        while self.done_behind > 0
            && self.head != self.tail
            && self.entries[self.head as usize & (N - 1)].state == ReqState::Done
        {
            self.head = self.head.wrapping_add(1);
            self.done_behind -= 1;
        }
        true
    }

    /// Start of the oldest unanswered request: the consumer may not pass it.
    #[inline]
    pub(crate) fn oldest_start(&self) -> Option<u64> {
        if self.head == self.tail {
            None
        } else {
            Some(self.entries[self.head as usize & (N - 1)].start)
        }
    }

    /// Sequence number the next request gets.
    pub(crate) const fn tail(&self) -> u32 {
        self.tail
    }

    /// Requests not yet answered.
    pub(crate) fn len(&self) -> u32 {
        self.tail.wrapping_sub(self.head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_waits_for_the_oldest() {
        let mut r: Requests<4> = Requests::new();
        let a = r.push(32, 1, 0, 0, Link::NONE).unwrap();
        let b = r.push(64, 2, 0, 0, Link::NONE).unwrap();
        let c = r.push(96, 3, 0, 0, Link::NONE).unwrap();
        r.release(b);
        assert_eq!(
            r.oldest_start(),
            Some(32),
            "b answered first, a still holds"
        );
        r.release(a);
        assert_eq!(r.oldest_start(), Some(96));
        assert!(r.get(b).is_none(), "popped");
        r.push(128, 4, 0, 0, Link::NONE).unwrap();
        r.push(160, 5, 0, 0, Link::NONE).unwrap();
        r.push(192, 6, 0, 0, Link::NONE).unwrap();
        assert_eq!(r.push(224, 7, 0, 0, Link::NONE), None, "full");
        r.release(c);
        assert_eq!((r.len(), r.oldest_start()), (3, Some(128)));
    }

    #[test]
    fn answers_behind_the_front_pop_with_it_in_any_order_and_only_once() {
        let mut r: Requests<8> = Requests::new();
        let s: Vec<u32> = (0..5)
            .map(|i| r.push(32 * i, i as u32, 0, 0, Link::NONE).unwrap())
            .collect();
        assert!(!r.release(s[3]));
        assert!(!r.release(s[3]), "a second release changes nothing");
        assert!(!r.release(s[1]));
        assert!(r.release(s[0]), "pops 0 and 1, stops at 2");
        assert_eq!((r.len(), r.oldest_start()), (3, Some(64)));
        assert!(r.release(s[2]), "pops 2 and 3");
        assert_eq!((r.len(), r.oldest_start()), (1, Some(128)));
        assert!(r.release(s[4]));
        assert_eq!((r.len(), r.oldest_start()), (0, None));
        assert!(!r.release(s[3]), "popped: not live");
    }
}
