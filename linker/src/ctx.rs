//! The copyrpc context in C: a handle placed in the caller's memory, endpoints from the
//! setup API's descriptions, call / poll / recv / reply / flush.
//!
//! Four instantiations of the core's generic `Context` serve C, one per context class:
//! `u64` user tokens, 16, 64, 256 or 1 024 endpoints (the class of the fabric whose
//! queues the context takes), pending calls in proportion, and
//! [`COPYRPC_CTX_REQUESTS`] requests per endpoint (rings up to 16 KiB). Every
//! function finds the class from the handle's magic word (the 16-endpoint class first:
//! its check is the one compare it always was). Nothing here allocates: the handle
//! lives where the caller put it.

use core::ffi::c_void;
use core::mem::{align_of, offset_of, size_of, MaybeUninit};
use core::ptr::null_mut;
use core::sync::atomic::{AtomicU32, Ordering};

use copyrpc_core::copyrpc::{Context, EndpointConfig, EndpointId, Error, RecvHandle};

use crate::desc::{
    copyrpc_ep_desc, copyrpc_peer_info, copyrpc_queues, open_peer_info, peer_info, read_ep,
    read_queues, use_up_ep, use_up_queues, FabricShell,
};
use crate::kind::{self, Restore};
use crate::live;
use crate::status::{self, *};

/// Endpoints of the default context class (a fabric opened by `copyrpc_fabric_open`).
pub const COPYRPC_CTX_ENDPOINTS: usize = 16;
/// Calls pending at once, over all endpoints, in the default class. The other classes
/// hold `COPYRPC_CTX<N>_CALLS`.
pub const COPYRPC_CTX_CALLS: usize = 512;
/// Requests held per endpoint: recv rings of up to 32 × this bytes (16 KiB).
pub const COPYRPC_CTX_REQUESTS: usize = 512;
/// The largest request payload a call can carry between two endpoints of the largest
/// rings (16 KiB): `copyrpc_max_payload` of such an endpoint. A call of more is refused
/// with `COPYRPC_E_TOO_LARGE`; smaller rings hold less (about half the ring).
pub const COPYRPC_MAX_PAYLOAD: u32 = 8148;
/// Bytes of the memory area `copyrpc_ctx_init` needs (at least) for a context of the
/// default class (16 endpoints).
pub const COPYRPC_CTX_BYTES: usize = 376_832;
/// Alignment of that area (and of every class's).
pub const COPYRPC_CTX_ALIGN: usize = 64;
/// Calls pending at once in a context of 64 endpoints.
pub const COPYRPC_CTX64_CALLS: usize = 2048;
/// Bytes of a context of 64 endpoints (a fabric opened with `endpoints = 64`).
pub const COPYRPC_CTX64_BYTES: usize = 1_490_944;
/// Calls pending at once in a context of 256 endpoints.
pub const COPYRPC_CTX256_CALLS: usize = 8192;
/// Bytes of a context of 256 endpoints.
pub const COPYRPC_CTX256_BYTES: usize = 5_947_392;
/// Calls pending at once in a context of 1 024 endpoints.
pub const COPYRPC_CTX1024_CALLS: usize = 16384;
/// Bytes of a context of 1 024 endpoints.
pub const COPYRPC_CTX1024_BYTES: usize = 23_379_968;

pub(crate) type Ctx<const E: usize, const C: usize> = Context<u64, E, C, COPYRPC_CTX_REQUESTS>;

/// A context handle: opaque to C, placed by `copyrpc_ctx_init` in the caller's memory.
#[derive(Debug)]
pub struct copyrpc_ctx {
    _opaque: [u8; 0],
}

pub(crate) const MAGIC_16: u64 = u64::from_le_bytes(*b"CRPCCT16");
pub(crate) const MAGIC_64: u64 = u64::from_le_bytes(*b"CRPCCT64");
pub(crate) const MAGIC_256: u64 = u64::from_le_bytes(*b"CRPCC256");
pub(crate) const MAGIC_1024: u64 = u64::from_le_bytes(*b"CRPCCT1K");

/// What a `copyrpc_ctx` pointer points at, for `E` endpoints and `C` pending calls. The
/// magic word comes first in every handle kind of this library, so a handle of another
/// kind is told apart by it; the fields up to `tag` are laid out alike in every class
/// ([`Head`]).
#[repr(C)]
pub(crate) struct CtxHandle<const E: usize, const C: usize> {
    magic: u64,
    /// This handle's entry in the list of live handles (from init to fini).
    live: live::Node,
    /// The fabric whose queues the context took: its endpoints must come from it too,
    /// and it is told when the context ends.
    shell: *const FabricShell,
    /// Stamped on every request this context hands out, checked by `copyrpc_reply`: the
    /// core knows a request only by (endpoint, sequence, call id), which another context
    /// (or this memory's previous context) may hold a live request under too.
    tag: u16,
    /// The fabric address of each endpoint's QP, for its peer info.
    qp: [[u8; 32]; E],
    pub(crate) ctx: Ctx<E, C>,
}

