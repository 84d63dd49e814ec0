//! A validated run configuration: every flag checked, every impossible combination refused
//! with a sentence naming the flags involved. Nothing past this point has to re-check.

use std::time::Duration;

use copyrpc_core::budget::{steady, Params as BudgetParams};
use copyrpc_host::fabric::verbs::gid;
use copyrpc_host::fabric::{FabricKind, Qos};

use copyrpc_host::vworld::{
    default_profile, load_profile, parse_world, CostModel, Fault as VFault, NicProfile, WorldSpec,
    MAX_RANKS,
};

use crate::cli::{
    BackendArg, Cli, DistributionArg, FabricArg, InjectFaultArg, OutputArg, PinArg, PollBudget,
};
use crate::daemon::{Adaptive, InjectFault};
use crate::remote::RingSize;
use crate::workload::{Distribution, PatternSpec};

pub use crate::route::Backend;

/// `--output`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Human-readable tables.
    Table,
    /// One JSON object per line.
    Json,
    /// Comma-separated values with a header row.
    Csv,
}

/// `--pin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pin {
    /// Pin when there are enough cores.
    Auto,
    /// Always pin; an error without enough cores.
    On,
    /// Never pin.
    Off,
}

/// Largest `--keys`: the tables take 32 bytes per key per rank.
pub const MAX_KEYS: u64 = 1 << 27;
/// Largest `--daemons` (the Flux mesh has K² queue pairs).
pub const MAX_DAEMONS: usize = 64;
/// Largest `--clients` (ipc client ids per region).
pub const MAX_CLIENTS: usize = 1024;
/// Largest `--queue-depth`.
pub const MAX_QUEUE_DEPTH: u32 = 4096;

/// Everything a run needs, checked.
#[derive(Clone, Debug)]
pub struct Config {
    /// `--backend`.
    pub backend: Backend,
    /// `--fabric`.
    pub fabric: FabricKind,
    /// `--device`.
    pub device: Option<String>,
    /// K.
    pub daemons: usize,
    /// C.
    pub clients: usize,
    /// QD.
    pub queue_depth: u32,
    /// Length of each run.
    pub duration: Duration,
    /// Runs.
    pub runs: usize,
    /// Keys per rank.
    pub keys: u64,
    /// Key distribution.
    pub distribution: Distribution,
    /// Fraction of GETs.
    pub read_ratio: f64,
    /// Delegation ring / Flux queue / loopback slots.
    pub ring_size: u32,
    /// Requests per source per loop turn (`usize::MAX` = no limit).
    pub take_per_turn: usize,
    /// The poll budget's extra empty polls per loop (0 = off).
    pub poll_budget: u32,
    /// `--poll-budget adaptive|adaptive-seed`: a controller steers it.
    pub adaptive: Option<Adaptive>,
    /// `--metrics`.
    pub metrics: bool,
    /// `--output`.
    pub output: Output,
    /// `--verify`.
    pub verify: bool,
    /// `--seed`.
    pub seed: u64,
    /// `--pin`.
    pub pin: Pin,
    /// `--loopback-ranks` (1 = off).
    pub loopback_ranks: u32,
    /// `--pattern-len`.
    pub pattern_len: usize,
    /// `--drain-timeout`.
    pub drain_timeout: Duration,
    /// `--warmup` (virtual world): time before the first run, counted in no run.
    pub warmup: Duration,
    /// `--setup-timeout`.
    pub setup_timeout: Duration,
    /// `--plot`.
    pub plot: Option<std::path::PathBuf>,
    /// `--inject-fault`.
    pub fault: Option<InjectFault>,
    /// `--world virtual:N`; `None` for threads.
    pub world: Option<WorldSpec>,
    /// Where the virtual world's turn costs come from, for the report: the
    /// `--cost-profile` file, or the built-in profile and its machine.
    pub cost_source: String,
    /// `--rpc-ring`, resolved: the ring of every copyrpc endpoint.
    pub copyrpc_ring: RingSize,
    /// Whether `copyrpc_ring` was chosen by `--rpc-ring auto`.
    pub rpc_ring_auto: bool,
    /// `--port`.
    pub port: u8,
    /// `--gid-index` (`None`: auto).
    pub gid_index: Option<u8>,
    /// `--tclass` and `--sl`.
    pub qos: Qos,
    /// `--hugepages`.
    pub hugepages: bool,
}

