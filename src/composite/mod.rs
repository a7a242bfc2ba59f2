//! Alpha handling, bit-exact: compositing onto a background, and Pillow's
//! premultiplied-alpha round trip.
//!
//! [`composite`] reproduces the Kimi-K3 checkpoint's
//! `kimi_k3_vision_processing.py: fill_transparent_bg_with`: float32 arithmetic,
//! each operation rounded, then truncation to `u8`. [`premultiply`] /
//! [`unpremultiply`] reproduce the `RGBA -> RGBa -> RGBA` (and `LA`) conversions
//! Pillow's `PIL/Image.py: Image.resize` wraps around the resize of an image with
//! alpha (the `RGBa` / `La` conversions of `libImaging/Convert.c`).

use crate::config::Background;
use crate::simd::SimdPath;

#[cfg(target_arch = "x86_64")]
mod avx2;

/// Composite an image with a trailing alpha channel onto `bg`.
///
/// # Arguments
/// * `src` - `height * width * channels` bytes; `channels` is 2 (grey + alpha)
///   or 4 (RGB + alpha).
/// * `width` - width in pixels; the chessboard is anchored at pixel (0, 0).
///
/// Returns `height * width * (channels - 1)` bytes: the composited colour.
///
/// # Panics
/// When `channels` is not 2 or 4 or `width` is 0 (the pipeline checks both).
#[must_use]
pub fn composite(src: &[u8], width: usize, channels: usize, bg: &Background) -> Vec<u8> {
    let mut out = vec![0u8; src.len() / channels * (channels - 1)];
    composite_into(src, width, channels, bg, SimdPath::detect(), &mut out);
    out
}

/// [`composite`] into `out` (`height * width * (channels - 1)` bytes), with
/// the kernels of `path` (every path gives the same bytes).
///
/// # Panics
/// As [`composite`], and when this CPU does not support `path`
/// ([`SimdPath::is_supported`]).
pub fn composite_into(
    src: &[u8],
    width: usize,
    channels: usize,
    bg: &Background,
    path: SimdPath,
    out: &mut [u8],
) {
    let kernel = Compositor::new(width, channels, bg, path);
    for (y, (row, out_row)) in src
        .chunks_exact(width * channels)
        .zip(out.chunks_exact_mut(width * kernel.color))
        .enumerate()
    {
        kernel.row(y, row, out_row);
    }
}

/// The per-row work of [`composite`]: the alpha tables and the (at most two
/// distinct) background rows of one width. Also used by the resize, which
/// composites each band of its result as it finishes it.
pub(crate) struct Compositor {
    color: usize,
    square: usize,
    alpha: [f32; 256],
    rest: [f32; 256],
    bg_rows: [Vec<f32>; 2],
    path: SimdPath,
}

impl Compositor {
    /// The compositor of rows `width` px wide of `channels` (2 or 4) bytes,
    /// with the kernels of `path` (AVX2 where it has them; every path gives
    /// the same bytes).
    ///
    /// # Panics
    /// As [`composite_into`].
    #[allow(clippy::cast_possible_truncation)]
    pub(crate) fn new(width: usize, channels: usize, bg: &Background, path: SimdPath) -> Self {
        assert!(channels == 2 || channels == 4);
        assert!(width > 0);
        assert!(path.is_supported(), "{path:?} is not supported by this CPU");
        // alpha = f32(A) / 255 and 1 - alpha, exactly as the reference computes
        // them, for the 256 possible A.
        let alpha: [f32; 256] = std::array::from_fn(|a| f32::from(a as u8) / 255.0f32);
        let rest: [f32; 256] = alpha.map(|a| 1.0f32 - a);
        // Chessboard rows alternate, so there are at most two distinct ones.
        let square = bg.square_size as usize;
        let bg_rows: [Vec<f32>; 2] = std::array::from_fn(|parity| {
            (0..width)
                .map(|x| f32::from(bg.value_at(x, parity * square)))
                .collect()
        });
        Self {
            color: channels - 1,
            square,
            alpha,
            rest,
            bg_rows,
            path,
        }
    }

    /// Row `y` of the image (`row`, with alpha) composited into `out`.
    pub(crate) fn row(&self, y: usize, row: &[u8], out: &mut [u8]) {
        let back_row = &self.bg_rows[(y / self.square) % 2];
        let color = self.color;
        let done = self.vector_row(row, back_row, out);
        self.scalar_row(
            &row[done * (color + 1)..],
            &back_row[done..],
            &mut out[done * color..],
        );
    }

    /// The first pixels of a row by the path's vector kernel: how many (none
    /// on a path without one).
    #[allow(clippy::unused_self)]
    fn vector_row(&self, row: &[u8], back_row: &[f32], out: &mut [u8]) -> usize {
        #[cfg(target_arch = "x86_64")]
        if matches!(self.path, SimdPath::Avx2 | SimdPath::Avx512) {
            let out = &mut out[..back_row.len() * self.color];
            assert!(row.len() >= back_row.len() * (self.color + 1));
            // SAFETY: the path is supported (checked by `new`), so AVX2 is,
            // and the lengths are as the kernels require.
            return unsafe {
                if self.color == 1 {
                    avx2::la(row, back_row, out)
                } else {
                    avx2::rgba(row, back_row, out)
                }
            };
        }
        let _ = (row, back_row, out);
        0
    }

