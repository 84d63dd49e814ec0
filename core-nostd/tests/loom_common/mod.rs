//! What the loom models of the shm protocols share (each `loom_*.rs` includes this with
//! `mod loom_common;`).

/// Runs a model with a branch budget large enough for the spin-and-yield loops of three
/// threads (loom's default of 1 000 is not); preemptions come from LOOM_MAX_PREEMPTIONS.
#[allow(dead_code)]
pub fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.max_branches = 100_000;
    b.check(f);
}

/// [`model`] with at most `n` preemptions whatever LOOM_MAX_PREEMPTIONS says: for the
/// models with three or four threads, which at two preemptions run for many minutes. A
/// stale read needs no preemption (loom picks the value a load returns), so the bound
/// only limits which interleavings of whole steps are tried.
#[allow(dead_code)]
pub fn model_bounded(n: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.max_branches = 100_000;
    b.preemption_bound = Some(n);
    b.check(f);
}
