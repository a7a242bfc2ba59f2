//! Pad, normalise and patchify in one pass over the 8-bit pixels.
//!
//! Normalisation reproduces `media_utils.py: normalize` of the checkpoints, as
//! `kimi_k25_vision_processing.py: KimiK25VisionProcessor.preprocess` calls it
//! (float64 `mean` and `1.0 / std`), through a per-channel 256-entry table;
//! patch layout reproduces `media_utils.py: navit_patchify`. Padding pixels are
//! zeros before normalisation (`np.pad` in `KimiK25VisionProcessor.preprocess`),
//! so they read `lut[c][0]`.
//!
//! Two implementations write the same bits. The portable one looks every value
//! up in the table. On x86-64 with AVX2 + FMA, when every table value is
//! reproduced by a short float32 formula (checked on all 256 bytes when the
//! table is built; true for the K2.5 and K3 presets) and the patch size is
//! MoonViT's 14, a vector kernel computes the values and streams whole patches
//! to the output.
//!
//! Laid out by job: this file holds the tables and the entry point;
//! `patchify.rs` lays out the patches (and picks the patches the kernel takes),
//! `avx2.rs` is the vector kernel and `stream.rs` the non-temporal stores.

#[cfg(target_arch = "x86_64")]
mod avx2;
mod patchify;
mod stream;

use crate::image::ImageView;
use crate::simd::Execution;

/// Per-channel lookup table `u8 -> f32` with the reference's three roundings:
/// `a = f32(v / 255.0)`, `b = f32(f64(a) - mean)`, `y = f32(f64(b) * (1.0 / std))`.
#[derive(Debug, Clone, PartialEq)]
pub struct NormalizeLut {
    table: [[f32; 256]; 3],
    /// The formula that gives every entry of every channel, when there is one.
    affine: Option<[Affine; 3]>,
}

/// `1 / 65280 = 1 / (255 * 256)` rounded to float32.
const INV_65280: f32 = 1.0 / 65280.0;

/// A channel's values as `fma(v / 255, scale, offset)` in float32, where
/// `v / 255` is the quotient rounded once ([`div255`]). Used only when it gives
/// every one of the channel's 256 table entries, bit for bit.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Affine {
    scale: f32,
    offset: f32,
}

/// `v / 255` for a byte `v`, as the AVX2 kernel computes it: as the sum of
/// `v / 256` (exact) and `v / 65280`, fused, so rounded once. For all 256 bytes
/// this is `v / 255` correctly rounded ([`Affine::fit`] checks the whole formula
/// against the table anyway).
fn div255(v: f32) -> f32 {
    v.mul_add(INV_65280, v * (1.0 / 256.0))
}

impl Affine {
    /// The value of byte `v`, with the float32 operations of the AVX2 kernel.
    fn value(self, v: u8) -> f32 {
        div255(f32::from(v)).mul_add(self.scale, self.offset)
    }

    /// `scale = 1 / std`, `offset = -mean / std` (rounded to float32), when that
    /// formula reproduces all of `row`. Values that would be subnormal are
    /// refused, so that a thread's flush-to-zero mode cannot change the result.
    #[allow(clippy::cast_possible_truncation)]
    fn fit(mean: f64, std: f64, row: &[f32; 256]) -> Option<Self> {
        let form = Self {
            scale: (1.0 / std) as f32,
            offset: (-mean / std) as f32,
        };
        let normal = |x: f32| x == 0.0 || x.is_normal();
        let exact = (0..=255u8).all(|v| {
            let (y, want) = (form.value(v), row[usize::from(v)]);
            y.to_bits() == want.to_bits() && normal(want)
        });
        (exact && normal(form.scale) && normal(form.offset)).then_some(form)
    }
}

impl NormalizeLut {
    /// Build the table from `image_mean` / `image_std` (float64, `[0, 1]` units).
    #[must_use]
    #[allow(clippy::cast_possible_truncation)]
    pub fn new(image_mean: [f64; 3], image_std: [f64; 3]) -> Self {
        let mut table = [[0f32; 256]; 3];
        for (c, row) in table.iter_mut().enumerate() {
            let std_inv = 1.0 / image_std[c];
            for (v, out) in row.iter_mut().enumerate() {
                let a = (f64::from(v as u8) / 255.0) as f32;
                let b = (f64::from(a) - image_mean[c]) as f32;
                *out = (f64::from(b) * std_inv) as f32;
            }
        }
        let fit = |c: usize| Affine::fit(image_mean[c], image_std[c], &table[c]);
        let affine = match (fit(0), fit(1), fit(2)) {
            (Some(r), Some(g), Some(b)) => Some([r, g, b]),
            _ => None,
        };
        Self { table, affine }
    }

    /// The normalised value of `v` in channel `c` (0 = R, 1 = G, 2 = B).
    #[must_use]
    pub fn get(&self, c: usize, v: u8) -> f32 {
        self.table[c][usize::from(v)]
    }

    /// Whether one float32 formula gives all 256 values of every channel, so
    /// that the AVX2 kernel can compute float32 output instead of looking it up.
    #[must_use]
    pub fn has_formula(&self) -> bool {
        self.affine.is_some()
    }
}

/// The values one call writes, per channel and `u8` input: float32, or the bits
/// of bfloat16 / float16 rounded to nearest-even from the exact float32 value.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueTable<T> {
    table: [[T; 256]; 3],
    /// Set for float32 tables whose values follow one formula ([`NormalizeLut::has_formula`]).
    affine: Option<[Affine; 3]>,
}

