//! The device: object tables, the verbs-like setup calls, faults, and `step`.

use core::fmt;
use core::ptr::NonNull;

use crate::desc::{CqDesc, SqDesc, SrqDesc};
use crate::layout::QPN_MASK;

use super::config::{
    Access, AsyncEvent, CqMem, DeviceConfig, LinkConfig, MrKeys, Pd, QpAttr, QpState, SimError,
    SqMem, SrqMem, StepStats,
};
use super::cq::SimCq;
use super::ctx::{Ctx, Events};
use super::link::{LinkDesc, LinkRx, LinkTx, Pace};
use super::mr::{key_slot, Mr};
use super::qp::{Env, Qp, Ring};
use super::raw::Raw;
use super::srq::SimSrq;
use super::trace::TraceSink;

/// Offset of the first BlueFlame register in a UAR page (`MLX5_BF_OFFSET`).
const BF_OFFSET: usize = 0x800;
/// Size of one of the two alternating BlueFlame buffers the model describes.
const BF_SIZE: u32 = 256;

/// The far end of a QP's connection: the peer QP's number and the two link directions.
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    /// The remote QP (in this device or another).
    pub remote_qpn: u32,
    /// Link memory this QP sends on (the peer receives on it).
    pub tx: LinkDesc,
    /// Link memory this QP receives on (the peer sends on it).
    pub rx: LinkDesc,
    /// Timing of the `tx` direction.
    pub link: LinkConfig,
}

/// A snapshot of a QP, for tests and for printing why an exchange is stuck.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInfo {
    /// QP number.
    pub qpn: u32,
    /// State.
    pub state: QpState,
    /// Connected peer QP (0 before connect).
    pub remote_qpn: u32,
    /// Last SQ doorbell-record value seen (u16 WQEBB counter).
    pub doorbell: u16,
    /// Next WQE to fetch.
    pub fetched: u16,
    /// Oldest WQE not completed: everything before it has completed.
    pub completed: u16,
    /// WQEs fetched and not completed.
    pub in_window: u32,
    /// Next PSN the requester assigns.
    pub next_psn: u32,
    /// PSN the responder expects.
    pub expected_psn: u32,
    /// Transmission paused by an RNR NAK until this time.
    pub rnr_wait_until: Option<u64>,
    /// Transport retries left.
    pub retries_left: u8,
    /// RNR retries left (meaningless with `rnr_retry == 7`).
    pub rnr_retries_left: u8,
    /// Responses (ACKs, NAKs, READs) queued for the link.
    pub responses_queued: u32,
}

impl fmt::Display for QpInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "qp {:#x} -> {:#x} {:?}: doorbell={} fetched={} completed={} window={} next_psn={} epsn={} retries={} rnr_retries={} queued_responses={}",
            self.qpn,
            self.remote_qpn,
            self.state,
            self.doorbell,
            self.fetched,
            self.completed,
            self.in_window,
            self.next_psn,
            self.expected_psn,
            self.retries_left,
            self.rnr_retries_left,
            self.responses_queued
        )?;
        if let Some(t) = self.rnr_wait_until {
            write!(f, " rnr_wait_until={t}")?;
        }
        Ok(())
    }
}

/// A snapshot of a CQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqInfo {
    /// CQ number.
    pub cqn: u32,
    /// CQEs written (producer index, mod 2^32).
    pub produced: u32,
    /// Consumer index in the doorbell record.
    pub consumer_index: u32,
    /// The CQ overran and writes nothing more.
    pub overrun: bool,
    /// CQEs lost to the overrun.
    pub dropped: u32,
    /// CQEs held back by a completion delay.
    pub delayed: u32,
}

/// A snapshot of an SRQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqInfo {
    /// SRQ number.
    pub srqn: u32,
    /// WQEs consumed (mod 2^16).
    pub consumed: u16,
    /// WQEs posted (per the doorbell record) and not consumed.
    pub available: u16,
    /// Index of the next WQE to consume.
    pub head: u16,
}

