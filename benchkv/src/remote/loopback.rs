//! An in-process stand-in for copyrpc: what a daemon sends to "rank r" comes back to the
//! same daemon as a request from rank r, is served by this rank's shards, and its answer
//! comes back as the response. It exercises every path a real remote rank would
//! (delegation ring → daemon#0 → transport → Flux to the owner shard → reply → client)
//! without a NIC.
//!
//! It is bounded like the real one: at most `capacity` calls in flight (more is
//! [`SendError::Busy`], as copyrpc's `RingFull`), and at most `capacity / 2` (at least
//! one) answers written and not yet flushed by a `poll` (more is `Busy` too, standing in
//! for a send ring full of replies), so tiny capacities drive the daemons' parking paths.
//! Messages move one step per `poll`, as a batch would: a call becomes receivable after
//! the next poll, an answer is delivered by the poll after the reply.

use std::collections::VecDeque;

use super::SendError;
use crate::msg::{Request, Response};

/// A request received through the loopback; answer it with [`Loopback::reply`].
#[derive(Debug, PartialEq, Eq)]
pub struct LoopbackIncoming {
    token: u64,
}

/// The loopback transport of one daemon.
#[derive(Debug)]
pub struct Loopback {
    capacity: usize,
    reply_capacity: usize,
    /// Calls written, not yet flushed.
    sent: VecDeque<(u64, Request)>,
    /// Calls flushed, waiting for `recv`.
    arrived: VecDeque<(u64, Request)>,
    /// Answers written, delivered by the next poll.
    answers: VecDeque<(u64, Response)>,
    in_flight: usize,
}

impl Loopback {
    /// A loopback with room for `capacity` calls in flight (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            capacity,
            reply_capacity: (capacity / 2).max(1),
            sent: VecDeque::with_capacity(capacity),
            arrived: VecDeque::with_capacity(capacity),
            answers: VecDeque::with_capacity(capacity),
            in_flight: 0,
        }
    }

    /// See [`super::Remote::call`].
    pub fn call(&mut self, _rank: u32, req: &Request, token: u64) -> Result<(), SendError> {
        if self.in_flight >= self.capacity {
            return Err(SendError::Busy);
        }
        self.in_flight += 1;
        self.sent.push_back((token, *req));
        Ok(())
    }

    /// See [`super::Remote::poll`]: answers first (they were written before this poll's
    /// flush), then the flush of written calls. Returns messages moved.
    pub fn poll(&mut self, on_response: &mut dyn FnMut(u64, Response)) -> usize {
        let answered = self.answers.len();
        for (token, resp) in self.answers.drain(..) {
            on_response(token, resp);
        }
        self.in_flight -= answered;
        let flushed = self.sent.len();
        self.arrived.extend(self.sent.drain(..));
        answered + flushed
    }

    /// See [`super::Remote::recv`].
    pub fn recv(&mut self) -> Option<(LoopbackIncoming, Request)> {
        self.arrived
            .pop_front()
            .map(|(token, req)| (LoopbackIncoming { token }, req))
    }

    /// See [`super::Remote::reply`].
    pub fn reply(
        &mut self,
        incoming: LoopbackIncoming,
        resp: &Response,
    ) -> Result<(), (LoopbackIncoming, SendError)> {
        if self.answers.len() >= self.reply_capacity {
            return Err((incoming, SendError::Busy));
        }
        self.answers.push_back((incoming.token, *resp));
        Ok(())
    }

    /// Calls sent and not yet answered.
    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::Status;

    #[test]
    fn a_call_comes_back_as_a_request_and_its_answer_as_the_response() {
        let mut l = Loopback::new(4);
        l.call(1, &Request::get(1, 7), 99).unwrap();
        assert!(l.recv().is_none(), "not flushed yet");
        let mut got = Vec::new();
        assert_eq!(l.poll(&mut |t, r| got.push((t, r))), 1);
        let (inc, req) = l.recv().unwrap();
        assert_eq!(req, Request::get(1, 7));
        l.reply(inc, &Response::new(Status::GetOk, 5)).unwrap();
        assert!(got.is_empty());
        assert_eq!(l.poll(&mut |t, r| got.push((t, r))), 1);
        assert_eq!(got, vec![(99, Response::new(Status::GetOk, 5))]);
        assert_eq!(l.in_flight(), 0);
    }

    #[test]
    fn calls_and_replies_beyond_capacity_are_busy() {
        let mut l = Loopback::new(2);
        l.call(1, &Request::get(1, 1), 1).unwrap();
        l.call(1, &Request::get(1, 2), 2).unwrap();
        assert_eq!(l.call(1, &Request::get(1, 3), 3), Err(SendError::Busy));
        l.poll(&mut |_, _| {});
        let (a, _) = l.recv().unwrap();
        let (b, _) = l.recv().unwrap();
        l.reply(a, &Response::new(Status::PutOk, 0)).unwrap();
        let (b, e) = l.reply(b, &Response::new(Status::PutOk, 0)).unwrap_err();
        assert_eq!(e, SendError::Busy);
        assert_eq!(l.poll(&mut |_, _| {}), 1);
        l.reply(b, &Response::new(Status::PutOk, 0)).unwrap();
        assert_eq!(l.poll(&mut |_, _| {}), 1);
        assert_eq!(l.in_flight(), 0);
        l.call(1, &Request::get(1, 3), 3).unwrap();
    }
}
