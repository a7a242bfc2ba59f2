//! `media_proc_cfg`: the checkpoint's preprocessing configuration, validated.
//!
//! Mirrors the keys of `preprocessor_config.json["media_proc_cfg"]` of the
//! Kimi-K2.5 / Kimi-K3 checkpoints, as `kimi_k3_vision_processing.py:
//! KimiK3VisionProcessor.__init__` receives them. Construction checks every
//! numeric invariant and never clamps or replaces a bad value.

use crate::error::{quoted, KimiError};

/// Largest accepted integer config value (`patch_size`, `merge_kernel_size`,
/// `patch_limit_on_one_side`, `fixed_output_tokens`): 2^31 - 1.
pub const MAX_CONFIG_INT: u64 = (1 << 31) - 1;
/// Largest accepted `in_patch_limit`: 2^53, so that the reference's float
/// arithmetic on it is exact.
pub const MAX_IN_PATCH_LIMIT: u64 = 1 << 53;

/// The rule of `patch_size`, `merge_kernel_size`, `patch_limit_on_one_side` and
/// `transparent_bg_config.chessboard_square_size` (the text of their errors).
pub const INT_RULE: &str = "an integer in 1..=2**31-1";
/// The rule of `in_patch_limit`.
pub const IN_PATCH_LIMIT_RULE: &str = "an integer in 1..=2**53";
/// The rule of `fixed_output_tokens` (the reference applies `int()` to it).
pub const FIXED_OUTPUT_TOKENS_RULE: &str = "None or a number in 0..=2**31-1";
/// The rule of `image_mean`.
pub const MEAN_RULE: &str = "three finite numbers (or one, for every channel)";
/// The rule of `image_std`.
pub const STD_RULE: &str = "three finite non-zero numbers (or one, for every channel)";
/// The rule of the chessboard colour values.
pub const BYTE_RULE: &str = "an integer in 0..=255";
/// The rule of `transparent_bg_config.chessboard_square_on_top_left`.
pub const BOOL_RULE: &str = "a bool";
/// The rule of `transparent_bg_fill_stage`.
pub const FILL_STAGE_RULE: &str = "'before_resize' or 'after_resize'";
/// The rule of `transparent_bg_config` itself.
pub const BACKGROUND_RULE: &str = "a dict or None";
/// The rule of `in_patch_limit_each_frame`, `in_patch_limit_video` and
/// `max_num_frames_each_video`.
pub const OPTIONAL_LIMIT_RULE: &str = "None or an integer in 1..=2**53";
/// The rule of `sample_fps`.
pub const SAMPLE_FPS_RULE: &str = "a number > 0";
/// The rule of `timestamp_mode` (its value is checked when a plan formats a timestamp).
pub const TIMESTAMP_MODE_RULE: &str = "a str or None";

/// Background pattern of `transparent_bg_config["pattern"]` (reference
/// `kimi_k3_vision_processing.fill_transparent_bg_with`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackgroundPattern {
    /// Value 0 everywhere.
    Black,
    /// Value 255 everywhere.
    White,
    /// Value 128 everywhere.
    Gray,
    /// Squares of `square_size` pixels alternating `white_value` / `gray_value`.
    Chessboard,
}

impl BackgroundPattern {
    /// Parse the reference's pattern names (`"chessboard"`, `"white"`, `"black"`, `"gray"`).
    ///
    /// # Errors
    /// `KimiError::Pattern` (the checkpoint's `Invalid background pattern: ...`)
    /// for any other name.
    pub fn parse(name: &str) -> Result<Self, KimiError> {
        match name {
            "black" => Ok(Self::Black),
            "white" => Ok(Self::White),
            "gray" => Ok(Self::Gray),
            "chessboard" => Ok(Self::Chessboard),
            other => Err(KimiError::Pattern(crate::error::abbreviate(other))),
        }
    }

    /// The reference's name of the pattern.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Black => "black",
            Self::White => "white",
            Self::Gray => "gray",
            Self::Chessboard => "chessboard",
        }
    }
}

