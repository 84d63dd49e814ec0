//! `mpirun -np N copyrpc-echo [--fabric auto|sim|verbs] [--device NAME] [--port N]
//! [--gid-index auto|N] [--tclass N] [--sl N] [--calls N] [--max-payload B]
//! [--window N] [--rpc-ring auto|BYTES] [--deadline-s S] [--seed N]`
//!
//! `copyrpc-echo --world virtual:N [--cost ...] [--nic ...]` runs the same echo among N
//! ranks inside this one process, in virtual time, over the device model (no mpirun):
//! one line per rank with its counts and the virtual time it took, then the calls per
//! second of virtual time. Deterministic: the same flags print the same bytes.
//!
//! Every rank echoes with every other over copyrpc (see `copyrpc_host::rpc::echo`) and
//! prints one line: `rank r/n: <counts>: ok`, or `rank r/n: FAIL <why>` and a non-zero exit.
//! Run alone (no mpirun) it is a single rank with nobody to call, which still checks
//! that the fabric and the context come up.
//!
//! Every flag is checked before MPI starts: a bad value is an error on stderr naming the
//! flag and its valid range, and exit status 2.

mod common;

use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use copyrpc_host::exchange::{options, MpiExchange};
use copyrpc_host::fabric::verbs::gid;
use copyrpc_host::fabric::{self, FabricKind, FabricOptions, Qos};
use copyrpc_host::rpc::echo::{self, EchoConfig, MAX_DEADLINE, MAX_RING, MAX_VIRTUAL_RANKS};
use copyrpc_host::rpc::{sizing, RpcConfig};
use copyrpc_host::vworld::{world_from_flags, WorldSpec};

/// Every rank calls every other rank with checksummed payloads over copyrpc and checks
/// every answer; `mpirun -np N copyrpc-echo` for N ranks.
#[derive(Debug, Parser)]
#[command(
    name = "copyrpc-echo",
    max_term_width = 100,
    args_override_self = true,
    // A value such as `-1` or `-16k` reaches the flag's parser, whose refusal names the
    // flag, instead of reading as an unknown short option.
    allow_hyphen_values = true
)]
struct Cli {
    /// Where copyrpc's queues come from: `auto` (a ConnectX if present, else the software
    /// device model), `verbs` (a ConnectX, an error without one) or `sim`.
    #[arg(long, default_value = "auto", value_parser = parse_fabric, value_name = "auto|sim|verbs")]
    fabric: FabricKind,

    /// RDMA device for `verbs` / `auto` (`ibv_devices` lists them); default: the first
    /// mlx5 device.
    #[arg(long, value_parser = parse_device, value_name = "NAME")]
    device: Option<String>,

    /// The device's port (`ibv_devinfo` lists them).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..), value_name = "N")]
    port: u8,

    /// GID table index for RoCE (`show_gids`): `auto` picks the port's RoCE v2 entry
    /// (its own netdev's, IPv4 first) and refuses a tie, naming the candidates.
    #[arg(long, default_value = "auto", value_parser = parse_gid_index, value_name = "auto|N")]
    gid_index: GidIndexArg,

    /// Traffic class of the GRH, 0..=255 (RoCE: DSCP << 2 | ECN), as perftest's
    /// `--tclass`; every rank must use the same.
    #[arg(long, default_value_t = 0, value_name = "N")]
    tclass: u8,

    /// Service level, 0..=15 (RoCE: the VLAN priority), as perftest's `--sl`; every rank
    /// must use the same.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=i64::from(Qos::MAX_SL)), value_name = "N")]
    sl: u8,

    /// Calls each rank makes to each other rank.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    calls: u32,

    /// Largest payload in bytes (sizes cycle through the edge cases up to it); at most
    /// what --rpc-ring carries. Default 1024.
    #[arg(long, value_name = "BYTES")]
    max_payload: Option<u64>,

    /// Calls in flight per peer (1 measures one call's round trip).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=512), value_name = "N")]
    window: u32,

    /// Each endpoint's ring per direction, a power of two from 4k to 256k, or `auto`
    /// (the smallest ring at which the window of calls in flight per peer never waits
    /// for credit).
    #[arg(long, default_value = "auto", value_parser = parse_rpc_ring, value_name = "auto|BYTES")]
    rpc_ring: RingArg,

    /// Give up (every rank saying where it stood) after this many seconds (of virtual
    /// time with --world virtual).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=MAX_DEADLINE.as_secs()), value_name = "S")]
    deadline_s: u64,

    /// Where each peer's sequence of payload sizes starts (0: the edge cases first); with
    /// --world virtual also the seed of the turns' cost jitter.
    #[arg(long, default_value_t = 0, value_name = "N")]
    seed: u64,

    /// Where the ranks run: `threads` (the default: this process is one rank, mpirun
    /// starts the others) or `virtual:N`: N ranks (2..=65) inside this one process and
    /// thread, in virtual time, over the device model; calls/s are virtual.
    #[arg(long, default_value = "threads", value_name = "threads|virtual:N")]
    world: String,

