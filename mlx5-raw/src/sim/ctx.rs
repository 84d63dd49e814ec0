//! Per-step context: the clock, counters, the trace sink and the async-event ring.

use super::config::{AsyncEvent, StepStats};
use super::link::Pace;
use super::trace::{TraceEvent, TraceKind, TraceSink};

/// Capacity of the async-event ring.
pub(crate) const EVENTS: usize = 32;

/// A fixed ring of async events; the oldest is dropped (and counted) when full.
#[derive(Debug)]
pub(crate) struct Events {
    buf: [Option<AsyncEvent>; EVENTS],
    /// Index of the oldest event, `0 .. EVENTS`.
    head: usize,
    /// Events held, `0 ..= EVENTS`.
    len: usize,
    /// Events dropped because the ring was full.
    pub lost: u32,
}

impl Events {
    pub(crate) const fn new() -> Self {
        Self {
            buf: [None; EVENTS],
            head: 0,
            len: 0,
            lost: 0,
        }
    }

    pub(crate) fn push(&mut self, e: AsyncEvent) {
        if self.len == EVENTS {
            self.head = (self.head + 1) % EVENTS;
            self.len -= 1;
            self.lost = self.lost.saturating_add(1);
        }
        self.buf[(self.head + self.len) % EVENTS] = Some(e);
        self.len += 1;
    }

    pub(crate) fn pop(&mut self) -> Option<AsyncEvent> {
        if self.len == 0 {
            return None;
        }
        let e = self.buf[self.head].take();
        self.head = (self.head + 1) % EVENTS;
        self.len -= 1;
        e
    }
}

/// What every part of a step shares.
pub(crate) struct Ctx<'a> {
    pub now: u64,
    pub stats: StepStats,
    /// The device's NIC-wide packet pacing, carried from step to step by the device.
    pub nic: Pace,
    pub events: &'a mut Events,
    trace: Option<&'a mut dyn TraceSink>,
}

impl<'a> Ctx<'a> {
    pub(crate) fn new(
        now: u64,
        nic: Pace,
        events: &'a mut Events,
        trace: Option<&'a mut dyn TraceSink>,
    ) -> Self {
        Self {
            now,
            stats: StepStats::default(),
            nic,
            events,
            trace,
        }
    }

    /// Records a trace event if a sink is attached.
    pub(crate) fn trace(&mut self, kind: TraceKind) {
        if let Some(t) = self.trace.as_deref_mut() {
            t.record(TraceEvent { t: self.now, kind });
        }
    }
}
