//! ipc from C: a server that created a `/dev/shm` region and clients with a
//! request/response ring pair each, handles in the caller's memory. Requests and
//! responses are [`copyrpc_shm_msg`]s; each call carries a `u64` token back.

use std::ffi::{c_char, c_void};
use std::mem::{align_of, size_of};

use copyrpc_core::ipc::{Config, IpcCallError, IpcRequest};
use copyrpc_host::shm::ipc::{IpcClient, IpcServer};
use copyrpc_linker::kind::Restore;
use copyrpc_linker::status::*;

use crate::deleg::COPYRPC_SHM_HANDLE_ALIGN;
use crate::last_error::{guard, system};
use crate::shm::{close, copyrpc_shm_msg, handle, name, Handle, Reserved};

type Msg = copyrpc_shm_msg;

/// Bytes of the memory area an ipc server handle needs.
pub const COPYRPC_IPC_SERVER_BYTES: usize = 256;
/// Bytes of the memory area an ipc client handle needs.
pub const COPYRPC_IPC_CLIENT_BYTES: usize = 384;

/// An ipc server handle (opaque, in the caller's memory).
#[derive(Debug)]
pub struct copyrpc_ipc_server {
    _opaque: [u8; 0],
}

/// An ipc client handle (opaque, in the caller's memory).
#[derive(Debug)]
pub struct copyrpc_ipc_client {
    _opaque: [u8; 0],
}

const SERVER_MAGIC: u64 = u64::from_le_bytes(*b"CRPCISV1");
const CLIENT_MAGIC: u64 = u64::from_le_bytes(*b"CRPCICL1");

type Server = Handle<IpcServer<Msg, Msg>>;
type Client = Handle<IpcClient<Msg, Msg, u64>>;

const _: () = {
    assert!(size_of::<Server>() <= COPYRPC_IPC_SERVER_BYTES);
    assert!(size_of::<Client>() <= COPYRPC_IPC_CLIENT_BYTES);
    assert!(align_of::<Server>() <= COPYRPC_SHM_HANDLE_ALIGN);
    assert!(align_of::<Client>() <= COPYRPC_SHM_HANDLE_ALIGN);
};

/// A request the server took, from `copyrpc_ipc_server_recv`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct copyrpc_ipc_request {
    /// The calling client's id.
    pub client_id: u32,
    /// Leave as `copyrpc_ipc_server_recv` wrote it.
    pub epoch: u32,
    /// Leave as `copyrpc_ipc_server_recv` wrote it.
    pub token: u64,
    /// The request.
    pub msg: copyrpc_shm_msg,
}

/// Called by `copyrpc_ipc_client_poll` for each response with the call's token and the
/// response, valid during the callback only. Responses come in the order the server
/// answered.
///
/// It may call any function of the library but on the client being polled (refused with
/// `COPYRPC_E_BUSY`). It must not `longjmp` out. A C++ exception thrown from it leaves
/// `copyrpc_ipc_client_poll` with the client usable: the response it was given counts
/// as delivered, the others wait for the next poll.
pub type copyrpc_ipc_response_fn =
    Option<unsafe extern "C-unwind" fn(arg: *mut c_void, token: u64, resp: *const copyrpc_shm_msg)>;

