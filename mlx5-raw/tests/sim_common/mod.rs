//! A two-QP rig on the device model, driven through the driver side (`Sq`, `Cq`, `Srq`)
//! exactly as a program on a ConnectX would drive it.

#![allow(dead_code)]

use std::fmt::Write as _;

use mlx5_raw::layout::{Completion, DataSeg};
use mlx5_raw::sim::{
    format_link, link_bytes, Access, CqMem, Device, DeviceConfig, LinkConfig, LinkDesc, MrKeys,
    PacketDir, Pd, QpAttr, SqMem, SrqMem, Trace, TraceEvent, TraceKind,
};
use mlx5_raw::{Cq, Remote, Sge, Sq, SqConfig, Srq};
use zerocopy::IntoBytes;

// Not every test of the crate uses every item.
#[allow(unused_imports)]
pub use crate::common::pattern;
use crate::common::DmaBuf;

pub type Dev = Device<4, 8, 4, 32>;

/// Rig settings (applied to both sides unless `tweak` changes one).
#[derive(Clone, Copy)]
pub struct Opts {
    pub sq_wqe_cnt: u32,
    pub cqe_cnt: u32,
    pub cqe_size: u32,
    pub srq_wqe_cnt: u32,
    pub srq_stride: u32,
    pub mtu: u32,
    pub link_slots: u32,
    pub data_len: usize,
    pub sq_cfg: SqConfig,
    pub dev: DeviceConfig,
    pub link: LinkConfig,
    /// Give the QPs a UAR page (the driver then rings BlueFlame / 8-byte doorbells).
    pub uar: bool,
    /// Adjusts each side's QP attributes (`'a'` or `'b'`).
    pub tweak: fn(&mut QpAttr, char),
    /// Nanoseconds per step.
    pub tick: u64,
}

impl Opts {
    /// The default rig with a CQE only where a WQE asks for one (the fault tests'
    /// settings: unsignaled flushes are visible).
    pub fn signal_on_request() -> Self {
        Self {
            sq_cfg: SqConfig {
                signal_interval: 1000,
                ..SqConfig::COPYRPC
            },
            ..Self::default()
        }
    }

    /// These settings with 256-byte packets, room for 32 on each link, and a device
    /// that sends at most `budget` packets a QP a step (the budget tests').
    pub fn paced(self, budget: u32) -> Self {
        Self {
            mtu: 256,
            link_slots: 32,
            dev: DeviceConfig { budget, ..self.dev },
            ..self
        }
    }
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            sq_wqe_cnt: 64,
            cqe_cnt: 64,
            cqe_size: 64,
            srq_wqe_cnt: 16,
            srq_stride: 64,
            mtu: 1024,
            link_slots: 16,
            data_len: 1 << 16,
            sq_cfg: SqConfig::COPYRPC,
            dev: DeviceConfig::DEFAULT,
            link: LinkConfig::default(),
            uar: false,
            tweak: |_, _| {},
            tick: 1_000,
        }
    }
}

/// One end: its driver objects and memory.
pub struct Side {
    pub sq: Sq,
    pub scq: Cq,
    pub rcq: Cq,
    pub srq: Srq,
    pub qpn: u32,
    pub scqn: u32,
    pub rcqn: u32,
    pub srqn: u32,
    pub keys: MrKeys,
    pub srq_stride: u32,
    /// The registered data region.
    pub data: DmaBuf,
    pub srq_buf: DmaBuf,
    pub sq_buf: DmaBuf,
    pub scq_buf: DmaBuf,
    pub rcq_buf: DmaBuf,
    pub uar: DmaBuf,
    dbrecs: DmaBuf,
}

impl Side {
    /// A remote address `off` bytes into this side's data region.
    pub fn remote(&self, off: u64) -> Remote {
        Remote {
            addr: self.keys.va + off,
            rkey: self.keys.rkey,
        }
    }

