//! What every shm region shares before its protocol's own parts: payloads that may
//! cross processes ([`Payload`]), the refusal of bytes that are not a region of this
//! layout ([`LayoutError`]), and the checks of the first header words. Both layouts keep
//! magic u64 @0, version u32 @8, the server's owner id u32 @32 and owner token u64 @48,
//! and the payload sizes u32 @40 / @44, so a host can tell whose region a name holds
//! without knowing which protocol made it ([`peek_header`]).
//!
//! Unsafe code (module opt-out): [`peek_header`] casts the first 128 bytes of a mapping.
#![allow(unsafe_code)]

use core::fmt;
use core::mem::size_of;

use super::Owner;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// Plain-old-data payloads that may cross shared memory: any bit pattern is a valid value
/// ([`FromBytes`](zerocopy::FromBytes)), no padding or references
/// ([`IntoBytes`](zerocopy::IntoBytes), [`Immutable`](zerocopy::Immutable)).
pub trait Payload:
    zerocopy::FromBytes
    + zerocopy::IntoBytes
    + zerocopy::Immutable
    + zerocopy::KnownLayout
    + Copy
    + Send
    + 'static
{
}

impl<T> Payload for T where
    T: zerocopy::FromBytes
        + zerocopy::IntoBytes
        + zerocopy::Immutable
        + zerocopy::KnownLayout
        + Copy
        + Send
        + 'static
{
}

/// Why a region's bytes were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    /// The base pointer is null or not aligned as the layout needs (64 B for
    /// delegationrpc, 128 B for ipc).
    Misaligned,
    /// The memory is shorter than the layout needs.
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        have: usize,
    },
    /// The magic is not the layout's (another protocol's region, or not yet initialised).
    BadMagic {
        /// The value found.
        found: u64,
    },
    /// Another layout version.
    BadVersion {
        /// The version found.
        found: u32,
    },
    /// The region was made for payloads of other sizes.
    PayloadSize {
        /// `size_of::<Req>()` recorded in the region.
        req: u32,
        /// `size_of::<Resp>()` recorded in the region.
        resp: u32,
    },
    /// Counts out of range, depths not powers of two, or parts of the wrong length.
    BadConfig,
    /// `init` over memory that already holds a region.
    NotZeroed,
}

impl core::error::Error for LayoutError {}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Misaligned => f.write_str("region base is null or not 64-byte aligned"),
            Self::Truncated { need, have } => {
                write!(f, "region truncated: need {need} bytes, have {have}")
            }
            Self::BadMagic { found } => write!(f, "bad magic {found:#018x}"),
            Self::BadVersion { found } => write!(f, "unsupported layout version {found}"),
            Self::PayloadSize { req, resp } => {
                write!(f, "region made for payloads of {req}/{resp} bytes")
            }
            Self::BadConfig => f.write_str("region config out of range"),
            Self::NotZeroed => f.write_str("memory already holds a region"),
        }
    }
}

/// Refuses a base that is null or not `align`-aligned, and memory shorter than `need`.
#[cfg(not(loom))]
fn check_span(ptr: *mut u8, len: usize, need: usize, align: usize) -> Result<(), LayoutError> {
    if ptr.is_null() || !ptr.addr().is_multiple_of(align) {
        return Err(LayoutError::Misaligned);
    }
    if len < need {
        return Err(LayoutError::Truncated { need, have: len });
    }
    Ok(())
}

/// The header words that say what a region is, as a layout's `read_config` checks them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ids<'h> {
    /// @0, stored last by the creator with Release (R0 of the layout's `publish`).
    pub magic: &'h AtomicU64,
    /// @8.
    pub version: &'h AtomicU32,
    /// @40.
    pub req_size: &'h AtomicU32,
    /// @44.
    pub resp_size: &'h AtomicU32,
}

impl Ids<'_> {
    /// Refuses another magic, another version, or payloads of other sizes. A0 (the magic
    /// load; pairs with R0 of the creator's `publish`): the other header fields, which
    /// the caller reads Relaxed after this, are initialised.
    pub(crate) fn check<Req, Resp>(self, magic: u64, version: u32) -> Result<(), LayoutError> {
        // A0 (pairs with R0 in the layout's Header::publish).
        let found = self.magic.load(Ordering::Acquire);
        if found != magic {
            return Err(LayoutError::BadMagic { found });
        }
        // Relaxed: immutable after A0.
        let found = self.version.load(Ordering::Relaxed);
        if found != version {
            return Err(LayoutError::BadVersion { found });
        }
        let (req, resp) = (
            self.req_size.load(Ordering::Relaxed),
            self.resp_size.load(Ordering::Relaxed),
        );
        if req as usize != size_of::<Req>() || resp as usize != size_of::<Resp>() {
            return Err(LayoutError::PayloadSize { req, resp });
        }
        Ok(())
    }
}

