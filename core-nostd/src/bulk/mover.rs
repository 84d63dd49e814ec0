//! Transfers split into one-sided operations, at most `depth` in flight each, every
//! operation on a leased slot (`ops`), completed by generation-tagged wr_id.

#![allow(unsafe_code)]

use mlx5_raw::{Remote, Sge};

use super::region::Local;
use super::wire::Desc;
use super::BulkError;
use crate::ops::{OpError, OpHandle, OpTable, SlotCompletion, SlotPool, SlotTable, WrId};

/// Which way a transfer moves bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// RDMA READ: remote into local.
    Read,
    /// RDMA WRITE: local into remote.
    Write,
}

/// Why a post was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostRefused {
    /// No room now (send queue, raw-op window); retry after completions.
    Full,
    /// The connection is gone: nothing will ever post.
    Dead,
}

/// Where the mover's one-sided operations go: one signaled READ or WRITE per call,
/// whose completion the caller reports to [`Mover::complete`] with the same `wr`.
pub trait OneSided {
    /// Posts one operation.
    ///
    /// # Safety
    ///
    /// `local` lies in registered memory that Rust code leaves alone until `wr`
    /// completes.
    unsafe fn post(
        &mut self,
        dir: Dir,
        wr: WrId,
        remote: Remote,
        local: Sge,
    ) -> Result<(), PostRefused>;
}

#[derive(Debug, Clone, Copy)]
struct Transfer {
    op: OpHandle,
    dir: Dir,
    local: Local,
    remote: Desc,
    /// Bytes posted, and bytes completed.
    posted: u64,
    done: u64,
    in_flight: u16,
    depth: u16,
    /// No more posts: failed or cancelled. Kept until `in_flight` drains.
    stopped: bool,
}

/// Counters of a mover's life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MoverStats {
    /// Operations posted.
    pub posted: u64,
    /// Completions counted as stale (no live lease).
    pub stale: u64,
    /// Completions in error.
    pub failed: u64,
}

/// Up to `N` transfers over `S` slots (one operation in flight per slot).
#[derive(Debug)]
pub struct Mover<const N: usize, const S: usize> {
    ops: OpTable<N>,
    words: SlotTable<S>,
    pool: SlotPool<S>,
    /// Bytes each slot's operation covers (valid while leased).
    chunk_len: [u64; S],
    xfers: [Option<Transfer>; N],
    chunk: u64,
    stats: MoverStats,
}

impl<const N: usize, const S: usize> Mover<N, S> {
    /// A mover splitting transfers into operations of at most `chunk` bytes (1 ..= 2^31 - 1).
    pub fn new(chunk: u32) -> Self {
        assert!(
            chunk > 0 && chunk < 1 << 31,
            "an SGE carries 1 ..= 2^31 - 1 bytes"
        );
        Self {
            ops: OpTable::new(),
            words: SlotTable::new(),
            pool: SlotPool::new(),
            chunk_len: [0; S],
            xfers: [None; N],
            chunk: u64::from(chunk),
            stats: MoverStats::default(),
        }
    }

    /// The op table: poll a transfer's handle here.
    pub fn ops(&self) -> &OpTable<N> {
        &self.ops
    }

    /// Starts moving `local.len` bytes between `local` and `remote`, with at most `depth`
    /// operations in flight. Checks everything first and posts nothing: that happens in
    /// [`pump`](Self::pump).
    ///
    /// # Safety
    ///
    /// `local` lies in memory registered under its lkey that Rust code leaves alone
    /// until the returned op has ended and [`idle`](Self::idle) (or, finer,
    /// [`in_flight_of`](Self::in_flight_of)) says no operation of it is outstanding.
    pub unsafe fn start(
        &mut self,
        dir: Dir,
        local: Local,
        remote: Desc,
        depth: u16,
    ) -> Result<OpHandle, BulkError> {
        if local.len == 0 || remote.len == 0 {
            return Err(BulkError::ZeroLength);
        }
        if local.len != remote.len {
            return Err(BulkError::LengthMismatch);
        }
        if depth == 0 || usize::from(depth) > S {
            return Err(BulkError::TooDeep);
        }
        let cell = self
            .xfers
            .iter()
            .position(Option::is_none)
            .ok_or(BulkError::Op(OpError::TableFull))?;
        let op = self.ops.start().map_err(BulkError::Op)?;
        self.xfers[cell] = Some(Transfer {
            op,
            dir,
            local,
            remote,
            posted: 0,
            done: 0,
            in_flight: 0,
            depth,
            stopped: false,
        });
        Ok(op)
    }

