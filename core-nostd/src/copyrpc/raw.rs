//! Raw RDMA READ and WRITE on an endpoint's QP, beside the RPC traffic (seed 000 §3.9),
//! with completions counted per endpoint.
#![allow(unsafe_code)]

use mlx5_raw::{Remote, Sge};

use super::context::{Context, EndpointId};
use super::Error;

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
        self.ep(id).map_or(0, |e| e.raw_pending())
    }

    /// Raw operations completed on the endpoint: (all, of which failed or flushed).
    pub fn raw_completed(&self, id: EndpointId) -> (u64, u64) {
        self.ep(id)
            .map_or((0, 0), |e| (e.d.raw_done, e.d.raw_failed))
    }
}
