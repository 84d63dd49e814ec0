//! The context: shared queues, the endpoint table, pending calls, the receive queue.
#![allow(unsafe_code)]

use core::mem::MaybeUninit;

use mlx5_raw::{Cq, CqDesc, SqDesc, Srq, SrqDesc};

use super::config::EndpointConfig;
use super::endpoint::{Endpoint, EpData, Flush, CONSUMER_WORD, CONTROL_BYTES};
use super::mem::{Control, Dma, Region};
use super::pending::Pending;
use super::qpn_map::QpnMap;
use super::requests::Link;
use super::stats::Stats;
use super::{CallError, EndpointInfo, Error, FailureCause, RecvHandle};
use crate::credit;
use crate::ring::RingSize;

/// An endpoint of a [`Context`]: an index into its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EndpointId(pub u16);

/// The queues every endpoint of a context shares: one SRQ (zero-length receive WQEs:
/// data arrives by RDMA WRITE into the rings), one send CQ, one recv CQ.
#[derive(Debug, Clone, Copy)]
pub struct Queues {
    /// The SRQ every endpoint's QP is created with.
    pub srq: SrqDesc,
    /// An lkey of the protection domain, for the SRQ's zero-length data segments.
    pub srq_lkey: u32,
    /// The send CQ of every endpoint's QP. Size it for every signaled WQE in flight,
    /// and for the flush completions of every send queue if QPs may fail.
    pub send_cq: CqDesc,
    /// The recv CQ of every endpoint's QP; at least the SRQ's WQE count.
    pub recv_cq: CqDesc,
}

/// Memory of one endpoint. The three regions may share one MR.
#[derive(Debug, Clone, Copy)]
pub struct EndpointMem {
    /// The send ring; at least the peer's recv ring size. Local read access.
    pub send_ring: Region,
    /// The recv ring: a power of two in bytes (128 B ..= 64 GiB). Remote write access.
    pub recv_ring: Region,
    /// 16 bytes, 8-aligned: the consumer position the peer READs (remote read) and
    /// the landing word of our READ of the peer's (local write).
    pub control: Region,
}

/// A copyrpc context; see the [module docs](super).
///
/// `U` is the per-call user data, handed back exactly once: with the response, or with
/// an error. `EPS` endpoints (≤ [`MAX_ENDPOINTS`]), `CALLS` pending calls across all endpoints,
/// `REQS` received requests held per endpoint (a power of two, at least the recv ring
/// size / 32).
///
/// `repr(C)`. The pending-call table comes first: at offset 0 its entries are
/// addressed from the context pointer itself (anywhere else each lookup also pays for
/// the table's base; docs/PERFORMANCE.md, "Latency path"). What a poll that finds
/// nothing to do reads follows from a cache-line boundary: the poll count, the next
/// sweep and the recv CQ's poller position share one line; the send CQ's position and
/// the dirty set's first word (endpoints 0..64) the next. A poll loop that runs other
/// work between its polls then reloads two lines of the context per idle test, not
/// four (docs/PERFORMANCE.md, "Latency path").
#[derive(Debug)]
#[repr(C)]
pub struct Context<U, const EPS: usize, const CALLS: usize, const REQS: usize> {
    pub(crate) pending: Pending<U, CALLS>,
    /// Starts the idle test's first line at a line boundary, whatever the table's size.
    pub(crate) idle_line0: [CacheLine; 0],
    /// Polls so far (`poll` and `poll_serve`, idle ones included): the clock of the
    /// idle-peer probe.
    pub(crate) polls: u64,
    /// The poll count at which the next sweep runs.
    pub(crate) next_sweep: u64,
    pub(crate) recv_cq: Cq,
    /// Starts the second line (no padding on 64-bit targets, where `recv_cq` ends there).
    pub(crate) idle_line1: [CacheLine; 0],
    pub(crate) send_cq: Cq,
    /// Endpoints `poll` must visit (flush, fail-drain); see [`Dirty`].
    pub(crate) dirty: Dirty,
    /// Starts the SRQ's line: a receive completion reads all of it.
    pub(crate) srq_line: [CacheLine; 0],
    pub(crate) srq: Srq,
    /// With one endpoint, the map, the receive queue's ends and the first four
    /// counters of `stats` (those a batch moves) fill the line after the SRQ's.
    pub(crate) map: QpnMap<EPS>,
    /// The receive queue: requests of every endpoint in arrival order, linked
    /// through their entries.
    pub(crate) rq_head: Link,
    pub(crate) rq_tail: Link,
    pub(crate) stats: Stats,
    /// Every this many polls, endpoints with pending calls are visited so a probe that
    /// fell due is posted ([`sweep_probes`](Self::sweep_probes)): a quarter of the
    /// smallest `probe_interval` of the endpoints, or `u64::MAX` with no probing one.
    pub(crate) probe_sweep: u64,
    /// Starts the endpoints at a line boundary, so that where their hot fields fall
    /// does not depend on what comes before.
    pub(crate) eps_line: [CacheLine; 0],
    pub(crate) eps: [Option<Endpoint<REQS>>; EPS],
}

