//! CQs, the SRQ and RC QPs, each with the `mlx5_raw` description `mlx5dv_init_obj` gives.

use std::ffi::c_int;
use std::hash::BuildHasher;
use std::io;
use std::mem;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use mlx5_raw::desc::{CqDesc, SqDesc, SrqDesc};
use mlx5_raw::layout::SEND_WQE_BB;
use rdma_sys::{
    ibv_access_flags, ibv_cq, ibv_create_cq, ibv_create_srq, ibv_destroy_cq, ibv_destroy_qp,
    ibv_destroy_srq, ibv_gid, ibv_modify_qp, ibv_qp, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_cap,
    ibv_qp_create_send_ops_flags, ibv_qp_init_attr_ex, ibv_qp_init_attr_mask, ibv_qp_state,
    ibv_qp_type, ibv_srq, ibv_srq_attr, ibv_srq_init_attr,
};

use super::mlx5dv::{self, mlx5dv_cq, mlx5dv_obj, mlx5dv_qp, mlx5dv_qp_init_attr, mlx5dv_srq};
use super::{verb_error, Ctx, Device, ThreadDomain, LINK_LAYER_ETHERNET};
use crate::error::{Error, Result};
use crate::fabric::QpEndpoint;

/// Calls `mlx5dv_init_obj` for one object.
///
/// # Safety
///
/// `obj` names exactly one live verbs object of the kind in `obj_type`, with its `out`
/// pointing at a writable struct of the matching type.
unsafe fn init_obj(
    ctx: &Ctx,
    obj: &mut mlx5dv_obj,
    obj_type: u64,
    what: &'static str,
) -> Result<()> {
    // SAFETY: per this function's contract.
    let rc = unsafe { mlx5dv::mlx5dv_init_obj(obj, obj_type) };
    if rc != 0 {
        return Err(Error::Mlx5dvInitObj {
            device: ctx.name.clone(),
            object: what,
            source: verb_error(rc),
        });
    }
    Ok(())
}

fn empty_obj() -> mlx5dv_obj {
    // SAFETY: mlx5dv_obj is pointers only; all-null is the "not asked for" value.
    unsafe { mem::zeroed() }
}

fn layout_err(ctx: &Ctx, object: &'static str, detail: String) -> Error {
    Error::Mlx5dvLayout {
        device: ctx.name.clone(),
        object,
        detail,
    }
}

#[derive(Debug)]
struct CqInner {
    cq: NonNull<ibv_cq>,
    desc: CqDesc,
    _ctx: Arc<Ctx>,
}

// SAFETY: see `Ctx`: verbs objects are usable from any thread; the Rust side only reads.
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once; QPs using it hold an Arc, so none is alive.
        unsafe { ibv_destroy_cq(self.cq.as_ptr()) };
    }
}

/// A completion queue (destroyed when the last clone and every QP using it are gone).
///
/// CQE compression stays off: mlx5 compresses only when asked through
/// `mlx5dv_create_cq` (`MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE`), and this is a plain
/// `ibv_create_cq`. The CQE size is rdma-core's default, 64 bytes (128 only when the
/// `MLX5_CQE_SIZE` environment variable says so; `mlx5_raw::Cq` handles both).
#[derive(Clone, Debug)]
pub struct Cq {
    inner: Arc<CqInner>,
}

impl Cq {
    /// The CQ's memory for `mlx5_raw::Cq::new`. Valid while this `Cq` (or a clone) lives;
    /// only one poller may use it (`Cq::new`'s contract).
    pub fn desc(&self) -> CqDesc {
        self.inner.desc
    }
}

#[derive(Debug)]
struct SrqInner {
    srq: NonNull<ibv_srq>,
    desc: SrqDesc,
    _ctx: Arc<Ctx>,
}

// SAFETY: as for CqInner.
unsafe impl Send for SrqInner {}
// SAFETY: as for CqInner.
unsafe impl Sync for SrqInner {}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once; QPs using it hold an Arc.
        unsafe { ibv_destroy_srq(self.srq.as_ptr()) };
    }
}

/// A shared receive queue (destroyed when the last clone and every QP using it are gone).
#[derive(Clone, Debug)]
pub struct Srq {
    inner: Arc<SrqInner>,
}

