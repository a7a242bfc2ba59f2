//! The AVX-512 weighted-sum kernels: F + BW (`vpmulld`, 64, 48 or 16 lanes per
//! step), and VNNI (`vpdpbusd`, four taps an instruction, 64 lanes per step).

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

/// AVX-512 VNNI version of [`super::scalar::weighted_sum`] for each of `jobs`,
/// `(start, n, groups, out)`: the sum of `n` taps from row `start` of `src`
/// into `out`, on the weights' digit `groups` (see [`super::Coefficients`]);
/// one call for a whole tile of the horizontal pass. Four taps per `vpdpbusd`,
/// 64 lanes per step (the last step masked, so no byte past `out` or past a
/// tap's row is read).
///
/// Each weight is `k = d2 * 2^16 + d1 * 2^8 + d0` with `d0`, `d1`, `d2` in
/// `-128..=127`, so `sum_t k[t] * p[t] = S2 * 2^16 + S1 * 2^8 + S0` with
/// `Sd = sum_t d[t] * p[t]`. The kernel sums the bytes of four rows, interleaved
/// so that each 32-bit lane holds one lane's pixels of the four taps, times the
/// four taps' digit `d` (`vpdpbusd`: unsigned pixel bytes times signed digit
/// bytes, the four products added to the lane without saturation), into `Sd`.
/// Every addition here, and the final `2^21 + (S2 << 16) + (S1 << 8) + S0`,
/// wraps modulo `2^32`; the identity above holds modulo `2^32` too, so the
/// result is the true sum modulo `2^32`, which is the true sum itself: Pillow's
/// sum fits an `i32` (it is computed in a C `int`, as the scalar kernel's is).
/// A group of fewer than four taps (the last) reads its taps' rows only, and
/// zero for the others (whose digits are 0).
///
/// The lanes of a step are permuted by the interleave (unpacks within 128-bit
/// blocks: vector `q` holds lanes `16 * j + 4 * q..+4` of block `j`), and put
/// back in order by the packs that narrow them (also within blocks).
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VNNI, and for every job `n` must be
/// at least 1, `groups` must hold `n.div_ceil(4)` groups and
/// `(start + n - 1) * stride + out.len()` must not exceed `src.len()` (checked
/// by the caller, [`super::weighted_sums`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn weighted_sums_vnni<'a>(
    src: &[u8],
    stride: usize,
    jobs: impl Iterator<Item = (usize, usize, &'a [[u32; 3]], &'a mut [u8])>,
) {
    use std::arch::x86_64::{
        __m512i, _mm512_add_epi32, _mm512_dpbusd_epi32, _mm512_mask_storeu_epi8,
        _mm512_maskz_loadu_epi8, _mm512_packus_epi16, _mm512_packus_epi32, _mm512_set1_epi32,
        _mm512_setzero_si512, _mm512_slli_epi32, _mm512_srai_epi32, _mm512_unpackhi_epi16,
        _mm512_unpackhi_epi8, _mm512_unpacklo_epi16, _mm512_unpacklo_epi8,
    };
    /// The four rows' bytes interleaved: vector `q`, lane `16 * j + i` (of
    /// block `j`, `i < 4`) holds the bytes of lane `16 * j + 4 * q + i` of rows
    /// 0, 1, 2, 3.
    #[inline(always)]
    unsafe fn interleave(r: [__m512i; 4]) -> [__m512i; 4] {
        let (lo01, hi01) = (
            _mm512_unpacklo_epi8(r[0], r[1]),
            _mm512_unpackhi_epi8(r[0], r[1]),
        );
        let (lo23, hi23) = (
            _mm512_unpacklo_epi8(r[2], r[3]),
            _mm512_unpackhi_epi8(r[2], r[3]),
        );
        [
            _mm512_unpacklo_epi16(lo01, lo23),
            _mm512_unpackhi_epi16(lo01, lo23),
            _mm512_unpacklo_epi16(hi01, hi23),
            _mm512_unpackhi_epi16(hi01, hi23),
        ]
    }
    /// `acc[d][q] += digit d of the group times the pixels `v[q]``.
    #[inline(always)]
    unsafe fn madd(acc: &mut [[__m512i; 4]; 3], v: [__m512i; 4], group: [u32; 3]) {
        for (a, &word) in acc.iter_mut().zip(&group) {
            #[allow(clippy::cast_possible_wrap)]
            let d = _mm512_set1_epi32(word as i32);
            for (aq, &vq) in a.iter_mut().zip(&v) {
                *aq = _mm512_dpbusd_epi32(*aq, vq, d);
            }
        }
    }
    for (start, n, groups, out) in jobs {
        let len = out.len();
        let base = src.as_ptr().add(start * stride);
        let dst = out.as_mut_ptr();
        let (full, rest) = (n / 4, n % 4);
        let mut l = 0;
        while l < len {
            let mask = if len - l >= 64 {
                u64::MAX
            } else {
                (1u64 << (len - l)) - 1
            };
            let p = base.add(l);
            let row = |t: usize| _mm512_maskz_loadu_epi8(mask, p.add(t * stride).cast());
            let mut acc = [[_mm512_setzero_si512(); 4]; 3];
            for (g, &group) in groups[..full].iter().enumerate() {
                let t = 4 * g;
                madd(
                    &mut acc,
                    interleave([row(t), row(t + 1), row(t + 2), row(t + 3)]),
                    group,
                );
            }
            if rest > 0 {
                let t = 4 * full;
                let r = std::array::from_fn(|i| {
                    if i < rest {
                        row(t + i)
                    } else {
                        _mm512_setzero_si512()
                    }
                });
                madd(&mut acc, interleave(r), groups[full]);
            }
            let [s0, s1, s2] = acc;
            let sum = |q: usize| {
                let hi = _mm512_add_epi32(
                    _mm512_slli_epi32::<16>(s2[q]),
                    _mm512_slli_epi32::<8>(s1[q]),
                );
                let s =
                    _mm512_add_epi32(_mm512_add_epi32(hi, s0[q]), _mm512_set1_epi32(ROUND_BIAS));
                // -512..=511: the packs below clip it to 0..=255
                _mm512_srai_epi32::<22>(s)
            };
            let words01 = _mm512_packus_epi32(sum(0), sum(1));
            let words23 = _mm512_packus_epi32(sum(2), sum(3));
            _mm512_mask_storeu_epi8(
                dst.add(l).cast(),
                mask,
                _mm512_packus_epi16(words01, words23),
            );
            l += 64;
        }
    }
}
