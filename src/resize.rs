//! Pillow's BICUBIC resize on 8-bit interleaved pixels, bit-exact.
//!
//! Follows `libImaging/Resample.c` (`precompute_coeffs`, `normalize_coeffs_8bpc`,
//! `ImagingResampleHorizontal_8bpc`, `ImagingResampleVertical_8bpc`,
//! `ImagingResampleInner`) of Pillow 10.4 - 13.0, and the premultiplied-alpha
//! round trip of `PIL.Image.Image.resize` for `RGBA` / `LA` (reference-spec §5).
//! Integer sums are associative, so the loop order here is free; the f64
//! coefficient arithmetic is not, and keeps Pillow's operation order (no FMA).

use crate::config::PillowCompat;

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

/// Rows handled together by the horizontal pass: their pixels are transposed
/// into columns of `ROWS * C` bytes so that one output column is a weighted sum
/// of contiguous input columns (the same shape as the vertical pass).
const ROWS: usize = 16;
/// Accumulators of one output column: up to `ROWS * 4` channels.
const MAX_LANES: usize = ROWS * 4;

/// Horizontal pass over rows `[row0, row0 + out_rows)` of `src` (`width` px, `C` channels).
#[inline(always)]
fn horizontal_impl<const C: usize>(
    src: &[u8],
    width: usize,
    row0: usize,
    out_rows: usize,
    coeffs: &Coefficients,
) -> Vec<u8> {
    let lanes = ROWS * C;
    let out_w = coeffs.bounds.len();
    let out_row_len = out_w * C;
    let in_row_len = width * C;
    let mut out = vec![0u8; out_row_len * out_rows];
    let mut columns = vec![0u8; width * lanes];
    for band in (0..out_rows).step_by(ROWS) {
        let rows = ROWS.min(out_rows - band);
        // Transpose the band: columns[x][r * C + c] = src[row0 + band + r][x][c].
        for r in 0..rows {
            let y = row0 + band + r;
            let row = &src[y * in_row_len..(y + 1) * in_row_len];
            for (col, px) in columns.chunks_exact_mut(lanes).zip(row.chunks_exact(C)) {
                col[r * C..(r + 1) * C].copy_from_slice(px);
            }
        }
        let mut acc = [0i32; MAX_LANES];
        let acc = &mut acc[..lanes];
        for xx in 0..out_w {
            let (start, k) = coeffs.taps(xx);
            acc.fill(ROUND_BIAS);
            for (t, &kv) in k.iter().enumerate() {
                let col = &columns[(start + t) * lanes..(start + t + 1) * lanes];
                for (a, &p) in acc.iter_mut().zip(col) {
                    *a += i32::from(p) * kv;
                }
            }
            for r in 0..rows {
                let o = (band + r) * out_row_len + xx * C;
                for c in 0..C {
                    out[o + c] = clip8(acc[r * C + c]);
                }
            }
        }
    }
    out
}

/// Vertical pass: every output row is a weighted sum of whole input rows
/// (`row_len` bytes each), so it vectorises over the row.
#[inline(always)]
fn vertical_impl(src: &[u8], row_len: usize, coeffs: &Coefficients, row_offset: usize) -> Vec<u8> {
    const BLOCK: usize = 1024;
    let out_h = coeffs.bounds.len();
    let mut out = vec![0u8; out_h * row_len];
    let mut acc = [0i32; BLOCK];
    for (yy, out_row) in out.chunks_exact_mut(row_len).enumerate() {
        let (start, k) = coeffs.taps(yy);
        let start = start - row_offset;
        for (b, out_block) in out_row.chunks_mut(BLOCK).enumerate() {
            let col = b * BLOCK;
            let acc = &mut acc[..out_block.len()];
            acc.fill(ROUND_BIAS);
            for (t, &kv) in k.iter().enumerate() {
                let row = &src[(start + t) * row_len + col..][..acc.len()];
                for (a, &p) in acc.iter_mut().zip(row) {
                    *a += i32::from(p) * kv;
                }
            }
            for (o, &a) in out_block.iter_mut().zip(acc.iter()) {
                *o = clip8(a);
            }
        }
    }
    out
}

/// Instantiates a pass once for the baseline target and once compiled for AVX2
/// (same source, so the same integer results), chosen at run time.
macro_rules! dispatch {
    ($name:ident, $avx2:ident, $imp:ident, <$($g:ident),*>, ($($arg:ident: $ty:ty),*)) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        fn $avx2<$(const $g: usize),*>($($arg: $ty),*) -> Vec<u8> {
            $imp::<$($g),*>($($arg),*)
        }

        fn $name<$(const $g: usize),*>($($arg: $ty),*) -> Vec<u8> {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2, checked just above.
                return unsafe { $avx2::<$($g),*>($($arg),*) };
            }
            $imp::<$($g),*>($($arg),*)
        }
    };
}

