//! The delegationrpc region: `#[repr(C)]` structs at the offsets of
//! docs/spec/deleg.md#layout, and
//! [`DelegRegion`], the set of references the protocol works over.
//!
//! Unsafe code here (module opt-out of the crate's `deny(unsafe_code)`): casting a raw
//! shared mapping to references of these structs (`DelegRegion::init` / `DelegRegion::attach`),
//! reading and writing payload cells whose exclusive access the protocol establishes,
//! and the `Sync` impls of the slot structs that hold those cells.
#![allow(unsafe_code)]

use core::marker::PhantomData;
use core::mem::{align_of, size_of};

#[cfg(not(loom))]
use crate::shm::init_region;
use crate::shm::{ClientInfo, ClientState, Ids, LayoutError, Owner, Payload};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering, UnsafeCell};

/// The magic `0x444C_4752_5043_5631` (`"DLGRPCV1"` as a big-endian number).
pub const MAGIC: u64 = 0x444C_4752_5043_5631;
/// Layout version in the header (2: owner tokens next to the owner ids, header @48 and
/// client entry @+16, so a reused pid is not taken for the process that recorded it).
pub const VERSION: u32 = 2;
/// Bytes of the header.
pub const HEADER_SIZE: usize = 128;
/// Offset of the ring control block (head at +0, tail at +64).
pub const RING_CONTROL_OFFSET: usize = 128;
/// Offset of the first request slot.
pub const RING_OFFSET: usize = 256;
/// Bytes of one client-table entry (an addition after the response area; see module docs):
/// two 64 B lines, so the client's per-call `claim_pos` store does not invalidate the line
/// whose `state` the server reads on every `recv` and `reply`.
pub const CLIENT_ENTRY_SIZE: usize = 128;
/// Largest `max_clients` a region may declare.
pub const MAX_CLIENTS: u32 = 1 << 16;
/// Largest `ring_depth` / `resp_depth` a region may declare.
pub const MAX_DEPTH: u32 = 1 << 20;

/// The header (docs/spec/deleg.md#layout), 128 bytes at offset 0. Every field is an atomic
/// so that a process attaching while the creator initialises reads a zero magic and
/// refuses, rather than racing on plain fields; the creator stores `magic` last with
/// `Release`.
#[repr(C)]
#[derive(Debug)]
pub struct Header {
    /// @0 `MAGIC`, stored last by the creator.
    pub magic: AtomicU64,
    /// @8 `VERSION`.
    pub version: AtomicU32,
    /// @12 number of client ids.
    pub max_clients: AtomicU32,
    /// @16 request ring slots, a power of two.
    pub ring_depth: AtomicU32,
    /// @20 response slots per client, a power of two.
    pub resp_depth: AtomicU32,
    /// @24 high-water mark of client ids ever handed out (ids below it may be free again).
    pub next_client_id: AtomicU32,
    /// @28 true while the server runs.
    pub server_alive: AtomicBool,
    _pad29: [u8; 3],
    /// @32 (addition) opaque owner tag of the server, written by the host (its pid).
    pub server_owner: AtomicU32,
    /// @36 (addition) bumped by every client that closes; the server rescans the table.
    pub retire_requests: AtomicU32,
    /// @40 (addition) `size_of::<Req>()`, so a peer built with another type is refused.
    pub req_size: AtomicU32,
    /// @44 (addition) `size_of::<Resp>()`.
    pub resp_size: AtomicU32,
    /// @48 (addition, version 2) the server's owner token (the host's process start time),
    /// which tells the process that recorded `server_owner` from a later one with its pid.
    pub server_owner_token: AtomicU64,
    _pad56: [u8; 72],
}

/// The ring control, 128 bytes at offset 128: `head` and `tail` on separate lines.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct RingControl {
    /// @128 next position to claim; clients `fetch_add` it. Free-running `u64`; the slot
    /// is `pos & (ring_depth - 1)`.
    pub head: AtomicU64,
    _pad_head: [u8; 56],
    /// @192 first position not yet released by the server; in `cursor_published..=head`.
    pub tail: AtomicU64,
    _pad_tail: [u8; 56],
}

