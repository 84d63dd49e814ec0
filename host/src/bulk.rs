//! Registered buffer pools for bulk transfers (`copyrpc_core::bulk`), on either fabric.
//!
//! A [`BufferPool`] registers one region once (a device-model MR on the sim fabric, a verbs
//! MR on a NIC) and hands out equal buffers from a free list, so a user registers once and
//! reuses: registration is the expensive step
//! (docs/spec/bulk.md#risks-the-first-design-names). The pool's [`RegisteredRange`] goes
//! into the core's [`Regions`](copyrpc_core::bulk::Regions), which checks every descriptor
//! and local buffer made from it.

use copyrpc_core::bulk::{Desc, Local, RegisteredRange};

use crate::error::{Error, Result};
use crate::fabric::{sim, verbs, Fabric};

/// The registered region behind a pool.
#[derive(Debug)]
enum PoolMr {
    Sim(sim::SimMr),
    Verbs(verbs::Mr),
}

/// One buffer of a pool, leased until [`BufferPool::release`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a leased buffer returns to its pool only through release"]
pub struct PoolBuf {
    /// The pool it came from ([`BufferPool`]'s id): a buffer handed to another pool is
    /// refused rather than put on that pool's free list, where it would be leased twice.
    pool: u64,
    index: usize,
}

/// Pools made in this process, for their ids.
static POOLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl PoolBuf {
    /// Which of the pool's buffers this is.
    pub const fn index(&self) -> usize {
        self.index
    }
}

/// `count` buffers of `buf_bytes` in one registered region. See the module docs.
#[derive(Debug)]
pub struct BufferPool {
    mr: PoolMr,
    id: u64,
    buf_bytes: usize,
    count: usize,
    free: Vec<usize>,
    leased: Vec<bool>,
}

impl BufferPool {
    /// Registers `count * buf_bytes` bytes on `fabric` (remote read and write allowed)
    /// and puts every buffer on the free list. `name` names the region in errors.
    pub fn new(fabric: &Fabric, name: &str, count: usize, buf_bytes: usize) -> Result<Self> {
        let len = count
            .checked_mul(buf_bytes)
            .filter(|&l| l > 0)
            .ok_or_else(|| Error::RpcConfig {
                reason: format!("buffer pool {name:?}: {count} buffers of {buf_bytes} bytes"),
            })?;
        let mr = match fabric {
            Fabric::Sim(f) => PoolMr::Sim(f.alloc_mr(name, len, mlx5_raw::sim::Access::ALL)?),
            Fabric::Verbs(d) => PoolMr::Verbs(d.alloc_mr(name, len, verbs::Access::RDMA)?),
        };
        Ok(Self {
            mr,
            // Relaxed: a unique number, nothing is published through it.
            id: POOLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            buf_bytes,
            count,
            free: (0..count).rev().collect(),
            leased: vec![false; count],
        })
    }

    /// The registered region, for [`Regions::add`](copyrpc_core::bulk::Regions::add).
    pub fn region(&self) -> RegisteredRange {
        let (ptr, lkey, rkey) = match &self.mr {
            PoolMr::Sim(m) => (m.as_ptr(), m.lkey(), m.rkey()),
            PoolMr::Verbs(m) => (m.as_ptr(), m.lkey(), m.rkey()),
        };
        RegisteredRange {
            // Both fabrics register with the virtual address as the I/O address.
            va: ptr as u64,
            len: (self.count * self.buf_bytes) as u64,
            lkey,
            rkey,
        }
    }

    /// Bytes of each buffer.
    pub const fn buf_bytes(&self) -> usize {
        self.buf_bytes
    }

    /// Buffers on the free list.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// A free buffer, if any.
    pub fn lease(&mut self) -> Option<PoolBuf> {
        let index = self.free.pop()?;
        self.leased[index] = true;
        Some(PoolBuf {
            pool: self.id,
            index,
        })
    }

    /// Puts a leased buffer back. The caller makes sure no operation still targets it
    /// (the op that used it has ended and its transfer drained).
    ///
    /// # Panics
    ///
    /// If `b` is another pool's buffer: on this pool's free list it would be leased
    /// while still leased (the same bytes handed out twice).
    pub fn release(&mut self, b: PoolBuf) {
        self.check(&b);
        debug_assert!(self.leased[b.index], "a buffer of this pool not leased");
        self.leased[b.index] = false;
        self.free.push(b.index);
    }

    /// A buffer of another pool is a bug in the caller that would hand the same bytes
    /// out twice or describe memory this pool does not own.
    fn check(&self, b: &PoolBuf) {
        assert!(
            b.pool == self.id && b.index < self.count,
            "buffer {} of pool {} used with pool {}",
            b.index,
            b.pool,
            self.id
        );
    }

    /// The buffer's first byte, as a raw pointer: the device reads and writes it, so
    /// Rust code touches it only when no operation targets it.
    ///
    /// # Panics
    ///
    /// If `b` is another pool's buffer (as [`release`](Self::release)).
    pub fn ptr(&self, b: &PoolBuf) -> *mut u8 {
        self.check(b);
        let base = match &self.mr {
            PoolMr::Sim(m) => m.as_ptr(),
            PoolMr::Verbs(m) => m.as_ptr(),
        };
        base.wrapping_add(b.index * self.buf_bytes)
    }

    /// The first `len` bytes of the buffer as a descriptor for a peer (checked against
    /// the region: a zero or too-long `len` is an error).
    pub fn desc(
        &self,
        b: &PoolBuf,
        len: u64,
    ) -> std::result::Result<Desc, copyrpc_core::bulk::BulkError> {
        let r = self.region();
        let mut regions = copyrpc_core::bulk::Regions::<1>::new();
        regions.add(r)?;
        if len > self.buf_bytes as u64 {
            return Err(copyrpc_core::bulk::BulkError::BeyondRegion);
        }
        regions.describe(r.rkey, self.ptr(b) as u64, len)
    }

    /// The first `len` bytes of the buffer as a local buffer for this side's transfers.
    pub fn local(
        &self,
        b: &PoolBuf,
        len: u64,
    ) -> std::result::Result<Local, copyrpc_core::bulk::BulkError> {
        let r = self.region();
        let mut regions = copyrpc_core::bulk::Regions::<1>::new();
        regions.add(r)?;
        if len > self.buf_bytes as u64 {
            return Err(copyrpc_core::bulk::BulkError::BeyondRegion);
        }
        regions.local(r.lkey, self.ptr(b) as u64, len)
    }
}
