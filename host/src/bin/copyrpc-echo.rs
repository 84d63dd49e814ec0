//! `mpirun -np N copyrpc-echo [--fabric auto|sim|verbs] [--device NAME] [--port N]
//! [--gid-index auto|N] [--calls N] [--max-payload B] [--rpc-ring auto|BYTES] [--deadline-s S]`
//!
//! Every rank echoes with every other over copyrpc (see `copyrpc_host::rpc::echo`) and
//! prints one line: `rank r/n: <counts>: ok`, or `rank r/n: FAIL <why>` and a non-zero exit.
//! Run alone (no mpirun) it is a single rank with nobody to call, which still checks
//! that the fabric and the context come up.
//!
//! Every flag is checked before MPI starts: a bad value is one line on stderr naming
//! the flag and its valid range, and exit status 2.

mod common;

use std::ops::RangeInclusive;
use std::process::ExitCode;
use std::time::Duration;

use copyrpc_host::exchange::{options, MpiExchange};
use copyrpc_host::fabric::{self, FabricKind, FabricOptions};
use copyrpc_host::rpc::echo::{self, EchoConfig, MAX_DEADLINE, MAX_RING};
use copyrpc_host::rpc::{sizing, RpcConfig};

const USAGE: &str = "usage: copyrpc-echo [--fabric auto|sim|verbs] [--device NAME] [--port N] \
     [--gid-index auto|N] [--calls N] [--max-payload BYTES] [--rpc-ring auto|BYTES] \
     [--deadline-s S]\n  --rpc-ring: each endpoint's ring per direction, a power of two from 4k to 256k, \
     or auto (the default: the smallest ring at which the echo's 16 calls in flight per \
     peer never wait for credit)";

/// What the command line asks for: a run, or the usage text.
enum Parsed {
    Run(FabricKind, Box<FabricOptions>, EchoConfig),
    Help,
}

/// `text` as a whole number in `range`; errors name `flag` and the range.
fn number(flag: &str, text: &str, range: RangeInclusive<u64>, what: &str) -> Result<u64, String> {
    let expected = format!(
        "a whole number in {}..={}{what}",
        range.start(),
        range.end()
    );
    let n: u64 = text
        .parse()
        .map_err(|_| format!("{flag} {text:?}: expected {expected}"))?;
    if !range.contains(&n) {
        return Err(format!("{flag} {n} is out of range: expected {expected}"));
    }
    Ok(n)
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
    let mut kind = FabricKind::Auto;
    let mut cfg = EchoConfig::default();
    let mut opts = FabricOptions::default();
    let mut args = args.into_iter();
    // Checked after the loop: the payload limit depends on the ring.
    let (mut ring, mut max_payload) = (None, None);
    while let Some(a) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .ok_or(format!("{name} needs a value (try --help)"))
        };
        match a.as_str() {
            "--fabric" => {
                kind = value("--fabric")?
                    .parse()
                    .map_err(|e| format!("--fabric: {e}"))?
            }
            "--device" => {
                let d = value("--device")?;
                if d.is_empty() || d.contains('/') {
                    return Err(format!(
                        "--device {d:?}: expected an RDMA device name (ibv_devices)"
                    ));
                }
                opts.verbs.device = Some(d);
            }
            "--port" => {
                let n = number(
                    "--port",
                    &value("--port")?,
                    1..=255,
                    " (ibv_devinfo lists the ports)",
                )?;
                opts.verbs.port = n as u8;
            }
            "--gid-index" => {
                let v = value("--gid-index")?;
                opts.verbs.gid_index = if v == "auto" {
                    None
                } else {
                    Some(number("--gid-index", &v, 0..=255, " or auto (show_gids)")? as u8)
                };
            }
            "--calls" => {
                let n = number("--calls", &value("--calls")?, 1..=u64::from(u32::MAX), "")?;
                cfg.calls_per_peer = u32::try_from(n).map_err(|e| format!("--calls: {e}"))?;
            }
            "--max-payload" => {
                // Its range depends on the ring: checked against it below, once both
                // flags are read.
                let v = value("--max-payload")?;
                let n: u64 = v.trim().parse().map_err(|_| {
                    format!(
                        "--max-payload {v:?}: expected a whole number of bytes, at most what \
                         --rpc-ring carries"
                    )
                })?;
                max_payload = Some(usize::try_from(n).unwrap_or(usize::MAX));
            }
            "--rpc-ring" => {
                let r = sizing::parse_ring(&value("--rpc-ring")?)
                    .map_err(|e| format!("--rpc-ring {e}"))?;
                if let Some(b) = r.filter(|&b| b > MAX_RING) {
                    return Err(format!(
                        "--rpc-ring {} KiB is above the echo's largest ring, {} KiB",
                        b >> 10,
                        MAX_RING >> 10
                    ));
                }
                ring = Some(r);
            }
            "--deadline-s" => {
                let n = number(
                    "--deadline-s",
                    &value("--deadline-s")?,
                    1..=MAX_DEADLINE.as_secs(),
                    " seconds",
                )?;
                cfg.deadline = Duration::from_secs(n);
            }
            "-h" | "--help" => return Ok(Parsed::Help),
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    if let Some(p) = max_payload {
        cfg.max_payload = p;
    }
    match ring.flatten() {
        None => cfg.auto_ring(),
        Some(b) => cfg.rpc = RpcConfig::for_ring(b),
    }
    let limit = cfg.max_payload_limit();
    if cfg.max_payload > limit {
        let given = if max_payload.is_some() {
            ""
        } else {
            " (the default)"
        };
        return Err(format!(
            "--max-payload {}{given} does not fit --rpc-ring {} KiB: the largest payload and \
             response allowance that ring carries is {limit}; lower --max-payload or raise \
             --rpc-ring",
            cfg.max_payload,
            cfg.rpc.ring_bytes >> 10
        ));
    }
    // The flags are each in range; this catches any combination the library refuses.
    cfg.validate().map_err(|e| format!("{e}"))?;
    if kind == FabricKind::Sim && opts.verbs.device.is_some() {
        return Err("--device names an RDMA device, which --fabric sim does not use".into());
    }
    Ok(Parsed::Run(kind, Box::new(opts), cfg))
}

/// The options every rank must share, with their values: ranks that disagree (an
/// `mpirun A : B` gives ranks different command lines) would each wait for calls the
/// other never makes, until the deadline.
fn shared_options(kind: FabricKind, cfg: &EchoConfig) -> [(&'static str, String); 5] {
    [
        ("--fabric", format!("{kind}")),
        ("--calls", cfg.calls_per_peer.to_string()),
        ("--max-payload", cfg.max_payload.to_string()),
        ("--rpc-ring", format!("{:?}", cfg.rpc)),
        ("--deadline-s", format!("{:?}", cfg.deadline)),
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
    let (kind, opts, cfg) = match parse(std::env::args().skip(1)) {
        Ok(Parsed::Run(kind, opts, cfg)) => (kind, opts, cfg),
        Ok(Parsed::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(why) => {
            eprintln!("copyrpc-echo: {why}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
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
