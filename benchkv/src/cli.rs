//! The command line (clap derive). Parsing only: what combinations make sense is
//! [`crate::config`]'s business, so every refusal there gets a sentence, not a usage dump.

use std::time::Duration;

use clap::{Parser, ValueEnum};
pub use copyrpc_host::units::parse_duration;

/// The distributed key-value benchmark of copyrpc (docs/spec/benchkv.md): K daemon threads (shards)
/// and C closed-loop client threads per rank; `mpirun -np N benchkv` for N ranks, plain
/// `benchkv` for one.
///
/// Each client keeps --queue-depth requests outstanding, drawn from its own pregenerated
/// (rank, key, GET/PUT) pattern. Local requests go through ipc to the shard owner
/// (key % K); remote ones through the delegation ring to daemon#0 (--backend delegation)
/// or through ipc and Flux to the daemon holding the rank's endpoint (--backend meta).
/// Results: requests/s per run for every rank and in total, latency p50/p99/p99.9, and
/// the drain count (every issued request answered).
#[derive(Debug, Parser)]
#[command(
    name = "benchkv",
    version,
    max_term_width = 100,
    args_override_self = true,
    // `-K -1` and `--read-ratio -0.1` reach the flag's parser or check, whose refusal
    // names the flag, instead of reading as an unknown option `-1`.
    allow_negative_numbers = true
)]
pub struct Cli {
    /// How remote requests leave a rank: `delegation` (clients write the shared MPSC ring
    /// of daemon#0) or `meta` (clients → ipc → daemon → Flux → the daemon holding the
    /// endpoint).
    #[arg(long, value_enum, default_value_t = BackendArg::Delegation)]
    pub backend: BackendArg,

    /// Where copyrpc's queues come from: `auto` (a ConnectX if present, else the software
    /// device model), `verbs` (a ConnectX, an error without one) or `sim`.
    #[arg(long, value_enum, default_value_t = FabricArg::Auto)]
    pub fabric: FabricArg,

    /// RDMA device for `verbs` / `auto` (e.g. mlx5_0); default: the first mlx5 device.
    #[arg(long, value_name = "NAME")]
    pub device: Option<String>,

    /// The device's port (`--fabric verbs`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..), value_name = "N")]
    pub port: u8,

    /// GID table index for RoCE / the GRH (`--fabric verbs`): `auto` (the default) picks
    /// the port's first routable RoCE v2 entry on Ethernet (as `show_gids` lists them;
    /// index 0 is RoCE v1 link-local) and 0 on InfiniBand.
    #[arg(long, default_value = "auto", value_parser = parse_gid_index, value_name = "auto|N")]
    pub gid_index: GidIndexArg,

    /// Traffic class of the GRH, 0..=255 (RoCE v2: DSCP << 2 | ECN, e.g. 106 for DSCP
    /// 26), as perftest's `--tclass`. Every rank must use the same.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub tclass: u8,

    /// Service level, 0..=15 (InfiniBand: the SL the subnet manager maps to a lane; RoCE:
    /// the VLAN priority of tagged frames), as perftest's `--sl`. Every rank must use the
    /// same.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=15), value_name = "N")]
    pub sl: u8,

    /// `--fabric verbs`: carve the copyrpc rings from 2 MiB huge pages (the pool
    /// `vm.nr_hugepages` reserves); with none free they go on 4 KiB pages and the rank
    /// says why on stderr.
    #[arg(long)]
    pub hugepages: bool,

    /// Daemon threads (shards) per rank, K >= 1.
    #[arg(long, short = 'K', default_value_t = 1, value_name = "K")]
    pub daemons: usize,

    /// Client threads per rank, C >= 1.
    #[arg(long, short = 'C', default_value_t = 1, value_name = "C")]
    pub clients: usize,

    /// Requests each client keeps outstanding (closed loop), 1..=4096.
    #[arg(long, default_value_t = 4, value_name = "QD")]
    pub queue_depth: u32,

