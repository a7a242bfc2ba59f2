//! Fuzz target: native JPEG decoding (`decode::route`, `decode::decode_into`)
//! and the pipeline on an encoded JPEG view, through a libjpeg-turbo loaded at
//! run time (`decode::jpeg::load`). See `common/decode.rs` for the input
//! layout and the oracles.
//!
//! The library: `$KIMI_FUZZ_LIBJPEG` if set, else the first of `LIBJPEG`
//! that exists (Debian's libjpeg62-turbo). The target panics, at the first
//! input, if it cannot be loaded: a run without it would fuzz nothing native.

#![no_main]

use std::path::Path;
use std::sync::Once;

use libfuzzer_sys::fuzz_target;

#[path = "common/decode.rs"]
mod common;

const LIBJPEG: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libjpeg.so.62",
    "/usr/lib/aarch64-linux-gnu/libjpeg.so.62",
];

static LOAD: Once = Once::new();

fn load() {
    LOAD.call_once(|| {
        let path = std::env::var("KIMI_FUZZ_LIBJPEG").unwrap_or_else(|_| {
            LIBJPEG
                .iter()
                .find(|p| Path::new(p).exists())
                .map_or_else(|| LIBJPEG[0].to_owned(), |p| (*p).to_owned())
        });
        match kimi_k3_rs::decode::jpeg::load(Path::new(&path)) {
            Ok(description) => eprintln!("decode_jpeg: loaded {description}"),
            Err(e) => panic!("decode_jpeg: cannot load libjpeg at {path}: {e}"),
        }
    });
}

fuzz_target!(|data: &[u8]| {
    load();
    common::run(data);
});
