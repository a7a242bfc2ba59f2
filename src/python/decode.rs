//! Bindings of the native decoders ([`crate::decode`]): loading libjpeg, and
//! one file to pixels (what the self-check compares with Pillow).

use numpy::{IntoPyArray, PyArrayMethods};
use pyo3::prelude::*;

use super::errors::to_py_err;
use crate::decode::{self, Limits, Route};

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
/// read. `ImageError` for corrupt data.
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
    let len = header.decoded_len().map_err(to_py_err)?;
    let pixels = py
        .detach(|| {
            let mut out = vec![0u8; len];
            decode::decode_into(data, &header, &Limits::default(), &mut out).map(|()| out)
        })
        .map_err(to_py_err)?;
    let shape = if header.channels == 1 {
        vec![header.height, header.width]
    } else {
        vec![header.height, header.width, header.channels]
    };
    Ok(("native", pixels.into_pyarray(py).reshape(shape)?.into_any()))
}
