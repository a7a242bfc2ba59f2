//! Pad, normalise and patchify in one pass over the 8-bit pixels.
//!
//! Normalisation reproduces `media_utils.normalize` of the checkpoints
//! (reference-spec §3.4) through a per-channel 256-entry table; patch layout
//! reproduces `media_utils.navit_patchify` (§3.5). Padding pixels are zeros
//! before normalisation, so they read `lut[c][0]`.

use crate::par::for_each_chunk;

/// Per-channel lookup table `u8 -> f32` with the reference's three roundings:
/// `a = f32(v / 255.0)`, `b = f32(f64(a) - mean)`, `y = f32(f64(b) * (1.0 / std))`.
#[derive(Debug, Clone, PartialEq)]
pub struct NormalizeLut {
    table: [[f32; 256]; 3],
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
        Self { table }
    }

    /// The normalised value of `v` in channel `c` (0 = R, 1 = G, 2 = B).
    #[must_use]
    pub fn get(&self, c: usize, v: u8) -> f32 {
        self.table[c][usize::from(v)]
    }
}

/// The values one call writes, per channel and `u8` input: float32, or the bits
/// of bfloat16 / float16 rounded to nearest-even from the exact float32 value.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueTable<T> {
    table: [[T; 256]; 3],
}

impl ValueTable<f32> {
    /// The float32 values of `lut` (the reference's output).
    #[must_use]
    pub fn float32(lut: &NormalizeLut) -> Self {
        Self { table: lut.table }
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
        }
    }

    /// float16 bits of `lut`'s float32 values (`half::f16::from_f32`, round to nearest even).
    #[must_use]
    pub fn float16(lut: &NormalizeLut) -> Self {
        Self {
            table: lut
                .table
                .map(|row| row.map(|v| half::f16::from_f32(v).to_bits())),
        }
    }
}

/// An 8-bit interleaved image to patchify: `channels` bytes per pixel. With 3
/// or 4 channels (RGB, RGBA) R, G, B are the first three bytes; with 1 or 2 (L,
/// LA) the grey byte is replicated to R = G = B. A trailing alpha is ignored.
#[derive(Debug, Clone, Copy)]
pub struct PatchSource<'a> {
    /// `height * width * channels` bytes.
    pub data: &'a [u8],
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// Bytes per pixel (1 to 4).
    pub channels: usize,
}

/// Write `(padded_h / ps) * (padded_w / ps)` patches of `3 * ps * ps` values each
/// into `out`, row-major over the patch grid, channel-first inside a patch:
/// `out[n, c, py, px] = table_c(pixel(i * ps + py, j * ps + px))` with
/// `n = i * gw + j`; pixels outside `width x height` are 0 (bottom/right padding).
///
/// # Arguments
/// * `src` - the resized, unpadded image.
/// * `padded_width`, `padded_height` - multiples of `patch_size`, at least the image size.
/// * `patch_size` - patch edge in pixels.
/// * `table` - output value per channel and byte.
/// * `out` - exactly `gh * gw * 3 * ps * ps` values.
/// * `parallel` - split the bands of patches over the current rayon pool.
///
/// # Panics
/// When `out` has the wrong length or the padded size is smaller than the image
/// (the pipeline computes both from the same plan).
pub fn pad_normalize_patchify<T: Copy + Send + Sync + Default>(
    src: &PatchSource<'_>,
    padded_width: usize,
    padded_height: usize,
    patch_size: usize,
    table: &ValueTable<T>,
    out: &mut [T],
    parallel: bool,
) {
    let (gh, gw) = (padded_height / patch_size, padded_width / patch_size);
    assert_eq!(out.len(), gh * gw * 3 * patch_size * patch_size);
    assert!(src.width <= padded_width && src.height <= padded_height);
    match src.channels {
        1 => patchify_c::<1, T>(src, gw, patch_size, table, out, parallel),
        2 => patchify_c::<2, T>(src, gw, patch_size, table, out, parallel),
        3 => patchify_c::<3, T>(src, gw, patch_size, table, out, parallel),
        4 => patchify_c::<4, T>(src, gw, patch_size, table, out, parallel),
        n => panic!("channels must be 1..=4, got {n}"),
    }
}

