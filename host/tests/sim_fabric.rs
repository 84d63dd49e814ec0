//! The `sim` fabric end to end through the mlx5-raw driver: two fabrics (two "NICs",
//! each with its own `/dev/shm` region and engine thread, as two ranks would have)
//! connect a QP each through exchanged [`QpEndpoint`] records and WRITE_IMM into each
//! other's registered regions; bad endpoints are refused with errors that say why.

use std::time::{Duration, Instant};

use copyrpc_host::error::Error;
use copyrpc_host::fabric::sim::{SimFabric, SimOptions, SimQp, SimQpOptions};
use copyrpc_host::fabric::{MrEndpoint, QpEndpoint};
use mlx5_raw::layout::{CqeOpcode, FmCeSe};
use mlx5_raw::sim::Access;
use mlx5_raw::{Cq, Payload, Remote, Sq, SqConfig, Srq};

/// Field order is drop order: the driver handles go before the fabric that maps them.
struct Side {
    qp: SimQp,
    sq: Sq,
    scq: Cq,
    rcq: Cq,
    srq: Srq,
    mr: copyrpc_host::fabric::sim::SimMr,
    fabric: SimFabric,
}

fn side() -> Side {
    let fabric = SimFabric::open(&SimOptions {
        region_bytes: 16 << 20,
        trace_events: 512,
        ..SimOptions::default()
    })
    .unwrap();
    let mr = fabric.alloc_mr("data", 1 << 16, Access::ALL).unwrap();
    let scq = fabric.create_cq(256).unwrap();
    let rcq = fabric.create_cq(256).unwrap();
    let srq = fabric.create_srq(64, 1).unwrap();
    let qp = fabric
        .create_qp(&SimQpOptions::new(scq.cqn, rcq.cqn, Some(srq.srqn)))
        .unwrap();
    // SAFETY: the descriptors describe the fabric's queues, mapped until the fabric
    // drops; the handles live in the same `Side` and are never used after it, and each
    // queue gets exactly one driver handle.
    let (sq, scq, rcq, mut srq) = unsafe {
        (
            Sq::new(&qp.sq_desc(), SqConfig::COPYRPC).unwrap(),
            Cq::new(&scq).unwrap(),
            Cq::new(&rcq).unwrap(),
            Srq::new(&srq, mr.lkey()).unwrap(),
        )
    };
    srq.post_batch(63).unwrap();
    Side {
        sq,
        scq,
        rcq,
        srq,
        qp,
        mr,
        fabric,
    }
}

impl Side {
    fn write_imm(&mut self, to: &MrEndpoint, off: u64, bytes: &[u8], imm: u32) {
        let mut b = self.sq.batch();
        b.rdma_write_imm(
            Remote {
                addr: to.addr + off,
                rkey: to.rkey,
            },
            Payload::inline(bytes),
            imm.to_be_bytes(),
            FmCeSe::CQ_UPDATE,
        )
        .unwrap();
        b.finish();
    }

    /// One responder completion, if any, after checking the requester side succeeded.
    fn poll(&mut self) -> Option<(u32, u32)> {
        while let Some(c) = self.scq.poll() {
            let c = c.decode().unwrap();
            assert_eq!(
                c.opcode,
                CqeOpcode::Req,
                "{c:?}\n{}",
                self.fabric.engine().trace_dump()
            );
            self.sq.retire_completion(&c).unwrap();
        }
        self.scq.update_ci();
        let c = self.rcq.poll()?.decode().unwrap();
        self.rcq.update_ci();
        assert_eq!(c.opcode, CqeOpcode::RespWrImm, "{c:?}");
        self.srq.free(c.wqe_counter).unwrap();
        self.srq.post_batch(1).unwrap();
        Some((u32::from_be_bytes(c.imm.unwrap()), c.byte_cnt))
    }

    fn read(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.mr.len());
        let mut v = vec![0; len];
        // SAFETY: inside the registered region; the device wrote it before the CQE that
        // `poll` consumed (Acquire), and writes nothing there now.
        unsafe { std::ptr::copy_nonoverlapping(self.mr.as_ptr().add(off), v.as_mut_ptr(), len) };
        v
    }
}

#[test]
fn two_fabrics_exchange_write_imm_through_their_regions() {
    let mut a = side();
    let mut b = side();
    assert_ne!(a.fabric.region_name(), b.fabric.region_name());
    let (ea, eb) = (a.fabric.endpoint(&a.qp), b.fabric.endpoint(&b.qp));
    assert_ne!(ea.flags & QpEndpoint::FLAG_SIM, 0);
    a.fabric.connect(&a.qp, &eb).unwrap();
    b.fabric.connect(&b.qp, &ea).unwrap();
    let (ma, mb) = (a.mr.endpoint(), b.mr.endpoint());

    // A sends n messages to B; B echoes each one back; both check bytes and immediates.
    let n = 300u32;
    let msg = |i: u32| -> Vec<u8> { (0..(i % 200) + 1).map(|k| (i ^ k) as u8).collect() };
    let slot = |i: u32| u64::from(i % 32) * 256;
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut sent, mut echoed, mut back) = (0u32, 0u32, 0u32);
    while back < n {
        assert!(
            Instant::now() < deadline,
            "stuck: sent {sent} echoed {echoed} back {back}\nA:\n{}\nB:\n{}",
            a.fabric.engine().trace_dump(),
            b.fabric.engine().trace_dump()
        );
        // A window of 16 keeps every slot's bytes unread-over until checked.
        if sent < n && sent - back < 16 {
            a.write_imm(&mb, slot(sent), &msg(sent), sent);
            sent += 1;
        }
        if let Some((imm, len)) = b.poll() {
            assert_eq!(imm, echoed);
            assert_eq!(len as usize, msg(imm).len());
            let got = b.read(slot(imm) as usize, len as usize);
            assert_eq!(got, msg(imm), "A→B message {imm}");
            b.write_imm(&ma, slot(imm), &got, imm);
            echoed += 1;
        }
        if let Some((imm, len)) = a.poll() {
            assert_eq!(imm, back);
            assert_eq!(
                a.read(slot(imm) as usize, len as usize),
                msg(imm),
                "echo {imm}"
            );
            back += 1;
        }
        std::thread::yield_now();
    }
    // Both engines did the work: each device created its own objects and moved packets.
    assert!(a.fabric.engine().steps() > 0 && b.fabric.engine().steps() > 0);
}

#[test]
fn endpoints_that_cannot_be_ours_are_refused() {
    let a = side();
    let b = side();
    let good = b.fabric.endpoint(&b.qp);

    let mut not_sim = good;
    not_sim.flags = 0;
    let e = a.fabric.connect(&a.qp, &not_sim).unwrap_err();
    assert!(e.to_string().contains("same --fabric"), "{e}");

    let mut other_geometry = good;
    other_geometry.reserved = 128u32.to_le_bytes();
    let e = a.fabric.connect(&a.qp, &other_geometry).unwrap_err();
    assert!(e.to_string().contains("same sim options"), "{e}");

    let mut outside = good;
    outside.gid[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let e = a.fabric.connect(&a.qp, &outside).unwrap_err();
    assert!(e.to_string().contains("outside its region"), "{e}");

    // A peer that is gone (or on another machine): its region cannot be mapped.
    let mut gone = good;
    gone.gid[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = a.fabric.connect(&a.qp, &gone).unwrap_err();
    assert!(matches!(e, Error::SimPeer { .. }), "{e:?}");
    assert!(e.to_string().contains("one machine only"), "{e}");

    // None of that touched the QP: the real endpoint still connects.
    a.fabric.connect(&a.qp, &good).unwrap();
}