    /// Pixels composited one at a time (the reference's operations in order).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn scalar_row(&self, row: &[u8], back_row: &[f32], out: &mut [u8]) {
        let color = self.color;
        for ((px, o), &back) in row
            .chunks_exact(color + 1)
            .zip(out.chunks_exact_mut(color))
            .zip(back_row)
        {
            let a = usize::from(px[color]);
            let back = self.rest[a] * back;
            for (dst, &c) in o.iter_mut().zip(&px[..color]) {
                // `as u8` truncates toward zero and saturates, like numpy's
                // astype(uint8) on values in [0, 255 + tiny].
                *dst = (self.alpha[a] * f32::from(c) + back) as u8;
            }
        }
    }
}

/// [`composite`] of a whole view onto a config's background, checked.
///
/// Source: `kimi_k3_vision_processing.py: fill_transparent_bg_with`.
///
/// # Errors
/// `KimiError::NoBackground` when the config has no `transparent_bg_config`;
/// `KimiError::Channels` when the view has no alpha (1 or 3 channels).
pub fn composite_view(
    image: &crate::ImageView<'_>,
    cfg: &crate::MediaProcConfig,
) -> Result<Vec<u8>, crate::KimiError> {
    let bg = cfg.background().ok_or(crate::KimiError::NoBackground)?;
    if !matches!(image.channels(), 2 | 4) {
        return Err(crate::KimiError::Channels(image.channels()));
    }
    Ok(composite(
        image.data(),
        image.width(),
        image.channels(),
        &bg,
    ))
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
    use crate::config::BackgroundPattern;

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
    fn transparent_shows_background_opaque_keeps_color() {
        let bg = Background::kimi_k3();
        // Two pixels of a 9-px-wide row: x = 0 (white square), x = 8 (gray square).
        let mut src = vec![0u8; 9 * 4];
        src[8 * 4..].copy_from_slice(&[0, 0, 0, 0]);
        let out = composite(&src, 9, 4, &bg);
        assert_eq!(&out[..3], &[255, 255, 255]);
        assert_eq!(&out[8 * 3..], &[180, 180, 180]);
        let opaque = composite(&[10, 20, 30, 255], 1, 4, &bg);
        assert_eq!(opaque, vec![10, 20, 30]);
    }

    #[test]
    fn matches_the_per_pixel_formula_for_every_alpha() {
        for pattern in [BackgroundPattern::Chessboard, BackgroundPattern::Gray] {
            let bg = Background {
                pattern,
                square_size: 3,
                ..Background::kimi_k3()
            };
            let (w, h) = (16usize, 16usize);
            let src: Vec<u8> = (0..w * h * 4).map(|i| (i * 37 % 256) as u8).collect();
            let out = composite(&src, w, 4, &bg);
            for y in 0..h {
                for x in 0..w {
                    let px = &src[(y * w + x) * 4..][..4];
                    let alpha = f32::from(px[3]) / 255.0;
                    let back = (1.0 - alpha) * f32::from(bg.value_at(x, y));
                    for c in 0..3 {
                        let want = (alpha * f32::from(px[c]) + back) as u8;
                        assert_eq!(out[(y * w + x) * 3 + c], want, "{pattern:?} {x},{y},{c}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_path_gives_the_scalar_bytes_for_every_colour_alpha_and_background() {
        // Every (colour, alpha) pair in one row of 65,536 pixels (plus a tail
        // of 5 the vector kernels leave), over a chessboard of both grey values
        // and a plain background; LA and RGBA (its three channels differing).
        let pairs = 256 * 256 + 5;
        for bg in [
            Background::kimi_k3(),
            Background {
                pattern: BackgroundPattern::White,
                ..Background::kimi_k3()
            },
        ] {
            for channels in [2usize, 4] {
                let src: Vec<u8> = (0..pairs)
                    .flat_map(|i| {
                        let (c, a) = ((i % 256) as u8, ((i / 256) % 256) as u8);
                        let colour = [c, c.wrapping_mul(7), 255 - c];
                        colour[..channels - 1]
                            .iter()
                            .copied()
                            .chain([a])
                            .collect::<Vec<_>>()
                    })
                    .collect();
                let scalar = Compositor::new(pairs, channels, &bg, SimdPath::Scalar);
                for path in SimdPath::ALL.into_iter().filter(|p| p.is_supported()) {
                    let kernel = Compositor::new(pairs, channels, &bg, path);
                    // a row of each parity of the chessboard
                    for y in [0, bg.square_size as usize] {
                        let mut want = vec![0u8; pairs * (channels - 1)];
                        scalar.row(y, &src, &mut want);
                        let mut got = vec![0u8; want.len()];
                        kernel.row(y, &src, &mut got);
                        assert!(got == want, "{path:?}, {channels} channels, row {y}");
                    }
                }
            }
        }
    }

    #[test]
    fn half_alpha_is_float32_then_truncated() {
        let bg = Background {
            pattern: BackgroundPattern::White,
            ..Background::kimi_k3()
        };
        let alpha = 128.0f32 / 255.0;
        let expected = (alpha * 100.0 + (1.0 - alpha) * 255.0) as u8;
        assert_eq!(composite(&[100, 128], 1, 2, &bg), vec![expected]);
        assert_eq!(expected, 177);
    }
}
