#![allow(unsafe_code)]

use mlx5_raw::{Remote, Sge};

use super::*;
use crate::ops::{OpError, WrId};

#[test]
fn desc_request_and_reply_golden_bytes() {
    let d = Desc {
        addr: 0x1122_3344_5566_7788,
        len: 0x0000_0000_0010_0000,
        rkey: 0xaabb_ccdd,
    };
    let golden_desc: [u8; DESC_SIZE] = [
        0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, // addr
        0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, // len
        0xdd, 0xcc, 0xbb, 0xaa, 0, 0, 0, 0, // rkey, reserved
    ];
    assert_eq!(d.to_bytes(), golden_desc);
    assert_eq!(Desc::from_bytes(&golden_desc), Some(d));

    let r = Request {
        pattern: Pattern::Put,
        tag: 0x0102_0304,
        put: d,
        get: Desc::default(),
    };
    let mut b = [0xffu8; REQUEST_SIZE + 3];
    r.emit(&mut b);
    let mut golden = [0u8; REQUEST_SIZE];
    golden[0] = 1;
    golden[4..8].copy_from_slice(&[4, 3, 2, 1]);
    golden[8..32].copy_from_slice(&golden_desc);
    assert_eq!(b[..REQUEST_SIZE], golden);
    let (back, extra) = Request::parse(&b).unwrap();
    assert_eq!((back, extra), (r, &[0xff; 3][..]));

    let rep = Reply {
        status: Status::TransferFailed,
        tag: 9,
        bytes: 1 << 20,
    };
    let mut b = [0u8; REPLY_SIZE];
    rep.emit(&mut b);
    assert_eq!(b, [1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0]);
    assert_eq!(Reply::parse(&b).unwrap().0, rep);
}

#[test]
fn malformed_requests_do_not_parse() {
    let mut b = [0u8; REQUEST_SIZE];
    Request {
        pattern: Pattern::HeaderOnly,
        tag: 1,
        put: Desc::default(),
        get: Desc::default(),
    }
    .emit(&mut b);
    assert!(Request::parse(&b).is_some());
    assert!(Request::parse(&b[..REQUEST_SIZE - 1]).is_none(), "short");
    let mut x = b;
    x[0] = 4;
    assert!(Request::parse(&x).is_none(), "unknown pattern");
    let mut x = b;
    x[2] = 1;
    assert!(Request::parse(&x).is_none(), "reserved byte");
    let mut x = b;
    x[8] = 1;
    assert!(
        Request::parse(&x).is_none(),
        "a put descriptor on a header-only request"
    );
    let mut x = b;
    x[0] = 1;
    x[28] = 1;
    assert!(Request::parse(&x).is_none(), "descriptor reserved word");
}

fn regions() -> Regions<2> {
    let mut r = Regions::new();
    r.add(RegisteredRange {
        va: 0x1000,
        len: 0x1000,
        lkey: 11,
        rkey: 12,
    })
    .unwrap();
    r
}

#[test]
fn bad_buffers_are_typed_errors() {
    let r = regions();
    assert_eq!(r.describe(12, 0x1000, 0x1000).unwrap().len, 0x1000);
    assert_eq!(r.describe(12, 0x1800, 0x801), Err(BulkError::BeyondRegion));
    assert_eq!(r.describe(12, 0x0fff, 2), Err(BulkError::BeyondRegion));
    assert_eq!(r.describe(12, u64::MAX, 2), Err(BulkError::BeyondRegion));
    assert_eq!(r.describe(99, 0x1000, 1), Err(BulkError::UnknownKey));
    assert_eq!(r.describe(12, 0x1000, 0), Err(BulkError::ZeroLength));
    assert_eq!(
        r.local(12, 0x1000, 1),
        Err(BulkError::UnknownKey),
        "an rkey is not an lkey"
    );
    assert!(r.local(11, 0x1000, 1).is_ok());
}

