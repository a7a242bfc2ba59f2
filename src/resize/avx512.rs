//! The AVX-512 (F + BW) weighted-sum kernel: 64, 48 or 16 lanes per step.

use super::ROUND_BIAS;

/// AVX-512 (F + BW) version of [`super::scalar::weighted_sum`]: 64 lanes per
/// step with four 16-lane accumulators held in registers across all taps,
/// then 48 lanes with three (a column of 16 transposed RGB rows, the
/// horizontal pass's), then 16 with one; the remaining lanes (fewer than
/// 16) go to [`super::avx2::weighted_sum`]. Integer sums are exact in any
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
        __m128i, __m512i, _mm512_add_epi32, _mm512_cvtepu8_epi32, _mm512_cvtusepi32_epi8,
        _mm512_max_epi32, _mm512_mullo_epi32, _mm512_set1_epi32, _mm512_setzero_si512,
        _mm512_srai_epi32, _mm_loadu_si128, _mm_storeu_si128,
    };
    #[inline(always)]
    unsafe fn load16(p: *const u8) -> __m512i {
        _mm512_cvtepu8_epi32(_mm_loadu_si128(p.cast::<__m128i>()))
    }
    /// `A` accumulators of 16 lanes each, from lane `l`, over all taps.
    #[inline(always)]
    unsafe fn sums<const A: usize>(
        base: *const u8,
        stride: usize,
        k: &[i32],
        l: usize,
    ) -> [__m512i; A] {
        let mut acc = [_mm512_set1_epi32(ROUND_BIAS); A];
        for (t, &kv) in k.iter().enumerate() {
            let p = base.add(t * stride + l);
            let kk = _mm512_set1_epi32(kv);
            for (i, a) in acc.iter_mut().enumerate() {
                *a = _mm512_add_epi32(*a, _mm512_mullo_epi32(load16(p.add(16 * i)), kk));
            }
        }
        acc
    }
    /// The accumulators shifted and clipped to `0..=255`, stored from lane `l`.
    #[inline(always)]
    unsafe fn store<const A: usize>(acc: [__m512i; A], out: *mut u8) {
        for (i, a) in acc.into_iter().enumerate() {
            // negative sums clip to 0 here, sums over 255 in the saturating narrowing
            let v = _mm512_max_epi32(_mm512_srai_epi32::<22>(a), _mm512_setzero_si512());
            _mm_storeu_si128(out.add(16 * i).cast::<__m128i>(), _mm512_cvtusepi32_epi8(v));
        }
    }
    let n = out.len();
    let base = src.as_ptr().add(start * stride);
    let dst = out.as_mut_ptr();
    let mut l = 0;
    while l + 64 <= n {
        store(sums::<4>(base, stride, k, l), dst.add(l));
        l += 64;
    }
    if l + 48 <= n {
        store(sums::<3>(base, stride, k, l), dst.add(l));
        l += 48;
    }
    while l + 16 <= n {
        store(sums::<1>(base, stride, k, l), dst.add(l));
        l += 16;
    }
    super::avx2::weighted_sum(&src[l..], stride, start, k, &mut out[l..]);
}
