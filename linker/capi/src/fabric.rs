//! Set-up from C: open a fabric, describe a context's queues and each endpoint's QP and
//! rings, connect two endpoints through an exchange the C program provides, and step
//! the device model from the caller's own loop.
//!
//! A `copyrpc_fabric` is one context's worth of fabric objects ([`NodeParts`]) on its
//! own fabric (the sim fabric: a `/dev/shm` region and, unless opened in manual mode,
//! an engine thread; verbs: the NIC). What C holds is the fabric's [`FabricShell`],
//! which is never freed: closing frees the fabric behind it and clears the shell's word,
//! so a pointer to a closed fabric is refused forever, and no later fabric is ever given
//! the same pointer. Set-up allocates; the data path does not.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use copyrpc_host::fabric::sim::{SimFabric, SimOptions, Stepping};
use copyrpc_host::fabric::{self, Fabric, FabricKind, FabricOptions, Qos, QpEndpoint};
use copyrpc_host::rpc::{NodeParts, RpcConfig};
use copyrpc_host::sim_engine::monotonic_ns;
use copyrpc_linker::ctx::{
    copyrpc_ctx, copyrpc_ep_connect, copyrpc_ep_local_info, ep_connectable, fail_ep, shell_of,
    COPYRPC_CTX_ENDPOINTS, COPYRPC_CTX_REQUESTS,
};
use copyrpc_linker::desc::{
    copyrpc_ep_desc, copyrpc_peer_info, copyrpc_queues, open_peer_info, write_ep, write_queues,
    Claim, FabricShell, FABRIC_MAGIC, QUEUES_TAKEN,
};
use copyrpc_linker::kind::{self, Restore};
use copyrpc_linker::status::*;
use zerocopy::{FromBytes, IntoBytes};

use crate::last_error::{guard, system};

/// `copyrpc_fabric_open`: an mlx5 NIC if there is one, else the device model.
pub const COPYRPC_FABRIC_AUTO: i32 = 0;
/// `copyrpc_fabric_open`: the software device model over `/dev/shm`.
pub const COPYRPC_FABRIC_SIM: i32 = 1;
/// `copyrpc_fabric_open`: an mlx5 NIC through verbs.
pub const COPYRPC_FABRIC_VERBS: i32 = 2;
/// The smallest `ring_bytes` of `copyrpc_fabric_open`. A quarter of the ring is
/// reserved for responses, and a response takes 64 bytes (its header block and the flow
/// metadata) beyond its payload, padded to 32: 512 leaves room for responses of up to
/// 64 bytes, 256 for empty ones only, and at 128 the endpoint is refused.
pub const COPYRPC_FABRIC_MIN_RING: u32 = 512;
/// `copyrpc_fabric_options.flags`: no engine thread. The sim device moves only when the
/// caller steps it (`copyrpc_fabric_step`) from its own loop. On a NIC it changes
/// nothing (the hardware steps itself).
pub const COPYRPC_FABRIC_MANUAL_STEP: u32 = 1;

/// A fabric and one context's queues, QPs and rings: opaque, from `copyrpc_fabric_open`.
#[derive(Debug)]
pub struct copyrpc_fabric {
    _opaque: [u8; 0],
}

/// How to open a fabric (`copyrpc_fabric_open_ex`). Zero what you do not set:
/// `copyrpc_fabric_options o = {.size = sizeof o, .kind = COPYRPC_FABRIC_SIM, ...}`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct copyrpc_fabric_options {
    /// `sizeof(copyrpc_fabric_options)` as the program's header has it (a later library
    /// tells older programs' options apart by it).
    pub size: u32,
    /// `COPYRPC_FABRIC_AUTO`, `_SIM` or `_VERBS`.
    pub kind: i32,
    /// Bytes of each endpoint's rings: a power of two from `COPYRPC_FABRIC_MIN_RING`
    /// (512) to 32 × `COPYRPC_CTX_REQUESTS` (16 KiB).
    pub ring_bytes: u32,
    /// The context class: 16 (also for 0), 64, 256 or 1 024 endpoints. The context
    /// needs `copyrpc_ctx_bytes(endpoints)` bytes of memory.
    pub endpoints: u32,
    /// `COPYRPC_FABRIC_MANUAL_STEP` or 0.
    pub flags: u32,
    /// 0.
    pub reserved: u32,
}

