//! `mpirun -np 2 copyrpc-bulk [--fabric auto|sim|verbs] [--device NAME] [--port N]
//! [--gid-index auto|N] [--tclass N] [--sl N] [--pattern put|get|both|all]
//! [--sizes 1K,1M,10M] [--iters N] [--chunk BYTES] [--depth N] [--deadline-s S]`
//!
//! Bulk transfers (the patterns of docs/spec/bulk.md, `copyrpc_core::bulk`) between rank 0 (the
//! client) and rank 1 (the server): for each pattern and size, `iters` calls, each
//! checked (the server checks a PUT's bytes against the checksum the request carries;
//! the client checks what a GET or BOTH wrote into its buffer), and one progress line
//! with the bandwidth: `rank 0/2: put 10485760 B x 3: 812.4 MiB/s ok`. Each rank ends
//! with `rank r/2: ... ok`, or `rank r/2: FAIL <why>` and a non-zero exit.

mod common;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use copyrpc_core::bulk::{Client, Link, Pattern, Request, Server};
use copyrpc_core::ops::OpError;
use copyrpc_host::bulk::{BufferPool, PoolBuf};
use copyrpc_host::fabric::verbs::gid;
use copyrpc_host::fabric::{self, Fabric, FabricKind, FabricOptions, Qos};
use copyrpc_host::placement;
use copyrpc_host::rpc::{RpcConfig, RpcNode};

const USAGE: &str = "usage: mpirun -np 2 copyrpc-bulk [--fabric auto|sim|verbs] \
     [--device NAME] [--port N] [--gid-index auto|N] [--tclass 0..=255] [--sl 0..=15] \
     [--pattern put|get|both|all] [--sizes 1K,1M,10M] [--iters N] [--chunk BYTES] \
     [--depth N] [--deadline-s S]";

/// Slots of the server's mover: the most operations in flight.
const SLOTS: usize = 32;
type Node = RpcNode<u64, 1, 64, 512>;
/// The request that ends the server's loop (a header-only call carrying these bytes).
const STOP: &[u8] = b"STOP";

struct Args {
    kind: FabricKind,
    /// `--device`, `--port`, `--gid-index` (the verbs fabric's).
    verbs: copyrpc_host::fabric::verbs::VerbsOptions,
    /// `--tclass`, `--sl`.
    qos: Qos,
    patterns: Vec<Pattern>,
    sizes: Vec<usize>,
    iters: u32,
    chunk: u32,
    depth: u16,
    deadline: Duration,
}

fn size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let (num, mul) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: usize = num
        .parse()
        .map_err(|_| format!("size {text:?}: expected a number with an optional K, M or G"))?;
    match n.checked_mul(mul) {
        Some(b) if (1..=1 << 30).contains(&b) => Ok(b),
        _ => Err(format!("size {text:?}: expected 1 B ..= 1 GiB")),
    }
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Args>, String> {
    let mut a = Args {
        kind: FabricKind::Sim,
        verbs: Default::default(),
        qos: Qos::default(),
        patterns: vec![Pattern::Put, Pattern::Get, Pattern::Both],
        sizes: vec![1 << 10, 1 << 20, 10 << 20],
        iters: 3,
        chunk: 256 << 10,
        depth: 8,
        deadline: Duration::from_secs(60),
    };
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .ok_or(format!("{flag} needs a value (try --help)"))
        };
        match flag.as_str() {
            "--fabric" => a.kind = value()?.parse().map_err(|e| format!("--fabric: {e}"))?,
            "--pattern" => {
                a.patterns = match value()?.as_str() {
                    "put" => vec![Pattern::Put],
                    "get" => vec![Pattern::Get],
                    "both" => vec![Pattern::Both],
                    "all" => vec![Pattern::Put, Pattern::Get, Pattern::Both],
                    p => return Err(format!("--pattern {p:?}: expected put, get, both or all")),
                }
            }
            "--sizes" => {
                a.sizes = value()?
                    .split(',')
                    .map(size)
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("--sizes: {e}"))?;
            }
            "--iters" => {
                a.iters = value()?
                    .parse()
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or("--iters: expected a whole number >= 1")?
            }
            "--chunk" => {
                a.chunk = u32::try_from(size(&value()?).map_err(|e| format!("--chunk: {e}"))?)
                    .ok()
                    .filter(|&c| c < 1 << 31)
                    .ok_or("--chunk: expected 1 B ..< 2 GiB")?
            }
            "--depth" => {
                a.depth = value()?
                    .parse()
                    .ok()
                    .filter(|&d| (1..=SLOTS as u16).contains(&d))
                    .ok_or(format!("--depth: expected 1..={SLOTS}"))?
            }
            "--deadline-s" => {
                let s: u64 = value()?
                    .parse()
                    .ok()
                    .filter(|&s| (1..=3600).contains(&s))
                    .ok_or("--deadline-s: expected 1..=3600 seconds")?;
                a.deadline = Duration::from_secs(s);
            }
            "--device" => {
                let d = value()?;
                if d.is_empty() || d.contains('/') {
                    return Err(format!(
                        "--device {d:?}: expected an RDMA device name (ibv_devices)"
                    ));
                }
                a.verbs.device = Some(d);
            }
            "--port" => {
                a.verbs.port = value()?
                    .parse()
                    .ok()
                    .filter(|&p| p >= 1)
                    .ok_or("--port: expected 1..=255 (ibv_devinfo lists the ports)")?
            }
            "--gid-index" => {
                let v = value()?;
                a.verbs.gid_index = match v.as_str() {
                    "auto" => None,
                    n => Some(
                        n.parse()
                            .map_err(|_| "--gid-index: expected auto or 0..=255 (show_gids)")?,
                    ),
                }
            }
            "--tclass" => {
                a.qos.traffic_class = value()?
                    .parse()
                    .map_err(|_| "--tclass: expected a traffic class 0..=255")?
            }
            "--sl" => {
                a.qos.sl = value()?
                    .parse()
                    .ok()
                    .filter(|&l| l <= Qos::MAX_SL)
                    .ok_or("--sl: expected a service level 0..=15")?
            }
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    if a.kind == FabricKind::Sim && a.verbs.device.is_some() {
        return Err("--device names an RDMA device, which --fabric sim does not use".into());
    }
    if a.kind != FabricKind::Sim {
        gid::check_flags(
            &gid::sysfs_root(),
            a.verbs.device.as_deref(),
            a.verbs.port,
            a.verbs.gid_index,
        )?;
    }
    Ok(Some(a))
}

