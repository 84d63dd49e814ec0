//! A received batch described by its structure rather than its bytes: flow metadata
//! (credit return, grant, message count, wrap), messages (call ids, response flag,
//! response allowances, payloads) and the ways a sender can get the framing wrong
//! (a message count off by some, zeroed blocks after the last message, garbage in the
//! padding). [`BatchInput::check`] encodes it with the core's own writers, parses the
//! bytes back with the core's receive path and checks that every field comes back and
//! every mis-framing is reported as the layout says it must be.
//!
//! Shared by `tests/wire_structured.rs` and the fuzz target `wire_batch_structured`
//! (`#[path]`-included there), so the fuzzer and `cargo test` check the same
//! properties. A fuzzer mutating bytes of a batch mostly breaks the framing in the
//! first header; mutating this structure keeps most inputs well framed and moves one
//! thing at a time.

#![allow(dead_code)]

use arbitrary::Arbitrary;
use copyrpc_core::credit::{allowance_blocks, internal_allowance_for_blocks, reply_fits_allowance};
use copyrpc_core::wire::{
    align_up, decode_imm, emit_message, encode_imm, from_response_id, is_response,
    padded_message_size, parse_batch, to_response_id, FlowMetaRepr, FlowMetaView, HeaderRepr,
    HeaderView, Imm, WireError, ALIGNMENT, FLOW_METADATA_SIZE, HEADER_SIZE, MAX_CALL_ID,
    WRAP_MESSAGE_COUNT,
};

/// Messages of one batch that are encoded; more are ignored, so one input stays small.
pub const MAX_MESSAGES: usize = 48;
/// Payload bytes of one message that are encoded (past the inline and copy-size edges).
pub const MAX_PAYLOAD: usize = 300;

/// One batch as a sender would build it, plus the framing errors to inject.
#[derive(Arbitrary, Debug, Clone)]
pub struct BatchInput {
    pub ring_credit_return: u64,
    pub credit_grant: u64,
    pub messages: Vec<MessageInput>,
    /// Zeroed 32 B blocks after the last message (`% 4`): a sender whose immediate and
    /// message lengths disagree.
    pub trailing_blocks: u8,
    /// Added to the true message count in the metadata.
    pub count_delta: Option<i8>,
    /// 0 makes the batch a wrap marker, whose body the receiver never reads.
    pub marker: u8,
    /// Written into every padding byte (metadata and messages); a sender writes zeros,
    /// and the receiver must not care.
    pub padding_fill: u8,
}

/// One message of a batch.
#[derive(Arbitrary, Debug, Clone)]
pub struct MessageInput {
    /// Masked to [`MAX_CALL_ID`]; the response flag is `response`.
    pub call_id: u32,
    pub response: bool,
    /// Requests: the response allowance asked for, in bytes (the header carries blocks).
    pub response_allowance: u32,
    pub payload: Vec<u8>,
}

/// What one message must parse back as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub call_id: u32,
    pub piggyback: u32,
    pub payload: Vec<u8>,
    /// The allowance asked for, for requests.
    pub asked: Option<u32>,
}

/// The bytes of a batch and what they must parse back to.
#[derive(Debug, Clone)]
pub struct Encoded {
    pub bytes: Vec<u8>,
    pub meta: FlowMetaRepr,
    pub messages: Vec<Expected>,
    pub trailing_blocks: usize,
}

impl MessageInput {
    fn expected(&self) -> Expected {
        let id = self.call_id & MAX_CALL_ID;
        let payload = self.payload[..self.payload.len().min(MAX_PAYLOAD)].to_vec();
        if self.response {
            // A reply's header carries no allowance (`ReplyWriter::write`).
            Expected {
                call_id: to_response_id(id),
                piggyback: 0,
                payload,
                asked: None,
            }
        } else {
            Expected {
                call_id: id,
                piggyback: allowance_blocks(self.response_allowance),
                payload,
                asked: Some(self.response_allowance),
            }
        }
    }
}

impl BatchInput {
    pub fn is_wrap(&self) -> bool {
        self.marker == 0
    }

    /// The batch's bytes, written by the core's `emit_message` and `FlowMetaRepr::emit`.
    pub fn encode(&self) -> Encoded {
        let messages: Vec<Expected> = self
            .messages
            .iter()
            .take(MAX_MESSAGES)
            .map(MessageInput::expected)
            .collect();
        let mut bytes = vec![0u8; FLOW_METADATA_SIZE as usize];
        for m in &messages {
            let start = bytes.len();
            let padded = padded_message_size(m.payload.len() as u32) as usize;
            bytes.resize(start + padded, 0);
            let written = emit_message(&mut bytes[start..], m.call_id, m.piggyback, &m.payload);
            assert_eq!(written, Ok(padded), "emit_message into its padded size");
            let used = start + HEADER_SIZE as usize + m.payload.len();
            bytes[used..start + padded].fill(self.padding_fill);
        }
        let trailing_blocks = usize::from(self.trailing_blocks % 4);
        bytes.resize(bytes.len() + trailing_blocks * ALIGNMENT as usize, 0);
        let message_count = if self.is_wrap() {
            WRAP_MESSAGE_COUNT
        } else {
            let n = messages.len() as i64 + i64::from(self.count_delta.unwrap_or(0));
            n.clamp(0, i64::from(u32::MAX - 1)) as u32
        };
        let meta = FlowMetaRepr {
            ring_credit_return: self.ring_credit_return,
            credit_grant: self.credit_grant,
            message_count,
        };
        meta.emit(&mut FlowMetaView::new_unchecked(
            &mut bytes[..FLOW_METADATA_SIZE as usize],
        ));
        bytes[20..FLOW_METADATA_SIZE as usize].fill(self.padding_fill);
        Encoded {
            bytes,
            meta,
            messages,
            trailing_blocks,
        }
    }

