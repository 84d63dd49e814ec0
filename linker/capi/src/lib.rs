//! The `copyrpc` C library: what a C program links to run copyrpc and the
//! shared-memory protocols from its own poll loop.
//!
//! * the data path, from `copyrpc-linker` (no_std, allocation-free): a context in the
//!   caller's memory, endpoints, call / poll / recv / reply / flush;
//! * [`fabric`]: the set-up the data path cannot do without std: open the sim or verbs
//!   fabric, create a context's queues and each endpoint's QP and rings, and connect
//!   two endpoints through an exchange the C program provides (a callback: a pipe, a
//!   socket, MPI);
//! * [`deleg`] and [`ipc`]: delegationrpc and ipc over `/dev/shm`, handles in the
//!   caller's memory.
//!
//! Set-up functions allocate and may fail with `COPYRPC_E_SYSTEM`, whose cause
//! `copyrpc_last_error` gives; the per-call functions allocate nothing.
#![allow(non_camel_case_types)]

pub mod deleg;
pub mod fabric;
pub mod ipc;
mod last_error;
mod shm;

pub use copyrpc_linker as data_path;
pub use last_error::copyrpc_last_error;
pub use shm::copyrpc_shm_msg;

#[cfg(test)]
mod tests {
    /// The header's handle sizes are bounds kept near the real ones.
    #[test]
    fn shm_handle_bytes_are_tight() {
        for (what, real, stated) in [
            (
                "deleg server",
                crate::deleg::server_size(),
                crate::deleg::COPYRPC_DELEG_SERVER_BYTES,
            ),
            (
                "deleg client",
                crate::deleg::client_size(),
                crate::deleg::COPYRPC_DELEG_CLIENT_BYTES,
            ),
            (
                "ipc server",
                crate::ipc::server_size(),
                crate::ipc::COPYRPC_IPC_SERVER_BYTES,
            ),
            (
                "ipc client",
                crate::ipc::client_size(),
                crate::ipc::COPYRPC_IPC_CLIENT_BYTES,
            ),
        ] {
            eprintln!("{what}: {real} bytes");
            assert!(
                real <= stated && stated - real < 128,
                "{what}: {real} of {stated}"
            );
        }
    }
}
