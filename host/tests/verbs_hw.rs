//! The `verbs` fabric on a real mlx5 NIC: objects, mlx5dv descriptions, INIT→RTR→RTS,
//! and one RDMA WRITE with immediate over a loopback QP pair driven by `mlx5_raw`.
//!
//! Ignored by default: they need a ConnectX (STYLE L13). Run them with
//!
//! ```text
//! COPYRPC_TEST_DEVICE=mlx5_0 [COPYRPC_TEST_PORT=1] [COPYRPC_TEST_GID_INDEX=3] \
//!     cargo test -p copyrpc-host --test verbs_hw -- --ignored --test-threads 1
//! ```
//!
//! (the GID index matters on RoCE: unset, the chooser picks the RoCE v2 entry of the
//! port's netdev, and refuses a tie). One test runs alone by name, e.g.
//! `... --test verbs_hw -- --ignored --exact qps_of_two_thread_domains_ring_different_blueflame_registers`.
//! `scripts/hw-check.sh` runs them all.

use std::time::{Duration, Instant};

use copyrpc_host::fabric::verbs::{Access, ConnectOptions, Device, QpOptions, VerbsOptions};
use mlx5_raw::layout::{CqeOpcode, FmCeSe};
use mlx5_raw::{Cq, Payload, Remote, Sq, SqConfig, Srq};

fn device() -> Device {
    let name = std::env::var("COPYRPC_TEST_DEVICE").unwrap_or_else(|_| {
        panic!(
            "COPYRPC_TEST_DEVICE is not set: these tests need an mlx5 NIC. Set it to a \
             device from `ibv_devices` (e.g. COPYRPC_TEST_DEVICE=mlx5_0), or do not pass \
             --ignored"
        )
    });
    // Unset: picked from the port's GID table (RoCE v2 on Ethernet, 0 on InfiniBand).
    let gid_index = std::env::var("COPYRPC_TEST_GID_INDEX").ok().map(|v| {
        v.parse()
            .expect("COPYRPC_TEST_GID_INDEX is a number 0..=255")
    });
    let port = std::env::var("COPYRPC_TEST_PORT").map_or(1, |v| {
        v.parse()
            .expect("COPYRPC_TEST_PORT is a port number 1..=255")
    });
    Device::open(&VerbsOptions {
        device: Some(name.clone()),
        port,
        gid_index,
        ..VerbsOptions::default()
    })
    .unwrap_or_else(|e| panic!("opening {name}: {e}"))
}

#[test]
#[ignore = "needs an mlx5 NIC: set COPYRPC_TEST_DEVICE"]
fn objects_have_drivable_descriptions() {
    let dev = device();
    let cq = dev.create_cq(256).unwrap();
    let d = cq.desc();
    assert!(d.cqe_cnt >= 256 && d.cqe_cnt.is_power_of_two());
    assert!(matches!(d.cqe_size, 64 | 128));
    let srq = dev.create_srq(128, 1).unwrap();
    let s = srq.desc();
    assert!(s.wqe_cnt >= 128 && s.head == 0 && s.tail == s.wqe_cnt - 1);
    let qp = dev
        .create_qp(&QpOptions::new(&cq, &cq, Some(&srq)))
        .unwrap();
    let q = qp.sq_desc();
    assert_eq!(q.stride, 64);
    assert!(q.wqe_cnt >= 512 && q.wqe_cnt.is_power_of_two());
    assert_eq!(q.qpn, qp.qpn());
    let mr = dev.alloc_mr("descriptions", 1 << 16, Access::RDMA).unwrap();
    assert_eq!(mr.len(), 1 << 16);
    assert_eq!(mr.endpoint().rkey, mr.rkey());
    // Every object is destroyed in a valid order by the Arcs, whatever the drop order.
    drop(cq);
    drop(srq);
    drop(dev);
    drop(qp);
    drop(mr);
}

