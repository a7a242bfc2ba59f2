//! Python bindings (`kimi_k3_rs._native`): glue only, no arithmetic.
//!
//! Every function extracts and borrows its arguments while attached
//! (`borrow`, `config`), runs the pure core with the GIL released
//! (`py.detach`), then wraps the results without copying. Errors come from the
//! core's [`KimiError`], mapped onto the Python hierarchy in
//! `errors`. The public Python API and its documentation live in
//! `python/kimi_k3_rs/`.

#![deny(clippy::unwrap_used, clippy::expect_used)]

mod arrow;
mod borrow;
mod config;
mod decode;
mod errors;
mod item;
mod pool;

use numpy::ndarray::Array2;
use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn,
    PyUntypedArrayMethods,
};
use pyo3::prelude::*;

use arrow::PillowRows;
use borrow::{array_view, borrow_array, borrow_out, OutArray};
use config::PyMediaProcConfig;
use errors::{at_image, to_py_err, BindingError};
use item::{borrow_items, PyBatchItem};

use crate::config::PillowCompat;
use crate::error::KimiError;
use crate::geometry::{self, ResizeConfig};
use crate::options::{threads_error, Options, OutputDtype};
use crate::pipeline::{item_views, plan_batch, run_planned, OutBuffer, Output};
use crate::ImageView;

/// `(num_tokens, new_width, new_height, pad_width, pad_height)`.
type ResizeTuple = (u64, u64, u64, u64, u64);

fn resize_tuple(r: &ResizeConfig) -> ResizeTuple {
    (
        r.num_tokens,
        r.new_width,
        r.new_height,
        r.pad_width,
        r.pad_height,
    )
}

/// An int64 `[n, 3]` array of grids.
fn grid_array<'py>(py: Python<'py>, grids: &[[u64; 3]]) -> PyResult<Bound<'py, PyArray2<i64>>> {
    let values = grids
        .iter()
        .flatten()
        .map(|&v| i64::try_from(v).map_err(|_| KimiError::Overflow { what: "grid_thws" }))
        .collect::<Result<Vec<i64>, _>>()
        .map_err(to_py_err)?;
    let array = Array2::from_shape_vec((grids.len(), 3), values)
        .map_err(|_| to_py_err(KimiError::Overflow { what: "grid_thws" }))?;
    Ok(array.into_pyarray(py))
}

/// A Python integer argument as `i128` (`TypeError` for anything else, bools included).
fn int_arg(name: &'static str, value: &Bound<'_, PyAny>) -> PyResult<i128> {
    let not_int = || {
        to_py_err(BindingError::NotAnInt {
            name,
            or_none: if name == "num_threads" {
                " or None"
            } else {
                ""
            },
            value: errors::abbreviate_value(value),
        })
    };
    if value.is_instance_of::<pyo3::types::PyBool>() {
        return Err(not_int());
    }
    let index = value.call_method0("__index__").map_err(|_| not_int())?;
    // An int beyond i128 is out of every range here: report it as such.
    Ok(index.extract::<i128>().unwrap_or(i128::MAX))
}

/// Parse a string option; any other value is named as the parser names a bad
/// string (its rule, the value's `repr`).
fn str_arg<T>(
    value: &Bound<'_, PyAny>,
    parse: impl Fn(&str) -> Result<T, KimiError>,
) -> PyResult<T> {
    match value.extract::<String>() {
        Ok(text) => parse(&text).map_err(to_py_err),
        Err(_) => match parse("") {
            Err(KimiError::Option { name, rule, .. }) => Err(to_py_err(KimiError::option(
                name,
                rule,
                &errors::abbreviate_value(value),
            ))),
            other => other.map_err(to_py_err),
        },
    }
}

/// The options of a call: Pillow pass order, output dtype, threads; validated once.
#[pyclass(frozen, module = "kimi_k3_rs._native", name = "Options")]
struct PyOptions {
    inner: Options,
}

