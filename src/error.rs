//! The core's one error type, and the one rule for caller values in messages.
//!
//! Every user-visible failure of the core is a variant whose `Display` text is
//! the exact message a caller sees, in Rust and, through the `python` feature,
//! in Python.
//! Every caller value a message embeds goes through [`abbreviate`] first, so no
//! message is unbounded or spans lines.

use thiserror::Error;

/// Longest rendering of one caller value inside a message, in characters.
pub const MAX_VALUE_CHARS: usize = 200;

/// The one abbreviation of a caller value embedded in a message.
///
/// Control characters (newlines, tabs, ...) are escaped as Python's `repr`
/// escapes them, so a message stays on one line. A text longer than
/// [`MAX_VALUE_CHARS`] keeps its head and says how long it was, and the result
/// is never longer than [`MAX_VALUE_CHARS`] characters:
///
/// ```
/// use kimi_k3_rs::error::abbreviate;
/// assert_eq!(abbreviate("a\nb"), "a\\nb");
/// let long = abbreviate(&"x".repeat(1000));
/// assert!(long.ends_with("... (1000 characters)"));
/// assert!(long.chars().count() <= 200);
/// ```
#[must_use]
pub fn abbreviate(text: &str) -> String {
    // Escape at most what can be shown; count the rest without copying it.
    let mut escaped = String::new();
    let mut shown = 0usize;
    let mut total = 0usize;
    for c in text.chars() {
        total += 1;
        if shown > MAX_VALUE_CHARS {
            continue;
        }
        let before = escaped.len();
        match c {
            '\n' => escaped.push_str("\\n"),
            '\r' => escaped.push_str("\\r"),
            '\t' => escaped.push_str("\\t"),
            c if c.is_control() => escaped.push_str(&format!("\\x{:02x}", u32::from(c) & 0xff)),
            c => escaped.push(c),
        }
        shown += escaped[before..].chars().count();
    }
    if shown <= MAX_VALUE_CHARS {
        return escaped;
    }
    let tail = format!("... ({total} characters)");
    let head: String = escaped
        .chars()
        .take(MAX_VALUE_CHARS - tail.chars().count())
        .collect();
    head + &tail
}

/// A caller's string as Python's `repr` shows it (`'after'`), abbreviated.
#[must_use]
pub fn quoted(text: &str) -> String {
    abbreviate(&format!(
        "'{}'",
        text.replace('\\', "\\\\").replace('\'', "\\'")
    ))
}