/// The sim fabric's region per endpoint of the class, at least: its inbound link (about
/// 260 KiB), send queue (256 KiB) and rings, with room to spare.
const SIM_BYTES_PER_ENDPOINT: usize = 1 << 20;

/// What the shell's `parts` points at.
struct FabricState {
    parts: NodeParts,
    /// The device model's fabric when the caller steps it (manual mode), else null.
    manual: *const SimFabric,
    /// One per endpoint created, the same for its QP and rings.
    #[allow(
        clippy::vec_box,
        reason = "the descriptions hold each flag's address, which a growing Vec<Claim> would move"
    )]
    ep_claims: Vec<Box<Claim>>,
}

/// Every shell made in this process, so none is ever freed (nor reported lost by a leak
/// checker): see the module docs. A few dozen bytes per fabric ever opened.
static SHELLS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Sends `*mine` to the peer and writes the peer's into `*theirs`; returns 0, or
/// non-zero to abandon the connection (`copyrpc_fabric_connect` then fails with
/// `COPYRPC_E_SYSTEM`). Both sides must call it in the same order. It may block (a
/// socket, a pipe): set-up is not the data path. A C++ exception thrown from it leaves
/// `copyrpc_fabric_connect` with the fabric usable and the endpoint unconnected; it
/// must not `longjmp` out.
pub type copyrpc_exchange_fn = Option<
    unsafe extern "C-unwind" fn(
        arg: *mut c_void,
        mine: *const copyrpc_peer_info,
        theirs: *mut copyrpc_peer_info,
    ) -> i32,
>;

/// The shell behind `f`, if it is an open fabric not inside its exchange callback.
///
/// # Safety
///
/// `f` is NULL or a handle of this library (any kind), or points at 8 readable bytes.
unsafe fn shell<'a>(f: *mut copyrpc_fabric) -> Result<&'a mut FabricShell, i32> {
    let p = f.cast::<FabricShell>();
    if p.is_null() {
        return Err(COPYRPC_E_NULL);
    }
    // SAFETY: the word is first in every handle kind (caller contract).
    let word = unsafe { p.cast::<u64>().read() };
    if word != FABRIC_MAGIC {
        return Err(kind::refused(word, FABRIC_MAGIC));
    }
    // SAFETY: an open fabric's shell (its word), used by one thread at a time.
    Ok(unsafe { &mut *p })
}

/// The state of an open fabric, from its shell's `parts`.
///
/// # Safety
///
/// `parts` is an open shell's: the box `copyrpc_fabric_open_ex` made, freed only by the
/// close that clears the word; the fabric is used by one thread at a time.
unsafe fn state<'a>(parts: *mut c_void) -> &'a mut FabricState {
    // SAFETY: caller contract.
    unsafe { &mut *parts.cast::<FabricState>() }
}

/// Opens fabric `kind` (`COPYRPC_FABRIC_*`) with rings of `ring_bytes` per endpoint,
/// for a context of 16 endpoints, stepped by an engine thread (sim): as
/// `copyrpc_fabric_open_ex` with those options, and returns as it does.
///
/// # Safety
///
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_fabric_open(
    kind: i32,
    ring_bytes: u32,
    out: *mut *mut copyrpc_fabric,
) -> i32 {
    let o = copyrpc_fabric_options {
        size: size_of::<copyrpc_fabric_options>() as u32,
        kind,
        ring_bytes,
        endpoints: COPYRPC_CTX_ENDPOINTS as u32,
        flags: 0,
        reserved: 0,
    };
    // SAFETY: forwarded; `o` is readable.
    unsafe { copyrpc_fabric_open_ex(&o, out) }
}

