//! Value types of the device model: attributes, memory descriptions, errors, events.

use core::fmt;

use crate::layout::Syndrome;

bitflags::bitflags! {
    /// Access rights of a memory region (`IBV_ACCESS_*`), and the remote operations a
    /// QP accepts. Combine with `|`; a `bitflags` set.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct Access: u32 {
        /// The device may write the region for local operations (READ responses,
        /// receive scatter). `IBV_ACCESS_LOCAL_WRITE`.
        const LOCAL_WRITE = 1;
        /// Remote RDMA WRITE / WRITE_IMM may target it. `IBV_ACCESS_REMOTE_WRITE`.
        const REMOTE_WRITE = 2;
        /// Remote RDMA READ may read it. `IBV_ACCESS_REMOTE_READ`.
        const REMOTE_READ = 4;
        /// Everything the model knows.
        const ALL = 7;
    }
}

impl Access {
    /// No access beyond local read.
    pub const NONE: Self = Self::empty();
}

/// A protection domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pd(pub(crate) u32);

impl Pd {
    /// The PD number.
    pub const fn number(self) -> u32 {
        self.0
    }
}

/// Keys of a registered region (both equal, as for a verbs MR).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MrKeys {
    /// Local key, for data segments of this device's WQEs.
    pub lkey: u32,
    /// Remote key, for a peer's RDMA READ/WRITE.
    pub rkey: u32,
    /// The region's address as the keys see it (`iova`): a WQE names byte `k` of the
    /// region as `va + k`.
    pub va: u64,
}

/// How a QP in error reports the WQEs it flushes (docs/spec/mlx5.md#qp-errors-and-flush).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FlushMode {
    /// One WR_FLUSH_ERR CQE per outstanding WQE, signaled or not (what IBA requires and
    /// the kernel's software flush does). The default.
    #[default]
    EveryWqe,
    /// Flush CQEs only for signaled WQEs; unsignaled ones are covered by the next.
    SignaledOnly,
}

/// Device-wide settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceConfig {
    /// QP numbers are `qpn_base + slot`; give each device on a fabric its own base so
    /// QPNs are unique across processes (and traces say whose QP it is). `qpn_base +
    /// capacity` must fit in 24 bits.
    pub qpn_base: u32,
    /// CQ numbers are `cqn_base + slot`, SRQ numbers `srqn_base + slot`.
    pub cqn_base: u32,
    /// See `cqn_base`.
    pub srqn_base: u32,
    /// Flush CQE policy.
    pub flush: FlushMode,
    /// Vendor syndrome written in flush CQEs (firmware-specific on hardware; 0xf9 is a
    /// value seen there). Never depend on it.
    pub flush_vendor_syndrome: u8,
    /// Packets each QP may receive, and send, per [`step`](super::Device::step): the
    /// bound on work per call.
    pub budget: u32,
    /// Least time between two packets this device sends, over all its QPs, ns: the
    /// NIC-wide packet rate (a ConnectX's message rate), or one DC initiator shared by
    /// every peer. Packets take their turn in the order the device sends them, before
    /// their QP's own spacing ([`LinkConfig::packet_ns`]). 0 = no limit.
    pub nic_packet_ns: u64,
}

