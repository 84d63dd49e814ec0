//! The imm-recv matching path: WRITE_WITH_IMM completions against callers asking for them,
//! whichever comes first. It leases no slot (docs/spec/ownership.md#imm-recv-matching): the
//! receives stay posted in a [`RecvWindow`].

use super::fifo::Fifo;
use super::op::{OpError, OpHandle, OpTable};
use super::window::RecvWindow;

/// One WRITE_WITH_IMM as its receive completion reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImmEvent {
    /// The immediate.
    pub imm: u32,
    /// Bytes the WRITE carried.
    pub len: u32,
}

impl ImmEvent {
    /// The event as an op result: `len << 32 | imm`.
    pub const fn to_result(self) -> u64 {
        ((self.len as u64) << 32) | self.imm as u64
    }

    /// Inverse of [`to_result`](Self::to_result).
    pub const fn from_result(v: u64) -> Self {
        Self {
            imm: v as u32,
            len: (v >> 32) as u32,
        }
    }
}

/// Up to `Q` arrived-but-unasked events and `P` asked-but-unarrived ops.
#[derive(Debug)]
pub struct ImmMatch<const Q: usize, const P: usize> {
    events: Fifo<ImmEvent, Q>,
    waiting: Fifo<OpHandle, P>,
    dropped: u64,
}

impl<const Q: usize, const P: usize> Default for ImmMatch<Q, P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const Q: usize, const P: usize> ImmMatch<Q, P> {
    /// Nothing queued.
    pub const fn new() -> Self {
        Self {
            events: Fifo::new(),
            waiting: Fifo::new(),
            dropped: 0,
        }
    }

    /// A WRITE_WITH_IMM consumed one of `window`'s receives. The receive is replaced
    /// first (I5), then the event goes to the oldest waiting op still pending, or to
    /// the event queue. Errors: the repost failed (the event is still delivered), or
    /// the queue is full (the event is dropped and counted).
    pub fn arrived<const N: usize>(
        &mut self,
        ops: &OpTable<N>,
        window: &mut RecvWindow,
        ev: ImmEvent,
        repost: impl FnOnce() -> bool,
    ) -> Result<(), OpError> {
        let primed = window.consume(repost);
        while let Some(h) = self.waiting.pop() {
            // A waiting op cancelled meanwhile refuses the event; try the next.
            if ops.finish(h, Ok(ev.to_result())) {
                return primed;
            }
        }
        if self.events.push(ev).is_err() {
            self.dropped += 1;
            return Err(OpError::QueueFull);
        }
        primed
    }

    /// Asks for the next event: an op that is already done if one is queued, else a
    /// pending op that the next arrival ends.
    pub fn ask<const N: usize>(&mut self, ops: &OpTable<N>) -> Result<OpHandle, OpError> {
        let h = ops.start()?;
        if let Some(ev) = self.events.pop() {
            ops.finish(h, Ok(ev.to_result()));
        } else if self.waiting.push(h).is_err() {
            ops.finish(h, Err(OpError::QueueFull));
            let _ = ops.result(h);
            return Err(OpError::QueueFull);
        }
        Ok(h)
    }

    /// Fails every waiting op ([`OpError::Cancelled`], once each) and drops every queued
    /// event; returns (ops failed, events dropped).
    pub fn cancel_all<const N: usize>(&mut self, ops: &OpTable<N>) -> (usize, usize) {
        let mut failed = 0;
        while let Some(h) = self.waiting.pop() {
            failed += usize::from(ops.finish(h, Err(OpError::Cancelled)));
        }
        let mut dropped = 0;
        while self.events.pop().is_some() {
            dropped += 1;
        }
        self.dropped += dropped as u64;
        (failed, dropped)
    }

    /// Events queued for the next asks.
    pub fn queued(&self) -> usize {
        self.events.len()
    }

    /// Ops waiting for an event.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Events dropped (queue full, or cancelled) since creation.
    pub const fn dropped(&self) -> u64 {
        self.dropped
    }
}
