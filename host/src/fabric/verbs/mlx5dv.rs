//! Hand-written bindings for the few parts of `<infiniband/mlx5dv.h>` (rdma-core 44..) the
//! verbs fabric uses: `mlx5dv_init_obj` with its `mlx5dv_obj` / `mlx5dv_qp` / `mlx5dv_cq`
//! / `mlx5dv_srq` structs, and `mlx5dv_create_qp` with `mlx5dv_qp_init_attr`.
//!
//! rdma-sys has no mlx5dv, and bindgen lays `mlx5_wqe_ctrl_seg` out wrong (20 bytes instead
//! of 16: the header's `packed` with `aligned(4)` has no bindgen equivalent), so nothing
//! here is generated. The structs carry the C field names so they read against the header,
//! and `tests/verbs_mlx5dv_layout.rs` compiles a C program against the installed header and
//! compares every size and offset. `build.rs` links `libmlx5`.

#![allow(non_camel_case_types)]

use std::ffi::{c_int, c_void};

use rdma_sys::{ibv_context, ibv_cq, ibv_device, ibv_qp, ibv_qp_init_attr_ex, ibv_srq};

/// `mlx5dv_obj_type::MLX5DV_OBJ_QP`.
pub const MLX5DV_OBJ_QP: u64 = 1 << 0;
/// `mlx5dv_obj_type::MLX5DV_OBJ_CQ`.
pub const MLX5DV_OBJ_CQ: u64 = 1 << 1;
/// `mlx5dv_obj_type::MLX5DV_OBJ_SRQ`.
pub const MLX5DV_OBJ_SRQ: u64 = 1 << 2;
/// `mlx5dv_srq_comp_mask::MLX5DV_SRQ_MASK_SRQN`: ask `mlx5dv_init_obj` for `srqn`.
pub const MLX5DV_SRQ_MASK_SRQN: u64 = 1 << 0;
/// `mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS`.
pub const MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS: u64 = 1 << 0;
/// `mlx5dv_qp_create_flags::MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`.
pub const MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE: u32 = 1 << 3;

/// `struct mlx5dv_qp` (the `sq` / `rq` member).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct mlx5dv_qp_wq {
    /// Queue buffer.
    pub buf: *mut c_void,
    /// Entries (a power of two).
    pub wqe_cnt: u32,
    /// Bytes per entry.
    pub stride: u32,
}

/// `struct mlx5dv_qp` (the `bf` member).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct mlx5dv_qp_bf {
    /// BlueFlame / doorbell register.
    pub reg: *mut c_void,
    /// Size of one BlueFlame buffer, 0 without BlueFlame.
    pub size: u32,
}

/// `struct mlx5dv_qp`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct mlx5dv_qp {
    /// Doorbell record: `[MLX5_RCV_DBR]`, `[MLX5_SND_DBR]` (big-endian words).
    pub dbrec: *mut u32,
    /// Send queue.
    pub sq: mlx5dv_qp_wq,
    /// Receive queue (unused with an SRQ).
    pub rq: mlx5dv_qp_wq,
    /// BlueFlame register.
    pub bf: mlx5dv_qp_bf,
    /// Which optional fields to fill (we ask for none).
    pub comp_mask: u64,
    /// `off_t uar_mmap_offset`.
    pub uar_mmap_offset: libc::off_t,
    /// Raw-packet QPs only.
    pub tirn: u32,
    /// Raw-packet QPs only.
    pub tisn: u32,
    /// Raw-packet QPs only.
    pub rqn: u32,
    /// Raw-packet QPs only.
    pub sqn: u32,
    /// Raw-packet QPs only.
    pub tir_icm_addr: u64,
}

/// `struct mlx5dv_cq`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct mlx5dv_cq {
    /// CQE buffer.
    pub buf: *mut c_void,
    /// Doorbell record: `[MLX5_CQ_SET_CI]`, `[MLX5_CQ_ARM_DB]`.
    pub dbrec: *mut u32,
    /// Entries (a power of two).
    pub cqe_cnt: u32,
    /// 64 or 128.
    pub cqe_size: u32,
    /// UAR page for arming (unused: we poll).
    pub cq_uar: *mut c_void,
    /// CQ number.
    pub cqn: u32,
    /// Which optional fields to fill (we ask for none).
    pub comp_mask: u64,
}

/// `struct mlx5dv_srq`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct mlx5dv_srq {
    /// WQE buffer.
    pub buf: *mut c_void,
    /// Doorbell record (one big-endian word).
    pub dbrec: *mut u32,
    /// Bytes per WQE.
    pub stride: u32,
    /// Free-list head index.
    pub head: u32,
    /// Free-list tail index.
    pub tail: u32,
    /// Which optional fields to fill (`MLX5DV_SRQ_MASK_SRQN` for `srqn`).
    pub comp_mask: u64,
    /// SRQ number (filled when `comp_mask` asks for it).
    pub srqn: u32,
}

