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

/// Bytes of output a group of patches is assembled in: about the L1 data cache,
/// so the scattered stores of one patch row stay in L1.
const GROUP_BYTES: usize = 32 * 1024;

/// [`pad_normalize_patchify`] for `C` bytes per pixel. A band of patches is
/// done in groups of a few consecutive patches. The pixel rows of a group are
/// read in order (sequential reads keep the hardware prefetcher busy), the group
/// is assembled in a scratch buffer that stays in the L1 cache, and is then
/// streamed to `out`, which is written once, sequentially, without its lines
/// first being read into the cache.
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
    let group = (GROUP_BYTES / (patch_len * std::mem::size_of::<T>())).clamp(1, gw);
    let scratch = || vec![T::default(); group * patch_len];
    for_each_chunk(
        out,
        gw * patch_len,
        parallel,
        scratch,
        |scratch, i, out_band| {
            for (g, out_group) in out_band.chunks_mut(group * patch_len).enumerate() {
                let scratch = &mut scratch[..out_group.len()];
                for py in 0..ps {
                    let y = i * ps + py;
                    let row: &[u8] = if y < src.height {
                        &src.data[y * row_len..(y + 1) * row_len]
                    } else {
                        &[]
                    };
                    for (k, patch) in scratch.chunks_exact_mut(patch_len).enumerate() {
                        let j = g * group + k;
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
                stream_copy(out_group, scratch);
            }
            stream_fence();
        },
    );
}

/// `dst.copy_from_slice(src)` with non-temporal stores on x86-64: the output is
/// written once and not read again by this call, so its lines bypass the cache
/// and skip the read-for-ownership an ordinary store pays on a cold line. Call
/// [`stream_fence`] before the written values are handed to another thread.
fn stream_copy<T: Copy>(dst: &mut [T], src: &[T]) {
    assert_eq!(dst.len(), src.len());
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let bytes = std::mem::size_of_val(dst);
        let (d, s) = (dst.as_mut_ptr().cast::<u8>(), src.as_ptr().cast::<u8>());
        let head = d.align_offset(16).min(bytes);
        let end = head + (bytes - head) / 16 * 16;
        // SAFETY: `dst` and `src` are `bytes` long and do not overlap (one is
        // borrowed mutably); every access below stays inside `[0, bytes)`, and
        // the 16-byte stores land on 16-aligned addresses (SSE2 is x86-64 baseline).
        unsafe {
            std::ptr::copy_nonoverlapping(s, d, head);
            for k in (head..end).step_by(16) {
                let v = _mm_loadu_si128(s.add(k).cast::<__m128i>());
                _mm_stream_si128(d.add(k).cast::<__m128i>(), v);
            }
            std::ptr::copy_nonoverlapping(s.add(end), d.add(end), bytes - end);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

/// Order the non-temporal stores of [`stream_copy`] before any later store
/// (a rayon job's completion, or the return to the caller).
fn stream_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no preconditions (SSE is part of the x86-64 baseline).
    unsafe {
        std::arch::x86_64::_mm_sfence();
    }
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
mod layout_tests {
    use super::*;

    /// `out[n, c, py, px]` straight from the definition.
    fn naive<T: Copy>(
        src: &PatchSource<'_>,
        pw: usize,
        ph: usize,
        ps: usize,
        table: &ValueTable<T>,
    ) -> Vec<T> {
        let (gh, gw) = (ph / ps, pw / ps);
        let mut out = Vec::with_capacity(gh * gw * 3 * ps * ps);
        for n in 0..gh * gw {
            for c in 0..3 {
                for py in 0..ps {
                    for px in 0..ps {
                        let (y, x) = ((n / gw) * ps + py, (n % gw) * ps + px);
                        let v = if y < src.height && x < src.width {
                            let pixel = &src.data[(y * src.width + x) * src.channels..];
                            pixel[if src.channels >= 3 { c } else { 0 }]
                        } else {
                            0
                        };
                        out.push(table.table[c][usize::from(v)]);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn every_shape_matches_the_definition() {
        let lut = NormalizeLut::new([0.48, 0.46, 0.41], [0.27, 0.26, 0.28]);
        let (f32s, halves) = (ValueTable::float32(&lut), ValueTable::bfloat16(&lut));
        let mut seed = 7u32;
        // Widths cross several groups of patches (13 patches of 14 at float32).
        for (width, height, ps) in [
            (1, 1, 1),
            (5, 3, 2),
            (29, 15, 14),
            (400, 30, 14),
            (333, 17, 16),
            (90, 9, 3),
        ] {
            for channels in 1..=4 {
                let data: Vec<u8> = (0..width * height * channels)
                    .map(|_| {
                        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                        (seed >> 16) as u8
                    })
                    .collect();
                let src = PatchSource {
                    data: &data,
                    width,
                    height,
                    channels,
                };
                let (pw, ph) = (width.div_ceil(ps) * ps + ps, height.div_ceil(ps) * ps);
                for parallel in [false, true] {
                    let mut out = vec![0f32; pw * ph * 3];
                    pad_normalize_patchify(&src, pw, ph, ps, &f32s, &mut out, parallel);
                    assert_eq!(
                        out,
                        naive(&src, pw, ph, ps, &f32s),
                        "{width}x{height}x{channels} ps {ps}"
                    );
                    let mut out = vec![0u16; pw * ph * 3];
                    pad_normalize_patchify(&src, pw, ph, ps, &halves, &mut out, parallel);
                    assert_eq!(
                        out,
                        naive(&src, pw, ph, ps, &halves),
                        "{width}x{height}x{channels} ps {ps}"
                    );
                }
            }
        }
    }

    #[test]
    fn stream_copy_at_every_alignment() {
        let src: Vec<u16> = (0..200).collect();
        for start in 0..9 {
            for len in [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 150] {
                let mut dst = vec![0u16; 200];
                stream_copy(&mut dst[start..start + len], &src[..len]);
                stream_fence();
                assert_eq!(&dst[start..start + len], &src[..len]);
                assert!(dst[..start]
                    .iter()
                    .chain(&dst[start + len..])
                    .all(|&v| v == 0));
            }
        }
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