/// The fields every class's handle starts with, for what does not depend on the class
/// (the end of a context).
#[repr(C)]
struct Head {
    magic: u64,
    live: live::Node,
    shell: *const FabricShell,
}

pub(crate) type H16 = CtxHandle<16, COPYRPC_CTX_CALLS>;
pub(crate) type H64 = CtxHandle<64, COPYRPC_CTX64_CALLS>;
pub(crate) type H256 = CtxHandle<256, COPYRPC_CTX256_CALLS>;
pub(crate) type H1024 = CtxHandle<1024, COPYRPC_CTX1024_CALLS>;

const _: () = {
    // The core's limit for the largest rings of the setup API, whose cap of what a side
    // reserves for responses is a quarter of the ring (`EndpointConfig::for_ring`).
    let ring = 32 * COPYRPC_CTX_REQUESTS as u64;
    assert!(
        copyrpc_core::credit::max_request_payload(ring / 4, ring) == COPYRPC_MAX_PAYLOAD as u64
    );
    assert!(size_of::<H16>() <= COPYRPC_CTX_BYTES);
    assert!(size_of::<H64>() <= COPYRPC_CTX64_BYTES);
    assert!(size_of::<H256>() <= COPYRPC_CTX256_BYTES);
    assert!(size_of::<H1024>() <= COPYRPC_CTX1024_BYTES);
    assert!(align_of::<H1024>() <= COPYRPC_CTX_ALIGN);
    assert!(align_of::<H16>() <= COPYRPC_CTX_ALIGN);
    assert!(offset_of!(H16, shell) == offset_of!(Head, shell));
    assert!(offset_of!(H1024, shell) == offset_of!(Head, shell));
    assert!(offset_of!(H1024, live) == offset_of!(Head, live));
};

/// Bytes of the memory area `copyrpc_ctx_init` needs for a context of the class of
/// `endpoints` endpoints (16, 64, 256 or 1 024: the `endpoints` its fabric was opened
/// with), or 0 for any other number. The same as `COPYRPC_CTX<N>_BYTES`.
#[unsafe(no_mangle)]
pub extern "C" fn copyrpc_ctx_bytes(endpoints: u32) -> usize {
    match endpoints {
        16 => COPYRPC_CTX_BYTES,
        64 => COPYRPC_CTX64_BYTES,
        256 => COPYRPC_CTX256_BYTES,
        1024 => COPYRPC_CTX1024_BYTES,
        _ => 0,
    }
}

/// Contexts initialised in this process, for their tags.
static CONTEXTS: AtomicU32 = AtomicU32::new(0);

/// A tag no other context initialised among the last 65 535 in this process has, and
/// never 0, so a request zero-filled by hand is not taken for one of a context's.
fn next_tag() -> u16 {
    let n = CONTEXTS.fetch_add(1, Ordering::Relaxed) % u32::from(u16::MAX);
    // `n < u16::MAX`, so the sum fits.
    n as u16 + 1
}

/// The code for a context pointer whose word is `word`, none of a live context's.
#[cold]
pub(crate) fn refused(word: u64) -> i32 {
    for m in [MAGIC_16, MAGIC_64, MAGIC_256, MAGIC_1024] {
        if word == kind::polling(m) || word == kind::unwound(m) {
            return kind::refused(word, m);
        }
    }
    COPYRPC_E_WRONG_KIND
}

#[cold]
pub(crate) fn null() -> i32 {
    COPYRPC_E_NULL
}

/// Runs `$body` with `$h` bound to the `*mut CtxHandle<..>` of the live context `$p`
/// and `$m` to its class's magic, or returns the refusal (NULL, another kind, an ended
/// context, one whose poll runs or a callback unwound out of). The body is instantiated
/// once per class.
///
/// The caller's contract: `$p` is NULL or points at a handle of this library (of any
/// kind) or at 8 readable bytes; a context is used by one thread at a time.
macro_rules! with_ctx {
    ($p:expr, |$h:ident, $m:ident| $body:expr) => {{
        use $crate::ctx::{H1024, H16, H256, H64, MAGIC_1024, MAGIC_16, MAGIC_256, MAGIC_64};
        let p: *mut $crate::ctx::copyrpc_ctx = $p;
        if p.is_null() {
            return $crate::ctx::null();
        }
        // SAFETY: the magic word is the first field of every handle kind (the caller's
        // contract).
        let word = unsafe { p.cast::<u64>().read() };
        if word == MAGIC_16 {
            let ($h, $m) = (p.cast::<H16>(), MAGIC_16);
            $body
        } else {
            match word {
                MAGIC_64 => {
                    let ($h, $m) = (p.cast::<H64>(), MAGIC_64);
                    $body
                }
                MAGIC_256 => {
                    let ($h, $m) = (p.cast::<H256>(), MAGIC_256);
                    $body
                }
                MAGIC_1024 => {
                    let ($h, $m) = (p.cast::<H1024>(), MAGIC_1024);
                    $body
                }
                _ => return $crate::ctx::refused(word),
            }
        }
    }};
}
pub(crate) use with_ctx;