/// Slot state: the claim word of a request slot (addition at +12).
///
/// `lap << 1 | writing` where `lap = (pos / ring_depth) mod 2^31`. `free(pos)` says "the
/// slot is free for position `pos`"; `writing(pos)` says "the claimer of `pos` owns it and
/// is writing". Only the owner of `pos` moves it `free(pos) -> writing(pos)`; the server
/// (after consuming or abandoning `pos`) and a cancelling claimer move it to
/// `free(pos + ring_depth)`. Both transitions that may race are CAS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim;

impl Claim {
    #[inline]
    pub(crate) fn free(pos: u64, depth_log2: u32) -> u32 {
        ((pos >> depth_log2) as u32) << 1
    }
    #[inline]
    pub(crate) fn writing(pos: u64, depth_log2: u32) -> u32 {
        Self::free(pos, depth_log2) | 1
    }
}

/// A request slot: `committed` @+0, `client_id` @+4, `resp_slot_idx` @+8,
/// payload @+16; size `align_up(16 + size_of::<Req>(), 64)`.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct ReqSlot<Req> {
    /// @+0 0 = empty, 1 = committed.
    pub committed: AtomicU8,
    _pad1: [u8; 3],
    client_id: UnsafeCell<u32>,
    resp_slot_idx: UnsafeCell<u32>,
    /// @+12 (addition, in the first layout's padding) the claim word, see `Claim`.
    pub claim: AtomicU32,
    payload: UnsafeCell<Req>,
}

/// A response slot: `valid` @+0, payload @+8; size `align_up(8 + size_of::<Resp>(), 64)`.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct RespSlot<Resp> {
    /// @+0 0 = no response, 1 = response present.
    pub valid: AtomicU8,
    /// @+1 (addition, in the first layout's padding) 1 while the owning client has a call
    /// out on this slot. Written and read only by that client.
    pub pending: AtomicU8,
    _pad2: [u8; 2],
    /// @+4 (addition, in the first layout's padding) calls answered on this slot (wrapping): a
    /// request taken gets the next number in its reply token, and only that number is
    /// answered. Written (by the reply, on the line it writes anyway) and read only by
    /// the server, so that a second reply to a call, which `valid` alone cannot tell
    /// once the client has read the first, is refused instead of answering the slot's
    /// next call.
    pub served: AtomicU32,
    payload: UnsafeCell<Resp>,
}

/// Client-table entry (addition after the response area), 128 bytes per client id: a
/// read-mostly line (state, owner, server-private drain mark) and the client's hot line.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct ClientEntry {
    /// @+0 `epoch << 2 | state` (`ClientState`); epoch counts registrations of this id.
    pub state: AtomicU32,
    /// @+4 opaque owner tag given at connect (the host stores the client's pid).
    pub owner: AtomicU32,
    /// @+8 server-private: exclusive end of the positions to drain before the id is
    /// freed, or `u64::MAX` when not retiring.
    pub drain_until: AtomicU64,
    /// @+16 (version 2) the owner's token (the host's process start time), stored before
    /// `owner` (R7).
    pub owner_token: AtomicU64,
    _pad0: [u8; 40],
    /// @+64 `pos + 1` of the client's latest claimed ring position, 0 before any; stored
    /// on every call, read by the server only for an evicted client.
    pub claim_pos: AtomicU64,
    _pad1: [u8; 56],
}