/// `transparent_bg_config` (reference dataclass `TransparentBgConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Background {
    /// The pattern.
    pub pattern: BackgroundPattern,
    /// Chessboard square edge in pixels of the resized image (>= 1).
    pub square_size: u32,
    /// `chessboard_square_on_top_left`: when true the top-left square is white.
    pub on_top_left: bool,
    /// `chessboard_white_value` (0..=255).
    pub white_value: u8,
    /// `chessboard_gray_value` (0..=255).
    pub gray_value: u8,
}

impl Background {
    /// The field defaults of the reference dataclass `TransparentBgConfig`
    /// (black; chessboard 16 px, white 255, gray 200), which fill the keys a
    /// `transparent_bg_config` leaves out. Not the published K3 values.
    #[must_use]
    pub const fn dataclass_default() -> Self {
        Self {
            pattern: BackgroundPattern::Black,
            square_size: 16,
            on_top_left: true,
            white_value: 255,
            gray_value: 200,
        }
    }

    /// The published Kimi-K3 background: chessboard, 8 px squares, white 255, gray 180.
    #[must_use]
    pub const fn kimi_k3() -> Self {
        Self {
            pattern: BackgroundPattern::Chessboard,
            square_size: 8,
            on_top_left: true,
            white_value: 255,
            gray_value: 180,
        }
    }

    /// Background value (same for R, G, B) at column `x`, row `y` of the
    /// resized, unpadded image (as `kimi_k3_vision_processing.py:
    /// fill_transparent_bg_with` draws its background).
    #[must_use]
    pub fn value_at(&self, x: usize, y: usize) -> u8 {
        match self.pattern {
            BackgroundPattern::Black => 0,
            BackgroundPattern::White => 255,
            BackgroundPattern::Gray => 128,
            BackgroundPattern::Chessboard => {
                let s = self.square_size as usize;
                let parity = (y / s + x / s) % 2;
                if parity == usize::from(self.on_top_left) {
                    self.gray_value
                } else {
                    self.white_value
                }
            }
        }
    }
}

/// `transparent_bg_fill_stage`: where the background is composited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FillStage {
    /// Composite (or convert to RGB) first, then resize RGB. The reference default; K2.5.
    #[default]
    BeforeResize,
    /// Resize in the image's own mode, then composite (published K3).
    AfterResize,
}

impl FillStage {
    /// Parse `"before_resize"` / `"after_resize"`.
    ///
    /// # Errors
    /// `KimiError::Config` for any other string.
    pub fn parse(name: &str) -> Result<Self, KimiError> {
        match name {
            "before_resize" => Ok(Self::BeforeResize),
            "after_resize" => Ok(Self::AfterResize),
            other => Err(KimiError::config(
                "transparent_bg_fill_stage",
                FILL_STAGE_RULE,
                &quoted(other),
            )),
        }
    }

    /// The reference's name of the stage.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::BeforeResize => "before_resize",
            Self::AfterResize => "after_resize",
        }
    }
}

/// Which Pillow release's resize pass order to reproduce: the rule that picks
/// the vertical pass first, [`crate::resize::vertical_first`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PillowCompat {
    /// Pillow 12.0 - 12.1: horizontal pass first, always
    /// (`libImaging/Resample.c: ImagingResampleInner`).
    V12,
    /// Pillow 12.2 - 12.3: vertical pass first when `H > 100 * W && new_h < H`
    /// (`PIL/Image.py: Image.resize` resizes such an image in two calls,
    /// `(W, new_h)` then `(new_w, new_h)`; python-pillow PR 9524).
    V12_2,
    /// Pillow 13: vertical pass first when `(H - new_h) > 0 && (H - new_h) > 2 * (W - new_w)`
    /// (`ImagingResampleInner`, python-pillow PR 9549, which dropped the 12.2 rule).
    V13,
}

