//! Link queues: the wire between a QP and its peer, one direction each.
//!
//! A link direction is a single-producer single-consumer ring of fixed-size packet slots
//! in caller memory (so it can live in `/dev/shm` and join two processes). The producer
//! is the device that owns the sending QP, the consumer the device that owns the
//! receiving QP; in one process both may be the same device. Both request packets
//! (WRITE, SEND, READ request) and response packets (ACK/NAK, READ response) of a QP pair
//! travel in the same direction-queue, in order, which is the only ordering RC needs.
//!
//! ```text
//!   0    magic  u64 "MLX5LNK1"      written last by `format_link` (Release)
//!   8    slots  u32 (power of two)   12  mtu u32     16  slot_bytes u32
//!   64   tail   u32  producer count, free-running    R-LINK-TAIL / A-LINK-TAIL
//!   128  head   u32  consumer count, free-running    R-LINK-HEAD / A-LINK-HEAD
//!   192  cut    u32  fault flag: nonzero = packets are dropped
//!   256  slot 0: [packet header 64 B][payload ≤ mtu] ... slot i at 256 + i * slot_bytes
//! ```
//!
//! Indices are free-running `u32` (`tail - head` in `0 ..= slots`), masked on access.
//! Progress: both sides are wait-free (one load, one store per operation). If the peer
//! process dies the link simply stops moving: its packets are never consumed (the
//! requester's retries run out: TRANSPORT_RETRY_EXC_ERR) or never produced.

use core::ptr::NonNull;
use core::sync::atomic::Ordering;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::config::{LinkConfig, SimError};
use super::raw::Raw;

/// `b"MLX5LNK1"` as a little-endian `u64`.
pub const LINK_MAGIC: u64 = u64::from_le_bytes(*b"MLX5LNK1");
/// Bytes of the link header before slot 0.
pub const LINK_HEADER_BYTES: usize = 256;
/// Bytes of a packet header at the start of each slot.
pub const PKT_HDR_BYTES: usize = 64;

const OFF_MAGIC: usize = 0;
const OFF_SLOTS: usize = 8;
const OFF_MTU: usize = 12;
const OFF_SLOT_BYTES: usize = 16;
const OFF_TAIL: usize = 64;
const OFF_HEAD: usize = 128;
const OFF_CUT: usize = 192;

/// Bytes per slot for `mtu`: header plus payload, rounded up to 64.
pub const fn link_slot_bytes(mtu: u32) -> usize {
    (PKT_HDR_BYTES + mtu as usize).next_multiple_of(64)
}

/// Bytes of link memory for `slots` slots of `mtu` payload bytes.
pub const fn link_bytes(slots: u32, mtu: u32) -> usize {
    LINK_HEADER_BYTES + slots as usize * link_slot_bytes(mtu)
}

/// Memory of one link direction: a raw description, like the queue descriptions.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct LinkDesc {
    /// Start of the link memory, 64-byte aligned.
    pub base: *mut u8,
    /// Bytes available, at least [`link_bytes`] of its geometry.
    pub len: usize,
}

/// Writes an empty link header into `desc` (zero indices, no cut, then the magic with
/// Release, pairing with the Acquire of the magic when a device connects to it).
///
/// `slots` must be a power of two in `2 ..= 65 536`; `mtu` a multiple of 64 in
/// `64 ..= 65 536`; `desc.len >= link_bytes(slots, mtu)`.
///
/// # Safety
///
/// `desc.base` is valid for reads and writes of `desc.len` bytes and atomic accesses,
/// no device is using the link yet, and nothing else accesses the memory concurrently.
pub unsafe fn format_link(desc: &LinkDesc, slots: u32, mtu: u32) -> Result<(), SimError> {
    let Some(base) = NonNull::new(desc.base) else {
        return Err(SimError::NullPointer);
    };
    if !base.as_ptr().addr().is_multiple_of(64) {
        return Err(SimError::Misaligned);
    }
    if !slots.is_power_of_two()
        || !(2..=1 << 16).contains(&slots)
        || !mtu.is_multiple_of(64)
        || !(64..=1 << 16).contains(&mtu)
        || desc.len < link_bytes(slots, mtu)
    {
        return Err(SimError::BadSize);
    }
    // SAFETY: the caller guarantees `desc` describes valid, otherwise unused memory.
    let raw = unsafe { Raw::new(base, desc.len) };
    // Relaxed: nothing reads these before the Release store of the magic publishes them.
    raw.store_u64(OFF_MAGIC, 0, Ordering::Relaxed);
    raw.store_u32(OFF_SLOTS, slots, Ordering::Relaxed);
    raw.store_u32(OFF_MTU, mtu, Ordering::Relaxed);
    raw.store_u32(
        OFF_SLOT_BYTES,
        link_slot_bytes(mtu) as u32,
        Ordering::Relaxed,
    );
    raw.store_u32(OFF_TAIL, 0, Ordering::Relaxed);
    raw.store_u32(OFF_HEAD, 0, Ordering::Relaxed);
    raw.store_u32(OFF_CUT, 0, Ordering::Relaxed);
    // R-LINK-FMT (pairs with A-LINK-FMT in `Link::open`): publishes the geometry.
    raw.store_u64(OFF_MAGIC, LINK_MAGIC, Ordering::Release);
    Ok(())
}