/// The software mlx5 device. See the [module docs](super).
///
/// Capacities are const: `QPS` QPs, `CQS` CQs, `SRQS` SRQs, `MRS` memory regions. The
/// value holds every table inline (a few KiB per QP); box it for large capacities.
#[derive(Debug)]
pub struct Device<const QPS: usize, const CQS: usize, const SRQS: usize, const MRS: usize> {
    cfg: DeviceConfig,
    qps: [Option<Qp>; QPS],
    /// One past the highest QP slot ever used: `step` walks `qps[..qp_end]`, so a
    /// device with room for thousands of QPs and a few in use steps as fast as a small
    /// one (slots are taken lowest first).
    qp_end: usize,
    cqs: [Option<SimCq>; CQS],
    srqs: [Option<SimSrq>; SRQS],
    mrs: [Option<Mr>; MRS],
    next_pd: u32,
    /// Generation of the next MR key, 1..=255.
    mr_gen: u8,
    events: Events,
    stall_until: u64,
    /// When the NIC-wide send pipeline is free ([`DeviceConfig::nic_packet_ns`]).
    nic_free: u64,
}

/// Writes `None` to `n` consecutive `Option<T>`s from `first`.
///
/// # Safety
///
/// `first..first + n` is valid for writes and aligned, and holds nothing that needs a drop.
unsafe fn write_nones<T>(first: *mut Option<T>, n: usize) {
    for i in 0..n {
        // SAFETY: `i < n`, within the range the caller vouches for.
        unsafe { first.add(i).write(None) };
    }
}

/// Checks a caller pointer: non-null and `align`-aligned.
fn ptr_ok<T>(p: *mut T, align: usize) -> Result<NonNull<u8>, SimError> {
    let p = NonNull::new(p.cast::<u8>()).ok_or(SimError::NullPointer)?;
    if p.as_ptr().addr().is_multiple_of(align) {
        Ok(p)
    } else {
        Err(SimError::Misaligned)
    }
}

fn free_slot<T>(table: &[Option<T>]) -> Result<usize, SimError> {
    table
        .iter()
        .position(Option::is_none)
        .ok_or(SimError::TableFull)
}

