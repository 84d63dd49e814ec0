//! delegationrpc across processes: one server and three client processes over a
//! `/dev/shm` region; one client is SIGKILLed mid-run and the server keeps serving the
//! other two, all of whose requests are answered.
//!
//! The processes are this test binary re-executed with `--exact role_entry` and an
//! environment variable naming the role. Every payload is stamped (client pid, sequence,
//! check word); the server checks each request's stamp and per-client order, each client
//! checks that every response answers the request it sent on that slot — so a slot owned
//! by two parties at once, a torn write or a misrouted reply fails the run.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use copyrpc_core::deleg::{CallError, Config};
use copyrpc_core::shm::ClientState;
use copyrpc_host::shm::deleg::{DelegClient, DelegServer, ServerOptions};

type Req = [u64; 4];
type Resp = [u64; 4];

const ROLE: &str = "COPYRPC_SHM_DELEG_ROLE";
const NAME: &str = "COPYRPC_SHM_DELEG_NAME";
/// Calls each surviving client makes after the kill (the victim calls until killed).
const CALLS: u64 = 5_000;
/// Every child gives up (and fails) after this long.
const CHILD_DEADLINE: Duration = Duration::from_secs(25);
const TEST_DEADLINE: Duration = Duration::from_secs(28);

fn check_word(pid: u64, seq: u64) -> u64 {
    pid.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seq.rotate_left(17)
}

fn response_for(req: &Req) -> Resp {
    [req[0], req[1], !req[2], req[1].wrapping_mul(3)]
}

/// The child entry point; a no-op when run as an ordinary test.
#[test]
fn role_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let name = std::env::var(NAME).unwrap();
    match role.as_str() {
        "server" => run_server(&name),
        "client" => run_client(&name, true),
        "victim" => run_client(&name, false),
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

/// Answers before "PROGRESS"; survivors then wait for "GO" on stdin and make `CALLS` more.
const PROGRESS_AT: u64 = 1000;

fn wait_go() {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "GO");
}

fn run_client(name: &str, survivor: bool) {
    let mut c = DelegClient::<Req, Resp>::connect(name).unwrap();
    let pid = std::process::id() as u64;
    let deadline = Instant::now() + CHILD_DEADLINE;
    let mut sent: [Option<u64>; 4] = [None; 4];
    let (mut next, mut answered) = (0u64, 0u64);
    let mut limit = PROGRESS_AT;
    loop {
        while answered < limit {
            assert!(
                Instant::now() < deadline,
                "client deadline: {}",
                c.diagnostics()
            );
            while next < limit && c.in_flight() < 4 {
                let req = [pid, next, check_word(pid, next), 0];
                match c.call(&req) {
                    Ok(slot) => {
                        assert!(sent[slot as usize].is_none(), "slot double-booked");
                        sent[slot as usize] = Some(next);
                        next += 1;
                    }
                    // Not delivered; retry the same sequence number.
                    Err(CallError::Abandoned) => {}
                    Err(e) => panic!("call: {e}"),
                }
            }
            let got = c.poll(|slot, resp| {
                let seq = sent[slot as usize]
                    .take()
                    .expect("response on an idle slot");
                let want = response_for(&[pid, seq, check_word(pid, seq), 0]);
                assert_eq!(*resp, want, "response for another call");
            }) as u64;
            answered += got;
            if got == 0 {
                // Let the server run when the cores are oversubscribed (see run_server).
                std::thread::yield_now();
            }
        }
        if limit == PROGRESS_AT {
            println!("PROGRESS");
            limit = if survivor {
                wait_go();
                PROGRESS_AT + CALLS
            } else {
                // The victim calls until it is killed.
                u64::MAX
            };
            continue;
        }
        break;
    }
    println!("DONE {}", answered - PROGRESS_AT);
}

/// Removes a region name when dropped (after every child is gone: declared first, so
/// dropped last), whatever the test's outcome.
struct UnlinkOnDrop(String);