/// How many options [`Config::shared_options`] lists.
pub const SHARED_OPTIONS: usize = 21;

/// The first rank in `all` (every rank's [`Config::fingerprint`]) started with another
/// shared option than `cfg`, as the error every rank reports.
pub fn mismatch(cfg: &Config, all: &[[u64; SHARED_OPTIONS]]) -> Option<String> {
    copyrpc_host::exchange::options::first_difference(&cfg.shared_options(), all)
}

/// `--world` and the virtual world's flags; `None` for `threads`. The other virtual
/// flags without `--world virtual:N` are refused, not ignored.
fn virtual_spec(cli: &Cli, duration: Duration) -> Result<Option<WorldSpec>, String> {
    let w = cli.world.trim();
    if w == "threads" {
        let stray = [
            ("--cost", !cli.cost.is_empty()),
            ("--cost-profile", cli.cost_profile.is_some()),
            ("--nic", !cli.nic.is_empty()),
            ("--vfault", !cli.vfault.is_empty()),
            ("--sample-every", cli.sample_every.is_some()),
            ("--warmup", cli.warmup.is_some()),
        ];
        if let Some((flag, _)) = stray.iter().find(|(_, set)| *set) {
            return Err(format!("{flag} applies only with --world virtual:N"));
        }
        return Ok(None);
    }
    let ranks = parse_world(w, 1..=MAX_RANKS)?.expect("`threads` returned above");
    let mut faults = cli
        .vfault
        .iter()
        .map(|f| VFault::parse(f, ranks))
        .collect::<Result<Vec<_>, _>>()?;
    faults.sort_by_key(|f| f.at_ns);
    let sample_ns = match cli.sample_every {
        Some(d) => d.as_nanos() as u64,
        None => (duration.as_nanos() as u64 / 400).max(1),
    };
    Ok(Some(WorldSpec {
        ranks,
        cost: cost_of(cli)?,
        nic: NicProfile::parse(&cli.nic)?,
        faults,
        sample_ns,
    }))
}

/// The turns' costs: `--cost-profile` (or the built-in profile) with `--cost` applied.
fn cost_of(cli: &Cli) -> Result<CostModel, String> {
    let base = match &cli.cost_profile {
        Some(path) => load_profile(path)?.cost,
        None => CostModel::default(),
    };
    CostModel::with_profile(base, &cli.cost)
}

/// Where the turns' costs come from, for the report.
fn cost_source(path: Option<&std::path::Path>) -> String {
    match path {
        Some(p) => p.display().to_string(),
        None => format!("built-in ({})", default_profile().machine),
    }
}

/// Fails now, not after the run, when `path` cannot be written: opens it for appending
/// (creating it, and removing it again if it was not there, so nothing is left behind).
fn check_writable(path: &std::path::Path) -> Result<(), String> {
    if path.as_os_str().is_empty() {
        return Err("--plot needs a file name".to_string());
    }
    if let Ok(m) = std::fs::metadata(path) {
        // Opening a FIFO for writing waits for a reader, for ever if none comes; a device
        // or a kernel file (/proc, /sys) opens but fails the write after the run.
        if !m.is_file() {
            return Err(format!(
                "--plot {}: not a regular file (a FIFO, socket, device or kernel file), and \
                 the plot is one file written at the end; give a file name",
                path.display()
            ));
        }
        if m.permissions().readonly() {
            return Err(format!(
                "--plot {}: the file is read-only; give another file name",
                path.display()
            ));
        }
    }
    let existed = path.exists();
    match std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
    {
        Ok(_) => {
            if !existed {
                let _ = std::fs::remove_file(path);
            }
            Ok(())
        }
        Err(e) => Err(format!(
            "--plot {}: cannot write there: {e}",
            path.display()
        )),
    }
}

