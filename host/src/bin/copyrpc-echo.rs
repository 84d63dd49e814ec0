//! `mpirun -np N copyrpc-echo [--fabric auto|sim|verbs] [--calls N] [--max-payload B]`
//!
//! Every rank echoes with every other over copyrpc (see `copyrpc_host::rpc::echo`) and
//! prints one line: `rank r/n: <counts>: ok`, or `rank r/n: FAIL <why>` and a non-zero exit.
//! Run alone (no mpirun) it is a single rank with nobody to call, which still checks
//! that the fabric and the context come up.

use std::process::ExitCode;
use std::time::Duration;

use copyrpc_host::exchange::MpiExchange;
use copyrpc_host::fabric::{self, FabricKind, FabricOptions};
use copyrpc_host::rpc::echo::{self, EchoConfig};

fn parse() -> Result<(FabricKind, EchoConfig), String> {
    let mut kind = FabricKind::Auto;
    let mut cfg = EchoConfig::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--fabric" => kind = value("--fabric")?.parse().map_err(|e| format!("{e}"))?,
            "--calls" => {
                cfg.calls_per_peer = value("--calls")?
                    .parse()
                    .map_err(|e| format!("--calls: {e}"))?
            }
            "--max-payload" => {
                cfg.max_payload = value("--max-payload")?
                    .parse()
                    .map_err(|e| format!("--max-payload: {e}"))?
            }
            "--deadline-s" => {
                cfg.deadline = Duration::from_secs(
                    value("--deadline-s")?
                        .parse()
                        .map_err(|e| format!("--deadline-s: {e}"))?,
                )
            }
            "-h" | "--help" => {
                return Err("usage: copyrpc-echo [--fabric auto|sim|verbs] [--calls N] [--max-payload BYTES] [--deadline-s S]".into())
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok((kind, cfg))
}

fn main() -> ExitCode {
    let (kind, cfg) = match parse() {
        Ok(v) => v,
        Err(why) => {
            eprintln!("copyrpc-echo: {why}");
            return ExitCode::from(2);
        }
    };
    let x = match MpiExchange::init() {
        Ok(x) => x,
        Err(err) => {
            println!("rank ?/?: FAIL MPI init: {err}");
            return ExitCode::FAILURE;
        }
    };
    let (r, n) = (x.rank(), x.size());
    let result = fabric::open(kind, &FabricOptions::default())
        .map_err(|e| format!("{e}"))
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
