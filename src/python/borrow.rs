//! Borrowing numpy arrays for the core: input images as [`ImageView`]s and
//! `out=` as an [`OutBuffer`](crate::pipeline::OutBuffer), with every borrow, dtype and layout check.
//!
//! Every borrow uses rust-numpy's `try_` forms, so an array another call holds
//! is an error naming the argument, never a panic.

use numpy::ndarray::ArrayView4;
use numpy::{
    PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods,
};
use numpy::{PyReadonlyArrayDyn, PyReadwriteArrayDyn};
use pyo3::prelude::*;

use super::errors::{abbreviate_value, at_image, to_py_err, BindingError};
use super::pool::{self, OutputMemory};
use crate::error::KimiError;
use crate::options::OutputDtype;
use crate::ImageView;

/// numpy's name of an array's dtype (`"uint8"`, `"bfloat16"`, ...).
fn dtype_name(array: &Bound<'_, PyUntypedArray>) -> String {
    array
        .dtype()
        .getattr("name")
        .and_then(|n| n.extract::<String>())
        .unwrap_or_else(|_| "object".to_owned())
}

/// Check that numpy's name of a caller buffer's element type fits `dtype`:
/// float32; float16; bfloat16 (ml_dtypes) or its uint16 bits.
///
/// # Errors
/// `KimiError::OutDtype` naming both.
fn check_out_dtype(dtype: OutputDtype, dtype_name: &str) -> Result<(), KimiError> {
    let (accepted, expected): (&[&str], _) = match dtype {
        OutputDtype::Float32 => (&["float32"], "float32"),
        OutputDtype::Float16 => (&["float16"], "float16"),
        OutputDtype::Bfloat16 => (&["bfloat16", "uint16"], "bfloat16 or uint16"),
    };
    if accepted.contains(&dtype_name) {
        return Ok(());
    }
    Err(KimiError::OutDtype {
        got: crate::error::abbreviate(dtype_name),
        expected,
        dtype: dtype.name(),
    })
}

/// `err` raised for the image of a batch that errors give number `name`
/// (`image {name}: ...`), or for a lone image (`None`: no index).
fn named(name: Option<usize>, err: impl Into<BindingError>) -> PyErr {
    match name {
        None => to_py_err(err),
        Some(index) => at_image(index, err),
    }
}

/// A read-only borrow of one uint8 `HxW` / `HxWxC` array, errors naming it
/// `name` ([`named`]).
pub(crate) fn borrow_array<'py>(
    image: &Bound<'py, PyAny>,
    name: Option<usize>,
) -> PyResult<PyReadonlyArrayDyn<'py, u8>> {
    let array = image.cast::<PyUntypedArray>().map_err(|_| {
        named(
            name,
            BindingError::NotAnArray {
                what: "the image".to_owned(),
                got: abbreviate_value(image),
            },
        )
    })?;
    let typed = array.cast::<PyArrayDyn<u8>>().map_err(|_| {
        let dtype = crate::error::abbreviate(&dtype_name(array));
        named(name, BindingError::PixelDtype(dtype))
    })?;
    if !matches!(array.ndim(), 2 | 3) {
        let shape = crate::error::py_tuple(array.shape());
        return Err(named(name, BindingError::ImageShape { shape }));
    }
    typed.try_readonly().map_err(|e| {
        named(
            name,
            BindingError::Busy {
                what: "the array".to_owned(),
                reason: e.to_string(),
            },
        )
    })
}

/// `(height, width, channels)` of a 2-D (`HxW`, one channel) or 3-D shape
/// ([`borrow_array`] admits no other).
pub(crate) fn hwc(shape: &[usize]) -> (usize, usize, usize) {
    match *shape {
        [h, w] => (h, w, 1),
        [h, w, c] => (h, w, c),
        _ => unreachable!("borrow_array admits 2-D and 3-D arrays only"),
    }
}

/// The core view of a borrowed array (no copy), errors naming it `name`; the
/// `RGB` view `a[..., :3]` of 4-byte pixels (not C-contiguous: Pillow's `RGB`
/// memory from `_native.pil_pixels`, an `RGBX` / `RGBA` array) becomes a view
/// of those 4-byte pixels ([`rgb_of_four_byte_pixels`]).
pub(crate) fn array_view<'a>(
    array: &'a PyReadonlyArrayDyn<'_, u8>,
    name: Option<usize>,
) -> PyResult<ImageView<'a>> {
    let (height, width, channels) = hwc(array.shape());
    let Ok(data) = array.as_slice() else {
        return rgb_of_four_byte_pixels(array.as_untyped())
            .map(|view| view.map_err(|e| named(name, e)))
            .unwrap_or_else(|| {
                Err(named(
                    name,
                    BindingError::NotContiguous {
                        what: "the array".to_owned(),
                    },
                ))
            });
    };
    ImageView::new(data, width, height, channels).map_err(|e| named(name, e))
}

