//! The AVX-512 (F + BW) weighted-sum kernel: 64 lanes per step.

use super::ROUND_BIAS;

/// AVX-512 (F + BW) version of [`super::scalar::weighted_sum`]: 64 lanes per step with
/// the four 16-lane accumulators held in registers across all taps; the
/// remaining lanes go to [`super::avx2::weighted_sum`]. Integer sums are exact in any
/// order, so the bytes equal the scalar ones.
///
/// # Safety
/// The CPU must support AVX-512 F and BW and AVX2, and
/// `(start + k.len() - 1) * stride + out.len()` must not exceed `src.len()`
/// (checked by the caller, [`super::weighted_sum`]).
#[target_feature(enable = "avx512f,avx512bw,avx2")]
#[allow(clippy::cast_ptr_alignment)]
pub(super) unsafe fn weighted_sum(
    src: &[u8],
    stride: usize,
    start: usize,
    k: &[i32],
    out: &mut [u8],
) {
    use std::arch::x86_64::{
        __m128i, __m512i, _mm512_add_epi32, _mm512_cvtepu8_epi32, _mm512_mullo_epi32,
        _mm512_packs_epi32, _mm512_packus_epi16, _mm512_permutexvar_epi32, _mm512_set1_epi32,
        _mm512_setr_epi32, _mm512_srai_epi32, _mm512_storeu_si512, _mm_loadu_si128,
    };
    #[inline(always)]
    unsafe fn load16(p: *const u8) -> __m512i {
        _mm512_cvtepu8_epi32(_mm_loadu_si128(p.cast::<__m128i>()))
    }
    let n = out.len();
    let base = src.as_ptr().add(start * stride);
    let bias = _mm512_set1_epi32(ROUND_BIAS);
    // After the packs, 128-bit lane `i` holds 4-byte group `i` of each accumulator.
    let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    let mut l = 0;
    while l + 64 <= n {
        let (mut a0, mut a1, mut a2, mut a3) = (bias, bias, bias, bias);
        for (t, &kv) in k.iter().enumerate() {
            let p = base.add(t * stride + l);
            let kk = _mm512_set1_epi32(kv);
            a0 = _mm512_add_epi32(a0, _mm512_mullo_epi32(load16(p), kk));
            a1 = _mm512_add_epi32(a1, _mm512_mullo_epi32(load16(p.add(16)), kk));
            a2 = _mm512_add_epi32(a2, _mm512_mullo_epi32(load16(p.add(32)), kk));
            a3 = _mm512_add_epi32(a3, _mm512_mullo_epi32(load16(p.add(48)), kk));
        }
        // >> 22, then saturate to i16 and to u8: clamp(acc >> 22, 0, 255) = clip8.
        let w01 = _mm512_packs_epi32(_mm512_srai_epi32::<22>(a0), _mm512_srai_epi32::<22>(a1));
        let w23 = _mm512_packs_epi32(_mm512_srai_epi32::<22>(a2), _mm512_srai_epi32::<22>(a3));
        let bytes = _mm512_permutexvar_epi32(order, _mm512_packus_epi16(w01, w23));
        _mm512_storeu_si512(out.as_mut_ptr().add(l).cast::<__m512i>(), bytes);
        l += 64;
    }
    // The last < 64 lanes: the bound on `src` shifted by `l` lanes is the
    // caller's bound on the remaining `n - l` lanes.
    super::avx2::weighted_sum(&src[l..], stride, start, k, &mut out[l..]);
}
