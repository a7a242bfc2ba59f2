//! Patch grouping and layout: which patches the AVX2 kernel takes, and the
//! table path, grouped in L1-sized scratch buffers, for the rest.

#[cfg(target_arch = "x86_64")]
use super::avx2;
use super::stream::{stream_copy, stream_fence};
use super::{OutputValue, ValueTable};
use crate::image::ImageView;
use crate::par::for_each_chunk;
use crate::simd::{Execution, SimdPath};

/// Bytes of output a group of patches is assembled in: about the L1 data cache,
/// so the scattered stores of one patch row stay in L1.
const GROUP_BYTES: usize = 32 * 1024;

/// [`super::pad_normalize_patchify`] for `C` bytes per pixel. In each band of
/// patches, the leading patches [`direct_patches`] can take go to the AVX2
/// kernel; the rest are done in groups of a few consecutive patches. The pixel
/// rows of a group are read in order (sequential reads keep the hardware
/// prefetcher busy), the group is assembled in a scratch buffer that stays in
/// the L1 cache, and is then streamed to `out`, which is written once,
/// sequentially, without its lines first being read into the cache.
pub(super) fn patchify_c<const C: usize, T: OutputValue>(
    src: &ImageView<'_>,
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
/// tables with a formula ([`NormalizeLut::has_formula`](super::NormalizeLut::has_formula)), on [`SimdPath::Avx2`]
/// or [`SimdPath::Avx512`] where this CPU supports it, with patch size
/// [`avx2::PATCH`], to a band whose rows are all inside the image, written to a
/// 16-byte aligned `out_band`. It takes the patches inside the image whose reads
/// (which run up to [`avx2::over_read`]`(C)` bytes past a patch row) stay
/// inside `src.data`.
fn direct_patches<const C: usize, T: OutputValue>(
    src: &ImageView<'_>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::normalize::{pad_normalize_patchify, NormalizeLut};
    use crate::test_util::noise;

    #[test]
    fn patch_layout_and_padding() {
        // 3x2 RGB image, patch 2 -> padded 4x2, grid 1x2.
        let data: Vec<u8> = (0..18).collect();
        let src = ImageView::new(&data, 3, 2, 3).unwrap();
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

    /// `out[n, c, py, px]` straight from the definition.
    fn naive<T: Copy>(
        src: &ImageView<'_>,
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
                let src = ImageView::new(&data, width, height, channels).unwrap();
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
        let src = ImageView::new(&data, width, height, 3).unwrap();
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
}
