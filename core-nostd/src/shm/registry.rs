//! The client registry both shm protocols keep in their client tables: who holds which
//! client id, in which registration (epoch), and which process recorded itself as its
//! owner. The table rows differ per layout (their offsets are each layout's); the state
//! word, the id claim and the owner record are the same.

use core::fmt;

use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// Who holds a role in a region, as its host records it: an opaque `id` (the host's pid)
/// and a `token` telling apart two holders with the same id (the host's process start
/// time: pids are reused). The core only stores them; the host judges liveness.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Owner {
    /// The owner id (pid); 0 means "not recorded yet".
    pub id: u32,
    /// The owner token (process start time); 0 if the host has none.
    pub token: u64,
}

impl From<u32> for Owner {
    /// An owner with no token.
    fn from(id: u32) -> Self {
        Self { id, token: 0 }
    }
}

/// A server's seal on the reply handles it gives out: a number in each handle (ipc's
/// `IpcRequest` epoch, deleg's `ReplyToken` call) is held as `value ^ salt`, and the
/// server opens it with its own salt before its check. A handle of another server
/// (another region, or another server on this one) then names a value its client does
/// not have, so its reply is refused instead of answering that server's client, whose
/// id, slot and call may coincide with the handle's (servers fed the same traffic in
/// step). A salt is the server's instance number ([`crate::sync::next_instance`]) with
/// its bits reversed: two instance numbers below 2^k differ in their low k bits, so
/// their salts differ in the top k, and values below 2^(32 − k) sealed by the two never
/// coincide (below 65 536 for the first 65 536 instances).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServerSalt(u32);

impl ServerSalt {
    /// The next server's salt.
    pub(crate) fn next() -> Self {
        Self::numbered(crate::sync::next_instance())
    }

    /// Instance number `n`'s salt.
    pub(crate) const fn numbered(n: u32) -> Self {
        Self(n.reverse_bits())
    }

    /// The value as a handle of this server carries it.
    #[inline]
    pub(crate) const fn seal(self, value: u32) -> u32 {
        value ^ self.0
    }

    /// The value a handle's sealed one stands for, if this server sealed it.
    #[inline]
    pub(crate) const fn open(self, sealed: u32) -> u32 {
        sealed ^ self.0
    }
}

/// Lifecycle of a client id, the low two bits of a client-table row's state word
/// (`epoch << 2 | state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ClientState {
    /// Free for a new client.
    Free = 0,
    /// Registered and calling.
    Active = 1,
    /// Closed by its client; the server frees it once its ring positions are drained.
    Closing = 2,
    /// Declared dead by the server's host (process gone); freed like `Closing`.
    Dead = 3,
}

impl ClientState {
    #[inline]
    pub(crate) fn pack(self, epoch: u32) -> u32 {
        (epoch << 2) | self as u32
    }
    #[inline]
    pub(crate) fn unpack(word: u32) -> (Self, u32) {
        let s = match word & 3 {
            0 => Self::Free,
            1 => Self::Active,
            2 => Self::Closing,
            _ => Self::Dead,
        };
        (s, word >> 2)
    }

    /// Takes id `state` belongs to for a new client if it is `Free`: one CAS makes it
    /// `Active` with its epoch bumped. Returns the new epoch, or `None` if the id is not
    /// free (or another client took it first). Shared by the delegationrpc and ipc
    /// clients, whose `claim_client_id` scans offer ids to it.
    ///
    /// Orderings: A6 (the load, and the CAS on failure; pairs with R6 of the client that
    /// took the id) makes that client's reservation of an id, made before, visible to the
    /// caller's next reload of the count. R6 (the CAS; pairs with A6 in another client's
    /// scan) does the same for the caller's reservation. A4 (the CAS; pairs with R4 of
    /// the server that freed the id) orders the server's last writes for the previous
    /// owner before the caller takes the id's slots or rings over.
    #[inline]
    pub(crate) fn activate(state: &AtomicU32) -> Option<u32> {
        let word = state.load(Ordering::Acquire);
        let (st, epoch) = Self::unpack(word);
        if st != Self::Free {
            return None;
        }
        let epoch = epoch.wrapping_add(1) & (u32::MAX >> 2);
        state
            .compare_exchange(
                word,
                Self::Active.pack(epoch),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .ok()?;
        Some(epoch)
    }
}

/// Client-id assignment, shared by delegationrpc and ipc: reserves a never-used id if
/// any is left (a CAS on `next_client_id`, never past `max`), offers it to `take` first
/// when `fresh_first` (delegationrpc, as its first design does), then offers every id handed out
/// so far, lowest first, until `take` accepts one.
///
/// The scan repeats while the count grows: another client may have taken the id reserved
/// here (it scans from 0 too), but it reserved one of its own first, so the count grew;
/// and an id past the count first loaded may be free. Each pass that finds nothing saw
/// the count grow, so this ends within `max` passes. For a reload to see that growth,
/// `take` must Acquire what it reads of an entry and take it with a Release (A6/R6 in
/// the callers).
pub(crate) fn claim_client_id<T>(
    next_client_id: &AtomicU32,
    max: u32,
    fresh_first: bool,
    mut take: impl FnMut(u32) -> Option<T>,
) -> Option<T> {
    // Relaxed: the counter only hands out numbers; the entry's CAS in `take` synchronises.
    let mut n = next_client_id.load(Ordering::Relaxed);
    while n < max {
        match next_client_id.compare_exchange_weak(n, n + 1, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => {
                if fresh_first {
                    if let Some(t) = take(n) {
                        return Some(t);
                    }
                }
                break;
            }
            Err(cur) => n = cur,
        }
    }
    let mut from = 0;
    loop {
        // Relaxed: bounds the scan only.
        let seen = next_client_id.load(Ordering::Relaxed).min(max);
        if seen == from {
            return None;
        }
        if let Some(t) = (0..seen).find_map(&mut take) {
            return Some(t);
        }
        from = seen;
    }
}

/// A client-table row, for the host's liveness checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientInfo {
    /// The id.
    pub id: u32,
    /// Its state.
    pub state: ClientState,
    /// Registrations of this id so far.
    pub epoch: u32,
    /// The owner id the client gave at connect (the host's pid); 0 while it registers.
    pub owner: u32,
    /// The owner token the client gave at connect (the host's process start time).
    pub owner_token: u64,
}

