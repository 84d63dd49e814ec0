//! The registered regions a side may name in transfers, and the checks that turn a bad
//! buffer into a typed error before anything is posted.

use super::wire::Desc;
use super::BulkError;

/// One registered region: the device's virtual address range and its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegisteredRange {
    /// First virtual address.
    pub va: u64,
    /// Bytes.
    pub len: u64,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// A checked local buffer: inside one registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Local {
    /// Virtual address.
    pub addr: u64,
    /// Bytes (never 0).
    pub len: u64,
    /// The region's local key.
    pub lkey: u32,
}

/// Up to `R` regions registered by this side.
#[derive(Debug, Clone, Copy)]
pub struct Regions<const R: usize> {
    regions: [Option<RegisteredRange>; R],
}

impl<const R: usize> Default for Regions<R> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const R: usize> Regions<R> {
    /// None registered.
    pub const fn new() -> Self {
        Self { regions: [None; R] }
    }

    /// Records a registered region; `Err` if `R` are recorded already.
    pub fn add(&mut self, r: RegisteredRange) -> Result<(), BulkError> {
        let free = self
            .regions
            .iter_mut()
            .find(|x| x.is_none())
            .ok_or(BulkError::TooManyRegions)?;
        *free = Some(r);
        Ok(())
    }

    /// Forgets the region with local key `lkey` (after deregistering it).
    pub fn remove(&mut self, lkey: u32) {
        for r in &mut self.regions {
            if r.is_some_and(|r| r.lkey == lkey) {
                *r = None;
            }
        }
    }

    fn inside(r: &RegisteredRange, addr: u64, len: u64) -> Result<(), BulkError> {
        if len == 0 {
            return Err(BulkError::ZeroLength);
        }
        let end = addr.checked_add(len).ok_or(BulkError::BeyondRegion)?;
        if addr < r.va || end > r.va + r.len {
            return Err(BulkError::BeyondRegion);
        }
        Ok(())
    }

    /// The descriptor a peer needs for `len` bytes at `addr` of the region with remote
    /// key `rkey`.
    pub fn describe(&self, rkey: u32, addr: u64, len: u64) -> Result<Desc, BulkError> {
        let r = self
            .regions
            .iter()
            .flatten()
            .find(|r| r.rkey == rkey)
            .ok_or(BulkError::UnknownKey)?;
        Self::inside(r, addr, len)?;
        Ok(Desc { addr, len, rkey })
    }

    /// A local buffer of `len` bytes at `addr` of the region with local key `lkey`.
    pub fn local(&self, lkey: u32, addr: u64, len: u64) -> Result<Local, BulkError> {
        let r = self
            .regions
            .iter()
            .flatten()
            .find(|r| r.lkey == lkey)
            .ok_or(BulkError::UnknownKey)?;
        Self::inside(r, addr, len)?;
        Ok(Local { addr, len, lkey })
    }
}
