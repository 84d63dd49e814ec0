//! The structure-aware batch model of the fuzz target `wire_batch_structured`
//! (`wire_model`), run under `cargo test`: hand-picked batches for each framing case,
//! the fuzz seeds, and pseudo-random structures.

mod wire_model;

use arbitrary::{Arbitrary, Unstructured};
use wire_model::{BatchInput, MessageInput};

fn request(call_id: u32, allowance: u32, len: usize) -> MessageInput {
    MessageInput {
        call_id,
        response: false,
        response_allowance: allowance,
        payload: (0..len).map(|i| (i * 7 + call_id as usize) as u8).collect(),
    }
}

fn response(call_id: u32, len: usize) -> MessageInput {
    MessageInput {
        response: true,
        ..request(call_id, 0, len)
    }
}

fn batch(messages: Vec<MessageInput>) -> BatchInput {
    BatchInput {
        ring_credit_return: 4096,
        credit_grant: 224,
        messages,
        trailing_blocks: 0,
        count_delta: None,
        marker: 1,
        padding_fill: 0,
    }
}

/// A small deterministic byte source for `Unstructured`.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn item10_structured_batches_encode_and_parse_back_for_every_framing_case() {
    let three = || {
        vec![
            request(1, 100, 0),
            response(0x7fff_ffff, 21),
            request(u32::MAX, u32::MAX, 220),
        ]
    };
    assert_eq!(batch(three()).check(), 3, "well framed");
    assert_eq!(batch(Vec::new()).check(), 0, "metadata only");
    let mut b = batch(three());
    b.padding_fill = 0xa5;
    assert_eq!(b.check(), 3, "padding content is ignored");
    b.trailing_blocks = 2;
    assert_eq!(
        b.check(),
        3,
        "trailing blocks: TrailingBytes after the messages"
    );
    b.count_delta = Some(2);
    assert_eq!(
        b.check(),
        5,
        "zeroed blocks counted in read as empty requests"
    );
    b.count_delta = Some(3);
    assert_eq!(
        b.check(),
        5,
        "one more than the body holds: Truncated at its end"
    );
    b.count_delta = Some(-1);
    assert_eq!(b.check(), 2, "one short: TrailingBytes");
    b.count_delta = Some(100);
    assert_eq!(b.check(), 0, "a count the body cannot hold fails up front");
    b.marker = 0;
    assert_eq!(b.check(), 0, "a wrap marker's body is never read");
}

#[test]
fn item10_the_fuzz_seeds_decode_to_batches_with_messages() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fuzz/seeds/wire_batch_structured"
    );
    let mut seeds = 0;
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let path = entry.expect("a directory entry").path();
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        let input = BatchInput::arbitrary_take_rest(Unstructured::new(&bytes))
            .unwrap_or_else(|e| panic!("{path:?}: {e}"));
        input.check();
        assert!(!input.messages.is_empty(), "{path:?} holds no message");
        seeds += 1;
    }
    assert!(seeds >= 3, "{seeds} seeds in {dir}");
}

#[test]
fn item10_random_structures_parse_back() {
    let (mut parsed, mut framed) = (0, 0);
    for seed in 0..3000 {
        let bytes = noise(seed, 64 + (seed as usize * 37) % 2048);
        let Ok(input) = BatchInput::arbitrary_take_rest(Unstructured::new(&bytes)) else {
            continue;
        };
        let n = input.check();
        parsed += n;
        if n > 0 && input.count_delta.is_none() && input.trailing_blocks % 4 == 0 {
            framed += 1;
        }
    }
    // The structures must reach the message path, not only the early refusals.
    assert!(parsed > 1000, "{parsed} messages parsed");
    assert!(framed > 100, "{framed} well-framed batches with messages");
}
