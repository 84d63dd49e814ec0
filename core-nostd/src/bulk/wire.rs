//! The bytes a bulk request and its reply carry in their copyrpc payloads, little-endian.
//!
//! ```text
//! Desc    (24 B): addr u64 | len u64 | rkey u32 | zero u32
//! Request (56 B): pattern u8 | zero [u8; 3] | tag u32 | put Desc | get Desc   (+ caller bytes)
//! Reply   (16 B): status u8 | zero [u8; 3] | tag u32 | bytes u64              (+ caller bytes)
//! ```
//!
//! `put` names the client's source (the server READs it), `get` the client's sink (the
//! server WRITEs it); a pattern that does not use one carries it zeroed.

/// A registered buffer as a peer may address it: remote address, length, rkey.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Desc {
    /// Address in the owner's registered region (the region's virtual address space).
    pub addr: u64,
    /// Bytes.
    pub len: u64,
    /// The region's remote key.
    pub rkey: u32,
}

/// Bytes of an encoded [`Desc`].
pub const DESC_SIZE: usize = 24;
/// Bytes of an encoded [`Request`] (before the caller's bytes).
pub const REQUEST_SIZE: usize = 8 + 2 * DESC_SIZE;
/// Bytes of an encoded [`Reply`] (before the caller's bytes).
pub const REPLY_SIZE: usize = 16;

const _: () = assert!(DESC_SIZE == 8 + 8 + 4 + 4);
const _: () = assert!(REQUEST_SIZE == 56);
const _: () = assert!(REPLY_SIZE == 1 + 3 + 4 + 8);

impl Desc {
    /// Encodes into 24 bytes.
    pub fn to_bytes(&self) -> [u8; DESC_SIZE] {
        let mut b = [0; DESC_SIZE];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_le_bytes());
        b
    }

    /// Decodes 24 bytes; `None` if the reserved word is not zero.
    pub fn from_bytes(b: &[u8; DESC_SIZE]) -> Option<Self> {
        if b[20..24] != [0; 4] {
            return None;
        }
        Some(Self {
            addr: u64::from_le_bytes(b[0..8].try_into().ok()?),
            len: u64::from_le_bytes(b[8..16].try_into().ok()?),
            rkey: u32::from_le_bytes(b[16..20].try_into().ok()?),
        })
    }
}

/// The four RPC patterns (docs/spec/bulk.md#patterns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Pattern {
    /// Header only: no one-sided transfer.
    HeaderOnly = 0,
    /// The client's data goes to the server: the server READs `put`, then replies.
    Put = 1,
    /// The server's data goes to the client: the server WRITEs `get`, then replies.
    Get = 2,
    /// Both: READ `put`, the handler runs, WRITE `get`, reply.
    Both = 3,
}

impl Pattern {
    /// Whether the server pulls the client's `put` buffer.
    pub const fn pulls(self) -> bool {
        matches!(self, Self::Put | Self::Both)
    }

    /// Whether the server pushes into the client's `get` buffer.
    pub const fn pushes(self) -> bool {
        matches!(self, Self::Get | Self::Both)
    }

    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::HeaderOnly,
            1 => Self::Put,
            2 => Self::Get,
            3 => Self::Both,
            _ => return None,
        })
    }
}

/// A bulk request's fixed part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Which pattern.
    pub pattern: Pattern,
    /// The caller's tag, echoed in the reply.
    pub tag: u32,
    /// The client's source buffer (zero unless the pattern pulls).
    pub put: Desc,
    /// The client's sink buffer (zero unless the pattern pushes).
    pub get: Desc,
}

impl Request {
    /// Encodes into the first [`REQUEST_SIZE`] bytes of `out` (at least that long).
    pub fn emit(&self, out: &mut [u8]) {
        let out = &mut out[..REQUEST_SIZE];
        out.fill(0);
        out[0] = self.pattern as u8;
        out[4..8].copy_from_slice(&self.tag.to_le_bytes());
        out[8..32].copy_from_slice(&self.put.to_bytes());
        out[32..56].copy_from_slice(&self.get.to_bytes());
    }

    /// Decodes the fixed part of `b`, returning it and the caller's bytes after it.
    /// `None` for a short message, an unknown pattern, nonzero reserved bytes, or a
    /// descriptor the pattern does not use that is not zero.
    pub fn parse(b: &[u8]) -> Option<(Self, &[u8])> {
        let (head, rest) = b.split_at_checked(REQUEST_SIZE)?;
        let pattern = Pattern::from_u8(head[0])?;
        if head[1..4] != [0; 3] {
            return None;
        }
        let put = Desc::from_bytes(head[8..32].try_into().ok()?)?;
        let get = Desc::from_bytes(head[32..56].try_into().ok()?)?;
        let zero = Desc::default();
        if (!pattern.pulls() && put != zero) || (!pattern.pushes() && get != zero) {
            return None;
        }
        let tag = u32::from_le_bytes(head[4..8].try_into().ok()?);
        Some((
            Self {
                pattern,
                tag,
                put,
                get,
            },
            rest,
        ))
    }
}

/// How the server ended a bulk request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    /// Every transfer completed.
    Ok = 0,
    /// A one-sided transfer failed (QP error, revoked key).
    TransferFailed = 1,
    /// The request was malformed or named an impossible transfer.
    BadRequest = 2,
    /// The server had no buffer or slot for it now.
    Busy = 3,
}

/// A bulk reply's fixed part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// The outcome.
    pub status: Status,
    /// The request's tag.
    pub tag: u32,
    /// Bytes written into the client's `get` buffer (or pulled, for a PUT).
    pub bytes: u64,
}

impl Reply {
    /// Encodes into the first [`REPLY_SIZE`] bytes of `out`.
    pub fn emit(&self, out: &mut [u8]) {
        let out = &mut out[..REPLY_SIZE];
        out.fill(0);
        out[0] = self.status as u8;
        out[4..8].copy_from_slice(&self.tag.to_le_bytes());
        out[8..16].copy_from_slice(&self.bytes.to_le_bytes());
    }

    /// Decodes the fixed part of `b`; `None` if short or malformed.
    pub fn parse(b: &[u8]) -> Option<(Self, &[u8])> {
        let (head, rest) = b.split_at_checked(REPLY_SIZE)?;
        let status = match head[0] {
            0 => Status::Ok,
            1 => Status::TransferFailed,
            2 => Status::BadRequest,
            3 => Status::Busy,
            _ => return None,
        };
        if head[1..4] != [0; 3] {
            return None;
        }
        Some((
            Self {
                status,
                tag: u32::from_le_bytes(head[4..8].try_into().ok()?),
                bytes: u64::from_le_bytes(head[8..16].try_into().ok()?),
            },
            rest,
        ))
    }
}
