//! Pillow's BICUBIC resize on 8-bit interleaved pixels, bit-exact: the public
//! entry points and the choice of kernel.
//!
//! Follows `libImaging/Resample.c` (`precompute_coeffs`, `normalize_coeffs_8bpc`,
//! `ImagingResampleHorizontal_8bpc`, `ImagingResampleVertical_8bpc`,
//! `ImagingResampleInner`, called from `ImagingResample`) of Pillow 10.4 - 13.0,
//! as reached from `PIL/Image.py: Image.resize`; the premultiplied-alpha round
//! trip of `Image.resize` for `RGBA` / `LA` is in [`crate::composite`].
//! Integer sums are associative, so the loop order here is free; the f64
//! coefficient arithmetic is not, and keeps Pillow's operation order (no FMA).
//!
//! Laid out by job: [`Coefficients`] (`coefficients.rs`) gives each axis's
//! fixed-point taps; `passes.rs` runs the horizontal and vertical passes band by
//! band (`transpose.rs` turns row bands into columns for the horizontal one,
//! `ahead.rs` fetches a large image's next tile while a tile is summed);
//! each pass reduces to one weighted-sum kernel, picked here by [`SimdPath`]
//! among `scalar.rs`, `sse41.rs`, `avx2.rs` and `avx512.rs` (with and without
//! VNNI), except on CPUs with AVX-512 VNNI and VBMI, where the horizontal pass
//! (and the vertical pass after it) runs on a layout of its own (`quads.rs`);
//! `view.rs` resizes a whole [`ImageView`] ([`resize_view`]).

#[cfg(target_arch = "x86_64")]
mod ahead;
mod coefficients;
mod pairs;
mod passes;
mod quads;
mod scalar;
mod transpose;
mod view;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod sse41;

use coefficients::Taps;
pub use coefficients::{bicubic_filter, Coefficients};
pub use view::{resize_view, resize_view_into, resized_len};

use crate::buffers::{try_buffer, AllocFailed};
use crate::composite::Compositor;
use crate::config::{Background, FillStage, PillowCompat};
use crate::image::{ImageView, RowSource};
use crate::simd::{Execution, SimdPath};
use passes::{resize_c, Fill};

/// Fixed-point precision of the 8-bit coefficients: `32 - 8 - 2`.
pub const PRECISION_BITS: u32 = 22;
/// Added to every weighted sum before the shift: rounds half up.
const ROUND_BIAS: i32 = 1 << (PRECISION_BITS - 1);

/// `out[l] = clip8(2^21 + sum_t k[t] * src[(start + t) * stride + l])` for every
/// lane `l` of `out` (one output row of the vertical pass, or one output column
/// of a transposed band of the horizontal pass), `k` being `taps.weights`, on
/// the kernel of `path`: [`scalar::weighted_sum`], [`sse41::weighted_sum`],
/// [`avx2::weighted_sum`] or [`avx512::weighted_sum`]. Every kernel gives the
/// same bytes.
fn weighted_sum(
    src: &[u8],
    stride: usize,
    start: usize,
    taps: Taps<'_>,
    out: &mut [u8],
    path: SimdPath,
) {
    let k = taps.weights;
    if k.is_empty() {
        out.fill(scalar::clip8(ROUND_BIAS));
        return;
    }
    assert!((start + k.len() - 1) * stride + out.len() <= src.len());
    match path {
        // SAFETY: as for AVX2 just below, with AVX-512 F + BW (and AVX2, which
        // `SimdPath::Avx512` also requires).
        #[cfg(target_arch = "x86_64")]
        SimdPath::Avx512 => unsafe { avx512::weighted_sum(src, stride, start, k, out) },
        // SAFETY: a `SimdPath::Avx2` reaches here only after `is_supported` (see
        // `resize_bicubic_with`), and the bound on `src` is asserted just above.
        #[cfg(target_arch = "x86_64")]
        SimdPath::Avx2 => unsafe { avx2::weighted_sum(src, stride, start, k, out) },
        // SAFETY: as for AVX2 just above, with SSE4.1.
        #[cfg(target_arch = "x86_64")]
        SimdPath::Sse41 => unsafe { sse41::weighted_sum(src, stride, start, k, out) },
        #[cfg(not(target_arch = "x86_64"))]
        SimdPath::Sse41 | SimdPath::Avx2 | SimdPath::Avx512 => {
            scalar::weighted_sum(src, stride, start, 0, k, out);
        }
        SimdPath::Scalar => scalar::weighted_sum(src, stride, start, 0, k, out),
    }
}

