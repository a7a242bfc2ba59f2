//! Zero-copy input of PIL images: Pillow's Arrow C data interface export
//! (`Image.__arrow_c_array__`, Pillow >= 11.2.1) read as a numpy view of the
//! image's own memory.
//!
//! What Pillow exports (`libImaging/Arrow.c: export_imaging_schema`,
//! `export_imaging_array`; checked against Pillow 12.3.0 and 13.0.0):
//! * a one-band image (`L`): schema format `"C"` (uint8), named after the
//!   band; an array of `width * height` values, offset 0, no nulls, two
//!   buffers (validity, absent; the pixel bytes).
//! * a multi-band image (`LA`, `RGB`, `RGBA`, ...): schema `"+w:4"` (fixed-size
//!   list of 4), whose one child is `"C"` named after the mode; an array of
//!   `width * height` lists (one buffer, validity, absent) whose one child
//!   holds the `4 * width * height` bytes (two buffers). Every pixel is 4
//!   bytes: `RGB` is `R, G, B, pad`; `LA` is `L, L, L, A`.
//! * only an image in one block of memory exports; otherwise Pillow raises
//!   `ValueError`.
//!
//! The array holds a reference on Pillow's image storage (its release callback
//! drops it, `release_const_array`), so the pixels live as long as the array
//! capsule, whatever happens to the `Image` object. The capsules' destructors
//! (`_imaging.c: ReleaseArrowArrayPyCapsule`) call `release`: the capsules are
//! only borrowed here, never moved out of.
//!
//! Structs: <https://arrow.apache.org/docs/format/CDataInterface.html>;
//! capsules: <https://arrow.apache.org/docs/format/CDataInterface/PyCapsuleInterface.html>.

use std::ffi::{c_char, c_void, CStr};

use numpy::ndarray::{ArrayView2, ArrayView3};
use numpy::{IntoPyArray, PyArray2, PyArray3, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyDict};

use super::errors::{to_py_err, BindingError};
use crate::error::KimiError;

/// `struct ArrowSchema` of the Arrow C data interface.
#[repr(C)]
struct ArrowSchema {
    format: *const c_char,
    name: *const c_char,
    metadata: *const c_char,
    flags: i64,
    n_children: i64,
    children: *mut *mut ArrowSchema,
    dictionary: *mut ArrowSchema,
    release: Option<unsafe extern "C" fn(*mut ArrowSchema)>,
    private_data: *mut c_void,
}

/// `struct ArrowArray` of the Arrow C data interface.
#[repr(C)]
struct ArrowArray {
    length: i64,
    null_count: i64,
    offset: i64,
    n_buffers: i64,
    n_children: i64,
    buffers: *mut *const c_void,
    children: *mut *mut ArrowArray,
    dictionary: *mut ArrowArray,
    release: Option<unsafe extern "C" fn(*mut ArrowArray)>,
    private_data: *mut c_void,
}

/// The Arrow export of one PIL image: the two capsules, kept for as long as a
/// numpy view of the pixels exists (it is the views' base object), and where
/// the pixels are. Made only by [`pil_pixels`], after every check.
#[pyclass(frozen, module = "kimi_k3_rs._native", name = "PillowExport")]
pub(crate) struct PillowExport {
    /// The `arrow_schema` and `arrow_array` capsules.
    _capsules: (Py<PyAny>, Py<PyAny>),
    /// The first pixel byte (an address, so that the class is `Send`).
    data: usize,
    /// `width * height` bytes (`L`) or 4 times that: all of Pillow's pixel memory.
    len: usize,
}

impl PillowExport {
    /// All the pixel bytes of the image.
    fn bytes(&self) -> &[u8] {
        // SAFETY: `data .. data + len` is the pixel memory of the export, checked
        // in `pil_pixels` against the export's lengths; it stays allocated and
        // unmoved while the array capsule held in `self` lives (Pillow's
        // storage refcount), and nothing here writes to it.
        unsafe { std::slice::from_raw_parts(self.data as *const u8, self.len) }
    }
}

/// A check of the export: `Err(detail)` when it is not what the mode exports.
fn ensure(ok: bool, detail: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(detail())
    }
}

/// A C string of the export, or `None` for a null pointer.
///
/// # Safety
/// `ptr` is null or a NUL-terminated string that outlives the result.
unsafe fn c_str<'a>(ptr: *const c_char) -> Option<&'a str> {
    if ptr.is_null() {
        return None;
    }
    CStr::from_ptr(ptr).to_str().ok()
}

