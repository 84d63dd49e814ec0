//! Set-up from C: open a fabric, describe a context's queues and each endpoint's QP and
//! rings, and connect two endpoints through an exchange the C program provides.
//!
//! A `copyrpc_fabric` is one context's worth of fabric objects ([`NodeParts`]) on its
//! own fabric (the sim fabric: a `/dev/shm` region and an engine thread; verbs: the
//! NIC). It is boxed: set-up allocates, the data path does not.

use std::ffi::c_void;
use std::sync::Arc;

use copyrpc_host::fabric::{self, FabricKind, FabricOptions, Qos, QpEndpoint};
use copyrpc_host::rpc::{NodeParts, RpcConfig};
use copyrpc_linker::ctx::{
    copyrpc_ctx, copyrpc_ep_connect, copyrpc_ep_local_info, ep_connectable, fail_ep,
    COPYRPC_CTX_ENDPOINTS, COPYRPC_CTX_REQUESTS,
};
use copyrpc_linker::desc::{
    copyrpc_ep_desc, copyrpc_peer_info, copyrpc_queues, open_peer_info, write_ep, write_queues,
    Claim,
};
use copyrpc_linker::kind;
use copyrpc_linker::status::*;
use zerocopy::{FromBytes, IntoBytes};

use crate::last_error::{guard, system};
use crate::shm::handle;

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

/// A fabric and one context's queues, QPs and rings: opaque, from `copyrpc_fabric_open`.
#[derive(Debug)]
pub struct copyrpc_fabric {
    _opaque: [u8; 0],
}

const FABRIC_MAGIC: u64 = u64::from_le_bytes(*b"CRPCFAB1");

#[repr(C)]
struct FabricHandle {
    magic: u64,
    parts: NodeParts,
    /// Taken by the context its queues' description (or a copy of it) goes to first.
    /// The handle is boxed, so the flags' addresses, in the descriptions, stay put.
    queues_claim: Claim,
    /// One per endpoint created, the same for its QP and rings.
    #[allow(
        clippy::vec_box,
        reason = "the descriptions hold each flag's address, which a growing Vec<Claim> would move"
    )]
    ep_claims: Vec<Box<Claim>>,
}

/// Sends `*mine` to the peer and writes the peer's into `*theirs`; returns 0, or
/// non-zero to abandon the connection (`copyrpc_fabric_connect` then fails with
/// `COPYRPC_E_SYSTEM`). Both sides must call it in the same order.
pub type copyrpc_exchange_fn = Option<
    unsafe extern "C" fn(
        arg: *mut c_void,
        mine: *const copyrpc_peer_info,
        theirs: *mut copyrpc_peer_info,
    ) -> i32,
>;

/// Opens fabric `kind` (`COPYRPC_FABRIC_*`) with rings of `ring_bytes` per endpoint (a
/// power of two, `COPYRPC_FABRIC_MIN_RING` (512) ..= 32 × `COPYRPC_CTX_REQUESTS`; else
/// `COPYRPC_E_BAD_ARG`) and creates one context's queues. Close it with
/// `copyrpc_fabric_close` after `copyrpc_ctx_fini`.
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
    if out.is_null() {
        return COPYRPC_E_NULL;
    }
    let kind = match kind {
        COPYRPC_FABRIC_AUTO => FabricKind::Auto,
        COPYRPC_FABRIC_SIM => FabricKind::Sim,
        COPYRPC_FABRIC_VERBS => FabricKind::Verbs,
        _ => return COPYRPC_E_BAD_ARG,
    };
    let ring = ring_bytes as usize;
    let min = COPYRPC_FABRIC_MIN_RING as usize;
    if !ring.is_power_of_two() || !(min..=32 * COPYRPC_CTX_REQUESTS).contains(&ring) {
        return COPYRPC_E_BAD_ARG;
    }
    guard(|| {
        let f = match fabric::open(kind, &FabricOptions::default()) {
            Ok((f, _)) => f,
            Err(e) => return system(format_args!("opening the {kind} fabric: {e}")),
        };
        // Room in the send CQ for every endpoint a context can hold to fail at once.
        match NodeParts::new(
            Arc::new(f),
            &RpcConfig::for_ring(ring),
            COPYRPC_CTX_ENDPOINTS,
        ) {
            Ok(parts) => {
                let h = Box::new(FabricHandle {
                    magic: FABRIC_MAGIC,
                    parts,
                    queues_claim: Claim::new(false),
                    ep_claims: Vec::new(),
                });
                // SAFETY: non-null, caller contract.
                unsafe { out.write(Box::into_raw(h).cast()) };
                COPYRPC_OK
            }
            Err(e) => system(format_args!("creating the context's queues: {e}")),
        }
    })
}

