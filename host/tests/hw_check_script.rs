//! `scripts/hw-check.sh` without a NIC: no device, no mlx5 device with an ACTIVE port,
//! and bad flags each end it with its reason (exit 1, or 2 for a flag), and `--list`
//! shows which device and port it would use. Sysfs comes from fixture trees through
//! `SYSFS_PATH`, as libibverbs reads it. Every run is bounded (`timeout`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/hw-check.sh")
}

fn run(sysfs: &Path, args: &[&str]) -> Output {
    Command::new("timeout")
        .args(["--kill-after=5", "60", "bash"])
        .arg(script())
        .args(args)
        .env("SYSFS_PATH", sysfs)
        .output()
        .expect("bash runs the script")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

struct Tree(PathBuf);

impl Tree {
    /// `devices`: name and the state of its port 1.
    fn new(tag: &str, devices: &[(&str, &str)]) -> Self {
        let root =
            std::env::temp_dir().join(format!("copyrpc-hwcheck-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("class/infiniband")).unwrap();
        for (name, state) in devices {
            let d = root.join("class/infiniband").join(name);
            let p = d.join("ports/1");
            std::fs::create_dir_all(p.join("gids")).unwrap();
            std::fs::create_dir_all(p.join("gid_attrs/types")).unwrap();
            std::fs::write(d.join("fw_ver"), "22.39.1002\n").unwrap();
            std::fs::write(p.join("state"), format!("{state}\n")).unwrap();
            std::fs::write(p.join("link_layer"), "Ethernet\n").unwrap();
            std::fs::write(
                p.join("gids/3"),
                "0000:0000:0000:0000:0000:ffff:0a00:0001\n",
            )
            .unwrap();
            std::fs::write(p.join("gid_attrs/types/3"), "RoCE v2\n").unwrap();
        }
        Self(root)
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn without_a_device_it_fails_with_the_reason() {
    let empty = Tree::new("empty", &[]);
    let out = run(&empty.0, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("FAIL: no RDMA device"),
        "{}",
        text(&out)
    );
    assert!(text(&out).contains("--fabric sim"), "{}", text(&out));
    let absent = empty.0.join("nothing-here");
    let out = run(&absent, &["--list"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
}

#[test]
fn it_picks_an_mlx5_device_whose_port_is_active() {
    let t = Tree::new(
        "pick",
        &[
            ("mlx5_0", "1: DOWN"),
            ("rxe0", "4: ACTIVE"),
            ("mlx5_1", "4: ACTIVE"),
        ],
    );
    let out = run(&t.0, &["--list", "--tclass", "106"]);
    let s = text(&out);
    assert_eq!(out.status.code(), Some(0), "{s}");
    assert!(s.contains("== using mlx5_1 port 1"), "{s}");
    assert!(s.contains("tclass 106"), "{s}");
    assert!(s.contains("firmware 22.39.1002"), "{s}");
    assert!(
        s.contains("gid 3 0000:0000:0000:0000:0000:ffff:0a00:0001 RoCE v2"),
        "{s}"
    );
    // Named, a device with its port down is refused, naming the state.
    let out = run(&t.0, &["--list", "--device", "mlx5_0"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("mlx5_0 has no ACTIVE port"),
        "{}",
        text(&out)
    );
    let out = run(&t.0, &["--list", "mlx5_9"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("no such RDMA device"), "{}", text(&out));
    // Every mlx5 port down: nothing to use, said so.
    let down = Tree::new("down", &[("mlx5_0", "1: DOWN"), ("rxe0", "4: ACTIVE")]);
    let out = run(&down.0, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("no mlx5 device with an ACTIVE port"),
        "{}",
        text(&out)
    );
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let t = Tree::new("flags", &[("mlx5_0", "4: ACTIVE")]);
    for (args, needle) in [
        (&["--tclass", "256"][..], "--tclass"),
        (&["--sl", "16"], "--sl"),
        (&["--port", "0"], "--port"),
        (&["--gid-index", "x"], "--gid-index"),
        (&["--hosts", "onlyone"], "--hosts"),
        (
            &["--hosts", "a,b", "--hostfile", "/etc/hostname"],
            "--hostfile",
        ),
        (&["--hostfile", "/nonexistent/hosts"], "--hostfile"),
        (&["--device", "../x"], "--device"),
        (&["--bogus"], "--bogus"),
        (&["--tclass"], "--tclass"),
    ] {
        let out = run(&t.0, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(needle), "{args:?}: {}", text(&out));
    }
}