impl DeviceConfig {
    /// QPNs from 0x100, CQNs from 0x10, SRQNs from 0x20, per-WQE flushes, vendor
    /// syndrome 0xf9, 32 packets per QP per step, no NIC-wide packet limit.
    pub const DEFAULT: Self = Self {
        qpn_base: 0x100,
        cqn_base: 0x10,
        srqn_base: 0x20,
        flush: FlushMode::EveryWqe,
        flush_vendor_syndrome: 0xf9,
        budget: 32,
        nic_packet_ns: 0,
    };
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Attributes of an RC QP (the parts of `ibv_qp_init_attr` and the RTR/RTS
/// `ibv_qp_attr` the model uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAttr {
    /// CQ of requester completions (a `cqn` from [`create_cq`](super::Device::create_cq)).
    pub send_cq: u32,
    /// CQ of responder completions.
    pub recv_cq: u32,
    /// The SRQ incoming SEND / WRITE_IMM consume; `None`: such messages are rejected
    /// (the model has no per-QP RQ).
    pub srq: Option<u32>,
    /// Remote operations the QP accepts (`qp_access_flags`: REMOTE_WRITE, REMOTE_READ);
    /// a request it does not accept is NAKed "invalid request".
    pub access: Access,
    /// `min_rnr_timer` (5-bit IBA encoding, docs/spec/mlx5.md#write-with-immediate): how
    /// long the peer waits after this QP answers RNR.
    pub min_rnr_timer: u8,
    /// `rnr_retry` (0..=7; 7 = retry forever): RNR NAKs this QP's requester accepts per
    /// message before failing with RNR_RETRY_EXC_ERR.
    pub rnr_retry: u8,
    /// `retry_cnt` (0..=7): acknowledgement timeouts tolerated before
    /// TRANSPORT_RETRY_EXC_ERR.
    pub retry_cnt: u8,
    /// Acknowledgement timeout in ns (the model's `local_ack_timeout`), on the `now`
    /// clock of [`step`](super::Device::step).
    pub ack_timeout_ns: u64,
    /// Outstanding RDMA READs (`max_rd_atomic`), 1..=16.
    pub max_rd_atomic: u8,
    /// CQE v1 user index: when `Some`, every CQE of this QP carries it in `srqn_uidx`;
    /// when `None` (CQE v0), responder CQEs of an SRQ carry the SRQN and requester CQEs 0.
    pub uidx: Option<u32>,
}

impl QpAttr {
    /// Attributes for a QP on `send_cq`/`recv_cq`/`srq` accepting remote READ and WRITE,
    /// with RNR timer 0.01 ms (encoding 1), infinite RNR retry, 7 transport retries, a
    /// 500 ms ack timeout and 16 outstanding READs.
    pub const fn new(send_cq: u32, recv_cq: u32, srq: Option<u32>) -> Self {
        Self {
            send_cq,
            recv_cq,
            srq,
            access: Access::REMOTE_WRITE.union(Access::REMOTE_READ),
            min_rnr_timer: 1,
            rnr_retry: 7,
            retry_cnt: 7,
            ack_timeout_ns: 500_000_000,
            max_rd_atomic: 16,
            uidx: None,
        }
    }
}

/// One-way timing of a link direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkConfig {
    /// Added to every packet's delivery time, in ns.
    pub latency_ns: u64,
    /// Serialisation rate in bytes per second (packet header + payload); 0 = unlimited.
    pub bandwidth_bytes_per_s: u64,
    /// Least time between the starts of two data packets (WRITE, SEND, READ request or
    /// response) this QP sends: its packet rate, the sending NIC's per-QP work (WQE
    /// fetch and parse, header build), which a NIC does one packet after another within
    /// a QP. A rate, not a delay: a packet of an idle QP leaves at once. 0 = none.
    pub packet_ns: u64,
    /// Least time between two ACKs or NAKs this QP's responder sends. A ConnectX
    /// builds acknowledgements in its receive pipeline, not from send-queue WQEs, so
    /// they have their own spacing: an ACK neither waits for the QP's data spacing nor
    /// holds it (when ACKs cost `packet_ns` on the data's own spacing, every answer on
    /// the reverse direction queued behind its request's ACK). They share the wire's
    /// bandwidth. 0 = none.
    pub ack_ns: u64,
}

/// Queue memory of a send queue, for [`create_qp`](super::Device::create_qp).
#[derive(Clone, Copy, Debug)]
pub struct SqMem {
    /// `wqe_cnt * 64` bytes, 64-byte aligned.
    pub buf: *mut u8,
    /// WQEBBs, a power of two in `1 ..= 65 536`.
    pub wqe_cnt: u32,
    /// The QP doorbell record: two 32-bit words, 8-byte aligned. Zeroed by the model.
    pub dbrec: *mut u32,
    /// A 4 KiB UAR page, or null. When given, the description's BlueFlame register is
    /// `uar + 0x800` with 256-byte buffers, so the driver exercises its BlueFlame path.
    /// The model never reads it: it always executes WQEs from SQ memory
    /// (docs/spec/mlx5.md#doorbell).
    pub uar: *mut u8,
}

/// Queue memory of a CQ, for [`create_cq`](super::Device::create_cq).
#[derive(Clone, Copy, Debug)]
pub struct CqMem {
    /// `cqe_cnt * cqe_size` bytes, 64-byte aligned.
    pub buf: *mut u8,
    /// Entries, a power of two in `2 ..= 2^22`.
    pub cqe_cnt: u32,
    /// 64 or 128.
    pub cqe_size: u32,
    /// The CQ doorbell record: two 32-bit words, 8-byte aligned. Zeroed by the model.
    pub dbrec: *mut u32,
}

