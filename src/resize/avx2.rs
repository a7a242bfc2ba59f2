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
        __m128i, __m256i, _mm256_add_epi32, _mm256_cvtepu8_epi32, _mm256_mullo_epi32,
        _mm256_set1_epi32, _mm_loadl_epi64,
    };
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256i {
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.cast::<__m128i>()))
    }
    /// `A` accumulators of 8 lanes each, from lane `l`, over all taps.
    #[inline(always)]
    unsafe fn sums<const A: usize>(
        base: *const u8,
        stride: usize,
        k: &[i32],
        l: usize,
    ) -> [__m256i; A] {
        let mut acc = [_mm256_set1_epi32(ROUND_BIAS); A];
        for (t, &kv) in k.iter().enumerate() {
            let p = base.add(t * stride + l);
            let kk = _mm256_set1_epi32(kv);
            for (i, a) in acc.iter_mut().enumerate() {
                *a = _mm256_add_epi32(*a, _mm256_mullo_epi32(load8(p.add(8 * i)), kk));
            }
        }
        acc
    }
    let n = out.len();
    let base = src.as_ptr().add(start * stride);
    let dst = out.as_mut_ptr();
    let mut l = 0;
    while l + 32 <= n {
        store_clipped(sums::<4>(base, stride, k, l), dst.add(l));
        l += 32;
    }
    if l + 16 <= n {
        store_clipped(sums::<2>(base, stride, k, l), dst.add(l));
        l += 16;
    }
    // The last < 16 lanes: AVX2 implies SSE4.1, and the bound on `src` shifted by
    // `l` lanes is the caller's bound on the remaining `n - l` lanes.
    super::sse41::weighted_sum(&src[l..], stride, start, k, &mut out[l..]);
}

/// Sums of 8 lanes each (Pillow's fixed-point sums, the rounding bias
/// included), in pairs, shifted and clipped to `0..=255` (saturated to i16,
/// then to u8): `4 * A` bytes stored at `out`. Inlined into AVX2 kernels only.
///
/// # Safety
/// The CPU must support AVX2, `A` must be even, and `out` must have room for
/// `4 * A` bytes.
#[inline(always)]
pub(super) unsafe fn store_clipped<const A: usize>(
    acc: [std::arch::x86_64::__m256i; A],
    out: *mut u8,
) {
    use std::arch::x86_64::{
        __m128i, _mm256_castsi256_si128, _mm256_extracti128_si256, _mm256_packs_epi32,
        _mm256_permute4x64_epi64, _mm256_srai_epi32, _mm_packus_epi16, _mm_storeu_si128,
    };
    for (i, pair) in acc.chunks_exact(2).enumerate() {
        let words = _mm256_packs_epi32(
            _mm256_srai_epi32::<22>(pair[0]),
            _mm256_srai_epi32::<22>(pair[1]),
        );
        // words [a0 0..4, a1 0..4, a0 4..8, a1 4..8], put in order, then bytes
        let words = _mm256_permute4x64_epi64(words, 0b11_01_10_00);
        let bytes = _mm_packus_epi16(
            _mm256_castsi256_si128(words),
            _mm256_extracti128_si256(words, 1),
        );
        _mm_storeu_si128(out.add(16 * i).cast::<__m128i>(), bytes);
    }
}
