//! A live delegationrpc region in `/dev/shm`, read back as plain bytes from the file:
//! every field sits at the offset docs/spec/deleg.md#layout gives it.

use copyrpc_core::deleg::{Config, DelegRegion, MAGIC};
use copyrpc_host::shm::deleg::{DelegClient, DelegServer, ServerOptions};

type Req = [u64; 3]; // 24 B: request slot = align_up(16 + 24, 64) = 64
type Resp = [u64; 8]; // 64 B: response slot = align_up(8 + 64, 64) = 128

fn u8_at(b: &[u8], o: usize) -> u8 {
    b[o]
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

/// Field 22 of `/proc/<pid>/stat`: the process start time in clock ticks after boot.
fn start_time(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = s.rsplit_once(')').unwrap().1;
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

#[test]
fn live_region_fields_at_seed_offsets() {
    let name = format!("/copyrpc-layout-{}", std::process::id());
    let cfg = Config {
        max_clients: 3,
        ring_depth: 8,
        resp_depth: 4,
    };
    let mut server =
        DelegServer::<Req, Resp>::create(&name, cfg, ServerOptions::default()).unwrap();
    let _c0 = DelegClient::<Req, Resp>::connect(&name).unwrap();
    let mut c1 = DelegClient::<Req, Resp>::connect(&name).unwrap();
    assert_eq!(c1.id(), 1);
    c1.call(&[0x1111, 0x2222, 0x3333]).unwrap();
    c1.call(&[0x4444, 0x5555, 0x6666]).unwrap();

    let path = format!("/dev/shm{name}");
    let b = std::fs::read(&path).unwrap();
    let req_slot = 64;
    let resp_slot = 128;
    let resp_area = 256 + 8 * req_slot;
    assert_eq!(
        b.len(),
        DelegRegion::<Req, Resp>::required_len(&cfg).unwrap(),
        "file size"
    );
    assert_eq!(b.len(), resp_area + 3 * 4 * resp_slot + 3 * 128);
    // Header.
    assert_eq!(u64_at(&b, 0), MAGIC);
    assert_eq!(&b[0..8], &0x444C_4752_5043_5631u64.to_le_bytes());
    assert_eq!(u32_at(&b, 8), 2, "version (2: owner tokens)");
    assert_eq!(u32_at(&b, 12), 3, "max_clients");
    assert_eq!(u32_at(&b, 16), 8, "ring_depth");
    assert_eq!(u32_at(&b, 20), 4, "resp_depth");
    assert_eq!(u32_at(&b, 24), 2, "next_client_id");
    assert_eq!(u8_at(&b, 28), 1, "server_alive");
    assert_eq!(
        u32_at(&b, 32),
        std::process::id(),
        "server_owner (addition)"
    );
    assert_eq!(u32_at(&b, 40), 24, "req_size (addition)");
    assert_eq!(u32_at(&b, 44), 64, "resp_size (addition)");
    assert_eq!(
        u64_at(&b, 48),
        start_time(std::process::id()),
        "server_owner_token (addition): our start time"
    );
    // Ring control.
    assert_eq!(u64_at(&b, 128), 2, "head");
    assert_eq!(u64_at(&b, 192), 0, "tail");
    // Request slots 0 and 1.
    for (i, (p, slot)) in [
        ([0x1111u64, 0x2222, 0x3333], 0u32),
        ([0x4444, 0x5555, 0x6666], 1),
    ]
    .iter()
    .enumerate()
    {
        let s = 256 + i * req_slot;
        assert_eq!(u8_at(&b, s), 1, "committed");
        assert_eq!(u32_at(&b, s + 4), 1, "client_id");
        assert_eq!(u32_at(&b, s + 8), *slot, "resp_slot_idx");
        assert_eq!(
            u32_at(&b, s + 12),
            1,
            "claim word: writing, lap 0 (addition)"
        );
        for (k, v) in p.iter().enumerate() {
            assert_eq!(u64_at(&b, s + 16 + 8 * k), *v, "payload");
        }
    }
    assert_eq!(u8_at(&b, 256 + 2 * req_slot), 0, "slot 2 uncommitted");

    // Serve and answer the second request first.
    assert_eq!(server.poll(), 2);
    let first = server.recv().unwrap();
    let second = server.recv().unwrap();
    server.advance_tail();
    let resp: Resp = [7, 6, 5, 4, 3, 2, 1, 0xFF];
    server.reply(second.token, &resp).unwrap();

    let b = std::fs::read(&path).unwrap();
    assert_eq!(u64_at(&b, 192), 2, "tail after advance_tail");
    assert_eq!(u8_at(&b, 256), 0, "committed cleared");
    assert_eq!(u32_at(&b, 256 + 12), 2, "claim word: free for lap 1");
    // Response slot (client 1, slot 1) at resp_area + (1 * 4 + 1) * 128.
    let r = resp_area + (4 + 1) * resp_slot;
    assert_eq!(u8_at(&b, r), 1, "valid");
    assert_eq!(u8_at(&b, r + 1), 1, "pending (addition)");
    for (k, v) in resp.iter().enumerate() {
        assert_eq!(u64_at(&b, r + 8 + 8 * k), *v, "response payload");
    }
    let r0 = resp_area + 4 * resp_slot;
    assert_eq!(u8_at(&b, r0), 0, "slot 0 not answered yet");
    // Client table after the response area: entry 1 active, epoch 1, owner = us.
    let t = resp_area + 3 * 4 * resp_slot + 128;
    assert_eq!(u32_at(&b, t), 1 << 2 | 1, "state: epoch 1, Active");
    assert_eq!(u32_at(&b, t + 4), std::process::id(), "owner");
    assert_eq!(u64_at(&b, t + 8), u64::MAX, "drain_until: not retiring");
    assert_eq!(
        u64_at(&b, t + 16),
        start_time(std::process::id()),
        "owner_token: our start time"
    );
    assert_eq!(u64_at(&b, t + 64), 2, "claim_pos = last position + 1");

    let mut got = Vec::new();
    c1.poll(|s, r| got.push((s, r[0])));
    assert_eq!(got, [(1, 7)]);
    server.reply(first.token, &[1; 8]).unwrap();
    c1.poll(|s, r| got.push((s, r[0])));
    assert_eq!(got, [(1, 7), (0, 1)]);
}

/// Opening a region that does not exist names the OS error, not only the call.
#[test]
fn item6_shm_open_error_message_carries_errno_text() {
    let name = format!("/copyrpc-item6-missing-{}", std::process::id());
    let e = copyrpc_host::shm::ShmRegion::open(&name).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains(&name), "{msg}");
    assert!(
        msg.contains("No such file or directory (os error 2)"),
        "errno text missing: {msg}"
    );
}

/// A refused registration says why ("no free client id"), and so does a bad layout.
#[test]
fn item6_connect_error_message_carries_core_cause() {
    let name = format!("/copyrpc-item6-full-{}", std::process::id());
    let cfg = Config {
        max_clients: 1,
        ring_depth: 2,
        resp_depth: 1,
    };
    let _server = DelegServer::<Req, Resp>::create(&name, cfg, ServerOptions::default()).unwrap();
    let _only = DelegClient::<Req, Resp>::connect(&name).unwrap();
    let msg = DelegClient::<Req, Resp>::connect(&name)
        .unwrap_err()
        .to_string();
    assert!(msg.contains(&name), "{msg}");
    assert!(msg.contains("no free client id"), "cause missing: {msg}");
    let msg = DelegClient::<[u64; 5], Resp>::connect(&name)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("payloads of 24/64 bytes"),
        "cause missing: {msg}"
    );
}

