//! The device model through the driver side: every opcode with inline data and SGEs,
//! multi-packet messages, WQEs across the SQ end, more than 2^16 WQEs, unsignaled
//! coverage, CQ owner-bit laps, SRQ consumption and repost, and the reference's CQE
//! test vector byte for byte.

mod common;
mod sim_common;

use mlx5_raw::layout::{CqeOpcode, FmCeSe, SendOpcode};
use mlx5_raw::sim::{
    format_link, link_bytes, Access, CqMem, Device, DeviceConfig, LinkConfig, LinkDesc, PacketDir,
    Peer, QpAttr, SqMem, SrqMem, TraceKind,
};
use mlx5_raw::{Cq, Payload, SqConfig, Srq};
use sim_common::{pattern, Opts, Rig};

use common::{hex, DmaBuf};

const SIG: FmCeSe = FmCeSe::CQ_UPDATE;
const UNSIG: FmCeSe = FmCeSe::COMP_ONLY_ERR;

#[test]
fn write_inline_registered_and_gather() {
    let mut r = Rig::new(Opts::default());
    let inline = pattern(1, 100);
    let big = pattern(2, 3000);
    let parts = [pattern(3, 500), pattern(4, 17), pattern(5, 2000)];
    r.a.data.write(0, &big);
    r.a.data.write(4096, &parts[0]);
    r.a.data.write(8192, &parts[1]);
    r.a.data.write(12288, &parts[2]);
    let sges = [
        r.a.sge(4096, 500),
        r.a.sge(8192, 17),
        r.a.sge(0, 0), // zero-length entries are skipped by the driver
        r.a.sge(12288, 2000),
    ];
    let head_sge = [r.a.sge(0, 3000)];
    let (rb0, rb1, rb2) = (r.b.remote(100), r.b.remote(5000), r.b.remote(20000));
    let mut b = r.a.sq.batch();
    let p0 = b.rdma_write(rb0, Payload::inline(&inline), SIG).unwrap();
    // SAFETY: the SGE lies in `a.data`, registered and untouched until completion.
    let p1 = b
        .rdma_write(rb1, unsafe { Payload::gather(&head_sge) }, SIG)
        .unwrap();
    // SAFETY: as above, every SGE lies in `a.data`.
    let p2 = b
        .rdma_write(rb2, unsafe { Payload::gather(&sges) }, SIG)
        .unwrap();
    b.finish();
    let c = r.a_sends(3);
    assert_eq!(
        c.iter().map(|c| c.wqe_counter).collect::<Vec<_>>(),
        [p0.wqe_index, p1.wqe_index, p2.wqe_index]
    );
    for c in &c {
        assert_eq!(c.opcode, CqeOpcode::Req);
        assert_eq!(c.send_opcode, Some(SendOpcode::RdmaWrite.as_u8()));
        assert_eq!(c.qpn, r.a.qpn);
    }
    assert_eq!(r.b.data.read(100, 100), inline);
    assert_eq!(r.b.data.read(5000, 3000), big);
    let want: Vec<u8> = parts.concat();
    assert_eq!(r.b.data.read(20000, want.len()), want);
    // Nothing was consumed at the responder: plain WRITEs take no receive WQE.
    assert!(r.b.poll_recv().is_empty());
    assert_eq!(r.dev.srq_info(r.b.srqn).unwrap().consumed, 0);
}

#[test]
fn registered_payload_is_split_inline_head_plus_sge() {
    // `Payload::registered` puts the first `inline_head` bytes inline and points one
    // data segment at the rest of the slice, which must be inside the region.
    let mut r = Rig::new(Opts::default());
    let msg = pattern(9, 1500);
    r.a.data.write(256, &msg);
    let base = r.a.data.ptr().wrapping_add(256);
    // SAFETY: the bytes are in `a.data` (registered); they are not modified until the
    // completion; the slice is only read.
    let view = unsafe { std::slice::from_raw_parts(base, 1500) };
    let remote = r.b.remote(0);
    let mut b = r.a.sq.batch();
    // SAFETY: `view` lies in the region registered under `lkey`.
    let p = b
        .rdma_write_imm(
            remote,
            unsafe { Payload::registered(view, r.a.keys.lkey) },
            *b"\x01\x02\x03\x04",
            SIG,
        )
        .unwrap();
    b.finish();
    r.b.srq.post_batch(1).unwrap();
    assert_eq!(p.ds, 1 + 1 + 13 + 1, "ctrl + raddr + 204 B inline + 1 SGE");
    let c = r.a_sends(1);
    assert_eq!(c[0].wqe_counter, p.wqe_index);
    let rc = r.b_recvs(1);
    assert_eq!(rc[0].opcode, CqeOpcode::RespWrImm);
    assert_eq!(rc[0].byte_cnt, 1500);
    assert_eq!(rc[0].imm, Some([1, 2, 3, 4]));
    assert_eq!(r.b.data.read(0, 1500), msg);
}

