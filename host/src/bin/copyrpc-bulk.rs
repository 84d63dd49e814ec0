//! `mpirun -np 2 copyrpc-bulk [--fabric auto|sim|verbs] [--device NAME] [--port N]
//! [--gid-index auto|N] [--tclass N] [--sl N] [--pattern put|get|both|all]
//! [--sizes 1K,1M,10M] [--iters N] [--chunk BYTES] [--depth N] [--deadline-s S]`
//!
//! Bulk transfers (the patterns of docs/spec/bulk.md, `copyrpc_core::bulk`) between rank 0 (the
//! client) and rank 1 (the server): for each pattern and size, `iters` calls, each
//! checked (the server checks a PUT's bytes against the checksum the request carries;
//! the client checks what a GET or BOTH wrote into its buffer), and one progress line
//! with the bandwidth: `rank 0/2: put 10485760 B x 3: 812.4 MiB/s ok`. Each rank ends
//! with `rank r/2: ... ok`, or `rank r/2: FAIL <why>` and exit 1.
//!
//! `copyrpc-bulk --world virtual:2 [--cost ...] [--nic ...] [--seed N]` runs both ranks
//! inside this one process in virtual time (no mpirun; `bulk::world`): the same checked
//! steps, bandwidths of virtual time, deterministic output.
//!
//! Every wait on the other rank is bounded (`bulk::steps`): `--deadline-s` bounds each
//! call's transfer, on both ranks; the exchanges before each step (the client has
//! prepared its buffers, so the server's wait for the requests starts when they are
//! due) and at the end are armed on a watchdog that ends a rank whose peer never comes
//! (stopped, hung) with exit 3 and a line naming the wait and the peer's state.

mod bulk;
mod common;

use std::process::ExitCode;
use std::time::Duration;

use copyrpc_core::bulk::Pattern;
use copyrpc_host::fabric::verbs::gid;
use copyrpc_host::fabric::{self, FabricKind, FabricOptions, Qos};
use copyrpc_host::rpc::RpcConfig;
use copyrpc_host::vworld::{world_from_flags, WorldSpec};
use copyrpc_host::watchdog::{PeerId, Watchdog};

use bulk::steps::{Steps, MARGIN, PREPARE, SETUP};
use bulk::{Args, Node, SLOTS};

const USAGE: &str = "usage: mpirun -np 2 copyrpc-bulk [--fabric auto|sim|verbs] \
     [--device NAME] [--port N] [--gid-index auto|N] [--tclass 0..=255] [--sl 0..=15] \
     [--pattern put|get|both|all] [--sizes 1K,1M,10M] [--iters N] [--chunk BYTES] \
     [--depth N] [--deadline-s S] [--seed N] [--world threads|virtual:2] [--cost K=NS,..] \
     [--nic K=V,..]";