/// The words every layout's header keeps at the same offsets.
#[repr(C)]
struct Common {
    magic: AtomicU64,
    version: AtomicU32,
    _pad12: [u8; 20],
    server_owner: AtomicU32,
    _pad36: [u8; 12],
    server_owner_token: AtomicU64,
    _pad56: [u8; 72],
}

#[cfg(not(loom))]
mod asserts {
    use super::*;
    use core::mem::offset_of;
    const _: () = assert!(size_of::<Common>() == 128);
    const _: () = assert!(offset_of!(Common, version) == 8);
    const _: () = assert!(offset_of!(Common, server_owner) == 32);
    const _: () = assert!(offset_of!(Common, server_owner_token) == 48);
}

/// What the first header words of a mapping say: its magic and version, and the owner its
/// creator recorded (meaningful only for a magic and version the caller knows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderId {
    /// @0.
    pub magic: u64,
    /// @8.
    pub version: u32,
    /// @32 and @48.
    pub server: Owner,
}

/// Reads the common header words of a mapping, or `None` if it is shorter than a header
/// or misaligned. Relaxed loads: a half-initialised region reads magic 0.
///
/// # Safety
///
/// `ptr` valid for reads of `len` bytes, which other parties access only atomically (as
/// every layout of this module does) for as long as this call runs.
pub unsafe fn peek_header(ptr: *const u8, len: usize) -> Option<HeaderId> {
    if len < size_of::<Common>() || ptr.is_null() || !ptr.addr().is_multiple_of(64) {
        return None;
    }
    // SAFETY: 128 aligned bytes valid for reads (caller contract); `Common` is atomics
    // and bytes, valid for any bit pattern.
    let h = unsafe { &*(ptr as *const Common) };
    // Relaxed: a snapshot; the caller checks magic and version before trusting the owner.
    Some(HeaderId {
        magic: h.magic.load(Ordering::Relaxed),
        version: h.version.load(Ordering::Relaxed),
        server: Owner {
            id: h.server_owner.load(Ordering::Relaxed),
            token: h.server_owner_token.load(Ordering::Relaxed),
        },
    })
}

/// A layout's view of a region, as [`init_region`] and [`attach_region`] build it: the
/// steps both layouts take (span and alignment, the zero magic of fresh memory, the
/// header's validation before anything past it is touched) are there once; the parts and
/// their offsets are the layout's.
///
/// # Safety
///
/// `Header` is valid for any bytes (atomics and byte padding) and needs at most `ALIGN`;
/// `cast` is sound under its stated contract.
#[cfg(not(loom))]
pub(crate) unsafe trait RegionLayout: Sized {
    /// The shape the creator chooses.
    type Config;
    /// Where the parts are.
    type Offsets;
    /// The header at offset 0.
    type Header;
    /// Base alignment the layout needs.
    const ALIGN: usize;
    /// Offsets for `cfg` (refusing a config out of range).
    fn offsets(cfg: &Self::Config) -> Result<Self::Offsets, LayoutError>;
    /// Total bytes of a region with `off`.
    fn region_len(off: &Self::Offsets) -> usize;
    /// Validates the header (A0 first) and returns its config.
    fn read_config(header: &Self::Header) -> Result<Self::Config, LayoutError>;
    /// The view of the parts.
    ///
    /// # Safety
    ///
    /// `ptr` is `ALIGN`-aligned and valid for `region_len(off)` bytes for the view's
    /// lifetime, and those bytes hold values valid for every part.
    unsafe fn cast(ptr: *mut u8, cfg: &Self::Config, off: &Self::Offsets) -> Self;
    /// The header's magic word.
    fn magic(&self) -> &AtomicU64;
}

