//! benchkv's watchdog: the host's ([`copyrpc_host::watchdog`], which documents it), its
//! message starting `benchkv: rank <r>: error: gave up after ...`. The orchestrator arms
//! it before each wait on other ranks with what it waits for and a bound.

use std::ops::Deref;

pub use copyrpc_host::watchdog::PeerId;
// Named by the orchestrator's docs; the exit itself happens in the host's watchdog.
#[allow(unused_imports)]
pub use copyrpc_host::watchdog::EXIT_STUCK;

/// The watchdog of one benchkv rank (see the module docs). Dropping it stops its thread.
#[derive(Debug)]
pub struct Watchdog(copyrpc_host::watchdog::Watchdog);

impl Watchdog {
    /// A watchdog for rank `rank` that prints and exits with [`EXIT_STUCK`] when it fires.
    pub fn start(rank: usize) -> Self {
        Self(copyrpc_host::watchdog::Watchdog::start("benchkv", rank))
    }

    /// A watchdog that calls `fire(message)` instead (tests).
    #[cfg(test)]
    pub fn with_action(rank: usize, fire: copyrpc_host::watchdog::OnFire) -> Self {
        Self(copyrpc_host::watchdog::Watchdog::with_action(
            "benchkv", rank, fire,
        ))
    }
}

impl Deref for Watchdog {
    type Target = copyrpc_host::watchdog::Watchdog;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{mpsc, Mutex};
    use std::time::Duration;

    /// The chaos tests and the docs quote the line by its start.
    #[test]
    fn its_message_names_benchkv_the_rank_and_the_wait() {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let dog = Watchdog::with_action(
            2,
            Box::new(move |m| {
                let _ = tx.lock().unwrap().send(m.to_owned());
            }),
        );
        dog.arm("the barrier after the drain", Duration::from_millis(50));
        let msg = rx.recv_timeout(Duration::from_secs(30)).expect("fired");
        assert!(
            msg.starts_with("benchkv: rank 2: error: gave up after "),
            "{msg}"
        );
        assert!(
            msg.contains(" s waiting for the barrier after the drain: "),
            "{msg}"
        );
    }
}
