//! Per-QP state, and the order in which one step serves a QP.

use core::sync::atomic::Ordering;

use crate::layout::{FmCeSe, Syndrome, SND_DBR};

use super::config::{AsyncEvent, DeviceConfig, FlushMode, QpAttr, QpState};
use super::cq::{err_cqe, SimCq};
use super::ctx::Ctx;
use super::link::{LinkRx, LinkTx};
use super::mr::Mr;
use super::raw::Raw;
use super::srq::SimSrq;
use super::trace::TraceKind;
use super::wqe::ctrl_at;
use super::{requester, responder};

/// WQEs a requester has fetched and not yet completed (its window).
pub(crate) const INFLIGHT: usize = 32;
/// Responses a responder has queued and not yet sent: `max_rd_atomic` READs, with an
/// ACK or NAK between any two of them.
pub(crate) const OUTQ: usize = 40;

/// A fixed-capacity FIFO (no allocation).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ring<T: Copy, const N: usize> {
    buf: [Option<T>; N],
    /// Index of the oldest element, `0 .. N`.
    head: usize,
    /// Elements held, `0 ..= N`.
    len: usize,
}

impl<T: Copy, const N: usize> Ring<T, N> {
    pub(crate) const fn new() -> Self {
        Self {
            buf: [None; N],
            head: 0,
            len: 0,
        }
    }

    pub(crate) const fn len(&self) -> usize {
        self.len
    }

    pub(crate) const fn is_full(&self) -> bool {
        self.len == N
    }

    pub(crate) const fn free(&self) -> usize {
        N - self.len
    }

    fn slot(&self, i: usize) -> usize {
        (self.head + i) % N
    }

    /// Appends; returns false (and drops nothing) when full.
    pub(crate) fn push(&mut self, v: T) -> bool {
        if self.len == N {
            return false;
        }
        let s = self.slot(self.len);
        self.buf[s] = Some(v);
        self.len += 1;
        true
    }

    pub(crate) fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let v = self.buf[self.head].take();
        self.head = (self.head + 1) % N;
        self.len -= 1;
        v
    }

    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        if i < self.len {
            self.buf[self.slot(i)].as_ref()
        } else {
            None
        }
    }

    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        if i < self.len {
            let s = self.slot(i);
            self.buf[s].as_mut()
        } else {
            None
        }
    }

    pub(crate) fn front(&self) -> Option<&T> {
        self.get(0)
    }

    pub(crate) fn back_mut(&mut self) -> Option<&mut T> {
        match self.len {
            0 => None,
            n => self.get_mut(n - 1),
        }
    }

    /// Keeps the oldest `n` elements.
    pub(crate) fn truncate(&mut self, n: usize) {
        while self.len > n {
            let s = self.slot(self.len - 1);
            self.buf[s] = None;
            self.len -= 1;
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        (0..self.len).filter_map(move |i| self.get(i))
    }
}

/// Where a fetched WQE stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// Being transmitted or waiting for its acknowledgement / READ data.
    Pending,
    /// Acknowledged (or a NOP): completes when it reaches the head.
    Done,
    /// Failed with this syndrome: its error CQE is written when it reaches the head (so
    /// that earlier WQEs complete first), then the QP goes to error.
    Failed(Syndrome),
}

/// A fetched WQE in the requester's window.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub wqe_index: u16,
    pub bbs: u16,
    pub opcode: u8,
    pub signaled: bool,
    /// PSN of its first packet (for READ: of the request and first response).
    pub first_psn: u32,
    /// PSNs it consumes: request packets, or READ response packets; 0 for a NOP.
    pub npkts: u32,
    /// Packets the requester transmits: `npkts`, or 1 for a READ request.
    pub tx_pkts: u32,
    /// Packets transmitted so far.
    pub sent: u32,
    /// READ response packets received so far.
    pub recv: u32,
    /// Message length.
    pub len: u32,
    pub status: Status,
}

impl Entry {
    pub(crate) const fn is_read(&self) -> bool {
        self.opcode == crate::layout::SendOpcode::RdmaRead.as_u8()
    }

    /// Whether `psn` is one of its PSNs.
    pub(crate) const fn contains(&self, psn: u32) -> bool {
        psn.wrapping_sub(self.first_psn) < self.npkts
    }

    pub(crate) const fn last_psn(&self) -> u32 {
        self.first_psn.wrapping_add(self.npkts).wrapping_sub(1)
    }
}

/// A queued responder output.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Out {
    /// Cumulative acknowledgement up to `psn`.
    Ack { psn: u32 },
    /// NAK (RNR or error) of `psn`.
    Nak {
        psn: u32,
        syndrome: u8,
        rnr_timer: u8,
    },
    /// READ responses still to send.
    Read {
        psn: u32,
        raddr: u64,
        rkey: u32,
        len: u32,
        npkts: u32,
        sent: u32,
    },
}

/// The WRITE message being received.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WriteCtx {
    pub raddr: u64,
    pub rkey: u32,
    pub len: u32,
}