    /// Length of each timed run: seconds (`2`, `0.5`), or with a unit (`500ms`, `3s`).
    /// Default 2s; with --world virtual, 10ms of virtual time.
    #[arg(long, value_parser = parse_duration, value_name = "TIME")]
    pub duration: Option<Duration>,

    /// Timed runs, back to back (clients keep running between them).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub runs: usize,

    /// Keys per rank (0..keys), preloaded, spread over the K shards by key % K.
    /// Default 1048576; with --world virtual, 65536.
    #[arg(long, value_name = "N")]
    pub keys: Option<u64>,

    /// Key distribution.
    #[arg(long, value_enum, default_value_t = DistributionArg::Uniform)]
    pub distribution: DistributionArg,

    /// Zipf exponent (with --distribution zipf only), > 0; default 0.99.
    #[arg(long, value_name = "THETA")]
    pub zipf_theta: Option<f64>,

    /// Fraction of GETs (the rest are PUTs), 0..=1.
    #[arg(long, default_value_t = 0.5, value_name = "R")]
    pub read_ratio: f64,

    /// Slots of the delegation ring and of each Flux queue (and of the loopback
    /// transport); a power of two >= 2.
    #[arg(long, default_value_t = 1024, value_name = "N")]
    pub ring_size: u32,

    /// The poll budget (docs/spec/poll-budget.md#poll-budget): after the transport poll
    /// that drains the completion queue, the daemon keeps polling until N polls have found
    /// nothing (at most 4 N extra polls in all) before the rest of its loop, to let
    /// completions accumulate: `off` (the default), N in 1..=65536, `adaptive`: a controller
    /// steers it per daemon on the answer rate, trying each step before keeping it, or
    /// `adaptive-seed`: the controller of docs/spec/poll-budget.md as specified
    /// (hysteresis on loop time / RTT).
    #[arg(long, default_value = "off", value_parser = parse_budget, value_name = "off|N|adaptive|adaptive-seed")]
    pub poll_budget: PollBudget,

    /// Requests a daemon takes from one source per loop turn before moving to the next
    /// phase: `all` (no limit) or N >= 1.
    #[arg(long, default_value = "all", value_parser = parse_take, value_name = "all|N")]
    pub take_per_turn: usize,

    /// Collect and print daemon loop metrics: loop and idle counts, the transport's
    /// CQE-batch histogram (0, 1, 2-10, 11-100, >100) and sampled outstanding calls.
    #[arg(long)]
    pub metrics: bool,

    /// Output format on stdout: a human table, JSON lines, or CSV.
    #[arg(long, value_enum, default_value_t = OutputArg::Table)]
    pub output: OutputArg,

    /// Check every GET against the value the store must hold and every PUT's status;
    /// exit non-zero on any mismatch.
    #[arg(long)]
    pub verify: bool,

    /// Seed of the access patterns.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub seed: u64,

    /// Pin daemon and client threads to cores: `auto` pins only when this rank has a core
    /// for each of its K + C threads; `on` insists (an error if there are too few).
    #[arg(long, value_enum, default_value_t = PinArg::Auto)]
    pub pin: PinArg,

    /// Also write an SVG plot to FILE: requests/s per run (stacked by rank) and, with
    /// --metrics, the CQE-batch histogram.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<std::path::PathBuf>,

    /// Testing aid (hidden): break one answer in a thousand on purpose, to show that
    /// --verify and the drain check catch it.
    #[arg(long, value_enum, hide = true)]
    pub inject_fault: Option<InjectFaultArg>,

    /// Testing aid: pretend there are N ranks inside this one process. Requests for the
    /// N - 1 pretend ranks take the full remote path through an in-process loopback
    /// transport standing in for copyrpc (only without mpirun).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub loopback_ranks: u32,

    /// Entries in each client's pregenerated pattern (replayed cyclically).
    /// Default 65536; with --world virtual, 4096.
    #[arg(long, value_name = "N")]
    pub pattern_len: Option<usize>,

    /// How long clients may take, after the last run, to collect the answers to their
    /// outstanding requests before the drain is reported incomplete.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "TIME")]
    pub drain_timeout: Duration,