    /// Virtual world: CPU cost of each echo pass, `key=ns,...` (as benchkv's --cost; a
    /// pass costs echo_pass_ns + echo_peer_ns per peer + echo_item_ns per call, answer
    /// and reply + echo_post_ns per WQE).
    #[arg(long, default_value = "", value_name = "KEY=NS,...")]
    cost: String,

    /// Virtual world: the NIC profile, `key=value,...` (as benchkv's --nic).
    #[arg(long, default_value = "", value_name = "KEY=VALUE,...")]
    nic: String,

    /// Virtual world: the cost profile the passes' figures come from (as benchkv's
    /// --cost-profile; default: the built-in one).
    #[arg(long, value_name = "FILE")]
    cost_profile: Option<std::path::PathBuf>,
}

/// `--gid-index`: `None` for `auto`.
#[derive(Clone, Copy, Debug)]
struct GidIndexArg(Option<u8>);

/// `--rpc-ring`: `None` for `auto`.
#[derive(Clone, Copy, Debug)]
struct RingArg(Option<usize>);

fn parse_fabric(s: &str) -> Result<FabricKind, String> {
    s.parse().map_err(|e| format!("{e}"))
}

fn parse_device(s: &str) -> Result<String, String> {
    if s.is_empty() || s.contains('/') {
        return Err("expected an RDMA device name (ibv_devices)".into());
    }
    Ok(s.to_owned())
}

fn parse_gid_index(s: &str) -> Result<GidIndexArg, String> {
    match s.trim() {
        "auto" => Ok(GidIndexArg(None)),
        n => n
            .parse::<u8>()
            .map(|i| GidIndexArg(Some(i)))
            .map_err(|_| "expected auto or a whole number in 0..=255 (show_gids)".into()),
    }
}

fn parse_rpc_ring(s: &str) -> Result<RingArg, String> {
    let r = sizing::parse_ring(s)?;
    if let Some(b) = r.filter(|&b| b > MAX_RING) {
        return Err(format!(
            "{} KiB is above the echo's largest ring, {} KiB",
            b >> 10,
            MAX_RING >> 10
        ));
    }
    Ok(RingArg(r))
}

/// A checked command line: what to open and what to run.
struct Run {
    kind: FabricKind,
    opts: Box<FabricOptions>,
    cfg: EchoConfig,
    /// `--world virtual:N`.
    world: Option<WorldSpec>,
}

/// The command line, checked: each flag by clap, then the combinations. An `Err` is a
/// clap error to `exit()` with: the help (status 0) or a refusal naming the flag
/// (status 2).
fn parse(args: impl IntoIterator<Item = String>) -> Result<Run, clap::Error> {
    let cli = Cli::try_parse_from(std::iter::once("copyrpc-echo".to_owned()).chain(args))?;
    let refuse = |msg: String| Cli::command().error(ErrorKind::ValueValidation, msg);
    // Before anything else: a bad world is refused before anything is sized.
    let world = world_from_flags(
        &cli.world,
        2..=MAX_VIRTUAL_RANKS,
        &cli.cost,
        cli.cost_profile.as_deref(),
        &cli.nic,
        cli.fabric == FabricKind::Verbs || cli.device.is_some(),
    )
    .map_err(refuse)?;
    let mut cfg = EchoConfig {
        calls_per_peer: cli.calls,
        window: cli.window,
        deadline: Duration::from_secs(cli.deadline_s),
        seed: cli.seed,
        ..EchoConfig::default()
    };
    if let Some(p) = cli.max_payload {
        cfg.max_payload = usize::try_from(p).unwrap_or(usize::MAX);
    }
    match cli.rpc_ring.0 {
        None => cfg.auto_ring(),
        Some(b) => cfg.rpc = RpcConfig::for_ring(b),
    }
    cfg.rpc.qos = Qos::new(cli.tclass, cli.sl).map_err(|e| refuse(e.to_string()))?;
    let limit = cfg.max_payload_limit();
    if cfg.max_payload > limit {
        let given = if cli.max_payload.is_some() {
            ""
        } else {
            " (the default)"
        };
        return Err(refuse(format!(
            "--max-payload {}{given} does not fit --rpc-ring {} KiB: the largest payload and \
             response allowance that ring carries is {limit}; lower --max-payload or raise \
             --rpc-ring",
            cfg.max_payload,
            cfg.rpc.ring_bytes >> 10
        )));
    }
    // The flags are each in range; this catches any combination the library refuses.
    cfg.validate().map_err(|e| refuse(format!("{e}")))?;
    if cli.fabric == FabricKind::Sim && cli.device.is_some() {
        return Err(refuse(
            "--device names an RDMA device, which --fabric sim does not use".into(),
        ));
    }
    if cli.fabric != FabricKind::Sim && world.is_none() {
        gid::check_flags(
            &gid::sysfs_root(),
            cli.device.as_deref(),
            cli.port,
            cli.gid_index.0,
        )
        .map_err(refuse)?;
    }
    let mut opts = FabricOptions::default();
    opts.verbs.device = cli.device;
    opts.verbs.port = cli.port;
    opts.verbs.gid_index = cli.gid_index.0;
    Ok(Run {
        kind: cli.fabric,
        opts: Box::new(opts),
        cfg,
        world,
    })
}

