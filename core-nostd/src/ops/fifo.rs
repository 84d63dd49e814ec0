//! A fixed-capacity first-in first-out queue of `Copy` values: the free slots and
//! waiting asks here, and copyrpc's wrap ranges and raw operations.

/// Up to `N` values in arrival order.
///
/// `repr(C)`, the counters first: copyrpc's every flush reads them, the values only a
/// wrap. Last in the struct that holds it (copyrpc's `Tx`), the counters sit with that
/// struct's hot fields.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct Fifo<T: Copy, const N: usize> {
    head: usize,
    len: usize,
    items: [Option<T>; N],
}

// The counters precede the values (the struct's comment).
const _: () =
    assert!(core::mem::offset_of!(Fifo<u64, 4>, items) == 2 * core::mem::size_of::<usize>());

impl<T: Copy, const N: usize> Default for Fifo<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy, const N: usize> Fifo<T, N> {
    /// An empty queue.
    pub const fn new() -> Self {
        Self {
            items: [None; N],
            head: 0,
            len: 0,
        }
    }

    /// Values queued.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is queued.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `v`, or gives it back when the queue holds `N` already.
    pub fn push(&mut self, v: T) -> Result<(), T> {
        if self.len == N {
            return Err(v);
        }
        self.items[(self.head + self.len) % N] = Some(v);
        self.len += 1;
        Ok(())
    }

    /// The oldest value, left queued.
    pub fn front(&self) -> Option<T> {
        if self.len == 0 {
            None
        } else {
            self.items[self.head]
        }
    }

    /// Removes the oldest value.
    pub fn pop(&mut self) -> Option<T> {
        let v = self.front()?;
        self.head = (self.head + 1) % N;
        self.len -= 1;
        Some(v)
    }

    /// Whether any queued value satisfies `f`.
    pub fn any(&self, mut f: impl FnMut(&T) -> bool) -> bool {
        (0..self.len).any(|i| self.items[(self.head + i) % N].as_ref().is_some_and(&mut f))
    }
}
