//! The whole per-image pipeline: size, (composite,) resize, (composite,) pad,
//! normalise, patchify — in the order the checkpoint processor runs them.
//!
//! Reproduces `kimi_k25_vision_processing.py: KimiK25VisionProcessor.preprocess`
//! and `kimi_k3_vision_processing.py: KimiK3VisionProcessor.preprocess` (with its
//! `transparent_bg_fill_stage` order of composite and resize) for images held
//! as 8-bit `L` (1 channel), `LA` (2), `RGB` (3) or `RGBA` (4).
//!
//! Laid out by job: `plan.rs` has the items of a batch ([`BatchItem`]) and
//! sizes them ([`plan_batch`], [`BatchPlan`]);
//! `schedule.rs` estimates each view's work and decides what runs on the
//! thread pool; `run.rs` does the pixel work ([`run_batch`], [`run_planned`]);
//! `output.rs` holds what is written and returned ([`Output`], [`Preprocessed`])
//! and the checks of a caller's buffer. This file has the entry points.

mod output;
mod plan;
mod run;
mod schedule;
mod stream;

/// Also at their home, `crate::resize`.
pub use crate::resize::{resize_view, resize_view_into, resized_len};
pub use output::{overlapping_image, BatchOutput, OutBuffer, Output, PixelValues, Preprocessed};
pub use plan::{item_views, plan, plan_batch, BatchItem, BatchPlan};
pub use run::{run_batch, run_batch_with, run_planned};

use crate::config::{MediaProcConfig, PillowCompat};
use crate::error::KimiError;
use crate::image::ImageView;
use crate::options::{Options, OutputDtype};

/// The whole job for a batch: size every image, then resize, composite, pad,
/// normalise and patchify it into `out`, on as many threads as `options` asks.
///
/// Source: `KimiK3VisionProcessor.preprocess` / `KimiK25VisionProcessor.preprocess`
/// (checkpoint remote code) — `pixel_values = cat(per-image patches)`,
/// `grid_thws = stack(per-image grids)`.
///
/// # Arguments
/// * `items` - the batch; see [`BatchItem`].
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
    items: &[BatchItem<'_>],
    config: &MediaProcConfig,
    options: &Options,
    out: Output<'_>,
) -> Result<Preprocessed, KimiError> {
    let plan = plan_batch(items, config)?;
    run_planned(&item_views(items), plan, config, options, out)
}

/// Preprocess a batch on the calling thread into a new float32 buffer:
/// [`plan_batch`] then [`run_batch`].
///
/// Source: `KimiK3VisionProcessor.preprocess` / `KimiK25VisionProcessor.preprocess`
/// (checkpoint remote code).
///
/// # Arguments
/// * `items` - the batch; see [`BatchItem`].
/// * `cfg` - the validated `media_proc_cfg`.
/// * `compat` - the Pillow resize pass order to reproduce.
///
/// # Errors
/// As [`preprocess_into`].
pub fn preprocess_batch(
    items: &[BatchItem<'_>],
    cfg: &MediaProcConfig,
    compat: PillowCompat,
) -> Result<BatchOutput, KimiError> {
    let options = Options::new(compat, OutputDtype::Float32, 1)?;
    let out = preprocess_into(items, cfg, &options, Output::New)?;
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
    let out = preprocess_batch(&[BatchItem::Image(*image)], cfg, compat)?;
    Ok((out.pixel_values, out.grid_thws[0]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry;

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
            &[
                BatchItem::Image(image),
                BatchItem::VideoChunk(vec![frame0, frame1]),
            ],
            &cfg,
            PillowCompat::V13,
        )
        .unwrap();
        assert_eq!(out.grid_thws, vec![[1, 36, 22], [2, 50, 86]]);
        let r = geometry::navit_resize_video_chunk(1280, 720, 2, &cfg).unwrap();
        assert_eq!((r.new_width, r.new_height, r.num_tokens), (1202, 676, 1075));
        let alone = preprocess_batch(
            &[
                BatchItem::Image(image),
                BatchItem::ResizedTo(frame0, r),
                BatchItem::ResizedTo(frame1, r),
            ],
            &cfg,
            PillowCompat::V13,
        )
        .unwrap();
        assert_eq!(alone.grid_thws, vec![[1, 36, 22], [1, 50, 86], [1, 50, 86]]);
        assert_eq!(out.pixel_values, alone.pixel_values);
    }
    #[test]
    fn a_caller_buffer_of_the_other_element_type_is_named() {
        let data = vec![0u8; 28 * 28 * 3];
        let views = [BatchItem::Image(ImageView::new(&data, 28, 28, 3).unwrap())];
        let cfg = MediaProcConfig::kimi_k25();
        let shape = [4, 3, 14, 14];
        let options = |dtype| Options::new(PillowCompat::V13, dtype, 1).unwrap();
        let mut floats = vec![0f32; 4 * 3 * 14 * 14];
        let out = Output::Float32(OutBuffer {
            values: &mut floats,
            shape: &shape,
        });
        let err = preprocess_into(&views, &cfg, &options(OutputDtype::Bfloat16), out);
        assert_eq!(
            err.unwrap_err().to_string(),
            "out has dtype f32, expected u16 for dtype='bfloat16'"
        );
        let mut bits = vec![0u16; 4 * 3 * 14 * 14];
        let out = Output::Bits16(OutBuffer {
            values: &mut bits,
            shape: &shape,
        });
        let err = preprocess_into(&views, &cfg, &options(OutputDtype::Float32), out);
        assert_eq!(
            err.unwrap_err().to_string(),
            "out has dtype u16, expected f32 for dtype='float32'"
        );
        let out = Output::Bits16(OutBuffer {
            values: &mut bits,
            shape: &shape,
        });
        let done = preprocess_into(&views, &cfg, &options(OutputDtype::Float16), out).unwrap();
        assert_eq!(done.grid_thws, vec![[1, 2, 2]]);
        assert!(bits.iter().all(|&b| b == 0xbc00), "float16 -1.0 everywhere");
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
