//! What the multi-process shm tests (`tests/shm_deleg.rs`, `tests/shm_ipc.rs`) share: the
//! stamped payloads, child processes (the test binary re-executed with `--exact
//! role_entry` and environment variables naming the role and the region), the client
//! loop, and the kill-a-client scenario. Each test file keeps its protocol's server and
//! its own scenarios.
//!
//! Every payload is stamped (client pid, sequence, check word); the server checks each
//! request's stamp and per-client order, each client checks that every response answers
//! the request it sent — so a slot owned by two parties at once, a torn write or a
//! misrouted reply fails the run.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use copyrpc_core::ipc::IpcCallError;
use copyrpc_host::shm::ipc::IpcClient;

/// Request and response payload: `[pid, seq, check word, 0]` and its answer.
pub type Stamp = [u64; 4];

/// Calls each surviving client makes after the kill (the victim calls until killed).
pub const CALLS: u64 = 5_000;
/// Every child gives up (and fails) after this long.
pub const CHILD_DEADLINE: Duration = Duration::from_secs(25);
/// The parent's bound on the whole scenario.
pub const TEST_DEADLINE: Duration = Duration::from_secs(28);
/// Answers before "PROGRESS"; survivors then wait for "GO" on stdin and make `CALLS` more.
pub const PROGRESS_AT: u64 = 1000;

/// The check word of request `seq` of client `pid`.
pub fn check_word(pid: u64, seq: u64) -> u64 {
    pid.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seq.rotate_left(17)
}

/// Request `seq` of client `pid`.
pub fn request(pid: u64, seq: u64) -> Stamp {
    [pid, seq, check_word(pid, seq), 0]
}

/// The server's answer to `req`.
pub fn response_for(req: &Stamp) -> Stamp {
    [req[0], req[1], !req[2], req[1].wrapping_mul(3)]
}

/// The environment variables that tell a re-executed test binary its role and region.
#[derive(Debug, Clone, Copy)]
pub struct Roles {
    /// Variable naming the role.
    pub role: &'static str,
    /// Variable naming the region.
    pub name: &'static str,
}

impl Roles {
    /// `(role, region name)` when this process is a child, `None` in the parent test.
    pub fn current(&self) -> Option<(String, String)> {
        let role = std::env::var(self.role).ok()?;
        Some((role, std::env::var(self.name).unwrap()))
    }

    /// Starts this test binary as `role` on region `name`, with piped stdin and stdout.
    pub fn spawn(&self, role: &str, name: &str) -> Proc {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "role_entry", "--nocapture", "--test-threads=1"])
            .env(self.role, role)
            .env(self.name, name)
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
}

/// Removes a region name when dropped (after every child is gone: declared first, so
/// dropped last), whatever the test's outcome.
#[derive(Debug)]
pub struct UnlinkOnDrop(pub String);

impl Drop for UnlinkOnDrop {
    fn drop(&mut self) {
        let _ = copyrpc_host::shm::ShmRegion::unlink(&self.0);
    }
}

/// A child process and the lines of its stdout.
#[derive(Debug)]
pub struct Proc {
    /// The process.
    pub child: Child,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    /// Waits for a line containing `prefix` until `deadline`; returns it from `prefix` on.
    pub fn expect(&self, prefix: &str, deadline: Instant) -> String {
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
    pub fn finish(&mut self, deadline: Instant) -> std::process::ExitStatus {
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

/// What a call attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// The request is on its way.
    Yes,
    /// Not delivered; retry the same sequence number now.
    Retry,
    /// No room: poll first.
    Full,
}

/// A protocol's client as the stamped client loop drives it.
pub trait StampedClient {
    /// Sends request `seq` (`req` is its stamp); panics on an unexpected error.
    fn send(&mut self, seq: u64, req: &Stamp) -> Sent;
    /// Hands every response with its request's sequence number to `f`; returns how many.
    fn take(&mut self, f: &mut dyn FnMut(u64, &Stamp)) -> usize;
    /// A snapshot for the deadline's failure message.
    fn diagnostics(&self) -> String {
        String::new()
    }
}

/// The ipc client as the shm_ipc test uses it: the user data of a call is its sequence
/// number.
impl StampedClient for IpcClient<Stamp, Stamp, u64> {
    fn send(&mut self, seq: u64, req: &Stamp) -> Sent {
        match self.call(req, seq) {
            Ok(()) => Sent::Yes,
            Err(IpcCallError::Full) => Sent::Full,
            Err(e) => panic!("call: {e}"),
        }
    }

    fn take(&mut self, f: &mut dyn FnMut(u64, &Stamp)) -> usize {
        self.poll(|seq, resp| f(seq, resp))
    }
}

/// The client role: `PROGRESS_AT` answered calls, "PROGRESS", then (a survivor) waits for
/// "GO" and makes `CALLS` more and prints "DONE <n>", or (the victim) calls until killed.
pub fn run_client(c: &mut impl StampedClient, survivor: bool) {
    let pid = std::process::id() as u64;
    let deadline = Instant::now() + CHILD_DEADLINE;
    let (mut next, mut answered) = (0u64, 0u64);
    let mut limit = PROGRESS_AT;
    loop {
        while answered < limit {
            assert!(
                Instant::now() < deadline,
                "client deadline: {}",
                c.diagnostics()
            );
            while next < limit {
                match c.send(next, &request(pid, next)) {
                    Sent::Yes => next += 1,
                    Sent::Retry => {}
                    Sent::Full => break,
                }
            }
            let got = c.take(&mut |seq, resp| {
                let want = response_for(&request(pid, seq));
                assert_eq!(*resp, want, "response for another call");
            }) as u64;
            answered += got;
            if got == 0 {
                // Let the server run when the cores are oversubscribed: three spinning
                // processes share two cores with whatever else runs.
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

fn wait_go() {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "GO");
}

/// One server ("server" role, prints "READY" and at the end "SERVER ...") and three
/// clients on region `/<prefix>-<pid>`; the "victim" is SIGKILLed mid-run, after which
/// the two survivors make `CALLS` calls each, all answered. The server must unlink its
/// region on the way out.
pub fn killed_client_does_not_stop_the_others(roles: Roles, prefix: &str) {
    let deadline = Instant::now() + TEST_DEADLINE;
    let name = format!("/{prefix}-{}", std::process::id());
    // A server killed by a failing run cannot unlink its region; do it on the way out.
    let _cleanup = UnlinkOnDrop(name.clone());
    let mut server = roles.spawn("server", &name);
    server.expect("READY", deadline);
    let victim = roles.spawn("victim", &name);
    let mut clients: Vec<Proc> = (0..2).map(|_| roles.spawn("client", &name)).collect();
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
