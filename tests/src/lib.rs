//! Cross-crate and multi-process integration tests live under `tests/tests/`; this
//! library holds what the tests, the benches and the instruction-count binary share.

pub mod driver_echo;
pub mod echo_rig;
pub mod shm_rig;

// mlx5-raw's two-QP rig, included by path so there is one of it: `driver_echo` runs on
// it. Its test memory is the one `echo_rig`'s rig already includes.
mod common {
    pub use crate::echo_rig::rig::{pattern, DmaBuf};
}
#[path = "../../mlx5-raw/tests/sim_common/mod.rs"]
// A test rig made public as a library module: lints for public library API do not apply.
#[allow(missing_debug_implementations, clippy::new_without_default)]
pub mod sim_rig;
