//! Pinned output bytes: FNV-1a hashes of the resize output and of the
//! pipeline's `pixel_values` bits, for fixed noise inputs, on every kernel path
//! this CPU supports, serially and in parallel, against values captured from
//! the code before the module split (`tests/pinned/*.txt`).
//!
//! Re-capture (only when an output is meant to change):
//! `cargo test --test pinned_output -- --ignored capture`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use kimi_k3_rs::config::{Background, BackgroundPattern, FillStage};
use kimi_k3_rs::normalize::{NormalizeLut, ValueTable};
use kimi_k3_rs::pipeline::{plan_batch, run_batch_with};
use kimi_k3_rs::resize::{resize_bicubic, resize_bicubic_with};
use kimi_k3_rs::simd::{Execution, SimdPath};
use kimi_k3_rs::test_util::noise;
use kimi_k3_rs::{preprocess_image, BatchItem, ImageView, MediaProcConfig, PillowCompat};

/// 64-bit FNV-1a.
fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn hash_f32(values: &[f32]) -> u64 {
    fnv1a(values.iter().flat_map(|v| v.to_bits().to_le_bytes()))
}

/// Every path this CPU supports.
fn paths() -> Vec<SimdPath> {
    SimdPath::ALL
        .into_iter()
        .filter(|p| p.is_supported())
        .collect()
}

/// `(channels, width, height, new_width, new_height)`: 1-4 channels, down-scales
/// on each axis and both, up-scales, odd sizes, one-pixel sides, and shapes where
/// Pillow 13 runs the vertical pass first (height shrinks more than twice the width).
const RESIZE_CASES: [(usize, usize, usize, usize, usize); 16] = [
    (1, 37, 29, 11, 7),
    (1, 1, 9, 1, 4),
    (1, 90, 1000, 80, 140),
    (2, 64, 64, 64, 17),
    (2, 77, 53, 31, 53),
    (2, 129, 301, 127, 100),
    (3, 300, 200, 151, 99),
    (3, 123, 457, 61, 228),
    (3, 40, 30, 80, 60),
    (3, 301, 700, 150, 333),
    (3, 1242, 2688, 1223, 2646),
    (3, 517, 211, 517, 97),
    (4, 90, 70, 33, 70),
    (4, 200, 150, 60, 149),
    (4, 333, 999, 331, 401),
    (4, 13, 1, 5, 1),
];

/// `(channels, width, height, new_width, new_height, period)`: images of only
/// 0 and 255, a checkerboard of `period`-pixel squares wider than the filter,
/// whose edges make sums past both ends through the filter's negative lobes
/// (Pillow's float resize of the same images, mode `F`, gives 200 to 3,500
/// values over 255 and as many under 0 in each case; here they clip): an
/// up-scale, down-scales of about 8 to 58 taps (fewer at the edges), one axis
/// alone, rows of 100 to 3,003 bytes.
const EXTREME_CASES: [(usize, usize, usize, usize, usize, usize); 5] = [
    (1, 67, 45, 150, 101, 5),
    (3, 200, 130, 61, 97, 16),
    (4, 33, 70, 17, 70, 8),
    (2, 50, 300, 50, 21, 60),
    (3, 1001, 7, 333, 5, 13),
];

/// The checkerboard of an [`EXTREME_CASES`] case, channels alike.
fn checkerboard(c: usize, w: usize, h: usize, period: usize) -> Vec<u8> {
    let pixel = |x: usize, y: usize| {
        if (x / period + y / period).is_multiple_of(2) {
            255
        } else {
            0
        }
    };
    (0..h)
        .flat_map(|y| (0..w).flat_map(move |x| std::iter::repeat_n(pixel(x, y), c)))
        .collect()
}

