//! Which GID a RoCE port's QPs use, read from sysfs the way libibverbs reads it.
//!
//! The kernel lists a port's GID table under `<sysfs>/class/infiniband/<dev>/ports/<p>/`:
//! `gids/<i>` (the address), `gid_attrs/types/<i>` (`IB/RoCE v1` or `RoCE v2`; unreadable
//! on InfiniBand and for an empty slot) and `gid_attrs/ndevs/<i>` (the netdev the entry
//! belongs to). libibverbs reads the same files (`query_sysfs_gid`,
//! `query_sysfs_gid_type`, `query_sysfs_gid_ndev_ifindex` in libibverbs/cmd_device.c)
//! under `ibv_get_sysfs_path()`, which is `$SYSFS_PATH` when set, else `/sys`
//! (libibverbs/sysfs.c); [`sysfs_root`] does the same, so a test can point both at a
//! fixture tree.
//!
//! The choice ([`choose`]): RoCE v2 entries only (v1 is not routable, and index 0 of a
//! RoCE port is the v1 link-local entry), not empty, and not link-local (`fe80::/10`,
//! which a routed fabric drops) unless nothing else has an address; of those, the ones
//! on the port's own netdev (the netdev of entry 0, the port's default GID) when any
//! are; of those, the best address class: IPv4-mapped, then other IPv6. Two entries equally good (two IPv4 addresses on the
//! interface, or entries of two netdevs when the port's is unknown) are refused with
//! every candidate named: two hosts could otherwise pick mismatched entries.

use std::fmt;
use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};

/// The sysfs root libibverbs uses: `$SYSFS_PATH` (trailing slashes dropped) when set and
/// the process is not set-uid, else `/sys` (`ibv_get_sysfs_path` in libibverbs/sysfs.c).
pub fn sysfs_root() -> PathBuf {
    // SAFETY: getuid/geteuid read the process's credentials and cannot fail.
    let same = unsafe { libc::getuid() == libc::geteuid() };
    match std::env::var_os("SYSFS_PATH").filter(|_| same) {
        Some(p) if !p.is_empty() => {
            let s = p.to_string_lossy().trim_end_matches('/').to_owned();
            PathBuf::from(if s.is_empty() { "/".to_owned() } else { s })
        }
        _ => PathBuf::from("/sys"),
    }
}

/// `<root>/class/infiniband`.
pub fn class_dir(root: &Path) -> PathBuf {
    root.join("class/infiniband")
}

/// The RoCE version of an entry (`gid_attrs/types/<i>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GidType {
    /// `IB/RoCE v1`: InfiniBand's, or RoCE v1 (Ethernet-only, not routable).
    V1,
    /// `RoCE v2`: UDP/IP, routable.
    V2,
}

/// What an entry's address is, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AddrClass {
    /// `::ffff:a.b.c.d`: the interface's IPv4 address.
    Ipv4,
    /// Any other IPv6 address but link-local.
    Ipv6,
    /// `fe80::/10`: not routed.
    LinkLocal,
}

impl AddrClass {
    /// The class of `gid`.
    pub fn of(gid: &[u8; 16]) -> Self {
        if gid[..10].iter().all(|&b| b == 0) && gid[10..12] == [0xff, 0xff] {
            Self::Ipv4
        } else if gid[0] == 0xfe && gid[1] & 0xc0 == 0x80 {
            Self::LinkLocal
        } else {
            Self::Ipv6
        }
    }
}

/// One slot of a port's GID table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// Table index (`--gid-index`).
    pub index: u8,
    /// The address; all zero for an empty slot.
    pub gid: [u8; 16],
    /// `None` where the type file cannot be read (InfiniBand, an empty slot).
    pub ty: Option<GidType>,
    /// The netdev of the entry, if sysfs names one.
    pub netdev: Option<String>,
}

impl GidEntry {
    fn is_empty(&self) -> bool {
        self.gid == [0; 16]
    }
}

impl fmt::Display for GidEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ip = Ipv6Addr::from(self.gid);
        let ty = match self.ty {
            Some(GidType::V1) => "RoCE v1",
            Some(GidType::V2) => "RoCE v2",
            None => "no RoCE type",
        };
        write!(f, "index {} {ip} ({ty}", self.index)?;
        if let Some(v4) = ip.to_ipv4_mapped() {
            write!(f, ", IPv4 {v4}")?;
        }
        match &self.netdev {
            Some(n) => write!(f, ", netdev {n})"),
            None => write!(f, ", netdev unknown)"),
        }
    }
}

