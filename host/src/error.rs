//! The host crate's one error type: a variant per failing call, each naming what it
//! failed on (the region name, the cpu) and carrying the OS error (STYLE L14).

use std::io;

use copyrpc_core::deleg::{ConnectError, LayoutError};
use copyrpc_core::ipc::IpcConnectError;

/// Everything the host's shm regions and pinning can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The name is not `/` followed by 1..=254 bytes without `/` or NUL.
    #[error("shm region name {name:?} is invalid: {reason}")]
    ShmName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `shm_open` failed (for `open`: the region does not exist, or permissions).
    #[error("shm_open({name}) failed")]
    ShmOpen {
        /// The region name.
        name: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Exclusive create found a region of that name whose creator is alive.
    #[error("shm region {name} already exists (creator pid {pid} is alive)")]
    ShmExists {
        /// The region name.
        name: String,
        /// The creator recorded in the region (0 if it never finished initialising).
        pid: u32,
    },
    /// A region whose creator process is gone (left behind by a crash).
    #[error("shm region {name} is stale: its creator pid {pid} is gone")]
    ShmStale {
        /// The region name.
        name: String,
        /// The dead creator's pid.
        pid: u32,
    },
    /// `ftruncate` while sizing a new region.
    #[error("ftruncate({name}, {len}) failed")]
    ShmTruncate {
        /// The region name.
        name: String,
        /// The size asked for.
        len: usize,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `fstat` of an opened region.
    #[error("fstat({name}) failed")]
    ShmStat {
        /// The region name.
        name: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `mmap` of a region.
    #[error("mmap({name}, {len} bytes) failed")]
    ShmMap {
        /// The region name.
        name: String,
        /// Bytes to map.
        len: usize,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `shm_unlink`.
    #[error("shm_unlink({name}) failed")]
    ShmUnlink {
        /// The region name.
        name: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The region's bytes are not the expected layout: bad magic, version, payload size,
    /// truncated, or out-of-range config.
    #[error("shm region {name} has a bad layout")]
    ShmLayout {
        /// The region name.
        name: String,
        /// What the core's validation found.
        #[source]
        source: LayoutError,
    },
    /// The region's server has shut down (`server_alive` is false).
    #[error("shm region {name}: the server has shut down")]
    ServerGone {
        /// The region name.
        name: String,
    },
    /// Registration as a client was refused.
    #[error("connect to shm region {name}")]
    Connect {
        /// The region name.
        name: String,
        /// Why (e.g. no free client id).
        #[source]
        source: ConnectError,
    },
    /// Registration as an ipc client was refused.
    #[error("connect to ipc region {name}")]
    IpcConnect {
        /// The region name.
        name: String,
        /// Why (e.g. no free client id).
        #[source]
        source: IpcConnectError,
    },
    /// `sched_getaffinity`.
    #[error("sched_getaffinity failed")]
    Affinity {
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `sched_setaffinity` to one cpu.
    #[error("pinning the thread to cpu {cpu} failed")]
    PinThread {
        /// The cpu.
        cpu: usize,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// `Result` with the host's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