#[cfg(not(loom))]
mod asserts {
    use super::*;
    use core::mem::offset_of;
    const _: () = assert!(size_of::<Header>() == 128);
    const _: () = assert!(offset_of!(Header, magic) == 0);
    const _: () = assert!(offset_of!(Header, version) == 8);
    const _: () = assert!(offset_of!(Header, max_clients) == 12);
    const _: () = assert!(offset_of!(Header, ring_depth) == 16);
    const _: () = assert!(offset_of!(Header, resp_depth) == 20);
    const _: () = assert!(offset_of!(Header, next_client_id) == 24);
    const _: () = assert!(offset_of!(Header, server_alive) == 28);
    const _: () = assert!(offset_of!(Header, server_owner) == 32);
    const _: () = assert!(offset_of!(Header, retire_requests) == 36);
    const _: () = assert!(offset_of!(Header, req_size) == 40);
    const _: () = assert!(offset_of!(Header, resp_size) == 44);
    const _: () = assert!(offset_of!(Header, server_owner_token) == 48);
    const _: () = assert!(size_of::<RingControl>() == 128);
    const _: () = assert!(offset_of!(RingControl, head) == 0);
    const _: () = assert!(offset_of!(RingControl, tail) == 64);
    const _: () = assert!(size_of::<ReqSlot<u64>>() == 64);
    const _: () = assert!(size_of::<ReqSlot<[u8; 48]>>() == 64);
    const _: () = assert!(size_of::<ReqSlot<[u8; 49]>>() == 128);
    const _: () = assert!(offset_of!(ReqSlot<u64>, committed) == 0);
    const _: () = assert!(offset_of!(ReqSlot<u64>, client_id) == 4);
    const _: () = assert!(offset_of!(ReqSlot<u64>, resp_slot_idx) == 8);
    const _: () = assert!(offset_of!(ReqSlot<u64>, claim) == 12);
    const _: () = assert!(offset_of!(ReqSlot<u64>, payload) == 16);
    const _: () = assert!(size_of::<RespSlot<[u8; 56]>>() == 64);
    const _: () = assert!(size_of::<RespSlot<[u8; 57]>>() == 128);
    const _: () = assert!(offset_of!(RespSlot<u64>, valid) == 0);
    const _: () = assert!(offset_of!(RespSlot<u64>, pending) == 1);
    const _: () = assert!(offset_of!(RespSlot<u64>, served) == 4);
    const _: () = assert!(offset_of!(RespSlot<u64>, payload) == 8);
    const _: () = assert!(size_of::<ClientEntry>() == CLIENT_ENTRY_SIZE);
    const _: () = assert!(offset_of!(ClientEntry, owner) == 4);
    const _: () = assert!(offset_of!(ClientEntry, drain_until) == 8);
    const _: () = assert!(offset_of!(ClientEntry, owner_token) == 16);
    const _: () = assert!(offset_of!(ClientEntry, claim_pos) == 64);
}

// SAFETY: the cells are accessed only under the slot protocol: the claimer of a position
// writes them between winning the claim CAS and its `committed` Release store, the server
// reads them after its `committed` Acquire load and before releasing the slot. The payload
// types are plain data (`Payload: Send`), so moving values between threads is sound.
unsafe impl<Req: Send> Sync for ReqSlot<Req> {}
// SAFETY: the server writes the payload only while `valid == 0` for a call the owning
// client has published and not yet consumed; the client reads it after its `valid`
// Acquire load. See `Server::reply` and `Client::poll`.
unsafe impl<Resp: Send> Sync for RespSlot<Resp> {}

const fn align_up(x: usize, a: usize) -> usize {
    (x + a - 1) & !(a - 1)
}

/// Bytes of one request slot for `Req` (`align_up(16 + size_of::<Req>(), 64)`,
/// docs/spec/deleg.md#layout).
pub const fn req_slot_size<Req>() -> usize {
    align_up(16 + size_of::<Req>(), 64)
}

/// Bytes of one response slot for `Resp` (`align_up(8 + size_of::<Resp>(), 64)`).
pub const fn resp_slot_size<Resp>() -> usize {
    align_up(8 + size_of::<Resp>(), 64)
}

