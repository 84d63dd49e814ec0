//! Where things are: the NIC's NUMA node, from sysfs.
//!
//! Usable cores and pinning are in [`crate::affinity`].

use std::path::Path;

use crate::fabric::verbs::gid;

/// The NUMA node of RDMA device `device` (e.g. `mlx5_0`), from
/// `/sys/class/infiniband/<device>/device/numa_node`.
///
/// `None` when the file is absent (no such device, no RDMA in the kernel, a virtual
/// device), unreadable, or says `-1` (the platform reports no NUMA locality).
pub fn nic_numa_node(device: &str) -> Option<u32> {
    nic_numa_node_in(&class_dir(), device)
}

/// `/sys/class/infiniband`, under `$SYSFS_PATH` when libibverbs would use it
/// ([`gid::sysfs_root`]).
fn class_dir() -> std::path::PathBuf {
    gid::class_dir(&gid::sysfs_root())
}

/// [`nic_numa_node`] under another sysfs class directory (for tests).
pub fn nic_numa_node_in(class_dir: &Path, device: &str) -> Option<u32> {
    if !safe_name(device) {
        return None;
    }
    let text = std::fs::read_to_string(class_dir.join(device).join("device/numa_node")).ok()?;
    // "-1" (no locality) fails the u32 parse, as intended.
    text.trim().parse().ok()
}

/// The link layer of `device`'s `port` (`InfiniBand` or `Ethernet`), from
/// `/sys/class/infiniband/<device>/ports/<port>/link_layer`.
pub fn link_layer(device: &str, port: u8) -> Option<String> {
    link_layer_in(&class_dir(), device, port)
}

/// [`link_layer`] under another sysfs class directory (for tests).
pub fn link_layer_in(class_dir: &Path, device: &str, port: u8) -> Option<String> {
    if !safe_name(device) {
        return None;
    }
    let p = class_dir
        .join(device)
        .join("ports")
        .join(port.to_string())
        .join("link_layer");
    Some(std::fs::read_to_string(p).ok()?.trim().to_owned())
}

/// The CPUs of NUMA node `node`, from `/sys/devices/system/node/node<N>/cpulist`.
pub fn node_cpus(node: u32) -> Option<Vec<usize>> {
    let text =
        std::fs::read_to_string(format!("/sys/devices/system/node/node{node}/cpulist")).ok()?;
    parse_cpulist(&text)
}

/// A kernel CPU list (`0-3,8,10-11`) as CPU numbers; `None` if malformed.
pub fn parse_cpulist(text: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if a > b || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// `usable` with the cores in `near` first (in `usable`'s order), then the others: the
/// order in which to hand out cores so that the first threads (the daemons, which drive
/// the NIC) sit on the NIC's NUMA node.
pub fn near_first(usable: &[usize], near: &[usize]) -> Vec<usize> {
    let (mut a, b): (Vec<usize>, Vec<usize>) = usable.iter().partition(|c| near.contains(c));
    a.extend(b);
    a
}

fn safe_name(device: &str) -> bool {
    !(device.is_empty() || device.contains('/') || device == "." || device == "..")
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
        fs::create_dir_all(dir.join("mlx5_0/ports/1")).unwrap();
        fs::write(dir.join("mlx5_0/ports/1/link_layer"), "Ethernet\n").unwrap();
        assert_eq!(
            link_layer_in(&dir, "mlx5_0", 1).as_deref(),
            Some("Ethernet")
        );
        assert_eq!(link_layer_in(&dir, "mlx5_0", 2), None);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn cpulists_parse_and_near_cores_come_first() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpulist(""), Some(vec![]));
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("x"), None);
        assert_eq!(
            near_first(&[0, 1, 2, 3, 4, 5], &[4, 5, 9]),
            vec![4, 5, 0, 1, 2, 3]
        );
        assert_eq!(near_first(&[0, 1], &[]), vec![0, 1]);
        // This machine's node 0, if sysfs has one, lists CPUs.
        if let Some(c) = node_cpus(0) {
            assert!(!c.is_empty());
        }
    }

    #[test]
    fn absent_device_on_the_real_sysfs_is_none() {
        assert_eq!(nic_numa_node("copyrpc-no-such-device"), None);
    }
}
