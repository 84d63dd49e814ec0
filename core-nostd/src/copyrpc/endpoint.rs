//! One connection: its send side ([`Tx`]), receive side ([`Rx`]), liveness and raw
//! operations, and its state; what needs both sides (a reply reads the request from
//! the recv ring while writing the send ring; a credit batch weighs both). What it
//! posts is in `post`.

use mlx5_raw::{Remote, Sq};

use super::config::EndpointConfig;
use super::liveness::Liveness;
use super::mem::{Control, Dma};
use super::raw::RawOps;
use super::requests::Req;
use super::rx::Rx;
use super::stats::Stats;
use super::tx::{ReplyFail, Tx};
use super::{Error, FailureCause};
use crate::ring::RingSize;

/// Offset of the exported consumer position in the control region.
pub(crate) const CONSUMER_WORD: usize = Control::CONSUMER;
/// Offset of the word our READ of the peer's consumer lands in.
pub(crate) const READ_WORD: usize = Control::READ;
/// Bytes the control region needs.
pub(crate) const CONTROL_BYTES: usize = Control::BYTES;

/// Whether a change to an endpoint calls for a visit by the next flush: the value its
/// methods return and the context turns into the endpoint's dirty bit, in one place
/// (`Dirty::note`), which keeps `Dirty`'s invariant.
#[must_use = "the context turns it into the endpoint's dirty bit (`Dirty::note`)"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flush {
    /// Something the flush decides on changed.
    Needed,
    /// Nothing the dirty bit does not already cover: a message joined an open batch
    /// (which keeps the bit set), or the endpoint had failed already.
    Covered,
}

impl Flush {
    #[inline(always)]
    pub(crate) const fn needed_if(changed: bool) -> Self {
        if changed {
            Self::Needed
        } else {
            Self::Covered
        }
    }
}

/// A plain tag first (`repr(u8)`), so the state tests on the data path are one byte
/// compare rather than a niche decoded out of the failure cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum EpState {
    Created,
    Connected,
    /// `drained`: every pending call has been completed with an error.
    Failed {
        drained: bool,
        cause: FailureCause,
    },
}

/// Everything of an endpoint but its send queue, so a WQE batch (which borrows the
/// queue) can be built while the rings are updated.
///
/// `repr(C)`: the state, the liveness record, the send side (its wrap FIFO's storage
/// at its end) and the receive side (its request table at its end) first, and what
/// one call's round trip never touches (the raw operations' queue, the peer's
/// consumer address, the settings) behind the request table. A round then reads a few
/// adjacent lines of the endpoint instead of a dozen spread around the table
/// (docs/PERFORMANCE.md, "A cold round's cache lines").
#[derive(Debug)]
#[repr(C)]
pub(crate) struct EpData<const REQS: usize> {
    state: EpState,
    /// WQEBBs the largest batch WQE takes.
    pub(crate) batch_bbs: u32,
    pub(crate) live: Liveness,
    pub(crate) tx: Tx,
    pub(crate) rx: Rx<REQS>,
    pub(crate) raw: RawOps,
    /// Where the peer's exported consumer is, for our READs of it.
    pub(crate) peer_consumer: Remote,
    pub(crate) cfg: EndpointConfig,
}

/// An endpoint: its send queue and the rest. `repr(C)`, the data first, so that its
/// hot fields start the endpoint's first line; the queue (two lines of its own) last.
/// With the queue first, the compiler chose a costlier branch-free update of the
/// signaling counters (docs/PERFORMANCE.md, "Latency path").
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Endpoint<const REQS: usize> {
    pub(crate) d: EpData<REQS>,
    pub(crate) sq: Sq,
}