impl ClientInfo {
    /// A snapshot of row `id` from its state word and owner record, for liveness checks:
    /// its state and epoch, and the owner recorded for that epoch (id 0 while the client
    /// is still registering).
    pub(crate) fn read(id: u32, state: &AtomicU32, owner: &AtomicU32, token: &AtomicU64) -> Self {
        // A6 (pairs with R6 of the activating CAS, and through it with R4 of the server
        // that freed the id): the freeing server's clearing of `owner` is visible, so a
        // new epoch never shows the previous owner's pid.
        let (state, epoch) = ClientState::unpack(state.load(Ordering::Acquire));
        // A7 (pairs with R7 in the client's connect): the token stored before the id.
        let owner = owner.load(Ordering::Acquire);
        // Relaxed: ordered after A7.
        let owner_token = token.load(Ordering::Relaxed);
        Self {
            id,
            state,
            epoch,
            owner,
            owner_token,
        }
    }
}

/// Records `owner` in a row the caller has just activated: the token first, then the id.
/// R7 (the id store; pairs with A7 in [`ClientInfo::read`]): a reader that sees the id
/// sees its token.
pub(crate) fn record_owner(owner_word: &AtomicU32, token_word: &AtomicU64, owner: Owner) {
    // Relaxed: published by R7 below.
    token_word.store(owner.token, Ordering::Relaxed);
    // R7 (pairs with A7 in ClientInfo::read).
    owner_word.store(owner.id, Ordering::Release);
}

/// A client's close of its own row: one CAS `Active -> Closing` in its epoch. False if
/// the row moved on (the server evicted it, or another host declared it dead).
///
/// Release on success: a server scan that sees Closing (with an Acquire load) sees every
/// claim or push the client made before. Each protocol labels this pair: R8/A8 in
/// delegationrpc, R5/A5 in ipc. Relaxed on failure: nothing to do.
pub(crate) fn close(state: &AtomicU32, epoch: u32) -> bool {
    // R8 (delegationrpc) / R5 (ipc): see above.
    state
        .compare_exchange(
            ClientState::Active.pack(epoch),
            ClientState::Closing.pack(epoch),
            Ordering::Release,
            Ordering::Relaxed,
        )
        .is_ok()
}

/// A server's eviction of the row whose state word is `state` (`None`: no such id): one
/// CAS to `Dead` in the same epoch, if the row's state is one of `evictable`. `Ok(true)`
/// if it won, `Ok(false)` if the word moved meanwhile (a racing close, or another
/// host's declaration: the server's table scans retire the row either way),
/// `Err(NotActive)` for a state not in `evictable`.
pub(crate) fn evict(
    state: Option<&AtomicU32>,
    evictable: &[ClientState],
) -> Result<bool, EvictError> {
    let state = state.ok_or(EvictError::BadId)?;
    // Relaxed: the CAS re-checks; only the evicting server acts on the Dead it stores
    // (its own table scans), and a race with the row's other writers is settled by the
    // CAS below.
    let word = state.load(Ordering::Relaxed);
    let (st, epoch) = ClientState::unpack(word);
    if !evictable.contains(&st) {
        return Err(EvictError::NotActive);
    }
    // Relaxed: as above.
    Ok(state
        .compare_exchange(
            word,
            ClientState::Dead.pack(epoch),
            Ordering::Relaxed,
            Ordering::Relaxed,
        )
        .is_ok())
}

/// Why an eviction was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictError {
    /// No such id.
    BadId,
    /// The id is not registered.
    NotActive,
}

impl core::error::Error for EvictError {}

impl fmt::Display for EvictError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::BadId => "no such client id",
            Self::NotActive => "client id not registered",
        })
    }
}