/// `name -> hash` of every resize case, computed on `path` (serially and in
/// parallel, which must agree).
fn resize_hashes(path: SimdPath) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let noisy = RESIZE_CASES
        .iter()
        .enumerate()
        .map(|(seed, &(c, w, h, nw, nh))| {
            let name = format!("resize c{c} {w}x{h}->{nw}x{nh}");
            (name, noise(w * h * c, seed as u64 + 100), (c, w, h, nw, nh))
        });
    let extreme = EXTREME_CASES.iter().map(|&(c, w, h, nw, nh, period)| {
        let name = format!("resize 0/255 squares of {period} c{c} {w}x{h}->{nw}x{nh}");
        (name, checkerboard(c, w, h, period), (c, w, h, nw, nh))
    });
    for (name, src, (c, w, h, nw, nh)) in noisy.chain(extreme) {
        for compat in [PillowCompat::V12, PillowCompat::V13] {
            let name = format!("{name} {compat:?}");
            let serial = Execution {
                path,
                parallel: false,
            };
            let got = resize_bicubic_with(&src, w, h, c, nw, nh, compat, serial);
            let parallel = resize_bicubic_with(
                &src,
                w,
                h,
                c,
                nw,
                nh,
                compat,
                Execution {
                    parallel: true,
                    ..serial
                },
            );
            assert!(got == parallel, "{name} {path:?}: parallel differs");
            out.insert(name, fnv1a(got));
        }
    }
    out
}

/// The pipeline configs: both presets, and each with a small patch budget so
/// that small images are resized (RGBA / LA composited before and after it).
fn configs() -> Vec<(&'static str, MediaProcConfig)> {
    let small = |preset: MediaProcConfig| {
        MediaProcConfig::new(14, 2, 300, 512, preset.image_mean(), preset.image_std())
            .and_then(|c| c.with_background(preset.background(), preset.fill_stage()))
            .expect("valid config")
    };
    let k3_before = small(MediaProcConfig::kimi_k3())
        .with_background(
            Some(Background {
                pattern: BackgroundPattern::Chessboard,
                square_size: 5,
                ..Background::kimi_k3()
            }),
            FillStage::BeforeResize,
        )
        .expect("valid config");
    let lookup = MediaProcConfig::new(14, 2, 300, 512, [0.48, 0.46, 0.41], [0.27, 0.26, 0.28])
        .expect("valid config");
    vec![
        ("k3", MediaProcConfig::kimi_k3()),
        ("k25", MediaProcConfig::kimi_k25()),
        ("k3-small", small(MediaProcConfig::kimi_k3())),
        ("k25-small", small(MediaProcConfig::kimi_k25())),
        ("k3-small-before", k3_before),
        ("lookup-small", lookup),
    ]
}

/// `(channels, width, height)` of the pipeline images.
const PIPELINE_IMAGES: [(usize, usize, usize); 8] = [
    (1, 100, 77),
    (2, 301, 97),
    (3, 224, 224),
    (3, 513, 190),
    (4, 30, 28),
    (4, 257, 333),
    (3, 97, 1001),
    (4, 1, 45),
];

/// `name -> hash` of every (config, image, compat) of the pipeline on `path`,
/// with 1 and 3 threads (which must agree), and of one whole batch.
fn pipeline_hashes(path: SimdPath) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let data: Vec<Vec<u8>> = PIPELINE_IMAGES
        .iter()
        .enumerate()
        .map(|(seed, &(c, w, h))| noise(w * h * c, seed as u64 + 200))
        .collect();
    let views: Vec<ImageView<'_>> = PIPELINE_IMAGES
        .iter()
        .zip(&data)
        .map(|(&(c, w, h), d)| ImageView::new(d, w, h, c).expect("valid view"))
        .collect();
    let run = |views: &[ImageView<'_>], cfg: &MediaProcConfig, compat, threads| {
        let items: Vec<_> = views.iter().copied().map(BatchItem::Image).collect();
        let plan = plan_batch(&items, cfg).expect("plannable");
        let table = ValueTable::float32(&NormalizeLut::new(cfg.image_mean(), cfg.image_std()));
        let mut values = vec![0f32; plan.total_values()];
        run_batch_with(
            views,
            &plan,
            cfg,
            &table,
            compat,
            threads,
            path,
            &mut values,
        )
        .expect("runs");
        let grids: Vec<u64> = plan.grid_thws().into_iter().flatten().collect();
        (values, grids)
    };
    for (cfg_name, cfg) in configs() {
        for compat in [PillowCompat::V12, PillowCompat::V13] {
            for (view, &(c, w, h)) in views.iter().zip(&PIPELINE_IMAGES) {
                let name = format!("pipeline {cfg_name} c{c} {w}x{h} {compat:?}");
                let one = std::slice::from_ref(view);
                let (values, grid) = run(one, &cfg, compat, 1);
                let (parallel, _) = run(one, &cfg, compat, 3);
                assert!(
                    hash_f32(&values) == hash_f32(&parallel),
                    "{name} {path:?}: 3 threads differ"
                );
                let grid_bytes = grid.iter().flat_map(|g| g.to_le_bytes());
                out.insert(format!("{name} grid"), fnv1a(grid_bytes));
                out.insert(name, hash_f32(&values));
            }
            let (values, _) = run(&views, &cfg, compat, 2);
            out.insert(format!("batch {cfg_name} {compat:?}"), hash_f32(&values));
        }
    }
    // A K2.5 image above the preset's budget, resized with the preset itself.
    let (w, h) = (1900, 1800);
    let big = noise(w * h * 3, 300);
    let view = ImageView::new(&big, w, h, 3).expect("valid view");
    let (values, grid) = run(&[view], &MediaProcConfig::kimi_k25(), PillowCompat::V13, 1);
    let name = format!("pipeline k25 c3 {w}x{h} V13");
    out.insert(
        format!("{name} grid"),
        fnv1a(grid.iter().flat_map(|g| g.to_le_bytes())),
    );
    out.insert(name, hash_f32(&values));
    out
}

