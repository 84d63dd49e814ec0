//! The SRQ consumer (docs/spec/mlx5.md#srq): the device half of the free list.

use core::sync::atomic::Ordering;

use crate::layout::INVALID_LKEY;

use super::raw::Raw;

/// Largest `max_gs` the model reads (stride 512).
pub(crate) const MAX_GS: usize = 31;

/// One receive scatter entry.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RecvSge {
    pub lkey: u32,
    pub addr: u64,
    pub len: u32,
}

/// The scatter list of one SRQ WQE (zero-length entries already skipped).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scatter {
    pub sges: [RecvSge; MAX_GS],
    pub n: usize,
}

impl Scatter {
    /// Total bytes the list can take.
    pub(crate) fn capacity(&self) -> u64 {
        self.sges[..self.n].iter().map(|s| u64::from(s.len)).sum()
    }
}

/// Device-side state of an SRQ.
#[derive(Debug)]
pub(crate) struct SimSrq {
    raw: Raw,
    /// The one-word doorbell record.
    dbrec: Raw,
    stride: u32,
    wqe_cnt: u32,
    max_gs: u32,
    pub srqn: u32,
    pub pd: u32,
    /// Next WQE the device consumes (`hw_head`), `0 .. wqe_cnt`.
    pub head: u16,
    /// WQEs consumed, mod 2^16 (compared with the doorbell record's posted count).
    pub count: u16,
}

impl SimSrq {
    /// Links the free list as `mlx5_alloc_srq_buf` does (`next[i] = i + 1`, the last
    /// back to 0) and zeroes the doorbell record. `raw` covers `wqe_cnt * stride` bytes.
    pub(crate) fn new(raw: Raw, dbrec: Raw, wqe_cnt: u32, stride: u32, srqn: u32, pd: u32) -> Self {
        // Relaxed: not shared yet (as in `SimCq::new`).
        dbrec.store_u32(0, 0, Ordering::Relaxed);
        for i in 0..wqe_cnt {
            let next = if i + 1 == wqe_cnt { 0 } else { i + 1 } as u16;
            raw.write(i as usize * stride as usize + 2, &next.to_be_bytes());
        }
        Self {
            raw,
            dbrec,
            stride,
            wqe_cnt,
            max_gs: ((stride - 16) / 16).min(MAX_GS as u32),
            srqn,
            pd,
            head: 0,
            count: 0,
        }
    }

    /// WQEs posted (per the doorbell record) and not yet consumed.
    pub(crate) fn available(&self) -> u16 {
        // A-SRQ-DB (pairs with R-SRQ-DB in `Srq::ring_doorbell`): the data segments and
        // links of every WQE counted are visible.
        let posted = u32::from_be(self.dbrec.load_u32(0, Ordering::Acquire)) as u16;
        posted.wrapping_sub(self.count)
    }

    /// Consumes the WQE at the head, following its `next_wqe_index` read now
    /// (docs/spec/mlx5.md#srq). Call only when [`available`](Self::available) is nonzero.
    /// `Err` if the list links outside the SRQ (a malformed receive WQE).
    pub(crate) fn take(&mut self) -> Result<u16, ()> {
        let idx = self.head;
        if u32::from(idx) >= self.wqe_cnt {
            return Err(());
        }
        let mut next = [0u8; 2];
        self.raw
            .read(usize::from(idx) * self.stride as usize + 2, &mut next);
        self.head = u16::from_be_bytes(next);
        self.count = self.count.wrapping_add(1);
        Ok(idx)
    }

    /// The scatter list of WQE `idx`: data segments from offset 16 until the
    /// `MLX5_INVALID_LKEY` terminator or `max_gs`; zero-length entries skipped.
    pub(crate) fn scatter(&self, idx: u16) -> Scatter {
        let mut s = Scatter {
            sges: [RecvSge::default(); MAX_GS],
            n: 0,
        };
        let base = usize::from(idx) * self.stride as usize + 16;
        for k in 0..self.max_gs as usize {
            let mut b = [0u8; 16];
            self.raw.read(base + k * 16, &mut b);
            let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            let lkey = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
            let addr = u64::from_be_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]);
            if lkey == INVALID_LKEY {
                break;
            }
            if len != 0 {
                s.sges[s.n] = RecvSge { lkey, addr, len };
                s.n += 1;
            }
        }
        s
    }
}