    /// Encodes, parses back and checks; panics on the first disagreement. Returns the
    /// number of messages that parsed, so callers can see the inputs do something.
    pub fn check(&self) -> usize {
        let enc = self.encode();
        let len = enc.bytes.len() as u64;
        // The immediate the sender posts for these bytes, as the receiver decodes it.
        let imm = encode_imm(len).expect("an aligned batch of a few KiB fits the immediate");
        assert_eq!(decode_imm(Imm::from_bytes(imm.to_bytes())), len);

        let view = FlowMetaView::new_checked(&enc.bytes[..]).expect("32 B of metadata");
        assert_eq!(FlowMetaRepr::parse(&view), Ok(enc.meta));
        assert_eq!(view.is_wrap(), self.is_wrap());

        let parsed = parse_batch(&enc.bytes);
        if self.is_wrap() {
            let batch = parsed.expect("a wrap marker parses whatever its body holds");
            assert!(batch.is_wrap());
            assert_eq!(batch.meta(), enc.meta);
            assert_eq!(batch.messages().next(), None);
            return 0;
        }
        let body = len - FLOW_METADATA_SIZE;
        let declared = enc.meta.message_count as usize;
        if declared as u64 * ALIGNMENT > body {
            assert_eq!(parsed.err(), Some(WireError::Truncated), "count {declared}");
            return 0;
        }
        let batch = parsed.expect("a count the body can hold parses");
        assert_eq!(batch.meta(), enc.meta);
        // What the body holds, in order: the messages, then each zeroed block, which
        // reads as an empty request with call id 0 and no allowance.
        let zero = Expected {
            call_id: 0,
            piggyback: 0,
            payload: Vec::new(),
            asked: None,
        };
        let units: Vec<&Expected> = enc
            .messages
            .iter()
            .chain(std::iter::repeat_n(&zero, enc.trailing_blocks))
            .collect();
        let mut it = batch.messages();
        let mut pos = FLOW_METADATA_SIZE as usize;
        let shown = declared.min(units.len());
        for (k, want) in units.iter().take(shown).enumerate() {
            let got = match it.next() {
                Some(Ok(m)) => m,
                other => panic!("message {k} of {declared}: {other:?}"),
            };
            assert_eq!(got.call_id, want.call_id, "message {k}");
            assert_eq!(got.piggyback, want.piggyback, "message {k}");
            assert_eq!(got.payload, &want.payload[..], "message {k}");
            assert_eq!(got.is_response(), is_response(want.call_id));
            // The header view at the message's start agrees with the iterator.
            let header = HeaderRepr::parse(&HeaderView::new_unchecked(&enc.bytes[pos..]));
            assert_eq!(
                header,
                Ok(HeaderRepr {
                    call_id: want.call_id,
                    piggyback: want.piggyback,
                    payload_len: want.payload.len() as u32,
                })
            );
            pos += got.padded_len() as usize;
            if got.is_response() {
                assert_eq!(to_response_id(from_response_id(got.call_id)), got.call_id);
            } else {
                check_allowance(got.piggyback, want.asked);
            }
        }
        let end = if declared > units.len() {
            Some(Err(WireError::Truncated))
        } else if declared < units.len() {
            Some(Err(WireError::TrailingBytes))
        } else {
            assert_eq!(pos as u64, len, "well framed: the messages cover the batch");
            None
        };
        assert_eq!(it.next(), end);
        assert_eq!(it.next(), None, "the iterator ends after its error");
        shown
    }
}

/// The credit a request's header carries: the replier may send at least what the caller
/// asked for, and releases exactly what the caller paid.
fn check_allowance(blocks: u32, asked: Option<u32>) {
    let paid = internal_allowance_for_blocks(blocks);
    let largest_reply = u64::from(blocks) * ALIGNMENT + ALIGNMENT - HEADER_SIZE;
    assert!(reply_fits_allowance(
        align_up(HEADER_SIZE + largest_reply),
        paid
    ));
    assert!(!reply_fits_allowance(
        align_up(HEADER_SIZE + largest_reply + 1),
        paid
    ));
    if let Some(asked) = asked {
        assert!(
            u64::from(asked) <= u64::from(blocks) * ALIGNMENT,
            "asked {asked}, blocks {blocks}"
        );
    }
}
