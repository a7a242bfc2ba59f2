//! The whole per-image pipeline: size, (composite,) resize, (composite,) pad,
//! normalise, patchify — in the order the checkpoint processor runs them.
//!
//! Reproduces `kimi_k25_vision_processing.py: KimiK25VisionProcessor.preprocess`
//! and `kimi_k3_vision_processing.py: KimiK3VisionProcessor.preprocess` (with its
//! `transparent_bg_fill_stage` order of composite and resize) for images held
//! as 8-bit `L` (1 channel), `LA` (2), `RGB` (3) or `RGBA` (4).

use crate::buffers::{poison, try_buffer, AllocFailed, Scratch, Zeroable};
use crate::composite::Compositor;
use crate::config::{Background, FillStage, MediaProcConfig, PillowCompat};
use crate::decode::{decode_into, Header, Limits};
use crate::error::KimiError;
use crate::geometry::{self, navit_resize_config, ResizeConfig};
use crate::image::ImageView;
use rayon::iter::{IndexedParallelIterator, IntoParallelIterator, ParallelIterator};

use crate::normalize::{pad_normalize_patchify, NormalizeLut, OutputValue, ValueTable};
use crate::options::{Options, OutputDtype};
use crate::par::install;
use crate::resize::{Pixels, Resize};
use crate::simd::{Execution, SimdPath};

/// Sizing of one image: the reference's resize config for its size, the target
/// it is resized to ([`ImageView::resize_to`]), or the one a pre-resized view
/// carries (checked against the view, not computed again).
///
/// # Errors
/// As [`navit_resize_config`]; `KimiError::PreResizedSize` when a pre-resized
/// view does not have its sizing's size or padding; `KimiError::TargetPadding`
/// (or `EmptyImage`) for a target whose padding is not the config's for its size.
pub fn plan(image: &ImageView<'_>, cfg: &MediaProcConfig) -> Result<ResizeConfig, KimiError> {
    if let Some(r) = image.target {
        return checked_target(image, r, cfg);
    }
    let Some(r) = image.pre_resized else {
        return navit_resize_config(image.width as u64, image.height as u64, cfg);
    };
    checked_pre_resized(image, r, cfg)
}

/// `(factor - new % factor) % factor`: the config's padding of a side of `new` pixels.
fn padding(new: u64, cfg: &MediaProcConfig) -> u64 {
    let factor = cfg.patch_size() * cfg.merge_kernel_size();
    (factor - new % factor) % factor
}

/// A pre-resized view's sizing, checked against the view's size and the config.
fn checked_pre_resized(
    image: &ImageView<'_>,
    r: ResizeConfig,
    cfg: &MediaProcConfig,
) -> Result<ResizeConfig, KimiError> {
    let size = (image.width as u64, image.height as u64);
    if size != (r.new_width, r.new_height)
        || (r.pad_width, r.pad_height) != (padding(r.new_width, cfg), padding(r.new_height, cfg))
    {
        return Err(KimiError::PreResizedSize {
            width: size.0,
            height: size.1,
            new_width: r.new_width,
            new_height: r.new_height,
        });
    }
    Ok(r)
}

/// A resize target, checked against the config (a pre-resized view must already
/// have its size).
fn checked_target(
    image: &ImageView<'_>,
    r: ResizeConfig,
    cfg: &MediaProcConfig,
) -> Result<ResizeConfig, KimiError> {
    if r.new_width == 0 || r.new_height == 0 {
        return Err(KimiError::EmptyImage {
            width: r.new_width.into(),
            height: r.new_height.into(),
        });
    }
    let expected = (padding(r.new_width, cfg), padding(r.new_height, cfg));
    if (r.pad_width, r.pad_height) != expected {
        return Err(KimiError::TargetPadding {
            new_width: r.new_width,
            new_height: r.new_height,
            pad_width: r.pad_width,
            pad_height: r.pad_height,
            expected_width: expected.0,
            expected_height: expected.1,
        });
    }
    if image.pre_resized.is_some() {
        return checked_pre_resized(image, r, cfg);
    }
    Ok(r)
}