/// Opens a fabric as `*opts` says and creates one context's queues (sized for its
/// class's endpoints). Close it with `copyrpc_fabric_close` after `copyrpc_ctx_fini`.
///
/// The sim fabric's device runs in one of two ways. By default an engine thread steps
/// it: started here, it inherits the calling thread's CPU affinity at this moment (pin
/// the thread first to choose its CPU, or after to keep them apart), and yields the CPU
/// whenever a step found nothing to do. A loop that shares that CPU must yield too when
/// a pass finds nothing (`sched_yield()`), or the engine runs only when the scheduler
/// preempts the loop (a few steps a second). With `COPYRPC_FABRIC_MANUAL_STEP` there is
/// no thread: the caller's loop calls `copyrpc_fabric_step` on each pass (and while it
/// waits for anything to arrive), and may busy-poll without yielding.
///
/// Returns `COPYRPC_OK` with the fabric in `*out` (NULL on every refusal);
/// `COPYRPC_E_NULL`; `COPYRPC_E_BAD_ARG` (`size`, `kind`, `ring_bytes`, `endpoints`,
/// `flags` or `reserved` out of range); `COPYRPC_E_SYSTEM` (no such NIC, no room in
/// `/dev/shm`, ...: `copyrpc_last_error`).
///
/// # Safety
///
/// `opts` is NULL or readable; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_fabric_open_ex(
    opts: *const copyrpc_fabric_options,
    out: *mut *mut copyrpc_fabric,
) -> i32 {
    if out.is_null() {
        return COPYRPC_E_NULL;
    }
    // SAFETY: non-null, writable (caller contract); every refusal leaves it NULL.
    unsafe { out.write(std::ptr::null_mut()) };
    // SAFETY: NULL or readable (caller contract).
    let Some(o) = (unsafe { opts.as_ref() }) else {
        return COPYRPC_E_NULL;
    };
    let kind = match o.kind {
        COPYRPC_FABRIC_AUTO => FabricKind::Auto,
        COPYRPC_FABRIC_SIM => FabricKind::Sim,
        COPYRPC_FABRIC_VERBS => FabricKind::Verbs,
        _ => return COPYRPC_E_BAD_ARG,
    };
    let ring = o.ring_bytes as usize;
    let min = COPYRPC_FABRIC_MIN_RING as usize;
    let endpoints = if o.endpoints == 0 {
        COPYRPC_CTX_ENDPOINTS as u32
    } else {
        o.endpoints
    };
    if o.size as usize != size_of::<copyrpc_fabric_options>()
        || !ring.is_power_of_two()
        || !(min..=32 * COPYRPC_CTX_REQUESTS).contains(&ring)
        || copyrpc_linker::ctx::copyrpc_ctx_bytes(endpoints) == 0
        || o.flags & !COPYRPC_FABRIC_MANUAL_STEP != 0
        || o.reserved != 0
    {
        return COPYRPC_E_BAD_ARG;
    }
    let manual = o.flags & COPYRPC_FABRIC_MANUAL_STEP != 0;
    guard(|| {
        let sim = SimOptions::default();
        let fo = FabricOptions {
            sim: SimOptions {
                stepping: if manual {
                    Stepping::Manual
                } else {
                    Stepping::Thread
                },
                // The region is sparse: a ceiling that holds every endpoint of the class
                // costs only what is carved.
                region_bytes: sim
                    .region_bytes
                    .max(endpoints as usize * SIM_BYTES_PER_ENDPOINT),
                ..sim
            },
            ..FabricOptions::default()
        };
        let f = match fabric::open(kind, &fo) {
            Ok((f, _)) => Arc::new(f),
            Err(e) => return system(format_args!("opening the {kind} fabric: {e}")),
        };
        // The fabric lives as long as `parts` holds its Arc, as the pointer does.
        let manual = match &*f {
            Fabric::Sim(s) if manual => &raw const **s,
            _ => std::ptr::null(),
        };
        // Room in the send CQ for every endpoint of the class to fail at once.
        let parts = match NodeParts::new(f, &RpcConfig::for_ring(ring), endpoints as usize) {
            Ok(p) => p,
            Err(e) => return system(format_args!("creating the context's queues: {e}")),
        };
        let state = Box::new(FabricState {
            parts,
            manual,
            ep_claims: Vec::new(),
        });
        let shell: &'static mut FabricShell = Box::leak(Box::new(FabricShell::new(
            endpoints,
            Box::into_raw(state).cast(),
        )));
        let addr = &raw mut *shell;
        SHELLS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(addr as usize);
        // SAFETY: non-null, caller contract.
        unsafe { out.write(addr.cast()) };
        COPYRPC_OK
    })
}

