//! Raw RDMA READ and WRITE on an endpoint's QP, beside the RPC traffic
//! (docs/spec/copyrpc.md#raw-read-and-write), with completions counted per endpoint.
#![allow(unsafe_code)]

use mlx5_raw::{Remote, Sge};

use super::context::{Context, EndpointId};
use super::Error;
use crate::ops::Fifo;

/// Raw READ/WRITE operations outstanding per endpoint.
pub(crate) const RAW_OPS: usize = 64;

/// An endpoint's raw operations: those in flight, and counts of those completed.
#[derive(Debug)]
pub(crate) struct RawOps {
    /// SQ positions of raw READ/WRITE WQEs in flight.
    in_flight: Fifo<u64, RAW_OPS>,
    done: u64,
    failed: u64,
}

impl RawOps {
    pub(crate) const fn new() -> Self {
        Self {
            in_flight: Fifo::new(),
            done: 0,
            failed: 0,
        }
    }

    /// Whether no more can be posted until some complete.
    pub(crate) const fn full(&self) -> bool {
        self.in_flight.len() == RAW_OPS
    }

    /// One was posted at SQ position `pos`; the caller checked [`full`](Self::full).
    pub(crate) fn posted(&mut self, pos: u64) {
        let _ = self.in_flight.push(pos);
    }

    /// Send-queue completions retired every WQE before `ci`, successfully or not
    /// (`ok`): those operations are done.
    #[inline]
    pub(crate) fn retire(&mut self, ci: u64, ok: bool) {
        while let Some(pos) = self.in_flight.front() {
            if pos >= ci {
                break;
            }
            self.in_flight.pop();
            self.done += 1;
            if !ok {
                self.failed += 1;
            }
        }
    }

    pub(crate) const fn pending(&self) -> u32 {
        self.in_flight.len() as u32
    }

    /// (all completed, of which failed or flushed).
    pub(crate) const fn completed(&self) -> (u64, u64) {
        (self.done, self.failed)
    }
}

impl<U, const EPS: usize, const CALLS: usize, const REQS: usize> Context<U, EPS, CALLS, REQS> {
    /// Posts a signaled RDMA READ of `remote` into the scatter list `local`, now (its
    /// own doorbell).
    ///
    /// # Safety
    ///
    /// Every entry of `local` lies in memory registered under its lkey with local write
    /// access, and Rust code leaves that memory alone (no references, no reads or
    /// writes) until [`raw_pending`](Self::raw_pending) no longer counts the operation.
    pub unsafe fn post_rdma_read(
        &mut self,
        id: EndpointId,
        remote: Remote,
        local: &[Sge],
    ) -> Result<(), Error> {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.ep_mut(id)?.post_raw(true, remote, local) }
    }

    /// Posts a signaled RDMA WRITE of the gather list `local` to `remote`, now.
    ///
    /// # Safety
    ///
    /// Every entry of `local` lies in memory registered under its lkey, left unmodified
    /// until [`raw_pending`](Self::raw_pending) no longer counts the operation.
    pub unsafe fn post_rdma_write(
        &mut self,
        id: EndpointId,
        remote: Remote,
        local: &[Sge],
    ) -> Result<(), Error> {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.ep_mut(id)?.post_raw(false, remote, local) }
    }

    /// Raw operations posted on the endpoint and not yet completed (by `poll`).
    pub fn raw_pending(&self, id: EndpointId) -> u32 {
        self.ep(id).map_or(0, |e| e.d.raw.pending())
    }

    /// Raw operations completed on the endpoint: (all, of which failed or flushed).
    pub fn raw_completed(&self, id: EndpointId) -> (u64, u64) {
        self.ep(id).map_or((0, 0), |e| e.d.raw.completed())
    }
}
