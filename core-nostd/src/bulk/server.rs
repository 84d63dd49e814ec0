//! The server side of the four patterns: accept a request, pull the client's `put`
//! buffer by READ, let the caller handle it, push into the client's `get` buffer by
//! WRITE, reply.
#![allow(unsafe_code)]

use super::link::Link;
use super::mover::{Dir, Mover};
use super::region::Local;
use super::wire::{Desc, Reply, Request, Status, REPLY_SIZE};
use super::BulkError;
use crate::copyrpc::{Context, Parked, RecvHandle};
use crate::ops::{OpError, OpHandle};

/// A request the server holds, by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReqId(pub u16);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Pulling(OpHandle),
    /// Pulled (or nothing to pull); not yet given to the caller.
    Ready,
    /// Given to the caller by `next_ready`; waiting for `respond`.
    Handling,
    Pushing(OpHandle),
}

#[derive(Debug, Clone, Copy)]
struct Held {
    handle: Parked,
    req: Request,
    stage: Stage,
    get_local: Option<Local>,
}

/// Counters of a server's life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Requests answered, by status: ok, transfer failed, bad request, busy.
    pub replied: [u64; 4],
    /// Replies the endpoint refused (it had failed).
    pub reply_lost: u64,
}

/// Serves bulk requests arriving on one endpoint: up to `N` at a time, over `S` slots.
#[derive(Debug)]
pub struct Server<const N: usize, const S: usize> {
    mover: Mover<N, S>,
    link: Link,
    held: [Option<Held>; N],
    depth: u16,
    stats: ServerStats,
}

fn answer<U, const E: usize, const C: usize, const R: usize>(
    ctx: &mut Context<U, E, C, R>,
    handle: RecvHandle,
    reply: Reply,
    stats: &mut ServerStats,
) {
    stats.replied[reply.status as usize] += 1;
    let mut b = [0u8; REPLY_SIZE];
    reply.emit(&mut b);
    if handle.reply(ctx, &b).is_err() {
        stats.reply_lost += 1;
    }
}

impl<const N: usize, const S: usize> Server<N, S> {
    /// A server on `link`'s endpoint, splitting transfers into `chunk`-byte operations,
    /// `depth` of them in flight per transfer.
    pub fn new(link: Link, chunk: u32, depth: u16) -> Result<Self, BulkError> {
        if depth == 0 || usize::from(depth) > S {
            return Err(BulkError::TooDeep);
        }
        Ok(Self {
            mover: Mover::new(chunk),
            link,
            held: [None; N],
            depth,
            stats: ServerStats::default(),
        })
    }

    /// The transfers: their op table, slots and counters.
    pub fn mover(&self) -> &Mover<N, S> {
        &self.mover
    }

    /// Counters.
    pub fn stats(&self) -> ServerStats {
        self.stats
    }

    /// Requests held (pulling, waiting for the caller, pushing).
    pub fn held(&self) -> usize {
        self.held.iter().flatten().count()
    }

    /// Takes a request from `ctx.recv()`, which must have arrived on this server's
    /// endpoint (else it is answered as a bad request: [`BulkError::WrongEndpoint`]).
    /// A pattern that pulls needs `put` (as long as
    /// the client's `put` buffer); one that pushes needs `get` (any length; the reply
    /// says how much was written). A request that cannot be served is answered at once
    /// (bad request, or busy) and its error returned; nothing is posted for it.
    ///
    /// # Safety
    ///
    /// `put` and `get` lie in memory registered under their lkeys, which Rust code
    /// leaves alone while the request is held, except that the caller may read `put`
    /// and write `get` between [`next_ready`](Self::next_ready) returning the request
    /// and [`respond`](Self::respond).
    pub unsafe fn accept<U, const E: usize, const C: usize, const R: usize>(
        &mut self,
        ctx: &mut Context<U, E, C, R>,
        handle: RecvHandle,
        put: Option<Local>,
        get: Option<Local>,
    ) -> Result<(ReqId, Request), BulkError> {
        let parsed = Request::parse(handle.data(ctx)).map(|(r, _)| r);
        let raw = handle.park();
        let refuse = |ctx: &mut Context<U, E, C, R>, st: &mut ServerStats, tag, status, e| {
            answer(
                ctx,
                RecvHandle::unpark(raw),
                Reply {
                    status,
                    tag,
                    bytes: 0,
                },
                st,
            );
            Err(e)
        };
        // A request of another endpoint's peer: this server's transfers would go to
        // the wrong peer, with descriptors that name the other peer's memory.
        if raw.endpoint() != self.link.endpoint() {
            let tag = parsed.map_or(0, |r| r.tag);
            return refuse(
                ctx,
                &mut self.stats,
                tag,
                Status::BadRequest,
                BulkError::WrongEndpoint,
            );
        }
        let Some(req) = parsed else {
            return refuse(
                ctx,
                &mut self.stats,
                0,
                Status::BadRequest,
                BulkError::BadMessage,
            );
        };
        let bad = match (req.pattern.pulls(), put, req.pattern.pushes(), get) {
            (true, None, ..) | (.., true, None) => Some(BulkError::NoBuffer),
            (true, Some(p), ..) if p.len != req.put.len => Some(BulkError::LengthMismatch),
            _ if req.pattern.pulls() && req.put.len == 0 => Some(BulkError::ZeroLength),
            _ if req.pattern.pushes() && req.get.len == 0 => Some(BulkError::ZeroLength),
            _ => None,
        };
        if let Some(e) = bad {
            return refuse(ctx, &mut self.stats, req.tag, Status::BadRequest, e);
        }
        let Some(index) = self.held.iter().position(Option::is_none) else {
            return refuse(
                ctx,
                &mut self.stats,
                req.tag,
                Status::Busy,
                BulkError::Op(OpError::TableFull),
            );
        };
        let stage = match put {
            Some(p) if req.pattern.pulls() => {
                // SAFETY: forwarded from this function's contract.
                match unsafe { self.mover.start(Dir::Read, p, req.put, self.depth) } {
                    Ok(op) => Stage::Pulling(op),
                    Err(e) => return refuse(ctx, &mut self.stats, req.tag, Status::Busy, e),
                }
            }
            _ => Stage::Ready,
        };
        self.held[index] = Some(Held {
            handle: raw,
            req,
            stage,
            get_local: get.filter(|_| req.pattern.pushes()),
        });
        Ok((ReqId(index as u16), req))
    }