/// `len` bytes at `p` as a slice; NULL is fine with `len == 0`.
///
/// # Safety
///
/// `p` is readable for `len` bytes, unchanged while the slice lives.
#[inline(always)]
unsafe fn bytes<'a>(p: *const c_void, len: usize) -> Result<&'a [u8], i32> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null());
    }
    // SAFETY: caller contract.
    Ok(unsafe { core::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// Builds a context of class (`E`, `C`) at `h` over `q`; writes every field but the
/// magic and the list entry (already there).
///
/// # Safety
///
/// `h` is writable for a `CtxHandle<E, C>` and listed; `q` are the queues the context
/// took.
unsafe fn build<const E: usize, const C: usize>(
    h: *mut CtxHandle<E, C>,
    shell: &FabricShell,
    q: &copyrpc_core::copyrpc::Queues,
) -> Result<(), Error> {
    // SAFETY: caller contract; the queues' contract is the setup API's.
    unsafe {
        let slot = &mut *(&raw mut (*h).ctx).cast::<MaybeUninit<Ctx<E, C>>>();
        Ctx::<E, C>::init(slot, q)?;
        (&raw mut (*h).shell).write(shell);
        (&raw mut (*h).qp).write([[0; 32]; E]);
        (&raw mut (*h).tag).write(next_tag());
    }
    Ok(())
}

/// Builds a context in `mem` (`len` at least `copyrpc_ctx_bytes(endpoints)` of the
/// class of its fabric: `COPYRPC_CTX_BYTES` for a fabric of `copyrpc_fabric_open`;
/// aligned to `COPYRPC_CTX_ALIGN`) over the queues `copyrpc_fabric_queues` described,
/// and stores the handle in `*out` (NULL on every refusal). The memory stays the
/// caller's: end with `copyrpc_ctx_fini`, and leave it untouched until then. The
/// description is used up: one set of queues serves one context, ever.
///
/// Returns `COPYRPC_OK`; `COPYRPC_E_NULL` (a NULL argument); `COPYRPC_E_TOO_SMALL` /
/// `COPYRPC_E_MISALIGNED` (the area); `COPYRPC_E_IN_USE` (the area holds or overlaps a
/// live handle of this library); `COPYRPC_E_BAD_DESC` (not a description of the setup
/// API, its fabric closed, or its queues taken by a context before: a second use, a
/// copy, another description of the same queues); `COPYRPC_E_BAD_SETUP` (the core
/// refused the queues; `copyrpc_refusal_detail`); `COPYRPC_E_BUSY` (another thread
/// held the set-up lock too long: retry). A failed init leaves the queues free.
///
/// # Safety
///
/// `mem` is writable for `len` bytes; `queues` and `out` are NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_ctx_init(
    mem: *mut c_void,
    len: usize,
    queues: *mut copyrpc_queues,
    out: *mut *mut copyrpc_ctx,
) -> i32 {
    if out.is_null() {
        return COPYRPC_E_NULL;
    }
    // SAFETY: non-null, writable (caller contract). Every refusal below leaves it NULL.
    unsafe { out.write(null_mut()) };
    if mem.is_null() || queues.is_null() {
        return COPYRPC_E_NULL;
    }
    // The smallest class's size first, then the class's own once the description says
    // which it is.
    if len < COPYRPC_CTX_BYTES {
        return COPYRPC_E_TOO_SMALL;
    }
    if !(mem as usize).is_multiple_of(COPYRPC_CTX_ALIGN) {
        return COPYRPC_E_MISALIGNED;
    }
    // SAFETY: non-null; the caller passes a description (contract).
    let (shell, q) = match unsafe { read_queues(&*queues) } {
        Ok(x) => x,
        Err(e) => return e,
    };
    // The documented size, not the handle's: a caller that passes less works with this
    // build and breaks with one whose handle grew up to that bound.
    let need = copyrpc_ctx_bytes(shell.endpoints);
    if need == 0 || !shell.is_open() {
        return COPYRPC_E_BAD_DESC;
    }
    if len < need {
        return COPYRPC_E_TOO_SMALL;
    }
    let head = mem.cast::<Head>();
    // SAFETY: the area is writable for `need` bytes, which hold the entry (at the same
    // offset in every class), and stays the handle's until its fini.
    if let Err(e) = unsafe { live::enlist(&raw mut (*head).live, mem as usize, need) } {
        return e;
    }
    if !shell.take_queues() {
        // SAFETY: listed just above.
        unsafe { live::delist(&raw mut (*head).live) };
        return COPYRPC_E_BAD_DESC;
    }
    // SAFETY: the area holds a handle of the class (size and alignment checked above),
    // listed; the queues were taken for it.
    let (built, magic) = unsafe {
        match shell.endpoints {
            16 => (build(mem.cast::<H16>(), shell, &q), MAGIC_16),
            64 => (build(mem.cast::<H64>(), shell, &q), MAGIC_64),
            256 => (build(mem.cast::<H256>(), shell, &q), MAGIC_256),
            _ => (build(mem.cast::<H1024>(), shell, &q), MAGIC_1024),
        }
    };
    if let Err(e) = built {
        // Unused: another description of these queues may still take them.
        shell.give_back_queues();
        // SAFETY: listed above.
        unsafe { live::delist(&raw mut (*head).live) };
        return status::of(e);
    }
    // SAFETY: the handle is whole; the magic is written last, so a failed init leaves no
    // live handle; `out` and `queues` are valid (caller contract).
    unsafe {
        (&raw mut (*head).magic).write(magic);
        out.write(mem.cast());
        use_up_queues(&mut *queues);
    }
    COPYRPC_OK
}

/// Ends a context: its handle becomes invalid (later calls return
/// `COPYRPC_E_WRONG_KIND`), its memory the caller's again, and its fabric may close.
/// Calls still in flight end with it, unanswered: no response callback runs for them
/// (poll until the calls you need have their responses first). Also ends a context
/// a callback unwound out of (`COPYRPC_E_UNWOUND`).
///
/// Returns `COPYRPC_OK`, `COPYRPC_E_NULL`, `COPYRPC_E_WRONG_KIND` (not a live context:
/// ended already, or another kind), `COPYRPC_E_BUSY` (from inside its own poll
/// callback).
///
/// # Safety
///
/// As every function taking a context: `ctx` is NULL or a handle of this library (of any
/// kind, live or ended), or points at 8 readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_ctx_fini(ctx: *mut copyrpc_ctx) -> i32 {
    if ctx.is_null() {
        return null();
    }
    let head = ctx.cast::<Head>();
    // SAFETY: the magic word is first in every handle (caller contract).
    let word = unsafe { (&raw const (*head).magic).read() };
    let live = [MAGIC_16, MAGIC_64, MAGIC_256, MAGIC_1024]
        .into_iter()
        .any(|m| word == m || word == kind::unwound(m));
    if !live {
        return refused(word);
    }
    // SAFETY: a live context: its head is whole, its entry listed, its fabric open.
    unsafe {
        (&raw mut (*head).magic).write(0);
        live::delist(&raw mut (*head).live);
        (*(*head).shell).retire_queues();
    }
    COPYRPC_OK
}