    /// A gather/scatter entry over this side's data region.
    pub fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.keys.va + off,
            len,
            lkey: self.keys.lkey,
        }
    }

    /// Polls every CQE of the send CQ.
    pub fn poll_send(&mut self) -> Vec<Completion> {
        poll_all(&mut self.scq)
    }

    /// Polls every CQE of the recv CQ.
    pub fn poll_recv(&mut self) -> Vec<Completion> {
        poll_all(&mut self.rcq)
    }

    /// Posts one receive WQE scattering into `sges` (written in SRQ memory as
    /// `mlx5_post_srq_recv` does, terminator included), and rings the doorbell.
    pub fn post_recv_sges(&mut self, sges: &[Sge]) -> u16 {
        let idx = self.srq.post().expect("SRQ full");
        let base = usize::from(idx) * self.srq_stride as usize + 16;
        let max_gs = (self.srq_stride as usize - 16) / 16;
        assert!(sges.len() <= max_gs);
        for (i, s) in sges.iter().enumerate() {
            self.srq_buf.write(
                base + i * 16,
                DataSeg::new(s.len, s.lkey, s.addr).as_bytes(),
            );
        }
        if sges.len() < max_gs {
            self.srq_buf
                .write(base + sges.len() * 16, DataSeg::TERMINATOR.as_bytes());
        }
        self.srq.ring_doorbell();
        idx
    }
}

pub fn poll_all(cq: &mut Cq) -> Vec<Completion> {
    let mut v = Vec::new();
    while let Some(c) = cq.poll() {
        v.push(c.decode().expect("decodable CQE"));
    }
    cq.update_ci();
    v
}

/// Two QPs, `a` and `b`, connected to each other on one device.
pub struct Rig {
    pub dev: Box<Dev>,
    pub a: Side,
    pub b: Side,
    pub pd: Pd,
    pub now: u64,
    pub tick: u64,
    pub trace: Trace<Vec<TraceEvent>>,
    /// Send / recv completions polled by `run_until_*` helpers but not yet taken.
    pub a_send: Vec<Completion>,
    pub b_send: Vec<Completion>,
    pub a_recv: Vec<Completion>,
    pub b_recv: Vec<Completion>,
    _links: DmaBuf,
}

fn side(dev: &mut Dev, pd: Pd, o: &Opts, which: char) -> Side {
    let data = DmaBuf::new(o.data_len);
    let sq_buf = DmaBuf::new(o.sq_wqe_cnt as usize * 64);
    let scq_buf = DmaBuf::new(o.cqe_cnt as usize * o.cqe_size as usize);
    let rcq_buf = DmaBuf::new(o.cqe_cnt as usize * o.cqe_size as usize);
    let srq_buf = DmaBuf::new(o.srq_wqe_cnt as usize * o.srq_stride as usize);
    let uar = DmaBuf::new(8192);
    let dbrecs = DmaBuf::new(64);
    let uar_page = if o.uar {
        uar.ptr().wrapping_add(4096 - (uar.ptr().addr() % 4096))
    } else {
        std::ptr::null_mut()
    };
    // SAFETY: every buffer is owned by the returned `Side`, which the rig drops after
    // the device (field order), and is used only by the device and the driver objects.
    unsafe {
        let keys = dev.reg_mr(pd, data.ptr(), data.len(), Access::ALL).unwrap();
        let scq = dev
            .create_cq(CqMem {
                buf: scq_buf.ptr(),
                cqe_cnt: o.cqe_cnt,
                cqe_size: o.cqe_size,
                dbrec: dbrecs.ptr32(),
            })
            .unwrap();
        let rcq = dev
            .create_cq(CqMem {
                buf: rcq_buf.ptr(),
                cqe_cnt: o.cqe_cnt,
                cqe_size: o.cqe_size,
                dbrec: dbrecs.ptr32().add(2),
            })
            .unwrap();
        let srq = dev
            .create_srq(
                pd,
                SrqMem {
                    buf: srq_buf.ptr(),
                    wqe_cnt: o.srq_wqe_cnt,
                    stride: o.srq_stride,
                    dbrec: dbrecs.ptr32().add(4),
                },
            )
            .unwrap();
        let mut attr = QpAttr::new(scq.cqn, rcq.cqn, Some(srq.srqn));
        (o.tweak)(&mut attr, which);
        let sqd = dev
            .create_qp(
                pd,
                attr,
                SqMem {
                    buf: sq_buf.ptr(),
                    wqe_cnt: o.sq_wqe_cnt,
                    dbrec: dbrecs.ptr32().add(6),
                    uar: uar_page,
                },
            )
            .unwrap();
        Side {
            sq: Sq::new(&sqd, o.sq_cfg).unwrap(),
            scq: Cq::new(&scq).unwrap(),
            rcq: Cq::new(&rcq).unwrap(),
            srq: Srq::new(&srq, keys.lkey).unwrap(),
            qpn: sqd.qpn,
            scqn: scq.cqn,
            rcqn: rcq.cqn,
            srqn: srq.srqn,
            keys,
            srq_stride: o.srq_stride,
            data,
            srq_buf,
            sq_buf,
            scq_buf,
            rcq_buf,
            uar,
            dbrecs,
        }
    }
}