/// A zero-sized field with a cache line's alignment: what follows it starts a line.
#[derive(Debug, Clone, Copy)]
#[repr(align(64))]
pub(crate) struct CacheLine;

/// Whether the idle test's words of `Context<U, EPS, CALLS, REQS>` lie in the two lines
/// from `polls` on (where the table puts `polls` varies; the order after it does not).
const fn idle_words_in_two_lines<U, const EPS: usize, const CALLS: usize, const REQS: usize>(
) -> bool {
    use core::mem::offset_of;
    use mlx5_raw::cq::CQ_HOT_BYTES;
    let line0 = offset_of!(Context<U, EPS, CALLS, REQS>, polls);
    let next_sweep = offset_of!(Context<U, EPS, CALLS, REQS>, next_sweep) - line0;
    let recv_cq = offset_of!(Context<U, EPS, CALLS, REQS>, recv_cq) - line0;
    let send_cq = offset_of!(Context<U, EPS, CALLS, REQS>, send_cq) - line0;
    let dirty = offset_of!(Context<U, EPS, CALLS, REQS>, dirty) - line0;
    line0 % 64 == 0
        && next_sweep < 64
        && recv_cq + CQ_HOT_BYTES <= 64
        && send_cq == 64
        && dirty >= 64
        && dirty + 8 <= 128
}

const _: () = assert!(idle_words_in_two_lines::<u8, 1, 1, 1>());
const _: () = assert!(idle_words_in_two_lines::<u64, 1, 256, 2048>());
const _: () = assert!(idle_words_in_two_lines::<[u8; 24], 64, 4096, 4096>());
const _: () = assert!(core::mem::offset_of!(Context<u64, 1, 256, 2048>, pending) == 0);

/// Whether, with one endpoint, a receive completion's context words lie in two lines:
/// the SRQ in the one that starts at it, the QPN map, the receive queue's ends and the
/// four counters a batch moves in the next; and whether the endpoints start a line.
const fn completion_words_in_two_lines<U, const CALLS: usize, const REQS: usize>() -> bool {
    use core::mem::{offset_of, size_of};
    let srq = offset_of!(Context<U, 1, CALLS, REQS>, srq);
    let map = offset_of!(Context<U, 1, CALLS, REQS>, map);
    let rq_tail = offset_of!(Context<U, 1, CALLS, REQS>, rq_tail);
    let stats = offset_of!(Context<U, 1, CALLS, REQS>, stats);
    let eps = offset_of!(Context<U, 1, CALLS, REQS>, eps);
    srq % 64 == 0
        && size_of::<Srq>() <= 64
        && map >= srq + size_of::<Srq>()
        && rq_tail < stats
        && stats + 32 <= srq + 128
        && eps % 64 == 0
}

const _: () = assert!(completion_words_in_two_lines::<u8, 1, 1>());
const _: () = assert!(completion_words_in_two_lines::<u64, 256, 2048>());

