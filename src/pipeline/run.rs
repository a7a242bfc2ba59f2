//! The pixel work of a planned batch: each view decoded (when encoded),
//! resized, composited, padded, normalised and patchified into its rows of the
//! output, on the threads that `schedule.rs` gives it.

use super::output::{check_out, new_values, Output, PixelValues, Preprocessed};
use super::schedule::thread_plan;
use super::stream::{Lanes, Streamed};
use super::BatchPlan;
use crate::buffers::{poison, try_buffer, Scratch};
use crate::composite::Compositor;
use crate::config::{Background, FillStage, MediaProcConfig, PillowCompat};
use crate::decode::{Decoder, Limits};
use crate::error::KimiError;
use crate::geometry::ResizeConfig;
use crate::image::ImageView;
use crate::normalize::{pad_normalize_patchify, NormalizeLut, OutputValue, ValueTable};
use crate::options::{Options, OutputDtype};
use crate::par::install;
use crate::resize::{Pixels, Resize};
use crate::simd::{Execution, SimdPath};
use rayon::iter::{IndexedParallelIterator, IntoParallelIterator, ParallelIterator};

/// Run one image through the pipeline into `out` (its `pixel_values` rows).
///
/// No full-size copy of the input is made, whether its pixels are in one
/// buffer or read from a [`RowSource`](crate::RowSource): an RGB view in 4-byte pixels
/// ([`ImageView::with_stride`]) is read at its stride (the resize writes
/// packed RGB; the normaliser reads the first three bytes of a pixel and
/// ignores the fourth, as it ignores an alpha); alpha that is dropped is
/// skipped the same way. An `RGBA` / `LA` resize composites onto the
/// background the input rows of each band (`before_resize`), or premultiplies
/// the pixels as its passes read them and composites each finished band of
/// its result (`after_resize`). An image that is not resized is composited,
/// padded, normalised and patchified band by band ([`patchify_bands`]). The
/// resize result is this thread's [`Scratch`] buffer.
///
/// # Errors
/// `KimiError::ScratchAllocation` when a working buffer cannot be allocated;
/// `KimiError::ImageRows` when a source's rows cannot be read.
fn run_image<T: OutputValue>(
    image: &ImageView<'_>,
    r: &ResizeConfig,
    cfg: &MediaProcConfig,
    table: &ValueTable<T>,
    compat: PillowCompat,
    run: Execution,
    out: &mut [T],
) -> Result<(), KimiError> {
    // Sizes come from a validated plan: they fit in usize because the pixels exist
    // (new sizes never exceed the original ones).
    let (new_w, new_h) = (r.new_width as usize, r.new_height as usize);
    let (w, h, ch) = (image.width, image.height, image.channels);
    let has_alpha = ch == 2 || ch == 4;
    debug_assert!(!has_alpha || image.pixel_stride == ch);
    let background = cfg.background().filter(|_| has_alpha);
    let pixels = Pixels::of(image);
    if (new_w, new_h) == (w, h) {
        return patchify_bands(pixels, image, background.as_ref(), r, cfg, table, run, out);
    }
    let stage = cfg.fill_stage();
    let after_resize = stage == FillStage::AfterResize;
    // The channels the resize keeps: alpha dropped before it (the colour bytes
    // `convert("RGB")` / `convert("L")` keeps, read at the pixel stride) or
    // composited before it; kept, premultiplied, after it (and composited).
    let channels = if has_alpha && !after_resize {
        ch - 1
    } else {
        ch
    };
    let kept = channels - usize::from(background.is_some() && after_resize);
    let mut resized = Scratch::new(new_w * new_h * kept)?;
    let resize = Resize {
        width: w,
        height: h,
        pixel_stride: image.pixel_stride,
        channels,
        new_width: new_w,
        new_height: new_h,
        premultiplied: after_resize && has_alpha,
        background: background.map(|bg| (bg, stage)),
    };
    resize.run_into(pixels, compat, run, &mut resized)?;
    // Any alpha still present is dropped by reading only the colour bytes: the
    // normaliser takes `kept`-byte pixels.
    let source = ImageView::from_parts(&resized, new_w, new_h, kept);
    pad_normalize_patchify(
        &source,
        (r.new_width + r.pad_width) as usize,
        (r.new_height + r.pad_height) as usize,
        cfg.patch_size() as usize,
        table,
        out,
        run,
    );
    Ok(())
}