fn size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let (num, mul) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: usize = num
        .parse()
        .map_err(|_| format!("size {text:?}: expected a number with an optional K, M or G"))?;
    match n.checked_mul(mul) {
        Some(b) if (1..=1 << 30).contains(&b) => Ok(b),
        _ => Err(format!("size {text:?}: expected 1 B ..= 1 GiB")),
    }
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Args>, String> {
    let mut a = Args {
        kind: FabricKind::Sim,
        verbs: Default::default(),
        qos: Qos::default(),
        patterns: vec![Pattern::Put, Pattern::Get, Pattern::Both],
        sizes: vec![1 << 10, 1 << 20, 10 << 20],
        iters: 3,
        chunk: 256 << 10,
        depth: 8,
        deadline: Duration::from_secs(60),
        seed: 0,
        world: None,
    };
    let (mut world, mut cost, mut nic) = (String::from("threads"), String::new(), String::new());
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .ok_or(format!("{flag} needs a value (try --help)"))
        };
        match flag.as_str() {
            "--fabric" => a.kind = value()?.parse().map_err(|e| format!("--fabric: {e}"))?,
            "--pattern" => {
                a.patterns = match value()?.as_str() {
                    "put" => vec![Pattern::Put],
                    "get" => vec![Pattern::Get],
                    "both" => vec![Pattern::Both],
                    "all" => vec![Pattern::Put, Pattern::Get, Pattern::Both],
                    p => return Err(format!("--pattern {p:?}: expected put, get, both or all")),
                }
            }
            "--sizes" => {
                a.sizes = value()?
                    .split(',')
                    .map(size)
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("--sizes: {e}"))?;
            }
            "--iters" => {
                a.iters = value()?
                    .parse()
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or("--iters: expected a whole number >= 1")?
            }
            "--chunk" => {
                a.chunk = u32::try_from(size(&value()?).map_err(|e| format!("--chunk: {e}"))?)
                    .ok()
                    .filter(|&c| c < 1 << 31)
                    .ok_or("--chunk: expected 1 B ..< 2 GiB")?
            }
            "--depth" => {
                a.depth = value()?
                    .parse()
                    .ok()
                    .filter(|&d| (1..=SLOTS as u16).contains(&d))
                    .ok_or(format!("--depth: expected 1..={SLOTS}"))?
            }
            "--deadline-s" => {
                let s: u64 = value()?
                    .parse()
                    .ok()
                    .filter(|&s| (1..=3600).contains(&s))
                    .ok_or("--deadline-s: expected 1..=3600 seconds")?;
                a.deadline = Duration::from_secs(s);
            }
            "--device" => {
                let d = value()?;
                if d.is_empty() || d.contains('/') {
                    return Err(format!(
                        "--device {d:?}: expected an RDMA device name (ibv_devices)"
                    ));
                }
                a.verbs.device = Some(d);
            }
            "--port" => {
                a.verbs.port = value()?
                    .parse()
                    .ok()
                    .filter(|&p| p >= 1)
                    .ok_or("--port: expected 1..=255 (ibv_devinfo lists the ports)")?
            }
            "--gid-index" => {
                let v = value()?;
                a.verbs.gid_index = match v.as_str() {
                    "auto" => None,
                    n => Some(
                        n.parse()
                            .map_err(|_| "--gid-index: expected auto or 0..=255 (show_gids)")?,
                    ),
                }
            }
            "--tclass" => {
                a.qos.traffic_class = value()?
                    .parse()
                    .map_err(|_| "--tclass: expected a traffic class 0..=255")?
            }
            "--sl" => {
                a.qos.sl = value()?
                    .parse()
                    .ok()
                    .filter(|&l| l <= Qos::MAX_SL)
                    .ok_or("--sl: expected a service level 0..=15")?
            }
            "--world" => world = value()?,
            "--cost" => cost = value()?,
            "--nic" => nic = value()?,
            "--seed" => {
                a.seed = value()?
                    .parse()
                    .map_err(|_| "--seed: expected a whole number 0..=2^64-1")?
            }
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    a.world = world_from_flags(
        &world,
        2..=2,
        &cost,
        None,
        &nic,
        a.kind == FabricKind::Verbs || a.verbs.device.is_some(),
    )?;
    if a.kind == FabricKind::Sim && a.verbs.device.is_some() {
        return Err("--device names an RDMA device, which --fabric sim does not use".into());
    }
    if a.kind != FabricKind::Sim && a.world.is_none() {
        gid::check_flags(
            &gid::sysfs_root(),
            a.verbs.device.as_deref(),
            a.verbs.port,
            a.verbs.gid_index,
        )?;
    }
    Ok(Some(a))
}

/// Each rank carves two pools of the largest size (put and get) from its sim region, on
/// top of the RPC node's queues and rings: the region's default leaves room for those,
/// and grows by the pools so that every size `--sizes` takes (up to 1 GiB) fits. The
/// region is sparse; `/dev/shm` is claimed only as the pools are carved.
fn fabric_options(a: &Args, max: usize) -> FabricOptions {
    let mut o = FabricOptions::default();
    o.sim.region_bytes += 2 * max.next_multiple_of(4096);
    o.verbs = a.verbs.clone();
    o
}

