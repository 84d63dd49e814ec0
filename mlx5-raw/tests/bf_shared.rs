//! Several QPs on one BlueFlame register, posting from several threads (rdma-core's
//! shared registers, from a context's 17th QP): with the register's [`SharedBf`] every
//! BlueFlame copy lands whole, and the QPs alternate the register's halves together.
//! A reader that holds the register as a doorbell does checks, thousands of times
//! while the writers run, that each half holds exactly one WQE's chunks (the control
//! segment and both inline chunks of one post of one QP). Given a null `bf_lock` (no
//! serialisation) the same test failed 3 runs of 3 on the 2-core development machine
//! ("ctrl with inline data of another post"); since timing decides that, the race is
//! asserted by the loom model `core-nostd/tests/loom_bf.rs` instead, and only the
//! locked path here.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::DmaBuf;
use mlx5_raw::layout::FmCeSe;
use mlx5_raw::{Payload, Remote, SharedBf, Sq, SqConfig, SqDesc};

const WRITERS: usize = 3;
const POSTS: u32 = 4000;
const BF_SIZE: u32 = 256;
const QPN_BASE: u32 = 0x4200;
/// Inline bytes per WQE: ctrl 16 + raddr 16 + inline header 4 + 100 → 9 DS, 3 chunks.
const PAYLOAD: usize = 100;
const CHUNKS: usize = 3;

/// The register: both halves, shared by every writer. Written only through `Sq`s
/// (volatile stores) and read only under the lock.
struct Register(DmaBuf);
// SAFETY: the buffer is plain heap memory; writers store to it volatilely through the
// `Sq`s' register windows and the reader loads it volatilely, all under one `SharedBf`.
unsafe impl Sync for Register {}
// SAFETY: as above.
unsafe impl Send for Register {}

/// Payload of post `seq` of writer `t`: every byte says who and which.
fn payload(t: usize, seq: u32) -> [u8; PAYLOAD] {
    let mut p = [0u8; PAYLOAD];
    for (i, b) in p.iter_mut().enumerate() {
        *b = match i % 4 {
            0 => 0xa0 | t as u8,
            1 => seq as u8,
            2 => (seq >> 8) as u8,
            _ => 0x5c,
        };
    }
    p
}

/// The one WQE a half holds, as (writer, seq), or why it holds none.
fn decode(half: &[u8]) -> Result<Option<(usize, u32)>, String> {
    if half.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    let qpn = u32::from_be_bytes([0, half[4], half[5], half[6]]);
    let t = qpn.wrapping_sub(QPN_BASE) as usize;
    if t >= WRITERS {
        return Err(format!("ctrl names qpn {qpn:#x}"));
    }
    // Inline data starts after ctrl (16), raddr (16) and the 4-byte inline header.
    let data = &half[36..36 + PAYLOAD];
    let seq = u32::from(data[1]) | u32::from(data[2]) << 8;
    if data != payload(t, seq) {
        return Err(format!(
            "qp {qpn:#x}'s ctrl with inline data of another post: {:02x?}",
            &data[..8]
        ));
    }
    // The ctrl's WQE index is the writer's producer counter: 3 WQEBBs a post.
    let wqe_index = u16::from_be_bytes([half[1], half[2]]);
    if u32::from(wqe_index) != (seq * CHUNKS as u32) & 0xffff {
        return Err(format!(
            "qp {qpn:#x} post {seq}'s payload under WQE index {wqe_index}"
        ));
    }
    Ok(Some((t, seq)))
}

fn writer(t: usize, reg: Arc<Register>, lock: Arc<SharedBf>) {
    let wqe_cnt = 64u32;
    let buf = DmaBuf::new(wqe_cnt as usize * 64);
    let dbrec = DmaBuf::new(8);
    let desc = SqDesc {
        buf: buf.ptr(),
        wqe_cnt,
        stride: 64,
        dbrec: dbrec.ptr32(),
        bf_reg: reg.0.ptr(),
        bf_size: BF_SIZE,
        qpn: QPN_BASE + t as u32,
        bf_lock: Arc::as_ptr(&lock),
    };
    // SAFETY: ring and record are this SQ's alone and outlive it; the register is
    // shared with the other writers, all given the same `SharedBf`, which outlives them
    // (held here); nothing else posts to this QP.
    let mut sq = unsafe { Sq::new(&desc, SqConfig::COPYRPC) }.unwrap();
    let remote = Remote {
        addr: 0x1000,
        rkey: 7,
    };
    for seq in 0..POSTS {
        let p = payload(t, seq);
        let mut b = sq.batch();
        let posted = b
            .rdma_write(remote, Payload::inline(&p), FmCeSe::CQ_UPDATE)
            .unwrap();
        assert_eq!(posted.bbs as usize, CHUNKS);
        // A lone WQE that fits a half: the doorbell is the BlueFlame copy.
        b.finish();
        sq.retire(posted.wqe_index).unwrap();
    }
}

#[test]
fn qps_sharing_a_register_never_splice_their_blueflame_copies() {
    let reg = Arc::new(Register(DmaBuf::new(2 * BF_SIZE as usize)));
    let lock = Arc::new(SharedBf::new());
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (reg, lock, done) = (Arc::clone(&reg), Arc::clone(&lock), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut checks = 0u64;
            let mut seen = [false; WRITERS];
            loop {
                // Acquire pairs with the Release after the writers were joined: the
                // flag only ends the loop; what is read below is ordered by the lock.
                let last = done.load(Ordering::Acquire);
                lock.with_register(|next| {
                    let bytes = reg.0.read(0, 2 * BF_SIZE as usize);
                    for h in 0..2 {
                        let half = &bytes[h * BF_SIZE as usize..][..CHUNKS * 64];
                        match decode(half) {
                            Ok(Some((t, _))) => seen[t] = true,
                            Ok(None) => {}
                            Err(why) => panic!("half {h} (next {next}) spliced: {why}"),
                        }
                    }
                });
                checks += 1;
                if last {
                    return (checks, seen);
                }
                std::thread::yield_now();
            }
        })
    };
    let writers: Vec<_> = (0..WRITERS)
        .map(|t| {
            let (reg, lock) = (Arc::clone(&reg), Arc::clone(&lock));
            std::thread::spawn(move || writer(t, reg, lock))
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    done.store(true, Ordering::Release);
    let (checks, seen) = reader.join().expect("reader");
    assert!(checks > 1, "the reader ran");
    assert!(seen.iter().any(|&s| s), "no copy ever reached the register");
    // The halves alternate per register: after an even number of doorbells in all,
    // the next one uses the first half again.
    let total = WRITERS as u32 * POSTS;
    lock.with_register(|next| assert_eq!(next, if total.is_multiple_of(2) { 0 } else { BF_SIZE }));
}

/// A shared register's lock prints as what it is (it holds no state worth printing).
#[test]
fn a_shared_register_lock_debug_prints_its_name() {
    assert_eq!(format!("{:?}", SharedBf::default()), "SharedBf { .. }");
}
