//! The exception hierarchy of the package, the faults only the binding
//! detects ([`BindingError`]), the one mapping of core and binding errors onto
//! the exceptions, and the one abbreviation of Python values embedded in
//! messages.

use pyo3::create_exception;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyMemoryView, PyString, PyTuple, PyType};

use crate::error::{abbreviate as abbreviate_text, KimiError};
use thiserror::Error;

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
    "An image cannot be preprocessed (shape, size, channels, unreadable data)."
);
create_exception!(
    kimi_k3_rs,
    ImageTooLargeError,
    ImageError,
    "An encoded image refused before decoding as too large or too costly to decode: over \
     max_image_pixels or max_decoded_bytes, decoding to more than its file's size allows, or a \
     JPEG over its cost bounds (scans, blocks per byte, block passes)."
);

/// A failure of a call through the binding: a core error, or a fault of the
/// Python values themselves that only the binding sees (not an array, the
/// wrong dtype or layout, a buffer in use, ...). Messages are stable and tested
/// verbatim; `PixelDtype` keeps sglang's text
/// (`kimi_k3_image_processing.to_hwc_uint8`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum BindingError {
    /// An error of the core.
    #[error(transparent)]
    Core(#[from] KimiError),
    /// A `media_proc_cfg` value of the wrong kind where the checkpoint raises a
    /// `TypeError` (`transparent_bg_config` that is not a mapping).
    #[error("media_proc_cfg[\"{key}\"] must be {rule}, got {value}")]
    ConfigType {
        /// The config key.
        key: &'static str,
        /// What the value must be.
        rule: &'static str,
        /// The offending value, rendered and abbreviated.
        value: String,
    },
    /// `transparent_bg_config` has a key the checkpoint's dataclass does not
    /// take (the dataclass constructor's own `TypeError` text).
    #[error("TransparentBgConfig.__init__() got an unexpected keyword argument '{0}'")]
    BackgroundKey(String),
    /// Pillow's Arrow export of an image is not the layout its mode has (the
    /// zero-copy input of a PIL image); `detail` says what differs.
    #[error("the Arrow export of the {mode} image is not usable: {detail}")]
    ArrowExport {
        /// The image's mode, abbreviated.
        mode: String,
        /// What is wrong with the export.
        detail: String,
    },
    /// Pixels are not raw `uint8` (sglang's text); the value is the dtype's name.
    #[error("Kimi-K3 preprocessing expects raw uint8 pixels, got {0}")]
    PixelDtype(String),
    /// An array of pixels is not 2-D (`HxW`) or 3-D (`HxWxC`); `shape` is
    /// rendered as a Python tuple.
    #[error("expected an HxW or HxWxC uint8 array, got shape {shape}")]
    ImageShape {
        /// The shape given, e.g. `(2, 3, 4, 5)`.
        shape: String,
    },
    /// A caller's array that must be C-contiguous is not.
    #[error("{what} must be C-contiguous")]
    NotContiguous {
        /// The array, e.g. `"image 2"`.
        what: String,
    },
    /// An array of sizes is not `[n, 2]` (or `[n, 3]` for video), rendered as a
    /// Python tuple.
    #[error("sizes must have shape [n, 2] (width, height), got {shape}")]
    SizesShape {
        /// The shape given.
        shape: String,
    },
    /// An array of video chunk sizes is not `[n, 3]`, rendered as a Python tuple.
    #[error("sizes must have shape [n, 3] (width, height, num_frames), got {shape}")]
    VideoSizesShape {
        /// The shape given.
        shape: String,
    },
    /// A caller's `out=` array is not in the native byte order.
    #[error("out must have the native byte order, got dtype '{0}'")]
    OutByteOrder(String),
    /// A caller's `out=` array is not C-contiguous, aligned and writeable.
    #[error("out must be a C-contiguous, aligned, writeable array")]
    OutLayout,
    /// A caller's `out=` array (or an input) is in use by another call.
    #[error("{what} is in use by another call (a shared or overlapping buffer): {reason}")]
    Busy {
        /// The argument, e.g. `"out"` or `"image 1"`.
        what: String,
        /// Why, in the borrow checker's words.
        reason: String,
    },
    /// An argument that must be a numpy array is not one.
    #[error("{what} must be a numpy array, got {got}")]
    NotAnArray {
        /// The argument, e.g. `"out"`.
        what: String,
        /// What was given: its type name, abbreviated.
        got: String,
    },
    /// An argument that must be an integer is not one.
    #[error("{name} must be an int{or_none}, got {value}")]
    NotAnInt {
        /// The argument, e.g. `"num_threads"`.
        name: &'static str,
        /// `" or None"` where None is accepted, else empty.
        or_none: &'static str,
        /// The value given, abbreviated.
        value: String,
    },
}

