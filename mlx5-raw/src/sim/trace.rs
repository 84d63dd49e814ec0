//! An optional record of what the device did, decoded, for "why did this hang?".
//!
//! [`Device::step_traced`](super::Device::step_traced) reports every doorbell, WQE,
//! packet, SRQ consumption, CQE and error to a [`TraceSink`]. [`Trace`] is the sink most
//! callers want: a fixed ring over caller storage (an array, a slice, or a `Vec` on the
//! host) that keeps the newest events and prints them, one line each:
//!
//! ```
//! use mlx5_raw::sim::{Trace, TraceEvent};
//! let mut trace = Trace::new([TraceEvent::EMPTY; 64]);
//! // dev.step_traced(now, &mut trace);
//! assert_eq!(trace.len(), 0);
//! println!("{trace}");
//! ```

use core::fmt;

use crate::layout::{CqeOpcode, Syndrome};

use super::link::{ack, flag, op};

/// Receives trace events. Implemented by [`Trace`]; implement it to stream events
/// elsewhere (a test can count them, a host can log them).
pub trait TraceSink {
    /// Records one event.
    fn record(&mut self, event: TraceEvent);
}

/// One event: when, and what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// The `now` of the step that produced it.
    pub t: u64,
    /// What happened.
    pub kind: TraceKind,
}

impl TraceEvent {
    /// A placeholder for initialising storage; never recorded by the device.
    pub const EMPTY: Self = Self {
        t: 0,
        kind: TraceKind::Empty,
    };
}

/// Where a packet went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PacketDir {
    /// Pushed into the QP's outgoing link.
    Sent,
    /// Taken from the QP's incoming link and processed.
    Received,
    /// Discarded; the string says why.
    Dropped(&'static str),
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceKind {
    /// Storage placeholder ([`TraceEvent::EMPTY`]).
    Empty,
    /// A new SQ doorbell-record value was seen.
    Doorbell {
        /// QP.
        qpn: u32,
        /// The u16 producer counter rung.
        pi: u16,
    },
    /// A WQE was fetched and parsed.
    Wqe {
        /// QP.
        qpn: u32,
        /// Its `wqe_index`.
        wqe_index: u16,
        /// Raw send opcode.
        opcode: u8,
        /// DS count.
        ds: u8,
        /// CE asked for a CQE.
        signaled: bool,
        /// Message length in bytes (inline + gather).
        len: u64,
        /// Remote address (READ/WRITE), else 0.
        raddr: u64,
        /// Remote key (READ/WRITE), else 0.
        rkey: u32,
    },
    /// A WQE failed locally (malformed, bad lkey...).
    WqeError {
        /// QP.
        qpn: u32,
        /// The WQE's index (the expected one if its ctrl is unreadable).
        wqe_index: u16,
        /// Syndrome of its error CQE.
        syndrome: Syndrome,
        /// What check failed.
        why: &'static str,
    },
    /// A packet moved.
    Packet {
        /// Sent, received or dropped.
        dir: PacketDir,
        /// Sending QP.
        src_qpn: u32,
        /// Receiving QP.
        dst_qpn: u32,
        /// Packet kind (internal code; printed by name).
        op: u8,
        /// First/last/imm/SE flags.
        flags: u8,
        /// PSN.
        psn: u32,
        /// Payload bytes.
        len: u32,
        /// ACK syndrome (ACK packets).
        syndrome: u8,
    },
    /// The responder took an SRQ WQE.
    SrqTake {
        /// SRQ.
        srqn: u32,
        /// Responder QP.
        qpn: u32,
        /// The WQE index (the CQE's `wqe_counter`).
        index: u16,
    },
    /// The responder found the SRQ empty and answered RNR.
    SrqEmpty {
        /// SRQ.
        srqn: u32,
        /// Responder QP.
        qpn: u32,
        /// PSN NAKed.
        psn: u32,
    },
    /// The requester got an RNR NAK and waits before retrying.
    RnrWait {
        /// QP.
        qpn: u32,
        /// PSN to resend.
        psn: u32,
        /// Retries left after this one (`None`: infinite).
        left: Option<u8>,
        /// When it resends.
        until: u64,
    },
    /// The requester's acknowledgement timer expired and it goes back to the oldest
    /// unacknowledged PSN.
    AckTimeout {
        /// QP.
        qpn: u32,
        /// PSN it resends from.
        psn: u32,
        /// Retries left after this one.
        left: u8,
    },
    /// A CQE was written.
    Cqe {
        /// CQ.
        cqn: u32,
        /// Producer index it was written at.
        pi: u32,
        /// CQE opcode.
        opcode: CqeOpcode,
        /// QP.
        qpn: u32,
        /// `wqe_counter`.
        wqe_counter: u16,
        /// `byte_cnt` (0 for error CQEs).
        byte_cnt: u32,
        /// Syndrome of an error CQE.
        syndrome: Option<Syndrome>,
    },
    /// A CQE could not be written: the CQ is full (the consumer index in its doorbell
    /// record is `cqe_cnt` behind) or already in error.
    CqOverrun {
        /// CQ.
        cqn: u32,
        /// The producer index.
        pi: u32,
        /// The consumer index read from the doorbell record.
        ci: u32,
    },
    /// A QP entered the error state.
    QpError {
        /// QP.
        qpn: u32,
        /// The syndrome of the error that caused it.
        syndrome: Syndrome,
    },
}

/// A fixed ring of the newest trace events over caller storage `B` (`[TraceEvent; N]`,
/// `&mut [TraceEvent]`, `Vec<TraceEvent>`, ...). Older events are overwritten.
#[derive(Clone, Debug)]
pub struct Trace<B> {
    buf: B,
    /// Index of the next write, `0 .. capacity`.
    next: usize,
    /// Events held, `0 ..= capacity`.
    len: usize,
    /// Events ever recorded.
    total: u64,
}

impl<B: AsRef<[TraceEvent]> + AsMut<[TraceEvent]>> Trace<B> {
    /// An empty trace over `buf` (its contents are ignored).
    pub fn new(buf: B) -> Self {
        Self {
            buf,
            next: 0,
            len: 0,
            total: 0,
        }
    }

    /// Events held (at most the storage length).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Events ever recorded, including overwritten ones.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Forgets every event.
    pub fn clear(&mut self) {
        self.next = 0;
        self.len = 0;
    }

    /// The held events, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &TraceEvent> + '_ {
        let buf = self.buf.as_ref();
        let cap = buf.len();
        let start = (self.next + cap - self.len) % cap.max(1);
        (0..self.len).map(move |i| &buf[(start + i) % cap])
    }
}