/// The SEND message being received: the SRQ WQE it took.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendCtx {
    pub idx: u16,
}

/// Why a QP goes to error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrCause {
    /// A requester error; its error CQE has been written.
    Requester,
    /// The responder NAKed a remote access violation.
    ResponderAccess,
    /// The responder NAKed another error.
    Responder,
    /// Fault injection / modify to ERR.
    Forced,
}

/// Device-side state of an RC QP.
#[derive(Debug)]
pub(crate) struct Qp {
    pub qpn: u32,
    pub pd: u32,
    pub attr: QpAttr,
    pub state: QpState,
    /// Table slots of the send CQ, recv CQ and SRQ.
    pub scq: usize,
    pub rcq: usize,
    pub srq: Option<usize>,
    /// SQ ring (`wqe_cnt * 64` bytes) and the two-word doorbell record.
    pub sq: Raw,
    pub dbrec: Raw,
    pub wqe_cnt: u32,
    pub remote_qpn: u32,
    pub tx: Option<LinkTx>,
    pub rx: Option<LinkRx>,
    pub mtu: u32,
    /// `fail_qp` was called: go to error at the next step.
    pub fail_pending: bool,

    // Requester. Counters are u16 WQEBB positions: una <= fetch <= db_pi (mod 2^16).
    /// Last doorbell-record value seen.
    pub db_pi: u16,
    /// Next WQE to fetch.
    pub fetch: u16,
    /// Oldest WQE not completed (the window's first entry, if any).
    pub una: u16,
    pub ents: Ring<Entry, INFLIGHT>,
    /// PSN of the next new packet.
    pub next_psn: u32,
    pub rnr_left: u8,
    pub retry_left: u8,
    /// Transmission paused by an RNR NAK until this time.
    pub rnr_until: Option<u64>,
    /// Base of the acknowledgement timer.
    pub last_progress: u64,

    // Responder.
    /// Expected PSN.
    pub epsn: u32,
    pub wctx: Option<WriteCtx>,
    pub sctx: Option<SendCtx>,
    pub out: Ring<Out, OUTQ>,
}

/// What serving a QP touches besides the QP.
pub(crate) struct Env<'e, 'c> {
    pub cqs: &'e mut [Option<SimCq>],
    pub srqs: &'e mut [Option<SimSrq>],
    pub mrs: &'e [Option<Mr>],
    pub cfg: &'e DeviceConfig,
    pub ctx: Ctx<'c>,
}

impl Env<'_, '_> {
    /// Produces a CQE on the CQ in table slot `cq`.
    pub(crate) fn cqe(&mut self, cq: usize, bytes: [u8; 64]) {
        if let Some(cq) = self.cqs.get_mut(cq).and_then(|c| c.as_mut()) {
            cq.push(bytes, &mut self.ctx);
        }
    }
}

/// `a <= b` in PSN order (wrapping).
pub(crate) const fn psn_le(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) >= 0
}

impl Qp {
    /// The `srqn_uidx` of this QP's requester CQEs.
    pub(crate) fn req_uidx(&self) -> u32 {
        self.attr.uidx.unwrap_or(0)
    }

    /// Re-reads the SQ doorbell record.
    pub(crate) fn read_doorbell(&mut self, ctx: &mut Ctx<'_>) {
        // A-SQ-DB (pairs with R-SQ-DB in the driver's doorbell): every WQE byte up to the
        // value read is visible.
        let pi = u32::from_be(self.dbrec.load_u32(SND_DBR * 4, Ordering::Acquire)) as u16;
        if pi != self.db_pi {
            self.db_pi = pi;
            ctx.trace(TraceKind::Doorbell { qpn: self.qpn, pi });
        }
    }

    /// A flush CQE (REQ_ERR, WR_FLUSH_ERR) for one SQ WQE, if the flush mode wants one.
    fn flush_wqe(&self, wqe_index: u16, opcode: u8, signaled: bool, env: &mut Env<'_, '_>) {
        if env.cfg.flush == FlushMode::EveryWqe || signaled {
            let c = err_cqe(
                true,
                Syndrome::WrFlushErr,
                env.cfg.flush_vendor_syndrome,
                opcode,
                self.qpn,
                wqe_index,
                self.req_uidx(),
            );
            env.cqe(self.scq, c);
        }
    }

    /// Flushes every WQE rung and not yet fetched (state ERR), reading each ctrl segment
    /// for its size, opcode and CE bits.
    pub(crate) fn flush_rung(&mut self, env: &mut Env<'_, '_>) {
        while self.fetch != self.db_pi {
            let avail = u32::from(self.db_pi.wrapping_sub(self.fetch));
            let ctrl = ctrl_at(&self.sq, self.fetch);
            let well_formed =
                ctrl.wqe_index() == self.fetch && ctrl.qpn() == self.qpn && ctrl.ds() != 0;
            // A WQE whose ctrl segment cannot be trusted is flushed as one WQEBB.
            let bbs = if well_formed {
                u32::from(ctrl.ds()).div_ceil(4).min(avail)
            } else {
                1
            };
            let signaled = FmCeSe::from_bits_retain(ctrl.fm_ce_se).is_signaled();
            self.flush_wqe(self.fetch, ctrl.opcode(), signaled, env);
            self.fetch = self.fetch.wrapping_add(bbs as u16);
            self.una = self.fetch;
            env.ctx.stats.wqes += 1;
        }
    }

