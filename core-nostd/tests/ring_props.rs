//! A SendRing and the peer's RecvRing driven in lockstep over many laps: the ranges the
//! sender emits must tile the position space, never cross a lap end, and leave both
//! sides at the same position.

use std::collections::VecDeque;

use copyrpc_core::credit::worst_case_advance;
use copyrpc_core::ring::{FlushRange, RecvRing, RingSize, SendRing};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Message(u64),
    OpenBatch,
    Flush,
    Deliver,
}

/// Ops are drawn as plain integers and decoded here: cheaper to generate than a
/// `prop_oneof!` of variants, and they still shrink.
fn decode(kind: u8, arg: u8) -> Op {
    match kind % 11 {
        0..=5 => Op::Message(1 + u64::from(arg % 63)),
        6 => Op::OpenBatch,
        7 | 8 => Op::Flush,
        _ => Op::Deliver,
    }
}

fn start_pos() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        (0u64..64).prop_map(|k| (1u64 << 32) - k * 32),
        (0u64..(1 << 35)).prop_map(|k| k * 32),
    ]
}

struct Lockstep {
    send: SendRing,
    recv: RecvRing,
    wire: VecDeque<FlushRange>,
    last_end: u64,
}

impl Lockstep {
    fn post(&mut self, range: FlushRange) {
        assert_eq!(range.start, self.last_end, "ranges must tile the positions");
        assert_eq!(range.meta_pos, range.start);
        self.last_end = range.end;
        self.wire.push_back(range);
    }

    fn deliver_all(&mut self) {
        while let Some(range) = self.wire.pop_front() {
            let size = self.send.size().get();
            let span = self.recv.on_imm(range.imm_delta()).unwrap();
            assert_eq!(span.start, range.start);
            if range.is_wrap() {
                assert_eq!(span.offset + span.len, size, "a marker ends its lap");
                assert_ne!(span.offset, 0);
                self.recv.skip_wrap().unwrap();
            } else {
                assert!(
                    span.offset + span.len < size,
                    "a batch stops short of the lap end"
                );
                self.recv.consume(span.len).unwrap();
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn send_and_recv_stay_in_step(shift in 7u32..=12, start in start_pos(),
                                  ops in prop::collection::vec((any::<u8>(), any::<u8>()), 1..300)) {
        let size = RingSize::new(1 << shift).unwrap();
        let mut s = Lockstep {
            send: SendRing::starting_at(size, start).unwrap(),
            recv: RecvRing::starting_at(size, start).unwrap(),
            wire: VecDeque::new(),
            last_end: start,
        };
        for (kind, arg) in ops {
            let padded = match decode(kind, arg) {
                Op::Message(blocks) => (blocks * 32).min(size.get() - 64),
                Op::OpenBatch => 0,
                Op::Flush => {
                    if let Some(range) = s.send.take_flush() {
                        s.post(range);
                    }
                    continue;
                }
                Op::Deliver => {
                    s.deliver_all();
                    continue;
                }
            };
            // No flow control here: deliver first when the write could overrun.
            if s.send.producer() + worst_case_advance(padded) - s.recv.last_recv_pos() > size.get() {
                if let Some(range) = s.send.take_flush() {
                    s.post(range);
                }
                s.deliver_all();
            }
            let plan = s.send.plan(padded).unwrap();
            prop_assert!(plan.advance <= worst_case_advance(padded));
            let before = s.send.producer();
            let reserved = if padded == 0 {
                s.send.open_batch().unwrap()
            } else {
                s.send.reserve_message(padded).unwrap()
            };
            prop_assert_eq!(s.send.producer() - before, plan.advance);
            prop_assert_eq!(reserved.wrap.is_some(), plan.wraps);
            if let Some(wrap) = reserved.wrap {
                if let Some(flushed) = wrap.flushed {
                    prop_assert!(flushed.message_count > 0);
                    s.post(flushed);
                }
                prop_assert_eq!(wrap.marker.write_len(), 32);
                s.post(wrap.marker);
            }
            let meta = s.send.meta_pos().unwrap();
            prop_assert!(meta <= reserved.pos);
            prop_assert!(size.offset(reserved.pos) + padded < size.get());
            prop_assert_eq!(size.offset(reserved.pos) - size.offset(meta), reserved.pos - meta);
        }
        if let Some(range) = s.send.take_flush() {
            s.post(range);
        }
        s.deliver_all();
        prop_assert_eq!(s.recv.producer(), s.send.producer());
        prop_assert_eq!(s.recv.last_recv_pos(), s.send.producer());
        prop_assert_eq!(s.recv.take_credit_return(), s.send.producer() - start);
    }
}
