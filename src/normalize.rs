//! Pad, normalise and patchify in one pass over the 8-bit pixels.
//!
//! Normalisation reproduces `media_utils.normalize` of the checkpoints
//! (reference-spec §3.4) through a per-channel 256-entry table; patch layout
//! reproduces `media_utils.navit_patchify` (§3.5). Padding pixels are zeros
//! before normalisation, so they read `lut[c][0]`.
//!
//! Two implementations write the same bits. The portable one looks every value
//! up in the table. On x86-64 with AVX2 + FMA, when every table value is
//! reproduced by a short float32 formula (checked on all 256 bytes when the
//! table is built; true for the K2.5 and K3 presets) and the patch size is
//! MoonViT's 14, a vector kernel computes the values and streams whole patches
//! to the output.

use crate::par::for_each_chunk;
use crate::simd::{Execution, SimdPath};

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
/// * `run` - the kernel path ([`SimdPath::Avx2`] takes the vector kernel where
///   it applies, see the module docs; every path writes the same bits) and
///   whether the bands of patches are split over the current rayon pool.
///
/// # Panics
/// When `out` has the wrong length, the padded size is smaller than the image
/// (the pipeline computes both from the same plan), `src.data` is shorter than
/// `width * height * channels`, or `run.path` is not supported by this CPU.
pub fn pad_normalize_patchify<T: OutputValue>(
    src: &PatchSource<'_>,
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
        1 => patchify_c::<1, T>(src, gw, patch_size, table, out, run),
        2 => patchify_c::<2, T>(src, gw, patch_size, table, out, run),
        3 => patchify_c::<3, T>(src, gw, patch_size, table, out, run),
        4 => patchify_c::<4, T>(src, gw, patch_size, table, out, run),
        n => panic!("channels must be 1..=4, got {n}"),
    }
}

/// Bytes of output a group of patches is assembled in: about the L1 data cache,
/// so the scattered stores of one patch row stay in L1.
const GROUP_BYTES: usize = 32 * 1024;