    /// How long a rank waits for the others during set-up (identities, endpoint exchange,
    /// the ready barrier) before it gives up with exit status 3, naming the wait and the
    /// state of each peer. After the runs the bound is --drain-timeout plus 5 s.
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "TIME")]
    pub setup_timeout: Duration,

    /// copyrpc ring per endpoint and direction between ranks: `auto` (the default: the
    /// smallest ring at which all C × QD requests of this rank in flight to one peer
    /// never wait for ring credit, 16 KiB..4 MiB) or bytes with a unit (`64k`, `1MiB`),
    /// a power of two from 4 KiB to 4 MiB. A 16 KiB ring holds ~42 calls per peer.
    #[arg(long, default_value = "auto", value_parser = parse_rpc_ring, value_name = "auto|BYTES")]
    pub rpc_ring: RpcRingArg,

    /// Where the ranks run: `threads` (the default: this process is one rank, mpirun
    /// starts the others) or `virtual:N`: N ranks, each with its K daemons and C clients,
    /// in this one process and thread, in virtual time, over the mlx5 device model with
    /// the --nic profile; turns cost what --cost says. Deterministic: the same flags give
    /// the same output. Rates and latencies are virtual. See docs/BENCHKV.md.
    #[arg(long, default_value = "threads", value_name = "threads|virtual:N")]
    pub world: String,

    /// Virtual world: CPU cost of each turn, `key=ns,...` over the cost profile's
    /// figures (loop_ns, item_ns, post_ns, cqe_ns, poll_ns, client_ns, client_item_ns,
    /// client_idle_ns, line_ns), and jitter (a fraction, default 0) and clock_ratio (the
    /// modeled CPU's speed against the profile's machine, default 1; every figure is
    /// divided by it).
    #[arg(long, default_value = "", value_name = "KEY=NS,...")]
    pub cost: String,

    /// Virtual world: the cost profile the turns' figures come from (written by
    /// scripts/calibrate.sh); default: the built-in one, measured from this code (its
    /// machine is named in the report).
    #[arg(long, value_name = "FILE")]
    pub cost_profile: Option<std::path::PathBuf>,

    /// Virtual world: the NIC profile, `key=value,...` over the defaults (ConnectX-7
    /// class) latency_ns=300, doorbell_ns=250, nic_ns=500, dma_ns=350, qp_packet_ns=50,
    /// ack_ns=0, nic_packet_ns=3, gbps=400, ack_timeout_ns=1048576, rnr_timer_ns=640000.
    #[arg(long, default_value = "", value_name = "KEY=VALUE,...")]
    pub nic: String,

    /// Virtual world: a fault at a virtual time, `stall:RANK@TIME+DURATION` (the rank's
    /// NICs stop) or `cut:A-B@TIME` (the link between two ranks drops everything).
    /// Repeatable.
    #[arg(long, value_name = "FAULT")]
    pub vfault: Vec<String>,

    /// Virtual world: the interval of the --plot time series (default: the run / 400).
    #[arg(long, value_parser = parse_duration, value_name = "TIME")]
    pub sample_every: Option<Duration>,

    /// Virtual world: run this long before the first run (--duration × --runs) starts
    /// and count nothing of it: the runs then measure a steady state, not the first
    /// waves of a cold start. Default 0.
    #[arg(long, value_parser = parse_duration, value_name = "TIME")]
    pub warmup: Option<Duration>,
}

/// `--rpc-ring`: `None` for `auto` (a newtype, as [`GidIndexArg`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RpcRingArg(pub Option<usize>);

/// `auto` or a ring size (see `copyrpc_host::rpc::sizing::parse_ring`).
pub fn parse_rpc_ring(s: &str) -> Result<RpcRingArg, String> {
    copyrpc_host::rpc::sizing::parse_ring(s).map(RpcRingArg)
}

/// `--backend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// Clients → ipc → daemon → Flux → endpoint daemon → copyrpc.
    Meta,
    /// Clients → delegation ring → daemon#0 → copyrpc.
    Delegation,
}