/// Packet kinds.
pub(crate) mod op {
    pub const WRITE: u8 = 1;
    pub const SEND: u8 = 2;
    pub const READ_REQ: u8 = 3;
    pub const READ_RESP: u8 = 4;
    pub const ACK: u8 = 5;
}

/// Packet flags.
pub(crate) mod flag {
    /// First packet of a message.
    pub const FIRST: u8 = 1;
    /// Last packet of a message.
    pub const LAST: u8 = 2;
    /// Carries an immediate (last packet of WRITE_IMM / SEND_IMM).
    pub const IMM: u8 = 4;
    /// Solicited event requested.
    pub const SE: u8 = 8;
}

/// ACK syndromes (the AETH, simplified).
pub(crate) mod ack {
    pub const ACK: u8 = 0;
    pub const RNR_NAK: u8 = 1;
    pub const NAK_INV_REQ: u8 = 2;
    pub const NAK_REM_ACCESS: u8 = 3;
    pub const NAK_REM_OP: u8 = 4;
}

/// The 64-byte packet header (native endian: both ends are on one machine).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub(crate) struct PktHdr {
    /// Earliest `now` at which the receiver may process it.
    pub deliver_at: u64,
    /// Remote address (WRITE first/only, READ request).
    pub raddr: u64,
    /// Packet sequence number (u32, wrapping; IBA uses 24 bits).
    pub psn: u32,
    pub src_qpn: u32,
    pub dst_qpn: u32,
    pub rkey: u32,
    /// Message length (WRITE/SEND/READ request), or total READ length (READ response).
    pub msg_len: u32,
    /// Offset of this packet's payload within its message.
    pub offset: u32,
    pub payload_len: u32,
    pub imm: [u8; 4],
    pub op: u8,
    pub flags: u8,
    /// ACK packets: `ack::*`.
    pub syndrome: u8,
    /// RNR NAK: the responder's `min_rnr_timer` code.
    pub rnr_timer: u8,
    pub rsvd: [u8; 12],
}
const _: () = assert!(core::mem::size_of::<PktHdr>() == PKT_HDR_BYTES);

/// A validated link direction.
#[derive(Clone, Copy, Debug)]
struct Link {
    raw: Raw,
    slots: u32,
    mtu: u32,
    slot_bytes: usize,
}

impl Link {
    /// # Safety
    ///
    /// `desc` is valid link memory (as for [`format_link`]) for as long as the device
    /// holds the link, accessed by others only through the link protocol (one producer
    /// device, one consumer device).
    unsafe fn open(desc: &LinkDesc) -> Result<Self, SimError> {
        let Some(base) = NonNull::new(desc.base) else {
            return Err(SimError::NullPointer);
        };
        if !base.as_ptr().addr().is_multiple_of(64) {
            return Err(SimError::Misaligned);
        }
        if desc.len < LINK_HEADER_BYTES {
            return Err(SimError::BadLink);
        }
        // SAFETY: the caller guarantees `desc` is valid link memory.
        let raw = unsafe { Raw::new(base, desc.len) };
        // A-LINK-FMT (pairs with R-LINK-FMT in `format_link`): geometry after magic.
        if raw.load_u64(OFF_MAGIC, Ordering::Acquire) != LINK_MAGIC {
            return Err(SimError::BadLink);
        }
        let slots = raw.load_u32(OFF_SLOTS, Ordering::Relaxed);
        let mtu = raw.load_u32(OFF_MTU, Ordering::Relaxed);
        let slot_bytes = raw.load_u32(OFF_SLOT_BYTES, Ordering::Relaxed) as usize;
        if !slots.is_power_of_two()
            || mtu == 0
            || slot_bytes != link_slot_bytes(mtu)
            || desc.len < link_bytes(slots, mtu)
        {
            return Err(SimError::BadLink);
        }
        Ok(Self {
            raw,
            slots,
            mtu,
            slot_bytes,
        })
    }