/// Steps the fabric's device model once, now, when the fabric was opened with
/// `COPYRPC_FABRIC_MANUAL_STEP`: its send queues go out, what arrived lands and
/// completes. Call it on every pass of the loop that polls the fabric's context.
/// Returns 1 if the step did something, 0 if it found nothing to do (and always on a
/// fabric that steps itself: an engine thread, or a NIC), or `COPYRPC_E_NULL`,
/// `COPYRPC_E_WRONG_KIND`, `COPYRPC_E_BUSY`, `COPYRPC_E_SYSTEM` (the model failed).
///
/// # Safety
///
/// As `copyrpc_fabric_queues`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_fabric_step(f: *mut copyrpc_fabric) -> i32 {
    // SAFETY: forwarded.
    let s = match unsafe { shell(f) } {
        Ok(s) => s,
        Err(e) => return e,
    };
    // SAFETY: an open shell's.
    let sim = unsafe { state(s.parts) }.manual;
    if sim.is_null() {
        return 0;
    }
    // SAFETY: the state's `parts` keeps the fabric alive.
    let sim = unsafe { &*sim };
    guard(|| match sim.step(monotonic_ns()) {
        Some(stats) => i32::from(stats.progressed()),
        None => 0,
    })
}

/// Describes the fabric's context queues for `copyrpc_ctx_init`. Returns `COPYRPC_OK`,
/// `COPYRPC_E_NULL`, `COPYRPC_E_WRONG_KIND` (not an open fabric: closed, or another
/// kind) or `COPYRPC_E_BUSY` (from inside its exchange callback).
///
/// # Safety
///
/// `f` is NULL or a handle of this library; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_fabric_queues(
    f: *mut copyrpc_fabric,
    out: *mut copyrpc_queues,
) -> i32 {
    // SAFETY: forwarded.
    let s = match unsafe { shell(f) } {
        Ok(s) => s,
        Err(e) => return e,
    };
    // SAFETY: NULL or writable (caller contract).
    let Some(out) = (unsafe { out.as_mut() }) else {
        return COPYRPC_E_NULL;
    };
    // SAFETY: an open shell's.
    let q = unsafe { state(s.parts) }.parts.queues();
    write_queues(out, q, s);
    COPYRPC_OK
}

/// Creates a QP on the fabric's queues and its rings, described in `*out` for
/// `copyrpc_ep_create` (once, on the context of this fabric). Returns `COPYRPC_OK`, the
/// refusals of `copyrpc_fabric_queues`, or `COPYRPC_E_SYSTEM` (the class's endpoints
/// are all made, or the fabric refused: `copyrpc_last_error`).
///
/// # Safety
///
/// As `copyrpc_fabric_queues`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_fabric_endpoint(
    f: *mut copyrpc_fabric,
    out: *mut copyrpc_ep_desc,
) -> i32 {
    // SAFETY: forwarded.
    let s = match unsafe { shell(f) } {
        Ok(s) => s,
        Err(e) => return e,
    };
    // SAFETY: NULL or writable (caller contract).
    let Some(out) = (unsafe { out.as_mut() }) else {
        return COPYRPC_E_NULL;
    };
    // SAFETY: an open shell's.
    let st = unsafe { state(s.parts) };
    guard(|| match st.parts.add_endpoint() {
        Ok(p) => {
            let mut qp = [0u8; 32];
            qp.copy_from_slice(p.address.as_bytes());
            let claim = Box::new(Claim::new(false));
            write_ep(out, s, p.sq, p.mem, qp, &claim);
            st.ep_claims.push(claim);
            COPYRPC_OK
        }
        Err(e) => system(format_args!("creating an endpoint: {e}")),
    })
}