impl Drop for UnlinkOnDrop {
    fn drop(&mut self) {
        let _ = copyrpc_host::shm::ShmRegion::unlink(&self.0);
    }
}

struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
}

fn spawn(role: &str, name: &str) -> Proc {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "role_entry", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(NAME, name)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Proc { child, lines: rx }
}

impl Proc {
    /// Waits for a line containing `prefix` until `deadline`; returns it from `prefix` on.
    fn expect(&self, prefix: &str, deadline: Instant) -> String {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                // libtest prints "test role_entry ... " before the child's first line.
                Ok(l) if l.contains(prefix) => return l[l.find(prefix).unwrap()..].to_owned(),
                Ok(_) => {}
                Err(e) => panic!("no {prefix:?} line: {e}"),
            }
        }
    }

    /// Waits for exit until `deadline`; kills the process if it is still running.
    fn finish(&mut self, deadline: Instant) -> std::process::ExitStatus {
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let st = self.child.wait().unwrap();
                panic!("process {} did not exit in time ({st})", self.child.id());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Nothing outlives a failed test.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn killed_client_does_not_stop_the_others() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let deadline = Instant::now() + TEST_DEADLINE;
    let name = format!("/copyrpc-mp-deleg-{}", std::process::id());
    // A server killed by a failing run cannot unlink its region; do it on the way out.
    let _cleanup = UnlinkOnDrop(name.clone());
    let mut server = spawn("server", &name);
    server.expect("READY", deadline);
    let victim = spawn("victim", &name);
    let mut clients: Vec<Proc> = (0..2).map(|_| spawn("client", &name)).collect();
    let mut victim = victim;
    victim.expect("PROGRESS", deadline);
    for c in &clients {
        c.expect("PROGRESS", deadline);
    }
    // Kill the victim mid-run, wherever it is (possibly between claim and commit), and
    // reap it so its pid is gone.
    victim.child.kill().unwrap();
    victim.child.wait().unwrap();
    // Only now do the survivors make most of their calls: the server must serve them
    // after the kill.
    for c in clients.iter_mut() {
        use std::io::Write;
        writeln!(c.child.stdin.as_mut().unwrap(), "GO").unwrap();
    }
    for c in clients.iter_mut() {
        let done = c.expect("DONE", deadline);
        assert_eq!(done, format!("DONE {CALLS}"));
        assert!(c.finish(deadline).success());
    }
    let stats = server.expect("SERVER", deadline);
    assert!(server.finish(deadline).success(), "{stats}");
    println!("{stats}");
    assert!(
        !std::path::Path::new(&format!("/dev/shm{name}")).exists(),
        "server unlinked its region"
    );
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
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let name = format!("/copyrpc-item3-{}", std::process::id());
    let _cleanup = UnlinkOnDrop(name.clone());
    let deadline = Instant::now() + TEST_DEADLINE;
    let mut server = spawn("idle_server", &name);
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
    if std::env::var(ROLE).is_ok() {
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
    if std::env::var(ROLE).is_ok() {
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
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let name = format!("/copyrpc-item9-{}", std::process::id());
    let _cleanup = UnlinkOnDrop(name.clone());
    let deadline = Instant::now() + TEST_DEADLINE;
    let server = spawn("polling_server", &name);
    server.expect("READY", deadline);
    let mut holders: Vec<(Proc, u32)> = (0..3)
        .map(|_| {
            let p = spawn("holder", &name);
            let id = p.expect("ID ", deadline)[3..].parse().unwrap();
            (p, id)
        })
        .collect();
    let (mut victim, victim_id) = holders.remove(1);
    victim.child.kill().unwrap();
    victim.child.wait().unwrap();
    let t = Instant::now();
    let c = DelegClient::<Req, Resp>::connect(&name).unwrap();
    assert_eq!(c.id(), victim_id, "the dead client's id");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "attach took {:?}",
        t.elapsed()
    );
    drop(holders);
}
