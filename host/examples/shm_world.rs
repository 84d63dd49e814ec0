//! The shm bench's `rtt/*` and `window32/*` in virtual time (`copyrpc_host::shm::world`):
//! one client and one server of each protocol, the real code, charged by the cost model.
//! One line per protocol and window, ns a call, deterministic.
//!
//! ```sh
//! cargo run --release -p copyrpc-host --example shm_world -- [--hops N] [--visible RULE] [--cost k=v,...]
//! ```
use std::path::PathBuf;

use clap::Parser;
use copyrpc_host::shm::world::{run, Proto, ShmWorld, Visibility, WINDOWS};
use copyrpc_host::vworld::{default_profile, load_profile, CostModel};

#[derive(Parser)]
#[command(about = "The shm bench's shape (one client, one server) in virtual time")]
struct Args {
    /// Protocols: ipc, deleg, flux (comma-separated).
    #[arg(long, default_value = "ipc,deleg,flux")]
    proto: String,
    /// Calls per run.
    #[arg(long, default_value_t = 20_000)]
    calls: u64,
    /// Line transfers in series per hand-off (the virtual world's model: 1).
    #[arg(long, default_value_t = 1)]
    hops: u32,
    /// When a turn's writes are visible: `turn-start` (the virtual world's rule) or
    /// `after-lines` (after the turn's own line transfers).
    #[arg(long, default_value = "turn-start")]
    visible: String,
    /// A cost profile (default: the built-in one).
    #[arg(long)]
    cost_profile: Option<PathBuf>,
    /// Cost figures to override, `key=value,...` (as benchkv's `--cost`).
    #[arg(long, default_value = "")]
    cost: String,
    /// Seeds the jitter (none by default).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() {
    let a = Args::parse();
    let fail = |e: String| -> ! {
        eprintln!("shm_world: {e}");
        std::process::exit(2)
    };
    let profile = match &a.cost_profile {
        Some(p) => load_profile(p).unwrap_or_else(|e| fail(e)),
        None => default_profile(),
    };
    let cost = CostModel::with_profile(profile.cost, &a.cost).unwrap_or_else(|e| fail(e));
    let rule = match a.visible.as_str() {
        "turn-start" => Visibility::TurnStart,
        "after-lines" => Visibility::AfterLines,
        v => fail(format!("--visible {v}: expected turn-start or after-lines")),
    };
    let protos: Vec<Proto> = a
        .proto
        .split(',')
        .map(|p| {
            Proto::parse(p.trim())
                .unwrap_or_else(|| fail(format!("--proto {p}: expected ipc, deleg or flux")))
        })
        .collect();
    for proto in protos {
        for window in WINDOWS {
            let spec = ShmWorld {
                proto,
                window,
                calls: a.calls,
                cost,
                instructions_per_ns: profile.instructions_per_ns,
                hops: a.hops,
                rule,
                seed: a.seed,
            };
            let region = format!(
                "/shm-world-{}-{}-{window}",
                std::process::id(),
                proto.name()
            );
            let r = run(&spec, &region).unwrap_or_else(|e| {
                eprintln!("shm_world: {e}");
                std::process::exit(1)
            });
            let bench = if window == 1 { "rtt" } else { "window32" };
            println!(
                "{bench}/{}: {:.1} ns a call ({} calls, {} client turns, {} server turns of which {} idle, {} line transfers of {} ns, hops {}, visible {})",
                proto.name(),
                r.ns_per_call(),
                r.calls,
                r.client_turns,
                r.server_turns,
                r.server_idle,
                r.lines,
                cost.line_ns,
                a.hops,
                a.visible
            );
        }
    }
}
