//! The SSE4.1 weighted-sum kernel: 16, then 4 lanes per step.

use super::ROUND_BIAS;

/// SSE4.1 version of [`super::scalar::weighted_sum`], for x86-64 CPUs without AVX2: 16
/// lanes per step with four 4-lane accumulators held across all taps, then 4
/// lanes per step. Integer sums are exact in any order, so the bytes equal the
/// scalar ones.
///
/// # Safety
/// The CPU must support SSE4.1, and `(start + k.len() - 1) * stride + out.len()`
/// must not exceed `src.len()` (checked by the caller, [`super::weighted_sum`]).
#[target_feature(enable = "sse4.1")]
#[allow(clippy::cast_possible_wrap, clippy::cast_sign_loss)]
pub(super) unsafe fn weighted_sum(
    src: &[u8],
    stride: usize,
    start: usize,
    k: &[i32],
    out: &mut [u8],
) {
    use std::arch::x86_64::{
        __m128i, _mm_add_epi32, _mm_cvtepu8_epi32, _mm_cvtsi128_si32, _mm_cvtsi32_si128,
        _mm_mullo_epi32, _mm_packs_epi32, _mm_packus_epi16, _mm_set1_epi32, _mm_srai_epi32,
        _mm_storeu_si128,
    };
    #[inline(always)]
    unsafe fn load4(p: *const u8) -> __m128i {
        _mm_cvtepu8_epi32(_mm_cvtsi32_si128(p.cast::<i32>().read_unaligned()))
    }
    let n = out.len();
    let base = src.as_ptr().add(start * stride);
    let bias = _mm_set1_epi32(ROUND_BIAS);
    let mut l = 0;
    while l + 16 <= n {
        let (mut a0, mut a1, mut a2, mut a3) = (bias, bias, bias, bias);
        for (t, &kv) in k.iter().enumerate() {
            let p = base.add(t * stride + l);
            let kk = _mm_set1_epi32(kv);
            a0 = _mm_add_epi32(a0, _mm_mullo_epi32(load4(p), kk));
            a1 = _mm_add_epi32(a1, _mm_mullo_epi32(load4(p.add(4)), kk));
            a2 = _mm_add_epi32(a2, _mm_mullo_epi32(load4(p.add(8)), kk));
            a3 = _mm_add_epi32(a3, _mm_mullo_epi32(load4(p.add(12)), kk));
        }
        // >> 22, then saturate to i16 and to u8: clamp(acc >> 22, 0, 255) = clip8.
        let w01 = _mm_packs_epi32(_mm_srai_epi32::<22>(a0), _mm_srai_epi32::<22>(a1));
        let w23 = _mm_packs_epi32(_mm_srai_epi32::<22>(a2), _mm_srai_epi32::<22>(a3));
        _mm_storeu_si128(
            out.as_mut_ptr().add(l).cast::<__m128i>(),
            _mm_packus_epi16(w01, w23),
        );
        l += 16;
    }
    while l + 4 <= n {
        let mut a = bias;
        for (t, &kv) in k.iter().enumerate() {
            a = _mm_add_epi32(
                a,
                _mm_mullo_epi32(load4(base.add(t * stride + l)), _mm_set1_epi32(kv)),
            );
        }
        let w = _mm_packs_epi32(_mm_srai_epi32::<22>(a), _mm_srai_epi32::<22>(a));
        let bytes = _mm_cvtsi128_si32(_mm_packus_epi16(w, w)) as u32;
        out[l..l + 4].copy_from_slice(&bytes.to_le_bytes());
        l += 4;
    }
    super::scalar::weighted_sum(src, stride, start, l, k, &mut out[l..]);
}
