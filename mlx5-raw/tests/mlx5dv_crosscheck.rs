//! Cross-checks our layouts against the system `<infiniband/mlx5dv.h>`, byte for byte.
//!
//! A small C program (`tests/c/mlx5dv_layout.c`) is compiled against the installed header
//! (Debian `libibverbs-dev`; `scripts/setup.sh` installs it) and prints every size, offset
//! and constant we mirror, plus the bytes rdma-core's own inline helpers
//! (`mlx5dv_set_ctrl_seg`, `mlx5dv_set_data_seg`, the CQE getters) produce. Each value is
//! compared with the Rust side. A missing header or compiler is a failure, not a skip: the
//! test command installs both.

use std::collections::HashMap;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use mlx5_raw::layout::{
    self, Cqe64, CqeOpcode, CtrlSeg, DataSeg, ErrCqe, FmCeSe, InlineSegHdr, RaddrSeg, SendOpcode,
    SrqNextSeg, Syndrome,
};
use zerocopy::big_endian::{U16, U32, U64};
use zerocopy::{FromZeros, IntoBytes};

/// Compiles and runs the C program once per test binary; returns its key/value output.
fn c_facts() -> &'static HashMap<String, String> {
    static FACTS: OnceLock<HashMap<String, String>> = OnceLock::new();
    FACTS.get_or_init(|| {
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c/mlx5dv_layout.c");
        let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let exe = out_dir.join("mlx5dv_layout");
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
        let output = Command::new(&exe).output().expect("run the layout probe");
        assert!(
            output.status.success(),
            "layout probe exited with {}",
            output.status
        );
        String::from_utf8(output.stdout)
            .expect("probe output is ASCII")
            .lines()
            .map(|l| {
                let (k, v) = l.split_once(' ').expect("key value");
                (k.to_owned(), v.to_owned())
            })
            .collect()
    })
}

fn c_num(key: &str) -> u64 {
    let v = c_facts()
        .get(key)
        .unwrap_or_else(|| panic!("the C probe printed no `{key}`"));
    v.parse()
        .unwrap_or_else(|_| panic!("`{key}` = `{v}` is not a number"))
}

fn c_bytes(key: &str) -> Vec<u8> {
    let v = c_facts()
        .get(&format!("bytes.{key}"))
        .unwrap_or_else(|| panic!("the C probe printed no bytes for `{key}`"));
    (0..v.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&v[i..i + 2], 16).expect("hex"))
        .collect()
}

/// `check!(CStruct, RustType, [c_field => rust_field, ...])`: size and every offset.
macro_rules! check_layout {
    ($c:literal, $t:ty, [$($cf:literal => $rf:ident),* $(,)?]) => {{
        assert_eq!(size_of::<$t>() as u64, c_num(concat!("size.", $c)), "sizeof {}", $c);
        $(
            assert_eq!(
                offset_of!($t, $rf) as u64,
                c_num(concat!("off.", $c, ".", $cf)),
                "offsetof({}, {})", $c, $cf
            );
        )*
    }};
}

#[test]
fn segment_layouts_match_mlx5dv_h() {
    check_layout!("mlx5_wqe_ctrl_seg", CtrlSeg, [
        "opmod_idx_opcode" => opmod_idx_opcode,
        "qpn_ds" => qpn_ds,
        "signature" => signature,
        "dci_stream_channel_id" => dci_stream_channel_id,
        "fm_ce_se" => fm_ce_se,
        "imm" => imm,
    ]);
    check_layout!("mlx5_wqe_raddr_seg", RaddrSeg, [
        "raddr" => raddr, "rkey" => rkey, "reserved" => reserved,
    ]);
    check_layout!("mlx5_wqe_data_seg", DataSeg, [
        "byte_count" => byte_count, "lkey" => lkey, "addr" => addr,
    ]);
    check_layout!("mlx5_wqe_inl_data_seg", InlineSegHdr, ["byte_count" => byte_count]);
    check_layout!("mlx5_wqe_srq_next_seg", SrqNextSeg, [
        "rsvd0" => rsvd0, "next_wqe_index" => next_wqe_index,
        "signature" => signature, "rsvd1" => rsvd1,
    ]);
}

