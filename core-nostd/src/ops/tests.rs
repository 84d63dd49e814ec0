use core::future::Future;
use core::pin::pin;
use core::sync::atomic::{AtomicUsize, Ordering};
use core::task::{Context, Poll, Waker};

use super::*;

#[test]
fn i1_identity_is_never_reused_and_an_old_handle_never_reads_a_new_result() {
    let t = OpTable::<2>::new();
    let mut seen = std::collections::HashSet::new();
    let mut old = Vec::new();
    for round in 0..100u64 {
        let h = t.start().unwrap();
        assert!(seen.insert(h.id()), "identity {:?} given twice", h.id());
        for &o in &old {
            assert_eq!(t.poll(o), Poll::Ready(Err(OpError::Gone)));
            assert!(!t.finish(o, Ok(999)), "a retired handle ended a live op");
        }
        assert!(t.finish(h, Ok(round)));
        assert_eq!(t.result(h), Some(Ok(round)));
        assert_eq!(t.result(h), Some(Err(OpError::Gone)), "taken twice");
        old.push(h);
    }
    assert_eq!(t.live_count(), 0);
}

#[test]
fn i1_a_full_table_refuses_instead_of_sharing_a_cell() {
    let t = OpTable::<2>::new();
    let a = t.start().unwrap();
    let b = t.start().unwrap();
    assert_eq!(t.start(), Err(OpError::TableFull));
    assert_ne!(a.index(), b.index());
    assert_eq!(OpHandle::from_u64(a.to_u64()), a);
}

#[test]
fn i2_a_slot_returns_only_after_every_work_request_of_its_lease_completed() {
    let t = OpTable::<4>::new();
    let (words, mut pool) = (SlotTable::<2>::new(), SlotPool::<2>::new());
    let op = t.start().unwrap();
    let l = pool.lease(&words, op, 3).unwrap();
    assert_eq!(pool.free_count(), 1);
    for sub in 0..2 {
        assert_eq!(words.complete(l.wr_id(sub), true), SlotCompletion::More);
        assert_eq!(pool.reclaim(&words, l.slot), None, "reclaimed while busy");
        assert_eq!(pool.free_count(), 1);
    }
    assert_eq!(
        words.complete(l.wr_id(2), false),
        SlotCompletion::Last {
            slot: l.slot,
            failed: true
        }
    );
    assert_eq!(pool.reclaim(&words, l.slot), Some((op, true)));
    assert_eq!(pool.reclaim(&words, l.slot), None, "reclaimed twice");
    assert_eq!(pool.free_count(), 2);
}

#[test]
fn i2_leases_come_from_the_free_list_in_release_order_not_by_index() {
    let t = OpTable::<8>::new();
    let (words, mut pool) = (SlotTable::<3>::new(), SlotPool::<3>::new());
    let op = t.start().unwrap();
    let l: Vec<Lease> = (0..3).map(|_| pool.lease(&words, op, 1).unwrap()).collect();
    assert_eq!(pool.lease(&words, op, 1), Err(OpError::NoSlot));
    // Complete the middle one: only it can come back, and the next lease is it.
    words.complete(l[1].wr_id(0), true);
    for x in [&l[0], &l[2]] {
        assert_eq!(pool.reclaim(&words, x.slot), None);
    }
    pool.reclaim(&words, l[1].slot).unwrap();
    let again = pool.lease(&words, op, 1).unwrap();
    assert_eq!(again.slot, l[1].slot);
    assert_ne!(again.generation, l[1].generation);
}

#[test]
fn i3_a_late_completion_of_an_earlier_lease_lands_nowhere() {
    let t = OpTable::<4>::new();
    let (words, mut pool) = (SlotTable::<1>::new(), SlotPool::<1>::new());
    let first = t.start().unwrap();
    let l1 = pool.lease(&words, first, 1).unwrap();
    words.complete(l1.wr_id(0), true);
    pool.reclaim(&words, l1.slot).unwrap();
    // Between leases the old id is stale.
    assert_eq!(words.complete(l1.wr_id(0), false), SlotCompletion::Stale);
    let second = t.start().unwrap();
    let l2 = pool.lease(&words, second, 1).unwrap();
    assert_eq!(l2.slot, l1.slot);
    // A duplicate / late CQE of the first lease: rejected, the second lease untouched.
    assert_eq!(words.complete(l1.wr_id(0), false), SlotCompletion::Stale);
    assert_eq!(pool.reclaim(&words, l2.slot), None);
    assert_eq!(
        words.complete(l2.wr_id(0), true),
        SlotCompletion::Last {
            slot: l2.slot,
            failed: false
        },
        "the stale failure must not have marked the new lease"
    );
    assert_eq!(pool.reclaim(&words, l2.slot), Some((second, false)));
    // Garbage ids (slot out of range, generation 0) are stale too.
    assert_eq!(words.complete(WrId(u64::MAX), true), SlotCompletion::Stale);
    assert_eq!(words.complete(WrId(0), true), SlotCompletion::Stale);
}