/// Describes the fabric's context queues for `copyrpc_ctx_init`.
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
    let h = match unsafe { handle(f.cast::<FabricHandle>(), FABRIC_MAGIC) } {
        Ok(h) => h,
        Err(e) => return e,
    };
    // SAFETY: NULL or writable (caller contract).
    let Some(out) = (unsafe { out.as_mut() }) else {
        return COPYRPC_E_NULL;
    };
    write_queues(out, h.parts.queues(), &h.queues_claim);
    COPYRPC_OK
}

/// Creates a QP on the fabric's queues and its rings, described in `*out` for
/// `copyrpc_ep_create` (once).
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
    let h = match unsafe { handle(f.cast::<FabricHandle>(), FABRIC_MAGIC) } {
        Ok(h) => h,
        Err(e) => return e,
    };
    // SAFETY: NULL or writable (caller contract).
    let Some(out) = (unsafe { out.as_mut() }) else {
        return COPYRPC_E_NULL;
    };
    guard(|| match h.parts.add_endpoint() {
        Ok(p) => {
            let mut qp = [0u8; 32];
            qp.copy_from_slice(p.address.as_bytes());
            let claim = Box::new(Claim::new(false));
            write_ep(out, p.sq, p.mem, qp, &claim);
            h.ep_claims.push(claim);
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
/// changed.
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
    let h = match unsafe { handle(f.cast::<FabricHandle>(), FABRIC_MAGIC) } {
        Ok(h) => h,
        Err(e) => return e,
    };
    let (Ok(tc), Ok(sl)) = (u8::try_from(traffic_class), u8::try_from(sl)) else {
        return COPYRPC_E_BAD_ARG;
    };
    match Qos::new(tc, sl) {
        Ok(q) => {
            h.parts.set_qos(q);
            COPYRPC_OK
        }
        Err(_) => COPYRPC_E_BAD_ARG,
    }
}

/// Connects endpoint `ep` of `ctx` (created from this fabric) to its peer: builds the
/// local peer info, trades it for the peer's through `exchange(arg, ..)`, checks it,
/// connects the endpoint and brings the QP up towards the peer's. An endpoint connected
/// already is refused with `COPYRPC_E_ALREADY_CONNECTED` before the exchange, nothing
/// changed. A peer whose rings the endpoint refuses (`COPYRPC_E_BAD_SETUP`, e.g. another
/// ring size) leaves the QP untouched, so the endpoint can still be connected to
/// another; if the QP cannot be brought up (`COPYRPC_E_SYSTEM`) the endpoint is failed.
/// While `exchange` runs, calls on `f` (a `copyrpc_fabric_close` among them) are refused
/// with `COPYRPC_E_BUSY`.
///
/// # Safety
///
/// `f`, `ctx` NULL or handles of this library; `exchange` is safe to call with `arg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_fabric_connect(
    f: *mut copyrpc_fabric,
    ctx: *mut copyrpc_ctx,
    ep: u16,
    exchange: copyrpc_exchange_fn,
    arg: *mut c_void,
) -> i32 {
    let p = f.cast::<FabricHandle>();
    // SAFETY: forwarded. Not held: the exchange callback may call into this library.
    if let Err(e) = unsafe { handle(p, FABRIC_MAGIC) } {
        return e;
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
    // `COPYRPC_E_BUSY` instead of freeing the fabric this call goes on to use.
    // SAFETY: `p` is a live fabric (checked above), used by this thread; no reference to
    // it is held across the callback.
    unsafe { (&raw mut (*p).magic).write(kind::polling(FABRIC_MAGIC)) };
    // SAFETY: the callback's contract is the caller's; both pointers are valid.
    let rc = unsafe { exchange(arg, &mine, &mut theirs) };
    // SAFETY: as above; nothing on `f` ran in between (refused while marked).
    unsafe { (&raw mut (*p).magic).write(FABRIC_MAGIC) };
    // SAFETY: `p` is live and unmarked again.
    let h = match unsafe { handle(p, FABRIC_MAGIC) } {
        Ok(h) => h,
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
    let rc = guard(|| match h.parts.connect(local.qpn, &remote) {
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

/// Destroys the fabric's QPs, rings and queues and closes it. End every context on it
/// first (`copyrpc_ctx_fini`). The handle is freed: do not use it again.
///
/// # Safety
///
/// `f` is NULL or a live handle of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copyrpc_fabric_close(f: *mut copyrpc_fabric) -> i32 {
    // SAFETY: forwarded.
    let h = match unsafe { handle(f.cast::<FabricHandle>(), FABRIC_MAGIC) } {
        Ok(h) => h,
        Err(e) => return e,
    };
    h.magic = 0;
    guard(|| {
        // SAFETY: the magic said `copyrpc_fabric_open` boxed it; it is not used again.
        drop(unsafe { Box::from_raw(f.cast::<FabricHandle>()) });
        COPYRPC_OK
    })
}
