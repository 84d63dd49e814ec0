//! The copyrpc context in C: a handle placed in the caller's memory, endpoints from the
//! setup API's descriptions, call / poll / recv / reply / flush.
//!
//! One instantiation of the core's generic `Context` serves C: `u64` user tokens,
//! [`COPYRPC_CTX_ENDPOINTS`] endpoints, [`COPYRPC_CTX_CALLS`] pending calls and
//! [`COPYRPC_CTX_REQUESTS`] requests per endpoint (rings up to 16 KiB). Nothing here
//! allocates: the handle lives where the caller put it.

use core::ffi::c_void;
use core::mem::{align_of, offset_of, size_of, MaybeUninit};
use core::sync::atomic::{AtomicU32, Ordering};

use copyrpc_core::copyrpc::{Context, EndpointConfig, EndpointId, Error, RecvHandle};

use crate::desc::{
    copyrpc_ep_desc, copyrpc_peer_info, copyrpc_queues, open_peer_info, peer_info, read_ep,
    read_queues, use_up_ep, use_up_queues,
};
use crate::kind;
use crate::status::{self, *};

/// Endpoints one context holds.
pub const COPYRPC_CTX_ENDPOINTS: usize = 16;
/// Calls pending at once, over all endpoints.
pub const COPYRPC_CTX_CALLS: usize = 512;
/// Requests held per endpoint: recv rings of up to 32 × this bytes (16 KiB).
pub const COPYRPC_CTX_REQUESTS: usize = 512;
/// Bytes of the memory area `copyrpc_ctx_init` needs (at least).
pub const COPYRPC_CTX_BYTES: usize = 376_832;
/// Alignment of that area.
pub const COPYRPC_CTX_ALIGN: usize = 64;

type Ctx = Context<u64, COPYRPC_CTX_ENDPOINTS, COPYRPC_CTX_CALLS, COPYRPC_CTX_REQUESTS>;

/// A context handle: opaque to C, placed by `copyrpc_ctx_init` in the caller's memory.
#[derive(Debug)]
pub struct copyrpc_ctx {
    _opaque: [u8; 0],
}

const CTX_MAGIC: u64 = u64::from_le_bytes(*b"CRPCCTX1");

