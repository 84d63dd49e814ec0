//! SRQ posting on plain heap buffers, checked against a model of how the HCA consumes
//! an SRQ (docs/spec/mlx5.md#srq): follow `next_wqe_index` at consume time, up to the doorbell
//! counter.

mod common;

use common::DmaBuf;
use mlx5_raw::layout::{DataSeg, INVALID_LKEY};
use mlx5_raw::{Srq, SrqDesc, SrqFreeError, SrqInitError, SrqPostError};
use zerocopy::FromBytes;

struct SrqMem {
    buf: DmaBuf,
    dbrec: DmaBuf,
    stride: u32,
    cnt: u32,
}

impl SrqMem {
    fn new(cnt: u32, stride: u32) -> Self {
        Self {
            buf: DmaBuf::new((cnt * stride) as usize),
            dbrec: DmaBuf::new(8),
            stride,
            cnt,
        }
    }

    fn desc(&self) -> SrqDesc {
        SrqDesc {
            buf: self.buf.ptr(),
            stride: self.stride,
            wqe_cnt: self.cnt,
            dbrec: self.dbrec.ptr32(),
            head: 0,
            tail: self.cnt - 1,
            srqn: 0x31,
        }
    }

    fn srq(&self, lkey: u32) -> Srq {
        // SAFETY: the buffers outlive the `Srq` (declared first in each test); the test
        // only reads them between calls.
        unsafe { Srq::new(&self.desc(), lkey) }.unwrap()
    }

    fn next(&self, i: u16) -> u16 {
        let b = self.buf.read(i as usize * self.stride as usize + 2, 2);
        u16::from_be_bytes([b[0], b[1]])
    }

    fn data(&self, i: u16, k: usize) -> DataSeg {
        DataSeg::read_from_bytes(
            &self
                .buf
                .read(i as usize * self.stride as usize + 16 + 16 * k, 16),
        )
        .unwrap()
    }

    fn dbr(&self) -> u32 {
        self.dbrec.be32(0)
    }
}

/// The tests' pseudo-random sequence (xorshift32): steps `x`.
fn xorshift(x: &mut u32) {
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
}

/// The device side: consumes posted WQEs by following the links.
struct HwSrq {
    head: u16,
    count: u16,
}

impl HwSrq {
    fn take(&mut self, mem: &SrqMem) -> Option<u16> {
        let available = (mem.dbr() as u16).wrapping_sub(self.count);
        if available == 0 {
            return None;
        }
        let idx = self.head;
        self.head = mem.next(idx);
        self.count = self.count.wrapping_add(1);
        Some(idx)
    }
}

#[test]
fn init_links_a_zeroed_buffer_like_rdma_core() {
    let mem = SrqMem::new(8, 32);
    let srq = mem.srq(0x10);
    let links: Vec<u16> = (0..8).map(|i| mem.next(i)).collect();
    assert_eq!(links, [1, 2, 3, 4, 5, 6, 7, 0]);
    assert_eq!(
        (srq.capacity(), srq.max_gs(), srq.srqn(), srq.outstanding()),
        (7, 1, 0x31, 0)
    );
    // Re-initialising a verbs-linked buffer changes nothing.
    let _ = srq;
    let before = mem.buf.read(0, 256);
    let _srq = mem.srq(0x10);
    assert_eq!(mem.buf.read(0, 256), before);
}

#[test]
fn every_wqe_holds_the_empty_scatter_list_terminator_from_the_start() {
    for (stride, max_gs) in [(32u32, 1u32), (64, 3)] {
        let mem = SrqMem::new(4, stride);
        let mut srq = mem.srq(0xabcd);
        assert_eq!(srq.max_gs(), max_gs);
        let check = |i: u16| {
            // rdma-core's mlx5_post_srq_recv with num_sge = 0: entry 0 is the
            // terminator, byte count 0, lkey MLX5_INVALID_LKEY (0x100, big-endian),
            // address 0; the lkey given to `Srq::new` appears nowhere.
            assert_eq!(mem.data(i, 0), DataSeg::new(0, INVALID_LKEY, 0));
            assert_eq!(
                mem.buf.read(i as usize * stride as usize + 16, 16),
                common::hex("00 00 00 00 00 00 01 00 00 00 00 00 00 00 00 00")
            );
            if max_gs > 1 {
                assert_eq!(mem.data(i, 1), DataSeg::new(0, 0, 0), "only one terminator");
            }
        };
        // Written when the queue is taken over (the device never writes them), so a
        // post has nothing to write but the free list.
        (0..4).for_each(check);
        assert_eq!(srq.post(), Ok(0));
        assert_eq!(srq.post(), Ok(1));
        (0..4).for_each(check);
        assert_eq!(mem.next(0), 1, "post does not touch the link");
    }
}

