//! Device-ordering barriers, named by purpose as in rdma-core `util/udma_barrier.h`.
//!
//! Each function is two things at once:
//!
//! * a Rust fence, so that the driver and the software device model (another thread)
//!   are ordered under the Rust memory model, and Miri/loom see the same edges; and
//! * the instruction rdma-core uses for a real PCIe device, which the Rust fence does not
//!   give: on x86-64 a Release/Acquire fence emits nothing and cannot drain
//!   write-combining buffers (`sfence`), and on aarch64 LLVM emits inner-shareable
//!   `dmb ish*` while a device is in the outer-shareable domain (`dmb osh*`, `dsb st`).
//!
//! Under Miri the instruction part is left out (Miri does not run inline assembly); the
//! Rust fence remains. Architectures other than x86-64 and aarch64 get `fence(SeqCst)`,
//! which is correct for the memory model and, on the targets we know, at least as strong
//! as what rdma-core uses; check before relying on one for a real NIC.
//!
//! Pairings (see also the crate docs):
//! * [`to_device`] before a doorbell-record store pairs with the device's (or model's)
//!   read of that record, which is an Acquire load in the model.
//! * [`from_device`] after an Acquire load of a CQE `op_own` byte pairs with the device's
//!   CQE write (the model: body, Release fence, then `op_own`).
//! * [`wc_start`] / [`wc_flush`] bracket the BlueFlame / 8-byte doorbell MMIO write.

use core::sync::atomic::{fence, Ordering};

/// Makes every earlier store to host memory (WQEs, SRQ WQEs) visible to the device before
/// any later store (the doorbell record). Mirrors `udma_to_device_barrier()`: a compiler
/// barrier on x86-64 (stores are not reordered with stores to WB memory), `dmb oshst` on
/// aarch64. The Rust part is `fence(Release)`, which emits no instruction on x86-64.
#[inline(always)]
pub fn to_device() {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fence(Ordering::Release);
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fence(Ordering::SeqCst);
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: `dmb oshst` is a barrier instruction: it touches no memory or registers
    // beyond ordering stores, and the default (memory-clobbering) asm options keep the
    // compiler from moving memory accesses across it.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags));
    }
}

/// Orders the read of a device-written "valid" word (the CQE owner byte) before every
/// later read of data the device wrote with it (the CQE body). Mirrors
/// `udma_from_device_barrier()`: `lfence` on x86-64, `dmb oshld` on aarch64. The Rust
/// part is `fence(Acquire)`. rdma-core's comment on where it goes: "this would be used
/// after testing a valid bit in a memory that is a DMA target, to ensure that the
/// following reads see the data written before the MemWr TLP that set the valid bit".
#[inline(always)]
pub fn from_device() {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fence(Ordering::Acquire);
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fence(Ordering::SeqCst);
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `lfence` only orders loads; it reads and writes no memory. Default asm
    // options make it a compiler barrier too.
    unsafe {
        core::arch::asm!("lfence", options(nostack, preserves_flags));
    }
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: `dmb oshld` only orders loads against later accesses; no memory is touched.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags));
    }
}

/// Orders stores to host memory against each other when the device may read them in
/// either order (rdma-core uses it between writing a WQE and flipping its valid word).
/// Mirrors `udma_ordering_write_barrier()`, which rdma-core defines as
/// `udma_to_device_barrier()`.
#[inline(always)]
pub fn ordering_write() {
    to_device();
}

/// Before the first write to a write-combining (BlueFlame/UAR) mapping: makes the
/// doorbell-record store and every earlier store globally visible before the MMIO write.
/// Mirrors `mmio_wc_start()`, which rdma-core defines as `mmio_flush_writes()`: `sfence`
/// on x86-64, `dsb st` on aarch64. The kernel uses `wmb()` here ("make sure doorbell
/// record is visible to the HCA before we hit doorbell").
#[inline(always)]
pub fn wc_start() {
    wc_barrier();
}

/// After the last write to a write-combining mapping: flushes the WC buffer so the
/// doorbell leaves the CPU now, and before any later doorbell from another CPU (rdma-core
/// issues it before dropping the BlueFlame lock). Mirrors `mmio_flush_writes()`: `sfence`
/// on x86-64, `dsb st` on aarch64.
#[inline(always)]
pub fn wc_flush() {
    wc_barrier();
}

#[inline(always)]
fn wc_barrier() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `sfence` orders stores (including WC and non-temporal ones); it touches no
    // memory. Default asm options make it a compiler barrier.
    unsafe {
        core::arch::asm!("sfence", options(nostack, preserves_flags));
    }
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: `dsb st` waits for earlier stores to complete; it touches no memory.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags));
    }
    #[cfg(all(any(target_arch = "x86_64", target_arch = "aarch64"), not(miri)))]
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    #[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    fence(Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    // The barriers have no observable single-thread effect; this only proves they run
    // (no illegal instruction) on the host architecture.
    #[test]
    fn barriers_execute() {
        super::to_device();
        super::from_device();
        super::ordering_write();
        super::wc_start();
        super::wc_flush();
    }
}
