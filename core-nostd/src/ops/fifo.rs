//! A fixed-capacity first-in first-out queue of `Copy` values.

/// Up to `N` values in arrival order.
#[derive(Debug, Clone, Copy)]
pub struct Fifo<T: Copy, const N: usize> {
    items: [Option<T>; N],
    head: usize,
    len: usize,
}

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

    /// Removes the oldest value.
    pub fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let v = self.items[self.head].take();
        self.head = (self.head + 1) % N;
        self.len -= 1;
        v
    }

    /// Whether any queued value satisfies `f`.
    pub fn any(&self, mut f: impl FnMut(&T) -> bool) -> bool {
        (0..self.len).any(|i| self.items[(self.head + i) % N].as_ref().is_some_and(&mut f))
    }
}
