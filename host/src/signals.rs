//! Ending on SIGINT, SIGTERM or SIGHUP without leaving `/dev/shm` regions behind.
//!
//! A process killed by one of these runs no destructor, so the regions it created (the
//! sim fabric's, delegation and ipc servers') stay in `/dev/shm` until the next copyrpc
//! process on the host sweeps them. Ctrl-C on `mpirun` is how most runs that do not
//! finish end (mpirun passes SIGTERM to the ranks), so a tool installs
//! [`unlink_regions_on_termination`] first thing in `main`.
//!
//! A thread waits for the signals synchronously (`sigwait`), so the clean-up is ordinary
//! code, not a signal handler: it may take locks and print. It unlinks, then ends the
//! process by the same signal with its default action, so the exit status (and what
//! `mpirun` reports) is what it would have been.

use std::io;

const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread and starts a thread that
/// takes them: on the first, it unlinks every region this process created
/// ([`crate::shm::unlink_created`]), prints one line to stderr naming `tool` and the
/// signal, and ends the process by that signal.
///
/// Call it before any other thread starts (before MPI is initialised): threads inherit
/// the blocked set, and a thread started earlier would take the signal with its default
/// action and no clean-up.
pub fn unlink_regions_on_termination(tool: &str) -> io::Result<()> {
    let set = signal_set()?;
    // SAFETY: `set` is an initialised signal set; a null old-set pointer is allowed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    let tool = tool.to_owned();
    std::thread::Builder::new()
        .name("shm-cleanup".into())
        .spawn(move || wait_and_end(&tool, set))?;
    Ok(())
}

fn signal_set() -> io::Result<libc::sigset_t> {
    // SAFETY: `sigset_t` is plain data; `sigemptyset` initialises it below.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a signal set; the signals are valid numbers.
    let ok = unsafe {
        libc::sigemptyset(&mut set) == 0
            && SIGNALS.iter().all(|&s| libc::sigaddset(&mut set, s) == 0)
    };
    if ok {
        Ok(set)
    } else {
        Err(io::Error::last_os_error())
    }
}

fn wait_and_end(tool: &str, set: libc::sigset_t) {
    let mut sig: libc::c_int = 0;
    // Waits for as long as the process lives: this thread exists only to take the
    // signals, and the process ends without joining it.
    // SAFETY: `set` is initialised and `sig` a valid out pointer.
    let rc = unsafe { libc::sigwait(&set, &mut sig) };
    if rc != 0 {
        // Only an invalid set fails (EINVAL), and `signal_set` made a valid one. Were it
        // to happen, the signals would stay blocked and be ignored: end loudly instead.
        eprintln!(
            "{tool}: sigwait failed: {}",
            io::Error::from_raw_os_error(rc)
        );
        std::process::abort();
    }
    let n = crate::shm::unlink_created();
    eprintln!(
        "{tool}: {}: removed {n} /dev/shm region(s) of pid {}",
        name(sig),
        std::process::id()
    );
    // SAFETY: restoring the default action, unblocking the signal in this thread and
    // raising it here ends the process as the signal would have (no handler runs).
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut one: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut one);
        libc::sigaddset(&mut one, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
        libc::raise(sig);
        // Not reached for these signals; if it were, end with the shell's status.
        libc::_exit(128 + sig);
    }
}

fn name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}
