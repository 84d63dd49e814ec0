//! Golden-byte tests of the layouts against the test vectors of
//! docs/spec/mlx5.md#test-vectors (TV1, TV2, TV3), which were produced by
//! `mlx5dv_set_ctrl_seg` / `mlx5dv_set_data_seg` compiled against the real header.

use mlx5_raw::layout::{
    decode_cqe, Completion, Cqe64, CqeDecodeError, CqeError, CqeFormat, CqeOpcode, CtrlSeg,
    DataSeg, ErrCqe, FmCeSe, InlineSegHdr, RaddrSeg, SendOpcode, SrqNextSeg, Syndrome,
};
use zerocopy::big_endian::{U16, U32};
use zerocopy::{FromBytes, IntoBytes};

const TV1: [u8; 48] = [
    0x00, 0x12, 0x34, 0x09, 0x0a, 0xbc, 0xde, 0x03, 0x00, 0x00, 0x00, 0x0a, 0xde, 0xad, 0xbe,
    0xef, // ctrl
    0x00, 0x00, 0x7f, 0x00, 0x11, 0x22, 0x33, 0x40, 0x00, 0xa1, 0xb2, 0xc3, 0x00, 0x00, 0x00,
    0x00, // raddr
    0x00, 0x00, 0x10, 0x00, 0x00, 0x12, 0x34, 0x56, 0x00, 0x00, 0x7f, 0x00, 0xaa, 0xbb, 0xcc,
    0x00, // data
];

const TV2: [u8; 32] = [
    0x00, 0x00, 0x07, 0x0a, 0x00, 0x00, 0x12, 0x02, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00,
    0x00, //
    0x80, 0x00, 0x00, 0x05, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
];

const TV3: [u8; 64] = [
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, //
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, //
    0x00, 0x00, 0x00, 0x77, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10,
    0x00, //
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0xbc, 0xdf, 0x00, 0x05, 0x00, 0x13,
];

#[test]
fn tv1_rdma_write_imm_segments() {
    let ctrl = CtrlSeg::new(
        SendOpcode::RdmaWriteImm,
        0x1234,
        0xabcde,
        3,
        FmCeSe::CQ_UPDATE | FmCeSe::SOLICITED,
        [0xde, 0xad, 0xbe, 0xef],
    );
    let raddr = RaddrSeg::new(0x7f00_1122_3340, 0xa1b2c3);
    let data = DataSeg::new(4096, 0x123456, 0x7f00_aabb_cc00);
    let mut wqe = [0u8; 48];
    wqe[0..16].copy_from_slice(ctrl.as_bytes());
    wqe[16..32].copy_from_slice(raddr.as_bytes());
    wqe[32..48].copy_from_slice(data.as_bytes());
    assert_eq!(wqe, TV1);
    // The 8-byte doorbell is the first 8 bytes of the ctrl segment as in memory.
    assert_eq!(
        &ctrl.as_bytes()[..8],
        &[0x00, 0x12, 0x34, 0x09, 0x0a, 0xbc, 0xde, 0x03]
    );

    // And back.
    let c = CtrlSeg::read_from_bytes(&TV1[..16]).unwrap();
    assert_eq!(c.opcode(), 0x09);
    assert_eq!(
        SendOpcode::from_u8(c.opcode()),
        Some(SendOpcode::RdmaWriteImm)
    );
    assert_eq!(c.opmod(), 0);
    assert_eq!(c.wqe_index(), 0x1234);
    // The opcode modifier is the top byte (TV1 has none; an atomic's would be there).
    let mut with_opmod = TV1;
    with_opmod[0] = 0x08;
    let m = CtrlSeg::read_from_bytes(&with_opmod[..16]).unwrap();
    assert_eq!((m.opmod(), m.wqe_index(), m.opcode()), (0x08, 0x1234, 0x09));
    assert_eq!(c.qpn(), 0xabcde);
    assert_eq!(c.ds(), 3);
    assert_eq!(
        FmCeSe::from_bits_retain(c.fm_ce_se),
        FmCeSe::from_bits_retain(0x0a)
    );
    assert!(FmCeSe::from_bits_retain(c.fm_ce_se).is_signaled());
    assert_eq!(c.imm, [0xde, 0xad, 0xbe, 0xef]);
    let r = RaddrSeg::read_from_bytes(&TV1[16..32]).unwrap();
    assert_eq!(
        (r.raddr.get(), r.rkey.get(), r.reserved.get()),
        (0x7f00_1122_3340, 0xa1b2c3, 0)
    );
    let d = DataSeg::read_from_bytes(&TV1[32..48]).unwrap();
    assert_eq!(
        (d.byte_count.get(), d.lkey.get(), d.addr.get()),
        (4096, 0x123456, 0x7f00_aabb_cc00)
    );
}