/// Adds an endpoint over the QP and memory `desc` describes (from
/// `copyrpc_fabric_endpoint` of the context's fabric); its index goes to `*ep`. The
/// description is used up.
///
/// Returns `COPYRPC_OK`; `COPYRPC_E_NULL`; `COPYRPC_E_WRONG_KIND` / `COPYRPC_E_BUSY` /
/// `COPYRPC_E_UNWOUND` (the handle, as for every function taking a context);
/// `COPYRPC_E_BAD_DESC` (not from the setup API, from another fabric, used already, or
/// a copy of a used one); `COPYRPC_E_TOO_MANY_ENDPOINTS` (the class is full);
/// `COPYRPC_E_BAD_SETUP` (the core refused the rings: `copyrpc_refusal_detail`).
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`; `desc` and `ep` are NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_ep_create(
    ctx: *mut copyrpc_ctx,
    desc: *mut copyrpc_ep_desc,
    ep: *mut u16,
) -> i32 {
    with_ctx!(ctx, |h, _m| {
        // SAFETY: a live context of this class, used by this thread.
        let h = unsafe { &mut *h };
        if desc.is_null() || ep.is_null() {
            return COPYRPC_E_NULL;
        }
        // SAFETY: non-null, caller contract.
        let (sq, mem, qp, claim) = match unsafe { read_ep(&*desc, h.shell) } {
            Ok(d) => d,
            Err(e) => return e,
        };
        // SAFETY: the description is of this context's fabric, open while the context
        // lives.
        if !unsafe { claim.take() } {
            return COPYRPC_E_BAD_DESC;
        }
        let cfg = EndpointConfig::for_ring(mem.recv_ring.len as u64);
        // SAFETY: the setup API created the QP on this context's queues and registered
        // the three disjoint regions for it; the fabric keeps both alive and nothing else
        // uses them (the claim above: one description, one endpoint).
        match unsafe { h.ctx.create_endpoint(&sq, &mem, cfg) } {
            Ok(id) => {
                h.qp[usize::from(id.0)] = qp;
                // SAFETY: non-null, caller contract.
                unsafe {
                    ep.write(id.0);
                    use_up_ep(&mut *desc);
                }
                COPYRPC_OK
            }
            Err(e) => {
                // SAFETY: as above; taken by this call, and unused.
                unsafe { claim.give_back() };
                status::of(e)
            }
        }
    })
}

/// Writes what the peer needs to connect to endpoint `ep` into `*out` (96 bytes of plain
/// data: send it over any channel).
///
/// Returns `COPYRPC_OK`, `COPYRPC_E_NULL`, `COPYRPC_E_NO_SUCH_ENDPOINT`, or a handle
/// refusal.
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_ep_local_info(
    ctx: *mut copyrpc_ctx,
    ep: u16,
    out: *mut copyrpc_peer_info,
) -> i32 {
    with_ctx!(ctx, |h, _m| {
        // SAFETY: a live context of this class, used by this thread.
        let h = unsafe { &mut *h };
        if out.is_null() {
            return COPYRPC_E_NULL;
        }
        match h.ctx.local_info(EndpointId(ep)) {
            Ok(info) => {
                // SAFETY: non-null, caller contract.
                unsafe { out.write(peer_info(h.qp[usize::from(ep)], &info)) };
                COPYRPC_OK
            }
            Err(e) => status::of(e),
        }
    })
}

/// Connects endpoint `ep` to the peer that sent `info` (its `copyrpc_ep_local_info`).
/// The QP must be connected first (`copyrpc_fabric_connect` does both).
///
/// Returns `COPYRPC_OK`, `COPYRPC_E_NULL`, `COPYRPC_E_BAD_PEER_INFO` (magic, version or
/// checksum wrong), `COPYRPC_E_NO_SUCH_ENDPOINT`, `COPYRPC_E_ALREADY_CONNECTED`,
/// `COPYRPC_E_BAD_SETUP` (the peer's rings do not fit ours: `copyrpc_refusal_detail`),
/// or a handle refusal.
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`; `info` is NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_ep_connect(
    ctx: *mut copyrpc_ctx,
    ep: u16,
    info: *const copyrpc_peer_info,
) -> i32 {
    with_ctx!(ctx, |h, _m| {
        // SAFETY: a live context of this class, used by this thread.
        let h = unsafe { &mut *h };
        // SAFETY: NULL or readable (caller contract).
        let (_, remote) = match open_peer_info(unsafe { info.as_ref() }) {
            Ok(x) => x,
            Err(e) => return e,
        };
        match h.ctx.connect(EndpointId(ep), &remote) {
            Ok(()) => COPYRPC_OK,
            Err(e) => status::of(e),
        }
    })
}

