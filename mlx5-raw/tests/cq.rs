//! CQ poller on plain heap buffers, with a fake producer that writes CQEs as the device
//! model will: body, then `op_own` with a Release store, never more than `cqe_cnt` ahead
//! of the consumer-index record.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::DmaBuf;
use mlx5_raw::layout::{
    Cqe64, CqeDecodeError, CqeOpcode, ErrCqe, Syndrome, CQE_INVALID_OP_OWN, CQE_SE_MASK,
};
use mlx5_raw::{Cq, CqDesc, CqInitError};
use zerocopy::IntoBytes;

struct CqMem {
    buf: DmaBuf,
    dbrec: DmaBuf,
    cnt: u32,
    size: u32,
}

impl CqMem {
    fn new(cnt: u32, size: u32, fill: u8) -> Self {
        Self {
            buf: DmaBuf::filled((cnt * size) as usize, fill),
            dbrec: DmaBuf::new(8),
            cnt,
            size,
        }
    }

    fn desc(&self) -> CqDesc {
        CqDesc {
            buf: self.buf.ptr(),
            cqe_cnt: self.cnt,
            cqe_size: self.size,
            dbrec: self.dbrec.ptr32(),
            cqn: 0x44,
        }
    }

    fn cq(&self) -> Cq {
        // SAFETY: the buffers outlive the `Cq` (declared first in each test) and are
        // accessed otherwise only by the fake producer, atomically for `op_own`.
        unsafe { Cq::new(&self.desc()) }.unwrap()
    }

    fn set_ci(&self) -> u32 {
        self.dbrec.be32(0)
    }

    /// Writes `cqe` as the CQE with producer index `p`: body first, then `op_own` with
    /// the lap's owner bit, Release.
    fn produce(&self, p: u32, cqe: &Cqe64) {
        assert!(
            p.wrapping_sub(self.set_ci()) & 0xff_ffff < self.cnt,
            "producer overrun"
        );
        let off = ((p & (self.cnt - 1)) * self.size + self.size - 64) as usize;
        self.buf.write(off, &cqe.as_bytes()[..63]);
        let owner = u8::from(p & self.cnt != 0);
        self.buf
            .store_u8_release(off + 63, (cqe.op_own & !1) | owner);
    }
}

fn req_cqe(qpn: u32, wqe_counter: u16) -> Cqe64 {
    let mut c = Cqe64::ZEROED;
    c.sop_drop_qpn.set((0x09 << 24) | qpn);
    c.wqe_counter.set(wqe_counter);
    c.op_own = CqeOpcode::Req.as_u8() << 4;
    c
}

fn resp_cqe(qpn: u32, wqe_counter: u16, imm: [u8; 4], len: u32) -> Cqe64 {
    let mut c = Cqe64::ZEROED;
    c.sop_drop_qpn.set(qpn);
    c.wqe_counter.set(wqe_counter);
    c.imm_inval_pkey = imm;
    c.byte_cnt.set(len);
    c.flags_rqpn.set(0x99);
    c.srqn_uidx.set(0x77);
    c.op_own = CqeOpcode::RespWrImm.as_u8() << 4;
    c
}

#[test]
fn fresh_buffers_read_empty_whether_zeroed_or_stamped() {
    for fill in [0x00, CQE_INVALID_OP_OWN] {
        for size in [64, 128] {
            let mem = CqMem::new(8, size, fill);
            let mut cq = mem.cq();
            assert!(cq.poll().is_none(), "fill {fill:#x} size {size}");
            for slot in 0..8 {
                assert_eq!(
                    mem.buf.load_u8(((slot + 1) * size - 1) as usize),
                    CQE_INVALID_OP_OWN
                );
            }
            mem.produce(0, &req_cqe(5, 0));
            assert_eq!(cq.poll().map(|c| c.opcode()), Some(CqeOpcode::Req));
            assert!(cq.poll().is_none());
        }
    }
}