/// The shape of a region: what the creator chooses and the header records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Client ids, `1..=MAX_CLIENTS`.
    pub max_clients: u32,
    /// Request ring slots, a power of two in `2..=MAX_DEPTH`.
    pub ring_depth: u32,
    /// Response slots (calls in flight) per client, a power of two in `1..=MAX_DEPTH`.
    pub resp_depth: u32,
}

/// Byte offsets of a region's parts, computed from a [`Config`] and the payload sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    /// Size of one request slot.
    pub req_slot_size: usize,
    /// Size of one response slot.
    pub resp_slot_size: usize,
    /// Offset of response slot 0 of client 0 (right after the request ring).
    pub resp_area_offset: usize,
    /// Offset of the client table (right after the response area; an addition).
    pub client_table_offset: usize,
    /// Total bytes of the region.
    pub region_len: usize,
}

impl Config {
    /// Checks ranges: counts non-zero and bounded, depths powers of two.
    pub const fn validate(&self) -> Result<(), LayoutError> {
        let ok = self.max_clients >= 1
            && self.max_clients <= MAX_CLIENTS
            && self.ring_depth.is_power_of_two()
            && self.ring_depth >= 2
            && self.ring_depth <= MAX_DEPTH
            && self.resp_depth.is_power_of_two()
            && self.resp_depth <= MAX_DEPTH;
        if ok {
            Ok(())
        } else {
            Err(LayoutError::BadConfig)
        }
    }

    /// The region's offsets for payload types `Req` / `Resp`, or `BadConfig` when the
    /// config is out of range or the size overflows `usize`.
    pub const fn offsets<Req, Resp>(&self) -> Result<Offsets, LayoutError> {
        if let Err(e) = self.validate() {
            return Err(e);
        }
        let req_slot_size = req_slot_size::<Req>();
        let resp_slot_size = resp_slot_size::<Resp>();
        let Some(ring_bytes) = (self.ring_depth as usize).checked_mul(req_slot_size) else {
            return Err(LayoutError::BadConfig);
        };
        let Some(resp_area_offset) = RING_OFFSET.checked_add(ring_bytes) else {
            return Err(LayoutError::BadConfig);
        };
        let Some(nresp) = (self.max_clients as usize).checked_mul(self.resp_depth as usize) else {
            return Err(LayoutError::BadConfig);
        };
        let Some(resp_bytes) = nresp.checked_mul(resp_slot_size) else {
            return Err(LayoutError::BadConfig);
        };
        let Some(client_table_offset) = resp_area_offset.checked_add(resp_bytes) else {
            return Err(LayoutError::BadConfig);
        };
        let Some(table) = (self.max_clients as usize).checked_mul(CLIENT_ENTRY_SIZE) else {
            return Err(LayoutError::BadConfig);
        };
        let Some(region_len) = client_table_offset.checked_add(table) else {
            return Err(LayoutError::BadConfig);
        };
        Ok(Offsets {
            req_slot_size,
            resp_slot_size,
            resp_area_offset,
            client_table_offset,
            region_len,
        })
    }
}

impl Header {
    /// A fully initialised header (magic set), for regions built from parts (loom tests,
    /// in-process use).
    pub fn new<Req, Resp>(cfg: &Config) -> Self {
        let h = Self::zeroed();
        h.publish::<Req, Resp>(cfg, Owner::default());
        h
    }

    /// What zero-filled memory holds before the creator publishes: a zero magic.
    fn zeroed() -> Self {
        Self {
            magic: AtomicU64::new(0),
            version: AtomicU32::new(0),
            max_clients: AtomicU32::new(0),
            ring_depth: AtomicU32::new(0),
            resp_depth: AtomicU32::new(0),
            next_client_id: AtomicU32::new(0),
            server_alive: AtomicBool::new(false),
            _pad29: [0; 3],
            server_owner: AtomicU32::new(0),
            retire_requests: AtomicU32::new(0),
            req_size: AtomicU32::new(0),
            resp_size: AtomicU32::new(0),
            server_owner_token: AtomicU64::new(0),
            _pad56: [0; 72],
        }
    }

