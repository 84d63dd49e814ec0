//! A small fixed-capacity FIFO of `Copy` items (wrap ranges, raw operations).

/// A small FIFO of `N` items.
///
/// `repr(C)`, the counters first: every flush reads them, the items only a wrap. Last
/// in the struct that holds it (`Tx`), the counters sit with that struct's hot fields.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Fifo<T: Copy, const N: usize> {
    head: usize,
    len: usize,
    buf: [Option<T>; N],
}

// The counters precede the items (the struct's comment).
const _: () =
    assert!(core::mem::offset_of!(Fifo<u64, 4>, buf) == 2 * core::mem::size_of::<usize>());

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