#[test]
fn three_laps_of_the_owner_bit() {
    let mem = CqMem::new(4, 64, 0);
    let mut cq = mem.cq();
    let mut p = 0u32;
    let mut seen = Vec::new();
    // 5 laps, in bursts of 3 (so bursts straddle the lap boundary).
    while p < 20 {
        for _ in 0..3 {
            mem.produce(
                p,
                &resp_cqe(0x1234, p as u16, (p * 3).to_be_bytes(), 100 + p),
            );
            p += 1;
        }
        let n = cq.poll_batch(16, |c| {
            let d = c.decode().unwrap();
            assert_eq!(c.index(), d.wqe_counter.into());
            assert_eq!(d.owner, (c.index() & 4) != 0);
            assert_eq!(d.imm, Some((c.index() * 3).to_be_bytes()));
            assert_eq!(
                (d.qpn, d.byte_cnt, d.remote_qpn, d.srqn_uidx),
                (0x1234, 100 + c.index(), Some(0x99), 0x77)
            );
            seen.push(d.wqe_counter);
        });
        assert_eq!(n, 3);
        assert_eq!(mem.set_ci(), p, "SET_CI after the batch");
        assert!(
            cq.poll().is_none(),
            "stale CQEs of the previous lap are not valid"
        );
        cq.update_ci();
    }
    assert_eq!(p, 21);
    assert_eq!(seen, (0..21).collect::<Vec<u16>>());
    assert_eq!(cq.consumer_index(), 21);
}

#[test]
fn a_taken_cqe_reads_invalid_in_the_ring_and_whole_through_its_ref() {
    for size in [64u32, 128] {
        let mem = CqMem::new(4, size, 0);
        let mut cq = mem.cq();
        for p in 0..9u32 {
            let mut cqe = resp_cqe(7, p as u16, [9, 8, 7, 6], p);
            cqe.op_own |= CQE_SE_MASK;
            mem.produce(p, &cqe);
            let own_off = ((p % 4 + 1) * size - 1) as usize;
            let written = mem.buf.load_u8(own_off);
            assert_ne!(written, CQE_INVALID_OP_OWN);
            let c = cq.poll().expect("CQE");
            assert_eq!(
                mem.buf.load_u8(own_off),
                CQE_INVALID_OP_OWN,
                "size {size}: slot of CQE {p} stamped"
            );
            // Every accessor reports the byte the device wrote, not the stamp.
            assert_eq!((c.bytes()[63], c.cqe64().op_own), (written, written));
            assert_eq!(c.opcode(), CqeOpcode::RespWrImm);
            let d = c.decode().unwrap();
            assert_eq!(
                (d.opcode, d.owner, d.solicited, d.wqe_counter),
                (CqeOpcode::RespWrImm, p & 4 != 0, true, p as u16)
            );
            let b = c.brief(CqeOpcode::RespWrImm).expect("a plain RESP_WR_IMM");
            assert_eq!((b.qpn, b.wqe_counter, b.imm), (7, p as u16, [9, 8, 7, 6]));
            assert!(cq.poll().is_none());
            cq.update_ci();
        }
    }
}

#[test]
fn a_valid_opcode_with_the_wrong_owner_bit_is_not_taken() {
    // The stamp makes a consumed slot fail the opcode test; a slot holding a CQE of
    // another lap that was never stamped (written behind the poller's back) must still
    // fail the owner test.
    let mem = CqMem::new(4, 64, 0);
    let mut cq = mem.cq();
    mem.buf
        .store_u8_release(63, (CqeOpcode::Req.as_u8() << 4) | 1);
    assert!(cq.is_empty(), "lap 0 wants owner 0");
    assert!(cq.poll().is_none());
    mem.produce(0, &req_cqe(3, 0));
    assert_eq!(cq.poll().map(|c| c.index()), Some(0));
    cq.update_ci();
    for p in 1..4 {
        mem.produce(p, &req_cqe(3, p as u16));
        assert!(cq.poll().is_some());
        cq.update_ci();
    }
    // Lap 1 wants owner 1: an unstamped lap-0 REQ in slot 0 is stale.
    mem.buf.store_u8_release(63, CqeOpcode::Req.as_u8() << 4);
    assert!(cq.is_empty(), "lap 1 wants owner 1");
    assert!(cq.poll().is_none());
}

