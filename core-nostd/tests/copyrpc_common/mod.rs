//! Two copyrpc contexts on one software mlx5 device, their endpoints connected pairwise,
//! stepped deterministically: the rig every copyrpc integration test drives.

#![allow(dead_code)]

// The device-memory buffers and data patterns of mlx5-raw's tests.
#[path = "../../../mlx5-raw/tests/common/mod.rs"]
mod dma;

// Not every test of the crate uses every item.
#[allow(unused_imports)]
pub use dma::{pattern, DmaBuf};

use copyrpc_core::copyrpc::{
    send_cq_entries, CallError, Context, EndpointConfig, EndpointId, EndpointMem, Error, Queues,
    Region,
};
use mlx5_raw::sim::{
    format_link, link_bytes, Access, CqMem, Device, DeviceConfig, LinkConfig, LinkDesc, MrKeys, Pd,
    QpAttr, SqMem, SrqMem,
};

/// Room for `Q / 2` endpoints a side (64 by default).
pub type Dev<const Q: usize = 130> = Device<Q, 4, 2, 8>;

/// Rig settings.
#[derive(Clone, Copy)]
pub struct Opts {
    pub endpoints: usize,
    pub ring: usize,
    pub sq_wqe_cnt: u32,
    pub srq_wqe_cnt: u32,
    pub cfg: EndpointConfig,
    /// Acknowledgement timeout (ns) and retries of every QP: small, so faults surface
    /// within a few hundred steps.
    pub ack_timeout_ns: u64,
    pub retry_cnt: u8,
    pub link: LinkConfig,
    /// Packets in flight per link direction, and the link MTU.
    pub link_slots: u32,
    pub mtu: u32,
    pub budget: u32,
    /// Nanoseconds per step.
    pub tick: u64,
    /// Whether `Pair::new` connects the contexts' endpoints (the QPs are connected
    /// either way): false for tests of `Context::connect` itself.
    pub connect: bool,
    /// Entries of each side's send CQ; `None`: the host's sizing,
    /// [`send_cq_entries`](copyrpc_core::copyrpc::send_cq_entries).
    pub send_cqes: Option<u32>,
    /// Whether `a`'s first QP is left out of its context, as a bare send queue
    /// (`Pair::raw_a`) for operations copyrpc never posts (a SEND): for tests of how
    /// `b` takes them.
    pub raw_a0: bool,
    /// Likewise `b`'s first QP (`Pair::raw_b`): on `b`'s SRQ and CQs but none of its
    /// endpoints, for tests of completions `b`'s context cannot place.
    pub raw_b0: bool,
}

impl Opts {
    pub fn new(endpoints: usize, ring: usize) -> Self {
        let mut cfg = EndpointConfig::for_ring(ring as u64);
        cfg.probe_interval = 64;
        Self {
            endpoints,
            ring,
            sq_wqe_cnt: 64,
            srq_wqe_cnt: 256,
            cfg,
            ack_timeout_ns: 40_000,
            retry_cnt: 2,
            link: LinkConfig {
                latency_ns: 2_000,
                bandwidth_bytes_per_s: 0,
                packet_ns: 0,
                ack_ns: 0,
            },
            link_slots: 16,
            mtu: 1024,
            budget: 32,
            tick: 1_000,
            connect: true,
            send_cqes: None,
            raw_a0: false,
            raw_b0: false,
        }
    }
}

/// One context and the memory behind it.
pub struct Side<const E: usize, const C: usize, const R: usize> {
    pub ctx: Box<Context<u64, E, C, R>>,
    pub eps: Vec<EndpointId>,
    pub qpns: Vec<u32>,
    pub keys: MrKeys,
    /// The registered region: per endpoint send ring, recv ring, control; then a
    /// scratch area for raw READ/WRITE tests.
    pub data: DmaBuf,
    pub scratch_off: usize,
    /// The recv CQ's number, to watch completions arrive (`Dev::cq_info`).
    pub recv_cqn: u32,
    /// The send CQ's number (`Dev::cq_info`: its overrun flag).
    pub send_cqn: u32,
    /// The SRQ's number, to see what the device holds of it (`Dev::srq_info`).
    pub srqn: u32,
    _queues: Vec<DmaBuf>,
}

impl<const E: usize, const C: usize, const R: usize> Side<E, C, R> {
    /// A region of the registered memory, for raw operations.
    pub fn scratch(&self, off: usize) -> u64 {
        self.keys.va + (self.scratch_off + off) as u64
    }

    pub fn scratch_ptr(&self, off: usize) -> *mut u8 {
        self.data.at(self.scratch_off + off)
    }
}

pub const SCRATCH: usize = 8192;

