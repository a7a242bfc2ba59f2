//! Pillow's BICUBIC resize on 8-bit interleaved pixels, bit-exact.
//!
//! Follows `libImaging/Resample.c` (`precompute_coeffs`, `normalize_coeffs_8bpc`,
//! `ImagingResampleHorizontal_8bpc`, `ImagingResampleVertical_8bpc`,
//! `ImagingResampleInner`) of Pillow 10.4 - 13.0 (reference-spec §5); the
//! premultiplied-alpha round trip of `PIL.Image.Image.resize` for `RGBA` / `LA`
//! is in [`crate::composite`].
//! Integer sums are associative, so the loop order here is free; the f64
//! coefficient arithmetic is not, and keeps Pillow's operation order (no FMA).

use crate::config::PillowCompat;
use crate::par::for_each_chunk;
use crate::simd::{Execution, SimdPath};

/// Fixed-point precision of the 8-bit coefficients: `32 - 8 - 2`.
pub const PRECISION_BITS: u32 = 22;
const ROUND_BIAS: i32 = 1 << (PRECISION_BITS - 1);

/// Keys cubic kernel with `a = -0.5` (Pillow `bicubic_filter`), support 2.
#[must_use]
pub fn bicubic_filter(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// Fixed-point filter taps for one axis, `in_size -> out_size`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coefficients {
    /// Per output index: `(first input index, number of taps)`.
    pub bounds: Vec<(usize, usize)>,
    /// Row stride of `weights`: `ceil(support) * 2 + 1`.
    pub ksize: usize,
    /// `out_size * ksize` weights scaled by `2^22`, rounded half away from zero.
    pub weights: Vec<i32>,
}

impl Coefficients {
    /// Pillow's `precompute_coeffs` + `normalize_coeffs_8bpc` for the full box
    /// `(0, in_size)`.
    ///
    /// # Arguments
    /// * `in_size` - input length in pixels (>= 1).
    /// * `out_size` - output length in pixels (>= 1).
    ///
    /// # Panics
    /// Never for `in_size, out_size >= 1` (sizes are validated by the pipeline).
    #[must_use]
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    pub fn new(in_size: usize, out_size: usize) -> Self {
        let scale = in_size as f64 / out_size as f64;
        let filterscale = scale.max(1.0);
        let support = 2.0 * filterscale;
        let ksize = (support.ceil() as usize) * 2 + 1;
        let ss = 1.0 / filterscale;
        let mut bounds = Vec::with_capacity(out_size);
        let mut weights = vec![0i32; out_size * ksize];
        let mut w = vec![0f64; ksize];
        for xx in 0..out_size {
            let center = (xx as f64 + 0.5) * scale;
            // C `(int)` truncates toward zero.
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
            let n = xmax - xmin;
            let mut ww = 0.0;
            for (x, wx) in w.iter_mut().enumerate().take(n) {
                let v = bicubic_filter(((x + xmin) as f64 - center + 0.5) * ss);
                *wx = v;
                ww += v;
            }
            let row = &mut weights[xx * ksize..xx * ksize + n];
            for (k, &wx) in row.iter_mut().zip(&w[..n]) {
                let v = if ww == 0.0 { wx } else { wx / ww };
                let scaled = v * f64::from(1u32 << PRECISION_BITS);
                *k = if v < 0.0 {
                    (-0.5 + scaled) as i32
                } else {
                    (0.5 + scaled) as i32
                };
            }
            bounds.push((xmin, n));
        }
        Self {
            bounds,
            ksize,
            weights,
        }
    }

    fn taps(&self, out_index: usize) -> (usize, &[i32]) {
        let (start, n) = self.bounds[out_index];
        let base = out_index * self.ksize;
        (start, &self.weights[base..base + n])
    }
}

