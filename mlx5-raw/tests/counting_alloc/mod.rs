//! A counting global allocator for the zero-allocation tests: it forwards to the system
//! allocator and counts the allocations (and reallocations) a thread makes while it
//! watches. Shared by mlx5-raw's `sim_alloc` and core-nostd's `copyrpc_alloc` (included
//! there by path), so the test binary that includes it has it as its global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static WATCH: Cell<bool> = const { Cell::new(false) };
}

fn watched() -> bool {
    WATCH.try_with(Cell::get).unwrap_or(false)
}

/// Starts (`true`) or stops counting this thread's allocations.
pub fn watch(on: bool) {
    WATCH.with(|w| w.set(on));
}

/// Allocations counted since the last `take`, and resets the count.
pub fn take() -> usize {
    // Relaxed: read after the watched section on the same thread.
    ALLOCS.swap(0, Ordering::Relaxed)
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if watched() {
            // Relaxed: a counter read after the watched section on the same thread.
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is `GlobalAlloc::alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is `GlobalAlloc::dealloc`'s.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if watched() {
            // Relaxed: as in `alloc`.
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is `GlobalAlloc::realloc`'s.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;