#[pymethods]
impl PyOptions {
    #[new]
    #[pyo3(signature = (pillow_compat, dtype, num_threads))]
    fn new(
        pillow_compat: &Bound<'_, PyAny>,
        dtype: &Bound<'_, PyAny>,
        num_threads: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let compat = str_arg(pillow_compat, PillowCompat::parse)?;
        let dtype = str_arg(dtype, OutputDtype::parse)?;
        let threads = int_arg("num_threads", num_threads)?;
        let threads =
            usize::try_from(threads).map_err(|_| to_py_err(threads_error(&threads.to_string())))?;
        let inner = Options::new(compat, dtype, threads).map_err(to_py_err)?;
        Ok(Self { inner })
    }

    /// `"12"`, `"12.2"` or `"13"`.
    #[getter]
    fn pillow_compat(&self) -> &'static str {
        self.inner.compat().name()
    }

    /// `"float32"`, `"bfloat16"` or `"float16"`.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.inner.dtype().name()
    }

    /// Threads of a call.
    #[getter]
    fn num_threads(&self) -> usize {
        self.inner.threads()
    }

    /// Pickling (and `copy`): `Options(pillow_compat, dtype, num_threads)`.
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> (
        Bound<'py, pyo3::types::PyType>,
        (&'static str, &'static str, usize),
    ) {
        let this = slf.get();
        (
            slf.get_type(),
            (this.pillow_compat(), this.dtype(), this.num_threads()),
        )
    }
}

/// The sizing of one image (`media_utils.navit_resize_image`):
/// `(num_tokens, new_width, new_height, pad_width, pad_height)`.
#[pyfunction]
#[pyo3(signature = (width, height, config, /))]
fn navit_resize_config(
    width: &Bound<'_, PyAny>,
    height: &Bound<'_, PyAny>,
    config: &PyMediaProcConfig,
) -> PyResult<ResizeTuple> {
    let size = geometry::checked_size(int_arg("width", width)?, int_arg("height", height)?)
        .map_err(to_py_err)?;
    geometry::navit_resize_config(size.0, size.1, &config.inner)
        .map(|r| resize_tuple(&r))
        .map_err(to_py_err)
}

/// The sizing of every item `(width, height, frames)` of a request, each
/// named by its index on error: `([(num_tokens, new_width, new_height,
/// pad_width, pad_height), ...], grid_thws)` with `grid_thws` int64 `[n, 3]`.
/// `frames` is 0 for an image and the frame count of a K2.5 video chunk sized
/// from its frame 0.
#[pyfunction]
#[pyo3(signature = (items, config, /))]
fn size_items<'py>(
    py: Python<'py>,
    items: Vec<(u64, u64, u64)>,
    config: &PyMediaProcConfig,
) -> PyResult<(Vec<ResizeTuple>, Bound<'py, PyArray2<i64>>)> {
    let sized = geometry::size_items(&items, &config.inner).map_err(|(k, e)| at_image(k, e))?;
    let grids: Vec<[u64; 3]> = sized.iter().map(|(_, g)| *g).collect();
    Ok((
        sized.iter().map(|(r, _)| resize_tuple(r)).collect(),
        grid_array(py, &grids)?,
    ))
}

/// Token count of every `(width, height)` row of an int64 `[n, 2]` array.
#[pyfunction]
#[pyo3(signature = (sizes, config, /))]
fn count_image_tokens<'py>(
    py: Python<'py>,
    sizes: PyReadonlyArrayDyn<'py, i64>,
    config: &PyMediaProcConfig,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    if !matches!(sizes.shape(), [_, 2]) {
        let shape = crate::error::py_tuple(sizes.shape());
        return Err(to_py_err(BindingError::SizesShape { shape }));
    }
    let rows: Vec<[i64; 2]> = sizes
        .as_array()
        .rows()
        .into_iter()
        .map(|row| [row[0], row[1]])
        .collect();
    let cfg = &config.inner;
    let counts = py
        .detach(|| geometry::count_image_tokens(&rows, cfg))
        .map_err(to_py_err)?;
    Ok(counts.into_pyarray(py))
}

