//! Operation state (layer 2 of docs/spec/ownership.md#layers) in a fixed table, and the
//! handle a caller polls.

use core::cell::Cell;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

/// How an operation ended badly, or why a table call could not be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpError {
    /// A work request of the op completed with an error (or was flushed).
    Failed,
    /// [`OpTable::cancel_all`] failed it out, or [`OpTable::cancel_all_on_settle`]
    /// marked it and its own ending has since arrived.
    Cancelled,
    /// The handle names an op whose result was already taken: its cell now belongs to
    /// another op, or to none.
    Gone,
    /// Every op cell is in use.
    TableFull,
    /// Every slot is leased.
    NoSlot,
    /// A fixed queue (imm events, waiting asks) is full.
    QueueFull,
    /// A receive could not be reposted: the window is short by one.
    RepostFailed,
    /// The peer refused the request (malformed, or no room for it).
    Refused,
    /// The peer's answer was malformed, or does not fit the request (another request's
    /// tag, a byte count the request's buffers cannot have). What the peer did with
    /// the buffers is unknown.
    BadReply,
}

/// An operation's identity: drawn from a 64-bit counter, never given twice by a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u64);

/// What a caller holds for an operation: the cell it lives in and its identity. Copying
/// a handle is harmless: the result can be taken once, after which every copy reads
/// [`OpError::Gone`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpHandle {
    index: u16,
    id: OpId,
}

impl OpHandle {
    /// The op's identity.
    pub const fn id(&self) -> OpId {
        self.id
    }

    /// The cell index (for packing a handle into a caller's user data).
    pub const fn index(&self) -> u16 {
        self.index
    }

    /// Packs the handle into 64 bits: the identity's low 48 bits and the index. Tables
    /// start fewer than 2^48 ops in their life for the unpacked handle to stay exact.
    pub const fn to_u64(self) -> u64 {
        (self.id.0 << 16) | self.index as u64
    }

    /// Inverse of [`to_u64`](Self::to_u64).
    pub const fn from_u64(v: u64) -> Self {
        Self {
            index: v as u16,
            id: OpId(v >> 16),
        }
    }
}

/// An op's outcome: bytes moved (or the immediate) on success.
pub type OpResult = Result<u64, OpError>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Pending,
    /// Cancelled, but still holding what it held (a peer's access to the caller's
    /// buffers): it reads as pending until its own ending arrives, then as
    /// [`OpError::Cancelled`].
    Cancelling,
    Done(OpResult),
}

struct Cellule {
    id: Cell<OpId>,
    state: Cell<State>,
    waker: Cell<Option<Waker>>,
}

impl core::fmt::Debug for Cellule {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Cellule")
            .field("id", &self.id.get())
            .field("state", &self.state.get())
            .finish_non_exhaustive()
    }
}

/// Up to `N` live operations. Methods take `&self` (the state sits in `Cell`s), so a
/// progress loop and [`OpFuture`]s share one table on one thread; the table is not
/// `Sync`.
#[derive(Debug)]
pub struct OpTable<const N: usize> {
    cells: [Cellule; N],
    next: Cell<u64>,
}

impl<const N: usize> Default for OpTable<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> OpTable<N> {
    const FITS: () = assert!(N > 0 && N <= u16::MAX as usize, "1..=65535 op cells");

    /// An empty table.
    pub fn new() -> Self {
        let () = Self::FITS;
        Self {
            cells: core::array::from_fn(|_| Cellule {
                id: Cell::new(OpId(0)),
                state: Cell::new(State::Free),
                waker: Cell::new(None),
            }),
            next: Cell::new(1),
        }
    }

    fn live(&self, h: OpHandle) -> Option<&Cellule> {
        self.cells
            .get(h.index as usize)
            .filter(|c| c.id.get() == h.id && c.state.get() != State::Free)
    }

    /// Starts an op with a fresh identity (I1).
    pub fn start(&self) -> Result<OpHandle, OpError> {
        let index = self
            .cells
            .iter()
            .position(|c| c.state.get() == State::Free)
            .ok_or(OpError::TableFull)?;
        let id = OpId(self.next.get());
        self.next.set(id.0 + 1);
        let c = &self.cells[index];
        c.id.set(id);
        c.state.set(State::Pending);
        Ok(OpHandle {
            index: index as u16,
            id,
        })
    }