/// `shape` as Python prints a tuple: `(2352,)`, `(2, 3)`.
#[must_use]
pub fn py_tuple(shape: &[usize]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Every failure of the preprocessing core.
///
/// Messages are stable and tested verbatim. Where the checkpoint or sglang has a
/// message for the same fault, the variant keeps it word for word:
/// `SideLimit` (`media_utils.navit_resize_image`), `Pattern`
/// (`kimi_k3_vision_processing.fill_transparent_bg_with`), `Channels` (sglang
/// `kimi_k3_image_processing.to_hwc_uint8`). The faults of Python values that
/// only the binding sees are its own error type.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KimiError {
    /// A `media_proc_cfg` value is out of range or of the wrong type (zero,
    /// negative, too large, NaN, infinite, ...). `key` is the config key, `value`
    /// the offending value, already abbreviated.
    #[error("media_proc_cfg[\"{key}\"] must be {rule}, got {value}")]
    Config {
        /// The config key, e.g. `"patch_size"`.
        key: &'static str,
        /// What the value must be, e.g. `"an integer in 1..=2**31-1"`.
        rule: &'static str,
        /// The offending value, rendered and abbreviated.
        value: String,
    },
    /// `transparent_bg_config["pattern"]` is not a pattern the checkpoint knows
    /// (its own text, `fill_transparent_bg_with`).
    #[error("Invalid background pattern: {0}")]
    Pattern(String),
    /// Compositing was asked of a config without `transparent_bg_config`.
    #[error("media_proc_cfg has no transparent_bg_config to composite onto")]
    NoBackground,
    /// An option of a call (`pillow_compat`, `dtype`, `num_threads`,
    /// `max_image_pixels`, ...) is out of range.
    #[error("{name} must be {rule}, got {value}")]
    Option {
        /// The option, e.g. `"num_threads"`.
        name: &'static str,
        /// What the value must be.
        rule: &'static str,
        /// The offending value, rendered and abbreviated.
        value: String,
    },
    /// The reference's side-limit assertion (reachable with an odd
    /// `patch_limit_on_one_side`), same text as the reference.
    #[error("token_{side} {tokens} * merge_kernel_size {merge_kernel_size} > patch_limit_on_one_side {patch_limit_on_one_side}")]
    SideLimit {
        /// `"height"` or `"width"`.
        side: &'static str,
        /// The token count along that side (padded size / (patch_size * merge_kernel_size)).
        tokens: u64,
        /// `merge_kernel_size` of the config.
        merge_kernel_size: u64,
        /// `patch_limit_on_one_side` of the config.
        patch_limit_on_one_side: u64,
    },
    /// An image dimension is zero or negative (the reference divides by it).
    #[error("image width and height must be positive, got {width}x{height}")]
    EmptyImage {
        /// Width in pixels.
        width: i128,
        /// Height in pixels.
        height: i128,
    },
    /// An image side is larger than the sizing accepts (2^53 pixels: above it
    /// `float(width)` is not exact in the reference).
    #[error("image width and height must be at most 2**53 pixels, got {width}x{height}")]
    SideTooLarge {
        /// Width in pixels.
        width: i128,
        /// Height in pixels.
        height: i128,
    },
    /// The pixel buffer does not hold `height * width * channels` bytes.
    #[error("source buffer holds {len} bytes, expected {height}x{width}x{channels} = {expected}")]
    BufferSize {
        /// Bytes given.
        len: usize,
        /// Height in pixels.
        height: usize,
        /// Width in pixels.
        width: usize,
        /// Channels per pixel.
        channels: usize,
        /// Bytes expected.
        expected: usize,
    },
    /// A pixel stride the pipeline does not read: it takes packed pixels
    /// (stride = channels) and RGB in 4-byte pixels (stride 4 for 3 channels).
    #[error("pixel stride {pixel_stride} is not supported for {channels} channels (it must equal the channel count, or be 4 for RGB)")]
    PixelStride {
        /// Channels per pixel.
        channels: usize,
        /// Bytes per pixel asked for.
        pixel_stride: usize,
    },
    /// The channel count is not 1 (L), 2 (LA), 3 (RGB) or 4 (RGBA) (sglang's text).
    #[error("Unsupported Kimi-K3 image channel count: {0}")]
    Channels(usize),
    /// A video chunk's frame count is below 1 (the checkpoint reads `video_chunk[0]`).
    #[error("a video_chunk must have at least 1 frame, got {frames}")]
    ChunkFrames {
        /// The frame count given.
        frames: i128,
    },
    /// A resize target's padding is not the config's for its size.
    #[error("resize target {new_width}x{new_height} needs padding {expected_width}x{expected_height}, got {pad_width}x{pad_height}")]
    TargetPadding {
        /// Target width.
        new_width: u64,
        /// Target height.
        new_height: u64,
        /// Padding given, right.
        pad_width: u64,
        /// Padding given, bottom.
        pad_height: u64,
        /// Padding the config gives, right.
        expected_width: u64,
        /// Padding the config gives, bottom.
        expected_height: u64,
    },
    /// A `video_chunk` item or count for a config without the six K2.5 video keys.
    #[error("media_proc_cfg has no video keys: video_chunk items need in_patch_limit_each_frame, in_patch_limit_video, sample_fps, max_num_frames_each_video, temporal_merge_kernel_size and timestamp_mode (the Kimi-K2.5 config has them; Kimi-K3's does not)")]
    NoVideoConfig,
    /// A pre-resized image does not have the size the sizing rule asks for.
    #[error("pre-resized image is {width}x{height}, expected {new_width}x{new_height}")]
    PreResizedSize {
        /// Width given.
        width: u64,
        /// Height given.
        height: u64,
        /// Width the sizing rule gives.
        new_width: u64,
        /// Height the sizing rule gives.
        new_height: u64,
    },
    /// The own-mode resize only down-scales (so every allocation is bounded by
    /// the input's size).
    #[error("resize_bicubic only down-scales: {width}x{height} -> {new_width}x{new_height}")]
    Upscale {
        /// Width given.
        width: u64,
        /// Height given.
        height: u64,
        /// Width asked for.
        new_width: u64,
        /// Height asked for.
        new_height: u64,
    },
    /// The output would not fit in memory addressing (a size product overflowed).
    #[error("output of {what} overflows the addressable size")]
    Overflow {
        /// Which quantity overflowed.
        what: &'static str,
    },
    /// The thread pool could not be started (the OS refused threads).
    #[error("cannot start the kimi_k3_rs thread pool: {0}")]
    Threads(String),
    /// The output buffer cannot be allocated.
    #[error("cannot allocate pixel_values of shape {shape}: {reason}")]
    Allocation {
        /// The shape asked for, e.g. `[4, 3, 14, 14]`.
        shape: String,
        /// Why (the allocator's words).
        reason: String,
    },
    /// A caller's `out=` array is not 4-D (numpy's shape given as a Python tuple).
    #[error("out must be a 4-D {dtype} numpy array of shape {expected}, got shape {got}")]
    OutRank {
        /// The dtype asked for.
        dtype: &'static str,
        /// The shape expected, e.g. `[4, 3, 14, 14]`.
        expected: String,
        /// The shape given, e.g. `(2352,)`.
        got: String,
    },
    /// A caller's `out=` array has the wrong shape.
    #[error("out has shape {got}, expected {expected}")]
    OutShape {
        /// The shape given, e.g. `[2, 3, 14, 14]`.
        got: String,
        /// The shape expected.
        expected: String,
    },
    /// A caller's `out=` array has the wrong element type for the dtype asked for.
    #[error("out has dtype {got}, expected {expected} for dtype='{dtype}'")]
    OutDtype {
        /// The buffer's element type: its array's dtype name from the binding
        /// (abbreviated), `f32` or `u16` from Rust.
        got: String,
        /// The accepted element types, e.g. `"u16"`.
        expected: &'static str,
        /// The dtype asked for.
        dtype: &'static str,
    },
    /// A caller's `out=` array shares memory with an input image.
    #[error("out overlaps image {index}")]
    OutOverlap {
        /// The image's position in the batch.
        index: usize,
    },
    /// An encoded file of a natively decoded format is corrupt or truncated.
    #[error("cannot decode {format}: {detail}")]
    Decode {
        /// `"JPEG"` or `"PNG"`.
        format: &'static str,
        /// What the decoder said (abbreviated).
        detail: String,
    },
    /// A progressive JPEG has more scans than the limit (a CPU bomb).
    #[error("progressive JPEG has {scans} or more scans, over the limit of {limit}")]
    TooManyScans {
        /// Scans seen when the limit was hit.
        scans: usize,
        /// The limit ([`crate::decode::MAX_SCANS`]).
        limit: usize,
    },
    /// A JPEG has more 8x8 blocks than its data can code (a decompression bomb).
    #[error(
        "JPEG of {width}x{height} has {blocks} blocks of 8x8 pixels in a file of {bytes} bytes: \
         a complete JPEG codes every block in at least one bit, so most of its data is missing \
         (a decompression bomb?)"
    )]
    JpegDataMissing {
        /// Width in pixels.
        width: usize,
        /// Height in pixels.
        height: usize,
        /// Blocks of all components.
        blocks: u64,
        /// The file's size.
        bytes: usize,
    },
    /// A JPEG's scans pass over more blocks than its size allows (a CPU bomb).
    #[error(
        "JPEG of {width}x{height} makes {passes} block passes in its {scans} scans, over the \
         limit of {limit} for a file of {bytes} bytes (a CPU bomb?)"
    )]
    JpegScanWork {
        /// Width in pixels.
        width: usize,
        /// Height in pixels.
        height: usize,
        /// Scans of the file.
        scans: usize,
        /// Blocks the scans pass over, summed.
        passes: u64,
        /// The limit for the file's size ([`crate::decode::JPEG_PASSES`],
        /// [`crate::decode::JPEG_PASSES_PER_BYTE`]).
        limit: u64,
        /// The file's size.
        bytes: usize,
    },
    /// The decoded pixels of an encoded image (or a chunk of their rows)
    /// cannot be allocated.
    #[error("cannot allocate the decoded {width}x{height}x{channels} image: {reason}")]
    DecodeAllocation {
        /// Width in pixels.
        width: usize,
        /// Height in pixels.
        height: usize,
        /// Bytes per pixel.
        channels: usize,
        /// Why (the allocator's words).
        reason: String,
    },
    /// A working buffer of an image (a resize result, a band's rows)
    /// cannot be allocated.
    #[error("cannot allocate {bytes} bytes of working memory: out of memory")]
    ScratchAllocation {
        /// Bytes asked for.
        bytes: usize,
    },
    /// The rows of an image read band by band ([`crate::image::ImageView`]'s
    /// row source, a PIL image in several blocks) cannot be read.
    #[error("cannot read the image's rows: {reason}")]
    ImageRows {
        /// Why (the source's words, abbreviated).
        reason: String,
    },
    /// An error of one image of a batch: `index` is its position in the batch
    /// given to the pipeline.
    #[error("image {index}: {error}")]
    AtImage {
        /// The image's position in the batch.
        index: usize,
        /// What went wrong with it.
        error: Box<KimiError>,
    },
}