impl<const QPS: usize, const CQS: usize, const SRQS: usize, const MRS: usize>
    Device<QPS, CQS, SRQS, MRS>
{
    /// An empty device.
    pub const fn new(cfg: DeviceConfig) -> Self {
        Self {
            cfg,
            qps: [const { None }; QPS],
            qp_end: 0,
            cqs: [const { None }; CQS],
            srqs: [const { None }; SRQS],
            mrs: [const { None }; MRS],
            next_pd: 1,
            mr_gen: 1,
            events: Events::new(),
            stall_until: 0,
            nic_free: 0,
        }
    }

    /// Builds an empty device (what [`Device::new`] returns) directly in `slot`.
    ///
    /// For large capacities: `new` returns the whole value, a few KiB per QP, which a
    /// debug build copies through the stack on its way into a `Box` (2.7 MiB at 1 024
    /// QPs). This writes the tables element by element where they will stay.
    pub fn init_in_place(slot: &mut core::mem::MaybeUninit<Self>, cfg: DeviceConfig) -> &mut Self {
        let p = slot.as_mut_ptr();
        // SAFETY: `p` comes from a `&mut MaybeUninit<Self>`, so it is valid and aligned
        // for writes of a `Self`; `addr_of_mut!` names each field without reading it.
        // Every field is written exactly once below (the arrays element by element,
        // through their element pointer, within their length), so the whole value is
        // initialised when `assume_init_mut` runs; nothing was there to drop.
        unsafe {
            core::ptr::addr_of_mut!((*p).cfg).write(cfg);
            write_nones(core::ptr::addr_of_mut!((*p).qps).cast::<Option<Qp>>(), QPS);
            core::ptr::addr_of_mut!((*p).qp_end).write(0);
            write_nones(
                core::ptr::addr_of_mut!((*p).cqs).cast::<Option<SimCq>>(),
                CQS,
            );
            write_nones(
                core::ptr::addr_of_mut!((*p).srqs).cast::<Option<SimSrq>>(),
                SRQS,
            );
            write_nones(core::ptr::addr_of_mut!((*p).mrs).cast::<Option<Mr>>(), MRS);
            core::ptr::addr_of_mut!((*p).next_pd).write(1);
            core::ptr::addr_of_mut!((*p).mr_gen).write(1);
            core::ptr::addr_of_mut!((*p).events).write(Events::new());
            core::ptr::addr_of_mut!((*p).stall_until).write(0);
            core::ptr::addr_of_mut!((*p).nic_free).write(0);
            slot.assume_init_mut()
        }
    }

    /// The configuration.
    pub const fn config(&self) -> &DeviceConfig {
        &self.cfg
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&mut self) -> Pd {
        let pd = Pd(self.next_pd);
        self.next_pd = self.next_pd.wrapping_add(1).max(1);
        pd
    }

    /// Registers `len` bytes at `addr` in `pd` (`ibv_reg_mr`). The keys name byte `k`
    /// as `addr as u64 + k` (the `va` of the returned keys).
    ///
    /// # Safety
    ///
    /// Until the region is deregistered (or the device dropped), `addr` is valid for
    /// reads and writes of `len` bytes, and the device may read it (as the source of
    /// WRITE/SEND gathers and READ responses) and write it (READ responses, incoming
    /// WRITE/SEND payload, if `access` allows) at any `step`. While the device may write
    /// a byte, the caller must not hold a reference to it or access it except after the
    /// completion that covers the write (a CQE polled with Acquire, on this thread or
    /// one synchronised with it), as with a real NIC's DMA.
    pub unsafe fn reg_mr(
        &mut self,
        pd: Pd,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<MrKeys, SimError> {
        let base = ptr_ok(addr, 1)?;
        let slot = free_slot(&self.mrs)?;
        if slot + 1 >= 1 << 24 {
            return Err(SimError::TableFull);
        }
        let key = ((slot as u32 + 1) << 8) | u32::from(self.mr_gen);
        self.mr_gen = self.mr_gen.checked_add(1).unwrap_or(1);
        let va = base.as_ptr().addr() as u64;
        self.mrs[slot] = Some(Mr {
            // SAFETY: the caller guarantees `addr` is valid for `len` bytes while
            // registered, under the DMA discipline of `# Safety`.
            raw: unsafe { Raw::new(base, len) },
            va,
            key,
            pd: pd.0,
            access,
        });
        Ok(MrKeys {
            lkey: key,
            rkey: key,
            va,
        })
    }

    /// Deregisters the region with local key `lkey`. From the return on, the device
    /// never touches its memory: operations that still name it fail (LOCAL_PROT_ERR,
    /// REMOTE_ACCESS_ERR).
    pub fn dereg_mr(&mut self, lkey: u32) -> Result<(), SimError> {
        let slot = key_slot(lkey)
            .filter(|&s| {
                self.mrs
                    .get(s)
                    .and_then(|m| m.as_ref())
                    .is_some_and(|m| m.key == lkey)
            })
            .ok_or(SimError::NoSuchObject)?;
        self.mrs[slot] = None;
        Ok(())
    }

    /// Creates a CQ over caller memory: zeroes its doorbell record, stamps every
    /// `op_own` with `MLX5_CQE_INVALID << 4`, and returns the description a verbs CQ's
    /// `mlx5dv_init_obj` would give.
    ///
    /// # Safety
    ///
    /// Until the device is dropped: `mem.buf` is valid for `cqe_cnt * cqe_size` bytes and
    /// `mem.dbrec` for 8 bytes, both for reads, writes and atomic accesses; they are
    /// accessed otherwise only by one consumer (the driver's [`Cq`](crate::Cq)) under the
    /// CQ protocol: `op_own` atomically, bodies only after their `op_own`, the doorbell
    /// record only by atomic stores.
    pub unsafe fn create_cq(&mut self, mem: CqMem) -> Result<CqDesc, SimError> {
        let buf = ptr_ok(mem.buf, 64)?;
        let dbrec = ptr_ok(mem.dbrec, 8)?;
        if !mem.cqe_cnt.is_power_of_two()
            || !(2..=1 << 22).contains(&mem.cqe_cnt)
            || !(mem.cqe_size == 64 || mem.cqe_size == 128)
        {
            return Err(SimError::BadSize);
        }
        let slot = free_slot(&self.cqs)?;
        let cqn = self.cfg.cqn_base.wrapping_add(slot as u32);
        let len = mem.cqe_cnt as usize * mem.cqe_size as usize;
        // SAFETY: the caller guarantees both ranges are valid CQ memory (`# Safety`).
        let (raw, db) = unsafe { (Raw::new(buf, len), Raw::new(dbrec, 8)) };
        self.cqs[slot] = Some(SimCq::new(raw, db, mem.cqe_cnt, mem.cqe_size, cqn));
        Ok(CqDesc {
            buf: mem.buf,
            cqe_cnt: mem.cqe_cnt,
            cqe_size: mem.cqe_size,
            dbrec: mem.dbrec,
            cqn,
        })
    }

    /// Creates an SRQ in `pd` over caller memory: links the free list as
    /// `mlx5_alloc_srq_buf` does, zeroes the doorbell record, and returns the
    /// description (`head = 0`, `tail = wqe_cnt - 1`).
    ///
    /// # Safety
    ///
    /// Until the device is dropped: `mem.buf` is valid for `wqe_cnt * stride` bytes and
    /// `mem.dbrec` for 4 bytes (atomic accesses); they are accessed otherwise only by
    /// one poster (the driver's [`Srq`](crate::Srq)) under the SRQ protocol: WQEs written
    /// only while not posted, the record only by atomic stores.
    pub unsafe fn create_srq(&mut self, pd: Pd, mem: SrqMem) -> Result<SrqDesc, SimError> {
        let buf = ptr_ok(mem.buf, 16)?;
        let dbrec = ptr_ok(mem.dbrec, 4)?;
        if !mem.wqe_cnt.is_power_of_two()
            || !(2..=1 << 16).contains(&mem.wqe_cnt)
            || !mem.stride.is_power_of_two()
            || !(32..=512).contains(&mem.stride)
        {
            return Err(SimError::BadSize);
        }
        let slot = free_slot(&self.srqs)?;
        let srqn = self.cfg.srqn_base.wrapping_add(slot as u32);
        let len = mem.wqe_cnt as usize * mem.stride as usize;
        // SAFETY: the caller guarantees both ranges are valid SRQ memory (`# Safety`).
        let (raw, db) = unsafe { (Raw::new(buf, len), Raw::new(dbrec, 4)) };
        self.srqs[slot] = Some(SimSrq::new(raw, db, mem.wqe_cnt, mem.stride, srqn, pd.0));
        Ok(SrqDesc {
            buf: mem.buf,
            stride: mem.stride,
            wqe_cnt: mem.wqe_cnt,
            dbrec: mem.dbrec,
            head: 0,
            tail: mem.wqe_cnt - 1,
            srqn,
        })
    }

    fn cq_slot(&self, cqn: u32) -> Option<usize> {
        let s = cqn.wrapping_sub(self.cfg.cqn_base) as usize;
        self.cqs.get(s)?.as_ref().map(|_| s)
    }

    fn srq_slot(&self, srqn: u32) -> Option<usize> {
        let s = srqn.wrapping_sub(self.cfg.srqn_base) as usize;
        self.srqs.get(s)?.as_ref().map(|_| s)
    }

    fn qp_mut(&mut self, qpn: u32) -> Option<&mut Qp> {
        let s = qpn.wrapping_sub(self.cfg.qpn_base) as usize;
        self.qps.get_mut(s)?.as_mut()
    }

    fn qp(&self, qpn: u32) -> Option<&Qp> {
        let s = qpn.wrapping_sub(self.cfg.qpn_base) as usize;
        self.qps.get(s)?.as_ref()
    }

    /// Creates an RC QP in `pd` (state RESET) over caller SQ memory and returns the
    /// description a verbs QP's `mlx5dv_init_obj` would give (stride 64; a BlueFlame
    /// register only if `mem.uar` is given).
    ///
    /// # Safety
    ///
    /// Until the device is dropped: `mem.buf` is valid for `wqe_cnt * 64` bytes, and
    /// `mem.dbrec` for 8 bytes (atomic accesses); they are accessed otherwise only by one
    /// poster (the driver's [`Sq`](crate::Sq)) under the SQ protocol: WQE bytes written
    /// only while not rung or after a CQE covered them, the record by atomic stores.
    /// `mem.uar`, if not null, is valid for 4 KiB of writes by the driver; the device
    /// never reads it.
    pub unsafe fn create_qp(
        &mut self,
        pd: Pd,
        attr: QpAttr,
        mem: SqMem,
    ) -> Result<SqDesc, SimError> {
        let buf = ptr_ok(mem.buf, 64)?;
        let dbrec = ptr_ok(mem.dbrec, 8)?;
        if !mem.uar.is_null() && !mem.uar.addr().is_multiple_of(4096) {
            return Err(SimError::Misaligned);
        }
        if !mem.wqe_cnt.is_power_of_two() || mem.wqe_cnt > 1 << 16 {
            return Err(SimError::BadSize);
        }
        if attr.rnr_retry > 7
            || attr.retry_cnt > 7
            || attr.min_rnr_timer > 31
            || !(1..=16).contains(&attr.max_rd_atomic)
        {
            return Err(SimError::BadAttr);
        }
        let (Some(scq), Some(rcq)) = (self.cq_slot(attr.send_cq), self.cq_slot(attr.recv_cq))
        else {
            return Err(SimError::NoSuchObject);
        };
        let srq = match attr.srq {
            Some(n) => Some(self.srq_slot(n).ok_or(SimError::NoSuchObject)?),
            None => None,
        };
        let slot = free_slot(&self.qps)?;
        let qpn = self.cfg.qpn_base.wrapping_add(slot as u32);
        if qpn > QPN_MASK {
            return Err(SimError::TableFull);
        }
        self.qp_end = self.qp_end.max(slot + 1);
        // SAFETY: the caller guarantees both ranges are valid SQ memory (`# Safety`).
        let (sq, db) = unsafe { (Raw::new(buf, mem.wqe_cnt as usize * 64), Raw::new(dbrec, 8)) };
        // Relaxed: the QP is not shared yet (as in `SimCq::new`).
        db.store_u32(0, 0, core::sync::atomic::Ordering::Relaxed);
        db.store_u32(4, 0, core::sync::atomic::Ordering::Relaxed);
        self.qps[slot] = Some(Qp {
            qpn,
            pd: pd.0,
            attr,
            state: QpState::Reset,
            scq,
            rcq,
            srq,
            sq,
            dbrec: db,
            wqe_cnt: mem.wqe_cnt,
            remote_qpn: 0,
            tx: None,
            rx: None,
            mtu: 0,
            fail_pending: false,
            db_pi: 0,
            fetch: 0,
            una: 0,
            ents: Ring::new(),
            next_psn: 0,
            rnr_left: attr.rnr_retry,
            retry_left: attr.retry_cnt,
            rnr_until: None,
            last_progress: 0,
            epsn: 0,
            wctx: None,
            sctx: None,
            out: Ring::new(),
        });
        let (bf_reg, bf_size) = if mem.uar.is_null() {
            (core::ptr::null_mut(), 0)
        } else {
            (mem.uar.wrapping_add(BF_OFFSET), BF_SIZE)
        };
        Ok(SqDesc {
            buf: mem.buf,
            wqe_cnt: mem.wqe_cnt,
            stride: 64,
            dbrec: mem.dbrec,
            bf_reg,
            bf_size,
            qpn,
            // The model's UAR page is this QP's alone.
            bf_lock: core::ptr::null(),
        })
    }

    /// Connects QP `qpn` (RESET) to its peer and moves it to RTS (INIT → RTR → RTS in
    /// one call). Both ends start at PSN 0. The links must have been formatted
    /// ([`format_link`](super::format_link)) with the same MTU.
    ///
    /// # Safety
    ///
    /// Until the device is dropped, `peer.tx` and `peer.rx` are valid link memory
    /// (readable, writable, atomic accesses), this device is the only producer on
    /// `peer.tx` and the only consumer of `peer.rx`, and the peer device (this one or
    /// another, possibly in another process) the only consumer of `peer.tx` and producer
    /// on `peer.rx`.
    pub unsafe fn connect(&mut self, qpn: u32, peer: Peer) -> Result<(), SimError> {
        // SAFETY: forwarded from this function's contract.
        let tx = unsafe { LinkTx::open(&peer.tx, peer.link) }?;
        // SAFETY: as above.
        let rx = unsafe { LinkRx::open(&peer.rx) }?;
        if tx.mtu() != rx.mtu() || peer.remote_qpn > QPN_MASK {
            return Err(SimError::BadLink);
        }
        let qp = self.qp_mut(qpn).ok_or(SimError::NoSuchObject)?;
        if qp.state != QpState::Reset {
            return Err(SimError::BadState);
        }
        qp.mtu = tx.mtu();
        qp.tx = Some(tx);
        qp.rx = Some(rx);
        qp.remote_qpn = peer.remote_qpn;
        qp.state = QpState::Rts;
        Ok(())
    }

    /// Connects two QPs of this device to each other over links `ab` (a sends, b
    /// receives) and `ba`, with the same timing both ways.
    ///
    /// # Safety
    ///
    /// As [`connect`](Self::connect) for both QPs: `ab` and `ba` are valid formatted link
    /// memory used by nothing but these two QPs.
    pub unsafe fn connect_pair(
        &mut self,
        a: u32,
        b: u32,
        ab: LinkDesc,
        ba: LinkDesc,
        link: LinkConfig,
    ) -> Result<(), SimError> {
        if self.qp(a).is_none() || self.qp(b).is_none() || a == b {
            return Err(SimError::NoSuchObject);
        }
        let pa = Peer {
            remote_qpn: b,
            tx: ab,
            rx: ba,
            link,
        };
        let pb = Peer {
            remote_qpn: a,
            tx: ba,
            rx: ab,
            link,
        };
        if self.qp(a).map(|q| q.state) != Some(QpState::Reset)
            || self.qp(b).map(|q| q.state) != Some(QpState::Reset)
        {
            return Err(SimError::BadState);
        }
        // SAFETY: forwarded from this function's contract.
        unsafe { self.connect(a, pa) }?;
        // SAFETY: as above.
        unsafe { self.connect(b, pb) }
    }

    /// Runs the device once at time `now` (ns on a clock shared by every device on the
    /// same links): writes delayed CQEs that are due, then serves every QP (responses
    /// out, packets in, doorbell, retries, transmission, completions), each bounded by
    /// the configured budget.
    pub fn step(&mut self, now: u64) -> StepStats {
        self.step_inner(now, None)
    }

    /// [`step`](Self::step), recording what happens to `trace`.
    pub fn step_traced(&mut self, now: u64, trace: &mut dyn TraceSink) -> StepStats {
        self.step_inner(now, Some(trace))
    }

    fn step_inner(&mut self, now: u64, trace: Option<&mut dyn TraceSink>) -> StepStats {
        if now < self.stall_until {
            return StepStats::default();
        }
        // Shortens the trait object's lifetime to this call (an unsizing coercion).
        let trace = trace.map(|t| t as &mut dyn TraceSink);
        let nic = Pace {
            gap: self.cfg.nic_packet_ns,
            free: self.nic_free,
        };
        let mut ctx = Ctx::new(now, nic, &mut self.events, trace);
        for cq in self.cqs.iter_mut().flatten() {
            cq.flush_staged(&mut ctx);
        }
        let mut env = Env {
            cqs: &mut self.cqs,
            srqs: &mut self.srqs,
            mrs: &self.mrs,
            cfg: &self.cfg,
            ctx,
        };
        for qp in self.qps[..self.qp_end].iter_mut().flatten() {
            qp.step(&mut env);
        }
        self.nic_free = env.ctx.nic.free;
        env.ctx.stats
    }

    /// The oldest unread async event.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop()
    }

    /// Async events dropped because nobody read them (the ring holds 32).
    pub const fn events_lost(&self) -> u32 {
        self.events.lost
    }

    // --- faults -----------------------------------------------------------------------

    /// Moves QP `qpn` to ERR at the next step, as a fatal QP error would: every
    /// outstanding and later WQE is flushed (WR_FLUSH_ERR), no error CQE is written, and
    /// the peer's requests go unanswered (its requester retries, then fails with
    /// TRANSPORT_RETRY_EXC_ERR).
    pub fn fail_qp(&mut self, qpn: u32) -> Result<(), SimError> {
        let qp = self.qp_mut(qpn).ok_or(SimError::NoSuchObject)?;
        qp.fail_pending = true;
        Ok(())
    }

    /// Cuts (or restores) both directions of QP `qpn`'s link: while cut, packets sent
    /// are lost and packets arriving are dropped, so requesters time out and retry, then
    /// fail with TRANSPORT_RETRY_EXC_ERR. The flag lives in the link memory, so the peer
    /// (in another process too) sees it.
    pub fn set_link_cut(&mut self, qpn: u32, cut: bool) -> Result<(), SimError> {
        let qp = self.qp_mut(qpn).ok_or(SimError::NoSuchObject)?;
        let tx = qp.tx.as_ref().ok_or(SimError::BadState)?;
        tx.set_cut(cut);
        if let Some(rx) = qp.rx.as_ref() {
            rx.set_cut(cut);
        }
        Ok(())
    }

    /// Sets the timing of QP `qpn`'s outgoing link direction.
    pub fn set_link_config(&mut self, qpn: u32, link: LinkConfig) -> Result<(), SimError> {
        let qp = self.qp_mut(qpn).ok_or(SimError::NoSuchObject)?;
        qp.tx.as_mut().ok_or(SimError::BadState)?.cfg = link;
        Ok(())
    }

    /// Stalls the whole device: `step` does nothing while `now < until`.
    pub fn stall_until(&mut self, until: u64) {
        self.stall_until = until;
    }

    /// Holds every CQE of CQ `cqn` back for `delay_ns` after it is produced (order is
    /// kept; at most 16 are held, beyond that the oldest is written early). 0 turns the
    /// delay off (held CQEs are still written when due).
    pub fn set_cq_delay(&mut self, cqn: u32, delay_ns: u64) -> Result<(), SimError> {
        let s = self.cq_slot(cqn).ok_or(SimError::NoSuchObject)?;
        if let Some(cq) = self.cqs[s].as_mut() {
            cq.delay_ns = delay_ns;
        }
        Ok(())
    }

    // --- inspection -------------------------------------------------------------------

    /// A snapshot of QP `qpn`.
    pub fn qp_info(&self, qpn: u32) -> Option<QpInfo> {
        let qp = self.qp(qpn)?;
        Some(QpInfo {
            qpn: qp.qpn,
            state: qp.state,
            remote_qpn: qp.remote_qpn,
            doorbell: qp.db_pi,
            fetched: qp.fetch,
            completed: qp.una,
            in_window: qp.ents.len() as u32,
            next_psn: qp.next_psn,
            expected_psn: qp.epsn,
            rnr_wait_until: qp.rnr_until,
            retries_left: qp.retry_left,
            rnr_retries_left: qp.rnr_left,
            responses_queued: qp.out.len() as u32,
        })
    }

    /// A snapshot of CQ `cqn`.
    pub fn cq_info(&self, cqn: u32) -> Option<CqInfo> {
        let cq = self.cqs.get(self.cq_slot(cqn)?)?.as_ref()?;
        Some(CqInfo {
            cqn,
            produced: cq.pi,
            consumer_index: cq.consumer_index(),
            overrun: cq.overrun,
            dropped: cq.dropped,
            delayed: cq.staged() as u32,
        })
    }

    /// A snapshot of SRQ `srqn`.
    pub fn srq_info(&self, srqn: u32) -> Option<SrqInfo> {
        let srq = self.srqs.get(self.srq_slot(srqn)?)?.as_ref()?;
        Some(SrqInfo {
            srqn,
            consumed: srq.count,
            available: srq.available(),
            head: srq.head,
        })
    }

    /// Every QP's snapshot, for printing.
    pub fn qp_infos(&self) -> impl Iterator<Item = QpInfo> + '_ {
        self.qps
            .iter()
            .flatten()
            .filter_map(|q| self.qp_info(q.qpn))
    }
}