#[test]
fn is_empty_agrees_with_poll_across_laps() {
    let mem = CqMem::new(4, 64, 0);
    let mut cq = mem.cq();
    assert!(cq.is_empty(), "fresh");
    for p in 0..13u32 {
        mem.produce(p, &req_cqe(7, p as u16));
        // Peeking does not consume: it says so again, and poll then takes the CQE.
        assert!(!cq.is_empty() && !cq.is_empty(), "CQE {p} written");
        assert_eq!(cq.poll().map(|c| c.index()), Some(p));
        // The next slot holds nothing of this lap: INVALID, never written or stamped
        // when the last lap's CQE there was taken.
        assert!(cq.is_empty(), "after CQE {p}");
        assert!(cq.poll().is_none());
        cq.update_ci();
    }
}

#[test]
fn consumer_index_record_is_written_only_by_update() {
    let mem = CqMem::new(8, 64, 0);
    let mut cq = mem.cq();
    for p in 0..5 {
        mem.produce(p, &req_cqe(1, p as u16));
    }
    let mut got = Vec::new();
    while let Some(c) = cq.poll() {
        got.push(c.decode().unwrap().wqe_counter);
    }
    assert_eq!(got, [0, 1, 2, 3, 4]);
    assert_eq!(mem.set_ci(), 0, "not yet written");
    cq.update_ci();
    assert_eq!(mem.set_ci(), 5);
    assert_eq!(cq.poll_batch(4, |_| ()), 0);
    assert_eq!(mem.set_ci(), 5);
    // poll_batch stops at `max` and still writes the record.
    for p in 5..11 {
        mem.produce(p, &req_cqe(1, p as u16));
    }
    assert_eq!(cq.poll_batch(4, |_| ()), 4);
    assert_eq!(mem.set_ci(), 9);
    assert_eq!(cq.poll_batch(4, |_| ()), 2);
    assert_eq!(mem.set_ci(), 11);
}

#[test]
fn cqe128_uses_the_second_half() {
    let mem = CqMem::new(4, 128, 0);
    let mut cq = mem.cq();
    for lap in 0..3u32 {
        for i in 0..4u32 {
            let p = lap * 4 + i;
            mem.buf.write(((p & 3) * 128) as usize, &[0xaa; 64]); // first half: junk
            mem.produce(p, &resp_cqe(7, p as u16, [1, 2, 3, 4], p));
        }
        for i in 0..4u32 {
            let c = cq.poll().expect("CQE");
            let d = c.decode().unwrap();
            assert_eq!(
                (d.wqe_counter, d.byte_cnt, d.owner),
                ((lap * 4 + i) as u16, lap * 4 + i, lap % 2 == 1)
            );
        }
        assert!(cq.poll().is_none());
        cq.update_ci();
    }
}

