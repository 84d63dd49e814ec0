//! delegationrpc across processes: one server and three client processes over a
//! `/dev/shm` region; one client is SIGKILLed mid-run and the server keeps serving the
//! other two, all of whose requests are answered.
//!
//! The processes, the stamped payloads, the client loop and the kill scenario are
//! `copyrpc_tests::shm_rig`'s (shared with `shm_ipc.rs`); here are the delegationrpc
//! server and the scenarios only delegationrpc has.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use copyrpc_core::deleg::{CallError, Config};
use copyrpc_core::shm::ClientState;
use copyrpc_host::shm::deleg::{DelegClient, DelegServer, ServerOptions};
use copyrpc_tests::shm_rig::{
    check_word, response_for, run_client, Proc, Roles, Sent, Stamp, StampedClient, UnlinkOnDrop,
    CHILD_DEADLINE, TEST_DEADLINE,
};

type Req = Stamp;
type Resp = Stamp;

const ROLES: Roles = Roles {
    role: "COPYRPC_SHM_DELEG_ROLE",
    name: "COPYRPC_SHM_DELEG_NAME",
};

/// The child entry point; a no-op when run as an ordinary test.
#[test]
fn role_entry() {
    let Some((role, name)) = ROLES.current() else {
        return;
    };
    match role.as_str() {
        "server" => run_server(&name),
        "client" => run_client(&mut Stamped::connect(&name), true),
        "victim" => run_client(&mut Stamped::connect(&name), false),
        "idle_server" => run_idle_server(&name),
        "polling_server" => run_polling_server(&name),
        "holder" => run_holder(&name),
        r => panic!("unknown role {r}"),
    }
}

fn run_server(name: &str) {
    let cfg = Config {
        max_clients: 4,
        ring_depth: 16,
        resp_depth: 4,
    };
    let opts = ServerOptions {
        hole_timeout: Duration::from_millis(50),
        reap_interval: Duration::from_millis(5),
        replace_stale: false,
    };
    let mut server = DelegServer::<Req, Resp>::create(name, cfg, opts).unwrap();
    println!("READY");
    let deadline = Instant::now() + CHILD_DEADLINE;
    // Per client id and epoch: the next sequence number expected.
    let mut next_seq = std::collections::HashMap::<(u32, u64), u64>::new();
    let mut ever_registered = 0;
    loop {
        assert!(
            Instant::now() < deadline,
            "server deadline: {}",
            server.diagnostics()
        );
        if server.poll() == 0 {
            // Three spinning processes share two cores with whatever else runs: give
            // the clients the core rather than burn the time slice.
            std::thread::yield_now();
        }

        while let Some(e) = server.recv() {
            let [pid, seq, check, _] = e.payload;
            assert_eq!(check, check_word(pid, seq), "torn or foreign request");
            let want = next_seq.entry((e.token.client_id(), pid)).or_insert(0);
            assert_eq!(seq, *want, "request lost, duplicated or reordered");
            *want += 1;
            let resp = response_for(&e.payload);
            server.reply(e.token, &resp).unwrap();
        }
        server.advance_tail();
        let registered = next_seq.len();
        ever_registered = ever_registered.max(registered);
        // Done when three clients have called and none is registered any more.
        if ever_registered >= 3 && active_clients(&server) == 0 {
            break;
        }
    }
    let st = server.stats();
    println!(
        "SERVER received={} abandoned={} dropped={} reclaimed={}",
        st.received, st.abandoned, st.dropped, st.reclaimed
    );
}

fn active_clients(server: &DelegServer<Req, Resp>) -> usize {
    // Closed and evicted clients become Free once drained.
    server
        .clients()
        .filter(|c| c.state != ClientState::Free)
        .count()
}

/// A delegationrpc client with the request each of its four response slots answers.
struct Stamped {
    c: DelegClient<Req, Resp>,
    sent: [Option<u64>; 4],
}

impl Stamped {
    fn connect(name: &str) -> Self {
        Self {
            c: DelegClient::connect(name).unwrap(),
            sent: [None; 4],
        }
    }
}

impl StampedClient for Stamped {
    fn send(&mut self, seq: u64, req: &Stamp) -> Sent {
        if self.c.in_flight() >= 4 {
            return Sent::Full;
        }
        match self.c.call(req) {
            Ok(slot) => {
                assert!(self.sent[slot as usize].is_none(), "slot double-booked");
                self.sent[slot as usize] = Some(seq);
                Sent::Yes
            }
            // Not delivered; retry the same sequence number.
            Err(CallError::Abandoned) => Sent::Retry,
            Err(e) => panic!("call: {e}"),
        }
    }