/// A loopback "device": copies at post time and completes in a caller-chosen order.
#[derive(Default)]
struct Loop {
    posted: Vec<(Dir, WrId, Remote, Sge)>,
    refuse: Option<PostRefused>,
}

impl OneSided for Loop {
    unsafe fn post(
        &mut self,
        dir: Dir,
        wr: WrId,
        remote: Remote,
        local: Sge,
    ) -> Result<(), PostRefused> {
        if let Some(r) = self.refuse {
            return Err(r);
        }
        self.posted.push((dir, wr, remote, local));
        Ok(())
    }
}

fn local(len: u64) -> Local {
    Local {
        addr: 0x1000,
        len,
        lkey: 11,
    }
}

fn remote(len: u64) -> Desc {
    Desc {
        addr: 0x9000,
        len,
        rkey: 7,
    }
}

#[test]
fn bad_transfers_are_refused_and_nothing_is_posted() {
    let mut m = Mover::<4, 4>::new(1024);
    let mut l = Loop::default();
    // SAFETY: the loopback link touches no memory.
    unsafe {
        assert_eq!(
            m.start(Dir::Read, local(0), remote(0), 1),
            Err(BulkError::ZeroLength)
        );
        assert_eq!(
            m.start(Dir::Read, local(10), remote(11), 1),
            Err(BulkError::LengthMismatch)
        );
        assert_eq!(
            m.start(Dir::Read, local(10), remote(10), 5),
            Err(BulkError::TooDeep),
            "more in flight than slots"
        );
        assert_eq!(
            m.start(Dir::Read, local(10), remote(10), 0),
            Err(BulkError::TooDeep)
        );
    }
    assert_eq!(m.pump(&mut l), 0);
    assert!(l.posted.is_empty());
    assert!(m.idle());
    assert_eq!(m.ops().live_count(), 0);
}

#[test]
fn a_transfer_is_split_pipelined_within_its_depth_and_completes_out_of_order() {
    let mut m = Mover::<4, 8>::new(1000);
    let mut l = Loop::default();
    assert!(m.idle());
    // SAFETY: the loopback link touches no memory.
    let op = unsafe { m.start(Dir::Write, local(4500), remote(4500), 3) }.unwrap();
    assert!(!m.idle(), "a transfer started, nothing posted yet");
    assert_eq!(m.pump(&mut l), 3, "depth 3");
    assert_eq!(m.pump(&mut l), 0);
    let offs: Vec<u64> = l.posted.iter().map(|p| p.2.addr - 0x9000).collect();
    assert_eq!(offs, [0, 1000, 2000]);
    assert!(l
        .posted
        .iter()
        .all(|p| p.3.addr - 0x1000 == p.2.addr - 0x9000));
    // Complete the second first: one more may go.
    m.complete(l.posted[1].1, true);
    assert_eq!(m.pump(&mut l), 1);
    for i in [0, 2, 3] {
        m.complete(l.posted[i].1, true);
    }
    assert_eq!(m.pump(&mut l), 1);
    let last = l.posted[4];
    assert_eq!((last.2.addr - 0x9000, last.3.len), (4000, 500));
    assert!(!m.ops().is_done(op));
    m.complete(last.1, true);
    assert_eq!(m.ops().result(op), Some(Ok(4500)));
    // A duplicate completion is stale and changes nothing.
    m.complete(last.1, false);
    assert_eq!(m.stats().stale, 1);
    assert!(m.idle());
    assert_eq!(m.free_slots(), 8);
}

