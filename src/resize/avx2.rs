//! The AVX2 weighted-sum kernel: 32 or 16 lanes per step.

use super::ROUND_BIAS;

/// AVX2 version of [`super::scalar::weighted_sum`]: 32 lanes per step with the four
/// accumulators held in registers across all taps, then 16 with two (the last
/// third of a column of 16 transposed RGB rows, the horizontal pass's); the
/// remaining lanes (fewer than 16) go to [`super::sse41::weighted_sum`]. Integer sums are exact in
/// any order, so the bytes equal the scalar ones.
///
/// # Safety
/// The CPU must support AVX2, and `(start + k.len() - 1) * stride + out.len()`
/// must not exceed `src.len()` (checked by the caller, [`super::weighted_sum`]).
#[target_feature(enable = "avx2")]
#[allow(clippy::cast_ptr_alignment)]
pub(super) unsafe fn weighted_sum(
    src: &[u8],
    stride: usize,
    start: usize,
    k: &[i32],
    out: &mut [u8],
) {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm256_add_epi32, _mm256_castsi256_si128, _mm256_cvtepu8_epi32,
        _mm256_extracti128_si256, _mm256_mullo_epi32, _mm256_packs_epi32, _mm256_packus_epi16,
        _mm256_permute4x64_epi64, _mm256_permutevar8x32_epi32, _mm256_set1_epi32,
        _mm256_setr_epi32, _mm256_srai_epi32, _mm256_storeu_si256, _mm_loadl_epi64,
        _mm_packus_epi16, _mm_storeu_si128,
    };
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256i {
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.cast::<__m128i>()))
    }
    let n = out.len();
    let base = src.as_ptr().add(start * stride);
    let bias = _mm256_set1_epi32(ROUND_BIAS);
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let mut l = 0;
    while l + 32 <= n {
        let (mut a0, mut a1, mut a2, mut a3) = (bias, bias, bias, bias);
        for (t, &kv) in k.iter().enumerate() {
            let p = base.add(t * stride + l);
            let kk = _mm256_set1_epi32(kv);
            a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(load8(p), kk));
            a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(load8(p.add(8)), kk));
            a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(load8(p.add(16)), kk));
            a3 = _mm256_add_epi32(a3, _mm256_mullo_epi32(load8(p.add(24)), kk));
        }
        // >> 22, then saturate to i16 and to u8: clamp(acc >> 22, 0, 255) = clip8.
        let w01 = _mm256_packs_epi32(_mm256_srai_epi32::<22>(a0), _mm256_srai_epi32::<22>(a1));
        let w23 = _mm256_packs_epi32(_mm256_srai_epi32::<22>(a2), _mm256_srai_epi32::<22>(a3));
        // The packs interleave 128-bit halves; put the 4-byte groups back in order.
        let bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w01, w23), order);
        _mm256_storeu_si256(out.as_mut_ptr().add(l).cast::<__m256i>(), bytes);
        l += 32;
    }
    if l + 16 <= n {
        let (mut a0, mut a1) = (bias, bias);
        for (t, &kv) in k.iter().enumerate() {
            let p = base.add(t * stride + l);
            let kk = _mm256_set1_epi32(kv);
            a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(load8(p), kk));
            a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(load8(p.add(8)), kk));
        }
        // words [a0 0..4, a1 0..4, a0 4..8, a1 4..8], put in order, then bytes
        let w01 = _mm256_packs_epi32(_mm256_srai_epi32::<22>(a0), _mm256_srai_epi32::<22>(a1));
        let w01 = _mm256_permute4x64_epi64(w01, 0b11_01_10_00);
        let bytes = _mm_packus_epi16(
            _mm256_castsi256_si128(w01),
            _mm256_extracti128_si256(w01, 1),
        );
        _mm_storeu_si128(out.as_mut_ptr().add(l).cast::<__m128i>(), bytes);
        l += 16;
    }
    // The last < 32 lanes: AVX2 implies SSE4.1, and the bound on `src` shifted by
    // `l` lanes is the caller's bound on the remaining `n - l` lanes.
    super::sse41::weighted_sum(&src[l..], stride, start, k, &mut out[l..]);
}
