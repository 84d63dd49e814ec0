//! What an endpoint posts and retires: batch WRITE_IMMs with their metadata filled at
//! the last moment, READs of the peer's consumer, raw READ/WRITE; and the send
//! completions that retire them.
#![allow(unsafe_code)]

use mlx5_raw::layout::{Completion, FmCeSe};
use mlx5_raw::{Payload, PostError, Remote, Sge, SqBatch};

use super::endpoint::{Endpoint, EpData, EpState, RANGES, RAW_OPS, READ_WORD};
use super::stats::Stats;
use super::Error;
use crate::ring::FlushRange;
use crate::wire::{encode_imm, FlowMetaRepr, FlowMetaView, Imm, ALIGNMENT, FLOW_METADATA_SIZE};

impl<const REQS: usize> EpData<REQS> {
    /// Fills a range's metadata and posts it. The caller checked the send queue room.
    ///
    /// Always inlined: `post_due` calls it from its fast path (one batch due) and from
    /// `post_range_cold`, the one out-of-line copy its other posts use.
    #[inline(always)]
    pub(crate) fn post_range(
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
        if meta.credit_grant != 0 {
            // R grew, so the exact call limit fell below the cached one.
            self.refresh_call_limit();
        }
        debug_assert_eq!(r.meta_pos, r.start, "a range starts with its metadata");
        let size = self.send.size();
        let off = size.offset(r.start) as usize;
        let lkey = self.send_mem.lkey();
        // A range lies in one lap (`SendRing` never lets a batch reach the lap end), so
        // the ring's own bounds check covers it, metadata first.
        let out = self
            .send_mem
            .ring_bytes_mut(size, r.start, r.write_len() as usize);
        if let Some(m) = out.first_chunk_mut::<{ FLOW_METADATA_SIZE as usize }>() {
            meta.emit(&mut FlowMetaView::new_unchecked(&mut m[..]));
        }
        // A range is aligned and within one lap (< 2^36 bytes), so it always encodes.
        debug_assert!(encode_imm(r.imm_delta()).is_ok());
        let imm = Imm::from_value((r.imm_delta() / ALIGNMENT) as u32);
        let bytes: &[u8] = out;
        // SAFETY: `bytes` lies in the send ring, registered under this lkey
        // (`Context::create_endpoint` contract). They stay unmodified while the device
        // may read them for the first transmission: the producer rewrites a send-ring
        // byte only after the peer's consumer has passed it, which it can only do after
        // this WRITE delivered it.
        //
        // A retransmission can read them later (the WRITE arrived but its ACK was lost,
        // and RC resends from there, WRITEs included, while the WQE is still
        // outstanding), possibly after the producer rewrote some. That is harmless
        // because the two rings mirror each other offset for offset: a byte we still
        // hold unchanged is one the peer has not consumed, so the resend writes the
        // value it already has; a byte we rewrote is one the peer consumed, free space
        // on its side until the WRITE that carries the new value, which is posted after
        // this one and so also lands after the resend.
        let payload = unsafe { Payload::registered(bytes, lkey) };
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

    /// [`post_range`](Self::post_range) out of line, for the posts off `post_due`'s fast
    /// path (wrap ranges, credit-only batches, a batch behind queued ranges).
    #[inline(never)]
    fn post_range_cold(
        &mut self,
        batch: &mut SqBatch<'_>,
        r: FlushRange,
        stats: &mut Stats,
    ) -> Result<u32, PostError> {
        self.post_range(batch, r, stats)
    }

    pub(crate) fn post_read(
        &mut self,
        batch: &mut SqBatch<'_>,
        pos: u64,
    ) -> Result<u32, PostError> {
        let sge = [Sge {
            addr: self.ctrl.dma().va_at(READ_WORD),
            len: 8,
            lkey: self.ctrl.dma().lkey(),
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
    /// the send queue lacks room. `pending` is the number of calls awaiting a response,
    /// `polls` the context's poll count. Returns whether the endpoint is idle: nothing
    /// was due, so the next flush does nothing either until one of its inputs changes
    /// (a probe falling due is the context's probe sweep to notice).
    ///
    /// `turn`: a poll's flush, which may probe (a flush between polls,
    /// [`Context::flush`](super::Context::flush), does not). A probe is due once calls
    /// have been pending for `probe_interval` polls in which nothing arrived and nothing
    /// was sent: while batches go out, their own acknowledgements (or error completions)
    /// show whether the peer lives.
    #[inline]
    pub(crate) fn flush(
        &mut self,
        pending: u32,
        turn: bool,
        polls: u64,
        stats: &mut Stats,
    ) -> Result<bool, PostError> {
        let d = &mut self.d;
        if d.state != EpState::Connected {
            return Ok(true);
        }
        if d.ranges.len() != 0 || d.send.batch_count() != 0 {
            // Sending: no probe, the batches' own acknowledgements (or error
            // completions) will show whether the peer lives.
            d.quiet_since = polls;
            return self.post_due(false, polls, stats);
        }
        if pending == 0 {
            d.quiet_since = polls;
        }
        let probe = turn
            && pending > 0
            && d.cfg.probe_interval != 0
            && polls.wrapping_sub(d.quiet_since) >= u64::from(d.cfg.probe_interval);
        // Nothing to post (the common poll): no queued range, no open batch (above), no
        // READ due, no credit to return or grant. Decided before a WQE batch is opened.
        // (`wants_credit_batch` may arm `want_read`, so that is tested after it.)
        if !probe && !d.wants_credit_batch() && !d.want_read {
            // A reply since the last flush left a batch open (or wrap ranges), so the
            // consumer it may have moved is caught up in `post_due`, not needed here.
            debug_assert!(!d.consumer_behind);
            // A batch opened without messages would not show in `batch_count`: keep
            // visiting then (`post_due` never leaves one, this is belt and braces).
            return Ok(d.send.meta_pos().is_none());
        }
        self.post_due(probe, polls, stats)
    }

    /// The posting part of [`flush`](Self::flush), once something is due. Returns
    /// whether it left nothing due: everything posted, and the credit-batch test (run
    /// after the batches went out, so on the inputs the next flush would see) said no.
    #[inline(never)]
    fn post_due(&mut self, probe: bool, polls: u64, stats: &mut Stats) -> Result<bool, PostError> {
        let d = &mut self.d;
        // Before any batch's credit return is computed: replies since the last flush
        // may have moved the consumer.
        if d.consumer_behind {
            d.consumer_behind = false;
            d.advance_consumer();
        }
        // The common case, one open batch and nothing else due, with room for it: post
        // it and see whether a credit batch is still wanted, as the general path below
        // would, without its loops.
        if !probe
            && !d.want_read
            && d.ranges.len() == 0
            && d.send.batch_count() > 0
            && self.sq.free_bbs() >= d.batch_bbs
        {
            if let Some(r) = d.send.take_flush() {
                let mut batch = self.sq.batch();
                d.post_range(&mut batch, r, stats)?;
                batch.finish();
                let credit_wanted = d.wants_credit_batch();
                return Ok(!credit_wanted && !d.want_read);
            }
        }
        self.post_due_general(probe, polls, stats)
    }

    /// [`post_due`](Self::post_due) beyond its fast path: queued wrap ranges, a full
    /// send queue, credit-only batches, READs.
    #[inline(never)]
    fn post_due_general(
        &mut self,
        probe: bool,
        polls: u64,
        stats: &mut Stats,
    ) -> Result<bool, PostError> {
        let d = &mut self.d;
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
            used += u64::from(d.post_range_cold(&mut batch, r, stats)?);
            d.ranges.pop();
        }
        if !deferred && d.send.batch_count() > 0 {
            if batch.free_bbs() < need {
                deferred = true;
            } else if let Some(r) = d.send.take_flush() {
                used += u64::from(d.post_range_cold(&mut batch, r, stats)?);
            }
        }
        // Whether a credit batch was wanted, or not asked (deferred): either way the
        // next flush must look again.
        let credit_wanted = deferred || d.wants_credit_batch();
        if !deferred && credit_wanted {
            let room = d
                .send
                .plan(0)
                .is_ok_and(|p| d.credit.has_room(d.in_flight(), p.advance));
            // A wrap here can add two ranges before the batch itself.
            if room && batch.free_bbs() >= 3 * need && d.ranges.len() + 2 <= RANGES {
                if let Ok(res) = d.send.open_batch() {
                    if let Some(w) = res.wrap {
                        for r in w.flushed.into_iter().chain(Some(w.marker)) {
                            used += u64::from(d.post_range_cold(&mut batch, r, stats)?);
                        }
                    }
                    if let Some(r) = d.send.take_flush() {
                        used += u64::from(d.post_range_cold(&mut batch, r, stats)?);
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
        if (d.want_read || probe) && d.read.is_none() && batch.free_bbs() >= 1 {
            d.post_read(&mut batch, base + used)?;
            d.want_read = false;
            stats.reads_posted += 1;
            if probe {
                d.quiet_since = polls;
                stats.probes_posted += 1;
            }
        }
        batch.finish();
        Ok(!credit_wanted
            && !d.want_read
            && d.ranges.len() == 0
            && d.send.batch_count() == 0
            && d.send.meta_pos().is_none())
    }

    /// Handles a send completion of this endpoint's QP, in the context's poll number
    /// `polls`. Returns false if it reports an error (the caller fails the endpoint).
    pub(crate) fn on_send_completion(
        &mut self,
        c: &Completion,
        polls: u64,
        stats: &mut Stats,
    ) -> bool {
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
                    let value = d.ctrl.load_read_word();
                    if d.consumer.on_read(value, d.send.producer()).is_err() {
                        return false;
                    }
                    d.quiet_since = polls;
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