    /// Moves the QP to ERR: flushes every outstanding and rung WQE
    /// (docs/spec/mlx5.md#qp-errors-and-flush), the SRQ WQE of a SEND being received, and
    /// reports the event.
    pub(crate) fn enter_err(&mut self, syndrome: Syndrome, cause: ErrCause, env: &mut Env<'_, '_>) {
        if self.state == QpState::Err {
            return;
        }
        self.state = QpState::Err;
        env.ctx.trace(TraceKind::QpError {
            qpn: self.qpn,
            syndrome,
        });
        env.ctx.events.push(match cause {
            ErrCause::ResponderAccess => AsyncEvent::QpAccessErr { qpn: self.qpn },
            ErrCause::Requester | ErrCause::Responder | ErrCause::Forced => AsyncEvent::QpFatal {
                qpn: self.qpn,
                syndrome,
            },
        });
        while let Some(e) = self.ents.pop() {
            self.flush_wqe(e.wqe_index, e.opcode, e.signaled, env);
            self.una = e.wqe_index.wrapping_add(e.bbs);
        }
        self.flush_rung(env);
        if let Some(s) = self.sctx.take() {
            let c = err_cqe(
                false,
                Syndrome::WrFlushErr,
                env.cfg.flush_vendor_syndrome,
                0,
                self.qpn,
                s.idx,
                self.resp_uidx(env),
            );
            env.cqe(self.rcq, c);
        }
        self.wctx = None;
        self.rnr_until = None;
        if self.srq.is_some() {
            env.ctx
                .events
                .push(AsyncEvent::LastWqeReached { qpn: self.qpn });
        }
    }

    /// The `srqn_uidx` of this QP's responder CQEs.
    pub(crate) fn resp_uidx(&self, env: &Env<'_, '_>) -> u32 {
        match (self.attr.uidx, self.srq) {
            (Some(u), _) => u,
            (None, Some(s)) => env
                .srqs
                .get(s)
                .and_then(|s| s.as_ref())
                .map_or(0, |s| s.srqn),
            (None, None) => 0,
        }
    }

    /// One step of this QP: pending faults, responses out, packets in, responses out,
    /// then the requester (doorbell, timers, transmission, completions).
    pub(crate) fn step(&mut self, env: &mut Env<'_, '_>) {
        if self.state == QpState::Reset {
            return;
        }
        if self.fail_pending {
            self.fail_pending = false;
            self.read_doorbell(&mut env.ctx);
            self.enter_err(Syndrome::WrFlushErr, ErrCause::Forced, env);
        }
        responder::drain(self, env);
        self.inbound(env);
        responder::drain(self, env);
        requester::run(self, env);
    }

    /// Takes packets whose delivery time has come from the incoming link and hands them
    /// to the requester (ACK/NAK, READ response) or responder (requests).
    fn inbound(&mut self, env: &mut Env<'_, '_>) {
        use super::link::op;
        use super::trace::PacketDir;
        let Some(mut rx) = self.rx.take() else {
            return;
        };
        for _ in 0..env.cfg.budget {
            let Some((hdr, payload)) = rx.peek() else {
                break;
            };
            if hdr.deliver_at > env.ctx.now {
                break;
            }
            let trace = |dir| TraceKind::Packet {
                dir,
                src_qpn: hdr.src_qpn,
                dst_qpn: hdr.dst_qpn,
                op: hdr.op,
                flags: hdr.flags,
                psn: hdr.psn,
                len: hdr.payload_len,
                syndrome: hdr.syndrome,
            };
            let drop_why = if rx.is_cut() {
                Some("link cut")
            } else if hdr.dst_qpn != self.qpn {
                Some("packet for another QP")
            } else if self.state != QpState::Rts {
                Some("QP not in RTS")
            } else {
                None
            };
            if let Some(why) = drop_why {
                env.ctx.trace(trace(PacketDir::Dropped(why)));
                rx.pop();
                env.ctx.stats.packets_received += 1;
                continue;
            }
            match hdr.op {
                op::ACK | op::READ_RESP => {
                    env.ctx.trace(trace(PacketDir::Received));
                    requester::response(self, &hdr, &payload, env);
                }
                op::WRITE | op::SEND | op::READ_REQ => {
                    if !responder::has_room(self) {
                        break; // Leave it queued until responses drain.
                    }
                    env.ctx.trace(trace(PacketDir::Received));
                    responder::request(self, &hdr, &payload, env);
                }
                _ => env
                    .ctx
                    .trace(trace(PacketDir::Dropped("unknown packet kind"))),
            }
            rx.pop();
            env.ctx.stats.packets_received += 1;
        }
        self.rx = Some(rx);
        requester::complete(self, env);
    }
}