impl PillowCompat {
    /// Every value, oldest Pillow first.
    pub const ALL: [Self; 3] = [Self::V12, Self::V12_2, Self::V13];

    /// Parse `"12"` / `"12.2"` / `"13"`.
    ///
    /// # Errors
    /// `KimiError::Option` for any other string (`"auto"` is resolved by the
    /// caller, who knows the installed Pillow, so it is named in the rule).
    pub fn parse(name: &str) -> Result<Self, KimiError> {
        Self::ALL
            .into_iter()
            .find(|compat| compat.name() == name)
            .ok_or_else(|| {
                KimiError::option(
                    "pillow_compat",
                    "'auto', '12', '12.2' or '13'",
                    &quoted(name),
                )
            })
    }

    /// `"12"`, `"12.2"` or `"13"`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::V12 => "12",
            Self::V12_2 => "12.2",
            Self::V13 => "13",
        }
    }
}

/// The six Kimi-K2.5 video keys of a `media_proc_cfg`, validated.
///
/// Read by `kimi_k25_vision_processing.py: KimiK25VisionProcessor.get_resize_config`
/// (a `video_chunk`'s sizing) and `split_video_chunks` (the frame plan). A config
/// accepts `video_chunk` items only when it has all six (the published K2.5 config
/// does; K3's has three).
#[derive(Debug, Clone, PartialEq)]
pub struct VideoConfig {
    in_patch_limit_each_frame: Option<u64>,
    in_patch_limit_video: Option<u64>,
    sample_fps: f64,
    max_num_frames_each_video: Option<u64>,
    temporal_merge_kernel_size: u64,
    timestamp_mode: Option<String>,
}

fn check_optional(key: &'static str, value: Option<u64>) -> Result<Option<u64>, KimiError> {
    match value {
        Some(v) if v == 0 || v > MAX_IN_PATCH_LIMIT => {
            Err(KimiError::config(key, OPTIONAL_LIMIT_RULE, &v.to_string()))
        }
        other => Ok(other),
    }
}

impl VideoConfig {
    /// Validate the video keys.
    ///
    /// # Arguments
    /// * `in_patch_limit_each_frame` - patch budget of one frame (4096 K2.5);
    ///   `None` takes `in_patch_limit`.
    /// * `in_patch_limit_video` - patch budget of a whole chunk, divided by its
    ///   frame count (`None` in K2.5).
    /// * `sample_fps` - frames sampled per second of video (2.0 K2.5).
    /// * `max_num_frames_each_video` - read but never applied by the checkpoint.
    /// * `temporal_merge_kernel_size` - frames per chunk (4).
    /// * `timestamp_mode` - `"hh:mm:ss.fff"`, `"mm:ss.fff"` or `"mm:ss"`; any
    ///   other text (or `None`) is kept and fails where a timestamp is formatted,
    ///   as in the checkpoint.
    ///
    /// # Errors
    /// `KimiError::Config` for a limit of 0 or above 2^53, a `sample_fps` that
    /// is not > 0 (NaN included), or a `temporal_merge_kernel_size` of 0 or
    /// above [`MAX_CONFIG_INT`].
    pub fn new(
        in_patch_limit_each_frame: Option<u64>,
        in_patch_limit_video: Option<u64>,
        sample_fps: f64,
        max_num_frames_each_video: Option<u64>,
        temporal_merge_kernel_size: u64,
        timestamp_mode: Option<String>,
    ) -> Result<Self, KimiError> {
        let each = check_optional("in_patch_limit_each_frame", in_patch_limit_each_frame)?;
        let video = check_optional("in_patch_limit_video", in_patch_limit_video)?;
        let max_frames = check_optional("max_num_frames_each_video", max_num_frames_each_video)?;
        if sample_fps.is_nan() || sample_fps <= 0.0 {
            return Err(KimiError::config(
                "sample_fps",
                SAMPLE_FPS_RULE,
                &format!("{sample_fps:?}"),
            ));
        }
        check_int(
            "temporal_merge_kernel_size",
            temporal_merge_kernel_size,
            MAX_CONFIG_INT,
        )?;
        Ok(Self {
            in_patch_limit_each_frame: each,
            in_patch_limit_video: video,
            sample_fps,
            max_num_frames_each_video: max_frames,
            temporal_merge_kernel_size,
            timestamp_mode,
        })
    }

