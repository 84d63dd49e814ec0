//! The messages of every layer (docs/spec/benchkv.md#messages): what clients send, what
//! daemons answer, and what daemons pass each other over Flux.
//!
//! The first design's `Request`/`Response` are Rust enums; here they are flat `#[repr(C)]` structs
//! with an op/status word, because they cross `/dev/shm` (and later the wire) and the
//! core's `Payload` bound needs every bit pattern to be a valid value: an enum read from a
//! slot a broken peer scribbled on would be undefined behaviour, a struct with an unknown
//! op is just a request we refuse. `RemoteRequest`/`RemoteResponse` of that design are these
//! same bytes (`zerocopy::IntoBytes::as_bytes` / `FromBytes::read_from_bytes`).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `Request::op` of a GET.
pub const OP_GET: u32 = 0;
/// `Request::op` of a PUT.
pub const OP_PUT: u32 = 1;

/// A GET or PUT of `key` on rank `rank` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Request {
    /// [`OP_GET`] or [`OP_PUT`].
    pub op: u32,
    /// The rank that owns the key.
    pub rank: u32,
    /// The key.
    pub key: u64,
    /// The value to store (PUT only).
    pub value: u64,
}

impl Request {
    /// A GET.
    pub fn get(rank: u32, key: u64) -> Self {
        Self {
            op: OP_GET,
            rank,
            key,
            value: 0,
        }
    }

    /// A PUT.
    pub fn put(rank: u32, key: u64, value: u64) -> Self {
        Self {
            op: OP_PUT,
            rank,
            key,
            value,
        }
    }
}

/// What a request got (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Response {
    /// One of the `Status` values as `u32`.
    pub status: u32,
    _pad: u32,
    /// The value read (GET found only).
    pub value: u64,
}

/// `Response::status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Status {
    /// The PUT was stored.
    PutOk = 0,
    /// The GET found `value`.
    GetOk = 1,
    /// The GET's key is not in the store.
    NotFound = 2,
    /// The store is full (a PUT of a key that was not preloaded).
    StoreFull = 3,
    /// The op word was neither GET nor PUT.
    BadOp = 4,
    /// The rank could not be reached (its endpoint failed, or no transport holds it).
    Unreachable = 5,
}

impl Response {
    /// A response with `status` and `value`.
    pub fn new(status: Status, value: u64) -> Self {
        Self {
            status: status as u32,
            _pad: 0,
            value,
        }
    }

    /// The status, if the word is one we know.
    pub fn status(&self) -> Option<Status> {
        [
            Status::PutOk,
            Status::GetOk,
            Status::NotFound,
            Status::StoreFull,
            Status::BadOp,
            Status::Unreachable,
        ]
        .into_iter()
        .find(|s| *s as u32 == self.status)
    }
}

/// What travels between daemon threads over Flux (`DelegatePayload`,
/// docs/spec/benchkv.md#messages): requests forwarded to the shard owner or to the daemon
/// holding a rank's endpoint, and their answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DelegatePayload {
    /// A request to serve (its `rank` says whether locally or through the endpoint).
    Req(Request),
    /// The answer to a `Req`.
    Resp(Response),
}

/// Shard (daemon) that owns `key` on its rank: `key % num_daemons` (docs/spec/benchkv.md#threads).
pub fn owner_of(key: u64, daemons: usize) -> usize {
    (key % daemons as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_sizes_are_fixed() {
        assert_eq!(std::mem::size_of::<Request>(), 24);
        assert_eq!(std::mem::size_of::<Response>(), 16);
    }

    #[test]
    fn bytes_round_trip_and_unknown_status_is_none() {
        let r = Request::put(3, 42, 7);
        let back = Request::read_from_bytes(r.as_bytes()).unwrap();
        assert_eq!(back, r);
        let mut resp = Response::new(Status::GetOk, 9);
        assert_eq!(resp.status(), Some(Status::GetOk));
        resp.status = 77;
        assert_eq!(resp.status(), None);
    }

    #[test]
    fn owner_spreads_keys_over_daemons() {
        assert_eq!(owner_of(0, 3), 0);
        assert_eq!(owner_of(4, 3), 1);
        assert_eq!(owner_of(u64::MAX, 1), 0);
    }
}