/// Overwrites `bytes` at `offset` of `/dev/shm<name>`, as a crashed or foreign process
/// would have left them.
fn forge(name: &str, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/dev/shm{name}"))
        .unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

/// A process that lives until dropped, to lend a live pid that is not ours.
struct Sleeper(std::process::Child);

impl Sleeper {
    fn spawn() -> Self {
        Self(
            std::process::Command::new("sleep")
                .arg("60")
                .spawn()
                .unwrap(),
        )
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const SMALL: Config = Config {
    max_clients: 2,
    ring_depth: 2,
    resp_depth: 1,
};

/// A region left by an earlier process that had our pid (pids wrap): same pid at @32,
/// another start time at @48. It is stale: `create` replaces it when asked (benchkv
/// does) instead of refusing it as live, and clients refuse it.
#[test]
fn item4_region_left_under_our_own_pid_is_stale() {
    let name = format!("/copyrpc-item4-own-{}", std::process::id());
    // Keep the name and the bytes, as a killed process would.
    std::mem::forget(
        DelegServer::<Req, Resp>::create(&name, SMALL, ServerOptions::default()).unwrap(),
    );
    forge(
        &name,
        48,
        &(start_time(std::process::id()) + 1).to_le_bytes(),
    );
    match DelegClient::<Req, Resp>::connect(&name) {
        Err(copyrpc_host::error::Error::ShmStale { pid, .. }) => {
            assert_eq!(pid, std::process::id())
        }
        other => panic!("connect to a region of a dead process: {other:?}"),
    }
    match DelegServer::<Req, Resp>::create(&name, SMALL, ServerOptions::default()) {
        Err(copyrpc_host::error::Error::ShmStale { pid, .. }) => {
            assert_eq!(pid, std::process::id())
        }
        other => panic!("create over it without replace_stale: {other:?}"),
    }
    let opts = ServerOptions {
        replace_stale: true,
        ..ServerOptions::default()
    };
    let _s = DelegServer::<Req, Resp>::create(&name, SMALL, opts).unwrap();
    DelegClient::<Req, Resp>::connect(&name).unwrap();
}

/// A region whose recorded pid is alive but belongs to a process with another start
/// time is stale too.
#[test]
fn item4_region_of_live_pid_with_other_start_time_is_stale() {
    let name = format!("/copyrpc-item4-other-{}", std::process::id());
    let sleeper = Sleeper::spawn();
    let pid = sleeper.0.id();
    std::mem::forget(
        DelegServer::<Req, Resp>::create(&name, SMALL, ServerOptions::default()).unwrap(),
    );
    forge(&name, 32, &pid.to_le_bytes());
    forge(&name, 48, &(start_time(pid) + 1).to_le_bytes());
    assert!(matches!(
        DelegClient::<Req, Resp>::connect(&name),
        Err(copyrpc_host::error::Error::ShmStale { pid: p, .. }) if p == pid
    ));
    let opts = ServerOptions {
        replace_stale: true,
        ..ServerOptions::default()
    };
    let _s = DelegServer::<Req, Resp>::create(&name, SMALL, opts).unwrap();
}

/// The name-based sweep (benchkv's and the sim fabric's) removes regions named with a
/// reused pid: ours when this process did not create them, and a live pid's when the
/// file is older than that process. Regions this process created, and files younger
/// than their live pid, stay.
#[test]
fn item4_sweep_removes_regions_left_under_reused_pids() {
    use copyrpc_host::shm::{reap_dead_regions, ShmRegion};
    let me = std::process::id();
    let prefix = format!("copyrpc-item4sweep{me}x-");
    let dir = std::path::Path::new("/dev/shm");
    let ours = ShmRegion::create(&format!("/{prefix}{me}-live"), 4096).unwrap();
    std::fs::write(dir.join(format!("{prefix}{me}-forged")), b"old").unwrap();
    let sleeper = Sleeper::spawn();
    let other = sleeper.0.id();
    let old = dir.join(format!("{prefix}{other}-old"));
    let young = dir.join(format!("{prefix}{other}-young"));
    let f = std::fs::File::create(&old).unwrap();
    f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600))
        .unwrap();
    std::fs::write(&young, b"new").unwrap();

    assert_eq!(reap_dead_regions(dir, &prefix, '-'), 2);
    assert!(!dir.join(format!("{prefix}{me}-forged")).exists());
    assert!(!old.exists());
    assert!(
        young.exists(),
        "younger than its live pid: may be that process's"
    );
    assert!(
        dir.join(&ours.name()[1..]).exists(),
        "created by this process"
    );
    std::fs::remove_file(&young).unwrap();
    drop(ours);
}
