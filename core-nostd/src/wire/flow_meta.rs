//! The 32-byte flow metadata that starts every batch.

use core::mem::{offset_of, size_of};

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{WireError, FLOW_METADATA_SIZE, WRAP_MESSAGE_COUNT};

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct RawFlowMeta {
    ring_credit_return: U64,
    credit_grant: U64,
    message_count: U32,
    padding: [u8; 12],
}

const _: () = assert!(size_of::<RawFlowMeta>() as u64 == FLOW_METADATA_SIZE);
const _: () = assert!(offset_of!(RawFlowMeta, ring_credit_return) == 0);
const _: () = assert!(offset_of!(RawFlowMeta, credit_grant) == 8);
const _: () = assert!(offset_of!(RawFlowMeta, message_count) == 16);
const _: () = assert!(offset_of!(RawFlowMeta, padding) == 20);

/// A typed view of the flow metadata at the start of `buffer`.
///
/// Parsing accepts non-zero padding: emitters always write zeros, so a non-zero pad
/// can only come from a newer peer that found a use for it, and refusing its batches
/// would wedge the connection for no safety gain (nothing here reads the pad).
#[derive(Debug, Clone, Copy)]
pub struct FlowMetaView<B: AsRef<[u8]>> {
    buffer: B,
}

impl<B: AsRef<[u8]>> FlowMetaView<B> {
    /// Wraps `buffer` without checking it; accessors panic if it is shorter than 32 B.
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

    /// Succeeds iff the buffer holds whole metadata, after which no accessor panics.
    #[inline]
    pub fn check_len(&self) -> Result<(), WireError> {
        if (self.buffer.as_ref().len() as u64) < FLOW_METADATA_SIZE {
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

    fn raw(&self) -> &RawFlowMeta {
        match RawFlowMeta::ref_from_prefix(self.buffer.as_ref()) {
            Ok((raw, _)) => raw,
            Err(_) => panic!("FlowMetaView shorter than 32 B: call check_len first"),
        }
    }

    /// Bytes of the sender's recv ring consumed since its previous notification.
    #[inline]
    pub fn ring_credit_return(&self) -> u64 {
        self.raw().ring_credit_return.get()
    }

    /// New credit, in bytes, for requests to the sender.
    #[inline]
    pub fn credit_grant(&self) -> u64 {
        self.raw().credit_grant.get()
    }

    /// Messages that follow, or [`WRAP_MESSAGE_COUNT`].
    #[inline]
    pub fn message_count(&self) -> u32 {
        self.raw().message_count.get()
    }

    /// Whether this is a wrap marker.
    #[inline]
    pub fn is_wrap(&self) -> bool {
        self.message_count() == WRAP_MESSAGE_COUNT
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> FlowMetaView<B> {
    fn raw_mut(&mut self) -> &mut RawFlowMeta {
        match RawFlowMeta::mut_from_prefix(self.buffer.as_mut()) {
            Ok((raw, _)) => raw,
            Err(_) => panic!("FlowMetaView shorter than 32 B: call check_len first"),
        }
    }

    /// Sets `ring_credit_return`.
    #[inline]
    pub fn set_ring_credit_return(&mut self, value: u64) {
        self.raw_mut().ring_credit_return.set(value);
    }

    /// Sets `credit_grant`.
    #[inline]
    pub fn set_credit_grant(&mut self, value: u64) {
        self.raw_mut().credit_grant.set(value);
    }

    /// Sets `message_count`.
    #[inline]
    pub fn set_message_count(&mut self, value: u32) {
        self.raw_mut().message_count.set(value);
    }

    /// Zeroes the padding, so stale ring bytes never leave the host.
    #[inline]
    pub fn clear_padding(&mut self) {
        self.raw_mut().padding = [0; 12];
    }
}

/// Flow metadata as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowMetaRepr {
    /// Bytes of the sender's recv ring consumed since its previous notification.
    pub ring_credit_return: u64,
    /// New credit, in bytes, for requests to the sender.
    pub credit_grant: u64,
    /// Messages that follow, or [`WRAP_MESSAGE_COUNT`].
    pub message_count: u32,
}

impl FlowMetaRepr {
    /// Reads metadata; checks the length itself, so an unchecked view is fine.
    pub fn parse<B: AsRef<[u8]>>(view: &FlowMetaView<B>) -> Result<Self, WireError> {
        view.check_len()?;
        Ok(Self {
            ring_credit_return: view.ring_credit_return(),
            credit_grant: view.credit_grant(),
            message_count: view.message_count(),
        })
    }

    /// Whether this is a wrap marker.
    #[inline]
    pub const fn is_wrap(&self) -> bool {
        self.message_count == WRAP_MESSAGE_COUNT
    }

    /// Bytes [`emit`](Self::emit) writes.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        FLOW_METADATA_SIZE as usize
    }

    /// Writes all 32 bytes, padding included; panics only if the view is shorter than
    /// `buffer_len()`.
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut FlowMetaView<B>) {
        let raw = view.raw_mut();
        raw.ring_credit_return.set(self.ring_credit_return);
        raw.credit_grant.set(self.credit_grant);
        raw.message_count.set(self.message_count);
        raw.padding = [0; 12];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonzero_padding_is_accepted() {
        let mut buf = [0xffu8; 32];
        buf[16..20].copy_from_slice(&3u32.to_le_bytes());
        let repr = FlowMetaRepr::parse(&FlowMetaView::new_checked(&buf[..]).unwrap()).unwrap();
        assert_eq!(repr.message_count, 3);
        assert_eq!(repr.credit_grant, u64::MAX);
    }

    #[test]
    fn short_buffers_are_rejected() {
        assert_eq!(
            FlowMetaView::new_checked(&[0u8; 31][..]).err(),
            Some(WireError::Truncated)
        );
        assert_eq!(
            FlowMetaRepr::parse(&FlowMetaView::new_unchecked(&[][..])),
            Err(WireError::Truncated)
        );
    }

    #[test]
    fn emit_clears_stale_padding() {
        let mut buf = [0xeeu8; 32];
        FlowMetaRepr {
            ring_credit_return: 0,
            credit_grant: 0,
            message_count: 0,
        }
        .emit(&mut FlowMetaView::new_unchecked(&mut buf[..]));
        assert_eq!(buf, [0u8; 32]);
    }
}