/// The endpoints a poll must visit: one bit per endpoint index.
///
/// Invariant: an endpoint whose bit is clear is one whose last flush found nothing due
/// (no queued range, no open batch, no READ wanted or due, no credit batch wanted), or
/// for which that test was last made and found nothing (a received batch, below), and
/// not failed-undrained, and none of whose inputs to that decision changed since, the
/// poll count aside. Every endpoint method that changes such an input returns a
/// [`Flush`] (a call or reply that opens a batch or wraps, a send completion, a failure,
/// `connect`: `Needed`; a received batch, once processed: `Needed` if the flush's own
/// test finds something due, `EpData::batch_processed`; a message appended to an open
/// batch, which keeps the bit set: `Covered`), and [`note`](Self::note) is the one place
/// it becomes the bit. A refused call is noted as `Needed` too (it may have wanted a
/// READ).
/// The poll count only matters for the idle-peer probe, and the probe sweep notes every
/// endpoint with pending calls every `probe_sweep` polls. So skipping a clear endpoint
/// skips only a flush that would do nothing (or a probe the next sweep catches), and an
/// idle poll is two CQ checks and two compares.
///
/// Sized for [`MAX_ENDPOINTS`] (128 B), whatever `EPS`: a table sized by `EPS / 64`
/// needs a const expression stable Rust does not have, and with a power-of-two bound the
/// masks below keep every access free of a bounds check (the hot path's instruction
/// count is that of the 256-endpoint table this replaced).
#[derive(Debug)]
pub(crate) struct Dirty([u64; DIRTY_WORDS]);

/// Words of [`Dirty`]: one bit per possible endpoint index.
const DIRTY_WORDS: usize = MAX_ENDPOINTS / 64;

impl Dirty {
    /// Turns what an endpoint method said about endpoint `ep` into its bit.
    #[inline(always)]
    pub(crate) fn note(&mut self, ep: u16, flush: Flush) {
        if flush == Flush::Needed {
            self.0[usize::from(ep >> 6) & (DIRTY_WORDS - 1)] |= 1 << (ep & 63);
        }
    }

    #[inline]
    pub(crate) fn clear(&mut self, ep: usize) {
        self.0[(ep >> 6) & (DIRTY_WORDS - 1)] &= !(1 << (ep & 63));
    }

    #[inline]
    pub(crate) fn word(&self, w: usize) -> u64 {
        self.0[w & (DIRTY_WORDS - 1)]
    }
}

/// The most endpoints one context can hold. A fixed bound because two per-endpoint
/// tables are sized by it rather than by `EPS` (the dirty set and the pending counts): at 1 024 they add 4 KiB
/// to every context, which the C ABI's fixed context size (`COPYRPC_CTX_BYTES`) still
/// holds; the full `EndpointId` range would add 264 KiB to a 16-endpoint context. More
/// peers take more contexts (benchkv: one per 64 peers).
pub const MAX_ENDPOINTS: usize = 1 << 10;

// SAFETY: the context exclusively owns its driver objects (each `Send`) and its access
// to the registered regions (constructor contracts), none tied to a thread; moving it
// moves that ownership. User data moves with it, hence `U: Send`.
unsafe impl<U: Send, const EPS: usize, const CALLS: usize, const REQS: usize> Send
    for Context<U, EPS, CALLS, REQS>
{
}

impl<U, const EPS: usize, const CALLS: usize, const REQS: usize> Context<U, EPS, CALLS, REQS> {
    /// Takes over the shared queues and fills the SRQ.
    ///
    /// The context's tables are inline (`EPS` endpoints of `REQS` request entries,
    /// `CALLS` pending calls), so the value can be large; [`init`](Self::init) builds it
    /// in place (say, in `Box::new_uninit()`) instead of on the stack.
    ///
    /// # Safety
    ///
    /// The contracts of [`Srq::new`], [`Cq::new`] (for both CQs) hold for `queues`, for
    /// as long as the context lives; no QP uses these queues except the endpoints'.
    pub unsafe fn new(queues: &Queues) -> Result<Self, Error> {
        let mut slot = MaybeUninit::uninit();
        // SAFETY: forwarded from this function's contract; `init` returned Ok, so every
        // field of `slot` is written.
        unsafe {
            Self::init(&mut slot, queues)?;
            Ok(slot.assume_init())
        }
    }

