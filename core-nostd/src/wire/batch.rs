//! Whole batches: parsing what one WRITE-with-immediate delivered, and writing messages.

use super::{
    is_response, padded_message_size, FlowMetaRepr, FlowMetaView, HeaderRepr, HeaderView,
    WireError, ALIGNMENT, FLOW_METADATA_SIZE, HEADER_SIZE,
};

/// One message of a received batch, borrowing its payload from the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// Call id; the MSB marks a response.
    pub call_id: u32,
    /// Requests: response allowance in 32 B blocks.
    pub piggyback: u32,
    /// The payload, without header or padding.
    pub payload: &'a [u8],
}

impl Message<'_> {
    /// Whether this message is a response.
    #[inline]
    pub const fn is_response(&self) -> bool {
        is_response(self.call_id)
    }

    /// Ring bytes the message occupies.
    #[inline]
    pub const fn padded_len(&self) -> u64 {
        // A parsed payload came out of a slice whose padded length fit the batch,
        // so its length fits u32.
        padded_message_size(self.payload.len() as u32)
    }
}

/// A received batch: its flow metadata and the bytes of its messages.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    meta: FlowMetaRepr,
    body: &'a [u8],
}

impl<'a> Batch<'a> {
    /// The batch's flow metadata; read it before the messages (credit
    /// updates precede the messages they make room for: docs/spec/wire.md#parsing).
    #[inline]
    pub const fn meta(&self) -> FlowMetaRepr {
        self.meta
    }

    /// Whether this batch is a wrap marker; it then has no messages.
    #[inline]
    pub const fn is_wrap(&self) -> bool {
        self.meta.is_wrap()
    }

    /// The messages, in ring order. After the first error the iterator ends.
    #[inline]
    pub fn messages(&self) -> BatchMessages<'a> {
        BatchMessages {
            rest: self.body,
            remaining: if self.is_wrap() {
                0
            } else {
                self.meta.message_count
            },
            done: false,
        }
    }
}

/// Parses one received batch: `buf` is exactly the bytes one WRITE-with-immediate
/// delivered (its length is the decoded immediate).
///
/// A wrap marker's buffer covers the skipped tail of the ring; only its first 32 bytes
/// are read. For other batches the declared message count is checked against the
/// length up front (every message takes at least 32 bytes), so a huge count in a short
/// buffer fails here instead of in a long loop.
pub fn parse_batch(buf: &[u8]) -> Result<Batch<'_>, WireError> {
    let len = buf.len() as u64;
    if len < FLOW_METADATA_SIZE {
        return Err(WireError::Truncated);
    }
    if !len.is_multiple_of(ALIGNMENT) {
        return Err(WireError::Misaligned);
    }
    let meta = FlowMetaRepr::parse(&FlowMetaView::new_unchecked(buf))?;
    let body = buf.get(FLOW_METADATA_SIZE as usize..).unwrap_or(&[]);
    if meta.is_wrap() {
        return Ok(Batch { meta, body: &[] });
    }
    if meta.message_count as u64 * ALIGNMENT > body.len() as u64 {
        return Err(WireError::Truncated);
    }
    Ok(Batch { meta, body })
}

/// Iterator over a batch's messages; see [`Batch::messages`].
///
/// Each step consumes at least 32 bytes of the batch or ends the iteration, so the
/// work is bounded by the batch length whatever the headers say.
#[derive(Debug, Clone)]
pub struct BatchMessages<'a> {
    rest: &'a [u8],
    remaining: u32,
    done: bool,
}

impl<'a> BatchMessages<'a> {
    fn fail(&mut self, error: WireError) -> Option<Result<Message<'a>, WireError>> {
        self.done = true;
        Some(Err(error))
    }
}

impl<'a> Iterator for BatchMessages<'a> {
    type Item = Result<Message<'a>, WireError>;

    // Inline: the C library, with the core instantiated once per context class, kept
    // it out of line otherwise (docs/PERFORMANCE.md, "The C library: busy-poll loop
    // against the echo").
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.remaining == 0 {
            self.done = true;
            // Leftover bytes mean the sender's IMM delta and its message lengths
            // disagree; our ring positions would drift from the sender's.
            return if self.rest.is_empty() {
                None
            } else {
                Some(Err(WireError::TrailingBytes))
            };
        }
        let header = match HeaderRepr::parse(&HeaderView::new_unchecked(self.rest)) {
            Ok(header) => header,
            Err(error) => return self.fail(error),
        };
        let padded = padded_message_size(header.payload_len);
        if padded > self.rest.len() as u64 {
            return self.fail(WireError::Truncated);
        }
        let (message, rest) = self.rest.split_at(padded as usize);
        let start = HEADER_SIZE as usize;
        let payload = match message.get(start..start + header.payload_len as usize) {
            Some(payload) => payload,
            None => return self.fail(WireError::Truncated),
        };
        self.rest = rest;
        self.remaining -= 1;
        Some(Ok(Message {
            call_id: header.call_id,
            piggyback: header.piggyback,
            payload,
        }))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.done {
            (0, Some(0))
        } else {
            // One more item may be the trailing-bytes error.
            (0, Some(self.remaining as usize + 1))
        }
    }
}