/// FNV-1a.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The server's data for a GET of `len` bytes, byte `i` of it.
fn get_byte(len: usize, i: usize) -> u8 {
    (i.wrapping_mul(13) ^ len) as u8
}

/// The bytes of a pool buffer.
///
/// # Safety
///
/// No operation targets the buffer while the slice lives.
unsafe fn bytes<'a>(pool: &'a mut BufferPool, b: &PoolBuf, len: usize) -> &'a mut [u8] {
    // SAFETY: the buffer is `buf_bytes` long inside the pool's mapping; the caller
    // guarantees the device is not using it.
    unsafe { std::slice::from_raw_parts_mut(pool.ptr(b), len.min(pool.buf_bytes())) }
}

fn client(node: &mut Node, a: &Args, max: usize) -> Result<String, String> {
    let fabric_pool =
        |name| BufferPool::new(node.fabric(), name, 1, max).map_err(|e| e.to_string());
    let (mut putp, mut getp) = (
        fabric_pool("bulk-client-put")?,
        fabric_pool("bulk-client-get")?,
    );
    let (pb, gb) = (
        putp.lease().expect("one buffer"),
        getp.lease().expect("one buffer"),
    );
    let ep = node.endpoint(1).ok_or("no endpoint to rank 1")?;
    let mut c = Client::<4>::new();
    let mut calls = 0u64;
    let mut call = |node: &mut Node, pat, put, get, extra: &[u8]| -> Result<u64, String> {
        let deadline = Instant::now() + a.deadline;
        let op = loop {
            match c.call(node.ctx(), ep, pat, put, get, extra) {
                Ok(op) => break op,
                Err(copyrpc_core::bulk::BulkError::Call(
                    copyrpc_core::copyrpc::Error::RingFull
                    | copyrpc_core::copyrpc::Error::InsufficientCredit,
                )) if Instant::now() < deadline => {
                    node.ctx().poll(|_, _| {});
                }
                Err(e) => return Err(format!("{pat:?} call: {e:?}")),
            }
        };
        while !c.ops().is_done(op) {
            let cref = &c;
            let handled = node.ctx().poll(|ud, r| {
                cref.on_response(ud, r);
            });
            // On a shared core the device model's engine threads need the CPU to move
            // the bytes: give it up when there was nothing to do (as the echo does).
            if handled == 0 {
                std::thread::yield_now();
            }
            if Instant::now() > deadline {
                c.cancel_all();
                return Err(format!(
                    "{pat:?}: no reply from rank 1 within {:?} (--deadline-s: one \
                     transfer of a large size on the sim fabric can take longer)",
                    a.deadline
                ));
            }
        }
        calls += 1;
        c.ops()
            .result(op)
            .unwrap_or(Err(OpError::Gone))
            .map_err(|e| format!("{pat:?}: {e:?}"))
    };
    for &pat in &a.patterns {
        for &n in &a.sizes {
            // SAFETY: no call is in flight: nothing targets the client's buffers.
            let put = unsafe { bytes(&mut putp, &pb, n) };
            for (i, b) in put.iter_mut().enumerate() {
                *b = (i.wrapping_mul(7) ^ n.wrapping_mul(31)) as u8;
            }
            let sum = checksum(put);
            let want_get: Vec<u8> = match pat {
                Pattern::Both => put.iter().map(|b| b ^ 0x5a).collect(),
                _ => (0..n).map(|i| get_byte(n, i)).collect(),
            };
            let pd = pat.pulls().then(|| putp.desc(&pb, n as u64)).transpose();
            let gd = pat.pushes().then(|| getp.desc(&gb, n as u64)).transpose();
            let (pd, gd) = (
                pd.map_err(|e| format!("{e:?}"))?,
                gd.map_err(|e| format!("{e:?}"))?,
            );
            let t0 = Instant::now();
            for _ in 0..a.iters {
                // SAFETY: as above.
                unsafe { bytes(&mut getp, &gb, n) }.fill(0);
                let got = call(node, pat, pd, gd, &sum.to_le_bytes())?;
                if got != n as u64 {
                    return Err(format!("{pat:?} {n} B: the reply says {got} B"));
                }
                if pat.pushes() {
                    // SAFETY: the call ended: the server's WRITEs landed before its reply.
                    let g = unsafe { bytes(&mut getp, &gb, n) };
                    if checksum(g) != checksum(&want_get) {
                        return Err(format!("{pat:?} {n} B: wrong bytes in the get buffer"));
                    }
                }
            }
            let s = t0.elapsed().as_secs_f64();
            let moved =
                (n as f64) * f64::from(a.iters) * if pat == Pattern::Both { 2.0 } else { 1.0 };
            let line = format!(
                "rank 0/2: {} {n} B x {}: {:.3} MiB/s ok",
                format!("{pat:?}").to_lowercase(),
                a.iters,
                moved / s / f64::from(1 << 20)
            );
            println!("{line}");
        }
    }
    call(node, Pattern::HeaderOnly, None, None, STOP)?;
    putp.release(pb);
    getp.release(gb);
    Ok(format!("calls={calls}"))
}

