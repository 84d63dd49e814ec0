//! Shared-memory protocol benches, two threads pinned to two cores (printed at start).
//!
//! `cargo bench -p copyrpc-host --bench shm` (about a minute); numbers and their reading are in
//! docs/PERFORMANCE.md. Groups:
//!
//! - `rtt/*`: one request/response round trip, one call in flight: `floor_one_line` (a
//!   single cache line bounced between the two cores: the physical floor), `ipc` (region
//!   of depth 1), `ipc_depth64`,
//!   `rtrb` (two rtrb rings), `deleg`, `flux`, `crossbeam_channel`, `array_queue`.
//! - `window32/*`: throughput with 32 calls in flight, request and response both ways:
//!   `deleg` vs `array_queue` (crossbeam ArrayQueue pair), `flux` vs `crossbeam_channel`,
//!   `ipc` vs `rtrb`; and `array_queue_line`, `flux_line`: the same two with each message
//!   padded to a 64-byte line, the density delegationrpc's layout has
//!   (docs/spec/deleg.md#layout).
//!
//! Every waiting loop, in every bench, runs [`idle`] (the spin-wait hint) when it found
//! nothing, the same for our protocols and the baselines.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use copyrpc_core::flux::{Mesh, NodeCtl, PairCtl};
use copyrpc_core::ipc;
use copyrpc_core::shm::spsc::Slot;
use copyrpc_core::shm::{Msg, Slab, SlabEntry};
use copyrpc_host::affinity::{pin_current_thread, usable_cores};
use copyrpc_host::shm::deleg::DelegServer;
use copyrpc_host::shm::ipc::{IpcClient, IpcServer};
use copyrpc_host::shm::world::deleg_pair;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

type P = [u64; 2];

/// What every waiting loop does when it found nothing, in every bench alike (the floor
/// included): the spin-wait hint (`pause` on x86). Without it, leaving a tight spin on
/// a line the other core just wrote costs a pipeline flush; on this machine the ipc
/// round trip measured ~220 ns without the hint and ~140 ns with it, against a ~130 ns
/// floor.
#[inline(always)]
fn idle() {
    std::hint::spin_loop();
}

const WINDOW: u64 = 32;

/// (bench thread's cpu, peer thread's cpu): the first two usable cpus, read once before
/// the bench thread pins itself (after that its own affinity is one cpu).
fn cores() -> (usize, usize) {
    static CORES: std::sync::OnceLock<(usize, usize)> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| {
        let c = usable_cores().expect("sched_getaffinity");
        (c[0], c[1 % c.len()])
    })
}