impl Srq {
    /// The SRQ's memory for `mlx5_raw::Srq::new`. Valid while this `Srq` (or a clone)
    /// lives; only one poster may use it.
    pub fn desc(&self) -> SrqDesc {
        self.inner.desc
    }
}

/// How to create an RC QP.
#[derive(Clone, Copy, Debug)]
pub struct QpOptions<'a> {
    /// CQ for requester completions.
    pub send_cq: &'a Cq,
    /// CQ for responder completions (WRITE_IMM, SEND).
    pub recv_cq: &'a Cq,
    /// Receive through this SRQ; `None` gives the QP its own RQ of `max_recv_wr`.
    pub srq: Option<&'a Srq>,
    /// Send WQEs (rdma-core rounds the ring up to a power of two of WQEBBs).
    pub max_send_wr: u32,
    /// Gather entries per send WQE.
    pub max_send_sge: u32,
    /// Inline bytes per WQE; sizes the WQE. copyrpc inlines up to 220 bytes
    /// (`mlx5_raw::sq::SqConfig::COPYRPC`).
    pub max_inline_data: u32,
    /// RQ entries when there is no SRQ (ignored with one).
    pub max_recv_wr: u32,
    /// Create the QP in this thread domain (a BlueFlame register of the domain's own;
    /// see [`ThreadDomain`]); `None`: on the device's PD, where rdma-core may share the
    /// register with other QPs.
    pub thread_domain: Option<&'a ThreadDomain>,
}

impl<'a> QpOptions<'a> {
    /// copyrpc's defaults: 512 send WQEs, 1 SGE, 220 inline bytes, receives via `srq`.
    pub fn new(send_cq: &'a Cq, recv_cq: &'a Cq, srq: Option<&'a Srq>) -> Self {
        Self {
            send_cq,
            recv_cq,
            srq,
            max_send_wr: 512,
            max_send_sge: 1,
            max_inline_data: 220,
            max_recv_wr: 0,
            thread_domain: None,
        }
    }
}

/// Path MTU (`enum ibv_mtu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum PathMtu {
    /// 256 bytes.
    B256 = 1,
    /// 512 bytes.
    B512 = 2,
    /// 1024 bytes.
    B1024 = 3,
    /// 2048 bytes.
    B2048 = 4,
    /// 4096 bytes.
    B4096 = 5,
}

impl PathMtu {
    /// From the `ibv_mtu` code (1..=5).
    pub fn from_code(code: u32) -> Option<Self> {
        Some(match code {
            1 => Self::B256,
            2 => Self::B512,
            3 => Self::B1024,
            4 => Self::B2048,
            5 => Self::B4096,
            _ => return None,
        })
    }

    /// Bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }
}

/// The RTR/RTS parameters of [`Qp::connect`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Cap on the path MTU; the used one is the minimum of this, the local port's active
    /// MTU and the peer's. `None`: no cap.
    pub mtu: Option<PathMtu>,
    /// Local ACK timeout exponent: 4.096 µs · 2^timeout (14 ≈ 67 ms).
    pub timeout: u8,
    /// Transport retries before a `TRANSPORT_RETRY_EXC_ERR` (max 7).
    pub retry_cnt: u8,
    /// RNR retries before `RNR_RETRY_EXC_ERR` (7 = infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer code the responder advertises (12 ≈ 0.64 ms).
    pub min_rnr_timer: u8,
    /// Outstanding RDMA READs, each way; clamped to the device's limits.
    pub max_rd_atomic: u8,
    /// Service level.
    pub sl: u8,
    /// GRH traffic class (DSCP/ECN on RoCE).
    pub traffic_class: u8,
    /// GRH hop limit (RoCE needs > 1 to leave the host).
    pub hop_limit: u8,
}

impl ConnectOptions {
    /// The defaults with `qos`'s traffic class and service level.
    pub fn with_qos(qos: crate::fabric::Qos) -> Self {
        Self {
            sl: qos.sl,
            traffic_class: qos.traffic_class,
            ..Self::default()
        }
    }
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            mtu: None,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            sl: 0,
            traffic_class: 0,
            hop_limit: 64,
        }
    }
}

