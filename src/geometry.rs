//! NaViT sizing: how large an image becomes and how much padding it gets.
//!
//! Reproduces `media_utils.py: navit_resize_image` of the Kimi-K2.5 / Kimi-K3
//! checkpoints (and sglang's `navit_resize_config`), including Python's float
//! semantics: `max(1.0, width // patch_size)`, int/int true division rounded
//! correctly, `int()` truncation.

use crate::config::MediaProcConfig;
use crate::error::KimiError;

/// Largest accepted image side in pixels (2^53): above it `float(width)` is not exact.
pub const MAX_SIDE: u64 = 1 << 53;

/// The result of the sizing rule for one image (reference dict keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResizeConfig {
    /// LLM tokens for the image: `fixed_output_tokens` when set, else
    /// `(padded_h / F) * (padded_w / F)` with `F = patch_size * merge_kernel_size`.
    pub num_tokens: u64,
    /// Width after the resize, pixels (before padding).
    pub new_width: u64,
    /// Height after the resize, pixels (before padding).
    pub new_height: u64,
    /// Zero columns added on the right, pixels.
    pub pad_width: u64,
    /// Zero rows added at the bottom, pixels.
    pub pad_height: u64,
}

impl ResizeConfig {
    /// `grid_thw = (1, (new_height + pad_height) / patch_size, (new_width + pad_width) / patch_size)`
    /// (sglang `_grid_thw_from_resize_config`).
    #[must_use]
    pub fn grid_thw(&self, patch_size: u64) -> [u64; 3] {
        [
            1,
            (self.new_height + self.pad_height) / patch_size,
            (self.new_width + self.pad_width) / patch_size,
        ]
    }

    /// Number of patches (`pixel_values` rows) of the image: `gh * gw`.
    ///
    /// # Errors
    /// `KimiError::Overflow` when the product does not fit in `usize`.
    pub fn num_patches(&self, patch_size: u64) -> Result<usize, KimiError> {
        let [_, gh, gw] = self.grid_thw(patch_size);
        gh.checked_mul(gw)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or(KimiError::Overflow { what: "patches" })
    }
}

fn bit_len(v: u128) -> u32 {
    128 - v.leading_zeros()
}

/// `floor(n * 2^k / d)` and whether it left a remainder, for `n < 2^64`,
/// `0 < d < 2^127`: bit-serial long division, for divisors too large for the
/// shifted numerator to fit in `u128`.
fn long_division(n: u128, k: u32, d: u128) -> (u128, bool) {
    let (mut q, mut r) = (0u128, 0u128);
    for i in (0..bit_len(n) + k).rev() {
        let bit = if i >= k { (n >> (i - k)) & 1 } else { 0 };
        r = (r << 1) | bit;
        q <<= 1;
        if r >= d {
            r -= d;
            q |= 1;
        }
    }
    (q, r != 0)
}

/// `n / d` rounded correctly (half to even) to `f64`, as Python's int/int true
/// division does. Requires `0 < n < 2^64` and `0 < d < 2^127`.
fn div_correctly_rounded(n: u128, d: u128) -> f64 {
    debug_assert!(n > 0 && d > 0 && n < (1 << 64) && d < (1 << 127));
    // Scale the numerator so that the integer quotient has at least 55 bits.
    let k = (55 + bit_len(d)).saturating_sub(bit_len(n));
    let (q, sticky) = if bit_len(n) + k <= 128 {
        let num = n << k;
        (num / d, !num.is_multiple_of(d))
    } else {
        long_division(n, k, d)
    };
    let drop = bit_len(q) - 53;
    let mut mant = q >> drop;
    let rest = q & ((1u128 << drop) - 1);
    let half = 1u128 << (drop - 1);
    if rest > half || (rest == half && (sticky || mant & 1 == 1)) {
        mant += 1;
    }
    // value = mant * 2^(drop - k); the exponent stays in the normal range for
    // the operands accepted here (|exponent| < 300).
    let exp = i64::from(drop) - i64::from(k);
    #[allow(clippy::cast_sign_loss, clippy::cast_precision_loss)]
    let pow2 = f64::from_bits(((exp + 1023) as u64) << 52);
    #[allow(clippy::cast_precision_loss)]
    let m = mant as f64; // mant <= 2^53: exact
    m * pow2
}