    /// Stores every field, `magic` last.
    fn publish<Req, Resp>(&self, cfg: &Config, owner: Owner) {
        // Relaxed for all fields but magic: R0 below publishes them.
        self.version.store(VERSION, Ordering::Relaxed);
        self.max_clients.store(cfg.max_clients, Ordering::Relaxed);
        self.ring_depth.store(cfg.ring_depth, Ordering::Relaxed);
        self.resp_depth.store(cfg.resp_depth, Ordering::Relaxed);
        self.next_client_id.store(0, Ordering::Relaxed);
        self.server_owner.store(owner.id, Ordering::Relaxed);
        self.server_owner_token
            .store(owner.token, Ordering::Relaxed);
        self.retire_requests.store(0, Ordering::Relaxed);
        self.req_size
            .store(size_of::<Req>() as u32, Ordering::Relaxed);
        self.resp_size
            .store(size_of::<Resp>() as u32, Ordering::Relaxed);
        self.server_alive.store(true, Ordering::Relaxed);
        // R0 (pairs with A0 in Header::read_config): publishes every field above.
        self.magic.store(MAGIC, Ordering::Release);
    }

    /// The server's owner as recorded at init (0 / 0 before the magic is published).
    pub fn server_owner(&self) -> Owner {
        // Relaxed: written once before R0; a reader racing the creator sees zeros.
        Owner {
            id: self.server_owner.load(Ordering::Relaxed),
            token: self.server_owner_token.load(Ordering::Relaxed),
        }
    }