/// An RC queue pair created through `mlx5dv_create_qp`, with its send queue described
/// for `mlx5_raw::Sq`.
///
/// Created with `ibv_qp_init_attr_ex.send_ops_flags` = WRITE | WRITE_IMM | SEND | READ
/// (what copyrpc posts; this restricts the `ibv_wr_*` API, which we never call: WQEs
/// are written by `mlx5_raw::Sq`), and with
/// `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`, so responder data always lands in memory,
/// never inside a CQE (`mlx5_raw::Cq` does not read scattered payloads).
/// `mlx5dv_create_qp` is `ibv_create_qp_ex` plus that mlx5 attribute.
#[derive(Debug)]
pub struct Qp {
    qp: NonNull<ibv_qp>,
    desc: SqDesc,
    psn: u32,
    // Dropped after the QP (fields drop after `Drop::drop` destroyed it).
    _send_cq: Cq,
    _recv_cq: Cq,
    _srq: Option<Srq>,
    /// The lock `desc.bf_lock` points at (kept alive with the QP; every QP on the same
    /// register holds the same one).
    _bf_lock: Option<Arc<mlx5_raw::SharedBf>>,
    /// The domain the QP was created in (its parent domain must outlive the QP).
    _domain: Option<ThreadDomain>,
    ctx: Arc<Ctx>,
}

// SAFETY: as for CqInner; `connect` is ibv_modify_qp, which is thread-safe.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once, before its CQs/SRQ (fields drop later).
        unsafe { ibv_destroy_qp(self.qp.as_ptr()) };
    }
}

/// What to pass `ibv_create_cq` for a CQ of `entries` entries (a power of two, or the
/// next one up).
///
/// mlx5 allocates `align_queue_size(cqe + 1)` entries (`create_cq` in
/// providers/mlx5/verbs.c: `ncqe = align_queue_size(cq_attr->cqe + 1)`), keeping one
/// back from what verbs reports (`cq.cqe = ncqe - 1`), while `mlx5dv_init_obj` describes
/// the whole buffer (`mlx5dv_get_cq` in mlx5.c: `cqe_cnt = cq.cqe + 1`), every entry of
/// which `mlx5_raw::Cq` drives. Asking for `entries` would allocate twice that for a
/// power of two; `entries - 1` allocates exactly it.
pub(crate) fn cqe_request(entries: u32) -> c_int {
    c_int::try_from(entries.saturating_sub(1)).unwrap_or(c_int::MAX)
}

impl Device {
    /// Creates a CQ of at least `cqe` entries: `cqe` rounded up to a power of two, not
    /// twice that ([`cqe_request`]).
    pub fn create_cq(&self, cqe: u32) -> Result<Cq> {
        let ctx = &self.ctx;
        let n = cqe_request(cqe);
        // SAFETY: open context; no completion channel, vector 0.
        let cq = unsafe { ibv_create_cq(ctx.ctx.as_ptr(), n, ptr::null_mut(), ptr::null_mut(), 0) };
        let cq = NonNull::new(cq).ok_or_else(|| Error::VerbsCreateCq {
            device: ctx.name.clone(),
            cqe,
            source: io::Error::last_os_error(),
        })?;
        // Own it before anything else can fail, so it is destroyed on error.
        let mut inner = CqInner {
            cq,
            desc: CqDesc {
                buf: ptr::null_mut(),
                cqe_cnt: 0,
                cqe_size: 0,
                dbrec: ptr::null_mut(),
                cqn: 0,
            },
            _ctx: ctx.clone(),
        };
        // SAFETY: all-zero is valid for this out-struct (pointers and integers).
        let mut out: mlx5dv_cq = unsafe { mem::zeroed() };
        let mut obj = empty_obj();
        obj.cq.in_ = cq.as_ptr();
        obj.cq.out = &mut out;
        // SAFETY: one live CQ with a matching out-struct.
        unsafe { init_obj(ctx, &mut obj, mlx5dv::MLX5DV_OBJ_CQ, "cq")? };
        if !out.cqe_cnt.is_power_of_two() || out.cqe_cnt < cqe || !matches!(out.cqe_size, 64 | 128)
        {
            return Err(layout_err(
                ctx,
                "cq",
                format!("cqe_cnt {} cqe_size {}", out.cqe_cnt, out.cqe_size),
            ));
        }
        inner.desc = CqDesc {
            buf: out.buf.cast(),
            cqe_cnt: out.cqe_cnt,
            cqe_size: out.cqe_size,
            dbrec: out.dbrec,
            cqn: out.cqn,
        };
        Ok(Cq {
            inner: Arc::new(inner),
        })
    }

