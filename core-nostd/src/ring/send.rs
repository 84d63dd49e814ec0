//! The sender's side: batching and the proactive wrap (docs/spec/wrap.md#batching,
//! docs/spec/wrap.md#wrap).

use super::{is_aligned, RingError, RingSize};
use crate::wire::{FLOW_METADATA_SIZE, WRAP_MESSAGE_COUNT};

/// Positions of a send ring; the memory belongs to the caller.
///
/// A batch is opened lazily by the first write after a flush: its 32 B metadata slot is
/// reserved at the producer and filled in at flush time. So whenever a batch is open,
/// `flush_start == meta_pos`, and when none is, `flush_start == producer`.
///
/// A batch never reaches the end of a lap: every write keeps `offset(producer) + n <
/// size` strictly (see [`plan`](Self::plan)), so one SGE and one remote address cover
/// each batch, and at least 32 B remain after it for a wrap marker.
#[derive(Debug, Clone)]
pub struct SendRing {
    size: RingSize,
    /// Next byte to write. Domain: `flush_start..`, free-running.
    producer: u64,
    /// First byte not yet handed to a WRITE. Domain: `..=producer`.
    flush_start: u64,
    /// Metadata slot of the open batch, `None` when no batch is open.
    /// Domain: `flush_start..=producer - 32`.
    meta_pos: Option<u64>,
    /// Messages in the open batch; below `RingSize::MAX / 32`, so never the wrap sentinel.
    batch_count: u32,
}

/// What a write of a given size would do, computed without changing anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WritePlan {
    /// Whether the write first wraps to the next lap.
    pub wraps: bool,
    /// How far the producer moves: metadata, message and any skipped tail. This is the
    /// amount a ring-space check must allow for.
    pub advance: u64,
}

/// A flushed range: post it as one WRITE_IMM after filling its metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushRange {
    /// First position covered; the WRITE goes to the peer's ring at `offset(start)`.
    pub start: u64,
    /// One past the last position covered.
    pub end: u64,
    /// Where the 32 B flow metadata goes (equal to `start`).
    pub meta_pos: u64,
    /// Messages in the batch, or [`WRAP_MESSAGE_COUNT`] for a wrap marker.
    pub message_count: u32,
}

impl FlushRange {
    /// Delta to encode in the immediate: the receiver's producer moves by this much.
    #[inline]
    pub const fn imm_delta(&self) -> u64 {
        self.end - self.start
    }

    /// Bytes that must actually be written. A wrap marker's range covers the skipped
    /// tail so the receiver's producer lands on the next lap, but only its metadata
    /// carries meaning, so only 32 B go on the wire.
    #[inline]
    pub const fn write_len(&self) -> u64 {
        if self.is_wrap() {
            FLOW_METADATA_SIZE
        } else {
            self.end - self.start
        }
    }

    /// Whether this range is a wrap marker.
    #[inline]
    pub const fn is_wrap(&self) -> bool {
        self.message_count == WRAP_MESSAGE_COUNT
    }
}

/// The WRITEs a wrap forces, in posting order, before the batch holding the new
/// message. They are returned after the producer has moved past that message, so
/// their metadata may be filled (and may grant) from the state at that point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wrap {
    /// The batch that was open, if it held messages. An open batch without messages is
    /// not sent: its metadata slot becomes the marker instead, saving a WQE.
    pub flushed: Option<FlushRange>,
    /// The wrap marker: fill its metadata with `message_count = WRAP_MESSAGE_COUNT`.
    pub marker: FlushRange,
}

/// Result of a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserved {
    /// Where the message goes (for [`SendRing::open_batch`], the metadata slot).
    pub pos: u64,
    /// WRITEs to post before the batch that now holds `pos`.
    pub wrap: Option<Wrap>,
}

impl SendRing {
    /// A ring sized like the peer's recv ring, with both sides starting at position 0.
    pub const fn new(size: RingSize) -> Self {
        Self {
            size,
            producer: 0,
            flush_start: 0,
            meta_pos: None,
            batch_count: 0,
        }
    }

    /// A ring whose positions start at `pos`; the peer's [`RecvRing`](super::RecvRing)
    /// and our [`RemoteConsumer`](super::RemoteConsumer) must start there too.
    pub const fn starting_at(size: RingSize, pos: u64) -> Result<Self, RingError> {
        if !is_aligned(pos) {
            return Err(RingError::Misaligned);
        }
        Ok(Self {
            size,
            producer: pos,
            flush_start: pos,
            meta_pos: None,
            batch_count: 0,
        })
    }