/// Token count of every `(width, height, num_frames)` row of an int64 `[n, 3]`
/// array of video chunks.
#[pyfunction]
#[pyo3(signature = (sizes, config, /))]
fn count_video_chunk_tokens<'py>(
    py: Python<'py>,
    sizes: PyReadonlyArrayDyn<'py, i64>,
    config: &PyMediaProcConfig,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    if !matches!(sizes.shape(), [_, 3]) {
        let shape = crate::error::py_tuple(sizes.shape());
        return Err(to_py_err(BindingError::VideoSizesShape { shape }));
    }
    let rows: Vec<[i64; 3]> = sizes
        .as_array()
        .rows()
        .into_iter()
        .map(|row| [row[0], row[1], row[2]])
        .collect();
    let cfg = &config.inner;
    let counts = py
        .detach(|| geometry::count_video_chunk_tokens(&rows, cfg))
        .map_err(to_py_err)?;
    Ok(counts.into_pyarray(py))
}

/// Preprocess a batch of [`PyBatchItem`]s (`load_batch`'s): `(pixel_values,
/// grid_thws)`, one grid per item; an error about an image or frame names
/// its item's `index`.
#[pyfunction]
#[pyo3(signature = (items, config, options, *, out=None))]
fn preprocess<'py>(
    py: Python<'py>,
    items: Vec<Bound<'py, PyBatchItem>>,
    config: &PyMediaProcConfig,
    options: &PyOptions,
    out: Option<Bound<'py, PyAny>>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyArray2<i64>>)> {
    let borrowed = borrow_items(py, &items)?;
    let items = borrowed.items(py)?;
    let views = item_views(&items);
    let (cfg, opts) = (&config.inner, &options.inner);
    let plan = plan_batch(&items, cfg).map_err(to_py_err)?;
    // A new output: large ones on pooled, huge-page memory (an output freed by
    // an earlier call when one fits, so its pages are not faulted in again),
    // small ones from `numpy.empty`; the core then writes every value.
    let out = match out {
        Some(out) => {
            // Before `out` is borrowed: a view of an input of this same call
            // would fail the borrow as if another call held it.
            if let Some(index) = borrow::out_overlap(&out, &views)? {
                return Err(to_py_err(KimiError::OutOverlap {
                    index: borrowed.index(index),
                }));
            }
            out
        }
        None => borrow::new_output(py, plan.shape(), opts.dtype())?,
    };
    let run = |output: Output<'_>| py.detach(|| run_planned(&views, plan, cfg, opts, output));
    let done = match borrow_out(&out, opts.dtype())? {
        OutArray::Float32(mut array) => {
            let shape = array.shape().to_vec();
            let values = array
                .as_slice_mut()
                .map_err(|_| to_py_err(BindingError::OutLayout))?;
            run(Output::Float32(OutBuffer {
                values,
                shape: &shape,
            }))
        }
        OutArray::Bits16(mut array) => {
            let shape = array.shape().to_vec();
            let values = array
                .as_slice_mut()
                .map_err(|_| to_py_err(BindingError::OutLayout))?;
            run(Output::Bits16(OutBuffer {
                values,
                shape: &shape,
            }))
        }
    }
    .map_err(|e| {
        // A Ctrl-C met while a PIL image's rows were read is raised as it is.
        if let Some(interrupt) = borrowed.interrupt() {
            return interrupt;
        }
        match e {
            KimiError::AtImage { index, error } => at_image(borrowed.index(index), *error),
            KimiError::OutOverlap { index } => to_py_err(KimiError::OutOverlap {
                index: borrowed.index(index),
            }),
            e => to_py_err(e),
        }
    })?;
    Ok((out, grid_array(py, &done.grid_thws)?))
}