// The order the layout comments describe: the data's hot fields first, the request
// table and the cold fields after them, the queue last.
const _: () = {
    use core::mem::offset_of;
    assert!(offset_of!(Endpoint<2048>, d) == 0);
    assert!(offset_of!(EpData<2048>, state) == 0);
    assert!(offset_of!(EpData<2048>, live) < offset_of!(EpData<2048>, tx));
    assert!(offset_of!(EpData<2048>, tx) < offset_of!(EpData<2048>, rx));
    assert!(offset_of!(EpData<2048>, rx) < offset_of!(EpData<2048>, raw));
    assert!(offset_of!(EpData<2048>, rx) < offset_of!(EpData<2048>, cfg));
};

/// WQEBBs of the largest batch WQE: fully inline up to `max_inline` bytes, or an
/// `inline_head` inline and one data segment.
pub(crate) const fn batch_wqe_bbs(max_inline: u32, inline_head: u32) -> u32 {
    // ctrl + raddr, then the inline header and data in 16 B units
    let full = 2 + (4 + max_inline).div_ceil(16);
    let split = 2 + (4 + inline_head).div_ceil(16) + 1;
    let ds = if full > split { full } else { split };
    ds.div_ceil(4)
}

impl<const REQS: usize> EpData<REQS> {
    pub(crate) fn new(cfg: EndpointConfig, send_mem: Dma, recv_mem: Dma, ctrl: Control) -> Self {
        Self {
            state: EpState::Created,
            tx: Tx::new(send_mem),
            rx: Rx::new(recv_mem, ctrl),
            live: Liveness::new(),
            raw: RawOps::new(),
            peer_consumer: Remote { addr: 0, rkey: 0 },
            batch_bbs: batch_wqe_bbs(cfg.max_inline, cfg.inline_head),
            cfg,
        }
    }

    pub(crate) fn connect(&mut self, info: &super::EndpointInfo) -> Result<Flush, Error> {
        if !self.is_created() {
            // A failed endpoint (even one failed before it was ever connected) says so;
            // "already connected" would send its user looking for the wrong cause.
            return Err(if self.is_failed() {
                Error::EndpointFailed
            } else {
                Error::AlreadyConnected
            });
        }
        let remote = RingSize::new(info.recv_ring_size).map_err(|_| Error::BadPeerRing)?;
        let local = RingSize::new(self.rx.mem().len() as u64).map_err(|_| Error::BadRecvRing)?;
        if self.tx.mem_len() < remote.get() as usize {
            return Err(Error::SendRingTooSmall);
        }
        self.rx.connect(local);
        self.tx.connect(
            self.cfg.max_resp_reservation,
            local,
            remote,
            info.initial_credit,
            Remote {
                addr: info.recv_ring_addr,
                rkey: info.recv_ring_rkey,
            },
        );
        self.peer_consumer = Remote {
            addr: info.consumer_addr,
            rkey: info.consumer_rkey,
        };
        self.state = EpState::Connected;
        Ok(Flush::Needed)
    }

    #[inline(always)]
    pub(crate) fn is_connected(&self) -> bool {
        matches!(self.state, EpState::Connected)
    }

    #[inline(always)]
    pub(crate) const fn is_created(&self) -> bool {
        matches!(self.state, EpState::Created)
    }

    #[inline(always)]
    pub(crate) const fn is_failed(&self) -> bool {
        matches!(self.state, EpState::Failed { .. })
    }

    /// Why the endpoint failed, if it did.
    pub(crate) const fn failure_cause(&self) -> Option<FailureCause> {
        match self.state {
            EpState::Failed { cause, .. } => Some(cause),
            _ => None,
        }
    }

    /// Failed, and its pending calls not yet completed with the error.
    #[inline]
    pub(crate) const fn undrained(&self) -> bool {
        matches!(self.state, EpState::Failed { drained: false, .. })
    }

    /// Its pending calls were completed with the error.
    pub(crate) fn set_drained(&mut self) {
        if let EpState::Failed { drained, .. } = &mut self.state {
            *drained = true;
        }
    }