/// [`pad_normalize_patchify`] for `C` bytes per pixel. In each band of
/// patches, the leading patches [`direct_patches`] can take go to the AVX2
/// kernel; the rest are done in groups of a few consecutive patches. The pixel
/// rows of a group are read in order (sequential reads keep the hardware
/// prefetcher busy), the group is assembled in a scratch buffer that stays in
/// the L1 cache, and is then streamed to `out`, which is written once,
/// sequentially, without its lines first being read into the cache.
fn patchify_c<const C: usize, T: OutputValue>(
    src: &PatchSource<'_>,
    gw: usize,
    ps: usize,
    table: &ValueTable<T>,
    out: &mut [T],
    run: Execution,
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
        run.parallel,
        scratch,
        |scratch, i, out_band| {
            let done = direct_patches::<C, T>(src, i, ps, table, out_band, run.path);
            let rest = &mut out_band[done * patch_len..];
            for (g, out_group) in rest.chunks_mut(group * patch_len).enumerate() {
                let scratch = &mut scratch[..out_group.len()];
                for py in 0..ps {
                    let y = i * ps + py;
                    let row: &[u8] = if y < src.height {
                        &src.data[y * row_len..(y + 1) * row_len]
                    } else {
                        &[]
                    };
                    for (k, patch) in scratch.chunks_exact_mut(patch_len).enumerate() {
                        let j = done + g * group + k;
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

/// Write the leading patches of band `i` that the AVX2 kernel can take, and
/// return how many it wrote (0 when it does not apply). It applies to float32
/// tables with a formula ([`NormalizeLut::has_formula`]), on [`SimdPath::Avx2`]
/// or [`SimdPath::Avx512`] where this CPU supports it, with patch size
/// [`avx2::PATCH`], to a band whose rows are all inside the image, written to a
/// 16-byte aligned `out_band`. It takes the patches inside the image whose reads
/// (which run up to [`avx2::over_read`]`(C)` bytes past a patch row) stay
/// inside `src.data`.
fn direct_patches<const C: usize, T: OutputValue>(
    src: &PatchSource<'_>,
    i: usize,
    ps: usize,
    table: &ValueTable<T>,
    out_band: &mut [T],
    path: SimdPath,
) -> usize {
    #[cfg(target_arch = "x86_64")]
    if let (Some(affine), Some(out), SimdPath::Avx2 | SimdPath::Avx512, avx2::PATCH) =
        (&table.affine, T::as_float32(out_band), path, ps)
    {
        let row_len = src.width * C;
        let last_row = (i * ps + ps - 1) * row_len;
        let reach = ps * C + avx2::over_read(C);
        if !path.is_supported()
            || (i + 1) * ps > src.height
            || out.as_ptr().align_offset(16) != 0
            || src.data.len() < last_row + reach
        {
            return 0;
        }
        // Patch j reads up to `last_row + j * ps * C + reach` in its last row.
        let n = (src.width / ps).min((src.data.len() - last_row - reach) / (ps * C) + 1);
        // SAFETY: this CPU has AVX2 + FMA (`is_supported` above: both paths
        // require them); `out` is 16-byte aligned and holds a band of
        // `gw >= width / ps >= n` patches; every read of patches `0..n` (rows
        // `i * ps..(i + 1) * ps`, all inside the image) ends at or before
        // `src.data.len()`, checked above.
        unsafe { avx2::patches::<C>(src.data, row_len, i * ps, n, affine, out.as_mut_ptr()) };
        return n;
    }
    let _ = (src, i, ps, table, out_band, path);
    0
}

/// The AVX2 + FMA kernel: float32 values computed by [`Affine::value`]'s
/// operations, eight pixels of one channel at a time, and whole patches
/// written with 16-byte non-temporal stores.
#[cfg(target_arch = "x86_64")]
mod avx2 {
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
        pad_normalize_patchify(
            &src,
            4,
            2,
            2,
            &ValueTable::float32(&lut),
            &mut out,
            Execution {
                path: SimdPath::Scalar,
                parallel: false,
            },
        );
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
    use crate::test_util::noise;

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

    /// Every path this CPU supports, each serially and in parallel.
    fn runs() -> Vec<Execution> {
        SimdPath::ALL
            .into_iter()
            .filter(|path| path.is_supported())
            .flat_map(|path| [false, true].map(|parallel| Execution { path, parallel }))
            .collect()
    }

    #[test]
    fn every_shape_and_path_matches_the_definition() {
        // One table the float32 formula reproduces (the presets' 0.5 / 0.5), so
        // the AVX2 kernel takes its full patches, and one it does not.
        let formula = NormalizeLut::new([0.5; 3], [0.5; 3]);
        let lookup = NormalizeLut::new([0.48, 0.46, 0.41], [0.27, 0.26, 0.28]);
        assert!(formula.has_formula() && !lookup.has_formula());
        let mut seed = 7u64;
        // Widths cross several groups of patches (13 patches of 14 at float32);
        // multiples of 14 end the last patch row at the end of the buffer.
        for (width, height, ps) in [
            (1, 1, 1),
            (5, 3, 2),
            (13, 14, 14),
            (14, 14, 14),
            (28, 28, 14),
            (29, 15, 14),
            (42, 29, 14),
            (400, 30, 14),
            (333, 17, 16),
            (90, 9, 3),
        ] {
            for channels in 1..=4 {
                seed += 1;
                let data = noise(width * height * channels, seed);
                let src = PatchSource {
                    data: &data,
                    width,
                    height,
                    channels,
                };
                let (pw, ph) = (width.div_ceil(ps) * ps + ps, height.div_ceil(ps) * ps);
                let n = pw * ph * 3;
                for lut in [&formula, &lookup] {
                    let (f32s, halves) = (ValueTable::float32(lut), ValueTable::bfloat16(lut));
                    let (want, want_halves) = (
                        naive(&src, pw, ph, ps, &f32s),
                        naive(&src, pw, ph, ps, &halves),
                    );
                    for run in runs() {
                        let case = format!("{width}x{height}x{channels} ps {ps} {run:?}");
                        // 16-byte aligned output, then one float off it, where the
                        // AVX2 kernel steps aside.
                        for offset in [0, 1] {
                            let mut out = vec![0f32; n + 4];
                            let start = out.as_ptr().align_offset(16) + offset;
                            let dst = &mut out[start..start + n];
                            pad_normalize_patchify(&src, pw, ph, ps, &f32s, dst, run);
                            assert!(dst == want.as_slice(), "{case} offset {offset}");
                        }
                        let mut out = vec![0u16; n];
                        pad_normalize_patchify(&src, pw, ph, ps, &halves, &mut out, run);
                        assert_eq!(out, want_halves, "{case}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_avx2_kernel_takes_the_full_patches_and_gives_every_table_value() {
        let lut = NormalizeLut::new([0.5; 3], [0.5; 3]);
        let table = ValueTable::float32(&lut);
        // 280 x 28 RGB: pixel x of row y is (x + y, x + 85, x + 170) mod 256, so
        // every byte value reaches every channel.
        let (width, height) = (280, 28);
        let data: Vec<u8> = (0..height)
            .flat_map(|y| (0..width).flat_map(move |x| [x + y, x + 85, x + 170]))
            .map(|v| (v % 256) as u8)
            .collect();
        let src = PatchSource {
            data: &data,
            width,
            height,
            channels: 3,
        };
        let band = 20 * 3 * 196;
        let mut out = vec![0f32; 2 * band + 3];
        let start = out.as_ptr().align_offset(16);
        let (top, bottom) = out[start..start + 2 * band].split_at_mut(band);
        let avx2 = SimdPath::Avx2;
        let taken = |n: usize| if avx2.is_supported() { n } else { 0 };
        // Band 0 reads rows 0..14 only, so all 20 patches fit; band 1 ends at
        // the end of the buffer, where the last patch would read past it.
        assert_eq!(
            direct_patches::<3, f32>(&src, 0, 14, &table, top, avx2),
            taken(20)
        );
        assert_eq!(
            direct_patches::<3, f32>(&src, 1, 14, &table, bottom, avx2),
            taken(19)
        );
        let scalar = SimdPath::Scalar;
        assert_eq!(
            direct_patches::<3, f32>(&src, 0, 14, &table, top, scalar),
            0
        );
        for run in runs() {
            let mut got = vec![0f32; 2 * band];
            pad_normalize_patchify(&src, width, height, 14, &table, &mut got, run);
            let want = naive(&src, width, height, 14, &table);
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{run:?}"
            );
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
