//! Raw mlx5 data path: WQE/CQE/doorbell layouts and the driver side over queue memory.
#![cfg_attr(not(test), no_std)]
#![warn(missing_docs)]

pub mod layout;