/// Where the pixels of an export are, checked against `mode` (1 or 4 bytes a
/// pixel) and `pixels = width * height`: `(data, len)`.
///
/// # Safety
/// `schema` and `array` point to the structs of live capsules.
unsafe fn locate(
    schema: &ArrowSchema,
    array: &ArrowArray,
    mode: &str,
    pixels: usize,
) -> Result<(*const u8, usize), String> {
    ensure(schema.release.is_some() && array.release.is_some(), || {
        "it was already released".to_owned()
    })?;
    let plain = |a: &ArrowArray, length: usize, what: &str| {
        ensure(
            usize::try_from(a.length) == Ok(length) && a.offset == 0 && a.null_count == 0,
            || {
                format!(
                    "{what} has length {}, offset {}, null count {}; expected {length}, 0, 0",
                    a.length, a.offset, a.null_count
                )
            },
        )
    };
    let format = c_str(schema.format).unwrap_or("");
    let values = if mode == "L" {
        ensure(format == "C" && schema.n_children == 0, || {
            format!("its format is {format:?}, expected \"C\"")
        })?;
        ensure(c_str(schema.name).is_none_or(|n| n == mode), || {
            "its band name is not the mode".to_owned()
        })?;
        plain(array, pixels, "the array")?;
        array
    } else {
        ensure(
            format == "+w:4" && schema.n_children == 1 && !schema.children.is_null(),
            || format!("its format is {format:?}, expected \"+w:4\" with one child"),
        )?;
        let child = *schema.children;
        ensure(!child.is_null(), || "its child schema is null".to_owned())?;
        let child = &*child;
        let child_format = c_str(child.format).unwrap_or("");
        ensure(child_format == "C", || {
            format!("its child format is {child_format:?}, expected \"C\"")
        })?;
        ensure(c_str(child.name).is_none_or(|n| n == mode), || {
            "its child is not named after the mode".to_owned()
        })?;
        plain(array, pixels, "the array")?;
        ensure(
            array.n_children == 1 && !array.children.is_null() && !(*array.children).is_null(),
            || "the array has no child".to_owned(),
        )?;
        let values = &**array.children;
        plain(values, 4 * pixels, "the child array")?;
        values
    };
    ensure(values.n_buffers == 2 && !values.buffers.is_null(), || {
        format!("the values have {} buffers, expected 2", values.n_buffers)
    })?;
    let data = (*values.buffers.add(1)).cast::<u8>();
    ensure(!data.is_null(), || "its data buffer is null".to_owned())?;
    Ok((data, exported_pixel_bytes(mode) * pixels))
}

/// Bytes a pixel of an image of `mode` (one of [`stored_bands`]) in Pillow's
/// storage and export: 1 for `L`, else 4.
fn exported_pixel_bytes(mode: &str) -> usize {
    if mode == "L" {
        1
    } else {
        4
    }
}

/// The bands of an 8-bit PIL mode whose storage this module reads: `L` (one
/// byte a pixel); two bands in bytes 0 and 3 of 4-byte pixels (`LA`, `La`,
/// `PA`); three in bytes 0-2 (`RGB`, `YCbCr`, `HSV`, `LAB`, the 4th a pad);
/// four (`RGBA`, `CMYK`, `RGBX`, `RGBa`). `None` for another mode.
fn stored_bands(mode: &str) -> Option<usize> {
    match mode {
        "L" => Some(1),
        "LA" | "La" | "PA" => Some(2),
        "RGB" | "YCbCr" | "HSV" | "LAB" => Some(3),
        "RGBA" | "CMYK" | "RGBX" | "RGBa" => Some(4),
        _ => None,
    }
}

/// `(mode, width, height, channels)` of a PIL image of one of the `modes`
/// (its own, or `mode` when given; [`stored_bands`] gives the channels) whose
/// `4 * width * height` bytes fit in `usize`.
///
/// # Errors
/// `ImageError` (`BindingError::ArrowExport`, `rule` saying which modes) for
/// another mode; `KimiError::Channels` / `EmptyImage` / `Overflow` for a shape
/// the core does not take.
fn exported_shape(
    image: &Bound<'_, PyAny>,
    mode: Option<&str>,
    modes: &[&str],
    rule: &str,
) -> PyResult<(String, usize, usize, usize)> {
    let mode: String = match mode {
        Some(mode) => mode.to_owned(),
        None => image.getattr("mode")?.extract()?,
    };
    let (width, height): (usize, usize) = image.getattr("size")?.extract()?;
    let Some(channels) = stored_bands(&mode).filter(|_| modes.contains(&mode.as_str())) else {
        return Err(to_py_err(BindingError::ArrowExport {
            mode: crate::error::abbreviate(&mode),
            detail: rule.to_owned(),
        }));
    };
    crate::image::check_shape(width, height, channels).map_err(to_py_err)?;
    width
        .checked_mul(height)
        .filter(|n| n.checked_mul(4).is_some())
        .ok_or_else(|| {
            to_py_err(KimiError::Overflow {
                what: "image bytes",
            })
        })?;
    Ok((mode, width, height, channels))
}

