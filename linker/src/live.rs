//! The handles that live in caller memory (contexts, and the shared-memory handles of the
//! C library), listed from their init to their end, so an init into memory that holds
//! or overlaps a live handle is refused (`COPYRPC_E_IN_USE`) instead of overwriting it.
//!
//! The list is what answers, not the memory: the area an init is given is usually fresh
//! (`malloc`, uninitialised), and reading it for a magic word would both be wrong about
//! one in 2^64 areas and make valgrind report a branch on uninitialised bytes in every
//! program that uses the library.
//!
//! The list is intrusive (each handle carries its [`Node`]), so listing allocates
//! nothing, and is guarded by a spin lock taken only by set-up (init and end of a
//! handle), never by a data-path call. A handle's memory must stay untouched until its
//! end (the handle contract): the list runs through it.

use core::hint::spin_loop;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::status::{COPYRPC_E_BUSY, COPYRPC_E_IN_USE};

/// A handle's entry: its area and the next entry.
#[repr(C)]
#[derive(Debug)]
pub struct Node {
    next: *mut Node,
    start: usize,
    len: usize,
}

/// The list, under [`LOCK`].
struct Head(core::cell::UnsafeCell<*mut Node>);

// SAFETY: the pointer is read and written only with `LOCK` held.
unsafe impl Sync for Head {}

static HEAD: Head = Head(core::cell::UnsafeCell::new(null_mut()));
static LOCK: AtomicBool = AtomicBool::new(false);

/// Spins before a set-up call gives up on the lock with `COPYRPC_E_BUSY`. The lock is
/// held for a walk of the list (a few loads per live handle), so only a holder that was
/// descheduled keeps it longer; on the no_std side there is no way to yield to it.
const LOCK_SPINS: u32 = 1 << 24;

struct Locked;

impl Drop for Locked {
    fn drop(&mut self) {
        // Release (pairs with the Acquire in `lock`): the list as this holder left it.
        LOCK.store(false, Ordering::Release);
    }
}

fn lock() -> Result<Locked, i32> {
    for _ in 0..LOCK_SPINS {
        // Acquire (pairs with the Release in `Locked::drop`): the list as the last holder
        // left it.
        if LOCK
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return Ok(Locked);
        }
        spin_loop();
    }
    Err(COPYRPC_E_BUSY)
}

/// Lists the handle whose node is `node`, over the area `start .. start + len`: refused
/// with `COPYRPC_E_IN_USE` when the area overlaps a listed one (nothing is written
/// then), or `COPYRPC_E_BUSY` when the lock stayed taken.
///
/// # Safety
///
/// `node` is writable and lies in the area; the area stays untouched by anything but
/// its handle until [`delist`].
pub unsafe fn enlist(node: *mut Node, start: usize, len: usize) -> Result<(), i32> {
    let _l = lock()?;
    // SAFETY: under the lock; every listed node lives (caller contract of `enlist`).
    unsafe {
        let mut p = *HEAD.0.get();
        while !p.is_null() {
            let n = &*p;
            if start < n.start.saturating_add(n.len) && n.start < start.saturating_add(len) {
                return Err(COPYRPC_E_IN_USE);
            }
            p = n.next;
        }
        node.write(Node {
            next: *HEAD.0.get(),
            start,
            len,
        });
        *HEAD.0.get() = node;
    }
    Ok(())
}

/// Takes `node` off the list; a node not on it is left alone.
///
/// # Safety
///
/// `node` was listed by [`enlist`] (or is not on the list), and lives.
pub unsafe fn delist(node: *mut Node) {
    // A set-up call that cannot take the lock in time leaves the entry listed: the area
    // then refuses a new handle (`COPYRPC_E_IN_USE`), which is safe; the end of the
    // handle still goes ahead.
    let Ok(_l) = lock() else {
        return;
    };
    // SAFETY: under the lock; every listed node lives.
    unsafe {
        let mut link: *mut *mut Node = HEAD.0.get();
        while !(*link).is_null() {
            if *link == node {
                *link = (*node).next;
                return;
            }
            link = &raw mut (**link).next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_areas_are_refused_and_freed_ones_taken_again() {
        let mut a = [0u64; 8];
        let mut b = [0u64; 8];
        let (pa, pb) = (a.as_mut_ptr(), b.as_mut_ptr());
        let node_a = pa.cast::<Node>();
        let node_b = pb.cast::<Node>();
        // SAFETY: each node lies in its own array, which outlives its listing.
        unsafe {
            assert_eq!(enlist(node_a, pa as usize, 64), Ok(()));
            assert_eq!(enlist(node_b, pa as usize + 8, 8), Err(COPYRPC_E_IN_USE));
            assert_eq!(enlist(node_b, pa as usize - 8, 9), Err(COPYRPC_E_IN_USE));
            assert_eq!(enlist(node_b, pb as usize, 64), Ok(()));
            delist(node_a);
            assert_eq!(enlist(node_a, pa as usize, 64), Ok(()));
            delist(node_a);
            delist(node_b);
            // Delisting twice is harmless.
            delist(node_b);
        }
    }
}
