//! Zero heap allocations inside the model: a counting global allocator watches this
//! thread while the device and the driver run WRITE_IMM, READ and SEND exchanges, RNR
//! waits, an error with its flushes, and traced steps. (The crate is `no_std` without
//! `alloc`, so it cannot allocate; this shows it at run time, driver included.)

mod common;
mod counting_alloc;
mod sim_common;

use mlx5_raw::layout::FmCeSe;
use mlx5_raw::sim::{Trace, TraceEvent, TraceKind, TraceSink};
use mlx5_raw::{Payload, Remote};
use sim_common::{Opts, Rig};

/// The trace ring, and a count of RNR waits (to show the RNR path ran).
struct Tee {
    ring: Trace<[TraceEvent; 256]>,
    rnr: u32,
}

impl TraceSink for Tee {
    fn record(&mut self, e: TraceEvent) {
        self.rnr += u32::from(matches!(e.kind, TraceKind::RnrWait { .. }));
        self.ring.record(e);
    }
}

#[test]
fn the_data_path_allocates_nothing() {
    let mut r = Rig::new(Opts::default());
    let mut trace = Tee {
        ring: Trace::new([TraceEvent::EMPTY; 256]),
        rnr: 0,
    };
    let recv_sge = [r.b.sge(40_000, 4096)];
    let local = [r.a.sge(0, 3000)];
    let remote = r.b.remote(0);
    let bad = Remote {
        rkey: remote.rkey ^ 0x40,
        ..remote
    };
    let mut polled = 0u32;

    counting_alloc::watch(true);
    // Self-check: a watched allocation is counted.
    drop(std::hint::black_box(Box::new(1u8)));
    assert_eq!(counting_alloc::take(), 1);
    for i in 0..500u32 {
        let mut b = r.a.sq.batch();
        b.rdma_write_imm(
            remote,
            Payload::inline(&i.to_le_bytes()),
            i.to_be_bytes(),
            FmCeSe::CQ_UPDATE,
        )
        .unwrap();
        // SAFETY: both lists lie in the rig's registered regions and are not accessed
        // by the test before the completions.
        unsafe {
            b.rdma_read(remote, &local, FmCeSe::CQ_UPDATE).unwrap();
            b.send(Payload::gather(&local), FmCeSe::CQ_UPDATE).unwrap();
        }
        b.finish();
        if i % 50 == 0 {
            // The SRQ is empty: the WRITE_IMM meets RNR NAKs and waits.
            for _ in 0..30 {
                r.dev.step_traced(r.now, &mut trace);
                r.now += 1000;
            }
        }
        r.b.post_recv_sges(&recv_sge);
        r.b.post_recv_sges(&recv_sge);
        let (mut done, mut step) = (0, 0);
        while done < 3 {
            assert!(
                step < 10_000,
                "{done} of 3 send completions in {step} steps"
            );
            step += 1;
            r.dev.step_traced(r.now, &mut trace);
            r.now += 1000;
            while let Some(c) = r.a.scq.poll() {
                assert!(c.decode().unwrap().error.is_none());
                done += 1;
            }
            r.a.scq.update_ci();
            while let Some(c) = r.b.rcq.poll() {
                let idx = c.decode().unwrap().wqe_counter;
                r.b.srq.free(idx).unwrap();
                polled += 1;
            }
            r.b.rcq.update_ci();
        }
        let _ = r.a.sq.retire(r.a.sq.producer_index().wrapping_sub(1));
    }
    // An error and its flushes.
    let mut b = r.a.sq.batch();
    b.rdma_write(bad, Payload::inline(b"x"), FmCeSe::CQ_UPDATE)
        .unwrap();
    b.nop(FmCeSe::CQ_UPDATE).unwrap();
    b.finish();
    let (mut errors, mut step) = (0, 0);
    while errors < 2 {
        assert!(
            step < 10_000,
            "{errors} of 2 error completions in {step} steps"
        );
        step += 1;
        r.dev.step_traced(r.now, &mut trace);
        r.now += 1000;
        while let Some(c) = r.a.scq.poll() {
            assert!(c.decode().unwrap().error.is_some());
            errors += 1;
        }
        r.a.scq.update_ci();
    }
    counting_alloc::watch(false);

    assert_eq!(counting_alloc::take(), 0, "allocations in the data path");
    assert!(polled >= 1000);
    assert!(trace.ring.total() > 1000);
    assert!(trace.rnr >= 10, "RNR waits: {}", trace.rnr);
    // Formatting the trace is for humans, outside the data path.
    assert!(trace.ring.to_string().contains("FAILED") || trace.ring.to_string().contains("NAK"));
}