/// The `height` rows of `pixels` (`row_len` bytes each), `rows` at a time
/// (fewer in the last band), each band given to `f` with its first row: read
/// in place from a buffer, or copied from a source into one band's buffer.
///
/// # Errors
/// `KimiError::ImageRows` with the source's reason; `KimiError::ScratchAllocation`
/// when the band's buffer cannot be allocated.
fn read_bands(
    pixels: Pixels<'_>,
    row_len: usize,
    height: usize,
    rows: usize,
    mut f: impl FnMut(usize, &[u8]),
) -> Result<(), KimiError> {
    let rows = rows.min(height);
    // A source's band is copied into a buffer of this thread's, kept for its next image.
    let mut band = Scratch::new(match pixels {
        Pixels::Rows(_) => rows * row_len,
        Pixels::Slice(_) => 0,
    })?;
    for first in (0..height).step_by(rows) {
        let end = (first + rows).min(height);
        match pixels {
            Pixels::Slice(data) => f(first, &data[first * row_len..end * row_len]),
            Pixels::Rows(source) => {
                source.release(first);
                let bytes = &mut band[..(end - first) * row_len];
                source
                    .read_rows(first, end, bytes)
                    .map_err(|reason| KimiError::ImageRows {
                        reason: crate::error::abbreviate(&reason),
                    })?;
                f(first, bytes);
            }
        }
    }
    Ok(())
}

/// [`run_image`] of an image that is not resized: band by band of whole
/// patch rows (the whole image as one band when its pixels are in one buffer
/// and there is nothing to composite), each band composited onto
/// `background` (when the image has alpha and the config one), padded,
/// normalised and patchified into its patches of `out` (the patches of a band
/// of rows are consecutive, `n = i * gw + j`); the last band takes the bottom
/// padding. Rows from a source are read a band at a time.
///
/// # Errors
/// As [`read_bands`].
#[allow(clippy::too_many_arguments)]
fn patchify_bands<T: OutputValue>(
    pixels: Pixels<'_>,
    image: &ImageView<'_>,
    background: Option<&Background>,
    r: &ResizeConfig,
    cfg: &MediaProcConfig,
    table: &ValueTable<T>,
    run: Execution,
    out: &mut [T],
) -> Result<(), KimiError> {
    let (w, h, ch) = (image.width, image.height, image.channels);
    let ps = cfg.patch_size() as usize;
    let (padded_w, padded_h) = (
        (r.new_width + r.pad_width) as usize,
        (r.new_height + r.pad_height) as usize,
    );
    let row_len = w * image.pixel_stride;
    // Whole patch rows, as many as fit in 2 MiB (one at least).
    let rows = match (pixels, background) {
        (Pixels::Slice(_), None) => h,
        _ => ps * ((2 << 20) / (row_len * ps)).max(1),
    };
    let compositor = background.map(|bg| Compositor::new(w, ch, bg, run.path));
    let mut composited: Vec<u8> = match compositor {
        Some(_) => try_buffer(rows.min(h) * w * (ch - 1))?,
        None => Vec::new(),
    };
    let patches_per_row = padded_w / ps * 3 * ps * ps;
    read_bands(pixels, row_len, h, rows, |first, band| {
        let n = band.len() / row_len;
        let band_padded = if first + n == h { padded_h - first } else { n };
        let (pixels, stride): (&[u8], usize) = match &compositor {
            Some(compositor) => {
                let composited = &mut composited[..n * w * (ch - 1)];
                let out_rows = composited.chunks_exact_mut(w * (ch - 1));
                for (y, (row, out_row)) in band.chunks_exact(row_len).zip(out_rows).enumerate() {
                    compositor.row(first + y, row, out_row);
                }
                (composited, ch - 1)
            }
            None => (band, image.pixel_stride),
        };
        let view = ImageView::from_parts(pixels, w, n, stride);
        let start = first / ps * patches_per_row;
        let patches = &mut out[start..start + band_padded / ps * patches_per_row];
        pad_normalize_patchify(&view, padded_w, band_padded, ps, table, patches, run);
    })
}

/// Decoded bytes of the smallest encoded image whose resize [`run_view`]
/// splits among several decoders ([`Lanes`]).
const LANE_MIN_BYTES: usize = 4 << 20;