    /// The published Kimi-K2.5 values: 4096 patches a frame, no chunk budget,
    /// 2 fps, chunks of 4 frames, `"hh:mm:ss.fff"`.
    #[must_use]
    pub fn kimi_k25() -> Self {
        Self {
            in_patch_limit_each_frame: Some(4096),
            in_patch_limit_video: None,
            sample_fps: 2.0,
            max_num_frames_each_video: None,
            temporal_merge_kernel_size: 4,
            timestamp_mode: Some("hh:mm:ss.fff".to_owned()),
        }
    }

    /// `in_patch_limit_each_frame` (`None`: `in_patch_limit` applies).
    #[must_use]
    pub fn in_patch_limit_each_frame(&self) -> Option<u64> {
        self.in_patch_limit_each_frame
    }
    /// `in_patch_limit_video`, if any.
    #[must_use]
    pub fn in_patch_limit_video(&self) -> Option<u64> {
        self.in_patch_limit_video
    }
    /// `sample_fps`.
    #[must_use]
    pub fn sample_fps(&self) -> f64 {
        self.sample_fps
    }
    /// `max_num_frames_each_video` (never applied, as in the checkpoint).
    #[must_use]
    pub fn max_num_frames_each_video(&self) -> Option<u64> {
        self.max_num_frames_each_video
    }
    /// `temporal_merge_kernel_size`: frames per chunk.
    #[must_use]
    pub fn temporal_merge_kernel_size(&self) -> u64 {
        self.temporal_merge_kernel_size
    }
    /// `timestamp_mode` as given (`None` for a null).
    #[must_use]
    pub fn timestamp_mode(&self) -> Option<&str> {
        self.timestamp_mode.as_deref()
    }
}

/// A validated `media_proc_cfg` (the keys the image path reads).
#[derive(Debug, Clone, PartialEq)]
pub struct MediaProcConfig {
    patch_size: u64,
    merge_kernel_size: u64,
    in_patch_limit: u64,
    patch_limit_on_one_side: u64,
    fixed_output_tokens: Option<u64>,
    image_mean: [f64; 3],
    image_std: [f64; 3],
    background: Option<Background>,
    fill_stage: FillStage,
    video: Option<VideoConfig>,
}

fn check_int(key: &'static str, value: u64, max: u64) -> Result<u64, KimiError> {
    if value == 0 || value > max {
        let rule = if max == MAX_IN_PATCH_LIMIT {
            IN_PATCH_LIMIT_RULE
        } else {
            INT_RULE
        };
        return Err(KimiError::config(key, rule, &value.to_string()));
    }
    Ok(value)
}

