//! C ABI over the no_std core, for C poll loops (DPDK/SPDK style) and SmartNIC firmware.
//!
//! It grows with the core: today it exposes the wire arithmetic a C peer needs to size
//! rings and decode immediates. The declarations are in `linker/include/copyrpc.h`; the
//! freestanding link check (`linker/freestanding/`) links these symbols with
//! `gcc -nostdlib` and calls them from C.
#![cfg_attr(not(test), no_std)]

use copyrpc_core::wire;

/// Bytes one message with `payload_len` payload bytes occupies in a ring (header + payload,
/// padded to 32).
#[unsafe(no_mangle)]
pub extern "C" fn copyrpc_padded_message_size(payload_len: u32) -> u64 {
    wire::padded_message_size(payload_len)
}

/// Encodes a batch length as the 32-bit immediate value (host order). Returns 0 and leaves
/// `*out` untouched when `delta` is not a multiple of 32 or does not fit, or `out` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn copyrpc_encode_imm(delta: u64, out: Option<&mut u32>) -> i32 {
    match (wire::encode_imm(delta), out) {
        (Ok(imm), Some(out)) => {
            *out = imm.value();
            1
        }
        _ => 0,
    }
}

/// Decodes an immediate value (host order) into the batch length in bytes.
#[unsafe(no_mangle)]
pub extern "C" fn copyrpc_decode_imm(imm: u32) -> u64 {
    wire::decode_imm(wire::Imm::from_bytes(imm.to_be_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_abi_matches_the_core() {
        assert_eq!(copyrpc_padded_message_size(21), 64);
        let mut imm = 0;
        assert_eq!(copyrpc_encode_imm(96, Some(&mut imm)), 1);
        assert_eq!(imm, 3);
        assert_eq!(copyrpc_decode_imm(imm), 96);
        let mut untouched = 7;
        assert_eq!(copyrpc_encode_imm(33, Some(&mut untouched)), 0);
        assert_eq!(copyrpc_encode_imm(96, None), 0);
        assert_eq!(untouched, 7);
    }
}
