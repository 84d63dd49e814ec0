//! The client side: a bulk request is one copyrpc call whose op ends with the reply.
//! The client posts no one-sided operation; its buffers are named by [`Desc`]s the
//! server reads from and writes into.

use super::wire::{Desc, Pattern, Reply, Request, Status, REPLY_SIZE, REQUEST_SIZE};
use super::BulkError;
use crate::copyrpc::{Context, EndpointId, Error};
use crate::ops::{OpError, OpHandle, OpTable};

/// Caller bytes a request may carry after its fixed part.
pub const MAX_EXTRA: usize = 200;

/// The bit set in the user data of every bulk call (bit 63). The application's own
/// calls on the same context leave it clear (sequence numbers and user-space pointers
/// do), so a response is a bulk reply exactly when [`Client::owns`] says so, however
/// the application numbers its calls. The rest is the call's [`OpHandle`] (so a
/// client starts fewer than 2^47 calls in its life). One bulk `Client` per context:
/// two would number their calls alike.
pub const TOKEN_MARK: u64 = 1 << 63;

/// Up to `N` bulk calls outstanding.
#[derive(Debug)]
pub struct Client<const N: usize> {
    ops: OpTable<N>,
    tag: u32,
    /// Per op cell: what its reply must say, so a server's wrong reply is an error and
    /// never a byte count beyond the caller's buffer.
    expect: [Expect; N],
}

/// The reply a call allows: its tag, and the byte count a successful reply may give.
#[derive(Debug, Clone, Copy, Default)]
struct Expect {
    tag: u32,
    /// Pushing patterns: at most `get`'s length (the server writes what it chose).
    /// Otherwise exactly `put`'s length (pulled whole) or 0 (header only).
    bytes: u64,
    up_to: bool,
}

impl Expect {
    fn admits(&self, tag: u32, bytes: u64) -> bool {
        tag == self.tag
            && if self.up_to {
                bytes <= self.bytes
            } else {
                bytes == self.bytes
            }
    }
}

impl<const N: usize> Default for Client<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Client<N> {
    /// No call outstanding.
    pub fn new() -> Self {
        Self {
            ops: OpTable::new(),
            tag: 0,
            expect: [Expect::default(); N],
        }
    }

    /// The op table: poll a call's handle here. A call's result is the reply's byte
    /// count (bytes written into `get`, or pulled from `put`), checked against the call:
    /// a reply with another call's tag, more bytes than `get` holds, or a pulled count
    /// other than `put`'s length ends the call with [`OpError::BadReply`].
    pub fn ops(&self) -> &OpTable<N> {
        &self.ops
    }

    /// Sends a bulk request: `put` for a pattern that pulls, `get` for one that pushes
    /// (made by [`Regions::describe`](super::Regions::describe), so checked), and
    /// `extra` caller bytes. The `put` buffer must hold its data and the `get` buffer
    /// must be left alone until the op ends. One exception: an op that ends with
    /// [`OpError::Failed`] because its endpoint failed by
    /// [`Context::fail_endpoint`] (the application's own verdict, not a QP error) leaves
    /// the QP able to carry the server's operations, so take the buffers out of reach
    /// (deregister, or destroy the QP) before reusing them.
    pub fn call<U: From<u64>, const E: usize, const C: usize, const R: usize>(
        &mut self,
        ctx: &mut Context<U, E, C, R>,
        ep: EndpointId,
        pattern: Pattern,
        put: Option<Desc>,
        get: Option<Desc>,
        extra: &[u8],
    ) -> Result<OpHandle, BulkError> {
        let need = |used: bool, d: Option<Desc>| match (used, d) {
            (true, None) => Err(BulkError::NoBuffer),
            (true, Some(d)) if d.len == 0 => Err(BulkError::ZeroLength),
            (true, Some(d)) => Ok(d),
            (false, _) => Ok(Desc::default()),
        };
        let put = need(pattern.pulls(), put)?;
        let get = need(pattern.pushes(), get)?;
        if extra.len() > MAX_EXTRA {
            return Err(BulkError::TooLong);
        }
        self.tag = self.tag.wrapping_add(1);
        let mut buf = [0u8; REQUEST_SIZE + MAX_EXTRA];
        Request {
            pattern,
            tag: self.tag,
            put,
            get,
        }
        .emit(&mut buf);
        buf[REQUEST_SIZE..REQUEST_SIZE + extra.len()].copy_from_slice(extra);
        let h = self.ops.start().map_err(BulkError::Op)?;
        let (bytes, up_to) = if pattern.pushes() {
            (get.len, true)
        } else {
            (put.len, false)
        };
        self.expect[usize::from(h.index())] = Expect {
            tag: self.tag,
            bytes,
            up_to,
        };
        let payload = &buf[..REQUEST_SIZE + extra.len()];
        // The server's reply is the fixed part alone: reserve no more credit than that.
        let allowance = REPLY_SIZE as u32;
        let token = h.to_u64() | TOKEN_MARK;
        if let Err(e) = ctx.call_with_allowance(ep, payload, allowance, U::from(token)) {
            self.ops.finish(h, Err(OpError::Failed));
            let _ = self.ops.result(h);
            return Err(BulkError::Call(e.error));
        }
        Ok(h)
    }

    /// Whether `user` (a response's user data) is a bulk call's: [`TOKEN_MARK`] set.
    pub const fn owns(user: u64) -> bool {
        user & TOKEN_MARK != 0
    }

    /// Hands a copyrpc response (from `ctx.poll`'s callback) to the call it answers;
    /// `false` if it answers none still pending (cancelled, or not a bulk call: its
    /// user data lacks [`TOKEN_MARK`], and the response is the application's).
    pub fn on_response(&self, user: u64, response: Result<&[u8], Error>) -> bool {
        if !Self::owns(user) {
            return false;
        }
        let h = OpHandle::from_u64(user & !TOKEN_MARK);
        let expect = self.expect.get(usize::from(h.index()));
        let result = match response.map(Reply::parse) {
            Ok(Some((r, _))) => match r.status {
                Status::Ok if expect.is_some_and(|e| e.admits(r.tag, r.bytes)) => Ok(r.bytes),
                Status::Ok => Err(OpError::BadReply),
                Status::TransferFailed => Err(OpError::Failed),
                Status::BadRequest | Status::Busy => Err(OpError::Refused),
            },
            Ok(None) => Err(OpError::BadReply),
            Err(_) => Err(OpError::Failed),
        };
        self.ops.finish(h, result)
    }

    /// Cancels every call still waiting; returns how many. The server is not told: it
    /// may still be reading a cancelled call's put buffer or writing its get buffer. So
    /// a cancelled call ends, with [`OpError::Cancelled`], only when the server is done
    /// with its buffers: when its late reply arrives (`on_response` then returns
    /// `false`) or its endpoint's failure is reported. Until then its handle reads as
    /// pending and its buffers stay the server's. To stop waiting without that, take
    /// the buffers out of the server's reach first: deregister their region, or destroy
    /// the endpoint's QP.
    pub fn cancel_all(&self) -> usize {
        self.ops.cancel_all_on_settle()
    }

    /// Calls whose buffers the server may still use: pending ones, cancelled ones
    /// included.
    pub fn in_flight(&self) -> usize {
        self.ops.pending_count()
    }
}
