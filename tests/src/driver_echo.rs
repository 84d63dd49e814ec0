//! The floor under copyrpc's batch-1 rows (issue 24): the stepped echo of
//! [`echo_rig`](crate::echo_rig) written directly on the mlx5 driver, with no RPC layer.
//! Each call is the bytes copyrpc's 32 B echo puts on the wire (a 32 B metadata block
//! and a 64 B message: header, payload, padding) written into a send ring and carried
//! inline by one WRITE_IMM, the immediate naming the offset; the answering side copies
//! the payload into a reply the same way, in the poll that received the request (as
//! `poll_serve` does). Completions are taken as copyrpc takes them: the owner test per
//! CQ, `CqeRef::brief`, the SRQ WQE freed per completion and reposted below 2/3, send
//! completions (one per 64 WQEs) retired.
//!
//! Left out on purpose: call ids and the pending table, credit and ring flow control
//! (the rings here never fill: one call is in flight and each ring is far larger than a
//! lap of offsets), the dirty set, probes, every check that rejects a bad peer. So its
//! count is what any RPC layer on this driver and this rig pays at batch 1 before its
//! own logic: the driver, the rig's function frames and the copies.
//!
//! The same separation as `echo_rig`: the `driver_*` functions run only driver code
//! (callgrind's inclusive cost of them is the figure), [`device_step`] only the model.
#![allow(unsafe_code)]

use mlx5_raw::layout::{CqeOpcode, FmCeSe};
use mlx5_raw::{Payload, Remote};

use crate::sim_rig::{Opts, Rig, Side};

/// Bytes of each side's send ring; the peer's receive ring mirrors it at this offset.
pub const RING: u64 = 64 << 10;
/// The flow-metadata block every copyrpc batch starts with.
const META: u64 = 32;
/// A message header: call id (8 B), payload length (4 B), 4 B reserved.
const HDR: u64 = 16;
/// copyrpc's wire alignment: messages and batches start on 32 B.
const ALIGN: u64 = 32;

/// One side: its QP, CQs and SRQ, where the next batch goes in its send ring, and the
/// batch waiting to be posted.
#[derive(Debug)]
pub struct End {
    offset: u64,
    due: Option<(u64, u64)>,
    /// The id and length of the last answer taken (side A), for the tests.
    pub last: (u64, usize),
}

/// Two connected QPs on the device model with no link latency, each side's SRQ filled.
// The rig's device has no `Debug`; `Rig::dump` prints its state.
#[allow(missing_debug_implementations)]
pub struct DriverPair {
    pub rig: Rig,
    pub a: End,
    pub b: End,
}

/// A pair with copyrpc's queue sizes (64-WQEBB send queue, 256-WQE SRQ, 512-entry recv
/// CQ, the `COPYRPC` send-queue settings) and a step that delivers what was sent.
pub fn pair() -> DriverPair {
    let mut o = Opts {
        sq_wqe_cnt: 64,
        cqe_cnt: 512,
        srq_wqe_cnt: 256,
        data_len: 2 * RING as usize,
        ..Opts::default()
    };
    o.link.latency_ns = 0;
    let mut rig = Rig::new(o);
    for s in [&mut rig.a, &mut rig.b] {
        let cap = s.srq.capacity();
        assert_eq!(s.srq.post_batch(cap), Ok(cap), "the SRQ fills");
    }
    DriverPair {
        rig,
        a: End {
            offset: 0,
            due: None,
            last: (u64::MAX, 0),
        },
        b: End {
            offset: 0,
            due: None,
            last: (u64::MAX, 0),
        },
    }
}

/// Writes one message (header and payload, padded to 32 B) behind a metadata block at
/// the next offset of `s`'s send ring and marks the batch due. Returns its offset.
#[inline(always)]
fn write_batch(s: &Side, e: &mut End, id: u64, payload: &[u8]) {
    let msg = (HDR + payload.len() as u64).next_multiple_of(ALIGN);
    let len = META + msg;
    if e.offset + len > RING {
        e.offset = 0;
    }
    let off = e.offset as usize;
    // SAFETY: `[off, off + len)` lies in the send ring (`data[..RING]`), which only this
    // side writes and the device reads only for a WQE posted later, after these stores.
    unsafe {
        let p = s.data.at(off);
        // Metadata: credit return 0, grant 0, one message.
        p.cast::<[u64; 4]>().write([0, 0, 1, 0]);
        let h = p.add(META as usize);
        h.cast::<u64>().write_unaligned(id);
        h.add(8).cast::<u32>().write_unaligned(payload.len() as u32);
        core::ptr::copy_nonoverlapping(payload.as_ptr(), h.add(HDR as usize), payload.len());
    }
    e.due = Some((e.offset, len));
    e.offset += len;
}