#[test]
fn cqe_layouts_match_mlx5dv_h() {
    check_layout!("mlx5_cqe64", Cqe64, [
        "ml_path" => ml_path,
        "slid" => slid,
        "flags_rqpn" => flags_rqpn,
        "srqn_uidx" => srqn_uidx,
        "imm_inval_pkey" => imm_inval_pkey,
        "byte_cnt" => byte_cnt,
        "timestamp" => timestamp,
        "sop_drop_qpn" => sop_drop_qpn,
        "wqe_counter" => wqe_counter,
        "signature" => signature,
        "op_own" => op_own,
    ]);
    check_layout!("mlx5_err_cqe", ErrCqe, [
        "rsvd0" => rsvd0,
        "srqn" => srqn,
        "rsvd1" => rsvd1,
        "vendor_err_synd" => vendor_err_synd,
        "syndrome" => syndrome,
        "s_wqe_opcode_qpn" => s_wqe_opcode_qpn,
        "wqe_counter" => wqe_counter,
        "signature" => signature,
        "op_own" => op_own,
    ]);
}

#[test]
fn constants_match_mlx5dv_h() {
    let send = [
        ("MLX5_OPCODE_NOP", SendOpcode::Nop),
        ("MLX5_OPCODE_RDMA_WRITE", SendOpcode::RdmaWrite),
        ("MLX5_OPCODE_RDMA_WRITE_IMM", SendOpcode::RdmaWriteImm),
        ("MLX5_OPCODE_SEND", SendOpcode::Send),
        ("MLX5_OPCODE_SEND_IMM", SendOpcode::SendImm),
        ("MLX5_OPCODE_RDMA_READ", SendOpcode::RdmaRead),
    ];
    for (name, op) in send {
        assert_eq!(op as u64, c_num(&format!("const.{name}")), "{name}");
    }
    let cqe = [
        ("MLX5_CQE_REQ", CqeOpcode::Req),
        ("MLX5_CQE_RESP_WR_IMM", CqeOpcode::RespWrImm),
        ("MLX5_CQE_RESP_SEND", CqeOpcode::RespSend),
        ("MLX5_CQE_RESP_SEND_IMM", CqeOpcode::RespSendImm),
        ("MLX5_CQE_RESP_SEND_INV", CqeOpcode::RespSendInv),
        ("MLX5_CQE_REQ_ERR", CqeOpcode::ReqErr),
        ("MLX5_CQE_RESP_ERR", CqeOpcode::RespErr),
        ("MLX5_CQE_INVALID", CqeOpcode::Invalid),
    ];
    for (name, op) in cqe {
        assert_eq!(
            u64::from(op.as_u8()),
            c_num(&format!("const.{name}")),
            "{name}"
        );
    }
    let synd = [
        ("LOCAL_LENGTH_ERR", Syndrome::LocalLengthErr),
        ("LOCAL_QP_OP_ERR", Syndrome::LocalQpOpErr),
        ("LOCAL_PROT_ERR", Syndrome::LocalProtErr),
        ("WR_FLUSH_ERR", Syndrome::WrFlushErr),
        ("MW_BIND_ERR", Syndrome::MwBindErr),
        ("BAD_RESP_ERR", Syndrome::BadRespErr),
        ("LOCAL_ACCESS_ERR", Syndrome::LocalAccessErr),
        ("REMOTE_INVAL_REQ_ERR", Syndrome::RemoteInvalReqErr),
        ("REMOTE_ACCESS_ERR", Syndrome::RemoteAccessErr),
        ("REMOTE_OP_ERR", Syndrome::RemoteOpErr),
        ("TRANSPORT_RETRY_EXC_ERR", Syndrome::TransportRetryExcErr),
        ("RNR_RETRY_EXC_ERR", Syndrome::RnrRetryExcErr),
        ("REMOTE_ABORTED_ERR", Syndrome::RemoteAbortedErr),
    ];
    for (name, s) in synd {
        assert_eq!(
            u64::from(s.as_u8()),
            c_num(&format!("const.MLX5_CQE_SYNDROME_{name}")),
            "syndrome {name}"
        );
    }
    let fixed = [
        (
            "MLX5_WQE_CTRL_CQ_UPDATE",
            u64::from(FmCeSe::CQ_UPDATE.bits()),
        ),
        (
            "MLX5_WQE_CTRL_SOLICITED",
            u64::from(FmCeSe::SOLICITED.bits()),
        ),
        ("MLX5_WQE_CTRL_FENCE", u64::from(FmCeSe::FENCE.bits())),
        ("MLX5_SEND_WQE_BB", layout::SEND_WQE_BB as u64),
        ("MLX5_INLINE_SEG", u64::from(layout::INLINE_SEG)),
        ("MLX5_INVALID_LKEY", u64::from(layout::INVALID_LKEY)),
        ("MLX5_RCV_DBR", layout::RCV_DBR as u64),
        ("MLX5_SND_DBR", layout::SND_DBR as u64),
        ("MLX5_CQE_OWNER_MASK", u64::from(layout::CQE_OWNER_MASK)),
    ];
    for (name, ours) in fixed {
        assert_eq!(ours, c_num(&format!("const.{name}")), "{name}");
    }
}

