//! Sizing of a batch before any pixel work: each image's resize config
//! (computed, or a target or pre-resized sizing checked against the config),
//! each video chunk's, and the layout of the output ([`BatchPlan`]).

use crate::config::MediaProcConfig;
use crate::error::KimiError;
use crate::geometry::{self, navit_resize_config, ResizeConfig};
use crate::image::ImageView;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
