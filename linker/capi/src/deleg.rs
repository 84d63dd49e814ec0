//! delegationrpc from C: a server that created a `/dev/shm` region and clients that
//! attach to it, each handle in the caller's memory. Requests and responses are
//! [`copyrpc_shm_msg`]s.

use std::ffi::{c_char, c_void};
use std::mem::{align_of, size_of};

use copyrpc_core::deleg::{CallError, Config, ReplyToken};
use copyrpc_host::shm::deleg::{DelegClient, DelegServer, ServerOptions};
use copyrpc_linker::kind::Restore;
use copyrpc_linker::status::*;

use crate::last_error::{guard, system};
use crate::shm::{close, copyrpc_shm_msg, handle, name, Handle, Reserved};

type Msg = copyrpc_shm_msg;

/// Bytes of the memory area a delegation server handle needs.
pub const COPYRPC_DELEG_SERVER_BYTES: usize = 384;
/// Bytes of the memory area a delegation client handle needs.
pub const COPYRPC_DELEG_CLIENT_BYTES: usize = 384;
/// Alignment of both areas.
pub const COPYRPC_SHM_HANDLE_ALIGN: usize = 16;

/// A delegation server handle (opaque, in the caller's memory).
#[derive(Debug)]
pub struct copyrpc_deleg_server {
    _opaque: [u8; 0],
}

/// A delegation client handle (opaque, in the caller's memory).
#[derive(Debug)]
pub struct copyrpc_deleg_client {
    _opaque: [u8; 0],
}

const SERVER_MAGIC: u64 = u64::from_le_bytes(*b"CRPCDSV1");
const CLIENT_MAGIC: u64 = u64::from_le_bytes(*b"CRPCDCL1");

type Server = Handle<DelegServer<Msg, Msg>>;

/// A client and the token of each call in flight, by response slot.
struct ClientState {
    c: DelegClient<Msg, Msg>,
    tokens: Box<[u64]>,
}

type Client = Handle<ClientState>;

const _: () = {
    assert!(size_of::<Server>() <= COPYRPC_DELEG_SERVER_BYTES);
    assert!(size_of::<Client>() <= COPYRPC_DELEG_CLIENT_BYTES);
    assert!(align_of::<Server>() <= COPYRPC_SHM_HANDLE_ALIGN);
    assert!(align_of::<Client>() <= COPYRPC_SHM_HANDLE_ALIGN);
    // `call` took the padding after `epoch`: programs built against the older header
    // keep the same size and `msg` offset.
    assert!(size_of::<copyrpc_deleg_request>() == 80);
    assert!(core::mem::offset_of!(copyrpc_deleg_request, call) == 12);
    assert!(core::mem::offset_of!(copyrpc_deleg_request, msg) == 16);
};

/// A request the server took, from `copyrpc_deleg_server_recv`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct copyrpc_deleg_request {
    /// The calling client's id.
    pub client_id: u32,
    /// The response slot it waits on.
    pub slot: u32,
    /// Leave as `copyrpc_deleg_server_recv` wrote it.
    pub epoch: u32,
    /// Which of the slot's calls this is, sealed by the server that took it (an opaque
    /// number). Leave as `copyrpc_deleg_server_recv` wrote it:
    /// `copyrpc_deleg_server_reply` answers only the call the server took and has not
    /// answered, so a second reply cannot answer the client's next call on the slot,
    /// and another server refuses it.
    /// (Formerly padding: the struct's size and `msg`'s offset are unchanged.)
    pub call: u32,
    /// The request.
    pub msg: copyrpc_shm_msg,
}

/// Called by `copyrpc_deleg_client_poll` for each response: the token the call was made
/// with and the response, valid during the callback only. Responses may come in another
/// order than the calls.
///
/// It may call any function of the library but on the client being polled (refused with
/// `COPYRPC_E_BUSY`). It must not `longjmp` out. A C++ exception thrown from it leaves
/// `copyrpc_deleg_client_poll` (the library unwinds through its frames) with the client
/// usable: the response it was given counts as delivered, the others wait for the next
/// poll.
pub type copyrpc_deleg_response_fn =
    Option<unsafe extern "C-unwind" fn(arg: *mut c_void, token: u64, resp: *const copyrpc_shm_msg)>;

