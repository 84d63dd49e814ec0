//! Instructions per call of delegationrpc, Flux, ipc and an rtrb echo, on one thread and
//! stepped: a window of calls, then the server answers them all, then the client polls.
//! Nothing spins, so callgrind's inclusive cost of each `d_*` / `f_*` / `i_*` / `r_*`
//! function, divided by the calls, is that side's work per call (docs/PERFORMANCE.md,
//! issue 5's reading; `scripts/shm-instr.sh` prints the table):
//!
//! ```sh
//! cargo build --release -p copyrpc-host --example shm_instr
//! valgrind --tool=callgrind --callgrind-out-file=cg.shm target/release/examples/shm_instr 1000
//! callgrind_annotate --inclusive=yes cg.shm | grep -E 'shm_instr::(d|f|i|r)_'
//! ```
//!
//! `shm_instr ROUNDS [WINDOW]`: every protocol runs windows of `WINDOW` calls (default
//! 32), ipc on a region of that depth, as the two-thread bench's `window32/*` (ipc of
//! depth 32) and `rtt/*` (one call in flight, ipc of depth 1) do; the two windows give
//! each step's fixed and per-call parts, which the virtual shm rig charges
//! (`copyrpc_host::shm::world`). rtrb is the
//! bench's baseline for ipc: two rings, requests one way and responses the other, the
//! same two hand-offs per call that ipc makes.
//!
//! It says how much each protocol executes, not how long its cache lines take to move
//! between cores, which is what the two-thread bench (`benches/shm.rs`) measures.
use std::hint::black_box;

use copyrpc_core::flux::{Mesh, NodeCtl, PairCtl};
use copyrpc_core::ipc;
use copyrpc_core::shm::spsc::Slot;
use copyrpc_core::shm::{Msg, Slab, SlabEntry};
use copyrpc_host::shm::deleg::{DelegClient, DelegServer};
use copyrpc_host::shm::ipc::{IpcClient, IpcServer};
use copyrpc_host::shm::world::deleg_pair;

type P = [u64; 2];
const W: u64 = 32;

#[inline(never)]
fn d_call(c: &mut DelegClient<P, P>, k: u64, w: u64) {
    for i in 0..w {
        c.call(&[k + i, 0]).unwrap();
    }
}
#[inline(never)]
fn d_serve(s: &mut DelegServer<P, P>) -> u64 {
    let mut n = 0;
    if s.poll() > 0 {
        while let Some(e) = s.recv() {
            let p = e.payload;
            s.reply(e.token, &p).unwrap();
            n += 1;
        }
        s.advance_tail();
    }
    n
}
#[inline(never)]
fn d_poll(c: &mut DelegClient<P, P>) -> u64 {
    c.poll(|s, r| {
        black_box((s, r));
    }) as u64
}

type FluxNode = copyrpc_core::flux::Node<'static, 'static, P, u64>;
#[inline(never)]
fn f_call(a: &mut FluxNode, k: u64, w: u64) {
    for i in 0..w {
        a.call(1, [k + i, 0], k + i).unwrap();
    }
}
#[inline(never)]
fn f_serve(b: &mut FluxNode) -> u64 {
    let mut n = 0;
    while let Some(h) = b.try_recv() {
        let p = h.payload;
        b.reply(h, p).unwrap();
        n += 1;
    }
    n
}
#[inline(never)]
fn f_poll(a: &mut FluxNode) -> u64 {
    a.poll(|u, r| {
        black_box((u, r));
    }) as u64
}

#[inline(never)]
fn i_call(c: &mut IpcClient<P, P, u64>, k: u64, w: u64) {
    for i in 0..w {
        c.call(&[k + i, 0], k + i).unwrap();
    }
}
#[inline(never)]
fn i_serve(s: &mut IpcServer<P, P>) -> u64 {
    let mut n = 0;
    if s.poll() > 0 {
        while let Some(h) = s.recv() {
            let p = h.payload;
            s.reply(h, &p).unwrap();
            n += 1;
        }
    }
    n
}
#[inline(never)]
fn i_poll(c: &mut IpcClient<P, P, u64>) -> u64 {
    c.poll(|u, r| {
        black_box((u, r));
    }) as u64
}

