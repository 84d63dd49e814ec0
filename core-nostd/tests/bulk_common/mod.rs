//! The bulk rig: copyrpc's two-context pair (`a` the client, `b` the server) plus a
//! registered put and get area on each side, cut into `lanes` equal lanes so that
//! several requests can be in flight without sharing a byte.

#![allow(dead_code, unsafe_code)]

#[path = "../copyrpc_common/mod.rs"]
pub mod copyrpc_common;

use copyrpc_common::{DmaBuf, Opts, Pair};
use copyrpc_core::bulk::{Client, Desc, Link, Pattern, Regions, RegisteredRange, Server};
use copyrpc_core::ops::{OpError, OpHandle};
use mlx5_raw::sim::{Access, MrKeys};

#[allow(unused_imports)]
pub use copyrpc_common::{big_stack, pattern, Rng};

pub type P = Pair<1, 64, 128>;

/// One registered area.
pub struct Area {
    pub buf: DmaBuf,
    pub keys: MrKeys,
}

impl Area {
    fn new(p: &mut P, len: usize) -> Self {
        let buf = DmaBuf::new(len);
        // SAFETY: the buffer lives in the rig, which drops the device first (field
        // order of `Bulk`: `p` before the areas), and is touched by tests only when no
        // operation targets it.
        let keys = unsafe { p.dev.reg_mr(p.pd, buf.ptr(), buf.len(), Access::ALL) }.unwrap();
        Self { buf, keys }
    }

    fn region(&self) -> RegisteredRange {
        RegisteredRange {
            va: self.keys.va,
            len: self.buf.len() as u64,
            lkey: self.keys.lkey,
            rkey: self.keys.rkey,
        }
    }
}

/// How a request went, seen from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    pub op: OpHandle,
    pub result: Result<u64, OpError>,
}

pub struct Bulk {
    pub p: P,
    pub client: Client<16>,
    pub server: Server<16, 16>,
    pub creg: Regions<4>,
    pub sreg: Regions<4>,
    pub cput: Area,
    pub cget: Area,
    pub sput: Area,
    pub sget: Area,
    pub lane: usize,
    /// Client responses handed to a pending call (each call's exactly once).
    pub responses: u64,
    /// Client responses that found their call already ended.
    pub late_responses: u64,
}

pub const CHUNK: u32 = 128 << 10;
pub const DEPTH: u16 = 8;

impl Bulk {
    pub fn new(lane: usize, lanes: usize) -> Self {
        // The sim fabric's link: 64 packets in flight, 4 KiB MTU.
        let mut o = Opts::new(1, 4096);
        o.link_slots = 64;
        o.mtu = 4096;
        let mut p: P = Pair::new(o);
        let len = lane * lanes;
        let cput = Area::new(&mut p, len);
        let cget = Area::new(&mut p, len);
        let sput = Area::new(&mut p, len);
        let sget = Area::new(&mut p, len);
        let mut creg = Regions::new();
        creg.add(cput.region()).unwrap();
        creg.add(cget.region()).unwrap();
        let mut sreg = Regions::new();
        sreg.add(sput.region()).unwrap();
        sreg.add(sget.region()).unwrap();
        let link = Link::new(&p.b.ctx, p.b.eps[0]);
        let server = Server::new(link, CHUNK, DEPTH).unwrap();
        Self {
            p,
            client: Client::new(),
            server,
            creg,
            sreg,
            cput,
            cget,
            sput,
            sget,
            lane,
            responses: 0,
            late_responses: 0,
        }
    }

    /// Descriptors of lane `k`'s first `put_len` / `get_len` bytes on the client.
    pub fn descs(&self, k: usize, put_len: u64, get_len: u64) -> (Option<Desc>, Option<Desc>) {
        let off = (k * self.lane) as u64;
        let d = |a: &Area, len: u64| {
            (len > 0).then(|| {
                self.creg
                    .describe(a.keys.rkey, a.keys.va + off, len)
                    .unwrap()
            })
        };
        (d(&self.cput, put_len), d(&self.cget, get_len))
    }

