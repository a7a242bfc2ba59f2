//! Fuzz target: native PNG decoding (`decode::route`, `decode::decode_into`)
//! and the pipeline on an encoded PNG view. See `common/decode.rs` for the
//! input layout and the oracles.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common/decode.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    common::run(data);
});
