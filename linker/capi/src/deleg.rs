//! delegationrpc from C: a server that created a `/dev/shm` region and clients that
//! attach to it, each handle in the caller's memory. Requests and responses are
//! [`copyrpc_shm_msg`]s.

use std::ffi::{c_char, c_void};
use std::mem::{align_of, size_of};

use copyrpc_core::deleg::{CallError, Config, ReplyToken};
use copyrpc_host::shm::deleg::{DelegClient, DelegServer, ServerOptions};
use copyrpc_linker::kind;
use copyrpc_linker::status::*;

use crate::last_error::{guard, system};
use crate::shm::{check_area, close, copyrpc_shm_msg, handle, name, place};

type Msg = copyrpc_shm_msg;

/// Bytes of the memory area a delegation server handle needs.
pub const COPYRPC_DELEG_SERVER_BYTES: usize = 384;
/// Bytes of the memory area a delegation client handle needs.
pub const COPYRPC_DELEG_CLIENT_BYTES: usize = 320;
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

#[repr(C)]
struct Server {
    magic: u64,
    s: DelegServer<Msg, Msg>,
}

#[repr(C)]
struct Client {
    magic: u64,
    c: DelegClient<Msg, Msg>,
}

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

/// Called by `copyrpc_deleg_client_poll` for each response: the call's id (what
/// `copyrpc_deleg_client_call` returned) and the response, valid during the call.
pub type copyrpc_deleg_response_fn =
    Option<unsafe extern "C" fn(arg: *mut c_void, call: u32, resp: *const copyrpc_shm_msg)>;

/// Creates region `name` ("/something") for up to `max_clients` clients, a request ring
/// of `ring_depth` slots and `resp_depth` calls in flight per client (powers of two),
/// and serves it from the handle placed in `mem`. A stale region of a dead server is
/// replaced; any other object of that name is left alone and refused with
/// `COPYRPC_E_SYSTEM` (`copyrpc_last_error` says which: a live server, one being
/// created, or an object that is not a copyrpc region).
///
/// # Safety
///
/// `mem` is writable for `len` bytes and not otherwise used until the close; `name` is
/// NULL or NUL-terminated; `out` is NULL or writable.
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
    if let Err(e) = check_area(
        mem.cast(),
        len,
        COPYRPC_DELEG_SERVER_BYTES,
        COPYRPC_SHM_HANDLE_ALIGN,
    ) {
        return e;
    }
    if out.is_null() {
        return COPYRPC_E_NULL;
    }
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
        // SAFETY: the area was checked for a `Server`; `out` is non-NULL (checked).
        Ok(s) => unsafe {
            place(
                mem,
                out,
                Server {
                    magic: SERVER_MAGIC,
                    s,
                },
            )
        },
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
            h.s.advance_tail();
            i32::try_from(h.s.poll()).unwrap_or(i32::MAX)
        }
        Err(e) => e,
    }
}

/// Takes the next request into `*out`: 1, or 0 when none is ready.
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
    let Some(r) = h.s.recv() else {
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

/// Answers `req` with `*resp`. Each request is answered once: `COPYRPC_E_SHM_REPLY` if
/// the client has left, `req` names no slot, or its call is not one this server took and
/// has not answered (a second reply, whether or not the client read the first, or a
/// request another server received).
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
    match h.s.reply(token, resp) {
        Ok(()) => COPYRPC_OK,
        Err(_) => COPYRPC_E_SHM_REPLY,
    }
}

/// Stops serving, unlinks the region; the memory is the caller's again.
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
/// `mem`. A full ring makes `copyrpc_deleg_client_call` wait up to 5 s (checking that
/// the server lives) before it fails.
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
    if let Err(e) = check_area(
        mem.cast(),
        len,
        COPYRPC_DELEG_CLIENT_BYTES,
        COPYRPC_SHM_HANDLE_ALIGN,
    ) {
        return e;
    }
    if out.is_null() {
        return COPYRPC_E_NULL;
    }
    // SAFETY: forwarded.
    let n = match unsafe { name(region) } {
        Ok(n) => n,
        Err(e) => return e,
    };
    guard(|| match DelegClient::connect(n) {
        // SAFETY: the area was checked for a `Client`; `out` is non-NULL (checked).
        Ok(c) => unsafe {
            place(
                mem,
                out,
                Client {
                    magic: CLIENT_MAGIC,
                    c,
                },
            )
        },
        Err(e) => system(format_args!("attaching to delegation region {n}: {e}")),
    })
}

/// Sends `*req`; returns the call's id (>= 0, handed to the poll callback with the
/// response) or an error code. `COPYRPC_E_TOO_MANY_CALLS`: poll and retry.
/// `COPYRPC_E_SHM_UNAVAILABLE`: the ring stayed full past the bound, or the server is
/// gone, also when every call is in flight (its process is checked at most once a
/// millisecond then, so a killed server ends the retrying), or the region was
/// overwritten; `copyrpc_refusal_detail` says which.
///
/// # Safety
///
/// `c` is NULL or a handle of this library; `req` NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_deleg_client_call(
    c: *mut copyrpc_deleg_client,
    req: *const copyrpc_shm_msg,
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
    match h.c.call(req) {
        Ok(id) => i32::try_from(id).unwrap_or(COPYRPC_E_BAD_SETUP),
        Err(CallError::NoResponseSlot) => COPYRPC_E_TOO_MANY_CALLS,
        Err(CallError::Abandoned) => COPYRPC_E_RING_FULL,
        Err(e) => {
            set_detail(match e {
                CallError::RingFull => {
                    c"the delegation ring stayed full past the bounded wait: the server \
                      released no slot (the client keeps its claimed position, and its next \
                      call waits for it again)"
                }
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

/// Hands each arrived response to `cb`; returns how many.
///
/// # Safety
///
/// `c` as in `copyrpc_deleg_client_call`; `cb` is safe to call with `arg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_deleg_client_poll(
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
    // field by field, so a call from inside the callback stops at the word (BUSY).
    let client = unsafe {
        (&raw mut (*p).magic).write(kind::polling(CLIENT_MAGIC));
        &mut (*p).c
    };
    // SAFETY: the callback's contract is the caller's; `r` lives through the call.
    let n = client.poll(|id, r| unsafe { cb(arg, id, r) });
    // SAFETY: `p` is live; the borrow of its client ended with the poll.
    unsafe { (&raw mut (*p).magic).write(CLIENT_MAGIC) };
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Leaves the region (the id is freed); the memory is the caller's again.
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