#[test]
fn full_detection_and_batched_doorbell() {
    let mem = SrqMem::new(8, 32);
    let mut srq = mem.srq(1);
    for i in 0..5 {
        assert_eq!(srq.post(), Ok(i));
    }
    assert_eq!(mem.dbr(), 0, "no doorbell until rung");
    srq.ring_doorbell();
    assert_eq!(mem.dbr(), 5);
    assert_eq!(srq.post_batch(10), Ok(2), "capacity is wqe_cnt - 1");
    assert_eq!(mem.dbr(), 7);
    assert_eq!(srq.post(), Err(SrqPostError::Full));
    assert_eq!(srq.post_batch(3), Ok(0));
    assert_eq!(srq.outstanding(), 7);
    assert_eq!(mem.dbr(), 7);
}

#[test]
fn out_of_order_free_and_repost() {
    let mem = SrqMem::new(8, 32);
    let mut srq = mem.srq(1);
    let mut hw = HwSrq { head: 0, count: 0 };
    assert_eq!(srq.post_batch(7), Ok(7));
    let consumed: Vec<u16> = (0..7).map(|_| hw.take(&mem).unwrap()).collect();
    assert_eq!(consumed, [0, 1, 2, 3, 4, 5, 6]);
    assert_eq!(hw.take(&mem), None);

    // Completions arrive out of consumption order (different QPs share the SRQ).
    for idx in [3, 1, 5] {
        srq.free(idx).unwrap();
    }
    assert_eq!(
        (mem.next(7), mem.next(3), mem.next(1)),
        (3, 1, 5),
        "appended at the tail"
    );
    // Reposting takes the old sentinel first, then the freed ones in completion order.
    assert_eq!(srq.post(), Ok(7));
    assert_eq!(srq.post(), Ok(3));
    assert_eq!(srq.post(), Ok(1));
    assert_eq!(srq.post(), Err(SrqPostError::Full), "5 is the new sentinel");
    srq.ring_doorbell();
    assert_eq!(mem.dbr(), 10);
    let consumed: Vec<u16> = std::iter::from_fn(|| hw.take(&mem)).collect();
    assert_eq!(consumed, [7, 3, 1]);
}

#[test]
fn free_rejects_impossible_indices() {
    let mem = SrqMem::new(8, 32);
    let mut srq = mem.srq(1);
    assert_eq!(srq.free(0), Err(SrqFreeError::NotPosted(0)));
    srq.post().unwrap();
    assert_eq!(srq.free(8), Err(SrqFreeError::OutOfRange(8)));
    assert_eq!(
        srq.free(7),
        Err(SrqFreeError::NotPosted(7)),
        "the sentinel is never posted"
    );
    assert_eq!(srq.free(0), Ok(()));
    assert_eq!(srq.free(0), Err(SrqFreeError::NotPosted(0)));
}

/// An SRQ whose free list has been relinked out of order (WQE 1 completed before 0),
/// so posts follow the links: head 2 → 3 → … → 7 → 1 → 0 (the sentinel).
fn relinked(mem: &SrqMem) -> Srq {
    let mut srq = mem.srq(1);
    assert_eq!(srq.post_batch(2), Ok(2));
    srq.free(1).unwrap();
    srq.free(0).unwrap();
    assert_eq!((mem.next(7), mem.next(1)), (1, 0));
    srq
}