type Rings = (rtrb::Producer<P>, rtrb::Consumer<P>);
#[inline(never)]
fn r_call((req, _): &mut Rings, k: u64, w: u64) {
    for i in 0..w {
        req.push([k + i, 0]).unwrap();
    }
}
#[inline(never)]
fn r_serve((req, resp): &mut (rtrb::Consumer<P>, rtrb::Producer<P>)) -> u64 {
    let mut n = 0;
    while let Ok(p) = req.pop() {
        resp.push(p).unwrap();
        n += 1;
    }
    n
}
#[inline(never)]
fn r_poll((_, resp): &mut Rings) -> u64 {
    let mut n = 0;
    while let Ok(r) = resp.pop() {
        black_box(r);
        n += 1;
    }
    n
}

/// Positional argument `name`: `default` if absent; exits 2 naming it if it is not a
/// number `ok` accepts.
fn arg(v: Option<String>, name: &str, default: u64, ok: fn(u64) -> bool, what: &str) -> u64 {
    let Some(v) = v else { return default };
    match v.parse() {
        Ok(n) if ok(n) => n,
        _ => {
            eprintln!("shm_instr: {name} must be {what}, got {v:?}");
            std::process::exit(2);
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds = arg(args.next(), "ROUNDS", 1000, |n| n > 0, "a positive integer");
    let window = arg(
        args.next(),
        "WINDOW",
        W,
        |w| w.is_power_of_two() && w <= 32,
        "a power of two up to 32 (the ipc region's depth)",
    );
    let name = format!("/shm-instr-{}", std::process::id());
    let (mut s, mut c) = deleg_pair(&name).unwrap();
    for r in 0..rounds {
        d_call(&mut c, r * window, window);
        assert_eq!(d_serve(&mut s), window);
        assert_eq!(d_poll(&mut c), window);
    }
    const CAP: usize = 64;
    let slots = Mesh::<P>::slots_needed(2, CAP);
    let pairs: &'static [PairCtl] = Vec::leak((0..4).map(|_| PairCtl::new()).collect());
    let req: &'static [Slot<Msg<P>>] = Vec::leak((0..slots).map(|_| Slot::new()).collect());
    let resp: &'static [Slot<Msg<P>>] = Vec::leak((0..slots).map(|_| Slot::new()).collect());
    let nodes: &'static [NodeCtl] = Vec::leak((0..2).map(|_| NodeCtl::new()).collect());
    let mesh = Mesh::new(2, CAP, pairs, req, resp, nodes).unwrap();
    let slab = || Slab::new(Vec::leak((0..CAP).map(|_| SlabEntry::new()).collect()));
    let (mut a, mut b) = (mesh.node(0, slab()).unwrap(), mesh.node(1, slab()).unwrap());
    for r in 0..rounds {
        f_call(&mut a, r * window, window);
        assert_eq!(f_serve(&mut b), window);
        assert_eq!(f_poll(&mut a), window);
    }

    let name = format!("/shm-instr-ipc-{}", std::process::id());
    let cfg = ipc::Config {
        max_clients: 1,
        depth: window as u32,
    };
    let mut s = IpcServer::<P, P>::create(&name, cfg, true).unwrap();
    let mut c = IpcClient::<P, P, u64>::connect(&name).unwrap();
    for r in 0..rounds {
        i_call(&mut c, r * window, window);
        assert_eq!(i_serve(&mut s), window);
        assert_eq!(i_poll(&mut c), window);
    }

    // Capacity 64 as in the bench.
    let (req_p, req_c) = rtrb::RingBuffer::<P>::new(64);
    let (resp_p, resp_c) = rtrb::RingBuffer::<P>::new(64);
    let (mut client, mut server) = ((req_p, resp_c), (req_c, resp_p));
    for r in 0..rounds {
        r_call(&mut client, r * window, window);
        assert_eq!(r_serve(&mut server), window);
        assert_eq!(r_poll(&mut client), window);
    }
    println!("ok {rounds} {window}");
}