/// Compute the resize and padding of one `width` x `height` image.
///
/// Source: `media_utils.navit_resize_image` (Kimi-K2.5 / Kimi-K3 checkpoints).
///
/// # Arguments
/// * `width`, `height` - original image size in pixels (`PIL.Image.size`, no EXIF rotation).
/// * `cfg` - the validated `media_proc_cfg`.
///
/// # Errors
/// * `KimiError::EmptyImage` when a side is 0 (the reference divides by it).
/// * `KimiError::SideTooLarge` when a side exceeds [`MAX_SIDE`].
/// * `KimiError::SideLimit` when the reference's side-limit assertion fails
///   (only reachable when `patch_limit_on_one_side` is not a multiple of `merge_kernel_size`).
/// * `KimiError::Overflow` when the token count overflows `u64`.
pub fn navit_resize_config(
    width: u64,
    height: u64,
    cfg: &MediaProcConfig,
) -> Result<ResizeConfig, KimiError> {
    check_sides(width, height)?;
    resize_with_limit(width, height, cfg.in_patch_limit(), cfg)
}

/// A zero side (`EmptyImage`) or one above [`MAX_SIDE`] (`SideTooLarge`).
fn check_sides(width: u64, height: u64) -> Result<(), KimiError> {
    if width == 0 || height == 0 {
        return Err(KimiError::EmptyImage {
            width: width.into(),
            height: height.into(),
        });
    }
    if width > MAX_SIDE || height > MAX_SIDE {
        return Err(KimiError::SideTooLarge {
            width: width.into(),
            height: height.into(),
        });
    }
    Ok(())
}

/// `navit_resize_image` with the patch budget `limit` (`in_patch_limit` for an
/// image, the per-frame limit for a video chunk); sides already checked.
fn resize_with_limit(
    width: u64,
    height: u64,
    limit: u64,
    cfg: &MediaProcConfig,
) -> Result<ResizeConfig, KimiError> {
    let ps = cfg.patch_size();
    let m = cfg.merge_kernel_size();
    let side = cfg.patch_limit_on_one_side();
    // max(1.0, width // ps): the value is max(1, quotient); the product of the two
    // is exact (as Python ints, or as a float of an int < 2^53 when one side is 1.0).
    let pw = u128::from((width / ps).max(1));
    let ph = u128::from((height / ps).max(1));
    // in_patch_limit / (pw * ph); a limit of 0 (a small in_patch_limit_video) gives 0.0.
    let s1 = if limit == 0 {
        0.0
    } else {
        div_correctly_rounded(u128::from(limit), pw * ph).sqrt()
    };
    // patch_limit_on_one_side * patch_size is an exact Python int (< 2^62).
    let side_px = side * ps;
    let s2 = div_correctly_rounded(u128::from(side_px), u128::from(width));
    let s3 = div_correctly_rounded(u128::from(side_px), u128::from(height));
    let scale = 1.0f64.min(s1).min(s2).min(s3);
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let trunc = |v: u64| -> u64 { (v as f64 * scale) as u64 }; // v < 2^53: exact as f64
    let new_width = trunc(width).max(1).min(side_px);
    let new_height = trunc(height).max(1).min(side_px);
    let factor = m * ps;
    let pad_height = (factor - new_height % factor) % factor;
    let pad_width = (factor - new_width % factor) % factor;
    let num_tokens = if let Some(t) = cfg.fixed_output_tokens() {
        t
    } else {
        let token_height = (new_height + pad_height) / factor;
        let token_width = (new_width + pad_width) / factor;
        for (name, tokens) in [("height", token_height), ("width", token_width)] {
            if u128::from(tokens) * u128::from(m) > u128::from(side) {
                return Err(KimiError::SideLimit {
                    side: name,
                    tokens,
                    merge_kernel_size: m,
                    patch_limit_on_one_side: side,
                });
            }
        }
        token_height
            .checked_mul(token_width)
            .ok_or(KimiError::Overflow { what: "num_tokens" })?
    };
    Ok(ResizeConfig {
        num_tokens,
        new_width,
        new_height,
        pad_width,
        pad_height,
    })
}