/// The core view of `array` when it is `a[..., :3]` of a C-contiguous uint8
/// `HxWx4` array `a` (its base): the colour bytes of 4-byte pixels, read in
/// place at a pixel stride of 4 ([`ImageView::with_stride`]); `None` for any
/// other array.
///
/// # Errors
/// As [`ImageView::with_stride`].
fn rgb_of_four_byte_pixels<'a>(
    array: &'a Bound<'_, PyUntypedArray>,
) -> Option<Result<ImageView<'a>, KimiError>> {
    let &[h, w, 3] = array.shape() else {
        return None;
    };
    let base = array.getattr("base").ok()?;
    let base = base.cast::<PyArrayDyn<u8>>().ok()?;
    let strides = [w.checked_mul(4)?, 4, 1].map(|s| isize::try_from(s).unwrap_or(-1));
    // SAFETY (both): reading the arrays' data pointers (no access through them).
    let data = unsafe { (*array.as_array_ptr()).data };
    let base_data = unsafe { (*base.as_array_ptr()).data };
    if base.shape() != [h, w, 4]
        || !base.is_c_contiguous()
        || array.strides() != strides
        || data != base_data
    {
        return None;
    }
    // SAFETY: `base` is a C-contiguous array of `h * w * 4` bytes from `data`,
    // kept alive (and its memory with it) by `array`, its view, which is
    // borrowed for `'a`; the borrow of `array` covers the same memory.
    let bytes: &'a [u8] = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), h * w * 4) };
    Some(ImageView::with_stride(bytes, w, h, 3, 4))
}

/// A borrowed `out=` array: the element type that `dtype` writes.
pub(crate) enum OutArray<'py> {
    /// float32 values.
    Float32(PyReadwriteArrayDyn<'py, f32>),
    /// bfloat16 / float16 bits, through a `uint16` view of the caller's array.
    Bits16(PyReadwriteArrayDyn<'py, u16>),
}

/// Owner of a large output's memory: the base object of the numpy array that
/// [`new_output`] makes on it. When numpy frees the array (and every view of
/// it), the memory goes back to the crate's pool for a later call
/// ([`pool::give_back`]).
#[pyclass(frozen, module = "kimi_k3_rs._native", name = "OutputMemory")]
pub(crate) struct PyOutputMemory {
    memory: std::sync::Mutex<Option<OutputMemory>>,
}

impl Drop for PyOutputMemory {
    fn drop(&mut self) {
        let memory = self
            .memory
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(memory) = memory {
            pool::give_back(memory);
        }
    }
}

/// A C-contiguous array of `shape` on `memory`, with `owner` (which holds
/// `memory`) as its base.
///
/// # Safety
/// `memory` is `owner`'s block (page-aligned, at least `shape`'s bytes of `T`)
/// and stays valid while `owner` lives.
unsafe fn array_on<'py, T: numpy::Element>(
    memory: *mut u8,
    shape: [usize; 4],
    owner: Bound<'py, PyOutputMemory>,
) -> Bound<'py, PyAny> {
    // SAFETY: per this function's contract, `memory` holds `shape`'s elements
    // of `T`, aligned; the view lives only for this call.
    let view = unsafe { ArrayView4::<T>::from_shape_ptr(shape, memory.cast::<T>().cast_const()) };
    // SAFETY: `owner` keeps the memory alive as the array's base, and nothing
    // reallocates or frees it before `owner` is dropped.
    unsafe { numpy::PyArray4::<T>::borrow_from_array(&view, owner.into_any()) }.into_any()
}