impl<B: AsRef<[TraceEvent]> + AsMut<[TraceEvent]>> TraceSink for Trace<B> {
    fn record(&mut self, event: TraceEvent) {
        let buf = self.buf.as_mut();
        let cap = buf.len();
        self.total += 1;
        if cap == 0 {
            return;
        }
        buf[self.next] = event;
        self.next = (self.next + 1) % cap;
        self.len = (self.len + 1).min(cap);
    }
}

impl<B: AsRef<[TraceEvent]> + AsMut<[TraceEvent]>> fmt::Display for Trace<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "device trace: {} of {} events (oldest first)",
            self.len, self.total
        )?;
        for e in self.iter() {
            writeln!(f, "{e}")?;
        }
        Ok(())
    }
}

/// `MLX5_OPCODE_*` name of a send opcode.
pub fn send_opcode_name(opcode: u8) -> &'static str {
    match opcode {
        0x00 => "NOP",
        0x01 => "SEND_INVAL",
        0x08 => "RDMA_WRITE",
        0x09 => "RDMA_WRITE_IMM",
        0x0a => "SEND",
        0x0b => "SEND_IMM",
        0x10 => "RDMA_READ",
        0x11 => "ATOMIC_CS",
        0x12 => "ATOMIC_FA",
        _ => "UNKNOWN",
    }
}

fn packet_name(op_: u8, syndrome: u8) -> &'static str {
    match op_ {
        op::WRITE => "WRITE",
        op::SEND => "SEND",
        op::READ_REQ => "READ_REQ",
        op::READ_RESP => "READ_RESP",
        op::ACK => match syndrome {
            ack::ACK => "ACK",
            ack::RNR_NAK => "RNR_NAK",
            ack::NAK_INV_REQ => "NAK(invalid request)",
            ack::NAK_REM_ACCESS => "NAK(remote access)",
            ack::NAK_REM_OP => "NAK(remote op)",
            _ => "NAK(?)",
        },
        _ => "?",
    }
}