/// The modes [`pil_pixels`] reads (the modes the core takes as they are).
const PIXEL_MODES: [&str; 4] = ["L", "LA", "RGB", "RGBA"];

/// The modes [`pil_rows`] reads: every mode of [`stored_bands`].
const STORED_MODES: [&str; 12] = [
    "L", "LA", "La", "PA", "RGB", "YCbCr", "HSV", "LAB", "RGBA", "CMYK", "RGBX", "RGBa",
];

/// The export in the capsules `schema` and `array` of an image of `mode`
/// and `pixels` pixels, checked to be the layout that mode exports.
///
/// # Errors
/// `ImageError` (`BindingError::ArrowExport`) when it is not.
fn checked_export(
    schema: Bound<'_, PyAny>,
    array: Bound<'_, PyAny>,
    mode: &str,
    pixels: usize,
) -> PyResult<PillowExport> {
    let bad = |detail: String| {
        to_py_err(BindingError::ArrowExport {
            mode: crate::error::abbreviate(mode),
            detail,
        })
    };
    let schema_ptr = schema
        .cast::<PyCapsule>()
        .map_err(|_| bad("it is not a capsule pair".to_owned()))?
        .pointer_checked(Some(c"arrow_schema"))?;
    let array_ptr = array
        .cast::<PyCapsule>()
        .map_err(|_| bad("it is not a capsule pair".to_owned()))?
        .pointer_checked(Some(c"arrow_array"))?;
    // SAFETY: the capsules are named as the PyCapsule interface names the
    // structs they hold, and are alive (`schema`, `array`) while they are read.
    let (data, len) = unsafe {
        locate(
            schema_ptr.cast::<ArrowSchema>().as_ref(),
            array_ptr.cast::<ArrowArray>().as_ref(),
            mode,
            pixels,
        )
    }
    .map_err(bad)?;
    Ok(PillowExport {
        _capsules: (schema.unbind(), array.unbind()),
        data: data as usize,
        len,
    })
}

/// A PIL image that the pipeline reads band by band ([`crate::RowSource`]):
/// each band of rows is cropped (a new image of one block, which Pillow
/// exports), converted to `mode` when asked (Pillow's conversions to the
/// modes the core takes are pixel by pixel, so a band's conversion is the
/// whole image's, band by band), and its export copied into the band's
/// buffer, so neither the image nor its conversion is ever held whole. The
/// bands hold Pillow's stored bytes of an 8-bit mode ([`stored_bands`]),
/// packed but for the pad byte of three bands (two bands packed from bytes 0
/// and 3). Made by [`pil_rows`].
#[pyclass(frozen, module = "kimi_k3_rs._native", name = "PillowRows")]
#[derive(Debug)]
pub(crate) struct PillowRows {
    /// The image (an `Image` the caller does not close: the library passes
    /// one on the same storage as the caller's, `pil_export._twin`).
    image: Py<PyAny>,
    /// Its storage, `image.im` (a `PIL._imaging.ImagingCore`).
    storage: Py<PyAny>,
    /// The mode each band is converted to, if any.
    convert: Option<String>,
    /// The bands' mode (the image's, or `convert`).
    mode: String,
    /// A `BaseException` that is not an `Exception` (`KeyboardInterrupt`,
    /// `SystemExit`) raised while rows were read: re-raised as it is after
    /// the call ([`PillowRows::take_interrupt`]), not turned into an
    /// `ImageError`.
    interrupt: std::sync::Mutex<Option<PyErr>>,
    width: usize,
    height: usize,
    pub(crate) channels: usize,
}

