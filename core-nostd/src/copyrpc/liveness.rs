//! Whether an endpoint's peer still answers: the READ of the peer's consumer in flight
//! (the fallback for a stale consumer view, and the idle-peer probe), and the poll at
//! which the endpoint last showed life.

/// An endpoint's READ in flight and its quiet clock.
#[derive(Debug)]
pub(crate) struct Liveness {
    /// Free-running SQ position of the READ in flight.
    read: Option<u64>,
    /// The context's poll count when this endpoint last showed life or had reason not
    /// to expect any: a batch or READ result arrived, a batch or probe went out, or
    /// no call was pending. A probe is due `probe_interval` polls after it.
    quiet_since: u64,
}

impl Liveness {
    pub(crate) const fn new() -> Self {
        Self {
            read: None,
            quiet_since: 0,
        }
    }

    /// The endpoint showed life (or has no reason to expect any) at poll `polls`.
    #[inline(always)]
    pub(crate) fn touch(&mut self, polls: u64) {
        self.quiet_since = polls;
    }

    /// Whether `interval` polls (0: never) went by since the endpoint last showed life.
    #[inline(always)]
    pub(crate) fn quiet_for(&self, polls: u64, interval: u32) -> bool {
        interval != 0 && polls.wrapping_sub(self.quiet_since) >= u64::from(interval)
    }

    /// Whether no READ is in flight, so one may be posted.
    #[inline(always)]
    pub(crate) const fn read_idle(&self) -> bool {
        self.read.is_none()
    }

    /// A READ went out at SQ position `pos`.
    #[inline]
    pub(crate) fn read_posted(&mut self, pos: u64) {
        self.read = Some(pos);
    }

    /// Send-queue completions retired every WQE before `ci`: whether that finished the
    /// READ in flight (which is then no longer in flight).
    #[inline]
    pub(crate) fn read_retired(&mut self, ci: u64) -> bool {
        match self.read {
            Some(pos) if ci > pos => {
                self.read = None;
                true
            }
            _ => false,
        }
    }
}
