//! What the MPI tools (`copyrpc-echo`, `copyrpc-bulk`, `copyrpc-mpi-selftest`) share.

use std::process::ExitCode;

use copyrpc_host::exchange::MpiExchange;

/// `MPI_COMM_WORLD`; when MPI cannot start, the rank's one output line (`rank ?/?: FAIL
/// MPI init: <why>`, the same shape as every other result line) is printed here and the
/// exit code to return is handed back.
pub fn init_mpi() -> Result<MpiExchange, ExitCode> {
    MpiExchange::init().map_err(|err| {
        println!("rank ?/?: FAIL MPI init: {err}");
        ExitCode::FAILURE
    })
}
