//! The horizontal pass on AVX2: a band's byte columns laid out once in pairs
//! of 16-bit pixels, the layout `vpmaddwd` reads, and the kernel that sums
//! them.
//!
//! On the byte columns of [`super::transpose`], the AVX2 kernel
//! ([`super::avx2::weighted_sum`]) widens eight bytes of a column to 32-bit
//! lanes and multiplies them by one weight (`vpmulld`, two micro-ops on Intel)
//! for every tap of every output, though each input is a tap of about four
//! outputs. Here each tile of the band is laid out once in pairs: input pixels
//! `2p` and `2p + 1` (of the image, so every output's taps start in a pair),
//! channel `c`, make two 32-byte vectors whose 32-bit lane `r` holds row `r`'s
//! two pixels as 16-bit values (rows 0-7, then 8-15). An output's taps, led by
//! a zero weight back to its pair's start, are whole pairs: one `vpmaddwd`
//! sums two taps of eight rows.
//!
//! A weight `k` (Pillow's are under `2^23` in magnitude) does not fit 16 bits,
//! so it is split into two digits, `k = high * 2^15 + low`, `low` in
//! `0..2^15` and `high` an `i16`: each pair is summed against the low and the
//! high digits of its two weights, and the sums are recombined as
//! `(high_sum << 15) + low_sum` modulo `2^32`, which is Pillow's `i32` sum
//! exactly whatever order the taps come in (a product of a pixel and a digit
//! and the sum of two of them stay far inside `i32`; the low sums may wrap
//! over many taps, and wrapping additions are exact modulo `2^32`). A zero
//! weight adds nothing whatever pixel it meets.

use super::coefficients::Coefficients;
use super::quads::span;
use super::transpose::ROWS;
#[cfg(target_arch = "x86_64")]
use super::ROUND_BIAS;

/// Bytes of one pair of one channel: two 16-bit pixels of [`ROWS`] rows.
pub(super) const PAIR_BYTES: usize = 2 * 2 * ROWS;

/// Bits of a weight's low digit (see the module's documentation).
const LOW_BITS: u32 = 15;

/// The taps of a horizontal pass as [`pair_sums`] reads them: made once per
/// resize.
#[derive(Debug)]
pub(super) struct PairTaps {
    /// Per output: its first pair (`start / 2`, `start` its first tap's input)
    /// and the range of its pairs' digits in `digits`.
    outputs: Vec<(usize, std::ops::Range<usize>)>,
    /// Per output, its weights led by `start % 2` zeros, in pairs (the last
    /// padded with a zero), each as two words: the low digits of its two
    /// weights as 16-bit halves (the first weight's in the low half), then
    /// the high digits.
    digits: Vec<[u32; 2]>,
}

/// `k` as `(low, high)` 16-bit digits, `k = high * 2^15 + low` with `low` in
/// `0..2^15`, or `None` when `high` is not an `i16` (`k` under `-2^30` or from
/// `2^30` on; never for Pillow's weights).
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn split(k: i32) -> Option<(u16, u16)> {
    let low = (k & ((1 << LOW_BITS) - 1)) as u16;
    let high = i16::try_from(k >> LOW_BITS).ok()?;
    Some((low, high as u16))
}

impl PairTaps {
    /// The pair taps of `coeffs`, or `None` when a weight has no digits
    /// (never for Pillow's weights).
    pub(super) fn new(coeffs: &Coefficients) -> Option<Self> {
        let mut outputs = Vec::with_capacity(coeffs.bounds.len());
        let mut digits = Vec::new();
        for i in 0..coeffs.bounds.len() {
            let (start, taps) = coeffs.taps(i);
            let lead = start % 2;
            let weight = |t: usize| {
                t.checked_sub(lead)
                    .and_then(|t| taps.weights.get(t))
                    .copied()
                    .unwrap_or(0)
            };
            let first = digits.len();
            for p in 0..(lead + taps.weights.len()).div_ceil(2) {
                let (a_low, a_high) = split(weight(2 * p))?;
                let (b_low, b_high) = split(weight(2 * p + 1))?;
                let word = |a: u16, b: u16| u32::from(a) | u32::from(b) << 16;
                digits.push([word(a_low, b_low), word(a_high, b_high)]);
            }
            outputs.push((start / 2, first..digits.len()));
        }
        Some(Self { outputs, digits })
    }

