//! The ipc region: header, client table, ring control blocks and slots.
//!
//! Unsafe code (module opt-out): casting a raw shared mapping to references of these
//! structs in `IpcRegion::init` / `IpcRegion::attach`.
#![allow(unsafe_code)]

use core::mem::size_of;

#[cfg(not(loom))]
use crate::shm::init_region;
use crate::shm::spsc::{RingCtl, Slot, Slots};
use crate::shm::{ClientInfo, Ids, LayoutError, Msg, Owner, Payload};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// `"CPRIPCV1"` as a big-endian number.
pub const MAGIC: u64 = 0x4350_5249_5043_5631;
/// Layout version (2: request and response slot `i` share a [`Cell`]; 3: owner tokens
/// next to the owner ids, header @48 and client entry @+8, against pid reuse).
pub const VERSION: u32 = 3;
/// Largest `max_clients`.
pub const MAX_CLIENTS: u32 = 1 << 12;
/// Largest per-client `depth`.
pub const MAX_DEPTH: u32 = 1 << 16;

/// Header, 128 bytes at offset 0 (same conventions as delegationrpc's: magic @0,
/// version @8, creator's owner tag @32).
#[repr(C)]
#[derive(Debug)]
pub struct Header {
    /// @0 [`MAGIC`], stored last by the creator (Release).
    pub magic: AtomicU64,
    /// @8 [`VERSION`].
    pub version: AtomicU32,
    /// @12 client ids.
    pub max_clients: AtomicU32,
    /// @16 slots of each client's request ring and response ring (power of two).
    pub depth: AtomicU32,
    _pad20: [u8; 4],
    /// @24 high-water mark of ids handed out.
    pub next_client_id: AtomicU32,
    /// @28 true while the server runs.
    pub server_alive: AtomicBool,
    _pad29: [u8; 3],
    /// @32 the server's owner tag (the host's pid).
    pub server_owner: AtomicU32,
    _pad36: [u8; 4],
    /// @40 `size_of::<Req>()`.
    pub req_size: AtomicU32,
    /// @44 `size_of::<Resp>()`.
    pub resp_size: AtomicU32,
    /// @48 (version 3) the server's owner token (the host's process start time).
    pub server_owner_token: AtomicU64,
    _pad56: [u8; 72],
}

/// Client-table entry, 64 bytes.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct ClientEntry {
    /// `epoch << 2 | state` with [`crate::shm::ClientState`] values.
    pub state: AtomicU32,
    /// @+4 the client's owner id (the host's pid); 0 until recorded (R7).
    pub owner: AtomicU32,
    /// @+8 (version 3) the client's owner token (the host's process start time).
    pub owner_token: AtomicU64,
    _pad: [u8; 48],
}

/// Request slot `i` and response slot `i` of one client, side by side (one 64 B line for
/// payloads up to 24 B; contiguous lines beyond). With replies in order — always at one
/// call in flight — the response to the request at position `k` is written at position
/// `k` too, so a round trip moves one line, client → server → client, like the one-line
/// ping-pong floor, instead of a request line and a response line. Each half is still
/// its own SPSC ring slot with its own state word and single writer.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct Cell<Req, Resp> {
    req: Slot<Msg<Req>>,
    resp: Slot<Msg<Resp>>,
}

impl<Req, Resp> Cell<Req, Resp> {
    /// Both slots empty (lap 0).
    pub fn new() -> Self {
        Self {
            req: Slot::new(),
            resp: Slot::new(),
        }
    }
}

impl<Req, Resp> Default for Cell<Req, Resp> {
    fn default() -> Self {
        Self::new()
    }
}

/// The request ring's slots of one client: the `req` halves of its cells.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReqSide<'a, Req, Resp>(&'a [Cell<Req, Resp>]);

/// The response ring's slots of one client: the `resp` halves of its cells.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RespSide<'a, Req, Resp>(&'a [Cell<Req, Resp>]);

impl<Req, Resp> Slots<Msg<Req>> for ReqSide<'_, Req, Resp> {
    #[inline]
    fn count(&self) -> usize {
        self.0.len()
    }
    #[inline]
    fn at(&self, i: usize) -> &Slot<Msg<Req>> {
        &self.0[i].req
    }
}