    /// Ends the op with `result` if it is still pending; `false` if it had ended (or is
    /// gone), so a second ending is refused and the first one stands. An op marked by
    /// [`cancel_all_on_settle`](Self::cancel_all_on_settle) ends here too, with
    /// [`OpError::Cancelled`] whatever `result` says, and the call returns `false`: the
    /// ending was late for its caller.
    pub fn finish(&self, h: OpHandle, result: OpResult) -> bool {
        let Some(c) = self.live(h) else { return false };
        let (state, answered) = match c.state.get() {
            State::Pending => (State::Done(result), true),
            State::Cancelling => (State::Done(Err(OpError::Cancelled)), false),
            State::Free | State::Done(_) => return false,
        };
        c.state.set(state);
        if let Some(w) = c.waker.take() {
            w.wake();
        }
        answered
    }

    /// The op's state without consuming it.
    pub fn poll(&self, h: OpHandle) -> Poll<OpResult> {
        match self.live(h).map(|c| c.state.get()) {
            Some(State::Done(r)) => Poll::Ready(r),
            Some(_) => Poll::Pending,
            None => Poll::Ready(Err(OpError::Gone)),
        }
    }

    /// Whether the op has ended (or is gone).
    pub fn is_done(&self, h: OpHandle) -> bool {
        self.poll(h).is_ready()
    }

    /// Takes the result of an ended op and frees its cell; `None` while it is pending.
    pub fn result(&self, h: OpHandle) -> Option<OpResult> {
        match self.poll(h) {
            Poll::Pending => None,
            Poll::Ready(Err(OpError::Gone)) => Some(Err(OpError::Gone)),
            Poll::Ready(r) => {
                let c = &self.cells[h.index as usize];
                c.state.set(State::Free);
                c.waker.set(None);
                Some(r)
            }
        }
    }

    /// Fails every pending op with [`OpError::Cancelled`], each once; returns how many.
    /// Slots are not touched (see the module docs).
    pub fn cancel_all(&self) -> usize {
        let mut n = 0;
        for (i, c) in self.cells.iter().enumerate() {
            if c.state.get() == State::Pending {
                let h = OpHandle {
                    index: i as u16,
                    id: c.id.get(),
                };
                n += usize::from(self.finish(h, Err(OpError::Cancelled)));
            }
        }
        n
    }

    /// Marks every pending op cancelled without ending it; returns how many. Each reads
    /// as pending until its own ending arrives through [`finish`](Self::finish), and
    /// then as [`OpError::Cancelled`]. For ops whose end is the only sign that a peer is
    /// done with the caller's memory (a bulk call's buffers): ending them at once would
    /// hand the memory back while the peer may still write into it. Ops already marked
    /// are not counted again; [`cancel_all`](Self::cancel_all) leaves marked ops alone.
    pub fn cancel_all_on_settle(&self) -> usize {
        let mut n = 0;
        for c in &self.cells {
            if c.state.get() == State::Pending {
                c.state.set(State::Cancelling);
                n += 1;
            }
        }
        n
    }

    /// Ops started whose result has not been taken.
    pub fn live_count(&self) -> usize {
        self.cells
            .iter()
            .filter(|c| c.state.get() != State::Free)
            .count()
    }

    /// Ops not yet ended, those marked by
    /// [`cancel_all_on_settle`](Self::cancel_all_on_settle) included.
    pub fn pending_count(&self) -> usize {
        self.cells
            .iter()
            .filter(|c| matches!(c.state.get(), State::Pending | State::Cancelling))
            .count()
    }

    fn register(&self, h: OpHandle, w: &Waker) {
        if let Some(c) = self.live(h) {
            match c.waker.take() {
                Some(old) if old.will_wake(w) => c.waker.set(Some(old)),
                _ => c.waker.set(Some(w.clone())),
            }
        }
    }

    /// A future that resolves to the op's result (taking it).
    pub fn future(&self, h: OpHandle) -> OpFuture<'_, N> {
        OpFuture { table: self, h }
    }
}

/// [`OpTable::future`]: ready when the op ends, woken by [`OpTable::finish`].
#[derive(Debug)]
#[must_use = "a future does nothing unless polled"]
pub struct OpFuture<'a, const N: usize> {
    table: &'a OpTable<N>,
    h: OpHandle,
}

impl<const N: usize> Future for OpFuture<'_, N> {
    type Output = OpResult;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<OpResult> {
        match self.table.result(self.h) {
            Some(r) => Poll::Ready(r),
            None => {
                self.table.register(self.h, cx.waker());
                Poll::Pending
            }
        }
    }
}