/// The per-frame patch budget of a video chunk of `num_frames` frames.
///
/// Source: `kimi_k25_vision_processing.py: KimiK25VisionProcessor.get_resize_config`
/// (`in_patch_limit_each_frame`, or `in_patch_limit` when that is `None`) and
/// `media_utils.py: navit_resize_video`: with `in_patch_limit_video` set,
/// `min(round(in_patch_limit_video / num_frames), each_frame)` — Python's
/// correctly rounded int/int division, then `round` half to even.
///
/// # Errors
/// `KimiError::NoVideoConfig` when the config has no video keys;
/// `KimiError::ChunkFrames` when `num_frames` is 0.
pub fn video_chunk_patch_limit(num_frames: u64, cfg: &MediaProcConfig) -> Result<u64, KimiError> {
    let video = cfg.video().ok_or(KimiError::NoVideoConfig)?;
    if num_frames == 0 {
        return Err(KimiError::ChunkFrames { frames: 0 });
    }
    let each = video
        .in_patch_limit_each_frame()
        .unwrap_or_else(|| cfg.in_patch_limit());
    let Some(total) = video.in_patch_limit_video() else {
        return Ok(each);
    };
    // total <= 2^53, so the quotient and its rounding are exact integers < 2^53.
    let quotient = div_correctly_rounded(u128::from(total), u128::from(num_frames));
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let rounded = quotient.round_ties_even() as u64;
    Ok(rounded.min(each))
}

/// Compute the resize and padding of a video chunk whose frame 0 is
/// `width` x `height`, with `num_frames` frames; every frame is resized to it.
///
/// Source: `kimi_k25_vision_processing.py: KimiK25VisionProcessor.get_resize_config`
/// for `{"type": "video_chunk"}` and `media_utils.py: navit_resize_video` (with
/// `avg_fps = 1.0`, `sample_fps = inf`: `sampled_nframes = num_frames`), which
/// ends in the image formula of [`navit_resize_config`] with the per-frame budget
/// of [`video_chunk_patch_limit`]. `num_tokens` is the chunk's whole count
/// (`(h/2)*(w/2)` whatever the frame count), or `fixed_output_tokens`.
///
/// # Errors
/// As [`video_chunk_patch_limit`] and [`navit_resize_config`].
pub fn navit_resize_video_chunk(
    width: u64,
    height: u64,
    num_frames: u64,
    cfg: &MediaProcConfig,
) -> Result<ResizeConfig, KimiError> {
    let limit = video_chunk_patch_limit(num_frames, cfg)?;
    check_sides(width, height)?;
    resize_with_limit(width, height, limit, cfg)
}

/// The LLM token count of every `[width, height, num_frames]` row (int64, as
/// schedulers hold them): `num_tokens` of [`navit_resize_video_chunk`].
///
/// # Errors
/// `KimiError::NoVideoConfig`; `KimiError::ChunkFrames` for a frame count
/// below 1; as [`count_image_tokens`] for the sizes.
pub fn count_video_chunk_tokens(
    sizes: &[[i64; 3]],
    cfg: &MediaProcConfig,
) -> Result<Vec<i64>, KimiError> {
    cfg.video().ok_or(KimiError::NoVideoConfig)?;
    sizes
        .iter()
        .map(|&[w, h, t]| {
            let (width, height) = checked_size(w.into(), h.into())?;
            let frames = u64::try_from(t)
                .ok()
                .filter(|&t| t > 0)
                .ok_or(KimiError::ChunkFrames { frames: t.into() })?;
            let r = navit_resize_video_chunk(width, height, frames, cfg)?;
            i64::try_from(r.num_tokens).map_err(|_| KimiError::Overflow { what: "num_tokens" })
        })
        .collect()
}