/// The options every rank must share, with their values: ranks that disagree (an
/// `mpirun A : B` gives ranks different command lines) would each wait for calls the
/// other never makes, until the deadline, or connect with different QoS.
fn shared_options(kind: FabricKind, cfg: &EchoConfig) -> [(&'static str, String); 9] {
    let r = &cfg.rpc;
    [
        ("--fabric", format!("{kind}")),
        ("--calls", cfg.calls_per_peer.to_string()),
        ("--max-payload", cfg.max_payload.to_string()),
        ("--window", cfg.window.to_string()),
        (
            "--rpc-ring",
            format!(
                "{} {} {} {} {:?}",
                r.ring_bytes, r.srq_wqes, r.cqes, r.sq_wrs, r.endpoint
            ),
        ),
        ("--tclass", r.qos.traffic_class.to_string()),
        ("--sl", r.qos.sl.to_string()),
        ("--deadline-s", format!("{:?}", cfg.deadline)),
        ("--seed", cfg.seed.to_string()),
    ]
}

/// Every rank's shared options against this one's: the first rank and option that
/// differ.
fn check_shared(x: &MpiExchange, kind: FabricKind, cfg: &EchoConfig) -> Result<(), String> {
    let opts = shared_options(kind, cfg);
    let all = x
        .all_gather(&options::option_hashes(&opts))
        .map_err(|e| format!("exchanging options: {e}"))?;
    options::first_difference(&opts, &all).map_or(Ok(()), Err)
}

fn main() -> ExitCode {
    let Run {
        kind,
        opts,
        cfg,
        world,
    } = match parse(std::env::args().skip(1)) {
        Ok(run) => run,
        // The help (exit 0) or a refusal naming the flag (exit 2), on stdout / stderr.
        Err(e) => e.exit(),
    };
    if let Some(w) = world {
        return run_virtual(&cfg, &w);
    }
    let x = match common::init_mpi() {
        Ok(x) => x,
        Err(code) => return code,
    };
    let (r, n) = (x.rank(), x.size());
    let result = check_shared(&x, kind, &cfg)
        .and_then(|()| fabric::open(kind, &opts).map_err(|e| format!("{e}")))
        .and_then(|(f, sel)| {
            if r == 0 {
                eprintln!("copyrpc-echo: {}", sel.reason);
            }
            common::describe_and_place("copyrpc-echo", &f, r, n);
            echo::run(&x, f, &cfg).map_err(|e| format!("{e}"))
        });
    match result {
        Ok(rep) => {
            println!(
                "rank {r}/{n}: responses={} served={} total_responses={} total_served={} bytes={} in {:.3}s: ok",
                rep.responses,
                rep.served,
                rep.total_responses,
                rep.total_served,
                rep.bytes,
                rep.elapsed.as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(why) => {
            println!("rank {r}/{n}: FAIL {why}");
            ExitCode::FAILURE
        }
    }
}

/// `--world virtual:N`: every rank's line, then the world's calls per second of virtual
/// time; the wall time on stderr (it is the one thing a rerun changes).
fn run_virtual(cfg: &EchoConfig, w: &WorldSpec) -> ExitCode {
    let wall = std::time::Instant::now();
    match echo::run_virtual(cfg, w) {
        Ok(v) => {
            let n = v.ranks.len();
            for rep in &v.ranks {
                println!(
                    "rank {}/{n}: responses={} served={} total_responses={} total_served={} bytes={} in {:.3} ms of virtual time: ok",
                    rep.rank,
                    rep.responses,
                    rep.served,
                    rep.total_responses,
                    rep.total_served,
                    rep.bytes,
                    rep.elapsed.as_nanos() as f64 / 1e6
                );
            }
            println!(
                "virtual:{n}: {} calls in {:.3} ms of virtual time: {:.3} M calls/s",
                v.ranks.iter().map(|r| r.responses).sum::<u64>(),
                v.end_ns as f64 / 1e6,
                v.calls_per_s() / 1e6
            );
            eprintln!(
                "copyrpc-echo: virtual world of {n} ranks in {:.2} s wall, one core",
                wall.elapsed().as_secs_f64()
            );
            let p = v.passes;
            eprintln!(
                "copyrpc-echo: passes={} peers={} items={} completions={} wqes={}",
                p.passes, p.peers, p.items, p.completions, p.wqes
            );
            ExitCode::SUCCESS
        }
        Err(why) => {
            println!("virtual:{}: FAIL {why}", w.ranks);
            ExitCode::FAILURE
        }
    }
}
