//! The `sim` fabric: the software mlx5 device ([`mlx5_raw::sim`]) with its objects in
//! `/dev/shm`, stepped by an engine thread.
//!
//! Each [`SimFabric`] is one "NIC": a device on its own [`SimEngine`] thread and one
//! `/dev/shm` region (`/copyrpc-sim-<pid>-<n>`) from which every queue, doorbell record,
//! registered region and *inbound* link queue is carved. Nothing else is shared between
//! processes: a connection's packets travel requester→responder through the receiver's
//! inbound link, which the sender maps by name when it connects, so every CQ and SRQ keeps
//! a single producer (its own process's device), as with hardware.
//!
//! ```text
//!   rank A: /copyrpc-sim-<pidA>-0                 rank B: /copyrpc-sim-<pidB>-0
//!   [queues, MRs] [link B→A (A's QP rx)] ◄──┐   ┌──► [queues, MRs] [link A→B (B's QP rx)]
//!        device A sends on B's region ───────┼───┘        device B sends on A's region
//!                                            └──────────────────────────┘
//! ```
//!
//! The address a peer needs ([`QpEndpoint`]) is the same 32-byte record the verbs fabric
//! exchanges; for `sim` its GID bytes name the region (pid, instance) and the link's offset
//! in it, and [`QpEndpoint::FLAG_SIM`] marks it, so a sim endpoint handed to a verbs QP (or
//! the reverse) is refused rather than misread. Only processes on one machine can connect.
//!
//! The region is sized up front ([`SimOptions::region_bytes`], default 256 MiB) but
//! sparse: each queue, CQ and MR carved from it is claimed from `/dev/shm` as it is
//! carved, so the size is a ceiling, not a cost, and a `/dev/shm` too small for what is
//! carved (a container's default 64 MiB) is an [`Error::ShmNoRoom`] naming the
//! region rather than a SIGBUS at its first touch.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, Weak};

use mlx5_raw::desc::{CqDesc, SqDesc, SrqDesc};
use mlx5_raw::sim::{
    format_link, link_bytes, Access as SimAccess, CqMem, Device, DeviceConfig, LinkConfig,
    LinkDesc, Pd, Peer, QpAttr, SimError, SqMem, SrqMem,
};

use super::{MrEndpoint, Qos, QpEndpoint};

use crate::error::{Error, Result};
use crate::shm::ShmRegion;
use crate::sim_engine::{EngineConfig, Idle, SimEngine};
/// The link timing [`SimOptions::link`] takes and what a step reports, re-exported so a
/// user of this fabric needs no direct dependency on the device crate.
pub use mlx5_raw::sim::{rnr_timer_ns, LinkConfig as SimLinkConfig, StepStats};

/// The device's object tables: QPs, CQs, SRQs, MRs. Room for an endpoint to each of
/// 1 024 peers, which copyrpc contexts of 64 endpoints hold (a context has two CQs,
/// an SRQ and an MR besides one MR per endpoint), so the sim fabric has no rank limit
/// below the verbs one. A QP's state is ~2.6 KiB: the device (~2.8 MiB) is built in
/// place on the heap ([`Device::init_in_place`]); stepping walks only the QP slots in
/// use, so the room costs nothing per step.
pub type SimDevice = Device<{ SIM_MAX_QPS }, 32, 16, { SIM_MAX_QPS + 128 }>;

/// QPs (endpoints) one sim fabric holds.
pub const SIM_MAX_QPS: usize = 1024;

/// Bytes of a UAR page the model describes per QP (BlueFlame registers at 0x800).
const UAR_BYTES: usize = 4096;
/// A doorbell record's own cache line.
const DBREC_BYTES: usize = 64;
/// CQE size: copyrpc uses 64-byte CQEs.
const CQE_BYTES: u32 = 64;

