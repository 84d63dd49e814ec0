//! Checks the hand-written mlx5dv bindings (`host/src/fabric/verbs/mlx5dv.rs`) against
//! the system `<infiniband/mlx5dv.h>`: a C program (`tests/c/mlx5dv_structs.c`) compiled
//! against the installed header prints every size, offset and constant we bind. A
//! missing header or compiler is a failure, not a skip (`scripts/setup.sh` installs
//! libibverbs-dev).

use std::collections::HashMap;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use copyrpc_host::fabric::verbs::mlx5dv::{self, *};

fn c_facts() -> HashMap<String, u64> {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c/mlx5dv_structs.c");
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("host_mlx5dv_structs");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let status = Command::new(&cc)
        .args(["-std=gnu11", "-Wall", "-Werror", "-O0", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}`: {e}"));
    assert!(
        status.success(),
        "compiling {} against <infiniband/mlx5dv.h> failed; is libibverbs-dev installed? \
         (scripts/setup.sh installs it)",
        src.display()
    );
    let out = Command::new(&exe).output().expect("run the struct probe");
    assert!(
        out.status.success(),
        "struct probe exited with {}",
        out.status
    );
    String::from_utf8(out.stdout)
        .expect("ASCII")
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').expect("key value");
            (k.to_owned(), v.parse().expect("number"))
        })
        .collect()
}

#[test]
fn hand_written_mlx5dv_bindings_match_the_header() {
    let c = c_facts();
    let get = |k: &str| -> u64 { *c.get(k).unwrap_or_else(|| panic!("C printed no `{k}`")) };
    macro_rules! check {
        ($c:literal, $t:ty, [$($cf:literal => $($rf:ident).+),* $(,)?]) => {{
            assert_eq!(size_of::<$t>() as u64, get(concat!("size.", $c)), "sizeof {}", $c);
            $(
                assert_eq!(
                    offset_of!($t, $($rf).+) as u64,
                    get(concat!("off.", $c, ".", $cf)),
                    "offsetof({}, {})", $c, $cf
                );
            )*
        }};
    }
    check!("mlx5dv_qp", mlx5dv_qp, [
        "dbrec" => dbrec,
        "sq.buf" => sq.buf, "sq.wqe_cnt" => sq.wqe_cnt, "sq.stride" => sq.stride,
        "rq.buf" => rq.buf, "rq.wqe_cnt" => rq.wqe_cnt, "rq.stride" => rq.stride,
        "bf.reg" => bf.reg, "bf.size" => bf.size,
        "comp_mask" => comp_mask, "uar_mmap_offset" => uar_mmap_offset,
        "tirn" => tirn, "tisn" => tisn, "rqn" => rqn, "sqn" => sqn,
        "tir_icm_addr" => tir_icm_addr,
    ]);
    check!("mlx5dv_cq", mlx5dv_cq, [
        "buf" => buf, "dbrec" => dbrec, "cqe_cnt" => cqe_cnt, "cqe_size" => cqe_size,
        "cq_uar" => cq_uar, "cqn" => cqn, "comp_mask" => comp_mask,
    ]);
    check!("mlx5dv_srq", mlx5dv_srq, [
        "buf" => buf, "dbrec" => dbrec, "stride" => stride, "head" => head,
        "tail" => tail, "comp_mask" => comp_mask, "srqn" => srqn,
    ]);
    // `mlx5dv_obj` grew a `devx` pair in rdma-core 55 (112 → 128 bytes). Ours has it, so
    // it is the larger one: every pair the installed header has must sit where ours
    // does, and the header may end before `devx` (older) or right after it (newer).
    let header = get("size.mlx5dv_obj");
    assert!(
        header == offset_of!(mlx5dv_obj, devx) as u64 || header == size_of::<mlx5dv_obj>() as u64,
        "sizeof mlx5dv_obj is {header} in the header: neither rdma-core < 55 (112) nor >= 55 (128)"
    );
    for (c, ours) in [
        ("qp.in", offset_of!(mlx5dv_obj, qp.in_)),
        ("qp.out", offset_of!(mlx5dv_obj, qp.out)),
        ("cq.in", offset_of!(mlx5dv_obj, cq.in_)),
        ("cq.out", offset_of!(mlx5dv_obj, cq.out)),
        ("srq.in", offset_of!(mlx5dv_obj, srq.in_)),
        ("srq.out", offset_of!(mlx5dv_obj, srq.out)),
        ("rwq.in", offset_of!(mlx5dv_obj, rwq.in_)),
        ("dm.in", offset_of!(mlx5dv_obj, dm.in_)),
        ("ah.in", offset_of!(mlx5dv_obj, ah.in_)),
        ("pd.in", offset_of!(mlx5dv_obj, pd.in_)),
        ("pd.out", offset_of!(mlx5dv_obj, pd.out)),
    ] {
        assert_eq!(
            ours as u64,
            get(&format!("off.mlx5dv_obj.{c}")),
            "offsetof(mlx5dv_obj, {c})"
        );
    }
    check!("mlx5dv_dc_init_attr", mlx5dv_dc_init_attr, [
        "dc_type" => dc_type, "dct_access_key" => dct_access_key,
    ]);
    check!("mlx5dv_qp_init_attr", mlx5dv_qp_init_attr, [
        "comp_mask" => comp_mask, "create_flags" => create_flags,
        "dc_init_attr" => dc_init_attr, "send_ops_flags" => send_ops_flags,
    ]);
    for (name, ours) in [
        ("MLX5DV_OBJ_QP", mlx5dv::MLX5DV_OBJ_QP),
        ("MLX5DV_OBJ_CQ", mlx5dv::MLX5DV_OBJ_CQ),
        ("MLX5DV_OBJ_SRQ", mlx5dv::MLX5DV_OBJ_SRQ),
        (
            "MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS",
            mlx5dv::MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS,
        ),
        (
            "MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE",
            u64::from(mlx5dv::MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE),
        ),
        ("MLX5DV_SRQ_MASK_SRQN", mlx5dv::MLX5DV_SRQ_MASK_SRQN),
    ] {
        assert_eq!(ours, get(&format!("const.{name}")), "{name}");
    }
}

#[test]
fn mlx5dv_init_obj_links_and_rejects_an_empty_request() {
    // Proves libmlx5 is linked and the symbol resolves without a device: asking for no
    // object type is EINVAL (rdma-core 44; toolchain.md §3 measured the same).
    // SAFETY: mlx5dv_obj is raw pointers only; all-null is valid.
    let mut obj: mlx5dv_obj = unsafe { std::mem::zeroed() };
    // SAFETY: no object type requested, so the library dereferences none of the
    // (null) pointers.
    let rc = unsafe { mlx5dv::mlx5dv_init_obj(&mut obj, 0) };
    assert_eq!(rc, libc::EINVAL, "mlx5dv_init_obj(&empty, 0)");
}
