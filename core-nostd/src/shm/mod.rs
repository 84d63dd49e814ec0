//! The pieces the shared-memory protocols ([`deleg`](crate::deleg), [`ipc`](crate::ipc),
//! [`flux`](crate::flux)) are built from. Each protocol uses these and none of the
//! others, so a change to one protocol cannot reach into another
//! (`scripts/check-layering.sh`).
//!
//! | module | holds | used by |
//! |---|---|---|
//! | [`spsc`] | the bounded SPSC ring with per-slot state words | ipc, flux |
//! | [`slab`] | caller-memory slab of pending calls' user data, generation [`Token`]s | ipc, flux |
//! | [`Msg`] | a ring message: the caller's token and the payload | ipc, flux |
//! | `registry` | client ids: [`ClientState`], the id claim, owner records ([`Owner`]: pid + start time), [`ClientInfo`], [`EvictError`] | deleg, ipc |
//! | `region` | [`Payload`], [`LayoutError`], span and magic/version/payload-size checks, [`peek_header`] | deleg, ipc |

mod region;
mod registry;
pub mod slab;
pub mod spsc;

pub(crate) use region::Ids;
#[cfg(not(loom))]
pub(crate) use region::{attach_region, init_region, region_layout, RegionLayout};
pub use region::{peek_header, HeaderId, LayoutError, Payload};
pub(crate) use registry::{claim_client_id, close, evict, record_owner, ServerSalt};
pub use registry::{ClientInfo, ClientState, EvictError, Owner};
pub use slab::{Slab, SlabEntry, Token};

/// A request or response in a ring: the caller's token and the payload.
#[derive(Debug, Clone, Copy)]
pub struct Msg<T> {
    pub(crate) token: u64,
    pub(crate) payload: T,
}

#[cfg(all(test, not(loom)))]
mod tests;
#[cfg(all(test, not(loom)))]
pub(crate) use tests::{Stall, ZeroedMem};
