//! Properties of the wire decoders: total on arbitrary input, exact on emitted input.

use copyrpc_core::wire::{
    decode_imm, emit_message, encode_imm, padded_message_size, parse_batch, FlowMetaRepr,
    FlowMetaView, HeaderRepr, HeaderView, Imm,
};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    /// Any bytes: no panic, and the iterator ends within len/32 + 1 items.
    #[test]
    fn parse_batch_is_total_and_bounded(buf in prop::collection::vec(any::<u8>(), 0..600),
                                        count in any::<u32>()) {
        let mut buf = buf;
        if buf.len() >= 20 {
            // Steer half the cases to plausible counts so the message loop is reached.
            let count = if count % 2 == 0 { count % 8 } else { count };
            buf[16..20].copy_from_slice(&count.to_le_bytes());
        }
        if let Ok(batch) = parse_batch(&buf) {
            let mut items = 0usize;
            let mut consumed = 32u64;
            let mut errored = false;
            for item in batch.messages() {
                prop_assert!(!errored, "item after an error");
                items += 1;
                match item {
                    Ok(m) => consumed += m.padded_len(),
                    Err(_) => errored = true,
                }
            }
            prop_assert!(items <= buf.len() / 32 + 1);
            prop_assert!(consumed <= buf.len() as u64);
            if !errored && !batch.is_wrap() {
                prop_assert_eq!(consumed, buf.len() as u64);
            }
        }
        let _ = HeaderView::new_checked(&buf[..]).map(|v| HeaderRepr::parse(&v));
        let _ = FlowMetaView::new_checked(&buf[..]).map(|v| FlowMetaRepr::parse(&v));
    }

    /// Messages written with emit_message come back unchanged and in order.
    #[test]
    fn emitted_batches_round_trip(
        msgs in prop::collection::vec((any::<u32>(), any::<u32>(), prop::collection::vec(any::<u8>(), 0..100)), 0..8),
        credit in any::<u64>(), grant in any::<u64>(),
    ) {
        let total: u64 = 32 + msgs.iter().map(|m| padded_message_size(m.2.len() as u32)).sum::<u64>();
        let mut buf = vec![0xa5u8; total as usize];
        let meta = FlowMetaRepr { ring_credit_return: credit, credit_grant: grant, message_count: msgs.len() as u32 };
        meta.emit(&mut FlowMetaView::new_unchecked(&mut buf[..32]));
        let mut at = 32;
        for (call_id, piggyback, payload) in &msgs {
            at += emit_message(&mut buf[at..], *call_id, *piggyback, payload).unwrap();
        }
        prop_assert_eq!(at as u64, total);
        let imm = encode_imm(total).unwrap();
        prop_assert_eq!(decode_imm(Imm::from_bytes(imm.to_bytes())), total);

        let batch = parse_batch(&buf).unwrap();
        prop_assert_eq!(batch.meta(), meta);
        let parsed: Vec<_> = batch.messages().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(parsed.len(), msgs.len());
        for (m, (call_id, piggyback, payload)) in parsed.iter().zip(&msgs) {
            prop_assert_eq!(m.call_id, *call_id);
            prop_assert_eq!(m.piggyback, *piggyback);
            prop_assert_eq!(m.payload, &payload[..]);
        }
    }
}
