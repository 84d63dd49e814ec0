//! Raw descriptions of queue memory: what host code copies out of `mlx5dv_init_obj`
//! (`struct mlx5dv_qp`, `mlx5dv_cq`, `mlx5dv_srq`), or what the software device model
//! builds over memory it shares with the driver.
//!
//! These are plain `#[repr(C)]` data with raw pointers; building one is safe. Handing one
//! to [`Sq::new`](crate::sq::Sq::new), [`Cq::new`](crate::cq::Cq::new) or
//! [`Srq::new`](crate::srq::Srq::new) is `unsafe`, and those functions state what the
//! pointers must satisfy.

/// A send queue (`mlx5dv_qp.sq`, `.dbrec`, `.bf`, plus the QP number).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct SqDesc {
    /// `mlx5dv_qp.sq.buf`: `wqe_cnt * stride` bytes of WQE ring.
    pub buf: *mut u8,
    /// `mlx5dv_qp.sq.wqe_cnt`: ring size in WQEBBs; a power of two, at most 65 536.
    pub wqe_cnt: u32,
    /// `mlx5dv_qp.sq.stride`: must be 64 (`MLX5_SEND_WQE_BB`).
    pub stride: u32,
    /// `mlx5dv_qp.dbrec`: the QP's doorbell record, two BE32 words
    /// (`[RCV_DBR]`, `[SND_DBR]`); the SQ writes only `[SND_DBR]`. 4-byte aligned.
    pub dbrec: *mut u32,
    /// `mlx5dv_qp.bf.reg`: the BlueFlame/doorbell register (8-byte aligned), or null for
    /// a device that only watches the doorbell record (the software device model).
    pub bf_reg: *mut u8,
    /// `mlx5dv_qp.bf.size`: size of one of the two alternating BlueFlame buffers, or 0 if
    /// the register does not support BlueFlame (8-byte doorbells only). A multiple of 64.
    pub bf_size: u32,
    /// QP number (24 bits), written into every ctrl segment.
    pub qpn: u32,
    /// Null when `bf_reg` is this QP's own register; else the one [`SharedBf`] of every
    /// QP whose `bf_reg` is this register (rdma-core's shared BlueFlame registers): the
    /// doorbell then serialises its register write and shares the register's half.
    ///
    /// [`SharedBf`]: crate::SharedBf
    pub bf_lock: *const crate::SharedBf,
}

/// A completion queue (`struct mlx5dv_cq`).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct CqDesc {
    /// `mlx5dv_cq.buf`: `cqe_cnt * cqe_size` bytes.
    pub buf: *mut u8,
    /// `mlx5dv_cq.cqe_cnt`: a power of two, at most 2^24.
    pub cqe_cnt: u32,
    /// `mlx5dv_cq.cqe_size`: 64 or 128 (with 128 the `mlx5_cqe64` is the second half).
    pub cqe_size: u32,
    /// `mlx5dv_cq.dbrec`: two BE32 words (`[CQ_SET_CI]`, `[CQ_ARM_DB]`); the poller
    /// writes only `[CQ_SET_CI]`. 4-byte aligned.
    pub dbrec: *mut u32,
    /// `mlx5dv_cq.cqn`.
    pub cqn: u32,
}

/// A shared receive queue (`struct mlx5dv_srq`, plus its WQE count, which the DV struct
/// does not carry: for a verbs SRQ it is `tail + 1`).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct SrqDesc {
    /// `mlx5dv_srq.buf`: `wqe_cnt * stride` bytes (rdma-core may allocate more, for its
    /// ODP wait queue; those slots are not used).
    pub buf: *mut u8,
    /// `mlx5dv_srq.stride`: bytes per WQE, a power of two ≥ 32 (16-byte next segment,
    /// then `(stride - 16) / 16` data segments).
    pub stride: u32,
    /// Number of WQEs in the free list: a power of two, 2 ..= 65 536. One of them is the
    /// spare sentinel, so at most `wqe_cnt - 1` are posted at a time.
    pub wqe_cnt: u32,
    /// `mlx5dv_srq.dbrec`: one BE32 word. 4-byte aligned.
    pub dbrec: *mut u32,
    /// `mlx5dv_srq.head`: 0 for a fresh SRQ.
    pub head: u32,
    /// `mlx5dv_srq.tail`: `wqe_cnt - 1` for a fresh SRQ.
    pub tail: u32,
    /// `mlx5dv_srq.srqn`.
    pub srqn: u32,
}