    /// Creates an SRQ of at least `max_wr` receive WQEs with `max_sge` scatter entries
    /// each.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Srq> {
        let ctx = &self.ctx;
        let mut attr = ibv_srq_init_attr {
            srq_context: ptr::null_mut(),
            attr: ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
        };
        // SAFETY: live PD, valid attributes.
        let srq = unsafe { ibv_create_srq(ctx.pd.as_ptr(), &mut attr) };
        let srq = NonNull::new(srq).ok_or_else(|| Error::VerbsCreateSrq {
            device: ctx.name.clone(),
            max_wr,
            source: io::Error::last_os_error(),
        })?;
        let mut inner = SrqInner {
            srq,
            desc: SrqDesc {
                buf: ptr::null_mut(),
                stride: 0,
                wqe_cnt: 0,
                dbrec: ptr::null_mut(),
                head: 0,
                tail: 0,
                srqn: 0,
            },
            _ctx: ctx.clone(),
        };
        // SAFETY: all-zero is valid for this out-struct.
        let mut out: mlx5dv_srq = unsafe { mem::zeroed() };
        out.comp_mask = mlx5dv::MLX5DV_SRQ_MASK_SRQN;
        let mut obj = empty_obj();
        obj.srq.in_ = srq.as_ptr();
        obj.srq.out = &mut out;
        // SAFETY: one live SRQ with a matching out-struct.
        unsafe { init_obj(ctx, &mut obj, mlx5dv::MLX5DV_OBJ_SRQ, "srq")? };
        let wqe_cnt = out.tail.wrapping_add(1);
        if out.comp_mask & mlx5dv::MLX5DV_SRQ_MASK_SRQN == 0 {
            return Err(layout_err(ctx, "srq", "no srqn returned".into()));
        }
        if !wqe_cnt.is_power_of_two() || !out.stride.is_power_of_two() || out.stride < 32 {
            return Err(layout_err(
                ctx,
                "srq",
                format!("head {} tail {} stride {}", out.head, out.tail, out.stride),
            ));
        }
        inner.desc = SrqDesc {
            buf: out.buf.cast(),
            stride: out.stride,
            wqe_cnt,
            dbrec: out.dbrec,
            head: out.head,
            tail: out.tail,
            srqn: out.srqn,
        };
        Ok(Srq {
            inner: Arc::new(inner),
        })
    }

    /// Creates an RC QP (see [`Qp`] for the flags) in the RESET state.
    pub fn create_qp(&self, opts: &QpOptions<'_>) -> Result<Qp> {
        let ctx = &self.ctx;
        // SAFETY: all-zero is the documented "nothing set" value of the ex attributes.
        let mut attr: ibv_qp_init_attr_ex = unsafe { mem::zeroed() };
        attr.send_cq = opts.send_cq.inner.cq.as_ptr();
        attr.recv_cq = opts.recv_cq.inner.cq.as_ptr();
        attr.srq = opts.srq.map_or(ptr::null_mut(), |s| s.inner.srq.as_ptr());
        attr.cap = ibv_qp_cap {
            max_send_wr: opts.max_send_wr,
            max_recv_wr: if opts.srq.is_some() {
                0
            } else {
                opts.max_recv_wr
            },
            max_send_sge: opts.max_send_sge,
            max_recv_sge: if opts.srq.is_some() { 0 } else { 1 },
            max_inline_data: opts.max_inline_data,
        };
        attr.qp_type = ibv_qp_type::IBV_QPT_RC;
        attr.sq_sig_all = 0;
        attr.comp_mask = (ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD
            | ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
            .0;
        attr.pd = opts
            .thread_domain
            .map_or(ctx.pd.as_ptr(), ThreadDomain::parent_pd);
        attr.send_ops_flags = u64::from(
            (ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_WRITE
                | ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
                | ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_SEND
                | ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_READ)
                .0,
        );
        let mut dv = mlx5dv_qp_init_attr {
            comp_mask: mlx5dv::MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS,
            create_flags: mlx5dv::MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE,
            ..Default::default()
        };
        // SAFETY: open context; the CQs, SRQ and PD (or parent domain) are alive (we hold
        // them); both attribute structs are initialised.
        let qp = unsafe { mlx5dv::mlx5dv_create_qp(ctx.ctx.as_ptr(), &mut attr, &mut dv) };
        let qp = NonNull::new(qp).ok_or_else(|| Error::VerbsCreateQp {
            device: ctx.name.clone(),
            max_send_wr: opts.max_send_wr,
            max_inline: opts.max_inline_data,
            source: io::Error::last_os_error(),
        })?;
        // SAFETY: the QP is live; qp_num is immutable after creation.
        let qpn = unsafe { (*qp.as_ptr()).qp_num };
        let mut this = Qp {
            qp,
            desc: SqDesc {
                buf: ptr::null_mut(),
                wqe_cnt: 0,
                stride: 0,
                dbrec: ptr::null_mut(),
                bf_reg: ptr::null_mut(),
                bf_size: 0,
                qpn,
                bf_lock: ptr::null(),
            },
            psn: random_psn(qpn),
            _send_cq: opts.send_cq.clone(),
            _recv_cq: opts.recv_cq.clone(),
            _srq: opts.srq.cloned(),
            _bf_lock: None,
            _domain: opts.thread_domain.cloned(),
            ctx: ctx.clone(),
        };
        // SAFETY: all-zero is valid for this out-struct; comp_mask 0 asks for no extras.
        let mut out: mlx5dv_qp = unsafe { mem::zeroed() };
        let mut obj = empty_obj();
        obj.qp.in_ = qp.as_ptr();
        obj.qp.out = &mut out;
        // SAFETY: one live QP with a matching out-struct.
        unsafe { init_obj(ctx, &mut obj, mlx5dv::MLX5DV_OBJ_QP, "qp")? };
        if out.sq.stride as usize != SEND_WQE_BB
            || !out.sq.wqe_cnt.is_power_of_two()
            || out.sq.wqe_cnt > 1 << 16
        {
            return Err(layout_err(
                ctx,
                "qp",
                format!("sq wqe_cnt {} stride {}", out.sq.wqe_cnt, out.sq.stride),
            ));
        }
        let bf_reg: *mut u8 = out.bf.reg.cast();
        let lock = (!bf_reg.is_null()).then(|| ctx.bf_lock(bf_reg));
        this.desc = SqDesc {
            buf: out.sq.buf.cast(),
            wqe_cnt: out.sq.wqe_cnt,
            stride: out.sq.stride,
            dbrec: out.dbrec,
            bf_reg,
            bf_size: out.bf.size,
            qpn,
            bf_lock: lock.as_ref().map_or(ptr::null(), Arc::as_ptr),
        };
        this._bf_lock = lock;
        Ok(this)
    }
}

