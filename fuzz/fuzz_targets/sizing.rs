//! Fuzz target: the NaViT sizing (`navit_resize_config`) on any `u64` size and
//! any config integer (validated by `MediaProcConfig::new`, so values past the
//! documented edges 2^31 - 1 / 2^53 are refused there, never wrapped).
//!
//! Oracles: the result never upscales, stays within the side cap, pads to a
//! multiple of `patch_size * merge_kernel_size` with less than one factor;
//! and, where plain `f64` arithmetic is exact (sides below 2^26, products below
//! 2^53), it equals an independent transcription of the reference's float
//! expression.
//!
//! Regression (docs/hardening.md, F2): before 5f02da5, when `(w // ps) * (h // ps)`
//! reached 2^64 the core's correctly rounded division got operands it was not
//! written for (a `debug_assert!` fired here within seconds; release builds gave
//! a wrong size from 2^73 on). `KIMI_FUZZ_SKIP_KNOWN=1` skips those inputs, to
//! fuzz the rest of an older revision.

#![no_main]

use kimi_k3_rs::{navit_resize_config, KimiError, MediaProcConfig};
use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;

fn int(u: &mut Unstructured<'_>) -> ArbResult<u64> {
    Ok(match u.int_in_range(0u8..=9)? {
        0 => u.arbitrary::<u64>()?,
        1 => (1 << 31) - 1 - u.int_in_range(0u64..=2)?,
        2 => (1 << 53) - 1 + u.int_in_range(0u64..=2)?,
        3 => u.int_in_range(1u64..=(1 << 31) - 1)?,
        4 => u.int_in_range(1u64..=64)?,
        _ => u.int_in_range(1u64..=100_000)?,
    })
}

/// The reference expression (`media_utils.navit_resize_image`) in plain f64,
/// valid when every operand and product is exact in f64.
fn reference(w: u64, h: u64, ps: u64, m: u64, limit: u64, side: u64) -> (u64, u64) {
    let pw = (w / ps).max(1) as f64;
    let ph = (h / ps).max(1) as f64;
    let s1 = (limit as f64 / (pw * ph)).sqrt();
    let s2 = (side * ps) as f64 / w as f64;
    let s3 = (side * ps) as f64 / h as f64;
    let scale = 1.0f64.min(s1).min(s2).min(s3);
    let nw = ((w as f64 * scale) as u64).max(1).min(side * ps);
    let nh = ((h as f64 * scale) as u64).max(1).min(side * ps);
    let _ = m;
    (nw, nh)
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok((w, h, ps, m, limit, side)) = (|| -> ArbResult<_> {
        Ok((
            int(&mut u)?,
            int(&mut u)?,
            int(&mut u)?,
            int(&mut u)?,
            int(&mut u)?,
            int(&mut u)?,
        ))
    })() else {
        return;
    };
    let Ok(cfg) = MediaProcConfig::new(ps, m, limit, side, [0.5; 3], [0.5; 3]) else {
        assert!(
            ps == 0
                || m == 0
                || limit == 0
                || side == 0
                || ps >= 1 << 31
                || m >= 1 << 31
                || side >= 1 << 31
                || limit > 1 << 53
        );
        return;
    };
    let product = u128::from((w / ps).max(1)) * u128::from((h / ps).max(1));
    if product >= 1 << 64 && std::env::var_os("KIMI_FUZZ_SKIP_KNOWN").is_some() {
        return;
    }
    let r = match navit_resize_config(w, h, &cfg) {
        Ok(r) => r,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            let expected = match e {
                KimiError::EmptyImage { .. } => w == 0 || h == 0,
                KimiError::SideLimit { .. } => side % m != 0,
                // whichever variant names a side past 2**53 (the enum is non-exhaustive)
                _ => w > 1 << 53 || h > 1 << 53,
            };
            assert!(
                expected,
                "unexpected error {e:?} for {w}x{h} ps {ps} m {m} limit {limit} side {side}"
            );
            return;
        }
    };
    let factor = ps * m;
    assert!(
        r.new_width >= 1 && r.new_width <= w && r.new_width <= side * ps,
        "{r:?}"
    );
    assert!(
        r.new_height >= 1 && r.new_height <= h && r.new_height <= side * ps,
        "{r:?}"
    );
    assert!(r.pad_width < factor && r.pad_height < factor);
    assert_eq!((r.new_width + r.pad_width) % factor, 0);
    assert_eq!((r.new_height + r.pad_height) % factor, 0);
    let exact = |v: u64| v < 1 << 26;
    if exact(w) && exact(h) && exact(limit) && exact(side * ps) {
        assert_eq!(
            (r.new_width, r.new_height),
            reference(w, h, ps, m, limit, side),
            "{w}x{h} ps {ps} m {m} limit {limit} side {side}"
        );
    }
});