/// `--fabric`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FabricArg {
    /// verbs if an mlx5 device is present, else sim.
    Auto,
    /// A ConnectX through libibverbs.
    Verbs,
    /// The software device model over /dev/shm.
    Sim,
}

/// `--distribution`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DistributionArg {
    /// Every key equally likely.
    Uniform,
    /// Zipf with exponent --zipf-theta (key 0 hottest).
    Zipf,
}

/// `--output`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputArg {
    /// Human-readable tables.
    Table,
    /// One JSON object per line.
    Json,
    /// Comma-separated values with a header row.
    Csv,
}

/// `--pin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PinArg {
    /// Pin when there are enough cores.
    Auto,
    /// Always pin; an error without enough cores.
    On,
    /// Never pin.
    Off,
}

/// `--inject-fault` (the daemon's `InjectFault`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum InjectFaultArg {
    /// Answer a GET with another key's value.
    CorruptGet,
    /// Never answer a request (the drain must come up short).
    DropRequest,
}

/// `--poll-budget`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollBudget {
    /// No extra polls.
    Off,
    /// Up to this many extra empty polls per loop.
    Fixed(u32),
    /// The adaptive controller, as benchkv runs it (`budget::steady`).
    Adaptive,
    /// The adaptive controller as specified (`Params::SEED`,
    /// docs/spec/poll-budget.md#controller), for comparison.
    AdaptiveSeed,
}

/// Largest `--poll-budget`: more extra polls than this per loop is a loop that has
/// stopped serving anything else.
pub const MAX_POLL_BUDGET: u32 = 65_536;

/// `off`, `adaptive`, or a count in 1..=[`MAX_POLL_BUDGET`].
pub fn parse_budget(s: &str) -> Result<PollBudget, String> {
    match s.trim() {
        "off" => Ok(PollBudget::Off),
        "adaptive" => Ok(PollBudget::Adaptive),
        "adaptive-seed" => Ok(PollBudget::AdaptiveSeed),
        n => match n.parse::<u32>() {
            Ok(0) => Err("a poll budget of 0 is no extra poll: write `off`".into()),
            Ok(n) if n <= MAX_POLL_BUDGET => Ok(PollBudget::Fixed(n)),
            _ => Err(format!(
                "`{s}` is not `off`, `adaptive`, `adaptive-seed` or a count of extra polls in 1..={MAX_POLL_BUDGET}"
            )),
        },
    }
}

/// `--gid-index`: `None` for `auto` (a newtype: clap takes a bare `Option` for an
/// optional flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidIndexArg(pub Option<u8>);

/// `auto` or an index 0..=255.
pub fn parse_gid_index(s: &str) -> Result<GidIndexArg, String> {
    match s.trim() {
        "auto" => Ok(GidIndexArg(None)),
        n => n
            .parse::<u8>()
            .map(|i| GidIndexArg(Some(i)))
            .map_err(|_| format!("`{s}` is not `auto` or a GID index in 0..=255 (show_gids)")),
    }
}

/// `all` (no limit, `usize::MAX`) or a count >= 1.
pub fn parse_take(s: &str) -> Result<usize, String> {
    match s.trim() {
        "all" => Ok(usize::MAX),
        n => match n.parse::<usize>() {
            Ok(0) => {
                Err("taking 0 requests per turn would never serve one; use N >= 1 or `all`".into())
            }
            Ok(n) => Ok(n),
            Err(_) => Err(format!("`{s}` is not `all` or a count")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn budgets_parse() {
        assert_eq!(parse_budget("off").unwrap(), PollBudget::Off);
        assert_eq!(parse_budget("16").unwrap(), PollBudget::Fixed(16));
        assert_eq!(parse_budget("adaptive").unwrap(), PollBudget::Adaptive);
        assert_eq!(
            parse_budget("adaptive-seed").unwrap(),
            PollBudget::AdaptiveSeed
        );
        assert!(parse_budget("0").is_err());
        assert!(parse_budget("many").is_err());
    }
}