/// Options of the `sim` fabric.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// Virtual size of this fabric's `/dev/shm` region (only carved pieces are claimed).
    pub region_bytes: usize,
    /// What the engine thread does when idle. [`Idle::Yield`] by default: on a machine
    /// with few cores a spinning engine starves the threads it serves.
    pub idle: Idle,
    /// Keep the newest this many decoded trace events (0 = off).
    pub trace_events: usize,
    /// Slots per inbound link queue (packets in flight per connection direction).
    pub link_slots: u32,
    /// Link MTU in bytes (a power of two, 256..=4096).
    pub mtu: u32,
    /// One-way latency, bandwidth and per-QP packet spacing of every link this fabric
    /// sends on.
    pub link: LinkConfig,
    /// Least time between two packets the device sends over all its QPs, ns (the
    /// NIC-wide packet rate; 0, the default, for none).
    pub nic_packet_ns: u64,
    /// Who steps the device: its own engine thread in real time (the default), or the
    /// owner through [`SimFabric::step`] at times it chooses (a virtual-time world).
    pub stepping: Stepping,
    /// Every QP's acknowledgement timeout, ns (the model's default, 500 ms, unless set):
    /// with `retry_cnt` 7 a dead link fails a QP after eight of these.
    pub ack_timeout_ns: Option<u64>,
    /// Every QP's `min_rnr_timer` (IBA 5-bit code; the model's default, 1 = 10 µs, unless
    /// set): how long a sender waits after this side answers RNR (SRQ empty). The verbs
    /// fabric uses 12 (640 µs).
    pub min_rnr_timer: Option<u8>,
}

/// Who steps a sim fabric's device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Stepping {
    /// An engine thread, with `CLOCK_MONOTONIC` as `now`.
    #[default]
    Thread,
    /// Nobody but [`SimFabric::step`]; `now` is whatever the caller passes.
    Manual,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self {
            region_bytes: 256 << 20,
            idle: Idle::Yield,
            trace_events: 0,
            link_slots: 64,
            mtu: 4096,
            link: LinkConfig::default(),
            nic_packet_ns: 0,
            stepping: Stepping::Thread,
            ack_timeout_ns: None,
            min_rnr_timer: None,
        }
    }
}

/// Regions of this process, numbered so several fabrics (thread ranks) can coexist.
static INSTANCE: AtomicU32 = AtomicU32::new(0);

/// Bump allocation over the fabric's region. Nothing is freed before the fabric drops:
/// queues and registered regions live as long as the fabric.
#[derive(Debug)]
struct Arena {
    next: usize,
}

/// One software "NIC". See the module docs.
pub struct SimFabric {
    // Field order is drop order: the engine thread stops before any memory it touches
    // (the own region, the peers' regions) is unmapped.
    engine: SimEngine<Box<SimDevice>>,
    pd: Pd,
    arena: Mutex<Arena>,
    peers: Mutex<HashMap<(u32, u32), Arc<ShmRegion>>>,
    /// The QoS each connected QP was brought up with (what a NIC's address vector would
    /// carry; the model sends nothing differently).
    qos: Mutex<HashMap<u32, Qos>>,
    region: Arc<ShmRegion>,
    pid: u32,
    instance: u32,
    opts: SimOptions,
}

impl std::fmt::Debug for SimFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimFabric")
            .field("region", &self.region.name())
            .field("engine", &self.engine)
            .finish()
    }
}

/// A registered region carved from the fabric's `/dev/shm` region.
#[derive(Clone, Debug)]
pub struct SimMr {
    addr: *mut u8,
    len: usize,
    lkey: u32,
    rkey: u32,
    region: String,
}

// SAFETY: the memory belongs to the fabric's mapping (process-wide, not tied to a thread);
// `SimMr` exposes only the raw pointer and keys, never references into the memory.
unsafe impl Send for SimMr {}
// SAFETY: as above; every method reads immutable fields.
unsafe impl Sync for SimMr {}