#[test]
fn write_imm_responder_cqe_fields() {
    let mut r = Rig::new(Opts::default());
    r.b.srq.post_batch(4).unwrap();
    let msg = pattern(7, 2500); // 3 packets at MTU 1024
    r.a.data.write(0, &msg);
    let sge = [r.a.sge(0, 2500)];
    let remote = r.b.remote(64);
    let mut b = r.a.sq.batch();
    // SAFETY: SGE inside `a.data`, untouched until completion.
    b.rdma_write_imm(
        remote,
        unsafe { Payload::gather(&sge) },
        [0xde, 0xad, 0xbe, 0xef],
        SIG | FmCeSe::SOLICITED,
    )
    .unwrap();
    b.rdma_write_imm(remote, Payload::EMPTY, [9, 9, 9, 9], SIG)
        .unwrap();
    b.finish();
    let rc = r.b_recvs(2);
    assert_eq!(rc[0].opcode, CqeOpcode::RespWrImm);
    assert_eq!(rc[0].imm, Some([0xde, 0xad, 0xbe, 0xef]));
    assert_eq!(rc[0].byte_cnt, 2500);
    assert_eq!(rc[0].qpn, r.b.qpn);
    assert_eq!(rc[0].remote_qpn, Some(r.a.qpn));
    assert_eq!(rc[0].srqn_uidx, r.b.srqn, "CQE v0: SRQN");
    assert!(rc[0].solicited);
    assert_eq!(rc[0].wqe_counter, 0, "first SRQ WQE of the free list");
    assert_eq!(rc[1].wqe_counter, 1);
    assert_eq!(rc[1].byte_cnt, 0, "zero-length WRITE_IMM");
    assert!(!rc[1].solicited);
    assert_eq!(r.b.data.read(64, 2500), msg);
    let sc = r.a_sends(2);
    assert_eq!(sc[0].send_opcode, Some(SendOpcode::RdmaWriteImm.as_u8()));
}

#[test]
fn read_into_scatter_list() {
    let mut r = Rig::new(Opts::default());
    let src = pattern(11, 5000);
    r.b.data.write(1000, &src);
    let remote = r.b.remote(1000);
    let local = [r.a.sge(0, 1000), r.a.sge(2000, 3000), r.a.sge(9000, 1000)];
    let mut b = r.a.sq.batch();
    // SAFETY: the scatter list lies in `a.data` (LOCAL_WRITE), which the test reads
    // only after the completion.
    let p = unsafe { b.rdma_read(remote, &local, SIG) }.unwrap();
    // A zero-length READ with a garbage rkey is not checked (C9-88).
    let garbage = mlx5_raw::Remote {
        addr: 0xdead_0000,
        rkey: 0x1234_5678,
    };
    // SAFETY: empty scatter list.
    let p0 = unsafe { b.rdma_read(garbage, &[], SIG) }.unwrap();
    b.finish();
    let c = r.a_sends(2);
    assert_eq!(c[0].opcode, CqeOpcode::Req);
    assert_eq!(c[0].send_opcode, Some(SendOpcode::RdmaRead.as_u8()));
    assert_eq!(c[0].byte_cnt, 5000);
    assert_eq!(c[0].wqe_counter, p.wqe_index);
    assert_eq!(c[1].wqe_counter, p0.wqe_index);
    assert_eq!(c[1].byte_cnt, 0);
    assert_eq!(
        (c[1].opcode, c[1].error),
        (CqeOpcode::Req, None),
        "no key checked"
    );
    assert_eq!(r.a.data.read(0, 1000), src[..1000]);
    assert_eq!(r.a.data.read(2000, 3000), src[1000..4000]);
    assert_eq!(r.a.data.read(9000, 1000), src[4000..]);
}

#[test]
fn send_and_send_imm_scatter_into_srq_wqe() {
    let mut r = Rig::new(Opts {
        srq_stride: 128, // 7 data segments per receive WQE
        ..Opts::default()
    });
    let s0 = [r.b.sge(0, 100), r.b.sge(4096, 5000)];
    let s1 = [r.b.sge(20000, 64)];
    let i0 = r.b.post_recv_sges(&s0);
    let i1 = r.b.post_recv_sges(&s1);
    let i2 = r.b.post_recv_sges(&[]);
    let msg = pattern(21, 3000);
    r.a.data.write(0, &msg);
    let gather = [r.a.sge(0, 1000), r.a.sge(1000, 2000)];
    let mut b = r.a.sq.batch();
    // SAFETY: gather entries in `a.data`, untouched until completion.
    b.send(unsafe { Payload::gather(&gather) }, SIG).unwrap();
    b.send_imm(
        Payload::inline(b"inline!"),
        [0, 0, 0, 42],
        SIG | FmCeSe::SOLICITED,
    )
    .unwrap();
    b.send(Payload::EMPTY, SIG).unwrap();
    b.finish();
    let rc = r.b_recvs(3);
    assert_eq!(rc[0].opcode, CqeOpcode::RespSend);
    assert_eq!(rc[0].wqe_counter, i0);
    assert_eq!(rc[0].byte_cnt, 3000);
    assert_eq!(rc[0].imm, None);
    assert_eq!(rc[1].opcode, CqeOpcode::RespSendImm);
    assert_eq!(rc[1].wqe_counter, i1);
    assert_eq!(rc[1].imm, Some([0, 0, 0, 42]));
    assert_eq!(rc[1].byte_cnt, 7);
    assert!(rc[1].solicited);
    assert!(
        !rc[0].solicited && !rc[2].solicited,
        "SE only where the WQE asked for it"
    );
    assert_eq!(rc[2].wqe_counter, i2);
    assert_eq!(rc[2].byte_cnt, 0);
    assert_eq!(r.b.data.read(0, 100), msg[..100]);
    assert_eq!(r.b.data.read(4096, 2900), msg[100..]);
    assert_eq!(r.b.data.read(20000, 7), b"inline!");
    let sc = r.a_sends(3);
    assert_eq!(
        sc.iter()
            .map(|c| c.send_opcode.unwrap())
            .collect::<Vec<_>>(),
        [0x0a, 0x0b, 0x0a]
    );
}

