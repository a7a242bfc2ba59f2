//! The AVX2 + FMA normalise kernel: whole MoonViT patches computed and streamed.
//!
//! Float32 values computed by [`Affine::value`]'s operations, eight pixels of
//! one channel at a time, and whole patches written with 16-byte non-temporal
//! stores.

use super::{Affine, INV_65280};
use std::arch::x86_64::{
    __m128, __m128i, __m256, __m256i, _mm256_castps256_ps128, _mm256_cvtepi32_ps,
    _mm256_extractf128_ps, _mm256_fmadd_ps, _mm256_loadu2_m128i, _mm256_mul_ps, _mm256_set1_ps,
    _mm256_setr_epi8, _mm256_shuffle_epi8, _mm_alignr_epi8, _mm_castps_si128, _mm_castsi128_ps,
    _mm_prefetch, _mm_shuffle_ps, _mm_stream_ps, _MM_HINT_T0,
};

/// The patch size the kernel is written for: MoonViT's 14. Two rows of a
/// patch plane are 28 floats, seven 16-byte stores.
pub(super) const PATCH: usize = 14;

/// How far ahead along each pixel row the source is prefetched, in bytes.
const PREFETCH: usize = 192;

/// Bytes past the end of a patch row that [`eight`] may read for its last
/// pixels (`16 - 4 * C`: its upper half loads 16 bytes for 4 pixels).
pub(super) const fn over_read(channels: usize) -> usize {
    16 - 4 * channels
}

/// Byte `b` of pixels `0..4` of each 128-bit half, zero-extended to 32 bits.
///
/// # Safety
/// AVX2.
#[target_feature(enable = "avx2")]
#[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
unsafe fn picker<const C: usize>(b: usize) -> __m256i {
    let [l0, l1, l2, l3] = [0, 1, 2, 3].map(|k| (C * k + b) as i8);
    let z = -128i8;
    _mm256_setr_epi8(
        l0, z, z, z, l1, z, z, z, l2, z, z, z, l3, z, z, z, //
        l0, z, z, z, l1, z, z, z, l2, z, z, z, l3, z, z, z,
    )
}

/// One channel's float32 values of the eight pixels at `p`: pixels 0..4
/// come from the 16 bytes at `p`, pixels 4..8 from the 16 bytes at `p + 4C`.
///
/// # Safety
/// AVX2 + FMA; `p .. p + 4C + 16` is readable.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn eight<const C: usize>(p: *const u8, pick: __m256i, form: Affine) -> __m256 {
    let bytes = _mm256_loadu2_m128i(p.add(4 * C).cast::<__m128i>(), p.cast::<__m128i>());
    let v = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(bytes, pick));
    let v256 = _mm256_mul_ps(v, _mm256_set1_ps(1.0 / 256.0));
    let q = _mm256_fmadd_ps(v, _mm256_set1_ps(INV_65280), v256);
    _mm256_fmadd_ps(q, _mm256_set1_ps(form.scale), _mm256_set1_ps(form.offset))
}

/// Floats 2..6 of `x` (its middle four).
///
/// # Safety
/// AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn middle(x: __m256) -> __m128 {
    let (low, high) = (_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
    _mm_castsi128_ps(_mm_alignr_epi8::<8>(
        _mm_castps_si128(high),
        _mm_castps_si128(low),
    ))
}

/// Stream two rows of a patch plane to the 28 floats at `dst`: row `a` as
/// its pixels 0..8 and 6..14, then row `b` the same way.
///
/// # Safety
/// AVX2; `dst` is 16-byte aligned and 28 floats are writable there.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn stream_row_pair(dst: *mut f32, a: [__m256; 2], b: [__m256; 2]) {
    _mm_stream_ps(dst, _mm256_castps256_ps128(a[0]));
    _mm_stream_ps(dst.add(4), _mm256_extractf128_ps::<1>(a[0]));
    _mm_stream_ps(dst.add(8), middle(a[1]));
    // a[12], a[13], b[0], b[1]
    let seam = _mm_shuffle_ps::<0b01_00_11_10>(
        _mm256_extractf128_ps::<1>(a[1]),
        _mm256_castps256_ps128(b[0]),
    );
    _mm_stream_ps(dst.add(12), seam);
    _mm_stream_ps(dst.add(16), middle(b[0]));
    _mm_stream_ps(dst.add(20), _mm256_castps256_ps128(b[1]));
    _mm_stream_ps(dst.add(24), _mm256_extractf128_ps::<1>(b[1]));
}

/// Write patches `0..n` of the band whose first pixel row is `y0` to `out`:
/// `out[j][c][py][px] = form[c].value(byte c of pixel (y0 + py, j * 14 + px))`.
///
/// # Safety
/// AVX2 + FMA; `out` is 16-byte aligned with `n * 3 * 14 * 14` writable
/// floats; for `j < n` and `py < 14`, the bytes `(y0 + py) * row_len + j * 14 * C`
/// up to `14 * C + over_read(C)` further are inside `data`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn patches<const C: usize>(
    data: &[u8],
    row_len: usize,
    y0: usize,
    n: usize,
    form: &[Affine; 3],
    out: *mut f32,
) {
    const PLANE: usize = PATCH * PATCH;
    // The channel byte: R, G, B, or the grey byte for 1 and 2 channels.
    let picks = [0, 1, 2].map(|c| picker::<C>(if C >= 3 { c } else { 0 }));
    let second = (PATCH - 8) * C;
    for j in 0..n {
        let patch = data.as_ptr().add(y0 * row_len + j * PATCH * C);
        let dst = out.add(j * 3 * PLANE);
        for pair in 0..PATCH / 2 {
            let a = patch.add(2 * pair * row_len);
            let b = a.add(row_len);
            // Fourteen rows are read side by side, more streams than the
            // hardware prefetchers follow: fetch a few patches ahead.
            // (A prefetch never faults, even past the end of `data`.)
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(PREFETCH).cast::<i8>());
            _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(PREFETCH).cast::<i8>());
            for c in 0..3 {
                // Reads end at `second + 4C + 16 = 14C + over_read(C)` past
                // the row's patch start; the stores are 16-byte multiples
                // from `out`, inside patch `j`.
                let row_a = [
                    eight::<C>(a, picks[c], form[c]),
                    eight::<C>(a.add(second), picks[c], form[c]),
                ];
                let row_b = [
                    eight::<C>(b, picks[c], form[c]),
                    eight::<C>(b.add(second), picks[c], form[c]),
                ];
                stream_row_pair(dst.add(c * PLANE + pair * 2 * PATCH), row_a, row_b);
            }
        }
    }
}
