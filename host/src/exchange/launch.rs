//! Starting a local multi-rank job: `mpirun` with the settings one small machine needs,
//! under a time limit, with the two failures everyone hits named plainly.

use std::path::Path;
use std::process::{Command, Output};

/// The Open MPI settings for a job on this machine: root is allowed (containers and CI
/// run as root), more ranks than cores are allowed (2-core machines), and only the
/// shared-memory transport is used (faster start-up). Other MPIs ignore them.
pub const LOCAL_OMPI_ENV: [(&str, &str); 5] = [
    ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
    ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
    ("OMPI_MCA_rmaps_base_oversubscribe", "1"),
    ("OMPI_MCA_btl", "self,vader"),
    ("OMPI_MCA_pml", "ob1"),
];

/// Runs `mpirun -np <np> <program> <args>` (or `program` alone when `np` is `None`)
/// with [`LOCAL_OMPI_ENV`], killed after `timeout_s` seconds. Returns the output
/// whatever the exit status, or why the job could not be run or did not finish.
pub fn run_local(
    np: Option<usize>,
    program: &Path,
    args: &[&str],
    timeout_s: u32,
) -> Result<Output, String> {
    let mut cmd = Command::new("timeout");
    cmd.args(["--kill-after=10", &timeout_s.to_string()]);
    if let Some(np) = np {
        cmd.args(["mpirun", "-np", &np.to_string()]);
    }
    cmd.arg(program).args(args);
    finish(cmd, &program.display().to_string(), timeout_s)
}

/// Runs one job of several programs, one rank each: `mpirun -np 1 <program> <args> :
/// -np 1 ...` (MPMD, each rank its own command line), as [`run_local`] runs one.
pub fn run_local_mpmd(ranks: &[(&Path, &[&str])], timeout_s: u32) -> Result<Output, String> {
    let mut cmd = Command::new("timeout");
    cmd.args(["--kill-after=10", &timeout_s.to_string(), "mpirun"]);
    for (i, (program, args)) in ranks.iter().enumerate() {
        if i > 0 {
            cmd.arg(":");
        }
        cmd.args(["-np", "1"]).arg(program).args(*args);
    }
    finish(cmd, "the MPMD job", timeout_s)
}

/// Runs `cmd` (a `timeout` command line) with [`LOCAL_OMPI_ENV`] and names the two
/// failures everyone hits.
fn finish(mut cmd: Command, what: &str, timeout_s: u32) -> Result<Output, String> {
    let out = cmd
        .envs(LOCAL_OMPI_ENV)
        .output()
        .map_err(|e| format!("cannot run `timeout` (coreutils): {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(127) if stderr.contains("mpirun") => Err(format!(
            "`mpirun` not found: multi-rank runs need Open MPI (scripts/setup.sh installs openmpi-bin and libopenmpi-dev)\n{stderr}"
        )),
        Some(124) | Some(137) => Err(format!(
            "{what} did not finish within {timeout_s} s\nstdout:\n{}\nstderr:\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )),
        _ => Ok(out),
    }
}

/// [`run_local`] for a job that must succeed: a non-zero exit is an error too, with the
/// job's output in it.
pub fn run_local_ok(
    np: Option<usize>,
    program: &Path,
    args: &[&str],
    timeout_s: u32,
) -> Result<Output, String> {
    let out = run_local(np, program, args, timeout_s)?;
    if out.status.success() {
        return Ok(out);
    }
    Err(format!(
        "{} {args:?} on {} rank(s) failed ({})\nstdout:\n{}\nstderr:\n{}",
        program.display(),
        np.unwrap_or(1),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}
