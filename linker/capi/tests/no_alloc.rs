//! The per-call functions of the C ABI allocate nothing: a copyrpc exchange (call, poll,
//! recv, reply, flush) between two contexts of this process, and an ipc and a
//! delegation round trip (client call and poll, server recv and reply), run with an
//! allocator that counts this thread's allocations. Set-up may allocate; the loops may
//! not. (The delegation server's poll is left out: every 10 ms it reads `/proc` to evict
//! dead clients, which allocates; docs/ARCHITECTURE.md says so.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use copyrpc::copyrpc_shm_msg;
use copyrpc::deleg::*;
use copyrpc::fabric::*;
use copyrpc::ipc::*;
use copyrpc_linker::ctx::*;
use copyrpc_linker::desc::*;
use copyrpc_linker::status::*;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static TRACK: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if TRACK.with(Cell::get) {
            // Relaxed: a counter read after the tracked section on this thread.
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if TRACK.with(Cell::get) {
            // Relaxed: as above.
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Runs `f` counting this thread's allocations; returns them.
fn allocations_in(f: impl FnOnce()) -> u64 {
    // Relaxed: single-threaded use of the counter around `f`.
    let before = ALLOCS.load(Ordering::Relaxed);
    TRACK.with(|t| t.set(true));
    f();
    TRACK.with(|t| t.set(false));
    ALLOCS.load(Ordering::Relaxed) - before
}

fn ok(what: &str, rc: i32) {
    assert!(rc >= 0, "{what}: {rc}");
}

struct Side {
    f: *mut copyrpc_fabric,
    ctx: *mut copyrpc_ctx,
    ep: u16,
    _mem: Vec<u64>,
}

fn side() -> Side {
    let mut f = null_mut();
    let mut q = copyrpc_queues { opaque: [0; 24] };
    let mut d = copyrpc_ep_desc { opaque: [0; 32] };
    // The context's memory: 64-aligned inside an over-allocated u64 buffer.
    let mut mem = vec![0u64; (COPYRPC_CTX_BYTES + COPYRPC_CTX_ALIGN) / 8];
    let base = mem.as_mut_ptr().cast::<u8>();
    let base = base.wrapping_add(base.align_offset(COPYRPC_CTX_ALIGN));
    let mut ctx = null_mut();
    let mut ep = 0;
    // SAFETY: every pointer is valid for the call; `mem` outlives the context (moved
    // into the returned `Side`, its heap buffer does not move).
    unsafe {
        ok(
            "fabric",
            copyrpc_fabric_open(COPYRPC_FABRIC_SIM, 4096, &mut f),
        );
        ok("queues", copyrpc_fabric_queues(f, &mut q));
        ok(
            "ctx",
            copyrpc_ctx_init(base.cast(), COPYRPC_CTX_BYTES, &mut q, &mut ctx),
        );
        ok("endpoint", copyrpc_fabric_endpoint(f, &mut d));
        ok("ep", copyrpc_ep_create(ctx, &mut d, &mut ep));
    }
    Side {
        f,
        ctx,
        ep,
        _mem: mem,
    }
}

/// The exchange of two sides in one process: the other side's info, computed before.
unsafe extern "C-unwind" fn swap(
    arg: *mut c_void,
    mine: *const copyrpc_peer_info,
    theirs: *mut copyrpc_peer_info,
) -> i32 {
    // SAFETY: `arg` is the `[info; 2]` below, `mine`/`theirs` valid (the library's).
    unsafe {
        let slots = &mut *arg.cast::<[copyrpc_peer_info; 2]>();
        let (other, me) = (slots[1], &mut slots[0]);
        *me = *mine;
        *theirs = other;
    }
    0
}

unsafe extern "C-unwind" fn count(
    arg: *mut c_void,
    _token: u64,
    status: i32,
    _d: *const u8,
    len: usize,
) {
    assert_eq!(status, COPYRPC_OK);
    assert_eq!(len, 8);
    // SAFETY: `arg` is the counter below.
    unsafe { *arg.cast::<u64>() += 1 };
}

#[test]
fn copyrpc_calls_allocate_nothing() {
    let (a, b) = (side(), side());
    let zero = copyrpc_peer_info {
        magic: 0,
        version: 0,
        qp: [0; 32],
        endpoint: [0; 48],
        check: 0,
    };
    let mut infos = [zero; 2];
    // SAFETY: live handles and valid pointers throughout.
    unsafe {
        ok("info b", copyrpc_ep_local_info(b.ctx, b.ep, &mut infos[1]));
        ok(
            "connect a",
            copyrpc_fabric_connect(a.f, a.ctx, a.ep, Some(swap), (&raw mut infos).cast()),
        );
        infos.swap(0, 1);
        ok(
            "connect b",
            copyrpc_fabric_connect(b.f, b.ctx, b.ep, Some(swap), (&raw mut infos).cast()),
        );
    }
    const CALLS: u64 = 5000;
    let (mut sent, mut done, mut served) = (0u64, 0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    let n = allocations_in(|| {
        let mut req = copyrpc_request {
            data: std::ptr::null(),
            len: 0,
            ep: 0,
            ctx_tag: 0,
            call_id: 0,
            seq: 0,
        };
        while done < CALLS {
            assert!(
                Instant::now() < deadline,
                "{done}/{CALLS} answered at the deadline"
            );
            // SAFETY: live contexts, valid buffers.
            unsafe {
                while sent < CALLS && sent - done < 16 {
                    let rc =
                        copyrpc_call(a.ctx, a.ep, sent.to_le_bytes().as_ptr().cast(), 8, 8, sent);
                    if rc < 0 {
                        assert!(rc >= COPYRPC_E_SQ_FULL, "call: {rc}");
                        break;
                    }
                    sent += 1;
                }
                ok(
                    "poll a",
                    copyrpc_poll(a.ctx, Some(count), (&raw mut done).cast()),
                );
                ok("poll b", copyrpc_poll(b.ctx, Some(count), null_mut()));
                while copyrpc_recv(b.ctx, &mut req) == 1 {
                    ok(
                        "reply",
                        copyrpc_reply(b.ctx, &req, req.data.cast(), req.len),
                    );
                    served += 1;
                }
                ok("flush", copyrpc_flush(b.ctx));
            }
        }
    });
    assert_eq!((done, served), (CALLS, CALLS));
    assert_eq!(n, 0, "{n} allocations in {CALLS} calls");
    // SAFETY: live handles, ended once.
    unsafe {
        ok("fini", copyrpc_ctx_fini(a.ctx));
        ok("fini", copyrpc_ctx_fini(b.ctx));
        ok("close", copyrpc_fabric_close(a.f));
        ok("close", copyrpc_fabric_close(b.f));
    }
}

#[repr(C, align(16))]
struct Area([u8; 512]);

unsafe extern "C-unwind" fn ipc_got(arg: *mut c_void, _token: u64, _r: *const copyrpc_shm_msg) {
    // SAFETY: `arg` is the counter below.
    unsafe { *arg.cast::<u64>() += 1 };
}

unsafe extern "C-unwind" fn deleg_got(arg: *mut c_void, _token: u64, _r: *const copyrpc_shm_msg) {
    // SAFETY: `arg` is the counter below.
    unsafe { *arg.cast::<u64>() += 1 };
}

#[test]
fn shm_calls_allocate_nothing() {
    let name = format!("/copyrpc-c-noalloc-{}\0", std::process::id());
    let (mut m1, mut m2, mut m3, mut m4) = (
        Area([0; 512]),
        Area([0; 512]),
        Area([0; 512]),
        Area([0; 512]),
    );
    let msg = copyrpc_shm_msg { words: [1; 8] };
    let (mut is, mut ic, mut ds, mut dc) = (null_mut(), null_mut(), null_mut(), null_mut());
    // SAFETY: valid areas, a NUL-terminated name.
    unsafe {
        ok(
            "ipc server",
            copyrpc_ipc_server_open(
                m1.0.as_mut_ptr().cast(),
                512,
                name.as_ptr().cast(),
                4,
                8,
                &mut is,
            ),
        );
        ok(
            "ipc client",
            copyrpc_ipc_client_attach(m2.0.as_mut_ptr().cast(), 512, name.as_ptr().cast(), &mut ic),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut got = 0u64;
    let n = allocations_in(|| {
        let mut r = copyrpc_ipc_request {
            client_id: 0,
            epoch: 0,
            token: 0,
            msg,
        };
        for k in 0..2000u64 {
            // SAFETY: live handles, valid pointers.
            unsafe {
                ok("ipc call", copyrpc_ipc_client_call(ic, &msg, k));
                while got <= k {
                    assert!(
                        Instant::now() < deadline,
                        "ipc: {got} answered at the deadline"
                    );
                    ok("ipc poll", copyrpc_ipc_server_poll(is));
                    while copyrpc_ipc_server_recv(is, &mut r) == 1 {
                        ok("ipc reply", copyrpc_ipc_server_reply(is, &r, &msg));
                    }
                    ok(
                        "ipc client poll",
                        copyrpc_ipc_client_poll(ic, Some(ipc_got), (&raw mut got).cast()),
                    );
                }
            }
        }
    });
    assert_eq!(n, 0, "ipc: {n} allocations");
    // SAFETY: live handles, closed once; then the delegation pair on the same name.
    unsafe {
        ok("close", copyrpc_ipc_client_close(ic));
        ok("close", copyrpc_ipc_server_close(is));
        ok(
            "deleg server",
            copyrpc_deleg_server_open(
                m3.0.as_mut_ptr().cast(),
                512,
                name.as_ptr().cast(),
                4,
                16,
                4,
                &mut ds,
            ),
        );
        ok(
            "deleg client",
            copyrpc_deleg_client_attach(
                m4.0.as_mut_ptr().cast(),
                512,
                name.as_ptr().cast(),
                &mut dc,
            ),
        );
    }
    let mut got = 0u64;
    let mut n = 0;
    let mut r = copyrpc_deleg_request {
        client_id: 0,
        slot: 0,
        epoch: 0,
        call: 0,
        msg,
    };
    for k in 0..2000u64 {
        // SAFETY: live handles, valid pointers.
        unsafe {
            n += allocations_in(|| ok("deleg call", copyrpc_deleg_client_call(dc, &msg, k)));
            while got <= k {
                assert!(
                    Instant::now() < deadline,
                    "deleg: {got} answered at the deadline"
                );
                ok("deleg poll", copyrpc_deleg_server_poll(ds));
                n += allocations_in(|| {
                    while copyrpc_deleg_server_recv(ds, &mut r) == 1 {
                        ok("deleg reply", copyrpc_deleg_server_reply(ds, &r, &msg));
                    }
                    ok(
                        "deleg client poll",
                        copyrpc_deleg_client_poll(dc, Some(deleg_got), (&raw mut got).cast()),
                    );
                });
            }
        }
    }
    assert_eq!(n, 0, "delegation: {n} allocations");
    // SAFETY: live handles, closed once.
    unsafe {
        ok("close", copyrpc_deleg_client_close(dc));
        ok("close", copyrpc_deleg_server_close(ds));
    }
}
