//! Raw RDMA WRITE and READ on an endpoint's QP beside the RPC traffic, counted to
//! completion, and counted as failed when the QP fails.

mod copyrpc_common;

use copyrpc_common::{big_stack, pattern, serve_echo, Opts, Pair};
use copyrpc_core::copyrpc::Error;
use mlx5_raw::{Remote, Sge};

type P = Pair<1, 64, 128>;

fn run_until_raw_done(p: &mut P) {
    let ea = p.a.eps[0];
    while p.a.ctx.raw_pending(ea) > 0 {
        p.a.ctx.poll(|_, _| {});
        p.b.ctx.poll(|_, _| {});
        serve_echo(&mut p.b.ctx);
        p.step();
        assert!(
            p.steps < 10_000,
            "raw operation never completed\n{}",
            p.dump()
        );
    }
}

fn read_bytes(ptr: *const u8, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    // SAFETY: `ptr..ptr + len` is scratch memory of a side that no device operation
    // targets any more (`raw_pending` is 0); no reference to it exists.
    unsafe { std::ptr::copy_nonoverlapping(ptr, v.as_mut_ptr(), len) };
    v
}

#[test]
fn raw_write_then_read_back_beside_rpc_traffic() {
    big_stack(|| {
        let mut p: P = Pair::new(Opts::new(1, 4096));
        let ea = p.a.eps[0];
        let data = pattern(42, 3000);
        // SAFETY: scratch memory, no device operation on it yet, no reference to it.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p.a.scratch_ptr(0), data.len()) };
        p.a.ctx.call_with_allowance(ea, b"beside", 8, 7).unwrap();
        let keys = (p.a.keys, p.b.keys);
        let to_b = Remote {
            addr: p.b.scratch(0),
            rkey: keys.1.rkey,
        };
        let src = [
            Sge {
                addr: p.a.scratch(0),
                len: 1000,
                lkey: keys.0.lkey,
            },
            Sge {
                addr: p.a.scratch(1000),
                len: 2000,
                lkey: keys.0.lkey,
            },
        ];
        // SAFETY: the gather entries lie in a's registered scratch area, unmodified
        // until `raw_pending` reaches 0.
        unsafe { p.a.ctx.post_rdma_write(ea, to_b, &src) }.unwrap();
        assert_eq!(p.a.ctx.raw_pending(ea), 1);
        run_until_raw_done(&mut p);
        assert_eq!(read_bytes(p.b.scratch_ptr(0), 3000), data);
        let dst = [Sge {
            addr: p.a.scratch(4096),
            len: 3000,
            lkey: keys.0.lkey,
        }];
        // SAFETY: the scatter entry lies in a's registered scratch area, which the test
        // leaves alone until `raw_pending` reaches 0.
        unsafe { p.a.ctx.post_rdma_read(ea, to_b, &dst) }.unwrap();
        run_until_raw_done(&mut p);
        assert_eq!(read_bytes(p.a.scratch_ptr(4096), 3000), data);
        assert_eq!(p.a.ctx.raw_completed(ea), (2, 0));
        assert_eq!(
            p.a.ctx.pending_calls(),
            0,
            "the RPC beside them completed too"
        );
    });
}

#[test]
fn raw_operations_on_a_failed_qp_count_as_failed() {
    big_stack(|| {
        let mut p: P = Pair::new(Opts::new(1, 4096));
        let ea = p.a.eps[0];
        p.dev.fail_qp(p.a.qpns[0]).unwrap();
        p.step();
        let dst = [Sge {
            addr: p.a.scratch(0),
            len: 64,
            lkey: p.a.keys.lkey,
        }];
        let from_b = Remote {
            addr: p.b.scratch(0),
            rkey: p.b.keys.rkey,
        };
        // SAFETY: a's scratch area, left alone until `raw_pending` reaches 0.
        unsafe { p.a.ctx.post_rdma_read(ea, from_b, &dst) }.unwrap();
        run_until_raw_done(&mut p);
        assert_eq!(p.a.ctx.raw_completed(ea), (1, 1));
        assert!(p.a.ctx.is_failed(ea));
    });
}

/// An endpoint tracks at most 64 raw operations in flight; the 65th is refused as
/// `SqFull` (before anything is posted), not posted untracked.
#[test]
fn a_raw_operation_past_the_sixty_four_in_flight_is_refused() {
    big_stack(|| {
        // A send queue with room for many more than 64, so the limit is the endpoint's.
        let mut p: P = Pair::new(Opts {
            sq_wqe_cnt: 1024,
            ..Opts::new(1, 4096)
        });
        let ea = p.a.eps[0];
        let to_b = Remote {
            addr: p.b.scratch(0),
            rkey: p.b.keys.rkey,
        };
        let src = [Sge {
            addr: p.a.scratch(0),
            len: 8,
            lkey: p.a.keys.lkey,
        }];
        for k in 0..64 {
            // SAFETY: the gather entry lies in a's registered scratch area, which the
            // test never writes.
            unsafe { p.a.ctx.post_rdma_write(ea, to_b, &src) }
                .unwrap_or_else(|e| panic!("raw write {k}: {e:?}"));
        }
        // SAFETY: as above.
        let e = unsafe { p.a.ctx.post_rdma_write(ea, to_b, &src) }.unwrap_err();
        assert_eq!(e, Error::SqFull);
        assert_eq!(p.a.ctx.raw_pending(ea), 64);
        // `poll` counts what it handled: here 64 send completions and nothing else.
        let mut handled = 0;
        while p.a.ctx.raw_pending(ea) > 0 {
            handled += p.a.ctx.poll(|_, _| unreachable!("no call was made"));
            p.step();
            assert!(p.steps < 10_000, "raw writes never completed\n{}", p.dump());
        }
        assert_eq!(handled, 64);
        assert_eq!(p.a.ctx.raw_completed(ea), (64, 0));
    });
}