impl KimiError {
    /// A [`KimiError::Config`] for `key`, abbreviating the rendered `value`.
    #[must_use]
    pub fn config(key: &'static str, rule: &'static str, value: &str) -> Self {
        Self::Config {
            key,
            rule,
            value: abbreviate(value),
        }
    }

    /// A [`KimiError::Option`] for `name`, abbreviating the rendered `value`.
    #[must_use]
    pub fn option(name: &'static str, rule: &'static str, value: &str) -> Self {
        Self::Option {
            name,
            rule,
            value: abbreviate(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abbreviate_bounds_and_escapes() {
        assert_eq!(abbreviate("plain"), "plain");
        assert_eq!(abbreviate("a\r\n\tb\u{1}"), "a\\r\\n\\tb\\x01");
        let text = "é".repeat(500);
        let short = abbreviate(&text);
        assert_eq!(short.chars().count(), MAX_VALUE_CHARS);
        assert!(short.starts_with("éé"));
        assert!(short.ends_with("... (500 characters)"));
        assert_eq!(abbreviate(&"y".repeat(200)), "y".repeat(200));
    }

    #[test]
    fn quoted_is_python_repr_like() {
        assert_eq!(quoted("after"), "'after'");
        assert_eq!(quoted("it's"), "'it\\'s'");
        assert!(quoted(&"z".repeat(300)).chars().count() <= MAX_VALUE_CHARS);
    }

    #[test]
    fn messages() {
        assert_eq!(
            KimiError::config("patch_size", "an integer in 1..=2**31-1", "0").to_string(),
            "media_proc_cfg[\"patch_size\"] must be an integer in 1..=2**31-1, got 0"
        );
        assert_eq!(
            KimiError::Pattern("plaid".into()).to_string(),
            "Invalid background pattern: plaid"
        );
        assert_eq!(
            KimiError::option("num_threads", "an integer in 1..=1024", "0").to_string(),
            "num_threads must be an integer in 1..=1024, got 0"
        );
    }
}
