//! Python bindings (`kimi_k3_rs._native`): glue only, no arithmetic.
//!
//! Every entry point extracts and checks its arguments while attached, runs the
//! pure core with the GIL released (`py.detach`), then wraps the results
//! without copying. The public Python API and its documentation live in
//! `python/kimi_k3_rs/`.

use numpy::ndarray::Array2;
use numpy::{
    Element, IntoPyArray, PyArray1, PyArray4, PyArrayMethods, PyReadonlyArray2, PyReadonlyArrayDyn,
    PyUntypedArrayMethods,
};
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::config::{
    Background, BackgroundPattern, FillStage, MediaProcConfig as CoreConfig, PillowCompat,
};
use crate::error::KimiError;
use crate::geometry::navit_resize_config as core_navit_resize_config;
use crate::image::ImageView;
use crate::normalize::{NormalizeLut, OutputValue, ValueTable};
use crate::pipeline::{plan_batch, run_batch, BatchPlan};

create_exception!(
    kimi_k3_rs,
    KimiK3Error,
    PyValueError,
    "Base class of kimi_k3_rs errors (a ValueError)."
);
create_exception!(
    kimi_k3_rs,
    ConfigError,
    KimiK3Error,
    "A media_proc_cfg value is missing or invalid."
);
create_exception!(
    kimi_k3_rs,
    ImageError,
    KimiK3Error,
    "An image cannot be preprocessed (shape, size, channels)."
);

/// The one conversion of core errors into Python exceptions.
fn to_py_err(err: KimiError) -> PyErr {
    let msg = err.to_string();
    match err {
        KimiError::Config { .. } => ConfigError::new_err(msg),
        KimiError::SideLimit { .. } => KimiK3Error::new_err(msg),
        KimiError::EmptyImage { .. }
        | KimiError::SideTooLarge { .. }
        | KimiError::BufferSize { .. }
        | KimiError::Channels(_)
        | KimiError::PreResizedSize { .. }
        | KimiError::Overflow { .. }
        | KimiError::OutputSize { .. }
        | KimiError::Allocation { .. } => ImageError::new_err(msg),
        KimiError::Threads(_) => KimiK3Error::new_err(msg),
    }
}

/// A validated `media_proc_cfg`, built once per model (immutable).
#[pyclass(frozen, module = "kimi_k3_rs._native", name = "MediaProcConfig")]
struct PyMediaProcConfig {
    inner: CoreConfig,
}

#[pymethods]
impl PyMediaProcConfig {
    #[new]
    #[pyo3(signature = (patch_size, merge_kernel_size, in_patch_limit, patch_limit_on_one_side, image_mean, image_std, *, fixed_output_tokens=None, transparent_bg_config=None, transparent_bg_fill_stage="before_resize"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        patch_size: u64,
        merge_kernel_size: u64,
        in_patch_limit: u64,
        patch_limit_on_one_side: u64,
        image_mean: [f64; 3],
        image_std: [f64; 3],
        fixed_output_tokens: Option<u64>,
        transparent_bg_config: Option<(String, u32, bool, u8, u8)>,
        transparent_bg_fill_stage: &str,
    ) -> PyResult<Self> {
        let background = transparent_bg_config
            .map(
                |(pattern, square_size, on_top_left, white_value, gray_value)| {
                    BackgroundPattern::parse(&pattern).map(|pattern| Background {
                        pattern,
                        square_size,
                        on_top_left,
                        white_value,
                        gray_value,
                    })
                },
            )
            .transpose()
            .map_err(to_py_err)?;
        let fill_stage = FillStage::parse(transparent_bg_fill_stage).map_err(to_py_err)?;
        let inner = CoreConfig::new(
            patch_size,
            merge_kernel_size,
            in_patch_limit,
            patch_limit_on_one_side,
            image_mean,
            image_std,
        )
        .and_then(|c| c.with_fixed_output_tokens(fixed_output_tokens))
        .and_then(|c| c.with_background(background, fill_stage))
        .map_err(to_py_err)?;
        Ok(Self { inner })
    }

    #[getter]
    fn patch_size(&self) -> u64 {
        self.inner.patch_size()
    }
}