/// Creates region `name` ("/something") for up to `max_clients` clients, a request ring
/// of `ring_depth` slots and `resp_depth` calls in flight per client (powers of two),
/// and serves it from the handle placed in `mem` (`COPYRPC_DELEG_SERVER_BYTES`, aligned
/// to `COPYRPC_SHM_HANDLE_ALIGN`; untouched by the caller until the close). A stale
/// region of a dead server is replaced; any other object of that name is left alone.
///
/// Returns `COPYRPC_OK` with the handle in `*out` (NULL on every refusal);
/// `COPYRPC_E_NULL`, `_TOO_SMALL`, `_MISALIGNED`; `COPYRPC_E_IN_USE` (the area holds or
/// overlaps a live handle); `COPYRPC_E_BAD_ARG` (the name or a size); `COPYRPC_E_SYSTEM`
/// (`copyrpc_last_error` says which: a live server of that name, one being created, an
/// object that is not a copyrpc region, or an errno).
///
/// # Safety
///
/// `mem` is writable for `len` bytes; `name` is NULL or NUL-terminated; `out` is NULL
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_deleg_server_open(
    mem: *mut c_void,
    len: usize,
    region: *const c_char,
    max_clients: u32,
    ring_depth: u32,
    resp_depth: u32,
    out: *mut *mut copyrpc_deleg_server,
) -> i32 {
    // SAFETY: forwarded (caller contract); the sizes are this handle's.
    let area = match unsafe {
        Reserved::<DelegServer<Msg, Msg>>::new(
            mem,
            len,
            COPYRPC_DELEG_SERVER_BYTES,
            COPYRPC_SHM_HANDLE_ALIGN,
            out,
        )
    } {
        Ok(a) => a,
        Err(e) => return e,
    };
    // SAFETY: forwarded.
    let n = match unsafe { name(region) } {
        Ok(n) => n,
        Err(e) => return e,
    };
    let cfg = Config {
        max_clients,
        ring_depth,
        resp_depth,
    };
    if cfg.validate().is_err() {
        return COPYRPC_E_BAD_ARG;
    }
    let opts = ServerOptions {
        replace_stale: true,
        ..ServerOptions::default()
    };
    guard(|| match DelegServer::create(n, cfg, opts) {
        // SAFETY: `out` is non-NULL (checked by `Reserved::new`).
        Ok(s) => unsafe { area.place(out, SERVER_MAGIC, s) },
        Err(e) => system(format_args!("creating delegation region {n}: {e}")),
    })
}

/// Releases the slots of requests taken since the last poll and looks for new ones;
/// returns how many are ready in a row (evicts dead clients now and then).
///
/// # Safety
///
/// `s` is NULL or a handle of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_deleg_server_poll(s: *mut copyrpc_deleg_server) -> i32 {
    // SAFETY: forwarded.
    match unsafe { handle(s.cast::<Server>(), SERVER_MAGIC) } {
        Ok(h) => {
            h.inner.advance_tail();
            i32::try_from(h.inner.poll()).unwrap_or(i32::MAX)
        }
        Err(e) => e,
    }
}

/// Takes the next request into `*out` (a copy: `*out` is the caller's); returns 1, 0
/// when none is ready, `COPYRPC_E_NULL`, `COPYRPC_E_WRONG_KIND`. Requests may be held
/// and answered in any order.
///
/// # Safety
///
/// `s` as in `copyrpc_deleg_server_poll`; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_deleg_server_recv(
    s: *mut copyrpc_deleg_server,
    out: *mut copyrpc_deleg_request,
) -> i32 {
    // SAFETY: forwarded.
    let h = match unsafe { handle(s.cast::<Server>(), SERVER_MAGIC) } {
        Ok(h) => h,
        Err(e) => return e,
    };
    if out.is_null() {
        return COPYRPC_E_NULL;
    }
    let Some(r) = h.inner.recv() else {
        return 0;
    };
    let (client_id, slot, epoch, call) = r.token.into_raw();
    // SAFETY: non-null, caller contract.
    unsafe {
        out.write(copyrpc_deleg_request {
            client_id,
            slot,
            epoch,
            call,
            msg: r.payload,
        })
    };
    1
}

