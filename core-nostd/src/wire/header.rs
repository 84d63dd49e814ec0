//! The 12-byte message header.

use core::mem::{offset_of, size_of};

use zerocopy::little_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{is_response, WireError, HEADER_SIZE};

/// The header as it lies in the ring. Little-endian field types make a missed byte
/// swap a type error, and `Unaligned` lets it sit at any offset of a byte buffer.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct RawHeader {
    call_id: U32,
    piggyback: U32,
    payload_len: U32,
}

const _: () = assert!(size_of::<RawHeader>() as u64 == HEADER_SIZE);
const _: () = assert!(offset_of!(RawHeader, call_id) == 0);
const _: () = assert!(offset_of!(RawHeader, piggyback) == 4);
const _: () = assert!(offset_of!(RawHeader, payload_len) == 8);

/// A typed view of a message header at the start of `buffer`.
///
/// The buffer may be longer than the header (the payload usually follows); only the
/// first [`HEADER_SIZE`] bytes are read or written.
#[derive(Debug, Clone, Copy)]
pub struct HeaderView<B: AsRef<[u8]>> {
    buffer: B,
}

impl<B: AsRef<[u8]>> HeaderView<B> {
    /// Wraps `buffer` without checking it; accessors panic if it is shorter than the header.
    #[inline]
    pub const fn new_unchecked(buffer: B) -> Self {
        Self { buffer }
    }

    /// Wraps `buffer` after [`check_len`](Self::check_len).
    #[inline]
    pub fn new_checked(buffer: B) -> Result<Self, WireError> {
        let view = Self::new_unchecked(buffer);
        view.check_len()?;
        Ok(view)
    }

    /// Succeeds iff the buffer holds a whole header, after which no accessor panics.
    #[inline]
    pub fn check_len(&self) -> Result<(), WireError> {
        if (self.buffer.as_ref().len() as u64) < HEADER_SIZE {
            Err(WireError::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> B {
        self.buffer
    }

    #[inline]
    fn raw(&self) -> &RawHeader {
        match RawHeader::ref_from_prefix(self.buffer.as_ref()) {
            Ok((raw, _)) => raw,
            Err(_) => panic!("HeaderView shorter than HEADER_SIZE: call check_len first"),
        }
    }

    /// The call id; the MSB marks a response.
    #[inline]
    pub fn call_id(&self) -> u32 {
        self.raw().call_id.get()
    }

    /// Requests: the response allowance in 32 B blocks. Responses: not interpreted here.
    #[inline]
    pub fn piggyback(&self) -> u32 {
        self.raw().piggyback.get()
    }

    /// Payload bytes that follow the header.
    #[inline]
    pub fn payload_len(&self) -> u32 {
        self.raw().payload_len.get()
    }

    /// Whether this header starts a response.
    #[inline]
    pub fn is_response(&self) -> bool {
        is_response(self.call_id())
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> HeaderView<B> {
    #[inline]
    fn raw_mut(&mut self) -> &mut RawHeader {
        match RawHeader::mut_from_prefix(self.buffer.as_mut()) {
            Ok((raw, _)) => raw,
            Err(_) => panic!("HeaderView shorter than HEADER_SIZE: call check_len first"),
        }
    }

    /// Sets the call id.
    #[inline]
    pub fn set_call_id(&mut self, value: u32) {
        self.raw_mut().call_id.set(value);
    }

    /// Sets the piggyback word.
    #[inline]
    pub fn set_piggyback(&mut self, value: u32) {
        self.raw_mut().piggyback.set(value);
    }

    /// Sets the payload length.
    #[inline]
    pub fn set_payload_len(&mut self, value: u32) {
        self.raw_mut().payload_len.set(value);
    }
}

/// A message header as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeaderRepr {
    /// Call id; the MSB marks a response.
    pub call_id: u32,
    /// Requests: response allowance in 32 B blocks.
    pub piggyback: u32,
    /// Payload bytes that follow the header.
    pub payload_len: u32,
}

impl HeaderRepr {
    /// Reads a header; checks the length itself, so an unchecked view is fine.
    #[inline]
    pub fn parse<B: AsRef<[u8]>>(view: &HeaderView<B>) -> Result<Self, WireError> {
        view.check_len()?;
        Ok(Self {
            call_id: view.call_id(),
            piggyback: view.piggyback(),
            payload_len: view.payload_len(),
        })
    }

    /// Bytes [`emit`](Self::emit) writes.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_SIZE as usize
    }

    /// Writes every header field; panics only if the view is shorter than `buffer_len()`.
    #[inline]
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut HeaderView<B>) {
        let raw = view.raw_mut();
        raw.call_id.set(self.call_id);
        raw.piggyback.set(self.piggyback);
        raw.payload_len.set(self.payload_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_buffers_are_rejected() {
        assert_eq!(
            HeaderView::new_checked(&[0u8; 11][..]).err(),
            Some(WireError::Truncated)
        );
        assert_eq!(
            HeaderRepr::parse(&HeaderView::new_unchecked(&[0u8; 3][..])),
            Err(WireError::Truncated)
        );
        assert!(HeaderView::new_checked(&[0u8; 12][..]).is_ok());
    }

    #[test]
    fn setters_touch_only_their_field() {
        let mut buf = [0xaau8; 16];
        let mut view = HeaderView::new_unchecked(&mut buf[..]);
        view.set_piggyback(0x0102_0304);
        assert_eq!(
            buf,
            [
                0xaa, 0xaa, 0xaa, 0xaa, 0x04, 0x03, 0x02, 0x01, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa,
                0xaa, 0xaa
            ]
        );
    }
}