    /// Runs the transfers: reports the endpoint's raw completions, posts what the slots
    /// allow, and answers every request whose transfers ended (or failed). Call after
    /// `ctx.poll`.
    pub fn progress<U, const E: usize, const C: usize, const R: usize>(
        &mut self,
        ctx: &mut Context<U, E, C, R>,
    ) {
        let mover = &mut self.mover;
        self.link.drain(ctx, |wr, ok| mover.complete(wr, ok));
        self.mover.pump(&mut self.link.poster(ctx));
        for i in 0..N {
            let Some(h) = self.held[i] else { continue };
            let (op, pushing) = match h.stage {
                Stage::Pulling(op) => (op, false),
                Stage::Pushing(op) => (op, true),
                _ => continue,
            };
            // Forget nothing while an operation of the transfer is in flight: the
            // caller's buffers are still the device's.
            if self.mover.in_flight_of(op) > 0 {
                continue;
            }
            match self.mover.ops().result(op) {
                None => {}
                Some(Ok(bytes)) if pushing => {
                    self.held[i] = None;
                    let reply = Reply {
                        status: Status::Ok,
                        tag: h.req.tag,
                        bytes,
                    };
                    answer(ctx, RecvHandle::unpark(h.handle), reply, &mut self.stats);
                }
                Some(Ok(_)) => self.held[i].as_mut().expect("held").stage = Stage::Ready,
                Some(Err(_)) => {
                    self.held[i] = None;
                    let reply = Reply {
                        status: Status::TransferFailed,
                        tag: h.req.tag,
                        bytes: 0,
                    };
                    answer(ctx, RecvHandle::unpark(h.handle), reply, &mut self.stats);
                }
            }
        }
    }

    /// A request whose `put` data has arrived (or that had none), once each: the caller
    /// may now read its `put` buffer and fill its `get` buffer, then
    /// [`respond`](Self::respond).
    pub fn next_ready(&mut self) -> Option<(ReqId, Request)> {
        let i = self
            .held
            .iter()
            .position(|h| h.is_some_and(|h| h.stage == Stage::Ready))?;
        let h = self.held[i].as_mut().expect("found");
        h.stage = Stage::Handling;
        Some((ReqId(i as u16), h.req))
    }

    /// Finishes a request returned by [`next_ready`](Self::next_ready): a pattern that
    /// pushes WRITEs the first `get_len` bytes of its `get` buffer into the client's
    /// (replying when they land); any other replies now, with `get_len` ignored.
    pub fn respond<U, const E: usize, const C: usize, const R: usize>(
        &mut self,
        ctx: &mut Context<U, E, C, R>,
        id: ReqId,
        get_len: u64,
    ) -> Result<(), BulkError> {
        let slot = self
            .held
            .get_mut(usize::from(id.0))
            .ok_or(BulkError::NoSuchRequest)?;
        let h = slot
            .filter(|h| h.stage == Stage::Handling)
            .ok_or(BulkError::NoSuchRequest)?;
        let Some(local) = h.get_local else {
            *slot = None;
            let bytes = if h.req.pattern.pulls() {
                h.req.put.len
            } else {
                0
            };
            let reply = Reply {
                status: Status::Ok,
                tag: h.req.tag,
                bytes,
            };
            answer(ctx, RecvHandle::unpark(h.handle), reply, &mut self.stats);
            return Ok(());
        };
        if get_len == 0 {
            return Err(BulkError::ZeroLength);
        }
        if get_len > local.len || get_len > h.req.get.len {
            return Err(BulkError::BeyondRegion);
        }
        let local = Local {
            len: get_len,
            ..local
        };
        let remote = Desc {
            len: get_len,
            ..h.req.get
        };
        // SAFETY: `accept`'s contract: `get` stays registered and untouched while the
        // request is held, which it is until this transfer ends.
        let op = unsafe { self.mover.start(Dir::Write, local, remote, self.depth) }?;
        slot.as_mut().expect("checked").stage = Stage::Pushing(op);
        self.mover.pump(&mut self.link.poster(ctx));
        Ok(())
    }

    /// Fails every transfer in progress ([`OpError::Cancelled`]); their requests are
    /// answered as failed by the next [`progress`](Self::progress) calls, each once,
    /// as their outstanding operations drain.
    pub fn cancel_all(&mut self) -> usize {
        self.mover.cancel_all()
    }

    /// Whether nothing is held and every slot is free.
    pub fn idle(&self) -> bool {
        self.held() == 0 && self.mover.idle()
    }
}
