//! Two peers, A and B, each writing into the other's recv ring through the crate's own
//! `ring`, `credit` and `wire` code: the endpoint logic of docs/spec/credit.md in miniature,
//! with real bytes in the rings and batches in transit per direction (FIFO, as RC).
//!
//! Random interleavings of call, reply, flush, metadata-only batch, delivery and RDMA
//! READ of the consumer. After every step, for both directions:
//! * the invariant `in_flight + 2R <= C` holds;
//! * the true occupancy of the recv ring (sender's producer minus the receiver's real
//!   consumer) never exceeds its size, and the sender never believes the consumer is
//!   further than it really is;
//! * credit is conserved: `R == peer balance + grants in transit + allowances of the
//!   peer's unanswered requests`;
//!
//! and every reply finds the space it was promised. Payload bytes are checked on
//! arrival, so an overwrite of live ring data shows up as corruption too.

use std::cell::Cell;
use std::collections::VecDeque;

use copyrpc_core::credit::{worst_case_advance, CallCredit, CreditError, CreditState};
use copyrpc_core::ring::{FlushRange, RecvRing, RemoteConsumer, RingSize, SendRing, Wrap};
use copyrpc_core::wire::{
    decode_imm, emit_message, encode_imm, from_response_id, padded_message_size, parse_batch,
    to_response_id, FlowMetaRepr, FlowMetaView, Imm, FLOW_METADATA_SIZE,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Pending-call table capacity (call_id = slot, as the pending-call slab).
const SLOTS: usize = 24;

struct Pending {
    credit: CallCredit,
    payload_len: u32,
    /// Set when the peer writes the reply, checked when it arrives.
    reply_len: Option<u32>,
}

struct Queued {
    call_id: u32,
    blocks: u32,
}

struct InTransit {
    range: FlushRange,
    imm: Imm,
    grant: u64,
}

struct Peer {
    /// Positions in the other peer's recv ring; `send_mem` has that ring's size.
    send: SendRing,
    send_mem: Vec<u8>,
    remote: RemoteConsumer,
    credit: CreditState,
    recv: RecvRing,
    recv_mem: Vec<u8>,
    pending: Vec<Option<Pending>>,
    queued: Vec<Queued>,
    /// Internal allowances of our requests the other side has not replied to yet.
    unreplied: u64,
}

impl Peer {
    fn in_flight(&self) -> u64 {
        self.remote.in_flight(self.send.producer())
    }

    fn offset(&self, pos: u64) -> usize {
        self.send.size().offset(pos) as usize
    }
}

#[derive(Default, Debug)]
struct Stats {
    calls: Cell<u64>,
    ring_full: Cell<u64>,
    no_credit: Cell<u64>,
    never_payable: Cell<u64>,
    replies: Cell<u64>,
    too_large_refused: Cell<u64>,
    wraps: Cell<u64>,
    reused_slot_wraps: Cell<u64>,
    grants: Cell<u64>,
    reads: Cell<u64>,
}

fn bump(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

fn pattern(call_id: u32, len: u32) -> Vec<u8> {
    (0..len)
        .map(|k| (call_id as u8).wrapping_mul(31) ^ (k as u8).wrapping_mul(7) ^ 0x5a)
        .collect()
}

/// Fills a range's metadata in the send ring and puts it on the wire.
fn post(me: &mut Peer, wire: &mut VecDeque<InTransit>, range: FlushRange, grant: u64) {
    let meta = FlowMetaRepr {
        ring_credit_return: me.recv.take_credit_return(),
        credit_grant: grant,
        message_count: range.message_count,
    };
    let off = me.offset(range.meta_pos);
    meta.emit(&mut FlowMetaView::new_unchecked(
        &mut me.send_mem[off..off + FLOW_METADATA_SIZE as usize],
    ));
    let imm = encode_imm(range.imm_delta()).expect("every delta fits the immediate");
    wire.push_back(InTransit { range, imm, grant });
}

/// WRITEs forced by a wrap. Their metadata is filled after `reserve_message` returned,
/// when the producer already covers the whole write, so they may grant like any flush.
fn post_wrap(me: &mut Peer, wire: &mut VecDeque<InTransit>, wrap: Option<Wrap>, stats: &Stats) {
    if let Some(wrap) = wrap {
        bump(&stats.wraps);
        match wrap.flushed {
            Some(flushed) => post_granting(me, wire, flushed, stats),
            None => bump(&stats.reused_slot_wraps),
        }
        post_granting(me, wire, wrap.marker, stats);
    }
}

fn post_granting(me: &mut Peer, wire: &mut VecDeque<InTransit>, range: FlushRange, stats: &Stats) {
    let grant = me.credit.grant_for_batch(me.in_flight());
    if grant > 0 {
        bump(&stats.grants);
    }
    post(me, wire, range, grant);
}

fn flush(me: &mut Peer, wire: &mut VecDeque<InTransit>, stats: &Stats) {
    if let Some(range) = me.send.take_flush() {
        post_granting(me, wire, range, stats);
    }
}

fn write_message(me: &mut Peer, pos: u64, call_id: u32, piggyback: u32, len: u32) {
    let off = me.offset(pos);
    let padded = padded_message_size(len) as usize;
    let payload = pattern(call_id, len);
    let written = emit_message(
        &mut me.send_mem[off..off + padded],
        call_id,
        piggyback,
        &payload,
    )
    .expect("the ring reserved the padded size");
    assert_eq!(written, padded);
}

struct World<'s> {
    peers: [Peer; 2],
    /// `wire[i]` carries batches from peer `i` to peer `1 - i`.
    wire: [VecDeque<InTransit>; 2],
    stats: &'s Stats,
}

impl World<'_> {
    /// (peer i, the other peer, the wire from i to the other).
    fn pair(&mut self, i: usize) -> (&mut Peer, &mut Peer, &mut VecDeque<InTransit>) {
        let [a, b] = &mut self.peers;
        let wire = &mut self.wire[i];
        if i == 0 {
            (a, b, wire)
        } else {
            (b, a, wire)
        }
    }

    fn call(&mut self, i: usize, payload_raw: u16, allowance_raw: u16) {
        let stats = self.stats;
        let (me, _, wire) = self.pair(i);
        // Half the draws small, half up to a quarter (payload) or eighth (allowance)
        // of the ring, so that both plain traffic and near-full rings are common.
        let scaled = |raw: u16, limit: u64| {
            let limit = if raw & 1 == 0 { limit.min(64) } else { limit };
            u32::from(raw >> 1) % limit as u32
        };
        let payload_len = scaled(payload_raw, me.send.size().get() / 4);
        let allowance = scaled(allowance_raw, me.recv.size().get() / 8);
        let padded = padded_message_size(payload_len);
        let plan = me
            .send
            .plan(padded)
            .expect("payloads are below a quarter ring");
        if !me.credit.has_room(me.in_flight(), plan.advance) {
            bump(&stats.ring_full);
            return;
        }
        let Some(slot) = me.pending.iter().position(Option::is_none) else {
            return;
        };
        let paid = match me.credit.try_reserve_for_call(allowance) {
            Ok(paid) => paid,
            Err(CreditError::InsufficientCredit) => {
                bump(&stats.no_credit);
                return;
            }
            // Sound only if R never exceeds the bound: `check` asserts that.
            Err(CreditError::AllowanceTooLarge) => {
                assert!(!me.credit.can_ever_pay(allowance));
                bump(&stats.never_payable);
                return;
            }
            Err(e) => panic!("call refused with {e:?}"),
        };
        let reserved = me.send.reserve_message(padded).unwrap();
        post_wrap(me, wire, reserved.wrap, stats);
        write_message(
            me,
            reserved.pos,
            slot as u32,
            paid.allowance_blocks,
            payload_len,
        );
        me.pending[slot] = Some(Pending {
            credit: paid,
            payload_len,
            reply_len: None,
        });
        me.unreplied += paid.internal_allowance;
        bump(&stats.calls);
    }

    fn reply(&mut self, i: usize, pick: u16, size_raw: u16) {
        let stats = self.stats;
        let (me, other, wire) = self.pair(i);
        if me.queued.is_empty() {
            return;
        }
        let request = me.queued.swap_remove(usize::from(pick) % me.queued.len());
        // Largest payload whose padded size fits the allowance: blocks*32 + 32 - 12.
        let max_len = request.blocks * 32 + 20;
        if size_raw.is_multiple_of(64) {
            let before = me.credit;
            assert_eq!(
                me.credit
                    .release_on_reply(request.blocks, padded_message_size(max_len + 1)),
                Err(CreditError::ReplyTooLarge)
            );
            assert_eq!(me.credit, before);
            bump(&stats.too_large_refused);
        }
        let len = (u64::from(size_raw) * u64::from(max_len + 1) / 65_536) as u32;
        let padded = padded_message_size(len);
        let released = me
            .credit
            .release_on_reply(request.blocks, padded)
            .expect("a reply within its allowance was refused");
        let plan = me.send.plan(padded).expect("a reply larger than a lap");
        assert!(plan.advance <= worst_case_advance(padded));
        assert!(
            me.credit.has_room(me.in_flight(), plan.advance),
            "reply did not find its promised space: in_flight {} advance {} R {} C {}",
            me.in_flight(),
            plan.advance,
            me.credit.resp_reservation(),
            me.credit.remote_ring_size()
        );
        let reserved = me.send.reserve_message(padded).unwrap();
        post_wrap(me, wire, reserved.wrap, stats);
        write_message(
            me,
            reserved.pos,
            to_response_id(request.call_id),
            request.blocks,
            len,
        );
        other.unreplied -= released;
        let pending = other.pending[request.call_id as usize]
            .as_mut()
            .expect("replying to a call the peer does not have");
        assert_eq!(pending.credit.internal_allowance, released);
        pending.reply_len = Some(len);
        bump(&stats.replies);
    }

    fn flush(&mut self, i: usize) {
        let stats = self.stats;
        let (me, _, wire) = self.pair(i);
        flush(me, wire, stats);
    }

    /// A metadata-only batch: returns ring credit and grants without a message.
    fn grant_only(&mut self, i: usize) {
        let stats = self.stats;
        let (me, _, wire) = self.pair(i);
        if me.send.meta_pos().is_none() {
            let plan = me.send.plan(0).unwrap();
            if !me.credit.has_room(me.in_flight(), plan.advance) {
                bump(&stats.ring_full);
                return;
            }
            let reserved = me.send.open_batch().unwrap();
            post_wrap(me, wire, reserved.wrap, stats);
        }
        flush(me, wire, stats);
    }

    /// RDMA READ fallback: learn the peer's consumer position directly.
    fn read_consumer(&mut self, i: usize) {
        let (me, other, _) = self.pair(i);
        me.remote
            .on_read(other.recv.last_recv_pos(), me.send.producer())
            .unwrap();
        bump(&self.stats.reads);
    }

    /// The oldest batch from peer i lands in the other's ring and is processed in
    /// order: metadata first, then its messages.
    fn deliver(&mut self, i: usize) {
        let (sender, me, wire) = self.pair(i);
        let Some(batch) = wire.pop_front() else {
            return;
        };
        let off = sender.offset(batch.range.start);
        let len = batch.range.write_len() as usize;
        me.recv_mem[off..off + len].copy_from_slice(&sender.send_mem[off..off + len]);

        let delta = decode_imm(Imm::from_bytes(batch.imm.to_bytes()));
        let span = me
            .recv
            .on_imm(delta)
            .expect("a correct sender never overruns");
        assert_eq!((span.start, span.offset as usize), (batch.range.start, off));
        let end = off + span.len as usize;
        let parsed = parse_batch(&me.recv_mem[off..end]).expect("well-formed batch");
        let meta = parsed.meta();
        assert_eq!(meta.credit_grant, batch.grant);
        me.remote
            .on_credit_return(meta.ring_credit_return, me.send.producer())
            .unwrap();
        me.credit.on_grant_received(meta.credit_grant);
        if parsed.is_wrap() {
            me.recv.skip_wrap().unwrap();
            return;
        }
        me.recv.consume(FLOW_METADATA_SIZE).unwrap();
        for message in parsed.messages() {
            let message = message.expect("well-formed message");
            me.recv.consume(message.padded_len()).unwrap();
            let len = message.payload.len() as u32;
            if message.is_response() {
                let id = from_response_id(message.call_id);
                assert_eq!(message.payload, &pattern(message.call_id, len)[..]);
                let pending = me.pending[id as usize]
                    .take()
                    .expect("response to an unknown call");
                assert_eq!(pending.reply_len, Some(len));
            } else {
                assert_eq!(message.payload, &pattern(message.call_id, len)[..]);
                let origin = sender.pending[message.call_id as usize]
                    .as_ref()
                    .expect("request from a call the sender does not have");
                assert_eq!(origin.payload_len, len);
                assert_eq!(origin.credit.allowance_blocks, message.piggyback);
                me.queued.push(Queued {
                    call_id: message.call_id,
                    blocks: message.piggyback,
                });
            }
        }
    }

    fn check(&self) -> Result<(), TestCaseError> {
        for i in 0..2 {
            let (me, other) = (&self.peers[i], &self.peers[1 - i]);
            let c = other.recv.size().get();
            prop_assert!(
                me.credit.invariant_holds(me.in_flight()),
                "peer {}: in_flight {} + 2 * R {} > C {}",
                i,
                me.in_flight(),
                me.credit.resp_reservation(),
                c
            );
            prop_assert!(me.remote.position() <= other.recv.last_recv_pos());
            prop_assert!(
                me.send.producer() - other.recv.last_recv_pos() <= c,
                "peer {} overruns the other's recv ring",
                i
            );
            let in_transit: u64 = self.wire[i].iter().map(|b| b.grant).sum();
            prop_assert_eq!(
                me.credit.resp_reservation(),
                other.credit.peer_credit_balance() + in_transit + other.unreplied,
                "peer {}: reservation does not match the credit it handed out",
                i
            );
            prop_assert!(me.credit.resp_reservation() <= me.credit.max_resp_reservation());
            // The bound behind `AllowanceTooLarge`: no interleaving takes R past what
            // the other side believes it can ever be granted.
            prop_assert!(
                me.credit.resp_reservation() <= other.credit.max_peer_credit(),
                "peer {}: R {} above the other's bound {}",
                i,
                me.credit.resp_reservation(),
                other.credit.max_peer_credit()
            );
        }
        Ok(())
    }

    /// Replies to everything and drains both wires; every call must then be answered.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..4 {
            for i in 0..2 {
                while !self.peers[i].queued.is_empty() {
                    self.reply(i, 0, 0);
                }
                self.flush(i);
            }
            for i in 0..2 {
                while !self.wire[i].is_empty() {
                    self.deliver(i);
                }
            }
            self.check()?;
        }
        for peer in &self.peers {
            prop_assert!(peer.pending.iter().all(Option::is_none), "unanswered call");
            prop_assert_eq!(peer.unreplied, 0);
            prop_assert_eq!(peer.recv.unconsumed(), 0);
        }
        Ok(())
    }
}

