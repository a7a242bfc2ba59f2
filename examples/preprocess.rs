//! Preprocess an image buffer with the pure-Rust API (no Python).
//!
//! `cargo run --release --example preprocess [WIDTH HEIGHT]` builds a synthetic
//! RGB gradient of that size (default 1920x1080), runs the published Kimi-K3
//! and Kimi-K2.5 pipelines on it, and prints the sizing, the grid and a few values.

use std::time::Instant;

use kimi_k3_rs::{
    navit_resize_config, preprocess_image, ImageView, KimiError, MediaProcConfig, PillowCompat,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let width = args.next().transpose()?.unwrap_or(1920);
    let height = args.next().transpose()?.unwrap_or(1080);
    // An RGB (HWC, u8) gradient; any decoder's output buffer works the same way.
    let mut rgb = Vec::with_capacity(width * height * 3);
    for y in 0..height {
        for x in 0..width {
            let r = u8::try_from(x * 255 / width.max(1)).unwrap_or(u8::MAX);
            let g = u8::try_from(y * 255 / height.max(1)).unwrap_or(u8::MAX);
            rgb.extend_from_slice(&[r, g, 128]);
        }
    }
    let view = ImageView::new(&rgb, width, height, 3)?;
    for (name, cfg) in [
        ("kimi_k3", MediaProcConfig::kimi_k3()),
        ("kimi_k25", MediaProcConfig::kimi_k25()),
    ] {
        let plan = navit_resize_config(width as u64, height as u64, &cfg)?;
        let start = Instant::now();
        let (pixel_values, grid_thw) = preprocess_image(&view, &cfg, PillowCompat::V13)?;
        let ms = start.elapsed().as_secs_f64() * 1e3;
        println!(
            "{name}: {width}x{height} -> {}x{} (+{} right, +{} bottom), grid_thw {grid_thw:?}, \
             {} tokens, pixel_values [{}, 3, 14, 14], first value {}, {ms:.1} ms",
            plan.new_width,
            plan.new_height,
            plan.pad_width,
            plan.pad_height,
            plan.num_tokens,
            pixel_values.len() / (3 * 14 * 14),
            pixel_values[0],
        );
    }
    // Errors are values, never panics: a buffer of the wrong length.
    let err = ImageView::new(&rgb[1..], width, height, 3).unwrap_err();
    assert!(matches!(err, KimiError::BufferSize { .. }));
    println!("bad buffer: {err}");
    Ok(())
}
