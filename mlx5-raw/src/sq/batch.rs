//! A batch of WQEs rung by one doorbell.

use super::types::Repr;
use super::{Payload, PostError, Posted, Remote, Sge, Sq};
use crate::layout::{FmCeSe, SendOpcode};

/// WQEs being posted to an [`Sq`], rung by one doorbell on [`finish`](Self::finish).
/// Dropping the batch unfinished discards its WQEs (the producer counter and signaling
/// state roll back; the device never saw them).
///
/// The `flags` argument of each builder adds fence/solicited bits; including
/// [`FmCeSe::CQ_UPDATE`] signals that WQE explicitly, otherwise the queue's
/// signal-every-N policy decides.
#[derive(Debug)]
pub struct SqBatch<'sq> {
    sq: &'sq mut Sq,
    start_pi: u64,
    start_unsig: (u32, u32),
    /// Position and DS of the last WQE posted in this batch.
    last: Option<(u64, u8)>,
    count: u32,
}

impl<'sq> SqBatch<'sq> {
    pub(super) fn new(sq: &'sq mut Sq) -> Self {
        Self {
            start_pi: sq.pi,
            start_unsig: (sq.unsig_wqes, sq.unsig_bbs),
            last: None,
            count: 0,
            sq,
        }
    }

    #[inline(always)]
    fn push(
        &mut self,
        opcode: SendOpcode,
        remote: Option<Remote>,
        payload: Repr<'_>,
        imm: [u8; 4],
        flags: FmCeSe,
    ) -> Result<Posted, PostError> {
        let pos = self.sq.pi;
        let p = self.sq.post(opcode, remote, payload, imm, flags)?;
        self.last = Some((pos, p.ds));
        self.count += 1;
        Ok(p)
    }

    /// NOP (ctrl segment only, DS = 1).
    pub fn nop(&mut self, flags: FmCeSe) -> Result<Posted, PostError> {
        self.push(SendOpcode::Nop, None, Repr::Inline(&[]), [0; 4], flags)
    }

    /// RDMA WRITE of `payload` to `remote`.
    pub fn rdma_write(
        &mut self,
        remote: Remote,
        payload: Payload<'_>,
        flags: FmCeSe,
    ) -> Result<Posted, PostError> {
        self.push(
            SendOpcode::RdmaWrite,
            Some(remote),
            payload.0,
            [0; 4],
            flags,
        )
    }

    /// RDMA WRITE with immediate: the responder consumes one receive WQE and gets `imm`
    /// (raw bytes, copied verbatim) in its CQE.
    #[inline(always)]
    pub fn rdma_write_imm(
        &mut self,
        remote: Remote,
        payload: Payload<'_>,
        imm: [u8; 4],
        flags: FmCeSe,
    ) -> Result<Posted, PostError> {
        self.push(
            SendOpcode::RdmaWriteImm,
            Some(remote),
            payload.0,
            imm,
            flags,
        )
    }

    /// SEND of `payload`.
    pub fn send(&mut self, payload: Payload<'_>, flags: FmCeSe) -> Result<Posted, PostError> {
        self.push(SendOpcode::Send, None, payload.0, [0; 4], flags)
    }

    /// SEND with immediate.
    pub fn send_imm(
        &mut self,
        payload: Payload<'_>,
        imm: [u8; 4],
        flags: FmCeSe,
    ) -> Result<Posted, PostError> {
        self.push(SendOpcode::SendImm, None, payload.0, imm, flags)
    }

    /// RDMA READ from `remote` into the scatter list `local` (zero-length entries
    /// skipped; an empty list reads nothing, DS = 2).
    ///
    /// # Safety
    ///
    /// Every entry's `[addr, addr + len)` lies inside a memory region registered under its
    /// `lkey` with local write access, and that memory is not accessed by Rust code (no
    /// live references, no reads or writes) until the WQE is retired by a completion,
    /// because the device writes it by DMA after the post returns.
    pub unsafe fn rdma_read(
        &mut self,
        remote: Remote,
        local: &[Sge],
        flags: FmCeSe,
    ) -> Result<Posted, PostError> {
        self.push(
            SendOpcode::RdmaRead,
            Some(remote),
            Repr::Gather(local),
            [0; 4],
            flags,
        )
    }

    /// WQEs in this batch.
    pub const fn len(&self) -> u32 {
        self.count
    }

    /// Whether the batch is empty.
    pub const fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// WQEBBs free for posting now.
    #[inline]
    pub const fn free_bbs(&self) -> u32 {
        self.sq.free_bbs()
    }

    /// Rings one doorbell for every WQE of the batch (nothing if it is empty). With
    /// exactly one WQE that fits a BlueFlame buffer, the WQE is copied to the BlueFlame
    /// register; otherwise the 8-byte doorbell carries the last WQE's ctrl head.
    #[inline(always)]
    pub fn finish(mut self) {
        if let Some(last) = self.last.take() {
            self.sq.ring_doorbell(last, self.count);
        }
        self.count = 0;
        // Disarm the rollback.
        self.start_pi = self.sq.pi;
        self.start_unsig = (self.sq.unsig_wqes, self.sq.unsig_bbs);
    }
}

impl Drop for SqBatch<'_> {
    fn drop(&mut self) {
        // Unfinished: forget the WQEs. They are in memory past the doorbell record, which
        // the device does not read.
        self.sq.pi = self.start_pi;
        (self.sq.unsig_wqes, self.sq.unsig_bbs) = self.start_unsig;
    }
}
