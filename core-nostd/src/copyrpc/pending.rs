//! Pending calls: a fixed-capacity slab whose slot index is the call id on the wire.
#![allow(unsafe_code)]

/// One slot: a pending call (the caller's data, and the endpoint it went out on), or,
/// free, the next free slot. The free list lives in the slots themselves, so an insert
/// and a remove touch the slot's line and the counters' line, not a third line of a
/// separate list (docs/PERFORMANCE.md, "A cold round's cache lines").
#[derive(Debug)]
struct Slot<U> {
    /// `Some` while the call is pending.
    user_data: Option<U>,
    /// The endpoint of the pending call (stale while free).
    ep: u16,
    /// While free: the free slot after this one, or `N` for none (stale while used).
    next_free: u32,
}

/// The id the next insert takes, as [`Pending::free_id`] found it: below `N`, so the
/// insert indexes with it without testing again (the test that made it dominates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FreeId(u32);

impl FreeId {
    /// The call id on the wire.
    #[inline]
    pub(crate) const fn get(self) -> u32 {
        self.0
    }
}

/// Entries of `Pending::per_ep`: one per possible endpoint index.
const PER_EP: usize = super::MAX_ENDPOINTS;

/// `N` slots with an intrusive free list; insert, remove and lookup are O(1).
///
/// `repr(C)`: the slots first, where their lookups address them from the context
/// pointer (docs/PERFORMANCE.md, "Latency path"), then `len`, `free_head` and the
/// per-endpoint counts side by side, so an insert or a remove loads one line of them,
/// not three.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Pending<U, const N: usize> {
    slots: [Slot<U>; N],
    len: usize,
    free_head: u32,
    /// Pending calls per endpoint index (for the liveness probe and fail-all), for
    /// every index a context can have ([`MAX_ENDPOINTS`](super::MAX_ENDPOINTS), 4 KiB),
    /// indexed under a mask so that no access needs a bounds check.
    per_ep: [u32; PER_EP],
}