/// [`weighted_sum`] of every output `i` of `outputs` (`coeffs`' taps, the
/// first at row `start - offset` of `src`) into the `lanes`-byte chunk `i -
/// outputs.start` of `out`: the rows of a vertical pass, or the columns of a
/// tile of the horizontal one. On AVX-512 with VNNI (and weights with digit
/// groups, as Pillow's always have), one call of
/// [`avx512::weighted_sums_vnni`] for them all.
#[allow(clippy::too_many_arguments)]
fn weighted_sums(
    src: &[u8],
    stride: usize,
    coeffs: &Coefficients,
    outputs: std::ops::Range<usize>,
    offset: usize,
    lanes: usize,
    out: &mut [u8],
    path: SimdPath,
) {
    let chunks = out.chunks_mut(lanes);
    #[cfg(target_arch = "x86_64")]
    let vnni = path == SimdPath::Avx512 && std::arch::is_x86_feature_detected!("avx512vnni");
    #[cfg(target_arch = "x86_64")]
    if let Some(all_groups) = vnni.then(|| coeffs.groups()).flatten() {
        let jobs = outputs.clone().zip(chunks).filter_map(|(i, out)| {
            let (start, taps) = coeffs.taps(i);
            let (n, groups) = (taps.weights.len(), coeffs.output_groups(all_groups, i));
            if n == 0 {
                out.fill(scalar::clip8(ROUND_BIAS));
                return None;
            }
            let start = start - offset;
            assert!((start + n - 1) * stride + out.len() <= src.len());
            Some((start, n, groups, out))
        });
        // SAFETY: AVX-512 F + BW (`SimdPath::Avx512` reaches here only after
        // `is_supported`) and VNNI, checked here; every job's bound on `src`
        // is asserted as it is made, its `groups` are its weights', `n >= 1`.
        unsafe { avx512::weighted_sums_vnni(src, stride, jobs) };
        return;
    }
    for (i, out) in outputs.zip(chunks) {
        let (start, taps) = coeffs.taps(i);
        weighted_sum(src, stride, start - offset, taps, out, path);
    }
}

