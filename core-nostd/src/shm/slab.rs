//! Fixed-capacity storage for the user data of pending calls, over caller memory.
//!
//! A call's [`Token`] names the entry that holds its user data: `generation << 32 | index`.
//! The index comes from a free list, never from a ring position (`token % capacity` of
//! something shared): with replies deferred and returned out of order, a position-derived
//! index would let one call's entry be overwritten by another's while the first is still
//! pending. The generation changes on every reuse of an entry, so a stale or duplicated
//! token finds nothing instead of someone else's data.

/// One entry; make a slice of them with [`SlabEntry::new`] for [`Slab::new`].
#[derive(Debug)]
pub struct SlabEntry<U> {
    value: Option<U>,
    generation: u32,
    next_free: u32,
}

impl<U> SlabEntry<U> {
    /// An empty entry.
    pub const fn new() -> Self {
        Self {
            value: None,
            generation: 0,
            next_free: NONE,
        }
    }
}

impl<U> Default for SlabEntry<U> {
    fn default() -> Self {
        Self::new()
    }
}

const NONE: u32 = u32::MAX;

/// Names one occupied entry: `generation << 32 | index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token(pub u64);

impl Token {
    fn index(self) -> usize {
        (self.0 & 0xFFFF_FFFF) as usize
    }
    fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// The slab: at most `entries.len()` values, O(1) insert and remove.
#[derive(Debug)]
pub struct Slab<'s, U> {
    entries: &'s mut [SlabEntry<U>],
    free_head: u32,
    len: u32,
}

impl<'s, U> Slab<'s, U> {
    /// Takes `entries` (emptied) as storage; at most `u32::MAX - 1` are used.
    pub fn new(entries: &'s mut [SlabEntry<U>]) -> Self {
        let n = entries.len().min(NONE as usize - 1);
        let entries = &mut entries[..n];
        for (i, e) in entries.iter_mut().enumerate() {
            e.value = None;
            e.next_free = if i + 1 < n { i as u32 + 1 } else { NONE };
        }
        Self {
            entries,
            free_head: if n == 0 { NONE } else { 0 },
            len: 0,
        }
    }

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// Occupied entries.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True if nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True if every entry is occupied.
    pub fn is_full(&self) -> bool {
        self.free_head == NONE
    }

    /// Stores `v`; gives it back if full.
    pub fn insert(&mut self, v: U) -> Result<Token, U> {
        if self.free_head == NONE {
            return Err(v);
        }
        let i = self.free_head as usize;
        let e = &mut self.entries[i];
        self.free_head = e.next_free;
        e.next_free = NONE;
        e.value = Some(v);
        self.len += 1;
        Ok(Token(((e.generation as u64) << 32) | i as u64))
    }

    /// Takes the value of `t`; `None` for a stale, duplicated or foreign token.
    pub fn remove(&mut self, t: Token) -> Option<U> {
        let i = t.index();
        let e = self.entries.get_mut(i)?;
        if e.generation != t.generation() || e.value.is_none() {
            return None;
        }
        let v = e.value.take();
        e.generation = e.generation.wrapping_add(1);
        e.next_free = self.free_head;
        self.free_head = i as u32;
        self.len -= 1;
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_unique_while_pending_and_stale_ones_miss() {
        let mut mem: [SlabEntry<u32>; 3] = core::array::from_fn(|_| SlabEntry::new());
        let mut s = Slab::new(&mut mem);
        let a = s.insert(1).unwrap();
        let b = s.insert(2).unwrap();
        assert!(!s.is_empty() && !s.is_full());
        assert_eq!((s.len(), s.capacity()), (2, 3));
        let c = s.insert(3).unwrap();
        assert!(s.is_full());
        assert_eq!(s.insert(4), Err(4));
        assert_eq!(s.remove(b), Some(2));
        assert_eq!(s.remove(b), None, "duplicate");
        let d = s.insert(5).unwrap();
        assert_ne!(d, b, "reused entry, new generation");
        assert_eq!(s.remove(b), None, "stale token does not take the new value");
        assert_eq!(
            (s.remove(c), s.remove(a), s.remove(d)),
            (Some(3), Some(1), Some(5))
        );
        assert!(s.is_empty() && !s.is_full());
        assert_eq!(s.remove(Token(99)), None);
    }
}