#[test]
fn multi_wqebb_wqes_across_the_sq_end() {
    // 16-WQEBB SQ; 4-WQEBB inline WRITEs (ctrl + raddr + 200 B inline = 15 DS) posted from
    // odd positions so that WQEs, and inline payload inside them, straddle the SQ end.
    let mut r = Rig::new(Opts {
        sq_wqe_cnt: 16,
        uar: true, // also exercise the BlueFlame / doorbell register writes
        ..Opts::default()
    });
    let mut crossed = 0;
    let mut seq = 0u64;
    for round in 0..40u64 {
        // A 1-WQEBB NOP shifts the alignment every round.
        let mut b = r.a.sq.batch();
        b.nop(UNSIG).unwrap();
        let mut expect = Vec::new();
        for k in 0..2u64 {
            let msg = pattern(100 + seq, 200);
            let off = (seq % 64) * 256;
            let p = b
                .rdma_write(
                    r.b.remote(off),
                    Payload::inline(&msg),
                    if k == 1 { SIG } else { UNSIG },
                )
                .unwrap();
            assert_eq!(p.bbs, 4);
            if (u32::from(p.wqe_index) % 16) + 4 > 16 {
                crossed += 1;
            }
            expect.push((off, msg));
            seq += 1;
        }
        b.finish();
        let c = r.a_sends(1);
        assert_eq!(c.len(), 1, "round {round}: one CQE covers the batch");
        assert_eq!(r.a.sq.retire_completion(&c[0]).unwrap(), 1 + 4 + 4);
        for (off, msg) in expect {
            assert_eq!(r.b.data.read(off as usize, 200), msg, "round {round}");
        }
    }
    assert!(crossed >= 10, "WQEs across the SQ end: {crossed}");
}

#[test]
fn more_than_65536_wqes_and_the_u16_counter_wrap() {
    // 70 000 one-WQEBB WRITEs; the driver signals every 64th; the u16 wqe_index and
    // [SND_DBR] wrap past 65 535.
    let mut r = Rig::new(Opts {
        sq_wqe_cnt: 256,
        cqe_cnt: 256,
        sq_cfg: SqConfig {
            signal_interval: 64,
            ..SqConfig::COPYRPC
        },
        ..Opts::default()
    });
    let total = 70_000u64;
    let mut posted = 0u64;
    let mut retired = 0u64;
    let mut steps = 0u64;
    while retired < total {
        steps += 1;
        assert!(steps < 200_000, "stuck at {retired} retired\n{}", r.dump());
        let mut b = r.a.sq.batch();
        while posted < total && b.free_bbs() > 0 {
            let v = posted.to_le_bytes();
            let off = (posted % 1024) * 8;
            // The last WQE is signaled so that a CQE covers the unsignaled tail.
            let flags = if posted + 1 == total { SIG } else { UNSIG };
            b.rdma_write(r.b.remote(off), Payload::inline(&v), flags)
                .unwrap();
            posted += 1;
        }
        b.finish();
        r.step();
        for c in r.a.poll_send() {
            assert_eq!(c.opcode, CqeOpcode::Req, "{c:?}");
            retired += u64::from(r.a.sq.retire_completion(&c).unwrap());
        }
    }
    assert_eq!(r.a.sq.producer_counter(), total);
    assert_eq!(r.a.sq.producer_index(), (total % 65536) as u16);
    for slot in 0..1024u64 {
        let last = (total - 1) - ((total - 1 - slot) % 1024);
        let got = u64::from_le_bytes(r.b.data.read(slot as usize * 8, 8).try_into().unwrap());
        assert_eq!(got, last, "slot {slot}");
    }
    let info = r.dev.qp_info(r.a.qpn).unwrap();
    assert_eq!(info.completed, (total % 65536) as u16);
}

