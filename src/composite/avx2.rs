//! The AVX2 compositing kernels: eight `LA` pixels, or four `RGBA` pixels, at
//! a time, with the same float32 operations as [`super::Compositor::row`]
//! (`alpha = A / 255`, `1 - alpha`, two products and a sum, each rounded, no
//! fused multiply-add), truncated to `u8` with saturation as `as u8` does.

use std::arch::x86_64::{
    __m256, __m256i, _mm256_add_ps, _mm256_castps128_ps256, _mm256_castsi256_si128,
    _mm256_cvtepi32_ps, _mm256_cvtepu8_epi32, _mm256_cvttps_epi32, _mm256_div_ps,
    _mm256_extracti128_si256, _mm256_loadu_ps, _mm256_mul_ps, _mm256_packus_epi32,
    _mm256_permute4x64_epi64, _mm256_permutevar8x32_ps, _mm256_set1_ps, _mm256_setr_epi32,
    _mm256_shuffle_epi32, _mm256_sub_ps, _mm_loadl_epi64, _mm_loadu_ps, _mm_loadu_si128,
    _mm_packus_epi16, _mm_packus_epi32, _mm_setr_epi8, _mm_shuffle_epi8, _mm_srli_si128,
    _mm_storel_epi64, _mm_storeu_si128,
};

/// `trunc(alpha * c + (1 - alpha) * bg)` lane by lane, `alpha = a / 255`.
///
/// # Safety
/// AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn blend(c: __m256i, a: __m256i, bg: __m256) -> __m256i {
    let alpha = _mm256_div_ps(_mm256_cvtepi32_ps(a), _mm256_set1_ps(255.0));
    let rest = _mm256_sub_ps(_mm256_set1_ps(1.0), alpha);
    let back = _mm256_mul_ps(rest, bg);
    let front = _mm256_mul_ps(alpha, _mm256_cvtepi32_ps(c));
    _mm256_cvttps_epi32(_mm256_add_ps(front, back))
}

/// Composite the `LA` pixels of `row` onto `back` (one float32 grey a
/// pixel) into `out` (one byte a pixel), eight at a time; returns how many
/// pixels were done (the rest, fewer than eight, are the caller's).
///
/// # Safety
/// AVX2; `out.len() <= back.len()` and `row.len() >= 2 * out.len()`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn la(row: &[u8], back: &[f32], out: &mut [u8]) -> usize {
    let n = out.len() / 8 * 8;
    // grey bytes (even) to the low half, alpha bytes (odd) to the high half
    let split = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    for x in (0..n).step_by(8) {
        let px = _mm_shuffle_epi8(_mm_loadu_si128(row.as_ptr().add(2 * x).cast()), split);
        let grey = _mm256_cvtepu8_epi32(px);
        let alpha = _mm256_cvtepu8_epi32(_mm_srli_si128(px, 8));
        let v = blend(grey, alpha, _mm256_loadu_ps(back.as_ptr().add(x)));
        let words = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        _mm_storel_epi64(
            out.as_mut_ptr().add(x).cast(),
            _mm_packus_epi16(words, words),
        );
    }
    n
}

/// Composite the `RGBA` pixels of `row` onto `back` into `out` (`RGB`), four
/// at a time; returns how many pixels were done (the rest, fewer than four,
/// are the caller's).
///
/// # Safety
/// AVX2; `out.len() / 3 <= back.len()` and `row.len() >= 4 * (out.len() / 3)`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn rgba(row: &[u8], back: &[f32], out: &mut [u8]) -> usize {
    let n = out.len() / 3 / 4 * 4;
    // the background of pixels 0, 1 (and 2, 3) repeated over their four channels
    let first_two = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    let last_two = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    // RGBA bytes to RGB: the alpha byte of each pixel dropped
    let drop_alpha = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    for x in (0..n).step_by(4) {
        let p = row.as_ptr().add(4 * x);
        let bg = _mm256_castps128_ps256(_mm_loadu_ps(back.as_ptr().add(x)));
        // two pixels (eight bytes) at `offset`, each pixel's alpha (lane 3 of
        // its four) over its four lanes
        let two = |offset: usize, idx: __m256i| {
            let c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.add(offset).cast()));
            blend(
                c,
                _mm256_shuffle_epi32(c, 0xFF),
                _mm256_permutevar8x32_ps(bg, idx),
            )
        };
        // [p0, p2, p1, p3] as u16 lanes, put back in order, then bytes
        let words = _mm256_packus_epi32(two(0, first_two), two(8, last_two));
        let words = _mm256_permute4x64_epi64(words, 0b11_01_10_00);
        let bytes = _mm_packus_epi16(
            _mm256_castsi256_si128(words),
            _mm256_extracti128_si256(words, 1),
        );
        let mut rgb = [0u8; 16];
        _mm_storeu_si128(rgb.as_mut_ptr().cast(), _mm_shuffle_epi8(bytes, drop_alpha));
        out[3 * x..3 * x + 12].copy_from_slice(&rgb[..12]);
    }
    n
}
