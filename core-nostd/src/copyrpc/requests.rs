//! Received requests of one endpoint, in arrival order, until their replies release
//! their ring bytes.
//!
//! The recv ring is consumed in order, but replies come in any order (in-order intake,
//! out-of-order responses: docs/spec/copyrpc.md#in-order-intake). A request's bytes must
//! stay readable until it is answered, so the consumer (and the credit returned to the
//! peer) stops at the oldest unanswered request; answered ones behind it are popped when it
//! is.
//!
//! So an application that holds one request while it waits for later ones from the same
//! peer can fill that peer's ring and wait forever: copy out what must outlive the
//! exchange, and answer.

/// Where a request is in its life, and for a delivered one its sequence number, in one
/// word: checking a handle against its entry is one compare
/// ([`Requests::delivered`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tag(u64);

impl Tag {
    /// Parsed, waiting in the context's receive queue.
    pub(crate) const QUEUED: Self = Self(0);
    /// Answered (or dropped with its failed endpoint), or popped: its bytes may be
    /// reused, and no handle matches it.
    pub(crate) const DONE: Self = Self(u64::MAX);
    /// No entry ever holds it (bit 32 clear, and not `QUEUED`): the tag of a handle
    /// rebuilt for an endpoint that does not exist, which must not match the entries
    /// of one made there later.
    pub(crate) const NEVER: Self = Self(0xFFFF_FFFE << 32);

    /// Handed out by `recv` as request `seq` of the table stamped `stamp`; its handle
    /// is alive. The stamp's bit 32 keeps it apart from `QUEUED`, and its number (never
    /// all ones) apart from `DONE`.
    #[inline]
    pub(crate) const fn delivered(stamp: Stamp, seq: u32) -> Self {
        // Built from the two halves (not `or`ed into a 64-bit stamp), so the compiler
        // sees the low half is `seq`: inlined next to `recv`, a handle's checks then fold
        // into the tag `recv` just stored (measured on the deferred rows:
        // docs/PERFORMANCE.md, "Handles that know who received them").
        Self((stamp.0 as u64) << 32 | seq as u64)
    }

    /// The sequence number of a delivered tag.
    #[inline]
    pub(crate) const fn seq(self) -> u32 {
        self.0 as u32
    }
}

/// An endpoint's part of its delivered tags, their high half (bits 32..64): bit 32 set,
/// and above it the table's instance number ([`crate::sync::next_instance`]) modulo
/// 2^31 − 1. A handle carries its whole tag, so one compare checks it against the
/// entry it names both for the sequence number and for the endpoint that delivered it:
/// a handle answered on another context finds no entry there with its tag, even where
/// endpoint index, sequence number and call id coincide (two contexts serving the same
/// clients in step). Kept with each endpoint's requests, not once in the context: the
/// request table's counters are read in every round anyway, the context's spare words
/// are not (one cache line more a cold round on the deferred path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp(u32);

impl Stamp {
    /// The next request table's stamp.
    pub(crate) fn next() -> Self {
        Self::numbered(crate::sync::next_instance())
    }

    /// Table number `n`'s stamp: `n` modulo 2^31 − 1, so the number is never all
    /// ones and no delivered tag is `DONE`.
    pub(crate) const fn numbered(n: u32) -> Self {
        let n = n % ((1 << 31) - 1);
        Self(n << 1 | 1)
    }
}

/// A link in the context-wide receive queue: (endpoint index, request sequence), or
/// none; one word (endpoint in bits 32..48, sequence below), so following it is a load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Link(u64);

impl Link {
    /// No link (an endpoint index ≥ 2^16 cannot exist: `EPS` ≤ 2^16,
    /// and a real link has bits 48.. clear).
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
    pub(crate) tag: Tag,
    /// The next request in the context's receive queue.
    pub(crate) next: Link,
}

const EMPTY: Req = Req {
    start: 0,
    call_id: 0,
    blocks: 0,
    len: 0,
    tag: Tag::DONE,
    next: Link::NONE,
};

/// `N` requests (a power of two), indexed by a free-running sequence number.
///
/// `repr(C)`, the counters first: they sit next to the receive side's other hot fields
/// (`Rx` ends with this table), not behind the table's `40 N` bytes.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Requests<const N: usize> {
    /// Oldest request not yet popped.
    head: u32,
    /// Sequence number of the next request.
    tail: u32,
    /// Entries behind the front marked done (answered out of order), not yet popped:
    /// while there are none, popping the front pops only it.
    done_behind: u32,
    /// The high half of this table's delivered tags (in what was padding).
    stamp: Stamp,
    /// Allowance blocks of the unanswered requests (listed and not released), for
    /// [`unanswered`](Self::unanswered).
    blocks: u64,
    entries: [Req; N],
}