/// The sizing of the video chunk whose frame 0 is `images[first]`, with `frames`
/// views, and the end of its views.
fn plan_chunk(
    images: &[ImageView<'_>],
    first: usize,
    frames: usize,
    cfg: &MediaProcConfig,
) -> Result<(ResizeConfig, usize), KimiError> {
    if frames == 0 {
        return Err(KimiError::ChunkFrames { frames: 0 });
    }
    let end = first
        .checked_add(frames)
        .filter(|&end| end <= images.len())
        .ok_or(KimiError::ChunkLayout {
            first,
            frames,
            end: images.len(),
        })?;
    if let Some(k) = images[first + 1..end]
        .iter()
        .position(|v| v.chunk_frames.is_some())
    {
        return Err(KimiError::ChunkLayout {
            first,
            frames,
            end: first + 1 + k,
        });
    }
    let frame0 = &images[first];
    let r = match frame0.target {
        Some(r) => checked_target(frame0, r, cfg)?,
        None => geometry::navit_resize_video_chunk(
            frame0.width as u64,
            frame0.height as u64,
            frames as u64,
            cfg,
        )?,
    };
    for frame in &images[first + 1..end] {
        checked_target(frame, r, cfg)?;
    }
    Ok((r, end))
}

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
    let pixels = match image.rows {
        Some(source) => Pixels::Rows(source),
        None => Pixels::Slice(image.data),
    };
    if image.pre_resized.is_some() || (new_w, new_h) == (w, h) {
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
    let mut band: Vec<u8> = match pixels {
        Pixels::Rows(_) => try_buffer(rows * row_len)?,
        Pixels::Slice(_) => Vec::new(),
    };
    for first in (0..height).step_by(rows) {
        let end = (first + rows).min(height);
        match pixels {
            Pixels::Slice(data) => f(first, &data[first * row_len..end * row_len]),
            Pixels::Rows(source) => {
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
    let compositor = background.map(|bg| Compositor::new(w, ch, bg));
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

/// [`run_image`] of a view of pixels, or of an encoded view
/// ([`ImageView::encoded`]) decoded first into a [`Scratch`] buffer of this
/// thread (so a stream of photos decodes into pages already faulted in).
///
/// # Errors
/// Any error of [`decode_into`] and of [`run_image`];
/// `KimiError::DecodeAllocation` when the decode buffer cannot be allocated.
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
    let len = header.decoded_len()?;
    let mut buffer = Scratch::new(len).map_err(|e| decode_allocation(&header, e))?;
    decode_into(image.data, &header, &Limits::default(), &mut buffer)?;
    let pixels = ImageView {
        data: &buffer,
        encoded: None,
        ..*image
    };
    run_image(&pixels, r, cfg, table, compat, run, out)
}

/// `KimiError::DecodeAllocation`: the buffer for the pixels of the file of
/// `header` could not be had.
pub(crate) fn decode_allocation(header: &Header, e: AllocFailed) -> KimiError {
    KimiError::DecodeAllocation {
        width: header.width,
        height: header.height,
        channels: header.channels,
        reason: format!("out of memory ({} bytes)", e.bytes),
    }
}

/// The sizing of a whole batch, computed before any pixel work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPlan {
    /// The sizing of every view, in order (the frames of a video chunk share it).
    pub resize_configs: Vec<ResizeConfig>,
    /// The views of every item: `k..k + 1` for an image, `k..k + t` for a
    /// video chunk of `t` frames.
    pub items: Vec<std::ops::Range<usize>>,
    /// `offsets[k]..offsets[k + 1]`: view `k`'s values in the flattened
    /// `pixel_values` (`n_images + 1` entries, in values, not patches).
    pub offsets: Vec<usize>,
    /// `patch_size` of the config the plan was made with.
    pub patch_size: usize,
}

impl BatchPlan {
    /// Values of the whole batch: `sum(gh * gw) * 3 * ps * ps`.
    #[must_use]
    pub fn total_values(&self) -> usize {
        self.offsets.last().copied().unwrap_or(0)
    }

    /// Patch rows of the whole batch (`pixel_values.shape[0]`).
    #[must_use]
    pub fn total_patches(&self) -> usize {
        self.total_values() / (3 * self.patch_size * self.patch_size)
    }

    /// `[n_patches, 3, ps, ps]`: the shape of the batch's `pixel_values`.
    #[must_use]
    pub fn shape(&self) -> [usize; 4] {
        let ps = self.patch_size;
        [self.total_patches(), 3, ps, ps]
    }

    /// One `(t, gh, gw)` per item: `t` is 1 for an image, the frame count for a
    /// video chunk.
    #[must_use]
    pub fn grid_thws(&self) -> Vec<[u64; 3]> {
        let ps = self.patch_size as u64;
        self.items
            .iter()
            .map(|views| {
                let [_, gh, gw] = self.resize_configs[views.start].grid_thw(ps);
                [views.len() as u64, gh, gw]
            })
            .collect()
    }
}

/// Size every item of a batch (once per image, once per video chunk) and lay
/// out its output (no pixel work).
///
/// # Errors
/// Any error of [`plan`] for any image; for a video chunk
/// ([`ImageView::video_chunk`]), `KimiError::ChunkFrames` (0 frames),
/// `ChunkLayout` (its frames run past the batch or into another chunk), any
/// error of [`geometry::navit_resize_video_chunk`] (`NoVideoConfig` included)
/// and of the target checks of [`plan`]; `KimiError::Overflow` when the output
/// size overflows `usize`.
pub fn plan_batch(images: &[ImageView<'_>], cfg: &MediaProcConfig) -> Result<BatchPlan, KimiError> {
    let mut resize_configs = Vec::with_capacity(images.len());
    let mut items = Vec::with_capacity(images.len());
    let mut k = 0;
    while k < images.len() {
        let end = if let Some(frames) = images[k].chunk_frames {
            let (r, end) = plan_chunk(images, k, frames, cfg)?;
            resize_configs.extend(std::iter::repeat_n(r, end - k));
            end
        } else {
            resize_configs.push(plan(&images[k], cfg)?);
            k + 1
        };
        items.push(k..end);
        k = end;
    }
    let overflow = KimiError::Overflow {
        what: "pixel_values",
    };
    let patch_size = usize::try_from(cfg.patch_size()).map_err(|_| overflow.clone())?;
    let patch_len = patch_size
        .checked_mul(patch_size)
        .and_then(|n| n.checked_mul(3))
        .ok_or_else(|| overflow.clone())?;
    let mut offsets = Vec::with_capacity(images.len() + 1);
    let mut total = 0usize;
    offsets.push(0);
    for r in &resize_configs {
        total = r
            .num_patches(cfg.patch_size())?
            .checked_mul(patch_len)
            .and_then(|n| total.checked_add(n))
            .ok_or_else(|| overflow.clone())?;
        offsets.push(total);
    }
    Ok(BatchPlan {
        resize_configs,
        items,
        offsets,
        patch_size,
    })
}

/// Multiply-adds of Pillow's BICUBIC resize of `ch` channels from `w x h` to
/// `nw x nh`, estimated: an axis resampled from `n` to `m` samples takes about
/// `4 n / m + 1` taps per output sample (support 2, scaled by `n / m` when
/// down-scaling); an unchanged axis is not resampled. Horizontal pass first
/// unless `vertical_first` (the two orders differ only in the intermediate's size).
fn resize_macs(w: u64, h: u64, nw: u64, nh: u64, ch: u64, vertical_first: bool) -> u64 {
    let taps = |n: u64, m: u64| 4 * n.max(m) / m.max(1) + 1;
    let horizontal = |rows: u64| {
        if w == nw {
            0
        } else {
            rows.saturating_mul(nw).saturating_mul(taps(w, nw))
        }
    };
    let vertical = |columns: u64| {
        if h == nh {
            0
        } else {
            columns.saturating_mul(nh).saturating_mul(taps(h, nh))
        }
    };
    let passes = if vertical_first {
        vertical(w).saturating_add(horizontal(nh))
    } else {
        horizontal(h).saturating_add(vertical(nw))
    };
    passes.saturating_mul(ch)
}

/// Estimated pixel work of one view of a planned batch (sized `r`, `values`
/// output values), in units of about one output value written: its values (pad, normalise,
/// patchify: memory-bound, a fraction of a nanosecond each on one core) plus
/// half a unit per multiply-add of its resize when it is resized (the
/// exact integer kernels run about two multiply-adds in the time of one value
/// written), plus its decode for an encoded view. A pure function of the
/// view's size, its sizing and its header.
fn view_work(image: &ImageView<'_>, r: &ResizeConfig, values: usize, compat: PillowCompat) -> u64 {
    let (w, h) = (image.width as u64, image.height as u64);
    let (nw, nh) = (r.new_width, r.new_height);
    let resized = image.pre_resized.is_none() && (nw, nh) != (w, h);
    let macs = if resized {
        let vertical_first = crate::resize::vertical_first(
            compat,
            image.width,
            image.height,
            nw as usize,
            nh as usize,
        );
        resize_macs(w, h, nw, nh, image.channels as u64, vertical_first)
    } else {
        0
    };
    // An encoded view is decoded first: about two units per decoded byte (a
    // photo's JPEG decode takes about as long as its whole resize).
    let decoded = match image.encoded {
        Some(header) => (header.width as u64)
            .saturating_mul(header.height as u64)
            .saturating_mul(header.channels as u64),
        None => 0,
    };
    (values as u64)
        .saturating_add(macs / 2)
        .saturating_add(decoded.saturating_mul(2))
}

/// Which parts of a planned batch run on the pool: `pool` when the call uses
/// it at all (more than one thread asked for, and the batch's work is at least
/// [`MIN_PARALLEL_WORK`](crate::par::MIN_PARALLEL_WORK)), then `views[k]` when
/// view `k` also splits its own resize bands and patch rows (its own work is
/// at least that much). Smaller images of a pooled batch run whole, one per
/// task.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ThreadPlan {
    pool: bool,
    views: Vec<bool>,
}

/// The [`ThreadPlan`] of a planned batch run with `threads` threads: a pure
/// function of the views' sizes, their sizing and the pass order.
fn thread_plan(
    images: &[ImageView<'_>],
    plan: &BatchPlan,
    compat: PillowCompat,
    threads: usize,
) -> ThreadPlan {
    let min = crate::par::MIN_PARALLEL_WORK;
    let works: Vec<u64> = images
        .iter()
        .zip(&plan.resize_configs)
        .enumerate()
        .map(|(k, (image, r))| view_work(image, r, plan.offsets[k + 1] - plan.offsets[k], compat))
        .collect();
    let total = works.iter().fold(0u64, |a, &b| a.saturating_add(b));
    let pool = threads > 1 && total >= min;
    ThreadPlan {
        pool,
        views: works.iter().map(|&w| pool && w >= min).collect(),
    }
}

/// Run a planned batch into `out` (`plan.total_values()` values): images in
/// order, each into its rows.
///
/// Source: `KimiK3VisionProcessor.preprocess` / `KimiK25VisionProcessor.preprocess`
/// (checkpoint remote code) — `pixel_values = cat(per-image patches)`.
///
/// # Arguments
/// * `images`, `plan` - the batch and its [`plan_batch`].
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

/// Output of [`preprocess_batch`].
#[derive(Debug, Clone, PartialEq)]
pub struct BatchOutput {
    /// `float32 [sum of gh * gw, 3, patch_size, patch_size]`, flattened, images in order.
    pub pixel_values: Vec<f32>,
    /// One `(t, gh, gw)` per item (`t` is 1 for an image, the frame count of a
    /// video chunk).
    pub grid_thws: Vec<[u64; 3]>,
    /// The sizing of every view, in order (the frames of a chunk share theirs).
    pub resize_configs: Vec<ResizeConfig>,
}

/// Preprocess a batch on the calling thread into a new float32 buffer:
/// [`plan_batch`] then [`run_batch`].
///
/// Source: `KimiK3VisionProcessor.preprocess` / `KimiK25VisionProcessor.preprocess`
/// (checkpoint remote code).
///
/// # Arguments
/// * `images` - the batch; see [`ImageView`].
/// * `cfg` - the validated `media_proc_cfg`.
/// * `compat` - the Pillow resize pass order to reproduce.
///
/// # Errors
/// As [`preprocess_into`].
pub fn preprocess_batch(
    images: &[ImageView<'_>],
    cfg: &MediaProcConfig,
    compat: PillowCompat,
) -> Result<BatchOutput, KimiError> {
    let options = Options::new(compat, OutputDtype::Float32, 1)?;
    let out = preprocess_into(images, cfg, &options, Output::New)?;
    let Some(PixelValues::Float32(pixel_values)) = out.pixel_values else {
        unreachable!("a new float32 output was asked for");
    };
    Ok(BatchOutput {
        pixel_values,
        grid_thws: out.grid_thws,
        resize_configs: out.resize_configs,
    })
}

/// One image: `(pixel_values, grid_thw)`; see [`preprocess_batch`].
///
/// # Errors
/// As [`preprocess_batch`].
pub fn preprocess_image(
    image: &ImageView<'_>,
    cfg: &MediaProcConfig,
    compat: PillowCompat,
) -> Result<(Vec<f32>, [u64; 3]), KimiError> {
    let out = preprocess_batch(std::slice::from_ref(image), cfg, compat)?;
    Ok((out.pixel_values, out.grid_thws[0]))
}

/// A caller's buffer for `pixel_values`, with the shape and numpy dtype name it
/// has (so that a wrong one is named in the error).
#[derive(Debug)]
pub struct OutBuffer<'a, T> {
    /// The values, `shape` row-major.
    pub values: &'a mut [T],
    /// Its shape; must be `[n_patches, 3, patch_size, patch_size]`.
    pub shape: &'a [usize],
    /// numpy's name of its element type (`"float32"`, `"float16"`, `"bfloat16"`
    /// or `"uint16"`); Rust callers give the name of their dtype.
    pub dtype_name: &'a str,
}

/// Where [`preprocess_into`] writes `pixel_values`.
#[derive(Debug)]
pub enum Output<'a> {
    /// A new buffer, returned in [`Preprocessed::pixel_values`].
    New,
    /// A caller's float32 buffer (dtype float32).
    Float32(OutBuffer<'a, f32>),
    /// A caller's buffer of 16-bit patterns (dtype bfloat16 or float16).
    Bits16(OutBuffer<'a, u16>),
}

/// A new `pixel_values` buffer, flattened `[n_patches, 3, ps, ps]`.
#[derive(Debug, Clone, PartialEq)]
pub enum PixelValues {
    /// float32 values.
    Float32(Vec<f32>),
    /// bfloat16 or float16 bit patterns (as [`Options::dtype`] asked).
    Bits16(Vec<u16>),
}

/// What [`preprocess_into`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct Preprocessed {
    /// The new buffer for [`Output::New`]; `None` when the caller's buffer was written.
    pub pixel_values: Option<PixelValues>,
    /// `[n_patches, 3, ps, ps]`: the shape of `pixel_values`.
    pub shape: [usize; 4],
    /// One `(t, gh, gw)` per item (`t` is 1 for an image, the frame count of a
    /// video chunk).
    pub grid_thws: Vec<[u64; 3]>,
    /// The sizing of every view, in order (the frames of a chunk share theirs).
    pub resize_configs: Vec<ResizeConfig>,
}

/// Pillow BICUBIC resize of one image in its own bands (channels independent,
/// no premultiplication), for the modes the caller resizes before the
/// pipeline. Only down-scales, so the output is never larger than the input.
/// Returns packed pixels, `new_height * new_width * channels` bytes, whatever
/// the view's pixel stride; a view of a [`RowSource`](crate::RowSource) is read band by band.
///
/// Source: Pillow `libImaging/Resample.c`, `ImagingResample` (8-bit bands).
///
/// # Errors
/// `KimiError::EmptyImage` for a zero new side, `KimiError::Upscale` for a new
/// side larger than the image's; `KimiError::ScratchAllocation` when memory
/// runs out; `KimiError::ImageRows` when the source's rows cannot be read.
pub fn resize_view(
    image: &ImageView<'_>,
    new_width: usize,
    new_height: usize,
    compat: PillowCompat,
) -> Result<Vec<u8>, KimiError> {
    let (w, h) = (image.width, image.height);
    if new_width == 0 || new_height == 0 {
        return Err(KimiError::EmptyImage {
            width: new_width as i128,
            height: new_height as i128,
        });
    }
    if new_width > w || new_height > h {
        return Err(KimiError::Upscale {
            width: w as u64,
            height: h as u64,
            new_width: new_width as u64,
            new_height: new_height as u64,
        });
    }
    let run = Execution {
        path: SimdPath::detect(),
        parallel: false,
    };
    let len = new_width * new_height * image.channels;
    let mut out = try_buffer(len)?;
    let resize = Resize {
        width: w,
        height: h,
        pixel_stride: image.pixel_stride,
        channels: image.channels,
        new_width,
        new_height,
        premultiplied: false,
        background: None,
    };
    let src = match image.rows {
        Some(source) => Pixels::Rows(source),
        None => Pixels::Slice(image.data),
    };
    resize.run_into(src, compat, run, &mut out)?;
    Ok(out)
}

/// Check that numpy's name of a caller buffer's element type fits `dtype`:
/// float32; float16; bfloat16 (ml_dtypes) or its uint16 bits.
///
/// # Errors
/// `KimiError::OutDtype` naming both.
pub fn check_out_dtype(dtype: OutputDtype, dtype_name: &str) -> Result<(), KimiError> {
    let (accepted, expected): (&[&str], _) = match dtype {
        OutputDtype::Float32 => (&["float32"], "float32"),
        OutputDtype::Float16 => (&["float16"], "float16"),
        OutputDtype::Bfloat16 => (&["bfloat16", "uint16"], "bfloat16 or uint16"),
    };
    if accepted.contains(&dtype_name) {
        return Ok(());
    }
    Err(KimiError::OutDtype {
        got: crate::error::abbreviate(dtype_name),
        expected,
        dtype: dtype.name(),
    })
}

/// Check a caller's buffer against the plan and the dtype asked for (a buffer
/// of `u16` bits, `bits16`, takes bfloat16 or float16, an `f32` one float32),
/// and that its memory overlaps no image's (the bounds check of
/// `np.may_share_memory`: the batch is read while `out` is written).
fn check_out<T>(
    out: &OutBuffer<'_, T>,
    images: &[ImageView<'_>],
    dtype: OutputDtype,
    bits16: bool,
    expected: [usize; 4],
) -> Result<(), KimiError> {
    check_out_dtype(dtype, out.dtype_name)?;
    if bits16 == (dtype == OutputDtype::Float32) {
        return Err(KimiError::OutDtype {
            got: crate::error::abbreviate(out.dtype_name),
            expected: if bits16 {
                "float32"
            } else {
                "bfloat16, uint16 or float16"
            },
            dtype: dtype.name(),
        });
    }
    if out.shape.len() != 4 {
        return Err(KimiError::OutRank {
            dtype: dtype.name(),
            expected: format!("{expected:?}"),
            got: crate::error::py_tuple(out.shape),
        });
    }
    if out.shape != expected || out.values.len() != expected.iter().product::<usize>() {
        return Err(KimiError::OutShape {
            got: format!("{:?}", out.shape),
            expected: format!("{expected:?}"),
        });
    }
    let written = out.values.as_ptr_range();
    match overlapping_image(written.start as usize..written.end as usize, images) {
        Some(index) => Err(KimiError::OutOverlap { index }),
        None => Ok(()),
    }
}

/// The first image whose bytes overlap the address range `written` (an
/// output's bytes), as `numpy.may_share_memory` bounds them.
#[must_use]
pub fn overlapping_image(
    written: std::ops::Range<usize>,
    images: &[ImageView<'_>],
) -> Option<usize> {
    images.iter().position(|image| {
        let read = image.data.as_ptr_range();
        (read.start as usize) < written.end && written.start < read.end as usize
    })
}

/// A new output of `n` values ([`try_buffer`]: every one is written), or
/// `KimiError::Allocation`.
fn new_values<T: Zeroable>(n: usize, shape: [usize; 4]) -> Result<Vec<T>, KimiError> {
    try_buffer(n).map_err(|e| KimiError::Allocation {
        shape: format!("{shape:?}"),
        reason: format!("out of memory ({} bytes)", e.bytes),
    })
}

/// The whole job for a batch: size every image, then resize, composite, pad,
/// normalise and patchify it into `out`, on as many threads as `options` asks.
///
/// Source: `KimiK3VisionProcessor.preprocess` / `KimiK25VisionProcessor.preprocess`
/// (checkpoint remote code) — `pixel_values = cat(per-image patches)`,
/// `grid_thws = stack(per-image grids)`.
///
/// # Arguments
/// * `images` - the batch; see [`ImageView`].
/// * `config` - the validated `media_proc_cfg`.
/// * `options` - pass order, output dtype, threads.
/// * `out` - [`Output::New`], or a caller's buffer of the dtype's element type
///   (f32 for float32, u16 bits for bfloat16 / float16).
///
/// # Errors
/// Raised before any pixel is written: any error of [`plan_batch`];
/// `KimiError::OutDtype`, `OutRank` or `OutShape` for a wrong caller buffer;
/// `KimiError::Allocation` when a new buffer cannot be allocated. Then
/// `KimiError::Threads` when the thread pool cannot be started, and
/// `KimiError::AtImage` for an encoded image that cannot be decoded.
pub fn preprocess_into(
    images: &[ImageView<'_>],
    config: &MediaProcConfig,
    options: &Options,
    out: Output<'_>,
) -> Result<Preprocessed, KimiError> {
    let plan = plan_batch(images, config)?;
    run_planned(images, plan, config, options, out)
}

/// [`preprocess_into`] for a batch already sized by [`plan_batch`] (for callers
/// that allocate the output themselves once they know its shape,
/// [`BatchPlan::shape`]): the pixel work only, the sizing is not done again.
///
/// # Errors
/// As [`preprocess_into`], but for the sizing errors.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rgb_224_is_one_grid_of_256_patches() {
        let data = vec![255u8; 224 * 224 * 3];
        let view = ImageView::new(&data, 224, 224, 3).unwrap();
        let (pv, grid) =
            preprocess_image(&view, &MediaProcConfig::kimi_k25(), PillowCompat::V13).unwrap();
        assert_eq!(grid, [1, 16, 16]);
        assert_eq!(pv.len(), 256 * 3 * 14 * 14);
        assert!(pv.iter().all(|&v| v == 1.0));
    }

    #[test]
    fn k3_transparent_pixels_show_the_chessboard_and_padding_is_minus_one() {
        // 30x28 fully transparent RGBA: padded to 56x28.
        let data = vec![0u8; 30 * 28 * 4];
        let view = ImageView::new(&data, 30, 28, 4).unwrap();
        let (pv, grid) =
            preprocess_image(&view, &MediaProcConfig::kimi_k3(), PillowCompat::V13).unwrap();
        assert_eq!(grid, [1, 2, 4]);
        let gray = (f64::from((f64::from(180u8) / 255.0) as f32) - 0.5) as f32 * 2.0;
        // patch 0, channel 0, row 0: x 0..8 white (1.0), x 8..14 gray.
        assert_eq!(&pv[..8], &[1.0; 8]);
        assert_eq!(pv[8], gray);
        // patch (0, 2) covers x 28..42: x 28, 29 inside, the rest padding.
        let p = 2 * 3 * 14 * 14;
        assert_eq!(pv[p + 2], -1.0);
    }

    #[test]
    fn video_chunk_frames_take_frame_zeros_sizing() {
        let cfg = MediaProcConfig::kimi_k25();
        let (a, b) = (
            crate::test_util::noise(1280 * 720 * 3, 1),
            crate::test_util::noise(300 * 500 * 3, 2),
        );
        let frame0 = ImageView::new(&a, 1280, 720, 3).unwrap();
        let frame1 = ImageView::new(&b, 300, 500, 3).unwrap();
        let image = ImageView::new(&b, 300, 500, 3).unwrap();
        let out = preprocess_batch(
            &[image, frame0.video_chunk(2), frame1],
            &cfg,
            PillowCompat::V13,
        )
        .unwrap();
        assert_eq!(out.grid_thws, vec![[1, 36, 22], [2, 50, 86]]);
        let r = geometry::navit_resize_video_chunk(1280, 720, 2, &cfg).unwrap();
        assert_eq!((r.new_width, r.new_height, r.num_tokens), (1202, 676, 1075));
        let alone = preprocess_batch(
            &[image, frame0.resize_to(r), frame1.resize_to(r)],
            &cfg,
            PillowCompat::V13,
        )
        .unwrap();
        assert_eq!(alone.grid_thws, vec![[1, 36, 22], [1, 50, 86], [1, 50, 86]]);
        assert_eq!(out.pixel_values, alone.pixel_values);
    }

    #[test]
    fn video_chunk_layout_errors() {
        let data = vec![0u8; 28 * 28 * 3];
        let v = ImageView::new(&data, 28, 28, 3).unwrap();
        let cfg = MediaProcConfig::kimi_k25();
        let plan = |views: &[ImageView<'_>]| plan_batch(views, &cfg).map(|p| p.grid_thws());
        assert_eq!(plan(&[v.video_chunk(1)]), Ok(vec![[1, 2, 2]]));
        assert_eq!(
            plan(&[v.video_chunk(0)]),
            Err(KimiError::ChunkFrames { frames: 0 })
        );
        assert_eq!(
            plan(&[v.video_chunk(3), v]),
            Err(KimiError::ChunkLayout {
                first: 0,
                frames: 3,
                end: 2
            })
        );
        assert!(matches!(
            plan(&[v.video_chunk(2), v.video_chunk(1)]),
            Err(KimiError::ChunkLayout { .. })
        ));
        assert_eq!(
            plan_batch(&[v.video_chunk(1)], &MediaProcConfig::kimi_k3()),
            Err(KimiError::NoVideoConfig)
        );
        let bad = ResizeConfig {
            num_tokens: 1,
            new_width: 20,
            new_height: 20,
            pad_width: 0,
            pad_height: 8,
        };
        assert!(matches!(
            plan(&[v.resize_to(bad)]),
            Err(KimiError::TargetPadding { .. })
        ));
    }

    #[test]
    fn resize_work_counts_the_taps_of_each_pass() {
        // 8000^2 -> 3584^2 (K3): 9 taps per output sample on each axis.
        let h_first = 8000 * 3584 * 9 + 3584 * 3584 * 9;
        assert_eq!(resize_macs(8000, 8000, 3584, 3584, 3, false), 3 * h_first);
        let v_first = 8000 * 3584 * 9 + 3584 * 3584 * 9;
        assert_eq!(resize_macs(8000, 8000, 3584, 3584, 1, true), v_first);
        // One axis only; no change at all; an up-scale counts 5 taps.
        assert_eq!(resize_macs(100, 50, 60, 50, 1, false), 50 * 60 * 7);
        assert_eq!(resize_macs(100, 50, 100, 25, 4, false), 4 * 100 * 25 * 9);
        assert_eq!(resize_macs(100, 50, 100, 50, 3, true), 0);
        assert_eq!(resize_macs(10, 10, 20, 10, 1, false), 10 * 20 * 5);
    }

    #[test]
    fn small_calls_stay_on_the_calling_thread() {
        let k3 = MediaProcConfig::kimi_k3();
        let compat = PillowCompat::V13;
        let pixels = vec![0u8; 8000 * 8000 * 3];
        let view = |w: usize, h: usize| ImageView::new(&pixels[..w * h * 3], w, h, 3).unwrap();
        let decide = |views: &[ImageView<'_>], threads: usize| {
            let plan = plan_batch(views, &k3).unwrap();
            thread_plan(views, &plan, compat, threads)
        };
        let serial = |n: usize| ThreadPlan {
            pool: false,
            views: vec![false; n],
        };
        // 1920x1080, not resized: 1932x1092 padded, 6.3 M values, under the threshold.
        let hd = view(1920, 1080);
        let plan = plan_batch(&[hd], &k3).unwrap();
        assert_eq!(
            view_work(&hd, &plan.resize_configs[0], plan.total_values(), compat),
            6_329_232
        );
        assert_eq!(decide(&[hd], 2), serial(1));
        assert_eq!(decide(&[view(512, 600)], 8), serial(1));
        // 2212x1260 padded (158 x 90 patches): 8.36 M values, over it.
        let over = view(2200, 1240);
        let one = |parallel: bool| ThreadPlan {
            pool: parallel,
            views: vec![parallel],
        };
        assert_eq!(decide(&[over], 2), one(true));
        assert_eq!(decide(&[over], 1), one(false));
        // Two images under it, together over it: images in parallel, each whole.
        let pair = ThreadPlan {
            pool: true,
            views: vec![false, false],
        };
        assert_eq!(decide(&[hd, hd], 2), pair);
        assert_eq!(decide(&[hd, hd], 1), serial(2));
        // A big image and a small one: the big one splits its bands too.
        let big = view(8000, 8000);
        let mixed = ThreadPlan {
            pool: true,
            views: vec![true, false],
        };
        assert_eq!(decide(&[big, view(300, 200)], 3), mixed);
        // The resize is counted: 8000^2 -> 3586^2 is 1.1 G multiply-adds.
        let plan = plan_batch(&[big], &k3).unwrap();
        let r = plan.resize_configs[0];
        assert_eq!((r.new_width, r.new_height), (3586, 3586));
        let values = plan.total_values();
        assert_eq!(
            view_work(&big, &r, values, compat),
            values as u64 + resize_macs(8000, 8000, 3586, 3586, 3, false) / 2
        );
        // A view already resized to its sizing is not resized again.
        let small = view(3586, 3586);
        assert_eq!(
            view_work(&small.pre_resized(r), &r, values, compat),
            values as u64
        );
    }

    #[test]
    fn errors_before_pixel_work() {
        let data = vec![0u8; 10];
        assert!(matches!(
            ImageView::new(&data, 2, 2, 3),
            Err(KimiError::BufferSize { .. })
        ));
        assert!(matches!(
            ImageView::new(&data, 2, 1, 5),
            Err(KimiError::Channels(5))
        ));
    }
}
