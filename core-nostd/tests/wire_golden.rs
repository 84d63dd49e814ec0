//! Golden bytes: each layout emitted and compared with bytes written out by hand from
//! the tables of docs/spec/wire.md.

use copyrpc_core::wire::{
    emit_message, encode_imm, parse_batch, FlowMetaRepr, FlowMetaView, HeaderRepr, HeaderView, Imm,
    WireError,
};

#[test]
fn header_emits_little_endian_fields_in_order() {
    let mut buf = [0xaau8; 12];
    let repr = HeaderRepr {
        call_id: 0x8000_0007,
        piggyback: 0x0000_0102,
        payload_len: 0x0a0b_0c0d,
    };
    repr.emit(&mut HeaderView::new_unchecked(&mut buf[..]));
    assert_eq!(
        buf,
        [
            0x07, 0x00, 0x00, 0x80, // call_id, response flag in the last byte
            0x02, 0x01, 0x00, 0x00, // piggyback
            0x0d, 0x0c, 0x0b, 0x0a, // payload_len
        ]
    );
    let view = HeaderView::new_checked(&buf[..]).unwrap();
    assert!(view.is_response());
    assert_eq!(HeaderRepr::parse(&view), Ok(repr));
}

#[test]
fn flow_metadata_emits_fields_and_zero_padding() {
    let mut buf = [0xeeu8; 32];
    let repr = FlowMetaRepr {
        ring_credit_return: 0x0102_0304_0506_0708,
        credit_grant: 0x1_0000_0040,
        message_count: 3,
    };
    repr.emit(&mut FlowMetaView::new_unchecked(&mut buf[..]));
    assert_eq!(
        buf,
        [
            0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // ring_credit_return
            0x40, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, // credit_grant
            0x03, 0x00, 0x00, 0x00, // message_count
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // pad
        ]
    );
    let view = FlowMetaView::new_checked(&buf[..]).unwrap();
    assert!(!view.is_wrap());
    assert_eq!(FlowMetaRepr::parse(&view), Ok(repr));
}

#[test]
fn wrap_marker_is_all_ones_count() {
    let mut buf = [0u8; 32];
    FlowMetaRepr {
        ring_credit_return: 0,
        credit_grant: 0,
        message_count: u32::MAX,
    }
    .emit(&mut FlowMetaView::new_unchecked(&mut buf[..]));
    assert_eq!(buf[16..20], [0xff, 0xff, 0xff, 0xff]);
    assert!(FlowMetaView::new_checked(&buf[..]).unwrap().is_wrap());
}

#[test]
fn imm_is_big_endian_units_of_32() {
    assert_eq!(encode_imm(64).unwrap().to_bytes(), [0x00, 0x00, 0x00, 0x02]);
    assert_eq!(encode_imm(32 * 0x0102_0304).unwrap().value(), 0x0102_0304);
    assert_eq!(
        Imm::from_bytes([0x00, 0x00, 0x01, 0x00]).value(),
        0x100,
        "byte 2 is the second least significant in network order"
    );
    assert_eq!(encode_imm(48), Err(WireError::Misaligned));
}

#[test]
fn message_emit_matches_literal_bytes() {
    let mut buf = [0xffu8; 64];
    let written = emit_message(&mut buf, 5, 2, b"hello").unwrap();
    assert_eq!(written, 32);
    let mut expected = [0xffu8; 64];
    expected[..32].copy_from_slice(&[
        0x05, 0x00, 0x00, 0x00, // call_id
        0x02, 0x00, 0x00, 0x00, // piggyback: 2 blocks of allowance
        0x05, 0x00, 0x00, 0x00, // payload_len
        b'h', b'e', b'l', b'l', b'o', // payload
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, // zero padding to 32
    ]);
    assert_eq!(buf, expected);
}

#[test]
fn literal_batch_parses_back() {
    #[rustfmt::skip]
    let batch: [u8; 128] = [
        // flow metadata
        0x40, 0, 0, 0, 0, 0, 0, 0,   // ring_credit_return = 64
        0x20, 0, 0, 0, 0, 0, 0, 0,   // credit_grant = 32
        2, 0, 0, 0,                  // message_count = 2
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        // request: call_id 9, allowance 1 block, 3 bytes of payload
        9, 0, 0, 0,  1, 0, 0, 0,  3, 0, 0, 0,
        b'a', b'b', b'c', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        // response to call 4, 21 bytes of payload: 33 bytes padded to 64
        4, 0, 0, 0x80,  0, 0, 0, 0,  21, 0, 0, 0,
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
        21, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0,
    ];
    let parsed = parse_batch(&batch).unwrap();
    assert!(!parsed.is_wrap());
    assert_eq!(
        parsed.meta(),
        FlowMetaRepr {
            ring_credit_return: 64,
            credit_grant: 32,
            message_count: 2
        }
    );
    let mut messages = parsed.messages();
    let request = messages.next().unwrap().unwrap();
    assert_eq!((request.call_id, request.piggyback), (9, 1));
    assert_eq!(request.payload, b"abc");
    assert!(!request.is_response());
    let response = messages.next().unwrap().unwrap();
    assert_eq!(response.call_id, 0x8000_0004);
    assert_eq!(
        response.payload,
        &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]
    );
    assert_eq!(response.padded_len(), 64);
    assert_eq!(messages.next(), None);
}