#[test]
fn unsignaled_wqes_are_covered_by_the_next_signaled_cqe() {
    let mut r = Rig::new(Opts {
        sq_cfg: SqConfig {
            signal_interval: 1000,
            ..SqConfig::COPYRPC
        },
        ..Opts::default()
    });
    let mut b = r.a.sq.batch();
    for i in 0..10u64 {
        b.rdma_write(r.b.remote(i * 8), Payload::inline(&i.to_le_bytes()), UNSIG)
            .unwrap();
    }
    let last = b
        .rdma_write(r.b.remote(80), Payload::inline(b"12345678"), SIG)
        .unwrap();
    b.finish();
    r.steps(20);
    r.poll();
    assert_eq!(r.a_send.len(), 1, "exactly one CQE for 11 WQEs");
    let c = r.a_send.pop().unwrap();
    assert_eq!(c.wqe_counter, last.wqe_index);
    assert_eq!(r.a.sq.retire_completion(&c).unwrap(), 11);
    assert_eq!(r.a.sq.outstanding_bbs(), 0);
}

#[test]
fn cq_owner_bit_over_five_laps() {
    // An 8-entry CQ and 40 signaled WQEs: five laps; every CQE's owner bit must be its
    // lap parity, which the driver's poller checks and the decoded CQE reports.
    let mut r = Rig::new(Opts {
        cqe_cnt: 8,
        cqe_size: 128,
        ..Opts::default()
    });
    // A 128-byte CQE's first half (inline scatter, GRH) is written as zeros when the
    // CQE is: garbage there must not survive the device's write.
    for slot in 0..8 {
        r.a.scq_buf.write(slot * 128, &[0xff; 64]);
    }
    let (mut n, mut round) = (0u32, 0);
    while n < 40 {
        assert!(
            round < 1_000,
            "{n} of 40 CQEs in {round} rounds\n{}",
            r.dump()
        );
        round += 1;
        let mut b = r.a.sq.batch();
        for _ in 0..3 {
            b.nop(SIG).unwrap();
        }
        b.finish();
        r.steps(2);
        while let Some(c) = r.a.scq.poll() {
            let idx = c.index();
            let d = c.decode().unwrap();
            assert_eq!(idx, n);
            assert_eq!(d.owner, (n / 8) % 2 == 1, "CQE {n}");
            assert_eq!(d.send_opcode, Some(0));
            n += 1;
        }
        r.a.scq.update_ci();
    }
    assert!(r.a.scq.consumer_index() >= 40);
    // The first half of each 128-byte CQE is zero (no inline scatter), garbage before.
    for slot in 0..8 {
        assert!(
            r.a.scq_buf.read(slot * 128, 64).iter().all(|&b| b == 0),
            "slot {slot}'s first half"
        );
    }
}

#[test]
fn srq_consumption_follows_the_free_list_and_reposts() {
    // 8-WQE SRQ (7 postable): 60 WRITE_IMMs; the responder frees each consumed WQE in
    // completion order and reposts it; the device must consume exactly the list order.
    let mut r = Rig::new(Opts {
        srq_wqe_cnt: 8,
        ..Opts::default()
    });
    let mut expect = std::collections::VecDeque::new();
    for _ in 0..7 {
        expect.push_back(r.b.srq.post().unwrap());
    }
    r.b.srq.ring_doorbell();
    let mut got = 0;
    let (mut sent, mut step) = (0u32, 0);
    while got < 60 {
        assert!(
            step < 10_000,
            "{got} of 60 received in {step} steps\n{}",
            r.dump()
        );
        step += 1;
        if sent < 60 && r.a.sq.free_bbs() > 8 {
            let mut b = r.a.sq.batch();
            b.rdma_write_imm(
                r.b.remote(u64::from(sent) * 4),
                Payload::inline(&sent.to_be_bytes()),
                sent.to_be_bytes(),
                SIG,
            )
            .unwrap();
            b.finish();
            sent += 1;
        }
        r.step();
        for c in r.a.poll_send() {
            r.a.sq.retire_completion(&c).unwrap();
        }
        for c in r.b.poll_recv() {
            assert_eq!(c.opcode, CqeOpcode::RespWrImm);
            assert_eq!(c.imm, Some((got as u32).to_be_bytes()));
            assert_eq!(Some(c.wqe_counter), expect.pop_front(), "message {got}");
            r.b.srq.free(c.wqe_counter).unwrap();
            expect.push_back(r.b.srq.post().unwrap());
            r.b.srq.ring_doorbell();
            got += 1;
        }
    }
    let info = r.dev.srq_info(r.b.srqn).unwrap();
    assert_eq!(info.consumed, 60);
    assert_eq!(info.available, 7);
}