fn side<const E: usize, const C: usize, const R: usize, const Q: usize>(
    dev: &mut Dev<Q>,
    pd: Pd,
    o: &Opts,
) -> (Side<E, C, R>, Vec<mlx5_raw::SqDesc>) {
    let per_ep = 2 * o.ring + 64;
    let data = DmaBuf::new(o.endpoints * per_ep + SCRATCH);
    let cqe_send = o
        .send_cqes
        .unwrap_or(send_cq_entries(o.endpoints as u32, o.sq_wqe_cnt));
    let cqe_recv = (o.srq_wqe_cnt * 2).next_power_of_two();
    let scq = DmaBuf::new(cqe_send as usize * 64);
    let rcq = DmaBuf::new(cqe_recv as usize * 64);
    let srq = DmaBuf::new(o.srq_wqe_cnt as usize * 64);
    let sqs = DmaBuf::new(o.endpoints * o.sq_wqe_cnt as usize * 64);
    let dbrecs = DmaBuf::new(64 + o.endpoints * 8);
    // SAFETY: every buffer lives in the returned `Side`, which the rig drops after the
    // device and the context (field order), and is used only by them.
    unsafe {
        let keys = dev.reg_mr(pd, data.ptr(), data.len(), Access::ALL).unwrap();
        let scqd = dev
            .create_cq(CqMem {
                buf: scq.ptr(),
                cqe_cnt: cqe_send,
                cqe_size: 64,
                dbrec: dbrecs.at(0).cast(),
            })
            .unwrap();
        let rcqd = dev
            .create_cq(CqMem {
                buf: rcq.ptr(),
                cqe_cnt: cqe_recv,
                cqe_size: 64,
                dbrec: dbrecs.at(8).cast(),
            })
            .unwrap();
        let srqd = dev
            .create_srq(
                pd,
                SrqMem {
                    buf: srq.ptr(),
                    wqe_cnt: o.srq_wqe_cnt,
                    stride: 64,
                    dbrec: dbrecs.at(16).cast(),
                },
            )
            .unwrap();
        // Built in place on the heap (the context can be MiBs: see copyrpc_rules'
        // small-stack test).
        let mut ctx = Box::<Context<u64, E, C, R>>::new_uninit();
        Context::init(
            &mut ctx,
            &Queues {
                srq: srqd,
                srq_lkey: keys.lkey,
                send_cq: scqd,
                recv_cq: rcqd,
            },
        )
        .unwrap();
        let ctx = ctx.assume_init();
        let mut sqds = Vec::new();
        for i in 0..o.endpoints {
            let mut attr = QpAttr::new(scqd.cqn, rcqd.cqn, Some(srqd.srqn));
            attr.ack_timeout_ns = o.ack_timeout_ns;
            attr.retry_cnt = o.retry_cnt;
            sqds.push(
                dev.create_qp(
                    pd,
                    attr,
                    SqMem {
                        buf: sqs.at(i * o.sq_wqe_cnt as usize * 64),
                        wqe_cnt: o.sq_wqe_cnt,
                        dbrec: dbrecs.at(64 + i * 8).cast(),
                        uar: std::ptr::null_mut(),
                    },
                )
                .unwrap(),
            );
        }
        let side = Side {
            ctx,
            eps: Vec::new(),
            qpns: sqds.iter().map(|d| d.qpn).collect(),
            keys,
            scratch_off: o.endpoints * per_ep,
            recv_cqn: rcqd.cqn,
            send_cqn: scqd.cqn,
            srqn: srqd.srqn,
            data,
            _queues: vec![scq, rcq, srq, sqs, dbrecs],
        };
        (side, sqds)
    }
}

fn region(data: &DmaBuf, keys: MrKeys, off: usize, len: usize) -> Region {
    Region {
        addr: data.at(off),
        len,
        va: keys.va + off as u64,
        lkey: keys.lkey,
        rkey: keys.rkey,
    }
}

/// Two contexts, `a` (usually the caller) and `b`, with endpoint `i` of one connected to
/// endpoint `i` of the other, on a device of `Q` QPs.
pub struct Pair<const E: usize, const C: usize, const R: usize, const Q: usize = 130> {
    /// `a`'s first QP as a bare send queue, with `Opts::raw_a0` (`a.eps` then starts
    /// at the second).
    pub raw_a: Option<mlx5_raw::Sq>,
    /// `b`'s first QP as a bare send queue, with `Opts::raw_b0`.
    pub raw_b: Option<mlx5_raw::Sq>,
    pub dev: Box<Dev<Q>>,
    /// The protection domain of both sides, for tests that register more memory.
    pub pd: Pd,
    pub a: Side<E, C, R>,
    pub b: Side<E, C, R>,
    pub now: u64,
    pub tick: u64,
    pub steps: u64,
    _links: DmaBuf,
}