impl<Req, Resp> Slots<Msg<Resp>> for RespSide<'_, Req, Resp> {
    #[inline]
    fn count(&self) -> usize {
        self.0.len()
    }
    #[inline]
    fn at(&self, i: usize) -> &Slot<Msg<Resp>> {
        &self.0[i].resp
    }
}

#[cfg(not(loom))]
mod asserts {
    use super::*;
    use core::mem::offset_of;
    const _: () = assert!(size_of::<Header>() == 128);
    const _: () = assert!(offset_of!(Header, version) == 8);
    const _: () = assert!(offset_of!(Header, max_clients) == 12);
    const _: () = assert!(offset_of!(Header, depth) == 16);
    const _: () = assert!(offset_of!(Header, next_client_id) == 24);
    const _: () = assert!(offset_of!(Header, server_alive) == 28);
    const _: () = assert!(offset_of!(Header, server_owner) == 32);
    const _: () = assert!(offset_of!(Header, req_size) == 40);
    const _: () = assert!(offset_of!(Header, server_owner_token) == 48);
    const _: () = assert!(offset_of!(ClientEntry, owner) == 4);
    const _: () = assert!(offset_of!(ClientEntry, owner_token) == 8);
    const _: () = assert!(size_of::<ClientEntry>() == 64);
    const _: () = assert!(size_of::<RingCtl>() == 256);
    const _: () = assert!(size_of::<Cell<[u64; 2], [u64; 2]>>() == 64);
}

/// Shape of an ipc region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Client ids, `1..=MAX_CLIENTS`.
    pub max_clients: u32,
    /// Per-client queue depth (calls in flight), a power of two in `1..=MAX_DEPTH`.
    pub depth: u32,
}

/// Byte offsets of a region's parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    /// Client table (after the header).
    pub clients: usize,
    /// Request ring control blocks, one per client.
    pub req_ctl: usize,
    /// Response ring control blocks, one per client.
    pub resp_ctl: usize,
    /// Cells (request slot and response slot), `depth` per client.
    pub cells: usize,
    /// Total bytes.
    pub region_len: usize,
}

const fn align128(x: usize) -> usize {
    (x + 127) & !127
}

impl Config {
    /// Checks ranges.
    pub const fn validate(&self) -> Result<(), LayoutError> {
        if self.max_clients >= 1
            && self.max_clients <= MAX_CLIENTS
            && self.depth.is_power_of_two()
            && self.depth <= MAX_DEPTH
        {
            Ok(())
        } else {
            Err(LayoutError::BadConfig)
        }
    }

    /// Offsets for payload types `Req` / `Resp`.
    pub const fn offsets<Req, Resp>(&self) -> Result<Offsets, LayoutError> {
        if let Err(e) = self.validate() {
            return Err(e);
        }
        // Bounded by MAX_CLIENTS * MAX_DEPTH * slot size: no overflow on 64-bit targets
        // for payloads below 2^36 bytes; checked below for 32-bit ones.
        let n = self.max_clients as usize;
        let d = self.depth as usize;
        let clients = 128;
        let req_ctl = align128(clients + n * 64);
        let resp_ctl = req_ctl + n * 256;
        let cells = resp_ctl + n * 256;
        let Some(cell_bytes) = (n * d).checked_mul(size_of::<Cell<Req, Resp>>()) else {
            return Err(LayoutError::BadConfig);
        };
        Ok(Offsets {
            clients,
            req_ctl,
            resp_ctl,
            cells,
            region_len: align128(cells + cell_bytes),
        })
    }
}