/// Sets the traffic class and service level the fabric's next `copyrpc_fabric_connect`s
/// bring QPs up with (perftest's `--tclass` and `--sl`; both 0 until set):
/// `traffic_class` 0..=255 is the GRH's (on RoCE v2 the IP header's DSCP << 2 | ECN),
/// `sl` 0..=15 the address vector's service level (on RoCE the VLAN priority). Both
/// sides of a connection must use the same. Out of range: `COPYRPC_E_BAD_ARG`, nothing
/// changed. Otherwise returns `COPYRPC_OK` or the refusals of `copyrpc_fabric_queues`.
///
/// # Safety
///
/// `f` is NULL or a handle of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_fabric_set_qos(
    f: *mut copyrpc_fabric,
    traffic_class: u32,
    sl: u32,
) -> i32 {
    // SAFETY: forwarded.
    let s = match unsafe { shell(f) } {
        Ok(s) => s,
        Err(e) => return e,
    };
    let (Ok(tc), Ok(sl)) = (u8::try_from(traffic_class), u8::try_from(sl)) else {
        return COPYRPC_E_BAD_ARG;
    };
    match Qos::new(tc, sl) {
        Ok(q) => {
            // SAFETY: an open shell's.
            unsafe { state(s.parts) }.parts.set_qos(q);
            COPYRPC_OK
        }
        Err(_) => COPYRPC_E_BAD_ARG,
    }
}

