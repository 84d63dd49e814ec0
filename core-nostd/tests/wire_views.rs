//! The wire views' public setters and the accessors nothing else asserts: each setter
//! writes exactly the bytes `Repr::emit` writes for its field and leaves every other
//! byte alone; `buffer_len` is what `emit` writes; `is_response` reads the flag; the
//! batch iterator's `size_hint` is exact; each error has its own text.

use copyrpc_core::wire::{
    emit_message, parse_batch, to_response_id, FlowMetaRepr, FlowMetaView, HeaderRepr, HeaderView,
    WireError, FLOW_METADATA_SIZE, HEADER_SIZE, RESPONSE_FLAG,
};

/// Filler that no field value below contains, so an untouched byte is told apart.
const FILL: u8 = 0xa5;

/// Bytes `emit` writes for a header with every field set to distinct values.
fn emitted_header(repr: HeaderRepr) -> [u8; 16] {
    let mut buf = [FILL; 16];
    repr.emit(&mut HeaderView::new_unchecked(&mut buf[..]));
    buf
}

/// Asserts `after` differs from a `FILL` buffer only in `field` (a byte range), where it
/// holds what `emitted` holds there.
fn only_field_written(after: &[u8], emitted: &[u8], field: core::ops::Range<usize>, what: &str) {
    for (i, (&a, &e)) in after.iter().zip(emitted).enumerate() {
        if field.contains(&i) {
            assert_eq!(a, e, "{what}: byte {i} is not what emit writes");
        } else {
            assert_eq!(a, FILL, "{what}: byte {i} outside the field was written");
        }
    }
}

#[test]
fn header_setters_write_what_emit_writes_at_their_field_only() {
    let repr = HeaderRepr {
        call_id: 0x8123_4567,
        piggyback: 0x0203_0405,
        payload_len: 0x1011_1213,
    };
    let emitted = emitted_header(repr);
    type Setter = fn(&mut HeaderView<&mut [u8]>, &HeaderRepr);
    let setters: [(&str, core::ops::Range<usize>, Setter); 3] = [
        ("call_id", 0..4, |v, r| v.set_call_id(r.call_id)),
        ("piggyback", 4..8, |v, r| v.set_piggyback(r.piggyback)),
        ("payload_len", 8..12, |v, r| {
            v.set_payload_len(r.payload_len)
        }),
    ];
    for (what, field, set) in setters {
        let mut buf = [FILL; 16];
        set(&mut HeaderView::new_unchecked(&mut buf[..]), &repr);
        only_field_written(&buf, &emitted, field, what);
    }
    // All three together reproduce emit's header exactly, and read back.
    let mut buf = [FILL; 16];
    let mut view = HeaderView::new_unchecked(&mut buf[..]);
    view.set_call_id(repr.call_id);
    view.set_piggyback(repr.piggyback);
    view.set_payload_len(repr.payload_len);
    assert_eq!(HeaderRepr::parse(&view), Ok(repr));
    assert_eq!(buf, emitted);
}

#[test]
fn flow_meta_setters_write_what_emit_writes_at_their_field_only() {
    let repr = FlowMetaRepr {
        ring_credit_return: 0x0102_0304_0506_0708,
        credit_grant: 0x1112_1314_1516_1718,
        message_count: 0x2122_2324,
    };
    let mut emitted = [FILL; 40];
    repr.emit(&mut FlowMetaView::new_unchecked(&mut emitted[..]));
    type Setter = fn(&mut FlowMetaView<&mut [u8]>, &FlowMetaRepr);
    let setters: [(&str, core::ops::Range<usize>, Setter); 3] = [
        ("ring_credit_return", 0..8, |v, r| {
            v.set_ring_credit_return(r.ring_credit_return)
        }),
        ("credit_grant", 8..16, |v, r| {
            v.set_credit_grant(r.credit_grant)
        }),
        ("message_count", 16..20, |v, r| {
            v.set_message_count(r.message_count)
        }),
    ];
    for (what, field, set) in setters {
        let mut buf = [FILL; 40];
        set(&mut FlowMetaView::new_unchecked(&mut buf[..]), &repr);
        only_field_written(&buf, &emitted, field, what);
    }
    // The three setters and clear_padding together are emit, byte for byte.
    let mut buf = [FILL; 40];
    let mut view = FlowMetaView::new_unchecked(&mut buf[..]);
    view.set_ring_credit_return(repr.ring_credit_return);
    view.set_credit_grant(repr.credit_grant);
    view.set_message_count(repr.message_count);
    view.clear_padding();
    assert_eq!(FlowMetaRepr::parse(&view), Ok(repr));
    assert_eq!(buf, emitted);
}