// The counters precede the table (the struct's comment).
const _: () = assert!(core::mem::offset_of!(Requests<2048>, entries) == 24);

impl<const N: usize> Requests<N> {
    /// An empty table with a stamp of its own ([`Stamp::next`]).
    pub(crate) fn new() -> Self {
        assert!(N.is_power_of_two() && N <= 1 << 30);
        Self {
            entries: [EMPTY; N],
            head: 0,
            tail: 0,
            done_behind: 0,
            stamp: Stamp::next(),
            blocks: 0,
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
            tag: Tag::QUEUED,
            next,
        };
        self.tail = seq.wrapping_add(1);
        self.blocks += u64::from(blocks);
        Some(seq)
    }

    /// Request `seq`, which the receive queue names: queue links only name queued,
    /// live requests, so the entry is found by masking without the `live` test.
    #[inline]
    pub(crate) fn queued_mut(&mut self, seq: u32) -> &mut Req {
        debug_assert!(self.live(seq));
        let e = &mut self.entries[seq as usize & (N - 1)];
        debug_assert_eq!(e.tag, Tag::QUEUED);
        e
    }

    /// The tag `recv` gives request `seq` when it hands it out.
    #[inline(always)]
    pub(crate) const fn delivered_tag(&self, seq: u32) -> Tag {
        Tag::delivered(self.stamp, seq)
    }

    /// Request `seq` if it is live (for linking a batch's last request).
    #[inline]
    pub(crate) fn get_mut(&mut self, seq: u32) -> Option<&mut Req> {
        if self.live(seq) {
            Some(&mut self.entries[seq as usize & (N - 1)])
        } else {
            None
        }
    }

    /// The request `tag` names if it is delivered and not answered: exactly when the
    /// entry of `tag`'s sequence number holds `tag`, because a delivered entry is never
    /// popped (so never reused) before `release` sets its tag to `DONE`.
    #[inline]
    pub(crate) fn delivered(&self, tag: Tag) -> Option<&Req> {
        let e = &self.entries[tag.seq() as usize & (N - 1)];
        (e.tag == tag).then_some(e)
    }

    /// Marks `seq` answered and pops every answered request at the front. Returns
    /// whether the front moved (only then can the consumer advance). Every released
    /// entry, popped or not, is tagged `DONE`, so no handle matches it any more.
    ///
    /// `seq` must be live and not released yet: a delivered request (its handle, which
    /// a release consumes, was checked) or a queued one `recv` drops.
    ///
    /// Always inline: the C library instantiates the core once per context class, and
    /// LLVM then kept this out of every `copyrpc_reply` (docs/PERFORMANCE.md, "The C
    /// library: busy-poll loop against the echo").
    #[inline(always)]
    pub(crate) fn release(&mut self, seq: u32) -> bool {
        debug_assert!(self.live(seq));
        let e = &mut self.entries[seq as usize & (N - 1)];
        debug_assert_ne!(e.tag, Tag::DONE, "released twice");
        e.tag = Tag::DONE;
        self.blocks -= u64::from(e.blocks);
        if seq != self.head {
            self.done_behind += 1;
            return false;
        }
        self.head = seq.wrapping_add(1);
        while self.done_behind > 0
            && self.head != self.tail
            && self.entries[self.head as usize & (N - 1)].tag == Tag::DONE
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

    /// How many requests are unanswered (listed and not released), and their
    /// allowance blocks.
    #[inline]
    pub(crate) fn unanswered(&self) -> (u32, u64) {
        (
            self.tail.wrapping_sub(self.head) - self.done_behind,
            self.blocks,
        )
    }

    /// Requests listed and not popped (answered ones behind the oldest unanswered one
    /// included).
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
        assert!(!r.live(b), "popped");
        r.push(128, 4, 0, 0, Link::NONE).unwrap();
        r.push(160, 5, 0, 0, Link::NONE).unwrap();
        r.push(192, 6, 0, 0, Link::NONE).unwrap();
        assert_eq!(r.push(224, 7, 0, 0, Link::NONE), None, "full");
        r.release(c);
        assert_eq!((r.len(), r.oldest_start()), (3, Some(128)));
    }

