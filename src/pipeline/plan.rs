//! Sizing of a batch before any pixel work: the items of a batch
//! ([`BatchItem`]), each one's resize config (computed, or a target or
//! pre-resized sizing checked against the config), and the layout of the
//! output ([`BatchPlan`]).

use crate::config::MediaProcConfig;
use crate::error::KimiError;
use crate::geometry::{self, navit_resize_config, ResizeConfig};
use crate::image::ImageView;

/// One item of a batch: an image and how it is sized, or the frames of a
/// video chunk. Each item gives one grid of the output, its views' patches
/// consecutive.
#[derive(Debug, Clone)]
pub enum BatchItem<'a> {
    /// An image sized from its own size ([`navit_resize_config`]).
    ///
    /// Source: `KimiK3VisionProcessor.preprocess` / `KimiK25VisionProcessor.preprocess`.
    Image(ImageView<'a>),
    /// An image the caller already resized (for example with Pillow, for a
    /// mode this crate does not resize itself) to this sizing of the original
    /// image ([`navit_resize_config`] of its size), taken as it is: the view
    /// must be `new_width x new_height`, the padding must be the config's for
    /// that size, the resize step is skipped, and compositing, padding and
    /// normalisation still run.
    PreResized(ImageView<'a>, ResizeConfig),
    /// An image resized to this sizing, computed for another image (frame 0 of
    /// a video chunk, say), whatever the view's own size: Pillow BICUBIC from
    /// its size to `new_width x new_height`, up- or down-scaling, then the
    /// sizing's padding, which must be the config's for that size.
    ///
    /// Source: `kimi_k25_vision_processing.py: KimiK25VisionProcessor.preprocess`,
    /// which resizes every frame of a chunk to the sizing of frame 0.
    ResizedTo(ImageView<'a>, ResizeConfig),
    /// The frames of a K2.5 video chunk (at least one), sized once from frame
    /// 0's size and the frame count ([`geometry::navit_resize_video_chunk`]),
    /// every frame resized to that sizing; its grid is `[frames, gh, gw]`, its
    /// patches frame-major. The config must have the video keys
    /// ([`MediaProcConfig::video`]).
    ///
    /// Source: `kimi_k25_vision_processing.py: KimiK25VisionProcessor.get_resize_config`
    /// and `preprocess` for `{"type": "video_chunk"}`.
    VideoChunk(Vec<ImageView<'a>>),
}

impl<'a> BatchItem<'a> {
    /// The item's views, in the order of their patches: the image, or the
    /// chunk's frames.
    #[must_use]
    pub fn views(&self) -> &[ImageView<'a>] {
        match self {
            BatchItem::Image(view)
            | BatchItem::PreResized(view, _)
            | BatchItem::ResizedTo(view, _) => std::slice::from_ref(view),
            BatchItem::VideoChunk(frames) => frames,
        }
    }
}

/// The views of a batch's items, in order: the views [`crate::run_batch`]
/// takes with the items' [`BatchPlan`].
#[must_use]
pub fn item_views<'a>(items: &[BatchItem<'a>]) -> Vec<ImageView<'a>> {
    items.iter().flat_map(BatchItem::views).copied().collect()
}

/// Sizing of one item: the reference's resize config for an image's size or
/// a video chunk's frame 0 and frame count, a target checked against the
/// config, or a pre-resized sizing checked against the view (not computed
/// again).
///
/// # Errors
/// As [`navit_resize_config`]; `KimiError::PreResizedSize` when a pre-resized
/// view does not have its sizing's size or padding; `KimiError::TargetPadding`
/// (or `EmptyImage`) for a target whose padding is not the config's for its
/// size; for a video chunk, `KimiError::ChunkFrames` (no frames) and any error
/// of [`geometry::navit_resize_video_chunk`] (`NoVideoConfig` included).
pub fn plan(item: &BatchItem<'_>, cfg: &MediaProcConfig) -> Result<ResizeConfig, KimiError> {
    match item {
        BatchItem::Image(image) => {
            navit_resize_config(image.width as u64, image.height as u64, cfg)
        }
        BatchItem::PreResized(image, r) => checked_pre_resized(image, *r, cfg),
        BatchItem::ResizedTo(_, r) => checked_target(*r, cfg),
        BatchItem::VideoChunk(frames) => {
            let frame0 = frames.first().ok_or(KimiError::ChunkFrames { frames: 0 })?;
            geometry::navit_resize_video_chunk(
                frame0.width as u64,
                frame0.height as u64,
                frames.len() as u64,
                cfg,
            )
        }
    }
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

/// A resize target, checked against the config.
fn checked_target(r: ResizeConfig, cfg: &MediaProcConfig) -> Result<ResizeConfig, KimiError> {
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
    Ok(r)
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
/// Any error of [`plan`] for any item; `KimiError::Overflow` when the output
/// size overflows `usize`.
pub fn plan_batch(items: &[BatchItem<'_>], cfg: &MediaProcConfig) -> Result<BatchPlan, KimiError> {
    let mut resize_configs = Vec::with_capacity(items.len());
    let mut item_ranges = Vec::with_capacity(items.len());
    for item in items {
        let r = plan(item, cfg)?;
        let start = resize_configs.len();
        resize_configs.extend(std::iter::repeat_n(r, item.views().len()));
        item_ranges.push(start..resize_configs.len());
    }
    let overflow = KimiError::Overflow {
        what: "pixel_values",
    };
    let patch_size = usize::try_from(cfg.patch_size()).map_err(|_| overflow.clone())?;
    let patch_len = patch_size
        .checked_mul(patch_size)
        .and_then(|n| n.checked_mul(3))
        .ok_or_else(|| overflow.clone())?;
    let mut offsets = Vec::with_capacity(resize_configs.len() + 1);
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
        items: item_ranges,
        offsets,
        patch_size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_laid_out_and_checked() {
        let data = vec![0u8; 28 * 28 * 3];
        let v = ImageView::new(&data, 28, 28, 3).unwrap();
        let cfg = MediaProcConfig::kimi_k25();
        let chunk = |n| BatchItem::VideoChunk(vec![v; n]);
        let batch = plan_batch(&[chunk(3), BatchItem::Image(v), chunk(1)], &cfg).unwrap();
        assert_eq!(batch.items, vec![0..3, 3..4, 4..5]);
        assert_eq!(batch.grid_thws(), vec![[3, 2, 2], [1, 2, 2], [1, 2, 2]]);
        assert_eq!(
            plan_batch(&[chunk(0)], &cfg),
            Err(KimiError::ChunkFrames { frames: 0 })
        );
        assert_eq!(
            plan_batch(&[chunk(1)], &MediaProcConfig::kimi_k3()),
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
            plan(&BatchItem::ResizedTo(v, bad), &cfg),
            Err(KimiError::TargetPadding { .. })
        ));
        assert!(matches!(
            plan(&BatchItem::PreResized(v, bad), &cfg),
            Err(KimiError::PreResizedSize { .. })
        ));
    }
}
