//! Fuzz target: the whole Rust pipeline (`plan_batch`, `run_batch`,
//! `preprocess_batch`) on arbitrary image sizes, channel counts, buffers,
//! configs, Pillow pass orders, output tables and thread counts.
//!
//! The input bytes are read as a recipe (see `Case::read`): every size is
//! bounded so that one run takes well under a millisecond on average, and
//! the pixel bytes come from the tail of the input. Anything the core may
//! refuse (a bad config, a wrong buffer, a side-limit assertion) must come
//! back as `Err(KimiError)`; a panic, an abort, a hang or a sanitizer report
//! is a finding. On success these oracles must hold:
//!
//! * the plan is consistent: `offsets` grow by `gh * gw * 3 * ps * ps`, the
//!   padded sizes are multiples of `patch_size * merge_kernel_size`, the image
//!   is never upscaled;
//! * every output value of channel `c` is one of the 256 values of the
//!   normalisation table of `c` (each pixel, resized, composited or padding,
//!   is a byte);
//! * the result does not depend on the thread count, and `preprocess_batch`
//!   gives the same values as `run_batch`;
//! * the same pixels read through a `RowSource` (`ImageView::from_rows`)
//!   give the same values;
//! * the bfloat16 / float16 tables give the rounding of the float32 output.
//!
//! Outputs larger than `MAX_VALUES` are planned but not run: the core
//! allocates what the config asks for (a valid config with a huge
//! `patch_size` asks for exabytes), which is out of scope for a fast target.

#![no_main]

use std::collections::HashSet;

use kimi_k3_rs::normalize::{NormalizeLut, OutputValue, ValueTable};
use kimi_k3_rs::{
    plan_batch, preprocess_batch, run_batch, Background, BackgroundPattern, BatchItem, FillStage,
    ImageView, KimiError, MediaProcConfig, PillowCompat, RowSource,
};
use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;

/// Largest output (values) a run computes; larger plans are only planned.
const MAX_VALUES: usize = 1 << 21;
/// Largest image side, pixels (one side may reach `LONG_SIDE`).
const MAX_SIDE: usize = 80;
const LONG_SIDE: usize = 700;

#[derive(Debug)]
struct Image {
    width: usize,
    height: usize,
    channels: usize,
    /// Bytes added to (positive) or removed from the exact buffer length.
    len_delta: i8,
    /// Mark as pre-resized from this original size.
    resized_from: Option<(u64, u64)>,
    /// Give a pre-resized image the size the sizing rule asks for (else a
    /// random size, which `plan_batch` must refuse unless it happens to match).
    consistent: bool,
}

#[derive(Debug)]
struct Case {
    images: Vec<Image>,
    patch_size: u64,
    merge_kernel_size: u64,
    in_patch_limit: u64,
    patch_limit_on_one_side: u64,
    mean: [f64; 3],
    std: [f64; 3],
    fixed_output_tokens: Option<u64>,
    background: Option<Background>,
    stage: FillStage,
    compat: PillowCompat,
    threads: usize,
    table: u8,
}

/// An integer config value: usually small and valid, sometimes at or past the edges.
fn config_int(u: &mut Unstructured<'_>, small: std::ops::RangeInclusive<u64>) -> ArbResult<u64> {
    Ok(match u.int_in_range(0u8..=15)? {
        0 => 0,
        1 => (1 << 31) - 1,
        2 => 1 << 31,
        3 => (1 << 53) + u.int_in_range(0u64..=1)?,
        4 => u.arbitrary::<u64>()?,
        5 => u.int_in_range(1u64..=(1 << 31) - 1)?,
        _ => u.int_in_range(small)?,
    })
}

fn stat(u: &mut Unstructured<'_>) -> ArbResult<f64> {
    Ok(match u.int_in_range(0u8..=15)? {
        0 => f64::NAN,
        1 => f64::INFINITY,
        2 => 0.0,
        3 => f64::from_bits(u.arbitrary::<u64>()?),
        4 => 1e-310,
        5 => -1e300,
        _ => f64::from(u.int_in_range(1u16..=1000)?) / 1000.0,
    })
}