impl SimMr {
    /// Start of the region (valid while the fabric lives).
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the region is empty (never, for a registered one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Name given at registration.
    pub fn region(&self) -> &str {
        &self.region
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    /// What a peer needs to RDMA into this region.
    pub fn endpoint(&self) -> MrEndpoint {
        MrEndpoint {
            addr: self.addr as u64,
            len: self.len as u64,
            rkey: self.rkey,
            reserved: 0,
        }
    }
}

/// An RC QP of the device model, with its inbound link.
#[derive(Clone, Copy, Debug)]
pub struct SimQp {
    qpn: u32,
    desc: SqDesc,
    rx: LinkDesc,
    rx_offset: u64,
}

// SAFETY: the descriptors point into the fabric's mapping; see `SimMr`.
unsafe impl Send for SimQp {}
// SAFETY: as above.
unsafe impl Sync for SimQp {}

impl SimQp {
    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    /// The send queue, for `mlx5_raw::Sq`.
    pub fn sq_desc(&self) -> SqDesc {
        self.desc
    }
}

/// How to create a QP on the `sim` fabric (the verbs fabric's `QpOptions`, by value).
#[derive(Clone, Copy, Debug)]
pub struct SimQpOptions {
    /// Requester completions.
    pub send_cq: u32,
    /// Responder completions.
    pub recv_cq: u32,
    /// Receive through this SRQ.
    pub srq: Option<u32>,
    /// Send WQEs (the SQ is this many WQEs of the largest size, rounded up to a power of
    /// two of 64-byte WQEBBs).
    pub max_send_wr: u32,
    /// Inline bytes per WQE; sizes the WQE like the verbs fabric does.
    pub max_inline_data: u32,
    /// RNR retries (7 = forever).
    pub rnr_retry: u8,
}

impl SimQpOptions {
    /// copyrpc's defaults (as the verbs fabric's `QpOptions::new`).
    pub fn new(send_cq: u32, recv_cq: u32, srq: Option<u32>) -> Self {
        Self {
            send_cq,
            recv_cq,
            srq,
            max_send_wr: 512,
            max_inline_data: 220,
            rnr_retry: 7,
        }
    }
}

fn sim_err(what: &'static str, region: &str, source: SimError) -> Error {
    Error::Sim {
        what,
        region: region.to_owned(),
        reason: source,
    }
}

impl SimFabric {
    /// Creates this fabric's region and starts its engine thread.
    pub fn open(opts: &SimOptions) -> Result<Self> {
        if !opts.mtu.is_power_of_two() || !(256..=4096).contains(&opts.mtu) {
            return Err(Error::SimConfig {
                reason: format!("mtu {} is not a power of two in 256..=4096", opts.mtu),
            });
        }
        if opts.link_slots == 0 || !opts.link_slots.is_power_of_two() {
            return Err(Error::SimConfig {
                reason: format!("link_slots {} is not a power of two", opts.link_slots),
            });
        }
        crate::shm::sweep_left_behind();
        let pid = std::process::id();
        // Relaxed: a unique number, nothing is published through it.
        let instance = INSTANCE.fetch_add(1, Ordering::Relaxed);
        let name = format!("/{REGION_PREFIX}{pid}-{instance}");
        // Sparse: the default 256 MiB costs /dev/shm only what `carve` hands out.
        let region = Arc::new(ShmRegion::create_sparse(&name, opts.region_bytes)?);
        own_regions().insert(instance, Arc::downgrade(&region));
        // QPNs in 24 bits: 10 for the slot (SIM_MAX_QPS), 2 for the instance, 12 from the
        // pid (1..=4095, so never QP 0 or 1), which keeps a machine's devices apart in
        // traces (a CQE only ever names its own device's QPs, so this is not needed for
        // correctness).
        const _: () = assert!(SIM_MAX_QPS <= 1 << 10);
        let qpn_base = ((pid % 0xfff + 1) << 12) | ((instance & 0x3) << 10);
        let mut dev = Box::<SimDevice>::new_uninit();
        SimDevice::init_in_place(
            &mut dev,
            DeviceConfig {
                qpn_base,
                nic_packet_ns: opts.nic_packet_ns,
                ..DeviceConfig::DEFAULT
            },
        );
        // SAFETY: `init_in_place` initialised the whole value.
        let dev: Box<SimDevice> = unsafe { dev.assume_init() };
        let engine = match opts.stepping {
            Stepping::Thread => SimEngine::start(
                dev,
                EngineConfig {
                    idle: opts.idle,
                    trace_events: opts.trace_events,
                    name: format!("mlx5-sim-{instance}"),
                },
            )
            .map_err(|source| Error::SpawnThread {
                what: "sim engine",
                source,
            })?,
            Stepping::Manual => SimEngine::manual(dev, opts.trace_events),
        };
        let pd = engine.with(|d| d.alloc_pd());
        Ok(Self {
            engine,
            pd,
            arena: Mutex::new(Arena { next: 0 }),
            peers: Mutex::new(HashMap::new()),
            qos: Mutex::new(HashMap::new()),
            region,
            pid,
            instance,
            opts: opts.clone(),
        })
    }

    /// The `/dev/shm` name of this fabric's region.
    pub fn region_name(&self) -> &str {
        self.region.name()
    }

    /// Steps the device at `now_ns` when this fabric was opened with
    /// [`Stepping::Manual`]; `None` (and nothing happens) when its engine thread steps it.
    pub fn step(&self, now_ns: u64) -> Option<StepStats> {
        self.engine.step_manual(now_ns)
    }

    /// The engine: faults, snapshots ([`SimEngine::with`]) and the trace.
    pub fn engine(&self) -> &SimEngine<Box<SimDevice>> {
        &self.engine
    }

    /// Zeroed, `align`-aligned bytes of the region, owned by the fabric until it drops.
    fn carve(&self, what: &str, len: usize, align: usize) -> Result<(*mut u8, usize)> {
        let mut a = self.arena.lock().unwrap_or_else(|e| e.into_inner());
        let start = a.next.next_multiple_of(align);
        let end = start.checked_add(len).filter(|&e| e <= self.region.len());
        let Some(end) = end else {
            return Err(Error::SimRegionFull {
                region: self.region.name().to_owned(),
                what: what.to_owned(),
                len,
                used: a.next,
                size: self.region.len(),
            });
        };
        // Claimed before it is handed out: a full /dev/shm is an error naming it here,
        // not a SIGBUS at the first touch (of this process or of a peer's device).
        self.region.commit(start, len)?;
        a.next = end;
        // The region is page-aligned; `start` is inside it (checked above).
        Ok((self.region.as_ptr().wrapping_add(start), start))
    }

    /// Allocates `len` bytes of the region and registers them (`ibv_reg_mr`).
    pub fn alloc_mr(&self, region: &str, len: usize, access: SimAccess) -> Result<SimMr> {
        let (addr, _) = self.carve(region, len.max(1), 4096)?;
        let pd = self.pd;
        // SAFETY: `addr..addr+len` is carved from the fabric's mapping for this MR alone
        // and stays mapped until the fabric drops, after its engine (field order); the
        // caller accesses it only under the MR's completion rules (`SimMr` hands out a
        // raw pointer, no reference).
        let keys = self
            .engine
            .with(|d| unsafe { d.reg_mr(pd, addr, len.max(1), access) })
            .map_err(|e| sim_err("reg_mr", region, e))?;
        Ok(SimMr {
            addr,
            len,
            lkey: keys.lkey,
            rkey: keys.rkey,
            region: region.to_owned(),
        })
    }

    /// Creates a CQ of `cqe` 64-byte entries (rounded up to a power of two).
    pub fn create_cq(&self, cqe: u32) -> Result<CqDesc> {
        let cqe_cnt = cqe.max(2).next_power_of_two();
        let (buf, _) = self.carve("cq", (cqe_cnt * CQE_BYTES) as usize, 4096)?;
        let (dbrec, _) = self.carve("cq dbrec", DBREC_BYTES, DBREC_BYTES)?;
        let mem = CqMem {
            buf,
            cqe_cnt,
            cqe_size: CQE_BYTES,
            dbrec: dbrec.cast(),
        };
        // SAFETY: buffer and record carved for this CQ alone, mapped until the fabric
        // (and so the engine) is gone.
        self.engine
            .with(|d| unsafe { d.create_cq(mem) })
            .map_err(|e| sim_err("create_cq", self.region.name(), e))
    }

    /// Creates an SRQ of `max_wr` WQEs (rounded up to a power of two) with `max_sge` data
    /// segments each (copyrpc posts zero-length SGEs: 1).
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<SrqDesc> {
        let wqe_cnt = max_wr.max(2).next_power_of_two();
        let stride = (16 + 16 * max_sge.max(1)).next_power_of_two().max(32);
        let (buf, _) = self.carve("srq", (wqe_cnt * stride) as usize, 4096)?;
        let (dbrec, _) = self.carve("srq dbrec", DBREC_BYTES, DBREC_BYTES)?;
        let mem = SrqMem {
            buf,
            wqe_cnt,
            stride,
            dbrec: dbrec.cast(),
        };
        let pd = self.pd;
        // SAFETY: as in `create_cq`.
        self.engine
            .with(|d| unsafe { d.create_srq(pd, mem) })
            .map_err(|e| sim_err("create_srq", self.region.name(), e))
    }

    /// Creates an RC QP and formats its inbound link (the peer sends on it).
    pub fn create_qp(&self, opts: &SimQpOptions) -> Result<SimQp> {
        // ctrl + raddr + the larger of the inline data or one data segment.
        let wqe = 32
            + (4 + opts.max_inline_data as usize)
                .next_multiple_of(16)
                .max(16);
        let bbs_per_wqe = wqe.div_ceil(64) as u32;
        let wqe_cnt = (opts.max_send_wr.max(1) * bbs_per_wqe).next_power_of_two();
        let (buf, _) = self.carve("sq", wqe_cnt as usize * 64, 4096)?;
        let (dbrec, _) = self.carve("sq dbrec", DBREC_BYTES, DBREC_BYTES)?;
        let (uar, _) = self.carve("uar", UAR_BYTES, 4096)?;
        let lb = link_bytes(self.opts.link_slots, self.opts.mtu);
        let (link, rx_offset) = self.carve("link", lb, 4096)?;
        let rx = LinkDesc {
            base: link,
            len: lb,
        };
        // SAFETY: `rx` is carved for this link alone; nobody maps it yet (its offset is
        // published only through `endpoint`, after formatting).
        unsafe { format_link(&rx, self.opts.link_slots, self.opts.mtu) }
            .map_err(|e| sim_err("format_link", self.region.name(), e))?;
        let pd = self.pd;
        let mut attr = QpAttr::new(opts.send_cq, opts.recv_cq, opts.srq);
        attr.rnr_retry = opts.rnr_retry;
        if let Some(t) = self.opts.ack_timeout_ns {
            attr.ack_timeout_ns = t;
        }
        if let Some(t) = self.opts.min_rnr_timer {
            attr.min_rnr_timer = t;
        }
        let mem = SqMem {
            buf,
            wqe_cnt,
            dbrec: dbrec.cast(),
            uar,
        };
        // SAFETY: as in `create_cq`.
        let desc = self
            .engine
            .with(|d| unsafe { d.create_qp(pd, attr, mem) })
            .map_err(|e| sim_err("create_qp", self.region.name(), e))?;
        Ok(SimQp {
            qpn: desc.qpn,
            desc,
            rx,
            rx_offset: rx_offset as u64,
        })
    }

    /// What the peer needs to connect to `qp`.
    pub fn endpoint(&self, qp: &SimQp) -> QpEndpoint {
        let mut gid = [0u8; 16];
        gid[0..4].copy_from_slice(&self.pid.to_le_bytes());
        gid[4..8].copy_from_slice(&self.instance.to_le_bytes());
        gid[8..16].copy_from_slice(&qp.rx_offset.to_le_bytes());
        QpEndpoint {
            qpn: qp.qpn,
            psn: 0,
            lid: 0,
            mtu: mtu_code(self.opts.mtu),
            flags: QpEndpoint::FLAG_SIM,
            gid,
            reserved: self.opts.link_slots.to_le_bytes(),
        }
    }

    /// Brings `qp` up towards `remote` (another fabric's [`endpoint`](Self::endpoint),
    /// in this process or another on this machine).
    pub fn connect(&self, qp: &SimQp, remote: &QpEndpoint) -> Result<()> {
        if remote.flags & QpEndpoint::FLAG_SIM == 0 {
            return Err(Error::SimConfig {
                reason: format!(
                    "qp {:#x}: the peer's endpoint (qpn {:#x}) is not a sim endpoint; both ranks must use the same --fabric",
                    qp.qpn, remote.qpn
                ),
            });
        }
        let pid = u32::from_le_bytes(remote.gid[0..4].try_into().expect("4 bytes"));
        let instance = u32::from_le_bytes(remote.gid[4..8].try_into().expect("4 bytes"));
        let offset = u64::from_le_bytes(remote.gid[8..16].try_into().expect("8 bytes"));
        let slots = u32::from_le_bytes(remote.reserved);
        if slots != self.opts.link_slots || remote.mtu != mtu_code(self.opts.mtu) {
            return Err(Error::SimConfig {
                reason: format!(
                    "qp {:#x}: the peer's links have {slots} slots at mtu code {}, ours {} at {}; use the same sim options on every rank",
                    qp.qpn,
                    remote.mtu,
                    self.opts.link_slots,
                    mtu_code(self.opts.mtu)
                ),
            });
        }
        let peer_region = self.peer_region(pid, instance)?;
        let lb = link_bytes(slots, self.opts.mtu);
        let in_bounds = usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_add(lb))
            .is_some_and(|end| end <= peer_region.len());
        if !in_bounds {
            return Err(Error::SimConfig {
                reason: format!(
                    "qp {:#x}: the peer's link at offset {offset} lies outside its region {}",
                    qp.qpn,
                    peer_region.name()
                ),
            });
        }
        let tx = LinkDesc {
            base: peer_region.as_ptr().wrapping_add(offset as usize),
            len: lb,
        };
        let peer = Peer {
            remote_qpn: remote.qpn,
            tx,
            rx: qp.rx,
            link: self.opts.link,
        };
        let me = qp.qpn;
        // SAFETY: `tx` lies in the peer's mapping, kept in `self.peers` until the fabric
        // (after its engine) drops; `rx` in our own region likewise. This device is the
        // only producer on `tx` (the peer's inbound link for this QP) and the only
        // consumer of `rx`; the peer's device the reverse.
        self.engine
            .with(|d| unsafe { d.connect(me, peer) })
            .map_err(|e| sim_err("connect", peer_region.name(), e))
    }

    /// [`connect`](Self::connect), recording `qos` as the QP's (see [`qos_of`](Self::qos_of)).
    pub fn connect_qos(&self, qp: &SimQp, remote: &QpEndpoint, qos: Qos) -> Result<()> {
        self.connect(qp, remote)?;
        self.qos
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(qp.qpn, qos);
        Ok(())
    }

    /// The QoS the QP numbered `qpn` was connected with through
    /// [`connect_qos`](Self::connect_qos); `None` before that.
    pub fn qos_of(&self, qpn: u32) -> Option<Qos> {
        self.qos
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&qpn)
            .copied()
    }