/// What a `copyrpc_ctx` pointer points at. The magic word comes first in every handle
/// kind of this library, so a handle of another kind is told apart by it.
#[repr(C)]
pub(crate) struct CtxHandle {
    magic: u64,
    /// The fabric address of each endpoint's QP, for its peer info.
    qp: [[u8; 32]; COPYRPC_CTX_ENDPOINTS],
    /// Stamped on every request this context hands out, checked by `copyrpc_reply`: the
    /// core knows a request only by (endpoint, sequence, call id), which another context
    /// (or this memory's previous context) may hold a live request under too.
    tag: u16,
    pub(crate) ctx: Ctx,
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

const _: () = {
    assert!(size_of::<CtxHandle>() <= COPYRPC_CTX_BYTES);
    assert!(align_of::<CtxHandle>() <= COPYRPC_CTX_ALIGN);
};

/// The handle behind `p`, if it is a live context.
///
/// # Safety
///
/// `p` is NULL or points at a handle of this library (of any kind) or at 8 readable
/// bytes; a context is used by one thread at a time.
#[inline(always)]
pub(crate) unsafe fn handle<'a>(p: *mut copyrpc_ctx) -> Result<&'a mut CtxHandle, i32> {
    let h = p.cast::<CtxHandle>();
    if h.is_null() {
        return Err(null());
    }
    // SAFETY: the magic word is the first field of every handle kind (caller contract).
    let word = unsafe { h.cast::<u64>().read() };
    if word != CTX_MAGIC {
        return Err(kind::refused(word, CTX_MAGIC));
    }
    // SAFETY: the magic says `copyrpc_ctx_init` built a context here, and the caller
    // uses it from one thread at a time.
    Ok(unsafe { &mut *h })
}

#[cold]
fn null() -> i32 {
    COPYRPC_E_NULL
}

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

/// Builds a context in `mem` (`len >= COPYRPC_CTX_BYTES`, aligned to
/// `COPYRPC_CTX_ALIGN`) over the queues `copyrpc_fabric_queues` described, and stores
/// the handle in `*out`. The memory stays the caller's: end with `copyrpc_ctx_fini`.
/// The description is used up (a second use is `COPYRPC_E_BAD_DESC`, and so is the use
/// of a copy of it or of another description of the same queues): one set of queues
/// serves one context. A failed init leaves the queues free.
///
/// # Safety
///
/// `mem` is writable for `len` bytes and not used otherwise until `copyrpc_ctx_fini`;
/// `queues` came from `copyrpc_fabric_queues` of a fabric that outlives the context,
/// and no other context uses them.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_ctx_init(
    mem: *mut c_void,
    len: usize,
    queues: *mut copyrpc_queues,
    out: *mut *mut copyrpc_ctx,
) -> i32 {
    if mem.is_null() || queues.is_null() || out.is_null() {
        return COPYRPC_E_NULL;
    }
    // The documented size, not the handle's: a caller that passes less works with this
    // build and breaks with one whose handle grew up to that bound.
    if len < COPYRPC_CTX_BYTES {
        return COPYRPC_E_TOO_SMALL;
    }
    if !(mem as usize).is_multiple_of(COPYRPC_CTX_ALIGN) {
        return COPYRPC_E_MISALIGNED;
    }
    // SAFETY: non-null; the caller passes a description (contract).
    let (q, claim) = match read_queues(unsafe { &*queues }) {
        Ok(q) => q,
        Err(e) => return e,
    };
    // SAFETY: the fabric that wrote the description outlives the context (contract).
    if !unsafe { claim.take() } {
        return COPYRPC_E_BAD_DESC;
    }
    let h = mem.cast::<CtxHandle>();
    // SAFETY: `mem` is writable for a `CtxHandle` (size and alignment checked above);
    // the magic is written last, so a failed init leaves no live handle. The queues'
    // contract is the caller's.
    unsafe {
        (&raw mut (*h).magic).write(0);
        let slot = &mut *(&raw mut (*h).ctx).cast::<MaybeUninit<Ctx>>();
        if let Err(e) = Ctx::init(slot, &q) {
            // Unused: another description of these queues may still take them.
            claim.give_back();
            return status::of(e);
        }
        (&raw mut (*h).qp).write([[0; 32]; COPYRPC_CTX_ENDPOINTS]);
        (&raw mut (*h).tag).write(next_tag());
        (&raw mut (*h).magic).write(CTX_MAGIC);
        out.write(h.cast());
        use_up_queues(&mut *queues);
    }
    COPYRPC_OK
}

/// Ends a context: its handle becomes invalid (later calls return
/// `COPYRPC_E_WRONG_KIND`) and its memory the caller's again. Close the fabric after.
/// Calls still in flight end with it, unanswered: no response callback runs for them
/// (poll until the calls you need have their responses first).
///
/// # Safety
///
/// As every function taking a context: `ctx` is NULL or a handle of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_ctx_fini(ctx: *mut copyrpc_ctx) -> i32 {
    // SAFETY: forwarded.
    match unsafe { handle(ctx) } {
        Ok(h) => {
            h.magic = 0;
            COPYRPC_OK
        }
        Err(e) => e,
    }
}

