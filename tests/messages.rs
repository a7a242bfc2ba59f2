//! The Rust API gives the texts `tests/test_errors.py` asserts for Python:
//! one rule, one message, in every layer.

use kimi_k3_rs::error::{abbreviate, MAX_VALUE_CHARS};
use kimi_k3_rs::{
    navit_resize_config, BackgroundPattern, FillStage, ImageView, KimiError, MediaProcConfig,
    Options, OutputDtype, PillowCompat,
};

fn text<T: std::fmt::Debug>(result: Result<T, KimiError>) -> String {
    result.expect_err("must fail").to_string()
}

#[test]
fn config_values() {
    let new = |ps, ipl| MediaProcConfig::new(ps, 2, ipl, 512, [0.5; 3], [0.5; 3]);
    assert_eq!(
        text(new(0, 16384)),
        "media_proc_cfg[\"patch_size\"] must be an integer in 1..=2**31-1, got 0"
    );
    assert_eq!(
        text(new(14, 0)),
        "media_proc_cfg[\"in_patch_limit\"] must be an integer in 1..=2**53, got 0"
    );
    assert_eq!(
        text(BackgroundPattern::parse("plaid")),
        "Invalid background pattern: plaid"
    );
    assert_eq!(
        text(FillStage::parse("after")),
        "media_proc_cfg[\"transparent_bg_fill_stage\"] must be 'before_resize' or 'after_resize', got 'after'"
    );
}

#[test]
fn options() {
    assert_eq!(
        text(Options::new(PillowCompat::V13, OutputDtype::Float32, 0)),
        "num_threads must be an integer in 1..=1024, got 0"
    );
    assert_eq!(
        text(OutputDtype::parse("int8")),
        "dtype must be 'float32', 'bfloat16' or 'float16', got 'int8'"
    );
    assert_eq!(
        text(PillowCompat::parse("14")),
        "pillow_compat must be 'auto', '12', '12.2' or '13', got '14'"
    );
}

#[test]
fn images_and_sizes() {
    assert_eq!(
        text(ImageView::new(&[0; 80], 4, 4, 5)),
        "Unsupported Kimi-K3 image channel count: 5"
    );
    assert_eq!(
        text(ImageView::new(&[], 4, 0, 3)),
        "image width and height must be positive, got 4x0"
    );
    let k25 = MediaProcConfig::kimi_k25();
    assert_eq!(
        text(navit_resize_config(0, 5, &k25)),
        "image width and height must be positive, got 0x5"
    );
    let odd = MediaProcConfig::new(14, 2, 16384, 511, [0.5; 3], [0.5; 3]).expect("valid");
    assert_eq!(
        text(navit_resize_config(10000, 100, &odd)),
        "token_width 256 * merge_kernel_size 2 > patch_limit_on_one_side 511"
    );
}

#[test]
fn video_chunks() {
    // The texts tests/test_video.py asserts for Python.
    let video = |each| kimi_k3_rs::VideoConfig::new(each, None, 2.0, None, 4, None);
    assert_eq!(
        text(video(Some(0))),
        "media_proc_cfg[\"in_patch_limit_each_frame\"] must be None or an integer in 1..=2**53, got 0"
    );
    let k3 = MediaProcConfig::kimi_k3();
    assert!(
        text(kimi_k3_rs::count_video_chunk_tokens(&[[1, 1, 1]], &k3))
            .starts_with("media_proc_cfg has no video keys: video_chunk items need ")
    );
    let k25 = MediaProcConfig::kimi_k25();
    assert_eq!(
        text(kimi_k3_rs::count_video_chunk_tokens(&[[10, 10, 0]], &k25)),
        "a video_chunk must have at least 1 frame, got 0"
    );
    assert_eq!(
        text(kimi_k3_rs::plan_batch(
            &[kimi_k3_rs::BatchItem::VideoChunk(Vec::new())],
            &k25
        )),
        "a video_chunk must have at least 1 frame, got 0"
    );
}

#[test]
fn caller_values_are_abbreviated() {
    let long = "p\n".repeat(1_000_000);
    let message = text(BackgroundPattern::parse(&long));
    assert!(
        message.len() <= 1024 && !message.contains('\n'),
        "{message}"
    );
    assert!(abbreviate(&long).chars().count() <= MAX_VALUE_CHARS);
    let message = text(OutputDtype::parse(&long));
    assert!(
        message.len() <= 1024 && !message.contains('\n'),
        "{message}"
    );
}