    fn ids(&self) -> Ids<'_> {
        Ids {
            magic: &self.magic,
            version: &self.version,
            req_size: &self.req_size,
            resp_size: &self.resp_size,
        }
    }

    /// Validates magic, version, payload sizes and ranges; returns the config.
    pub fn read_config<Req, Resp>(&self) -> Result<Config, LayoutError> {
        // A0 in `Ids::check` (pairs with R0 in Header::publish): the fields below are
        // initialised.
        self.ids().check::<Req, Resp>(MAGIC, VERSION)?;
        // Relaxed: immutable after A0.
        let cfg = Config {
            max_clients: self.max_clients.load(Ordering::Relaxed),
            ring_depth: self.ring_depth.load(Ordering::Relaxed),
            resp_depth: self.resp_depth.load(Ordering::Relaxed),
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

impl RingControl {
    /// Head and tail at 0.
    pub fn new() -> Self {
        Self {
            head: AtomicU64::new(0),
            _pad_head: [0; 56],
            tail: AtomicU64::new(0),
            _pad_tail: [0; 56],
        }
    }
}

impl Default for RingControl {
    fn default() -> Self {
        Self::new()
    }
}

impl<Req: Payload> ReqSlot<Req> {
    /// An empty slot, free for lap 0.
    pub fn new() -> Self {
        Self {
            committed: AtomicU8::new(0),
            _pad1: [0; 3],
            client_id: UnsafeCell::new(0),
            resp_slot_idx: UnsafeCell::new(0),
            claim: AtomicU32::new(0),
            payload: UnsafeCell::new(Req::new_zeroed()),
        }
    }

    /// Writes the body. The caller owns the slot: it won the claim CAS for this position
    /// and has not yet stored `committed`.
    pub(crate) fn write_body(&self, client_id: u32, resp_slot_idx: u32, req: &Req) {
        // SAFETY: exclusive per the caller contract above; nobody else touches the cells
        // of a claimed, uncommitted slot (the server reads only after `committed` = 1).
        self.client_id.with_mut(|p| unsafe { p.write(client_id) });
        // SAFETY: as above.
        self.resp_slot_idx
            .with_mut(|p| unsafe { p.write(resp_slot_idx) });
        // SAFETY: as above.
        self.payload.with_mut(|p| unsafe { p.write(*req) });
    }

    /// Reads the body. The caller is the server and loaded `committed == 1` with Acquire
    /// for this position, and has not yet released the slot.
    pub(crate) fn read_body(&self) -> (u32, u32, Req) {
        // SAFETY: the claimer finished writing before its Release store of `committed`
        // and will not touch the slot again; the next claimer waits for a `tail` past
        // this position, which the server publishes (R2) after these reads. `Req: FromBytes`, so any bytes a broken peer left
        // are still a valid value.
        let id = self.client_id.with(|p| unsafe { p.read() });
        // SAFETY: as above.
        let idx = self.resp_slot_idx.with(|p| unsafe { p.read() });
        // SAFETY: as above.
        let req = self.payload.with(|p| unsafe { p.read() });
        (id, idx, req)
    }
}

impl<Req: Payload> Default for ReqSlot<Req> {
    fn default() -> Self {
        Self::new()
    }
}

impl<Resp: Payload> RespSlot<Resp> {
    /// An empty slot.
    pub fn new() -> Self {
        Self {
            valid: AtomicU8::new(0),
            pending: AtomicU8::new(0),
            _pad2: [0; 2],
            served: AtomicU32::new(0),
            payload: UnsafeCell::new(Resp::new_zeroed()),
        }
    }

    /// The server writes a response; `valid` is 0 and the client's call on this slot is
    /// published (it reads the payload only after seeing `valid == 1`).
    pub(crate) fn write_payload(&self, resp: &Resp) {
        // SAFETY: the client reads the cell only after an Acquire load of `valid == 1`,
        // which this write precedes (Release in `Server::reply`); the previous read
        // happened before the client published the call now being answered.
        self.payload.with_mut(|p| unsafe { p.write(*resp) });
    }

    /// The owning client reads a response after loading `valid == 1` with Acquire.
    pub(crate) fn read_payload(&self) -> Resp {
        // SAFETY: the server's write happened before its Release store of `valid`, and it
        // writes this slot again only for a later call the client has not yet made.
        self.payload.with(|p| unsafe { p.read() })
    }
}

impl<Resp: Payload> Default for RespSlot<Resp> {
    fn default() -> Self {
        Self::new()
    }
}

impl ClientEntry {
    /// A free entry, epoch 0.
    pub fn new() -> Self {
        Self {
            state: AtomicU32::new(0),
            owner: AtomicU32::new(0),
            drain_until: AtomicU64::new(u64::MAX),
            owner_token: AtomicU64::new(0),
            _pad0: [0; 40],
            claim_pos: AtomicU64::new(0),
            _pad1: [0; 56],
        }
    }
}

impl Default for ClientEntry {
    fn default() -> Self {
        Self::new()
    }
}

/// References to every part of one region; `Copy`, shared by the server and clients.
pub struct DelegRegion<'a, Req, Resp> {
    pub(crate) header: &'a Header,
    pub(crate) ctrl: &'a RingControl,
    pub(crate) ring: &'a [ReqSlot<Req>],
    pub(crate) resp: &'a [RespSlot<Resp>],
    pub(crate) clients: &'a [ClientEntry],
    pub(crate) cfg: Config,
    pub(crate) depth_log2: u32,
    _t: PhantomData<(Req, Resp)>,
}

impl<Req, Resp> Clone for DelegRegion<'_, Req, Resp> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<Req, Resp> Copy for DelegRegion<'_, Req, Resp> {}

impl<Req, Resp> core::fmt::Debug for DelegRegion<'_, Req, Resp> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DelegRegion")
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl<'a, Req: Payload, Resp: Payload> DelegRegion<'a, Req, Resp> {
    /// Builds a region from separately allocated parts (loom tests, in-process use).
    /// The header must be initialised ([`Header::new`]) and the slices sized as it says.
    pub fn from_parts(
        header: &'a Header,
        ctrl: &'a RingControl,
        ring: &'a [ReqSlot<Req>],
        resp: &'a [RespSlot<Resp>],
        clients: &'a [ClientEntry],
    ) -> Result<Self, LayoutError> {
        let cfg = header.read_config::<Req, Resp>()?;
        if ring.len() != cfg.ring_depth as usize
            || resp.len() != cfg.max_clients as usize * cfg.resp_depth as usize
            || clients.len() != cfg.max_clients as usize
        {
            return Err(LayoutError::BadConfig);
        }
        Ok(Self::assemble(header, ctrl, ring, resp, clients, cfg))
    }

    fn assemble(
        header: &'a Header,
        ctrl: &'a RingControl,
        ring: &'a [ReqSlot<Req>],
        resp: &'a [RespSlot<Resp>],
        clients: &'a [ClientEntry],
        cfg: Config,
    ) -> Self {
        Self {
            header,
            ctrl,
            ring,
            resp,
            clients,
            cfg,
            depth_log2: cfg.ring_depth.trailing_zeros(),
            _t: PhantomData,
        }
    }

    /// The region's configuration.
    pub fn config(&self) -> Config {
        self.cfg
    }

    /// The header.
    pub fn header(&self) -> &'a Header {
        self.header
    }

    /// The ring control block.
    pub fn ring_control(&self) -> &'a RingControl {
        self.ctrl
    }

    /// Request slot `i` (`i < ring_depth`).
    pub fn req_slot(&self, i: usize) -> &'a ReqSlot<Req> {
        &self.ring[i]
    }

    /// Response slot `idx` of client `client_id`.
    pub fn resp_slot(&self, client_id: u32, idx: u32) -> &'a RespSlot<Resp> {
        &self.resp[client_id as usize * self.cfg.resp_depth as usize + idx as usize]
    }

    /// Client-table entry `client_id`.
    pub fn client_entry(&self, client_id: u32) -> &'a ClientEntry {
        &self.clients[client_id as usize]
    }

    /// Declares client `id`, registration `epoch`, dead on behalf of the server's host:
    /// one CAS `Active -> Dead` (refused if the id moved on: closed, evicted, or taken
    /// again), then the `retire_requests` bump a closing client makes, so the server's
    /// next `poll` drains and frees the id as if it had evicted it. For a connecting
    /// client's host that found no free id and checked that the owner's process is gone;
    /// the caution of [`Server::evict`](super::Server::evict) applies (never for a live
    /// owner, which could write into a reused slot).
    pub fn declare_dead(&self, id: u32, epoch: u32) -> bool {
        let Some(e) = self.clients.get(id as usize) else {
            return false;
        };
        // R8 (pairs with A8 in Server::process_retirements): a server scan that sees Dead
        // sees what the caller saw of the dead client's claims. The dead client is
        // another process, so that covers its claims only because it has exited: the
        // kernel's context switch at its death orders all its stores before the pid
        // check that found it gone. Relaxed failure: nothing to do.
        let ok = e
            .state
            .compare_exchange(
                ClientState::Active.pack(epoch),
                ClientState::Dead.pack(epoch),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok();
        if ok {
            // R5 (pairs with A5 in Server::process_retirements): the server that sees the
            // bump sees the Dead state.
            self.header.retire_requests.fetch_add(1, Ordering::Release);
        }
        ok
    }

    /// A snapshot of client-table row `id` for liveness checks: its state and epoch, and
    /// the owner recorded for that epoch (id 0 while the client is still registering).
    pub fn client_info(&self, id: u32) -> ClientInfo {
        let e = self.client_entry(id);
        // A6/A7 in `ClientInfo::read` (A6 pairs with R6 of the activating CAS, and through
        // it with R4 of the server that freed the id; A7 with R7 in Client::try_take).
        ClientInfo::read(id, &e.state, &e.owner, &e.owner_token)
    }

    /// The slot of a free-running position.
    #[inline]
    pub(crate) fn slot(&self, pos: u64) -> &'a ReqSlot<Req> {
        // Index domain: pos is free-running; the mask keeps it in 0..ring_depth.
        &self.ring[(pos & (self.cfg.ring_depth as u64 - 1)) as usize]
    }
}