/// The attribute (set to `True`) that marks an exception whose class and text
/// are another project's: `kimi_k3_rs.errors.is_verbatim` reads it (the
/// Python builders of such texts set it too), and a batch raises such an
/// exception as it is, without an image index.
const VERBATIM_ATTR: &str = "_kimi_k3_rs_verbatim";

/// `err` with the mark of [`VERBATIM_ATTR`].
fn verbatim(err: PyErr) -> PyErr {
    Python::attach(|py| {
        // A new ValueError takes any attribute; should setting it fail (no
        // memory), the exception goes unmarked and is only named.
        let _ = err.value(py).setattr(VERBATIM_ATTR, true);
    });
    err
}

/// The exception of `err` with the text `msg`: the class follows the fault.
///
/// Config values are `ConfigError`, per-image and `out=` faults `ImageError`
/// (a JPEG over its cost bounds its subclass `ImageTooLargeError`, as the
/// decoded-size limits), options and the reference's side-limit assertion
/// `KimiK3Error`; sglang's verbatim texts (`Channels`, `PixelDtype`) keep
/// sglang's class, `ValueError`, marked [`verbatim`].
fn new_err(err: &BindingError, msg: String) -> PyErr {
    use BindingError as B;
    match err {
        B::Core(KimiError::Config { .. } | KimiError::Pattern(_) | KimiError::NoVideoConfig) => {
            ConfigError::new_err(msg)
        }
        B::Core(KimiError::Channels(_)) | B::PixelDtype(_) => verbatim(PyValueError::new_err(msg)),
        B::NotAnArray { .. } | B::NotAnInt { .. } | B::ConfigType { .. } | B::BackgroundKey(_) => {
            PyTypeError::new_err(msg)
        }
        B::Core(KimiError::Option { .. } | KimiError::SideLimit { .. } | KimiError::Threads(_)) => {
            KimiK3Error::new_err(msg)
        }
        B::Core(
            KimiError::TooManyScans { .. }
            | KimiError::JpegDataMissing { .. }
            | KimiError::JpegScanWork { .. },
        ) => ImageTooLargeError::new_err(msg),
        _ => ImageError::new_err(msg),
    }
}

/// The one conversion of core and binding errors into Python exceptions.
pub(crate) fn to_py_err(err: impl Into<BindingError>) -> PyErr {
    let err = err.into();
    let msg = err.to_string();
    new_err(&err, msg)
}

/// `err` raised for image `index` of a batch: its class, and its text after
/// `image {index}: ` (the verbatim texts of sglang and the reference stay as
/// they are).
pub(crate) fn at_image(index: usize, err: impl Into<BindingError>) -> PyErr {
    let err = err.into();
    if matches!(
        err,
        BindingError::Core(KimiError::Channels(_) | KimiError::SideLimit { .. })
            | BindingError::PixelDtype(_)
    ) {
        return to_py_err(err);
    }
    let msg = format!("image {index}: {err}");
    new_err(&err, msg)
}

/// The type's qualified name, `module.Name` (`builtins.` left out).
fn type_name(value: &Bound<'_, PyAny>) -> String {
    let ty = value.get_type();
    let name = ty
        .qualname()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".to_owned());
    match ty.module().map(|m| m.to_string()) {
        Ok(module) if module != "builtins" => format!("{module}.{name}"),
        _ => name,
    }
}

/// Items shown of a container before `...`.
const MAX_ITEMS: usize = 8;