impl Case {
    fn read(u: &mut Unstructured<'_>) -> ArbResult<Self> {
        let n = u.int_in_range(1usize..=3)?;
        let mut images = Vec::with_capacity(n);
        for _ in 0..n {
            let long = u.ratio(1u8, 8u8)?;
            let side = |u: &mut Unstructured<'_>, max: usize| -> ArbResult<usize> {
                Ok(if u.ratio(1u8, 32u8)? {
                    0
                } else {
                    u.int_in_range(1..=max)?
                })
            };
            let (mut width, mut height) = (side(u, MAX_SIDE)?, side(u, MAX_SIDE)?);
            if long {
                if u.arbitrary::<bool>()? {
                    width = side(u, LONG_SIDE)?;
                } else {
                    height = side(u, LONG_SIDE)?;
                }
            }
            let channels = if u.ratio(1u8, 16u8)? {
                u.int_in_range(0usize..=6)?
            } else {
                u.int_in_range(1usize..=4)?
            };
            let len_delta = if u.ratio(1u8, 24u8)? {
                u.arbitrary::<i8>()?
            } else {
                0
            };
            let resized_from = if u.ratio(1u8, 12u8)? {
                Some((u.int_in_range(1u64..=4000)?, u.int_in_range(1u64..=4000)?))
            } else {
                None
            };
            let consistent = u.arbitrary::<bool>()?;
            images.push(Image {
                width,
                height,
                channels,
                len_delta,
                resized_from,
                consistent,
            });
        }
        let background = if u.arbitrary::<bool>()? {
            let pattern = match u.int_in_range(0u8..=3)? {
                0 => BackgroundPattern::Black,
                1 => BackgroundPattern::White,
                2 => BackgroundPattern::Gray,
                _ => BackgroundPattern::Chessboard,
            };
            let square_size = match u.int_in_range(0u8..=7)? {
                0 => 0,
                1 => u32::MAX,
                2 => (1 << 31) - 1,
                _ => u.int_in_range(1u32..=40)?,
            };
            Some(Background {
                pattern,
                square_size,
                on_top_left: u.arbitrary()?,
                white_value: u.arbitrary()?,
                gray_value: u.arbitrary()?,
            })
        } else {
            None
        };
        // A third of the cases take the presets' patch size and mean = std = 0.5,
        // the tables the AVX2 normalise kernel computes instead of looking up.
        let preset = u.ratio(1u8, 3u8)?;
        Ok(Self {
            images,
            patch_size: if preset { 14 } else { config_int(u, 1..=24)? },
            merge_kernel_size: config_int(u, 1..=4)?,
            in_patch_limit: config_int(u, 1..=600)?,
            patch_limit_on_one_side: config_int(u, 1..=80)?,
            mean: if preset {
                [0.5; 3]
            } else {
                [stat(u)?, stat(u)?, stat(u)?]
            },
            std: if preset {
                [0.5; 3]
            } else {
                [stat(u)?, stat(u)?, stat(u)?]
            },
            fixed_output_tokens: if u.ratio(1u8, 6u8)? {
                Some(config_int(u, 0..=5000)?)
            } else {
                None
            },
            background,
            stage: if u.arbitrary()? {
                FillStage::AfterResize
            } else {
                FillStage::BeforeResize
            },
            compat: if u.arbitrary()? {
                PillowCompat::V13
            } else {
                PillowCompat::V12
            },
            threads: u.int_in_range(1usize..=4)?,
            table: u.int_in_range(0u8..=2)?,
        })
    }

    fn config(&self) -> Result<MediaProcConfig, KimiError> {
        MediaProcConfig::new(
            self.patch_size,
            self.merge_kernel_size,
            self.in_patch_limit,
            self.patch_limit_on_one_side,
            self.mean,
            self.std,
        )?
        .with_fixed_output_tokens(self.fixed_output_tokens)?
        .with_background(self.background, self.stage)
    }
}

/// Pixel bytes for every image: the input's tail, cycled, mixed with a counter
/// (so that an empty tail still gives varied pixels, alpha 0 and 255 included).
fn pixels(images: &[Image], tail: &[u8]) -> Vec<Vec<u8>> {
    images
        .iter()
        .map(|im| {
            let exact = im.width * im.height * im.channels;
            let len = exact.saturating_add_signed(isize::from(im.len_delta));
            (0..len)
                .map(|i| {
                    let t = if tail.is_empty() {
                        0
                    } else {
                        tail[i % tail.len()]
                    };
                    match t % 5 {
                        0 => 0,
                        1 => 255,
                        _ => t.wrapping_add((i as u8).wrapping_mul(31)),
                    }
                })
                .collect()
        })
        .collect()
}