impl Config {
    /// `--poll-budget`'s word for the controller, when one steers it.
    pub fn adaptive_label(&self) -> Option<&'static str> {
        self.adaptive.map(|a| match a {
            Adaptive::Rate(_) => "adaptive",
            Adaptive::Seed(_) => "adaptive-seed",
        })
    }

    /// Checks `cli`; the error is one sentence for the user.
    pub fn from_cli(cli: &Cli) -> Result<Self, String> {
        let is_virtual = cli.world.trim() != "threads";
        let duration = cli.duration.unwrap_or(if is_virtual {
            Duration::from_millis(10)
        } else {
            Duration::from_secs(2)
        });
        let keys = cli
            .keys
            .unwrap_or(if is_virtual { 1 << 16 } else { 1 << 20 });
        let pattern_len = cli
            .pattern_len
            .unwrap_or(if is_virtual { 1 << 12 } else { 1 << 16 });
        let world = virtual_spec(cli, duration)?;
        if world.is_some() {
            if cli.loopback_ranks > 1 {
                return Err(
                    "--loopback-ranks and --world virtual both stand in for other ranks; \
                     use one"
                        .to_string(),
                );
            }
            if cli.fabric == FabricArg::Verbs || cli.device.is_some() {
                return Err(
                    "--world virtual runs on the device model; --fabric verbs and --device \
                     do not apply"
                        .to_string(),
                );
            }
            if cli.pin == PinArg::On {
                return Err(
                    "--world virtual runs on one thread; --pin on does not apply".to_string(),
                );
            }
        }
        let in_range = |name: &str, v: u64, lo: u64, hi: u64| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(format!("--{name} {v} is out of range {lo}..={hi}"))
            }
        };
        in_range("daemons", cli.daemons as u64, 1, MAX_DAEMONS as u64)?;
        in_range("clients", cli.clients as u64, 1, MAX_CLIENTS as u64)?;
        in_range(
            "queue-depth",
            u64::from(cli.queue_depth),
            1,
            u64::from(MAX_QUEUE_DEPTH),
        )?;
        in_range("runs", cli.runs as u64, 1, 10_000)?;
        in_range("keys", keys, 1, MAX_KEYS)?;
        in_range("loopback-ranks", u64::from(cli.loopback_ranks), 1, 1024)?;
        in_range("pattern-len", pattern_len as u64, 1, 1 << 24)?;
        if !cli.ring_size.is_power_of_two() || !(2..=1 << 20).contains(&cli.ring_size) {
            return Err(format!(
                "--ring-size {} must be a power of two in 2..=1048576",
                cli.ring_size
            ));
        }
        if !(0.0..=1.0).contains(&cli.read_ratio) {
            return Err(format!(
                "--read-ratio {} must be a fraction in 0..=1",
                cli.read_ratio
            ));
        }
        let distribution = match (cli.distribution, cli.zipf_theta) {
            (DistributionArg::Uniform, Some(_)) => {
                return Err("--zipf-theta applies only with --distribution zipf".to_string())
            }
            (DistributionArg::Uniform, None) => Distribution::Uniform,
            (DistributionArg::Zipf, theta) => {
                let theta = theta.unwrap_or(0.99);
                if !(theta > 0.0 && theta <= 100.0) {
                    return Err(format!(
                        "--zipf-theta {theta} must be more than 0 and at most 100"
                    ));
                }
                Distribution::Zipf { theta }
            }
        };
        let (poll_budget, adaptive) = match cli.poll_budget {
            PollBudget::Off => (0, None),
            PollBudget::Fixed(n) => (n, None),
            PollBudget::Adaptive => (0, Some(Adaptive::Rate(steady::Params::DEFAULT))),
            PollBudget::AdaptiveSeed => (0, Some(Adaptive::Seed(BudgetParams::SEED))),
        };
        let fabric = match cli.fabric {
            FabricArg::Auto => FabricKind::Auto,
            FabricArg::Verbs => FabricKind::Verbs,
            FabricArg::Sim => FabricKind::Sim,
        };
        if cli.device.is_some() && fabric == FabricKind::Sim {
            return Err(
                "--device names an RDMA device, which --fabric sim does not use".to_string(),
            );
        }
        if let Some(path) = &cli.plot {
            check_writable(path)?;
        }
        let qos = Qos::new(cli.tclass, cli.sl).map_err(|e| e.to_string())?;
        if world.is_none() && fabric != FabricKind::Sim {
            // A --gid-index past the port's table or of a RoCE v1 entry (or an auto pick
            // with a tie), found in sysfs before MPI starts.
            gid::check_flags(
                &gid::sysfs_root(),
                cli.device.as_deref(),
                cli.port,
                cli.gid_index.0,
            )?;
        }
        Ok(Self {
            backend: match cli.backend {
                BackendArg::Meta => Backend::Meta,
                BackendArg::Delegation => Backend::Delegation,
            },
            fabric,
            device: cli.device.clone(),
            daemons: cli.daemons,
            clients: cli.clients,
            queue_depth: cli.queue_depth,
            duration,
            runs: cli.runs,
            keys,
            distribution,
            read_ratio: cli.read_ratio,
            ring_size: cli.ring_size,
            poll_budget,
            adaptive,
            take_per_turn: cli.take_per_turn,
            metrics: cli.metrics,
            output: match cli.output {
                OutputArg::Table => Output::Table,
                OutputArg::Json => Output::Json,
                OutputArg::Csv => Output::Csv,
            },
            verify: cli.verify,
            seed: cli.seed,
            pin: match cli.pin {
                PinArg::Auto => Pin::Auto,
                PinArg::On => Pin::On,
                PinArg::Off => Pin::Off,
            },
            loopback_ranks: cli.loopback_ranks,
            pattern_len,
            drain_timeout: cli.drain_timeout,
            warmup: cli.warmup.unwrap_or_default(),
            setup_timeout: cli.setup_timeout,
            plot: cli.plot.clone(),
            fault: cli.inject_fault.map(|f| match f {
                InjectFaultArg::CorruptGet => InjectFault::CorruptGet,
                InjectFaultArg::DropRequest => InjectFault::DropRequest,
            }),
            world,
            cost_source: cost_source(cli.cost_profile.as_deref()),
            port: cli.port,
            gid_index: cli.gid_index.0,
            qos,
            hugepages: cli.hugepages,
            copyrpc_ring: match cli.rpc_ring.0 {
                // Every client of this rank may have all its requests out to one peer.
                None => RingSize::for_calls(cli.clients as u64 * u64::from(cli.queue_depth)),
                Some(bytes) => RingSize::new(bytes).map_err(|e| format!("--rpc-ring: {e}"))?,
            },
            rpc_ring_auto: cli.rpc_ring.0.is_none(),
        })
    }

    /// The options every rank of one job must share, each as its flag and value: the
    /// workload, its length, the transports and their sizes, the bounds on waiting.
    /// Options of one rank's own (its NIC, pinning, output, plot, metrics, an injected
    /// fault) are not here. An `mpirun` with `:` (MPMD) can give ranks different command
    /// lines; ranks that disagree on these would run different workloads against each
    /// other or wait at different points, so set-up compares them ([`Self::fingerprint`]).
    pub fn shared_options(&self) -> [(&'static str, String); SHARED_OPTIONS] {
        [
            ("--backend", format!("{:?}", self.backend)),
            ("--fabric", format!("{:?}", self.fabric)),
            ("--daemons", self.daemons.to_string()),
            ("--clients", self.clients.to_string()),
            ("--queue-depth", self.queue_depth.to_string()),
            ("--duration", format!("{:?}", self.duration)),
            ("--runs", self.runs.to_string()),
            ("--keys", self.keys.to_string()),
            ("--distribution", format!("{:?}", self.distribution)),
            ("--read-ratio", self.read_ratio.to_string()),
            ("--ring-size", self.ring_size.to_string()),
            ("--take-per-turn", self.take_per_turn.to_string()),
            (
                "--poll-budget",
                format!("{} {:?}", self.poll_budget, self.adaptive),
            ),
            ("--verify", self.verify.to_string()),
            ("--seed", self.seed.to_string()),
            ("--pattern-len", self.pattern_len.to_string()),
            ("--rpc-ring", format!("{:?}", self.copyrpc_ring)),
            ("--tclass", self.qos.traffic_class.to_string()),
            ("--sl", self.qos.sl.to_string()),
            ("--drain-timeout", format!("{:?}", self.drain_timeout)),
            ("--setup-timeout", format!("{:?}", self.setup_timeout)),
        ]
    }

    /// A hash of each of [`shared_options`](Self::shared_options)' values, in order: what
    /// the ranks exchange to find a rank started with other options.
    pub fn fingerprint(&self) -> [u64; SHARED_OPTIONS] {
        copyrpc_host::exchange::options::option_hashes(&self.shared_options())
    }

    /// Ranks requests are spread over: the MPI ranks, or the pretend ranks of
    /// `--loopback-ranks`.
    pub fn ranks(&self, mpi_size: u32) -> u32 {
        if self.loopback_ranks > 1 {
            self.loopback_ranks
        } else {
            mpi_size
        }
    }

    /// Depth of the ipc rings and delegation response slots: QD rounded up to a power of
    /// two (the layouts need one; a client never has more than QD out).
    pub fn slot_depth(&self) -> u32 {
        self.queue_depth.next_power_of_two()
    }

    /// The pattern of this run for `ranks` ranks.
    pub fn pattern_spec(&self, ranks: u32) -> PatternSpec {
        PatternSpec {
            ranks,
            keys: self.keys,
            distribution: self.distribution,
            read_ratio: self.read_ratio,
            len: self.pattern_len,
        }
    }
}