#[test]
fn corrupt_link_is_reported() {
    let mem = SrqMem::new(8, 32);
    let mut srq = relinked(&mem);
    mem.buf.write(2 * 32 + 2, &[0x00, 0x09]); // next[2] = 9, out of range
    assert_eq!(
        srq.post(),
        Err(SrqPostError::CorruptLink { index: 2, next: 9 })
    );
    assert_eq!(srq.outstanding(), 0);
}

#[test]
fn post_batch_stops_at_a_corrupt_link_keeping_what_it_posted() {
    let mem = SrqMem::new(8, 32);
    let mut srq = relinked(&mem);
    mem.buf.write(5 * 32 + 2, &[0x00, 0x0c]); // next[5] = 12, out of range
    assert_eq!(
        srq.post_batch(6),
        Err(SrqPostError::CorruptLink { index: 5, next: 12 })
    );
    // 2, 3 and 4 went out (their links were sound), with their doorbell.
    assert_eq!((srq.outstanding(), srq.counter()), (3, 5));
    assert_eq!(mem.dbr(), 5);
    assert_eq!(
        srq.post(),
        Err(SrqPostError::CorruptLink { index: 5, next: 12 }),
        "the head stays on the corrupt WQE"
    );
}

#[test]
fn in_order_completions_leave_the_links_as_initialised() {
    let mem = SrqMem::new(16, 32);
    let mut srq = mem.srq(1);
    let links = mem.buf.read(0, 16 * 32);
    let mut hw = HwSrq { head: 0, count: 0 };
    let mut in_hw = std::collections::VecDeque::new();
    let (mut x, mut total, mut taken) = (7u32, 0u64, 0u64);
    let target = if cfg!(miri) { 400 } else { 70_000 };
    let mut rounds = 0u32;
    while total < target {
        rounds += 1;
        // ~28 000 rounds post 70 000 WQEs here; a broken post or free stops short.
        assert!(rounds < 200_000, "no progress after {total} WQEs");
        xorshift(&mut x);
        total += u64::from(srq.post_batch(x % 12).unwrap());
        assert_eq!(mem.dbr(), u32::from(srq.counter()));
        assert_eq!(u64::from(srq.counter()), total % 65_536);
        for _ in 0..x % 9 {
            let Some(idx) = hw.take(&mem) else { break };
            // The device meets the WQEs in ring order: the links are i → i + 1.
            assert_eq!(u64::from(idx), taken % 16, "consumed out of ring order");
            taken += 1;
            in_hw.push_back(idx);
        }
        // Completions in consumption order, a few at a time.
        for _ in 0..(x >> 8) % 6 {
            let Some(idx) = in_hw.pop_front() else { break };
            srq.free(idx).unwrap();
        }
        assert_eq!(mem.buf.read(0, 16 * 32), links, "no link written");
    }
    let pending = (mem.dbr() as u16).wrapping_sub(hw.count);
    assert_eq!(u32::from(pending) + in_hw.len() as u32, srq.outstanding());
    assert!(
        taken > target / 2,
        "the device consumed most of it: {taken}"
    );
}

#[test]
fn the_first_out_of_order_completion_links_as_rdma_core_does() {
    let mem = SrqMem::new(8, 32);
    let mut srq = mem.srq(1);
    let mut hw = HwSrq { head: 0, count: 0 };
    assert_eq!(srq.post_batch(7), Ok(7));
    let consumed: Vec<u16> = std::iter::from_fn(|| hw.take(&mem)).collect();
    assert_eq!(consumed, [0, 1, 2, 3, 4, 5, 6]);
    let links = mem.buf.read(0, 8 * 32);
    srq.free(0).unwrap();
    srq.free(1).unwrap();
    assert_eq!(mem.buf.read(0, 8 * 32), links, "in order: nothing written");
    // 3 before 2: its link is written (rdma-core's `mlx5_free_srq_wqe`), and from
    // here on every free and post goes through the links.
    for idx in [3, 2, 4, 5, 6] {
        srq.free(idx).unwrap();
    }
    let chain: Vec<u16> = [1, 3, 2, 4, 5].iter().map(|&i| mem.next(i)).collect();
    assert_eq!(chain, [3, 2, 4, 5, 6]);
    // The repost follows the links: the old sentinel 7, then 0 and 1 (linked since
    // `new`), then the rest in completion order; 6 is the new sentinel. A batch takes
    // what it is asked for and no more, up to the sentinel.
    assert_eq!(srq.post_batch(3), Ok(3));
    assert_eq!(srq.post_batch(10), Ok(4));
    let consumed: Vec<u16> = std::iter::from_fn(|| hw.take(&mem)).collect();
    assert_eq!(consumed, [7, 0, 1, 3, 2, 4, 5]);
    assert_eq!(srq.post(), Err(SrqPostError::Full));
}