/// A caller's signed `(width, height)` as the sizing takes it.
///
/// # Errors
/// `KimiError::EmptyImage` for a side below 1, `KimiError::SideTooLarge` for
/// one above [`MAX_SIDE`].
pub fn checked_size(width: i128, height: i128) -> Result<(u64, u64), KimiError> {
    if width < 1 || height < 1 {
        return Err(KimiError::EmptyImage { width, height });
    }
    match (u64::try_from(width), u64::try_from(height)) {
        (Ok(w), Ok(h)) if w <= MAX_SIDE && h <= MAX_SIDE => Ok((w, h)),
        _ => Err(KimiError::SideTooLarge { width, height }),
    }
}

/// One sized item: its resize config and its `grid_thw` (`[t, gh, gw]`).
pub type SizedItem = (ResizeConfig, [u64; 3]);

/// The sizing and `grid_thw` of every item of a request, before any pixel
/// work: `(width, height, frames)` per item, `frames` 0 for an image
/// ([`navit_resize_config`], `t = 1`) and the frame count for a K2.5 video
/// chunk sized from its frame 0 ([`navit_resize_video_chunk`], `t = frames`).
///
/// Source: sglang `kimi_k3_image_processing.prepare_kimi_k3_encoder_inputs`, which
/// sizes every item up front (its `_grid_thw_from_resize_config`).
///
/// # Errors
/// `(index, error)` of the first item that fails: any error of the two sizings.
pub fn size_items(
    items: &[(u64, u64, u64)],
    cfg: &MediaProcConfig,
) -> Result<Vec<SizedItem>, (usize, KimiError)> {
    let ps = cfg.patch_size();
    items
        .iter()
        .enumerate()
        .map(|(k, &(w, h, frames))| {
            let sized = if frames == 0 {
                navit_resize_config(w, h, cfg)
            } else {
                navit_resize_video_chunk(w, h, frames, cfg)
            };
            sized
                .map(|r| {
                    let [_, gh, gw] = r.grid_thw(ps);
                    (r, [frames.max(1), gh, gw])
                })
                .map_err(|e| (k, e))
        })
        .collect()
}