dispatch!(horizontal, horizontal_avx2, horizontal_impl, <C>,
    (src: &[u8], width: usize, row0: usize, out_rows: usize, coeffs: &Coefficients));
dispatch!(vertical, vertical_avx2, vertical_impl, <>,
    (src: &[u8], row_len: usize, coeffs: &Coefficients, row_offset: usize));

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
) -> Vec<u8> {
    let need_h = new_width != width;
    let need_v = new_height != height;
    match (need_h, need_v) {
        (false, false) => src.to_vec(),
        (true, false) => {
            horizontal::<C>(src, width, 0, height, &Coefficients::new(width, new_width))
        }
        (false, true) => vertical(src, width * C, &Coefficients::new(height, new_height), 0),
        (true, true) => {
            let ch = Coefficients::new(width, new_width);
            let cv = Coefficients::new(height, new_height);
            if vertical_first(compat, width, height, new_width, new_height) {
                let tmp = vertical(src, width * C, &cv, 0);
                horizontal::<C>(&tmp, width, 0, new_height, &ch)
            } else {
                // Only the input rows the vertical pass reads (Pillow's ybox crop).
                let first = cv.bounds[0].0;
                let (last_start, last_n) = cv.bounds[new_height - 1];
                let rows = last_start + last_n - first;
                let tmp = horizontal::<C>(src, width, first, rows, &ch);
                vertical(&tmp, new_width * C, &cv, first)
            }
        }
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
    assert!(width > 0 && height > 0 && new_width > 0 && new_height > 0);
    assert_eq!(src.len(), width * height * channels);
    match channels {
        1 => resize_c::<1>(src, width, height, new_width, new_height, compat),
        2 => resize_c::<2>(src, width, height, new_width, new_height, compat),
        3 => resize_c::<3>(src, width, height, new_width, new_height, compat),
        4 => resize_c::<4>(src, width, height, new_width, new_height, compat),
        _ => panic!("channels must be 1..=4, got {channels}"),
    }
}

/// Pillow `MULDIV255(a, b)`: `((t >> 8) + t) >> 8` with `t = a * b + 128`.
#[inline]
#[must_use]
#[allow(clippy::cast_possible_truncation)]
pub fn muldiv255(a: u8, b: u8) -> u8 {
    let t = u32::from(a) * u32::from(b) + 128;
    (((t >> 8) + t) >> 8) as u8
}

/// Premultiply the colour channels by the last (alpha) channel in place
/// (Pillow `RGBA -> RGBa`, `LA -> La`).
pub fn premultiply(pixels: &mut [u8], channels: usize) {
    for px in pixels.chunks_exact_mut(channels) {
        let (color, alpha) = px.split_at_mut(channels - 1);
        let a = alpha[0];
        for c in color {
            *c = muldiv255(*c, a);
        }
    }
}

/// Undo [`premultiply`] in place (Pillow `RGBa -> RGBA`, `La -> LA`): alpha 0
/// or 255 keeps the value, otherwise `min(255, 255 * c / a)` (integer division).
pub fn unpremultiply(pixels: &mut [u8], channels: usize) {
    for px in pixels.chunks_exact_mut(channels) {
        let (color, alpha) = px.split_at_mut(channels - 1);
        let a = u32::from(alpha[0]);
        if a != 0 && a != 255 {
            for c in color {
                #[allow(clippy::cast_possible_truncation)]
                let v = ((255 * u32::from(*c)) / a).min(255) as u8;
                *c = v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn premultiply_round_trip_matches_pillow_rules() {
        assert_eq!(muldiv255(255, 128), 128);
        assert_eq!(muldiv255(200, 37), 29);
        let mut px = [200u8, 100, 50, 37, 9, 9, 9, 0, 9, 9, 9, 255];
        premultiply(&mut px, 4);
        assert_eq!(px, [29, 15, 7, 37, 0, 0, 0, 0, 9, 9, 9, 255]);
        unpremultiply(&mut px, 4);
        assert_eq!(px, [199, 103, 48, 37, 0, 0, 0, 0, 9, 9, 9, 255]);
    }

    #[test]
    fn constant_image_stays_constant() {
        let src = vec![77u8; 40 * 30 * 3];
        let out = resize_bicubic(&src, 40, 30, 3, 17, 11, PillowCompat::V13);
        assert!(out.iter().all(|&v| v == 77));
    }

    #[test]
    fn pass_order_rule() {
        assert!(vertical_first(PillowCompat::V13, 1242, 2688, 1223, 2646));
        assert!(!vertical_first(PillowCompat::V13, 1244, 2629, 1241, 2623));
        assert!(!vertical_first(PillowCompat::V12, 1242, 2688, 1223, 2646));
    }
}
