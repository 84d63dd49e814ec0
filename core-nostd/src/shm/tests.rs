//! What the shm protocols' unit tests share: heap memory standing in for a mapping, and
//! a bound on the waits of their threaded tests.
#![allow(unsafe_code)]

use super::EvictError;
use std::time::{Duration, Instant};
use std::vec::Vec;

/// A wait loop's bound in a threaded test: [`turn`](Self::turn) yields (so a test's
/// pollers share 2 cores instead of starving each other) and fails the test once the
/// loop's progress count has not moved for [`STALL`](Self::STALL). A failing assert in
/// one thread of a `thread::scope` then ends the others too, at their own bound, instead
/// of leaving them spinning on a peer that is gone.
pub(crate) struct Stall {
    what: &'static str,
    limit: Duration,
    progress: u64,
    /// When `progress` last moved (or the wait began).
    since: Instant,
    turns: u32,
}

impl Stall {
    /// Far above any wait these tests make when they work (seconds for the whole test).
    pub(crate) const STALL: Duration = Duration::from_secs(30);

    /// A wait for `what` (named in the failure).
    pub(crate) fn new(what: &'static str) -> Self {
        Self::with_limit(what, Self::STALL)
    }

    /// A wait that fails after `limit` without progress.
    fn with_limit(what: &'static str, limit: Duration) -> Self {
        Self {
            what,
            limit,
            progress: 0,
            since: Instant::now(),
            turns: 0,
        }
    }

    /// One turn of the loop, with `progress` the count it waits on so far.
    pub(crate) fn turn(&mut self, progress: u64) {
        if progress != self.progress {
            self.progress = progress;
            self.since = Instant::now();
            self.turns = 0;
        } else {
            self.turns += 1;
            // The clock only every 1 024 idle turns: a turn is a yield, the clock is
            // not free (and under Miri, slow).
            if self.turns.is_multiple_of(1024) {
                let idle = self.since.elapsed();
                assert!(
                    idle < self.limit,
                    "{}: stuck at {progress} for {idle:?} ({} turns)",
                    self.what,
                    self.turns
                );
            }
        }
        std::thread::yield_now();
    }
}

#[repr(C, align(128))]
#[derive(Clone, Copy)]
struct Block([u8; 128]);

/// Zeroed, 128-aligned memory (the stricter of the layouts' alignments) standing in for
/// a shm mapping, with at least one spare block past the length asked for.
pub(crate) struct ZeroedMem(Vec<Block>);

impl ZeroedMem {
    /// At least `len` zero bytes.
    pub(crate) fn new(len: usize) -> Self {
        Self(std::vec![Block([0; 128]); len.div_ceil(128) + 1])
    }

    /// The base.
    pub(crate) fn ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr().cast()
    }

    /// Bytes available from [`ptr`](Self::ptr).
    pub(crate) fn len(&self) -> usize {
        self.0.len() * 128
    }
}

#[test]
#[should_panic(expected = "the test's wait: stuck at 7")]
fn a_wait_without_progress_fails_naming_what_it_waited_for() {
    let mut stall = Stall::with_limit("the test's wait", Duration::from_millis(20));
    for _ in 0..u32::MAX {
        stall.turn(7);
    }
}

#[test]
fn a_wait_that_progresses_is_not_cut_short() {
    let mut stall = Stall::with_limit("the test's wait", Duration::from_millis(20));
    let start = Instant::now();
    let mut n = 0;
    // Three times the limit, moving all along.
    while start.elapsed() < Duration::from_millis(60) {
        n += 1;
        stall.turn(n);
    }
}

#[test]
fn evict_errors_display_distinct_nonempty_text() {
    crate::test_text::distinct_texts(&[EvictError::BadId, EvictError::NotActive]);
}

/// A client's state word reads back as the state and epoch it was packed from, for
/// every state (the client table the host prints tells `Closing` from `Dead`).
#[test]
fn a_client_state_word_unpacks_to_what_was_packed() {
    use super::ClientState;
    for st in [
        ClientState::Free,
        ClientState::Active,
        ClientState::Closing,
        ClientState::Dead,
    ] {
        for epoch in [0, 1, 5, u32::MAX >> 2] {
            assert_eq!(
                ClientState::unpack(st.pack(epoch)),
                (st, epoch),
                "{st:?} {epoch}"
            );
        }
    }
}

/// A region refused for its layout says which check failed, with the figures the
/// check compared (the host prints this text for a stale or foreign `/dev/shm` file).
#[test]
fn layout_errors_display_distinct_text_with_their_figures() {
    use super::LayoutError;
    let texts = crate::test_text::distinct_texts(&[
        LayoutError::Misaligned,
        LayoutError::Truncated {
            need: 4096,
            have: 64,
        },
        LayoutError::BadMagic { found: 0xDEAD_BEEF },
        LayoutError::BadVersion { found: 9 },
        LayoutError::PayloadSize { req: 24, resp: 40 },
        LayoutError::BadConfig,
        LayoutError::NotZeroed,
    ]);
    assert!(
        texts[1].contains("4096") && texts[1].contains("64"),
        "{}",
        texts[1]
    );
    assert!(texts[2].contains("0x00000000deadbeef"), "{}", texts[2]);
    assert!(texts[3].contains('9'), "{}", texts[3]);
    assert!(texts[4].contains("24/40"), "{}", texts[4]);
}

/// A server opens what it sealed; and salts of instance numbers below 2^k differ in their
/// top k bits, so the values below 2^(32 − k) two servers seal never coincide.
#[test]
fn server_salts_open_what_they_seal_and_keep_small_values_apart() {
    use super::ServerSalt;
    let salts: Vec<ServerSalt> = (0..512).map(ServerSalt::numbered).collect();
    for (i, a) in salts.iter().enumerate() {
        for v in [0, 1, 7, (1 << 23) - 1, u32::MAX] {
            assert_eq!(a.open(a.seal(v)), v);
        }
        for b in &salts[i + 1..] {
            assert!(a.seal(0) ^ b.seal(0) >= 1 << 23, "{a:?} {b:?}");
        }
    }
    // Spread over the first 65 536: apart in the top 16 bits.
    for (n, m) in [(0, 65_535), (1, 32_769), (255, 65_280), (40_000, 40_001)] {
        let (a, b) = (ServerSalt::numbered(n), ServerSalt::numbered(m));
        assert!(a.seal(0) ^ b.seal(0) >= 1 << 16, "{n} {m}");
    }
    assert_ne!(ServerSalt::next(), ServerSalt::next());
}