/// Cores for this rank's threads (daemons first, then clients), or `None` to leave them
/// unpinned. `usable` is the process's allowed cores; ranks sharing the host
/// (`local_rank` of `local_size`) take disjoint equal slices of it.
pub fn plan_pinning(
    pin: Pin,
    threads: usize,
    usable: &[usize],
    local_rank: usize,
    local_size: usize,
) -> Result<Option<Vec<usize>>, String> {
    let per_rank = usable.len() / local_size.max(1);
    let mine = &usable[(local_rank * per_rank).min(usable.len())..][..per_rank.min(usable.len())];
    let enough = threads <= mine.len();
    match pin {
        Pin::Off => Ok(None),
        Pin::Auto if !enough => Ok(None),
        Pin::On if !enough => Err(format!(
            "--pin on needs a core for each of this rank's {threads} threads (daemons + \
             clients), but it has {} of the {} usable cores ({} rank(s) on this host); lower \
             --daemons/--clients or use --pin off",
            mine.len(),
            usable.len(),
            local_size.max(1)
        )),
        Pin::On | Pin::Auto => Ok(Some(mine[..threads].to_vec())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn cfg(args: &[&str]) -> Result<Config, String> {
        let mut v = vec!["benchkv"];
        v.extend_from_slice(args);
        Config::from_cli(&Cli::try_parse_from(v).map_err(|e| e.to_string())?)
    }

    #[test]
    fn ranks_with_other_workload_options_are_named_and_own_options_may_differ() {
        let base = cfg(&["--keys", "1000"]).unwrap();
        let same = cfg(&[
            "--keys",
            "1000",
            "--pin",
            "off",
            "--plot",
            "x.svg",
            "--metrics",
        ])
        .unwrap();
        let other = cfg(&["--keys", "5000"]).unwrap();
        let fp = base.fingerprint();
        assert_eq!(mismatch(&base, &[fp, same.fingerprint()]), None);
        let why = mismatch(&base, &[fp, other.fingerprint()]).expect("a mismatch");
        assert!(
            why.contains("rank 1") && why.contains("--keys") && why.contains("(1000)"),
            "{why}"
        );
        // Every listed option takes part: each one changed alone is caught.
        for args in [
            ["--queue-depth", "8"],
            ["--duration", "3s"],
            ["--seed", "9"],
            ["--read-ratio", "0.9"],
            ["--backend", "meta"],
            ["--daemons", "2"],
            ["--tclass", "106"],
            ["--sl", "3"],
        ] {
            let o = cfg(&["--keys", "1000", args[0], args[1]]).unwrap();
            let why = mismatch(&base, &[o.fingerprint()]).expect(args[0]);
            assert!(why.contains(args[0]), "{why}");
        }
    }

    #[test]
    fn defaults_are_valid_and_small() {
        let c = cfg(&[]).unwrap();
        assert_eq!((c.daemons, c.clients, c.runs), (1, 1, 1));
        assert_eq!(c.duration, Duration::from_secs(2));
        assert_eq!(c.distribution, Distribution::Uniform);
        assert_eq!((c.poll_budget, c.take_per_turn), (0, usize::MAX));
        assert_eq!((c.port, c.gid_index), (1, None), "port 1, GID index auto");
        let c = cfg(&["--port", "2", "--gid-index", "3"]).unwrap();
        assert_eq!((c.port, c.gid_index), (2, Some(3)));
        assert_eq!(cfg(&["--gid-index", "auto"]).unwrap().gid_index, None);
    }

    #[test]
    fn impossible_combinations_are_refused_with_the_flag_named() {
        for (args, needle) in [
            (&["--daemons", "0"][..], "--daemons"),
            (&["--clients", "5000"], "--clients"),
            (&["--queue-depth", "0"], "--queue-depth"),
            (&["--ring-size", "3"], "--ring-size"),
            (&["--ring-size", "1"], "--ring-size"),
            (&["--read-ratio", "1.5"], "--read-ratio"),
            (&["--zipf-theta", "0.9"], "--zipf-theta"),
            (
                &["--distribution", "zipf", "--zipf-theta", "0"],
                "--zipf-theta",
            ),
            (&["--fabric", "sim", "--device", "mlx5_0"], "--device"),
            (&["--keys", "0"], "--keys"),
            (&["--tclass", "256"], "--tclass"),
            (&["--sl", "16"], "--sl"),
        ] {
            let e = cfg(args).unwrap_err();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
    }

    #[test]
    fn zipf_defaults_theta_and_depth_rounds_up() {
        let c = cfg(&["--distribution", "zipf", "--queue-depth", "5"]).unwrap();
        assert_eq!(c.distribution, Distribution::Zipf { theta: 0.99 });
        assert_eq!(c.slot_depth(), 8);
    }

    #[test]
    fn pinning_follows_the_mode_and_the_cores() {
        let cores = [0, 1, 2, 3];
        assert_eq!(plan_pinning(Pin::Off, 2, &cores, 0, 1).unwrap(), None);
        assert_eq!(
            plan_pinning(Pin::Auto, 2, &cores, 1, 2).unwrap(),
            Some(vec![2, 3])
        );
        assert_eq!(plan_pinning(Pin::Auto, 3, &cores, 0, 2).unwrap(), None);
        let e = plan_pinning(Pin::On, 5, &cores, 0, 1).unwrap_err();
        assert!(e.contains("--pin on") && e.contains("5 threads"), "{e}");
        assert_eq!(
            plan_pinning(Pin::On, 4, &cores, 0, 1).unwrap(),
            Some(vec![0, 1, 2, 3])
        );
    }
}
