//! Self-test of the MPI exchange, run by `host/tests/mpi_exchange.rs` under
//! `mpirun -np N` (or alone, as an MPI singleton).
//!
//! Every rank checks what it received against what each peer must have sent and prints
//! one line, `rank R/N: ... ok`, or `rank R/N: FAIL ...` and exits with status 1.
//!
//! `--stall-rank R --timeout-ms T` tests the bound on collectives: every rank sets the
//! exchange's timeout to T, and rank R stops itself (SIGSTOP) instead of entering the
//! final barrier, so the others must abort the job after T with a message naming it.
//! Any other argument is refused (status 2) before MPI starts, rather than ignored, so a
//! mistyped flag cannot pass for a configured run.

mod common;

use std::process::ExitCode;

use copyrpc_host::error::Error;
use copyrpc_host::exchange::{MpiExchange, ReduceOp};
use copyrpc_host::fabric::{MrEndpoint, QpEndpoint};

/// What rank `from` sends rank `to` in round `round`.
fn ep(from: usize, to: usize, round: u8) -> QpEndpoint {
    QpEndpoint {
        qpn: (from * 1000 + to) as u32,
        psn: 0x10_0000 + (from as u32) * 16 + u32::from(round),
        lid: to as u16,
        mtu: 5,
        flags: round & 1,
        gid: [from as u8 ^ 0x5a; 16],
        reserved: [round; 4],
    }
}

fn mr(rank: usize) -> MrEndpoint {
    MrEndpoint {
        addr: 0x7f00_0000_0000 + rank as u64 * 4096,
        len: 1 << 20,
        rkey: 0xabc0 + rank as u32,
        reserved: 0,
    }
}

fn run(x: &MpiExchange, stall_rank: Option<usize>) -> Result<String, String> {
    let (r, n) = (x.rank(), x.size());
    let e = |what: &'static str| move |err: Error| format!("{what}: {err}");
    for round in 0..3u8 {
        let send: Vec<_> = (0..n).map(|to| ep(r, to, round)).collect();
        let got = x.all_to_all(&send).map_err(e("all_to_all"))?;
        let want: Vec<_> = (0..n).map(|from| ep(from, r, round)).collect();
        if got != want {
            return Err(format!(
                "all_to_all round {round}: got {got:?}, want {want:?}"
            ));
        }
    }
    match x.all_to_all::<QpEndpoint>(&[]) {
        Err(Error::ExchangeShape {
            expected, got: 0, ..
        }) if expected == n => {}
        other => return Err(format!("all_to_all of 0 records: {other:?}")),
    }
    let all = x.all_gather(&mr(r)).map_err(e("all_gather"))?;
    if all != (0..n).map(mr).collect::<Vec<_>>() {
        return Err(format!("all_gather: got {all:?}"));
    }
    let n64 = n as u64;
    let sum = x
        .all_reduce_u64(r as u64 + 1, ReduceOp::Sum)
        .map_err(e("sum"))?;
    let max = x
        .all_reduce_u64(r as u64 * 10, ReduceOp::Max)
        .map_err(e("max"))?;
    let fsum = x
        .all_reduce_f64(0.5 * (r as f64 + 1.0), ReduceOp::Sum)
        .map_err(e("fsum"))?;
    let fmax = x
        .all_reduce_f64(1.5 * r as f64, ReduceOp::Max)
        .map_err(e("fmax"))?;
    if sum != n64 * (n64 + 1) / 2 || max != (n64 - 1) * 10 {
        return Err(format!("u64 reductions: sum {sum} max {max}"));
    }
    if (fsum - 0.25 * (n * (n + 1)) as f64).abs() > 1e-9 || fmax != 1.5 * (n - 1) as f64 {
        return Err(format!("f64 reductions: sum {fsum} max {fmax}"));
    }
    // With a stalled rank, the others abort the job: each holds a /dev/shm region
    // then, which the abort must remove (`MpiExchange`'s bound), as a rank with a sim
    // fabric would.
    let _region = stall_rank
        .map(|_| {
            copyrpc_host::shm::ShmRegion::create(
                &format!("/copyrpc-selftest-{}", std::process::id()),
                4096,
            )
        })
        .transpose()
        .map_err(e("a /dev/shm region"))?;
    if stall_rank == Some(r) {
        // SAFETY: raise(3) has no preconditions; the process stops until SIGCONT/SIGKILL.
        unsafe { libc::raise(libc::SIGSTOP) };
    }
    x.barrier().map_err(e("barrier"))?;
    Ok(format!(
        "all_to_all x3 ok, all_gather ok, sum_u64={sum} max_u64={max} sum_f64={fsum} \
         max_f64={fmax}, barrier ok"
    ))
}

/// `--stall-rank R --timeout-ms T`, or neither.
fn parse_args() -> Result<(Option<usize>, Option<u64>), String> {
    let (mut stall, mut timeout) = (None, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or(format!("{name} needs a number"))
        };
        match a.as_str() {
            "--stall-rank" => stall = Some(value("--stall-rank")? as usize),
            "--timeout-ms" => timeout = Some(value("--timeout-ms")?),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok((stall, timeout))
}

fn main() -> ExitCode {
    let (stall, timeout) = match parse_args() {
        Ok(a) => a,
        Err(e) if e.is_empty() => {
            println!("usage: mpirun -np N copyrpc-mpi-selftest [--stall-rank R --timeout-ms T]");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("copyrpc-mpi-selftest: error: {e}");
            return ExitCode::from(2);
        }
    };
    let x = match common::init_mpi() {
        Ok(x) => x,
        Err(code) => return code,
    };
    if let Some(ms) = timeout {
        x.set_timeout(std::time::Duration::from_millis(ms));
    }
    let (r, n) = (x.rank(), x.size());
    match stall {
        Some(s) if s >= n => {
            eprintln!("copyrpc-mpi-selftest: error: --stall-rank {s}: there are {n} ranks");
            return ExitCode::from(2);
        }
        Some(_) if n < 2 => {
            eprintln!(
                "copyrpc-mpi-selftest: error: --stall-rank needs 2 ranks or more: no other \
                 rank would end the stopped one"
            );
            return ExitCode::from(2);
        }
        _ => {}
    }
    match run(&x, stall) {
        Ok(summary) => {
            println!("rank {r}/{n}: {summary}: ok");
            ExitCode::SUCCESS
        }
        Err(why) => {
            println!("rank {r}/{n}: FAIL {why}");
            ExitCode::FAILURE
        }
    }
}