    fn take(&mut self, f: &mut dyn FnMut(u64, &Stamp)) -> usize {
        let sent = &mut self.sent;
        self.c.poll(|slot, resp| {
            let seq = sent[slot as usize]
                .take()
                .expect("response on an idle slot");
            f(seq, resp);
        })
    }

    fn diagnostics(&self) -> String {
        self.c.diagnostics()
    }
}

#[test]
fn killed_client_does_not_stop_the_others() {
    if ROLES.current().is_none() {
        copyrpc_tests::shm_rig::killed_client_does_not_stop_the_others(ROLES, "copyrpc-mp-deleg");
    }
}

// ---- item 3, 8, 9: blocked waits end, corruption is reported, dead ids are reclaimed ----

/// A server that creates the region and never serves: its ring fills. It lives until
/// killed or until its stdin closes (the test process died).
fn run_idle_server(name: &str) {
    let cfg = Config {
        max_clients: 2,
        ring_depth: 2,
        resp_depth: 4,
    };
    let _server = DelegServer::<Req, Resp>::create(name, cfg, ServerOptions::default()).unwrap();
    println!("READY");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// A server that polls (and so frees retired ids) but whose own reaper never runs in the
/// test's time: only a connecting client can get a dead client's id freed quickly.
fn run_polling_server(name: &str) {
    let cfg = Config {
        max_clients: 3,
        ring_depth: 4,
        resp_depth: 1,
    };
    let opts = ServerOptions {
        reap_interval: Duration::from_secs(3600),
        ..ServerOptions::default()
    };
    let mut server = DelegServer::<Req, Resp>::create(name, cfg, opts).unwrap();
    println!("READY");
    let deadline = Instant::now() + CHILD_DEADLINE;
    while Instant::now() < deadline {
        if server.poll() == 0 {
            std::thread::yield_now();
        }
        while server.recv().is_some() {}
        server.advance_tail();
    }
}

/// A client that registers, says which id it got, and holds it until killed.
fn run_holder(name: &str) {
    let c = DelegClient::<Req, Resp>::connect(name).unwrap();
    println!("ID {}", c.id());
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// Reads a `u64` at `offset` of the region file.
fn peek(name: &str, offset: u64) -> u64 {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(format!("/dev/shm{name}")).unwrap();
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, offset).unwrap();
    u64::from_le_bytes(b)
}

/// Writes a `u64` at `offset` of the region file (shared with every mapping of it).
fn poke(name: &str, offset: u64, v: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/dev/shm{name}"))
        .unwrap();
    f.write_all_at(&v.to_le_bytes(), offset).unwrap();
}

const HEAD: u64 = 128;
const TAIL: u64 = 192;

/// Runs `f` on a thread; its result, or a panic naming `what` if it takes longer than
/// `bound` (the thread is left spinning: the point is that it would not return).
fn within<T: Send + 'static>(
    what: &str,
    bound: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(bound)
        .unwrap_or_else(|e| panic!("{what} did not return within {bound:?}: {e}"))
}

/// Waits until `cond` holds, or panics naming `what` after `bound`.
fn wait_until(what: &str, bound: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + bound;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {bound:?}");
        std::thread::yield_now();
    }
}

/// A client blocked on a full ring whose server is SIGKILLed (it never clears
/// `server_alive`) gets `ServerDisconnected`, within a bound.
#[test]
fn item3_blocked_client_gets_server_disconnected_after_sigkill() {
    if ROLES.current().is_some() {
        return;
    }
    let name = format!("/copyrpc-item3-{}", std::process::id());
    let _cleanup = UnlinkOnDrop(name.clone());
    let deadline = Instant::now() + TEST_DEADLINE;
    let mut server = ROLES.spawn("idle_server", &name);
    server.expect("READY", deadline);
    let mut c = DelegClient::<Req, Resp>::connect(&name).unwrap();
    // ring_depth 2: two calls fill it; the server never takes them.
    c.call(&[1; 4]).unwrap();
    c.call(&[2; 4]).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(c.call(&[3; 4]));
    });
    // The third call has claimed its position: it is in (or entering) the full-ring wait.
    wait_until(
        "third call claims a position",
        Duration::from_secs(5),
        || peek(&name, HEAD) == 3,
    );
    assert!(
        rx.try_recv().is_err(),
        "the third call must block while the server lives"
    );
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(r) => assert_eq!(r, Err(CallError::ServerDisconnected)),
        Err(e) => panic!("blocked call still waiting 5 s after the server was killed: {e}"),
    }
}

