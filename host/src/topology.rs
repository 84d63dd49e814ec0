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
    link_layer_in(Path::new("/sys/class/infiniband"), device, port)
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

/// The GID index a RoCE port should use, as `show_gids` would pick it: the first RoCE v2
/// entry whose GID is neither all zero (an empty slot) nor IPv6 link-local (`fe80::/10`,
/// which a routed fabric drops); failing that, the first non-zero RoCE v2 entry. `None`
/// when the table has no RoCE v2 entry (an InfiniBand port, or no IP on the interface).
///
/// Why it matters: index 0 of a RoCE port is the RoCE v1 link-local entry; a QP using it
/// on a routed RoCE v2 fabric has its packets dropped and fails only after its retries.
pub fn roce_v2_gid_index(device: &str, port: u8) -> Option<u8> {
    roce_v2_gid_index_in(Path::new("/sys/class/infiniband"), device, port)
}

/// [`roce_v2_gid_index`] under another sysfs class directory (for tests).
pub fn roce_v2_gid_index_in(class_dir: &Path, device: &str, port: u8) -> Option<u8> {
    if !safe_name(device) {
        return None;
    }
    let dir = class_dir.join(device).join("ports").join(port.to_string());
    let mut fallback = None;
    for i in 0..=u8::MAX {
        let Ok(ty) = std::fs::read_to_string(dir.join("gid_attrs/types").join(i.to_string()))
        else {
            // The table's end (sysfs lists every slot up to the table size).
            if i > 0 && !dir.join("gids").join(i.to_string()).exists() {
                break;
            }
            continue;
        };
        if !ty.trim().eq_ignore_ascii_case("RoCE v2") {
            continue;
        }
        let Ok(gid) = std::fs::read_to_string(dir.join("gids").join(i.to_string())) else {
            continue;
        };
        let hex: String = gid.trim().chars().filter(|c| *c != ':').collect();
        if hex.is_empty() || hex.chars().all(|c| c == '0') {
            continue;
        }
        if hex.to_ascii_lowercase().starts_with("fe8") {
            fallback = fallback.or(Some(i));
            continue;
        }
        return Some(i);
    }
    fallback
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
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A RoCE port's table as a ConnectX with one IPv4 address shows it: v1 and v2
    /// link-local, then v1 and v2 of the IPv4-mapped address; an empty slot after.
    fn fake_gids(tag: &str, entries: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("copyrpc-gids-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let port = dir.join("mlx5_0/ports/1");
        fs::create_dir_all(port.join("gids")).unwrap();
        fs::create_dir_all(port.join("gid_attrs/types")).unwrap();
        fs::write(port.join("link_layer"), "Ethernet\n").unwrap();
        for (i, (ty, gid)) in entries.iter().enumerate() {
            fs::write(port.join("gids").join(i.to_string()), format!("{gid}\n")).unwrap();
            if !ty.is_empty() {
                fs::write(
                    port.join("gid_attrs/types").join(i.to_string()),
                    format!("{ty}\n"),
                )
                .unwrap();
            }
        }
        dir
    }

    const LL: &str = "fe80:0000:0000:0000:0a00:27ff:fe4e:66a1";
    const V4: &str = "0000:0000:0000:0000:0000:ffff:0a00:0001";
    const ZERO: &str = "0000:0000:0000:0000:0000:0000:0000:0000";

    #[test]
    fn roce_v2_picks_the_routable_entry_not_index_0() {
        let dir = fake_gids(
            "v2",
            &[
                ("IB/RoCE v1", LL),
                ("RoCE v2", LL),
                ("IB/RoCE v1", V4),
                ("RoCE v2", V4),
                ("", ZERO),
            ],
        );
        assert_eq!(roce_v2_gid_index_in(&dir, "mlx5_0", 1), Some(3));
        assert_eq!(
            link_layer_in(&dir, "mlx5_0", 1).as_deref(),
            Some("Ethernet")
        );
        fs::remove_dir_all(&dir).unwrap();

        // Only link-local v2: that one; an all-zero v2 slot is never picked.
        let dir = fake_gids(
            "ll",
            &[("IB/RoCE v1", LL), ("RoCE v2", ZERO), ("RoCE v2", LL)],
        );
        assert_eq!(roce_v2_gid_index_in(&dir, "mlx5_0", 1), Some(2));
        fs::remove_dir_all(&dir).unwrap();

        // An InfiniBand port (no types) or an absent device: none.
        let dir = fake_gids("ib", &[("", "fe80:0000:0000:0000:0002:c903:0031:7b61")]);
        assert_eq!(roce_v2_gid_index_in(&dir, "mlx5_0", 1), None);
        assert_eq!(roce_v2_gid_index_in(&dir, "mlx5_9", 1), None);
        assert_eq!(roce_v2_gid_index_in(&dir, "../x", 1), None);
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
