//! Answering requests inside `poll`, as they are parsed (run to completion): see
//! [`Context::poll_serve`] for what it promises. Here: the [`Incoming`] a handler gets,
//! which lends the request bytes (recv ring) and the endpoint's send side
//! ([`Tx`]) for the length of one handler call, and records whether the
//! request was answered so `on_batch` (in `poll`) can skip queueing it.

use super::context::{Context, EndpointId};
use super::tx::{ReplyFail, Tx};
use super::Error;
use crate::credit;
use crate::wire::{FLOW_METADATA_SIZE, HEADER_SIZE};

/// What became of a request offered to a [`Context::poll_serve`] handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Not answered: it goes to the receive queue.
    Left,
    /// Answered; its allowance is released.
    Replied,
    /// The reply could not be written: the endpoint fails.
    Failed,
}

/// A request offered to a [`Context::poll_serve`] handler. Answer it with
/// [`reply`](Self::reply) or [`reply_with`](Self::reply_with); dropping it unanswered
/// leaves it in the receive queue for [`Context::recv`].
///
/// The request bytes live in the recv ring and are lent for the handler call only: the
/// consumer passes them after the handler returns, so nothing can keep them longer
/// (`'a` ends with the call).
#[must_use = "dropping it unanswered queues the request for `recv`"]
#[derive(Debug)]
pub struct Incoming<'a> {
    pub(crate) ep: EndpointId,
    pub(crate) call_id: u32,
    pub(crate) blocks: u32,
    pub(crate) data: &'a [u8],
    pub(crate) writer: &'a mut Tx,
    pub(crate) outcome: &'a mut Outcome,
}

/// A reply [`Incoming`] refused, and the request back when it can still be answered.
#[derive(Debug)]
pub struct ServeError<'a> {
    /// Why.
    pub error: Error,
    /// The request, unanswered: answer it again (for [`Error::ReplyTooLarge`], with a
    /// smaller payload) or drop it to queue it for `recv`. `None` when the endpoint
    /// failed: the request is gone with it.
    pub incoming: Option<Incoming<'a>>,
}

impl<'a> Incoming<'a> {
    /// The endpoint the request arrived on.
    pub const fn endpoint(&self) -> EndpointId {
        self.ep
    }

    /// The caller's call id.
    pub const fn call_id(&self) -> u32 {
        self.call_id
    }

    /// The request payload, in place in the recv ring.
    pub const fn data(&self) -> &'a [u8] {
        self.data
    }

    /// The largest reply payload the request's allowance covers.
    pub fn max_reply_len(&self) -> usize {
        let allowance = credit::internal_allowance_for_blocks(self.blocks);
        (allowance - FLOW_METADATA_SIZE - HEADER_SIZE) as usize
    }

    /// Answers with `payload`, sent by this poll's flush. No ring-full check: the
    /// credit the caller paid guarantees room.
    pub fn reply(self, payload: &[u8]) -> Result<(), ServeError<'a>> {
        self.reply_with(payload.len(), |_, out| out.copy_from_slice(payload))
    }

    /// Answers with `len` bytes written in place by `fill(request, response)`.
    pub fn reply_with(
        self,
        len: usize,
        fill: impl FnOnce(&[u8], &mut [u8]),
    ) -> Result<(), ServeError<'a>> {
        let data = self.data;
        match self
            .writer
            .write_reply(self.call_id, self.blocks, len, |out| fill(data, out))
        {
            // The batch that brought the request already noted its endpoint for a
            // visit (`on_batch_completion`), so the reply's `Flush` is covered.
            Ok(_) => {
                *self.outcome = Outcome::Replied;
                Ok(())
            }
            // Over the allowance: nothing changed, the request comes back.
            Err(ReplyFail::Refused) => Err(ServeError {
                error: Error::ReplyTooLarge,
                incoming: Some(self),
            }),
            Err(ReplyFail::Failed(error)) => {
                *self.outcome = Outcome::Failed;
                Err(ServeError {
                    error,
                    incoming: None,
                })
            }
        }
    }
}

impl<U, const EPS: usize, const CALLS: usize, const REQS: usize> Context<U, EPS, CALLS, REQS> {
    /// [`poll`](Self::poll), offering each request to `on_request` as it is parsed
    /// (run to completion): answered there, through [`Incoming::reply`] or
    /// [`Incoming::reply_with`], its reply is written straight into the send ring and
    /// goes out with this poll's flush, and the request never enters the receive queue
    /// (no handle, no queue links: the cheap path for handlers that answer at once).
    /// Dropped unanswered, it is queued for [`recv`](Self::recv).
    ///
    /// Requests are offered in arrival order. While the receive queue holds requests
    /// (left by an earlier handler, or received by plain `poll`), new ones queue behind
    /// them instead of being offered, and once the handler leaves a request the rest of
    /// that poll's requests queue too; so `recv` still hands out what is queued in
    /// arrival order, and no request overtakes one that was left.
    pub fn poll_serve(
        &mut self,
        on_response: impl FnMut(U, Result<&[u8], Error>),
        on_request: impl FnMut(Incoming<'_>),
    ) -> usize {
        let Some(recv) = self.start_poll() else {
            return 0;
        };
        self.poll_inner::<true>(recv, u32::MAX, on_response, on_request)
    }
}
