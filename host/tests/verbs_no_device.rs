//! The `verbs` fabric with no RDMA device: a clear error that names the fix, and `auto`
//! falls back to `sim` and says so.
//!
//! libibverbs finds devices under `$SYSFS_PATH/class/infiniband_verbs` (default
//! `/sys`). This test points `SYSFS_PATH` at an empty directory before the first verbs
//! call, so it sees "no RDMA" on every machine, NIC or not: `ibv_get_device_list`
//! returns NULL with ENOSYS there, as it does on the CI machines, whose kernel has no
//! RDMA at all. It is the only test in this binary, so nothing else has touched
//! libibverbs (which reads the variable once) or the environment.

use copyrpc_host::error::Error;
use copyrpc_host::fabric::verbs::{self, Device, Probe, VerbsOptions};
use copyrpc_host::fabric::{self, FabricKind, FabricOptions};

#[test]
fn no_device_is_a_clear_error_and_auto_picks_sim() {
    let empty = std::env::temp_dir().join(format!("copyrpc-empty-sysfs-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    std::env::set_var("SYSFS_PATH", &empty);

    // The probe says why, in words.
    let Probe::NoDevice { detail } = verbs::probe().unwrap() else {
        panic!("an empty SYSFS_PATH must show no RDMA device");
    };
    assert!(detail.contains("ibv_get_device_list"), "{detail}");
    assert!(detail.contains("no RDMA support"), "{detail}");

    // Opening `verbs` fails with NoRdmaDevice, whose message names `--fabric sim`.
    for device in [None, Some("mlx5_0".to_owned())] {
        let opts = VerbsOptions {
            device,
            ..VerbsOptions::default()
        };
        let e = Device::open(&opts).unwrap_err();
        assert!(matches!(e, Error::NoRdmaDevice { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains("--fabric sim"), "{msg}");
        assert!(msg.contains("no RDMA device"), "{msg}");
    }
    let e = fabric::open(FabricKind::Verbs, &FabricOptions::default()).unwrap_err();
    assert!(matches!(e, Error::NoRdmaDevice { .. }), "{e:?}");
    assert!(e.to_string().contains("--fabric sim"), "{e}");

    // `auto` picks sim and says why.
    let sel = fabric::select(FabricKind::Auto, &FabricOptions::default()).unwrap();
    assert_eq!(sel.kind, FabricKind::Sim);
    assert!(sel.reason.contains("no RDMA device"), "{}", sel.reason);
    assert!(
        sel.reason.contains("software device model"),
        "{}",
        sel.reason
    );

    // Opening `auto` opens the device model.
    let (f, sel) = fabric::open(FabricKind::Auto, &FabricOptions::default()).unwrap();
    assert_eq!(sel.kind, FabricKind::Sim);
    assert!(matches!(f, fabric::Fabric::Sim(_)), "{f:?}");

    std::fs::remove_dir(&empty).unwrap();
}
