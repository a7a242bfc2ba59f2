//! Criterion benchmarks of the pure-Rust core, by stage and image size.
//! Run with `cargo bench`; no Python needed.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use kimi_k3_rs::normalize::{pad_normalize_patchify, NormalizeLut, ValueTable};
use kimi_k3_rs::resize::{resize_bicubic, resize_bicubic_with, Coefficients};
use kimi_k3_rs::simd::{Execution, SimdPath};
use kimi_k3_rs::test_util;
use kimi_k3_rs::{navit_resize_config, preprocess_image, ImageView, MediaProcConfig, PillowCompat};

const SIZES: [(usize, usize); 4] = [(448, 448), (1280, 720), (1920, 1080), (4032, 3024)];

/// Deterministic pseudo-random bytes: the crate's test noise, seed 1 (the
/// bytes this bench used before it shared the helper).
fn noise(width: usize, height: usize, channels: usize) -> Vec<u8> {
    test_util::noise(width * height * channels, 1)
}

/// Single-threaded runs of those of `paths` this CPU supports.
fn serial_runs(paths: &[SimdPath]) -> impl Iterator<Item = Execution> + '_ {
    paths
        .iter()
        .filter(|path| path.is_supported())
        .map(|&path| Execution {
            path,
            parallel: false,
        })
}

fn geometry(c: &mut Criterion) {
    let cfg = MediaProcConfig::kimi_k25();
    c.bench_function("geometry/navit_resize_config", |b| {
        b.iter(|| navit_resize_config(black_box(4032), black_box(3024), &cfg));
    });
    c.bench_function("geometry/coefficients_4032_to_2069", |b| {
        b.iter(|| Coefficients::new(black_box(4032), black_box(2069)));
    });
}

fn resize(c: &mut Criterion) {
    let mut group = c.benchmark_group("resize");
    group.sample_size(10);
    let cfg = MediaProcConfig::kimi_k25();
    for (w, h) in [(1920, 1080), (4032, 3024)] {
        // K2.5 resizes 4032x3024 to 2069x1551; use a 0.75 scale for 1920x1080.
        let r = navit_resize_config(w as u64, h as u64, &cfg).unwrap();
        let (nw, nh) = if r.new_width as usize == w {
            (w * 3 / 4, h * 3 / 4)
        } else {
            (r.new_width as usize, r.new_height as usize)
        };
        let src = noise(w, h, 3);
        // Every kernel path this CPU runs (the pipeline picks the last one).
        for run in serial_runs(&SimdPath::ALL) {
            let path = run.path;
            group.bench_with_input(
                BenchmarkId::new(path.name(), format!("{w}x{h}->{nw}x{nh}")),
                &src,
                |b, src| {
                    b.iter(|| {
                        resize_bicubic_with(black_box(src), w, h, 3, nw, nh, PillowCompat::V13, run)
                    });
                },
            );
        }
    }
    let src = noise(4032, 3024, 3);
    group.bench_function("horizontal_only/4032x3024->2069x3024", |b| {
        b.iter(|| {
            resize_bicubic(
                black_box(&src),
                4032,
                3024,
                3,
                2069,
                3024,
                PillowCompat::V13,
            )
        });
    });
    group.bench_function("vertical_only/4032x3024->4032x1551", |b| {
        b.iter(|| {
            resize_bicubic(
                black_box(&src),
                4032,
                3024,
                3,
                4032,
                1551,
                PillowCompat::V13,
            )
        });
    });
    group.finish();
}

/// The four cases of `benchmarks/bench_resize_peers.py` (RGB, one thread) on
/// the AVX2 and AVX-512 kernels: the Python bench compares the detected path
/// with fast_image_resize and OpenCV, this one the paths with each other.
fn resize_peer_cases(c: &mut Criterion) {
    let mut group = c.benchmark_group("resize_peer_cases");
    group.sample_size(10);
    let cases = [
        ((8000, 8000), (1793, 1793)),
        ((4032, 3024), (2069, 1551)),
        ((1242, 2688), (1223, 2646)),
        ((1920, 1080), (1288, 728)),
    ];
    for ((w, h), (nw, nh)) in cases {
        let src = noise(w, h, 3);
        for run in serial_runs(&[SimdPath::Avx2, SimdPath::Avx512]) {
            group.bench_with_input(
                BenchmarkId::new(run.path.name(), format!("{w}x{h}->{nw}x{nh}")),
                &src,
                |b, src| {
                    b.iter(|| {
                        resize_bicubic_with(black_box(src), w, h, 3, nw, nh, PillowCompat::V13, run)
                    });
                },
            );
        }
    }
    group.finish();
}

fn normalize_patchify(c: &mut Criterion) {
    let mut group = c.benchmark_group("normalize_patchify");
    let table = ValueTable::float32(&NormalizeLut::new([0.5; 3], [0.5; 3]));
    for (w, h) in SIZES {
        let src = noise(w, h, 3);
        let (pw, ph) = (w.div_ceil(28) * 28, h.div_ceil(28) * 28);
        let mut out = vec![0f32; pw * ph * 3];
        // The table path and, where the CPU has it, the vector kernel.
        for run in serial_runs(&[SimdPath::Scalar, SimdPath::Avx2]) {
            let path = run.path;
            group.bench_with_input(
                BenchmarkId::new(path.name(), format!("{w}x{h}")),
                &src,
                |b, src| {
                    let source = ImageView::new(src, w, h, 3).unwrap();
                    b.iter(|| {
                        pad_normalize_patchify(
                            black_box(&source),
                            pw,
                            ph,
                            14,
                            &table,
                            &mut out,
                            run,
                        )
                    });
                },
            );
        }
    }
    group.finish();
}

fn end_to_end(c: &mut Criterion) {
    let mut group = c.benchmark_group("end_to_end");
    group.sample_size(10);
    for (name, cfg) in [
        ("k25", MediaProcConfig::kimi_k25()),
        ("k3", MediaProcConfig::kimi_k3()),
    ] {
        for (w, h) in SIZES {
            let src = noise(w, h, 3);
            group.bench_with_input(
                BenchmarkId::new(name, format!("{w}x{h}")),
                &src,
                |b, src| {
                    let view = ImageView::new(src, w, h, 3).unwrap();
                    b.iter(|| preprocess_image(black_box(&view), &cfg, PillowCompat::V13));
                },
            );
        }
    }
    group.finish();
}

criterion_group!(
    benches,
    geometry,
    resize,
    resize_peer_cases,
    normalize_patchify,
    end_to_end
);
criterion_main!(benches);