    /// The ring size.
    #[inline]
    pub const fn size(&self) -> RingSize {
        self.size
    }

    /// Next position to write.
    #[inline]
    pub const fn producer(&self) -> u64 {
        self.producer
    }

    /// First position not yet flushed.
    #[inline]
    pub const fn flush_start(&self) -> u64 {
        self.flush_start
    }

    /// Metadata slot of the open batch.
    #[inline]
    pub const fn meta_pos(&self) -> Option<u64> {
        self.meta_pos
    }

    /// Messages in the open batch.
    #[inline]
    pub const fn batch_count(&self) -> u32 {
        self.batch_count
    }

    #[inline]
    fn check(&self) {
        let meta = self.meta_pos.unwrap_or(self.producer);
        debug_assert!(self.flush_start <= meta && meta <= self.producer);
        debug_assert!(is_aligned(self.producer) && is_aligned(self.flush_start));
        match self.meta_pos {
            Some(meta) => {
                debug_assert_eq!(meta, self.flush_start);
                debug_assert!(self.producer - meta < self.size.get());
                debug_assert_ne!(self.size.offset(self.producer), 0, "batch touches lap end");
            }
            None => {
                debug_assert_eq!(self.flush_start, self.producer);
                debug_assert_eq!(self.batch_count, 0);
            }
        }
    }

    /// What writing a message of `padded` bytes would do; `padded == 0` plans only
    /// opening a batch (for a metadata-only flush).
    ///
    /// No wrap iff `offset(producer) + total < size`, where `total` adds 32 B when no
    /// batch is open. The comparison is strict (docs/spec/wrap.md#wrap): landing exactly on the lap
    /// end counts as a wrap. Otherwise the producer would sit at offset 0 of the next
    /// lap with the batch still open, the next message would go to the ring start while
    /// its metadata sits at the ring end, and the batch would need two SGEs; and no
    /// room would remain for a wrap marker. When it wraps, the tail from the producer to
    /// the lap end is wasted, which is at most `total`: that is why a write's worst-case
    /// cost is twice its size (see [`crate::credit::worst_case_advance`]).
    #[inline]
    pub fn plan(&self, padded: u64) -> Result<WritePlan, RingError> {
        if self.fits_open_batch(padded) {
            return Ok(WritePlan {
                wraps: false,
                advance: padded,
            });
        }
        if self.fits_new_batch(padded) {
            return Ok(WritePlan {
                wraps: false,
                advance: FLOW_METADATA_SIZE + padded,
            });
        }
        self.plan_general(padded)
    }

    /// The common case of [`plan`](Self::plan) and
    /// [`reserve_message`](Self::reserve_message): a batch is open (so no metadata is
    /// needed) and the message ends strictly before the lap end (so no wrap; that also
    /// keeps it below `size - 32`, since an open batch's producer is at least 32 B into
    /// its lap).
    #[inline]
    pub fn fits_open_batch(&self, padded: u64) -> bool {
        self.meta_pos.is_some()
            && padded != 0
            && is_aligned(padded)
            && padded < self.size.room_to_lap_end(self.producer)
    }

    /// The next most common case: no batch is open, and a new one (metadata and
    /// message) ends strictly before the lap end, so opening it does not wrap (and the
    /// message is below `size - 32`).
    #[inline]
    pub fn fits_new_batch(&self, padded: u64) -> bool {
        self.meta_pos.is_none()
            && padded != 0
            && is_aligned(padded)
            && padded.saturating_add(FLOW_METADATA_SIZE) < self.size.room_to_lap_end(self.producer)
    }

    fn plan_general(&self, padded: u64) -> Result<WritePlan, RingError> {
        if !is_aligned(padded) {
            return Err(RingError::Misaligned);
        }
        let size = self.size.get();
        // On a fresh lap the batch needs metadata + message strictly below the lap end.
        if padded >= size - FLOW_METADATA_SIZE {
            return Err(RingError::MessageTooLarge);
        }
        let meta = if self.meta_pos.is_some() {
            0
        } else {
            FLOW_METADATA_SIZE
        };
        let total = meta + padded;
        let offset = self.size.offset(self.producer);
        Ok(if offset + total < size {
            WritePlan {
                wraps: false,
                advance: total,
            }
        } else {
            WritePlan {
                wraps: true,
                advance: (size - offset) + FLOW_METADATA_SIZE + padded,
            }
        })
    }