/// [`pad_normalize_patchify`] for `C` bytes per pixel. The pixel rows of one
/// band of patches are read in order (sequential reads keep the hardware
/// prefetcher busy) and the band is assembled in a cache-resident scratch
/// buffer, then copied out in one sequential `memcpy` (scattered stores straight
/// to uncached output lines would stall on read-for-ownership misses).
fn patchify_c<const C: usize, T: Copy + Send + Sync + Default>(
    src: &PatchSource<'_>,
    gw: usize,
    ps: usize,
    table: &ValueTable<T>,
    out: &mut [T],
    parallel: bool,
) {
    let plane = ps * ps;
    let patch_len = 3 * plane;
    if out.is_empty() {
        return;
    }
    let row_len = src.width * C;
    let [t0, t1, t2] = &table.table;
    let pad = [t0[0], t1[0], t2[0]];
    let band_len = gw * patch_len;
    let scratch = || vec![T::default(); band_len];
    for_each_chunk(out, band_len, parallel, scratch, |band, i, out_band| {
        for py in 0..ps {
            let y = i * ps + py;
            let row: &[u8] = if y < src.height {
                &src.data[y * row_len..(y + 1) * row_len]
            } else {
                &[]
            };
            for (j, patch) in band.chunks_exact_mut(patch_len).enumerate() {
                // Pixels of this patch row inside the image; the rest is padding.
                let pixels = row.get(j * ps * C..).unwrap_or(&[]);
                let pixels = &pixels[..pixels.len().min(ps * C)];
                let body = pixels.len() / C;
                let (p0, rest) = patch.split_at_mut(plane);
                let (p1, p2) = rest.split_at_mut(plane);
                let d0 = &mut p0[py * ps..(py + 1) * ps];
                let d1 = &mut p1[py * ps..(py + 1) * ps];
                let d2 = &mut p2[py * ps..(py + 1) * ps];
                if C >= 3 {
                    for (x, px) in pixels.chunks_exact(C).enumerate() {
                        d0[x] = t0[usize::from(px[0])];
                        d1[x] = t1[usize::from(px[1])];
                        d2[x] = t2[usize::from(px[2])];
                    }
                } else {
                    for (x, px) in pixels.chunks_exact(C).enumerate() {
                        let v = usize::from(px[0]);
                        d0[x] = t0[v];
                        d1[x] = t1[v];
                        d2[x] = t2[v];
                    }
                }
                d0[body..].fill(pad[0]);
                d1[body..].fill(pad[1]);
                d2[body..].fill(pad[2]);
            }
        }
        out_band.copy_from_slice(band);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lut_matches_reference_bits_for_half() {
        let lut = NormalizeLut::new([0.5; 3], [0.5; 3]);
        // reference-spec §3.4
        assert_eq!(lut.get(0, 0).to_bits(), 0xbf80_0000);
        assert_eq!(lut.get(0, 1).to_bits(), 0xbf7d_fdfe);
        assert_eq!(lut.get(1, 127).to_bits(), 0xbb80_8080);
        assert_eq!(lut.get(2, 128).to_bits(), 0x3b80_8100);
        assert_eq!(lut.get(2, 255).to_bits(), 0x3f80_0000);
    }

    #[test]
    fn patch_layout_and_padding() {
        // 3x2 RGB image, patch 2 -> padded 4x2, grid 1x2.
        let data: Vec<u8> = (0..18).collect();
        let src = PatchSource {
            data: &data,
            width: 3,
            height: 2,
            channels: 3,
        };
        let lut = NormalizeLut::new([0.0; 3], [1.0 / 255.0; 3]);
        let mut out = vec![0f32; 2 * 3 * 4];
        pad_normalize_patchify(&src, 4, 2, 2, &ValueTable::float32(&lut), &mut out, false);
        // With mean 0, std 1/255 the table is the identity.
        #[rustfmt::skip]
        let expected = [
            0., 3., 9., 12.,   1., 4., 10., 13.,   2., 5., 11., 14.,
            6., 0., 15., 0.,   7., 0., 16., 0.,    8., 0., 17., 0.,
        ];
        assert_eq!(out, expected);
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