impl MediaProcConfig {
    /// Build a config from the six required keys, with no fixed token count
    /// and no background (`transparent_bg_config` absent, stage `before_resize`).
    ///
    /// # Arguments
    /// * `patch_size` - patch edge in pixels (14 for MoonViT).
    /// * `merge_kernel_size` - spatial merge factor (2); images are padded to a
    ///   multiple of `patch_size * merge_kernel_size` pixels.
    /// * `in_patch_limit` - budget in patches before merging (16384 K2.5, 65536 K3).
    /// * `patch_limit_on_one_side` - per-side cap in patches (512).
    /// * `image_mean`, `image_std` - per-channel statistics in `[0, 1]` units.
    ///
    /// # Errors
    /// `KimiError::Config` when an integer is 0 or too large (see
    /// [`MAX_CONFIG_INT`], [`MAX_IN_PATCH_LIMIT`]), when a side limit in pixels
    /// overflows, when a mean/std is not finite, or when a std is 0.
    pub fn new(
        patch_size: u64,
        merge_kernel_size: u64,
        in_patch_limit: u64,
        patch_limit_on_one_side: u64,
        image_mean: [f64; 3],
        image_std: [f64; 3],
    ) -> Result<Self, KimiError> {
        check_int("patch_size", patch_size, MAX_CONFIG_INT)?;
        check_int("merge_kernel_size", merge_kernel_size, MAX_CONFIG_INT)?;
        check_int("in_patch_limit", in_patch_limit, MAX_IN_PATCH_LIMIT)?;
        check_int(
            "patch_limit_on_one_side",
            patch_limit_on_one_side,
            MAX_CONFIG_INT,
        )?;
        for m in image_mean {
            if !m.is_finite() {
                return Err(KimiError::config(
                    "image_mean",
                    MEAN_RULE,
                    &format!("{image_mean:?}"),
                ));
            }
        }
        for s in image_std {
            if !s.is_finite() || s == 0.0 {
                return Err(KimiError::config(
                    "image_std",
                    STD_RULE,
                    &format!("{image_std:?}"),
                ));
            }
        }
        Ok(Self {
            patch_size,
            merge_kernel_size,
            in_patch_limit,
            patch_limit_on_one_side,
            fixed_output_tokens: None,
            image_mean,
            image_std,
            background: None,
            fill_stage: FillStage::BeforeResize,
            video: None,
        })
    }

    /// Set `fixed_output_tokens` (the reported token count; pixels are unchanged).
    ///
    /// # Errors
    /// `KimiError::Config` when the value is above [`MAX_CONFIG_INT`].
    pub fn with_fixed_output_tokens(mut self, tokens: Option<u64>) -> Result<Self, KimiError> {
        if let Some(t) = tokens.filter(|&t| t > MAX_CONFIG_INT) {
            return Err(KimiError::config(
                "fixed_output_tokens",
                FIXED_OUTPUT_TOKENS_RULE,
                &t.to_string(),
            ));
        }
        self.fixed_output_tokens = tokens;
        Ok(self)
    }

    /// Set `transparent_bg_config` (`None` = alpha dropped) and `transparent_bg_fill_stage`.
    ///
    /// # Errors
    /// `KimiError::Config` when `square_size` is 0 or above [`MAX_CONFIG_INT`].
    pub fn with_background(
        mut self,
        background: Option<Background>,
        fill_stage: FillStage,
    ) -> Result<Self, KimiError> {
        if let Some(bg) = background {
            check_int(
                "transparent_bg_config.chessboard_square_size",
                u64::from(bg.square_size),
                MAX_CONFIG_INT,
            )?;
        }
        self.background = background;
        self.fill_stage = fill_stage;
        Ok(self)
    }

    /// Set the video keys (`None`: `video_chunk` items are refused).
    #[must_use]
    pub fn with_video(mut self, video: Option<VideoConfig>) -> Self {
        self.video = video;
        self
    }

    /// The published Kimi-K2.5 values (`in_patch_limit` 16384, no background,
    /// the K2.5 video keys).
    #[must_use]
    pub fn kimi_k25() -> Self {
        Self {
            patch_size: 14,
            merge_kernel_size: 2,
            in_patch_limit: 16384,
            patch_limit_on_one_side: 512,
            fixed_output_tokens: None,
            image_mean: [0.5; 3],
            image_std: [0.5; 3],
            background: None,
            fill_stage: FillStage::BeforeResize,
            video: Some(VideoConfig::kimi_k25()),
        }
    }

    /// The published Kimi-K3 values (`in_patch_limit` 65536, chessboard after
    /// resize, no video: its config lacks three of the video keys).
    #[must_use]
    pub fn kimi_k3() -> Self {
        Self {
            in_patch_limit: 65536,
            background: Some(Background::kimi_k3()),
            fill_stage: FillStage::AfterResize,
            video: None,
            ..Self::kimi_k25()
        }
    }