/// Connects endpoint `ep` of `ctx` (a context on this fabric) to its peer: builds the
/// local peer info, trades it for the peer's through `exchange(arg, ..)`, checks it,
/// connects the endpoint and brings the QP up towards the peer's. While `exchange` runs,
/// calls on `f` (a `copyrpc_fabric_close` among them) are refused with
/// `COPYRPC_E_BUSY`.
///
/// Returns `COPYRPC_OK`; `COPYRPC_E_NULL`; `COPYRPC_E_BAD_ARG` (`ctx` is not on this
/// fabric); `COPYRPC_E_ALREADY_CONNECTED` (refused before the exchange, nothing
/// changed); `COPYRPC_E_BAD_PEER_INFO` (the peer's info is damaged);
/// `COPYRPC_E_BAD_SETUP` (the endpoint refuses the peer's rings, e.g. another ring
/// size: the QP is left untouched, so the endpoint can still be connected to another);
/// `COPYRPC_E_SYSTEM` (the exchange returned non-zero, or the QP could not be brought
/// up, which fails the endpoint: `copyrpc_last_error`); the refusals of the handles.
///
/// # Safety
///
/// `f`, `ctx` NULL or handles of this library; `exchange` is safe to call with `arg`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn copyrpc_fabric_connect(
    f: *mut copyrpc_fabric,
    ctx: *mut copyrpc_ctx,
    ep: u16,
    exchange: copyrpc_exchange_fn,
    arg: *mut c_void,
) -> i32 {
    // SAFETY: forwarded. Not held: the exchange callback may call into this library.
    let p: *mut FabricShell = match unsafe { shell(f) } {
        Ok(s) => s,
        Err(e) => return e,
    };
    // SAFETY: forwarded.
    match unsafe { shell_of(ctx) } {
        Ok(s) if s == p.cast_const() => {}
        Ok(_) => return COPYRPC_E_BAD_ARG,
        Err(e) => return e,
    }
    let Some(exchange) = exchange else {
        return COPYRPC_E_NULL;
    };
    let mut mine = copyrpc_peer_info {
        magic: 0,
        version: 0,
        qp: [0; 32],
        endpoint: [0; 48],
        check: 0,
    };
    // SAFETY: forwarded; `mine` is writable.
    let rc = unsafe { copyrpc_ep_local_info(ctx, ep, &mut mine) };
    if rc != COPYRPC_OK {
        return rc;
    }
    // Before the exchange and the QP: bringing a connected endpoint's QP up again fails
    // in the host (or re-targets it), and the exchange would take a peer's info for a
    // connection that cannot be made.
    // SAFETY: forwarded.
    let rc = unsafe { ep_connectable(ctx, ep) };
    if rc != COPYRPC_OK {
        return rc;
    }
    let mut theirs = mine;
    theirs.magic = 0;
    // Marked busy while the callback runs, as a handle is during its poll: a
    // `copyrpc_fabric_close` (or any call on `f`) from inside it is refused with
    // `COPYRPC_E_BUSY` instead of freeing the fabric this call goes on to use. Nothing
    // has changed yet, so a callback that unwinds leaves the fabric usable.
    // SAFETY: `p` is an open fabric's shell (checked above), used by this thread; no
    // reference to it is held across the callback.
    let busy = unsafe { Restore::mark(&raw mut (*p).magic, FABRIC_MAGIC, FABRIC_MAGIC) };
    // SAFETY: the callback's contract is the caller's; both pointers are valid.
    let rc = unsafe { exchange(arg, &mine, &mut theirs) };
    busy.finish(FABRIC_MAGIC);
    // SAFETY: `p` is open and unmarked again (nothing on `f` ran in between).
    let s = match unsafe { shell(p.cast()) } {
        Ok(s) => s,
        Err(e) => return e,
    };
    if rc != 0 {
        return system(format_args!(
            "endpoint {ep}: the exchange callback returned {rc}"
        ));
    }
    let (qp, _) = match open_peer_info(Some(&theirs)) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let (Ok(remote), Ok(local)) = (
        QpEndpoint::read_from_bytes(&qp),
        QpEndpoint::read_from_bytes(&mine.qp),
    ) else {
        return COPYRPC_E_BAD_PEER_INFO;
    };
    // The endpoint before the QP: its refusals of the peer's rings then leave the QP as
    // it was, free to be connected to another peer. The endpoint posts nothing before
    // the next poll, by which time the QP is up.
    // SAFETY: forwarded; `theirs` is readable.
    let rc = unsafe { copyrpc_ep_connect(ctx, ep, &theirs) };
    if rc != COPYRPC_OK {
        return rc;
    }
    // SAFETY: an open shell's.
    let st = unsafe { state(s.parts) };
    let rc = guard(|| match st.parts.connect(local.qpn, &remote) {
        Ok(()) => COPYRPC_OK,
        Err(e) => system(format_args!(
            "endpoint {ep}: connecting its QP: {e} (the endpoint is failed)"
        )),
    });
    if rc != COPYRPC_OK {
        // Connected over a QP that will never send, the endpoint would leave its calls
        // waiting for good; failed, it refuses them. It exists (connected just above),
        // so this cannot be refused.
        // SAFETY: forwarded.
        let _ = unsafe { fail_ep(ctx, ep) };
    }
    rc
}

/// Destroys the fabric's QPs, rings and queues, stops its engine thread and closes it.
/// End its context first (`copyrpc_ctx_fini`).
///
/// Returns `COPYRPC_OK`; `COPYRPC_E_IN_USE` (a live context uses its queues: nothing
/// was closed); `COPYRPC_E_NULL`; `COPYRPC_E_WRONG_KIND` (closed already, or another
/// kind: a pointer to a closed fabric stays refused, whatever was opened since);
/// `COPYRPC_E_BUSY` (from inside its exchange callback).
///
/// # Safety
///
/// `f` is NULL or a handle of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_fabric_close(f: *mut copyrpc_fabric) -> i32 {
    // SAFETY: forwarded.
    let s = match unsafe { shell(f) } {
        Ok(s) => s,
        Err(e) => return e,
    };
    if s.queues() == QUEUES_TAKEN {
        return COPYRPC_E_IN_USE;
    }
    s.magic = 0;
    let parts = std::mem::replace(&mut s.parts, std::ptr::null_mut());
    guard(|| {
        // SAFETY: the open shell's box (made by `copyrpc_fabric_open_ex`), taken out of
        // the shell, which is closed: it is not used again.
        drop(unsafe { Box::from_raw(parts.cast::<FabricState>()) });
        COPYRPC_OK
    })
}