/// `COPYRPC_OK` while endpoint `ep` of `ctx` still takes a `copyrpc_ep_connect`, else
/// the code that call would return (`COPYRPC_E_ALREADY_CONNECTED` once it was connected,
/// or failed). For the setup API, which must know before it touches the QP.
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`.
pub unsafe fn ep_connectable(ctx: *mut copyrpc_ctx, ep: u16) -> i32 {
    with_ctx!(ctx, |h, _m| {
        // SAFETY: a live context of this class, used by this thread.
        let h = unsafe { &mut *h };
        // The core's one public view of an endpoint's state: its allowance limit is
        // `NotConnected` exactly while `connect` would still accept the endpoint.
        match h.ctx.max_response_allowance(EndpointId(ep)) {
            Err(Error::NotConnected) => COPYRPC_OK,
            Ok(_) => COPYRPC_E_ALREADY_CONNECTED,
            Err(e) => status::of(e),
        }
    })
}

/// The fabric shell of the context `ctx`, for the setup API to check an endpoint's
/// fabric against; the handle's refusal if `ctx` is not a live context.
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`.
pub unsafe fn shell_of(ctx: *mut copyrpc_ctx) -> Result<*const FabricShell, i32> {
    let mut shell = core::ptr::null();
    let rc = (|| {
        with_ctx!(ctx, |h, _m| {
            // SAFETY: a live context of this class: its shell is set.
            shell = unsafe { (*h).shell };
            COPYRPC_OK
        })
    })();
    if rc == COPYRPC_OK {
        Ok(shell)
    } else {
        Err(rc)
    }
}

