//! benchkv: the distributed key-value benchmark over copyrpc (docs/spec/benchkv.md).
//!
//! ## The dependency rule
//!
//! Modules sit in layers, and a module imports only its own layer and the layers below
//! it (`scripts/check-layering.sh` checks this; the only import cycles allowed are a
//! module and its own children):
//!
//! | layer | modules | what |
//! |---|---|---|
//! | entry | `main` | parses, dispatches to a runner, prints |
//! | runners | [`orchestrate`] (threads over MPI), [`vworld`] (actors in virtual time), [`rank`] (one rank's build, shared by both), [`cluster`], [`watchdog`], [`resources`] | build ranks from a configuration and run them |
//! | configuration | [`config`] (the checked [`config::Config`]; it parses the command line), [`cli`] (the flags) | what to run; nothing but `config` and `main` imports `cli` |
//! | results | [`report`], [`output`], [`plot`] | the gathered report and its formats |
//! | key-value parts | [`msg`], [`route`], [`store`], [`workload`], [`client`], [`daemon`], [`remote`], [`histogram`], [`metrics`] | the benchmark itself; they import neither the configuration nor the runners |
//!
//! | module | holds |
//! |---|---|
//! | [`cli`] | the flags (clap derive) |
//! | [`config`] | validation of the flags into a `Config`, pinning plan |
//! | [`workload`] | per-client patterns: uniform / Zipf keys, ranks, read ratio |
//! | [`msg`] | Request / Response / DelegatePayload (docs/spec/benchkv.md#messages) |
//! | [`route`] | the backend, and which daemon holds the endpoint to a rank |
//! | [`store`] | one shard's fixed-capacity table; values derivable from their key |
//! | [`daemon`] | the daemon loop: transport, delegation ring, ipc, Flux phases, parking; its table of requests awaiting an answer |
//! | [`remote`] | the inter-rank transport seam: copyrpc, and an in-process loopback |
//! | [`client`] | the closed-loop client |
//! | [`rank`] | one rank's shm servers, Flux memory, daemon parts, client set-up; the transports of a threaded rank; what a rank reports |
//! | [`orchestrate`] | docs/spec/benchkv.md#orchestration on threads: runs, stop, drain, gather |
//! | [`vworld`] | `--world virtual:N`: benchkv's daemons and clients as actors of `copyrpc_host::vworld` |
//! | [`cluster`] | MPI ranks or a single rank |
//! | [`resources`] | what a threaded rank needs from its machine (memory, mappings), checked first |
//! | [`watchdog`] | bounds every wait on other ranks; names the wait and the stuck peer |
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
mod plot;
mod rank;
mod remote;
mod report;
mod resources;
mod route;
mod store;
mod vworld;
mod watchdog;
mod workload;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::Cli;
use crate::config::{Config, Output};
use crate::rank::result::Fail;

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
    // Regions a killed run of any copyrpc tool left behind (their process gone) are
    // removed by every run, whatever it opens (docs/RELIABILITY.md).
    copyrpc_host::shm::sweep_left_behind();
    if cfg.hugepages && cfg.world.is_none() {
        // SAFETY: no other thread exists yet: MPI and the daemons start below.
        let set = unsafe { copyrpc_host::fabric::verbs::huge::prefer_huge_queue_buffers() };
        if !set.is_empty() {
            eprintln!(
                "benchkv: --hugepages: rdma-core asked for huge pages ({})",
                set.join(", ")
            );
        }
    }
    // Before MPI and the daemons start threads (they inherit the blocked signals).
    if let Err(e) = copyrpc_host::signals::unlink_regions_on_termination("benchkv") {
        eprintln!("benchkv: error: cannot set up the clean-up on SIGINT/SIGTERM: {e}");
        return ExitCode::from(1);
    }
    let ran = match &cfg.world {
        Some(world) => vworld::run(&cfg, world),
        None => orchestrate::run(&cfg),
    };
    let out = match ran {
        Ok(o) => o,
        Err(Fail::Usage(e)) => {
            eprintln!("benchkv: error: {e}");
            return ExitCode::from(2);
        }
        Err(Fail::Setup(e)) => {
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
            Output::Table => output::table(&out.report),
            Output::Json => {
                let mut t = output::json_lines(&out.report);
                for v in &out.extra_json {
                    t.push_str(&v.to_string());
                    t.push('\n');
                }
                t
            }
            Output::Csv => {
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