/// Adds an endpoint over the QP and memory `desc` describes (from
/// `copyrpc_fabric_endpoint` of the context's fabric); its index goes to `*ep`. The
/// description is used up (a second use is `COPYRPC_E_BAD_DESC`, and so is the use of a
/// copy of it).
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`; `desc` came from the setup API and is used once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_ep_create(
    ctx: *mut copyrpc_ctx,
    desc: *mut copyrpc_ep_desc,
    ep: *mut u16,
) -> i32 {
    // SAFETY: forwarded.
    let h = match unsafe { handle(ctx) } {
        Ok(h) => h,
        Err(e) => return e,
    };
    if desc.is_null() || ep.is_null() {
        return COPYRPC_E_NULL;
    }
    // SAFETY: non-null, caller contract.
    let (sq, mem, qp, claim) = match read_ep(unsafe { &*desc }) {
        Ok(d) => d,
        Err(e) => return e,
    };
    // SAFETY: the fabric that wrote the description outlives the context (contract).
    if !unsafe { claim.take() } {
        return COPYRPC_E_BAD_DESC;
    }
    let cfg = EndpointConfig::for_ring(mem.recv_ring.len as u64);
    // SAFETY: the setup API created the QP on this context's queues and registered the
    // three disjoint regions for it; the fabric keeps both alive and nothing else uses
    // them (caller contract: one description, one endpoint).
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
}

/// Writes what the peer needs to connect to endpoint `ep` into `*out`.
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
    // SAFETY: forwarded.
    let h = match unsafe { handle(ctx) } {
        Ok(h) => h,
        Err(e) => return e,
    };
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
}

/// Connects endpoint `ep` to the peer that sent `info` (its `copyrpc_ep_local_info`).
/// The QP must be connected first (`copyrpc_fabric_connect` does both).
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
    // SAFETY: forwarded.
    let h = match unsafe { handle(ctx) } {
        Ok(h) => h,
        Err(e) => return e,
    };
    // SAFETY: NULL or readable (caller contract).
    let (_, remote) = match open_peer_info(unsafe { info.as_ref() }) {
        Ok(x) => x,
        Err(e) => return e,
    };
    match h.ctx.connect(EndpointId(ep), &remote) {
        Ok(()) => COPYRPC_OK,
        Err(e) => status::of(e),
    }
}

/// `COPYRPC_OK` while endpoint `ep` of `ctx` still takes a `copyrpc_ep_connect`, else
/// the code that call would return (`COPYRPC_E_ALREADY_CONNECTED` once it was connected,
/// or failed). For the setup API, which must know before it touches the QP.
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`.
pub unsafe fn ep_connectable(ctx: *mut copyrpc_ctx, ep: u16) -> i32 {
    // SAFETY: forwarded.
    let h = match unsafe { handle(ctx) } {
        Ok(h) => h,
        Err(e) => return e,
    };
    // The core's one public view of an endpoint's state: its allowance limit is
    // `NotConnected` exactly while `connect` would still accept the endpoint.
    match h.ctx.max_response_allowance(EndpointId(ep)) {
        Err(Error::NotConnected) => COPYRPC_OK,
        Ok(_) => COPYRPC_E_ALREADY_CONNECTED,
        Err(e) => status::of(e),
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
    // SAFETY: forwarded.
    let h = match unsafe { handle(ctx) } {
        Ok(h) => h,
        Err(e) => return e,
    };
    match h.ctx.fail_endpoint(EndpointId(ep)) {
        Ok(()) => COPYRPC_OK,
        Err(e) => status::of(e),
    }
}

/// Sends a request of `len` bytes at `buf` on endpoint `ep`, reserving room for a
/// response of up to `allowance` bytes. `token` comes back with the response in the
/// poll callback. Codes -1..=-4: poll and retry.
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
    // SAFETY: forwarded.
    let h = match unsafe { handle(ctx) } {
        Ok(h) => h,
        Err(e) => return e,
    };
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
        Err(e) => status::of(e.error),
    }
}

/// Called by `copyrpc_poll` once per completed call: `status` is `COPYRPC_OK` with
/// the response's `len` bytes at `data` (valid during the callback only), or an error
/// code (the endpoint failed) with `data` NULL.
pub type copyrpc_response_fn = Option<
    unsafe extern "C" fn(arg: *mut c_void, token: u64, status: i32, data: *const u8, len: usize),
>;

