#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod composite;
pub mod config;
pub mod error;
pub mod geometry;
pub mod normalize;
mod par;
pub mod pipeline;
pub mod resize;

#[cfg(feature = "python")]
mod python;

pub use config::{Background, BackgroundPattern, FillStage, MediaProcConfig, PillowCompat};
pub use error::KimiError;
pub use geometry::{navit_resize_config, ResizeConfig};
pub use pipeline::{
    plan_batch, preprocess_batch, preprocess_image, run_batch, BatchOutput, BatchPlan, ImageView,
};