    fn slot(&self, idx: u32) -> Raw {
        let i = (idx & (self.slots - 1)) as usize;
        self.raw
            .sub(LINK_HEADER_BYTES + i * self.slot_bytes, self.slot_bytes)
    }

    fn cut(&self) -> bool {
        // Relaxed: a fault knob; it publishes no data, and a late observation only
        // delivers or drops a packet more.
        self.raw.load_u32(OFF_CUT, Ordering::Relaxed) != 0
    }

    fn set_cut(&self, cut: bool) {
        // Relaxed: see `cut`.
        self.raw
            .store_u32(OFF_CUT, u32::from(cut), Ordering::Relaxed);
    }
}

/// A device's NIC-wide packet pacing ([`DeviceConfig::nic_packet_ns`](super::DeviceConfig)):
/// when its send pipeline takes the next packet, on the `now` clock.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Pace {
    /// The least time between two packets, ns (0: no limit).
    pub gap: u64,
    /// When the pipeline is free again.
    pub free: u64,
}

/// The sending end of a link direction, with the timing of the direction.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LinkTx {
    link: Link,
    /// Producer count; this side is the only writer of the shared tail.
    tail: u32,
    /// Last consumer count seen.
    head_cache: u32,
    /// When this QP may start its next data packet (`packet_ns` spacing).
    qp_free: u64,
    /// When it may start its next ACK or NAK (`ack_ns` spacing).
    ack_free: u64,
    /// When the wire is free again (bandwidth model), on the `now` clock.
    busy_until: u64,
    pub(crate) cfg: LinkConfig,
}

impl LinkTx {
    /// # Safety
    ///
    /// As [`Link::open`]; and this device is the only producer on the link.
    pub(crate) unsafe fn open(desc: &LinkDesc, cfg: LinkConfig) -> Result<Self, SimError> {
        // SAFETY: forwarded contract.
        let link = unsafe { Link::open(desc) }?;
        // Relaxed: this side is the only writer of `tail`; A-LINK-FMT ordered the format.
        let tail = link.raw.load_u32(OFF_TAIL, Ordering::Relaxed);
        let head_cache = link.raw.load_u32(OFF_HEAD, Ordering::Acquire);
        Ok(Self {
            link,
            tail,
            head_cache,
            qp_free: 0,
            ack_free: 0,
            busy_until: 0,
            cfg,
        })
    }

    pub(crate) fn mtu(&self) -> u32 {
        self.link.mtu
    }

    /// Free slots (refreshing the consumer index when the cached one says full).
    pub(crate) fn room(&mut self) -> u32 {
        let used = self.tail.wrapping_sub(self.head_cache);
        if used < self.link.slots {
            return self.link.slots - used;
        }
        // A-LINK-HEAD (pairs with R-LINK-HEAD in `LinkRx::pop`): the consumer has
        // finished reading every slot it released.
        self.head_cache = self.link.raw.load_u32(OFF_HEAD, Ordering::Acquire);
        self.link.slots - self.tail.wrapping_sub(self.head_cache)
    }

    /// The payload area of the next slot (`mtu` bytes). Only valid to fill when
    /// [`room`](Self::room) is nonzero; published by [`commit`](Self::commit).
    pub(crate) fn payload(&self) -> Raw {
        self.link
            .slot(self.tail)
            .sub(PKT_HDR_BYTES, self.link.mtu as usize)
    }

    /// Whether the link is cut (packets are dropped instead of sent).
    pub(crate) fn is_cut(&self) -> bool {
        self.link.cut()
    }

    pub(crate) fn set_cut(&self, cut: bool) {
        self.link.set_cut(cut);
    }