/// Posts the due batch of `s`, if any, as one inline WRITE_IMM into the peer's receive
/// ring (at `RING` + the same offset) and rings the doorbell.
#[inline(always)]
fn post_due(s: &mut Side, peer: Remote, e: &mut End) {
    let Some((off, len)) = e.due.take() else {
        return;
    };
    // SAFETY: `[off, off + len)` lies in the send ring, written by `write_batch` and not
    // written again before the post below has copied it into the WQE.
    let bytes = unsafe { core::slice::from_raw_parts(s.data.at(off as usize), len as usize) };
    // SAFETY: the bytes lie in `s.data`, registered under `s.keys.lkey`; they are short
    // enough to go inline, so the device never reads them after the post.
    let payload = unsafe { Payload::registered(bytes, s.keys.lkey) };
    let remote = Remote {
        addr: peer.addr + RING + off,
        rkey: peer.rkey,
    };
    let imm = ((off / ALIGN) as u32).to_be_bytes();
    let mut batch = s.sq.batch();
    batch
        .rdma_write_imm(remote, payload, imm, FmCeSe::COMP_ONLY_ERR)
        .expect("one call in flight leaves the send queue room");
    batch.finish();
}

/// Takes every arrived batch of `s` (its header and payload read from the receive ring,
/// handed to `f` with the call id), frees and reposts SRQ WQEs as copyrpc does, and
/// retires send completions. Returns the batches taken.
#[inline(always)]
fn take_arrivals(s: &mut Side, mut f: impl FnMut(&Side, u64, &[u8])) -> u64 {
    let mut got = 0;
    if !s.rcq.is_empty() {
        while let Some(cqe) = s.rcq.poll() {
            let b = cqe
                .brief(CqeOpcode::RespWrImm)
                .expect("only WRITE_IMMs arrive");
            s.srq.free(b.wqe_counter).expect("a posted SRQ WQE");
            let off = RING + u64::from(u32::from_be_bytes(b.imm)) * ALIGN + META;
            // SAFETY: the batch lies in the receive ring, written by the device before
            // the completion this poll observed; nothing writes it until the peer's
            // next batch, which waits for this side's answer.
            let (id, payload) = unsafe {
                let h = s.data.at(off as usize);
                let id = h.cast::<u64>().read_unaligned();
                let len = h.add(8).cast::<u32>().read_unaligned() as usize;
                (id, core::slice::from_raw_parts(h.add(HDR as usize), len))
            };
            f(s, id, payload);
            got += 1;
        }
        s.rcq.update_ci();
        let cap = s.srq.capacity();
        if s.srq.outstanding() * 3 < cap * 2 {
            s.srq
                .post_batch(cap - s.srq.outstanding())
                .expect("the SRQ's links are intact");
        }
    }
    if !s.scq.is_empty() {
        while let Some(cqe) = s.scq.poll() {
            let c = cqe.decode().expect("a plain CQE");
            s.sq.retire_completion(&c).expect("a completion of this QP");
        }
        s.scq.update_ci();
    }
    got
}

/// Side A queues one call (`id`, `payload`): the batch is posted by its next poll.
#[inline(never)]
pub fn driver_call(p: &mut DriverPair, id: u64, payload: &[u8]) {
    write_batch(&p.rig.a, &mut p.a, id, payload);
}

/// Side A polls: posts its due batch, takes responses; returns how many arrived.
#[inline(never)]
pub fn driver_poll_caller(p: &mut DriverPair) -> u64 {
    let peer = p.rig.b.remote(0);
    post_due(&mut p.rig.a, peer, &mut p.a);
    let last = &mut p.a.last;
    take_arrivals(&mut p.rig.a, |_, id, payload| *last = (id, payload.len()))
}

/// Side B polls: answers every request with its own bytes in the same poll (as
/// `poll_serve`), posting the replies before it returns. Returns how many it answered.
#[inline(never)]
pub fn driver_serve(p: &mut DriverPair) -> u64 {
    let e = &mut p.b;
    let n = take_arrivals(&mut p.rig.b, |s, id, payload| {
        write_batch(s, e, id, payload)
    });
    let peer = p.rig.a.remote(0);
    post_due(&mut p.rig.b, peer, &mut p.b);
    n
}

/// The device model's share: one step.
#[inline(never)]
pub fn device_step(p: &mut DriverPair) {
    p.rig.step();
}

/// `rounds` calls of `payload`, one at a time: A calls, then A and B poll and the device
/// steps until the answer is back, as `echo_rig::round` at batch 1. Each answer must
/// carry its call's id and length back. Returns the steps.
pub fn run(p: &mut DriverPair, payload: &[u8], rounds: u64) -> u64 {
    let mut steps = 0;
    for id in 0..rounds {
        driver_call(p, id, payload);
        let mut got = 0;
        let mut turns = 0;
        while got == 0 {
            got += driver_poll_caller(p);
            driver_serve(p);
            device_step(p);
            turns += 1;
            assert!(turns < 100, "round {id} stalled\n{}", p.rig.dump());
        }
        assert_eq!(got, 1, "round {id}: one answer");
        assert_eq!(p.a.last, (id, payload.len()), "round {id}: the echo");
        steps += turns;
    }
    steps
}
