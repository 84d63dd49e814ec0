//! The 12 B message header and the 32 B flow metadata over arbitrary bytes, as the
//! receive path meets them: each view must agree with a plain little-endian decode, and
//! what follows from the fields must hold. A header at the start of the input frames a
//! message (its length decides how much of the rest is payload); parsed inside a batch
//! it must yield exactly that payload, or `Truncated`, or be followed by
//! `TrailingBytes`, and re-emitting it must give back the same bytes with zero padding.
//! A request header's allowance must let a reply of its full size through and no more.
//! Metadata at the start of the input decides how the batch parses.
//!
//! An earlier version only checked that a parsed view re-emits to the same fields.
//! Those checks were tautologies the optimiser removed, leaving no branch that depended
//! on the input: libFuzzer saw 14 edges whatever it tried and shrank its corpus to one
//! byte (docs/FUZZING.md).
#![no_main]

use copyrpc_core::credit::{internal_allowance_for_blocks, reply_fits_allowance};
use copyrpc_core::wire::{
    align_down, align_up, emit_message, from_response_id, is_response, padded_message_size,
    parse_batch, to_response_id, FlowMetaRepr, FlowMetaView, HeaderRepr, HeaderView, WireError,
    ALIGNMENT, FLOW_METADATA_SIZE, HEADER_SIZE, RESPONSE_FLAG,
};
use libfuzzer_sys::fuzz_target;

fn le32(data: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(data[at..at + 4].try_into().unwrap())
}

fn le64(data: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(data[at..at + 8].try_into().unwrap())
}

fn header(data: &[u8]) {
    let Ok(view) = HeaderView::new_checked(data) else {
        assert!(
            data.len() < HEADER_SIZE as usize,
            "{} B refused",
            data.len()
        );
        return;
    };
    let h = HeaderRepr::parse(&view).expect("a length-checked header parses");
    assert_eq!(
        (h.call_id, h.piggyback, h.payload_len),
        (le32(data, 0), le32(data, 4), le32(data, 8))
    );
    assert_eq!(view.is_response(), h.call_id & RESPONSE_FLAG != 0);

    // The input as the only message of a batch: metadata, then the input padded to 32.
    let mut batch = vec![0u8; FLOW_METADATA_SIZE as usize];
    FlowMetaRepr {
        ring_credit_return: 0,
        credit_grant: 0,
        message_count: 1,
    }
    .emit(&mut FlowMetaView::new_unchecked(&mut batch[..]));
    batch.extend_from_slice(data);
    batch.resize(align_up(batch.len() as u64) as usize, 0);
    let body = batch.len() as u64 - FLOW_METADATA_SIZE;
    let padded = padded_message_size(h.payload_len);
    // The message's bytes: the input, then the zeros that padded it to a block.
    let message = &batch[FLOW_METADATA_SIZE as usize..];
    let mut messages = parse_batch(&batch)
        .expect("one message in a body of at least 32 B")
        .messages();
    match messages.next() {
        Some(Ok(m)) => {
            assert!(padded <= body, "a {padded} B message in {body} B");
            let len = h.payload_len as usize;
            assert_eq!(m.payload, &message[HEADER_SIZE as usize..][..len]);
            assert_eq!((m.call_id, m.piggyback), (h.call_id, h.piggyback));
            let after = if padded == body {
                None
            } else {
                Some(Err(WireError::TrailingBytes))
            };
            assert_eq!(messages.next(), after);
            // Written again by the sender's path: the same header and payload, zeros after.
            let mut out = vec![0xffu8; padded as usize];
            assert_eq!(
                emit_message(&mut out, h.call_id, h.piggyback, m.payload),
                Ok(padded as usize)
            );
            let used = HEADER_SIZE as usize + len;
            assert_eq!(&out[..used], &message[..used]);
            assert!(out[used..].iter().all(|&b| b == 0), "padding not zeroed");
        }
        Some(Err(e)) => {
            assert_eq!(e, WireError::Truncated);
            assert!(padded > body, "a {padded} B message refused in {body} B");
            assert_eq!(messages.next(), None);
        }
        None => panic!("a batch declaring one message yielded nothing"),
    }

    if is_response(h.call_id) {
        assert_eq!(to_response_id(from_response_id(h.call_id)), h.call_id);
    } else {
        // The replier may send `blocks * 32 + 20` bytes (one padded block more than the
        // blocks, less the header) and not one more.
        let paid = internal_allowance_for_blocks(h.piggyback);
        let largest = u64::from(h.piggyback) * ALIGNMENT + ALIGNMENT - HEADER_SIZE;
        assert!(reply_fits_allowance(align_up(HEADER_SIZE + largest), paid));
        assert!(!reply_fits_allowance(
            align_up(HEADER_SIZE + largest + 1),
            paid
        ));
    }
}

fn flow_meta(data: &[u8]) {
    let Ok(view) = FlowMetaView::new_checked(data) else {
        assert!(
            data.len() < FLOW_METADATA_SIZE as usize,
            "{} B refused",
            data.len()
        );
        return;
    };
    let meta = FlowMetaRepr::parse(&view).expect("a length-checked view parses");
    assert_eq!(
        (
            meta.ring_credit_return,
            meta.credit_grant,
            meta.message_count
        ),
        (le64(data, 0), le64(data, 8), le32(data, 16))
    );
    assert_eq!(view.is_wrap(), meta.message_count == u32::MAX);
    let mut out = [0xffu8; FLOW_METADATA_SIZE as usize];
    meta.emit(&mut FlowMetaView::new_unchecked(&mut out[..]));
    assert_eq!(&out[..20], &data[..20]);
    assert!(
        out[20..].iter().all(|&b| b == 0),
        "metadata padding not zeroed"
    );

    // The input as a batch (cut to whole blocks): the metadata decides how it parses.
    let batch = &data[..align_down(data.len() as u64) as usize];
    let body = batch.len() as u64 - FLOW_METADATA_SIZE;
    match parse_batch(batch) {
        Ok(b) if meta.is_wrap() => assert_eq!(b.messages().next(), None),
        Ok(b) => {
            assert!(u64::from(meta.message_count) * ALIGNMENT <= body);
            let mut used = 0;
            let mut count = 0;
            for m in b.messages() {
                let Ok(m) = m else { break };
                used += m.padded_len();
                count += 1;
            }
            assert!(used <= body && count <= meta.message_count);
        }
        Err(e) => {
            assert_eq!(e, WireError::Truncated);
            assert!(!meta.is_wrap() && u64::from(meta.message_count) * ALIGNMENT > body);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    header(data);
    flow_meta(data);
});