/// Pillow BICUBIC resize of one uint8 `HxW` / `HxWxC` array (C = 1..4, channels
/// independent, no premultiplication), or of a `PillowRows` (read band by
/// band); a new array of the new size. Only down-scales.
#[pyfunction]
#[pyo3(signature = (image, new_width, new_height, options))]
fn resize_bicubic<'py>(
    py: Python<'py>,
    image: Bound<'py, PyAny>,
    new_width: usize,
    new_height: usize,
    options: &PyOptions,
) -> PyResult<Bound<'py, PyAny>> {
    let rows = image.cast::<PillowRows>().ok();
    let array = match rows {
        Some(_) => None,
        None => Some(borrow_array(&image, None)?),
    };
    let (view, three_d): (ImageView<'_>, bool) = match (rows, &array) {
        (Some(rows), _) => {
            let rows = rows.get();
            (rows.view().map_err(to_py_err)?, rows.channels > 1)
        }
        (None, Some(array)) => (array_view(array, None)?, array.ndim() == 3),
        (None, None) => unreachable!("an image that is not a PillowRows is borrowed"),
    };
    let compat = options.inner.compat();
    let mut shape = vec![new_height, new_width];
    if three_d {
        shape.push(view.channels());
    }
    // Checked first: the new array is never of a size the resize refuses.
    crate::pipeline::resized_len(&view, new_width, new_height).map_err(to_py_err)?;
    // `numpy.empty`: no pass zeroes the memory the resize writes in full (a
    // MemoryError where it cannot be had).
    let resized = py
        .import("numpy")?
        .getattr("empty")?
        .call1((shape, "uint8"))?
        .cast_into::<PyArrayDyn<u8>>()?;
    // SAFETY: nothing else refers to the new array while `out` lives (it
    // reaches Python only when returned below).
    let out = unsafe { resized.as_slice_mut() }.map_err(|_| to_py_err(BindingError::OutLayout))?;
    py.detach(|| crate::pipeline::resize_view_into(&view, new_width, new_height, compat, out))
        .map_err(|e| {
            rows.and_then(|rows| rows.get().take_interrupt())
                .unwrap_or_else(|| to_py_err(e))
        })?;
    Ok(resized.into_any())
}

/// The sizing of one K2.5 video chunk of `num_frames` frames whose frame 0 is
/// `width x height` (`media_utils.py: navit_resize_video` as `get_resize_config`
/// calls it): `(num_tokens, new_width, new_height, pad_width, pad_height)`.
#[pyfunction]
#[pyo3(signature = (width, height, num_frames, config, /))]
fn navit_resize_video_chunk(
    width: &Bound<'_, PyAny>,
    height: &Bound<'_, PyAny>,
    num_frames: &Bound<'_, PyAny>,
    config: &PyMediaProcConfig,
) -> PyResult<ResizeTuple> {
    let (w, h) = geometry::checked_size(int_arg("width", width)?, int_arg("height", height)?)
        .map_err(to_py_err)?;
    let t = int_arg("num_frames", num_frames)?;
    let frames = u64::try_from(t)
        .ok()
        .filter(|&t| t > 0)
        .ok_or_else(|| to_py_err(KimiError::ChunkFrames { frames: t }))?;
    geometry::navit_resize_video_chunk(w, h, frames, &config.inner)
        .map(|r| resize_tuple(&r))
        .map_err(to_py_err)
}

/// `fill_transparent_bg_with` of a uint8 `HxWx4` (RGBA) or `HxWx2` (LA) array onto
/// the config's background (`kimi_k3_vision_processing.py`): the colour bands,
/// `HxWx3` or `HxWx1`, in the checkpoint's float32 arithmetic.
#[pyfunction]
#[pyo3(signature = (image, config, /))]
fn composite<'py>(
    py: Python<'py>,
    image: Bound<'py, PyAny>,
    config: &PyMediaProcConfig,
) -> PyResult<Bound<'py, PyAny>> {
    let array = borrow_array(&image, None)?;
    let view = array_view(&array, None)?;
    let composited = py
        .detach(|| crate::composite::composite_view(&view, &config.inner))
        .map_err(to_py_err)?;
    let shape = vec![view.height(), view.width(), view.channels() - 1];
    Ok(composited.into_pyarray(py).reshape(shape)?.into_any())
}

/// `(width, height)` of a uint8 `HxW` / `HxWxC` array, checked as
/// [`preprocess`] checks it (dtype, shape, channels, a zero side).
#[pyfunction]
#[pyo3(signature = (image, /))]
fn image_size(image: Bound<'_, PyAny>) -> PyResult<(usize, usize)> {
    let array = borrow_array(&image, None)?;
    let (height, width, channels) = borrow::hwc(array.shape());
    crate::image::check_shape(width, height, channels).map_err(to_py_err)?;
    Ok((width, height))
}