/// [`run_image`] of a view of pixels, or of an encoded view
/// ([`ImageView::encoded`]) decoded band by band as the pipeline reads it
/// ([`Streamed`]), never held whole. With a parallel `run`, an image of
/// [`LANE_MIN_BYTES`] or more that is resized, and a decoder that skips rows
/// cheaply (a JPEG of one scan), each thread of the pool resizes a run of
/// bands from a decoder of its own ([`Lanes`]; if that fails, the image is
/// run again as follows); otherwise the image is decoded ahead on a second
/// thread of the pool while the bands before are resized.
///
/// # Errors
/// Any error of [`decode_into`](crate::decode::decode_into) and of [`run_image`];
/// `KimiError::DecodeAllocation` when a chunk of decoded rows cannot be allocated.
#[allow(clippy::too_many_arguments)]
fn run_view<T: OutputValue>(
    image: &ImageView<'_>,
    r: &ResizeConfig,
    cfg: &MediaProcConfig,
    table: &ValueTable<T>,
    compat: PillowCompat,
    run: Execution,
    out: &mut [T],
) -> Result<(), KimiError> {
    let Some(header) = image.encoded else {
        return run_image(image, r, cfg, table, compat, run, out);
    };
    let limits = Limits::default();
    let start = |row| Decoder::at_row(image.data, &header, &limits, row);
    let stream = Streamed::new(header, &start)?;
    let (w, h, ch) = (image.width, image.height, image.channels);
    let resized = (r.new_width as usize, r.new_height as usize) != (w, h);
    let lanes = rayon::current_num_threads();
    let large = header.decoded_len().is_ok_and(|n| n >= LANE_MIN_BYTES);
    let stream = if run.parallel && resized && large && lanes > 1 && stream.skips_rows() {
        let lanes = Lanes::new(stream, lanes);
        let view = ImageView::from_rows(&lanes, w, h, ch, ch)?;
        if run_image(&view, r, cfg, table, compat, run, out).is_ok() {
            return Ok(());
        }
        // A lane that starts past the first row may fail where a decode from
        // the first row fails elsewhere, or does not fail (`Lanes`): the
        // image again from one stream gives the decode's own error.
        Streamed::new(header, &start)?
    } else {
        stream
    };
    let view = ImageView::from_rows(&stream, w, h, ch, ch)?;
    let mut reads = || {
        let _reads = stream.reads();
        run_image(&view, r, cfg, table, compat, run, out)
    };
    let result = if run.parallel {
        rayon::join(reads, || stream.decode_ahead()).0
    } else {
        reads()
    };
    result.map_err(|e| stream.take_error().unwrap_or(e))
}

