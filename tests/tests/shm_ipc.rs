//! ipc across processes: one server and three client processes over a `/dev/shm`
//! region; one client is SIGKILLed mid-run, the server evicts it (its pid is gone) and
//! keeps serving the other two, all of whose requests are answered.
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

use copyrpc_core::ipc::{Config, IpcCallError};
use copyrpc_core::shm::ClientState;
use copyrpc_host::shm::ipc::{IpcClient, IpcServer};

type Req = [u64; 4];
type Resp = [u64; 4];

const ROLE: &str = "COPYRPC_SHM_IPC_ROLE";
const NAME: &str = "COPYRPC_SHM_IPC_NAME";
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
        r => panic!("unknown role {r}"),
    }
}

fn run_server(name: &str) {
    let cfg = Config {
        max_clients: 4,
        depth: 4,
    };
    let mut server = IpcServer::<Req, Resp>::create(name, cfg, false).unwrap();
    println!("READY");
    let deadline = Instant::now() + CHILD_DEADLINE;
    let mut next_seq = std::collections::HashMap::<(u32, u64), u64>::new();
    let mut last_reap = Instant::now();
    let mut held = Vec::new();
    let mut received = 0u64;
    loop {
        assert!(Instant::now() < deadline, "server deadline");
        if last_reap.elapsed() >= Duration::from_millis(5) {
            last_reap = Instant::now();
            server.reap_dead_clients();
        }
        if server.poll() == 0 {
            // Three spinning processes share two cores with whatever else runs: give
            // the clients the core rather than burn the time slice.
            std::thread::yield_now();
        }
        while let Some(h) = server.recv() {
            let [pid, seq, check, _] = h.payload;
            assert_eq!(check, check_word(pid, seq), "torn or foreign request");
            let want = next_seq.entry((h.client_id(), pid)).or_insert(0);
            assert_eq!(seq, *want, "request lost, duplicated or reordered");
            *want += 1;
            received += 1;
            held.push(h);
        }
        // Reply newest first: out of order on purpose.
        while let Some(h) = held.pop() {
            let resp = response_for(&h.payload);
            // A client that died or left meanwhile: its reply is refused, not misrouted.
            let _ = server.reply(h, &resp);
        }
        if next_seq.len() >= 3 && server.clients().all(|c| c.state == ClientState::Free) {
            break;
        }
    }
    println!("SERVER received={received}");
}

/// Answers before "PROGRESS"; survivors then wait for "GO" on stdin and make `CALLS` more.
const PROGRESS_AT: u64 = 1000;

fn wait_go() {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "GO");
}

fn run_client(name: &str, survivor: bool) {
    let mut c = IpcClient::<Req, Resp, u64>::connect(name).unwrap();
    let pid = std::process::id() as u64;
    let deadline = Instant::now() + CHILD_DEADLINE;
    let (mut next, mut answered) = (0u64, 0u64);
    let mut limit = PROGRESS_AT;
    loop {
        while answered < limit {
            assert!(Instant::now() < deadline, "client deadline");
            while next < limit {
                let req = [pid, next, check_word(pid, next), 0];
                match c.call(&req, next) {
                    Ok(()) => next += 1,
                    Err(IpcCallError::Full) => break,
                    Err(e) => panic!("call: {e}"),
                }
            }
            let got = c.poll(|seq, resp| {
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
    let name = format!("/copyrpc-mp-ipc-{}", std::process::id());
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