/// A port's GID table as sysfs lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GidTable {
    /// Slots in the table (`gids/0 ..= gids/<len - 1>`).
    pub len: usize,
    /// Every slot whose address could be read, by index.
    pub entries: Vec<GidEntry>,
    /// The port's own netdev: entry 0's (the default GID the kernel makes from the
    /// port's netdev), else the PCI function's only netdev (`device/net/`).
    pub port_netdev: Option<String>,
}

/// Reads a one-line sysfs attribute, trimmed; `None` if it cannot be read.
fn attr(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// Parses sysfs's `xxxx:xxxx:…` (eight groups) GID text.
fn parse_gid(text: &str) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    let groups: Vec<&str> = text.trim().split(':').collect();
    if groups.len() != 8 {
        return None;
    }
    for (i, g) in groups.iter().enumerate() {
        let v = u16::from_str_radix(g, 16).ok()?;
        out[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
    }
    Some(out)
}

fn safe_name(name: &str) -> bool {
    !(name.is_empty() || name.contains('/') || name == "." || name == "..")
}

/// The GID table of `device`'s `port` under `class` (`<root>/class/infiniband`);
/// `None` when sysfs has no such port (no device, no RDMA, a name with a `/`).
pub fn read_table(class: &Path, device: &str, port: u8) -> Option<GidTable> {
    if !safe_name(device) {
        return None;
    }
    let dir = class.join(device).join("ports").join(port.to_string());
    let listing = std::fs::read_dir(dir.join("gids")).ok()?;
    let len = listing
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<usize>().ok())
        .map(|i| i + 1)
        .max()
        .unwrap_or(0);
    let mut entries = Vec::new();
    for i in 0..len.min(256) {
        let Some(gid) = attr(&dir.join("gids").join(i.to_string())).and_then(|t| parse_gid(&t))
        else {
            continue;
        };
        let ty = attr(&dir.join("gid_attrs/types").join(i.to_string())).and_then(|t| {
            if t.eq_ignore_ascii_case("RoCE v2") {
                Some(GidType::V2)
            } else if t.eq_ignore_ascii_case("IB/RoCE v1") {
                Some(GidType::V1)
            } else {
                None
            }
        });
        let netdev = attr(&dir.join("gid_attrs/ndevs").join(i.to_string()));
        entries.push(GidEntry {
            index: i as u8,
            gid,
            ty,
            netdev,
        });
    }
    let port_netdev = entries
        .iter()
        .find(|e| e.index == 0)
        .and_then(|e| e.netdev.clone())
        .or_else(|| {
            let mut nets: Vec<String> = std::fs::read_dir(class.join(device).join("device/net"))
                .ok()?
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect();
            (nets.len() == 1).then(|| nets.remove(0))
        });
    Some(GidTable {
        len,
        entries,
        port_netdev,
    })
}

/// Why [`choose`] picked nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No RoCE v2 entry with an address.
    NoRoceV2,
    /// Several entries equally good: the candidates, for the user to pick one with
    /// `--gid-index`.
    Ambiguous(Vec<GidEntry>),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoRoceV2 => f.write_str(
                "its GID table has no RoCE v2 entry with an address (see `show_gids`); \
                 give the interface an IP address or pass --gid-index",
            ),
            Self::Ambiguous(c) => {
                f.write_str("its GID table has several equally good RoCE v2 entries (")?;
                for (i, e) in c.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{e}")?;
                }
                f.write_str("): pass --gid-index with the one every host should use")
            }
        }
    }
}