#[test]
fn ctrl_segments_equal_mlx5dv_set_ctrl_seg() {
    let cases = [
        (
            "ctrl_tv1",
            CtrlSeg::new(
                SendOpcode::RdmaWriteImm,
                0x1234,
                0xabcde,
                3,
                FmCeSe::CQ_UPDATE | FmCeSe::SOLICITED,
                [0xde, 0xad, 0xbe, 0xef],
            ),
        ),
        (
            "ctrl_max",
            CtrlSeg::new(
                SendOpcode::RdmaRead,
                0xffff,
                0xff_ffff,
                63,
                FmCeSe::COMP_ONLY_ERR,
                [0; 4],
            ),
        ),
        (
            "ctrl_tv2",
            CtrlSeg::new(SendOpcode::Send, 7, 0x12, 2, FmCeSe::CQ_UPDATE, [0; 4]),
        ),
        (
            "ctrl_nop_fence",
            CtrlSeg::new(SendOpcode::Nop, 0, 1, 1, FmCeSe::FENCE, [0; 4]),
        ),
    ];
    for (key, ours) in cases {
        assert_eq!(ours.as_bytes(), c_bytes(key).as_slice(), "{key}");
    }
}

#[test]
fn other_segments_equal_the_c_bytes() {
    let data = DataSeg {
        byte_count: U32::new(4096),
        lkey: U32::new(0x12_3456),
        addr: U64::new(0x7f00_aabb_cc00),
    };
    assert_eq!(data.as_bytes(), c_bytes("data_tv1").as_slice());
    let term = DataSeg {
        byte_count: U32::new(0),
        lkey: U32::new(layout::INVALID_LKEY),
        addr: U64::new(0),
    };
    assert_eq!(term.as_bytes(), c_bytes("data_terminator").as_slice());
    let raddr = RaddrSeg {
        raddr: U64::new(0x7f00_1122_3340),
        rkey: U32::new(0xa1_b2c3),
        reserved: U32::new(0),
    };
    assert_eq!(raddr.as_bytes(), c_bytes("raddr_tv1").as_slice());
    let inl = InlineSegHdr {
        byte_count: U32::new(5 | layout::INLINE_SEG),
    };
    assert_eq!(inl.as_bytes(), c_bytes("inline_hdr_5").as_slice());
    let mut next = SrqNextSeg::new_zeroed();
    next.next_wqe_index = U16::new(0x0102);
    assert_eq!(next.as_bytes(), c_bytes("srq_next_0102").as_slice());
}

#[test]
fn cqes_built_in_c_decode_as_the_header_reads_them() {
    let tv3 = c_bytes("cqe_tv3");
    let mut ours = Cqe64::new_zeroed();
    ours.srqn_uidx = U32::new(0x77);
    ours.imm_inval_pkey = [0xde, 0xad, 0xbe, 0xef];
    ours.byte_cnt = U32::new(4096);
    ours.sop_drop_qpn = U32::new(0xa_bcdf);
    ours.wqe_counter = U16::new(5);
    ours.op_own = (CqeOpcode::RespWrImm.as_u8() << 4) | 0b10 | 1;
    assert_eq!(ours.as_bytes(), tv3.as_slice(), "TV3 built field by field");

    let c = layout::decode_cqe(&tv3).expect("TV3 decodes");
    assert_eq!(u64::from(c.opcode.as_u8()), c_num("get.cqe_tv3.opcode"));
    assert_eq!(u64::from(c.owner), c_num("get.cqe_tv3.owner"));
    assert_eq!(u64::from(c.solicited), c_num("get.cqe_tv3.se"));
    assert_eq!(c.format, layout::CqeFormat::Normal);
    assert_eq!(c_num("get.cqe_tv3.format"), 0);
    assert_eq!(c.qpn, 0xa_bcdf);
    assert_eq!(c.wqe_counter, 5);
    assert_eq!(c.byte_cnt, 4096);
    assert_eq!(c.imm, Some([0xde, 0xad, 0xbe, 0xef]));
    assert_eq!(c.srqn_uidx, 0x77);

    let err = c_bytes("err_cqe");
    let e = layout::decode_cqe(&err).expect("error CQE decodes");
    assert_eq!(e.opcode, CqeOpcode::ReqErr);
    let err_part = e.error.expect("an error CQE carries syndromes");
    assert_eq!(err_part.syndrome, Syndrome::RemoteAccessErr);
    assert_eq!(err_part.vendor_syndrome, 0x88);
    assert_eq!(e.wqe_counter, 0x0203);
    assert_eq!(e.qpn, 0xa_bcde);
    assert_eq!(e.send_opcode, Some(SendOpcode::RdmaWriteImm.as_u8()));
}