    /// Patch edge in pixels.
    #[must_use]
    pub fn patch_size(&self) -> u64 {
        self.patch_size
    }
    /// Spatial merge factor.
    #[must_use]
    pub fn merge_kernel_size(&self) -> u64 {
        self.merge_kernel_size
    }
    /// Patch budget before merging.
    #[must_use]
    pub fn in_patch_limit(&self) -> u64 {
        self.in_patch_limit
    }
    /// Per-side cap in patches.
    #[must_use]
    pub fn patch_limit_on_one_side(&self) -> u64 {
        self.patch_limit_on_one_side
    }
    /// Fixed reported token count, if any.
    #[must_use]
    pub fn fixed_output_tokens(&self) -> Option<u64> {
        self.fixed_output_tokens
    }
    /// Per-channel mean.
    #[must_use]
    pub fn image_mean(&self) -> [f64; 3] {
        self.image_mean
    }
    /// Per-channel std.
    #[must_use]
    pub fn image_std(&self) -> [f64; 3] {
        self.image_std
    }
    /// The background, if any.
    #[must_use]
    pub fn background(&self) -> Option<Background> {
        self.background
    }
    /// The fill stage.
    #[must_use]
    pub fn fill_stage(&self) -> FillStage {
        self.fill_stage
    }
    /// The video keys, when the config has all six.
    #[must_use]
    pub fn video(&self) -> Option<&VideoConfig> {
        self.video.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_zero_and_bad_std() {
        let e = MediaProcConfig::new(0, 2, 16384, 512, [0.5; 3], [0.5; 3]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "media_proc_cfg[\"patch_size\"] must be an integer in 1..=2**31-1, got 0"
        );
        let e = MediaProcConfig::new(14, 2, 16384, 512, [0.5; 3], [0.5, 0.0, 0.5]).unwrap_err();
        assert!(e.to_string().contains("image_std"));
        assert!(MediaProcConfig::new(14, 2, 16384, 512, [f64::NAN, 0.5, 0.5], [0.5; 3]).is_err());
    }

    #[test]
    fn pillow_compat_names() {
        for compat in PillowCompat::ALL {
            assert_eq!(PillowCompat::parse(compat.name()), Ok(compat));
        }
        assert_eq!(
            PillowCompat::ALL.map(PillowCompat::name),
            ["12", "12.2", "13"]
        );
        for other in ["auto", "12.1", "12.3", "12.20", "13.0", " 12", ""] {
            assert!(PillowCompat::parse(other).is_err(), "{other:?}");
        }
    }

    #[test]
    fn video_keys_are_checked() {
        let ok = VideoConfig::new(None, Some(8000), 2.0, None, 4, None).unwrap();
        assert_eq!(ok.in_patch_limit_video(), Some(8000));
        assert_eq!(ok.timestamp_mode(), None);
        let e = VideoConfig::new(Some(0), None, 2.0, None, 4, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "media_proc_cfg[\"in_patch_limit_each_frame\"] must be None or an integer in 1..=2**53, got 0"
        );
        let e = VideoConfig::new(None, None, f64::NAN, None, 4, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "media_proc_cfg[\"sample_fps\"] must be a number > 0, got NaN"
        );
        assert!(VideoConfig::new(None, None, 2.0, None, 0, None).is_err());
        assert!(VideoConfig::new(None, None, 0.0, None, 4, None).is_err());
        assert!(MediaProcConfig::kimi_k25().video().is_some());
        assert!(MediaProcConfig::kimi_k3().video().is_none());
    }

    #[test]
    fn chessboard_top_left_is_white() {
        let bg = Background::kimi_k3();
        assert_eq!(bg.value_at(0, 0), 255);
        assert_eq!(bg.value_at(8, 0), 180);
        assert_eq!(bg.value_at(1023, 0), 180);
        assert_eq!(bg.value_at(8, 8), 255);
        let flipped = Background {
            on_top_left: false,
            ..bg
        };
        assert_eq!(flipped.value_at(0, 0), 180);
    }
}
