//! The std host shell of copyrpc: everything that needs an OS around the no_std core.
//!
//! | module | holds |
//! |---|---|
//! | [`fabric`] | where queues come from: [`fabric::verbs`] (a ConnectX through rdma-sys and our own mlx5dv bindings) or [`fabric::sim`] (the software device model in `/dev/shm`); `auto` picks and says why |
//! | [`bulk`] | registered buffer pools for bulk transfers, on either fabric |
//! | [`rpc`] | a copyrpc context with an endpoint per peer rank, built on a fabric and brought up over an exchange; the echo check |
//! | [`sim_engine`] | the thread that steps a software device in real time |
//! | [`vworld`] | the virtual-time runtime: N ranks' loops on one thread, a scheduler, the cost model and NIC profile |
//! | [`exchange`] | endpoint records across ranks: MPI (rsmpi) or threads of one process |
//! | [`shm`] | named `/dev/shm` regions and the core's shm protocols (delegation, ipc) over them |
//! | [`signals`] | a tool's regions unlinked when SIGINT, SIGTERM or SIGHUP ends it |
//! | [`watchdog`] | every wait of a rank on the others bounded: exit 3 naming the wait and the stalled peer |
//! | [`affinity`], [`topology`] | usable cores, pinning, the NIC's NUMA node |
//! | [`rng`], [`units`] | seeded random streams; durations as a command line writes them |
//! | [`error`] | the one error type: a variant per failing call, with context |

pub mod affinity;
pub mod bulk;
pub mod error;
pub mod exchange;
pub mod fabric;
pub mod placement;
pub mod rng;
pub mod rpc;
pub mod shm;
pub mod signals;
pub mod sim_engine;
pub mod topology;
pub mod units;
pub mod vworld;
pub mod watchdog;
