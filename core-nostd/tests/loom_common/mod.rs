//! What the loom models of the shm protocols share (each `loom_*.rs` includes this with
//! `mod loom_common;`).

/// Runs a model with a branch budget large enough for the spin-and-yield loops of three
/// threads (loom's default of 1 000 is not); preemptions come from LOOM_MAX_PREEMPTIONS.
pub fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.max_branches = 100_000;
    b.check(f);
}
