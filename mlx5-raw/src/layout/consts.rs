//! Numeric constants from `mlx5dv.h` (and `include/linux/mlx5/qp.h` where the DV header
//! has no name for them). Each one names the C constant it mirrors.

/// Size of a send WQE basic block (WQEBB) in bytes. `MLX5_SEND_WQE_BB`.
pub const SEND_WQE_BB: usize = 64;
/// `log2(SEND_WQE_BB)`. `MLX5_SEND_WQE_SHIFT`.
pub const SEND_WQE_SHIFT: u32 = 6;
/// Size of one DS (data segment) unit in bytes; `qpn_ds.ds` counts these.
/// `MLX5_SEND_WQE_DS` (`linux/mlx5/qp.h`).
pub const SEND_WQE_DS: usize = 16;

/// lkey of the scatter-list terminator entry in RQ/SRQ WQEs. `MLX5_INVALID_LKEY`.
pub const INVALID_LKEY: u32 = 0x100;

/// Bit 31 of a data segment's `byte_count`: the segment is inline data. `MLX5_INLINE_SEG`.
pub const INLINE_SEG: u32 = 0x8000_0000;
/// Length bits of an inline segment's `byte_count`.
/// `MLX5_WQE_INLINE_SEG_BYTE_COUNT_MASK` (`linux/mlx5/qp.h`).
pub const INLINE_BYTE_COUNT_MASK: u32 = 0x3ff;

/// `opmod_idx_opcode` bits holding the u16 WQE index. `MLX5_WQE_CTRL_WQE_INDEX_MASK`.
pub const WQE_CTRL_WQE_INDEX_MASK: u32 = 0x00ff_ff00;
/// Shift of the WQE index inside `opmod_idx_opcode`. `MLX5_WQE_CTRL_WQE_INDEX_SHIFT`.
pub const WQE_CTRL_WQE_INDEX_SHIFT: u32 = 8;
/// `opmod_idx_opcode` bits holding the opcode. `MLX5_WQE_CTRL_OPCODE_MASK`.
pub const WQE_CTRL_OPCODE_MASK: u32 = 0xff;
/// `qpn_ds` bits holding the DS count. `MLX5_WQE_CTRL_DS_MASK`.
pub const WQE_CTRL_DS_MASK: u32 = 0x3f;
/// Largest QPN (24 bits).
pub const QPN_MASK: u32 = 0x00ff_ffff;

/// Index of the receive-queue word in a QP doorbell record. `MLX5_RCV_DBR`.
pub const RCV_DBR: usize = 0;
/// Index of the send-queue word in a QP doorbell record. `MLX5_SND_DBR`.
pub const SND_DBR: usize = 1;
/// Index of the consumer-index word in a CQ doorbell record. `MLX5_CQ_SET_CI` (`mlx5.h`).
pub const CQ_SET_CI: usize = 0;
/// Index of the arm word in a CQ doorbell record. `MLX5_CQ_ARM_DB` (`mlx5.h`).
pub const CQ_ARM_DB: usize = 1;
/// Bits of the CQ consumer index carried in the `SET_CI` record.
pub const CQ_CI_MASK: u32 = 0x00ff_ffff;

/// Owner bit of a CQE's `op_own`. `MLX5_CQE_OWNER_MASK`.
pub const CQE_OWNER_MASK: u8 = 1;
/// Solicited-event bit of `op_own` (`mlx5dv_get_cqe_se`).
pub const CQE_SE_MASK: u8 = 0x02;
/// CQE opcode value of a software-initialised slot. `MLX5_CQE_INVALID`.
pub const CQE_INVALID: u8 = 15;
/// `op_own` of a software-initialised CQE slot: `MLX5_CQE_INVALID << 4`
/// (`cq.c mlx5_alloc_cq_buf`).
pub const CQE_INVALID_OP_OWN: u8 = CQE_INVALID << 4;
/// `op_own` bit: responder data scattered into the 64-byte CQE. `MLX5_INLINE_SCATTER_32`.
pub const INLINE_SCATTER_32: u8 = 0x4;
/// `op_own` bit: responder data scattered into the first half of a 128-byte CQE.
/// `MLX5_INLINE_SCATTER_64`.
pub const INLINE_SCATTER_64: u8 = 0x8;
/// `op_own[3:2]` value of a compressed-session title CQE. `MLX5_COMPRESSED`
/// (`linux/mlx5/device.h`).
pub const CQE_FORMAT_COMPRESSED: u8 = 3;