/// `vertical_first(pillow_compat, width, height, new_width, new_height)`: whether the
/// Pillow of `pillow_compat` (`"12"`, `"12.2"` or `"13"`) runs the vertical pass
/// first for that resize ([`crate::resize::vertical_first`]).
#[pyfunction]
#[pyo3(signature = (pillow_compat, width, height, new_width, new_height, /))]
fn vertical_first(
    pillow_compat: &Bound<'_, PyAny>,
    width: usize,
    height: usize,
    new_width: usize,
    new_height: usize,
) -> PyResult<bool> {
    let compat = str_arg(pillow_compat, PillowCompat::parse)?;
    Ok(crate::resize::vertical_first(
        compat, width, height, new_width, new_height,
    ))
}

/// `_set_poison(on)`: the core's poison mode ([`crate::set_poison`]), for
/// tests; returns the previous setting.
#[pyfunction]
#[pyo3(name = "_set_poison", signature = (on, /))]
fn set_poison(on: bool) -> bool {
    crate::set_poison(on)
}

/// The environment variable that names the kernel path to run instead of the
/// fastest (for tests and comparisons: every path gives the same bytes).
const SIMD_ENV: &str = "KIMI_K3_RS_SIMD";

/// The kernel path of this process: the one `KIMI_K3_RS_SIMD` names
/// (`scalar`, `sse4.1`, `avx2`, `avx512`), else the fastest this CPU runs
/// (unset or blank), made the path every call detects
/// ([`SimdPath::choose`](crate::simd::SimdPath::choose)). Read once, when the
/// module is imported.
///
/// # Errors
/// `ValueError` naming the variable and its value when it names no path, or
/// one this CPU cannot run.
fn chosen_simd_path() -> PyResult<crate::simd::SimdPath> {
    use crate::simd::SimdPath;
    let bad = |value: String, rule| {
        let value = format!("'{}'", crate::error::abbreviate(&value));
        to_py_err(crate::KimiError::Option {
            name: SIMD_ENV,
            rule,
            value,
        })
    };
    let chosen = match std::env::var(SIMD_ENV) {
        Err(std::env::VarError::NotPresent) => None,
        Err(std::env::VarError::NotUnicode(v)) => {
            return Err(bad(v.to_string_lossy().into_owned(), NAMES));
        }
        Ok(v) if v.trim().is_empty() => None,
        Ok(v) => Some(SimdPath::from_name(v.trim()).ok_or_else(|| bad(v.clone(), NAMES))?),
    };
    SimdPath::choose(chosen).map_err(|_| {
        let name = chosen.map_or("", SimdPath::name).to_owned();
        bad(name, "a path this CPU runs")
    })
}

/// What `KIMI_K3_RS_SIMD` may name.
const NAMES: &str = "one of scalar, sse4.1, avx2, avx512 (or unset)";

/// `kimi_k3_rs._native`: the compiled core.
#[pymodule(gil_used = false)]
mod _native {
    use pyo3::prelude::*;

    #[pymodule_export]
    use super::arrow::{pil_pixels, pil_rows, PillowRows};
    #[pymodule_export]
    use super::config::{content_key, content_snapshot};
    #[pymodule_export]
    use super::decode::{decode_image, load_libjpeg, route_encoded, PyEncodedImage};
    #[pymodule_export]
    use super::errors::{abbreviate, ConfigError, ImageError, ImageTooLargeError, KimiK3Error};
    #[pymodule_export]
    use super::item::PyBatchItem;
    #[pymodule_export]
    use super::{
        composite, count_image_tokens, count_video_chunk_tokens, image_size, navit_resize_config,
        navit_resize_video_chunk, preprocess, resize_bicubic, set_poison, size_items,
        vertical_first, PyMediaProcConfig, PyOptions,
    };

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        let profile = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        };
        m.add("build_profile", profile)?;
        m.add("simd_path", super::chosen_simd_path()?.name())?;
        // numpy's C API, loaded now: rust-numpy loads it on first use and
        // panics if that fails, and a first use after a long GIL-free call
        // can meet a pending KeyboardInterrupt. numpy is imported first, so
        // that a missing or broken numpy is its ImportError, not a panic.
        m.py().import("numpy")?;
        numpy::PyArray1::<u8>::zeros(m.py(), 0, false);
        let mut names: Vec<String> = m
            .dict()
            .keys()
            .iter()
            .filter_map(|k| k.extract::<String>().ok())
            .filter(|k| !k.starts_with('_') || k == "__version__")
            .collect();
        names.sort();
        m.add("__all__", names)
    }
}
