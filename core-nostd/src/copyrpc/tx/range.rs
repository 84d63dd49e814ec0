//! A range of the send ring leaving as one WRITE_IMM, its metadata filled last.
#![allow(unsafe_code)]

use mlx5_raw::layout::FmCeSe;
use mlx5_raw::{Payload, PostError, Remote, SqBatch};

use super::Tx;
use crate::copyrpc::stats::Stats;
use crate::ring::{FlushRange, Wrap};
use crate::wire::{encode_imm, FlowMetaRepr, FlowMetaView, Imm, ALIGNMENT, FLOW_METADATA_SIZE};

impl Tx {
    /// The oldest queued wrap range.
    #[inline]
    pub(crate) fn front_range(&self) -> Option<FlushRange> {
        self.ranges.front()
    }

    /// Drops the oldest queued wrap range (posted).
    #[inline]
    pub(crate) fn pop_range(&mut self) {
        self.ranges.pop();
    }

    /// Closes the open batch for posting.
    #[inline(always)]
    pub(crate) fn take_flush(&mut self) -> Option<FlushRange> {
        self.ring.take_flush()
    }

    /// Opens a batch without messages, for metadata only: the wrap it made first, if
    /// any. `None`: the ring refused.
    pub(crate) fn open_credit_batch(&mut self) -> Option<Option<Wrap>> {
        self.ring.open_batch().ok().map(|res| res.wrap)
    }

    /// Fills a range's metadata (`credit_return`, taken from the recv side, and the
    /// grant due now) and posts it. The caller checked the send queue room.
    ///
    /// Always inlined: `post_due` calls it from its fast path (one batch due) and from
    /// `post_range_cold`, the one out-of-line copy its other posts use.
    #[inline(always)]
    pub(crate) fn post_range(
        &mut self,
        batch: &mut SqBatch<'_>,
        r: FlushRange,
        credit_return: u64,
        stats: &mut Stats,
    ) -> Result<u32, PostError> {
        let in_flight = self.in_flight();
        let meta = FlowMetaRepr {
            ring_credit_return: credit_return,
            credit_grant: self.credit.grant_for_batch(in_flight),
            message_count: r.message_count,
        };
        debug_assert_eq!(r.meta_pos, r.start, "a range starts with its metadata");
        let size = self.ring.size();
        let off = size.offset(r.start) as usize;
        let lkey = self.mem.lkey();
        // A range lies in one lap (`SendRing` never lets a batch reach the lap end), so
        // the ring's own bounds check covers it, metadata first.
        let out = self
            .mem
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
            addr: self.peer_recv.addr + off as u64,
            rkey: self.peer_recv.rkey,
        };
        let posted =
            batch.rdma_write_imm(remote, payload, imm.to_bytes(), FmCeSe::COMP_ONLY_ERR)?;
        stats.batches_posted += 1;
        if r.is_wrap() {
            stats.wraps += 1;
        }
        Ok(u32::from(posted.bbs))
    }
}