    fn peer_region(&self, pid: u32, instance: u32) -> Result<Arc<ShmRegion>> {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = peers.get(&(pid, instance)) {
            return Ok(Arc::clone(r));
        }
        // A fabric of this process (a loopback connection, or another NIC of a virtual
        // world): its own mapping, not a second one. A world of N NICs would otherwise
        // map N² regions (past vm.max_map_count at 256 ranks) and count every link page
        // twice in its resident set.
        if pid == self.pid {
            let own = own_regions().get(&instance).and_then(Weak::upgrade);
            if let Some(r) = own {
                peers.insert((pid, instance), Arc::clone(&r));
                return Ok(r);
            }
        }
        let name = format!("/{REGION_PREFIX}{pid}-{instance}");
        let r = Arc::new(ShmRegion::open(&name).map_err(|e| Error::SimPeer {
            region: name.clone(),
            source: Box::new(e),
        })?);
        peers.insert((pid, instance), Arc::clone(&r));
        Ok(r)
    }
}

/// The regions of this process's fabrics, by instance, while each fabric lives.
fn own_regions() -> MutexGuard<'static, HashMap<u32, Weak<ShmRegion>>> {
    static OWN: LazyLock<Mutex<HashMap<u32, Weak<ShmRegion>>>> = LazyLock::new(Default::default);
    OWN.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for SimFabric {
    fn drop(&mut self) {
        // Peers that connected to it keep the mapping alive through their own `Arc`.
        own_regions().remove(&self.instance);
    }
}