/// What the RTR transition needs to know of the local port.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LocalPort {
    pub(crate) port: u8,
    pub(crate) gid_index: u8,
    /// RoCE: every address vector has a GRH.
    pub(crate) ethernet: bool,
    /// `ibv_port_attr.active_mtu` (an `ibv_mtu` code).
    pub(crate) active_mtu: u32,
    pub(crate) max_qp_rd_atom: u8,
}

/// The attributes and mask of the INIT → RTR transition towards `remote`: the path MTU
/// (the least of both ports' and `opts.mtu`), the peer's QPN and PSN, and the address
/// vector, which carries `opts.sl` always and, with a GRH (RoCE, a peer asking for one,
/// or a peer without a LID), the GID index, hop limit and `opts.traffic_class`.
pub(crate) fn rtr_attr(
    local: &LocalPort,
    remote: &QpEndpoint,
    opts: &ConnectOptions,
) -> (ibv_qp_attr, ibv_qp_attr_mask) {
    type M = ibv_qp_attr_mask;
    let local_mtu = PathMtu::from_code(local.active_mtu).unwrap_or(PathMtu::B1024);
    let remote_mtu = PathMtu::from_code(u32::from(remote.mtu)).unwrap_or(local_mtu);
    let mut mtu = local_mtu.min(remote_mtu);
    if let Some(cap) = opts.mtu {
        mtu = mtu.min(cap);
    }
    let grh = local.ethernet || remote.flags & QpEndpoint::FLAG_GRH != 0 || remote.lid == 0;
    // SAFETY: all-zero is a valid ibv_qp_attr (integers, pointer-free unions).
    let mut a: ibv_qp_attr = unsafe { mem::zeroed() };
    a.qp_state = ibv_qp_state::IBV_QPS_RTR;
    a.path_mtu = mtu as u32;
    a.dest_qp_num = remote.qpn;
    a.rq_psn = remote.psn & 0xff_ffff;
    a.max_dest_rd_atomic = opts.max_rd_atomic.min(local.max_qp_rd_atom);
    a.min_rnr_timer = opts.min_rnr_timer;
    a.ah_attr.dlid = remote.lid;
    a.ah_attr.sl = opts.sl;
    a.ah_attr.src_path_bits = 0;
    a.ah_attr.port_num = local.port;
    if grh {
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = ibv_gid { raw: remote.gid };
        a.ah_attr.grh.sgid_index = local.gid_index;
        a.ah_attr.grh.hop_limit = opts.hop_limit;
        a.ah_attr.grh.traffic_class = opts.traffic_class;
    }
    let mask = M::IBV_QP_STATE
        | M::IBV_QP_AV
        | M::IBV_QP_PATH_MTU
        | M::IBV_QP_DEST_QPN
        | M::IBV_QP_RQ_PSN
        | M::IBV_QP_MAX_DEST_RD_ATOMIC
        | M::IBV_QP_MIN_RNR_TIMER;
    (a, mask)
}