/// The view of fresh memory for `cfg`, refused unless it is aligned, long enough and
/// still holds no magic. The caller initialises what is not zero and publishes the
/// header (magic last).
///
/// # Safety
///
/// `ptr` valid for reads and writes of `len` zero bytes for the view's lifetime, accessed
/// only through views of this layout meanwhile (in any process).
#[cfg(not(loom))]
pub(crate) unsafe fn init_region<L: RegionLayout>(
    ptr: *mut u8,
    len: usize,
    cfg: &L::Config,
) -> Result<L, LayoutError> {
    let off = L::offsets(cfg)?;
    check_span(ptr, len, L::region_len(&off), L::ALIGN)?;
    // SAFETY: alignment and length checked; the caller guarantees validity and zero
    // bytes, which are a valid value of every part of both layouts (atomics at 0,
    // `Payload: FromZeros`, `MaybeUninit` slot contents, byte padding).
    let region = unsafe { L::cast(ptr, cfg, &off) };
    // Relaxed: a check for a reused buffer, before publication.
    if region.magic().load(Ordering::Relaxed) != 0 {
        return Err(LayoutError::NotZeroed);
    }
    Ok(region)
}

/// The view of an initialised region: checks alignment, that the header fits, what the
/// layout's `read_config` checks (magic, version, payload sizes, ranges), and that `len`
/// covers the whole layout.
///
/// # Safety
///
/// `ptr` valid for reads and writes of `len` bytes for the view's lifetime (a shared
/// mapping), accessed only through views of this layout or plain atomic operations of
/// the same widths (in any process).
#[cfg(not(loom))]
pub(crate) unsafe fn attach_region<L: RegionLayout>(
    ptr: *mut u8,
    len: usize,
) -> Result<L, LayoutError> {
    check_span(ptr, len, size_of::<L::Header>(), L::ALIGN)?;
    // SAFETY: the header's bytes are in bounds and aligned (checked), and any bytes are a
    // valid `Header` (the trait's contract).
    let header = unsafe { &*(ptr as *const L::Header) };
    let cfg = L::read_config(header)?;
    let off = L::offsets(&cfg)?;
    check_span(ptr, len, L::region_len(&off), L::ALIGN)?;
    // SAFETY: the whole layout fits in `len`, checked above; the caller's contract covers
    // validity, and any bytes are valid for every part.
    Ok(unsafe { L::cast(ptr, &cfg, &off) })
}

/// Implements [`RegionLayout`] for a layout module's region view `$region<'a, Req, Resp>`
/// from that module's `Config::offsets`, `Offsets::region_len`, `Header::read_config`,
/// `Header::magic` and the view's inherent `cast_parts`, and gives the view its
/// `required_len` and `attach`. The module's `init` stays its own (what it sets besides
/// zeros before publishing differs).
#[cfg(not(loom))]
macro_rules! region_layout {
    ($region:ident, align = $align:expr) => {
        // SAFETY: `Header` is all atomics and byte padding (valid for any bytes), 8-aligned,
        // and `cast_parts` keeps `cast`'s contract (see its own).
        unsafe impl<'a, Req: Payload, Resp: Payload> crate::shm::RegionLayout
            for $region<'a, Req, Resp>
        {
            type Config = Config;
            type Offsets = Offsets;
            type Header = Header;
            const ALIGN: usize = $align;

            fn offsets(cfg: &Config) -> Result<Offsets, LayoutError> {
                cfg.offsets::<Req, Resp>()
            }

            fn region_len(off: &Offsets) -> usize {
                off.region_len
            }

            fn read_config(header: &Header) -> Result<Config, LayoutError> {
                header.read_config::<Req, Resp>()
            }

            unsafe fn cast(ptr: *mut u8, cfg: &Config, off: &Offsets) -> Self {
                // SAFETY: the caller keeps `cast`'s contract, which is `cast_parts`'s.
                unsafe { Self::cast_parts(ptr, cfg, off) }
            }

            fn magic(&self) -> &crate::sync::AtomicU64 {
                &self.header.magic
            }
        }

        impl<'a, Req: Payload, Resp: Payload> $region<'a, Req, Resp> {
            /// Bytes a region with `cfg` needs for these payload types.
            pub fn required_len(cfg: &Config) -> Result<usize, LayoutError> {
                Ok(cfg.offsets::<Req, Resp>()?.region_len)
            }

            /// Attaches to an initialised region: checks alignment, that the header fits,
            /// magic, version, payload sizes, the config's ranges, and that `len` covers the
            /// whole layout.
            ///
            /// # Safety
            ///
            /// `ptr` must be valid for reads and writes of `len` bytes for `'a` (a shared
            /// mapping), and for `'a` the memory may be accessed only through views of this
            /// layout or plain atomic operations of the same widths (in any process).
            pub unsafe fn attach(ptr: *mut u8, len: usize) -> Result<Self, LayoutError> {
                // SAFETY: the caller's contract is `attach_region`'s.
                unsafe { crate::shm::attach_region(ptr, len) }
            }
        }
    };
}
#[cfg(not(loom))]
pub(crate) use region_layout;