impl Rig {
    pub fn new(o: Opts) -> Self {
        let mut dev = Box::new(Dev::new(o.dev));
        let pd = dev.alloc_pd();
        let a = side(&mut dev, pd, &o, 'a');
        let b = side(&mut dev, pd, &o, 'b');
        let lb = link_bytes(o.link_slots, o.mtu);
        let links = DmaBuf::new(2 * lb);
        let ab = LinkDesc {
            base: links.ptr(),
            len: lb,
        };
        let ba = LinkDesc {
            base: links.ptr().wrapping_add(lb),
            len: lb,
        };
        // SAFETY: the link memory is owned by the rig, dropped after the device, and used
        // only by these two QPs of this device.
        unsafe {
            format_link(&ab, o.link_slots, o.mtu).unwrap();
            format_link(&ba, o.link_slots, o.mtu).unwrap();
            dev.connect_pair(a.qpn, b.qpn, ab, ba, o.link).unwrap();
        }
        Self {
            dev,
            a,
            b,
            pd,
            now: 0,
            tick: o.tick,
            trace: Trace::new(vec![TraceEvent::EMPTY; 4096]),
            a_send: Vec::new(),
            b_send: Vec::new(),
            a_recv: Vec::new(),
            b_recv: Vec::new(),
            _links: links,
        }
    }

    /// One device step, then the clock advances.
    pub fn step(&mut self) {
        self.dev.step_traced(self.now, &mut self.trace);
        self.now += self.tick;
    }

    pub fn steps(&mut self, n: usize) {
        for _ in 0..n {
            self.step();
        }
    }

    /// Polls all four CQs into the pending vectors.
    pub fn poll(&mut self) {
        self.a_send.extend(self.a.poll_send());
        self.b_send.extend(self.b.poll_send());
        self.a_recv.extend(self.a.poll_recv());
        self.b_recv.extend(self.b.poll_recv());
    }

    /// Steps (polling every CQ after each step) until `done`, at most `max` steps;
    /// panics with the device trace and QP states otherwise.
    pub fn run_until(&mut self, what: &str, max: usize, mut done: impl FnMut(&Rig) -> bool) {
        for _ in 0..max {
            if done(self) {
                return;
            }
            self.step();
            self.poll();
        }
        if !done(self) {
            panic!("{what}: not reached in {max} steps\n{}", self.dump());
        }
    }

    /// Runs until `n` send completions are pending on side a, and takes them.
    pub fn a_sends(&mut self, n: usize) -> Vec<Completion> {
        self.run_until("a's send completions", 100_000, |r| r.a_send.len() >= n);
        self.a_send.drain(..).collect()
    }

    pub fn b_recvs(&mut self, n: usize) -> Vec<Completion> {
        self.run_until("b's recv completions", 100_000, |r| r.b_recv.len() >= n);
        self.b_recv.drain(..).collect()
    }

    /// QP states and the device trace, for failure messages.
    /// Trace times of the packets QP `qpn` sent (or lost to a cut link), with their
    /// printed form.
    pub fn sent_by(&self, qpn: u32) -> Vec<(u64, String)> {
        self.trace
            .iter()
            .filter(|e| {
                matches!(e.kind, TraceKind::Packet { dir: PacketDir::Sent | PacketDir::Dropped(_), src_qpn, .. } if src_qpn == qpn)
            })
            .map(|e| (e.t, e.to_string()))
            .collect()
    }

    pub fn dump(&self) -> String {
        let mut s = String::new();
        for q in self.dev.qp_infos() {
            writeln!(s, "{q}").unwrap();
        }
        write!(s, "{}", self.trace).unwrap();
        s
    }
}