    /// [`new`](Self::new), built in `slot` field by field and element by element, so a
    /// large context never passes through the stack: with `Box::new_uninit()`, a thread
    /// of any stack size can create one. Returns the context in `slot`; on an error,
    /// `slot` is left uninitialised (and nothing needs dropping).
    ///
    /// # Safety
    ///
    /// As [`new`](Self::new).
    pub unsafe fn init<'s>(
        slot: &'s mut MaybeUninit<Self>,
        queues: &Queues,
    ) -> Result<&'s mut Self, Error> {
        if EPS > MAX_ENDPOINTS || EPS == 0 || CALLS == 0 || !REQS.is_power_of_two() {
            return Err(Error::BadTableSize);
        }
        // Every step that can fail comes before the first write into `slot`.
        // SAFETY: forwarded from this function's contract.
        let mut srq =
            unsafe { Srq::new(&queues.srq, queues.srq_lkey) }.map_err(|_| Error::BadSrq)?;
        // SAFETY: as above.
        let send_cq = unsafe { Cq::new(&queues.send_cq) }.map_err(|_| Error::BadSendCq)?;
        // SAFETY: as above.
        let recv_cq = unsafe { Cq::new(&queues.recv_cq) }.map_err(|_| Error::BadRecvCq)?;
        if recv_cq.cqe_cnt() < srq.capacity() {
            return Err(Error::RecvCqTooSmall);
        }
        srq.post_batch(srq.capacity()).map_err(|_| Error::SrqFill)?;
        // Every field is written below; adding one without writing it fails to compile.
        let _: fn(&Self) = |c| {
            let Self {
                idle_line0: _,
                idle_line1: _,
                srq_line: _,
                eps_line: _,
                srq: _,
                send_cq: _,
                recv_cq: _,
                map: _,
                eps: _,
                pending: _,
                rq_head: _,
                rq_tail: _,
                dirty: _,
                polls: _,
                probe_sweep: _,
                next_sweep: _,
                stats: _,
            } = c;
        };
        let p = slot.as_mut_ptr();
        // SAFETY: `p` comes from a `&mut MaybeUninit<Self>`, so it is valid for writes
        // of `Self` and aligned, and so is each field pointer derived from it (array
        // fields for all their elements). Each field is written exactly once, none is
        // read before, and none held a value that needed dropping. After the last
        // write every field is initialised, so `assume_init_mut` is sound.
        unsafe {
            (&raw mut (*p).idle_line0).write([]);
            (&raw mut (*p).idle_line1).write([]);
            (&raw mut (*p).srq_line).write([]);
            (&raw mut (*p).eps_line).write([]);
            (&raw mut (*p).srq).write(srq);
            (&raw mut (*p).send_cq).write(send_cq);
            (&raw mut (*p).recv_cq).write(recv_cq);
            (&raw mut (*p).map).write(QpnMap::new());
            let eps = (&raw mut (*p).eps).cast::<Option<Endpoint<REQS>>>();
            for i in 0..EPS {
                eps.add(i).write(None);
            }
            Pending::init_at(&raw mut (*p).pending);
            (&raw mut (*p).rq_head).write(Link::NONE);
            (&raw mut (*p).rq_tail).write(Link::NONE);
            (&raw mut (*p).dirty)
                .cast::<u64>()
                .write_bytes(0, DIRTY_WORDS);
            (&raw mut (*p).polls).write(0);
            (&raw mut (*p).probe_sweep).write(u64::MAX);
            (&raw mut (*p).next_sweep).write(u64::MAX);
            (&raw mut (*p).stats).write(Stats::default());
            Ok(slot.assume_init_mut())
        }
    }

    /// Adds an endpoint over a QP (in RESET, or connected but never posted to) created
    /// with this context's send CQ, recv CQ and SRQ, with remote read and write access.
    ///
    /// # Safety
    ///
    /// * [`Sq::new`](mlx5_raw::Sq::new)'s contract holds for `sq`;
    /// * each region of `mem` is registered (with the keys given) in the QP's PD, valid
    ///   for reads and writes for as long as the context lives and until the QP is
    ///   destroyed, and accessed by nothing but this context and the device: no Rust
    ///   reference to it exists elsewhere;
    /// * the regions do not overlap each other or another endpoint's.
    pub unsafe fn create_endpoint(
        &mut self,
        sq: &SqDesc,
        mem: &EndpointMem,
        cfg: EndpointConfig,
    ) -> Result<EndpointId, Error> {
        let slot = self
            .eps
            .iter()
            .position(Option::is_none)
            .ok_or(Error::TooManyEndpoints)?;
        let recv_size = RingSize::new(mem.recv_ring.len as u64).map_err(|_| Error::BadRecvRing)?;
        let reqs_needed = recv_size.get() / crate::wire::ALIGNMENT;
        if (REQS as u64) < reqs_needed {
            return Err(Error::TooFewRequestSlots);
        }
        if mem.control.len < CONTROL_BYTES || !mem.control.addr.addr().is_multiple_of(8) {
            return Err(Error::BadControlRegion);
        }
        if cfg.max_resp_reservation < 2 * crate::wire::ALIGNMENT {
            return Err(Error::BadReservation);
        }
        // SAFETY: the region contracts are this function's.
        let (send_mem, recv_mem, ctrl) = unsafe {
            (
                Dma::new(&mem.send_ring),
                Dma::new(&mem.recv_ring),
                Dma::new(&mem.control),
            )
        };
        let (Some(send_mem), Some(recv_mem), Some(ctrl)) = (send_mem, recv_mem, ctrl) else {
            return Err(Error::NullRegion);
        };
        // Checked above: 16 bytes, 8-aligned.
        let ctrl = Control::new(ctrl).ok_or(Error::BadControlRegion)?;
        // SAFETY: forwarded from this function's contract.
        let sq = unsafe { mlx5_raw::Sq::new(sq, cfg.sq_config()) }.map_err(|_| Error::BadSq)?;
        if sq.wqe_cnt() < cfg.min_sq_bbs() {
            return Err(Error::SqTooSmall);
        }
        self.map
            .insert(sq.qpn(), slot as u16)
            .map_err(|()| Error::TooManyEndpoints)?;
        ctrl.store_consumer(0);
        if cfg.probe_interval != 0 {
            let sweep = u64::from(cfg.probe_interval / 4).max(1);
            if sweep < self.probe_sweep {
                self.probe_sweep = sweep;
                self.next_sweep = self.polls.saturating_add(sweep);
            }
        }
        self.eps[slot] = Some(Endpoint {
            sq,
            d: EpData::new(cfg, send_mem, recv_mem, ctrl),
        });
        Ok(EndpointId(slot as u16))
    }

    pub(crate) fn ep(&self, id: EndpointId) -> Result<&Endpoint<REQS>, Error> {
        self.eps
            .get(usize::from(id.0))
            .and_then(Option::as_ref)
            .ok_or(Error::NoSuchEndpoint)
    }

    pub(crate) fn ep_mut(&mut self, id: EndpointId) -> Result<&mut Endpoint<REQS>, Error> {
        self.eps
            .get_mut(usize::from(id.0))
            .and_then(Option::as_mut)
            .ok_or(Error::NoSuchEndpoint)
    }

    /// What the peer needs to [`connect`](Self::connect) to this endpoint.
    pub fn local_info(&self, id: EndpointId) -> Result<EndpointInfo, Error> {
        let e = self.ep(id)?;
        Ok(EndpointInfo {
            qpn: e.sq.qpn(),
            recv_ring_addr: e.d.rx.mem().va_at(0),
            recv_ring_rkey: e.d.rx.mem().rkey(),
            recv_ring_size: e.d.rx.mem().len() as u64,
            consumer_addr: e.d.rx.ctrl().dma().va_at(CONSUMER_WORD),
            consumer_rkey: e.d.rx.ctrl().dma().rkey(),
            initial_credit: credit::initial_credit(e.d.cfg.max_resp_reservation),
        })
    }

    /// Sets up the endpoint for the peer described by `remote` (from its
    /// [`local_info`](Self::local_info)). Moving the QP to RTS is the caller's part
    /// (verbs `ibv_modify_qp`, or the device model's `connect`); no message is
    /// exchanged: both sides start with the credit the infos imply.
    pub fn connect(&mut self, id: EndpointId, remote: &EndpointInfo) -> Result<(), Error> {
        let flush = self.ep_mut(id)?.d.connect(remote)?;
        self.dirty.note(id.0, flush);
        Ok(())
    }

    /// Sends a request expecting a response of at most the endpoint's
    /// `default_response_allowance` bytes. See [`call_with_allowance`](Self::call_with_allowance).
    #[inline(always)]
    pub fn call(
        &mut self,
        id: EndpointId,
        payload: &[u8],
        user_data: U,
    ) -> Result<u32, CallError<U>> {
        let allowance = match self.ep(id) {
            Ok(e) => e.d.cfg.default_response_allowance,
            Err(error) => return Err(CallError { error, user_data }),
        };
        self.call_with_allowance(id, payload, allowance, user_data)
    }

    /// Writes a request into the endpoint's send ring (sent by the next
    /// [`poll`](Self::poll)) and returns its call id. The response, or an error if the
    /// endpoint fails first, reaches `poll`'s callback with `user_data`. A refused call
    /// hands `user_data` back and changes nothing.
    ///
    /// Always inlined, with `write_call`, as `recv` and the reply path are: out of
    /// line (the compiler's choice once an application calls it from two places) the
    /// arguments and the result cross memory, which costs a call about half again
    /// (docs/PERFORMANCE.md, "Why the code is shaped this way").
    #[inline(always)]
    pub fn call_with_allowance(
        &mut self,
        id: EndpointId,
        payload: &[u8],
        response_allowance: u32,
        user_data: U,
    ) -> Result<u32, CallError<U>> {
        let e = match self.eps.get_mut(usize::from(id.0)) {
            Some(Some(e)) if e.d.is_connected() => e,
            other => {
                let error = match other {
                    Some(Some(e)) if e.d.is_created() => Error::NotConnected,
                    Some(Some(_)) => Error::EndpointFailed,
                    _ => Error::NoSuchEndpoint,
                };
                return Err(CallError { error, user_data });
            }
        };
        // The id the call will get; taken only once the request is written, so a
        // refused call leaves the table untouched.
        let Some(call_id) = self.pending.free_id() else {
            return Err(CallError {
                error: e.d.tx.refuse_no_slot(payload.len(), response_allowance),
                user_data,
            });
        };
        match e
            .d
            .tx
            .write_call(call_id.get(), payload, response_allowance)
        {
            Ok(flush) => {
                self.dirty.note(id.0, flush);
                Ok(self.pending.insert_free(call_id, id.0, user_data))
            }
            Err(error) => {
                if error == Error::InsufficientCredit {
                    self.short_of_credit(id.0);
                }
                // A refusal may have wanted a READ of the peer's consumer.
                self.dirty.note(id.0, Flush::Needed);
                Err(CallError { error, user_data })
            }
        }
    }

    /// A call on endpoint `ep` was refused for credit. With calls pending there, their
    /// replies' batches bring grants; with none, no batch of the peer's may ever come
    /// again, and the peer grants only from what it knows of our consumer: so our next
    /// flush returns what we consumed (`Tx::credit_wanted`), and the peer, with nothing
    /// of ours unanswered, grants what that frees.
    #[cold]
    #[inline(never)]
    fn short_of_credit(&mut self, ep: u16) {
        if self.pending.on_ep(ep) == 0 {
            if let Some(Some(e)) = self.eps.get_mut(usize::from(ep)) {
                e.d.tx.want_credit();
            }
        }
    }

    /// The oldest received request not yet handed out, across all endpoints, in
    /// arrival order. Requests of failed endpoints are dropped on the way.
    ///
    /// Always inlined, as the reply path is: inlined next to `data` and `reply_with`,
    /// the compiler drops their handle checks (it sees the tag `recv` just wrote).
    #[inline(always)]
    pub fn recv(&mut self) -> Option<RecvHandle> {
        loop {
            let (ep, seq) = self.rq_head.get()?;
            let e = self.eps[usize::from(ep)].as_mut()?;
            let failed = e.d.is_failed();
            let requests = e.d.rx.requests_mut();
            let tag = requests.delivered_tag(seq);
            let r = requests.queued_mut(seq);
            self.rq_head = r.next;
            if self.rq_head.is_none() {
                self.rq_tail = Link::NONE;
            }
            if failed {
                requests.release(seq);
                continue;
            }
            r.tag = tag;
            return Some(RecvHandle {
                ep: EndpointId(ep),
                tag,
                call_id: r.call_id,
            });
        }
    }

    /// Appends requests `first..end` of endpoint `ep` (just parsed, each linked to the
    /// next sequence number by `on_batch`) to the receive queue: the last one ends the
    /// chain, and the queue's old tail links to the first.
    pub(crate) fn link_requests(&mut self, ep: u16, first: u32, end: u32) {
        if first == end {
            return;
        }
        let Some(e) = self.eps[usize::from(ep)].as_mut() else {
            return;
        };
        // Requests `first..end` were just pushed and nothing has taken them since, so the
        // last is live and queued: found by masking, without `get_mut`'s live test.
        let last = end.wrapping_sub(1);
        e.d.rx.requests_mut().queued_mut(last).next = Link::NONE;
        match self.rq_tail.get() {
            Some((tep, tseq)) => {
                if let Some(r) = self.eps[usize::from(tep)]
                    .as_mut()
                    .and_then(|t| t.d.rx.requests_mut().get_mut(tseq))
                {
                    r.next = Link::to(ep, first);
                }
            }
            None => self.rq_head = Link::to(ep, first),
        }
        self.rq_tail = Link::to(ep, last);
    }

    /// Marks the endpoint failed, as a QP error would: the next poll completes each of
    /// its pending calls with [`Error::EndpointFailed`]. For failures only the
    /// application can see (a peer process that died, a timeout of its own). Its
    /// [`failure_cause`](Self::failure_cause) is [`FailureCause::Application`], unless
    /// it had failed already (the first cause is kept).
    pub fn fail_endpoint(&mut self, id: EndpointId) -> Result<(), Error> {
        self.ep(id)?;
        self.fail(id.0, FailureCause::Application);
        Ok(())
    }

    /// The largest response allowance a call on a connected endpoint can ever be
    /// granted: the peer's reservation cap, or half of our recv ring, less the reply's
    /// header and metadata. A larger one is refused with [`Error::AllowanceTooLarge`].
    /// `Ok(None)`: not even an empty response fits (a tiny ring or cap).
    /// [`Error::EndpointFailed`] once the endpoint has failed.
    pub fn max_response_allowance(&self, id: EndpointId) -> Result<Option<u32>, Error> {
        let e = self.ep(id)?;
        if e.d.is_created() {
            return Err(Error::NotConnected);
        }
        if e.d.is_failed() {
            return Err(Error::EndpointFailed);
        }
        Ok(e.d.max_response_allowance())
    }

    /// The largest request payload a call on a connected endpoint can ever send: its
    /// message, metadata and twice the most reservation this side can come to hold
    /// for the peer's replies (the endpoint's `max_resp_reservation`, or half the peer's
    /// recv ring) fill the peer's recv ring. Every payload up to it goes through once
    /// the peer has consumed what is in flight (retry after `RingFull`); a larger one
    /// is refused at once with [`Error::PayloadTooLarge`], which no retry changes
    /// (about half the ring with the default cap of a quarter: 2 004 B of a 4 KiB
    /// ring). [`Error::NotConnected`] before `connect`, [`Error::EndpointFailed`] once
    /// the endpoint has failed.
    pub fn max_request_payload(&self, id: EndpointId) -> Result<u32, Error> {
        let e = self.ep(id)?;
        if e.d.is_created() {
            return Err(Error::NotConnected);
        }
        if e.d.is_failed() {
            return Err(Error::EndpointFailed);
        }
        Ok(e.d.max_request_payload())
    }

    /// Whether the endpoint has failed.
    pub fn is_failed(&self, id: EndpointId) -> bool {
        self.ep(id).is_ok_and(|e| e.d.is_failed())
    }

    /// Why the endpoint failed: the first cause, kept for as long as the endpoint
    /// exists. `None` while it has not failed (or if there is no such endpoint).
    /// Calls on a failed endpoint complete (and are refused) with
    /// [`Error::EndpointFailed`] whatever the cause; this says what to look at: the
    /// peer or link (an error completion's syndrome), the peer's protocol, or the
    /// application's own [`fail_endpoint`](Self::fail_endpoint).
    pub fn failure_cause(&self, id: EndpointId) -> Option<FailureCause> {
        self.ep(id).ok().and_then(|e| e.d.failure_cause())
    }

    /// Calls awaiting a response, on all endpoints.
    pub fn pending_calls(&self) -> usize {
        self.pending.len()
    }

    /// Calls awaiting a response on one endpoint.
    pub fn pending_calls_on(&self, id: EndpointId) -> u32 {
        self.pending.on_ep(id.0)
    }

    /// The event counters.
    pub const fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Endpoints the next poll will visit even if nothing arrives: those with something
    /// to post, and failed ones not yet drained. With none (and no probe sweep due) a
    /// poll that finds both CQs empty returns at once. For tests and diagnostics: the
    /// poll path itself never calls this.
    pub fn endpoints_due(&self) -> u32 {
        (0..EPS.div_ceil(64))
            .map(|w| self.dirty.word(w).count_ones())
            .sum()
    }

    /// The QP number of an endpoint.
    pub fn qpn(&self, id: EndpointId) -> Result<u32, Error> {
        Ok(self.ep(id)?.sq.qpn())
    }

    /// Credit state of an endpoint: (our balance for requests to the peer, our
    /// reservation `R` for the peer's requests, bytes in flight to the peer).
    pub fn credit_snapshot(&self, id: EndpointId) -> Result<CreditSnapshot, Error> {
        let d = &self.ep(id)?.d;
        Ok(CreditSnapshot {
            peer_credit_balance: d.tx.credit().peer_credit_balance(),
            resp_reservation: d.tx.credit().resp_reservation(),
            in_flight: d.tx.in_flight(),
            send_producer: d.tx.producer(),
            remote_consumer: d.tx.consumer_position(),
            recv_consumer: d.rx.ring().last_recv_pos(),
            recv_notified: d.rx.ring().last_notified_recv_pos(),
            unanswered_requests: d.rx.requests().len(),
        })
    }
}

