//! Send-queue driver on plain heap buffers: byte-exact WQEs, inline/SGE split, wrap,
//! counters, signaling, SQ-space accounting and the doorbell path.

mod common;

use common::{hex, DmaBuf};
use mlx5_raw::layout::{
    Completion, CqeFormat, CqeOpcode, CtrlSeg, DataSeg, FmCeSe, InlineSegHdr, RaddrSeg, SendOpcode,
};
use mlx5_raw::{
    Payload, PostError, Posted, Remote, RetireError, Sge, Sq, SqConfig, SqDesc, SqInitError,
};
use zerocopy::{FromBytes, IntoBytes};

/// Queue memory for one SQ. Declare it before the `Sq` so it outlives it.
struct Mem {
    buf: DmaBuf,
    dbrec: DmaBuf,
    bf: DmaBuf,
    wqe_cnt: u32,
}

impl Mem {
    fn new(wqe_cnt: u32) -> Self {
        Self {
            buf: DmaBuf::new(wqe_cnt as usize * 64),
            dbrec: DmaBuf::new(8),
            bf: DmaBuf::new(512),
            wqe_cnt,
        }
    }

    fn desc(&self, qpn: u32, bf_size: u32, with_bf: bool) -> SqDesc {
        SqDesc {
            buf: self.buf.ptr(),
            wqe_cnt: self.wqe_cnt,
            stride: 64,
            dbrec: self.dbrec.ptr32(),
            bf_reg: if with_bf {
                self.bf.ptr()
            } else {
                std::ptr::null_mut()
            },
            bf_size,
            qpn,
            bf_lock: std::ptr::null(),
        }
    }

    fn sq(&self, qpn: u32, cfg: SqConfig) -> Sq {
        // SAFETY: the buffers are exclusively this SQ's and outlive it (declared first in
        // each test); nothing else accesses them while it lives except the test reading
        // them back between calls.
        unsafe { Sq::new(&self.desc(qpn, 256, true), cfg) }.unwrap()
    }

    /// `len` bytes of the WQE starting at WQEBB counter `pos`, wrapping at the end.
    fn wqe(&self, pos: u64, len: usize) -> Vec<u8> {
        let ring = self.wqe_cnt as usize * 64;
        let start = (pos as usize % self.wqe_cnt as usize) * 64;
        (0..len)
            .map(|k| self.buf.read((start + k) % ring, 1)[0])
            .collect()
    }

    fn ctrl(&self, pos: u64) -> CtrlSeg {
        CtrlSeg::read_from_bytes(&self.wqe(pos, 16)).unwrap()
    }

    fn snd_dbr(&self) -> u32 {
        self.dbrec.be32(1)
    }
}