#[test]
fn tv2_send_inline_hello() {
    let ctrl = CtrlSeg::new(SendOpcode::Send, 7, 0x12, 2, FmCeSe::CQ_UPDATE, [0; 4]);
    let hdr = InlineSegHdr::new(5);
    let mut wqe = [0u8; 32];
    wqe[0..16].copy_from_slice(ctrl.as_bytes());
    wqe[16..20].copy_from_slice(hdr.as_bytes());
    wqe[20..25].copy_from_slice(b"hello");
    assert_eq!(wqe, TV2);
    assert!(hdr.is_inline());
    assert_eq!(hdr.len(), 5);
    // A data segment's byte count in the same place (bit 31 clear) is not inline.
    let data = InlineSegHdr::read_from_bytes(&[0x00, 0x00, 0x10, 0x00]).unwrap();
    assert!(!data.is_inline());
}

#[test]
fn ctrl_seg_field_packing() {
    // Every field lands where mlx5dv_set_ctrl_seg puts it, including the ones TV1/TV2 leave 0.
    let c = CtrlSeg::new(
        SendOpcode::RdmaRead,
        0xffff,
        0xff_ffff,
        63,
        FmCeSe::FENCE,
        [1, 2, 3, 4],
    );
    assert_eq!(
        c.as_bytes(),
        &[
            0x00, 0xff, 0xff, 0x10, 0xff, 0xff, 0xff, 0x3f, 0x00, 0x00, 0x00, 0x80, 0x01, 0x02,
            0x03, 0x04
        ]
    );
    assert_eq!(
        (c.wqe_index(), c.qpn(), c.ds(), c.opcode()),
        (0xffff, 0xff_ffff, 63, 0x10)
    );
    // QPN bits above 24 fall off exactly as `qp_num << 8` does in C.
    let c = CtrlSeg::new(
        SendOpcode::Nop,
        0,
        0x0100_0001,
        1,
        FmCeSe::COMP_ONLY_ERR,
        [0; 4],
    );
    assert_eq!(c.qpn_ds, U32::new(0x0000_0101));
}

