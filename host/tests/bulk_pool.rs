//! Registered buffer pools: one registration on the sim fabric, buffers leased and
//! returned, descriptors and local buffers checked against the region; the verbs pool
//! on a real NIC (ignored without one).

use copyrpc_core::bulk::BulkError;
use copyrpc_host::bulk::BufferPool;
use copyrpc_host::fabric::{self, FabricKind, FabricOptions};

#[test]
fn a_sim_pool_registers_once_and_leases_its_buffers() {
    let f = fabric::open_sim(&FabricOptions::default()).unwrap();
    let mut pool = BufferPool::new(&f, "bulk-pool-test", 3, 4096).unwrap();
    let r = pool.region();
    assert_eq!(r.len, 3 * 4096);
    let bufs: Vec<_> = (0..3).map(|_| pool.lease().unwrap()).collect();
    assert!(pool.lease().is_none(), "three buffers, no fourth");
    let mut starts: Vec<u64> = bufs.iter().map(|b| pool.ptr(b) as u64).collect();
    starts.sort_unstable();
    assert_eq!(
        starts,
        [r.va, r.va + 4096, r.va + 8192],
        "disjoint, inside the region"
    );
    let d = pool.desc(&bufs[1], 4096).unwrap();
    assert_eq!((d.len, d.rkey), (4096, r.rkey));
    assert_eq!(pool.desc(&bufs[1], 4097), Err(BulkError::BeyondRegion));
    assert_eq!(pool.desc(&bufs[1], 0), Err(BulkError::ZeroLength));
    assert_eq!(pool.local(&bufs[2], 10).unwrap().lkey, r.lkey);
    for b in bufs {
        pool.release(b);
    }
    assert_eq!(pool.free_count(), 3);
    assert!(BufferPool::new(&f, "empty", 0, 4096).is_err());
}

/// A buffer given back to the wrong pool would join that pool's free list while its
/// own index there is still leased: the same bytes leased twice. Refused (a panic naming
/// both pools), in release builds too.
#[test]
fn a_buffer_of_another_pool_is_refused_not_leased_twice() {
    let f = fabric::open_sim(&FabricOptions::default()).unwrap();
    let mut put = BufferPool::new(&f, "bulk-pool-put", 2, 4096).unwrap();
    let mut get = BufferPool::new(&f, "bulk-pool-get", 2, 4096).unwrap();
    let g0 = get.lease().unwrap();
    let p0 = put.lease().unwrap();
    let foreign = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| get.release(p0)));
    let msg = foreign.expect_err("a foreign buffer was released");
    let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("used with pool"), "{msg}");
    // Nothing joined the free list: the next lease is the other buffer, not g0's bytes.
    let g1 = get.lease().unwrap();
    assert_ne!(get.ptr(&g1), get.ptr(&g0));
    assert!(get.lease().is_none(), "two buffers, both leased");
    let p1 = put.lease().unwrap();
    assert!(
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| get.ptr(&p1))).is_err(),
        "another pool's buffer described by this pool"
    );
}

#[test]
fn a_verbs_pool_without_a_device_is_never_built() {
    // No verbs fabric opens without a NIC, so no pool can be asked of one: the error
    // comes from the fabric, naming the fix.
    match fabric::open(FabricKind::Verbs, &FabricOptions::default()) {
        Err(e) => assert!(e.to_string().contains("sim"), "{e}"),
        Ok((f, _)) => {
            let pool = BufferPool::new(&f, "bulk-pool-verbs", 2, 1 << 20).unwrap();
            assert_eq!(pool.region().len, 2 << 20);
        }
    }
}

#[test]
#[ignore = "needs an mlx5 NIC: COPYRPC_TEST_DEVICE=mlx5_0 cargo test -p copyrpc-host --test bulk_pool -- --ignored"]
fn a_verbs_pool_registers_once_on_a_nic() {
    let dev = std::env::var("COPYRPC_TEST_DEVICE")
        .expect("COPYRPC_TEST_DEVICE names the NIC (ibv_devices)");
    let mut opts = FabricOptions::default();
    opts.verbs.device = Some(dev);
    let (f, _) = fabric::open(FabricKind::Verbs, &opts).unwrap();
    let mut pool = BufferPool::new(&f, "bulk-pool-verbs", 4, 1 << 20).unwrap();
    let r = pool.region();
    assert_eq!(r.len, 4 << 20);
    let b = pool.lease().unwrap();
    assert_eq!(pool.desc(&b, 1 << 20).unwrap().rkey, r.rkey);
    pool.release(b);
    assert_eq!(pool.free_count(), 4);
}