#[test]
fn is_response_is_false_on_a_request_header_and_true_on_a_response() {
    for id in [0, 1, 0x7fff_ffff] {
        let request = emitted_header(HeaderRepr {
            call_id: id,
            piggyback: u32::MAX,
            payload_len: u32::MAX,
        });
        let view = HeaderView::new_checked(&request[..]).unwrap();
        assert!(!view.is_response(), "request {id:#x}");
        let response = emitted_header(HeaderRepr {
            call_id: to_response_id(id),
            piggyback: 0,
            payload_len: 0,
        });
        let view = HeaderView::new_checked(&response[..]).unwrap();
        assert!(view.is_response(), "response to {id:#x}");
        assert_eq!(view.call_id() & RESPONSE_FLAG, RESPONSE_FLAG);
    }
}

/// A batch of `count` messages of `len`-byte payloads, plus `trailing` zero blocks.
fn batch(count: u32, len: usize, trailing: usize) -> Vec<u8> {
    let padded = (HEADER_SIZE as usize + len).div_ceil(32) * 32;
    let mut buf = vec![0u8; 32 + count as usize * padded + 32 * trailing];
    FlowMetaRepr {
        ring_credit_return: 0,
        credit_grant: 0,
        message_count: count,
    }
    .emit(&mut FlowMetaView::new_unchecked(&mut buf[..]));
    for i in 0..count as usize {
        let at = 32 + i * padded;
        emit_message(&mut buf[at..], i as u32, 0, &vec![i as u8; len]).unwrap();
    }
    buf
}

/// The iterator yields at most `remaining + 1` items (the last may be the
/// trailing-bytes error), never fewer than 0: the hint is that bound, exactly, falling
/// by one per message and to `(0, Some(0))` once the iterator is done.
#[test]
fn size_hint_is_the_exact_bound_and_falls_as_the_iterator_advances() {
    let buf = batch(3, 40, 0);
    let batch3 = parse_batch(&buf).unwrap();
    let mut it = batch3.messages();
    for left in (0..=3usize).rev() {
        assert_eq!(it.size_hint(), (0, Some(left + 1)), "{left} messages left");
        let n = it.clone().count();
        assert!(n <= left + 1, "the upper bound holds: {n} items follow");
        if left > 0 {
            assert!(matches!(it.next(), Some(Ok(_))));
        }
    }
    assert_eq!(it.next(), None);
    assert_eq!(it.size_hint(), (0, Some(0)), "done");

    // With trailing bytes the bound is reached: three messages and the error.
    let buf = batch(3, 40, 1);
    let with_tail = parse_batch(&buf).unwrap();
    let mut it = with_tail.messages();
    assert_eq!(it.size_hint(), (0, Some(4)));
    assert_eq!(it.clone().count(), 4);
    for left in (1..=3usize).rev() {
        assert!(matches!(it.next(), Some(Ok(_))));
        assert_eq!(it.size_hint(), (0, Some(left)));
    }
    assert_eq!(it.next(), Some(Err(WireError::TrailingBytes)));
    assert_eq!(it.size_hint(), (0, Some(0)), "done after the error");

    // An empty batch: one possible item (an error), then done.
    let buf = batch(0, 0, 0);
    let empty = parse_batch(&buf).unwrap();
    let mut it = empty.messages();
    assert_eq!(it.size_hint(), (0, Some(1)));
    assert_eq!(it.next(), None);
    assert_eq!(it.size_hint(), (0, Some(0)));
}

/// Each error says what went wrong in its own words: the host puts these texts in its
/// error messages, so an empty or shared text would hide which check refused.
#[test]
fn wire_errors_display_distinct_nonempty_text() {
    let all = [
        WireError::Truncated,
        WireError::Misaligned,
        WireError::ImmOverflow,
        WireError::PayloadTooLarge,
        WireError::TrailingBytes,
    ];
    let texts: Vec<String> = all.iter().map(ToString::to_string).collect();
    for (e, t) in all.iter().zip(&texts) {
        assert!(!t.is_empty(), "{e:?}");
    }
    let mut unique = texts.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), all.len(), "{texts:?}");
}

/// `buffer_len` is the room a caller must give `emit`: exactly the bytes it writes.
#[test]
fn buffer_len_is_what_emit_writes() {
    let header = HeaderRepr {
        call_id: 1,
        piggyback: 2,
        payload_len: 3,
    };
    let mut buf = [FILL; 64];
    header.emit(&mut HeaderView::new_unchecked(&mut buf[..]));
    let written = buf.iter().rposition(|&b| b != FILL).unwrap() + 1;
    assert_eq!(header.buffer_len(), HEADER_SIZE as usize);
    assert!(written <= header.buffer_len());
    assert!(buf[header.buffer_len()..].iter().all(|&b| b == FILL));

    let meta = FlowMetaRepr {
        ring_credit_return: 1,
        credit_grant: 2,
        message_count: 3,
    };
    let mut buf = [FILL; 64];
    meta.emit(&mut FlowMetaView::new_unchecked(&mut buf[..]));
    // The padding is written (as zeros) up to the last byte of the metadata.
    let written = buf.iter().rposition(|&b| b != FILL).unwrap() + 1;
    assert_eq!(meta.buffer_len(), written);
    assert_eq!(meta.buffer_len(), FLOW_METADATA_SIZE as usize);
}