fn main() -> ExitCode {
    let a = match parse(std::env::args().skip(1)) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(why) => {
            eprintln!("copyrpc-bulk: {why}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Some(w) = &a.world {
        return run_virtual(&a, w);
    }
    let x = match common::init_mpi() {
        Ok(x) => x,
        Err(code) => return code,
    };
    let (r, n) = (x.rank(), x.size());
    if n != 2 {
        println!("rank {r}/{n}: FAIL needs exactly 2 ranks (mpirun -np 2), got {n}");
        return ExitCode::FAILURE;
    }
    let dog = Watchdog::start("copyrpc-bulk", r);
    // Each collective's own bound, behind the watchdog's: it fires first.
    x.set_timeout(SETUP.max(PREPARE + a.deadline + MARGIN) + 2 * MARGIN);
    let max = a.sizes.iter().copied().max().unwrap_or(1);
    let mut steps = Steps::new(&x, &dog, r, a.deadline);
    let result = set_up(&x, &dog, &a, max).and_then(|mut node| {
        let out = if r == 0 {
            bulk::client::run(&mut node, &a, &mut steps, max)
        } else {
            bulk::server::run(&mut node, &a, &mut steps, max)
        };
        // Said now: the last exchange waits for the other rank, which may be the reason
        // this one failed.
        if let Err(why) = &out {
            println!("rank {r}/{n}: FAIL {why}");
        }
        // Neither side drops its node (and with it the QP the other may still be
        // answering on) before both are done.
        let peer_ok = steps.end(out.is_ok());
        match (out, peer_ok) {
            (Ok(s), Ok(true)) => Ok(s),
            (Ok(_), Ok(false)) => Err(format!("rank {} failed (its line says why)", steps.peer())),
            (Ok(_), Err(e)) => Err(e),
            (Err(_), _) => Err(String::new()),
        }
    });
    match result {
        Ok(s) => {
            println!("rank {r}/{n}: {s} ok");
            ExitCode::SUCCESS
        }
        Err(why) => {
            // An empty reason was printed already.
            if !why.is_empty() {
                println!("rank {r}/{n}: FAIL {why}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Opens the fabric and brings the RPC node up, every wait on the other rank armed on
/// the watchdog.
fn set_up(
    x: &copyrpc_host::exchange::MpiExchange,
    dog: &Watchdog,
    a: &Args,
    max: usize,
) -> Result<Node, String> {
    let peer = 1 - x.rank();
    dog.arm("set-up: every rank's identity (all-gather)", SETUP);
    let peers = x
        .all_gather(&PeerId::me())
        .map_err(|e| format!("exchanging rank identities: {e}"))?;
    dog.set_peers(peers);
    dog.disarm();
    let (f, sel) = fabric::open(a.kind, &fabric_options(a, max)).map_err(|e| e.to_string())?;
    let (r, n) = (x.rank(), x.size());
    if r == 0 {
        eprintln!("copyrpc-bulk: {}", sel.reason);
    }
    common::describe_and_place("copyrpc-bulk", &f, r, n);
    dog.arm(
        format!("set-up: the endpoint exchange with rank {peer}"),
        SETUP,
    );
    let cfg = RpcConfig {
        qos: a.qos,
        ..RpcConfig::default()
    };
    let node = Node::establish(f, x, &cfg).map_err(|e| e.to_string());
    dog.disarm();
    node
}

/// `--world virtual:2`: both ranks' lines, then the world's; the wall time on stderr.
fn run_virtual(a: &Args, w: &WorldSpec) -> ExitCode {
    let wall = std::time::Instant::now();
    let max = a.sizes.iter().copied().max().unwrap_or(1);
    match bulk::world::run(a, w, max) {
        Ok(lines) => {
            for l in lines {
                println!("{l}");
            }
            eprintln!(
                "copyrpc-bulk: virtual world of 2 ranks in {:.2} s wall, one core",
                wall.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(why) => {
            println!("virtual:2: FAIL {why}");
            ExitCode::FAILURE
        }
    }
}