#[cfg(not(loom))]
impl<'a, Req: Payload, Resp: Payload> DelegRegion<'a, Req, Resp> {
    /// Initialises a new region in zero-filled memory and returns its view.
    /// `owner` is recorded at header offsets 32 and 48 (the host passes its pid and start
    /// time).
    ///
    /// # Safety
    ///
    /// `ptr` must be valid for reads and writes of `len` bytes for `'a`, the bytes must be
    /// zero (a freshly truncated shm file or zeroed allocation), and for `'a` the memory may
    /// be accessed only through views of this module (in any process). Other processes may
    /// attach at any time: they see a zero magic until this function stores it last.
    pub unsafe fn init(
        ptr: *mut u8,
        len: usize,
        cfg: &Config,
        owner: impl Into<Owner>,
    ) -> Result<Self, LayoutError> {
        // SAFETY: the caller's contract is `init_region`'s.
        let region: Self = unsafe { init_region(ptr, len, cfg) }?;
        for e in region.clients {
            // Relaxed: published by R0 (the magic store) below.
            e.drain_until.store(u64::MAX, Ordering::Relaxed);
        }
        region.header.publish::<Req, Resp>(cfg, owner.into());
        Ok(region)
    }
}

#[cfg(not(loom))]
crate::shm::region_layout!(DelegRegion, align = 64);

