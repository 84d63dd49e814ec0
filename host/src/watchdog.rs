//! Bounds every wait of a rank on the others. A collective (MPI barrier, all-gather) has no
//! timeout of its own below [`MpiExchange::timeout`](crate::exchange::MpiExchange::timeout)
//! (minutes), and a wait on a peer's replies none at all: a peer that is stopped (SIGSTOP),
//! hung or gone without `mpirun` noticing leaves the other ranks blocked. A tool *arms* the
//! watchdog before each such wait with what it waits for and a bound, and disarms it
//! after; if the bound passes first, the watchdog thread prints one line naming the tool,
//! the rank, the wait and what it can tell about each peer (on this host: running,
//! stopped, gone), removes this rank's `/dev/shm` regions, and ends the process with
//! [`EXIT_STUCK`]. Under `mpirun` that exit makes the launcher tear the whole job down,
//! the stopped peer included.
//!
//! The thread sleeps on a condition variable between arms: it costs nothing while the
//! rank works, and nothing on the data path goes through it. benchkv and `copyrpc-bulk`
//! use it.

use std::fmt::Write as _;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Exit status of a rank that gave up waiting for other ranks (the same as a job aborted
/// because a collective outlived its own bound).
pub const EXIT_STUCK: i32 = 3;

/// What every rank tells the others about itself at start, so a stuck wait can say which
/// peer is missing (the pid only means something on the same host).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct PeerId {
    /// The rank's process id.
    pub pid: u32,
    /// Explicit padding (zero).
    pub pad: u32,
    /// A hash of the host name and boot id: equal on the same host (and boot).
    pub host: u64,
}

impl PeerId {
    /// This process.
    pub fn me() -> Self {
        Self {
            pid: std::process::id(),
            pad: 0,
            host: host_id(),
        }
    }
}

/// FNV-1a of the host name and the boot id (both from `/proc`; empty if unreadable).
fn host_id() -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for f in [
        "/proc/sys/kernel/hostname",
        "/proc/sys/kernel/random/boot_id",
    ] {
        for b in std::fs::read(f).unwrap_or_default() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// What `/proc` says of a process on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcState {
    /// Runs or sleeps.
    Alive,
    /// Stopped by a signal or a debugger.
    Stopped,
    /// Exited, not yet reaped.
    Zombie,
    /// No such process.
    Gone,
}

/// The state of process `pid`, from `/proc` ([`crate::shm::proc_state`]).
pub fn proc_state(pid: u32) -> ProcState {
    match crate::shm::proc_state(pid) {
        Some('T' | 't') => ProcState::Stopped,
        Some('Z' | 'X' | 'x') => ProcState::Zombie,
        Some(_) => ProcState::Alive,
        None => ProcState::Gone,
    }
}

/// One sentence about each peer of `me` in `peers` (indexed by rank).
pub fn describe_peers(peers: &[PeerId], me: usize) -> String {
    let Some(mine) = peers.get(me) else {
        return "peers unknown (the wait came before the ranks exchanged their ids)".into();
    };
    let mut s = String::new();
    let mut suspects = Vec::new();
    for (r, p) in peers.iter().enumerate().filter(|&(r, _)| r != me) {
        let what = if p.host != mine.host {
            "on another host".to_string()
        } else {
            let st = proc_state(p.pid);
            if st != ProcState::Alive {
                suspects.push(r);
            }
            match st {
                ProcState::Alive => format!("pid {} running", p.pid),
                ProcState::Stopped => format!("pid {} STOPPED", p.pid),
                ProcState::Zombie => format!("pid {} EXITED", p.pid),
                ProcState::Gone => format!("pid {} GONE", p.pid),
            }
        };
        let _ = write!(
            s,
            "{}rank {r}: {what}",
            if s.is_empty() { "" } else { "; " }
        );
    }
    if s.is_empty() {
        return "no other ranks".into();
    }
    match suspects.as_slice() {
        [] => format!("peers: {s}"),
        [r] => format!("rank {r} is not making progress ({s})"),
        rs => format!("ranks {rs:?} are not making progress ({s})"),
    }
}

/// What the watchdog does when a bound passes: by default print and exit; tests collect.
pub type OnFire = Box<dyn Fn(&str) + Send>;

struct State {
    /// `(deadline, what, bound)` while armed.
    armed: Option<(Instant, String, Duration)>,
    peers: Vec<PeerId>,
    /// This rank's `/dev/shm` regions, removed before exiting.
    regions: Vec<String>,
    shutdown: bool,
}

/// The watchdog of one rank (see the module docs). Dropping it stops its thread.
pub struct Watchdog {
    shared: Arc<(Mutex<State>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Watchdog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchdog").finish_non_exhaustive()
    }
}

impl Watchdog {
    /// A watchdog for rank `rank` of `tool` (the name its message starts with) that
    /// prints and exits with [`EXIT_STUCK`] when it fires.
    pub fn start(tool: &'static str, rank: usize) -> Self {
        Self::with_action(
            tool,
            rank,
            Box::new(|msg| {
                eprintln!("{msg}");
                // The regions given to `set_regions` are gone; so must be every other
                // this process made (the sim fabric's), which no destructor will
                // remove after `_exit`. The mappings stay valid until the process ends.
                crate::shm::unlink_created();
                // _exit, not exit: another thread is blocked inside MPI, and MPI's exit
                // handlers could wait for it.
                // SAFETY: _exit has no preconditions; it ends the process at once.
                unsafe { libc::_exit(EXIT_STUCK) };
            }),
        )
    }

