//! A received request, answered at most once.

use super::context::{Context, EndpointId};
use super::requests::Tag;
use super::tx::ReplyFail;
use super::{Error, FailureCause, ReplyError};
use crate::credit;
use crate::wire::{FLOW_METADATA_SIZE, HEADER_SIZE};

/// A request handed out by [`Context::recv`]. Its bytes stay in the recv ring, readable
/// through [`data`](Self::data), until it is answered; answering consumes the handle, so
/// a request is answered once and its bytes cannot be read after their ring space went
/// back to the peer:
///
/// ```compile_fail,E0505
/// # use copyrpc_core::copyrpc::{Context, RecvHandle};
/// fn echo_then_peek(ctx: &mut Context<u64, 1, 1, 1>, h: RecvHandle) {
///     let bytes = h.data(ctx);
///     let _ = h.reply(ctx, b"ok"); // the ring space is returned here...
///     let _ = bytes[0]; // ...so the borrow of the request bytes must have ended
/// }
/// ```
///
/// ```compile_fail,E0382
/// # use copyrpc_core::copyrpc::{Context, RecvHandle};
/// fn reply_twice(ctx: &mut Context<u64, 1, 1, 1>, h: RecvHandle) {
///     let _ = h.reply(ctx, b"one");
///     let _ = h.reply(ctx, b"two"); // the handle was consumed by the first reply
/// }
/// ```
///
/// A handle dropped without a reply keeps its ring bytes (and the peer's credit) until
/// the endpoint fails: always answer.
///
/// A handle knows the context that received it: on another context it reads nothing
/// and its reply is refused with [`Error::StaleHandle`] (the handle comes back), even
/// where endpoint, sequence number and call id coincide with a live request there.
#[must_use = "a request holds ring space and credit until it is answered"]
#[derive(Debug, PartialEq, Eq)]
pub struct RecvHandle {
    pub(crate) ep: EndpointId,
    /// The sequence number and the receiving endpoint's stamp: what the request's entry
    /// holds while it is delivered.
    pub(crate) tag: Tag,
    pub(crate) call_id: u32,
}

/// A [`RecvHandle`] stored by the crate ([`RecvHandle::park`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Parked(EndpointId, Tag, u32);

impl Parked {
    pub(crate) const fn endpoint(&self) -> EndpointId {
        self.0
    }
}

impl RecvHandle {
    /// The endpoint the request arrived on.
    pub const fn endpoint(&self) -> EndpointId {
        self.ep
    }

    /// The caller's call id.
    pub const fn call_id(&self) -> u32 {
        self.call_id
    }

    /// `(endpoint, sequence, call id)`, for storing a handle outside Rust (the C ABI).
    /// The raw form does not name the context: keep that with it.
    pub const fn into_raw(self) -> (u16, u32, u32) {
        (self.ep.0, self.tag.seq(), self.call_id)
    }

    /// Rebuilds, as a handle of `ctx`, one that [`into_raw`](Self::into_raw) took apart.
    /// Any value is safe: the replies check endpoint, sequence and call id against
    /// `ctx`'s live requests (a forged or replayed handle is refused with
    /// [`Error::StaleHandle`]). `data` and `max_reply_len` check endpoint and sequence
    /// only (no call id, to keep the deferred path's reads lean): a handle whose
    /// sequence names a live request reads that request, and one that names none reads
    /// nothing. The raw form names no context, so this cannot tell a handle `ctx`
    /// received from one another context did: rebuild it on the context it came from
    /// (the C ABI keeps a context tag next to it for this).
    pub fn from_raw<U, const E: usize, const C: usize, const R: usize>(
        ctx: &Context<U, E, C, R>,
        raw: (u16, u32, u32),
    ) -> Self {
        let ep = EndpointId(raw.0);
        // A tag no entry holds if there is no such endpoint (one may be made later).
        let tag = ctx
            .ep(ep)
            .map_or(Tag::NEVER, |e| e.d.rx.requests().delivered_tag(raw.1));
        Self {
            ep,
            tag,
            call_id: raw.2,
        }
    }

    /// The handle as a `Copy` value, for the crate's own code that stores handles
    /// (the bulk server): unlike the raw form it keeps the endpoint's stamp.
    pub(crate) const fn park(self) -> Parked {
        Parked(self.ep, self.tag, self.call_id)
    }

    /// The handle [`park`](Self::park) stored.
    pub(crate) const fn unpark(p: Parked) -> Self {
        Self {
            ep: p.0,
            tag: p.1,
            call_id: p.2,
        }
    }