impl PillowRows {
    /// The `KeyboardInterrupt` (or other non-`Exception`) a read met, if any:
    /// the caller raises it in place of the read's `ImageError`.
    pub(crate) fn take_interrupt(&self) -> Option<PyErr> {
        self.interrupt
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// Bytes from one pixel to the next in the bands: Pillow's 4 for three
    /// bands, else the channels (two bands are packed from bytes 0 and 3).
    fn pixel_stride(&self) -> usize {
        if self.channels == 3 {
            4
        } else {
            self.channels
        }
    }

    /// The core's view of the image, its rows read from `self` as needed.
    ///
    /// # Errors
    /// As [`ImageView::from_rows`](crate::ImageView::from_rows).
    pub(crate) fn view(&self) -> Result<crate::ImageView<'_>, KimiError> {
        let stride = self.pixel_stride();
        crate::ImageView::from_rows(self, self.width, self.height, self.channels, stride)
    }

    /// How many rows of the bands Pillow allocates in one block of its arena
    /// (`libImaging/Storage.c: ImagingAllocateArray`: the block size over the
    /// row's bytes, at least 1; rows are unpadded, `pil_export._exportable`):
    /// the most that one crop (or its conversion) holds in one block, which
    /// its export needs. Read at each read, as Pillow allocates the crops then.
    fn rows_per_block(&self, py: Python<'_>) -> PyResult<usize> {
        let block: usize = py
            .import("PIL._imaging")?
            .call_method0("get_block_size")?
            .extract()?;
        Ok((block / (self.width * exported_pixel_bytes(&self.mode))).max(1))
    }

    /// Rows `first..end` (as many as one block holds) cropped, converted when
    /// asked, exported and copied into `out`.
    fn read_block(&self, py: Python<'_>, first: usize, end: usize, out: &mut [u8]) -> PyResult<()> {
        let bbox = ((0, first, self.width, end),);
        // A conversion is `Image.convert` (palette, transparency); a plain
        // crop is the storage's own.
        let (schema, array): (Bound<'_, PyAny>, Bound<'_, PyAny>) = match &self.convert {
            Some(mode) => {
                let band = self.image.bind(py).call_method1("crop", bbox)?;
                let band = band.call_method1("convert", (mode,))?;
                band.call_method0("__arrow_c_array__")?.extract()?
            }
            None => {
                let band = self.storage.bind(py).call_method1("crop", bbox)?;
                (
                    band.call_method0("__arrow_c_schema__")?,
                    band.call_method0("__arrow_c_array__")?,
                )
            }
        };
        // `locate` checks the export's length: 1 byte a pixel for `L`, else 4.
        let export = checked_export(schema, array, &self.mode, (end - first) * self.width)?;
        let bytes = export.bytes();
        if self.channels == 2 {
            for (packed, pixel) in out.chunks_exact_mut(2).zip(bytes.chunks_exact(4)) {
                packed.copy_from_slice(&[pixel[0], pixel[3]]);
            }
        } else {
            out.copy_from_slice(bytes);
        }
        Ok(())
    }
}

impl crate::RowSource for PillowRows {
    /// The rows, one block of Pillow's arena at a time (Pillow exports only
    /// an image in one block, and a strong downscale reads more rows at once
    /// than one block holds): each cropped, converted when asked, exported and
    /// copied into `out`. Pillow releases the GIL while it copies them, so
    /// each call waits for it once more: the pipeline reads ahead in windows
    /// of a few MB.
    fn read_rows(&self, first: usize, end: usize, out: &mut [u8]) -> Result<(), String> {
        let row_len = self.width * self.pixel_stride();
        if out.len() != (end - first) * row_len {
            return Err(format!("{} bytes asked for rows {first}..{end}", out.len()));
        }
        Python::attach(|py| -> PyResult<()> {
            let rows = self.rows_per_block(py)?;
            for (i, out) in out.chunks_mut(rows * row_len).enumerate() {
                let top = first + i * rows;
                self.read_block(py, top, top + out.len() / row_len, out)?;
            }
            Ok(())
        })
        .map_err(|e| {
            let text = e.to_string();
            if !Python::attach(|py| e.is_instance_of::<pyo3::exceptions::PyException>(py)) {
                let mut interrupt = self
                    .interrupt
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                interrupt.get_or_insert(e);
            }
            text
        })
    }
}