impl ValueTable<f32> {
    /// The float32 values of `lut` (the reference's output).
    #[must_use]
    pub fn float32(lut: &NormalizeLut) -> Self {
        Self {
            table: lut.table,
            affine: lut.affine,
        }
    }
}

impl ValueTable<u16> {
    /// bfloat16 bits of `lut`'s float32 values (`half::bf16::from_f32`, round to nearest even).
    #[must_use]
    pub fn bfloat16(lut: &NormalizeLut) -> Self {
        Self {
            table: lut
                .table
                .map(|row| row.map(|v| half::bf16::from_f32(v).to_bits())),
            affine: None,
        }
    }

    /// float16 bits of `lut`'s float32 values (`half::f16::from_f32`, round to nearest even).
    #[must_use]
    pub fn float16(lut: &NormalizeLut) -> Self {
        Self {
            table: lut
                .table
                .map(|row| row.map(|v| half::f16::from_f32(v).to_bits())),
            affine: None,
        }
    }
}

/// An element type of `pixel_values`: `f32`, or `u16` holding bfloat16 /
/// float16 bits.
pub trait OutputValue: Copy + Send + Sync + Default + sealed::Sealed {
    /// `out` as float32 values when the element type is `f32` (what the AVX2
    /// kernel writes), else `None`.
    fn as_float32(out: &mut [Self]) -> Option<&mut [f32]>;
}

impl OutputValue for f32 {
    fn as_float32(out: &mut [Self]) -> Option<&mut [f32]> {
        Some(out)
    }
}

impl OutputValue for u16 {
    fn as_float32(_: &mut [Self]) -> Option<&mut [f32]> {
        None
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for u16 {}
}

/// Write `(padded_h / ps) * (padded_w / ps)` patches of `3 * ps * ps` values each
/// into `out`, row-major over the patch grid, channel-first inside a patch:
/// `out[n, c, py, px] = table_c(pixel(i * ps + py, j * ps + px))` with
/// `n = i * gw + j`; pixels outside `width x height` are 0 (bottom/right padding).
///
/// # Arguments
/// * `src` - the resized, unpadded image. With 3 or 4 channels (RGB, RGBA) R,
///   G, B are the first three bytes of a pixel; with 1 or 2 (L, LA) the grey
///   byte is replicated to R = G = B. A trailing alpha is ignored.
/// * `padded_width`, `padded_height` - multiples of `patch_size`, at least the image size.
/// * `patch_size` - patch edge in pixels.
/// * `table` - output value per channel and byte.
/// * `out` - exactly `gh * gw * 3 * ps * ps` values.
/// * `run` - the kernel path ([`SimdPath::Avx2`](crate::simd::SimdPath::Avx2) takes the vector kernel where
///   it applies, see the module docs; every path writes the same bits) and
///   whether the bands of patches are split over the current rayon pool.
///
/// # Panics
/// When `out` has the wrong length, the padded size is smaller than the image
/// (the pipeline computes both from the same plan), `src.data` is shorter than
/// `width * height * channels`, or `run.path` is not supported by this CPU.
pub fn pad_normalize_patchify<T: OutputValue>(
    src: &ImageView<'_>,
    padded_width: usize,
    padded_height: usize,
    patch_size: usize,
    table: &ValueTable<T>,
    out: &mut [T],
    run: Execution,
) {
    let (gh, gw) = (padded_height / patch_size, padded_width / patch_size);
    assert_eq!(out.len(), gh * gw * 3 * patch_size * patch_size);
    assert!(src.width <= padded_width && src.height <= padded_height);
    assert!(src.data.len() >= src.width * src.height * src.channels);
    assert!(
        run.path.is_supported(),
        "{} is not supported",
        run.path.name()
    );
    match src.channels {
        1 => patchify::patchify_c::<1, T>(src, gw, patch_size, table, out, run),
        2 => patchify::patchify_c::<2, T>(src, gw, patch_size, table, out, run),
        3 => patchify::patchify_c::<3, T>(src, gw, patch_size, table, out, run),
        4 => patchify::patchify_c::<4, T>(src, gw, patch_size, table, out, run),
        n => panic!("channels must be 1..=4, got {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lut_matches_reference_bits_for_half() {
        let lut = NormalizeLut::new([0.5; 3], [0.5; 3]);
        // Bits of `media_utils.py: normalize` for mean = std = 0.5.
        assert_eq!(lut.get(0, 0).to_bits(), 0xbf80_0000);
        assert_eq!(lut.get(0, 1).to_bits(), 0xbf7d_fdfe);
        assert_eq!(lut.get(1, 127).to_bits(), 0xbb80_8080);
        assert_eq!(lut.get(2, 128).to_bits(), 0x3b80_8100);
        assert_eq!(lut.get(2, 255).to_bits(), 0x3f80_0000);
    }
}

#[cfg(test)]
mod half_tests {
    use super::*;

    #[test]
    fn half_tables_round_the_float32_values() {
        let lut = NormalizeLut::new([0.5; 3], [0.5; 3]);
        let bf = ValueTable::bfloat16(&lut);
        let f16 = ValueTable::float16(&lut);
        // -1.0, 1.0 are exact in both; 1/255*2-1 rounds.
        assert_eq!(bf.table[0][0], 0xbf80);
        assert_eq!(bf.table[0][255], 0x3f80);
        assert_eq!(f16.table[0][0], 0xbc00);
        assert_eq!(f16.table[2][255], 0x3c00);
        // f32 -0.99215686 (0xbf7dfdfe) -> bf16 0xbf7e (round to nearest even).
        assert_eq!(bf.table[1][1], 0xbf7e);
    }
}