/// The second thread of a bench: pinned, runs `body` until stopped.
struct Peer {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Peer {
    fn spawn(body: impl FnOnce(&AtomicBool) + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let (_, peer_core) = cores();
        let handle = std::thread::spawn(move || {
            pin_current_thread(peer_core).expect("pin peer");
            body(&s);
        });
        Self {
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap();
    }
}

fn unique(tag: &str) -> String {
    format!("/copyrpc-bench-{tag}-{}", std::process::id())
}

#[repr(align(128))]
struct Line(AtomicU64);

fn rtt(c: &mut Criterion) {
    let mut g = c.benchmark_group("rtt");
    g.throughput(Throughput::Elements(1));

    // The floor: one cache line, written alternately by the two cores.
    {
        let line = Arc::new(Line(AtomicU64::new(0)));
        let l2 = line.clone();
        let _peer = Peer::spawn(move |stop| {
            let mut seen = 0;
            while !stop.load(Ordering::Relaxed) {
                let v = l2.0.load(Ordering::Acquire);
                if v != seen && v % 2 == 1 {
                    l2.0.store(v + 1, Ordering::Release);
                    seen = v + 1;
                }
                idle();
            }
        });
        let mut v = 0u64;
        g.bench_function("floor_one_line", |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for _ in 0..iters {
                    line.0.store(v + 1, Ordering::Release);
                    while line.0.load(Ordering::Acquire) != v + 2 {
                        idle();
                    }
                    v += 2;
                }
                t.elapsed()
            })
        });
    }

    // ipc over /dev/shm: a region of depth 1 (one call in flight, the cell reused by
    // every call, as the floor reuses its line) and one of depth 64 (consecutive calls
    // walk the cells; see docs/PERFORMANCE.md for what that costs).
    for (bench, depth) in [("ipc", 1), ("ipc_depth64", 64)] {
        let name = unique(bench);
        let cfg = ipc::Config {
            max_clients: 1,
            depth,
        };
        let mut server = IpcServer::<P, P>::create(&name, cfg, true).unwrap();
        let mut client = IpcClient::<P, P, u64>::connect(&name).unwrap();
        let _peer = Peer::spawn(move |stop| {
            while !stop.load(Ordering::Relaxed) {
                if server.poll() == 0 {
                    idle();
                    continue;
                }
                while let Some(h) = server.recv() {
                    let p = h.payload;
                    server.reply(h, &p).unwrap();
                }
            }
        });
        g.bench_function(bench, |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for i in 0..iters {
                    client.call(&[i, 0], i).unwrap();
                    while client.poll(|u, r| {
                        black_box((u, r));
                    }) == 0
                    {
                        idle();
                    }
                }
                t.elapsed()
            })
        });
    }

    // rtrb: a request ring and a response ring.
    {
        let (mut req_p, mut req_c) = rtrb::RingBuffer::<P>::new(64);
        let (mut resp_p, mut resp_c) = rtrb::RingBuffer::<P>::new(64);
        let _peer = Peer::spawn(move |stop| {
            while !stop.load(Ordering::Relaxed) {
                match req_c.pop() {
                    Ok(p) => resp_p.push(p).unwrap(),
                    Err(_) => idle(),
                }
            }
        });
        g.bench_function("rtrb", |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for i in 0..iters {
                    req_p.push([i, 0]).unwrap();
                    loop {
                        if let Ok(r) = resp_c.pop() {
                            black_box(r);
                            break;
                        }
                        idle();
                    }
                }
                t.elapsed()
            })
        });
    }

    // delegationrpc over /dev/shm, one client.
    {
        let name = unique("deleg-rtt");
        let (mut server, mut client) = deleg_pair(&name).unwrap();
        let _peer = Peer::spawn(move |stop| deleg_echo(&mut server, stop));
        g.bench_function("deleg", |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for i in 0..iters {
                    client.call(&[i, 0]).unwrap();
                    while client.poll(|s, r| {
                        black_box((s, r));
                    }) == 0
                    {
                        idle();
                    }
                }
                t.elapsed()
            })
        });
    }

    // Flux, two nodes.
    {
        let (mut a, mut bnode) = flux_pair();
        let _peer = Peer::spawn(move |stop| flux_echo(&mut bnode, stop));
        g.bench_function("flux", |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for i in 0..iters {
                    a.call(1, [i, 0], i).unwrap();
                    while a.poll(|u, r| {
                        black_box((u, r));
                    }) == 0
                    {
                        idle();
                    }
                }
                t.elapsed()
            })
        });
    }

    // crossbeam bounded channels, request and response.
    {
        let (req_tx, req_rx) = crossbeam_channel::bounded::<P>(64);
        let (resp_tx, resp_rx) = crossbeam_channel::bounded::<P>(64);
        let _peer = Peer::spawn(move |stop| {
            while !stop.load(Ordering::Relaxed) {
                match req_rx.try_recv() {
                    Ok(p) => resp_tx.send(p).unwrap(),
                    Err(_) => idle(),
                }
            }
        });
        g.bench_function("crossbeam_channel", |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for i in 0..iters {
                    req_tx.send([i, 0]).unwrap();
                    loop {
                        if let Ok(r) = resp_rx.try_recv() {
                            black_box(r);
                            break;
                        }
                        idle();
                    }
                }
                t.elapsed()
            })
        });
    }

    // crossbeam ArrayQueue pair.
    {
        let req = Arc::new(crossbeam_queue::ArrayQueue::<P>::new(64));
        let resp = Arc::new(crossbeam_queue::ArrayQueue::<P>::new(64));
        let (rq, rs) = (req.clone(), resp.clone());
        let _peer = Peer::spawn(move |stop| aq_echo(&rq, &rs, stop));
        g.bench_function("array_queue", |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for i in 0..iters {
                    req.push([i, 0]).unwrap();
                    loop {
                        if let Some(r) = resp.pop() {
                            black_box(r);
                            break;
                        }
                        idle();
                    }
                }
                t.elapsed()
            })
        });
    }
    g.finish();
}

fn deleg_echo(server: &mut DelegServer<P, P>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        if server.poll() > 0 {
            while let Some(e) = server.recv() {
                let p = e.payload;
                server.reply(e.token, &p).unwrap();
            }
            server.advance_tail();
        } else {
            idle();
        }
    }
}