/// Whether the Pillow of `compat` runs the vertical pass first when it resizes
/// `width x height` to `new_width x new_height` (each variant of [`PillowCompat`]
/// names its rule).
#[must_use]
pub fn vertical_first(
    compat: PillowCompat,
    width: usize,
    height: usize,
    new_width: usize,
    new_height: usize,
) -> bool {
    match compat {
        PillowCompat::V12 => false,
        PillowCompat::V12_2 => height > width.saturating_mul(100) && new_height < height,
        PillowCompat::V13 => {
            #[allow(clippy::cast_possible_wrap)]
            let (dh, dw) = (
                height as i64 - new_height as i64,
                width as i64 - new_width as i64,
            );
            dh > 0 && dh > 2 * dw
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
    let run = Execution {
        path: SimdPath::detect(),
        parallel: false,
    };
    resize_bicubic_with(
        src, width, height, channels, new_width, new_height, compat, run,
    )
}

/// [`resize_bicubic`] with a chosen [`Execution`]: kernel path (every path gives the
/// same bytes) and row-band parallelism on the current rayon pool.
///
/// # Panics
/// As [`resize_bicubic`], and when `run.path` is not supported by this CPU.
#[must_use]
#[allow(clippy::too_many_arguments)]
pub fn resize_bicubic_with(
    src: &[u8],
    width: usize,
    height: usize,
    channels: usize,
    new_width: usize,
    new_height: usize,
    compat: PillowCompat,
    run: Execution,
) -> Vec<u8> {
    resize_bicubic_strided(
        src, width, height, channels, channels, new_width, new_height, compat, run,
    )
}

/// [`resize_bicubic_with`] of pixels stored `pixel_stride` bytes apart, the
/// channels first: packed (`pixel_stride == channels`), RGB in 4-byte pixels
/// (`channels` 3, `pixel_stride` 4, as Pillow stores `RGB`, or the colour of
/// packed RGBA), or the grey of packed LA (`channels` 1, `pixel_stride` 2).
/// The output is packed, `new_height * new_width * channels` bytes, the same
/// bytes as the resize of the packed image; the other bytes of a pixel are
/// never read for an output value.
///
/// Source: as [`resize_bicubic`] (Pillow `libImaging/Resample.c`, which
/// resamples the 4-byte pixels of its `RGB` images and writes their pad byte).
///
/// # Panics
/// As [`resize_bicubic_with`]; when `src.len() != width * height * pixel_stride`
/// or the stride is not `channels`, 4 for 3 channels or 2 for 1. Like any
/// `Vec`, aborts when memory for the output runs out.
#[must_use]
#[allow(clippy::too_many_arguments)]
pub fn resize_bicubic_strided(
    src: &[u8],
    width: usize,
    height: usize,
    pixel_stride: usize,
    channels: usize,
    new_width: usize,
    new_height: usize,
    compat: PillowCompat,
    run: Execution,
) -> Vec<u8> {
    let abort = |e: AllocFailed| -> ! {
        std::alloc::handle_alloc_error(
            std::alloc::Layout::array::<u8>(e.bytes).unwrap_or(std::alloc::Layout::new::<u8>()),
        )
    };
    let n = new_width
        .saturating_mul(new_height)
        .saturating_mul(channels);
    let mut out = try_buffer::<u8>(n).unwrap_or_else(|e| abort(e));
    let resize = Resize {
        width,
        height,
        pixel_stride,
        channels,
        new_width,
        new_height,
        premultiplied: false,
        background: None,
    };
    match resize.run_into(Pixels::Slice(src), compat, run, &mut out) {
        Ok(()) => out,
        Err(ResizeFailed::Alloc(e)) => abort(e),
        Err(ResizeFailed::Rows(_)) => unreachable!("a slice's rows are always read"),
    }
}

/// The pixels a [`Resize`] reads: one buffer (`height * width * pixel_stride`
/// bytes), or a [`RowSource`] that each band reads its rows from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pixels<'a> {
    /// All the rows, in place.
    Slice(&'a [u8]),
    /// Rows copied band by band from the source.
    Rows(&'a dyn RowSource),
}

impl<'a> Pixels<'a> {
    /// The pixels of `image`: its source's rows, or its buffer.
    pub(crate) fn of(image: &ImageView<'a>) -> Self {
        match image.rows {
            Some(source) => Self::Rows(source),
            None => Self::Slice(image.data),
        }
    }

    /// Whether the rows are read in order, band after band ([`RowSource::in_order`]).
    pub(crate) fn in_order(self) -> bool {
        matches!(self, Self::Rows(source) if source.in_order())
    }

    /// No row before `row` will be read again ([`RowSource::release`]).
    pub(crate) fn release(self, row: usize) {
        if let Self::Rows(source) = self {
            source.release(row);
        }
    }
}

/// Why a [`Resize`] stopped (then its output is partly written).
#[derive(Debug)]
pub(crate) enum ResizeFailed {
    /// A band's working memory cannot be had.
    Alloc(AllocFailed),
    /// The row source could not give a band's rows (its reason).
    Rows(String),
}

impl From<AllocFailed> for ResizeFailed {
    fn from(e: AllocFailed) -> Self {
        Self::Alloc(e)
    }
}

impl From<ResizeFailed> for crate::KimiError {
    /// `ScratchAllocation` for working memory, `ImageRows` for a source's rows.
    fn from(e: ResizeFailed) -> Self {
        match e {
            ResizeFailed::Alloc(e) => e.into(),
            ResizeFailed::Rows(reason) => Self::ImageRows {
                reason: crate::error::abbreviate(&reason),
            },
        }
    }
}

/// One resize of the pipeline: the input's size and layout (as for
/// [`resize_bicubic_strided`]), the new size, whether the image is an
/// `RGBA` / `LA` one resized premultiplied (`premultiplied`: Pillow's
/// `Image.resize` converts it to `RGBa` / `La` and back around the resize;
/// here each pass premultiplies the pixels it first reads, so the input is
/// never copied whole), and the background such an image is composited onto
/// (`background`, and when: after the resize, each band of the result as it
/// is finished, so the result holds the colour channels only; before it, the
/// input rows of each band as they are read, `channels` then being the colour
/// channels of `pixel_stride`-byte pixels whose last byte is alpha).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resize {
    pub(crate) width: usize,
    pub(crate) height: usize,
    pub(crate) pixel_stride: usize,
    pub(crate) channels: usize,
    pub(crate) new_width: usize,
    pub(crate) new_height: usize,
    pub(crate) premultiplied: bool,
    pub(crate) background: Option<(Background, FillStage)>,
}

impl Resize {
    /// Resize `src` into `out` (`new_height * new_width * channels` bytes, or
    /// `channels - 1` a pixel with a `background` after the resize).
    ///
    /// # Errors
    /// [`ResizeFailed`] when a band's working memory cannot be had or its rows
    /// cannot be read.
    ///
    /// # Panics
    /// As [`resize_bicubic_strided`], when `out` has the wrong length, or when
    /// `premultiplied` or a `background` is asked for pixels whose stride is
    /// not their channel count of 2 or 4 (the pipeline validates all of these
    /// before calling).
    pub(crate) fn run_into(
        &self,
        src: Pixels<'_>,
        compat: PillowCompat,
        run: Execution,
        out: &mut [u8],
    ) -> Result<(), ResizeFailed> {
        let &Self {
            width: w,
            height: h,
            pixel_stride,
            channels,
            new_width: nw,
            new_height: nh,
            premultiplied: pre,
            background,
        } = self;
        assert!(w > 0 && h > 0 && nw > 0 && nh > 0);
        if let Pixels::Slice(src) = src {
            assert_eq!(src.len(), w * h * pixel_stride);
        }
        let alpha = pixel_stride == channels && channels % 2 == 0;
        let (before, after) = match background {
            Some((bg, FillStage::BeforeResize)) => (Some(bg), None),
            Some((bg, FillStage::AfterResize)) => (None, Some(bg)),
            None => (None, None),
        };
        assert!(alpha || !(pre || after.is_some()));
        assert!(before.is_none() || (pixel_stride == channels + 1 && !pre));
        let out_channels = channels - usize::from(after.is_some());
        assert_eq!(out.len(), nw * nh * out_channels);
        let compositor = match (before, after) {
            (Some(bg), _) => Some(Compositor::new(w, pixel_stride, &bg, run.path)),
            (_, Some(bg)) => Some(Compositor::new(nw, channels, &bg, run.path)),
            _ => None,
        };
        let bg = match (&compositor, before.is_some()) {
            (Some(c), true) => Fill::Before(c),
            (Some(c), false) => Fill::After(c),
            (None, _) => Fill::None,
        };
        assert!(
            run.path.is_supported(),
            "{} is not supported by this CPU",
            run.path.name()
        );
        match (pixel_stride, channels) {
            (2, 1) if before.is_some() => resize_c::<1, 1>(src, w, h, nw, nh, pre, bg, compat, run, out),
            (4, 3) if before.is_some() => resize_c::<3, 3>(src, w, h, nw, nh, pre, bg, compat, run, out),
            (1, 1) => resize_c::<1, 1>(src, w, h, nw, nh, pre, bg, compat, run, out),
            (2, 2) => resize_c::<2, 2>(src, w, h, nw, nh, pre, bg, compat, run, out),
            (2, 1) => resize_c::<2, 1>(src, w, h, nw, nh, pre, bg, compat, run, out),
            (3, 3) => resize_c::<3, 3>(src, w, h, nw, nh, pre, bg, compat, run, out),
            (4, 4) => resize_c::<4, 4>(src, w, h, nw, nh, pre, bg, compat, run, out),
            (4, 3) => resize_c::<4, 3>(src, w, h, nw, nh, pre, bg, compat, run, out),
            _ => panic!("channels must be 1..=4 with a stride of channels (or 4 for 3, 2 for 1), got {channels} channels, stride {pixel_stride}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::noise;

    const SCALAR: Execution = Execution {
        path: SimdPath::Scalar,
        parallel: false,
    };

    /// Every kernel path this CPU has, serial and in parallel.
    fn every_run() -> Vec<Execution> {
        let paths = SimdPath::ALL.into_iter().filter(|p| p.is_supported());
        paths
            .flat_map(|path| [false, true].map(|parallel| Execution { path, parallel }))
            .collect()
    }

    #[test]
    fn constant_image_stays_constant() {
        let src = vec![77u8; 40 * 30 * 3];
        let out = resize_bicubic(&src, 40, 30, 3, 17, 11, PillowCompat::V13);
        assert!(out.iter().all(|&v| v == 77));
    }

    #[test]
    fn every_simd_path_gives_the_scalar_bytes() {
        let cases = [
            (1, 37, 29, 11, 7),
            (3, 300, 200, 151, 99),
            (3, 123, 457, 61, 228),
            (4, 90, 70, 33, 70),
            (2, 64, 64, 64, 17),
            (3, 40, 30, 80, 60), // up-scale
            (1, 1, 9, 1, 4),
            // rows of 100 lanes: 64, then 16 twice, then 4 (AVX-512); 32 three
            // times, then 4 (AVX2)
            (1, 300, 41, 100, 30),
        ];
        for (seed, &(c, w, h, nw, nh)) in cases.iter().enumerate() {
            let src = noise(w * h * c, seed as u64 + 1);
            for compat in [PillowCompat::V12, PillowCompat::V13] {
                let want = resize_bicubic_with(&src, w, h, c, nw, nh, compat, SCALAR);
                for run in every_run() {
                    let got = resize_bicubic_with(&src, w, h, c, nw, nh, compat, run);
                    assert_eq!(got, want, "{run:?} {c}x{w}x{h}->{nw}x{nh}");
                }
            }
        }
    }

    /// The bytes of every kernel this CPU has, called directly (the AVX-512
    /// one both without and with VNNI), by name, for the weights `k`.
    fn every_kernel(
        src: &[u8],
        stride: usize,
        start: usize,
        k: &[i32],
        lanes: usize,
    ) -> Vec<(&'static str, Vec<u8>)> {
        let mut groups = vec![[0u32; 3]; k.len().div_ceil(4)];
        coefficients::group_digits(k, &mut groups).expect("weights with digits");
        assert!((start + k.len() - 1) * stride + lanes <= src.len());
        let mut got = Vec::new();
        let mut run = |name, f: &dyn Fn(&mut [u8])| {
            let mut out = vec![0u8; lanes];
            f(&mut out);
            got.push((name, out));
        };
        run("scalar", &|out| {
            scalar::weighted_sum(src, stride, start, 0, k, out)
        });
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            // SAFETY: each kernel runs where the CPU has its features; the bound
            // on `src` is asserted above, and `groups` are those of `k`.
            unsafe {
                if has!("sse4.1") {
                    run("sse4.1", &|out| {
                        sse41::weighted_sum(src, stride, start, k, out)
                    });
                }
                if SimdPath::Avx2.is_supported() {
                    run("avx2", &|out| {
                        avx2::weighted_sum(src, stride, start, k, out)
                    });
                }
                if SimdPath::Avx512.is_supported() {
                    run("avx512", &|out| {
                        avx512::weighted_sum(src, stride, start, k, out)
                    });
                    if has!("avx512vnni") {
                        run("avx512 vnni", &|out| {
                            let job = (start, k.len(), groups.as_slice(), out);
                            avx512::weighted_sums_vnni(src, stride, std::iter::once(job));
                        });
                    }
                }
            }
        }
        got
    }

    #[test]
    fn every_kernel_gives_the_scalar_bytes_on_edge_cases() {
        // Tap counts of every remainder of 4 (a VNNI group), odd and even;
        // lane counts of every remainder of 16, 32, 48 and 64; noise, 0, 255
        // and rows alternating 0 / 255; weights of both signs (Pillow's of a
        // downscale, random ones, sums that clip above 255 and below 0) and the
        // extreme weights whose digits are -128 or 127.
        let taps = [1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 18, 35];
        let lanes = [
            1, 3, 15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64, 65, 100, 127, 128, 130,
        ];
        let extremes = [
            8_355_711, -8_421_504, 127, 128, -128, -129, 32_767, 32_768, -32_769,
        ];
        let pillow = Coefficients::new(95, 21);
        for (seed, &n) in taps.iter().enumerate() {
            let bytes = noise(4 * n, seed as u64 + 70);
            let scale = 8_000_000 / i32::try_from(n).unwrap();
            let random: Vec<i32> = bytes
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) % scale)
                .collect();
            let (_, downscale) = pillow.taps(3);
            // repeated to `n` taps, divided by the repeats (the sum stays in i32)
            let repeats = i32::try_from(n.div_ceil(downscale.weights.len())).unwrap();
            let downscale = downscale.weights.iter().map(|&k| k / repeats);
            let downscale: Vec<i32> = downscale.cycle().take(n).collect();
            let mut weights = vec![random, downscale, vec![scale; n], vec![-scale; n]];
            weights.extend(extremes.iter().filter(|_| n == 1).map(|&k| vec![k]));
            for &l in &lanes {
                let (start, stride) = (2, l + 5);
                let len = (start + n - 1) * stride + l;
                let pixels = [
                    noise(len, (n * l) as u64),
                    vec![0; len],
                    vec![255; len],
                    (0..len)
                        .map(|i| if (i / stride) % 2 == 0 { 255 } else { 0 })
                        .collect(),
                ];
                for (w, k) in weights.iter().enumerate() {
                    for (p, src) in pixels.iter().enumerate() {
                        let got = every_kernel(src, stride, start, k, l);
                        let want = &got[0].1;
                        for (name, bytes) in &got[1..] {
                            assert!(
                                bytes == want,
                                "{name}: {n} taps, {l} lanes, weights {w}, pixels {p}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Pillow's `ImagingResampleHorizontal_8bpc` as written there: each output
    /// byte summed from the input row, no transposes or tiles.
    fn horizontal_as_pillow(src: &[u8], w: usize, h: usize, c: usize, nw: usize) -> Vec<u8> {
        let coeffs = Coefficients::new(w, nw);
        let mut out = Vec::with_capacity(nw * h * c);
        for row in src.chunks_exact(w * c).take(h) {
            for xx in 0..nw {
                let (start, k) = coeffs.taps(xx);
                for ch in 0..c {
                    let taps = k.weights.iter().enumerate();
                    let acc = taps.fold(ROUND_BIAS, |acc, (t, &kv)| {
                        acc + i32::from(row[(start + t) * c + ch]) * kv
                    });
                    out.push(scalar::clip8(acc));
                }
            }
        }
        out
    }

    #[test]
    fn rows_wider_than_a_tile_give_pillows_horizontal_pass() {
        // Many tiles of many outputs, outputs whose taps alone span more than a
        // tile (a 4,000x downscale), a near-identity resize across tile ends.
        let cases = [
            (1, 200_000, 3, 1_000),
            (3, 70_001, 2, 7_168),
            (4, 24_000, 17, 23_999),
            (2, 400_000, 1, 100),
            (3, 300_000, 18, 75),
        ];
        for (seed, &(c, w, h, nw)) in cases.iter().enumerate() {
            let src = noise(w * h * c, seed as u64 + 41);
            let want = horizontal_as_pillow(&src, w, h, c, nw);
            for run in every_run() {
                let got = resize_bicubic_with(&src, w, h, c, nw, h, PillowCompat::V13, run);
                assert!(got == want, "{run:?} {c}x{w}x{h}->{nw}x{h}");
            }
        }
    }

    #[test]
    fn rgb_in_four_byte_pixels_gives_the_packed_rgb_bytes() {
        // Both passes (both orders), one axis only, an up-scale, no resize,
        // widths that end inside and on the 16-byte transpose blocks.
        let cases = [
            (300, 200, 151, 99),
            (123, 457, 61, 228),
            (90, 700, 88, 300),
            (64, 64, 64, 17),
            (65, 31, 20, 31),
            (40, 30, 80, 60),
            (1, 9, 1, 4),
            (17, 5, 17, 5),
        ];
        for (seed, &(w, h, nw, nh)) in cases.iter().enumerate() {
            let rgbx = noise(w * h * 4, seed as u64 + 11);
            let rgb: Vec<u8> = rgbx
                .chunks_exact(4)
                .flat_map(|px| &px[..3])
                .copied()
                .collect();
            for compat in [PillowCompat::V12, PillowCompat::V13] {
                let want = resize_bicubic_with(&rgb, w, h, 3, nw, nh, compat, SCALAR);
                for run in every_run() {
                    let got = resize_bicubic_strided(&rgbx, w, h, 4, 3, nw, nh, compat, run);
                    assert_eq!(got, want, "{run:?} {w}x{h}->{nw}x{nh} {compat:?}");
                }
            }
        }
    }

    #[test]
    fn premultiplied_and_alpha_skipping_resizes_match_the_copies_they_replace() {
        // Both pass orders, one axis alone, wide rows (shortened bands).
        let cases = [
            (300, 200, 151, 99),
            (123, 457, 61, 228),
            (3000, 40, 1000, 40),
            (40, 90, 40, 20),
        ];
        for (seed, &(w, h, nw, nh)) in cases.iter().enumerate() {
            for c in [2usize, 4] {
                let src = noise(w * h * c, seed as u64 + 31);
                for compat in [PillowCompat::V12, PillowCompat::V13] {
                    // RGBA -> RGBa, resize, RGBa -> RGBA, on a copy.
                    let mut pre = src.clone();
                    crate::composite::premultiply(&mut pre, c);
                    let mut want = resize_bicubic_with(&pre, w, h, c, nw, nh, compat, SCALAR);
                    crate::composite::unpremultiply(&mut want, c);
                    // convert("RGB") / convert("L"), then resize.
                    let colour: Vec<u8> = src
                        .chunks_exact(c)
                        .flat_map(|px| &px[..c - 1])
                        .copied()
                        .collect();
                    let want_colour =
                        resize_bicubic_with(&colour, w, h, c - 1, nw, nh, compat, SCALAR);
                    for run in every_run() {
                        let mut resize = Resize {
                            width: w,
                            height: h,
                            pixel_stride: c,
                            channels: c,
                            new_width: nw,
                            new_height: nh,
                            premultiplied: true,
                            background: None,
                        };
                        let mut got = vec![0u8; nw * nh * c];
                        resize
                            .run_into(Pixels::Slice(&src), compat, run, &mut got)
                            .unwrap();
                        assert!(got == want, "{run:?} {c}x{w}x{h}->{nw}x{nh} {compat:?}");
                        // Composited band by band: the composite of the whole result.
                        let bg = crate::config::Background {
                            square_size: 7,
                            ..crate::config::Background::kimi_k3()
                        };
                        resize.background = Some((bg, FillStage::AfterResize));
                        let mut got = vec![0u8; nw * nh * (c - 1)];
                        resize
                            .run_into(Pixels::Slice(&src), compat, run, &mut got)
                            .unwrap();
                        let want_composited = crate::composite::composite(&want, nw, c, &bg);
                        assert!(
                            got == want_composited,
                            "{run:?} composited {c}x{w}x{h}->{nw}x{nh}"
                        );
                        // Composited before, band by band of the input: the resize
                        // of the composited image.
                        let composited = crate::composite::composite(&src, w, c, &bg);
                        let want_before =
                            resize_bicubic_with(&composited, w, h, c - 1, nw, nh, compat, SCALAR);
                        let before = Resize {
                            premultiplied: false,
                            channels: c - 1,
                            background: Some((bg, FillStage::BeforeResize)),
                            ..resize
                        };
                        before
                            .run_into(Pixels::Slice(&src), compat, run, &mut got)
                            .unwrap();
                        assert!(
                            got == want_before,
                            "{run:?} composited before {c}x{w}x{h}->{nw}x{nh}"
                        );
                        resize.background = None;
                        resize.premultiplied = false;
                        resize.channels = c - 1;
                        let mut got = vec![0u8; nw * nh * (c - 1)];
                        resize
                            .run_into(Pixels::Slice(&src), compat, run, &mut got)
                            .unwrap();
                        assert!(
                            got == want_colour,
                            "{run:?} colour of {c}x{w}x{h}->{nw}x{nh}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn pass_order_rule() {
        // (w, h, new_w, new_h, vertical first under 12, 12.2, 13), as measured
        // against Pillow 12.1.0, 12.2.0 / 12.3.0 and 13.0.0.
        let cases = [
            (1242, 2688, 1223, 2646, [false, false, true]),
            (1244, 2629, 1241, 2623, [false, false, false]),
            (10, 8366, 8, 7167, [false, true, true]),
            (70, 7170, 69, 7168, [false, true, false]),
            (2, 200, 1, 100, [false, false, true]),
            (2, 201, 1, 200, [false, true, false]),
            (2, 201, 1, 201, [false, false, false]),
            (2, 201, 3, 100, [false, true, true]),
        ];
        for (w, h, nw, nh, want) in cases {
            let got = PillowCompat::ALL.map(|compat| vertical_first(compat, w, h, nw, nh));
            assert_eq!(got, want, "{w}x{h}->{nw}x{nh}");
        }
        // 100 * W past usize: not taller than 100 * W.
        assert!(!vertical_first(
            PillowCompat::V12_2,
            usize::MAX / 50,
            usize::MAX,
            1,
            1
        ));
    }
}