    /// The request payload, in place in the recv ring. Empty if the handle is not one
    /// of `ctx`'s live requests.
    #[inline]
    pub fn data<'a, U, const E: usize, const C: usize, const R: usize>(
        &'a self,
        ctx: &'a Context<U, E, C, R>,
    ) -> &'a [u8] {
        ctx.request_bytes(self)
    }

    /// The largest reply payload the request's allowance covers.
    pub fn max_reply_len<U, const E: usize, const C: usize, const R: usize>(
        &self,
        ctx: &Context<U, E, C, R>,
    ) -> usize {
        ctx.ep(self.ep)
            .ok()
            .and_then(|e| e.d.rx.requests().delivered(self.tag))
            .map_or(0, |r| {
                let allowance = credit::internal_allowance_for_blocks(r.blocks);
                (allowance - FLOW_METADATA_SIZE - HEADER_SIZE) as usize
            })
    }

    /// Answers with `payload` (sent by the next poll, or by [`Context::flush`]). No
    /// ring-full check: the credit the caller paid guarantees room. Refused, with the
    /// handle back, if the payload exceeds the allowance the request reserved.
    #[inline(always)]
    pub fn reply<U, const E: usize, const C: usize, const R: usize>(
        self,
        ctx: &mut Context<U, E, C, R>,
        payload: &[u8],
    ) -> Result<(), ReplyError> {
        ctx.reply_with(self, payload.len(), |_, out| out.copy_from_slice(payload))
    }

    /// Answers with `len` bytes written in place by `fill(request, response)`: the
    /// request bytes are readable while the response is built (zero-copy echo).
    #[inline(always)]
    pub fn reply_with<U, const E: usize, const C: usize, const R: usize>(
        self,
        ctx: &mut Context<U, E, C, R>,
        len: usize,
        fill: impl FnOnce(&[u8], &mut [u8]),
    ) -> Result<(), ReplyError> {
        ctx.reply_with(self, len, fill)
    }
}

impl<U, const EPS: usize, const CALLS: usize, const REQS: usize> Context<U, EPS, CALLS, REQS> {
    #[inline]
    pub(crate) fn request_bytes(&self, h: &RecvHandle) -> &[u8] {
        // A delivered entry's bytes stay unconsumed until its release, which retags it:
        // the tag alone makes reading them sound, whoever made the handle.
        let Some((e, r)) = self
            .ep(h.ep)
            .ok()
            .and_then(|e| Some((e, e.d.rx.requests().delivered(h.tag)?)))
        else {
            return &[];
        };
        e.d.rx.request_bytes(r)
    }

    /// [`RecvHandle::reply_with`].
    ///
    /// Always inlined, with `write_reply` and `Tx::write_reply`: out of line (the
    /// compiler's choice once an application replies from two places) the request, the
    /// closure and the result cross memory, which costs the answering side about a
    /// quarter more per request (docs/PERFORMANCE.md, "Why the code is shaped this
    /// way").
    #[inline(always)]
    pub fn reply_with(
        &mut self,
        h: RecvHandle,
        len: usize,
        fill: impl FnOnce(&[u8], &mut [u8]),
    ) -> Result<(), ReplyError> {
        // One lookup of the endpoint and the request (`live`'s test, on `&mut`).
        let found = self.eps.get_mut(usize::from(h.ep.0)).and_then(|e| {
            let e = e.as_mut()?;
            let r = *e.d.rx.requests().delivered(h.tag)?;
            (r.call_id == h.call_id).then_some((e, r))
        });
        let Some((e, req)) = found else {
            return Err(ReplyError {
                error: Error::StaleHandle,
                handle: Some(h),
            });
        };
        if e.d.is_failed() {
            // A failed endpoint flushes nothing: no change for poll to see.
            e.d.rx.requests_mut().release(h.tag.seq());
            return Err(ReplyError {
                error: Error::EndpointFailed,
                handle: None,
            });
        }
        match e.d.write_reply(h.tag.seq(), &req, len, fill) {
            Ok(flush) => {
                self.dirty.note(h.ep.0, flush);
                Ok(())
            }
            // Over the allowance: refused before anything changed, the handle comes back.
            Err(ReplyFail::Refused) => Err(ReplyError {
                error: Error::ReplyTooLarge,
                handle: Some(h),
            }),
            Err(ReplyFail::Failed(error)) => {
                e.d.rx.requests_mut().release(h.tag.seq());
                let flush = e.d.fail(FailureCause::ReplyWrite, &mut self.stats);
                self.dirty.note(h.ep.0, flush);
                Err(ReplyError {
                    error,
                    handle: None,
                })
            }
        }
    }
}
