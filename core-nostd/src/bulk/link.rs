//! [`OneSided`] on a copyrpc endpoint's raw READ/WRITE.
//!
//! copyrpc counts raw operations per endpoint and gives them no wr_id of their own; an
//! RC send queue completes in post order, and once one operation fails every later one
//! is flushed. So the wr_ids of posted operations are kept in post order, and each time
//! the endpoint's (completed, failed) counters advance by (d, f), the oldest d of them
//! completed and the last f of those d are the failed ones.
#![allow(unsafe_code)]

use mlx5_raw::{Remote, Sge};

use super::mover::{Dir, OneSided, PostRefused};
use crate::copyrpc::{Context, EndpointId, Error};
use crate::ops::{Fifo, WrId};

/// At most this many raw operations per endpoint (copyrpc's own raw window is this size).
pub const LINK_DEPTH: usize = 64;

/// One endpoint's raw operations as the mover sees them.
#[derive(Debug)]
pub struct Link {
    ep: EndpointId,
    order: Fifo<WrId, LINK_DEPTH>,
    seen: (u64, u64),
}

impl Link {
    /// Starts counting from the endpoint's raw completions so far.
    pub fn new<U, const E: usize, const C: usize, const R: usize>(
        ctx: &Context<U, E, C, R>,
        ep: EndpointId,
    ) -> Self {
        Self {
            ep,
            order: Fifo::new(),
            seen: ctx.raw_completed(ep),
        }
    }

    /// The endpoint.
    pub const fn endpoint(&self) -> EndpointId {
        self.ep
    }

    /// Operations posted and not yet reported.
    pub fn outstanding(&self) -> usize {
        self.order.len()
    }

    /// Reports every operation that completed since the last call, in post order, to
    /// `f(wr, ok)`. Call after `ctx.poll`.
    pub fn drain<U, const E: usize, const C: usize, const R: usize>(
        &mut self,
        ctx: &Context<U, E, C, R>,
        mut f: impl FnMut(WrId, bool),
    ) {
        let (done, failed) = ctx.raw_completed(self.ep);
        let d = done - self.seen.0;
        let bad = failed - self.seen.1;
        self.seen = (done, failed);
        for k in 0..d {
            let Some(wr) = self.order.pop() else { break };
            f(wr, k < d - bad);
        }
    }

    /// A poster on `ctx` for the mover's `pump`.
    pub fn poster<'a, U, const E: usize, const C: usize, const R: usize>(
        &'a mut self,
        ctx: &'a mut Context<U, E, C, R>,
    ) -> LinkPoster<'a, U, E, C, R> {
        LinkPoster { link: self, ctx }
    }
}

/// [`Link::poster`].
#[derive(Debug)]
pub struct LinkPoster<'a, U, const E: usize, const C: usize, const R: usize> {
    link: &'a mut Link,
    ctx: &'a mut Context<U, E, C, R>,
}

impl<U, const E: usize, const C: usize, const R: usize> OneSided for LinkPoster<'_, U, E, C, R> {
    unsafe fn post(
        &mut self,
        dir: Dir,
        wr: WrId,
        remote: Remote,
        local: Sge,
    ) -> Result<(), PostRefused> {
        if self.link.order.len() == LINK_DEPTH {
            return Err(PostRefused::Full);
        }
        let ep = self.link.ep;
        let sges = [local];
        let r = match dir {
            // SAFETY: forwarded from `OneSided::post`: `local` is registered and left
            // alone until the operation completes, which `drain` reports.
            Dir::Read => unsafe { self.ctx.post_rdma_read(ep, remote, &sges) },
            // SAFETY: as above.
            Dir::Write => unsafe { self.ctx.post_rdma_write(ep, remote, &sges) },
        };
        match r {
            Ok(()) => {
                let _ = self.link.order.push(wr);
                Ok(())
            }
            Err(Error::SqFull) => Err(PostRefused::Full),
            Err(_) => Err(PostRefused::Dead),
        }
    }
}