/// Creates ipc region `name` for up to `max_clients` clients with `depth` calls in
/// flight each (a power of two), served from the handle placed in `mem`
/// (`COPYRPC_IPC_SERVER_BYTES`, aligned to `COPYRPC_SHM_HANDLE_ALIGN`). A stale region
/// of a dead server is replaced; any other object of that name is left alone.
///
/// Returns as `copyrpc_deleg_server_open`.
///
/// # Safety
///
/// As `copyrpc_deleg_server_open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_ipc_server_open(
    mem: *mut c_void,
    len: usize,
    region: *const c_char,
    max_clients: u32,
    depth: u32,
    out: *mut *mut copyrpc_ipc_server,
) -> i32 {
    // SAFETY: forwarded (caller contract); the sizes are this handle's.
    let area = match unsafe {
        Reserved::<IpcServer<Msg, Msg>>::new(
            mem,
            len,
            COPYRPC_IPC_SERVER_BYTES,
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
    let cfg = Config { max_clients, depth };
    if cfg.validate().is_err() {
        return COPYRPC_E_BAD_ARG;
    }
    guard(|| match IpcServer::create(n, cfg, true) {
        // SAFETY: `out` is non-NULL (checked by `Reserved::new`).
        Ok(s) => unsafe { area.place(out, SERVER_MAGIC, s) },
        Err(e) => system(format_args!("creating ipc region {n}: {e}")),
    })
}

/// Scans the clients; returns how many have requests waiting. Ids of clients that closed
/// are freed here; a client process that died without closing keeps its id until
/// `copyrpc_ipc_server_reap` finds it (this poll reads no `/proc`).
///
/// # Safety
///
/// `s` is NULL or a handle of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_ipc_server_poll(s: *mut copyrpc_ipc_server) -> i32 {
    // SAFETY: forwarded.
    match unsafe { handle(s.cast::<Server>(), SERVER_MAGIC) } {
        Ok(h) => i32::try_from(h.inner.poll()).unwrap_or(i32::MAX),
        Err(e) => e,
    }
}

/// Declares dead every client whose process is gone without closing (a crash) and
/// returns how many; the next `copyrpc_ipc_server_poll` frees their ids and drops their
/// requests. It reads `/proc` once per registered client, so call it now and then (every
/// few milliseconds, or when an attach fails for want of an id), not on every poll.
///
/// # Safety
///
/// `s` as in `copyrpc_ipc_server_poll`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_ipc_server_reap(s: *mut copyrpc_ipc_server) -> i32 {
    // SAFETY: forwarded.
    match unsafe { handle(s.cast::<Server>(), SERVER_MAGIC) } {
        Ok(h) => i32::try_from(h.inner.reap_dead_clients()).unwrap_or(i32::MAX),
        Err(e) => e,
    }
}

/// Takes the next request into `*out` (a copy: `*out` is the caller's); returns 1, 0
/// when none is waiting, `COPYRPC_E_NULL`, `COPYRPC_E_WRONG_KIND`. Requests may be held
/// and answered in any order.
///
/// # Safety
///
/// `s` as in `copyrpc_ipc_server_poll`; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_ipc_server_recv(
    s: *mut copyrpc_ipc_server,
    out: *mut copyrpc_ipc_request,
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
    let ((client_id, epoch, token), msg) = r.into_raw();
    // SAFETY: non-null, caller contract.
    unsafe {
        out.write(copyrpc_ipc_request {
            client_id,
            epoch,
            token,
            msg,
        })
    };
    1
}

/// Answers `req` with `*resp` (copied before it returns). Returns `COPYRPC_OK`,
/// `COPYRPC_E_NULL`, `COPYRPC_E_WRONG_KIND`. Each request is answered once:
/// `COPYRPC_E_SHM_REPLY` if the client has left, `req` names no client, `req` was
/// received by another server, or every request the client sent is answered already (a
/// second reply while the same client has other requests unanswered cannot be told from
/// theirs and takes the place of one of them).
///
/// # Safety
///
/// `s` as in `copyrpc_ipc_server_poll`; `req`, `resp` NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_ipc_server_reply(
    s: *mut copyrpc_ipc_server,
    req: *const copyrpc_ipc_request,
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
    let r = IpcRequest::from_raw((req.client_id, req.epoch, req.token), req.msg);
    match h.inner.reply(r, resp) {
        Ok(()) => COPYRPC_OK,
        Err(_) => COPYRPC_E_SHM_REPLY,
    }
}