    /// Fails the endpoint for `cause`, the one way any endpoint fails: counted once, and
    /// the first cause is the one kept. Needs a visit (the drain of its pending calls)
    /// unless it had failed already.
    #[cold]
    pub(crate) fn fail(&mut self, cause: FailureCause, stats: &mut Stats) -> Flush {
        if self.is_failed() {
            return Flush::Covered;
        }
        self.state = EpState::Failed {
            drained: false,
            cause,
        };
        // Before it is connected the peer has no address of ours to READ.
        self.rx.export_failed();
        stats.endpoints_failed += 1;
        Flush::Needed
    }

    /// A batch arrived at poll `polls`: the peer lives.
    #[inline(always)]
    pub(crate) fn batch_arrived(&mut self, polls: u64) {
        self.live.touch(polls);
    }

    /// A batch that arrived this poll has been processed (its metadata applied, its
    /// requests listed or answered): whether `Endpoint::flush` has anything to do now.
    /// Its decision, taken here on the same inputs instead of by a visit that would
    /// mostly find nothing and still cost every received batch (docs/PERFORMANCE.md,
    /// "Latency path"): queued ranges or batches (a `poll_serve` reply), a credit batch
    /// or READ wanted, a batch left open. No probe can be due: the arrival just counted
    /// as a sign of life.
    #[inline(always)]
    pub(crate) fn batch_processed(&mut self) -> Flush {
        Flush::needed_if(
            self.tx.queued_ranges() != 0
                || self.tx.batch_count() != 0
                || self.wants_credit_batch()
                || self.tx.read_wanted()
                || self.tx.batch_open(),
        )
    }

    /// Writes a reply of `len` bytes to request `seq` (whose entry is `req`), filled by
    /// `fill(request, out)`, and releases the request. Returns, as `write_call`,
    /// whether it opened a batch or wrapped. [`ReplyFail::Refused`]: the reply exceeds
    /// the request's allowance and nothing changed; [`ReplyFail::Failed`]: the caller
    /// fails the endpoint.
    ///
    /// A reply always leaves something to flush, so the flush that moves a consumer
    /// this reply left behind (`Rx::answered`) comes.
    ///
    /// Always inlined: see `Context::reply_with` and `Context::call_with_allowance`.
    #[inline(always)]
    pub(crate) fn write_reply(
        &mut self,
        seq: u32,
        req: &Req,
        len: usize,
        fill: impl FnOnce(&[u8], &mut [u8]),
    ) -> Result<Flush, ReplyFail> {
        let request = self.rx.request_bytes(req);
        let flush = self
            .tx
            .write_reply(req.call_id, req.blocks, len, |out| fill(request, out))?;
        self.rx.answered(seq);
        Ok(flush)
    }

    /// Whether a metadata-only batch should go out: enough consumed bytes to return (or
    /// any, once a call was refused for credit), or the peer looks short of credit and
    /// we can grant some. Also wants a READ when a
    /// grant is blocked only by a stale view of the peer's consumer.
    #[inline]
    pub(crate) fn wants_credit_batch(&mut self) -> bool {
        if self.rx.credit_return_due() || (self.tx.credit_wanted() && self.rx.unreturned() != 0) {
            return true;
        }
        let rx = &self.rx;
        self.tx.wants_grant(|| rx.requests().unanswered())
    }

    /// The largest response allowance a call can ever pay for.
    pub(crate) fn max_response_allowance(&self) -> Option<u32> {
        self.tx.max_response_allowance()
    }

    /// The largest request payload a call can ever send.
    pub(crate) fn max_request_payload(&self) -> u32 {
        self.tx.max_request_payload()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_batch_wqe_is_four_basic_blocks_with_seed_settings() {
        // 220 B inline: 16 + 16 + 224 = 256 B; 204 B inline + SGE: 16 + 16 + 208 + 16.
        assert_eq!(batch_wqe_bbs(220, 204), 4);
        assert_eq!(batch_wqe_bbs(0, 0), 1);
        assert_eq!(batch_wqe_bbs(236, 0), 5);
        // The split WQE is the larger: its data segment (the `+ 1`) takes it to 9 units.
        assert_eq!(batch_wqe_bbs(0, 92), 3);
    }
}