/// Writes header, payload and zero padding at the start of `buf`; returns the padded
/// length written. Zeroing the padding keeps stale ring bytes from leaving the host.
/// Always inline, as `copy_payload`: the C library's context classes made LLVM keep
/// both out of its call and reply paths under a plain `#[inline]`.
#[inline(always)]
pub fn emit_message(
    buf: &mut [u8],
    call_id: u32,
    piggyback: u32,
    payload: &[u8],
) -> Result<usize, WireError> {
    let payload_len = u32::try_from(payload.len()).map_err(|_| WireError::PayloadTooLarge)?;
    let padded = padded_message_size(payload_len);
    if padded > buf.len() as u64 {
        return Err(WireError::Truncated);
    }
    let padded = padded as usize;
    let (message, _) = buf.split_at_mut(padded);
    // The padding is shorter than ALIGNMENT and ends the message, so zeroing the last
    // 32 B (one fixed-size store instead of a variable-length fill) covers it; the header
    // and payload written next overwrite whatever of those 32 B is theirs.
    let (_, last) = message.split_at_mut(padded - ALIGNMENT as usize);
    if let Some(last) = last.first_chunk_mut::<{ ALIGNMENT as usize }>() {
        *last = [0; ALIGNMENT as usize];
    }
    HeaderRepr {
        call_id,
        piggyback,
        payload_len,
    }
    .emit(&mut HeaderView::new_unchecked(&mut *message));
    copy_payload(
        &mut message[HEADER_SIZE as usize..][..payload.len()],
        payload,
    );
    Ok(padded)
}

/// `dst.copy_from_slice(src)` (equal lengths), without a library call for the small
/// payloads that dominate RPC traffic: a length in `16..=128` is covered by two
/// fixed-size copies of its first and last 16, 32 or 64 bytes (overlapping in the
/// middle, which is harmless between distinct buffers).
#[inline(always)]
fn copy_payload(dst: &mut [u8], src: &[u8]) {
    fn two<const N: usize>(dst: &mut [u8], src: &[u8]) -> bool {
        match (
            dst.first_chunk_mut::<N>(),
            src.first_chunk::<N>(),
            src.last_chunk::<N>(),
        ) {
            (Some(d), Some(s), Some(t)) => {
                *d = *s;
                if let Some(d) = dst.last_chunk_mut::<N>() {
                    *d = *t;
                }
                true
            }
            _ => false,
        }
    }
    let n = src.len();
    let done = dst.len() == n
        && match n {
            16..=32 => two::<16>(dst, src),
            33..=64 => two::<32>(dst, src),
            65..=128 => two::<64>(dst, src),
            _ => false,
        };
    if !done {
        dst.copy_from_slice(src);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::WRAP_MESSAGE_COUNT;

    fn meta(count: u32) -> [u8; 32] {
        let mut buf = [0u8; 32];
        buf[16..20].copy_from_slice(&count.to_le_bytes());
        buf
    }

    #[test]
    fn huge_count_in_short_buffer_fails_early() {
        assert_eq!(
            parse_batch(&meta(u32::MAX - 1)).err(),
            Some(WireError::Truncated)
        );
    }

    #[test]
    fn wrap_marker_ignores_the_skipped_tail() {
        let mut buf = [0x55u8; 96];
        buf[..32].copy_from_slice(&meta(WRAP_MESSAGE_COUNT));
        let batch = parse_batch(&buf).unwrap();
        assert!(batch.is_wrap());
        assert_eq!(batch.messages().count(), 0);
    }

    #[test]
    fn lengths_must_be_aligned() {
        assert_eq!(parse_batch(&[0u8; 31]).err(), Some(WireError::Truncated));
        assert_eq!(parse_batch(&[0u8; 40]).err(), Some(WireError::Misaligned));
    }

    #[test]
    fn payload_longer_than_batch_ends_iteration() {
        let mut buf = [0u8; 64];
        buf[..32].copy_from_slice(&meta(1));
        buf[40..44].copy_from_slice(&21u32.to_le_bytes()); // needs 64 B, 32 B remain
        let mut messages = parse_batch(&buf).unwrap().messages();
        assert_eq!(messages.next(), Some(Err(WireError::Truncated)));
        assert_eq!(messages.next(), None);
    }

    #[test]
    fn trailing_bytes_are_reported_once() {
        let mut buf = [0u8; 96];
        buf[..32].copy_from_slice(&meta(1));
        let mut messages = parse_batch(&buf).unwrap().messages();
        assert!(matches!(messages.next(), Some(Ok(m)) if m.payload.is_empty()));
        assert_eq!(messages.next(), Some(Err(WireError::TrailingBytes)));
        assert_eq!(messages.next(), None);
    }

    #[test]
    fn payload_copy_covers_every_length() {
        for n in 0..=200usize {
            let mut all = [0u8; 200];
            for (i, b) in all.iter_mut().enumerate() {
                *b = i as u8 ^ 0xa5;
            }
            let src = &all[..n];
            let mut buf = [0xeeu8; 256];
            let padded = emit_message(&mut buf, 7, 3, src).unwrap();
            assert_eq!(&buf[HEADER_SIZE as usize..][..n], src, "{n}");
            assert!(buf[HEADER_SIZE as usize + n..padded]
                .iter()
                .all(|&b| b == 0));
            assert!(buf[padded..].iter().all(|&b| b == 0xee), "{n}");
        }
    }

    #[test]
    fn emit_message_checks_room() {
        let mut buf = [0xffu8; 63];
        assert_eq!(
            emit_message(&mut buf, 1, 0, &[7; 21]),
            Err(WireError::Truncated)
        );
        assert_eq!(emit_message(&mut buf, 1, 0, &[7; 20]), Ok(32));
    }
}