/// Stops serving, unlinks the region; the memory is the caller's again. Returns
/// `COPYRPC_OK`, `COPYRPC_E_NULL`, `COPYRPC_E_WRONG_KIND` (closed already, or another
/// kind).
///
/// # Safety
///
/// `s` as in `copyrpc_ipc_server_poll`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_ipc_server_close(s: *mut copyrpc_ipc_server) -> i32 {
    // SAFETY: forwarded (the caller's contract is `close`'s).
    unsafe { close(s.cast::<Server>(), SERVER_MAGIC) }
}

/// Attaches to ipc region `name` as a new client, in the handle placed in `mem`
/// (`COPYRPC_IPC_CLIENT_BYTES`, aligned to `COPYRPC_SHM_HANDLE_ALIGN`).
///
/// Returns as `copyrpc_deleg_client_attach`.
///
/// # Safety
///
/// As `copyrpc_deleg_server_open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_ipc_client_attach(
    mem: *mut c_void,
    len: usize,
    region: *const c_char,
    out: *mut *mut copyrpc_ipc_client,
) -> i32 {
    // SAFETY: forwarded (caller contract); the sizes are this handle's.
    let area = match unsafe {
        Reserved::<IpcClient<Msg, Msg, u64>>::new(
            mem,
            len,
            COPYRPC_IPC_CLIENT_BYTES,
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
    guard(|| match IpcClient::connect(n) {
        // SAFETY: `out` is non-NULL (checked by `Reserved::new`).
        Ok(c) => unsafe { area.place(out, CLIENT_MAGIC, c) },
        Err(e) => system(format_args!("attaching to ipc region {n}: {e}")),
    })
}

/// Sends `*req` (copied before it returns); `token` comes back with the response. Never
/// waits. Returns `COPYRPC_OK`; `COPYRPC_E_TOO_MANY_CALLS`: poll and retry;
/// `COPYRPC_E_SHM_UNAVAILABLE`: the server is gone, also when every call is in flight
/// (its process is checked at most once a millisecond then, so a killed server ends the
/// retrying); `COPYRPC_E_NULL`; `COPYRPC_E_WRONG_KIND` / `COPYRPC_E_BUSY` (the handle).
///
/// # Safety
///
/// `c` is NULL or a handle of this library; `req` NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_ipc_client_call(
    c: *mut copyrpc_ipc_client,
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
    match h.inner.call(req, token) {
        Ok(()) => COPYRPC_OK,
        Err(IpcCallError::Full) => COPYRPC_E_TOO_MANY_CALLS,
        Err(IpcCallError::ServerDisconnected) => {
            set_detail(c"the ipc server is gone (it closed, or its process exited)");
            COPYRPC_E_SHM_UNAVAILABLE
        }
    }
}

/// Hands each arrived response to `cb`; returns how many.
///
/// # Safety
///
/// `c` as in `copyrpc_ipc_client_call`; `cb` is safe to call with `arg`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn copyrpc_ipc_client_poll(
    c: *mut copyrpc_ipc_client,
    cb: copyrpc_ipc_response_fn,
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
    // core takes a response before it hands it out, so the client is whole at every
    // callback: the guard makes it usable again if one unwinds.
    let (guard, client) = unsafe {
        (
            Restore::mark(&raw mut (*p).magic, CLIENT_MAGIC, CLIENT_MAGIC),
            &mut (*p).inner,
        )
    };
    // SAFETY: the callback's contract is the caller's; `r` lives through the call.
    let n = client.poll(|token, r| unsafe { cb(arg, token, r) });
    guard.finish(CLIENT_MAGIC);
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Leaves the region; the memory is the caller's again. Returns `COPYRPC_OK`,
/// `COPYRPC_E_NULL`, `COPYRPC_E_WRONG_KIND` (closed already, or another kind) or
/// `COPYRPC_E_BUSY` (from inside its poll callback).
///
/// # Safety
///
/// `c` as in `copyrpc_ipc_client_call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_ipc_client_close(c: *mut copyrpc_ipc_client) -> i32 {
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