/// `--gid-index auto` on a RoCE port (see the module docs for the rule).
pub fn choose(table: &GidTable) -> Result<GidEntry, Refusal> {
    let v2: Vec<&GidEntry> = table
        .entries
        .iter()
        .filter(|e| e.ty == Some(GidType::V2) && !e.is_empty())
        .collect();
    // Link-local entries only when nothing else has an address: every netdev has one
    // (the kernel's default GIDs), so the netdev filter below would otherwise always
    // keep the port's link-local entry over a VLAN's routable one.
    let routable: Vec<&GidEntry> = v2
        .iter()
        .copied()
        .filter(|e| AddrClass::of(&e.gid) != AddrClass::LinkLocal)
        .collect();
    let v2 = if routable.is_empty() { v2 } else { routable };
    let on_port: Vec<&GidEntry> = match &table.port_netdev {
        Some(n) => v2
            .iter()
            .copied()
            .filter(|e| e.netdev.as_deref() == Some(n))
            .collect(),
        None => Vec::new(),
    };
    let pool = if on_port.is_empty() { v2 } else { on_port };
    let Some(best) = pool.iter().map(|e| AddrClass::of(&e.gid)).min() else {
        return Err(Refusal::NoRoceV2);
    };
    let top: Vec<&GidEntry> = pool
        .into_iter()
        .filter(|e| AddrClass::of(&e.gid) == best)
        .collect();
    match top.as_slice() {
        [one] => Ok((*one).clone()),
        many => Err(Refusal::Ambiguous(
            many.iter().map(|e| (*e).clone()).collect(),
        )),
    }
}

/// `--gid-index N` given: refused when `index` is past the table, an empty slot, or (on
/// a RoCE port, `ethernet`) not a RoCE v2 entry. Returns the entry when sysfs lists it.
pub fn check_index(table: &GidTable, index: u8, ethernet: bool) -> Result<GidEntry, String> {
    if usize::from(index) >= table.len {
        return Err(format!(
            "--gid-index {index} is past the port's GID table ({} entries, 0..={}; see `show_gids`)",
            table.len,
            table.len.saturating_sub(1)
        ));
    }
    let entry = table.entries.iter().find(|e| e.index == index);
    match entry {
        Some(e) if e.is_empty() => Err(format!(
            "--gid-index {index} is an empty slot of the port's GID table (see `show_gids`)"
        )),
        Some(e) if ethernet && e.ty == Some(GidType::V1) => Err(format!(
            "--gid-index {index} is a RoCE v1 entry ({e}); copyrpc runs RoCE v2: pick a \
             RoCE v2 index (see `show_gids`)"
        )),
        Some(e) if ethernet && e.ty != Some(GidType::V2) => Err(format!(
            "--gid-index {index} has no RoCE type in sysfs ({e}); pick a RoCE v2 index \
             (see `show_gids`)"
        )),
        Some(e) => Ok(e.clone()),
        None => Err(format!(
            "--gid-index {index}: the port's GID table entry cannot be read (see `show_gids`)"
        )),
    }
}

/// The RDMA device a run without `--device` would use, as far as sysfs tells: the only
/// device under `class`, if there is exactly one.
pub fn only_device(class: &Path) -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir(class)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    (names.len() == 1).then(|| names.remove(0))
}