impl fmt::Display for TraceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:>14} ns  ", self.t)?;
        match self.kind {
            TraceKind::Empty => write!(f, "-"),
            TraceKind::Doorbell { qpn, pi } => write!(f, "qp {qpn:#x}  doorbell pi={pi}"),
            TraceKind::Wqe {
                qpn,
                wqe_index,
                opcode,
                ds,
                signaled,
                len,
                raddr,
                rkey,
            } => {
                write!(
                    f,
                    "qp {qpn:#x}  WQE {wqe_index} {} ds={ds} len={len}{}",
                    send_opcode_name(opcode),
                    if signaled { " signaled" } else { "" }
                )?;
                if rkey != 0 || raddr != 0 {
                    write!(f, " raddr={raddr:#x} rkey={rkey:#x}")?;
                }
                Ok(())
            }
            TraceKind::WqeError {
                qpn,
                wqe_index,
                syndrome,
                why,
            } => write!(
                f,
                "qp {qpn:#x}  WQE {wqe_index} FAILED {syndrome:?} ({:#04x}): {why}",
                syndrome.as_u8()
            ),
            TraceKind::Packet {
                dir,
                src_qpn,
                dst_qpn,
                op: op_,
                flags,
                psn,
                len,
                syndrome,
            } => {
                let (verb, why) = match dir {
                    PacketDir::Sent => ("sent", ""),
                    PacketDir::Received => ("recv", ""),
                    PacketDir::Dropped(why) => ("DROP", why),
                };
                write!(
                    f,
                    "{verb} {src_qpn:#x}->{dst_qpn:#x} {}{}{}{}{} psn={psn} len={len}",
                    packet_name(op_, syndrome),
                    if flags & flag::FIRST != 0 {
                        " first"
                    } else {
                        ""
                    },
                    if flags & flag::LAST != 0 { " last" } else { "" },
                    if flags & flag::IMM != 0 { " imm" } else { "" },
                    if flags & flag::SE != 0 { " se" } else { "" },
                )?;
                if !why.is_empty() {
                    write!(f, ": {why}")?;
                }
                Ok(())
            }
            TraceKind::SrqTake { srqn, qpn, index } => {
                write!(f, "srq {srqn:#x}  took WQE {index} for qp {qpn:#x}")
            }
            TraceKind::SrqEmpty { srqn, qpn, psn } => write!(
                f,
                "srq {srqn:#x}  EMPTY for qp {qpn:#x} psn={psn}: answering RNR"
            ),
            TraceKind::RnrWait {
                qpn,
                psn,
                left,
                until,
            } => match left {
                Some(l) => write!(
                    f,
                    "qp {qpn:#x}  RNR: resend psn={psn} at {until} ns ({l} retries left)"
                ),
                None => write!(
                    f,
                    "qp {qpn:#x}  RNR: resend psn={psn} at {until} ns (infinite retries)"
                ),
            },
            TraceKind::AckTimeout { qpn, psn, left } => write!(
                f,
                "qp {qpn:#x}  ACK TIMEOUT: resend from psn={psn} ({left} retries left)"
            ),
            TraceKind::Cqe {
                cqn,
                pi,
                opcode,
                qpn,
                wqe_counter,
                byte_cnt,
                syndrome,
            } => {
                write!(
                    f,
                    "cq {cqn:#x}  CQE[{pi}] {opcode:?} qp {qpn:#x} wqe_counter={wqe_counter} byte_cnt={byte_cnt}"
                )?;
                if let Some(s) = syndrome {
                    write!(f, " syndrome={s:?} ({:#04x})", s.as_u8())?;
                }
                Ok(())
            }
            TraceKind::CqOverrun { cqn, pi, ci } => write!(
                f,
                "cq {cqn:#x}  OVERRUN: pi={pi} ci={ci}: CQE not written, CQ in error"
            ),
            TraceKind::QpError { qpn, syndrome } => write!(
                f,
                "qp {qpn:#x}  -> ERR ({syndrome:?}, {:#04x}); flushing",
                syndrome.as_u8()
            ),
        }
    }
}