fn post_one<F>(sq: &mut Sq, f: F) -> Posted
where
    F: FnOnce(&mut mlx5_raw::SqBatch<'_>) -> Result<Posted, PostError>,
{
    let mut b = sq.batch();
    assert!(b.is_empty());
    assert_eq!(b.len(), 0);
    let p = f(&mut b).unwrap();
    assert!(!b.is_empty() && b.len() == 1);
    b.finish();
    p
}

/// Posts and retires `n` NOPs, to move the producer counter.
fn advance(sq: &mut Sq, n: u64) {
    for _ in 0..n {
        let p = post_one(sq, |b| b.nop(FmCeSe::COMP_ONLY_ERR));
        sq.retire(p.wqe_index).unwrap();
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "4 660 posts to reach the vector's WQE index take Miri ~45 s; the native run \
              checks the bytes, and Miri sees the same post path in the tests below"
)]
fn tv1_rdma_write_imm_bytes_in_queue() {
    let mem = Mem::new(64);
    let mut sq = mem.sq(0xabcde, SqConfig::COPYRPC);
    advance(&mut sq, 0x1234);
    assert_eq!(sq.producer_index(), 0x1234);
    let sge = [Sge {
        addr: 0x7f00_aabb_cc00,
        len: 4096,
        lkey: 0x123456,
    }];
    // SAFETY: no device reads this memory; the address is only written into the WQE.
    let payload = unsafe { Payload::gather(&sge) };
    let p = post_one(&mut sq, |b| {
        b.rdma_write_imm(
            Remote {
                addr: 0x7f00_1122_3340,
                rkey: 0xa1b2c3,
            },
            payload,
            [0xde, 0xad, 0xbe, 0xef],
            FmCeSe::CQ_UPDATE | FmCeSe::SOLICITED,
        )
    });
    assert_eq!(
        p,
        Posted {
            wqe_index: 0x1234,
            ds: 3,
            bbs: 1,
            signaled: true
        }
    );
    assert_eq!(
        mem.wqe(0x1234, 48),
        hex("00 12 34 09 0a bc de 03 00 00 00 0a de ad be ef
             00 00 7f 00 11 22 33 40 00 a1 b2 c3 00 00 00 00
             00 00 10 00 00 12 34 56 00 00 7f 00 aa bb cc 00")
    );
    assert_eq!(mem.snd_dbr(), 0x1235);
}

#[test]
fn tv2_send_inline_hello_bytes_in_queue() {
    let mem = Mem::new(64);
    let mut sq = mem.sq(0x12, SqConfig::COPYRPC);
    advance(&mut sq, 7);
    let p = post_one(&mut sq, |b| {
        b.send(Payload::inline(b"hello"), FmCeSe::CQ_UPDATE)
    });
    assert_eq!(
        p,
        Posted {
            wqe_index: 7,
            ds: 2,
            bbs: 1,
            signaled: true
        }
    );
    assert_eq!(
        mem.wqe(7, 32),
        hex("00 00 07 0a 00 00 12 02 00 00 00 08 00 00 00 00
             80 00 00 05 68 65 6c 6c 6f 00 00 00 00 00 00 00")
    );
}

#[test]
fn every_opcode_byte_exact() {
    let mem = Mem::new(64);
    let mut sq = mem.sq(0x12, SqConfig::COPYRPC);
    let none = FmCeSe::COMP_ONLY_ERR;
    let remote = Remote {
        addr: 0x1000,
        rkey: 0x55,
    };

    let p = post_one(&mut sq, |b| b.nop(none));
    assert_eq!(
        p,
        Posted {
            wqe_index: 0,
            ds: 1,
            bbs: 1,
            signaled: false
        }
    );
    assert_eq!(
        mem.wqe(0, 16),
        hex("00 00 00 00 00 00 12 01 00 00 00 00 00 00 00 00")
    );

    let p = post_one(&mut sq, |b| {
        b.rdma_write(remote, Payload::inline(b"abc"), none)
    });
    assert_eq!((p.wqe_index, p.ds), (1, 3));
    assert_eq!(
        mem.wqe(1, 48),
        hex("00 00 01 08 00 00 12 03 00 00 00 00 00 00 00 00
             00 00 00 00 00 00 10 00 00 00 00 55 00 00 00 00
             80 00 00 03 61 62 63 00 00 00 00 00 00 00 00 00")
    );

    let local = [
        Sge {
            addr: 0x3000,
            len: 8,
            lkey: 0x77,
        },
        Sge {
            addr: 0xdead,
            len: 0,
            lkey: 0xbad,
        }, // zero-length: skipped
        Sge {
            addr: 0x4000,
            len: 16,
            lkey: 0x78,
        },
    ];
    // SAFETY: no device writes these addresses; they are only encoded.
    let p = post_one(&mut sq, |b| unsafe {
        b.rdma_read(
            Remote {
                addr: 0x2000,
                rkey: 0x66,
            },
            &local,
            FmCeSe::CQ_UPDATE,
        )
    });
    assert_eq!((p.wqe_index, p.ds, p.signaled), (2, 4, true));
    assert_eq!(
        mem.wqe(2, 64),
        hex("00 00 02 10 00 00 12 04 00 00 00 08 00 00 00 00
             00 00 00 00 00 00 20 00 00 00 00 66 00 00 00 00
             00 00 00 08 00 00 00 77 00 00 00 00 00 00 30 00
             00 00 00 10 00 00 00 78 00 00 00 00 00 00 40 00")
    );

    let gather = [
        Sge {
            addr: 0x1_0000_0000,
            len: 100,
            lkey: 1,
        },
        Sge {
            addr: 0x5000,
            len: 200,
            lkey: 2,
        },
    ];
    // SAFETY: as above.
    let payload = unsafe { Payload::gather(&gather) };
    let p = post_one(&mut sq, |b| b.send(payload, FmCeSe::SOLICITED));
    assert_eq!((p.wqe_index, p.ds), (3, 3));
    assert_eq!(
        mem.wqe(3, 48),
        hex("00 00 03 0a 00 00 12 03 00 00 00 02 00 00 00 00
             00 00 00 64 00 00 00 01 00 00 00 01 00 00 00 00
             00 00 00 c8 00 00 00 02 00 00 00 00 00 00 50 00")
    );

    let p = post_one(&mut sq, |b| {
        b.send_imm(Payload::inline(b"hi"), [1, 2, 3, 4], none)
    });
    assert_eq!((p.wqe_index, p.ds), (4, 2));
    assert_eq!(
        mem.wqe(4, 32),
        hex("00 00 04 0b 00 00 12 02 00 00 00 00 01 02 03 04
             80 00 00 02 68 69 00 00 00 00 00 00 00 00 00 00")
    );

    // A registered payload within max_inline goes inline.
    let data = [0x11u8; 12];
    // SAFETY: inline-sized, so the device never reads `data` itself.
    let payload = unsafe { Payload::registered(&data, 9) };
    let p = post_one(&mut sq, |b| {
        b.rdma_write_imm(remote, payload, [9, 8, 7, 6], FmCeSe::FENCE)
    });
    assert_eq!((p.wqe_index, p.ds), (5, 3));
    assert_eq!(
        mem.wqe(5, 48),
        hex("00 00 05 09 00 00 12 03 00 00 00 80 09 08 07 06
             00 00 00 00 00 00 10 00 00 00 00 55 00 00 00 00
             80 00 00 0c 11 11 11 11 11 11 11 11 11 11 11 11")
    );
    assert_eq!(mem.snd_dbr(), 6);
}

/// Expected WQE for a WRITE_IMM with `inline` bytes inline and an optional data segment.
fn expected_write_imm(
    pi: u16,
    qpn: u32,
    fm: FmCeSe,
    remote: Remote,
    inline: &[u8],
    sge: Option<DataSeg>,
) -> Vec<u8> {
    let inline_ds = if inline.is_empty() {
        0
    } else {
        (4 + inline.len()).div_ceil(16)
    };
    let ds = 2 + inline_ds + usize::from(sge.is_some());
    let mut v = Vec::new();
    v.extend_from_slice(
        CtrlSeg::new(
            SendOpcode::RdmaWriteImm,
            pi,
            qpn,
            ds as u8,
            fm,
            [1, 2, 3, 4],
        )
        .as_bytes(),
    );
    v.extend_from_slice(RaddrSeg::new(remote.addr, remote.rkey).as_bytes());
    if !inline.is_empty() {
        v.extend_from_slice(InlineSegHdr::new(inline.len() as u32).as_bytes());
        v.extend_from_slice(inline);
        v.resize(v.len().next_multiple_of(16), 0);
    }
    if let Some(d) = sge {
        v.extend_from_slice(d.as_bytes());
    }
    assert_eq!(v.len(), ds * 16);
    v
}

#[test]
fn inline_at_max_and_one_over() {
    let mem = Mem::new(64);
    let mut sq = mem.sq(0x77, SqConfig::COPYRPC);
    let remote = Remote {
        addr: 0xaaaa_0000,
        rkey: 7,
    };
    let data: Vec<u8> = (0..221u32).map(|i| (i * 7 + 3) as u8).collect();

    // Exactly 220: fully inline, 16 DS = 256 bytes = 4 WQEBBs.
    // SAFETY: inline-sized; the device never reads `data`.
    let payload = unsafe { Payload::registered(&data[..220], 0x99) };
    let p = post_one(&mut sq, |b| {
        b.rdma_write_imm(remote, payload, [1, 2, 3, 4], FmCeSe::CQ_UPDATE)
    });
    assert_eq!(
        p,
        Posted {
            wqe_index: 0,
            ds: 16,
            bbs: 4,
            signaled: true
        }
    );
    let want = expected_write_imm(0, 0x77, FmCeSe::CQ_UPDATE, remote, &data[..220], None);
    assert_eq!(mem.wqe(0, 256), want);
    assert_eq!(&want[32..36], &hex("80 00 00 dc")[..]);

    // 221: 204 inline + SGE for the other 17 bytes, pointing into `data`. Also 256 bytes.
    // SAFETY: `data` lives until the end of the test and nothing modifies it; no device
    // reads it here.
    let payload = unsafe { Payload::registered(&data, 0x99) };
    let p = post_one(&mut sq, |b| {
        b.rdma_write_imm(remote, payload, [1, 2, 3, 4], FmCeSe::CQ_UPDATE)
    });
    assert_eq!(
        p,
        Posted {
            wqe_index: 4,
            ds: 16,
            bbs: 4,
            signaled: true
        }
    );
    let sge = DataSeg::new(17, 0x99, data.as_ptr() as u64 + 204);
    let want = expected_write_imm(4, 0x77, FmCeSe::CQ_UPDATE, remote, &data[..204], Some(sge));
    assert_eq!(mem.wqe(4, 256), want);
    assert_eq!(&want[32..36], &hex("80 00 00 cc")[..]);

    // Inline-only above the maximum is refused, and nothing moves.
    let before = sq.producer_counter();
    let mut b = sq.batch();
    assert_eq!(
        b.rdma_write(remote, Payload::inline(&data), FmCeSe::CQ_UPDATE),
        Err(PostError::InlineTooLong { len: 221, max: 220 })
    );
    b.finish();
    assert_eq!(sq.producer_counter(), before);
    assert_eq!(mem.snd_dbr(), 8);
}

#[test]
fn every_length_at_every_ring_position_matches_the_reference_layout() {
    // An all-inline WQE is written as one 36-byte block and the data (`post_remote_inline`),
    // a registered payload past the inline limit by the contiguous path; a WQE that runs
    // past the ring end, or a refusal, goes through the general path. All must lay out
    // exactly what `expected_write_imm` builds, for inline-only and registered payloads
    // around every size boundary, at every WQEBB of a ring small enough to wrap often.
    let mem = Mem::new(16);
    let mut sq = mem.sq(0x5c, SqConfig::COPYRPC);
    let remote = Remote {
        addr: 0x1234_5678_9000,
        rkey: 0x42,
    };
    let data: Vec<u8> = (0..300u32).map(|i| (i * 13 + 1) as u8).collect();
    // Every inline length (each pads differently) natively; the boundaries under Miri.
    let lens: Vec<usize> = if cfg!(miri) {
        vec![
            0, 1, 11, 12, 13, 27, 28, 29, 44, 60, 76, 204, 205, 219, 220, 221, 250, 300,
        ]
    } else {
        (0..=221).chain([250, 300]).collect()
    };
    // Every starting WQEBB natively; under Miri (whose concern is the writes at the ring
    // end, which every round makes at several positions) the first four, one per
    // residue of the largest WQE's 4 WQEBBs.
    let rounds = if cfg!(miri) { 4 } else { 16 };
    for _ in 0..rounds {
        for &len in &lens {
            for registered in [false, true] {
                if !registered && len > 220 {
                    continue;
                }
                let bytes = &data[..len];
                let payload = if registered {
                    // SAFETY: `data` outlives the test and is never modified; no device
                    // reads it here.
                    unsafe { Payload::registered(bytes, 0x77) }
                } else {
                    Payload::inline(bytes)
                };
                let pi = sq.producer_counter();
                let p = post_one(&mut sq, |b| {
                    b.rdma_write_imm(remote, payload, [1, 2, 3, 4], FmCeSe::CQ_UPDATE)
                });
                let (inline, sge) = if len <= 220 {
                    (bytes, None)
                } else {
                    let rest = &data[204..len];
                    (
                        &data[..204],
                        Some(DataSeg::new(rest.len() as u32, 0x77, rest.as_ptr() as u64)),
                    )
                };
                let want =
                    expected_write_imm(pi as u16, 0x5c, FmCeSe::CQ_UPDATE, remote, inline, sge);
                assert_eq!(
                    mem.wqe(pi, want.len()),
                    want,
                    "len {len} registered {registered} at WQEBB {}",
                    pi % 16
                );
                assert_eq!(usize::from(p.ds) * 16, want.len());
                assert_eq!(u64::from(p.bbs), (want.len() as u64).div_ceil(64));
                assert_eq!(sq.retire(p.wqe_index), Ok(u32::from(p.bbs)));
            }
        }
        // Move the next round's starting WQEBB on by one.
        advance(&mut sq, 1);
    }
}

#[test]
fn zero_length_operations_have_no_data_segment() {
    let mem = Mem::new(64);
    let mut sq = mem.sq(0x12, SqConfig::COPYRPC);
    let remote = Remote {
        addr: 0x1000,
        rkey: 0x55,
    };
    let p = post_one(&mut sq, |b| {
        b.rdma_write(remote, Payload::EMPTY, FmCeSe::CQ_UPDATE)
    });
    assert_eq!((p.ds, p.bbs), (2, 1));
    assert_eq!(
        mem.wqe(0, 32),
        hex("00 00 00 08 00 00 12 02 00 00 00 08 00 00 00 00
             00 00 00 00 00 00 10 00 00 00 00 55 00 00 00 00")
    );
    let zeros = [
        Sge {
            addr: 1,
            len: 0,
            lkey: 1,
        },
        Sge {
            addr: 2,
            len: 0,
            lkey: 2,
        },
    ];
    // SAFETY: zero-length entries are never emitted.
    let payload = unsafe { Payload::gather(&zeros) };
    let p = post_one(&mut sq, |b| {
        b.rdma_write_imm(remote, payload, [0; 4], FmCeSe::CQ_UPDATE)
    });
    assert_eq!(p.ds, 2);
    assert_eq!(mem.ctrl(1).ds(), 2);
    // SAFETY: nothing is emitted.
    let p = post_one(&mut sq, |b| unsafe {
        b.rdma_read(remote, &zeros, FmCeSe::CQ_UPDATE)
    });
    assert_eq!(p.ds, 2);
    // SAFETY: empty registered payload: nothing is emitted.
    let payload = unsafe { Payload::registered(&[], 5) };
    let p = post_one(&mut sq, |b| b.send(payload, FmCeSe::CQ_UPDATE));
    assert_eq!(p.ds, 1);
    assert_eq!(
        mem.wqe(3, 16),
        hex("00 00 03 0a 00 00 12 01 00 00 00 08 00 00 00 00")
    );
}

#[test]
fn multi_bb_wqe_wraps_the_ring_with_inline_split() {
    let mem = Mem::new(8);
    let mut sq = mem.sq(0x3, SqConfig::COPYRPC);
    advance(&mut sq, 6);
    let remote = Remote {
        addr: 0x10,
        rkey: 0x20,
    };
    let data: Vec<u8> = (0..220u32).map(|i| i as u8 ^ 0x5a).collect();
    let p = post_one(&mut sq, |b| {
        b.rdma_write_imm(
            remote,
            Payload::inline(&data),
            [1, 2, 3, 4],
            FmCeSe::CQ_UPDATE,
        )
    });
    assert_eq!((p.wqe_index, p.bbs), (6, 4));
    let want = expected_write_imm(6, 0x3, FmCeSe::CQ_UPDATE, remote, &data, None);
    // BBs 6, 7 at the end of the ring, then 0, 1 at its start.
    assert_eq!(mem.buf.read(6 * 64, 128), want[..128]);
    assert_eq!(mem.buf.read(0, 128), want[128..]);
    // The inline payload is what straddles the end: it starts at WQE byte 36.
    assert_eq!(mem.buf.read(6 * 64 + 36, 92), data[..92]);
    assert_eq!(mem.buf.read(0, 128 - 4), data[92..216]);
    // Retire it across the wrap.
    assert_eq!(sq.outstanding_bbs(), 4);
    assert_eq!(sq.retire(6), Ok(4));
    assert_eq!(sq.outstanding_bbs(), 0);

    // A gather WQE whose data segments wrap (segment headers never straddle).
    advance(&mut sq, 3); // pi = 13 -> slot 5
    let sges: Vec<Sge> = (0..10)
        .map(|i| Sge {
            addr: 0x1000 * i,
            len: 1 + i as u32,
            lkey: i as u32,
        })
        .collect();
    // SAFETY: no device reads these addresses.
    let payload = unsafe { Payload::gather(&sges) };
    let p = post_one(&mut sq, |b| b.send(payload, FmCeSe::CQ_UPDATE));
    assert_eq!((p.wqe_index, p.ds, p.bbs), (13, 11, 3));
    let w = mem.wqe(13, 176);
    for (i, s) in sges.iter().enumerate() {
        let d = DataSeg::read_from_bytes(&w[16 + 16 * i..32 + 16 * i]).unwrap();
        assert_eq!(
            (d.byte_count.get(), d.lkey.get(), d.addr.get()),
            (s.len, s.lkey, s.addr)
        );
    }
}

/// A registered payload's data segment takes at most 2^31 − 1 bytes (bit 31 of its byte
/// count would read as the inline flag): a rest of exactly 2^31 after the inline head is
/// refused, one byte less is not. The 2 GiB buffer is allocated zeroed and never
/// touched (no device reads it), so it costs address space only.
#[test]
#[cfg_attr(miri, ignore = "a 2 GiB buffer")]
fn a_data_segment_of_2_gib_is_refused_and_one_byte_less_is_not() {
    let mem = Mem::new(64);
    let mut sq = mem.sq(0x3, SqConfig::COPYRPC);
    let head = SqConfig::COPYRPC.inline_head as usize;
    let data = vec![0u8; head + (1 << 31)];
    let mut b = sq.batch();
    // SAFETY: nothing reads `data`: the first post is refused before anything is
    // written, and the second is dropped with its batch (rolled back, never rung).
    let too_long = unsafe { Payload::registered(&data, 9) };
    assert_eq!(
        b.send(too_long, FmCeSe::CQ_UPDATE),
        Err(PostError::SgeTooLong { len: 1 << 31 })
    );
    // SAFETY: as above.
    let fits = unsafe { Payload::registered(&data[..data.len() - 1], 9) };
    assert!(b.send(fits, FmCeSe::CQ_UPDATE).is_ok());
    drop(b);
    assert_eq!(sq.producer_counter(), 0);
}

/// An SQ reports the QP number it was made with (the one its ctrl segments carry).
#[test]
fn an_sq_reports_its_own_qpn() {
    let mem = Mem::new(64);
    assert_eq!(mem.sq(0x00ab_cdef, SqConfig::COPYRPC).qpn(), 0x00ab_cdef);
    let mem = Mem::new(64);
    assert_eq!(mem.sq(0x3, SqConfig::COPYRPC).qpn(), 0x3);
}

#[test]
fn wqe_size_limits() {
    let mem = Mem::new(64);
    let mut sq = mem.sq(0x3, SqConfig::COPYRPC);
    let sges = vec![
        Sge {
            addr: 0x1000,
            len: 1,
            lkey: 1
        };
        31
    ];
    let big = [Sge {
        addr: 0,
        len: 1 << 31,
        lkey: 0,
    }];
    // SAFETY: no device reads these addresses; they are only encoded (or rejected).
    let (p31, pbig) = unsafe { (Payload::gather(&sges[..31]), Payload::gather(&big)) };
    let mut b = sq.batch();
    assert_eq!(b.send(p31, FmCeSe::CQ_UPDATE).map(|p| p.ds), Ok(32));
    assert_eq!(b.send(p31, FmCeSe::CQ_UPDATE).map(|p| p.bbs), Ok(8));
    // SAFETY: as above; rejected before anything is written.
    let r = unsafe { b.rdma_read(Remote { addr: 0, rkey: 0 }, &sges[..31], FmCeSe::CQ_UPDATE) };
    assert_eq!(r, Err(PostError::WqeTooLarge { ds: 33 }));
    assert_eq!(
        b.send(pbig, FmCeSe::CQ_UPDATE),
        Err(PostError::SgeTooLong { len: 1 << 31 })
    );
    drop(b); // rolled back
    assert_eq!(sq.producer_counter(), 0);

    // A ring smaller than the WQE can never hold it.
    let small = Mem::new(2);
    let mut sq = small.sq(0x3, SqConfig::COPYRPC);
    let mut b = sq.batch();
    assert_eq!(
        b.send(Payload::inline(&[0; 200]), FmCeSe::CQ_UPDATE),
        Err(PostError::WqeTooLarge { ds: 14 })
    );
}

#[test]
fn signal_every_n_exactly() {
    let mem = Mem::new(256);
    let cfg = SqConfig {
        signal_interval: 4,
        ..SqConfig::COPYRPC
    };
    let mut sq = mem.sq(0x3, cfg);
    let mut signaled = Vec::new();
    let mut b = sq.batch();
    for i in 0..20u16 {
        let flags = if i == 5 {
            FmCeSe::CQ_UPDATE
        } else {
            FmCeSe::COMP_ONLY_ERR
        };
        let p = b.nop(flags).unwrap();
        assert_eq!(p.wqe_index, i);
        if p.signaled {
            signaled.push(i);
        }
    }
    b.finish();
    // Every 4th counted from the last signaled one; the explicit one at 5 restarts the count.
    assert_eq!(signaled, [3, 5, 9, 13, 17]);
    for i in 0..20u16 {
        let fm = FmCeSe::from_bits_retain(mem.ctrl(u64::from(i)).fm_ce_se);
        assert_eq!(fm.is_signaled(), signaled.contains(&i), "WQE {i}");
        assert_eq!(fm.bits() & !FmCeSe::CE_MASK, 0);
    }
}

#[test]
fn signal_before_half_the_ring_is_unsignaled() {
    let mem = Mem::new(16);
    let cfg = SqConfig {
        signal_interval: 1000,
        ..SqConfig::COPYRPC
    };
    let mut sq = mem.sq(0x3, cfg);
    let mut b = sq.batch();
    let s: Vec<bool> = (0..10)
        .map(|_| b.nop(FmCeSe::COMP_ONLY_ERR).unwrap().signaled)
        .collect();
    b.finish();
    // WQE 7 would bring the unsignaled WQEBBs to 8 = half of 16.
    assert_eq!(
        s,
        [false, false, false, false, false, false, false, true, false, false]
    );
}

#[test]
fn sq_full_and_recovery_after_retire() {
    let mem = Mem::new(16);
    let cfg = SqConfig {
        signal_interval: 5,
        ..SqConfig::COPYRPC
    };
    let mut sq = mem.sq(0x3, cfg);
    let mut posted = Vec::new();
    let mut b = sq.batch();
    loop {
        match b.nop(FmCeSe::COMP_ONLY_ERR) {
            Ok(p) => posted.push(p),
            Err(e) => {
                assert_eq!(e, PostError::SqFull { needed: 1, free: 0 });
                break;
            }
        }
    }
    b.finish();
    assert_eq!(posted.len(), 16);
    assert_eq!(sq.free_bbs(), 0);
    assert_eq!(mem.snd_dbr(), 16);
    // A 4-BB WQE does not fit either; the error says how much is free.
    let mut b = sq.batch();
    assert_eq!(
        b.send(Payload::inline(&[0; 200]), FmCeSe::CQ_UPDATE),
        Err(PostError::SqFull { needed: 4, free: 0 })
    );
    drop(b);
    // The device completes the signaled WQE at index 9: it and everything before it.
    let last_signaled = posted
        .iter()
        .filter(|p| p.signaled)
        .map(|p| p.wqe_index)
        .max()
        .unwrap();
    assert_eq!(last_signaled, 14);
    assert_eq!(sq.retire(9), Ok(10));
    assert_eq!(sq.free_bbs(), 10);
    let p = post_one(&mut sq, |b| {
        b.send(Payload::inline(&[0; 200]), FmCeSe::CQ_UPDATE)
    });
    assert_eq!((p.wqe_index, p.bbs), (16, 4));
    assert_eq!(sq.free_bbs(), 6);
    assert_eq!(sq.retire(16), Ok(10));
    assert_eq!(sq.free_bbs(), 16);
}

#[test]
fn retire_rejects_bad_counters() {
    let mem = Mem::new(16);
    let mut sq = mem.sq(0x3, SqConfig::COPYRPC);
    post_one(&mut sq, |b| b.nop(FmCeSe::COMP_ONLY_ERR));
    post_one(&mut sq, |b| {
        b.send(Payload::inline(&[7; 100]), FmCeSe::COMP_ONLY_ERR)
    }); // BBs 1..3
    post_one(&mut sq, |b| b.nop(FmCeSe::COMP_ONLY_ERR));
    assert_eq!(
        sq.retire(4),
        Err(RetireError::NotOutstanding { wqe_counter: 4 })
    );
    assert_eq!(
        sq.retire(0xffff),
        Err(RetireError::NotOutstanding {
            wqe_counter: 0xffff
        })
    );
    assert_eq!(
        sq.retire(2),
        Err(RetireError::NotAWqeStart { wqe_counter: 2 })
    );
    assert_eq!(sq.outstanding_bbs(), 4);
    let c = Completion {
        opcode: CqeOpcode::RespWrImm,
        owner: false,
        solicited: false,
        format: CqeFormat::Normal,
        qpn: 0x3,
        wqe_counter: 1,
        byte_cnt: 0,
        imm: None,
        remote_qpn: None,
        srqn_uidx: 0,
        send_opcode: None,
        error: None,
    };
    assert_eq!(sq.retire_completion(&c), Err(RetireError::WrongCompletion));
    let other_qp = Completion {
        opcode: CqeOpcode::Req,
        qpn: 0x4,
        ..c
    };
    assert_eq!(
        sq.retire_completion(&other_qp),
        Err(RetireError::WrongCompletion)
    );
    let ok = Completion {
        opcode: CqeOpcode::ReqErr,
        ..c
    };
    assert_eq!(sq.retire_completion(&ok), Ok(3));
    assert_eq!(sq.retire(3), Ok(1));
    assert_eq!(
        sq.retire(3),
        Err(RetireError::NotOutstanding { wqe_counter: 3 })
    );
    // A ctrl segment whose DS (byte 7) no longer fits what was posted: a one-block NOP
    // at 4 made to claim two blocks (past the producer), then none. Refused without
    // effect, and retired once its byte is put back.
    assert_eq!(sq.wqe_cnt(), 16);
    post_one(&mut sq, |b| b.nop(FmCeSe::COMP_ONLY_ERR));
    let ds_at = 4 * 64 + 7;
    assert_eq!(mem.buf.read(ds_at, 1), [1]);
    for bad in [8, 0] {
        mem.buf.write(ds_at, &[bad]);
        assert_eq!(
            sq.retire(4),
            Err(RetireError::NotAWqeStart { wqe_counter: 4 }),
            "DS {bad}"
        );
        assert_eq!(sq.outstanding_bbs(), 1);
    }
    mem.buf.write(ds_at, &[1]);
    // Another QP's number in the same ctrl (QPN 0x3 in bytes 4..7, big-endian).
    let qpn_at = 4 * 64 + 6;
    assert_eq!(mem.buf.read(qpn_at, 1), [0x03]);
    mem.buf.write(qpn_at, &[0x04]);
    assert_eq!(
        sq.retire(4),
        Err(RetireError::NotAWqeStart { wqe_counter: 4 }),
        "another QP's WQE"
    );
    mem.buf.write(qpn_at, &[0x03]);
    assert_eq!(sq.retire(4), Ok(1));
}

#[test]
fn dropped_batch_rolls_back() {
    let mem = Mem::new(16);
    let cfg = SqConfig {
        signal_interval: 3,
        ..SqConfig::COPYRPC
    };
    let mut sq = mem.sq(0x3, cfg);
    post_one(&mut sq, |b| b.nop(FmCeSe::COMP_ONLY_ERR));
    {
        let mut b = sq.batch();
        b.nop(FmCeSe::COMP_ONLY_ERR).unwrap();
        assert!(b.nop(FmCeSe::COMP_ONLY_ERR).unwrap().signaled);
        assert_eq!(b.len(), 2);
    }
    assert_eq!(sq.producer_counter(), 1);
    assert_eq!(mem.snd_dbr(), 1);
    // The signaling state rolled back too: WQE 2 (third overall) is the signaled one.
    let mut b = sq.batch();
    assert!(!b.nop(FmCeSe::COMP_ONLY_ERR).unwrap().signaled);
    assert!(b.nop(FmCeSe::COMP_ONLY_ERR).unwrap().signaled);
    b.finish();
    assert_eq!(mem.snd_dbr(), 3);
    // First doorbell: BlueFlame of WQE 0 in buffer 0; second: 8-byte doorbell with the
    // last WQE (2) of the batch in buffer 1. An empty batch then rings nothing.
    sq.batch().finish();
    assert_eq!(mem.bf.read(0, 64), mem.wqe(0, 64));
    assert_eq!(mem.bf.read(256, 8), mem.wqe(2, 8));
    assert_eq!(mem.bf.read(256 + 8, 8), vec![0; 8]);
}

#[test]
fn u16_counter_wraps_with_retirement() {
    let mem = Mem::new(64);
    let cfg = SqConfig {
        signal_interval: 7,
        ..SqConfig::COPYRPC
    };
    let mut sq = mem.sq(0xabc, cfg);
    let mut signaled: std::collections::VecDeque<u16> = Default::default();
    let mut pos: u64 = 0;
    let mut n = 0u64;
    let payload = [0x42u8; 150];
    // Under Miri 400 WQEBBs, six laps of the ring: the u16 index never wraps there (it
    // did not at 3 000 either), and the wrap is arithmetic the native run checks.
    let target = if cfg!(miri) { 400 } else { 70_000 };
    while pos < target {
        // Varying sizes: 1, 2 and 3 WQEBBs.
        let len = [0usize, 40, 150][(n % 3) as usize];
        let mut b = sq.batch();
        let r = b.send(Payload::inline(&payload[..len]), FmCeSe::COMP_ONLY_ERR);
        match r {
            Ok(p) => {
                assert_eq!(p.wqe_index, pos as u16);
                let c = mem.ctrl(pos);
                assert_eq!((c.wqe_index(), c.qpn(), c.ds()), (pos as u16, 0xabc, p.ds));
                pos += u64::from(p.bbs);
                n += 1;
                if p.signaled {
                    signaled.push_back(p.wqe_index);
                }
                b.finish();
                assert_eq!(mem.snd_dbr(), u32::from(pos as u16));
            }
            Err(PostError::SqFull { .. }) => {
                drop(b);
                // The device completes the oldest signaled WQE.
                let idx = signaled
                    .pop_front()
                    .expect("SqFull with no signaled WQE outstanding");
                assert!(sq.retire(idx).unwrap() > 0);
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(cfg!(miri) || sq.producer_counter() > 65_536);
    assert_eq!(sq.producer_index(), pos as u16);
}

#[test]
fn doorbell_record_and_8_byte_doorbell() {
    let mem = Mem::new(64);
    // SAFETY: as in `Mem::sq`; bf_size 0: no BlueFlame, 8-byte doorbells at offset 0.
    let mut sq = unsafe { Sq::new(&mem.desc(0x12, 0, true), SqConfig::COPYRPC) }.unwrap();
    for i in 0..3u64 {
        post_one(&mut sq, |b| {
            b.send(Payload::inline(&[1; 100]), FmCeSe::COMP_ONLY_ERR)
        });
        assert_eq!(mem.snd_dbr(), 2 * (i as u32 + 1));
        assert_eq!(mem.bf.read(0, 8), mem.wqe(2 * i, 8), "doorbell {i}");
        assert_eq!(mem.bf.read(8, 56), vec![0; 56], "no BlueFlame copy");
    }
    assert_eq!(mem.bf.read(0, 8), hex("00 00 04 0a 00 00 12 08"));
}

#[test]
fn blueflame_copies_a_lone_wqe_and_alternates_buffers() {
    let mem = Mem::new(8);
    let mut sq = mem.sq(0x12, SqConfig::COPYRPC); // bf_size 256
    advance(&mut sq, 6); // 6 doorbells: next buffer is at offset 0 again
    let data: Vec<u8> = (0..220u32).map(|i| i as u8).collect();
    let remote = Remote {
        addr: 0x10,
        rkey: 0x20,
    };
    post_one(&mut sq, |b| {
        b.rdma_write_imm(
            remote,
            Payload::inline(&data),
            [1, 2, 3, 4],
            FmCeSe::CQ_UPDATE,
        )
    });
    // 4 WQEBBs copied from memory with the source wrapping at the end of the ring.
    assert_eq!(mem.bf.read(0, 256), mem.wqe(6, 256));
    assert_eq!(
        mem.bf.read(0, 256),
        expected_write_imm(6, 0x12, FmCeSe::CQ_UPDATE, remote, &data, None)
    );
    sq.retire(6).unwrap();

    // Next doorbell uses the other buffer; a 1-BB WQE copies 64 bytes.
    post_one(&mut sq, |b| {
        b.send(Payload::inline(b"x"), FmCeSe::CQ_UPDATE)
    });
    assert_eq!(mem.bf.read(256, 64), mem.wqe(10, 64));
    assert_eq!(mem.bf.read(256 + 64, 64), vec![0; 64]);

    // A batch of several WQEs: one 8-byte doorbell with the last WQE's ctrl, buffer 0.
    let mut b = sq.batch();
    b.nop(FmCeSe::COMP_ONLY_ERR).unwrap();
    b.send(Payload::inline(b"yz"), FmCeSe::CQ_UPDATE).unwrap();
    b.finish();
    assert_eq!(mem.snd_dbr(), 13);
    assert_eq!(mem.bf.read(0, 8), mem.wqe(12, 8));
    assert_eq!(
        mem.bf.read(8, 8),
        mem.wqe(6, 16)[8..16].to_vec(),
        "rest of buffer 0 untouched"
    );
}

#[test]
fn blueflame_skipped_when_wqe_exceeds_buffer() {
    let mem = Mem::new(16);
    // SAFETY: as in `Mem::sq`, with 64-byte BlueFlame buffers.
    let mut sq = unsafe { Sq::new(&mem.desc(0x12, 64, true), SqConfig::COPYRPC) }.unwrap();
    post_one(&mut sq, |b| {
        b.send(Payload::inline(&[3; 40]), FmCeSe::CQ_UPDATE)
    }); // 64 B: BF
    assert_eq!(mem.bf.read(0, 64), mem.wqe(0, 64));
    post_one(&mut sq, |b| {
        b.send(Payload::inline(&[4; 60]), FmCeSe::CQ_UPDATE)
    }); // 96 B: 8-byte DB
    assert_eq!(mem.bf.read(64, 8), mem.wqe(1, 8));
    assert_eq!(mem.bf.read(72, 56), vec![0; 56]);
}

#[test]
fn no_register_means_record_only() {
    let mem = Mem::new(16);
    // SAFETY: as in `Mem::sq`, without a register.
    let mut sq = unsafe { Sq::new(&mem.desc(0x12, 256, false), SqConfig::COPYRPC) }.unwrap();
    post_one(&mut sq, |b| b.nop(FmCeSe::CQ_UPDATE));
    assert_eq!(mem.snd_dbr(), 1);
    assert_eq!(mem.bf.read(0, 512), vec![0; 512]);
    assert_eq!(mem.dbrec.be32(0), 0, "RQ word untouched");
}

#[test]
fn init_rejects_bad_descriptions() {
    let mem = Mem::new(16);
    let ok = mem.desc(0x12, 256, true);
    let cases: [(SqDesc, SqConfig, SqInitError); 8] = [
        (
            SqDesc {
                buf: std::ptr::null_mut(),
                ..ok
            },
            SqConfig::COPYRPC,
            SqInitError::NullPointer,
        ),
        (
            SqDesc {
                dbrec: std::ptr::null_mut(),
                ..ok
            },
            SqConfig::COPYRPC,
            SqInitError::NullPointer,
        ),
        (
            SqDesc { wqe_cnt: 12, ..ok },
            SqConfig::COPYRPC,
            SqInitError::WqeCnt(12),
        ),
        (
            SqDesc {
                wqe_cnt: 1 << 17,
                ..ok
            },
            SqConfig::COPYRPC,
            SqInitError::WqeCnt(1 << 17),
        ),
        (
            SqDesc { stride: 128, ..ok },
            SqConfig::COPYRPC,
            SqInitError::Stride(128),
        ),
        (
            SqDesc { bf_size: 100, ..ok },
            SqConfig::COPYRPC,
            SqInitError::BfSize(100),
        ),
        (
            SqDesc {
                dbrec: mem.dbrec.ptr().wrapping_add(2).cast(),
                ..ok
            },
            SqConfig::COPYRPC,
            SqInitError::Misaligned,
        ),
        (
            ok,
            SqConfig {
                max_inline: 477,
                ..SqConfig::COPYRPC
            },
            SqInitError::Config(SqConfig {
                max_inline: 477,
                ..SqConfig::COPYRPC
            }),
        ),
    ];
    for (desc, cfg, err) in cases {
        // SAFETY: rejected descriptions are never used; the valid parts point at `mem`.
        assert_eq!(unsafe { Sq::new(&desc, cfg) }.map(|_| ()), Err(err));
    }
    let bad = [
        SqConfig {
            inline_head: 221,
            ..SqConfig::COPYRPC
        },
        SqConfig {
            signal_interval: 0,
            ..SqConfig::COPYRPC
        },
        SqConfig {
            max_inline: 476,
            inline_head: 461,
            signal_interval: 1,
        },
    ];
    for cfg in bad {
        // SAFETY: rejected before any access.
        let r = unsafe { Sq::new(&ok, cfg) };
        assert_eq!(r.map(|_| ()), Err(SqInitError::Config(cfg)));
    }
    // The largest accepted configuration still builds ≤ 512-byte WQEs.
    let max = SqConfig {
        max_inline: 476,
        inline_head: 460,
        signal_interval: 1,
    };
    let big = Mem::new(64);
    // SAFETY: as in `Mem::sq`.
    let mut sq = unsafe { Sq::new(&big.desc(1, 256, true), max) }.unwrap();
    let data = vec![1u8; 1000];
    let r = Remote { addr: 0, rkey: 0 };
    assert_eq!(
        post_one(&mut sq, |b| b.rdma_write(
            r,
            Payload::inline(&data[..476]),
            FmCeSe::CQ_UPDATE
        ))
        .ds,
        32
    );
    // SAFETY: no device reads `data`.
    let payload = unsafe { Payload::registered(&data, 1) };
    assert_eq!(
        post_one(&mut sq, |b| b.rdma_write(r, payload, FmCeSe::CQ_UPDATE)).ds,
        32
    );
}

/// The driver's size limits, from the 512-byte WQE (docs/spec/mlx5.md#send-wqe): eight WQEBBs, and
/// the inline bytes left after ctrl + raddr (+ one data segment for an inline head) and
/// the inline header.
#[test]
fn size_limits_follow_from_the_512_byte_wqe() {
    use mlx5_raw::sq::{MAX_INLINE, MAX_INLINE_HEAD, MAX_WQE_BBS, MAX_WQE_BYTES};
    assert_eq!((MAX_WQE_BYTES, MAX_WQE_BBS), (512, 8));
    assert_eq!((MAX_INLINE, MAX_INLINE_HEAD), (476, 460));
}

/// A WQE that needs exactly the free WQEBBs is posted, down both paths: the contiguous
/// one (inline bytes) and the general one (a gather list).
#[test]
fn a_wqe_needing_exactly_the_free_blocks_is_posted_by_either_path() {
    let mem = Mem::new(16);
    let mut sq = mem.sq(0x3, SqConfig::COPYRPC);
    let remote = Remote {
        addr: 0x1000,
        rkey: 0x42,
    };
    let sge = [Sge {
        addr: 0x7f00_0000_0000,
        len: 64,
        lkey: 0x9,
    }];
    for general in [false, true] {
        while sq.free_bbs() > 1 {
            post_one(&mut sq, |b| b.nop(FmCeSe::CQ_UPDATE));
        }
        let p = post_one(&mut sq, |b| {
            if general {
                // SAFETY: no device reads this memory; the address only goes into the WQE.
                b.rdma_write(remote, unsafe { Payload::gather(&sge) }, FmCeSe::CQ_UPDATE)
            } else {
                b.rdma_write(remote, Payload::inline(&[5; 8]), FmCeSe::CQ_UPDATE)
            }
        });
        assert_eq!((p.bbs, sq.free_bbs()), (1, 0), "general path {general}");
        sq.retire(p.wqe_index).unwrap();
        assert_eq!(sq.free_bbs(), 16);
    }
}

/// A queue smaller than the largest WQE: a WQE of exactly the queue's blocks is posted
/// (through the general path: a gather list), one block more is too large for it
/// whatever is free.
#[test]
fn a_wqe_as_large_as_a_small_queue_fits_and_a_larger_one_never_does() {
    let mem = Mem::new(4);
    let mut sq = mem.sq(0x3, SqConfig::COPYRPC);
    let remote = Remote {
        addr: 0x1000,
        rkey: 0x42,
    };
    // ctrl + raddr + 14 data segments = 16 DS = 4 blocks; 15 segments need a fifth.
    let sges: Vec<Sge> = (0..15)
        .map(|i| Sge {
            addr: 0x7f00_0000_0000 + 64 * i,
            len: 64,
            lkey: 0x9,
        })
        .collect();
    let mut b = sq.batch();
    // SAFETY: no device reads this memory; the addresses only go into the WQE.
    let too_large = b.rdma_write(remote, unsafe { Payload::gather(&sges) }, FmCeSe::CQ_UPDATE);
    assert_eq!(too_large, Err(PostError::WqeTooLarge { ds: 17 }));
    // SAFETY: as above.
    let p = b
        .rdma_write(
            remote,
            unsafe { Payload::gather(&sges[..14]) },
            FmCeSe::CQ_UPDATE,
        )
        .unwrap();
    b.finish();
    assert_eq!((p.bbs, p.ds, sq.free_bbs()), (4, 16, 0));
}

/// Two SQs sharing one BlueFlame register take its halves in turn, whichever SQ rings:
/// the shared lock, not each SQ, keeps the half the next doorbell uses.
#[test]
fn sqs_sharing_a_register_alternate_its_halves_between_them() {
    let lock = mlx5_raw::SharedBf::new();
    let (ma, mb) = (Mem::new(16), Mem::new(16));
    let shared = |m: &Mem, qpn: u32| {
        let desc = SqDesc {
            bf_lock: &lock,
            // Both write the same register (ma's window).
            bf_reg: ma.bf.ptr(),
            ..m.desc(qpn, 256, true)
        };
        // SAFETY: as in `Mem::sq`; the register is shared through `lock`, which outlives
        // both SQs.
        unsafe { Sq::new(&desc, SqConfig::COPYRPC) }.unwrap()
    };
    let (mut a, mut b) = (shared(&ma, 0xa), shared(&mb, 0xb));
    assert_eq!(lock.with_register(|h| h), 0);
    post_one(&mut a, |q| q.nop(FmCeSe::COMP_ONLY_ERR));
    assert_eq!(lock.with_register(|h| h), 256, "a rang half 0");
    post_one(&mut b, |q| q.nop(FmCeSe::COMP_ONLY_ERR));
    assert_eq!(lock.with_register(|h| h), 0, "b rang half 1");
    post_one(&mut b, |q| q.nop(FmCeSe::COMP_ONLY_ERR));
    assert_eq!(lock.with_register(|h| h), 256);
    // Each BlueFlame copy is the WQE of the SQ that rang, in the half it was given.
    assert_eq!(ma.bf.read(0, 64), mb.wqe(1, 64), "half 0: b's second");
    assert_eq!(ma.bf.read(256, 64), mb.wqe(0, 64), "half 1: b's first");
}