/// Garbage in a live ring's `tail` (past `head`) or `head` (far ahead, or behind the
/// client's own claims) is reported as `RingCorrupt` instead of a wait without end.
#[test]
fn item8_garbage_in_head_or_tail_gives_ring_corrupt() {
    if ROLES.current().is_some() {
        return;
    }
    let cfg = Config {
        max_clients: 2,
        ring_depth: 2,
        resp_depth: 4,
    };
    // (what is overwritten, calls made first, offset, value)
    let cases: [(&str, u64, u64, u64); 3] = [
        ("tail past head", 2, TAIL, 0xDEAD_BEEF_0000),
        ("head far ahead of tail", 2, HEAD, 0xDEAD_BEEF_0000),
        ("head behind our own claims", 1, HEAD, 0),
    ];
    for (i, (what, calls, offset, value)) in cases.into_iter().enumerate() {
        let name = format!("/copyrpc-item8-{}-{i}", std::process::id());
        let server =
            DelegServer::<Req, Resp>::create(&name, cfg, ServerOptions::default()).unwrap();
        let mut c = DelegClient::<Req, Resp>::connect(&name).unwrap();
        for k in 0..calls {
            c.call(&[k; 4]).unwrap();
        }
        poke(&name, offset, value);
        let r = within(what, Duration::from_secs(5), move || {
            let r = c.call(&[9; 4]);
            (r, r.map_err(|e| e.to_string()))
        });
        match r {
            (Err(e), Err(msg)) => {
                assert!(msg.contains("corrupt"), "{what}: {msg}");
                assert_eq!(format!("{e:?}"), "RingCorrupt", "{what}");
            }
            other => panic!("{what}: {other:?}"),
        }
        drop(server);
    }
}

/// The server does not turn a `head` overwritten below its cursor into holes to abandon
/// (it would run ahead of every future claim); it reports the ring corrupt.
#[test]
fn item8_server_reports_head_behind_cursor() {
    if ROLES.current().is_some() {
        return;
    }
    let name = format!("/copyrpc-item8-server-{}", std::process::id());
    let cfg = Config {
        max_clients: 1,
        ring_depth: 4,
        resp_depth: 4,
    };
    let opts = ServerOptions {
        hole_timeout: Duration::ZERO,
        ..ServerOptions::default()
    };
    let mut server = DelegServer::<Req, Resp>::create(&name, cfg, opts).unwrap();
    let mut c = DelegClient::<Req, Resp>::connect(&name).unwrap();
    c.call(&[1; 4]).unwrap();
    c.call(&[2; 4]).unwrap();
    assert_eq!(server.poll(), 2);
    while server.recv().is_some() {}
    server.advance_tail();
    poke(&name, HEAD, 0);
    for _ in 0..100_000 {
        server.poll();
        if server.ring_corrupt() {
            break;
        }
    }
    assert!(server.ring_corrupt(), "{}", server.diagnostics());
    assert_eq!(server.stats().abandoned, 0, "{}", server.diagnostics());
}

/// Every client id is held by a process; one is SIGKILLed; a new client attaches at once,
/// taking the dead one's id, although the server's own reaper has not run.
#[test]
fn item9_respawned_client_reclaims_a_dead_clients_id() {
    if ROLES.current().is_some() {
        return;
    }
    let name = format!("/copyrpc-item9-{}", std::process::id());
    let _cleanup = UnlinkOnDrop(name.clone());
    let deadline = Instant::now() + TEST_DEADLINE;
    let server = ROLES.spawn("polling_server", &name);
    server.expect("READY", deadline);
    let mut holders: Vec<(Proc, u32)> = (0..3)
        .map(|_| {
            let p = ROLES.spawn("holder", &name);
            let id = p.expect("ID ", deadline)[3..].parse().unwrap();
            (p, id)
        })
        .collect();
    let (mut victim, victim_id) = holders.remove(1);
    victim.child.kill().unwrap();
    victim.child.wait().unwrap();
    // The server's reaper runs once an hour, so only the connecting client can have
    // declared the dead id; `connect` gives up with `ClientIdNotFreed` after
    // `CONNECT_WAIT` otherwise. No clock is read here: a success near that bound on a
    // loaded machine is still a success.
    let c = DelegClient::<Req, Resp>::connect(&name)
        .unwrap_or_else(|e| panic!("the respawned client could not attach: {e}"));
    assert_eq!(c.id(), victim_id, "the dead client's id");
    drop(holders);
}