#[test]
fn multi_packet_messages_at_small_mtu() {
    let mut r = Rig::new(Opts {
        mtu: 256,
        link_slots: 4,
        srq_stride: 64,
        ..Opts::default()
    });
    let msg = pattern(33, 10_000);
    r.a.data.write(0, &msg);
    // Consumed in list order: first by the WRITE_IMM (scatters nothing), then the SEND.
    r.b.srq.post_batch(1).unwrap();
    let rsge = [r.b.sge(30_000, 10_000)];
    r.b.post_recv_sges(&rsge);
    r.a.data.write(40_000, &pattern(34, 7777));
    let g = [r.a.sge(0, 10_000)];
    let rd = [r.a.sge(20_000, 7777)];
    let mut b = r.a.sq.batch();
    // SAFETY: SGEs in `a.data`; the READ target range [20000, 27777) is not read by the
    // test until completion.
    unsafe {
        b.rdma_write_imm(r.b.remote(0), Payload::gather(&g), [1; 4], SIG)
            .unwrap();
        b.send(Payload::gather(&g), SIG).unwrap();
        b.rdma_read(r.b.remote(0), &rd, SIG).unwrap();
    }
    b.finish();
    let c = r.a_sends(3);
    assert!(c.iter().all(|c| c.error.is_none()), "{c:?}");
    assert_eq!(r.b.data.read(0, 10_000), msg);
    assert_eq!(r.b.data.read(30_000, 10_000), msg);
    assert_eq!(r.a.data.read(20_000, 7777), msg[..7777]);
    let rc = r.b_recvs(2);
    assert_eq!(rc[0].opcode, CqeOpcode::RespWrImm);
    assert_eq!(rc[1].opcode, CqeOpcode::RespSend);
    assert_eq!(rc[1].byte_cnt, 10_000);
}

#[test]
fn latency_and_bandwidth_in_virtual_time() {
    // 10 µs one way, 1 GB/s: a 64 KiB WRITE (64 packets of 1 KiB + 64 B headers) cannot
    // complete before serialisation + two latencies; time is the step counter, so this
    // is exact, not timed.
    let tick = 100;
    let mut r = Rig::new(Opts {
        link: LinkConfig {
            latency_ns: 10_000,
            bandwidth_bytes_per_s: 1_000_000_000,
            packet_ns: 0,
            ack_ns: 0,
        },
        link_slots: 128,
        tick,
        ..Opts::default()
    });
    let len = 64 * 1024u32;
    let g = [r.a.sge(0, len)];
    let mut b = r.a.sq.batch();
    // SAFETY: SGE in `a.data`, untouched until completion.
    b.rdma_write(r.b.remote(0), unsafe { Payload::gather(&g) }, SIG)
        .unwrap();
    b.finish();
    let start = r.now;
    let _ = r.a_sends(1);
    let elapsed = r.now - start;
    let wire = u64::from(len) + 64 * 64; // payload + headers, ns at 1 B/ns
    let min = wire + 2 * 10_000;
    assert!(elapsed >= min, "completed after {elapsed} ns < {min} ns");
    assert!(
        elapsed <= min + 64 * 2 * 64 + 1000,
        "too slow: {elapsed} ns"
    );
}

#[test]
fn per_packet_time_serialises_a_qps_packets() {
    // 20 one-packet WRITEs posted at once on one QP, 1 µs per packet, no bandwidth limit
    // and 1 µs one way: the last leaves 19 packet times after the first (the spacing is
    // a rate, so the first leaves at once), and cannot complete before those plus the
    // round trip, which a QP without `packet_ns` would beat by 19 µs.
    let tick = 100;
    let run = |packet_ns: u64| {
        let mut r = Rig::new(Opts {
            link: LinkConfig {
                latency_ns: 1_000,
                bandwidth_bytes_per_s: 0,
                packet_ns,
                ack_ns: 0,
            },
            link_slots: 128,
            tick,
            ..Opts::default()
        });
        let g = [r.a.sge(0, 64)];
        let mut b = r.a.sq.batch();
        for _ in 0..20 {
            // SAFETY: SGE in `a.data`, untouched until completion.
            b.rdma_write(r.b.remote(0), unsafe { Payload::gather(&g) }, SIG)
                .unwrap();
        }
        b.finish();
        let start = r.now;
        let c = r.a_sends(20);
        assert!(c.iter().all(|c| c.error.is_none()), "{c:?}");
        r.now - start
    };
    let (free, held) = (run(0), run(1_000));
    assert!(held >= 19 * 1_000 + 2 * 1_000, "completed after {held} ns");
    assert!(
        held >= free + 19 * 1_000,
        "{held} ns against {free} ns without"
    );
    // One packet on an idle QP: the spacing adds nothing to its round trip.
    assert!(free < 2 * 1_000 + 4 * tick, "an idle QP took {free} ns");
}

