//! A 64 B CQE as the NIC (or a corrupted buffer) left it: decoding must never panic, must
//! agree with the raw owner/opcode bits, and must never hand out a syndrome for a
//! successful completion.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mlx5_raw::layout::{decode_cqe, CqeOpcode};

fuzz_target!(|data: &[u8]| {
    match decode_cqe(data) {
        Ok(c) => {
            assert!(data.len() >= 64);
            let op_own = data[63];
            assert_eq!(c.owner, op_own & 1 == 1);
            assert_eq!(c.opcode.as_u8(), op_own >> 4);
            let is_err = matches!(c.opcode, CqeOpcode::ReqErr | CqeOpcode::RespErr);
            assert_eq!(c.error.is_some(), is_err);
            // compressed sessions are refused, never decoded as a completion
            assert_ne!((op_own >> 2) & 3, 3);
        }
        Err(_) => {}
    }
});
