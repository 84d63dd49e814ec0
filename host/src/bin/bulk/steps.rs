//! The order both ranks keep, so that every wait on the other is bounded and each
//! rank knows when the other has given up.
//!
//! Before each transfer step (one pattern at one size) the ranks exchange a [`Mark`]:
//! the step they are at, ready. The client's mark comes after it has prepared the
//! step's buffers, so the server's wait for the step's first request starts when that
//! request is due, not while the client is still filling gigabytes (a 1 GiB put with
//! `--deadline-s 5` used to end at 38 s, the server having given up on "no request"
//! long before, and the deadline test failed on a loaded machine the same way).
//! Preparation has a bound of its own, [`PREPARE`]. A rank that fails says so in its
//! last exchange ([`Steps::end`]); whoever sees an end, or a step other than its own,
//! stops exchanging, so both ranks make the same number of exchanges.
//!
//! Each exchange is armed on the watchdog: a peer that never comes (stopped, hung) ends
//! this rank with exit 3 and a line naming the wait and the peer's state.

use std::time::Duration;

use copyrpc_host::exchange::MpiExchange;
use copyrpc_host::watchdog::Watchdog;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Slack over a bound the peer keeps on its side: its own deadline ends its wait, then
/// it needs a moment to reach the exchange.
pub const MARGIN: Duration = Duration::from_secs(5);

/// The bound on set-up (the identity and endpoint exchanges, bringing the QP up).
pub const SETUP: Duration = Duration::from_secs(60);

/// The most a rank may take to prepare a step's buffers (the pools, and filling and
/// checksumming up to 1 GiB: seconds when optimised, tens of seconds unoptimised on a
/// loaded machine). Not part of `--deadline-s`, which bounds the transfers: the
/// server's wait for a step's requests starts once they are prepared.
pub const PREPARE: Duration = Duration::from_secs(60);

/// A rank's word in an exchange.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Mark {
    /// The step this rank is at, or [`END`].
    pub step: u32,
    /// 1: ready (at the end: done without failure); 0: failed.
    pub ok: u32,
}

/// The step of a rank's last exchange.
pub const END: u32 = u32::MAX;

/// The exchanges of one rank with the other (module docs).
pub struct Steps<'a> {
    x: &'a MpiExchange,
    dog: &'a Watchdog,
    rank: usize,
    /// `--deadline-s`: the peer's bound on its wait for one transfer.
    deadline: Duration,
    /// This rank made its last exchange.
    done: bool,
}

impl<'a> Steps<'a> {
    /// Exchanges for `rank` over `x`, armed on `dog`; `deadline` bounds the peer's wait
    /// on one transfer (`--deadline-s`).
    pub fn new(x: &'a MpiExchange, dog: &'a Watchdog, rank: usize, deadline: Duration) -> Self {
        Self {
            x,
            dog,
            rank,
            deadline,
            done: false,
        }
    }

    /// The other rank.
    pub const fn peer(&self) -> usize {
        1 - self.rank
    }

    /// What `/proc` says of the peer now, for a failure's message.
    pub fn peer_state(&self) -> String {
        self.dog.describe_peers(self.rank)
    }

    /// The exchange before step `step` (`what`: its pattern and size), this rank ready
    /// for it. `Ok(())`: so is the peer, the step runs. `Err`: why the peer ended the
    /// run here, this being both ranks' last exchange.
    pub fn ready(&mut self, step: u32, what: &str) -> Result<(), String> {
        let mine = Mark { step, ok: 1 };
        let wait = format!(
            "rank {} to be ready for {what} (step {} of the run: preparing its buffers, or \
             ending its wait on the step before)",
            self.peer(),
            step + 1
        );
        // The peer may still be waiting out a transfer of the step before, or preparing
        // this one's buffers.
        let peer = self.exchange(&mine, wait, PREPARE + self.deadline + MARGIN)?;
        match peer {
            Mark { step: s, ok: 1 } if s == step => Ok(()),
            Mark { step: END, .. } => Err(format!(
                "rank {} ended the run before {what} (its line says why)",
                self.peer()
            )),
            Mark { step: s, ok: 1 } => Err(format!(
                "rank {} was at step {} where this rank was at step {} ({what}): the ranks \
                 run different --pattern or --sizes",
                self.peer(),
                s.saturating_add(1),
                step + 1
            )),
            Mark { .. } => Err(format!(
                "rank {} could not get ready for {what} (its line says why)",
                self.peer()
            )),
        }
    }

    /// This rank's last exchange, unless an earlier one was: `ok` says whether it
    /// failed. Returns whether the peer ended without failure.
    pub fn end(&mut self, ok: bool) -> Result<bool, String> {
        if self.done {
            return Ok(true);
        }
        let wait = format!(
            "rank {} to finish its part (the run's last exchange)",
            self.peer()
        );
        let peer = self.exchange(
            &Mark {
                step: END,
                ok: u32::from(ok),
            },
            wait,
            self.deadline + MARGIN,
        )?;
        Ok(peer.ok == 1)
    }

    fn exchange(&mut self, mine: &Mark, wait: String, bound: Duration) -> Result<Mark, String> {
        debug_assert!(!self.done, "an exchange after the last one");
        self.dog.arm(wait, bound);
        let all = self.x.all_gather(mine);
        self.dog.disarm();
        let all = all.map_err(|e| format!("exchanging steps with rank {}: {e}", self.peer()))?;
        let peer = *all
            .get(self.peer())
            .ok_or_else(|| format!("the exchange returned {} marks, not 2", all.len()))?;
        let both_on = |m: &Mark| m.ok == 1 && m.step != END;
        self.done = !(both_on(mine) && both_on(&peer) && mine.step == peer.step);
        Ok(peer)
    }
}