fn pinned_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("pinned")
        .join(name)
}

fn render(hashes: &BTreeMap<String, u64>) -> String {
    hashes.iter().fold(String::new(), |mut s, (name, h)| {
        let _ = writeln!(s, "{h:016x} {name}");
        s
    })
}

fn load(name: &str) -> BTreeMap<String, u64> {
    let path = pinned_path(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run the capture test)", path.display()));
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (h, name) = l.split_once(' ').expect("`hash name` lines");
            let h = u64::from_str_radix(h, 16).expect("hex hash");
            (name.to_owned(), h)
        })
        .collect()
}

fn check(file: &str, got: &BTreeMap<String, u64>, path: SimdPath) {
    let want = load(file);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{file}: the cases changed (run the capture test)"
    );
    let wrong: Vec<&String> = got
        .iter()
        .filter(|(name, h)| want[*name] != **h)
        .map(|(name, _)| name)
        .collect();
    assert!(wrong.is_empty(), "{file} on {path:?}: {wrong:#?}");
}

#[test]
fn resize_bytes_are_pinned_on_every_path() {
    for path in paths() {
        check("resize.txt", &resize_hashes(path), path);
    }
    // The public default entry point (detected path).
    let (c, w, h, nw, nh) = RESIZE_CASES[6];
    let src = noise(w * h * c, 106);
    let got = resize_bicubic(&src, w, h, c, nw, nh, PillowCompat::V13);
    let name = format!("resize c{c} {w}x{h}->{nw}x{nh} V13");
    assert_eq!(fnv1a(got), load("resize.txt")[&name]);
}

#[test]
fn pipeline_values_are_pinned_on_every_path() {
    for path in paths() {
        check("pipeline.txt", &pipeline_hashes(path), path);
    }
    // The public one-image entry point (detected path, calling thread).
    let want = load("pipeline.txt");
    for (cfg_name, cfg) in [
        ("k3", MediaProcConfig::kimi_k3()),
        ("k25", MediaProcConfig::kimi_k25()),
    ] {
        let (c, w, h) = PIPELINE_IMAGES[5];
        let data = noise(w * h * c, 205);
        let view = ImageView::new(&data, w, h, c).expect("valid view");
        let (values, _) = preprocess_image(&view, &cfg, PillowCompat::V13).expect("runs");
        assert_eq!(
            hash_f32(&values),
            want[&format!("pipeline {cfg_name} c{c} {w}x{h} V13")]
        );
    }
}

/// Rewrites `tests/pinned/*.txt` from the scalar path (the other paths must
/// agree, which the two tests above check).
#[test]
#[ignore = "rewrites the pinned values"]
fn capture() {
    std::fs::create_dir_all(pinned_path("")).expect("tests/pinned");
    for (file, hashes) in [
        ("resize.txt", resize_hashes(SimdPath::Scalar)),
        ("pipeline.txt", pipeline_hashes(SimdPath::Scalar)),
    ] {
        let text = render(&hashes);
        print!("{file}:\n{text}");
        std::fs::write(pinned_path(file), text).expect("writable tests/pinned");
    }
}
