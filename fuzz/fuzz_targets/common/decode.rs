//! The body of the `decode_jpeg` and `decode_png` fuzz targets: arbitrary
//! bytes through `decode::route`, `decode::decode_into` and the whole
//! pipeline on an encoded view (`ImageView::encoded` in `preprocess_batch`).
//!
//! Input layout: byte 0 holds flags (bit 0: `exif_transpose`, bit 1: Pillow 13
//! pass order, else 12; bit 2: for a PNG, rewrite every chunk's CRC first, so
//! that mutations reach the decoder instead of its CRC check); the rest is the
//! file. Errors are fine; a panic, an
//! abort, a hang or a sanitizer report is a finding. Oracles:
//!
//! * `route` of bytes without a JPEG/PNG signature is `Ok(None)`; a native
//!   header has the sniffed format, both sides >= 1 and 1 to 4 channels
//!   (JPEG: 1 or 3);
//! * `exif_transpose` only sends files to Pillow: a file native with it is
//!   native without it, with the same header;
//! * `decode_into` (headers up to `MAX_DECODED` bytes) writes every byte and is
//!   deterministic: two decodes into buffers pre-filled differently give the
//!   same result and, on success, the same bytes (up to `MAX_TWICE` bytes);
//!   an output buffer one byte too long is an error or a success, never a
//!   crash; `decode_image` (into memory not zeroed first, for a JPEG) fails
//!   exactly when it failed, and otherwise gives the same bytes;
//! * up to `MAX_PIPELINE_PIXELS`, `preprocess_batch` of the encoded view under
//!   the K2.5 and K3 presets fails exactly when the decode failed (with
//!   `KimiError::AtImage { index: 0, .. }`), and otherwise gives the bits of
//!   `preprocess_batch` of the decoded pixels.

use kimi_k3_rs::decode::{self, Format, Limits, Route};
use kimi_k3_rs::{
    preprocess_batch, BatchItem, ImageView, KimiError, MediaProcConfig, PillowCompat,
};

/// Largest decode run (bytes of output).
const MAX_DECODED: usize = 64 << 20;
/// Largest output decoded a second time for the determinism oracle.
const MAX_TWICE: usize = 1 << 20;
/// Largest image (pixels) run through the pipeline (four runs: K2.5 and K3,
/// encoded and decoded). At 4 MP a forged 63805x44 JPEG took 3.5 s a run under
/// ASan and pulled the target from 2,000 to 140 exec/s; the pixel work at
/// large sizes is the `pipeline` target's, this one checks the encoded path.
const MAX_PIPELINE_PIXELS: usize = 1 << 20;

pub fn run(data: &[u8]) {
    let Some((&flags, file)) = data.split_first() else {
        return;
    };
    let exif_transpose = flags & 1 != 0;
    let compat = if flags & 2 != 0 {
        PillowCompat::V13
    } else {
        PillowCompat::V12
    };
    let fixed;
    let file = if flags & 4 != 0 && Format::sniff(file) == Some(Format::Png) {
        fixed = fix_png_crcs(file);
        &fixed[..]
    } else {
        file
    };
    let sniffed = Format::sniff(file);
    let route = match decode::route(file, exif_transpose) {
        Ok(route) => route,
        Err(e) => {
            assert!(
                sniffed.is_some(),
                "error {e:?} for a file of no native format"
            );
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let header = match route {
        None => {
            assert!(sniffed.is_none(), "no route for a {sniffed:?} file");
            return;
        }
        Some(Route::Pillow(reason)) => {
            assert!(!reason.is_empty());
            return;
        }
        Some(Route::Native(header)) => header,
    };
    assert_eq!(Some(header.format), sniffed);
    assert!(header.width >= 1 && header.height >= 1, "{header:?}");
    assert!((1..=4).contains(&header.channels), "{header:?}");
    if header.format == Format::Jpeg {
        assert!(matches!(header.channels, 1 | 3), "{header:?}");
    }
    if exif_transpose {
        match decode::route(file, false) {
            Ok(Some(Route::Native(h))) => assert_eq!(h, header),
            other => panic!("native with exif_transpose, {other:?} without"),
        }
    }
    let Ok(len) = header.decoded_len() else {
        return;
    };
    if len > MAX_DECODED {
        return;
    }
    let limits = Limits::default();
    let mut first = vec![0xA5u8; len];
    let decoded = decode::decode_into(file, &header, &limits, &mut first);
    if let Err(e) = &decoded {
        assert!(!e.to_string().is_empty());
    }
    if len <= MAX_TWICE {
        let mut second = vec![0x5Au8; len];
        let again = decode::decode_into(file, &header, &limits, &mut second);
        assert_eq!(decoded.is_ok(), again.is_ok(), "{decoded:?} then {again:?}");
        if decoded.is_ok() {
            assert!(
                first == second,
                "two decodes differ (unwritten or nondeterministic bytes)"
            );
        }
        match decode::decode_image(file, &header, &limits) {
            Ok(image) => assert!(decoded.is_ok() && image == first, "decode_image differs"),
            Err(e) => assert!(decoded.is_err(), "decode_image failed alone: {e}"),
        }
        let mut long = vec![0u8; len + 1];
        let _ = decode::decode_into(file, &header, &limits, &mut long);
    }
    if header.width.saturating_mul(header.height) > MAX_PIPELINE_PIXELS {
        return;
    }
    let encoded = ImageView::encoded(file, header).expect("a native header is a valid view");
    for cfg in [MediaProcConfig::kimi_k25(), MediaProcConfig::kimi_k3()] {
        let out = preprocess_batch(&[BatchItem::Image(encoded)], &cfg, compat);
        match (&decoded, out) {
            (Ok(()), Ok(out)) => {
                let pixels = ImageView::new(&first, header.width, header.height, header.channels)
                    .expect("decoded pixels of the header's shape");
                let want = preprocess_batch(&[BatchItem::Image(pixels)], &cfg, compat)
                    .expect("preprocess_batch of decoded pixels");
                assert_eq!(out.grid_thws, want.grid_thws);
                assert!(
                    out.pixel_values.len() == want.pixel_values.len()
                        && out
                            .pixel_values
                            .iter()
                            .zip(&want.pixel_values)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "encoded view differs from its decoded pixels"
                );
            }
            (Err(_), Err(KimiError::AtImage { index: 0, .. })) => {}
            (d, o) => panic!("decode {d:?}, pipeline {:?}", o.map(|o| o.grid_thws)),
        }
    }
}

/// `file` with the CRC of every complete chunk after the signature set to the
/// CRC-32 of its type and data (the walk stops at the first incomplete chunk).
fn fix_png_crcs(file: &[u8]) -> Vec<u8> {
    let mut out = file.to_vec();
    let mut at = 8usize;
    while let Some(len) = out.get(at..at + 4) {
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let Some(end) = (at + 8).checked_add(len) else {
            break;
        };
        if end + 4 > out.len() {
            break;
        }
        let crc = crc32(&out[at + 4..end]);
        out[end..end + 4].copy_from_slice(&crc.to_be_bytes());
        at = end + 4;
    }
    out
}

/// CRC-32 (ISO-HDLC, as PNG uses), bitwise.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
