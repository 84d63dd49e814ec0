//! The one place the core takes atomics and `UnsafeCell` from.
//!
//! Normally these are `core`'s types. Under `--cfg loom` they are loom's, so the model
//! checker explores every interleaving of the shared-memory protocols (`deleg`, `ipc`,
//! `flux`) with the same code that runs in production (tokio's `src/loom` pattern).
//!
//! [`UnsafeCell`] is a thin wrapper over `core::cell::UnsafeCell` with loom's closure API
//! (`with` / `with_mut`), so every access to a shared non-atomic cell goes through a call
//! that loom can track for causality. The wrapper is `#[repr(transparent)]`: a shared
//! layout holding it has the same size and offsets as one holding the plain type.
//!
//! Loom's atomics are not the same size as `core`'s (they carry model state), so every
//! `const` layout assert in the protocol modules is `#[cfg(not(loom))]`, and the
//! constructors that cast raw shared memory (`from_raw`) exist only without loom. Loom
//! tests build the same `#[repr(C)]` structs with ordinary constructors instead.

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

#[cfg(not(loom))]
pub use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

#[cfg(loom)]
pub use loom::cell::UnsafeCell;

/// Busy-wait hint for protocol loops that wait on another thread or process.
///
/// Under loom this yields to the model's scheduler, which a spin loop needs to
/// terminate in the checker; otherwise it is `core::hint::spin_loop`.
#[inline]
pub fn spin_loop() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

#[cfg(not(loom))]
pub use std_cell::UnsafeCell;

/// The next instance number of this process: distinct for the first 2^32 objects that
/// take one (copyrpc request tables, deleg and ipc servers, flux nodes), which put it
/// in the handles they give out so that another instance refuses them.
///
/// Not a shared-memory protocol: nothing is published through the count, so it needs
/// atomicity only (`Relaxed`), and it is `core`'s atomic even under loom (a model's
/// objects just get other numbers).
pub(crate) fn next_instance() -> u32 {
    static INSTANCES: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);
    INSTANCES.fetch_add(1, core::sync::atomic::Ordering::Relaxed)
}

#[cfg(not(loom))]
mod std_cell {
    /// `core::cell::UnsafeCell` with loom's access API.
    ///
    /// Callers write `cell.with(|p| unsafe { p.read() })` and
    /// `cell.with_mut(|p| unsafe { p.write(v) })`; the closure receives the raw pointer and
    /// its `unsafe` block states why no other access races with it.
    #[derive(Debug, Default)]
    #[repr(transparent)]
    pub struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        /// Wraps a value.
        #[inline]
        pub const fn new(value: T) -> Self {
            Self(core::cell::UnsafeCell::new(value))
        }

        /// Runs `f` with a shared raw pointer to the contents.
        #[inline]
        pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        /// Runs `f` with a mutable raw pointer to the contents.
        #[inline]
        pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}
