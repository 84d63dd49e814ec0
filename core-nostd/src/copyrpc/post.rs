//! What an endpoint posts and retires: batch WRITE_IMMs with their metadata filled at
//! the last moment ([`Tx::post_range`](super::tx::Tx::post_range)), READs of the peer's
//! consumer, raw READ/WRITE; and the send completions that retire them.
#![allow(unsafe_code)]

use mlx5_raw::layout::{Completion, FmCeSe};
use mlx5_raw::{Payload, PostError, Remote, Sge, SqBatch};

use super::endpoint::{Endpoint, EpData, Flush, READ_WORD};
use super::stats::Stats;
use super::{Error, FailureCause, Side};
use crate::ring::FlushRange;

impl<const REQS: usize> EpData<REQS> {
    /// Posts a range with the credit return due from the recv side.
    ///
    /// Always inlined: `post_due` calls it from its fast path (one batch due) and from
    /// `post_range_cold`, the one out-of-line copy its other posts use.
    #[inline(always)]
    fn post_range(
        &mut self,
        batch: &mut SqBatch<'_>,
        r: FlushRange,
        stats: &mut Stats,
    ) -> Result<u32, PostError> {
        let credit_return = self.rx.take_credit_return();
        self.tx.post_range(batch, r, credit_return, stats)
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

    fn post_read(&mut self, batch: &mut SqBatch<'_>, pos: u64) -> Result<u32, PostError> {
        let ctrl = self.rx.ctrl().dma();
        let sge = [Sge {
            addr: ctrl.va_at(READ_WORD),
            len: 8,
            lkey: ctrl.lkey(),
        }];
        // SAFETY: the READ word lies in the control region, registered with local
        // write under this lkey (`create_endpoint` contract), and nothing reads it
        // until this WQE's completion is polled (`on_send_completion`).
        let posted = unsafe { batch.rdma_read(self.peer_consumer, &sge, FmCeSe::CQ_UPDATE) }?;
        self.live.read_posted(pos);
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
        if !d.is_connected() {
            return Ok(true);
        }
        if d.tx.queued_ranges() != 0 || d.tx.batch_count() != 0 {
            // Sending: no probe, the batches' own acknowledgements (or error
            // completions) will show whether the peer lives.
            d.live.touch(polls);
            return self.post_due(false, polls, stats);
        }
        if pending == 0 {
            d.live.touch(polls);
        }
        let probe = turn && pending > 0 && d.live.quiet_for(polls, d.cfg.probe_interval);
        // Nothing to post (the common poll): no queued range, no open batch (above), no
        // READ due, no credit to return or grant. Decided before a WQE batch is opened.
        // (`wants_credit_batch` may want a READ, so that is tested after it.)
        if !probe && !d.wants_credit_batch() && !d.tx.read_wanted() {
            // A reply since the last flush left a batch open (or wrap ranges), so the
            // consumer it may have moved is caught up in `post_due`, not needed here.
            debug_assert!(!d.rx.consumer_behind());
            // A batch opened without messages would not show in `batch_count`: keep
            // visiting then (`post_due` never leaves one, this is belt and braces).
            return Ok(!d.tx.batch_open());
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
        d.rx.catch_up();
        // The common case, one open batch and nothing else due, with room for it: post
        // it and see whether a credit batch is still wanted, as the general path below
        // would, without its loops.
        if !probe
            && !d.tx.read_wanted()
            && d.tx.queued_ranges() == 0
            && d.tx.batch_count() > 0
            && self.sq.free_bbs() >= d.batch_bbs
        {
            if let Some(r) = d.tx.take_flush() {
                let mut batch = self.sq.batch();
                d.post_range(&mut batch, r, stats)?;
                batch.finish();
                let credit_wanted = d.wants_credit_batch();
                return Ok(!credit_wanted && !d.tx.read_wanted());
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
        // A refused wrapping call (which also wants the READ that brought us here) may
        // need the lap ended early; its marker then goes out with the ranges below.
        if d.tx.wrap_wanted() {
            d.tx.wrap_if_wanted();
        }
        let need = d.batch_bbs;
        let base = self.sq.producer_counter();
        let mut used: u64 = 0;
        let mut batch = self.sq.batch();
        let mut deferred = false;
        while let Some(r) = d.tx.front_range() {
            if batch.free_bbs() < need {
                deferred = true;
                break;
            }
            used += u64::from(d.post_range_cold(&mut batch, r, stats)?);
            d.tx.pop_range();
        }
        if !deferred && d.tx.batch_count() > 0 {
            if batch.free_bbs() < need {
                deferred = true;
            } else if let Some(r) = d.tx.take_flush() {
                used += u64::from(d.post_range_cold(&mut batch, r, stats)?);
            }
        }
        // Whether a credit batch was wanted, or not asked (deferred): either way the
        // next flush must look again.
        let credit_wanted = deferred || d.wants_credit_batch();
        if !deferred && credit_wanted {
            let room = d.tx.credit_batch_room();
            // No batch is open (posted above): a wrap adds its marker only. Two WQEs.
            if room && batch.free_bbs() >= 2 * need && d.tx.can_queue_wrap() {
                if let Some(wrap) = d.tx.open_credit_batch() {
                    if let Some(w) = wrap {
                        for r in w.flushed.into_iter().chain(Some(w.marker)) {
                            used += u64::from(d.post_range_cold(&mut batch, r, stats)?);
                        }
                    }
                    if let Some(r) = d.tx.take_flush() {
                        used += u64::from(d.post_range_cold(&mut batch, r, stats)?);
                        stats.credit_batches += 1;
                        d.tx.credit_sent();
                    }
                }
            } else if !room {
                d.tx.want_read(true);
            }
        }
        if deferred {
            stats.flushes_deferred += 1;
        }
        if (d.tx.read_wanted() || probe) && d.live.read_idle() && batch.free_bbs() >= 1 {
            d.post_read(&mut batch, base + used)?;
            d.tx.want_read(false);
            stats.reads_posted += 1;
            if probe {
                d.live.touch(polls);
                stats.probes_posted += 1;
            }
        }
        batch.finish();
        Ok(!credit_wanted
            && !d.tx.read_wanted()
            && d.tx.queued_ranges() == 0
            && d.tx.batch_count() == 0
            && !d.tx.batch_open())
    }

    /// Handles a send completion of this endpoint's QP, in the context's poll number
    /// `polls`. Send-queue room and the peer's consumer (a READ) may change, so the
    /// flush decides anew. `Err`: why the endpoint must fail (an error completion, one
    /// that retires no WQE of ours, or an impossible READ result).
    pub(crate) fn on_send_completion(
        &mut self,
        c: &Completion,
        polls: u64,
        stats: &mut Stats,
    ) -> Result<Flush, FailureCause> {
        let ok = !c.is_error();
        if self.sq.retire_completion(c).is_err() {
            return Err(FailureCause::UnexpectedCompletion { side: Side::Send });
        }
        let ci = self.sq.producer_counter() - u64::from(self.sq.outstanding_bbs());
        let d = &mut self.d;
        if d.live.read_retired(ci) && ok {
            let value = d.rx.ctrl().load_read_word();
            if d.tx.on_consumer_read(value).is_err() {
                return Err(FailureCause::BadConsumerRead);
            }
            d.live.touch(polls);
            stats.reads_completed += 1;
        }
        d.raw.retire(ci, ok);
        match c.error {
            None => Ok(Flush::Needed),
            Some(error) => Err(FailureCause::ErrorCompletion {
                side: Side::Send,
                error,
            }),
        }
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
        if self.d.is_created() {
            return Err(Error::NotConnected);
        }
        if self.d.is_failed() {
            return Err(Error::EndpointFailed);
        }
        if self.d.raw.full() {
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
                self.d.raw.posted(pos);
                Ok(())
            }
            Err(PostError::SqFull { .. }) => Err(Error::SqFull),
            Err(PostError::SgeTooLong { .. }) => Err(Error::SgeTooLong),
            // A gather list is never inline, so `InlineTooLong` cannot come back; were
            // it to, the list is what to shorten, as for a WQE too large.
            Err(PostError::WqeTooLarge { .. } | PostError::InlineTooLong { .. }) => {
                Err(Error::TooManySges)
            }
        }
    }
}