/// Queue memory of an SRQ, for [`create_srq`](super::Device::create_srq).
#[derive(Clone, Copy, Debug)]
pub struct SrqMem {
    /// `wqe_cnt * stride` bytes, 64-byte aligned (16 would do; 64 is what verbs gives).
    pub buf: *mut u8,
    /// WQEs in the free list, a power of two in `2 ..= 65 536`.
    pub wqe_cnt: u32,
    /// Bytes per WQE, a power of two in `32 ..= 512` (16-byte next segment, then up to
    /// 31 data segments).
    pub stride: u32,
    /// The SRQ doorbell record: one 32-bit word, 4-byte aligned. Zeroed by the model.
    pub dbrec: *mut u32,
}

/// QP states the model distinguishes (`enum mlx5_qp_state`; INIT/RTR are folded into
/// the connect call).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Created, not connected: doorbells are not acted on.
    Reset,
    /// Connected: the SQ executes, incoming requests are served.
    Rts,
    /// Error: every outstanding and newly rung WQE is flushed; incoming packets dropped.
    Err,
}

/// Why a model call failed. Nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SimError {
    /// The object table of this kind is full (the device's const capacity).
    TableFull,
    /// No such QP / CQ / SRQ / MR / PD.
    NoSuchObject,
    /// A pointer is null.
    NullPointer,
    /// A pointer is not aligned as required.
    Misaligned,
    /// A size or count is out of range (not a power of two, too large, ...).
    BadSize,
    /// The QP is not in a state that allows the call (e.g. connecting twice).
    BadState,
    /// A link queue's memory is not a formatted link (bad magic), or its geometry does
    /// not match the length or the other direction.
    BadLink,
    /// A numeric attribute is out of range (`rnr_retry > 7`, `max_rd_atomic == 0`, ...).
    BadAttr,
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::TableFull => "object table full",
            Self::NoSuchObject => "no such object",
            Self::NullPointer => "null pointer",
            Self::Misaligned => "misaligned pointer",
            Self::BadSize => "size or count out of range",
            Self::BadState => "QP state does not allow this",
            Self::BadLink => "link memory is not a matching formatted link",
            Self::BadAttr => "attribute out of range",
        })
    }
}

/// An asynchronous event (`ibv_get_async_event`), in [`poll_event`](super::Device::poll_event).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// A CQ overran: a CQE had to be written while `cqe_cnt` were unconsumed. The CQE was
    /// not written, and no later CQE will be (`MLX5_EVENT_TYPE_CQ_ERROR`).
    CqError {
        /// The CQ.
        cqn: u32,
    },
    /// A QP went to the error state after a requester error (`WQ_CATAS_ERROR` /
    /// `WQ_INVAL_REQ_ERROR` family), carrying the syndrome of its error CQE (or
    /// WR_FLUSH_ERR when it was failed by [`fail_qp`](super::Device::fail_qp)).
    QpFatal {
        /// The QP.
        qpn: u32,
        /// Why.
        syndrome: Syndrome,
    },
    /// The responder side of a QP saw a remote access violation and went to error
    /// (`WQ_ACCESS_ERROR`).
    QpAccessErr {
        /// The QP.
        qpn: u32,
    },
    /// A QP attached to an SRQ entered the error state: no further SRQ WQE will be
    /// consumed for it (`SRQ_LAST_WQE`).
    LastWqeReached {
        /// The QP.
        qpn: u32,
    },
}

/// What one [`step`](super::Device::step) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepStats {
    /// WQEs fetched and parsed (including flushed ones).
    pub wqes: u32,
    /// Packets pushed into link queues.
    pub packets_sent: u32,
    /// Packets taken from link queues.
    pub packets_received: u32,
    /// CQEs written.
    pub cqes: u32,
    /// RNR NAKs answered because the SRQ had no WQE posted (each stalls the sender's QP
    /// for its `min_rnr_timer`).
    pub rnr_naks: u32,
}

impl StepStats {
    /// Whether anything happened (an engine may yield the CPU when not).
    pub const fn progressed(&self) -> bool {
        self.wqes + self.packets_sent + self.packets_received + self.cqes != 0
    }
}

/// The IBA `min_rnr_timer` encoding (5 bits) in ns (docs/spec/mlx5.md#write-with-immediate;
/// 0 = 655.36 ms).
pub const fn rnr_timer_ns(code: u8) -> u64 {
    const US: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760,
        327_680, 491_520,
    ];
    US[(code & 31) as usize] as u64 * 1000
}