fn aq_echo<T: Copy>(
    req: &crossbeam_queue::ArrayQueue<T>,
    resp: &crossbeam_queue::ArrayQueue<T>,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::Relaxed) {
        match req.pop() {
            Some(p) => {
                while resp.push(p).is_err() {
                    idle();
                }
            }
            None => idle(),
        }
    }
}

type FluxNode<T> = copyrpc_core::flux::Node<'static, 'static, T, u64>;

/// A `P` padded to one 64-byte cache line: the density delegationrpc's layout
/// imposes (one message per line), given to the baselines in `window32/*_line`.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct LineP(P);

/// Two Flux nodes over leaked memory (the bench process ends soon after).
fn flux_pair<T: Copy + Send>() -> (FluxNode<T>, FluxNode<T>) {
    const CAP: usize = 64;
    let slots = Mesh::<T>::slots_needed(2, CAP);
    let pairs: &'static [PairCtl] = Vec::leak((0..4).map(|_| PairCtl::new()).collect());
    let req: &'static [Slot<Msg<T>>] = Vec::leak((0..slots).map(|_| Slot::new()).collect());
    let resp: &'static [Slot<Msg<T>>] = Vec::leak((0..slots).map(|_| Slot::new()).collect());
    let nodes: &'static [NodeCtl] = Vec::leak((0..2).map(|_| NodeCtl::new()).collect());
    let mesh = Mesh::new(2, CAP, pairs, req, resp, nodes).unwrap();
    let slab = || Slab::new(Vec::leak((0..CAP).map(|_| SlabEntry::new()).collect()));
    (mesh.node(0, slab()).unwrap(), mesh.node(1, slab()).unwrap())
}

fn flux_echo<T: Copy + Send>(node: &mut FluxNode<T>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let mut any = false;
        while let Some(h) = node.try_recv() {
            let p = h.payload;
            node.reply(h, p).unwrap();
            any = true;
        }
        if !any {
            idle();
        }
    }
}

/// `window32/<name>`: an ArrayQueue pair carrying `msg(i)`.
fn window_array_queue<T: Copy + Send + 'static>(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    msg: fn(u64) -> T,
) {
    let req = Arc::new(crossbeam_queue::ArrayQueue::<T>::new(64));
    let resp = Arc::new(crossbeam_queue::ArrayQueue::<T>::new(64));
    let (rq, rs) = (req.clone(), resp.clone());
    let _peer = Peer::spawn(move |stop| aq_echo(&rq, &rs, stop));
    let mut queues = (req, resp);
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            window_run(
                iters,
                &mut queues,
                |(req, _), i| assert!(req.push(msg(i)).is_ok(), "the window fits the queue"),
                |(_, resp)| {
                    let mut n = 0;
                    while let Some(r) = resp.pop() {
                        black_box(r);
                        n += 1;
                    }
                    n
                },
            )
        })
    });
}

/// `window32/<name>`: two Flux nodes carrying `msg(i)`.
fn window_flux<T: Copy + Send + 'static>(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    msg: fn(u64) -> T,
) {
    let (mut a, mut bnode) = flux_pair::<T>();
    let _peer = Peer::spawn(move |stop| flux_echo(&mut bnode, stop));
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            window_run(
                iters,
                &mut a,
                |a, i| a.call(1, msg(i), i).unwrap(),
                |a| {
                    a.poll(|u, r| {
                        black_box((u, r));
                    }) as u64
                },
            )
        })
    });
}

/// One `window32` measurement over `iters` calls: keeps [`WINDOW`] calls in flight
/// (`call(s, i)` sends call `i`) and `drain(s)` takes every answer that has arrived,
/// returning how many; [`idle`] when none had.
fn window_run<S>(
    iters: u64,
    s: &mut S,
    call: impl Fn(&mut S, u64),
    drain: impl Fn(&mut S) -> u64,
) -> Duration {
    let t = Instant::now();
    let (mut sent, mut done) = (0u64, 0u64);
    while done < iters {
        while sent < iters && sent - done < WINDOW {
            call(s, sent);
            sent += 1;
        }
        let n = drain(s);
        done += n;
        if n == 0 {
            idle();
        }
    }
    t.elapsed()
}