    /// Sends a request on lane `k`.
    pub fn call(
        &mut self,
        k: usize,
        pattern: Pattern,
        put_len: u64,
        get_len: u64,
    ) -> Result<OpHandle, copyrpc_core::bulk::BulkError> {
        let (put, get) = self.descs(k, put_len, get_len);
        let ep = self.p.a.eps[0];
        let lane = (k as u32).to_le_bytes();
        self.client
            .call(&mut self.p.a.ctx, ep, pattern, put, get, &lane)
    }

    /// One round: both contexts polled, new requests accepted, transfers run, ready
    /// requests handled by `handle(rig, lane, request)` (which returns the get length),
    /// one device step.
    pub fn round(
        &mut self,
        handle: &mut dyn FnMut(&Bulk, usize, &copyrpc_core::bulk::Request) -> u64,
    ) {
        let (client, mut ok, mut late) = (&self.client, 0, 0);
        self.p.a.ctx.poll(|ud, r| {
            if client.on_response(ud, r) {
                ok += 1;
            } else {
                late += 1;
            }
        });
        self.responses += ok;
        self.late_responses += late;
        self.p.b.ctx.poll(|_, _| {});
        while let Some(h) = self.p.b.ctx.recv() {
            let data = h.data(&self.p.b.ctx);
            let k = copyrpc_core::bulk::Request::parse(data)
                .and_then(|(_, extra)| extra.get(..4))
                .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()) as usize);
            let (put_len, get_len) = copyrpc_core::bulk::Request::parse(data)
                .map_or((0, 0), |(r, _)| (r.put.len, r.get.len));
            let off = (k * self.lane) as u64;
            let put = (put_len > 0)
                .then(|| {
                    self.sreg
                        .local(self.sput.keys.lkey, self.sput.keys.va + off, put_len)
                        .ok()
                })
                .flatten();
            let get = (get_len > 0)
                .then(|| {
                    self.sreg
                        .local(
                            self.sget.keys.lkey,
                            self.sget.keys.va + off,
                            self.lane as u64,
                        )
                        .ok()
                })
                .flatten();
            // SAFETY: lane `k` of the server's areas is used by this request only, and
            // the test touches it only between `next_ready` and `respond`.
            let _ = unsafe { self.server.accept(&mut self.p.b.ctx, h, put, get) };
        }
        self.server.progress(&mut self.p.b.ctx);
        while let Some((id, req)) = self.server.next_ready() {
            let k = lane_of(self, &req);
            let get_len = handle(self, k, &req);
            self.server.respond(&mut self.p.b.ctx, id, get_len).unwrap();
        }
        self.p.step();
    }

    /// Rounds until `done`, at most `max` of them; panics naming what it waited for.
    pub fn run_until(
        &mut self,
        what: &str,
        max: u64,
        handle: &mut dyn FnMut(&Bulk, usize, &copyrpc_core::bulk::Request) -> u64,
        mut done: impl FnMut(&Bulk) -> bool,
    ) {
        for _ in 0..max {
            if done(self) {
                return;
            }
            self.round(handle);
        }
        panic!("waited {max} rounds for {what}\n{}", self.p.dump());
    }
}

/// The lane a request's descriptors point into.
fn lane_of(b: &Bulk, req: &copyrpc_core::bulk::Request) -> usize {
    let d = if req.pattern.pulls() {
        req.put
    } else {
        req.get
    };
    if d.len == 0 {
        return 0;
    }
    let base = if req.pattern.pulls() {
        b.cput.keys.va
    } else {
        b.cget.keys.va
    };
    ((d.addr - base) / b.lane as u64) as usize
}

/// FNV-1a over `bytes`.
pub fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The standard handler: a PUT's data is left where it landed; a GET's data is lane
/// `k` of the server's get area as the test filled it; BOTH answers the put data with
/// every byte xor 0x5a. Returns the get length (the client's whole get buffer).
pub fn standard(b: &Bulk, k: usize, req: &copyrpc_core::bulk::Request) -> u64 {
    let off = k * b.lane;
    if req.pattern == Pattern::Both {
        let n = req.put.len.min(req.get.len) as usize;
        let mut v = b.sput.buf.read(off, n);
        v.iter_mut().for_each(|x| *x ^= 0x5a);
        b.sget.buf.write(off, &v);
    }
    req.get.len
}