#[inline]
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn clip8(acc: i32) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// `out[l] = clip8(2^21 + sum_t k[t] * src[(start + t) * stride + lane0 + l])` for
/// every lane `l` of `out`: one output row of the vertical pass, or one output
/// column of a transposed band of the horizontal pass. Scalar version.
fn weighted_sum_scalar(
    src: &[u8],
    stride: usize,
    start: usize,
    lane0: usize,
    k: &[i32],
    out: &mut [u8],
) {
    for (l, o) in out.iter_mut().enumerate() {
        let mut acc = ROUND_BIAS;
        for (t, &kv) in k.iter().enumerate() {
            acc += i32::from(src[(start + t) * stride + lane0 + l]) * kv;
        }
        *o = clip8(acc);
    }
}

/// AVX-512 (F + BW) version of [`weighted_sum_scalar`]: 64 lanes per step with
/// the four 16-lane accumulators held in registers across all taps; the
/// remaining lanes go to [`weighted_sum_avx2`]. Integer sums are exact in any
/// order, so the bytes equal the scalar ones.
///
/// # Safety
/// The CPU must support AVX-512 F and BW and AVX2, and
/// `(start + k.len() - 1) * stride + out.len()` must not exceed `src.len()`
/// (checked by the caller, [`weighted_sum`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2")]
#[allow(clippy::cast_ptr_alignment)]
unsafe fn weighted_sum_avx512(src: &[u8], stride: usize, start: usize, k: &[i32], out: &mut [u8]) {
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
    weighted_sum_avx2(&src[l..], stride, start, k, &mut out[l..]);
}

/// AVX2 version of [`weighted_sum_scalar`]: 32 lanes per step with the four
/// accumulators held in registers across all taps; the remaining lanes go to
/// [`weighted_sum_sse41`]. Integer sums are exact in
/// any order, so the bytes equal the scalar ones.
///
/// # Safety
/// The CPU must support AVX2, and `(start + k.len() - 1) * stride + out.len()`
/// must not exceed `src.len()` (checked by the caller, [`weighted_sum`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::cast_ptr_alignment)]
unsafe fn weighted_sum_avx2(src: &[u8], stride: usize, start: usize, k: &[i32], out: &mut [u8]) {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm256_add_epi32, _mm256_cvtepu8_epi32, _mm256_mullo_epi32,
        _mm256_packs_epi32, _mm256_packus_epi16, _mm256_permutevar8x32_epi32, _mm256_set1_epi32,
        _mm256_setr_epi32, _mm256_srai_epi32, _mm256_storeu_si256, _mm_loadl_epi64,
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
    // The last < 32 lanes: AVX2 implies SSE4.1, and the bound on `src` shifted by
    // `l` lanes is the caller's bound on the remaining `n - l` lanes.
    weighted_sum_sse41(&src[l..], stride, start, k, &mut out[l..]);
}

/// SSE4.1 version of [`weighted_sum_scalar`], for x86-64 CPUs without AVX2: 16
/// lanes per step with four 4-lane accumulators held across all taps, then 4
/// lanes per step. Integer sums are exact in any order, so the bytes equal the
/// scalar ones.
///
/// # Safety
/// The CPU must support SSE4.1, and `(start + k.len() - 1) * stride + out.len()`
/// must not exceed `src.len()` (checked by the caller, [`weighted_sum`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.1")]
#[allow(clippy::cast_possible_wrap, clippy::cast_sign_loss)]
unsafe fn weighted_sum_sse41(src: &[u8], stride: usize, start: usize, k: &[i32], out: &mut [u8]) {
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
    weighted_sum_scalar(src, stride, start, l, k, &mut out[l..]);
}