#[test]
fn a_failure_ends_the_op_once_and_every_slot_comes_back() {
    let mut m = Mover::<4, 4>::new(100);
    let mut l = Loop::default();
    // SAFETY: the loopback link touches no memory.
    let a = unsafe { m.start(Dir::Read, local(1000), remote(1000), 4) }.unwrap();
    // SAFETY: as above.
    let b = unsafe { m.start(Dir::Read, local(50), remote(50), 1) }.unwrap();
    assert_eq!(m.pump(&mut l), 4, "a's depth takes every slot");
    m.complete(l.posted[0].1, false);
    assert_eq!(
        m.ops().poll(a),
        core::task::Poll::Ready(Err(OpError::Failed))
    );
    // Flushes of the rest: the op stays failed once, the slots drain back.
    for i in 1..4 {
        m.complete(l.posted[i].1, false);
    }
    assert_eq!(m.free_slots(), 4);
    assert_eq!(m.pump(&mut l), 1, "only b posts; a stopped");
    m.complete(l.posted[4].1, true);
    assert_eq!(m.ops().result(b), Some(Ok(50)));
    assert_eq!(m.ops().result(a), Some(Err(OpError::Failed)));
    assert!(m.idle());
}

#[test]
fn a_dead_link_fails_the_transfer_without_leaking_its_slot() {
    let mut m = Mover::<2, 2>::new(100);
    let mut l = Loop {
        refuse: Some(PostRefused::Dead),
        ..Loop::default()
    };
    // SAFETY: the loopback link touches no memory.
    let a = unsafe { m.start(Dir::Write, local(300), remote(300), 2) }.unwrap();
    assert_eq!(m.pump(&mut l), 0);
    assert_eq!(m.ops().result(a), Some(Err(OpError::Failed)));
    assert!(m.idle());
    assert_eq!(m.free_slots(), 2);
}

#[test]
fn cancel_all_stops_posting_and_slots_wait_for_their_completions() {
    let mut m = Mover::<4, 4>::new(100);
    let mut l = Loop::default();
    // SAFETY: the loopback link touches no memory.
    let a = unsafe { m.start(Dir::Read, local(1000), remote(1000), 2) }.unwrap();
    // SAFETY: as above.
    let b = unsafe { m.start(Dir::Read, local(100), remote(100), 1) }.unwrap();
    assert_eq!(m.pump(&mut l), 3);
    m.complete(l.posted[2].1, true);
    assert_eq!(
        m.ops().result(b),
        Some(Ok(100)),
        "b ended before the cancel"
    );
    assert_eq!(m.cancel_all(), 1);
    assert_eq!(m.cancel_all(), 0);
    assert_eq!(m.pump(&mut l), 0);
    assert_eq!(m.free_slots(), 2, "a's two operations still hold slots");
    m.complete(l.posted[0].1, true);
    m.complete(l.posted[1].1, false);
    assert_eq!(m.ops().result(a), Some(Err(OpError::Cancelled)));
    assert!(m.idle());
}

#[test]
fn every_reply_status_round_trips_and_an_unknown_one_does_not_parse() {
    for status in [
        Status::Ok,
        Status::TransferFailed,
        Status::BadRequest,
        Status::Busy,
    ] {
        let rep = Reply {
            status,
            tag: 3,
            bytes: 77,
        };
        let mut b = [0u8; REPLY_SIZE];
        rep.emit(&mut b);
        assert_eq!(Reply::parse(&b).map(|(r, _)| r), Some(rep), "{status:?}");
    }
    let mut b = [0u8; REPLY_SIZE];
    b[0] = 4;
    assert!(Reply::parse(&b).is_none(), "status 4");
}

#[test]
fn a_removed_region_describes_nothing_and_leaves_the_others() {
    let mut r = regions();
    r.add(RegisteredRange {
        va: 0x4000,
        len: 0x100,
        lkey: 21,
        rkey: 22,
    })
    .unwrap();
    r.remove(11);
    assert_eq!(r.describe(12, 0x1000, 16), Err(BulkError::UnknownKey));
    assert_eq!(r.local(11, 0x1000, 16), Err(BulkError::UnknownKey));
    assert!(
        r.describe(22, 0x4000, 16).is_ok(),
        "another region went too"
    );
    // Its entry is free again.
    r.add(RegisteredRange {
        va: 0x8000,
        len: 0x100,
        lkey: 31,
        rkey: 32,
    })
    .unwrap();
}