    /// Stamps the delivery time and publishes the next slot with header `hdr` (its
    /// payload already written through [`payload`](Self::payload)). Requires room.
    /// Returns the delivery time, or `None` if the link is cut and the packet dropped.
    ///
    /// The packet takes its turn in the device's pipeline (`nic`, in the order the
    /// device sends), then waits for its QP's spacing (data packets and acknowledgements
    /// each their own: a NIC builds ACKs in its receive pipeline, apart from the send
    /// queue's work), then for the wire (its bytes at the bandwidth, shared by both);
    /// it arrives the link's latency after its last byte. The NIC-wide turn comes first
    /// so that a QP whose own spacing reaches far ahead does not hold the pipeline for
    /// the other QPs meanwhile.
    pub(crate) fn commit(&mut self, hdr: &mut PktHdr, now: u64, nic: &mut Pace) -> Option<u64> {
        debug_assert!(self.tail.wrapping_sub(self.head_cache) < self.link.slots);
        let bytes = PKT_HDR_BYTES as u64 + u64::from(hdr.payload_len);
        let admitted = if nic.gap == 0 {
            now
        } else {
            let t = now.max(nic.free);
            nic.free = t.saturating_add(nic.gap);
            t
        };
        let (free, spacing) = if hdr.op == op::ACK {
            (&mut self.ack_free, self.cfg.ack_ns)
        } else {
            (&mut self.qp_free, self.cfg.packet_ns)
        };
        let start = admitted.max(*free);
        *free = start.saturating_add(spacing);
        let wire = match self.cfg.bandwidth_bytes_per_s {
            0 => 0,
            bw => (u128::from(bytes) * 1_000_000_000 / u128::from(bw)) as u64,
        };
        self.busy_until = self.busy_until.max(start).saturating_add(wire);
        hdr.deliver_at = self.busy_until.saturating_add(self.cfg.latency_ns);
        if self.is_cut() {
            return None;
        }
        self.link.slot(self.tail).write(0, hdr.as_bytes());
        self.tail = self.tail.wrapping_add(1);
        // R-LINK-TAIL (pairs with A-LINK-TAIL in `LinkRx::peek`): publishes the slot's
        // header and payload.
        self.link
            .raw
            .store_u32(OFF_TAIL, self.tail, Ordering::Release);
        Some(hdr.deliver_at)
    }
}

/// The receiving end of a link direction.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LinkRx {
    link: Link,
    /// Consumer count; this side is the only writer of the shared head.
    head: u32,
    /// Last producer count seen.
    tail_cache: u32,
}

impl LinkRx {
    /// # Safety
    ///
    /// As [`Link::open`]; and this device is the only consumer on the link.
    pub(crate) unsafe fn open(desc: &LinkDesc) -> Result<Self, SimError> {
        // SAFETY: forwarded contract.
        let link = unsafe { Link::open(desc) }?;
        // Relaxed: this side is the only writer of `head`.
        let head = link.raw.load_u32(OFF_HEAD, Ordering::Relaxed);
        Ok(Self {
            link,
            head,
            tail_cache: head,
        })
    }

    pub(crate) fn mtu(&self) -> u32 {
        self.link.mtu
    }

    /// The header and payload of the oldest packet, if any.
    pub(crate) fn peek(&mut self) -> Option<(PktHdr, Raw)> {
        if self.head == self.tail_cache {
            // A-LINK-TAIL (pairs with R-LINK-TAIL in `LinkTx::commit`): the slot's
            // header and payload are visible.
            self.tail_cache = self.link.raw.load_u32(OFF_TAIL, Ordering::Acquire);
            if self.head == self.tail_cache {
                return None;
            }
        }
        let slot = self.link.slot(self.head);
        let mut b = [0u8; PKT_HDR_BYTES];
        slot.read(0, &mut b);
        let hdr: PktHdr = zerocopy::transmute!(b);
        let len = (hdr.payload_len as usize).min(self.link.mtu as usize);
        Some((hdr, slot.sub(PKT_HDR_BYTES, len)))
    }

    /// Releases the oldest packet's slot to the producer.
    pub(crate) fn pop(&mut self) {
        debug_assert_ne!(self.head, self.tail_cache);
        self.head = self.head.wrapping_add(1);
        // R-LINK-HEAD (pairs with A-LINK-HEAD in `LinkTx::room`): every read of the
        // released slot happens before the producer rewrites it.
        self.link
            .raw
            .store_u32(OFF_HEAD, self.head, Ordering::Release);
    }

    /// Whether the link is cut (arriving packets are dropped).
    pub(crate) fn is_cut(&self) -> bool {
        self.link.cut()
    }

    pub(crate) fn set_cut(&self, cut: bool) {
        self.link.set_cut(cut);
    }
}