#[cfg(not(loom))]
impl<'a, Req: Payload, Resp: Payload> DelegRegion<'a, Req, Resp> {
    /// # Safety
    ///
    /// `ptr` is 64-aligned and valid for `off.region_len` bytes for `'a`, holding
    /// initialised values (every struct here is valid for any bytes, `Payload: FromBytes`).
    unsafe fn cast_parts(ptr: *mut u8, cfg: &Config, off: &Offsets) -> Self {
        let depth = cfg.ring_depth as usize;
        let nresp = cfg.max_clients as usize * cfg.resp_depth as usize;
        let nclients = cfg.max_clients as usize;
        // SAFETY: (all four casts) in bounds per the caller contract and `Offsets`, aligned
        // because the base is 64-aligned and every offset and slot size is a multiple of
        // 64, and valid for any bytes.
        unsafe {
            let header = &*(ptr as *const Header);
            let ctrl = &*(ptr.add(RING_CONTROL_OFFSET) as *const RingControl);
            let ring =
                core::slice::from_raw_parts(ptr.add(RING_OFFSET) as *const ReqSlot<Req>, depth);
            let resp = core::slice::from_raw_parts(
                ptr.add(off.resp_area_offset) as *const RespSlot<Resp>,
                nresp,
            );
            let clients = core::slice::from_raw_parts(
                ptr.add(off.client_table_offset) as *const ClientEntry,
                nclients,
            );
            Self::assemble(header, ctrl, ring, resp, clients, *cfg)
        }
    }
}

/// Payload alignment the slot layout supports (payload at +16 / +8).
pub(crate) const fn check_payload_align<Req, Resp>() {
    assert!(
        align_of::<Req>() <= 16,
        "Req alignment above 16 moves the payload off +16"
    );
    assert!(
        align_of::<Resp>() <= 8,
        "Resp alignment above 8 moves the payload off +8"
    );
}

/// For the loom model of attaching while the creator initialises (`tests/loom_init.rs`):
/// the region's memory before `init`, and `init`'s publication of the header.
#[cfg(loom)]
impl Header {
    /// A header as fresh zero-filled memory holds it.
    pub fn unpublished() -> Self {
        Self::zeroed()
    }

    /// Publishes `cfg` as `init` does (fields Relaxed, the magic last with R0).
    pub fn publish_as_init<Req, Resp>(&self, cfg: &Config) {
        self.publish::<Req, Resp>(cfg, Owner::default());
    }
}