fn window32(c: &mut Criterion) {
    let mut g = c.benchmark_group("window32");
    g.throughput(Throughput::Elements(1));

    {
        let name = unique("deleg-win");
        let (mut server, mut client) = deleg_pair(&name).unwrap();
        let _peer = Peer::spawn(move |stop| deleg_echo(&mut server, stop));
        g.bench_function("deleg", |b| {
            b.iter_custom(|iters| {
                window_run(
                    iters,
                    &mut client,
                    |c, i| {
                        c.call(&[i, 0]).unwrap();
                    },
                    |c| {
                        c.poll(|s, r| {
                            black_box((s, r));
                        }) as u64
                    },
                )
            })
        });
    }

    window_array_queue(&mut g, "array_queue", |i| [i, 0]);
    // The same queues with every message padded to its own cache line, as the delegationrpc
    // layout has it (docs/spec/deleg.md#layout): the comparison at equal density
    // (docs/PERFORMANCE.md).
    window_array_queue(&mut g, "array_queue_line", |i| LineP([i, 0]));

    window_flux(&mut g, "flux", |i| [i, 0]);
    window_flux(&mut g, "flux_line", |i| LineP([i, 0]));

    {
        let (req_tx, req_rx) = crossbeam_channel::bounded::<P>(64);
        let (resp_tx, resp_rx) = crossbeam_channel::bounded::<P>(64);
        let _peer = Peer::spawn(move |stop| {
            while !stop.load(Ordering::Relaxed) {
                let mut any = false;
                while let Ok(p) = req_rx.try_recv() {
                    resp_tx.send(p).unwrap();
                    any = true;
                }
                if !any {
                    idle();
                }
            }
        });
        let mut ends = (req_tx, resp_rx);
        g.bench_function("crossbeam_channel", |b| {
            b.iter_custom(|iters| {
                window_run(
                    iters,
                    &mut ends,
                    |(tx, _), i| tx.send([i, 0]).unwrap(),
                    |(_, rx)| {
                        let mut n = 0;
                        while let Ok(r) = rx.try_recv() {
                            black_box(r);
                            n += 1;
                        }
                        n
                    },
                )
            })
        });
    }

    {
        let name = unique("ipc-win");
        let cfg = ipc::Config {
            max_clients: 1,
            depth: 32,
        };
        let mut server = IpcServer::<P, P>::create(&name, cfg, true).unwrap();
        let mut client = IpcClient::<P, P, u64>::connect(&name).unwrap();
        let _peer = Peer::spawn(move |stop| {
            while !stop.load(Ordering::Relaxed) {
                if server.poll() == 0 {
                    idle();
                    continue;
                }
                while let Some(h) = server.recv() {
                    let p = h.payload;
                    server.reply(h, &p).unwrap();
                }
            }
        });
        g.bench_function("ipc", |b| {
            b.iter_custom(|iters| {
                window_run(
                    iters,
                    &mut client,
                    |c, i| {
                        c.call(&[i, 0], i).unwrap();
                    },
                    |c| {
                        c.poll(|u, r| {
                            black_box((u, r));
                        }) as u64
                    },
                )
            })
        });
    }

    {
        let (req_p, mut req_c) = rtrb::RingBuffer::<P>::new(64);
        let (mut resp_p, resp_c) = rtrb::RingBuffer::<P>::new(64);
        let _peer = Peer::spawn(move |stop| {
            while !stop.load(Ordering::Relaxed) {
                let mut any = false;
                while let Ok(p) = req_c.pop() {
                    while resp_p.push(p).is_err() {
                        idle();
                    }
                    any = true;
                }
                if !any {
                    idle();
                }
            }
        });
        let mut ends = (req_p, resp_c);
        g.bench_function("rtrb", |b| {
            b.iter_custom(|iters| {
                window_run(
                    iters,
                    &mut ends,
                    |(tx, _), i| tx.push([i, 0]).unwrap(),
                    |(_, rx)| {
                        let mut n = 0;
                        while let Ok(r) = rx.pop() {
                            black_box(r);
                            n += 1;
                        }
                        n
                    },
                )
            })
        });
    }
    g.finish();
}

fn config() -> Criterion {
    let usable = usable_cores().expect("sched_getaffinity");
    let (main_core, peer_core) = cores();
    pin_current_thread(main_core).expect("pin bench thread");
    println!(
        "shm benches: bench thread pinned to cpu {main_core}, peer thread to cpu {peer_core} \
         (usable: {usable:?})"
    );
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
}

criterion_group! {
    name = benches;
    config = config();
    targets = rtt, window32
}
criterion_main!(benches);
