//! The std host shell of copyrpc.
//!
//! Status: a placeholder that builds. The fabrics (verbs through rdma-sys, the software
//! device model over `/dev/shm`), the MPI exchange, the shm regions and the pinning helpers
//! land with their issues; see the status table in the README.

pub mod affinity;
pub mod error;
pub mod exchange;
pub mod fabric;
pub mod shm;
pub mod sim_engine;
pub mod topology;

pub use copyrpc_core as core;
pub use mlx5_raw as mlx5;