impl<U, const N: usize> Pending<U, N> {
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        let mut t = core::mem::MaybeUninit::uninit();
        // SAFETY: `t` is valid for writes of `Self` and aligned; `init_at` writes every
        // field.
        unsafe {
            Self::init_at(t.as_mut_ptr());
            t.assume_init()
        }
    }

    /// Writes an empty table at `p`, element by element, so that a large table is never
    /// built on the stack first (`Context::init`).
    ///
    /// # Safety
    ///
    /// `p` is valid for writes of `Self` and aligned. What it held is overwritten, not
    /// dropped.
    pub(crate) unsafe fn init_at(p: *mut Self) {
        assert!(N <= crate::wire::MAX_CALL_ID as usize);
        // Every field is written below; adding one without writing it fails to compile.
        let _: fn(&Self) = |t| {
            let Self {
                slots: _,
                free_head: _,
                len: _,
                per_ep: _,
            } = t;
        };
        // SAFETY: `p` is valid and aligned for `Self` (contract), so each field pointer
        // is valid and aligned for its field, and an array field for its `N` elements.
        unsafe {
            let slots = (&raw mut (*p).slots).cast::<Slot<U>>();
            for i in 0..N {
                slots.add(i).write(Slot {
                    user_data: None,
                    ep: 0,
                    next_free: i as u32 + 1,
                });
            }
            (&raw mut (*p).free_head).write(0);
            (&raw mut (*p).len).write(0);
            (&raw mut (*p).per_ep).cast::<u32>().write_bytes(0, PER_EP);
        }
    }

    pub(crate) const fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn on_ep(&self, ep: u16) -> u32 {
        self.per_ep[usize::from(ep) & (PER_EP - 1)]
    }

    /// Stores `user_data`; hands it back when full.
    #[cfg(test)]
    pub(crate) fn insert(&mut self, ep: u16, user_data: U) -> Result<u32, U> {
        match self.free_id() {
            Some(id) => Ok(self.insert_free(id, ep, user_data)),
            None => Err(user_data),
        }
    }

    /// The id the next [`insert_free`](Self::insert_free) will use; `None` when full.
    #[inline]
    pub(crate) fn free_id(&self) -> Option<FreeId> {
        ((self.free_head as usize) < N).then_some(FreeId(self.free_head))
    }

    /// Stores `user_data` under `id`, which [`free_id`](Self::free_id) returned with
    /// nothing inserted since, and returns it.
    #[inline]
    pub(crate) fn insert_free(&mut self, id: FreeId, ep: u16, user_data: U) -> u32 {
        debug_assert_eq!(id.0, self.free_head, "a stale FreeId");
        let id = id.0;
        let slot = &mut self.slots[id as usize];
        debug_assert!(slot.user_data.is_none());
        self.free_head = slot.next_free;
        slot.user_data = Some(user_data);
        slot.ep = ep;
        self.len += 1;
        self.per_ep[usize::from(ep) & (PER_EP - 1)] += 1;
        id
    }

    /// Takes the call `id` if it is pending on endpoint `ep`.
    #[inline]
    pub(crate) fn remove(&mut self, ep: u16, id: u32) -> Option<U> {
        let slot = self.slots.get_mut(id as usize)?;
        // A free slot's `ep` is stale; `take` finds it empty either way.
        if slot.ep != ep {
            return None;
        }
        let user_data = slot.user_data.take()?;
        slot.next_free = self.free_head;
        self.free_head = id;
        self.len -= 1;
        self.per_ep[usize::from(ep) & (PER_EP - 1)] -= 1;
        Some(user_data)
    }

    /// Removes every call of endpoint `ep`, handing each to `f` once. O(N); runs once
    /// per endpoint failure.
    pub(crate) fn drain_ep(&mut self, ep: u16, mut f: impl FnMut(U)) {
        if self.on_ep(ep) == 0 {
            return;
        }
        for id in 0..N as u32 {
            if let Some(u) = self.remove(ep, id) {
                f(u);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_reused_and_owned_per_endpoint() {
        let mut p: Pending<u32, 3> = Pending::new();
        assert_eq!(p.insert(0, 10), Ok(0));
        assert_eq!(p.insert(1, 11), Ok(1));
        assert_eq!(p.insert(0, 12), Ok(2));
        assert_eq!(p.insert(0, 13), Err(13));
        assert_eq!(p.remove(0, 1), None, "call 1 belongs to endpoint 1");
        assert_eq!(p.remove(1, 1), Some(11));
        assert_eq!(p.remove(1, 1), None, "removed once");
        assert_eq!(p.insert(2, 14), Ok(1));
        let mut drained = [0; 4];
        let mut n = 0;
        p.drain_ep(0, |u| {
            drained[n] = u;
            n += 1;
        });
        assert_eq!(&drained[..n], &[10, 12]);
        assert_eq!((p.len(), p.on_ep(0), p.on_ep(2)), (1, 0, 1));
    }

    /// The free list runs through the slots: after any order of removals every id
    /// comes back exactly once, most recently freed first, and the table fills again.
    #[test]
    fn the_free_list_in_the_slots_hands_every_id_back_once() {
        let mut p: Pending<u64, 8> = Pending::new();
        for i in 0..8 {
            assert_eq!(p.insert(0, 100 + i), Ok(i as u32));
        }
        assert_eq!(p.insert(0, 999), Err(999), "full");
        for id in [5, 0, 7, 2, 3, 6, 1, 4] {
            assert_eq!(p.remove(0, id), Some(100 + u64::from(id)));
            assert_eq!(p.remove(0, id), None, "freed slot {id} matches nothing");
        }
        assert_eq!((p.len(), p.on_ep(0)), (0, 0));
        let ids: Vec<u32> = (0..8).map(|i| p.insert(1, i).unwrap()).collect();
        assert_eq!(ids, [4, 1, 6, 3, 2, 7, 0, 5], "last freed, first reused");
        assert_eq!(p.insert(1, 8), Err(8), "full again");
        assert_eq!(p.remove(0, 4), None, "now endpoint 1's");
        assert_eq!(p.remove(1, 4), Some(0));
    }
}