/// Run a planned batch into `out` (`plan.total_values()` values): images in
/// order, each into its rows.
///
/// Source: `KimiK3VisionProcessor.preprocess` / `KimiK25VisionProcessor.preprocess`
/// (checkpoint remote code) — `pixel_values = cat(per-image patches)`.
///
/// # Arguments
/// * `images`, `plan` - the batch and its [`plan_batch`](super::plan_batch).
/// * `cfg` - the config the plan was made with.
/// * `table` - the output values ([`ValueTable::float32`] for the reference's float32).
/// * `compat` - the Pillow resize pass order to reproduce.
/// * `threads` - 1 runs on the calling thread; more run images of the batch
///   and bands of each image on the crate's pool of that many threads, when
///   there is enough work for it: a batch under
///   8 M units of estimated work (about one per output value; a 1920x1080
///   image that is not resized is 6.3 M) runs on the calling thread, and an image under
///   it runs on one thread of the pool. Every choice writes the same values.
/// * `out` - the destination, `plan.total_values()` long.
///
/// # Errors
/// `KimiError::OutShape` when `out` has the wrong length; `KimiError::Threads`
/// when a thread pool cannot be started; `KimiError::AtImage` (the first
/// failing image's index and error) when an encoded image
/// ([`ImageView::encoded`]) cannot be decoded.
#[allow(clippy::too_many_arguments)]
pub fn run_batch<T: OutputValue>(
    images: &[ImageView<'_>],
    plan: &BatchPlan,
    cfg: &MediaProcConfig,
    table: &ValueTable<T>,
    compat: PillowCompat,
    threads: usize,
    out: &mut [T],
) -> Result<(), KimiError> {
    let path = SimdPath::detect();
    run_batch_with(images, plan, cfg, table, compat, threads, path, out)
}

/// [`run_batch`] on a chosen kernel path (every supported path writes the same
/// values; [`run_batch`] takes [`SimdPath::detect`]).
///
/// # Errors
/// As [`run_batch`].
///
/// # Panics
/// When `path` is not supported by this CPU.
#[allow(clippy::too_many_arguments)]
pub fn run_batch_with<T: OutputValue>(
    images: &[ImageView<'_>],
    plan: &BatchPlan,
    cfg: &MediaProcConfig,
    table: &ValueTable<T>,
    compat: PillowCompat,
    threads: usize,
    path: SimdPath,
    out: &mut [T],
) -> Result<(), KimiError> {
    assert!(path.is_supported(), "{} is not supported", path.name());
    if out.len() != plan.total_values() {
        return Err(KimiError::OutShape {
            got: format!("[{}]", out.len()),
            expected: format!("[{}]", plan.total_values()),
        });
    }
    let threading = thread_plan(images, plan, compat, threads);
    let work = || {
        let mut slices = Vec::with_capacity(images.len());
        let mut rest = out;
        for k in 0..images.len() {
            let (head, tail) = rest.split_at_mut(plan.offsets[k + 1] - plan.offsets[k]);
            slices.push(head);
            rest = tail;
        }
        let jobs: Vec<_> = images
            .iter()
            .zip(&plan.resize_configs)
            .zip(&threading.views)
            .zip(slices)
            .collect();
        type Job<'j, 'v, T> = (
            usize,
            (
                ((&'j ImageView<'v>, &'j ResizeConfig), &'j bool),
                &'j mut [T],
            ),
        );
        let job = |(index, (((image, r), &parallel), o)): Job<'_, '_, T>| {
            let run = Execution { path, parallel };
            run_view(image, r, cfg, table, compat, run, o).map_err(|error| KimiError::AtImage {
                index,
                error: Box::new(error),
            })
        };
        // Every image runs; the error of the first failing one is returned.
        let results: Vec<Result<(), KimiError>> = if threading.pool {
            jobs.into_par_iter().enumerate().map(job).collect()
        } else {
            jobs.into_iter().enumerate().map(job).collect()
        };
        results.into_iter().collect::<Result<(), KimiError>>()
    };
    if threading.pool {
        install(threads, work).map_err(KimiError::Threads)?
    } else {
        work()
    }
}

/// [`preprocess_into`](super::preprocess_into) for a batch already sized by [`plan_batch`](super::plan_batch) (for callers
/// that allocate the output themselves once they know its shape,
/// [`BatchPlan::shape`]): the pixel work only, the sizing is not done again.
///
/// # Errors
/// As [`preprocess_into`](super::preprocess_into), but for the sizing errors.
pub fn run_planned(
    images: &[ImageView<'_>],
    plan: BatchPlan,
    config: &MediaProcConfig,
    options: &Options,
    out: Output<'_>,
) -> Result<Preprocessed, KimiError> {
    let shape = plan.shape();
    let lut = NormalizeLut::new(config.image_mean(), config.image_std());
    let (compat, threads) = (options.compat(), options.threads());
    let bits16 = || match options.dtype() {
        OutputDtype::Float16 => ValueTable::float16(&lut),
        _ => ValueTable::bfloat16(&lut),
    };
    let pixel_values = match (out, options.dtype()) {
        (Output::New, OutputDtype::Float32) => {
            let mut values = new_values(plan.total_values(), shape)?;
            let table = ValueTable::float32(&lut);
            run_batch(images, &plan, config, &table, compat, threads, &mut values)?;
            Some(PixelValues::Float32(values))
        }
        (Output::New, _) => {
            let mut values = new_values(plan.total_values(), shape)?;
            run_batch(
                images,
                &plan,
                config,
                &bits16(),
                compat,
                threads,
                &mut values,
            )?;
            Some(PixelValues::Bits16(values))
        }
        (Output::Float32(buf), dtype) => {
            check_out(&buf, images, dtype, false, shape)?;
            poison(buf.values);
            let table = ValueTable::float32(&lut);
            run_batch(images, &plan, config, &table, compat, threads, buf.values)?;
            None
        }
        (Output::Bits16(buf), dtype) => {
            check_out(&buf, images, dtype, true, shape)?;
            poison(buf.values);
            run_batch(
                images,
                &plan,
                config,
                &bits16(),
                compat,
                threads,
                buf.values,
            )?;
            None
        }
    };
    Ok(Preprocessed {
        pixel_values,
        shape,
        grid_thws: plan.grid_thws(),
        resize_configs: plan.resize_configs,
    })
}