#[test]
fn acks_have_their_own_spacing_apart_from_the_data_packets() {
    // QPs that send a data packet per 5 µs, 1 µs one way. a writes to b; b's responder
    // acknowledges on the b -> a direction; b then writes back to a on the same QP, and
    // a acknowledges that while its own data spacing still runs. A ConnectX builds ACKs
    // in its receive pipeline, so neither waits: b's write is complete in a round trip.
    // Were ACKs spaced like data on the data's own spacing, b's write would queue 5 µs
    // behind its ACK and a's ACK behind a's write: what made every answer of the old
    // model wait a packet time.
    let tick = 100;
    let rig = |packet_ns: u64, ack_ns: u64| {
        Rig::new(Opts {
            link: LinkConfig {
                latency_ns: 1_000,
                bandwidth_bytes_per_s: 0,
                packet_ns,
                ack_ns,
            },
            tick,
            ..Opts::default()
        })
    };
    let write = |r: &mut Rig, from_a: bool| {
        let (side, to) = if from_a {
            (&mut r.a, r.b.remote(0))
        } else {
            (&mut r.b, r.a.remote(0))
        };
        let g = [side.sge(0, 64)];
        let mut b = side.sq.batch();
        // SAFETY: SGE in the side's data region, untouched until completion.
        b.rdma_write(to, unsafe { Payload::gather(&g) }, SIG)
            .unwrap();
        b.finish();
    };
    let mut r = rig(5_000, 0);
    write(&mut r, true);
    let c = r.a_sends(1);
    assert!(c[0].error.is_none(), "{c:?}");
    write(&mut r, false);
    let start = r.now;
    r.run_until("b's send completion", 100_000, |r| !r.b_send.is_empty());
    assert!(r.b_send[0].error.is_none(), "{:?}", r.b_send);
    let took = r.now - start;
    assert!(took < 2 * 1_000 + 5 * tick, "b's write took {took} ns");

    // ack_ns spaces the ACKs: two writes a step apart are acknowledged each on its own
    // (they do not meet in b's response queue), so their completions are ack_ns apart.
    let spaced = |ack_ns: u64| {
        let mut r = rig(0, ack_ns);
        write(&mut r, true);
        r.step();
        write(&mut r, true);
        r.run_until("a's first completion", 100_000, |r| !r.a_send.is_empty());
        let one = r.now;
        r.run_until("a's second completion", 100_000, |r| r.a_send.len() >= 2);
        assert!(r.a_send.iter().all(|c| c.error.is_none()), "{:?}", r.a_send);
        (one, r.now)
    };
    let (one0, two0) = spaced(0);
    let (one5, two5) = spaced(5_000);
    assert!(two0 - one0 <= 2 * tick, "free ACKs: {one0} then {two0}");
    assert!(two5 - one5 >= 4_000, "spaced ACKs: {one5} then {two5}");
}

#[test]
fn the_nic_wide_packet_limit_spaces_every_qp_of_a_device() {
    // a and b are two QPs of one device, each posting 10 one-packet WRITEs at once; no
    // per-QP spacing, 1 µs one way. A NIC-wide limit of one packet per µs sends the 20
    // packets (and the ACKs) one after another: the last cannot be complete before 19
    // µs plus its round trip; without it both QPs finish in about a round trip.
    let tick = 100;
    let run = |nic_packet_ns: u64| {
        let mut r = Rig::new(Opts {
            link: LinkConfig {
                latency_ns: 1_000,
                ..LinkConfig::default()
            },
            dev: DeviceConfig {
                nic_packet_ns,
                ..DeviceConfig::DEFAULT
            },
            link_slots: 64,
            tick,
            ..Opts::default()
        });
        let (ga, gb) = ([r.a.sge(0, 64)], [r.b.sge(0, 64)]);
        let (to_a, to_b) = (r.a.remote(0), r.b.remote(0));
        for (sq, g, to) in [(&mut r.a.sq, &ga, to_b), (&mut r.b.sq, &gb, to_a)] {
            let mut b = sq.batch();
            for _ in 0..10 {
                // SAFETY: SGEs in the sides' data regions, untouched until completion.
                b.rdma_write(to, unsafe { Payload::gather(g) }, SIG)
                    .unwrap();
            }
            b.finish();
        }
        let start = r.now;
        r.run_until("both sides' send completions", 100_000, |r| {
            r.a_send.len() >= 10 && r.b_send.len() >= 10
        });
        assert!(
            r.a_send.iter().chain(&r.b_send).all(|c| c.error.is_none()),
            "{:?} {:?}",
            r.a_send,
            r.b_send
        );
        r.now - start
    };
    let (free, paced) = (run(0), run(1_000));
    assert!(free < 2 * 1_000 + 5 * tick, "unpaced: {free} ns");
    assert!(paced >= 19 * 1_000 + 2 * 1_000, "paced: {paced} ns");
}