/// `(num_tokens, new_width, new_height, pad_width, pad_height)`.
type ResizeTuple = (u64, u64, u64, u64, u64);

fn resize_tuple(r: &crate::ResizeConfig) -> ResizeTuple {
    (
        r.num_tokens,
        r.new_width,
        r.new_height,
        r.pad_width,
        r.pad_height,
    )
}

/// Sizing of one image: `(num_tokens, new_width, new_height, pad_width, pad_height)`.
#[pyfunction]
#[pyo3(signature = (width, height, config, /))]
fn navit_resize_config(
    width: u64,
    height: u64,
    config: &PyMediaProcConfig,
) -> PyResult<ResizeTuple> {
    core_navit_resize_config(width, height, &config.inner)
        .map(|r| resize_tuple(&r))
        .map_err(to_py_err)
}

/// Sizing of many images: list of `(num_tokens, new_width, new_height, pad_width, pad_height)`.
#[pyfunction]
#[pyo3(signature = (sizes, config, /))]
fn navit_resize_configs(
    sizes: Vec<(u64, u64)>,
    config: &PyMediaProcConfig,
) -> PyResult<Vec<ResizeTuple>> {
    sizes
        .iter()
        .map(|&(w, h)| core_navit_resize_config(w, h, &config.inner).map(|r| resize_tuple(&r)))
        .collect::<Result<_, _>>()
        .map_err(to_py_err)
}

/// Token count of every `(width, height)` row of an int64 `[n, 2]` array.
#[pyfunction]
#[pyo3(signature = (sizes, config, /))]
fn count_image_tokens<'py>(
    py: Python<'py>,
    sizes: PyReadonlyArray2<'py, i64>,
    config: &PyMediaProcConfig,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    if sizes.shape()[1] != 2 {
        return Err(ImageError::new_err(format!(
            "sizes must have shape [n, 2] (width, height), got {:?}",
            sizes.shape()
        )));
    }
    let array = sizes.as_array();
    let cfg = &config.inner;
    let counts = py.detach(|| {
        array
            .rows()
            .into_iter()
            .map(|row| {
                let (w, h) = (row[0], row[1]);
                let side = |v: i64| {
                    u64::try_from(v).map_err(|_| {
                        ImageError::new_err(format!(
                            "image sizes must be non-negative, got {w}x{h}"
                        ))
                    })
                };
                let r = core_navit_resize_config(side(w)?, side(h)?, cfg).map_err(to_py_err)?;
                i64::try_from(r.num_tokens)
                    .map_err(|_| to_py_err(KimiError::Overflow { what: "num_tokens" }))
            })
            .collect::<PyResult<Vec<i64>>>()
    })?;
    Ok(counts.into_pyarray(py))
}

type Batch<'py> = (Bound<'py, PyAny>, Bound<'py, PyAny>);

/// Borrow the caller's arrays as core image views (no copy).
fn image_views<'a>(
    images: &'a [PyReadonlyArrayDyn<'_, u8>],
    resized_from: Option<&[Option<(u64, u64)>]>,
) -> PyResult<Vec<ImageView<'a>>> {
    if let Some(r) = resized_from {
        if r.len() != images.len() {
            return Err(ImageError::new_err(format!(
                "resized_from has {} entries for {} images",
                r.len(),
                images.len()
            )));
        }
    }
    let mut views = Vec::with_capacity(images.len());
    for (k, array) in images.iter().enumerate() {
        let shape = array.shape();
        let (height, width, channels) = match *shape {
            [h, w] => (h, w, 1),
            [h, w, c] => (h, w, c),
            _ => {
                return Err(ImageError::new_err(format!(
                    "image {k}: expected an HxW or HxWxC uint8 array, got shape {shape:?}"
                )))
            }
        };
        let data = array
            .as_slice()
            .map_err(|_| ImageError::new_err(format!("image {k}: array must be C-contiguous")))?;
        let mut view = ImageView::new(data, width, height, channels).map_err(to_py_err)?;
        if let Some(Some((w, h))) = resized_from.map(|r| r[k]) {
            view = view.resized_from(w, h);
        }
        views.push(view);
    }
    Ok(views)
}

