//! Guard regions: the model never touches memory outside a registered region.
//!
//! Each side registers the middle page of a three-page buffer; all three pages start
//! filled with a pattern. A deterministic pseudo-random run of WRITEs, READs and SENDs
//! uses ranges inside, at the edges of, and straddling the registered page (local gather,
//! local scatter, remote target, receive scatter). After every operation the whole
//! buffer — guards included — must equal a shadow copy that applies exactly the
//! transfers that succeeded; every straddling range must fail with the syndrome the
//! reference gives, before any byte moves.

mod common;
mod sim_common;

use mlx5_raw::layout::{CqeOpcode, FmCeSe, Syndrome};
use mlx5_raw::sim::{Access, MrKeys};
use mlx5_raw::{Payload, Remote, Sge};
use sim_common::{pattern, Opts, Rig};

use common::DmaBuf;

const PAGE: usize = 4096;

struct Guarded {
    buf: DmaBuf,
    shadow: Vec<u8>,
}

impl Guarded {
    fn new(seed: u64) -> Self {
        let buf = DmaBuf::new(3 * PAGE);
        let shadow = pattern(seed, 3 * PAGE);
        buf.write(0, &shadow);
        Self { buf, shadow }
    }

    fn region(&self) -> *mut u8 {
        self.buf.ptr().wrapping_add(PAGE)
    }

    fn check(&self, what: &str) {
        let now = self.buf.read(0, 3 * PAGE);
        if let Some(i) = (0..3 * PAGE).find(|&i| now[i] != self.shadow[i]) {
            panic!(
                "{what}: byte {} of the {} differs",
                i as isize - PAGE as isize,
                if (PAGE..2 * PAGE).contains(&i) {
                    "region"
                } else {
                    "GUARD"
                }
            );
        }
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A length, mostly small, sometimes nearly a page.
    fn len(&mut self) -> u32 {
        match self.next() % 3 {
            0 => 1 + (self.next() % 64) as u32,
            1 => 1 + (self.next() % 3000) as u32,
            _ => (PAGE as u64 - self.next() % 8) as u32,
        }
    }
    /// An offset (from the region start) for `len` bytes: mostly inside, one time in
    /// eight starting before the region, one in eight running past its end.
    fn off(&mut self, len: u32) -> i64 {
        let room = PAGE as i64 - i64::from(len);
        let over = 1 + (self.next() % 64) as i64;
        match self.next() % 8 {
            0 => -over,
            1 => room + over,
            _ => (self.next() % (room as u64 + 1)) as i64,
        }
    }
}

fn inside(off: i64, len: u32) -> bool {
    off >= 0 && off + i64::from(len) <= PAGE as i64
}

fn setup(a: &Guarded, b: &Guarded) -> (Rig, MrKeys, MrKeys) {
    let mut r = Rig::new(Opts {
        mtu: 512,
        srq_stride: 64,
        ..Opts::default()
    });
    // SAFETY: the guarded buffers are declared before the rig in the test and so
    // outlive its device; the test reads them only between operations.
    let (ka, kb) = unsafe {
        (
            r.dev.reg_mr(r.pd, a.region(), PAGE, Access::ALL).unwrap(),
            r.dev.reg_mr(r.pd, b.region(), PAGE, Access::ALL).unwrap(),
        )
    };
    (r, ka, kb)
}

fn at(k: &MrKeys, off: i64) -> u64 {
    k.va.wrapping_add_signed(off)
}

#[test]
fn no_access_outside_registered_regions() {
    let mut ga = Guarded::new(1);
    let mut gb = Guarded::new(2);
    let (mut r, mut ka, mut kb) = setup(&ga, &gb);
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let iterations = if cfg!(miri) { 20 } else { 600 };
    let (mut ok, mut failed) = (0, 0);
    for i in 0..iterations {
        let op = rng.next() % 3;
        let len = rng.len();
        let (lo, ro) = (rng.off(len), rng.off(len));
        let local = [Sge {
            addr: at(&ka, lo),
            len,
            lkey: ka.lkey,
        }];
        let remote = Remote {
            addr: at(&kb, ro),
            rkey: kb.rkey,
        };
        if op == 2 {
            // The receive side scatters into b's region at `ro`.
            r.b.post_recv_sges(&[Sge {
                addr: remote.addr,
                len,
                lkey: kb.lkey,
            }]);
        }
        let mut b = r.a.sq.batch();
        // SAFETY: the entries name ka's region (or ranges the device must reject); the
        // test reads the buffers only after the completion.
        unsafe {
            match op {
                0 => b.rdma_write(remote, Payload::gather(&local), FmCeSe::CQ_UPDATE),
                1 => b.rdma_read(remote, &local, FmCeSe::CQ_UPDATE),
                _ => b.send(Payload::gather(&local), FmCeSe::CQ_UPDATE),
            }
        }
        .unwrap();
        b.finish();
        let c = r.a_sends(1);
        let (l_in, r_in) = (inside(lo, len), inside(ro, len));
        let what = format!("op {i}: kind {op} local {lo}+{len} remote {ro}+{len}");
        let want = match (l_in, r_in, op) {
            (false, _, _) => Some(Syndrome::LocalProtErr),
            (true, false, 2) => Some(Syndrome::RemoteOpErr),
            (true, false, _) => Some(Syndrome::RemoteAccessErr),
            (true, true, _) => None,
        };
        assert_eq!(c[0].error.map(|e| e.syndrome), want, "{what}\n{}", r.dump());
        if want.is_none() {
            ok += 1;
            let (l, rr) = (PAGE + lo as usize, PAGE + ro as usize);
            let n = len as usize;
            if op == 1 {
                let src = gb.shadow[rr..rr + n].to_vec();
                ga.shadow[l..l + n].copy_from_slice(&src);
            } else {
                let src = ga.shadow[l..l + n].to_vec();
                gb.shadow[rr..rr + n].copy_from_slice(&src);
            }
            if op == 2 {
                let rc = r.b_recvs(1);
                assert_eq!(rc[0].opcode, CqeOpcode::RespSend);
                r.b.srq.free(rc[0].wqe_counter).unwrap();
            }
        }
        ga.check(&what);
        gb.check(&what);
        if want.is_some() {
            failed += 1;
            // The QP is in ERR now: a fresh pair of QPs on a fresh device.
            drop(r);
            (r, ka, kb) = setup(&ga, &gb);
        }
    }
    assert!(
        ok > iterations / 4 && failed > iterations / 8,
        "ok {ok} failed {failed}"
    );
}