/// A loaded PIL image as a [`PillowRows`] that the pipeline and
/// `resize_bicubic` read band by band (no pixel is read here), its bands
/// converted to `convert` when given. The bands' mode (the image's, or
/// `convert`) is an 8-bit mode (`L`, `LA`, `La`, `PA`, `RGB`, `YCbCr`, `HSV`,
/// `LAB`, `RGBA`, `CMYK`, `RGBX`, `RGBa`); they give `np.asarray`'s values for
/// `L`, `LA`, `RGB`, `RGBA`, and Pillow's stored bytes for the others
/// (`LAB`'s a and b XOR 128, as Pillow resamples them). `image` must stay
/// open while the rows are read (the library passes an `Image` of its own on
/// the same storage).
///
/// # Errors
/// `ImageError` for a bands' mode outside these, and as [`pil_pixels`] for
/// the shape.
#[pyfunction]
#[pyo3(signature = (image, /, convert = None))]
pub(crate) fn pil_rows(image: &Bound<'_, PyAny>, convert: Option<String>) -> PyResult<PillowRows> {
    let rule = match convert {
        None => "the mode is not an 8-bit mode Pillow exports",
        Some(_) => "the mode converted to is not an 8-bit mode Pillow exports",
    };
    let (mode, width, height, channels) =
        exported_shape(image, convert.as_deref(), &STORED_MODES, rule)?;
    Ok(PillowRows {
        image: image.clone().unbind(),
        storage: image.getattr("im")?.unbind(),
        convert,
        interrupt: std::sync::Mutex::new(None),
        mode,
        width,
        height,
        channels,
    })
}

/// The pixels of a PIL image of mode `L`, `LA`, `RGB` or `RGBA`, read through
/// its Arrow export (`image.__arrow_c_array__()`) without copying them.
///
/// Returns the array `np.asarray(image)` would give (same shape, same values),
/// read-only: for `L` (`HxW`), `RGB` (`HxWx3`, strides `(4W, 4, 1)`: Pillow's
/// 4-byte pixels, the pad byte skipped) and `RGBA` (`HxWx4`) a view of the
/// image's own memory, kept alive by its base object (a `PillowExport`
/// holding the capsules); for `LA` a packed `HxWx2` copy (Pillow stores L and A
/// in bytes 0 and 3). The `RGB` view is `v[..., :3]` of the `HxWx4` view `v`
/// of the 4-byte pixels, which the core reads in place
/// (`borrow.rs: rgb_of_four_byte_pixels`).
///
/// # Errors
/// What `__arrow_c_array__` raises (Pillow's `ValueError` for an image in
/// several blocks of memory, or with rows that are not contiguous; an
/// `AttributeError` before Pillow 11.2.1); `ImageError` (`KimiError::Channels`'
/// `ValueError` for another mode) when the image is empty or the export is
/// not the layout its mode exports (`BindingError::ArrowExport`).
#[pyfunction]
#[pyo3(signature = (image, /))]
pub(crate) fn pil_pixels<'py>(
    py: Python<'py>,
    image: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let (mode, width, height, channels) = exported_shape(
        image,
        None,
        &PIXEL_MODES,
        "the mode is not L, LA, RGB or RGBA",
    )?;
    let (schema, array): (Bound<'py, PyAny>, Bound<'py, PyAny>) =
        image.call_method0("__arrow_c_array__")?.extract()?;
    let export = checked_export(schema, array, &mode, width * height)?;
    if channels == 2 {
        // L in byte 0, A in byte 3: packed, as np.asarray gives LA.
        let bytes = export.bytes();
        let packed: Vec<u8> = py.detach(|| {
            bytes
                .chunks_exact(4)
                .flat_map(|px| [px[0], px[3]])
                .collect()
        });
        return Ok(packed
            .into_pyarray(py)
            .reshape([height, width, 2])?
            .into_any());
    }
    let base = Bound::new(py, export)?;
    let this = base.get();
    let ptr = this.data as *const u8;
    // SAFETY (all three): the views cover `data .. data + len` exactly (the
    // last byte read is the last pixel's last channel, inside it), and `base`,
    // their numpy base object, keeps that memory alive and unmoved.
    let view = match channels {
        1 => {
            let v = unsafe { ArrayView2::from_shape_ptr((height, width), ptr) };
            unsafe { PyArray2::borrow_from_array(&v, base.clone().into_any()) }.into_any()
        }
        _ => {
            let v = unsafe { ArrayView3::from_shape_ptr((height, width, 4), ptr) };
            unsafe { PyArray3::borrow_from_array(&v, base.clone().into_any()) }.into_any()
        }
    };
    let kwargs = PyDict::new(py);
    kwargs.set_item("write", false)?;
    view.call_method("setflags", (), Some(&kwargs))?;
    if channels == 3 {
        // RGB: the colour bytes of the 4-byte pixels, which the core reads in
        // place (`borrow.rs: rgb_of_four_byte_pixels`).
        let colour = (
            pyo3::types::PyEllipsis::get(py),
            pyo3::types::PySlice::new(py, 0, 3, 1),
        );
        return view.get_item(colour);
    }
    Ok(view)
}