/// Run a planned batch into a new array, or into the caller's `out` array
/// (`[N, 3, ps, ps]`, C-contiguous, element type `T`), with the GIL released.
#[allow(clippy::too_many_arguments)]
fn run_into<'py, T: Element + OutputValue>(
    py: Python<'py>,
    views: &[ImageView<'_>],
    plan: &BatchPlan,
    cfg: &CoreConfig,
    table: &ValueTable<T>,
    compat: PillowCompat,
    threads: usize,
    out: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let ps = plan.patch_size;
    let shape = [plan.total_patches(), 3, ps, ps];
    // The input buffers are borrowed, not copied: if another thread mutates an
    // input array during the call, the output for that image is unspecified
    // (but memory-safe: the borrow keeps the buffer alive and in place).
    let run =
        |dst: &mut [T]| py.detach(|| run_batch(views, plan, cfg, table, compat, threads, dst));
    let array = match out {
        // `numpy.empty`: not zeroing saves a full pass over the output; `run_batch`
        // writes every element before Python sees the array (it fails, if at all,
        // before writing, and then the array is dropped unseen). A size numpy cannot
        // allocate is an error here, not a panic.
        None => py
            .import("numpy")?
            .getattr("empty")?
            .call1((shape.to_vec(), numpy::dtype::<T>(py)))
            .map_err(|e| {
                ImageError::new_err(format!(
                    "cannot allocate pixel_values of shape {shape:?}: {}",
                    e.value(py)
                ))
            })?
            .cast_into::<PyArray4<T>>()?,
        Some(out) => {
            let array = out.cast::<PyArray4<T>>().map_err(|_| {
                // Name what was passed: its shape when it has one (a 1-D array, say).
                let got = match out.getattr("shape") {
                    Ok(got) => format!("shape {got}"),
                    Err(_) => out.get_type().to_string(),
                };
                ImageError::new_err(format!(
                    "out must be a 4-D {} numpy array of shape {shape:?}, got {got}",
                    numpy::dtype::<T>(py),
                ))
            })?;
            if array.shape() != shape {
                return Err(ImageError::new_err(format!(
                    "out has shape {:?}, expected {shape:?}",
                    array.shape()
                )));
            }
            array.clone()
        }
    };
    {
        let mut guard = array
            .try_readwrite()
            .map_err(|e| ImageError::new_err(format!("out cannot be written: {e}")))?;
        let dst = guard
            .as_slice_mut()
            .map_err(|_| ImageError::new_err("out must be C-contiguous"))?;
        run(dst).map_err(to_py_err)?;
    }
    Ok(array.into_any())
}

