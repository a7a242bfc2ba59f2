//! Pixels read from a `RowSource` band by band (`ImageView::from_rows`, as the
//! Python binding reads a PIL image in several blocks of Pillow's memory) give
//! the bits of the same pixels in one buffer: every channel layout, resized
//! (both pass orders, premultiplied and composited after, composited before,
//! alpha dropped) or not (composited, padded and patchified band by band),
//! 1 and 2 threads; no read asks for the whole image; a failing read is the
//! image's error.

use std::sync::atomic::{AtomicUsize, Ordering};

use kimi_k3_rs::config::{Background, FillStage};
use kimi_k3_rs::geometry::navit_resize_config;
use kimi_k3_rs::normalize::{NormalizeLut, ValueTable};
use kimi_k3_rs::pipeline::{plan_batch, run_batch_with};
use kimi_k3_rs::simd::SimdPath;
use kimi_k3_rs::test_util::noise;
use kimi_k3_rs::{BatchItem, ImageView, KimiError, MediaProcConfig, PillowCompat, RowSource};

/// Rows of `data` (`row_len` bytes each), counting the most rows one read
/// asks for, failing reads of rows past `fail_from`.
#[derive(Debug)]
struct Rows {
    data: Vec<u8>,
    row_len: usize,
    fail_from: usize,
    most: AtomicUsize,
}

impl RowSource for Rows {
    fn read_rows(&self, first: usize, end: usize, out: &mut [u8]) -> Result<(), String> {
        if end > self.fail_from {
            return Err(format!("rows {first}..{end} are gone"));
        }
        self.most.fetch_max(end - first, Ordering::Relaxed);
        out.copy_from_slice(&self.data[first * self.row_len..end * self.row_len]);
        Ok(())
    }
}

/// `pixel_values` (float32 bits) of `view` under `cfg` with `threads`, or the error.
fn run(view: ImageView<'_>, cfg: &MediaProcConfig, threads: usize) -> Result<Vec<u32>, KimiError> {
    let lut = NormalizeLut::new(cfg.image_mean(), cfg.image_std());
    let table = ValueTable::float32(&lut);
    let plan = plan_batch(&[BatchItem::Image(view)], cfg)?;
    let mut out = vec![0f32; plan.total_values()];
    let path = SimdPath::detect();
    run_batch_with(
        &[view],
        &plan,
        cfg,
        &table,
        PillowCompat::V13,
        threads,
        path,
        &mut out,
    )?;
    Ok(out.iter().map(|v| v.to_bits()).collect())
}

#[test]
fn a_row_source_gives_the_bits_of_the_buffer() {
    let before = MediaProcConfig::kimi_k3()
        .with_background(Some(Background::kimi_k3()), FillStage::BeforeResize)
        .unwrap();
    let small = MediaProcConfig::new(14, 2, 256, 512, [0.5; 3], [0.5; 3]).unwrap();
    let small_k3 = small
        .clone()
        .with_background(Some(Background::kimi_k3()), FillStage::AfterResize)
        .unwrap();
    let configs = [
        MediaProcConfig::kimi_k25(),
        MediaProcConfig::kimi_k3(),
        before,
        small,
        small_k3,
    ];
    // (channels, pixel stride): L, LA, RGB, RGB in 4-byte pixels, RGBA.
    let layouts = [(1, 1), (2, 2), (3, 3), (3, 4), (4, 4)];
    let (mut resized, mut unresized) = (0, 0);
    for (seed, &(w, h)) in [(700, 900), (1242, 2688), (301, 97)].iter().enumerate() {
        for &(c, stride) in &layouts {
            let data = noise(w * h * stride, seed as u64 * 10 + c as u64);
            let buffer = ImageView::with_stride(&data, w, h, c, stride).unwrap();
            let source = Rows {
                data: data.clone(),
                row_len: w * stride,
                fail_from: usize::MAX,
                most: AtomicUsize::new(0),
            };
            let rows = ImageView::from_rows(&source, w, h, c, stride).unwrap();
            assert!(rows.data().is_empty());
            for cfg in &configs {
                let r = navit_resize_config(w as u64, h as u64, cfg).unwrap();
                let is_resized = (r.new_width, r.new_height) != (w as u64, h as u64);
                resized += usize::from(is_resized);
                unresized += usize::from(!is_resized);
                let want = run(buffer, cfg, 1).unwrap();
                for threads in [1, 2] {
                    let got = run(rows, cfg, threads).unwrap();
                    assert!(got == want, "{w}x{h}x{c} (stride {stride}) x{threads}");
                }
            }
            // A thread reads ahead at most a quarter of the bands' 16 MiB budget:
            // an image larger than that is never read whole.
            let most = source.most.load(Ordering::Relaxed);
            assert!(
                most < h || w * h * stride <= (16 << 20) / 4,
                "{w}x{h}x{c}: one read of {most} rows"
            );
        }
    }
    assert!(resized >= 20 && unresized >= 20, "{resized} {unresized}");
}

#[test]
fn a_failing_read_is_the_images_error() {
    let (w, h) = (900, 1400);
    let source = Rows {
        data: noise(w * h * 4, 7),
        row_len: w * 4,
        fail_from: 1200,
        most: AtomicUsize::new(0),
    };
    let view = ImageView::from_rows(&source, w, h, 4, 4).unwrap();
    let small = MediaProcConfig::new(14, 2, 256, 512, [0.5; 3], [0.5; 3]).unwrap();
    for cfg in [MediaProcConfig::kimi_k3(), small] {
        let err = run(view, &cfg, 2).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("image 0: cannot read the image's rows: rows ")
                && text.ends_with(" are gone"),
            "{text}"
        );
    }
}
