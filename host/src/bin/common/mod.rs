//! What the MPI tools (`copyrpc-echo`, `copyrpc-bulk`, `copyrpc-mpi-selftest`) share.

use std::process::ExitCode;

use copyrpc_host::exchange::MpiExchange;
use copyrpc_host::fabric::Fabric;
use copyrpc_host::placement;

/// `MPI_COMM_WORLD`; when MPI cannot start, the rank's one output line (`rank ?/?: FAIL
/// MPI init: <why>`, the same shape as every other result line) is printed here and the
/// exit code to return is handed back.
///
/// First, before MPI starts its threads, the tool's `/dev/shm` regions are set to be
/// unlinked when SIGINT, SIGTERM or SIGHUP ends it (Ctrl-C on `mpirun`).
pub fn init_mpi() -> Result<MpiExchange, ExitCode> {
    let arg0 = std::env::args().next().unwrap_or_default();
    let tool = arg0.rsplit('/').next().unwrap_or("copyrpc");
    if let Err(err) = copyrpc_host::signals::unlink_regions_on_termination(tool) {
        println!("rank ?/?: FAIL clean-up on SIGINT/SIGTERM: {err}");
        return Err(ExitCode::FAILURE);
    }
    MpiExchange::init().map_err(|err| {
        println!("rank ?/?: FAIL MPI init: {err}");
        ExitCode::FAILURE
    })
}

/// On a NIC: says which device rank `r` of `n` uses and moves this thread (which creates
/// and first touches the rings and queues, and polls them) to the NIC's NUMA node,
/// saying where it ended up or why it could not.
#[allow(dead_code, reason = "copyrpc-mpi-selftest opens no fabric")]
pub fn describe_and_place(tool: &str, f: &Fabric, r: usize, n: usize) {
    let Fabric::Verbs(d) = f else { return };
    eprintln!("{tool}: rank {r}/{n}: {}", d.describe());
    if let Some(node) = d.numa_node() {
        match placement::bind_current_thread(node) {
            Ok(p) => eprintln!(
                "{tool}: rank {r}/{n}: on NUMA node {node} (cpus {:?})",
                p.cpus
            ),
            Err(e) => eprintln!("{tool}: rank {r}/{n}: not placed: {e}"),
        }
    }
}