/// Preprocess uint8 HWC arrays; returns `(pixel_values, grid_thws)`.
#[pyfunction]
#[pyo3(signature = (images, config, *, pillow_compat, resized_from=None, out=None, dtype="float32", num_threads=1))]
#[allow(clippy::too_many_arguments, clippy::needless_pass_by_value)]
fn preprocess<'py>(
    py: Python<'py>,
    images: Vec<PyReadonlyArrayDyn<'py, u8>>,
    config: &PyMediaProcConfig,
    pillow_compat: &str,
    resized_from: Option<Vec<Option<(u64, u64)>>>,
    out: Option<Bound<'py, PyAny>>,
    dtype: &str,
    num_threads: usize,
) -> PyResult<Batch<'py>> {
    let compat = PillowCompat::parse(pillow_compat).map_err(to_py_err)?;
    if num_threads == 0 {
        return Err(KimiK3Error::new_err(
            "num_threads must be at least 1, got 0",
        ));
    }
    let views = image_views(&images, resized_from.as_deref())?;
    let cfg = &config.inner;
    let plan = plan_batch(&views, cfg).map_err(to_py_err)?;
    let lut = NormalizeLut::new(cfg.image_mean(), cfg.image_std());
    let out = out.as_ref();
    let pixel_values = match dtype {
        "float32" => {
            let table = ValueTable::float32(&lut);
            run_into(py, &views, &plan, cfg, &table, compat, num_threads, out)?
        }
        "bfloat16" | "float16" => {
            let table = if dtype == "bfloat16" {
                ValueTable::bfloat16(&lut)
            } else {
                ValueTable::float16(&lut)
            };
            run_into::<u16>(py, &views, &plan, cfg, &table, compat, num_threads, out)?
        }
        other => {
            return Err(KimiK3Error::new_err(format!(
                "dtype must be 'float32', 'bfloat16' or 'float16', got {other:?}"
            )))
        }
    };
    let grid = plan
        .grid_thws()
        .iter()
        .flatten()
        .map(|&v| {
            i64::try_from(v).map_err(|_| to_py_err(KimiError::Overflow { what: "grid_thws" }))
        })
        .collect::<PyResult<Vec<i64>>>()?;
    let grid = Array2::from_shape_vec((plan.resize_configs.len(), 3), grid)
        .map_err(|e| ImageError::new_err(e.to_string()))?
        .into_pyarray(py);
    Ok((pixel_values, grid.into_any()))
}

/// Pillow BICUBIC resize of one uint8 `HxW` / `HxWxC` array (C = 1..4, channels
/// independent, no premultiplication); returns a new array of the new size.
#[pyfunction]
#[pyo3(signature = (image, new_width, new_height, *, pillow_compat))]
fn resize_bicubic<'py>(
    py: Python<'py>,
    image: PyReadonlyArrayDyn<'py, u8>,
    new_width: usize,
    new_height: usize,
    pillow_compat: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let compat = PillowCompat::parse(pillow_compat).map_err(to_py_err)?;
    let shape = image.shape().to_vec();
    let (height, width, channels) = match *shape.as_slice() {
        [h, w] => (h, w, 1),
        [h, w, c] => (h, w, c),
        _ => {
            return Err(ImageError::new_err(format!(
                "expected an HxW or HxWxC uint8 array, got shape {shape:?}"
            )))
        }
    };
    let data = image
        .as_slice()
        .map_err(|_| ImageError::new_err("array must be C-contiguous"))?;
    ImageView::new(data, width, height, channels).map_err(to_py_err)?;
    if new_width == 0 || new_height == 0 {
        return Err(to_py_err(KimiError::EmptyImage {
            width: new_width as u64,
            height: new_height as u64,
        }));
    }
    // The pipeline only down-scales; refusing larger sizes keeps every allocation
    // bounded by the input's own size.
    if new_width > width || new_height > height {
        return Err(ImageError::new_err(format!(
            "resize_bicubic only down-scales: {width}x{height} -> {new_width}x{new_height}"
        )));
    }
    let out = py.detach(|| {
        crate::resize::resize_bicubic(data, width, height, channels, new_width, new_height, compat)
    });
    let mut new_shape = vec![new_height, new_width];
    if shape.len() == 3 {
        new_shape.push(channels);
    }
    Ok(out.into_pyarray(py).reshape(new_shape)?.into_any())
}

#[pymodule(gil_used = false)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("simd_path", crate::simd::SimdPath::detect().name())?;
    m.add(
        "build_profile",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    )?;
    m.add("KimiK3Error", py.get_type::<KimiK3Error>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("ImageError", py.get_type::<ImageError>())?;
    m.add_class::<PyMediaProcConfig>()?;
    m.add_function(wrap_pyfunction!(navit_resize_config, m)?)?;
    m.add_function(wrap_pyfunction!(navit_resize_configs, m)?)?;
    m.add_function(wrap_pyfunction!(count_image_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(preprocess, m)?)?;
    m.add_function(wrap_pyfunction!(resize_bicubic, m)?)?;
    Ok(())
}
