//! The virtual-time runtime: N ranks, each with its own threads' work (loops, clients,
//! a NIC), run on this one thread in virtual time, deterministically.
//!
//! A program that runs on the virtual world keeps its own loop code (a daemon's turn, a
//! client's turn, an echo loop) and replaces three things only:
//!
//! - **the scheduler** ([`Runtime`]): every [`Actor`] has its own clock; the actor with
//!   the earliest clock takes the next turn. Ties go to the lower actor id, and a fault
//!   event due at the same instant as a turn comes after every actor's turn at that
//!   instant (faults are numbered after the actors). A run is therefore a pure function
//!   of what was added, in which order, and the seeds;
//! - **the clock**: a turn advances its actor's clock by what the [`CostModel`] charges
//!   for what the turn did (with a seeded per-actor [`Jitter`]); anything the actor
//!   stamps with time (request and answer times) uses virtual time;
//! - **the fabric**: each actor that drives a NIC owns a manually stepped sim device
//!   ([`VirtualNic`]), stepped at the start of each of its turns (delivering what arrived
//!   by then) and at the end (sending what the turn posted, stamped with the end time);
//!   its links carry the [`NicProfile`]'s one-way time and bandwidth, its QPs and the
//!   device the profile's packet spacings.
//!
//! ## Why one thread computes what N machines would
//!
//! An actor observes the others only through memory it reads during its turn: its
//! completion queue (written by its own NIC only when that NIC is stepped, which happens
//! inside the actor's own turn), and shared-memory rings written by other actors' turns.
//! A packet is stamped with the end of its sender's turn plus the one-way time, so it is
//! due strictly after the sender's turn began. The scheduler runs turns in order of
//! their start times, so by the time a turn starts at `t`, every turn that started
//! before `t` has run, and with it every send that could be due by `t`. Nothing a turn
//! reads can therefore depend on a turn that starts later, which is the causality a set
//! of real machines has; and since each turn runs to its end before the next starts, a
//! one-thread run computes the same result as a parallel one that honoured those times.
//!
//! What this simplifies (and what a cost profile can add back): a shared-memory write is
//! visible to the reader's next turn at no cost beyond the writer's and reader's CPU
//! items; a turn's posts leave at its end and their CPU cost is charged after them.
//!
//! | piece | file |
//! |---|---|
//! | [`Actor`], [`Turn`], [`Runtime`] (the scheduler and its fault events) | `sched.rs` |
//! | [`CostModel`], [`NicProfile`], [`Jitter`] | `model.rs` |
//! | [`Profile`]: cost profiles, the built-in one | `profile.rs`, `default.cost` |
//! | [`VirtualNic`] (a sim device stepped at virtual times) | `nic.rs` |
//! | [`Fault`], [`FaultKind`] | `faults.rs` |
//! | [`transpose`] (the N-ranks-on-one-thread exchange) | `exchange.rs` |
//! | [`Series`] (a loop's time series and its SVG) | `series.rs` |

mod exchange;
mod faults;
mod model;
mod nic;
mod profile;
mod sched;
mod series;

pub use exchange::transpose;
pub use faults::{Fault, FaultKind};
pub use model::{ns, CostModel, Jitter, NicProfile};
pub use nic::VirtualNic;
pub use profile::{
    default_profile, load_profile, parse_profile, Profile, DEFAULT_PROFILE, PROFILE_HEADER,
};
pub use sched::{Actor, RunEnd, Runtime, Turn};
pub use series::{Sample, Series};

use crate::fabric::sim::{SimOptions, Stepping, SIM_MAX_QPS};
use crate::rpc::RpcConfig;

/// Largest world: one NIC holds a QP to every other rank, and a sim device holds
/// [`SIM_MAX_QPS`] QPs.
pub const MAX_RANKS: u32 = 1024;
const _: () = assert!(MAX_RANKS as usize - 1 <= SIM_MAX_QPS);

/// Packets each link direction of a virtual NIC holds (the threaded sim fabric's links
/// hold 64). A world has a QP per pair of ranks, and a link slot is an MTU; 16 slots are
/// what a pair carries in flight at the default profile's rates with room to spare (a
/// stalled receiver backs the rest up into the senders' send queues instead), and keep
/// a pair near 190 KiB, which a world of 256 ranks needs.
pub const LINK_SLOTS: u32 = 16;

/// Send-queue WQEs of each QP of a virtual NIC (the fabrics' default is 512): copyrpc
/// keeps far fewer in flight per peer at any ring the virtual world runs, and the send
/// CQ is sized for every send queue's blocks, so this divides both by four.
pub const SQ_WRS: u32 = 128;

/// A virtual world's shape and physics: how many ranks, what turns cost, the NIC, the
/// faults, and how often the time series samples.
#[derive(Clone, Debug, PartialEq)]
pub struct WorldSpec {
    /// N.
    pub ranks: u32,
    /// CPU cost of each kind of turn.
    pub cost: CostModel,
    /// The NIC between the ranks.
    pub nic: NicProfile,
    /// Faults, in time order.
    pub faults: Vec<Fault>,
    /// Interval of the time series, ns of virtual time.
    pub sample_ns: u64,
}

