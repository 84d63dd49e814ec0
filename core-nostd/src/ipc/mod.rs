//! ipc: per-client SPSC request and response rings in one shared region (seed 000
//! §2.3, §4.4). This commit carries only the ring ([`spsc`]); the region, client and
//! server follow.

pub mod spsc;
