//! benchkv: the distributed key-value benchmark over copyrpc (docs/spec/benchkv.md).
//!
//! | module | holds |
//! |---|---|
//! | [`cli`] | the flags (clap derive) |
//! | [`config`] | validation of the flags, pinning plan |
//! | [`workload`] | per-client patterns: uniform / Zipf keys, ranks, read ratio, the RNG |
//! | [`msg`] | Request / Response / DelegatePayload (docs/spec/benchkv.md#messages) |
//! | [`store`] | one shard's fixed-capacity table; values derivable from their key |
//! | [`daemon`] | the daemon loop: transport, delegation ring, ipc, Flux phases, parking |
//! | [`pending`] | the daemon's table of requests awaiting an answer |
//! | [`remote`] | the inter-rank transport seam, and its in-process loopback |
//! | [`client`] | the closed-loop client thread |
//! | [`cluster`] | MPI ranks or a single rank |
//! | [`resources`] | what a threaded rank needs from its machine (memory, mappings), checked first |
//! | [`setup`] | what a rank builds first: shm servers, Flux memory, fabric decision |
//! | [`orchestrate`] | docs/spec/benchkv.md#orchestration: threads, runs, stop, drain, gather |
//! | [`watchdog`] | bounds every wait on other ranks; names the wait and the stuck peer |
//! | [`vworld`] | `--world virtual:N`: every rank in one process and thread, in virtual time |
//! | [`histogram`], [`metrics`], [`report`], [`output`], [`plot`] | results and their formats |

mod cli;
mod client;
mod cluster;
mod config;
mod daemon;
mod histogram;
mod metrics;
mod msg;
mod orchestrate;
mod output;
mod pending;
mod plot;
mod remote;
mod report;
mod resources;
mod setup;
mod store;
mod vworld;
mod watchdog;
mod workload;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, OutputArg};
use crate::config::Config;

fn main() -> ExitCode {
    // clap prints its own usage errors and exits with 2.
    let cli = Cli::parse();
    let cfg = match Config::from_cli(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("benchkv: error: {e}");
            return ExitCode::from(2);
        }
    };
    // Before MPI and the daemons start threads (they inherit the blocked signals).
    if let Err(e) = copyrpc_host::signals::unlink_regions_on_termination("benchkv") {
        eprintln!("benchkv: error: cannot set up the clean-up on SIGINT/SIGTERM: {e}");
        return ExitCode::from(1);
    }
    let out = match orchestrate::run(&cfg) {
        Ok(o) => o,
        Err(orchestrate::Fail::Usage(e)) => {
            eprintln!("benchkv: error: {e}");
            return ExitCode::from(2);
        }
        Err(orchestrate::Fail::Setup(e)) => {
            eprintln!("benchkv: error: {e}");
            return ExitCode::from(1);
        }
    };
    for e in &out.errors {
        eprintln!("benchkv: rank {}: {e}", out.rank);
    }
    if let Some(f) = &out.first_failure {
        eprintln!("benchkv: rank {}: first failed answer: {f}", out.rank);
    }
    let problems = out.report.problems();
    if out.rank == 0 {
        let text = match cfg.output {
            OutputArg::Table => output::table(&out.report),
            OutputArg::Json => {
                let mut t = output::json_lines(&out.report);
                for v in &out.extra_json {
                    t.push_str(&v.to_string());
                    t.push('\n');
                }
                t
            }
            OutputArg::Csv => {
                eprint!("{}", output::setup_lines(&out.report));
                let t = out.report.total();
                eprintln!(
                    "benchkv: drain: {} issued, {} completed; {} error answers; verify: {} \
                     checked, {} wrong",
                    t.issued, t.completed, t.error_answers, t.checked, t.failures
                );
                output::csv(&out.report)
            }
        };
        print!("{text}");
        if let Some(path) = &cfg.plot {
            let svg = match &out.series_svg {
                Some(s) => s.clone(),
                None => plot::svg(&out.report),
            };
            if let Err(e) = std::fs::write(path, svg) {
                eprintln!("benchkv: error: --plot {}: {e}", path.display());
                return ExitCode::from(1);
            }
        }
        for p in &problems {
            eprintln!("benchkv: FAILED: {p}");
        }
    }
    if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
