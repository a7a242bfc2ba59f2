//! The passes on AVX-512 VNNI + VBMI: a band of [`ROWS`] rows transposed
//! straight into the layout `vpdpbusd` reads (quads), the kernel that sums
//! quads, and the horizontal pass's results laid out as quads of rows for the
//! vertical pass.
//!
//! On the byte columns of [`super::transpose`] (one input pixel's channel as
//! 16 contiguous bytes), the horizontal pass runs the vertical pass's VNNI
//! kernel, which interleaves four columns of taps again for every output (each
//! input is a tap of about four outputs), in 64-lane steps of which an RGB
//! column fills 48. Here the band is laid out once in quads: the four input pixels `4q..4q + 4`
//! (of the image, so every output's taps start in a quad), channel `c`, make
//! one 64-byte vector whose 32-bit lane `r` holds row `r`'s four bytes; an
//! output's taps, led by zero weights back to its quad's start, are whole
//! quads, one `vpdpbusd` per channel and weight digit each, and no lane is
//! idle. The sums are Pillow's exactly, as in
//! [`super::avx512::weighted_sums_vnni`] (the same digits, modulo-`2^32`
//! recombination); a zero weight adds nothing whatever pixel it meets.
//!
//! After a horizontal pass, the vertical pass reads its results the same way:
//! each output column of the band holds 16 rows, four quads of rows, which
//! [`columns_to_planes`] moves to planes (a plane per four rows, a 32-bit lane
//! per output byte) instead of back into rows; an output row's taps, led by
//! zeros back to the start of their quad of rows, are whole planes. The
//! vertical pass's own VNNI kernel interleaved four rows again for each
//! output row.

#[cfg(target_arch = "x86_64")]
use super::ahead::Ahead;
use super::coefficients::{group_digits, Coefficients};
use super::transpose::ROWS;
use super::ROUND_BIAS;

/// Bytes of one quad of one channel: four pixels of [`ROWS`] rows.
pub(super) const QUAD_BYTES: usize = 4 * ROWS;

/// The taps of a horizontal pass as [`quad_sums`] reads them, and the quads
/// each tile of the pass lays out: made once per resize.
#[derive(Debug)]
pub(super) struct QuadTaps {
    /// Per output: its first quad (`start / 4`, `start` its first tap's input)
    /// and the range of its digit groups in `groups`.
    outputs: Vec<(usize, std::ops::Range<usize>)>,
    /// Per output, its weights led by `start % 4` zeros, in groups of four
    /// (the last padded with zeros), each as [`group_digits`] gives it.
    groups: Vec<[u32; 3]>,
}

impl QuadTaps {
    /// The quad taps of `coeffs` on quads that start at inputs `phase + 4q`
    /// (`phase < 4`; an output whose taps start before `phase` is read as if
    /// they started at it: it is never summed on such quads), or `None` when
    /// a weight has no digits (never for Pillow's weights; see
    /// [`Coefficients`]).
    pub(super) fn new(coeffs: &Coefficients, phase: usize) -> Option<Self> {
        let mut outputs = Vec::with_capacity(coeffs.bounds.len());
        let mut groups = Vec::new();
        let mut led = Vec::with_capacity(coeffs.ksize + 3);
        for i in 0..coeffs.bounds.len() {
            let (start, taps) = coeffs.taps(i);
            let start = start.saturating_sub(phase);
            led.clear();
            led.resize(start % 4, 0);
            led.extend_from_slice(taps.weights);
            let first = groups.len();
            groups.resize(first + led.len().div_ceil(4), [0; 3]);
            group_digits(&led, &mut groups[first..])?;
            outputs.push((start / 4, first..groups.len()));
        }
        Some(Self { outputs, groups })
    }

    /// The quads the taps of `outputs` read ([`span`]).
    pub(super) fn quads(&self, outputs: std::ops::Range<usize>) -> std::ops::Range<usize> {
        span(&self.outputs[outputs])
    }
}