/// What rdma-core does with thread domains (providers/mlx5/verbs.c): `mlx5_alloc_td`
/// takes one BlueFlame register for the domain (`mlx5_attach_dedicated_uar`), and
/// `mlx5_create_qp` gives every QP created on a parent domain of that domain the domain's
/// register (`bf = mparent_domain->mtd->bf`). `mlx5_insert_dyn_uuars` lists a fresh UAR
/// page's registers in order, `uar + MLX5_BF_OFFSET (0x800) + i * bf_reg_size` (0x800,
/// 0xa00 with the usual 512-byte `bf_reg_size`), so two domains normally ring two
/// registers of *one* 4 KiB UAR page: the registers differ, the pages need not.
/// Without BlueFlame (`bf_reg_size` 0) every domain gets the context's shared
/// non-cached UAR (`ctx->nc_uar`, `bf.size` 0), which the `SharedBf` lock serialises.
#[test]
#[ignore = "needs an mlx5 NIC: set COPYRPC_TEST_DEVICE"]
fn qps_of_two_thread_domains_ring_different_blueflame_registers() {
    let dev = device();
    let cq = dev.create_cq(256).unwrap();
    let srq = dev.create_srq(128, 1).unwrap();
    let domains = [dev.thread_domain().unwrap(), dev.thread_domain().unwrap()];
    // Past the 4 registers rdma-core dedicates to QPs made without a domain
    // (`MLX5_NUM_LOW_LAT_UUARS` defaults to 4, `get_num_low_lat_uuars` in mlx5.c; QP 5 on
    // shares registers, `mlx5_get_qp_uar`), so a register shared between the domains
    // would show.
    let mut by_domain: Vec<Vec<_>> = vec![Vec::new(), Vec::new()];
    for i in 0..40 {
        let td = &domains[i % 2];
        let qp = dev
            .create_qp(&QpOptions {
                thread_domain: Some(td),
                ..QpOptions::new(&cq, &cq, Some(&srq))
            })
            .unwrap();
        by_domain[i % 2].push(qp);
    }
    let regs = |qps: &[copyrpc_host::fabric::verbs::Qp]| {
        qps.iter()
            .map(|q| (q.sq_desc().bf_reg as usize, q.sq_desc().bf_size))
            .collect::<std::collections::BTreeSet<_>>()
    };
    let (a, b) = (regs(&by_domain[0]), regs(&by_domain[1]));
    // Every QP of a domain rings the domain's one register.
    assert_eq!(a.len(), 1, "one domain, several registers: {a:x?}");
    assert_eq!(b.len(), 1, "one domain, several registers: {b:x?}");
    let ((ra, sa), (rb, sb)) = (a.first().copied().unwrap(), b.first().copied().unwrap());
    assert!(ra != 0 && rb != 0, "no register: {ra:#x} {rb:#x}");
    if sa == 0 || sb == 0 {
        // No BlueFlame: both domains on the shared non-cached UAR, behind one lock.
        assert_eq!(
            (ra, sa),
            (rb, sb),
            "non-BlueFlame domains on different UARs"
        );
        assert_eq!(
            by_domain[0][0].sq_desc().bf_lock,
            by_domain[1][0].sq_desc().bf_lock,
            "one register, two locks"
        );
    } else {
        assert_ne!(ra, rb, "two thread domains ring one BlueFlame register");
    }
}

#[test]
#[ignore = "needs an mlx5 NIC: set COPYRPC_TEST_DEVICE"]
fn loopback_write_imm_through_mlx5_raw() {
    let dev = device();
    let mr = dev.alloc_mr("loopback", 4096, Access::RDMA).unwrap();
    let (scq_a, scq_b, rcq) = (
        dev.create_cq(64).unwrap(),
        dev.create_cq(64).unwrap(),
        dev.create_cq(64).unwrap(),
    );
    let srq = dev.create_srq(64, 1).unwrap();
    let a = dev
        .create_qp(&QpOptions::new(&scq_a, &rcq, Some(&srq)))
        .unwrap();
    let b = dev
        .create_qp(&QpOptions::new(&scq_b, &rcq, Some(&srq)))
        .unwrap();
    a.connect(&b.endpoint(), &ConnectOptions::default())
        .unwrap();
    b.connect(&a.endpoint(), &ConnectOptions::default())
        .unwrap();

    // SAFETY: the descriptions come from live objects that outlive these drivers (all
    // dropped at the end of this function, drivers first: declared later); nothing else
    // posts to the QP/SRQ or polls the CQs; nothing has been posted yet.
    let (mut sq, mut scq, mut rq_cq, mut rsrq) = unsafe {
        (
            Sq::new(&a.sq_desc(), SqConfig::COPYRPC).unwrap(),
            Cq::new(&scq_a.desc()).unwrap(),
            Cq::new(&rcq.desc()).unwrap(),
            Srq::new(&srq.desc(), mr.lkey()).unwrap(),
        )
    };
    assert_eq!(rsrq.post_batch(16).unwrap(), 16);

    let msg = b"copyrpc verbs loopback";
    let remote = Remote {
        addr: mr.as_ptr() as u64 + 1024,
        rkey: mr.rkey(),
    };
    let mut batch = sq.batch();
    let posted = batch
        .rdma_write_imm(remote, Payload::inline(msg), *b"imm!", FmCeSe::CQ_UPDATE)
        .unwrap();
    batch.finish();

    let deadline = Instant::now() + Duration::from_secs(5);
    let req = loop {
        if let Some(c) = scq.poll() {
            break c.decode().unwrap();
        }
        assert!(Instant::now() < deadline, "no requester CQE within 5 s");
        std::hint::spin_loop();
    };
    scq.update_ci();
    assert_eq!(req.opcode, CqeOpcode::Req, "{req:?}");
    assert_eq!(req.wqe_counter, posted.wqe_index);
    sq.retire_completion(&req).unwrap();

    let resp = loop {
        if let Some(c) = rq_cq.poll() {
            break c.decode().unwrap();
        }
        assert!(Instant::now() < deadline, "no responder CQE within 5 s");
        std::hint::spin_loop();
    };
    rq_cq.update_ci();
    assert_eq!(resp.opcode, CqeOpcode::RespWrImm, "{resp:?}");
    assert_eq!(resp.imm, Some(*b"imm!"));
    assert_eq!(resp.qpn, b.qpn());
    assert_eq!(resp.byte_cnt, msg.len() as u32);
    rsrq.free(resp.wqe_counter).unwrap();

    // SAFETY: the WRITE completed (responder CQE seen, which follows data placement);
    // no other writer targets these bytes.
    let landed = unsafe { std::slice::from_raw_parts(mr.as_ptr().add(1024), msg.len()) };
    assert_eq!(landed, msg);
}
