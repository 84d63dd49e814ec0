//! Freestanding self-test of core-nostd + mlx5-raw: linked with `gcc -nostdlib -static`
//! (no libc, no std) by `check.sh` and run natively and under qemu-aarch64. Each check
//! returns its own number on failure so the exit code says which one broke.
#![no_std]

use copyrpc_core::wire::{
    self, parse_batch, FlowMetaRepr, FlowMetaView, HeaderRepr, HeaderView, RESPONSE_FLAG,
};
// Linked for its C ABI symbols, which start.c calls.
use copyrpc_linker as _;
use mlx5_raw::layout::{decode_cqe, CqeOpcode, CtrlSeg, FmCeSe, SendOpcode};
use zerocopy::IntoBytes;

extern "C" {
    /// Provided by start.c: writes a message and exits with status 99.
    fn copyrpc_freestanding_abort() -> !;
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    // SAFETY: start.c defines this symbol; it only issues the exit syscall.
    unsafe { copyrpc_freestanding_abort() }
}

/// Runs every check; 0 when all pass, else the number of the first one that failed.
#[unsafe(no_mangle)]
pub extern "C" fn copyrpc_freestanding_selftest() -> u32 {
    // 1-4: padding arithmetic (the examples of docs/spec/wire.md#padding).
    for (i, (len, padded)) in [(0, 32), (20, 32), (21, 64), (52, 64)]
        .into_iter()
        .enumerate()
    {
        if wire::padded_message_size(len) != padded {
            return 1 + i as u32;
        }
    }
    // 5: IMM round trip in network byte order.
    match wire::encode_imm(64) {
        Ok(imm) if imm.to_bytes() == [0, 0, 0, 2] && wire::decode_imm(imm) == 64 => {}
        _ => return 5,
    }
    // 6: a response header emitted byte for byte.
    let mut hdr = [0u8; 12];
    HeaderRepr {
        call_id: 5 | RESPONSE_FLAG,
        piggyback: 2,
        payload_len: 21,
    }
    .emit(&mut HeaderView::new_unchecked(&mut hdr[..]));
    if hdr != [5, 0, 0, 0x80, 2, 0, 0, 0, 21, 0, 0, 0] {
        return 6;
    }
    // 7-8: a one-message batch parses back.
    let mut batch = [0u8; 96];
    FlowMetaRepr {
        ring_credit_return: 64,
        credit_grant: 128,
        message_count: 1,
    }
    .emit(&mut FlowMetaView::new_unchecked(&mut batch[..32]));
    batch[32..44].copy_from_slice(&hdr);
    batch[44..65].fill(0xab);
    let Ok(parsed) = parse_batch(&batch) else {
        return 7;
    };
    let mut msgs = parsed.messages();
    match (msgs.next(), msgs.next()) {
        (Some(Ok(m)), None) if m.payload == [0xab; 21] && m.is_response() => {}
        _ => return 8,
    }
    // 9: reference TV1 control segment.
    let ctrl = CtrlSeg::new(
        SendOpcode::RdmaWriteImm,
        0x1234,
        0xabcde,
        3,
        FmCeSe::CQ_UPDATE | FmCeSe::SOLICITED,
        [0xde, 0xad, 0xbe, 0xef],
    );
    if ctrl.as_bytes()
        != [
            0x00, 0x12, 0x34, 0x09, 0x0a, 0xbc, 0xde, 0x03, 0, 0, 0, 0x0a, 0xde, 0xad, 0xbe, 0xef,
        ]
    {
        return 9;
    }
    // 10: reference TV3 responder CQE decodes.
    let mut cqe = [0u8; 64];
    cqe[32..48].copy_from_slice(&[
        0, 0, 0, 0x77, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0x10, 0,
    ]);
    cqe[56..64].copy_from_slice(&[0x00, 0x0a, 0xbc, 0xdf, 0x00, 0x05, 0x00, 0x13]);
    match decode_cqe(&cqe) {
        Ok(c)
            if c.opcode == CqeOpcode::RespWrImm
                && c.qpn == 0xabcdf
                && c.wqe_counter == 5
                && c.byte_cnt == 4096
                && c.imm == Some([0xde, 0xad, 0xbe, 0xef]) => {}
        _ => return 10,
    }
    0
}