    #[test]
    fn answers_behind_the_front_pop_with_it_in_any_order() {
        let mut r: Requests<8> = Requests::new();
        let s: Vec<u32> = (0..5)
            .map(|i| {
                r.push(32 * i, i as u32, i as u32 + 1, 0, Link::NONE)
                    .unwrap()
            })
            .collect();
        assert_eq!(r.unanswered(), (5, 1 + 2 + 3 + 4 + 5));
        assert!(!r.release(s[3]));
        assert!(!r.release(s[1]));
        assert_eq!(
            r.unanswered(),
            (3, 1 + 3 + 5),
            "answered, though not popped"
        );
        assert!(r.release(s[0]), "pops 0 and 1, stops at 2");
        assert_eq!((r.len(), r.oldest_start()), (3, Some(64)));
        assert!(r.release(s[2]), "pops 2 and 3");
        assert_eq!((r.len(), r.oldest_start()), (1, Some(128)));
        assert!(r.release(s[4]));
        assert_eq!((r.len(), r.oldest_start()), (0, None));
        assert_eq!(r.unanswered(), (0, 0));
    }

    /// `live` bounds the window at `tail` exclusive: the next sequence number to be
    /// pushed is not live (a `<=` there would let a stale handle one past the newest
    /// request address a slot that holds an old request).
    #[test]
    fn the_sequence_number_after_the_newest_is_not_live() {
        let mut r: Requests<4> = Requests::new();
        assert!(!r.live(0), "empty: nothing is live");
        let a = r.push(0, 1, 0, 0, Link::NONE).unwrap();
        let b = r.push(32, 2, 0, 0, Link::NONE).unwrap();
        assert!(r.live(a) && r.live(b));
        assert!(!r.live(b.wrapping_add(1)), "not pushed yet");
        assert!(!r.live(a.wrapping_sub(1)), "before the oldest");
    }

    #[test]
    fn only_the_delivered_sequence_number_matches_and_release_unmatches_it() {
        let mut r: Requests<2> = Requests::new();
        let st = r.stamp;
        let d = |seq| Tag::delivered(st, seq);
        let a = r.push(0, 7, 0, 0, Link::NONE).unwrap();
        assert!(r.delivered(d(a)).is_none(), "queued, not delivered");
        r.queued_mut(a).tag = d(a);
        assert_eq!(r.delivered(d(a)).map(|e| e.call_id), Some(7));
        // The same slot one lap on (N = 2), and the slot next to it: no match.
        assert!(r.delivered(d(a.wrapping_add(2))).is_none());
        assert!(r.delivered(d(a.wrapping_add(1))).is_none());
        // The same sequence number delivered by another table: no match.
        let other: Requests<2> = Requests::new();
        assert_ne!(other.stamp, st);
        assert!(r.delivered(other.delivered_tag(a)).is_none());
        let b = r.push(32, 8, 0, 0, Link::NONE).unwrap();
        r.queued_mut(b).tag = d(b);
        // Answered out of order: unmatched at once, though not popped yet.
        assert!(!r.release(b));
        assert!(r.delivered(d(b)).is_none());
        assert!(r.release(a), "pops both");
        assert!(r.delivered(d(a)).is_none(), "popped: its tag is DONE");
        // Reusing a's slot queues a new request there; the old number still fails.
        let c = r.push(64, 9, 0, 0, Link::NONE).unwrap();
        assert_eq!(c & 1, a & 1);
        assert!(r.delivered(d(a)).is_none() && r.delivered(d(c)).is_none());
    }

    /// No stamp makes a delivered tag equal `QUEUED` or `DONE` (which would let a
    /// handle match a queued or answered entry), and stamps differ until their numbers
    /// wrap at 2^31 − 1.
    #[test]
    fn no_delivered_tag_is_queued_or_done_and_stamps_differ() {
        for n in [
            0,
            1,
            2,
            (1 << 31) - 2,
            (1 << 31) - 1,
            1 << 31,
            u32::MAX - 1,
            u32::MAX,
        ] {
            for seq in [0, 1, u32::MAX] {
                let t = Tag::delivered(Stamp::numbered(n), seq);
                assert_ne!(t, Tag::QUEUED, "n {n} seq {seq}");
                assert_ne!(t, Tag::DONE, "n {n} seq {seq}");
                assert_eq!(t.seq(), seq);
            }
        }
        assert_ne!(Stamp::numbered(0), Stamp::numbered(1));
        assert_ne!(Stamp::numbered(0), Stamp::numbered((1 << 31) - 2));
        assert_eq!(Stamp::numbered(0), Stamp::numbered((1 << 31) - 1), "wraps");
        // No stamp makes `NEVER` either.
        for n in [0, (1 << 31) - 2, u32::MAX] {
            assert_ne!(Tag::delivered(Stamp::numbered(n), 0), Tag::NEVER);
        }
        assert_ne!(Tag::NEVER, Tag::QUEUED);
        assert_ne!(Tag::NEVER, Tag::DONE);
        assert_ne!(Stamp::next(), Stamp::next());
    }
}