/// Declares one `{in, out}` member type of `struct mlx5dv_obj`.
macro_rules! obj_pair {
    ($name:ident, $in:ty, $out:ty, $doc:literal) => {
        #[doc = $doc]
        #[derive(Clone, Copy, Debug)]
        #[repr(C)]
        pub struct $name {
            /// The verbs object.
            pub in_: *mut $in,
            /// Where to write its mlx5 description.
            pub out: *mut $out,
        }
    };
}

obj_pair!(mlx5dv_obj_qp, ibv_qp, mlx5dv_qp, "`mlx5dv_obj.qp`.");
obj_pair!(mlx5dv_obj_cq, ibv_cq, mlx5dv_cq, "`mlx5dv_obj.cq`.");
obj_pair!(mlx5dv_obj_srq, ibv_srq, mlx5dv_srq, "`mlx5dv_obj.srq`.");
obj_pair!(
    mlx5dv_obj_unused,
    c_void,
    c_void,
    "`mlx5dv_obj.{rwq, dm, ah, pd}`, which we never ask for."
);

/// `struct mlx5dv_obj`. The members we do not use (`rwq`, `dm`, `ah`, `pd`, `devx`) are
/// kept as untyped pairs so the offsets match the header.
///
/// rdma-core 55 added the `devx` pair at the end (commit "mlx5: Extend mlx5dv_init_obj()
/// API for devx object": 112 → 128 bytes on LP64). This struct has it, so it is the
/// larger of the two: `mlx5dv_init_obj` (`_mlx5dv_init_obj` in providers/mlx5/mlx5.c)
/// reads only the pairs whose `MLX5DV_OBJ_*` bit is asked for, so an older library never
/// looks past byte 112 and a newer one finds every pair it knows inside this struct.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct mlx5dv_obj {
    /// `qp.in` / `qp.out`.
    pub qp: mlx5dv_obj_qp,
    /// `cq.in` / `cq.out`.
    pub cq: mlx5dv_obj_cq,
    /// `srq.in` / `srq.out`.
    pub srq: mlx5dv_obj_srq,
    /// `rwq` (unused).
    pub rwq: mlx5dv_obj_unused,
    /// `dm` (unused).
    pub dm: mlx5dv_obj_unused,
    /// `ah` (unused).
    pub ah: mlx5dv_obj_unused,
    /// `pd` (unused).
    pub pd: mlx5dv_obj_unused,
    /// `devx` (unused; rdma-core 55 and later).
    pub devx: mlx5dv_obj_unused,
}

/// `struct mlx5dv_dc_init_attr` (DC transport only; zero for RC).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct mlx5dv_dc_init_attr {
    /// `enum mlx5dv_dc_type`.
    pub dc_type: u32,
    /// The `union { uint64_t dct_access_key; struct mlx5dv_dci_streams dci_streams; }`.
    pub dct_access_key: u64,
}

/// `struct mlx5dv_qp_init_attr`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct mlx5dv_qp_init_attr {
    /// `enum mlx5dv_qp_init_attr_mask` bits saying which fields are set.
    pub comp_mask: u64,
    /// `enum mlx5dv_qp_create_flags`.
    pub create_flags: u32,
    /// DC only.
    pub dc_init_attr: mlx5dv_dc_init_attr,
    /// `enum mlx5dv_qp_create_send_ops_flags` (mlx5-specific send ops; none used).
    pub send_ops_flags: u64,
}

extern "C" {
    /// `int mlx5dv_init_obj(struct mlx5dv_obj *obj, uint64_t obj_type)`: fills the `out`
    /// structs of the objects named in `obj_type`. Returns 0 or an errno.
    pub fn mlx5dv_init_obj(obj: *mut mlx5dv_obj, obj_type: u64) -> c_int;

    /// `struct ibv_qp *mlx5dv_create_qp(struct ibv_context *, struct ibv_qp_init_attr_ex *,
    /// struct mlx5dv_qp_init_attr *)`: `ibv_create_qp_ex` with mlx5 extras. NULL and errno
    /// on failure.
    pub fn mlx5dv_create_qp(
        context: *mut ibv_context,
        qp_attr: *mut ibv_qp_init_attr_ex,
        mlx5_qp_attr: *mut mlx5dv_qp_init_attr,
    ) -> *mut ibv_qp;

    /// `bool mlx5dv_is_supported(struct ibv_device *device)`: whether the mlx5 provider
    /// drives the device.
    pub fn mlx5dv_is_supported(device: *mut ibv_device) -> bool;
}

// The sizes the header has on LP64 (toolchain.md §1 lists 96 / 48 / 48 / 112 for
// rdma-core 44; `mlx5dv_obj` is 128 from rdma-core 55, see above); the test against the
// header checks every offset too.
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(std::mem::size_of::<mlx5dv_qp>() == 96);
    assert!(std::mem::size_of::<mlx5dv_cq>() == 48);
    assert!(std::mem::size_of::<mlx5dv_srq>() == 48);
    assert!(std::mem::size_of::<mlx5dv_obj>() == 128);
    assert!(std::mem::size_of::<mlx5dv_qp_init_attr>() == 40);
};