/// Makes progress: reads both completion queues, hands each response to `cb`, queues
/// arrived requests for `copyrpc_recv`, posts what was written. Returns the number of
/// completions handled (0 when idle), or an error code.
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`; `cb` is safe to call with `arg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_poll(
    ctx: *mut copyrpc_ctx,
    cb: copyrpc_response_fn,
    arg: *mut c_void,
) -> i32 {
    // SAFETY: forwarded.
    if let Err(e) = unsafe { handle(ctx) } {
        return e;
    }
    let Some(cb) = cb else {
        return COPYRPC_E_NULL;
    };
    let h = ctx.cast::<CtxHandle>();
    // SAFETY: `h` is a live context (checked above), used by this thread. The word and
    // the context are reached through the raw pointer field by field, so a call from
    // inside the callback reads only the word (which the context borrow does not cover)
    // and returns COPYRPC_E_BUSY; the word is restored through the same pointer.
    let c = unsafe {
        (&raw mut (*h).magic).write(kind::polling(CTX_MAGIC));
        &mut (*h).ctx
    };
    let n = c.poll(|token, r| match r {
        // SAFETY: the callback's contract is the caller's; the bytes live through it.
        Ok(d) => unsafe { cb(arg, token, COPYRPC_OK, d.as_ptr(), d.len()) },
        // SAFETY: as above.
        Err(e) => unsafe { cb(arg, token, status::of(e), core::ptr::null(), 0) },
    });
    // SAFETY: `h` is live; the borrow of its ctx ended with the poll.
    unsafe { (&raw mut (*h).magic).write(CTX_MAGIC) };
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The test a caller spins on while it waits for a response: 1 when `copyrpc_poll`
/// would find nothing to do (no completion in either queue, nothing written waiting to
/// be posted, no idle-peer probe due), 0 when it should call `copyrpc_poll`, or an
/// error code. It reads a few words and writes only a poll count (it counts as a poll
/// toward the idle-peer probe, so a peer is still probed while a caller only spins on
/// it), so spinning `while (copyrpc_idle(ctx) == 1)` and polling when it returns 0
/// costs a fraction of an idle `copyrpc_poll` (docs/PERFORMANCE.md, "Latency path").
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_idle(ctx: *mut copyrpc_ctx) -> i32 {
    // SAFETY: forwarded.
    match unsafe { handle(ctx) } {
        Ok(h) => i32::from(h.ctx.idle()),
        Err(e) => e,
    }
}

/// A received request, from `copyrpc_recv`. Answer it once with `copyrpc_reply`, on
/// the context that received it (another context refuses it: `COPYRPC_E_STALE_REQUEST`).
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

/// Takes the oldest unanswered request into `*out`: returns 1, or 0 when there is none.
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_recv(ctx: *mut copyrpc_ctx, out: *mut copyrpc_request) -> i32 {
    // SAFETY: forwarded.
    let h = match unsafe { handle(ctx) } {
        Ok(h) => h,
        Err(e) => return e,
    };
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
}

/// Answers `req` with `len` bytes at `buf` (which may be `req->data`: an echo), sent
/// by the next poll or flush. A request answered already, or received by another
/// context, is refused with `COPYRPC_E_STALE_REQUEST`.
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
    // SAFETY: forwarded.
    let h = match unsafe { handle(ctx) } {
        Ok(h) => h,
        Err(e) => return e,
    };
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
}

/// Posts every reply and call written so far without reading the completion queues.
///
/// # Safety
///
/// `ctx` as in `copyrpc_ctx_fini`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_flush(ctx: *mut copyrpc_ctx) -> i32 {
    // SAFETY: forwarded.
    match unsafe { handle(ctx) } {
        Ok(h) => {
            h.ctx.flush();
            COPYRPC_OK
        }
        Err(e) => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The header's size is a bound, kept near the real one so C does not waste memory.
    #[test]
    fn ctx_bytes_is_tight() {
        let real = size_of::<CtxHandle>();
        eprintln!("CtxHandle {real} bytes, align {}", align_of::<CtxHandle>());
        assert!(real <= COPYRPC_CTX_BYTES && COPYRPC_CTX_BYTES - real < 4096);
    }
}