/// A random 24-bit starting PSN (std's hasher keys are random per process).
fn random_psn(qpn: u32) -> u32 {
    (std::collections::hash_map::RandomState::new().hash_one(qpn) as u32) & 0xff_ffff
}

impl Qp {
    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.desc.qpn
    }

    /// The send queue's memory for `mlx5_raw::Sq::new`. Valid while this `Qp` lives;
    /// `Sq::new`'s contract applies (one driver, nothing else posts to the QP).
    pub fn sq_desc(&self) -> SqDesc {
        self.desc
    }

    /// What the peer needs to connect to this QP: QPN, starting PSN, LID, GID, MTU.
    pub fn endpoint(&self) -> QpEndpoint {
        let ctx = &self.ctx;
        QpEndpoint {
            qpn: self.desc.qpn,
            psn: self.psn,
            lid: ctx.lid,
            mtu: u8::try_from(ctx.active_mtu).unwrap_or(0),
            flags: if ctx.link_layer == LINK_LAYER_ETHERNET {
                QpEndpoint::FLAG_GRH
            } else {
                0
            },
            gid: ctx.gid,
            reserved: [0; 4],
        }
    }

    fn modify(
        &self,
        attr: &mut ibv_qp_attr,
        mask: ibv_qp_attr_mask,
        to: &'static str,
    ) -> Result<()> {
        // SAFETY: live QP; `attr` is initialised for every bit in `mask`. The mask bits
        // fit in an int.
        let rc = unsafe { ibv_modify_qp(self.qp.as_ptr(), attr, mask.0 as c_int) };
        if rc != 0 {
            return Err(Error::VerbsModifyQp {
                device: self.ctx.name.clone(),
                qpn: self.desc.qpn,
                to,
                source: verb_error(rc),
            });
        }
        Ok(())
    }

    /// Brings the QP from RESET through INIT and RTR to RTS, connected to `remote`
    /// (the peer's [`Qp::endpoint`], e.g. from an exchange).
    ///
    /// Uses a GRH when the local port is RoCE, the peer asks for one, or the peer has no
    /// LID.
    pub fn connect(&self, remote: &QpEndpoint, opts: &ConnectOptions) -> Result<()> {
        let ctx = &self.ctx;
        if remote.flags & QpEndpoint::FLAG_SIM != 0 {
            return Err(Error::SimConfig {
                reason: format!(
                    "qp {:#x} on {} was given a sim endpoint (qpn {:#x}); both ranks must use the same --fabric",
                    self.qpn(),
                    ctx.name,
                    remote.qpn
                ),
            });
        }
        type M = ibv_qp_attr_mask;

        // SAFETY: all-zero is a valid ibv_qp_attr (integers, pointers-free unions).
        let mut a: ibv_qp_attr = unsafe { mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = ctx.port;
        a.qp_access_flags = (ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
            | ibv_access_flags::IBV_ACCESS_REMOTE_READ)
            .0;
        self.modify(
            &mut a,
            M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS,
            "INIT",
        )?;

        let local = LocalPort {
            port: ctx.port,
            gid_index: ctx.gid_index,
            ethernet: ctx.link_layer == LINK_LAYER_ETHERNET,
            active_mtu: ctx.active_mtu,
            max_qp_rd_atom: ctx.max_qp_rd_atom,
        };
        let (mut a, mask) = rtr_attr(&local, remote, opts);
        self.modify(&mut a, mask, "RTR")?;

        // SAFETY: as above.
        let mut a: ibv_qp_attr = unsafe { mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTS;
        a.sq_psn = self.psn;
        a.timeout = opts.timeout;
        a.retry_cnt = opts.retry_cnt;
        a.rnr_retry = opts.rnr_retry;
        a.max_rd_atomic = opts.max_rd_atomic.min(ctx.max_qp_init_rd_atom);
        self.modify(
            &mut a,
            M::IBV_QP_STATE
                | M::IBV_QP_SQ_PSN
                | M::IBV_QP_TIMEOUT
                | M::IBV_QP_RETRY_CNT
                | M::IBV_QP_RNR_RETRY
                | M::IBV_QP_MAX_QP_RD_ATOMIC,
            "RTS",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::Qos;

    #[test]
    fn a_power_of_two_cq_asks_for_one_less() {
        // mlx5 allocates align_queue_size(cqe + 1): 255 → 256 entries, 256 → 512.
        assert_eq!(cqe_request(256), 255);
        assert_eq!(cqe_request(131_072), 131_071);
        assert_eq!(cqe_request(4096), 4095);
        assert_eq!(cqe_request(1), 0);
        assert_eq!(cqe_request(0), 0);
        assert_eq!(cqe_request(u32::MAX), c_int::MAX);
        // Whatever is asked, what mlx5 makes of it holds at least that many.
        for n in [1u32, 2, 3, 100, 256, 257, 1 << 20] {
            let allocated = (cqe_request(n) as u32 + 1).next_power_of_two();
            assert!(
                allocated >= n && allocated < 2 * n.next_power_of_two(),
                "{n}"
            );
        }
    }

    fn remote(lid: u16, flags: u8) -> QpEndpoint {
        QpEndpoint {
            qpn: 0x1234,
            psn: 0xab_cdef,
            lid,
            mtu: PathMtu::B4096 as u8,
            flags,
            gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7],
            reserved: [0; 4],
        }
    }

    #[test]
    fn tclass_and_sl_reach_the_rtr_address_vector() {
        let roce = LocalPort {
            port: 1,
            gid_index: 3,
            ethernet: true,
            active_mtu: PathMtu::B1024 as u32,
            max_qp_rd_atom: 16,
        };
        let opts = ConnectOptions::with_qos(Qos::new(106, 3).unwrap());
        let (a, mask) = rtr_attr(&roce, &remote(0, QpEndpoint::FLAG_GRH), &opts);
        assert_eq!(a.ah_attr.grh.traffic_class, 106);
        assert_eq!(a.ah_attr.sl, 3);
        assert_eq!(a.ah_attr.is_global, 1);
        assert_eq!(a.ah_attr.grh.sgid_index, 3);
        assert_eq!(a.ah_attr.grh.hop_limit, 64);
        assert_eq!(a.path_mtu, PathMtu::B1024 as u32, "the smaller port's MTU");
        assert_eq!((a.dest_qp_num, a.rq_psn), (0x1234, 0xab_cdef));
        assert_ne!(
            mask.0 & ibv_qp_attr_mask::IBV_QP_AV.0,
            0,
            "the AV is applied"
        );
        // InfiniBand to a peer with a LID: no GRH, so the traffic class has nowhere to
        // go; the service level still does.
        let ib = LocalPort {
            ethernet: false,
            ..roce
        };
        let (a, _) = rtr_attr(&ib, &remote(7, 0), &opts);
        assert_eq!(
            (a.ah_attr.is_global, a.ah_attr.sl, a.ah_attr.dlid),
            (0, 3, 7)
        );
        assert_eq!(a.ah_attr.grh.traffic_class, 0);
        // The defaults stay 0.
        let (a, _) = rtr_attr(&roce, &remote(0, 0), &ConnectOptions::default());
        assert_eq!((a.ah_attr.grh.traffic_class, a.ah_attr.sl), (0, 0));
    }
}