    /// Reserves `padded` bytes for a message, wrapping and opening a batch as needed.
    /// The producer moves by exactly `self.plan(padded)?.advance`.
    #[inline]
    pub fn reserve_message(&mut self, padded: u64) -> Result<Reserved, RingError> {
        if self.fits_open_batch(padded) {
            let pos = self.producer;
            self.producer += padded;
            self.batch_count += 1;
            self.check();
            return Ok(Reserved { pos, wrap: None });
        }
        if self.fits_new_batch(padded) {
            let pos = self.open_batch_with(padded);
            return Ok(Reserved { pos, wrap: None });
        }
        self.reserve_message_slow(padded)
    }

    /// [`reserve_message`](Self::reserve_message) for a caller that has just seen
    /// [`fits_new_batch`](Self::fits_new_batch)`(padded)` hold, with the ring unchanged
    /// since: opens a batch with the message and returns the message's position.
    #[inline]
    pub(crate) fn open_batch_with(&mut self, padded: u64) -> u64 {
        debug_assert!(self.fits_new_batch(padded));
        // No batch open, so `flush_start == producer`: the metadata slot goes there.
        let pos = self.producer + FLOW_METADATA_SIZE;
        self.meta_pos = Some(self.producer);
        self.producer = pos + padded;
        self.batch_count = 1;
        self.check();
        pos
    }

    /// [`reserve_message`](Self::reserve_message) for a caller that has just seen
    /// [`fits_open_batch`](Self::fits_open_batch)`(padded)` hold, with the ring unchanged
    /// since: appends the message to the open batch and returns its position.
    #[inline]
    pub(crate) fn append_to_open_batch(&mut self, padded: u64) -> u64 {
        debug_assert!(self.fits_open_batch(padded));
        let pos = self.producer;
        self.producer += padded;
        self.batch_count += 1;
        self.check();
        pos
    }

    /// [`reserve_message`](Self::reserve_message) when it opens a batch or wraps.
    #[inline(never)]
    fn reserve_message_slow(&mut self, padded: u64) -> Result<Reserved, RingError> {
        if padded == 0 {
            return Err(RingError::Misaligned);
        }
        let wrap = self.prepare(padded)?;
        let pos = self.producer;
        self.producer += padded;
        self.batch_count += 1;
        self.check();
        Ok(Reserved { pos, wrap })
    }

    /// Opens a batch if none is open, so that [`take_flush`](Self::take_flush) sends
    /// metadata alone (a credit-only batch). Returns the metadata slot.
    #[inline]
    pub fn open_batch(&mut self) -> Result<Reserved, RingError> {
        let wrap = self.prepare(0)?;
        let pos = self.meta_pos.unwrap_or(self.producer);
        self.check();
        Ok(Reserved { pos, wrap })
    }

    /// Wraps if the plan says so, then makes sure a batch is open.
    #[inline]
    fn prepare(&mut self, padded: u64) -> Result<Option<Wrap>, RingError> {
        let plan = self.plan(padded)?;
        let wrap = if plan.wraps { Some(self.wrap()) } else { None };
        if self.meta_pos.is_none() {
            self.meta_pos = Some(self.producer);
            self.producer += FLOW_METADATA_SIZE;
        }
        Ok(wrap)
    }

    /// Ends the lap: flushes the open batch (if it has messages), places a marker at
    /// the producer (or in the empty batch's slot) covering the rest of the lap, and
    /// moves everything to the next lap's start. Also called on its own, before a
    /// message that will not fit the lap's end was written, so its retry starts at the
    /// next lap (`Tx::wrap_if_wanted`).
    #[cold]
    pub(crate) fn wrap(&mut self) -> Wrap {
        let lap_end = self.size.lap_start_after(self.producer);
        let (flushed, marker_pos) = match self.meta_pos {
            Some(meta) if self.batch_count == 0 => (None, meta),
            Some(_) => (self.take_flush(), self.producer),
            None => (None, self.producer),
        };
        self.producer = lap_end;
        self.flush_start = lap_end;
        self.meta_pos = None;
        self.batch_count = 0;
        self.check();
        Wrap {
            flushed,
            marker: FlushRange {
                start: marker_pos,
                end: lap_end,
                meta_pos: marker_pos,
                message_count: WRAP_MESSAGE_COUNT,
            },
        }
    }