/// The command line's GID flags against sysfs, before anything is opened: with the
/// device named (or the only one present) and its port RoCE, `--gid-index N` must be a
/// RoCE v2 entry of the table, and `auto` must find exactly one best entry. Sysfs
/// without the device or port (no NIC) passes: opening the fabric reports that.
pub fn check_flags(
    root: &Path,
    device: Option<&str>,
    port: u8,
    gid_index: Option<u8>,
) -> Result<(), String> {
    let class = class_dir(root);
    let Some(dev) = device.map(str::to_owned).or_else(|| only_device(&class)) else {
        return Ok(());
    };
    let Some(table) = read_table(&class, &dev, port) else {
        return Ok(());
    };
    let ethernet = attr(
        &class
            .join(&dev)
            .join("ports")
            .join(port.to_string())
            .join("link_layer"),
    )
    .is_some_and(|l| l.eq_ignore_ascii_case("Ethernet"));
    match gid_index {
        Some(i) => check_index(&table, i, ethernet)
            .map(drop)
            .map_err(|e| format!("{e} ({dev} port {port})")),
        None if ethernet => choose(&table)
            .map(drop)
            .map_err(|r| format!("--gid-index auto: {dev} port {port}: {r}")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A fixture sysfs root with one RoCE port: `(type, gid, netdev)` per slot (an empty
    /// type leaves the type file out, as for an empty slot), then `empty` zero slots.
    struct Fixture(PathBuf);

    impl Fixture {
        fn new(tag: &str, entries: &[(&str, &str, &str)], empty: usize) -> Self {
            let root =
                std::env::temp_dir().join(format!("copyrpc-gid-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&root);
            let port = root.join("class/infiniband/mlx5_0/ports/1");
            for d in ["gids", "gid_attrs/types", "gid_attrs/ndevs"] {
                fs::create_dir_all(port.join(d)).unwrap();
            }
            fs::write(port.join("link_layer"), "Ethernet\n").unwrap();
            for (i, (ty, gid, dev)) in entries.iter().enumerate() {
                fs::write(port.join("gids").join(i.to_string()), format!("{gid}\n")).unwrap();
                if !ty.is_empty() {
                    fs::write(
                        port.join("gid_attrs/types").join(i.to_string()),
                        format!("{ty}\n"),
                    )
                    .unwrap();
                }
                if !dev.is_empty() {
                    fs::write(
                        port.join("gid_attrs/ndevs").join(i.to_string()),
                        format!("{dev}\n"),
                    )
                    .unwrap();
                }
            }
            for i in entries.len()..entries.len() + empty {
                fs::write(port.join("gids").join(i.to_string()), format!("{ZERO}\n")).unwrap();
            }
            Self(root)
        }

        fn table(&self) -> GidTable {
            read_table(&class_dir(&self.0), "mlx5_0", 1).expect("the fixture's port")
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    const LL: &str = "fe80:0000:0000:0000:0a00:27ff:fe4e:66a1";
    const V4: &str = "0000:0000:0000:0000:0000:ffff:0a00:0001";
    const V4B: &str = "0000:0000:0000:0000:0000:ffff:c0a8:6401";
    const V6: &str = "2001:0db8:0000:0000:0a00:27ff:fe4e:66a1";
    const ZERO: &str = "0000:0000:0000:0000:0000:0000:0000:0000";
    const V1: &str = "IB/RoCE v1";
    const V2: &str = "RoCE v2";

    #[test]
    fn one_v2_entry_is_picked_and_printed_with_its_netdev() {
        let f = Fixture::new(
            "one",
            &[
                (V1, LL, "eth0"),
                (V2, LL, "eth0"),
                (V1, V4, "eth0"),
                (V2, V4, "eth0"),
            ],
            4,
        );
        let t = f.table();
        assert_eq!(t.len, 8);
        assert_eq!(t.port_netdev.as_deref(), Some("eth0"));
        let e = choose(&t).unwrap();
        assert_eq!(e.index, 3);
        let shown = e.to_string();
        assert!(
            shown.contains("::ffff:10.0.0.1")
                && shown.contains("IPv4 10.0.0.1")
                && shown.contains("RoCE v2")
                && shown.contains("netdev eth0"),
            "{shown}"
        );
        // Given by hand: a v2 entry passes, a v1 entry, an empty slot and an index past
        // the table are refused naming the flag.
        assert_eq!(check_index(&t, 3, true).unwrap().index, 3);
        let v1 = check_index(&t, 2, true).unwrap_err();
        assert!(
            v1.contains("--gid-index 2") && v1.contains("RoCE v1"),
            "{v1}"
        );
        let empty = check_index(&t, 5, true).unwrap_err();
        assert!(
            empty.contains("--gid-index 5") && empty.contains("empty"),
            "{empty}"
        );
        let past = check_index(&t, 8, true).unwrap_err();
        assert!(
            past.contains("--gid-index 8") && past.contains("8 entries"),
            "{past}"
        );
        // On InfiniBand only the range counts.
        assert!(check_index(&t, 2, false).is_ok());
    }

    #[test]
    fn ipv4_is_preferred_over_ipv6_and_link_local_is_the_last_resort() {
        let f = Fixture::new(
            "v4v6",
            &[
                (V1, LL, "eth0"),
                (V2, LL, "eth0"),
                (V2, V6, "eth0"),
                (V2, V4, "eth0"),
            ],
            0,
        );
        assert_eq!(choose(&f.table()).unwrap().index, 3);
        let f = Fixture::new(
            "v6",
            &[(V1, LL, "eth0"), (V2, LL, "eth0"), (V2, V6, "eth0")],
            0,
        );
        assert_eq!(choose(&f.table()).unwrap().index, 2);
        let f = Fixture::new("ll", &[(V1, LL, "eth0"), (V2, LL, "eth0")], 2);
        assert_eq!(choose(&f.table()).unwrap().index, 1);
        // Two IPv4 addresses on the interface: equally good, refused with both named.
        let f = Fixture::new(
            "twov4",
            &[
                (V1, LL, "eth0"),
                (V2, LL, "eth0"),
                (V2, V4, "eth0"),
                (V2, V4B, "eth0"),
            ],
            0,
        );
        let Err(Refusal::Ambiguous(c)) = choose(&f.table()) else {
            panic!("two IPv4 entries must be refused");
        };
        assert_eq!(c.iter().map(|e| e.index).collect::<Vec<_>>(), [2, 3]);
    }

    #[test]
    fn two_netdevs_keep_the_ports_own_or_are_refused_when_it_is_unknown() {
        // eth0 (the port's netdev: entry 0's) and a VLAN on it, each with an IPv4 address.
        let entries = [
            (V1, LL, "eth0"),
            (V2, LL, "eth0"),
            (V2, V4B, "eth0.100"),
            (V2, V4, "eth0"),
        ];
        let f = Fixture::new("twodev", &entries, 0);
        assert_eq!(choose(&f.table()).unwrap().index, 3);
        // Only the VLAN has an address: the port's netdev has no routable entry, so the
        // VLAN's is the one.
        let f = Fixture::new(
            "vlanonly",
            &[(V1, LL, "eth0"), (V2, LL, "eth0"), (V2, V4B, "eth0.100")],
            0,
        );
        assert_eq!(choose(&f.table()).unwrap().index, 2);
        // The port's netdev unknown (no entry 0 netdev, no device/net): refused, both
        // candidates named with their netdevs.
        let f = Fixture::new(
            "nodev",
            &[
                (V1, LL, ""),
                (V2, LL, ""),
                (V2, V4B, "eth0.100"),
                (V2, V4, "eth0"),
            ],
            0,
        );
        let t = f.table();
        assert_eq!(t.port_netdev, None);
        let r = choose(&t).unwrap_err();
        let text = r.to_string();
        assert!(
            text.contains("index 2") && text.contains("eth0.100") && text.contains("index 3"),
            "{text}"
        );
        assert!(text.contains("--gid-index"), "{text}");
    }

    #[test]
    fn no_v2_entry_is_refused_and_an_absent_port_is_none() {
        let f = Fixture::new("none", &[(V1, LL, "eth0"), (V1, V4, "eth0")], 2);
        assert_eq!(choose(&f.table()), Err(Refusal::NoRoceV2));
        assert!(Refusal::NoRoceV2.to_string().contains("--gid-index"));
        let class = class_dir(&f.0);
        assert_eq!(read_table(&class, "mlx5_9", 1), None);
        assert_eq!(read_table(&class, "mlx5_0", 2), None);
        assert_eq!(read_table(&class, "../mlx5_0", 1), None);
    }

    #[test]
    fn flags_are_checked_against_the_named_or_only_device() {
        let f = Fixture::new(
            "flags",
            &[
                (V1, LL, "eth0"),
                (V2, LL, "eth0"),
                (V1, V4, "eth0"),
                (V2, V4, "eth0"),
            ],
            1,
        );
        assert_eq!(check_flags(&f.0, None, 1, None), Ok(()));
        assert_eq!(check_flags(&f.0, Some("mlx5_0"), 1, Some(3)), Ok(()));
        for (i, needle) in [(0u8, "RoCE v1"), (4, "empty"), (9, "past")] {
            let e = check_flags(&f.0, None, 1, Some(i)).unwrap_err();
            assert!(
                e.contains(&format!("--gid-index {i}")) && e.contains(needle),
                "{e}"
            );
            assert!(e.contains("mlx5_0 port 1"), "{e}");
        }
        // Nothing known about the device or the port: left to the open.
        assert_eq!(check_flags(&f.0, Some("mlx5_7"), 1, Some(9)), Ok(()));
        assert_eq!(check_flags(&f.0, None, 2, Some(9)), Ok(()));
        let empty = std::env::temp_dir().join(format!("copyrpc-gid-void-{}", std::process::id()));
        assert_eq!(check_flags(&empty, None, 1, Some(9)), Ok(()));
    }

    #[test]
    fn address_classes() {
        assert_eq!(AddrClass::of(&parse_gid(V4).unwrap()), AddrClass::Ipv4);
        assert_eq!(AddrClass::of(&parse_gid(V6).unwrap()), AddrClass::Ipv6);
        assert_eq!(AddrClass::of(&parse_gid(LL).unwrap()), AddrClass::LinkLocal);
        assert_eq!(parse_gid("fe80::1"), None);
        assert_eq!(parse_gid("0000:0000"), None);
    }
}