#[test]
fn srq_next_seg_bytes() {
    let s = SrqNextSeg::new(0x1234);
    assert_eq!(
        s.as_bytes(),
        &[0, 0, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    assert_eq!(s.next_wqe_index, U16::new(0x1234));
    assert_eq!(
        DataSeg::TERMINATOR.as_bytes(),
        &[0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
}

#[test]
fn opcode_values() {
    for (op, v) in [
        (SendOpcode::Nop, 0x00),
        (SendOpcode::RdmaWrite, 0x08),
        (SendOpcode::RdmaWriteImm, 0x09),
        (SendOpcode::Send, 0x0a),
        (SendOpcode::SendImm, 0x0b),
        (SendOpcode::RdmaRead, 0x10),
    ] {
        assert_eq!(op.as_u8(), v);
        assert_eq!(SendOpcode::from_u8(v), Some(op));
    }
    assert_eq!(SendOpcode::from_u8(0x11), None);
    for v in 0..16u8 {
        assert_eq!(CqeOpcode::from_u4(v).as_u8(), v);
    }
    assert_eq!(CqeOpcode::from_u4(5), CqeOpcode::Other(5));
    for v in 0..=255u8 {
        assert_eq!(Syndrome::from_u8(v).as_u8(), v);
    }
    assert_eq!(Syndrome::from_u8(0x16), Syndrome::RnrRetryExcErr);
    assert_eq!(Syndrome::from_u8(0x22), Syndrome::RemoteAbortedErr);
    assert_eq!(Syndrome::from_u8(0x03), Syndrome::Other(3));
}

/// A failed endpoint's report quotes the syndrome's text (copyrpc's `FailureCause`, C's
/// `copyrpc_cause_text`): each named syndrome has its own, every other value reads as
/// unknown, and all are ASCII.
#[test]
fn each_named_syndrome_has_its_own_text() {
    let mut named: Vec<(u8, &str)> = Vec::new();
    for v in 0..=255u8 {
        let s = Syndrome::from_u8(v);
        let t = s.text().to_str().expect("UTF-8");
        assert!(!t.is_empty() && t.is_ascii(), "{v:#04x}: {t:?}");
        match s {
            Syndrome::Other(_) => assert_eq!(t, "unknown syndrome", "{v:#04x}"),
            _ => {
                assert!(
                    named.iter().all(|&(_, u)| u != t) && t != "unknown syndrome",
                    "{v:#04x}: {t:?} is not its own"
                );
                named.push((v, t));
            }
        }
    }
    assert_eq!(named.len(), 13);
    assert!(Syndrome::TransportRetryExcErr
        .text()
        .to_str()
        .unwrap()
        .contains("retry counter exceeded"));
}

fn tv3_expected() -> Completion {
    Completion {
        opcode: CqeOpcode::RespWrImm,
        owner: true,
        solicited: true,
        format: CqeFormat::Normal,
        qpn: 0xabcdf,
        wqe_counter: 5,
        byte_cnt: 4096,
        imm: Some([0xde, 0xad, 0xbe, 0xef]),
        remote_qpn: Some(0),
        srqn_uidx: 0x77,
        send_opcode: None,
        error: None,
    }
}

#[test]
fn tv3_decode_every_field() {
    assert_eq!(decode_cqe(&TV3), Ok(tv3_expected()));
    assert!(!tv3_expected().is_error());
    let c = Cqe64::ref_from_bytes(&TV3).unwrap();
    assert_eq!(c.opcode(), CqeOpcode::RespWrImm);
    assert!(c.owner());
    assert_eq!(c.format_bits(), 0);
    assert_eq!(c.srqn_uidx.get(), 0x77);
    assert_eq!(c.byte_cnt.get(), 4096);
    assert_eq!(c.sop_drop_qpn.get(), 0xabcdf);
    assert_eq!(c.wqe_counter.get(), 5);
    assert_eq!(c.op_own, 0x13);
    // The same CQE a lap later: only the owner bit differs.
    let mut next_lap = TV3;
    next_lap[63] = 0x12;
    let c = Cqe64::ref_from_bytes(&next_lap).unwrap();
    assert!(!c.owner());
    assert_eq!((c.opcode(), c.format_bits()), (CqeOpcode::RespWrImm, 0));
}

#[test]
fn tv3_build_field_by_field() {
    let mut c = Cqe64::ZEROED;
    c.srqn_uidx.set(0x77);
    c.imm_inval_pkey = [0xde, 0xad, 0xbe, 0xef];
    c.byte_cnt.set(4096);
    c.sop_drop_qpn.set(0xabcdf);
    c.wqe_counter.set(5);
    c.op_own = (CqeOpcode::RespWrImm.as_u8() << 4) | 0x02 | 0x01;
    assert_eq!(c.as_bytes(), &TV3);
}

#[test]
fn responder_fields_from_low_half() {
    let mut c = Cqe64::ZEROED;
    c.flags_rqpn.set(0x1234_5678); // SL/GRH bits above 24 are not the QPN
    c.slid.set(0xbeef);
    c.ml_path = 3;
    c.sop_drop_qpn.set(0xff00_0042);
    c.op_own = CqeOpcode::RespSend.as_u8() << 4;
    let got = decode_cqe(c.as_bytes()).unwrap();
    assert_eq!(got.remote_qpn, Some(0x34_5678));
    assert_eq!(got.qpn, 0x42);
    assert_eq!(got.imm, None);
    assert_eq!(got.send_opcode, None);
    assert_eq!(c.as_bytes()[22..24], [0xbe, 0xef]);
    assert_eq!(c.as_bytes()[17], 3);

    // Inline-scatter-32: bytes 0..32 are payload, so no remote QPN is reported.
    c.op_own = (CqeOpcode::RespSend.as_u8() << 4) | 0x04;
    let got = decode_cqe(c.as_bytes()).unwrap();
    assert_eq!(
        (got.format, got.remote_qpn),
        (CqeFormat::InlineScatter32, None)
    );
    c.op_own = (CqeOpcode::RespSend.as_u8() << 4) | 0x08;
    let got = decode_cqe(c.as_bytes()).unwrap();
    assert_eq!(
        (got.format, got.remote_qpn),
        (CqeFormat::InlineScatter64, Some(0x34_5678))
    );
}

#[test]
fn requester_cqe() {
    let mut c = Cqe64::ZEROED;
    c.sop_drop_qpn.set((0x10 << 24) | 0xabcde);
    c.wqe_counter.set(0xfffe);
    c.byte_cnt.set(777);
    c.srqn_uidx.set(0xff00_0009);
    c.op_own = 0x00;
    let got = decode_cqe(c.as_bytes()).unwrap();
    assert_eq!(
        got,
        Completion {
            opcode: CqeOpcode::Req,
            owner: false,
            solicited: false,
            format: CqeFormat::Normal,
            qpn: 0xabcde,
            wqe_counter: 0xfffe,
            byte_cnt: 777,
            imm: None,
            remote_qpn: None,
            srqn_uidx: 9,
            send_opcode: Some(0x10),
            error: None,
        }
    );
}

#[test]
fn error_cqe_layout_and_decode() {
    let mut e = ErrCqe::ZEROED;
    e.srqn.set(0x55);
    e.vendor_err_synd = 0xf9;
    e.syndrome = 0x05;
    e.s_wqe_opcode_qpn.set((0x09 << 24) | 0x0abcde);
    e.wqe_counter.set(0x1234);
    e.op_own = 0xd1;
    let b = e.as_bytes();
    assert_eq!(b[32..36], [0, 0, 0, 0x55]);
    assert_eq!((b[54], b[55]), (0xf9, 0x05));
    assert_eq!(b[56..64], [0x09, 0x0a, 0xbc, 0xde, 0x12, 0x34, 0x00, 0xd1]);
    let got = decode_cqe(b).unwrap();
    assert_eq!(
        got,
        Completion {
            opcode: CqeOpcode::ReqErr,
            owner: true,
            solicited: false,
            format: CqeFormat::Normal,
            qpn: 0xabcde,
            wqe_counter: 0x1234,
            byte_cnt: 0,
            imm: None,
            remote_qpn: None,
            srqn_uidx: 0x55,
            send_opcode: Some(0x09),
            error: Some(CqeError {
                syndrome: Syndrome::WrFlushErr,
                vendor_syndrome: 0xf9
            }),
        }
    );
    // RESP_ERR: no failed send opcode.
    e.op_own = 0xe0;
    e.syndrome = 0x01;
    let got = decode_cqe(e.as_bytes()).unwrap();
    assert_eq!(got.opcode, CqeOpcode::RespErr);
    assert_eq!(got.send_opcode, None);
    assert_eq!(got.error.unwrap().syndrome, Syndrome::LocalLengthErr);
    assert!(got.is_error());
}

#[test]
fn decode_rejections() {
    assert_eq!(
        decode_cqe(&TV3[..63]),
        Err(CqeDecodeError::Length { len: 63 })
    );
    assert_eq!(
        decode_cqe(&[0u8; 65]),
        Err(CqeDecodeError::Length { len: 65 })
    );
    assert_eq!(decode_cqe(&[]), Err(CqeDecodeError::Length { len: 0 }));
    let mut c = TV3;
    c[63] = 0x0c | 0x01; // format 3
    c[44..48].copy_from_slice(&[0, 0, 0, 7]);
    assert_eq!(
        decode_cqe(&c),
        Err(CqeDecodeError::Compressed { session_len: 7 })
    );
}

/// `samples` CQEs of xorshift noise (seeded by `x`) for each `op_own` value.
fn noisy_cqes(mut x: u64, samples: usize) -> impl Iterator<Item = [u8; 64]> {
    (0..=255u8).flat_map(move |op_own| {
        (0..samples)
            .map(|_| {
                let mut b = [0u8; 64];
                for chunk in b.chunks_mut(8) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    chunk.copy_from_slice(&x.to_le_bytes());
                }
                b[63] = op_own;
                b
            })
            .collect::<Vec<_>>()
    })
}

#[test]
fn decode_never_panics_on_any_op_own_or_noise() {
    // Cheap deterministic sweep (the fuzz target covers the rest).
    for b in noisy_cqes(0x9e37_79b9_7f4a_7c15, 16) {
        let op_own = b[63];
        let r = decode_cqe(&b);
        if (op_own >> 2) & 3 == 3 {
            assert!(matches!(r, Err(CqeDecodeError::Compressed { .. })));
        } else {
            let c = r.unwrap();
            assert_eq!(c.opcode.as_u8(), op_own >> 4);
            assert_eq!(c.owner, op_own & 1 == 1);
            assert!(c.qpn <= 0xff_ffff && c.srqn_uidx <= 0xff_ffff);
        }
    }
}

#[test]
fn brief_agrees_with_decode_on_every_op_own() {
    // `brief` is the poll loops' shortcut past `decode`: for each `op_own` byte and noise
    // in the rest, it must answer exactly for a successful REQ / RESP_WR_IMM in the
    // normal format, with the fields `decode` reports, and refuse everything else.
    let mut seen = [0usize; 2];
    for b in noisy_cqes(0x2545_f491_4f6c_dd1d, 8) {
        let op_own = b[63];
        for (k, want) in [CqeOpcode::Req, CqeOpcode::RespWrImm]
            .into_iter()
            .enumerate()
        {
            let brief = mlx5_raw::layout::brief_cqe(&b, want);
            let full = decode_cqe(&b)
                .ok()
                .filter(|c| c.opcode == want && c.format == CqeFormat::Normal && c.error.is_none());
            match (brief, full) {
                (None, None) => {}
                (Some(s), Some(c)) => {
                    seen[k] += 1;
                    assert_eq!((s.qpn, s.wqe_counter), (c.qpn, c.wqe_counter));
                    assert_eq!(s.imm, c.imm.unwrap_or([0; 4]), "op_own {op_own:#x}");
                }
                (s, c) => panic!("op_own {op_own:#x} {want:?}: brief {s:?}, decode {c:?}"),
            }
        }
        // Any other opcode is never briefed.
        assert_eq!(mlx5_raw::layout::brief_cqe(&b, CqeOpcode::RespSend), None);
    }
    // Owner and SE bits vary freely: 4 op_own values per opcode, 8 samples each.
    assert_eq!(seen, [32, 32]);
}

/// The format field (`op_own[3:2]`) read at each value, and the inline header's
/// emptiness at 0 and past it: the other accessors' tests only ever saw format 0 and
/// non-empty inline data.
#[test]
fn cqe_format_bits_and_inline_emptiness_take_every_value() {
    for format in 0..4u8 {
        let mut b = TV3;
        b[63] = (b[63] & !0b1100) | (format << 2);
        let c = Cqe64::ref_from_bytes(&b).unwrap();
        assert_eq!(c.format_bits(), format);
        assert_eq!(c.opcode(), CqeOpcode::RespWrImm, "format {format}");
        assert!(c.owner(), "format {format}");
    }
    assert!(InlineSegHdr::new(0).is_empty());
    for len in [1, 4, 220] {
        let h = InlineSegHdr::new(len);
        assert!(!h.is_empty() && h.is_inline(), "{len}");
        assert_eq!(h.len(), len);
    }
}

/// A rejected block's error says which rejection and its figure.
#[test]
fn cqe_decode_errors_name_their_figure() {
    let short = CqeDecodeError::Length { len: 63 }.to_string();
    let compressed = CqeDecodeError::Compressed { session_len: 7 }.to_string();
    assert!(short.contains("63") && short.contains("64"), "{short}");
    assert!(
        compressed.contains('7') && compressed.contains("compress"),
        "{compressed}"
    );
    assert_ne!(short, compressed);
}
