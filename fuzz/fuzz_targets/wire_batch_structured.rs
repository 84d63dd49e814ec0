//! A batch built from a structure (`core-nostd/tests/wire_model`): metadata with credit
//! return and grant, messages with call ids, response flags, allowances and payloads,
//! and injected framing faults (count off by some, zeroed trailing blocks, garbage
//! padding, wrap). It is encoded with the core's writers and parsed back with its
//! receive path; every field must round-trip and every fault must be reported as the
//! layout says (`BatchInput::check`). `cargo test -p core-nostd --test wire_structured`
//! runs the same checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../core-nostd/tests/wire_model/mod.rs"]
mod wire_model;

fuzz_target!(|input: wire_model::BatchInput| {
    input.check();
});