/// TV3 of docs/spec/mlx5.md#test-vectors and a requester CQE, byte for byte, from two
/// devices (like two processes) connected by links: QPN 0 writes 4096 bytes with immediate
/// de ad be ef and SE to QPN 0xabcdf on SRQ 0x77, consuming SRQ WQE 5, on the CQ's second
/// lap.
#[test]
fn tv3_responder_cqe_bytes() {
    type D = Device<2, 2, 1, 2>;
    let mut a = Box::new(D::new(DeviceConfig {
        qpn_base: 0,
        ..DeviceConfig::DEFAULT
    }));
    let mut b = Box::new(D::new(DeviceConfig {
        qpn_base: 0xabcdf,
        srqn_base: 0x77,
        ..DeviceConfig::DEFAULT
    }));
    let mem: Vec<DmaBuf> = (0..12).map(|_| DmaBuf::new(1 << 16)).collect();
    let lb = link_bytes(8, 4096);
    let links = DmaBuf::new(2 * lb);
    let (ab, ba) = (
        LinkDesc {
            base: links.ptr(),
            len: lb,
        },
        LinkDesc {
            base: links.ptr().wrapping_add(lb),
            len: lb,
        },
    );
    // SAFETY: all memory outlives both devices and driver objects (declared before them
    // and dropped after: `mem`/`links` outlive the block's locals).
    let (akeys, mut sq, mut a_cq, mut b_cq, mut srq, bkeys) = unsafe {
        format_link(&ab, 8, 4096).unwrap();
        format_link(&ba, 8, 4096).unwrap();
        let pa = a.alloc_pd();
        let pb = b.alloc_pd();
        let ak = a.reg_mr(pa, mem[0].ptr(), 1 << 16, Access::ALL).unwrap();
        let bk = b.reg_mr(pb, mem[1].ptr(), 1 << 16, Access::ALL).unwrap();
        let cqm = |i: usize| CqMem {
            buf: mem[i].ptr(),
            cqe_cnt: 4,
            cqe_size: 64,
            dbrec: mem[i + 1].ptr32(),
        };
        let acq = a.create_cq(cqm(2)).unwrap();
        let bcq = b.create_cq(cqm(4)).unwrap();
        let bsrq = b
            .create_srq(
                pb,
                SrqMem {
                    buf: mem[6].ptr(),
                    wqe_cnt: 8,
                    stride: 32,
                    dbrec: mem[7].ptr32(),
                },
            )
            .unwrap();
        assert_eq!(bsrq.srqn, 0x77);
        let asq = a
            .create_qp(
                pa,
                QpAttr::new(acq.cqn, acq.cqn, None),
                SqMem {
                    buf: mem[8].ptr(),
                    wqe_cnt: 64,
                    dbrec: mem[9].ptr32(),
                    uar: std::ptr::null_mut(),
                },
            )
            .unwrap();
        let bsq = b
            .create_qp(
                pb,
                QpAttr::new(bcq.cqn, bcq.cqn, Some(bsrq.srqn)),
                SqMem {
                    buf: mem[10].ptr(),
                    wqe_cnt: 64,
                    dbrec: mem[11].ptr32(),
                    uar: std::ptr::null_mut(),
                },
            )
            .unwrap();
        assert_eq!((asq.qpn, bsq.qpn), (0, 0xabcdf));
        a.connect(
            0,
            Peer {
                remote_qpn: 0xabcdf,
                tx: ab,
                rx: ba,
                link: LinkConfig::default(),
            },
        )
        .unwrap();
        b.connect(
            0xabcdf,
            Peer {
                remote_qpn: 0,
                tx: ba,
                rx: ab,
                link: LinkConfig::default(),
            },
        )
        .unwrap();
        (
            ak,
            mlx5_raw::Sq::new(&asq, SqConfig::COPYRPC).unwrap(),
            Cq::new(&acq).unwrap(),
            Cq::new(&bcq).unwrap(),
            Srq::new(&bsrq, bk.lkey).unwrap(),
            bk,
        )
    };
    srq.post_batch(7).unwrap();
    let g = [mlx5_raw::Sge {
        addr: akeys.va,
        len: 4096,
        lkey: akeys.lkey,
    }];
    let mut responder_bytes = Vec::new();
    let mut requester_bytes = Vec::new();
    for i in 0..6u32 {
        let mut bt = sq.batch();
        let (imm, se, len) = if i == 5 {
            ([0xde, 0xad, 0xbe, 0xef], FmCeSe::SOLICITED, 4096)
        } else {
            ([0; 4], FmCeSe::default(), 0)
        };
        let payload = if len == 0 {
            Payload::EMPTY
        } else {
            // SAFETY: SGE inside a's registered region, untouched until completion.
            unsafe { Payload::gather(&g) }
        };
        bt.rdma_write_imm(
            mlx5_raw::Remote {
                addr: bkeys.va,
                rkey: bkeys.rkey,
            },
            payload,
            imm,
            SIG | se,
        )
        .unwrap();
        bt.finish();
        for _ in 0..3 {
            // now = 0 throughout: the CQE timestamps are 0, as in the vector.
            a.step(0);
            b.step(0);
        }
        let c = b_cq.poll().expect("responder CQE");
        if i == 5 {
            responder_bytes = c.bytes().to_vec();
        }
        b_cq.update_ci();
        let c = a_cq.poll().expect("requester CQE");
        if i == 5 {
            requester_bytes = c.bytes().to_vec();
        }
        a_cq.update_ci();
    }
    assert_eq!(
        responder_bytes,
        hex(
            "00000000000000000000000000000000 00000000000000000000000000000000
             00 00 00 77 de ad be ef 00 00 00 00 00 00 10 00
             00 00 00 00 00 00 00 00 00 0a bc df 00 05 00 13"
        )
    );
    // REQ CQE: sop_drop_qpn = 0x09 << 24 | 0, wqe_counter 5, owner 1, opcode 0.
    let mut want = vec![0u8; 64];
    want[56] = 0x09;
    want[61] = 5;
    want[63] = 0x01;
    assert_eq!(requester_bytes, want);
}