/// The units (quads, or [`super::pairs`]' pairs) that outputs read, given each
/// output's first unit and the range of its units' weights (one weight entry
/// per unit): from the first output's first unit to the end of the last one
/// that ends latest.
pub(super) fn span(outputs: &[(usize, std::ops::Range<usize>)]) -> std::ops::Range<usize> {
    let first = outputs.first().map_or(0, |&(u, _)| u);
    let end = outputs
        .iter()
        .map(|(u, w)| u + w.len())
        .max()
        .unwrap_or(first);
    first..end.max(first)
}

/// Whether this CPU runs the passes of `path` on quads: AVX-512 (F, BW) with
/// VL, VNNI and VBMI.
pub(super) fn available(path: crate::simd::SimdPath) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        path == crate::simd::SimdPath::Avx512
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512vnni")
            && std::arch::is_x86_feature_detected!("avx512vbmi")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = path;
        false
    }
}

/// The quads of `rows` (`ROWS` rows of `S`-byte pixels, whose first `C` bytes
/// are the channels; each row starting at the tile's first quad) into `dst`,
/// `quads * C * QUAD_BYTES` bytes: byte `4 * r + i` of the vector at `(q * C +
/// c) * QUAD_BYTES` is channel `c` of pixel `4 * q + i` of row `r`, or 0 where
/// the rows end before that pixel. Sixteen pixels of each row at a time: one
/// `vpermb` gathers each channel's bytes into 32-bit lanes, a 16 x 16
/// transpose of the lanes turns rows into lanes; each row is prefetched 256
/// bytes ahead (4 % faster on 8000x8000 -> 1793x1793).
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VBMI ([`available`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
pub(super) unsafe fn rows_to_quads<const S: usize, const C: usize>(
    rows: &[&[u8]; ROWS],
    quads: usize,
    dst: &mut [u8],
) {
    use std::arch::x86_64::{
        __m512i, _mm512_loadu_si512, _mm512_maskz_loadu_epi8, _mm512_permutexvar_epi8,
        _mm512_shuffle_i32x4, _mm512_storeu_si512, _mm512_unpackhi_epi32, _mm512_unpackhi_epi64,
        _mm512_unpacklo_epi32, _mm512_unpacklo_epi64, _mm_prefetch, _MM_HINT_T0,
    };
    const PREFETCH: usize = 256;
    const { assert!(C >= 1 && C <= S && S <= 4) };
    let len = rows[0].len();
    assert!(rows.iter().all(|r| r.len() == len) && len <= 4 * quads * S);
    assert_eq!(dst.len(), quads * C * QUAD_BYTES);
    // Byte `16 * c + x` of the gathered row: channel `c` of its pixel `x`.
    let mut index = [0u8; 64];
    for c in 0..C {
        for x in 0..16 {
            #[allow(clippy::cast_possible_truncation)] // below 64
            let byte = (x * S + c) as u8;
            index[16 * c + x] = byte;
        }
    }
    let index = _mm512_loadu_si512(index.as_ptr().cast());
    let out = dst.as_mut_ptr();
    for chunk in 0..quads.div_ceil(4) {
        let at = chunk * 16 * S;
        let bytes = len.saturating_sub(at).min(16 * S);
        let mask = if bytes == 64 {
            u64::MAX
        } else {
            (1u64 << bytes) - 1
        };
        for row in rows {
            _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(at + PREFETCH).cast());
        }
        // SAFETY (of the loads): `mask` covers the `bytes` of each row from `at`.
        let r: [__m512i; 16] = std::array::from_fn(|i| {
            let row = _mm512_maskz_loadu_epi8(mask, rows[i].as_ptr().wrapping_add(at).cast());
            _mm512_permutexvar_epi8(index, row)
        });
        // 32-bit lanes: t[2p], t[2p + 1] hold lanes 0,1 / 2,3 of each 128-bit
        // block of rows 2p and 2p + 1, alternating.
        let t: [__m512i; 16] = std::array::from_fn(|i| {
            let (a, b) = (r[i & !1], r[i | 1]);
            if i % 2 == 0 {
                _mm512_unpacklo_epi32(a, b)
            } else {
                _mm512_unpackhi_epi32(a, b)
            }
        });
        // u[4g + j], block `k`: lane `4k + j` of rows `4g..4g + 4`.
        let u: [__m512i; 16] = std::array::from_fn(|i| {
            let (g, j) = (i / 4, i % 4);
            let (a, b) = (t[4 * g + j / 2], t[4 * g + 2 + j / 2]);
            if j % 2 == 0 {
                _mm512_unpacklo_epi64(a, b)
            } else {
                _mm512_unpackhi_epi64(a, b)
            }
        });
        // Lane `4k + j` of all 16 rows: block `g` of it from u[4g + j], block `k`.
        for j in 0..4 {
            let a = _mm512_shuffle_i32x4::<0x44>(u[j], u[4 + j]);
            let b = _mm512_shuffle_i32x4::<0xEE>(u[j], u[4 + j]);
            let c = _mm512_shuffle_i32x4::<0x44>(u[8 + j], u[12 + j]);
            let d = _mm512_shuffle_i32x4::<0xEE>(u[8 + j], u[12 + j]);
            let lanes = [
                _mm512_shuffle_i32x4::<0x88>(a, c),
                _mm512_shuffle_i32x4::<0xDD>(a, c),
                _mm512_shuffle_i32x4::<0x88>(b, d),
                _mm512_shuffle_i32x4::<0xDD>(b, d),
            ];
            // Lane `4k + j` is quad `j` of the chunk, channel `k`.
            let q = 4 * chunk + j;
            if q < quads {
                for (k, v) in lanes.into_iter().enumerate().take(C) {
                    _mm512_storeu_si512(out.add((q * C + k) * QUAD_BYTES).cast(), v);
                }
            }
        }
    }
}

/// Each output `i` of `outputs` into the `lanes` bytes at `(i -
/// outputs.start) * lanes` of `out`, summed from `quads`, quads of `stride`
/// bytes from quad `first` on, lane `l` of a quad the 4 bytes at `4 * l`:
/// `clip8(2^21 + sum_t k[t] * input[start + t])` in every lane, Pillow's
/// `ImagingResampleHorizontal_8bpc` / `ImagingResampleVertical_8bpc` sum.
/// `B` blocks of 16 lanes at a time (their sums held in registers across the
/// taps), the lanes past `lanes` masked off. `ahead` steps once per output. The horizontal pass's quads are
/// [`rows_to_quads`]' (`C * ROWS` lanes, channel `c`'s rows at `c * ROWS`, the
/// layout [`super::transpose::columns_to_rows`] reads), the vertical pass's
/// [`columns_to_planes`]' (an output row's lanes).
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VL and VNNI ([`available`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn quad_sums<const B: usize>(
    taps: &QuadTaps,
    outputs: std::ops::Range<usize>,
    quads: &[u8],
    (first, stride): (usize, usize),
    lanes: usize,
    out: &mut [u8],
    ahead: &mut Ahead<'_>,
) {
    use std::arch::x86_64::{
        _mm512_add_epi32, _mm512_cvtusepi32_epi8, _mm512_dpbusd_epi32, _mm512_maskz_loadu_epi32,
        _mm512_max_epi32, _mm512_set1_epi32, _mm512_setzero_si512, _mm512_slli_epi32,
        _mm512_srai_epi32, _mm_mask_storeu_epi8, _mm_storeu_si128,
    };
    assert_eq!(out.len(), outputs.len() * lanes);
    let read = taps.quads(outputs.clone());
    assert!(read.start >= first && 4 * lanes <= stride);
    assert!(read.is_empty() || (read.end - 1 - first) * stride + 4 * lanes <= quads.len());
    let (src, dst) = (quads.as_ptr(), out.as_mut_ptr());
    let blocks = lanes.div_ceil(16);
    for (o, (q, range)) in taps.outputs[outputs].iter().enumerate() {
        ahead.step();
        let at = src.add((q - first) * stride);
        let dst = dst.add(o * lanes);
        for b0 in (0..blocks).step_by(B) {
            // The lanes of block `b0 + k`: none past `lanes` is read or written.
            let masks: [u16; B] = std::array::from_fn(|k| {
                let n = lanes.saturating_sub(16 * (b0 + k)).min(16);
                #[allow(clippy::cast_possible_truncation)] // n <= 16
                let mask = ((1u32 << n) - 1) as u16;
                mask
            });
            // Per block, the sums of digits 0, 1 and 2; digit 0's start at the
            // rounding bias (every addition wraps).
            let zero = _mm512_setzero_si512();
            let mut acc = [[_mm512_set1_epi32(ROUND_BIAS), zero, zero]; B];
            for (g, group) in taps.groups[range.clone()].iter().enumerate() {
                let quad = at.add(g * stride + 64 * b0);
                for (k, sums) in acc.iter_mut().enumerate() {
                    let v = _mm512_maskz_loadu_epi32(masks[k], quad.add(64 * k).cast());
                    for (sum, &word) in sums.iter_mut().zip(group) {
                        #[allow(clippy::cast_possible_wrap)]
                        let digit = _mm512_set1_epi32(word as i32);
                        *sum = _mm512_dpbusd_epi32(*sum, v, digit);
                    }
                }
            }
            for (k, [s0, s1, s2]) in acc.into_iter().enumerate() {
                let high =
                    _mm512_add_epi32(_mm512_slli_epi32::<16>(s2), _mm512_slli_epi32::<8>(s1));
                let sum = _mm512_add_epi32(high, s0);
                // negative sums clip to 0 here, sums over 255 in the saturating narrowing
                let v =
                    _mm512_cvtusepi32_epi8(_mm512_max_epi32(_mm512_srai_epi32::<22>(sum), zero));
                let to = dst.add(16 * (b0 + k));
                match masks[k] {
                    u16::MAX => _mm_storeu_si128(to.cast(), v),
                    0 => {}
                    mask => _mm_mask_storeu_epi8(to.cast(), mask, v),
                }
            }
        }
    }
}

/// The columns of a horizontal pass's band (`columns`: per output pixel its
/// `lanes_per` lanes, each the [`ROWS`] bytes of rows `0..ROWS`) into the
/// first `count` planes of `planes` (`plane_len` bytes each): plane `p`, lane
/// `at + l`, holds the bytes of rows `4p..4p + 4` of column lane `l`, the
/// layout [`quad_sums`] reads in the vertical pass (each plane a quad of
/// rows). Four lanes at a time: one `vpermd` turns their 64 bytes into four
/// planes' 16.
///
/// # Safety
/// The CPU must support AVX-512 F ([`available`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn columns_to_planes(
    columns: &[u8],
    planes: &mut [u8],
    (plane_len, count): (usize, usize),
    at: usize,
) {
    use std::arch::x86_64::{
        __m128i, _mm512_extracti32x4_epi32, _mm512_loadu_si512, _mm512_permutexvar_epi32,
        _mm512_setr_epi32, _mm_storeu_si128,
    };
    let lanes = columns.len() / ROWS;
    assert!(count <= 4 && columns.len() == lanes * ROWS);
    assert!(count == 0 || (count - 1) * plane_len + 4 * (at + lanes) <= planes.len());
    let (src, dst) = (columns.as_ptr(), planes.as_mut_ptr());
    // Dword `4q + j` of the result: dword `q` (rows `4q..4q + 4`) of lane `j`.
    let index = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    let mut l = 0;
    while l + 4 <= lanes {
        let v = _mm512_permutexvar_epi32(index, _mm512_loadu_si512(src.add(l * ROWS).cast()));
        let out = dst.add(4 * (at + l));
        let parts = [
            _mm512_extracti32x4_epi32::<0>(v),
            _mm512_extracti32x4_epi32::<1>(v),
            _mm512_extracti32x4_epi32::<2>(v),
            _mm512_extracti32x4_epi32::<3>(v),
        ];
        for (p, part) in parts.into_iter().enumerate().take(count) {
            _mm_storeu_si128(out.add(p * plane_len).cast::<__m128i>(), part);
        }
        l += 4;
    }
    for l in l..lanes {
        for p in 0..count {
            let from = src.add(l * ROWS + 4 * p);
            std::ptr::copy_nonoverlapping(from, dst.add(p * plane_len + 4 * (at + l)), 4);
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::simd::SimdPath;
    use crate::test_util::noise;

    /// `rows_to_quads::<S, C>` of 16 rows of `pixels` noise pixels into
    /// `quads` quads, over a buffer poisoned first; every byte is checked.
    fn check_layout<const S: usize, const C: usize>(pixels: usize, quads: usize) {
        let data = noise(ROWS * pixels * S, (pixels * 8 + S * 2 + C) as u64);
        let rows: [&[u8]; ROWS] =
            std::array::from_fn(|r| &data[r * pixels * S..(r + 1) * pixels * S]);
        let mut dst = vec![0xA5u8; quads * C * QUAD_BYTES];
        // SAFETY: the caller checked `available`.
        unsafe { rows_to_quads::<S, C>(&rows, quads, &mut dst) };
        for q in 0..quads {
            for c in 0..C {
                for r in 0..ROWS {
                    for i in 0..4 {
                        let x = 4 * q + i;
                        let want = if x < pixels { rows[r][x * S + c] } else { 0 };
                        let got = dst[(q * C + c) * QUAD_BYTES + 4 * r + i];
                        assert_eq!(
                            got, want,
                            "S {S} C {C}: {pixels} px, quad {q} c {c} row {r}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn rows_become_quads_with_zeros_past_their_end() {
        if !available(SimdPath::Avx512) {
            return;
        }
        for pixels in [0usize, 1, 3, 4, 5, 15, 16, 17, 31, 33, 64, 101] {
            for quads in [
                pixels.div_ceil(4),
                pixels.div_ceil(4) + 1,
                pixels.div_ceil(4) + 5,
            ] {
                check_layout::<1, 1>(pixels, quads);
                check_layout::<2, 1>(pixels, quads);
                check_layout::<2, 2>(pixels, quads);
                check_layout::<3, 3>(pixels, quads);
                check_layout::<4, 3>(pixels, quads);
                check_layout::<4, 4>(pixels, quads);
            }
        }
    }

    #[test]
    fn columns_become_planes_of_four_rows() {
        // Lanes of every remainder of 4 (the vpermd step), 1 to 4 planes, an
        // offset lane; the planes' other bytes stay as they were.
        if !available(SimdPath::Avx512) {
            return;
        }
        for lanes in [0, 1, 3, 4, 5, 8, 13, 50] {
            for count in 1..=4 {
                let columns = noise(lanes * ROWS, (lanes * 4 + count) as u64);
                let (at, plane_len) = (3, 4 * (lanes + 5));
                let mut planes = vec![0xA5u8; 4 * plane_len];
                // SAFETY: the test checked `available`.
                unsafe { columns_to_planes(&columns, &mut planes, (plane_len, count), at) };
                for p in 0..4 {
                    for lane in 0..plane_len / 4 {
                        for i in 0..4 {
                            let got = planes[p * plane_len + 4 * lane + i];
                            let l = lane.wrapping_sub(at);
                            let want = if p < count && l < lanes {
                                columns[l * ROWS + 4 * p + i]
                            } else {
                                0xA5
                            };
                            assert_eq!(
                                got, want,
                                "{lanes} lanes, {count} planes: plane {p} lane {lane}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// `clip8(2^21 + sum_t k[t] * p[start + t])` of every output, row and
    /// channel of 16 rows of `width` `C`-byte pixels, against [`quad_sums`]
    /// (in tiles of at most `tile` outputs) on [`rows_to_quads`] of them.
    fn check_sums<const C: usize>(coeffs: &Coefficients, rows: &[u8], width: usize, tile: usize) {
        let taps = QuadTaps::new(coeffs, 0).expect("weights with digits");
        let outputs = coeffs.bounds.len();
        for first in (0..outputs).step_by(tile) {
            let xx = first..(first + tile).min(outputs);
            let q = taps.quads(xx.clone());
            let pixels = 4 * q.start..(4 * q.end).min(width);
            let tile_rows: [&[u8]; ROWS] = std::array::from_fn(|r| {
                let row = &rows[r * width * C..(r + 1) * width * C];
                &row[pixels.start * C..pixels.end * C]
            });
            let mut quads = vec![0u8; q.len() * C * QUAD_BYTES];
            let mut out = vec![0u8; xx.len() * C * ROWS];
            // SAFETY: the caller checked `available`.
            unsafe {
                rows_to_quads::<C, C>(&tile_rows, q.len(), &mut quads);
                quad_sums::<C>(
                    &taps,
                    xx.clone(),
                    &quads,
                    (q.start, C * QUAD_BYTES),
                    C * ROWS,
                    &mut out,
                    &mut Ahead::none(),
                );
            }
            for (o, xx) in xx.enumerate() {
                let (start, t) = coeffs.taps(xx);
                for c in 0..C {
                    for r in 0..ROWS {
                        let row = &rows[r * width * C..];
                        let sum = t
                            .weights
                            .iter()
                            .enumerate()
                            .fold(ROUND_BIAS, |acc, (j, &k)| {
                                acc.wrapping_add(
                                    k.wrapping_mul(i32::from(row[(start + j) * C + c])),
                                )
                            });
                        let want = u8::try_from((sum >> 22).clamp(0, 255)).unwrap();
                        let got = out[(o * C + c) * ROWS + r];
                        assert_eq!(got, want, "output {xx} channel {c} row {r}, tile {tile}");
                    }
                }
            }
        }
    }

    #[test]
    fn quad_sums_give_the_scalar_bytes() {
        // Pillow's weights of downscales (many taps, every lead of a quad),
        // near-identity and upscales (one tap of 2^22), and random weights up
        // to the digits' extremes (sums that clip above 255 and below 0); noise,
        // 0, 255 and rows alternating 0 / 255; tiles of 1, 7 and all outputs.
        if !available(SimdPath::Avx512) {
            return;
        }
        let sizes = [
            (95, 21),
            (1000, 13),
            (40, 40),
            (17, 40),
            (8, 3),
            (64, 63),
            (5, 1),
        ];
        for (seed, &(width, out)) in sizes.iter().enumerate() {
            let pillow = Coefficients::new(width, out);
            let mut random = pillow.clone();
            let bytes = noise(4 * random.weights.len(), seed as u64 + 5);
            for (k, b) in random.weights.iter_mut().zip(bytes.chunks_exact(4)) {
                let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                *k = v.rem_euclid(8_355_711 + 8_421_504 + 1) - 8_421_504;
            }
            for c in 1..=4 {
                let len = ROWS * width * c;
                let pixels = [
                    noise(len, (seed * 4 + c) as u64),
                    vec![0; len],
                    vec![255; len],
                    (0..len)
                        .map(|i| if (i / (width * c)) % 2 == 0 { 255 } else { 0 })
                        .collect(),
                ];
                for coeffs in [&pillow, &random] {
                    for rows in &pixels {
                        for tile in [1, 7, out] {
                            match c {
                                1 => check_sums::<1>(coeffs, rows, width, tile),
                                2 => check_sums::<2>(coeffs, rows, width, tile),
                                3 => check_sums::<3>(coeffs, rows, width, tile),
                                _ => check_sums::<4>(coeffs, rows, width, tile),
                            }
                        }
                    }
                }
            }
        }
    }
}