/// Environment variables an MPI launcher sets in every rank it starts: Open MPI,
/// MPICH/Hydra (PMI), PMIx.
const LAUNCHER_VARS: [&str; 4] = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"];

/// Whether an MPI launcher (`mpirun`) started this process: a virtual world runs every
/// rank in one process and refuses to run under one.
pub fn launched_by_mpi() -> bool {
    LAUNCHER_VARS.iter().any(|v| std::env::var_os(v).is_some())
}

/// `--world`: `threads` (`None`: ranks are processes or threads in real time) or
/// `virtual:N` with N in `ranks` (`Some(N)`). Errors name the flag and say what is
/// accepted.
pub fn parse_world(
    text: &str,
    ranks: std::ops::RangeInclusive<u32>,
) -> Result<Option<u32>, String> {
    let w = text.trim();
    if w == "threads" {
        return Ok(None);
    }
    let Some(n) = w.strip_prefix("virtual:") else {
        return Err(format!(
            "--world {w}: expected `threads` or `virtual:N` (N ranks, e.g. virtual:16)"
        ));
    };
    let n: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("--world {w}: `{n}` is not a rank count"))?;
    if !ranks.contains(&n) {
        return Err(format!(
            "--world {w}: the rank count must be in {}..={}",
            ranks.start(),
            ranks.end()
        ));
    }
    Ok(Some(n))
}

/// The world a tool's `--world`, `--cost` and `--nic` describe: `None` for `threads`
/// (where `--cost` and `--nic` are refused, not ignored), or a world of N ranks, N in
/// `ranks`, with the default faults-free timeline. `on_a_nic`: the flags also ask for a
/// real NIC (`--fabric verbs`, `--device`), which a virtual world cannot use. A virtual
/// world under mpirun is refused: it runs every rank in one process. Errors name the
/// flag.
pub fn world_from_flags(
    world: &str,
    ranks: std::ops::RangeInclusive<u32>,
    cost: &str,
    cost_profile: Option<&std::path::Path>,
    nic: &str,
    on_a_nic: bool,
) -> Result<Option<WorldSpec>, String> {
    let Some(n) = parse_world(world, ranks)? else {
        for (flag, set) in [
            ("--cost", !cost.is_empty()),
            ("--cost-profile", cost_profile.is_some()),
            ("--nic", !nic.is_empty()),
        ] {
            if set {
                return Err(format!("{flag} applies only with --world virtual:N"));
            }
        }
        return Ok(None);
    };
    if on_a_nic {
        return Err(
            "--world virtual runs on the device model; --fabric verbs and --device do not apply"
                .into(),
        );
    }
    if launched_by_mpi() {
        return Err(
            "--world virtual runs every rank inside this one process; start it without mpirun"
                .into(),
        );
    }
    Ok(Some(WorldSpec {
        ranks: n,
        cost: CostModel::with_profile(
            match cost_profile {
                Some(path) => load_profile(path)?.cost,
                None => CostModel::default(),
            },
            cost,
        )?,
        nic: NicProfile::parse(nic)?,
        faults: Vec::new(),
        sample_ns: 1_000,
    }))
}

impl WorldSpec {
    /// The options of one of the world's NICs: manually stepped, with the profile's
    /// link and NIC-wide packet rate, transport timers, [`LINK_SLOTS`], and a sparse
    /// region of `region_bytes`.
    pub fn sim_options(&self, region_bytes: usize) -> SimOptions {
        SimOptions {
            region_bytes,
            link: self.nic.link(),
            nic_packet_ns: self.nic.nic_spacing_ns(),
            link_slots: LINK_SLOTS,
            stepping: Stepping::Manual,
            ack_timeout_ns: Some(self.nic.ack_timeout_ns.round() as u64),
            min_rnr_timer: Some(self.nic.rnr_timer_code()),
            ..SimOptions::default()
        }
    }

    /// `rpc` as the world's QPs are built: [`SQ_WRS`] send-queue WQEs.
    pub fn rpc_config(&self, rpc: &RpcConfig) -> RpcConfig {
        RpcConfig {
            sq_wrs: SQ_WRS.min(rpc.sq_wrs),
            ..*rpc
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worlds_parse_and_bad_ones_name_the_flag() {
        assert_eq!(parse_world("threads", 1..=8), Ok(None));
        assert_eq!(parse_world(" virtual:4 ", 1..=8), Ok(Some(4)));
        for (bad, why) in [
            ("virtual:0", "must be in 2..=8"),
            ("virtual:1", "must be in 2..=8"),
            ("virtual:9", "must be in 2..=8"),
            ("virtual:x", "is not a rank count"),
            ("virtual:-1", "is not a rank count"),
            ("virtual:", "is not a rank count"),
            ("galaxy", "expected `threads` or `virtual:N`"),
        ] {
            let e = parse_world(bad, 2..=8).unwrap_err();
            assert!(e.starts_with("--world") && e.contains(why), "{bad}: {e}");
        }
    }
}
