//! Cross-crate and multi-process integration tests live under `tests/tests/`; this
//! library holds what the tests, the benches and the instruction-count binary share.

pub mod echo_rig;
pub mod shm_rig;
