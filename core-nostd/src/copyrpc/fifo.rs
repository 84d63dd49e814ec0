//! A small fixed-capacity FIFO of `Copy` items (wrap ranges, raw operations).

/// A small FIFO of `N` items.
#[derive(Debug)]
pub(crate) struct Fifo<T: Copy, const N: usize> {
    buf: [Option<T>; N],
    head: usize,
    len: usize,
}

impl<T: Copy, const N: usize> Fifo<T, N> {
    pub(crate) const fn new() -> Self {
        Self {
            buf: [None; N],
            head: 0,
            len: 0,
        }
    }

    pub(crate) const fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn push(&mut self, v: T) -> Result<(), T> {
        if self.len == N {
            return Err(v);
        }
        self.buf[(self.head + self.len) % N] = Some(v);
        self.len += 1;
        Ok(())
    }

    pub(crate) fn front(&self) -> Option<T> {
        if self.len == 0 {
            None
        } else {
            self.buf[self.head]
        }
    }

    pub(crate) fn pop(&mut self) -> Option<T> {
        let v = self.front()?;
        self.head = (self.head + 1) % N;
        self.len -= 1;
        Some(v)
    }
}
