//! Bindings of the native decoders ([`crate::decode`]): loading libjpeg, and
//! one file to pixels (what the self-check compares with Pillow).

use numpy::{IntoPyArray, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::errors::to_py_err;
use crate::decode::{self, Header, Limits, Route};

/// An encoded JPEG or PNG file that the native decoders will decode, with the
/// size and mode its headers give (the result of `route_encoded`); `preprocess`
/// takes it in place of an array and decodes it with the GIL released.
#[pyclass(frozen, name = "EncodedImage", module = "kimi_k3_rs._native")]
pub(crate) struct PyEncodedImage {
    pub(crate) data: Py<PyBytes>,
    pub(crate) header: Header,
}

#[pymethods]
impl PyEncodedImage {
    /// `"JPEG"` or `"PNG"`.
    #[getter]
    fn format(&self) -> &'static str {
        self.header.format.name()
    }

    /// `(width, height)` in pixels, from the headers.
    #[getter]
    fn size(&self) -> (usize, usize) {
        (self.header.width, self.header.height)
    }

    /// Pillow's mode of the decoded pixels: `L`, `LA`, `RGB` or `RGBA`.
    #[getter]
    fn mode(&self) -> &'static str {
        ["L", "LA", "RGB", "RGBA"][self.header.channels - 1]
    }

    /// Bytes of the decoded pixels (`width * height * channels`).
    #[getter]
    fn decoded_bytes(&self) -> PyResult<usize> {
        self.header.decoded_len().map_err(to_py_err)
    }

    fn __repr__(&self) -> String {
        format!(
            "<EncodedImage {} {} {}x{}>",
            self.format(),
            self.mode(),
            self.header.width,
            self.header.height
        )
    }
}

/// Route one encoded file from its headers: an `EncodedImage` when the native
/// decoders give Pillow's pixels for it, the reason (a `str`) when Pillow must
/// decode it (`"Pillow fails: ..."` for headers Pillow fails on), `None` for a
/// format other than JPEG and PNG. `ImageError` for a JPEG over the cost bounds.
#[pyfunction]
#[pyo3(signature = (data, /, *, exif_transpose = false))]
pub(crate) fn route_encoded<'py>(
    py: Python<'py>,
    data: Bound<'py, PyBytes>,
    exif_transpose: bool,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let bytes = data.as_bytes();
    let routed = py
        .detach(|| decode::route(bytes, exif_transpose))
        .map_err(to_py_err)?;
    Ok(match routed {
        None => None,
        Some(Route::Pillow(reason)) => Some(reason.into_pyobject(py)?.into_any()),
        Some(Route::Native(header)) => {
            let data = data.unbind();
            Some(Bound::new(py, PyEncodedImage { data, header })?.into_any())
        }
    })
}

/// Load the libjpeg at `path` (the one the installed Pillow links) for this
/// process; returns its description. `OSError` when it cannot be used.
#[pyfunction]
#[pyo3(signature = (path, /))]
pub(crate) fn load_libjpeg(path: std::path::PathBuf) -> PyResult<String> {
    decode::jpeg::load(&path).map_err(pyo3::exceptions::PyOSError::new_err)
}

/// Decode one encoded file natively, as the pipeline would.
///
/// Returns `("native", array)` (uint8 `HxW` for `L`, else `HxWxC`, the array
/// `np.asarray` gives of Pillow's decode), `("pillow", reason)` for a file the
/// native path hands to Pillow, or `("unknown", "")` for a format it does not
/// read. `ImageError` for corrupt image data or a JPEG over the cost bounds.
#[pyfunction]
#[pyo3(signature = (data, /, *, exif_transpose = false))]
pub(crate) fn decode_image<'py>(
    py: Python<'py>,
    data: &[u8],
    exif_transpose: bool,
) -> PyResult<(&'static str, Bound<'py, PyAny>)> {
    let routed = py
        .detach(|| decode::route(data, exif_transpose))
        .map_err(to_py_err)?;
    let header = match routed {
        None => return Ok(("unknown", "".into_pyobject(py)?.into_any())),
        Some(Route::Pillow(reason)) => return Ok(("pillow", reason.into_pyobject(py)?.into_any())),
        Some(Route::Native(header)) => header,
    };
    let pixels = py
        .detach(|| decode::decode_image(data, &header, &Limits::default()))
        .map_err(to_py_err)?;
    let shape = if header.channels == 1 {
        vec![header.height, header.width]
    } else {
        vec![header.height, header.width, header.channels]
    };
    Ok(("native", pixels.into_pyarray(py).reshape(shape)?.into_any()))
}
