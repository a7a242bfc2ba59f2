//! The crate's one error type. Every user-visible failure is a variant whose
//! `Display` text is the exact message a caller sees (in Rust and, through the
//! `python` feature, in Python).

use thiserror::Error;

/// Every failure of the preprocessing core.
///
/// Messages are stable and tested verbatim. `SideLimit` reproduces the
/// reference's `AssertionError` text from `media_utils.navit_resize_image`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KimiError {
    /// A `media_proc_cfg` value is out of range (zero, negative, too large,
    /// NaN, infinite, ...). `key` is the config key, `value` the offending value.
    #[error("media_proc_cfg[{key:?}] must be {rule}, got {value}")]
    Config {
        /// The config key, e.g. `"patch_size"`.
        key: &'static str,
        /// What the value must be, e.g. `"a positive integer"`.
        rule: &'static str,
        /// The offending value, formatted.
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
    /// An image dimension is zero (the reference divides by it).
    #[error("image width and height must be positive, got {width}x{height}")]
    EmptyImage {
        /// Width in pixels.
        width: u64,
        /// Height in pixels.
        height: u64,
    },
    /// An image side is larger than the sizing accepts (2^53 pixels: above it
    /// `float(width)` is not exact in the reference).
    #[error("image width and height must be at most 2**53 pixels, got {width}x{height}")]
    SideTooLarge {
        /// Width in pixels.
        width: u64,
        /// Height in pixels.
        height: u64,
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
    /// The channel count is not 1 (L), 2 (LA), 3 (RGB) or 4 (RGBA).
    #[error("Unsupported Kimi-K3 image channel count: {0}")]
    Channels(usize),
    /// A pre-resized image does not have the size the sizing rule asks for.
    #[error("pre-resized image is {width}x{height}, expected {new_width}x{new_height}")]
    PreResizedSize {
        /// Width given.
        width: usize,
        /// Height given.
        height: usize,
        /// Width the sizing rule gives.
        new_width: usize,
        /// Height the sizing rule gives.
        new_height: usize,
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
    #[error("cannot allocate pixel_values: {values} values")]
    Allocation {
        /// Values asked for.
        values: usize,
    },
    /// A caller-provided output slice has the wrong length.
    #[error("output buffer holds {len} values, expected {expected}")]
    OutputSize {
        /// Values given.
        len: usize,
        /// Values expected.
        expected: usize,
    },
}