#[derive(Debug, Clone)]
struct Setup {
    shift: [u32; 2],
    /// max_resp_reservation as a fraction of the peer's recv ring: C >> (1 + k).
    cap_shift: [u32; 2],
    start: [u64; 2],
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        [7u32..=12, 7u32..=12],
        [0u32..4, 0u32..4],
        prop_oneof![Just(0u64), (0u64..(1 << 36)).prop_map(|k| k * 32)],
        prop_oneof![Just(0u64), (0u64..64).prop_map(|k| (1u64 << 32) - k * 32)],
    )
        .prop_map(|(shift, cap_shift, start_a, start_b)| Setup {
            shift,
            cap_shift,
            start: [start_a, start_b],
        })
}

fn world<'s>(s: &Setup, stats: &'s Stats) -> World<'s> {
    let size = |i: usize| RingSize::new(1 << s.shift[i]).unwrap();
    // Peer i's recv ring has size(i); peer i writes into size(1 - i) starting at start[i].
    let cap = |i: usize| size(1 - i).get() >> (1 + s.cap_shift[i]);
    let peer = |i: usize| {
        let (own, remote) = (size(i), size(1 - i));
        Peer {
            send: SendRing::starting_at(remote, s.start[i]).unwrap(),
            send_mem: vec![0; remote.get() as usize],
            remote: RemoteConsumer::new(s.start[i]),
            credit: CreditState::connect(
                cap(i),
                own,
                remote,
                copyrpc_core::credit::initial_credit(cap(1 - i)),
            ),
            recv: RecvRing::starting_at(own, s.start[1 - i]).unwrap(),
            recv_mem: vec![0xee; own.get() as usize],
            pending: (0..SLOTS).map(|_| None).collect(),
            queued: Vec::new(),
            unreplied: 0,
        }
    };
    World {
        peers: [peer(0), peer(1)],
        wire: [VecDeque::new(), VecDeque::new()],
        stats,
    }
}