/// Render `value` for a message, without its bulk: bytes as their length,
/// arrays and tensors as shape and dtype, PIL images as mode and size,
/// containers item by item (at most 8), anything else as its `repr` (a
/// top-level string as it is when `quote` is false).
fn render(value: &Bound<'_, PyAny>, depth: usize, quote: bool) -> String {
    if !quote && depth == 0 {
        if let Ok(text) = value.cast::<PyString>() {
            return text.to_string();
        }
    }
    if value.is_instance_of::<PyBytes>()
        || value.is_instance_of::<PyByteArray>()
        || value.is_instance_of::<PyMemoryView>()
    {
        let n = value.len().unwrap_or(0);
        return format!("<{}, {n} bytes>", type_name(value));
    }
    if value.is_instance_of::<pyo3::exceptions::PyBaseException>() {
        let text = value.str().map(|s| s.to_string()).unwrap_or_default();
        return format!(
            "{}: {text}",
            value
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        );
    }
    let name = type_name(value);
    if name.starts_with("PIL.") {
        if let (Ok(mode), Ok(size)) = (value.getattr("mode"), value.getattr("size")) {
            if let Ok((w, h)) = size.extract::<(u64, u64)>() {
                return format!("<PIL.Image mode={mode} size={w}x{h}>");
            }
        }
    }
    if !value.is_instance_of::<PyString>() && !value.is_instance_of::<PyType>() {
        if let (Ok(shape), Ok(dtype)) = (value.getattr("shape"), value.getattr("dtype")) {
            return format!(
                "<{name} shape={} dtype={dtype}>",
                shape.str().map(|s| s.to_string()).unwrap_or_default()
            );
        }
    }
    if depth < 2 {
        if let Ok(dict) = value.cast::<PyDict>() {
            let items: Vec<String> = dict
                .iter()
                .take(MAX_ITEMS)
                .map(|(k, v)| {
                    format!(
                        "{}: {}",
                        render(&k, depth + 1, true),
                        render(&v, depth + 1, true)
                    )
                })
                .collect();
            let more = if dict.len() > MAX_ITEMS { ", ..." } else { "" };
            return format!("{{{}{more}}}", items.join(", "));
        }
        let seq = value
            .cast::<PyList>()
            .map(|l| {
                (
                    l.iter().take(MAX_ITEMS).collect::<Vec<_>>(),
                    l.len(),
                    "[",
                    "]",
                )
            })
            .or_else(|_| {
                value.cast::<PyTuple>().map(|t| {
                    (
                        t.iter().take(MAX_ITEMS).collect::<Vec<_>>(),
                        t.len(),
                        "(",
                        ")",
                    )
                })
            });
        if let Ok((items, len, open, close)) = seq {
            let shown: Vec<String> = items.iter().map(|v| render(v, depth + 1, true)).collect();
            let more = if len > MAX_ITEMS { ", ..." } else { "" };
            let comma = if len == 1 && open == "(" { "," } else { "" };
            return format!("{open}{}{comma}{more}{close}", shown.join(", "));
        }
    }
    value
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| format!("<{name}>"))
}

/// The one abbreviation of a caller's Python value inside a message: rendered
/// without its bulk (see `render`), then [`crate::error::abbreviate`]d to at
/// most 200 characters on one line.
pub(crate) fn abbreviate_value(value: &Bound<'_, PyAny>) -> String {
    abbreviate_text(&render(value, 0, true))
}

/// Render a caller's value for a message, at most 200 characters, on one line:
/// ``<bytes, 791555 bytes>``, ``<PIL.Image mode=RGB size=640x480>``,
/// ``<numpy.ndarray shape=(2, 3) dtype=uint8>``, containers item by item,
/// anything else as its ``repr``; an exception as ``Type: text``. With
/// ``quote=False`` a string is shown as it is (a text, not a value).
#[pyfunction]
#[pyo3(signature = (value, /, *, quote=true))]
pub(crate) fn abbreviate(value: &Bound<'_, PyAny>, quote: bool) -> String {
    abbreviate_text(&render(value, 0, quote))
}
