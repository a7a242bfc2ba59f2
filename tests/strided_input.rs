//! RGB in 4-byte pixels (`ImageView::with_stride(.., 3, 4)`, Pillow's own
//! storage of `RGB`, as its Arrow export gives it) through the whole pipeline
//! gives the bits of the packed RGB image: every size class (down-scale both
//! pass orders, up-scale, one axis, no resize), both Pillow pass orders, both
//! presets, every kernel path this CPU supports, 1 and 2 threads, float32 and
//! bfloat16 tables.

use kimi_k3_rs::geometry::navit_resize_config;
use kimi_k3_rs::normalize::{NormalizeLut, ValueTable};
use kimi_k3_rs::pipeline::{plan_batch, run_batch_with};
use kimi_k3_rs::resize::vertical_first;
use kimi_k3_rs::simd::SimdPath;
use kimi_k3_rs::test_util::noise;
use kimi_k3_rs::{
    preprocess_batch, BatchItem, ImageView, KimiError, MediaProcConfig, PillowCompat,
};

/// The packed RGB bytes of 4-byte pixels.
fn packed(rgbx: &[u8]) -> Vec<u8> {
    rgbx.chunks_exact(4)
        .flat_map(|px| &px[..3])
        .copied()
        .collect()
}

/// `pixel_values` of `views` on `path` with `threads`, for `table`.
fn run<T: kimi_k3_rs::normalize::OutputValue>(
    views: &[ImageView<'_>],
    cfg: &MediaProcConfig,
    table: &ValueTable<T>,
    compat: PillowCompat,
    threads: usize,
    path: SimdPath,
) -> Vec<T> {
    let items: Vec<_> = views.iter().copied().map(BatchItem::Image).collect();
    let plan = plan_batch(&items, cfg).unwrap();
    let mut out = vec![T::default(); plan.total_values()];
    run_batch_with(views, &plan, cfg, table, compat, threads, path, &mut out).unwrap();
    out
}

#[test]
fn rgb_in_four_byte_pixels_equals_packed_rgb_everywhere() {
    let paths: Vec<SimdPath> = SimdPath::ALL
        .into_iter()
        .filter(|p| p.is_supported())
        .collect();
    // Under K2.5, 1242x2688 is resized vertical-first under Pillow 13's rule
    // (horizontal-first under 12's); the rest are not resized by the presets.
    // A config of 64 patches resizes the small ones (130x400 vertical-first,
    // 401x97 and 250x260 horizontal-first) and leaves 30x20, 9x3, 1x1, ...
    let sizes = [
        (1242, 2688),
        (224, 224),
        (448, 28),
        (30, 20),
        (9, 3),
        (1, 1),
        (130, 400),
        (401, 97),
        (250, 260),
        (17, 301),
    ];
    let small = MediaProcConfig::new(14, 2, 64, 512, [0.5; 3], [0.5; 3]).unwrap();
    let configs = [
        MediaProcConfig::kimi_k25(),
        MediaProcConfig::kimi_k3(),
        small,
    ];
    let (mut vertical, mut unresized, mut resized) = (0, 0, 0);
    for (seed, &(w, h)) in sizes.iter().enumerate() {
        // The pad bytes are noise too: they must not reach the output.
        let rgbx = noise(w * h * 4, seed as u64 + 100);
        let rgb = packed(&rgbx);
        let strided = ImageView::with_stride(&rgbx, w, h, 3, 4).unwrap();
        let plain = ImageView::new(&rgb, w, h, 3).unwrap();
        for cfg in &configs {
            let r = navit_resize_config(w as u64, h as u64, cfg).unwrap();
            let (nw, nh) = (r.new_width as usize, r.new_height as usize);
            unresized += usize::from((nw, nh) == (w, h));
            resized += usize::from((nw, nh) != (w, h));
            let lut = NormalizeLut::new(cfg.image_mean(), cfg.image_std());
            let (f32s, bf16s) = (ValueTable::float32(&lut), ValueTable::bfloat16(&lut));
            for compat in [PillowCompat::V12, PillowCompat::V13] {
                vertical += usize::from(vertical_first(compat, w, h, nw, nh));
                let want = run(&[plain], cfg, &f32s, compat, 1, SimdPath::Scalar);
                let want16 = run(&[plain], cfg, &bf16s, compat, 1, SimdPath::Scalar);
                for &path in &paths {
                    for threads in [1, 2] {
                        let case = format!("{w}x{h} -> {nw}x{nh} {compat:?} {path:?} x{threads}");
                        let got = run(&[strided], cfg, &f32s, compat, threads, path);
                        assert!(
                            got.iter()
                                .zip(&want)
                                .all(|(a, b)| a.to_bits() == b.to_bits())
                                && got.len() == want.len(),
                            "{case}"
                        );
                        let got16 = run(&[strided], cfg, &bf16s, compat, threads, path);
                        assert_eq!(got16, want16, "{case} bfloat16");
                    }
                }
            }
            // The public one-call entry point, on a batch mixing both layouts.
            let both = preprocess_batch(
                &[BatchItem::Image(strided), BatchItem::Image(plain)],
                cfg,
                PillowCompat::V13,
            )
            .unwrap();
            let half = both.pixel_values.len() / 2;
            assert_eq!(both.pixel_values[..half], both.pixel_values[half..]);
        }
    }
    // The sizes cover both pass orders, and the normaliser reading 4-byte pixels.
    assert!(
        vertical >= 2 && resized >= 4 && unresized >= 10,
        "{vertical} {resized} {unresized}"
    );
}

#[test]
fn a_pre_resized_or_retargeted_strided_view_is_read_at_its_stride() {
    let cfg = MediaProcConfig::kimi_k25();
    let target = navit_resize_config(4000, 3000, &cfg).unwrap();
    let views = |w: usize, h: usize, seed: u64| {
        let rgbx = noise(w * h * 4, seed);
        let rgb = packed(&rgbx);
        (rgbx, rgb)
    };
    // Pre-resized: a view of the sizing's size, not resized again.
    let (w, h) = (target.new_width as usize, target.new_height as usize);
    let (rgbx, rgb) = views(w, h, 7);
    let strided = ImageView::with_stride(&rgbx, w, h, 3, 4).unwrap();
    let plain = ImageView::new(&rgb, w, h, 3).unwrap();
    let pre = |v: ImageView<'_>| {
        preprocess_batch(&[BatchItem::PreResized(v, target)], &cfg, PillowCompat::V13)
            .unwrap()
            .pixel_values
    };
    assert_eq!(pre(strided), pre(plain));
    // Resized (up-scaled) to another image's sizing, as a video frame is.
    let (rgbx, rgb) = views(300, 200, 8);
    let strided = ImageView::with_stride(&rgbx, 300, 200, 3, 4).unwrap();
    let plain = ImageView::new(&rgb, 300, 200, 3).unwrap();
    let to = |v: ImageView<'_>| {
        preprocess_batch(&[BatchItem::ResizedTo(v, target)], &cfg, PillowCompat::V13)
            .unwrap()
            .pixel_values
    };
    assert_eq!(to(strided), to(plain));
    let resized = |v: &ImageView<'_>| {
        kimi_k3_rs::pipeline::resize_view(v, 150, 99, PillowCompat::V13).unwrap()
    };
    assert_eq!(resized(&strided), resized(&plain));
    assert_eq!(resized(&strided).len(), 150 * 99 * 3);
}

#[test]
fn only_packed_pixels_and_rgb_in_four_bytes_are_taken() {
    let data = vec![0u8; 8 * 4];
    assert_eq!(
        ImageView::with_stride(&data, 4, 2, 2, 4).unwrap_err(),
        KimiError::PixelStride {
            channels: 2,
            pixel_stride: 4
        }
    );
    assert_eq!(
        ImageView::with_stride(&data, 4, 2, 2, 4)
            .unwrap_err()
            .to_string(),
        "pixel stride 4 is not supported for 2 channels (it must equal the channel count, or be 4 for RGB)"
    );
}
