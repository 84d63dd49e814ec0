//! Where a daemon keeps the requests it has passed on and must answer later: a slab of
//! origins, each saying how to reply (the first design's `pending_copyrpc_handles`,
//! docs/spec/benchkv.md#daemon-loop, made one table for every path). Its index travels as
//! the Flux user data or the transport token.

use copyrpc_core::deleg::ReplyToken;
use copyrpc_core::flux::FluxRequest;
use copyrpc_core::ipc::IpcRequest;

use super::Lane;
use crate::msg::{DelegatePayload, Request};

/// Who waits for an answer.
#[derive(Debug)]
pub enum Origin<I> {
    /// A client of this daemon's ipc server.
    Ipc(IpcRequest<Request>),
    /// A client of the delegation ring (daemon#0).
    Deleg(ReplyToken),
    /// Another daemon, over the given Flux lane.
    Flux(Lane, FluxRequest<DelegatePayload>),
    /// Another rank, over the transport.
    Remote(I),
}

/// A free-list slab of [`Origin`]s. Grows to the largest number in flight at once (bounded
/// by the clients' queue depths), then stops allocating.
#[derive(Debug)]
pub struct Pending<I> {
    slots: Vec<Option<Origin<I>>>,
    free: Vec<u32>,
}

impl<I> Default for Pending<I> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<I> Pending<I> {
    /// Stores `o`; its index names it until [`take`](Self::take).
    pub fn insert(&mut self, o: Origin<I>) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(o);
                i
            }
            None => {
                self.slots.push(Some(o));
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Removes the origin at `i`; `None` for an index not in use (a stray answer).
    pub fn take(&mut self, i: u32) -> Option<Origin<I>> {
        let o = self.slots.get_mut(i as usize)?.take()?;
        self.free.push(i);
        Some(o)
    }

    /// Origins waiting.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_reused_and_stray_ones_find_nothing() {
        let mut p = Pending::<u8>::default();
        let a = p.insert(Origin::Remote(1));
        let b = p.insert(Origin::Remote(2));
        assert_eq!(p.len(), 2);
        assert!(matches!(p.take(a), Some(Origin::Remote(1))));
        assert!(p.take(a).is_none(), "taken twice");
        assert!(p.take(99).is_none());
        let c = p.insert(Origin::Remote(3));
        assert_eq!(c, a, "freed index reused");
        assert!(matches!(p.take(b), Some(Origin::Remote(2))));
        assert!(matches!(p.take(c), Some(Origin::Remote(3))));
        assert_eq!(p.len(), 0);
    }
}
