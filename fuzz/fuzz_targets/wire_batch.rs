//! A whole received batch (flow metadata + messages) as a peer could write it into our
//! receive ring: parsing must never panic, never read past the batch, and account for
//! every byte it hands out.
#![no_main]

use copyrpc_core::wire::{padded_message_size, parse_batch};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(batch) = parse_batch(data) else { return };
    if batch.is_wrap() {
        return;
    }
    let mut used = 32u64; // the flow metadata
    let mut count = 0u64;
    for msg in batch.messages() {
        let Ok(msg) = msg else { break };
        let len = msg.payload.len() as u64;
        used += padded_message_size(msg.payload.len() as u32);
        count += 1;
        assert!(used <= data.len() as u64, "messages run past the batch");
        assert!(len <= data.len() as u64);
    }
    assert!(count <= u64::from(batch.meta().message_count));
});