impl Header {
    /// A fully initialised header, for regions built from parts.
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
            depth: AtomicU32::new(0),
            _pad20: [0; 4],
            next_client_id: AtomicU32::new(0),
            server_alive: AtomicBool::new(false),
            _pad29: [0; 3],
            server_owner: AtomicU32::new(0),
            _pad36: [0; 4],
            req_size: AtomicU32::new(0),
            resp_size: AtomicU32::new(0),
            server_owner_token: AtomicU64::new(0),
            _pad56: [0; 72],
        }
    }

    fn publish<Req, Resp>(&self, cfg: &Config, owner: Owner) {
        // Relaxed: published by R0 below.
        self.version.store(VERSION, Ordering::Relaxed);
        self.max_clients.store(cfg.max_clients, Ordering::Relaxed);
        self.depth.store(cfg.depth, Ordering::Relaxed);
        self.server_owner.store(owner.id, Ordering::Relaxed);
        self.server_owner_token
            .store(owner.token, Ordering::Relaxed);
        self.req_size
            .store(size_of::<Req>() as u32, Ordering::Relaxed);
        self.resp_size
            .store(size_of::<Resp>() as u32, Ordering::Relaxed);
        self.server_alive.store(true, Ordering::Relaxed);
        // R0 (pairs with A0 in read_config).
        self.magic.store(MAGIC, Ordering::Release);
    }

    /// Validates magic, version, payload sizes and ranges.
    pub fn read_config<Req, Resp>(&self) -> Result<Config, LayoutError> {
        // A0 in `Ids::check` (pairs with R0 in publish).
        Ids {
            magic: &self.magic,
            version: &self.version,
            req_size: &self.req_size,
            resp_size: &self.resp_size,
        }
        .check::<Req, Resp>(MAGIC, VERSION)?;
        // Relaxed: immutable after A0.
        let cfg = Config {
            max_clients: self.max_clients.load(Ordering::Relaxed),
            depth: self.depth.load(Ordering::Relaxed),
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

impl Header {
    /// The server's owner as recorded at init.
    pub fn server_owner(&self) -> Owner {
        // Relaxed: written once before R0.
        Owner {
            id: self.server_owner.load(Ordering::Relaxed),
            token: self.server_owner_token.load(Ordering::Relaxed),
        }
    }
}

impl ClientEntry {
    /// A snapshot of this row for liveness checks (orderings as in the delegationrpc
    /// delegationrpc `DelegRegion::client_info`: A6 on the state, A7 on the owner id).
    pub fn info(&self, id: u32) -> ClientInfo {
        // A6/A7 in `ClientInfo::read` (A6 pairs with R6 of the activating CAS, through it
        // with R4 of the freeing server, which cleared the owner; A7 with R7 in
        // Client::connect).
        ClientInfo::read(id, &self.state, &self.owner, &self.owner_token)
    }

    /// Free, epoch 0.
    pub fn new() -> Self {
        Self {
            state: AtomicU32::new(0),
            owner: AtomicU32::new(0),
            owner_token: AtomicU64::new(0),
            _pad: [0; 48],
        }
    }
}

impl Default for ClientEntry {
    fn default() -> Self {
        Self::new()
    }
}

/// References to the parts of one ipc region.
pub struct IpcRegion<'a, Req, Resp> {
    pub(crate) header: &'a Header,
    pub(crate) clients: &'a [ClientEntry],
    pub(crate) req_ctl: &'a [RingCtl],
    pub(crate) resp_ctl: &'a [RingCtl],
    pub(crate) cells: &'a [Cell<Req, Resp>],
    pub(crate) cfg: Config,
}

impl<Req, Resp> Clone for IpcRegion<'_, Req, Resp> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<Req, Resp> Copy for IpcRegion<'_, Req, Resp> {}

impl<Req, Resp> core::fmt::Debug for IpcRegion<'_, Req, Resp> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("IpcRegion").field("cfg", &self.cfg).finish()
    }
}

impl<'a, Req: Payload, Resp: Payload> IpcRegion<'a, Req, Resp> {
    /// Builds a region from separately allocated parts (loom tests, in-process use).
    pub fn from_parts(
        header: &'a Header,
        clients: &'a [ClientEntry],
        req_ctl: &'a [RingCtl],
        resp_ctl: &'a [RingCtl],
        cells: &'a [Cell<Req, Resp>],
    ) -> Result<Self, LayoutError> {
        let cfg = header.read_config::<Req, Resp>()?;
        let n = cfg.max_clients as usize;
        let slots = n * cfg.depth as usize;
        if clients.len() != n || req_ctl.len() != n || resp_ctl.len() != n || cells.len() != slots {
            return Err(LayoutError::BadConfig);
        }
        Ok(Self {
            header,
            clients,
            req_ctl,
            resp_ctl,
            cells,
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> Config {
        self.cfg
    }

    /// The header.
    pub fn header(&self) -> &'a Header {
        self.header
    }

    /// Client-table entry `id`.
    pub fn client_entry(&self, id: u32) -> &'a ClientEntry {
        &self.clients[id as usize]
    }

    /// Client `id`'s row, rings and cells, or `None` past the table.
    pub(crate) fn client(&self, id: u32) -> Option<ClientParts<'a, Req, Resp>> {
        let i = id as usize;
        let d = self.cfg.depth as usize;
        Some(ClientParts {
            entry: self.clients.get(i)?,
            req: self.req_ctl.get(i)?,
            resp: self.resp_ctl.get(i)?,
            cells: self.cells.get(i * d..(i + 1) * d)?,
        })
    }
}