/// Dispatch [`weighted_sum_scalar`] / [`weighted_sum_sse41`] / [`weighted_sum_avx2`] /
/// [`weighted_sum_avx512`].
fn weighted_sum(
    src: &[u8],
    stride: usize,
    start: usize,
    k: &[i32],
    out: &mut [u8],
    path: SimdPath,
) {
    if k.is_empty() {
        out.fill(clip8(ROUND_BIAS));
        return;
    }
    assert!((start + k.len() - 1) * stride + out.len() <= src.len());
    #[cfg(target_arch = "x86_64")]
    if path == SimdPath::Avx512 {
        // SAFETY: as for AVX2 just below, with AVX-512 F + BW (and AVX2, which
        // `SimdPath::Avx512` also requires).
        unsafe { weighted_sum_avx512(src, stride, start, k, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if path == SimdPath::Avx2 {
        // SAFETY: a `SimdPath::Avx2` reaches here only after `is_supported` (see
        // `resize_bicubic_with`), and the bound on `src` is asserted just above.
        unsafe { weighted_sum_avx2(src, stride, start, k, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if path == SimdPath::Sse41 {
        // SAFETY: as for AVX2 just above, with SSE4.1.
        unsafe { weighted_sum_sse41(src, stride, start, k, out) };
        return;
    }
    weighted_sum_scalar(src, stride, start, 0, k, out);
}

/// Rows handled together by the horizontal pass. A band of `ROWS` rows is
/// transposed so that byte `b` of every row becomes the contiguous column
/// `columns[b * ROWS..(b + 1) * ROWS]`; then one output pixel is a weighted sum
/// of contiguous `C * ROWS`-byte input pixel columns (the shape of the vertical
/// pass), and the output columns are transposed back into rows.
const ROWS: usize = 16;

/// Transpose a 16 x 16 byte block: `dst[j * dst_stride + i] = src[i * src_stride + j]`.
///
/// # Safety
/// `src + i * src_stride + [0, 16)` and `dst + j * dst_stride + [0, 16)` must be
/// valid for `i, j < 16` (SSE2 is part of the x86-64 baseline).
#[cfg(target_arch = "x86_64")]
#[inline]
#[allow(clippy::cast_ptr_alignment, clippy::many_single_char_names)]
unsafe fn transpose16(src: *const u8, src_stride: usize, dst: *mut u8, dst_stride: usize) {
    use std::arch::x86_64::{
        __m128i, _mm_loadu_si128, _mm_storeu_si128, _mm_unpackhi_epi16, _mm_unpackhi_epi32,
        _mm_unpackhi_epi64, _mm_unpackhi_epi8, _mm_unpacklo_epi16, _mm_unpacklo_epi32,
        _mm_unpacklo_epi64, _mm_unpacklo_epi8,
    };
    let ld = |i: usize| _mm_loadu_si128(src.add(i * src_stride).cast::<__m128i>());
    let (a0, a1, a2, a3, a4, a5, a6, a7) = (ld(0), ld(1), ld(2), ld(3), ld(4), ld(5), ld(6), ld(7));
    let (a8, a9, a10, a11) = (ld(8), ld(9), ld(10), ld(11));
    let (a12, a13, a14, a15) = (ld(12), ld(13), ld(14), ld(15));
    // Interleave bytes of row pairs, then 16-, 32- and 64-bit units.
    let (b0, b1) = (_mm_unpacklo_epi8(a0, a1), _mm_unpackhi_epi8(a0, a1));
    let (b2, b3) = (_mm_unpacklo_epi8(a2, a3), _mm_unpackhi_epi8(a2, a3));
    let (b4, b5) = (_mm_unpacklo_epi8(a4, a5), _mm_unpackhi_epi8(a4, a5));
    let (b6, b7) = (_mm_unpacklo_epi8(a6, a7), _mm_unpackhi_epi8(a6, a7));
    let (b8, b9) = (_mm_unpacklo_epi8(a8, a9), _mm_unpackhi_epi8(a8, a9));
    let (b10, b11) = (_mm_unpacklo_epi8(a10, a11), _mm_unpackhi_epi8(a10, a11));
    let (b12, b13) = (_mm_unpacklo_epi8(a12, a13), _mm_unpackhi_epi8(a12, a13));
    let (b14, b15) = (_mm_unpacklo_epi8(a14, a15), _mm_unpackhi_epi8(a14, a15));
    let (c0, c1) = (_mm_unpacklo_epi16(b0, b2), _mm_unpackhi_epi16(b0, b2));
    let (c2, c3) = (_mm_unpacklo_epi16(b1, b3), _mm_unpackhi_epi16(b1, b3));
    let (c4, c5) = (_mm_unpacklo_epi16(b4, b6), _mm_unpackhi_epi16(b4, b6));
    let (c6, c7) = (_mm_unpacklo_epi16(b5, b7), _mm_unpackhi_epi16(b5, b7));
    let (c8, c9) = (_mm_unpacklo_epi16(b8, b10), _mm_unpackhi_epi16(b8, b10));
    let (c10, c11) = (_mm_unpacklo_epi16(b9, b11), _mm_unpackhi_epi16(b9, b11));
    let (c12, c13) = (_mm_unpacklo_epi16(b12, b14), _mm_unpackhi_epi16(b12, b14));
    let (c14, c15) = (_mm_unpacklo_epi16(b13, b15), _mm_unpackhi_epi16(b13, b15));
    let (d0, d1) = (_mm_unpacklo_epi32(c0, c4), _mm_unpackhi_epi32(c0, c4));
    let (d2, d3) = (_mm_unpacklo_epi32(c1, c5), _mm_unpackhi_epi32(c1, c5));
    let (d4, d5) = (_mm_unpacklo_epi32(c2, c6), _mm_unpackhi_epi32(c2, c6));
    let (d6, d7) = (_mm_unpacklo_epi32(c3, c7), _mm_unpackhi_epi32(c3, c7));
    let (d8, d9) = (_mm_unpacklo_epi32(c8, c12), _mm_unpackhi_epi32(c8, c12));
    let (d10, d11) = (_mm_unpacklo_epi32(c9, c13), _mm_unpackhi_epi32(c9, c13));
    let (d12, d13) = (_mm_unpacklo_epi32(c10, c14), _mm_unpackhi_epi32(c10, c14));
    let (d14, d15) = (_mm_unpacklo_epi32(c11, c15), _mm_unpackhi_epi32(c11, c15));
    let st = |j: usize, v: __m128i| _mm_storeu_si128(dst.add(j * dst_stride).cast::<__m128i>(), v);
    for (j, (lo, hi)) in [
        (d0, d8),
        (d1, d9),
        (d2, d10),
        (d3, d11),
        (d4, d12),
        (d5, d13),
        (d6, d14),
        (d7, d15),
    ]
    .into_iter()
    .enumerate()
    {
        st(2 * j, _mm_unpacklo_epi64(lo, hi));
        st(2 * j + 1, _mm_unpackhi_epi64(lo, hi));
    }
}

/// `dst[j][i] = rows[i][j]` for `i < 16`, `j < len`: the 16 rows' bytes `[0, len)`
/// become `len` columns of 16 bytes, `dst` holding `len * 16` bytes.
fn rows_to_columns(rows: &[&[u8]; ROWS], len: usize, dst: &mut [u8]) {
    assert!(rows.iter().all(|r| r.len() >= len) && dst.len() >= len * ROWS);
    let mut j = 0;
    #[cfg(target_arch = "x86_64")]
    while j + 16 <= len {
        let mut block = [0u8; 256];
        for (i, row) in rows.iter().enumerate() {
            block[i * 16..i * 16 + 16].copy_from_slice(&row[j..j + 16]);
        }
        // SAFETY: `block` holds 256 bytes and `dst` `len * 16 >= (j + 16) * 16`.
        unsafe { transpose16(block.as_ptr(), 16, dst.as_mut_ptr().add(j * ROWS), ROWS) };
        j += 16;
    }
    for jj in j..len {
        for (i, row) in rows.iter().enumerate() {
            dst[jj * ROWS + i] = row[jj];
        }
    }
}

/// The inverse of [`rows_to_columns`]: `rows[i][j] = src[j * 16 + i]` for
/// `i < rows.len()` (at most 16) and `j < len`.
fn columns_to_rows(src: &[u8], len: usize, rows: &mut [&mut [u8]]) {
    assert!(src.len() >= len * ROWS && rows.len() <= ROWS);
    let mut j = 0;
    #[cfg(target_arch = "x86_64")]
    while j + 16 <= len {
        let mut block = [0u8; 256];
        // SAFETY: `src` holds `len * 16 >= (j + 16) * 16` bytes, `block` 256.
        unsafe { transpose16(src.as_ptr().add(j * ROWS), ROWS, block.as_mut_ptr(), 16) };
        for (i, row) in rows.iter_mut().enumerate() {
            row[j..j + 16].copy_from_slice(&block[i * 16..i * 16 + 16]);
        }
        j += 16;
    }
    for jj in j..len {
        for (i, row) in rows.iter_mut().enumerate() {
            row[jj] = src[jj * ROWS + i];
        }
    }
}

/// Horizontal pass over rows `[row0, row0 + rows)` of `src` (`width` px, `C`
/// channels) into `out`, which holds `rows` output rows.
fn horizontal_into<const C: usize>(
    src: &[u8],
    width: usize,
    row0: usize,
    coeffs: &Coefficients,
    run: Execution,
    out: &mut [u8],
) {
    let out_w = coeffs.bounds.len();
    let (in_row_len, out_row_len) = (width * C, out_w * C);
    let scratch = || (vec![0u8; in_row_len * ROWS], vec![0u8; out_row_len * ROWS]);
    for_each_chunk(
        out,
        out_row_len * ROWS,
        run.parallel,
        scratch,
        |(columns, out_columns), band, out_band| {
            let y0 = row0 + band * ROWS;
            let rows = out_band.len() / out_row_len;
            // Rows past the image end (last band) repeat its first row; their
            // outputs are not written.
            let inputs: [&[u8]; ROWS] = std::array::from_fn(|i| {
                let y = y0 + if i < rows { i } else { 0 };
                &src[y * in_row_len..(y + 1) * in_row_len]
            });
            rows_to_columns(&inputs, in_row_len, columns);
            for (xx, column) in out_columns.chunks_exact_mut(C * ROWS).enumerate() {
                let (start, k) = coeffs.taps(xx);
                weighted_sum(columns, C * ROWS, start, k, column, run.path);
            }
            let mut outputs: Vec<&mut [u8]> = out_band.chunks_exact_mut(out_row_len).collect();
            columns_to_rows(out_columns, out_row_len, &mut outputs);
        },
    );
}

/// Vertical pass into `out` (whole output rows of `row_len` bytes, the first
/// being output row `yy0`): every output row is a weighted sum of whole input
/// rows of `src`, whose row `i` is image row `i + row_offset`.
fn vertical_into(
    src: &[u8],
    row_len: usize,
    coeffs: &Coefficients,
    row_offset: usize,
    yy0: usize,
    run: Execution,
    out: &mut [u8],
) {
    for_each_chunk(
        out,
        row_len,
        run.parallel,
        || (),
        |(), yy, out_row| {
            let (start, k) = coeffs.taps(yy0 + yy);
            weighted_sum(src, row_len, start - row_offset, k, out_row, run.path);
        },
    );
}

/// Output rows per band of the two-pass resize: each band runs both passes on
/// its own, so the intermediate image is never whole (a few hundred KB to a few
/// MB per band instead of up to `width * height`).
const BAND_ROWS: usize = 64;

/// Both passes, band by band of `BAND_ROWS` output rows (bands in parallel when
/// `run.parallel`; each band runs its passes on one thread). Horizontal first:
/// a band resamples horizontally the input rows its vertical taps read (rows
/// shared with the next band are resampled by both, with the same result).
/// Vertical first: a band resamples vertically its own rows at full width, then
/// horizontally. Pillow's integer passes give the same bytes however the rows
/// are grouped.
fn two_pass<const C: usize>(
    src: &[u8],
    width: usize,
    ch: &Coefficients,
    cv: &Coefficients,
    vertical_first: bool,
    run: Execution,
) -> Vec<u8> {
    let (new_w, new_h) = (ch.bounds.len(), cv.bounds.len());
    let out_row_len = new_w * C;
    let mut out = vec![0u8; new_h * out_row_len];
    let serial = Execution {
        parallel: false,
        ..run
    };
    for_each_chunk(
        &mut out,
        out_row_len * BAND_ROWS,
        run.parallel,
        Vec::new,
        |tmp: &mut Vec<u8>, band, out_band| {
            let yy0 = band * BAND_ROWS;
            let rows = out_band.len() / out_row_len;
            if vertical_first {
                tmp.resize(rows * width * C, 0);
                vertical_into(src, width * C, cv, 0, yy0, serial, tmp);
                horizontal_into::<C>(tmp, width, 0, ch, serial, out_band);
            } else {
                let taps = cv.bounds[yy0..yy0 + rows].iter();
                let first = taps.clone().map(|&(start, _)| start).min().unwrap_or(0);
                let end = taps.map(|&(start, n)| start + n).max().unwrap_or(first);
                tmp.resize((end - first) * out_row_len, 0);
                horizontal_into::<C>(src, width, first, ch, serial, tmp);
                vertical_into(tmp, out_row_len, cv, first, yy0, serial, out_band);
            }
        },
    );
    out
}

/// Whether Pillow runs the vertical pass first (Pillow 13 rule, reference-spec §5.1).
#[must_use]
pub fn vertical_first(
    compat: PillowCompat,
    width: usize,
    height: usize,
    new_width: usize,
    new_height: usize,
) -> bool {
    #[allow(clippy::cast_possible_wrap)]
    let (dh, dw) = (
        height as i64 - new_height as i64,
        width as i64 - new_width as i64,
    );
    compat == PillowCompat::V13 && dh > 0 && dh > 2 * dw
}

fn resize_c<const C: usize>(
    src: &[u8],
    width: usize,
    height: usize,
    new_width: usize,
    new_height: usize,
    compat: PillowCompat,
    run: Execution,
) -> Vec<u8> {
    let need_h = new_width != width;
    let need_v = new_height != height;
    match (need_h, need_v) {
        (false, false) => src.to_vec(),
        (true, false) => {
            let ch = Coefficients::new(width, new_width);
            let mut out = vec![0u8; height * new_width * C];
            horizontal_into::<C>(src, width, 0, &ch, run, &mut out);
            out
        }
        (false, true) => {
            let cv = Coefficients::new(height, new_height);
            let mut out = vec![0u8; new_height * width * C];
            vertical_into(src, width * C, &cv, 0, 0, run, &mut out);
            out
        }
        (true, true) => two_pass::<C>(
            src,
            width,
            &Coefficients::new(width, new_width),
            &Coefficients::new(height, new_height),
            vertical_first(compat, width, height, new_width, new_height),
            run,
        ),
    }
}

/// Resize an interleaved 8-bit image with Pillow's BICUBIC, channels independent
/// (Pillow modes `L`, `RGB`, `CMYK`, premultiplied `La` / `RGBa`).
///
/// # Arguments
/// * `src` - `height * width * channels` bytes, row-major, channels interleaved.
/// * `width`, `height` - input size in pixels (>= 1).
/// * `channels` - 1 to 4.
/// * `new_width`, `new_height` - output size in pixels (>= 1).
/// * `compat` - which Pillow pass order to reproduce.
///
/// Returns `new_height * new_width * channels` bytes. An axis whose size is
/// unchanged is not resampled; both unchanged gives a copy.
///
/// # Panics
/// When `src.len() != width * height * channels`, a size is 0 or `channels`
/// is not 1..=4 (the pipeline validates all three before calling).
#[must_use]
pub fn resize_bicubic(
    src: &[u8],
    width: usize,
    height: usize,
    channels: usize,
    new_width: usize,
    new_height: usize,
    compat: PillowCompat,
) -> Vec<u8> {
    let run = Execution {
        path: SimdPath::detect(),
        parallel: false,
    };
    resize_bicubic_with(
        src, width, height, channels, new_width, new_height, compat, run,
    )
}

/// [`resize_bicubic`] with a chosen [`Execution`]: kernel path (every path gives the
/// same bytes) and row-band parallelism on the current rayon pool.
///
/// # Panics
/// As [`resize_bicubic`], and when `run.path` is not supported by this CPU.
#[must_use]
#[allow(clippy::too_many_arguments)]
pub fn resize_bicubic_with(
    src: &[u8],
    width: usize,
    height: usize,
    channels: usize,
    new_width: usize,
    new_height: usize,
    compat: PillowCompat,
    run: Execution,
) -> Vec<u8> {
    assert!(width > 0 && height > 0 && new_width > 0 && new_height > 0);
    assert_eq!(src.len(), width * height * channels);
    assert!(
        run.path.is_supported(),
        "{} is not supported by this CPU",
        run.path.name()
    );
    let (w, h, nw, nh) = (width, height, new_width, new_height);
    match channels {
        1 => resize_c::<1>(src, w, h, nw, nh, compat, run),
        2 => resize_c::<2>(src, w, h, nw, nh, compat, run),
        3 => resize_c::<3>(src, w, h, nw, nh, compat, run),
        4 => resize_c::<4>(src, w, h, nw, nh, compat, run),
        _ => panic!("channels must be 1..=4, got {channels}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::noise;

    #[test]
    fn filter_values() {
        assert_eq!(bicubic_filter(0.0), 1.0);
        assert_eq!(bicubic_filter(1.0), 0.0);
        assert_eq!(bicubic_filter(0.5), 0.5625);
        assert_eq!(bicubic_filter(1.5), -0.0625);
        assert_eq!(bicubic_filter(2.0), 0.0);
    }

    #[test]
    fn identity_scale_coefficients_are_a_single_tap() {
        // in == out: filterscale 1, center 2.5 for output 2, taps 1..5 at
        // offsets -1, 0, 1, 2: only offset 0 has a weight.
        let c = Coefficients::new(5, 5);
        assert_eq!(c.ksize, 5);
        assert_eq!(c.bounds[2], (1, 4));
        assert_eq!(&c.weights[2 * 5..2 * 5 + 4], &[0, 1 << 22, 0, 0]);
    }

    #[test]
    fn downscale_by_two_coefficients() {
        // 4 -> 2: scale 2, support 4, ksize 9. Output 0: center 1, taps 0..=3 of
        // the filter at (x - 0.5) / 2 normalised by their sum, times 2^22.
        let c = Coefficients::new(4, 2);
        assert_eq!(c.ksize, 9);
        assert_eq!(c.bounds, vec![(0, 4), (0, 4)]);
        let raw: Vec<f64> = (0..4)
            .map(|x| bicubic_filter((f64::from(x) - 1.0 + 0.5) * 0.5))
            .collect();
        let sum: f64 = raw.iter().sum();
        let expected: Vec<i32> = raw
            .iter()
            .map(|w| {
                let v = w / sum * 4_194_304.0;
                #[allow(clippy::cast_possible_truncation)]
                if v < 0.0 {
                    (v - 0.5) as i32
                } else {
                    (v + 0.5) as i32
                }
            })
            .collect();
        assert_eq!(&c.weights[..4], expected.as_slice());
        // Pinned values of this case.
        assert_eq!(&c.weights[..4], &[1_923_834, 1_923_834, 502_623, -155_987]);
    }

    #[test]
    fn constant_image_stays_constant() {
        let src = vec![77u8; 40 * 30 * 3];
        let out = resize_bicubic(&src, 40, 30, 3, 17, 11, PillowCompat::V13);
        assert!(out.iter().all(|&v| v == 77));
    }

    #[test]
    fn band_transposes_round_trip() {
        for len in [0, 5, 16, 37, 64] {
            let data = noise(len * ROWS, len as u64 + 3);
            let rows: [&[u8]; ROWS] = std::array::from_fn(|i| &data[i * len..(i + 1) * len]);
            let mut columns = vec![0u8; len * ROWS];
            rows_to_columns(&rows, len, &mut columns);
            for j in 0..len {
                for i in 0..ROWS {
                    assert_eq!(columns[j * ROWS + i], data[i * len + j]);
                }
            }
            let mut back = vec![0u8; len * ROWS];
            let mut outs: Vec<&mut [u8]> = back.chunks_exact_mut(len.max(1)).take(ROWS).collect();
            if len > 0 {
                columns_to_rows(&columns, len, &mut outs);
                assert_eq!(back, data);
            }
        }
    }

    #[test]
    fn banded_passes_equal_whole_image_passes() {
        // Several bands of output rows, both pass orders, last band partial.
        for (c, w, h, nw, nh) in [
            (3, 301, 700, 150, 333),
            (1, 90, 1000, 80, 140),
            (4, 200, 150, 60, 149),
        ] {
            let src = noise(w * h * c, (w + h) as u64);
            let (ch, cv) = (Coefficients::new(w, nw), Coefficients::new(h, nh));
            let run = Execution {
                path: SimdPath::Scalar,
                parallel: false,
            };
            for vertical_first in [false, true] {
                let want = if vertical_first {
                    let mut tmp = vec![0u8; nh * w * c];
                    vertical_into(&src, w * c, &cv, 0, 0, run, &mut tmp);
                    let mut out = vec![0u8; nh * nw * c];
                    horizontal_resize_whole(c, &tmp, w, &ch, run, &mut out);
                    out
                } else {
                    let mut tmp = vec![0u8; h * nw * c];
                    horizontal_resize_whole(c, &src, w, &ch, run, &mut tmp);
                    let mut out = vec![0u8; nh * nw * c];
                    vertical_into(&tmp, nw * c, &cv, 0, 0, run, &mut out);
                    out
                };
                for parallel in [false, true] {
                    let run = Execution { parallel, ..run };
                    let got = match c {
                        1 => two_pass::<1>(&src, w, &ch, &cv, vertical_first, run),
                        3 => two_pass::<3>(&src, w, &ch, &cv, vertical_first, run),
                        _ => two_pass::<4>(&src, w, &ch, &cv, vertical_first, run),
                    };
                    assert_eq!(
                        got, want,
                        "{c}x{w}x{h}->{nw}x{nh} vertical first {vertical_first}"
                    );
                }
            }
        }
    }

    fn horizontal_resize_whole(
        c: usize,
        src: &[u8],
        w: usize,
        ch: &Coefficients,
        run: Execution,
        out: &mut [u8],
    ) {
        match c {
            1 => horizontal_into::<1>(src, w, 0, ch, run, out),
            3 => horizontal_into::<3>(src, w, 0, ch, run, out),
            _ => horizontal_into::<4>(src, w, 0, ch, run, out),
        }
    }

    #[test]
    fn every_simd_path_gives_the_scalar_bytes() {
        let paths: Vec<SimdPath> = SimdPath::ALL
            .into_iter()
            .filter(|p| p.is_supported())
            .collect();
        let cases = [
            (1, 37, 29, 11, 7),
            (3, 300, 200, 151, 99),
            (3, 123, 457, 61, 228),
            (4, 90, 70, 33, 70),
            (2, 64, 64, 64, 17),
            (3, 40, 30, 80, 60), // up-scale
            (1, 1, 9, 1, 4),
        ];
        for (seed, &(c, w, h, nw, nh)) in cases.iter().enumerate() {
            let src = noise(w * h * c, seed as u64 + 1);
            for compat in [PillowCompat::V12, PillowCompat::V13] {
                let scalar = Execution {
                    path: SimdPath::Scalar,
                    parallel: false,
                };
                let want = resize_bicubic_with(&src, w, h, c, nw, nh, compat, scalar);
                for &path in &paths {
                    for parallel in [false, true] {
                        let run = Execution { path, parallel };
                        let got = resize_bicubic_with(&src, w, h, c, nw, nh, compat, run);
                        assert_eq!(got, want, "{run:?} {c}x{w}x{h}->{nw}x{nh}");
                    }
                }
            }
        }
    }

    #[test]
    fn pass_order_rule() {
        assert!(vertical_first(PillowCompat::V13, 1242, 2688, 1223, 2646));
        assert!(!vertical_first(PillowCompat::V13, 1244, 2629, 1241, 2623));
        assert!(!vertical_first(PillowCompat::V12, 1242, 2688, 1223, 2646));
    }
}
