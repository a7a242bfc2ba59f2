#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod buffers;
pub mod composite;
pub mod config;
pub mod decode;
pub mod error;
pub mod geometry;
pub mod image;
pub mod normalize;
pub mod options;
mod par;
pub mod pipeline;
pub mod resize;
pub mod simd;

#[cfg(feature = "python")]
mod python;

pub use buffers::{set_poison, POISON_BYTE};
pub use config::{
    Background, BackgroundPattern, FillStage, MediaProcConfig, PillowCompat, VideoConfig,
};
pub use error::KimiError;
pub use geometry::{
    count_image_tokens, count_video_chunk_tokens, navit_resize_config, navit_resize_video_chunk,
    size_items, ResizeConfig,
};
pub use image::{ImageView, RowSource};
pub use options::{Options, OutputDtype};
pub use pipeline::{
    item_views, plan_batch, preprocess_batch, preprocess_image, preprocess_into, run_batch,
    BatchItem, BatchOutput, BatchPlan, OutBuffer, Output, PixelValues, Preprocessed,
};

/// Deterministic test inputs, shared by the unit tests, the integration tests
/// and the benches (enabled by the `for_testing` feature outside `cfg(test)`).
#[cfg(any(test, feature = "for_testing"))]
pub mod test_util {
    /// `n` pseudo-random bytes (xorshift64), the same for the same `seed`.
    #[must_use]
    pub fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state.to_le_bytes()[7]
            })
            .collect()
    }
}