/// One client's parts of an ipc region, found once: each of them is a slice lookup with
/// its bounds check, which a client (one id for its life) and a server answering the
/// client it just served would otherwise repeat on every call.
pub(crate) struct ClientParts<'a, Req, Resp> {
    pub(crate) entry: &'a ClientEntry,
    pub(crate) req: &'a RingCtl,
    pub(crate) resp: &'a RingCtl,
    pub(crate) cells: &'a [Cell<Req, Resp>],
}

impl<Req, Resp> Clone for ClientParts<'_, Req, Resp> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<Req, Resp> Copy for ClientParts<'_, Req, Resp> {}

impl<Req, Resp> core::fmt::Debug for ClientParts<'_, Req, Resp> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ClientParts")
            .field("depth", &self.cells.len())
            .finish()
    }
}

impl<'a, Req, Resp> ClientParts<'a, Req, Resp> {
    /// The request ring's slots.
    pub(crate) fn req_slots(&self) -> ReqSide<'a, Req, Resp> {
        ReqSide(self.cells)
    }

    /// The response ring's slots.
    pub(crate) fn resp_slots(&self) -> RespSide<'a, Req, Resp> {
        RespSide(self.cells)
    }
}

#[cfg(not(loom))]
impl<'a, Req: Payload, Resp: Payload> IpcRegion<'a, Req, Resp> {
    /// Initialises a region in zero-filled memory; `owner` goes to header offsets 32 / 48.
    ///
    /// # Safety
    ///
    /// As delegationrpc's `DelegRegion::init`: `ptr` valid for reads and writes of `len` bytes
    /// for `'a`, zero-filled, accessed only through this module's views meanwhile.
    pub unsafe fn init(
        ptr: *mut u8,
        len: usize,
        cfg: &Config,
        owner: impl Into<Owner>,
    ) -> Result<Self, LayoutError> {
        // SAFETY: the caller's contract is `init_region`'s.
        let r: Self = unsafe { init_region(ptr, len, cfg) }?;
        r.header.publish::<Req, Resp>(cfg, owner.into());
        Ok(r)
    }
}

#[cfg(not(loom))]
crate::shm::region_layout!(IpcRegion, align = 128);

#[cfg(not(loom))]
impl<'a, Req: Payload, Resp: Payload> IpcRegion<'a, Req, Resp> {
    /// # Safety
    ///
    /// `ptr` is 128-aligned and valid for `off.region_len` bytes for `'a`.
    unsafe fn cast_parts(ptr: *mut u8, cfg: &Config, off: &Offsets) -> Self {
        let n = cfg.max_clients as usize;
        let slots = n * cfg.depth as usize;
        // SAFETY: every part is in bounds per `Offsets`, aligned (128-aligned offsets
        // from a 128-aligned base; cells need 64 or their payload's alignment, which
        // `Payload` types in shared memory keep at or below 128), and valid for any
        // bytes the protocol reads (atomics; MaybeUninit slots read only after publication
        // of POD payloads).
        unsafe {
            Self {
                header: &*(ptr as *const Header),
                clients: core::slice::from_raw_parts(ptr.add(off.clients).cast(), n),
                req_ctl: core::slice::from_raw_parts(ptr.add(off.req_ctl).cast(), n),
                resp_ctl: core::slice::from_raw_parts(ptr.add(off.resp_ctl).cast(), n),
                cells: core::slice::from_raw_parts(ptr.add(off.cells).cast(), slots),
                cfg: *cfg,
            }
        }
    }
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