#[test]
fn error_and_compressed_cqes_are_handed_out_typed() {
    let mem = CqMem::new(4, 64, 0);
    let mut cq = mem.cq();
    let mut e = ErrCqe::ZEROED;
    e.syndrome = 0x13;
    e.vendor_err_synd = 0x88;
    e.s_wqe_opcode_qpn.set((0x09 << 24) | 0x22);
    e.wqe_counter.set(0x1000);
    e.op_own = 0xd0;
    let mut as64 = Cqe64::ZEROED;
    as64.as_mut_bytes().copy_from_slice(e.as_bytes());
    mem.produce(0, &as64);
    let c = cq.poll().unwrap();
    assert_eq!(c.opcode(), CqeOpcode::ReqErr);
    let d = c.decode().unwrap();
    assert_eq!(
        d.error.map(|e| (e.syndrome, e.vendor_syndrome)),
        Some((Syndrome::RemoteAccessErr, 0x88))
    );
    assert_eq!(
        (d.qpn, d.wqe_counter, d.send_opcode),
        (0x22, 0x1000, Some(0x09))
    );

    let mut z = req_cqe(1, 0);
    z.byte_cnt.set(6);
    z.op_own |= 0x0c;
    mem.produce(1, &z);
    let c = cq.poll().unwrap();
    assert_eq!(
        c.decode(),
        Err(CqeDecodeError::Compressed { session_len: 6 })
    );
    assert_eq!(c.cqe64().byte_cnt.get(), 6);
    assert_eq!(c.bytes()[63], 0x0c);
}

#[test]
fn threaded_producer_many_laps() {
    const N: u32 = if cfg!(miri) { 200 } else { 20_000 };
    let mem = Arc::new(CqMem::new(8, 64, 0));
    let mut cq = mem.cq();
    let producer = {
        let mem = Arc::clone(&mem);
        std::thread::spawn(move || {
            for p in 0..N {
                // Wait for room: A (pairs with R-CQ-CI in Cq::update_ci).
                while p.wrapping_sub(mem.set_ci()) >= mem.cnt {
                    std::thread::yield_now();
                }
                mem.produce(p, &req_cqe(0x55, p as u16));
            }
        })
    };
    let mut next = 0u32;
    // A bound in time, not turns: the producer is another thread, which a loaded machine
    // may not schedule for many of this thread's yields. Far above the test's run.
    let mut since = (0, Instant::now());
    while next < N {
        if next != since.0 {
            since = (next, Instant::now());
        }
        assert!(
            since.1.elapsed() < Duration::from_secs(30),
            "CQE {next} of {N} never came (producer gone?)"
        );
        let n = cq.poll_batch(5, |c| {
            let d = c.decode().unwrap();
            assert_eq!(
                (d.opcode, d.qpn, d.wqe_counter),
                (CqeOpcode::Req, 0x55, next as u16)
            );
            next += 1;
        });
        if n == 0 {
            std::thread::yield_now();
        }
    }
    producer.join().unwrap();
    assert!(cq.poll().is_none());
    assert_eq!(mem.set_ci(), N);
}

#[test]
fn init_rejects_bad_descriptions() {
    let mem = CqMem::new(4, 64, 0);
    let ok = mem.desc();
    let cases = [
        (
            CqDesc {
                buf: std::ptr::null_mut(),
                ..ok
            },
            CqInitError::NullPointer,
        ),
        (
            CqDesc {
                dbrec: std::ptr::null_mut(),
                ..ok
            },
            CqInitError::NullPointer,
        ),
        (CqDesc { cqe_cnt: 3, ..ok }, CqInitError::CqeCnt(3)),
        (CqDesc { cqe_cnt: 0, ..ok }, CqInitError::CqeCnt(0)),
        (
            CqDesc {
                cqe_cnt: 1 << 25,
                ..ok
            },
            CqInitError::CqeCnt(1 << 25),
        ),
        (CqDesc { cqe_size: 32, ..ok }, CqInitError::CqeSize(32)),
        (
            CqDesc {
                dbrec: mem.dbrec.ptr().wrapping_add(1).cast(),
                ..ok
            },
            CqInitError::Misaligned,
        ),
    ];
    for (desc, err) in cases {
        // SAFETY: rejected before any access.
        assert_eq!(unsafe { Cq::new(&desc) }.map(|_| ()), Err(err));
    }
    let cq = mem.cq();
    assert_eq!((cq.cqe_cnt(), cq.cqe_size(), cq.cqn()), (4, 64, 0x44));
}