impl<const E: usize, const C: usize, const R: usize, const Q: usize> Pair<E, C, R, Q> {
    pub fn new(o: Opts) -> Self {
        let mut dev = Box::new(Dev::<Q>::new(DeviceConfig {
            budget: o.budget,
            ..DeviceConfig::DEFAULT
        }));
        let pd = dev.alloc_pd();
        let (mut a, sqa) = side::<E, C, R, Q>(&mut dev, pd, &o);
        let (mut b, sqb) = side::<E, C, R, Q>(&mut dev, pd, &o);
        let (slots, mtu) = (o.link_slots, o.mtu);
        let lb = link_bytes(slots, mtu);
        let links = DmaBuf::new(2 * lb * o.endpoints);
        let per_ep = 2 * o.ring + 64;
        let mut raw_a = None;
        let mut raw_b = None;
        for i in 0..o.endpoints {
            let ab = LinkDesc {
                base: links.at(2 * i * lb),
                len: lb,
            };
            let ba = LinkDesc {
                base: links.at((2 * i + 1) * lb),
                len: lb,
            };
            // SAFETY: link memory lives in the pair, used only by these two QPs.
            unsafe {
                format_link(&ab, slots, mtu).unwrap();
                format_link(&ba, slots, mtu).unwrap();
                dev.connect_pair(sqa[i].qpn, sqb[i].qpn, ab, ba, o.link)
                    .unwrap();
            }
            let (ra, rb) = (o.raw_a0 && i == 0, o.raw_b0 && i == 0);
            for (raw, sqd, out) in [(ra, &sqa[i], &mut raw_a), (rb, &sqb[i], &mut raw_b)] {
                if raw {
                    // SAFETY: the QP is fresh and given to nothing else (no endpoint is
                    // made of it); its queue and doorbell memory live in its side, which
                    // the pair drops after `raw_a` / `raw_b` (field order); the UAR is
                    // null (the device model).
                    let sq = unsafe { mlx5_raw::Sq::new(sqd, mlx5_raw::SqConfig::COPYRPC) };
                    *out = Some(sq.unwrap());
                }
            }
            let both = [(ra, &mut a, &sqa[i]), (rb, &mut b, &sqb[i])];
            for (_, s, sqd) in both.into_iter().filter(|(raw, _, _)| !raw) {
                let base = i * per_ep;
                let mem = EndpointMem {
                    send_ring: region(&s.data, s.keys, base, o.ring),
                    recv_ring: region(&s.data, s.keys, base + o.ring, o.ring),
                    control: region(&s.data, s.keys, base + 2 * o.ring, 64),
                };
                // SAFETY: the QP is fresh and the regions are registered, disjoint, and
                // live as long as the side.
                let ep = unsafe { s.ctx.create_endpoint(sqd, &mem, o.cfg) }.unwrap();
                s.eps.push(ep);
            }
        }
        let raw0 = o.raw_a0 || o.raw_b0;
        for i in (0..o.endpoints).filter(|&i| o.connect && !(raw0 && i == 0)) {
            let ea = a.eps[i - usize::from(o.raw_a0)];
            let eb = b.eps[i - usize::from(o.raw_b0)];
            let ia = a.ctx.local_info(ea).unwrap();
            let ib = b.ctx.local_info(eb).unwrap();
            a.ctx.connect(ea, &ib).unwrap();
            b.ctx.connect(eb, &ia).unwrap();
        }
        Self {
            raw_a,
            raw_b,
            dev,
            pd,
            a,
            b,
            now: 0,
            tick: o.tick,
            steps: 0,
            _links: links,
        }
    }

    pub fn step(&mut self) {
        self.dev.step(self.now);
        self.now += self.tick;
        self.steps += 1;
    }

    /// QP states, for failure messages.
    pub fn dump(&self) -> String {
        let mut s = String::new();
        for q in self.dev.qp_infos() {
            s.push_str(&format!("{q}\n"));
        }
        s
    }
}

/// Answers every queued request of `ctx` by echoing its payload (cut to the request's
/// allowance); returns how many.
pub fn serve_echo<const E: usize, const C: usize, const R: usize>(
    ctx: &mut Context<u64, E, C, R>,
) -> usize {
    let mut n = 0;
    while let Some(h) = ctx.recv() {
        let len = h.data(ctx).len().min(h.max_reply_len(ctx));
        h.reply_with(ctx, len, |req, out| out.copy_from_slice(&req[..out.len()]))
            .expect("echo fits the allowance");
        n += 1;
    }
    n
}

/// A small deterministic RNG.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Runs `f` on a thread with a large stack (the device model is a big value built
/// before it is boxed; the contexts are built in place).
pub fn big_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap();
}

/// `Err` of a call as (error, user data).
pub fn call_err(e: CallError<u64>) -> (Error, u64) {
    (e.error, e.user_data)
}