/// The LLM token count of every `[width, height]` row, as signed integers (the
/// int64 arrays schedulers hold): `num_tokens` of [`navit_resize_config`].
///
/// # Errors
/// `KimiError::EmptyImage` for a side that is 0 or negative, and any error of
/// [`navit_resize_config`]; `KimiError::Overflow` for a count above `i64::MAX`.
pub fn count_image_tokens(
    sizes: &[[i64; 2]],
    cfg: &MediaProcConfig,
) -> Result<Vec<i64>, KimiError> {
    sizes
        .iter()
        .map(|&[w, h]| {
            let (width, height) = checked_size(w.into(), h.into())?;
            let r = navit_resize_config(width, height, cfg)?;
            i64::try_from(r.num_tokens).map_err(|_| KimiError::Overflow { what: "num_tokens" })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(limit: u64) -> MediaProcConfig {
        MediaProcConfig::new(14, 2, limit, 512, [0.5; 3], [0.5; 3]).unwrap()
    }

    /// Checks `(new_width, new_height, pad_width, pad_height, num_tokens)` of `w x h`.
    fn check(w: u64, h: u64, limit: u64, expected: (u64, u64, u64, u64, u64)) {
        let r = navit_resize_config(w, h, &cfg(limit)).unwrap();
        let got = (
            r.new_width,
            r.new_height,
            r.pad_width,
            r.pad_height,
            r.num_tokens,
        );
        assert_eq!(got, expected, "{w}x{h} limit {limit}");
    }

    #[test]
    fn spec_reference_vectors() {
        // Reference vectors of `media_utils.py: navit_resize_image`
        // (checked against the HF expression): (W, H) -> K2.5, K3.
        check(640, 480, 16384, (640, 480, 4, 24, 414));
        check(1920, 1080, 16384, (1920, 1080, 12, 12, 2691));
        check(1024, 1024, 16384, (1024, 1024, 12, 12, 1369));
        check(4000, 3000, 16384, (2073, 1554, 27, 14, 4200));
        check(4000, 3000, 65536, (4000, 3000, 4, 24, 15444));
        check(3840, 2160, 16384, (2392, 1345, 16, 27, 4214));
        check(3840, 2160, 65536, (3840, 2160, 24, 24, 10764));
        check(9000, 4000, 16384, (2693, 1196, 23, 8, 4171));
        check(9000, 4000, 65536, (5386, 2393, 18, 15, 16598));
        check(10000, 10000, 16384, (1792, 1792, 0, 0, 4096));
        check(10000, 10000, 65536, (3585, 3585, 27, 27, 16641));
        check(2000, 20000, 16384, (568, 5685, 20, 27, 4284));
        check(2000, 20000, 65536, (716, 7168, 12, 0, 6656));
        check(8366, 10, 16384, (7167, 8, 1, 20, 256));
        check(10000, 10, 65536, (7168, 7, 0, 21, 256));
        check(3, 5, 16384, (3, 5, 25, 23, 1));
        check(29, 29, 65536, (29, 29, 27, 27, 4));
    }

    #[test]
    fn side_limit_assertion_text() {
        let c = MediaProcConfig::new(14, 2, 16384, 511, [0.5; 3], [0.5; 3]).unwrap();
        let e = navit_resize_config(10000, 100, &c).unwrap_err();
        assert_eq!(
            e.to_string(),
            "token_width 256 * merge_kernel_size 2 > patch_limit_on_one_side 511"
        );
    }

    #[test]
    fn correctly_rounded_division_matches_python() {
        // Python: 16384 / (84048973 * 135578435) == 1.4377948102317078e-12
        let p = 84_048_973u128 * 135_578_435u128;
        assert_eq!(div_correctly_rounded(16384, p), 1.437_794_810_231_707_8e-12);
        // Exact cases and a halfway case.
        assert_eq!(div_correctly_rounded(1, 4), 0.25);
        assert_eq!(div_correctly_rounded(7168, 8366), 7168.0 / 8366.0);
        assert_eq!(
            div_correctly_rounded((1 << 53) + 1, 1),
            9_007_199_254_740_992.0
        );
        assert_eq!(
            div_correctly_rounded((1 << 53) + 3, 1),
            9_007_199_254_740_996.0
        );
    }

    #[test]
    fn huge_divisors_round_like_python() {
        // Python: 16384 / (2**49 * 2**49) == 5.169878828456423e-26 (2**-84: exact),
        // and 3 / (2**100 + 1) == 2.3665827156630354e-30.
        assert_eq!(
            div_correctly_rounded(16384, 1 << 98),
            5.169_878_828_456_423e-26
        );
        assert_eq!(
            div_correctly_rounded(3, (1 << 100) + 1),
            2.366_582_715_663_035_4e-30
        );
        // The long division agrees with u128 division where both apply.
        let d = 84_048_973u128 * 135_578_435u128;
        let k = 55 + bit_len(d) - bit_len(16384);
        assert_eq!(
            long_division(16384, k, d),
            ((16384u128 << k) / d, !(16384u128 << k).is_multiple_of(d))
        );
    }

    #[test]
    fn fixed_output_tokens_only_changes_the_count() {
        let c = cfg(16384).with_fixed_output_tokens(Some(64)).unwrap();
        let r = navit_resize_config(1024, 768, &c).unwrap();
        assert_eq!(r.num_tokens, 64);
        assert_eq!(r.grid_thw(14), [1, 56, 74]);
    }

    fn video_cfg(total: Option<u64>) -> MediaProcConfig {
        let video = crate::config::VideoConfig::new(Some(4096), total, 2.0, None, 4, None).unwrap();
        MediaProcConfig::kimi_k25().with_video(Some(video))
    }

    fn chunk(w: u64, h: u64, t: u64, total: Option<u64>) -> (u64, u64, u64, u64, u64) {
        let r = navit_resize_video_chunk(w, h, t, &video_cfg(total)).unwrap();
        (
            r.new_width,
            r.new_height,
            r.pad_width,
            r.pad_height,
            r.num_tokens,
        )
    }

    #[test]
    fn video_chunk_sizing_vectors() {
        // video-spec §5 and §9.4 (K2.5: 4096 patches a frame).
        assert_eq!(chunk(1280, 720, 4, None), (1202, 676, 2, 24, 1075));
        assert_eq!(chunk(1280, 720, 1, None), (1202, 676, 2, 24, 1075));
        assert_eq!(chunk(1920, 1080, 4, None).4, 1032);
        assert_eq!(chunk(1920, 1080, 4, None).0, 1196);
        assert_eq!(chunk(3840, 2160, 3, None).4, 1032);
        assert_eq!(chunk(1280, 720, 4, Some(8000)), (840, 472, 0, 4, 510));
        assert_eq!(chunk(1280, 720, 3, Some(8000)).0, 970);
        assert_eq!(chunk(1280, 720, 3, Some(8000)).4, 700);
        assert_eq!(chunk(1280, 720, 1, Some(8000)).4, 1075);
        // in_patch_limit_each_frame None: in_patch_limit applies (as an image).
        let video = crate::config::VideoConfig::new(None, None, 2.0, None, 4, None).unwrap();
        let c = MediaProcConfig::kimi_k25().with_video(Some(video));
        assert_eq!(
            navit_resize_video_chunk(1280, 720, 4, &c).unwrap(),
            navit_resize_config(1280, 720, &c).unwrap()
        );
    }

    #[test]
    fn video_chunk_limit_rounds_half_to_even() {
        let limit = |total, t| video_chunk_patch_limit(t, &video_cfg(Some(total))).unwrap();
        assert_eq!(limit(10, 4), 2); // 2.5 -> 2
        assert_eq!(limit(6, 4), 2); // 1.5 -> 2
        assert_eq!(limit(14, 4), 4); // 3.5 -> 4
        assert_eq!(limit(8000, 3), 2667);
        assert_eq!(limit(1, 4), 0); // 0.25 -> 0: the smallest size
        assert_eq!(limit(100_000, 1), 4096); // capped by each frame
        assert_eq!(chunk(1280, 720, 4, Some(1)), (1, 1, 27, 27, 1));
    }

    #[test]
    fn video_chunk_errors() {
        assert_eq!(
            navit_resize_video_chunk(10, 10, 1, &MediaProcConfig::kimi_k3()),
            Err(KimiError::NoVideoConfig)
        );
        assert_eq!(
            navit_resize_video_chunk(10, 10, 0, &video_cfg(None)),
            Err(KimiError::ChunkFrames { frames: 0 })
        );
        let counts =
            count_video_chunk_tokens(&[[1280, 720, 4], [1280, 720, 1]], &video_cfg(Some(8000)));
        assert_eq!(counts, Ok(vec![510, 1075]));
        assert_eq!(
            count_video_chunk_tokens(&[[1280, 720, -1]], &video_cfg(None)),
            Err(KimiError::ChunkFrames { frames: -1 })
        );
        assert!(matches!(
            count_video_chunk_tokens(&[[0, 720, 1]], &video_cfg(None)),
            Err(KimiError::EmptyImage { .. })
        ));
    }

    #[test]
    fn zero_size_is_an_error() {
        assert!(matches!(
            navit_resize_config(0, 5, &cfg(16384)),
            Err(KimiError::EmptyImage { .. })
        ));
    }
}