/// A new output of `shape` for `dtype` (float32, float16, or the uint16 bits
/// of bfloat16), its values unset. Outputs of at least
/// [`POOL_MIN_BYTES`](pool::POOL_MIN_BYTES) live in page-aligned memory
/// with huge pages asked for, taken from the pool of outputs freed by
/// earlier calls when one fits (already faulted in: no page faults); smaller
/// ones come from `numpy.empty`.
///
/// # Errors
/// `KimiError::Allocation` with the reason when the memory cannot be had.
pub(crate) fn new_output<'py>(
    py: Python<'py>,
    shape: [usize; 4],
    dtype: OutputDtype,
) -> PyResult<Bound<'py, PyAny>> {
    let name = match dtype {
        OutputDtype::Bfloat16 => "uint16",
        other => other.name(),
    };
    let fail = |reason: String| {
        to_py_err(KimiError::Allocation {
            shape: format!("{shape:?}"),
            reason: crate::error::abbreviate(&reason),
        })
    };
    let element = if dtype == OutputDtype::Float32 { 4 } else { 2 };
    let bytes = shape
        .iter()
        .try_fold(element, |n: usize, &d| n.checked_mul(d))
        .ok_or_else(|| fail("too large".to_owned()))?;
    if bytes < pool::POOL_MIN_BYTES {
        return py
            .import("numpy")?
            .getattr("empty")?
            .call1((shape.to_vec(), name))
            .map_err(|e| fail(e.value(py).to_string()));
    }
    let memory = pool::take_output(bytes).ok_or_else(|| fail("out of memory".to_owned()))?;
    let ptr = memory.as_ptr();
    let owner = Bound::new(
        py,
        PyOutputMemory {
            memory: std::sync::Mutex::new(Some(memory)),
        },
    )?;
    // SAFETY: `ptr` is `owner`'s page-aligned block of at least `bytes`, the
    // size of `shape` in elements of this dtype; `owner` frees it only when
    // dropped, after the array.
    if dtype == OutputDtype::Float32 {
        Ok(unsafe { array_on::<f32>(ptr, shape, owner) })
    } else {
        let bits = unsafe { array_on::<u16>(ptr, shape, owner) };
        if name == "uint16" {
            Ok(bits)
        } else {
            bits.call_method1("view", (name,))
        }
    }
}

/// The first of `images` whose bytes overlap those of `out` (a numpy array;
/// `None` for anything else, which [`borrow_out`] then refuses).
pub(crate) fn out_overlap(
    out: &Bound<'_, PyAny>,
    images: &[ImageView<'_>],
) -> PyResult<Option<usize>> {
    let Ok(array) = out.cast::<PyUntypedArray>() else {
        return Ok(None);
    };
    let start: usize = array.getattr("ctypes")?.getattr("data")?.extract()?;
    let nbytes: usize = array.getattr("nbytes")?.extract()?;
    Ok(crate::pipeline::overlapping_image(
        start..start.saturating_add(nbytes),
        images,
    ))
}

/// Borrow `out` for writing: a numpy array, native byte order, C-contiguous,
/// aligned and writeable, of an element type `dtype` accepts.
pub(crate) fn borrow_out<'py>(
    out: &Bound<'py, PyAny>,
    dtype: OutputDtype,
) -> PyResult<OutArray<'py>> {
    let array = out.cast::<PyUntypedArray>().map_err(|_| {
        let got = out
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        to_py_err(BindingError::NotAnArray {
            what: "out".to_owned(),
            got: crate::error::abbreviate(&got),
        })
    })?;
    let name = dtype_name(array);
    check_out_dtype(dtype, &name).map_err(to_py_err)?;
    if array.dtype().is_native_byteorder() == Some(false) {
        let code = array.dtype().getattr("str")?.extract::<String>()?;
        return Err(to_py_err(BindingError::OutByteOrder(
            crate::error::abbreviate(&code),
        )));
    }
    let flags = array.getattr("flags")?;
    let layout_ok = array.is_c_contiguous()
        && flags.getattr("aligned")?.extract::<bool>()?
        && flags.getattr("writeable")?.extract::<bool>()?;
    if !layout_ok {
        return Err(to_py_err(BindingError::OutLayout));
    }
    let busy = |e: numpy::BorrowError| {
        to_py_err(BindingError::Busy {
            what: "out".to_owned(),
            reason: e.to_string(),
        })
    };
    if dtype == OutputDtype::Float32 {
        let typed = array
            .cast::<PyArrayDyn<f32>>()
            .map_err(|_| to_py_err(BindingError::OutLayout))?;
        return Ok(OutArray::Float32(typed.try_readwrite().map_err(busy)?));
    }
    let bits = array.call_method1("view", ("uint16",))?;
    let typed = bits
        .cast_into::<PyArrayDyn<u16>>()
        .map_err(|_| to_py_err(BindingError::OutLayout))?;
    Ok(OutArray::Bits16(typed.try_readwrite().map_err(busy)?))
}