#[test]
fn counter_wraps_past_65536_with_shuffled_completions() {
    let mem = SrqMem::new(16, 64);
    let mut srq = mem.srq(0x42);
    let mut hw = HwSrq { head: 0, count: 0 };
    let mut in_hw: Vec<u16> = Vec::new(); // consumed, completion pending
    let mut x: u32 = 12345;
    let mut total: u64 = 0;
    let mut rounds = 0u32;
    let target = if cfg!(miri) { 400 } else { 70_000 };
    while total < target {
        rounds += 1;
        // ~21 000 rounds post 70 000 WQEs here; a broken post or free stops short.
        assert!(rounds < 100_000, "no progress after {total} WQEs");
        xorshift(&mut x);
        let posted = srq.post_batch(1 + x % 7).unwrap();
        total += u64::from(posted);
        assert_eq!(mem.dbr(), u32::from(srq.counter()));
        assert_eq!(u64::from(srq.counter()), total % 65_536);
        // The device consumes some of what is posted.
        for _ in 0..(x % 9) {
            match hw.take(&mem) {
                Some(idx) => {
                    assert!(!in_hw.contains(&idx), "WQE {idx} consumed twice");
                    in_hw.push(idx);
                }
                None => break,
            }
        }
        // Complete a pseudo-random subset, out of order.
        let mut i = 0;
        while i < in_hw.len() {
            xorshift(&mut x);
            if x.is_multiple_of(3) {
                srq.free(in_hw.swap_remove(i)).unwrap();
            } else {
                i += 1;
            }
        }
        assert!(srq.outstanding() <= srq.capacity());
    }
    assert!(total >= target);
    // Everything posted was consumable exactly once.
    let pending = (mem.dbr() as u16).wrapping_sub(hw.count);
    assert_eq!(u32::from(pending) + in_hw.len() as u32, srq.outstanding());
}

#[test]
fn init_rejects_bad_descriptions() {
    let mem = SrqMem::new(8, 32);
    let ok = mem.desc();
    let cases = [
        (
            SrqDesc {
                buf: std::ptr::null_mut(),
                ..ok
            },
            SrqInitError::NullPointer,
        ),
        (
            SrqDesc {
                dbrec: std::ptr::null_mut(),
                ..ok
            },
            SrqInitError::NullPointer,
        ),
        (SrqDesc { stride: 16, ..ok }, SrqInitError::Stride(16)),
        (SrqDesc { stride: 48, ..ok }, SrqInitError::Stride(48)),
        (
            SrqDesc {
                wqe_cnt: 1,
                tail: 0,
                ..ok
            },
            SrqInitError::WqeCnt(1),
        ),
        (SrqDesc { wqe_cnt: 6, ..ok }, SrqInitError::WqeCnt(6)),
        (
            SrqDesc { head: 1, ..ok },
            SrqInitError::NotFresh { head: 1, tail: 7 },
        ),
        (
            SrqDesc { tail: 3, ..ok },
            SrqInitError::NotFresh { head: 0, tail: 3 },
        ),
        (
            SrqDesc {
                dbrec: mem.dbrec.ptr().wrapping_add(2).cast(),
                ..ok
            },
            SrqInitError::Misaligned,
        ),
    ];
    for (desc, err) in cases {
        // SAFETY: rejected before any access.
        assert_eq!(unsafe { Srq::new(&desc, 1) }.map(|_| ()), Err(err));
    }
}