    /// The pairs the taps of `outputs` read ([`span`]).
    pub(super) fn pairs(&self, outputs: std::ops::Range<usize>) -> std::ops::Range<usize> {
        span(&self.outputs[outputs])
    }
}

/// Whether the horizontal pass of `path` runs on pairs: the AVX2 path (the
/// AVX-512 one runs on quads where the CPU has them, else on byte columns
/// with 64-lane kernels).
pub(super) fn available(path: crate::simd::SimdPath) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        path == crate::simd::SimdPath::Avx2 && std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = path;
        false
    }
}

/// The byte columns of a tile (`columns`: per input pixel `S * ROWS` bytes,
/// channel `c`'s rows at `c * ROWS`, as [`super::transpose::rows_to_columns`]
/// lays out `S`-byte pixels; `pixels` of them, the first at an even input)
/// into `pairs` pairs in `dst`, `pairs * C * PAIR_BYTES` bytes: the 32-bit lane
/// `8h + r` of the vector at `(p * C + c) * PAIR_BYTES + 32h` holds channel
/// `c` of row `8h + r` of pixels `2p` (low half) and `2p + 1` (high half) as
/// 16-bit values, 0 for a pixel past `pixels`.
///
/// # Safety
/// The CPU must support AVX2 ([`available`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn columns_to_pairs<const S: usize, const C: usize>(
    columns: &[u8],
    pixels: usize,
    pairs: usize,
    dst: &mut [u8],
) {
    use std::arch::x86_64::{
        __m128i, _mm256_cvtepu8_epi16, _mm256_storeu_si256, _mm_loadu_si128, _mm_setzero_si128,
        _mm_unpackhi_epi8, _mm_unpacklo_epi8,
    };
    const { assert!(C >= 1 && C <= S) };
    assert!(columns.len() >= pixels * S * ROWS && pixels <= 2 * pairs);
    assert!(dst.len() >= pairs * C * PAIR_BYTES);
    let (src, out) = (columns.as_ptr(), dst.as_mut_ptr());
    let column = |x: usize, c: usize| -> __m128i {
        if x < pixels {
            _mm_loadu_si128(src.add(x * S * ROWS + c * ROWS).cast())
        } else {
            _mm_setzero_si128()
        }
    };
    for p in 0..pairs {
        for c in 0..C {
            let (a, b) = (column(2 * p, c), column(2 * p + 1, c));
            let to = out.add((p * C + c) * PAIR_BYTES);
            _mm256_storeu_si256(to.cast(), _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(a, b)));
            let high_rows = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(a, b));
            _mm256_storeu_si256(to.add(32).cast(), high_rows);
        }
    }
}