    /// A watchdog that calls `fire(message)` instead (tests).
    pub fn with_action(tool: &'static str, rank: usize, fire: OnFire) -> Self {
        let shared = Arc::new((
            Mutex::new(State {
                armed: None,
                peers: Vec::new(),
                regions: Vec::new(),
                shutdown: false,
            }),
            Condvar::new(),
        ));
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("{tool}-watchdog"))
            .spawn(move || watch(tool, rank, &s, &fire))
            .expect("spawning the watchdog thread");
        Self {
            shared,
            thread: Some(thread),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a test's action panicked; the state is still whole.
        self.shared.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a wait on `what`, to end within `bound` (replaces any armed wait).
    pub fn arm(&self, what: impl Into<String>, bound: Duration) {
        self.state().armed = Some((Instant::now() + bound, what.into(), bound));
        self.shared.1.notify_all();
    }

    /// Renames the armed wait, keeping its deadline (one bound over several steps).
    pub fn stage(&self, what: impl Into<String>) {
        if let Some((_, w, _)) = self.state().armed.as_mut() {
            *w = what.into();
        }
    }

    /// The wait ended in time.
    pub fn disarm(&self) {
        self.state().armed = None;
        self.shared.1.notify_all();
    }

    /// Every rank's id, for the message.
    pub fn set_peers(&self, peers: Vec<PeerId>) {
        self.state().peers = peers;
    }

    /// What the message would say of the peers now (for a tool's own error lines).
    pub fn describe_peers(&self, me: usize) -> String {
        describe_peers(&self.state().peers, me)
    }

    /// Regions to unlink before the process exits.
    pub fn set_regions(&self, regions: Vec<String>) {
        self.state().regions = regions;
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.state().shutdown = true;
        self.shared.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn watch(tool: &str, rank: usize, shared: &(Mutex<State>, Condvar), fire: &OnFire) {
    let (lock, cv) = shared;
    let mut st = lock.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if st.shutdown {
            return;
        }
        let wait = match &st.armed {
            None => None,
            Some((deadline, what, bound)) => {
                let now = Instant::now();
                if now >= *deadline {
                    let msg = format!(
                        "{tool}: rank {rank}: error: gave up after {:.1} s waiting for {what}: {}",
                        bound.as_secs_f64(),
                        describe_peers(&st.peers, rank)
                    );
                    for r in &st.regions {
                        let _ = crate::shm::ShmRegion::unlink(r);
                    }
                    st.armed = None;
                    fire(&msg);
                    continue;
                }
                Some(*deadline - now)
            }
        };
        st = match wait {
            None => cv.wait(st).unwrap_or_else(|e| e.into_inner()),
            Some(d) => cv.wait_timeout(st, d).unwrap_or_else(|e| e.into_inner()).0,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::sync::mpsc;

    fn collecting(rank: usize) -> (Watchdog, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let dog = Watchdog::with_action(
            "tool",
            rank,
            Box::new(move |m| {
                let _ = tx.lock().unwrap().send(m.to_owned());
            }),
        );
        (dog, rx)
    }

    #[test]
    fn an_armed_wait_that_outlives_its_bound_fires_once_naming_it() {
        let (dog, rx) = collecting(2);
        dog.arm("the barrier after the drain", Duration::from_millis(50));
        let msg = rx.recv_timeout(Duration::from_secs(30)).expect("fired");
        assert!(
            msg.starts_with("tool: rank 2: error: gave up after"),
            "{msg}"
        );
        assert!(msg.contains("the barrier after the drain"), "{msg}");
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "fired twice"
        );
    }

    #[test]
    fn a_disarmed_wait_never_fires_and_a_stage_keeps_the_deadline() {
        let (dog, rx) = collecting(0);
        dog.arm("setup", Duration::from_secs(3600));
        dog.disarm();
        dog.arm("drain", Duration::from_millis(50));
        dog.stage("gathering results");
        let msg = rx.recv_timeout(Duration::from_secs(30)).expect("fired");
        assert!(msg.contains("gathering results"), "{msg}");
        assert!(!msg.contains("drain"), "{msg}");
        drop(dog);
    }

    #[test]
    fn peers_are_described_by_what_proc_says() {
        let mut child = Command::new("sleep").arg("60").spawn().expect("sleep runs");
        let pid = child.id();
        let me = PeerId::me();
        let peer = PeerId { pid, ..me };
        let far = PeerId {
            host: me.host ^ 1,
            ..me
        };
        let peers = [me, peer, far];
        assert_eq!(proc_state(pid), ProcState::Alive);
        let s = describe_peers(&peers, 0);
        assert!(s.contains(&format!("rank 1: pid {pid} running")), "{s}");
        assert!(s.contains("rank 2: on another host"), "{s}");
        // SAFETY: kill on a child we own.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        // The stop is asynchronous: wait (bounded) until /proc shows it.
        let t0 = Instant::now();
        while proc_state(pid) != ProcState::Stopped {
            assert!(t0.elapsed() < Duration::from_secs(10), "never stopped");
            std::thread::yield_now();
        }
        let s = describe_peers(&peers, 0);
        assert!(s.starts_with("rank 1 is not making progress"), "{s}");
        assert!(s.contains("STOPPED"), "{s}");
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(proc_state(pid), ProcState::Gone);
        assert!(describe_peers(&peers, 0).contains("GONE"));
        assert!(describe_peers(&[], 0).contains("unknown"));
    }
}