/// What a step reports as sent, received and completed: a one-packet WRITE is two
/// packets each counted once (the WRITE, and the responder's ACK), and one CQE.
#[test]
fn a_step_counts_the_packets_it_sends_and_receives() {
    let mut r = Rig::new(Opts::default());
    let mut b = r.a.sq.batch();
    b.rdma_write(r.b.remote(0), Payload::inline(b"counted"), SIG)
        .unwrap();
    b.finish();
    let (mut sent, mut received, mut cqes) = (0, 0, 0);
    for _ in 0..1_000 {
        let s = r.dev.step(r.now);
        r.now += r.tick;
        sent += s.packets_sent;
        received += s.packets_received;
        cqes += s.cqes;
        r.poll();
        if !r.a_send.is_empty() {
            break;
        }
    }
    assert_eq!(r.a_send.len(), 1, "the WRITE completed\n{}", r.dump());
    assert_eq!((sent, received), (2, 2), "the WRITE and its ACK");
    assert_eq!(cqes, 1, "the WRITE's CQE");
    assert_eq!(r.b.data.read(0, 7), b"counted");
}

/// The responder sends at most the configured budget of packets a step: a READ of
/// eight packets goes out over several steps, not in one burst as far as the link has
/// room (the requester sends in the same step at most its own budget).
#[test]
fn a_read_response_is_paced_by_the_step_budget() {
    let budget = 2;
    let mut r = Rig::new(Opts::default().paced(budget));
    let src = pattern(31, 8 * 256);
    r.b.data.write(0, &src);
    let local = [r.a.sge(0, 8 * 256)];
    let mut b = r.a.sq.batch();
    // SAFETY: the scatter entry lies in `a.data`, read only after the completion.
    unsafe { b.rdma_read(r.b.remote(0), &local, SIG) }.unwrap();
    b.finish();
    let mut most = 0;
    for _ in 0..1_000 {
        let s = r.dev.step(r.now);
        r.now += r.tick;
        most = most.max(s.packets_sent);
        r.poll();
        if !r.a_send.is_empty() {
            break;
        }
    }
    assert_eq!(r.a_send.len(), 1, "the READ completed\n{}", r.dump());
    assert_eq!(r.a_send[0].byte_cnt, 8 * 256);
    assert_eq!(r.a.data.read(0, 8 * 256), src);
    assert!(most <= 2 * budget, "{most} packets in one step");
}

/// Every packet of an exchange names the QP that sent it and the one it goes to: the
/// WRITE goes from a to b, the ACK from b to a (the trace is what a user reads when a
/// run goes wrong).
#[test]
fn every_traced_packet_names_its_sending_and_receiving_qp() {
    let mut r = Rig::new(Opts::default());
    r.trace.clear();
    let mut b = r.a.sq.batch();
    b.rdma_write(r.b.remote(0), Payload::inline(b"traced"), SIG)
        .unwrap();
    b.finish();
    r.a_sends(1);
    let packets: Vec<(u32, u32, PacketDir)> = r
        .trace
        .iter()
        .filter_map(|e| match e.kind {
            TraceKind::Packet {
                dir,
                src_qpn,
                dst_qpn,
                ..
            } => Some((src_qpn, dst_qpn, dir)),
            _ => None,
        })
        .collect();
    let (a, b) = (r.a.qpn, r.b.qpn);
    assert_eq!(
        packets,
        [
            (a, b, PacketDir::Sent),
            (a, b, PacketDir::Received),
            (b, a, PacketDir::Sent),
            (b, a, PacketDir::Received),
        ],
        "{}",
        r.dump()
    );
}

/// A READ's response packets are marked as IB's READ_RESPONSE_FIRST / MIDDLE / LAST:
/// the first packet "first", the last "last", the one between neither (as the trace
/// prints them).
#[test]
fn a_reads_response_packets_mark_its_first_and_last() {
    let mut r = Rig::new(Opts {
        mtu: 256,
        ..Opts::default()
    });
    r.b.data.write(0, &pattern(41, 3 * 256));
    let local = [r.a.sge(0, 3 * 256)];
    r.trace.clear();
    let mut b = r.a.sq.batch();
    // SAFETY: the scatter entry lies in `a.data`, read only after the completion.
    unsafe { b.rdma_read(r.b.remote(0), &local, SIG) }.unwrap();
    b.finish();
    assert_eq!(r.a_sends(1)[0].byte_cnt, 3 * 256);
    let marks: Vec<(bool, bool)> = r
        .sent_by(r.b.qpn)
        .iter()
        .map(|(_, line)| (line.contains(" first"), line.contains(" last")))
        .collect();
    assert_eq!(
        marks,
        [(true, false), (false, false), (false, true)],
        "{}",
        r.dump()
    );
}