fn run_case(s: &Setup, ops: &[(u8, u16, u16)], stats: &Stats) -> Result<(), TestCaseError> {
    let mut w = world(s, stats);
    w.check()?;
    for &(kind, a, b) in ops {
        let i = usize::from(kind >> 7);
        match kind & 0x0f {
            0..=3 => w.call(i, a, b),
            4..=6 => w.reply(i, a, b),
            7..=10 => w.deliver(i),
            11 | 12 => w.flush(i),
            13 => w.grant_only(i),
            14 => w.read_consumer(i),
            _ => {
                // Deliver in both directions, to interleave arrivals.
                w.deliver(0);
                w.deliver(1);
            }
        }
        w.check()?;
    }
    w.drain()
}

#[test]
fn credit_model() {
    let stats = Stats::default();
    // 10 000 cases; `CREDIT_MODEL_CASES` sets fewer where each costs more (scripts/test.sh
    // runs 2 500 under qemu, where the model is the same arithmetic ten times slower).
    // The floor keeps every counter below meaningful.
    let cases = std::env::var("CREDIT_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000u32)
        .max(1_000);
    let mut runner = TestRunner::new(Config::with_cases(cases));
    let ops = prop::collection::vec((any::<u8>(), any::<u16>(), any::<u16>()), 100..300);
    runner
        .run(&(setup(), ops), |(s, ops)| run_case(&s, &ops, &stats))
        .unwrap();
    // The model must actually exercise what it claims to: each of these would be zero
    // if, say, every call were refused or rings never wrapped.
    println!("{stats:?}");
    for (name, count) in [
        ("calls", stats.calls.get()),
        ("ring full refusals", stats.ring_full.get()),
        ("credit refusals", stats.no_credit.get()),
        ("refusals for good", stats.never_payable.get()),
        ("replies", stats.replies.get()),
        ("oversized replies refused", stats.too_large_refused.get()),
        ("wraps", stats.wraps.get()),
        (
            "wraps reusing an empty batch",
            stats.reused_slot_wraps.get(),
        ),
        ("grants", stats.grants.get()),
        ("consumer reads", stats.reads.get()),
    ] {
        assert!(count > 100, "only {count} {name}");
    }
}

/// The RDMA READ fallback frees a sender whose peer has nothing to send back.
#[test]
fn read_fallback_unblocks_a_one_way_sender() {
    let stats = Stats::default();
    let s = Setup {
        shift: [8, 8],
        cap_shift: [1, 1],
        start: [0, 0],
    };
    let mut w = world(&s, &stats);
    // Zero-allowance calls until the ring is full (B only consumes, never writes).
    let mut refused_before_read = false;
    for _ in 0..32 {
        let calls = stats.calls.get();
        w.call(0, 40, 0);
        w.flush(0);
        w.deliver(0);
        if stats.calls.get() == calls {
            refused_before_read = true;
            break;
        }
    }
    assert!(refused_before_read, "the ring never filled");
    assert_eq!(w.peers[1].queued.len() as u64, stats.calls.get());
    let full = stats.ring_full.get();
    w.read_consumer(0);
    w.call(0, 40, 0);
    assert_eq!(stats.ring_full.get(), full, "READ did not free the ring");
    w.check().unwrap();
}
