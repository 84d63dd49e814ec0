//! Where things are: the NIC's NUMA node, from sysfs.
//!
//! Usable cores and pinning are in [`crate::affinity`].

use std::path::Path;

/// The NUMA node of RDMA device `device` (e.g. `mlx5_0`), from
/// `/sys/class/infiniband/<device>/device/numa_node`.
///
/// `None` when the file is absent (no such device, no RDMA in the kernel, a virtual
/// device), unreadable, or says `-1` (the platform reports no NUMA locality).
pub fn nic_numa_node(device: &str) -> Option<u32> {
    nic_numa_node_in(Path::new("/sys/class/infiniband"), device)
}

/// [`nic_numa_node`] under another sysfs class directory (for tests).
pub fn nic_numa_node_in(class_dir: &Path, device: &str) -> Option<u32> {
    if device.is_empty() || device.contains('/') || device == "." || device == ".." {
        return None;
    }
    let text = std::fs::read_to_string(class_dir.join(device).join("device/numa_node")).ok()?;
    // "-1" (no locality) fails the u32 parse, as intended.
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::PathBuf;

    fn fake_class(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("copyrpc-topology-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        for (dev, node) in [("mlx5_0", "1\n"), ("mlx5_1", "-1\n"), ("mlx5_2", "garbage")] {
            fs::create_dir_all(dir.join(dev).join("device")).unwrap();
            fs::write(dir.join(dev).join("device/numa_node"), node).unwrap();
        }
        dir
    }

    #[test]
    fn reads_the_node_and_maps_unknown_to_none() {
        let dir = fake_class("read");
        assert_eq!(nic_numa_node_in(&dir, "mlx5_0"), Some(1));
        assert_eq!(
            nic_numa_node_in(&dir, "mlx5_1"),
            None,
            "-1 means no locality"
        );
        assert_eq!(nic_numa_node_in(&dir, "mlx5_2"), None);
        assert_eq!(nic_numa_node_in(&dir, "mlx5_9"), None, "absent device");
        assert_eq!(nic_numa_node_in(&dir, "../mlx5_0"), None, "no path escapes");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn absent_device_on_the_real_sysfs_is_none() {
        assert_eq!(nic_numa_node("copyrpc-no-such-device"), None);
    }
}
