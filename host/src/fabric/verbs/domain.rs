//! Thread domains: a UAR (doorbell page, BlueFlame registers) per posting thread.
//!
//! rdma-core's mlx5 provider gives the first QPs of a context BlueFlame registers of
//! their own and, past those, registers shared between QPs (`mlx5_get_qp_uar` in
//! providers/mlx5/verbs.c). With its defaults that is 4 dedicated registers
//! (`MLX5_NUM_LOW_LAT_UUARS`, `get_num_low_lat_uuars` in mlx5.c): from the 5th QP on,
//! registers are shared and locked (`need_lock`). Two threads posting to QPs on one
//! shared register must serialise their 64-byte writes (`mlx5_raw::SharedBf`, a lock
//! every doorbell takes). A *thread domain* (`ibv_alloc_td`) promises the provider that
//! one thread at a time posts to the QPs created in it, and mlx5 answers with a
//! BlueFlame register of the domain's own (`mlx5_alloc_td` →
//! `mlx5_attach_dedicated_uar`), which every QP of the domain rings (`mlx5_create_qp`:
//! `bf = mparent_domain->mtd->bf`): no register shared with another domain, no lock
//! needed by the provider. Registers are handed out two to a UAR page in order (0x800,
//! 0xa00: `mlx5_insert_dyn_uuars`), so two domains usually share a 4 KiB page, each
//! with its own register. A QP joins a domain by being created on a *parent domain*
//! (`ibv_alloc_parent_domain`), a PD that is the device's PD plus the thread domain.
//! A device without BlueFlame gives every domain the context's shared non-cached UAR
//! (`ctx->nc_uar`), where the `SharedBf` lock is what keeps doorbells whole.
//!
//! The host makes one [`ThreadDomain`] per copyrpc context, because a context is driven
//! by one thread (`Context` is `!Sync`): every QP a thread posts to then rings its own
//! registers. The `SharedBf` lock stays on the doorbell path either way (uncontended on a
//! register of one thread's own: one compare-and-swap); it is what keeps a context whose
//! domain could not be made (no UAR left, a provider without thread domains) correct.

use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys::{
    ibv_alloc_parent_domain, ibv_alloc_td, ibv_dealloc_pd, ibv_dealloc_td,
    ibv_parent_domain_init_attr, ibv_pd, ibv_td, ibv_td_init_attr,
};

use super::{Ctx, Device};
use crate::error::{Error, Result};

#[derive(Debug)]
struct DomainInner {
    /// The parent domain: what QPs in this domain are created on.
    parent: NonNull<ibv_pd>,
    td: NonNull<ibv_td>,
    _ctx: Arc<Ctx>,
}

// SAFETY: see `Ctx`: verbs objects are usable from any thread; the Rust side only reads
// the pointers. Which thread *posts* is the caller's promise (see `ThreadDomain`).
unsafe impl Send for DomainInner {}
// SAFETY: as above.
unsafe impl Sync for DomainInner {}

impl Drop for DomainInner {
    fn drop(&mut self) {
        // Every QP created in the domain holds an Arc of it, so none is alive here. The
        // parent domain refers to the thread domain: it goes first. Errors cannot be
        // reported from drop; one would mean a live child, which the Arcs rule out.
        // SAFETY: each was allocated once by `Device::thread_domain` and is released once.
        unsafe {
            ibv_dealloc_pd(self.parent.as_ptr());
            ibv_dealloc_td(self.td.as_ptr());
        }
    }
}

/// A thread domain and its parent domain (freed when the last clone and every QP made
/// in it are gone).
///
/// The promise to the provider: the QPs created in one domain are posted to by one
/// thread at a time. The host keeps it by giving each copyrpc context its own domain.
#[derive(Clone, Debug)]
pub struct ThreadDomain {
    inner: Arc<DomainInner>,
}

impl ThreadDomain {
    /// The parent domain, for `ibv_qp_init_attr_ex.pd`.
    pub(super) fn parent_pd(&self) -> *mut ibv_pd {
        self.inner.parent.as_ptr()
    }
}

impl Device {
    /// Allocates a thread domain, and the parent domain joining it to this device's PD.
    ///
    /// Fails with [`Error::VerbsThreadDomain`] when the provider has no thread domains or
    /// the device has no UAR left for one; a caller may then create its QPs on the plain
    /// PD (their doorbells are serialised by `mlx5_raw::SharedBf`).
    pub fn thread_domain(&self) -> Result<ThreadDomain> {
        let ctx = &self.ctx;
        let err = |step: &'static str| Error::VerbsThreadDomain {
            device: ctx.name.clone(),
            step,
            source: io::Error::last_os_error(),
        };
        let mut td_attr = ibv_td_init_attr { comp_mask: 0 };
        // SAFETY: open context; comp_mask 0 asks for nothing beyond the domain. rdma-sys
        // returns None (errno EOPNOTSUPP) when the provider has no `alloc_td`.
        let td = unsafe { ibv_alloc_td(ctx.ctx.as_ptr(), &mut td_attr) };
        let td = td
            .and_then(NonNull::new)
            .ok_or_else(|| err("ibv_alloc_td"))?;
        // SAFETY: all-zero is the documented "nothing set" value (no custom allocator).
        let mut pd_attr: ibv_parent_domain_init_attr = unsafe { std::mem::zeroed() };
        pd_attr.pd = ctx.pd.as_ptr();
        pd_attr.td = td.as_ptr();
        pd_attr.comp_mask = 0;
        // SAFETY: open context; the PD and the thread domain are live.
        let parent = unsafe { ibv_alloc_parent_domain(ctx.ctx.as_ptr(), &mut pd_attr) };
        let Some(parent) = parent.and_then(NonNull::new) else {
            let e = err("ibv_alloc_parent_domain");
            // SAFETY: allocated just above, used by nothing yet.
            unsafe { ibv_dealloc_td(td.as_ptr()) };
            return Err(e);
        };
        Ok(ThreadDomain {
            inner: Arc::new(DomainInner {
                parent,
                td,
                _ctx: ctx.clone(),
            }),
        })
    }
}