fn server(node: &mut Node, a: &Args, max: usize) -> Result<String, String> {
    let fabric_pool =
        |name| BufferPool::new(node.fabric(), name, 1, max).map_err(|e| e.to_string());
    let (mut putp, mut getp) = (
        fabric_pool("bulk-server-put")?,
        fabric_pool("bulk-server-get")?,
    );
    let (pb, gb) = (
        putp.lease().expect("one buffer"),
        getp.lease().expect("one buffer"),
    );
    let ep = node.endpoint(0).ok_or("no endpoint to rank 0")?;
    let link = Link::new(node.ctx(), ep);
    let mut s = Server::<4, SLOTS>::new(link, a.chunk, a.depth).map_err(|e| format!("{e:?}"))?;
    let (mut served, mut stop, mut bad) = (0u64, false, None);
    let mut sum = None;
    let mut filled_for = 0usize;
    let mut last = Instant::now();
    loop {
        let mut progressed = node.ctx().poll(|_, _| {}) > 0;
        while let Some(h) = node.ctx().recv() {
            progressed = true;
            last = Instant::now();
            let Some((req, extra)) = Request::parse(h.data(node.ctx())) else {
                // SAFETY: no buffer is named: nothing is posted.
                let _ = unsafe { s.accept(node.ctx(), h, None, None) };
                continue;
            };
            stop |= req.pattern == Pattern::HeaderOnly && extra == STOP;
            // The client's checksum of a PUT's bytes: the request's caller bytes, read
            // now (the ring copy is gone once the request is answered).
            sum = extra
                .get(..8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
            let put = req
                .pattern
                .pulls()
                .then(|| putp.local(&pb, req.put.len).ok())
                .flatten();
            let get = req
                .pattern
                .pushes()
                .then(|| getp.local(&gb, req.get.len).ok())
                .flatten();
            if req.pattern == Pattern::Get && filled_for != req.get.len as usize {
                let n = req.get.len as usize;
                // SAFETY: one request at a time (the client waits for each reply), so
                // no operation targets the get buffer now.
                let g = unsafe { bytes(&mut getp, &gb, n) };
                for (i, b) in g.iter_mut().enumerate() {
                    *b = get_byte(n, i);
                }
                filled_for = n;
            }
            // SAFETY: the pool buffers serve one request at a time and are touched only
            // between `next_ready` and `respond`.
            if let Err(e) = unsafe { s.accept(node.ctx(), h, put, get) } {
                bad.get_or_insert(format!("refused a {:?} request: {e:?}", req.pattern));
            }
        }
        s.progress(node.ctx());
        while let Some((id, req)) = s.next_ready() {
            let n = req.put.len as usize;
            if req.pattern.pulls() {
                // SAFETY: the READs of this request completed (`next_ready`).
                let p = unsafe { bytes(&mut putp, &pb, n) };
                if Some(checksum(p)) != sum {
                    bad.get_or_insert(format!(
                        "{:?} {n} B: the pulled bytes' checksum differs",
                        req.pattern
                    ));
                }
                if req.pattern == Pattern::Both {
                    // SAFETY: as above, and the get buffer is not in use before `respond`.
                    let g = unsafe { bytes(&mut getp, &gb, n) };
                    for (o, i) in g.iter_mut().zip(p.iter()) {
                        *o = i ^ 0x5a;
                    }
                    filled_for = 0;
                }
            }
            s.respond(node.ctx(), id, req.get.len)
                .map_err(|e| format!("{e:?}"))?;
            served += 1;
            progressed = true;
        }
        if !progressed {
            std::thread::yield_now();
        }
        if stop && s.idle() {
            node.flush_all(Instant::now() + a.deadline, |_, _| {})
                .map_err(|e| e.to_string())?;
            break;
        }
        if last.elapsed() > a.deadline {
            // The client gives up on a call at the same bound: a transfer still running
            // then has no one waiting for it.
            return Err(if s.idle() {
                format!("no request from rank 0 for {:?}", a.deadline)
            } else {
                format!(
                    "a transfer still running {:?} after its request (--deadline-s)",
                    a.deadline
                )
            });
        }
    }
    putp.release(pb);
    getp.release(gb);
    match bad {
        Some(b) => Err(b),
        None => Ok(format!("served={served}")),
    }
}

/// Each rank carves two pools of the largest size (put and get) from its sim region, on
/// top of the RPC node's queues and rings: the region's default leaves room for those,
/// and grows by the pools so that every size `--sizes` takes (up to 1 GiB) fits. The
/// region is sparse; `/dev/shm` is claimed only as the pools are carved.
fn fabric_options(a: &Args, max: usize) -> FabricOptions {
    let mut o = FabricOptions::default();
    o.sim.region_bytes += 2 * max.next_multiple_of(4096);
    o.verbs = a.verbs.clone();
    o
}

fn main() -> ExitCode {
    let a = match parse(std::env::args().skip(1)) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(why) => {
            eprintln!("copyrpc-bulk: {why}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let x = match common::init_mpi() {
        Ok(x) => x,
        Err(code) => return code,
    };
    let (r, n) = (x.rank(), x.size());
    let max = a.sizes.iter().copied().max().unwrap_or(1);
    let result = if n != 2 {
        Err(format!("needs exactly 2 ranks (mpirun -np 2), got {n}"))
    } else {
        fabric::open(a.kind, &fabric_options(&a, max))
            .map_err(|e| e.to_string())
            .and_then(|(f, sel)| {
                if r == 0 {
                    eprintln!("copyrpc-bulk: {}", sel.reason);
                }
                if let Fabric::Verbs(d) = &f {
                    eprintln!("copyrpc-bulk: rank {r}/{n}: {}", d.describe());
                    // This thread creates and first touches the rings and queues, and
                    // polls them: on the NIC's node.
                    if let Some(node) = d.numa_node() {
                        match placement::bind_current_thread(node) {
                            Ok(p) => eprintln!(
                                "copyrpc-bulk: rank {r}/{n}: on NUMA node {node} (cpus {:?})",
                                p.cpus
                            ),
                            Err(e) => eprintln!("copyrpc-bulk: rank {r}/{n}: not placed: {e}"),
                        }
                    }
                }
                let cfg = RpcConfig {
                    qos: a.qos,
                    ..RpcConfig::default()
                };
                Node::establish(f, &x, &cfg).map_err(|e| e.to_string())
            })
            .and_then(|mut node| {
                let out = if r == 0 {
                    client(&mut node, &a, max)
                } else {
                    server(&mut node, &a, max)
                };
                // Said now: the barrier below waits for the other rank, which may be
                // the reason this one failed.
                if let Err(why) = &out {
                    eprintln!("copyrpc-bulk: rank {r}/{n}: {why}; waiting for the other rank");
                }
                // Neither side drops its node (and with it the QP the other may still be
                // answering on) before both are done.
                x.barrier().map_err(|e| e.to_string())?;
                out
            })
    };
    match result {
        Ok(s) => {
            println!("rank {r}/{n}: {s} ok");
            ExitCode::SUCCESS
        }
        Err(why) => {
            println!("rank {r}/{n}: FAIL {why}");
            ExitCode::FAILURE
        }
    }
}