#[test]
fn i4_a_retired_op_cell_reused_is_not_ended_by_its_old_slot() {
    let t = OpTable::<1>::new();
    let (words, mut pool) = (SlotTable::<1>::new(), SlotPool::<1>::new());
    let old = t.start().unwrap();
    let l = pool.lease(&words, old, 1).unwrap();
    assert_eq!(t.cancel_all(), 1);
    assert_eq!(t.result(old), Some(Err(OpError::Cancelled)));
    // The cell is free: a new op takes it while the old lease is still outstanding.
    let new = t.start().unwrap();
    assert_eq!(new.index(), old.index());
    assert_eq!(pool.free_count(), 0, "cancel_all must not return the slot");
    let SlotCompletion::Last { slot, failed } = words.complete(l.wr_id(0), false) else {
        panic!("the outstanding request's completion was not counted")
    };
    assert!(failed);
    let (tenant, _) = pool.reclaim(&words, slot).unwrap();
    assert_eq!(tenant, old);
    assert!(
        !t.finish(tenant, Err(OpError::Failed)),
        "the retired op ended twice"
    );
    assert_eq!(
        t.poll(new),
        Poll::Pending,
        "the new op was ended by the old slot"
    );
    assert_eq!(pool.free_count(), 1);
}

#[test]
fn i5_the_window_stays_full_across_many_completions() {
    let mut w = RecvWindow::new(4);
    assert_eq!(w.fill(|| true), 4);
    let ops = OpTable::<8>::new();
    let mut m = ImmMatch::<8, 8>::new();
    let mut rng = 0x1234_5678u64;
    let mut asked = Vec::new();
    for i in 0..500u32 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        if rng & 1 == 0 && asked.len() < 8 {
            asked.push(m.ask(&ops).unwrap());
        } else if m.queued() < 8 {
            m.arrived(&ops, &mut w, ImmEvent { imm: i, len: 8 }, || true)
                .unwrap();
            assert_eq!(w.posted(), 4, "the window shrank at completion {i}");
        }
        asked.retain(|&h| ops.result(h).is_none());
    }
}

#[test]
fn i5_a_failed_repost_is_reported_and_refilled() {
    let mut w = RecvWindow::new(2);
    w.fill(|| true);
    assert_eq!(w.consume(|| false), Err(OpError::RepostFailed));
    assert_eq!(w.posted(), 1);
    assert_eq!(w.fill(|| true), 1);
    assert_eq!(w.posted(), 2);
}

#[test]
fn imm_arrival_first_is_queued_and_ask_first_waits() {
    let ops = OpTable::<4>::new();
    let mut w = RecvWindow::new(2);
    w.fill(|| true);
    let mut m = ImmMatch::<2, 2>::new();
    // Arrival first.
    m.arrived(&ops, &mut w, ImmEvent { imm: 7, len: 64 }, || true)
        .unwrap();
    let h = m.ask(&ops).unwrap();
    let r = ops.result(h).unwrap().unwrap();
    assert_eq!(ImmEvent::from_result(r), ImmEvent { imm: 7, len: 64 });
    // Ask first.
    let h = m.ask(&ops).unwrap();
    assert!(!ops.is_done(h));
    m.arrived(&ops, &mut w, ImmEvent { imm: 9, len: 1 }, || true)
        .unwrap();
    assert_eq!(
        ImmEvent::from_result(ops.result(h).unwrap().unwrap()).imm,
        9
    );
    // Queue limits are typed errors.
    for imm in 0..2 {
        m.arrived(&ops, &mut w, ImmEvent { imm, len: 0 }, || true)
            .unwrap();
    }
    assert_eq!(
        m.arrived(&ops, &mut w, ImmEvent { imm: 3, len: 0 }, || true),
        Err(OpError::QueueFull)
    );
    assert_eq!(m.dropped(), 1);
}

/// A waker that counts its wakes.
struct Counter(AtomicUsize);