    /// Closes the open batch and returns its range; `None` if no batch is open. The
    /// next write opens a new batch at the producer.
    #[inline]
    pub fn take_flush(&mut self) -> Option<FlushRange> {
        let meta_pos = self.meta_pos.take()?;
        let range = FlushRange {
            start: self.flush_start,
            end: self.producer,
            meta_pos,
            message_count: self.batch_count,
        };
        self.flush_start = self.producer;
        self.batch_count = 0;
        self.check();
        Some(range)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(size: u64) -> SendRing {
        SendRing::new(RingSize::new(size).unwrap())
    }

    fn marker(start: u64, end: u64) -> FlushRange {
        FlushRange {
            start,
            end,
            meta_pos: start,
            message_count: WRAP_MESSAGE_COUNT,
        }
    }

    /// The fast paths are not just consistent (above) but taken: every message that
    /// does not wrap is answered by one of them, not left to the general code (which
    /// gives the same answer at several times the instructions, so only a test can tell).
    #[test]
    fn every_write_that_does_not_wrap_takes_a_fast_path() {
        for open in [false, true] {
            for start in (0..256u64).step_by(32) {
                let mut base = ring(256);
                base.producer = 256 + start;
                base.flush_start = base.producer;
                if open {
                    if start + 32 >= 256 {
                        continue;
                    }
                    base.meta_pos = Some(base.producer);
                    base.producer += 32;
                }
                for padded in (32..=320u64).step_by(32) {
                    let no_wrap = matches!(base.plan_general(padded), Ok(p) if !p.wraps);
                    let fast = if open {
                        base.fits_open_batch(padded)
                    } else {
                        base.fits_new_batch(padded)
                    };
                    assert_eq!(fast, no_wrap, "open {open} offset {start} padded {padded}");
                }
            }
        }
    }

    #[test]
    fn fast_paths_agree_with_the_general_plan_and_reservation() {
        // `plan` and `reserve_message` answer the open-batch and new-batch cases inline;
        // everywhere they must do what the general code does, at every aligned producer
        // offset of a lap, with and without a batch open, up to past the ring size.
        for open in [false, true] {
            for start in (0..256u64).step_by(32) {
                let mut base = ring(256);
                // Move to `start` (plus a lap, so positions are not the first lap's).
                base.producer = 256 + start;
                base.flush_start = base.producer;
                if open {
                    if start + 32 >= 256 {
                        continue; // an open batch never reaches the lap end
                    }
                    base.meta_pos = Some(base.producer);
                    base.producer += 32;
                }
                for padded in (0..=320u64).step_by(32).chain([1, 33]) {
                    assert_eq!(
                        base.plan(padded),
                        base.plan_general(padded),
                        "open {open} offset {start} padded {padded}"
                    );
                    let (mut fast, mut slow) = (base.clone(), base.clone());
                    let got = fast.reserve_message(padded);
                    let want = slow.reserve_message_slow(padded);
                    assert_eq!(got, want, "open {open} offset {start} padded {padded}");
                    if got.is_ok() {
                        assert_eq!(
                            (
                                fast.producer,
                                fast.flush_start,
                                fast.meta_pos,
                                fast.batch_count
                            ),
                            (
                                slow.producer,
                                slow.flush_start,
                                slow.meta_pos,
                                slow.batch_count
                            ),
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn batches_accumulate_until_flushed() {
        let mut r = ring(256);
        assert_eq!(r.take_flush(), None);
        assert_eq!(r.reserve_message(32).unwrap().pos, 32);
        assert_eq!(r.reserve_message(64).unwrap().pos, 64);
        let range = r.take_flush().unwrap();
        assert_eq!(
            range,
            FlushRange {
                start: 0,
                end: 128,
                meta_pos: 0,
                message_count: 2
            }
        );
        assert_eq!((range.imm_delta(), range.write_len()), (128, 128));
        assert_eq!(r.reserve_message(32).unwrap().pos, 160);
    }

    #[test]
    fn one_below_the_boundary_does_not_wrap() {
        let mut r = ring(256);
        r.reserve_message(96).unwrap();
        r.take_flush().unwrap();
        // offset 128 + metadata 32 + 64 = 224 < 256
        let plan = r.plan(64).unwrap();
        assert_eq!(
            plan,
            WritePlan {
                wraps: false,
                advance: 96
            }
        );
        assert_eq!(r.reserve_message(64).unwrap().wrap, None);
    }

    #[test]
    fn exactly_at_the_boundary_wraps() {
        let mut r = ring(256);
        r.reserve_message(96).unwrap();
        r.take_flush().unwrap();
        // offset 128 + metadata 32 + 96 = 256: not < 256, so this wraps
        assert_eq!(
            r.plan(96).unwrap(),
            WritePlan {
                wraps: true,
                advance: 128 + 32 + 96
            }
        );
        let reserved = r.reserve_message(96).unwrap();
        assert_eq!(
            reserved.wrap,
            Some(Wrap {
                flushed: None,
                marker: marker(128, 256)
            })
        );
        assert_eq!(reserved.pos, 256 + 32);
        assert_eq!(r.producer(), 384);
        let marker = reserved.wrap.unwrap().marker;
        assert_eq!((marker.imm_delta(), marker.write_len()), (128, 32));
    }

    #[test]
    fn wrap_flushes_the_open_batch_first() {
        let mut r = ring(256);
        r.reserve_message(128).unwrap(); // meta 0, message 32..160
        let reserved = r.reserve_message(96).unwrap(); // 160 + 96 = 256: wraps
        assert_eq!(
            reserved.wrap,
            Some(Wrap {
                flushed: Some(FlushRange {
                    start: 0,
                    end: 160,
                    meta_pos: 0,
                    message_count: 1
                }),
                marker: marker(160, 256),
            })
        );
        assert_eq!(reserved.pos, 288);
        assert_eq!(r.batch_count(), 1);
        assert_eq!(r.flush_start(), 256);
    }

    #[test]
    fn wrap_with_an_empty_batch_reuses_its_slot() {
        let mut r = ring(256);
        r.reserve_message(128).unwrap();
        r.take_flush().unwrap();
        assert_eq!(r.open_batch().unwrap().pos, 160); // 160 + 32 = 192 < 256
        assert_eq!(r.plan(64).unwrap().advance, 64 + 32 + 64);
        let reserved = r.reserve_message(64).unwrap(); // 192 + 64 = 256: wraps
        assert_eq!(
            reserved.wrap,
            Some(Wrap {
                flushed: None,
                marker: marker(160, 256)
            })
        );
        assert_eq!(reserved.pos, 288);
    }

    #[test]
    fn opening_a_batch_in_the_last_slot_wraps() {
        let mut r = ring(128);
        r.reserve_message(64).unwrap(); // meta 0, message 32..96
        r.take_flush().unwrap();
        let reserved = r.open_batch().unwrap(); // 96 + 32 = 128: wraps
        assert_eq!(
            reserved.wrap,
            Some(Wrap {
                flushed: None,
                marker: marker(96, 128)
            })
        );
        assert_eq!(reserved.pos, 128);
        assert_eq!(r.take_flush().unwrap().message_count, 0);
    }

    #[test]
    fn refuses_what_can_never_fit() {
        let mut r = ring(256);
        assert_eq!(r.plan(224), Err(RingError::MessageTooLarge));
        assert_eq!(r.plan(u64::MAX - 31), Err(RingError::MessageTooLarge));
        assert_eq!(r.plan(40), Err(RingError::Misaligned));
        assert_eq!(r.reserve_message(0), Err(RingError::Misaligned));
        assert!(r.reserve_message(192).is_ok());
    }

    #[test]
    fn positions_beyond_two_to_the_32() {
        let start = (1u64 << 32) - 64;
        let mut r = SendRing::starting_at(RingSize::new(128).unwrap(), start).unwrap();
        // offset 64 + 32 + 32 = 128: wraps across the 2^32 boundary
        let reserved = r.reserve_message(32).unwrap();
        assert_eq!(reserved.wrap.unwrap().marker, marker(start, 1 << 32));
        assert_eq!(reserved.pos, (1 << 32) + 32);
        assert_eq!(
            r.take_flush().unwrap(),
            FlushRange {
                start: 1 << 32,
                end: (1 << 32) + 64,
                meta_pos: 1 << 32,
                message_count: 1
            }
        );
        assert_eq!(
            SendRing::starting_at(RingSize::new(128).unwrap(), 33).err(),
            Some(RingError::Misaligned)
        );
    }
}