fn check_plan(
    case: &Case,
    cfg: &MediaProcConfig,
    views: &[ImageView<'_>],
    plan: &kimi_k3_rs::BatchPlan,
) {
    let ps = cfg.patch_size();
    let factor = ps * cfg.merge_kernel_size();
    assert_eq!(plan.offsets.len(), views.len() + 1);
    assert_eq!(plan.offsets[0], 0);
    for (k, (r, view)) in plan.resize_configs.iter().zip(views).enumerate() {
        let (w, h) = case.images[k]
            .resized_from
            .unwrap_or((view.width() as u64, view.height() as u64));
        assert!(
            r.new_width >= 1 && r.new_width <= w,
            "{case:?}: upscaled width {r:?}"
        );
        assert!(
            r.new_height >= 1 && r.new_height <= h,
            "{case:?}: upscaled height {r:?}"
        );
        assert!(r.pad_width < factor && r.pad_height < factor, "{r:?}");
        assert_eq!((r.new_width + r.pad_width) % factor, 0, "{r:?}");
        assert_eq!((r.new_height + r.pad_height) % factor, 0, "{r:?}");
        let [t, gh, gw] = r.grid_thw(ps);
        assert_eq!(t, 1);
        let values = u128::from(gh) * u128::from(gw) * 3 * u128::from(ps) * u128::from(ps);
        let step = (plan.offsets[k + 1] - plan.offsets[k]) as u128;
        assert_eq!(step, values, "{case:?}: offsets of image {k}");
        if cfg.fixed_output_tokens().is_none() {
            let tokens =
                u128::from(gh / cfg.merge_kernel_size()) * u128::from(gw / cfg.merge_kernel_size());
            assert_eq!(u128::from(r.num_tokens), tokens, "{r:?}");
        }
    }
}

/// Bit patterns of output values (NaN compares equal to itself bit for bit).
trait Bits: OutputValue {
    fn bits(self) -> u32;
}
impl Bits for f32 {
    fn bits(self) -> u32 {
        self.to_bits()
    }
}
impl Bits for u16 {
    fn bits(self) -> u32 {
        u32::from(self)
    }
}

/// The rows of a buffer, `row_len` bytes each, read as a `RowSource` reads them.
#[derive(Debug)]
struct Rows<'a> {
    data: &'a [u8],
    row_len: usize,
}

impl RowSource for Rows<'_> {
    fn read_rows(&self, first: usize, end: usize, out: &mut [u8]) -> Result<(), String> {
        out.copy_from_slice(&self.data[first * self.row_len..end * self.row_len]);
        Ok(())
    }
}

