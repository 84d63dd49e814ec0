//! The host crate's one error type: a variant per failing call, each naming what it
//! failed on (the region name, the cpu) and carrying the OS error (STYLE L14).
//!
//! The shm variants also print their cause in `Display` (errno text such as "Permission
//! denied (os error 13)", the core's "no free client id"): the binaries report errors with
//! `to_string()`, which would otherwise drop it. `source()` still returns the cause for
//! code that matches on it.

use std::io;

use copyrpc_core::deleg::ConnectError;
use copyrpc_core::ipc::IpcConnectError;
use copyrpc_core::shm::LayoutError;

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
    #[error("shm_open({name}) failed: {source}")]
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
    /// Exclusive create found a region of that name that is not initialised and was made
    /// moments ago, or that another process is replacing: it may be being created.
    #[error("shm region {name} exists but is not initialised yet: another process may be creating or replacing it; retry, or remove /dev/shm{name} if no process uses it")]
    ShmUnfinished {
        /// The region name.
        name: String,
    },
    /// Exclusive create found an object of that name that is not a delegationrpc or ipc
    /// region: it is left alone, whatever `replace_stale` says.
    #[error("shm region {name} exists and is not a copyrpc region (magic {magic:#x}): not replaced; choose another name, or remove /dev/shm{name} if it is yours")]
    ShmForeign {
        /// The region name.
        name: String,
        /// The first 8 bytes (0 if shorter than a region header).
        magic: u64,
    },
    /// A region whose creator process is gone (left behind by a crash): no process with
    /// the recorded pid and start time exists (the pid may have been reused since), or the
    /// region is of an older layout that records no start time.
    #[error("shm region {name} is stale: its creator (pid {pid}) is gone; the pid may now belong to another process")]
    ShmStale {
        /// The region name.
        name: String,
        /// The dead creator's pid.
        pid: u32,
    },
    /// `ftruncate` while sizing a new region.
    #[error("ftruncate({name}, {len}) failed: {source}")]
    ShmTruncate {
        /// The region name.
        name: String,
        /// The size asked for.
        len: usize,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `/dev/shm` could not hold bytes a region hands out (`posix_fallocate` failed).
    /// Claimed up front because tmpfs grants a larger `ftruncate` than it can back and
    /// then answers the first touch of a page it has no room for with SIGBUS: a
    /// container's default 64 MiB `/dev/shm` did that to a 100 MiB bulk transfer.
    #[error(
        "no room in /dev/shm for {len} bytes of {name} (at offset {offset}): {source}; \
         /dev/shm has {free} of {size} bytes free (`df -h /dev/shm`): free some, or give it \
         more (a container's --shm-size)"
    )]
    ShmNoRoom {
        /// The region name.
        name: String,
        /// Start of the range within the region.
        offset: usize,
        /// Bytes asked for.
        len: usize,
        /// Free bytes of the `/dev/shm` file system when it refused (0 if unknown).
        free: u64,
        /// Its size (0 if unknown).
        size: u64,
        /// The OS error (ENOSPC for a full or too small tmpfs).
        #[source]
        source: io::Error,
    },
    /// `fstat` of an opened region.
    #[error("fstat({name}) failed: {source}")]
    ShmStat {
        /// The region name.
        name: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `mmap` of a region.
    #[error("mmap({name}, {len} bytes) failed: {source}")]
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
    #[error("shm_unlink({name}) failed: {source}")]
    ShmUnlink {
        /// The region name.
        name: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The region's bytes are not the expected layout: bad magic, version, payload size,
    /// truncated, or out-of-range config.
    #[error("shm region {name} has a bad layout: {source}")]
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
    #[error("connect to shm region {name}: {source}")]
    Connect {
        /// The region name.
        name: String,
        /// Why (e.g. no free client id).
        #[source]
        source: ConnectError,
    },
    /// Every client id was taken; some were held by dead (or closing) clients, and the
    /// server did not free them within the bound (it frees ids in its `poll`).
    #[error("connect to shm region {name}: no free client id; waited {waited:?} for the server to free ids {ids:?} held by dead or closing clients (is the server polling?)")]
    ClientIdNotFreed {
        /// The region name.
        name: String,
        /// The ids waited for.
        ids: Vec<u32>,
        /// How long.
        waited: std::time::Duration,
    },
    /// Registration as an ipc client was refused.
    #[error("connect to ipc region {name}: {source}")]
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
    /// Binding a thread to a NUMA node (its CPUs, its memory policy) failed.
    #[error("placing a thread on NUMA node {node}: {what} failed: {source}")]
    Placement {
        /// The node.
        node: u32,
        /// The step.
        what: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A set-up thread panicked.
    #[error("thread {name} panicked")]
    ThreadPanicked {
        /// Its name.
        name: String,
    },

    // ---- fabric selection (src/fabric/mod.rs) ----
    /// A `--fabric` value that is not `verbs`, `sim` or `auto`.
    #[error("unknown fabric {given:?}: expected `verbs`, `sim` or `auto`")]
    ParseFabricKind {
        /// The string given.
        given: String,
    },
    // ---- sim fabric (src/fabric/sim.rs) ----
    /// The device model refused a call (its reason is the [`mlx5_raw::sim::SimError`]).
    #[error("sim fabric {region}: {what} failed: {reason}")]
    Sim {
        /// The device call (`create_qp`, `connect`, ...).
        what: &'static str,
        /// The fabric's (or the peer's) `/dev/shm` region.
        region: String,
        /// The model's reason (a no_std `Copy` enum, so not an error `source`).
        reason: mlx5_raw::sim::SimError,
    },
    /// Inconsistent `sim` options, or a peer endpoint that cannot be this fabric's.
    #[error("sim fabric: {reason}")]
    SimConfig {
        /// What is wrong and what to do.
        reason: String,
    },
    /// The fabric's region has no room left for an object.
    #[error("sim fabric region {region} is full: {what} needs {len} bytes, {used} of {size} are used; raise SimOptions::region_bytes")]
    SimRegionFull {
        /// The region.
        region: String,
        /// The object being created.
        what: String,
        /// Bytes it needs.
        len: usize,
        /// Bytes already carved.
        used: usize,
        /// The region's size.
        size: usize,
    },
    /// The peer's region cannot be mapped (it runs on another machine, or has exited).
    #[error("sim fabric: cannot map the peer's region {region} ({source}); sim connects processes on one machine only, and the peer must still be running")]
    SimPeer {
        /// The peer's region name.
        region: String,
        /// Why.
        #[source]
        source: Box<Error>,
    },
    /// A thread could not be spawned.
    #[error("spawning the {what} thread failed")]
    SpawnThread {
        /// Which thread.
        what: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    // ---- copyrpc over a fabric (src/rpc/) ----
    /// The copyrpc core refused a setup step.
    #[error("copyrpc {what}{}: {reason}", match peer { Some(p) => format!(" (endpoint to rank {p})"), None => String::new() })]
    Rpc {
        /// The call (`Context::new`, `create_endpoint`, `connect`, ...).
        what: &'static str,
        /// The peer rank, for per-endpoint steps.
        peer: Option<usize>,
        /// The core's reason.
        reason: copyrpc_core::copyrpc::Error,
    },
    /// Sizes that cannot make a context.
    #[error("copyrpc configuration: {reason}")]
    RpcConfig {
        /// What is wrong.
        reason: String,
    },
    /// The echo check found a wrong byte, a failed call, or ran out of time.
    #[error("echo on rank {rank}: {what}")]
    Echo {
        /// The rank that noticed.
        rank: usize,
        /// What it saw.
        what: String,
    },

    // ---- verbs fabric (src/fabric/verbs/) ----
    /// `ibv_get_device_list` failed for a reason other than "this kernel has no RDMA"
    /// (that one, ENOSYS, is reported as [`Error::NoRdmaDevice`]).
    #[error("ibv_get_device_list failed")]
    VerbsDeviceList {
        /// The errno it set.
        #[source]
        source: io::Error,
    },
    /// There is no RDMA device at all, so the `verbs` fabric cannot open.
    #[error(
        "no RDMA device: {detail}; run with `--fabric sim` (the software device model) instead"
    )]
    NoRdmaDevice {
        /// What the probe saw (e.g. ENOSYS from `ibv_get_device_list`, or an empty list).
        detail: String,
    },
    /// RDMA devices exist, but not the one asked for.
    #[error("RDMA device {name:?} not found (present: {available:?}); pick one of those, or run with `--fabric sim`")]
    RdmaDeviceNotFound {
        /// The device name asked for.
        name: String,
        /// The devices `ibv_get_device_list` returned.
        available: Vec<String>,
    },
    /// The device is not driven by the mlx5 provider, so mlx5dv cannot expose its queues.
    #[error("RDMA device {device} is not an mlx5 device (mlx5dv_is_supported is false); copyrpc drives mlx5 queues directly")]
    NotMlx5 {
        /// The device name.
        device: String,
    },
    /// `ibv_open_device`.
    #[error("ibv_open_device({device}) failed")]
    VerbsOpenDevice {
        /// The device name.
        device: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `ibv_query_device`.
    #[error("ibv_query_device({device}) failed")]
    VerbsQueryDevice {
        /// The device name.
        device: String,
        /// The errno returned.
        #[source]
        source: io::Error,
    },
    /// `ibv_query_port`.
    #[error("ibv_query_port({device}, port {port}) failed")]
    VerbsQueryPort {
        /// The device name.
        device: String,
        /// The port number.
        port: u8,
        /// The errno returned.
        #[source]
        source: io::Error,
    },
    /// The port is not ACTIVE (cable, subnet manager, or link down).
    #[error("{device} port {port} is not active (ibv_port_state {state}); check the link and the subnet manager")]
    VerbsPortNotActive {
        /// The device name.
        device: String,
        /// The port number.
        port: u8,
        /// `ibv_port_state` as returned.
        state: u32,
    },
    /// The run would pin more memory than `RLIMIT_MEMLOCK` allows.
    #[error("{device}: this run registers about {need} bytes but RLIMIT_MEMLOCK is {limit} bytes; raise it (`ulimit -l unlimited`, or memlock in /etc/security/limits.conf; under mpirun the limit of the launching daemon applies) or use fewer endpoints or smaller rings")]
    VerbsMemlock {
        /// The device name.
        device: String,
        /// Bytes the run will register.
        need: u64,
        /// The soft limit.
        limit: u64,
    },
    /// `--gid-index auto` on a RoCE port found no entry, or several equally good ones.
    #[error("{device} port {port}: --gid-index auto: {why}")]
    VerbsGidChoice {
        /// The device name.
        device: String,
        /// The port number.
        port: u8,
        /// What the table holds (the candidates, when there are several).
        why: String,
    },
    /// `--gid-index N` is past the table, an empty slot, or not a RoCE v2 entry.
    #[error("{device} port {port}: {reason}")]
    VerbsGidIndex {
        /// The device name.
        device: String,
        /// The port number.
        port: u8,
        /// What is wrong, naming `--gid-index`.
        reason: String,
    },
    /// The chosen GID slot is empty.
    #[error("{device} port {port}: GID index {index} is empty (all zero); RoCE needs an address: pick another --gid-index (see `show_gids`)")]
    VerbsZeroGid {
        /// The device name.
        device: String,
        /// The port number.
        port: u8,
        /// The GID table index.
        index: u8,
    },
    /// `ibv_query_gid`.
    #[error("ibv_query_gid({device}, port {port}, index {index}) failed")]
    VerbsQueryGid {
        /// The device name.
        device: String,
        /// The port number.
        port: u8,
        /// The GID table index.
        index: u8,
        /// The errno returned.
        #[source]
        source: io::Error,
    },
    /// `ibv_alloc_pd`.
    #[error("ibv_alloc_pd({device}) failed")]
    VerbsAllocPd {
        /// The device name.
        device: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Allocating (mmap) the memory behind a memory region.
    #[error("allocating {len} bytes for memory region {region:?} failed")]
    MrAlloc {
        /// The region's name.
        region: String,
        /// Bytes asked for.
        len: usize,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `ibv_reg_mr`.
    #[error("ibv_reg_mr({device}, region {region:?}, {len} bytes) failed")]
    VerbsRegMr {
        /// The device name.
        device: String,
        /// The region's name.
        region: String,
        /// Bytes to register.
        len: usize,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `ibv_create_cq`.
    #[error("ibv_create_cq({device}, {cqe} entries) failed")]
    VerbsCreateCq {
        /// The device name.
        device: String,
        /// Entries asked for.
        cqe: u32,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `ibv_create_srq`.
    #[error("ibv_create_srq({device}, max_wr {max_wr}) failed")]
    VerbsCreateSrq {
        /// The device name.
        device: String,
        /// Receive WQEs asked for.
        max_wr: u32,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `mlx5dv_create_qp` (an RC QP through `ibv_qp_init_attr_ex`).
    #[error(
        "mlx5dv_create_qp({device}, RC, max_send_wr {max_send_wr}, max_inline {max_inline}) failed"
    )]
    VerbsCreateQp {
        /// The device name.
        device: String,
        /// Send WQEs asked for.
        max_send_wr: u32,
        /// Inline bytes asked for.
        max_inline: u32,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A thread domain or its parent domain could not be made (`step` names the verb).
    #[error("{step}({device}) failed: no thread domain (a UAR of its own) for this context")]
    VerbsThreadDomain {
        /// The device name.
        device: String,
        /// `ibv_alloc_td` or `ibv_alloc_parent_domain`.
        step: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `ibv_modify_qp` to the named state.
    #[error("ibv_modify_qp({device}, qpn {qpn:#x}) to {to} failed")]
    VerbsModifyQp {
        /// The device name.
        device: String,
        /// The QP number.
        qpn: u32,
        /// Target state: `INIT`, `RTR` or `RTS`.
        to: &'static str,
        /// The errno returned.
        #[source]
        source: io::Error,
    },
    /// `mlx5dv_init_obj` on a QP, CQ or SRQ.
    #[error("mlx5dv_init_obj({device}, {object}) failed")]
    Mlx5dvInitObj {
        /// The device name.
        device: String,
        /// `qp`, `cq` or `srq`.
        object: &'static str,
        /// The errno returned.
        #[source]
        source: io::Error,
    },
    /// `mlx5dv_init_obj` described a queue that `mlx5-raw` cannot drive.
    #[error("{device}: mlx5dv {object} has an unsupported layout: {detail}")]
    Mlx5dvLayout {
        /// The device name.
        device: String,
        /// `qp`, `cq` or `srq`.
        object: &'static str,
        /// What is off (e.g. an SQ stride other than 64).
        detail: String,
    },

    // ---- exchange (src/exchange/) ----
    /// `MPI_Init` was already called in this process (rsmpi hands out one universe).
    #[error("MPI is already initialized in this process; create one MpiExchange and share it")]
    MpiAlreadyInitialized,
    /// A collective was called with the wrong number of records.
    #[error("{op}: {got} records given, expected {expected} (one per rank)")]
    ExchangeShape {
        /// The collective.
        op: &'static str,
        /// Records expected.
        expected: usize,
        /// Records given.
        got: usize,
    },
    /// A collective of a thread group outlived its timeout: the ranks in `missing` never
    /// arrived (hung, or waiting on something else). The group is broken for good.
    #[error("exchange rank {rank}: ranks {missing:?} did not arrive within {:.1} s; the thread group is broken", waited.as_secs_f64())]
    ExchangeTimeout {
        /// The rank reporting.
        rank: usize,
        /// How long it waited.
        waited: std::time::Duration,
        /// The ranks that had not arrived.
        missing: Vec<usize>,
    },
    /// A thread rank left the group (dropped its handle, or panicked) while the others
    /// still expected it in a collective.
    #[error("exchange rank {rank} left the group{}", if *.panicked { " (it panicked)" } else { "" })]
    ExchangePeerGone {
        /// The rank that left.
        rank: usize,
        /// Whether it left by panicking.
        panicked: bool,
    },
}

/// `Result` with the host's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
