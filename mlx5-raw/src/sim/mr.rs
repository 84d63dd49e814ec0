//! Memory regions: the only memory the model moves payload to or from.
//!
//! A key is `(slot + 1) << 8 | generation` (as an mlx5 mkey is index << 8 | variant);
//! the generation (1..=255) changes on every registration of a slot, so a stale key of a
//! deregistered region fails the lookup. No key equals `MLX5_INVALID_LKEY` (0x100).
//!
//! Every access is checked here first: key, PD, access right, and that
//! `[addr, addr + len)` lies inside `[va, va + len)` of the region. The translated
//! offset is then used on the region's [`Raw`], which checks bounds a second time.

use super::config::Access;
use super::raw::Raw;

/// A registered region.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mr {
    pub raw: Raw,
    /// Address the keys name byte 0 by.
    pub va: u64,
    pub key: u32,
    pub pd: u32,
    pub access: Access,
}

/// Why an access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MrFault {
    /// No region has this key (never registered, deregistered, garbage).
    Key,
    /// The region belongs to another protection domain.
    Pd,
    /// The range is not inside the region.
    Bounds,
    /// The region lacks the access right.
    Access,
}

impl MrFault {
    pub(crate) const fn why(self) -> &'static str {
        match self {
            Self::Key => "no region has this key",
            Self::Pd => "region is in another protection domain",
            Self::Bounds => "range outside the region",
            Self::Access => "region lacks the access right",
        }
    }
}

/// The slot a key names, if it could name one.
pub(crate) const fn key_slot(key: u32) -> Option<usize> {
    match key >> 8 {
        0 => None,
        s => Some(s as usize - 1),
    }
}

/// Looks up `[addr, addr + len)` under `key` in `pd` with `need`; returns the region
/// and the offset of `addr` in it. `len == 0` still needs a valid key (callers skip the
/// lookup for zero-length remote operations, IBA C9-88).
pub(crate) fn lookup(
    mrs: &[Option<Mr>],
    key: u32,
    pd: u32,
    addr: u64,
    len: u64,
    need: Access,
) -> Result<(Mr, usize), MrFault> {
    let mr = key_slot(key)
        .and_then(|s| mrs.get(s))
        .and_then(|m| m.as_ref())
        .filter(|m| m.key == key)
        .ok_or(MrFault::Key)?;
    if mr.pd != pd {
        return Err(MrFault::Pd);
    }
    if !mr.access.contains(need) {
        return Err(MrFault::Access);
    }
    let off = addr.checked_sub(mr.va).ok_or(MrFault::Bounds)?;
    let end = off.checked_add(len).ok_or(MrFault::Bounds)?;
    if end > mr.raw.len() as u64 {
        return Err(MrFault::Bounds);
    }
    Ok((*mr, off as usize))
}