/// Answers `req` with `*resp` (copied before it returns). Returns `COPYRPC_OK`,
/// `COPYRPC_E_NULL`, `COPYRPC_E_WRONG_KIND`. Each request is answered once:
/// `COPYRPC_E_SHM_REPLY` if the client has left, `req` names no slot, or its call is
/// not one this server took and has not answered (a second reply, whether or not the
/// client read the first, or a request another server received).
///
/// # Safety
///
/// `s` as in `copyrpc_deleg_server_poll`; `req`, `resp` NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_deleg_server_reply(
    s: *mut copyrpc_deleg_server,
    req: *const copyrpc_deleg_request,
    resp: *const copyrpc_shm_msg,
) -> i32 {
    // SAFETY: forwarded.
    let h = match unsafe { handle(s.cast::<Server>(), SERVER_MAGIC) } {
        Ok(h) => h,
        Err(e) => return e,
    };
    // SAFETY: NULL or readable (caller contract).
    let (Some(req), Some(resp)) = (unsafe { req.as_ref() }, unsafe { resp.as_ref() }) else {
        return COPYRPC_E_NULL;
    };
    let token = ReplyToken::from_raw((req.client_id, req.slot, req.epoch, req.call));
    match h.inner.reply(token, resp) {
        Ok(()) => COPYRPC_OK,
        Err(_) => COPYRPC_E_SHM_REPLY,
    }
}

/// Stops serving, unlinks the region; the memory is the caller's again. Returns as
/// `copyrpc_deleg_client_close`.
///
/// # Safety
///
/// `s` as in `copyrpc_deleg_server_poll`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_deleg_server_close(s: *mut copyrpc_deleg_server) -> i32 {
    // SAFETY: forwarded (the caller's contract is `close`'s).
    unsafe { close(s.cast::<Server>(), SERVER_MAGIC) }
}

/// Attaches to the delegation region `name` as a new client, in the handle placed in
/// `mem` (`COPYRPC_DELEG_CLIENT_BYTES`, aligned to `COPYRPC_SHM_HANDLE_ALIGN`).
///
/// Returns `COPYRPC_OK` with the handle in `*out` (NULL on every refusal), the area
/// refusals of `copyrpc_deleg_server_open`, `COPYRPC_E_BAD_ARG` (the name), or
/// `COPYRPC_E_SYSTEM` (no such region, its server gone, no free client id within 2 s:
/// `copyrpc_last_error`).
///
/// # Safety
///
/// As `copyrpc_deleg_server_open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_deleg_client_attach(
    mem: *mut c_void,
    len: usize,
    region: *const c_char,
    out: *mut *mut copyrpc_deleg_client,
) -> i32 {
    // SAFETY: forwarded (caller contract); the sizes are this handle's.
    let area = match unsafe {
        Reserved::<ClientState>::new(
            mem,
            len,
            COPYRPC_DELEG_CLIENT_BYTES,
            COPYRPC_SHM_HANDLE_ALIGN,
            out,
        )
    } {
        Ok(a) => a,
        Err(e) => return e,
    };
    // SAFETY: forwarded.
    let n = match unsafe { name(region) } {
        Ok(n) => n,
        Err(e) => return e,
    };
    guard(|| match DelegClient::connect(n) {
        Ok(c) => {
            let tokens = vec![0; c.resp_depth() as usize].into_boxed_slice();
            // SAFETY: `out` is non-NULL (checked by `Reserved::new`).
            unsafe { area.place(out, CLIENT_MAGIC, ClientState { c, tokens }) }
        }
        Err(e) => system(format_args!("attaching to delegation region {n}: {e}")),
    })
}

