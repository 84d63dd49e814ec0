//! The 12 B message header and the 32 B flow metadata views over arbitrary bytes: the
//! checked constructors must reject short input, never panic, and whatever parses must
//! re-emit to the same fields.
#![no_main]

use copyrpc_core::wire::{FlowMetaRepr, FlowMetaView, HeaderRepr, HeaderView};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(view) = HeaderView::new_checked(data) {
        let repr = HeaderRepr::parse(&view).expect("a length-checked header parses");
        let mut buf = [0u8; 64];
        let out = &mut buf[..repr.buffer_len()];
        let mut out_view = HeaderView::new_unchecked(out);
        repr.emit(&mut out_view);
        let again = HeaderRepr::parse(&HeaderView::new_checked(&buf[..repr.buffer_len()]).unwrap());
        assert_eq!(again, Ok(repr));
        assert_eq!(view.is_response(), view.call_id() & 0x8000_0000 != 0);
    } else {
        assert!(
            data.len() < 12,
            "a header view of {} bytes was refused",
            data.len()
        );
    }
    if let Ok(view) = FlowMetaView::new_checked(data) {
        if let Ok(repr) = FlowMetaRepr::parse(&view) {
            let mut buf = [0u8; 64];
            let mut out_view = FlowMetaView::new_unchecked(&mut buf[..repr.buffer_len()]);
            repr.emit(&mut out_view);
            let again =
                FlowMetaRepr::parse(&FlowMetaView::new_checked(&buf[..repr.buffer_len()]).unwrap());
            assert_eq!(again, Ok(repr));
            assert_eq!(view.is_wrap(), view.message_count() == u32::MAX);
        }
    } else {
        assert!(
            data.len() < 32,
            "a flow metadata view of {} bytes was refused",
            data.len()
        );
    }
});