/// An endpoint's flow-control counters, for tests and diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditSnapshot {
    /// Credit the peer granted us, not yet spent on calls.
    pub peer_credit_balance: u64,
    /// `R`: our reservation for the peer's requests.
    pub resp_reservation: u64,
    /// Bytes written towards the peer it is not known to have consumed.
    pub in_flight: u64,
    /// Our send producer.
    pub send_producer: u64,
    /// The peer's consumer as we know it.
    pub remote_consumer: u64,
    /// Our recv consumer.
    pub recv_consumer: u64,
    /// The recv consumer last reported to the peer.
    pub recv_notified: u64,
    /// Requests received and not answered (or answered behind an unanswered one).
    pub unanswered_requests: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test rig's device has QPs for 64 endpoints a side, so only here can an
    /// endpoint index reach the set's second to fourth words.
    #[test]
    fn the_dirty_set_keeps_endpoints_past_64_in_their_own_words() {
        let mut d = Dirty([0; DIRTY_WORDS]);
        for ep in [0u16, 1, 64, 65, 130, 255] {
            d.note(ep, Flush::Needed);
        }
        d.note(200, Flush::Covered);
        assert_eq!(d.word(0), 0b11);
        assert_eq!(d.word(1), 0b11, "64 and 65 are bits 0 and 1 of word 1");
        assert_eq!(d.word(2), 1 << 2);
        assert_eq!(d.word(3), 1 << 63, "200 was covered, not needed");
        d.clear(65);
        d.clear(255);
        assert_eq!(d.word(0), 0b11, "clearing 65 leaves 1");
        assert_eq!(d.word(1), 0b01);
        assert_eq!(d.word(3), 0);
        d.clear(64);
        d.clear(130);
        assert_eq!([d.word(0), d.word(1), d.word(2)], [0b11, 0, 0]);
    }
}