impl std::task::Wake for Counter {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn the_future_is_woken_by_finish_and_takes_the_result() {
    let wakes = std::sync::Arc::new(Counter(AtomicUsize::new(0)));
    let t = OpTable::<2>::new();
    let h = t.start().unwrap();
    let waker = Waker::from(wakes.clone());
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(t.future(h));
    assert_eq!(f.as_mut().poll(&mut cx), Poll::Pending);
    assert_eq!(wakes.0.load(Ordering::Relaxed), 0);
    t.finish(h, Ok(5));
    assert_eq!(wakes.0.load(Ordering::Relaxed), 1);
    assert_eq!(f.as_mut().poll(&mut cx), Poll::Ready(Ok(5)));
    assert_eq!(t.live_count(), 0);
}

#[test]
fn cancel_all_fails_each_outstanding_op_once_in_every_state_and_keeps_slots_safe() {
    let t = OpTable::<8>::new();
    let (words, mut pool) = (SlotTable::<4>::new(), SlotPool::<4>::new());
    let mut m = ImmMatch::<4, 4>::new();
    let mut w = RecvWindow::new(4);
    w.fill(|| true);
    // Pending with two slots outstanding (one of them half done).
    let busy = t.start().unwrap();
    let l1 = pool.lease(&words, busy, 2).unwrap();
    let l2 = pool.lease(&words, busy, 1).unwrap();
    words.complete(l1.wr_id(0), true);
    // Pending, nothing posted yet.
    let idle = t.start().unwrap();
    // Done, result not taken.
    let done = t.start().unwrap();
    t.finish(done, Ok(42));
    // Done and taken (gone).
    let gone = t.start().unwrap();
    t.finish(gone, Ok(1));
    t.result(gone).unwrap().unwrap();
    // Waiting for an immediate; and an immediate queued for nobody.
    let asking = m.ask(&t).unwrap();
    let stray = ImmEvent { imm: 5, len: 0 };
    let before = t.pending_count();
    assert_eq!(before, 3, "busy, idle, asking");

    assert_eq!(t.cancel_all(), 3);
    assert_eq!(t.cancel_all(), 0, "cancelled twice");
    m.arrived(&t, &mut w, stray, || true).unwrap();
    assert_eq!(
        m.cancel_all(&t),
        (0, 1),
        "the waiting op was already failed"
    );
    assert_eq!(w.posted(), 4);

    for h in [busy, idle, asking] {
        assert_eq!(t.result(h), Some(Err(OpError::Cancelled)));
    }
    assert_eq!(t.result(done), Some(Ok(42)), "an ended op keeps its result");
    assert_eq!(t.result(gone), Some(Err(OpError::Gone)));
    // Slots: still out until their requests complete (flushed here), then all back.
    assert_eq!(pool.free_count(), 2);
    assert_eq!(pool.reclaim(&words, l1.slot), None);
    for wr in [l1.wr_id(1), l2.wr_id(0)] {
        if let SlotCompletion::Last { slot, .. } = words.complete(wr, false) {
            let (tenant, failed) = pool.reclaim(&words, slot).unwrap();
            assert!(failed);
            assert!(!t.finish(tenant, Err(OpError::Failed)), "failed twice");
        }
    }
    assert_eq!(pool.free_count(), 4);
    assert_eq!(t.live_count(), 0);
}

#[test]
fn an_op_cancelled_on_settle_reads_pending_until_its_own_ending_then_cancelled() {
    let wakes = std::sync::Arc::new(Counter(AtomicUsize::new(0)));
    let t = OpTable::<4>::new();
    let marked = t.start().unwrap();
    let done = t.start().unwrap();
    t.finish(done, Ok(3));
    let waker = Waker::from(wakes.clone());
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(t.future(marked));
    assert_eq!(f.as_mut().poll(&mut cx), Poll::Pending);

    assert_eq!(t.cancel_all_on_settle(), 1, "an ended op is not marked");
    assert_eq!(t.cancel_all_on_settle(), 0, "marked twice");
    assert_eq!(t.cancel_all(), 0, "cancel_all ended a marked op early");
    assert_eq!(t.poll(marked), Poll::Pending);
    assert_eq!(t.result(marked), None);
    assert_eq!(t.pending_count(), 1);
    assert_eq!(wakes.0.load(Ordering::Relaxed), 0);
    // A new op after the mark is not cancelled by it.
    let later = t.start().unwrap();

    assert!(
        !t.finish(marked, Ok(99)),
        "a settled cancel is a late ending"
    );
    assert_eq!(wakes.0.load(Ordering::Relaxed), 1);
    assert!(!t.finish(marked, Ok(98)), "ended twice");
    assert_eq!(
        f.as_mut().poll(&mut cx),
        Poll::Ready(Err(OpError::Cancelled))
    );
    assert!(t.finish(later, Ok(7)));
    assert_eq!(t.result(later), Some(Ok(7)));
    assert_eq!(t.result(done), Some(Ok(3)));
    assert_eq!(t.live_count(), 0);
    assert_eq!(t.pending_count(), 0);
}

#[test]
fn the_fifo_wraps_and_says_what_it_holds() {
    let mut f = Fifo::<u8, 3>::new();
    assert!(f.is_empty() && !f.any(|_| true));
    for v in [1, 2, 3] {
        f.push(v).unwrap();
    }
    assert_eq!(f.push(4), Err(4), "full");
    assert_eq!(f.pop(), Some(1));
    f.push(4).unwrap(); // into the slot 1 left: the ring has wrapped
    assert!(!f.is_empty());
    assert_eq!(f.len(), 3);
    assert!(f.any(|&v| v == 4), "the wrapped item");
    assert!(f.any(|&v| v == 2));
    assert!(!f.any(|&v| v == 1), "a popped item");
    assert_eq!(
        [f.pop(), f.pop(), f.pop(), f.pop()],
        [Some(2), Some(3), Some(4), None]
    );
    assert!(f.is_empty() && !f.any(|_| true));
    // Part full, the items past the front: any() looks at exactly those two slots.
    let mut f = Fifo::<u8, 4>::new();
    for v in [1, 2, 3, 4] {
        f.push(v).unwrap();
    }
    f.pop();
    f.pop();
    assert!(f.any(|&v| v == 3) && f.any(|&v| v == 4));
    assert!(!f.any(|&v| v < 3), "a popped slot");
}

#[test]
fn imm_matching_counts_what_it_cancels_drops_and_holds() {
    let t = OpTable::<8>::new();
    let mut w = RecvWindow::new(4);
    assert_eq!(w.depth(), 4);
    w.fill(|| true);
    let mut m = ImmMatch::<2, 4>::new();
    let (a, b) = (m.ask(&t).unwrap(), m.ask(&t).unwrap());
    assert_eq!((m.waiting(), m.queued()), (2, 0));
    assert_eq!(m.cancel_all(&t), (2, 0));
    assert_eq!(m.waiting(), 0);
    for h in [a, b] {
        assert_eq!(t.result(h), Some(Err(OpError::Cancelled)));
    }
    for imm in 0..3 {
        let _ = m.arrived(&t, &mut w, ImmEvent { imm, len: 7 }, || true);
    }
    assert_eq!((m.queued(), m.dropped()), (2, 1), "the third did not fit");
    assert_eq!(m.cancel_all(&t), (0, 2));
    assert_eq!((m.queued(), m.dropped()), (0, 3));
    let ev = ImmEvent { imm: 9, len: 5 };
    assert_eq!(ImmEvent::from_result(ev.to_result()), ev);
}

#[test]
fn a_waker_replaced_before_the_end_is_the_one_woken() {
    let (first, second) = (
        std::sync::Arc::new(Counter(AtomicUsize::new(0))),
        std::sync::Arc::new(Counter(AtomicUsize::new(0))),
    );
    let t = OpTable::<2>::new();
    let h = t.start().unwrap();
    assert_eq!(t.live_count(), 1);
    let mut f = pin!(t.future(h));
    for w in [&first, &first, &second] {
        let waker = Waker::from(w.clone());
        assert_eq!(
            f.as_mut().poll(&mut Context::from_waker(&waker)),
            Poll::Pending
        );
    }
    t.finish(h, Ok(1));
    assert_eq!(
        first.0.load(Ordering::Relaxed),
        0,
        "the replaced waker was woken"
    );
    assert_eq!(second.0.load(Ordering::Relaxed), 1);
    let text = format!("{t:?}");
    assert!(text.contains("Cellule") && text.contains("Done"), "{text}");
}

#[test]
fn a_lease_reports_a_failure_however_many_of_its_requests_failed() {
    let t = OpTable::<2>::new();
    let (words, mut pool) = (SlotTable::<2>::new(), SlotPool::<2>::new());
    let op = t.start().unwrap();
    let l = pool.lease(&words, op, 3).unwrap();
    assert_eq!((pool.tenant(l.slot), pool.leased_count()), (Some(op), 1));
    let wr = l.wr_id(2);
    assert_eq!(
        (wr.slot(), wr.generation(), wr.sub()),
        (l.slot, l.generation, 2)
    );
    assert_eq!(words.complete(l.wr_id(0), false), SlotCompletion::More);
    assert_eq!(words.complete(l.wr_id(1), false), SlotCompletion::More);
    assert_eq!(
        words.complete(l.wr_id(2), true),
        SlotCompletion::Last {
            slot: l.slot,
            failed: true
        },
        "two failures must not cancel out"
    );
    assert_eq!(pool.reclaim(&words, l.slot), Some((op, true)));
    assert_eq!((pool.tenant(l.slot), pool.leased_count()), (None, 0));
}