/// Region names are `/copyrpc-sim-<pid>-<instance>`. A rank that crashed (or was
/// killed by mpirun) cannot unlink its region: [`crate::shm::sweep_left_behind`] does.
pub(crate) const REGION_PREFIX: &str = "copyrpc-sim-";

/// `ibv_mtu` code of a byte MTU (256 → 1 … 4096 → 5).
fn mtu_code(mtu: u32) -> u8 {
    (mtu.trailing_zeros() - 7) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_codes() {
        assert_eq!(mtu_code(256), 1);
        assert_eq!(mtu_code(1024), 3);
        assert_eq!(mtu_code(4096), 5);
    }

    #[test]
    fn bad_options_are_refused_before_anything_is_created() {
        let e = SimFabric::open(&SimOptions {
            mtu: 1000,
            ..SimOptions::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("mtu 1000"), "{e}");
        let e = SimFabric::open(&SimOptions {
            link_slots: 3,
            ..SimOptions::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("link_slots 3"), "{e}");
    }

    #[test]
    fn regions_of_dead_processes_are_swept() {
        // pid_max is at most 2^22: this pid cannot be alive.
        let dead = format!("/{REGION_PREFIX}{}-7", (1u32 << 22) + 5);
        // Forgotten: left behind as a crashed rank would leave it.
        std::mem::forget(ShmRegion::create(&dead, 4096).unwrap());
        let path = format!("/dev/shm{dead}");
        // No "it exists" check here: a test running in parallel may open a fabric (and
        // sweep) between the create above and such a check. Created it was (unwrap);
        // after our own open it must be gone, whoever swept it.
        let f = SimFabric::open(&SimOptions::default()).unwrap();
        assert!(
            !std::path::Path::new(&path).exists(),
            "{dead} was not swept"
        );
        // Our own region is alive and stays.
        assert!(std::path::Path::new(&format!("/dev/shm{}", f.region_name())).exists());
    }

    #[test]
    fn an_object_dev_shm_cannot_hold_is_an_error_and_the_region_stays_usable() {
        // SAFETY: `statvfs` is plain data; zeroed is a valid value to be overwritten.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a valid out pointer.
        assert_eq!(unsafe { libc::statvfs(c"/dev/shm".as_ptr(), &mut st) }, 0);
        let size = (st.f_blocks as u64 * st.f_frsize as u64) as usize;
        assert!(
            size > 0,
            "/dev/shm reports no size limit; this test needs a sized tmpfs"
        );
        // A region larger than /dev/shm opens (it is sparse, nothing is claimed)...
        let f = SimFabric::open(&SimOptions {
            region_bytes: size + (2 << 30),
            ..SimOptions::default()
        })
        .unwrap();
        // ...an MR larger than /dev/shm is refused by name...
        match f.alloc_mr("huge", size + (1 << 30), SimAccess::ALL) {
            Err(Error::ShmNoRoom { name, source, .. }) => {
                assert_eq!(name, f.region_name());
                assert_eq!(source.raw_os_error(), Some(libc::ENOSPC));
            }
            other => panic!("{other:?}"),
        }
        // ...and carves nothing: a small one still fits and takes the region's start.
        let mr = f.alloc_mr("small", 4096, SimAccess::ALL).unwrap();
        assert_eq!(mr.as_ptr(), f.region.as_ptr());
    }

    #[test]
    fn region_exhaustion_is_an_error_naming_the_region() {
        let f = SimFabric::open(&SimOptions {
            region_bytes: 1 << 20,
            ..SimOptions::default()
        })
        .unwrap();
        let e = f.alloc_mr("big", 2 << 20, SimAccess::ALL).unwrap_err();
        let s = e.to_string();
        assert!(s.contains(f.region_name()) && s.contains("big"), "{s}");
    }
}