/// Each output `i` of `outputs` into the `C * ROWS` bytes at `(i -
/// outputs.start) * C * ROWS` of `out` (channel `c`'s rows at `c * ROWS`, the
/// layout [`super::transpose::columns_to_rows`] reads), summed from `pairs`,
/// laid out by [`columns_to_pairs`] from pair `first` on:
/// `clip8(2^21 + sum_t k[t] * input[start + t])` in every lane, Pillow's
/// `ImagingResampleHorizontal_8bpc` sum.
///
/// # Safety
/// The CPU must support AVX2 ([`available`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn pair_sums<const C: usize>(
    taps: &PairTaps,
    outputs: std::ops::Range<usize>,
    pairs: &[u8],
    first: usize,
    out: &mut [u8],
) {
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi32, _mm256_loadu_si256, _mm256_madd_epi16, _mm256_set1_epi32,
        _mm256_setzero_si256, _mm256_slli_epi32,
    };
    /// Blocks `b..b + B` of 8 lanes (32 bytes of each pair) of one output
    /// from `at`, its first pair, into `dst` (`B` even): the low and high
    /// sums held in registers across all its pairs, then recombined, shifted,
    /// clipped to `0..=255` (saturated to i16, then to u8) and stored.
    #[inline(always)]
    unsafe fn blocks<const B: usize>(
        at: *const u8,
        stride: usize,
        digits: &[[u32; 2]],
        b: usize,
        dst: *mut u8,
    ) {
        let mut low = [_mm256_set1_epi32(ROUND_BIAS); B];
        let mut high = [_mm256_setzero_si256(); B];
        for (j, &[l, h]) in digits.iter().enumerate() {
            #[allow(clippy::cast_possible_wrap)]
            let (l, h) = (_mm256_set1_epi32(l as i32), _mm256_set1_epi32(h as i32));
            let pair = at.add(j * stride + 32 * b);
            for k in 0..B {
                let v: __m256i = _mm256_loadu_si256(pair.add(32 * k).cast());
                low[k] = _mm256_add_epi32(low[k], _mm256_madd_epi16(v, l));
                high[k] = _mm256_add_epi32(high[k], _mm256_madd_epi16(v, h));
            }
        }
        for (sum, high) in low.iter_mut().zip(high) {
            *sum = _mm256_add_epi32(_mm256_slli_epi32::<15>(high), *sum);
        }
        super::avx2::store_clipped(low, dst.add(8 * b));
    }
    const { assert!(C >= 1 && C <= 4) };
    let (lanes, stride) = (C * ROWS, C * PAIR_BYTES);
    assert_eq!(out.len(), outputs.len() * lanes);
    let read = taps.pairs(outputs.clone());
    assert!(read.start >= first);
    assert!(read.is_empty() || (read.end - first) * stride <= pairs.len());
    let (src, dst) = (pairs.as_ptr(), out.as_mut_ptr());
    for (o, (p, range)) in taps.outputs[outputs].iter().enumerate() {
        let (at, digits, dst) = (
            src.add((p - first) * stride),
            &taps.digits[range.clone()],
            dst.add(o * lanes),
        );
        // 2C blocks of 8 lanes, at most 6 at a time (12 sums in registers)
        match C {
            1 => blocks::<2>(at, stride, digits, 0, dst),
            2 => blocks::<4>(at, stride, digits, 0, dst),
            3 => blocks::<6>(at, stride, digits, 0, dst),
            _ => {
                blocks::<4>(at, stride, digits, 0, dst);
                blocks::<4>(at, stride, digits, 4, dst);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resize::scalar;
    use crate::simd::SimdPath;
    use crate::test_util::noise;

    #[test]
    fn weights_split_into_digits_that_give_them_back() {
        for k in [
            0,
            1,
            -1,
            32_767,
            32_768,
            -32_768,
            -32_769,
            4_194_304,
            -4_194_304,
            8_355_711,
            -8_421_504,
            (1 << 30) - 1,
            -(1 << 30),
        ] {
            let (low, high) = split(k).unwrap();
            assert!(low < 1 << LOW_BITS);
            #[allow(clippy::cast_possible_wrap)]
            let back = i32::from(high as i16) * (1 << LOW_BITS) + i32::from(low);
            assert_eq!(back, k);
        }
        assert_eq!(split(1 << 30), None);
        assert_eq!(split(-(1 << 30) - 1), None);
        assert_eq!(split(i32::MIN), None);
    }

    /// `clip8(2^21 + sum_t k[t] * p[start + t])` of every output, row and
    /// channel of 16 rows of `width` `S`-byte pixels, against [`pair_sums`]
    /// (in tiles of at most `tile` outputs) on [`columns_to_pairs`] of their
    /// byte columns, over buffers poisoned first.
    fn check_sums<const S: usize, const C: usize>(
        coeffs: &Coefficients,
        rows: &[u8],
        width: usize,
        tile: usize,
    ) {
        let taps = PairTaps::new(coeffs).unwrap();
        let out_w = coeffs.bounds.len();
        let mut want = vec![0u8; out_w * C * ROWS];
        for (xx, chunk) in want.chunks_exact_mut(C * ROWS).enumerate() {
            let (start, t) = coeffs.taps(xx);
            for c in 0..C {
                for r in 0..ROWS {
                    let column: Vec<u8> =
                        (0..width).map(|x| rows[(r * width + x) * S + c]).collect();
                    let mut one = [0u8];
                    scalar::weighted_sum(&column, 1, start, 0, t.weights, &mut one);
                    chunk[c * ROWS + r] = one[0];
                }
            }
        }
        let mut got = vec![0xA5u8; out_w * C * ROWS];
        for xx0 in (0..out_w).step_by(tile) {
            let outputs = xx0..(xx0 + tile).min(out_w);
            let p = taps.pairs(outputs.clone());
            let pixels = 2 * p.start..(2 * p.end).min(width);
            let mut columns = vec![0x5Au8; pixels.len() * S * ROWS];
            for x in pixels.clone() {
                for s in 0..S {
                    for r in 0..ROWS {
                        columns[((x - pixels.start) * S + s) * ROWS + r] =
                            rows[(r * width + x) * S + s];
                    }
                }
            }
            let mut pairs = vec![0xA5u8; p.len() * C * PAIR_BYTES];
            let out = &mut got[outputs.start * C * ROWS..outputs.end * C * ROWS];
            // SAFETY: the tests run these where `available` says the CPU has AVX2.
            unsafe {
                columns_to_pairs::<S, C>(&columns, pixels.len(), p.len(), &mut pairs);
                pair_sums::<C>(&taps, outputs, &pairs, p.start, out);
            }
        }
        assert!(
            got == want,
            "{width} -> {out_w}, {S}-byte pixels, {C} channels, tiles of {tile}"
        );
    }

    #[test]
    fn pair_sums_give_the_scalar_bytes() {
        // Downscales (odd and even first taps, up to 130 taps), upscales, one
        // pixel, odd widths whose last pair has one pixel, 1 to 4 channels in
        // pixels of 1 to 4 bytes, one tile or several.
        if !available(SimdPath::Avx2) {
            return;
        }
        for (w, nw) in [
            (301, 150),
            (1000, 123),
            (50, 170),
            (7, 3),
            (1, 1),
            (2, 1),
            (9, 9),
            (4000, 61),
            (33, 32),
        ] {
            let coeffs = Coefficients::new(w, nw);
            let rows = noise(w * ROWS * 4, (w * 31 + nw) as u64);
            for tile in [nw, 7, 1] {
                check_sums::<1, 1>(&coeffs, &rows[..w * ROWS], w, tile);
                check_sums::<2, 2>(&coeffs, &rows[..w * ROWS * 2], w, tile);
                check_sums::<2, 1>(&coeffs, &rows[..w * ROWS * 2], w, tile);
                check_sums::<3, 3>(&coeffs, &rows[..w * ROWS * 3], w, tile);
                check_sums::<4, 3>(&coeffs, &rows, w, tile);
                check_sums::<4, 4>(&coeffs, &rows, w, tile);
            }
        }
        // Sums past both ends: rows of only 0 and 255 through a strong downscale.
        let w = 600;
        let rows: Vec<u8> = (0..w * ROWS * 3)
            .map(|i| if (i / 3 / 40) % 2 == 0 { 0 } else { 255 })
            .collect();
        check_sums::<3, 3>(&Coefficients::new(w, 37), &rows, w, 5);
    }
}