/// Sends `*req` (copied before it returns); `token` comes back with the response in the
/// poll callback. Never waits: a full ring is refused at once.
///
/// Returns `COPYRPC_OK`; to poll and retry: `COPYRPC_E_TOO_MANY_CALLS` (every call slot
/// of the client is in flight: poll for responses), `COPYRPC_E_RING_FULL` (the server has
/// not drained the shared request ring: retry later; the refused call keeps its ring
/// position for the next call, and a client that never calls again leaves the server a
/// gap it skips after 100 ms); for good: `COPYRPC_E_SHM_UNAVAILABLE` (the server is gone
/// or its region was overwritten: `copyrpc_refusal_detail` says which); `COPYRPC_E_NULL`;
/// `COPYRPC_E_WRONG_KIND` / `COPYRPC_E_BUSY` (the handle).
///
/// # Safety
///
/// `c` is NULL or a handle of this library; `req` NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_deleg_client_call(
    c: *mut copyrpc_deleg_client,
    req: *const copyrpc_shm_msg,
    token: u64,
) -> i32 {
    // SAFETY: forwarded.
    let h = match unsafe { handle(c.cast::<Client>(), CLIENT_MAGIC) } {
        Ok(h) => h,
        Err(e) => return e,
    };
    // SAFETY: NULL or readable (caller contract).
    let Some(req) = (unsafe { req.as_ref() }) else {
        return COPYRPC_E_NULL;
    };
    let st = &mut h.inner;
    match st.c.try_call(req) {
        Ok(slot) => {
            // The core hands out slots below the depth `tokens` was sized for.
            if let Some(t) = st.tokens.get_mut(slot as usize) {
                *t = token;
            }
            COPYRPC_OK
        }
        Err(CallError::NoResponseSlot) => COPYRPC_E_TOO_MANY_CALLS,
        Err(CallError::RingFull | CallError::Abandoned) => COPYRPC_E_RING_FULL,
        Err(e) => {
            set_detail(match e {
                CallError::RingCorrupt => {
                    c"the delegation ring's head or tail hold values no run of the protocol \
                      produces: the region was overwritten"
                }
                _ => c"the delegation server is gone (it closed, or its process exited)",
            });
            COPYRPC_E_SHM_UNAVAILABLE
        }
    }
}

/// Hands each arrived response to `cb` with its call's token; returns how many,
/// `COPYRPC_E_NULL` (`cb` NULL), `COPYRPC_E_WRONG_KIND` or `COPYRPC_E_BUSY`.
///
/// # Safety
///
/// `c` as in `copyrpc_deleg_client_call`; `cb` is safe to call with `arg`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn copyrpc_deleg_client_poll(
    c: *mut copyrpc_deleg_client,
    cb: copyrpc_deleg_response_fn,
    arg: *mut c_void,
) -> i32 {
    let p = c.cast::<Client>();
    // SAFETY: forwarded.
    if let Err(e) = unsafe { handle(p, CLIENT_MAGIC) } {
        return e;
    }
    let Some(cb) = cb else {
        return COPYRPC_E_NULL;
    };
    // SAFETY: `p` is a live client (checked above), used by this thread. As in
    // `copyrpc_poll`: the word is marked through the raw pointer and the client borrowed
    // field by field, so a call from inside the callback stops at the word (BUSY). The
    // core hands a response out after taking it, so the client is whole at every
    // callback: the guard makes it usable again if one unwinds.
    let (guard, st) = unsafe {
        (
            Restore::mark(&raw mut (*p).magic, CLIENT_MAGIC, CLIENT_MAGIC),
            &mut (*p).inner,
        )
    };
    let tokens = &st.tokens;
    let n = st.c.poll(|slot, r| {
        let token = tokens.get(slot as usize).copied().unwrap_or(0);
        // SAFETY: the callback's contract is the caller's; `r` lives through the call.
        unsafe { cb(arg, token, r) }
    });
    guard.finish(CLIENT_MAGIC);
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Leaves the region (the id is freed); the memory is the caller's again. Returns
/// `COPYRPC_OK`, `COPYRPC_E_NULL`, `COPYRPC_E_WRONG_KIND` (closed already, or another
/// kind) or `COPYRPC_E_BUSY` (from inside its poll callback).
///
/// # Safety
///
/// `c` as in `copyrpc_deleg_client_call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_deleg_client_close(c: *mut copyrpc_deleg_client) -> i32 {
    // SAFETY: forwarded (the caller's contract is `close`'s).
    unsafe { close(c.cast::<Client>(), CLIENT_MAGIC) }
}

#[cfg(test)]
pub(crate) fn server_size() -> usize {
    size_of::<Server>()
}

#[cfg(test)]
pub(crate) fn client_size() -> usize {
    size_of::<Client>()
}