    /// Posts every operation that a transfer's depth, the free slots and `link` allow;
    /// returns how many were posted.
    pub fn pump(&mut self, link: &mut impl OneSided) -> usize {
        let mut n = 0;
        for i in 0..N {
            while let Some(t) = self.xfers[i] {
                if t.stopped || t.posted == t.local.len || t.in_flight == t.depth {
                    break;
                }
                if self.ops.is_done(t.op) {
                    // Cancelled: post no more.
                    self.stop(i);
                    break;
                }
                let Ok(lease) = self.pool.lease(&self.words, t.op, 1) else {
                    return n;
                };
                let len = self.chunk.min(t.local.len - t.posted);
                let wr = lease.wr_id(0);
                let remote = Remote {
                    addr: t.remote.addr + t.posted,
                    rkey: t.remote.rkey,
                };
                let sge = Sge {
                    addr: t.local.addr + t.posted,
                    len: len as u32,
                    lkey: t.local.lkey,
                };
                // SAFETY: `start`'s caller keeps the local buffer registered and
                // untouched until this operation completes.
                match unsafe { link.post(t.dir, wr, remote, sge) } {
                    Ok(()) => {
                        self.chunk_len[usize::from(lease.slot)] = len;
                        let t = self.xfers[i].as_mut().expect("checked above");
                        t.posted += len;
                        t.in_flight += 1;
                        self.stats.posted += 1;
                        n += 1;
                    }
                    Err(refused) => {
                        // Never posted: count it complete so the slot can come back.
                        let _ = self.words.complete(wr, true);
                        let _ = self.pool.reclaim(&self.words, lease.slot);
                        if refused == PostRefused::Dead {
                            self.ops.finish(t.op, Err(OpError::Failed));
                            self.stop(i);
                        }
                        return n;
                    }
                }
            }
        }
        n
    }

    fn stop(&mut self, i: usize) {
        if let Some(t) = &mut self.xfers[i] {
            t.stopped = true;
            if t.in_flight == 0 {
                self.xfers[i] = None;
            }
        }
    }

    /// One operation completed (`ok` false for an error or flush). A failure ends its
    /// transfer's op with [`OpError::Failed`] at once (later failures of the same
    /// transfer change nothing); the slot returns to the free list here, and the
    /// transfer is forgotten once nothing of it is in flight.
    pub fn complete(&mut self, wr: WrId, ok: bool) {
        if !ok {
            self.stats.failed += 1;
        }
        let slot = match self.words.complete(wr, ok) {
            SlotCompletion::Stale => {
                self.stats.stale += 1;
                return;
            }
            // One operation per lease: the first completion is the last.
            SlotCompletion::More => return,
            SlotCompletion::Last { slot, .. } => slot,
        };
        let Some((op, failed)) = self.pool.reclaim(&self.words, slot) else {
            return;
        };
        let len = self.chunk_len[usize::from(slot)];
        let Some(i) = self
            .xfers
            .iter()
            .position(|t| t.is_some_and(|t| t.op == op))
        else {
            return;
        };
        let t = self.xfers[i].as_mut().expect("found above");
        t.in_flight -= 1;
        if failed {
            self.ops.finish(op, Err(OpError::Failed));
            t.stopped = true;
        } else {
            t.done += len;
            if t.done == t.local.len {
                self.ops.finish(op, Ok(t.done));
            }
        }
        if t.in_flight == 0 && (t.stopped || t.done == t.local.len) {
            self.xfers[i] = None;
        }
    }

    /// Fails every transfer that has not ended ([`OpError::Cancelled`], once each) and
    /// stops posting for them. Their outstanding operations keep their slots until they
    /// complete (or are flushed) and are reported to [`complete`](Self::complete).
    pub fn cancel_all(&mut self) -> usize {
        let n = self.ops.cancel_all();
        for i in 0..N {
            self.stop(i);
        }
        n
    }

    /// Operations of the transfer `op` still outstanding.
    pub fn in_flight_of(&self, op: OpHandle) -> u16 {
        self.xfers
            .iter()
            .flatten()
            .find(|t| t.op == op)
            .map_or(0, |t| t.in_flight)
    }

    /// Whether no transfer is in progress and every slot is free.
    pub fn idle(&self) -> bool {
        self.xfers.iter().all(Option::is_none) && self.pool.leased_count() == 0
    }

    /// Slots on the free list.
    pub fn free_slots(&self) -> usize {
        self.pool.free_count()
    }

    /// Counters.
    pub fn stats(&self) -> MoverStats {
        self.stats
    }
}