/// Fails endpoint `ep` of `ctx` (cause `COPYRPC_CAUSE_APPLICATION`). For the setup API,
/// when the QP under an endpoint it connected could not be brought up: the endpoint's
/// calls are then refused instead of waiting on a QP that sends nothing.
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`.
pub unsafe fn fail_ep(ctx: *mut copyrpc_ctx, ep: u16) -> i32 {
    with_ctx!(ctx, |h, _m| {
        // SAFETY: a live context of this class, used by this thread.
        let h = unsafe { &mut *h };
        match h.ctx.fail_endpoint(EndpointId(ep)) {
            Ok(()) => COPYRPC_OK,
            Err(e) => status::of(e),
        }
    })
}

/// Sends a request of `len` bytes at `buf` on endpoint `ep`, reserving room for a
/// response of up to `allowance` bytes. `token` comes back with the response in the
/// poll callback (any value: an index, a pointer). The bytes are copied into the send
/// ring before the call returns: `buf` is the caller's again at once.
///
/// Returns `COPYRPC_OK`; to poll and retry: `COPYRPC_E_RING_FULL`,
/// `COPYRPC_E_INSUFFICIENT_CREDIT`, `COPYRPC_E_TOO_MANY_CALLS`, `COPYRPC_E_SQ_FULL`;
/// for good: `COPYRPC_E_TOO_LARGE` (the payload is above `copyrpc_max_payload`, or the
/// allowance above `copyrpc_max_allowance`: `copyrpc_refusal_detail` gives both numbers),
/// `COPYRPC_E_NOT_CONNECTED`,
/// `COPYRPC_E_ENDPOINT_FAILED` (`copyrpc_failure_cause`), `COPYRPC_E_NO_SUCH_ENDPOINT`,
/// `COPYRPC_E_NULL` (`buf` NULL with `len` > 0), or a handle refusal.
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`; `buf` is readable for `len` bytes (NULL if 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_call(
    ctx: *mut copyrpc_ctx,
    ep: u16,
    buf: *const c_void,
    len: usize,
    allowance: u32,
    token: u64,
) -> i32 {
    with_ctx!(ctx, |h, _m| {
        // SAFETY: a live context of this class, used by this thread.
        let h = unsafe { &mut *h };
        // SAFETY: forwarded.
        let payload = match unsafe { bytes(buf, len) } {
            Ok(p) => p,
            Err(e) => return e,
        };
        match h
            .ctx
            .call_with_allowance(EndpointId(ep), payload, allowance, token)
        {
            Ok(_) => COPYRPC_OK,
            Err(e) => too_large_or(&h.ctx, ep, len, allowance, e.error),
        }
    })
}

/// The code of a refused call; a payload or allowance above the endpoint's limit gets
/// `COPYRPC_E_TOO_LARGE` with both numbers in `copyrpc_refusal_detail`.
#[cold]
#[inline(never)]
fn too_large_or<const E: usize, const C: usize>(
    ctx: &Ctx<E, C>,
    ep: u16,
    len: usize,
    allowance: u32,
    e: Error,
) -> i32 {
    let id = EndpointId(ep);
    match e {
        // The core's PayloadTooLarge also stands for an allowance above the ring, which
        // keeps the core's text.
        Error::PayloadTooLarge => match ctx.max_request_payload(id) {
            Ok(limit) if len > limit as usize => {
                status::too_large("payload", len as u64, Some(limit), "copyrpc_max_payload")
            }
            _ => status::of(e),
        },
        Error::AllowanceTooLarge => match ctx.max_response_allowance(id) {
            Ok(limit) => status::too_large(
                "response allowance",
                u64::from(allowance),
                limit,
                "copyrpc_max_allowance",
            ),
            Err(_) => status::of(e),
        },
        _ => status::of(e),
    }
}

/// The largest request payload a call on a connected endpoint `ep` can ever carry
/// (about half the peer's ring: `COPYRPC_MAX_PAYLOAD` for two endpoints of 16 KiB
/// rings): every payload up to it goes through once what is in flight is consumed
/// (retry after `COPYRPC_E_RING_FULL`), and a larger one is refused at once with
/// `COPYRPC_E_TOO_LARGE`, which no retry changes.
///
/// Returns the limit (>= 0); `COPYRPC_E_NOT_CONNECTED` (before the endpoint is
/// connected: the limit depends on the peer's ring), `COPYRPC_E_ENDPOINT_FAILED`,
/// `COPYRPC_E_NO_SUCH_ENDPOINT`, or a handle refusal.
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_max_payload(ctx: *mut copyrpc_ctx, ep: u16) -> i32 {
    with_ctx!(ctx, |h, _m| {
        // SAFETY: a live context of this class, used by this thread.
        match unsafe { (*h).ctx.max_request_payload(EndpointId(ep)) } {
            Ok(limit) => i32::try_from(limit).unwrap_or(i32::MAX),
            Err(e) => status::of(e),
        }
    })
}

/// The largest response allowance a call on a connected endpoint `ep` can ever be
/// granted (what the peer may reserve for our responses, less a response's framing);
/// a larger one is refused at once with `COPYRPC_E_TOO_LARGE`.
///
/// Returns the limit (>= 0); `COPYRPC_E_TOO_LARGE` when not even an empty response
/// fits (rings below `COPYRPC_FABRIC_MIN_RING`); otherwise as `copyrpc_max_payload`.
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_max_allowance(ctx: *mut copyrpc_ctx, ep: u16) -> i32 {
    with_ctx!(ctx, |h, _m| {
        // SAFETY: a live context of this class, used by this thread.
        match unsafe { (*h).ctx.max_response_allowance(EndpointId(ep)) } {
            Ok(Some(limit)) => i32::try_from(limit).unwrap_or(i32::MAX),
            Ok(None) => COPYRPC_E_TOO_LARGE,
            Err(e) => status::of(e),
        }
    })
}

/// Called by `copyrpc_poll` once per completed call: `status` is `COPYRPC_OK` with
/// the response's `len` bytes at `data` (valid during the callback only: copy what you
/// keep), or an error code (the endpoint failed: `COPYRPC_E_ENDPOINT_FAILED`) with
/// `data` NULL. Responses of one endpoint come in the order their calls were made.
///
/// It may call any function of the library but on the context being polled (those are
/// refused with `COPYRPC_E_BUSY`). It must not `longjmp` out. A C++ exception thrown
/// from it leaves `copyrpc_poll` (the library unwinds through its frames) and marks
/// the context: every later call on it but `copyrpc_ctx_fini` returns
/// `COPYRPC_E_UNWOUND` (the poll's state was left unfinished, so its other calls cannot
/// complete).
pub type copyrpc_response_fn = Option<
    unsafe extern "C-unwind" fn(
        arg: *mut c_void,
        token: u64,
        status: i32,
        data: *const u8,
        len: usize,
    ),
>;

/// Polls a context of class (`E`, `C`) at `h`, whose magic is `magic`.
///
/// # Safety
///
/// `h` is a live context of that class, used by this thread; `cb` is safe to call with
/// `arg`.
#[inline(always)]
unsafe fn poll_in<const E: usize, const C: usize>(
    h: *mut CtxHandle<E, C>,
    magic: u64,
    cb: unsafe extern "C-unwind" fn(*mut c_void, u64, i32, *const u8, usize),
    arg: *mut c_void,
) -> i32 {
    // SAFETY: caller contract. The word and the context are reached through the raw
    // pointer field by field, so a call from inside the callback reads only the word
    // (which the context borrow does not cover) and returns COPYRPC_E_BUSY; the guard
    // writes the word back through the same pointer, marked unwound if a callback
    // unwinds out of the core's poll (which leaves the batch it was in unfinished).
    let (guard, c) = unsafe {
        (
            Restore::mark(&raw mut (*h).magic, magic, kind::unwound(magic)),
            &mut (*h).ctx,
        )
    };
    let n = c.poll(|token, r| match r {
        // SAFETY: the callback's contract is the caller's; the bytes live through it.
        Ok(d) => unsafe { cb(arg, token, COPYRPC_OK, d.as_ptr(), d.len()) },
        // SAFETY: as above.
        Err(e) => unsafe { cb(arg, token, status::of(e), core::ptr::null(), 0) },
    });
    guard.finish(magic);
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Makes progress: reads both completion queues, hands each response to `cb`, queues
/// arrived requests for `copyrpc_recv`, posts what was written. Returns the number of
/// completions handled (0 when idle), `COPYRPC_E_NULL` (`cb` NULL), or a handle refusal.
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`; `cb` is safe to call with `arg`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn copyrpc_poll(
    ctx: *mut copyrpc_ctx,
    cb: copyrpc_response_fn,
    arg: *mut c_void,
) -> i32 {
    with_ctx!(ctx, |h, m| {
        let Some(cb) = cb else {
            return COPYRPC_E_NULL;
        };
        // SAFETY: a live context of this class (its word said so), used by this thread;
        // the callback's contract is the caller's.
        unsafe { poll_in(h, m, cb, arg) }
    })
}

/// The test a caller spins on while it waits for a response: 1 when `copyrpc_poll`
/// would find nothing to do (no completion in either queue, nothing written waiting to
/// be posted, no idle-peer probe due), 0 when it should call `copyrpc_poll`, or a handle
/// refusal. It reads a few words and writes only a poll count (it counts as a poll
/// toward the idle-peer probe, so a peer is still probed while a caller only spins on
/// it), so spinning `while (copyrpc_idle(ctx) == 1)` and polling when it returns 0
/// costs a fraction of an idle `copyrpc_poll` (docs/PERFORMANCE.md, "Latency path").
/// On a fabric in manual mode, step the fabric in that loop too: nothing arrives
/// otherwise.
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_idle(ctx: *mut copyrpc_ctx) -> i32 {
    with_ctx!(ctx, |h, _m| {
        // SAFETY: a live context of this class, used by this thread.
        i32::from(unsafe { (*h).ctx.idle() })
    })
}

/// A received request, from `copyrpc_recv`. Answer it once with `copyrpc_reply`, on
/// the context that received it (another context refuses it: `COPYRPC_E_STALE_REQUEST`).
/// Requests may be held across polls and answered in any order; each holds its bytes
/// in the recv ring (and its room there) until it is answered.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct copyrpc_request {
    /// The request bytes, in place in the recv ring until the reply.
    pub data: *const u8,
    /// Their length.
    pub len: usize,
    /// The endpoint it came on.
    pub ep: u16,
    /// Which context received it. It takes the two bytes that were padding after `ep`,
    /// so the struct's size and every other field's offset are as before. Leave as
    /// `copyrpc_recv` wrote it.
    pub ctx_tag: u16,
    /// The caller's call id.
    pub call_id: u32,
    /// Leave as `copyrpc_recv` wrote it.
    pub seq: u32,
}

// The tag went into padding: C built against the header without it still finds every
// field where it was.
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(offset_of!(copyrpc_request, ep) == 16);
    assert!(offset_of!(copyrpc_request, ctx_tag) == 18);
    assert!(offset_of!(copyrpc_request, call_id) == 20);
    assert!(offset_of!(copyrpc_request, seq) == 24);
    assert!(size_of::<copyrpc_request>() == 32);
};

/// Takes the oldest unanswered request into `*out`: returns 1, 0 when there is none,
/// `COPYRPC_E_NULL`, or a handle refusal. Requests arrive with `copyrpc_poll`.
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_recv(ctx: *mut copyrpc_ctx, out: *mut copyrpc_request) -> i32 {
    with_ctx!(ctx, |h, _m| {
        // SAFETY: a live context of this class, used by this thread.
        let h = unsafe { &mut *h };
        if out.is_null() {
            return COPYRPC_E_NULL;
        }
        let Some(r) = h.ctx.recv() else {
            return 0;
        };
        let d = r.data(&h.ctx);
        let (data, len) = (d.as_ptr(), d.len());
        let (ep, seq, call_id) = r.into_raw();
        // SAFETY: non-null, caller contract.
        unsafe {
            out.write(copyrpc_request {
                data,
                len,
                ep,
                ctx_tag: h.tag,
                call_id,
                seq,
            })
        };
        1
    })
}

/// Answers `req` with `len` bytes at `buf` (which may be `req->data`: an echo), sent
/// by the next poll or flush. The bytes are copied before it returns (`buf` is the
/// caller's again; `req->data` is not valid after).
///
/// Returns `COPYRPC_OK`; `COPYRPC_E_STALE_REQUEST` (answered already, or received by
/// another context); `COPYRPC_E_REPLY_TOO_LARGE` (over the allowance the caller
/// reserved); to poll and retry: `COPYRPC_E_RING_FULL`, `COPYRPC_E_SQ_FULL`;
/// `COPYRPC_E_ENDPOINT_FAILED`; `COPYRPC_E_NULL`; or a handle refusal.
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`; `req` is NULL or readable; `buf` is readable for
/// `len` bytes (NULL if 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_reply(
    ctx: *mut copyrpc_ctx,
    req: *const copyrpc_request,
    buf: *const c_void,
    len: usize,
) -> i32 {
    with_ctx!(ctx, |h, _m| {
        // SAFETY: a live context of this class, used by this thread.
        let h = unsafe { &mut *h };
        if req.is_null() {
            return COPYRPC_E_NULL;
        }
        // SAFETY: non-null, caller contract.
        let r = unsafe { req.read() };
        if r.ctx_tag != h.tag {
            return COPYRPC_E_STALE_REQUEST;
        }
        // SAFETY: forwarded.
        let payload = match unsafe { bytes(buf, len) } {
            Ok(p) => p,
            Err(e) => return e,
        };
        let handle = RecvHandle::from_raw(&h.ctx, (r.ep, r.seq, r.call_id));
        match handle.reply_with(&mut h.ctx, len, |_, out| out.copy_from_slice(payload)) {
            Ok(()) => COPYRPC_OK,
            Err(e) => status::of(e.error),
        }
    })
}

/// Posts every reply and call written so far without reading the completion queues.
/// Returns `COPYRPC_OK` or a handle refusal.
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_flush(ctx: *mut copyrpc_ctx) -> i32 {
    with_ctx!(ctx, |h, _m| {
        // SAFETY: a live context of this class, used by this thread.
        unsafe { (*h).ctx.flush() };
        COPYRPC_OK
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The header's sizes are bounds, kept near the real ones so C does not waste
    /// memory.
    #[test]
    fn ctx_bytes_are_tight() {
        for (endpoints, real) in [
            (16, size_of::<H16>()),
            (64, size_of::<H64>()),
            (256, size_of::<H256>()),
            (1024, size_of::<H1024>()),
        ] {
            let stated = copyrpc_ctx_bytes(endpoints);
            eprintln!("class {endpoints}: {real} bytes, header {stated}");
            assert!(
                real <= stated && stated - real < 4096,
                "class {endpoints}: {real}"
            );
        }
        assert_eq!(copyrpc_ctx_bytes(32), 0);
    }
}