/// Run the batch with one table, single-threaded and on `threads` threads.
fn run_both<T: Bits>(
    views: &[ImageView<'_>],
    plan: &kimi_k3_rs::BatchPlan,
    cfg: &MediaProcConfig,
    table: &ValueTable<T>,
    compat: PillowCompat,
    threads: usize,
) -> Vec<T> {
    let mut one = vec![T::default(); plan.total_values()];
    run_batch(views, plan, cfg, table, compat, 1, &mut one).expect("run_batch (1 thread)");
    if threads > 1 {
        let mut many = vec![T::default(); plan.total_values()];
        run_batch(views, plan, cfg, table, compat, threads, &mut many)
            .expect("run_batch (threads)");
        assert!(
            one.iter().zip(&many).all(|(a, b)| a.bits() == b.bits()),
            "output depends on the thread count ({threads})"
        );
    }
    // A wrong-length output is refused, never written out of bounds.
    let mut short = vec![T::default(); plan.total_values().saturating_sub(1)];
    if plan.total_values() > 0 {
        assert!(matches!(
            run_batch(views, plan, cfg, table, compat, 1, &mut short),
            Err(KimiError::OutShape { .. })
        ));
    }
    one
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(mut case) = Case::read(&mut u) else {
        return;
    };
    let tail = u.take_rest();
    let Ok(cfg) = case.config() else { return };
    for im in &mut case.images {
        if let (Some((w, h)), true) = (im.resized_from, im.consistent) {
            if let Ok(r) = kimi_k3_rs::navit_resize_config(w, h, &cfg) {
                if r.new_width as usize * r.new_height as usize <= MAX_SIDE * LONG_SIDE {
                    (im.width, im.height) = (r.new_width as usize, r.new_height as usize);
                }
            }
        }
    }
    let buffers = pixels(&case.images, tail);
    let mut views = Vec::with_capacity(buffers.len());
    let mut items = Vec::with_capacity(buffers.len());
    for (im, buf) in case.images.iter().zip(&buffers) {
        let Ok(v) = ImageView::new(buf, im.width, im.height, im.channels) else {
            return;
        };
        items.push(match im.resized_from {
            Some((w, h)) => match kimi_k3_rs::navit_resize_config(w, h, &cfg) {
                Ok(r) => BatchItem::PreResized(v, r),
                Err(_) => return,
            },
            None => BatchItem::Image(v),
        });
        views.push(v);
    }
    let plan = match plan_batch(&items, &cfg) {
        Ok(plan) => plan,
        Err(
            KimiError::PreResizedSize { .. }
            | KimiError::SideLimit { .. }
            | KimiError::Overflow { .. },
        ) => return,
        Err(KimiError::Config { key, .. }) if key == "width" || key == "height" => return,
        Err(e) => panic!("unexpected plan error {e:?} for {case:?}"),
    };
    check_plan(&case, &cfg, &views, &plan);
    if plan.total_values() > MAX_VALUES {
        return;
    }
    let lut = NormalizeLut::new(cfg.image_mean(), cfg.image_std());
    let f32_table = ValueTable::float32(&lut);
    let values = run_both(&views, &plan, &cfg, &f32_table, case.compat, case.threads);

    // Every value of channel c is a table value of channel c.
    let allowed: [HashSet<u32>; 3] =
        std::array::from_fn(|c| (0..=255u8).map(|v| lut.get(c, v).to_bits()).collect());
    let plane = plan.patch_size * plan.patch_size;
    for (i, chunk) in values.chunks_exact(plane).enumerate() {
        let c = i % 3;
        assert!(
            chunk.iter().all(|v| allowed[c].contains(&v.to_bits())),
            "{case:?}: a value of channel {c} is not a table value"
        );
    }

    // The same pixels read through row sources give the same values.
    let sources: Vec<Rows<'_>> = case
        .images
        .iter()
        .zip(&buffers)
        .map(|(im, buf)| Rows {
            data: buf,
            row_len: im.width * im.channels,
        })
        .collect();
    let row_views: Vec<ImageView<'_>> = case
        .images
        .iter()
        .zip(&sources)
        .map(|(im, source)| {
            ImageView::from_rows(source, im.width, im.height, im.channels, im.channels)
                .expect("the shape of a valid view")
        })
        .collect();
    let mut from_rows = vec![0f32; plan.total_values()];
    run_batch(
        &row_views,
        &plan,
        &cfg,
        &f32_table,
        case.compat,
        case.threads,
        &mut from_rows,
    )
    .expect("run_batch of row sources");
    assert!(
        from_rows
            .iter()
            .zip(&values)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "row sources differ from buffers"
    );

    // preprocess_batch (only reads V12/V13 and float32) agrees with run_batch.
    let out = preprocess_batch(&items, &cfg, case.compat).expect("preprocess_batch after a plan");
    assert!(
        out.pixel_values
            .iter()
            .zip(&values)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "preprocess_batch differs from run_batch"
    );
    assert_eq!(out.grid_thws, plan.grid_thws());

    // Half tables: the rounding of the float32 values.
    match case.table {
        1 => {
            let bf = run_both(
                &views,
                &plan,
                &cfg,
                &ValueTable::bfloat16(&lut),
                case.compat,
                case.threads,
            );
            assert!(bf
                .iter()
                .zip(&values)
                .all(|(&h, &f)| h == half::bf16::from_f32(f).to_bits()
                    || (f.is_nan() && half::bf16::from_bits(h).is_nan())));
        }
        2 => {
            let fh = run_both(
                &views,
                &plan,
                &cfg,
                &ValueTable::float16(&lut),
                case.compat,
                case.threads,
            );
            assert!(fh
                .iter()
                .zip(&values)
                .all(|(&h, &f)| h == half::f16::from_f32(f).to_bits()
                    || (f.is_nan() && half::f16::from_bits(h).is_nan())));
        }
        _ => {}
    }
});
