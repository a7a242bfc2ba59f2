//! `MediaProcConfig`: a checkpoint's `media_proc_cfg` values, extracted from
//! Python objects and validated by the core (`crate::config`).
//!
//! Extraction takes what the checkpoint's numpy arithmetic takes (Python and
//! numpy integers and reals, lists / tuples / arrays of three numbers); the
//! rules and their texts are the core's. A rejected value is named by its
//! Python `repr`, abbreviated.

use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyMapping, PySequence, PyString,
    PyTuple,
};

use super::errors::{abbreviate_value, to_py_err, BindingError};
use crate::config::{
    Background, BackgroundPattern, FillStage, MediaProcConfig, BACKGROUND_RULE, BOOL_RULE,
    BYTE_RULE, FILL_STAGE_RULE, FIXED_OUTPUT_TOKENS_RULE, INT_RULE, IN_PATCH_LIMIT_RULE,
    MAX_CONFIG_INT, MEAN_RULE, STD_RULE,
};
use crate::config::{VideoConfig, OPTIONAL_LIMIT_RULE, SAMPLE_FPS_RULE, TIMESTAMP_MODE_RULE};
use crate::error::KimiError;

/// Whether `value` is an instance of `numbers.<abc>` (and not a bool).
fn is_number(value: &Bound<'_, PyAny>, abc: &str) -> PyResult<bool> {
    if value.is_instance_of::<PyBool>() {
        return Ok(false);
    }
    let class = value.py().import("numbers")?.getattr(abc)?;
    value.is_instance(&class)
}

/// A `numbers.Integral` as `i128`; `None` when it is not one or does not fit.
fn integral(value: &Bound<'_, PyAny>) -> PyResult<Option<i128>> {
    if !is_number(value, "Integral")? {
        return Ok(None);
    }
    Ok(value.call_method0("__index__")?.extract::<i128>().ok())
}

/// A `numbers.Real` as `f64`; `None` when it is not one (or `float()` fails).
fn real(value: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
    if !is_number(value, "Real")? {
        return Ok(None);
    }
    Ok(value.extract::<f64>().ok())
}

fn bad(key: &'static str, rule: &'static str, value: &Bound<'_, PyAny>) -> PyErr {
    to_py_err(KimiError::config(key, rule, &abbreviate_value(value)))
}

/// An integer key: an integral number in `1..=u64::MAX` (the core checks the range).
fn int_key(key: &'static str, rule: &'static str, value: &Bound<'_, PyAny>) -> PyResult<u64> {
    integral(value)?
        .and_then(|v| u64::try_from(v).ok())
        .filter(|&v| v > 0)
        .ok_or_else(|| bad(key, rule, value))
}

/// Three reals (a list, tuple or array), as the reference's `np.array(value)`; one
/// real (a number, a 0-d array, or a sequence of one) is broadcast to the three
/// channels, as `(x - np.array(mean)) / np.array(std)` broadcasts it there.
fn three(key: &'static str, rule: &'static str, value: &Bound<'_, PyAny>) -> PyResult<[f64; 3]> {
    let zero_dim = value
        .getattr("ndim")
        .and_then(|n| n.extract::<usize>())
        .ok()
        == Some(0);
    let scalar = if zero_dim {
        value.call_method0("item")?
    } else {
        value.clone()
    };
    if let Some(v) = real(&scalar)? {
        return Ok([v; 3]);
    }
    // A sequence (list, tuple, numpy array), as `np.array(value)` reads one.
    let text_like = value.is_instance_of::<PyString>()
        || value.is_instance_of::<PyBytes>()
        || value.is_instance_of::<PyByteArray>();
    let sequence = value.cast::<PySequence>().is_ok() || value.hasattr("__array__")?;
    let len = value.len().ok();
    if sequence && !text_like && matches!(len, Some(1 | 3)) {
        let items = value
            .try_iter()?
            .map(|item| real(&item?))
            .collect::<PyResult<Option<Vec<f64>>>>()?;
        match items.as_deref() {
            Some(&[v]) => return Ok([v; 3]),
            Some(&[a, b, c]) => return Ok([a, b, c]),
            _ => {}
        }
    }
    Err(bad(key, rule, value))
}

/// `fixed_output_tokens`: None, or a finite real whose `int()` is in `0..=2**31-1`.
fn fixed_tokens(value: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
    if value.is_none() {
        return Ok(None);
    }
    let truncated = match integral(value)? {
        Some(v) => Some(v),
        None if is_number(value, "Integral")? => None, // too large for i128
        None => real(value)?
            .filter(|v| v.is_finite())
            .map(|v| v.trunc() as i128),
    };
    truncated
        .and_then(|v| u64::try_from(v).ok())
        .filter(|&v| v <= MAX_CONFIG_INT)
        .map(Some)
        .ok_or_else(|| bad("fixed_output_tokens", FIXED_OUTPUT_TOKENS_RULE, value))
}

/// A chessboard colour: an integer, or a real with an integral value, in 0..=255.
fn byte(key: &'static str, value: &Bound<'_, PyAny>) -> PyResult<u8> {
    real(value)?
        .filter(|v| v.is_finite() && v.fract() == 0.0 && (0.0..=255.0).contains(v))
        .map(|v| v as u8)
        .ok_or_else(|| bad(key, BYTE_RULE, value))
}

/// The field defaults of the checkpoint's `TransparentBgConfig` dataclass
/// (used for keys missing inside `transparent_bg_config`).
const BACKGROUND_KEYS: [&str; 5] = [
    "pattern",
    "chessboard_square_size",
    "chessboard_square_on_top_left",
    "chessboard_white_value",
    "chessboard_gray_value",
];

/// `transparent_bg_config` as the checkpoint's dataclass takes it: missing keys
/// take the dataclass defaults, an unknown key is its `TypeError`.
fn background(value: &Bound<'_, PyAny>) -> PyResult<Option<Background>> {
    if value.is_none() {
        return Ok(None);
    }
    let Ok(mapping) = value.cast::<PyMapping>() else {
        return Err(to_py_err(BindingError::ConfigType {
            key: "transparent_bg_config",
            rule: BACKGROUND_RULE,
            value: abbreviate_value(value),
        }));
    };
    for key in mapping.keys()?.iter() {
        let known = key
            .extract::<String>()
            .is_ok_and(|k| BACKGROUND_KEYS.contains(&k.as_str()));
        if !known {
            let shown = key.str().map(|s| s.to_string()).unwrap_or_default();
            return Err(to_py_err(BindingError::BackgroundKey(
                crate::error::abbreviate(&shown),
            )));
        }
    }
    let get = |key: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
        if mapping.contains(key)? {
            Ok(Some(mapping.get_item(key)?))
        } else {
            Ok(None)
        }
    };
    let defaults = Background::dataclass_default();
    let pattern = match get("pattern")? {
        None => defaults.pattern,
        Some(p) => {
            let name = p.str()?.to_string();
            let parsed = if p.is_instance_of::<PyString>() {
                BackgroundPattern::parse(&name)
            } else {
                Err(KimiError::Pattern(crate::error::abbreviate(&name)))
            };
            parsed.map_err(to_py_err)?
        }
    };
    let square_size = match get("chessboard_square_size")? {
        None => defaults.square_size,
        Some(v) => {
            let key = "transparent_bg_config.chessboard_square_size";
            let size = int_key(key, INT_RULE, &v)?;
            u32::try_from(size)
                .ok()
                .filter(|&s| u64::from(s) <= MAX_CONFIG_INT)
                .ok_or_else(|| bad(key, INT_RULE, &v))?
        }
    };
    let on_top_left = match get("chessboard_square_on_top_left")? {
        None => defaults.on_top_left,
        Some(v) if v.is_instance_of::<PyBool>() => v.extract::<bool>()?,
        Some(v) => match integral(&v)? {
            Some(0) => false,
            Some(1) => true,
            _ => {
                return Err(bad(
                    "transparent_bg_config.chessboard_square_on_top_left",
                    BOOL_RULE,
                    &v,
                ))
            }
        },
    };
    let colour = |key: &str, full: &'static str, default: u8| -> PyResult<u8> {
        get(key)?.map_or(Ok(default), |v| byte(full, &v))
    };
    Ok(Some(Background {
        pattern,
        square_size,
        on_top_left,
        white_value: colour(
            "chessboard_white_value",
            "transparent_bg_config.chessboard_white_value",
            defaults.white_value,
        )?,
        gray_value: colour(
            "chessboard_gray_value",
            "transparent_bg_config.chessboard_gray_value",
            defaults.gray_value,
        )?,
    }))
}

/// The six K2.5 video keys, in the order of `VideoConfig::new`.
pub(crate) const VIDEO_KEYS: [&str; 6] = [
    "in_patch_limit_each_frame",
    "in_patch_limit_video",
    "sample_fps",
    "max_num_frames_each_video",
    "temporal_merge_kernel_size",
    "timestamp_mode",
];

/// `None`, or an integral number in `1..=u64::MAX` (the core checks the range).
fn optional_limit(key: &'static str, value: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
    if value.is_none() {
        return Ok(None);
    }
    int_key(key, OPTIONAL_LIMIT_RULE, value).map(Some)
}

/// What the `video` argument must be: the six keys go together.
const VIDEO_RULE: &str = "None or a dict with all six video keys (in_patch_limit_each_frame, \
     in_patch_limit_video, sample_fps, max_num_frames_each_video, temporal_merge_kernel_size, \
     timestamp_mode)";

/// The video keys of a `media_proc_cfg` (a mapping with all six), validated by
/// the core; a rejected value is named by its Python `repr`. Not a mapping, or
/// one without all six keys: a `TypeError` naming what was given.
fn video(value: &Bound<'_, PyAny>) -> PyResult<Option<VideoConfig>> {
    if value.is_none() {
        return Ok(None);
    }
    let not_video = || {
        to_py_err(BindingError::ConfigType {
            key: "video",
            rule: VIDEO_RULE,
            value: abbreviate_value(value),
        })
    };
    let Ok(mapping) = value.cast::<PyMapping>() else {
        return Err(not_video());
    };
    let items = VIDEO_KEYS
        .iter()
        .map(|key| {
            mapping.get_item(key).map_err(|err| {
                if err.is_instance_of::<PyKeyError>(value.py()) {
                    not_video()
                } else {
                    err
                }
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let (each, total, fps) = (&items[0], &items[1], &items[2]);
    let (max_frames, kernel, mode) = (&items[3], &items[4], &items[5]);
    let sample_fps = real(fps)?.ok_or_else(|| bad("sample_fps", SAMPLE_FPS_RULE, fps))?;
    let timestamp_mode = if mode.is_none() {
        None
    } else if mode.is_instance_of::<PyString>() {
        Some(mode.extract::<String>()?)
    } else {
        return Err(bad("timestamp_mode", TIMESTAMP_MODE_RULE, mode));
    };
    VideoConfig::new(
        optional_limit("in_patch_limit_each_frame", each)?,
        optional_limit("in_patch_limit_video", total)?,
        sample_fps,
        optional_limit("max_num_frames_each_video", max_frames)?,
        int_key("temporal_merge_kernel_size", INT_RULE, kernel)?,
        timestamp_mode,
    )
    .map(Some)
    .map_err(|err| match err {
        KimiError::Config { key, rule, .. } => {
            let given = VIDEO_KEYS
                .iter()
                .position(|k| *k == key)
                .map_or(value, |k| &items[k]);
            bad(key, rule, given)
        }
        err => to_py_err(err),
    })
}

/// Levels of nesting a content key follows ([`content_key`]): the checkpoint's
/// configs have two.
const CONTENT_KEY_DEPTH: usize = 8;

/// The content key of a `media_proc_cfg` given as a plain `dict`, by which
/// `kimi_k3_rs.config.MediaProcConfig.from_dict` keeps the configs it
/// validated: bytes that are equal for two dicts exactly when they hold the
/// same `str` keys in the same order and values of the same types with the
/// same contents, so two dicts with one key are validated alike (`True`, `1`
/// and `1.0` differ; `-0.0` and `0.0` differ; a list and a tuple of the
/// same items are the same, as validation reads both as a sequence).
///
/// Returns None (not kept: validated on every call) for anything but a plain
/// `dict`, and for a dict holding anything but exact `dict`, `list`, `tuple`,
/// `str`, `int` (of 64 bits), `float`, `bool` and `None` values under `str`
/// keys, at most 8 levels deep (a dict that contains itself has none).
#[pyfunction]
#[pyo3(signature = (value, /))]
pub(crate) fn content_key<'py>(value: &Bound<'py, PyAny>) -> Option<Bound<'py, PyBytes>> {
    if !value.is_exact_instance_of::<PyDict>() {
        return None;
    }
    let mut key = Vec::with_capacity(512);
    write_content(value, 0, &mut key).then(|| PyBytes::new(value.py(), &key))
}

/// [`content_key`] of `value` with a copy of it that the key describes, made
/// in the same walk while the GIL is held (no Python code runs between the
/// two), so that a thread changing the dict meanwhile cannot make the copy
/// differ from its key: the dicts, lists and tuples are new, the other values
/// shared (they are immutable). `None` where
/// [`content_key`] is `None`.
#[pyfunction]
#[pyo3(signature = (value, /))]
pub(crate) fn content_snapshot<'py>(
    value: &Bound<'py, PyAny>,
) -> PyResult<Option<(Bound<'py, PyBytes>, Bound<'py, PyAny>)>> {
    let Some(key) = content_key(value) else {
        return Ok(None);
    };
    Ok(Some((key, snapshot(value)?)))
}

/// A copy of a value [`write_content`] wrote: new dicts, lists and tuples, the
/// other values shared.
fn snapshot<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = value.py();
    if let Ok(d) = value.cast_exact::<PyDict>() {
        let copy = PyDict::new(py);
        for (k, v) in d.iter() {
            copy.set_item(k, snapshot(&v)?)?;
        }
        Ok(copy.into_any())
    } else if let Some(items) = exact_sequence(value) {
        let items = items.iter().map(snapshot).collect::<PyResult<Vec<_>>>()?;
        if value.is_exact_instance_of::<PyList>() {
            Ok(PyList::new(py, items)?.into_any())
        } else {
            Ok(PyTuple::new(py, items)?.into_any())
        }
    } else {
        Ok(value.clone())
    }
}

/// The items of an exact `list` or `tuple` (both read as a sequence), or
/// `None` for another value.
fn exact_sequence<'py>(value: &Bound<'py, PyAny>) -> Option<Vec<Bound<'py, PyAny>>> {
    if let Ok(l) = value.cast_exact::<PyList>() {
        Some(l.iter().collect())
    } else {
        value
            .cast_exact::<PyTuple>()
            .ok()
            .map(|t| t.iter().collect())
    }
}

/// Append the tagged bytes of a `str`: `s`, its UTF-8 length, its UTF-8.
fn write_str(s: &Bound<'_, PyString>, key: &mut Vec<u8>) -> bool {
    let Ok(text) = s.to_str() else {
        return false; // lone surrogates: not kept
    };
    key.push(b's');
    key.extend_from_slice(&(text.len() as u64).to_le_bytes());
    key.extend_from_slice(text.as_bytes());
    true
}

/// Append `value`'s tagged bytes to `key` ([`content_key`]); false for a value
/// of another type, an int of over 64 bits, or past [`CONTENT_KEY_DEPTH`].
fn write_content(value: &Bound<'_, PyAny>, depth: usize, key: &mut Vec<u8>) -> bool {
    if value.is_none() {
        key.push(b'n');
    } else if let Ok(b) = value.cast_exact::<PyBool>() {
        key.push(if b.is_true() { b't' } else { b'f' });
    } else if let Ok(i) = value.cast_exact::<PyInt>() {
        let Ok(i) = i.extract::<i64>() else {
            return false;
        };
        key.push(b'i');
        key.extend_from_slice(&i.to_le_bytes());
    } else if let Ok(f) = value.cast_exact::<PyFloat>() {
        key.push(b'g');
        key.extend_from_slice(&f.value().to_bits().to_le_bytes());
    } else if let Ok(s) = value.cast_exact::<PyString>() {
        return write_str(s, key);
    } else if depth >= CONTENT_KEY_DEPTH {
        return false;
    } else if let Ok(d) = value.cast_exact::<PyDict>() {
        key.push(b'd');
        key.extend_from_slice(&(d.len() as u64).to_le_bytes());
        for (k, v) in d.iter() {
            let Ok(k) = k.cast_exact::<PyString>() else {
                return false;
            };
            if !write_str(k, key) || !write_content(&v, depth + 1, key) {
                return false;
            }
        }
    } else if let Some(items) = exact_sequence(value) {
        key.push(b'l');
        key.extend_from_slice(&(items.len() as u64).to_le_bytes());
        return items.iter().all(|v| write_content(v, depth + 1, key));
    } else {
        return false;
    }
    true
}

/// A validated `media_proc_cfg` (the keys the image path reads), built once per
/// model; immutable.
#[pyclass(frozen, module = "kimi_k3_rs._native", name = "MediaProcConfig")]
pub(crate) struct PyMediaProcConfig {
    pub(crate) inner: MediaProcConfig,
}

#[pymethods]
impl PyMediaProcConfig {
    #[new]
    #[pyo3(signature = (patch_size, merge_kernel_size, in_patch_limit, patch_limit_on_one_side, image_mean, image_std, *, fixed_output_tokens=None, transparent_bg_config=None, transparent_bg_fill_stage, video=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        patch_size: &Bound<'_, PyAny>,
        merge_kernel_size: &Bound<'_, PyAny>,
        in_patch_limit: &Bound<'_, PyAny>,
        patch_limit_on_one_side: &Bound<'_, PyAny>,
        image_mean: &Bound<'_, PyAny>,
        image_std: &Bound<'_, PyAny>,
        fixed_output_tokens: Option<&Bound<'_, PyAny>>,
        transparent_bg_config: Option<&Bound<'_, PyAny>>,
        transparent_bg_fill_stage: &Bound<'_, PyAny>,
        video: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let py = patch_size.py();
        let none = py.None().into_bound(py);
        let mean = three("image_mean", MEAN_RULE, image_mean)?;
        let std = three("image_std", STD_RULE, image_std)?;
        let stage = transparent_bg_fill_stage;
        let fill_stage = stage
            .extract::<String>()
            .ok()
            .and_then(|name| FillStage::parse(&name).ok())
            .ok_or_else(|| bad("transparent_bg_fill_stage", FILL_STAGE_RULE, stage))?;
        let fixed = fixed_tokens(fixed_output_tokens.unwrap_or(&none))?;
        let background = background(transparent_bg_config.unwrap_or(&none))?;
        let video = self::video(video.unwrap_or(&none))?;
        let inner = MediaProcConfig::new(
            int_key("patch_size", INT_RULE, patch_size)?,
            int_key("merge_kernel_size", INT_RULE, merge_kernel_size)?,
            int_key("in_patch_limit", IN_PATCH_LIMIT_RULE, in_patch_limit)?,
            int_key("patch_limit_on_one_side", INT_RULE, patch_limit_on_one_side)?,
            mean,
            std,
        )
        .and_then(|c| c.with_fixed_output_tokens(fixed))
        .and_then(|c| c.with_background(background, fill_stage))
        .map(|c| c.with_video(video))
        .map_err(|err| {
            // Name a rejected value as the caller wrote it (its Python repr).
            let given = match &err {
                KimiError::Config { key, .. } => match *key {
                    "image_mean" => Some(image_mean),
                    "image_std" => Some(image_std),
                    "patch_size" => Some(patch_size),
                    "merge_kernel_size" => Some(merge_kernel_size),
                    "in_patch_limit" => Some(in_patch_limit),
                    "patch_limit_on_one_side" => Some(patch_limit_on_one_side),
                    _ => None,
                },
                _ => None,
            };
            match (err, given) {
                (KimiError::Config { key, rule, .. }, Some(value)) => bad(key, rule, value),
                (err, _) => to_py_err(err),
            }
        })?;
        Ok(Self { inner })
    }

    /// Patch edge in pixels.
    #[getter]
    fn patch_size(&self) -> u64 {
        self.inner.patch_size()
    }

    /// Spatial merge factor.
    #[getter]
    fn merge_kernel_size(&self) -> u64 {
        self.inner.merge_kernel_size()
    }

    /// Patch budget before merging.
    #[getter]
    fn in_patch_limit(&self) -> u64 {
        self.inner.in_patch_limit()
    }

    /// Per-side cap in patches.
    #[getter]
    fn patch_limit_on_one_side(&self) -> u64 {
        self.inner.patch_limit_on_one_side()
    }

    /// The reported token count override, or None.
    #[getter]
    fn fixed_output_tokens(&self) -> Option<u64> {
        self.inner.fixed_output_tokens()
    }

    /// Per-channel mean.
    #[getter]
    fn image_mean(&self) -> (f64, f64, f64) {
        let [a, b, c] = self.inner.image_mean();
        (a, b, c)
    }

    /// Per-channel std.
    #[getter]
    fn image_std(&self) -> (f64, f64, f64) {
        let [a, b, c] = self.inner.image_std();
        (a, b, c)
    }

    /// `transparent_bg_config` with all five keys, or None.
    #[getter]
    fn transparent_bg_config<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(bg) = self.inner.background() else {
            return Ok(None);
        };
        let dict = PyDict::new(py);
        dict.set_item("pattern", bg.pattern.name())?;
        dict.set_item("chessboard_square_size", bg.square_size)?;
        dict.set_item("chessboard_square_on_top_left", bg.on_top_left)?;
        dict.set_item("chessboard_white_value", bg.white_value)?;
        dict.set_item("chessboard_gray_value", bg.gray_value)?;
        Ok(Some(dict))
    }

    /// `"before_resize"` or `"after_resize"`.
    #[getter]
    fn transparent_bg_fill_stage(&self) -> &'static str {
        self.inner.fill_stage().name()
    }

    /// The six video keys (`in_patch_limit_each_frame`, `in_patch_limit_video`,
    /// `sample_fps`, `max_num_frames_each_video`, `temporal_merge_kernel_size`,
    /// `timestamp_mode`) as validated, or None when the config has no video.
    #[getter]
    fn video<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(v) = self.inner.video() else {
            return Ok(None);
        };
        let dict = PyDict::new(py);
        dict.set_item(VIDEO_KEYS[0], v.in_patch_limit_each_frame())?;
        dict.set_item(VIDEO_KEYS[1], v.in_patch_limit_video())?;
        dict.set_item(VIDEO_KEYS[2], v.sample_fps())?;
        dict.set_item(VIDEO_KEYS[3], v.max_num_frames_each_video())?;
        dict.set_item(VIDEO_KEYS[4], v.temporal_merge_kernel_size())?;
        dict.set_item(VIDEO_KEYS[5], v.timestamp_mode())?;
        Ok(Some(dict))
    }

    /// Pickling (and `copy`): `copyreg.__newobj_ex__(MediaProcConfig, args, kwargs)`,
    /// the constructor's arguments as the getters read them (validated again on load).
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let py = slf.py();
        let this = slf.get();
        let args = (
            this.patch_size(),
            this.merge_kernel_size(),
            this.in_patch_limit(),
            this.patch_limit_on_one_side(),
            this.image_mean(),
            this.image_std(),
        );
        let kwargs = PyDict::new(py);
        kwargs.set_item("fixed_output_tokens", this.fixed_output_tokens())?;
        kwargs.set_item("transparent_bg_config", this.transparent_bg_config(py)?)?;
        kwargs.set_item(
            "transparent_bg_fill_stage",
            this.transparent_bg_fill_stage(),
        )?;
        kwargs.set_item("video", this.video(py)?)?;
        let newobj_ex = py.import("copyreg")?.getattr("__newobj_ex__")?;
        let state = (slf.get_type(), args, kwargs).into_pyobject(py)?.into_any();
        Ok((newobj_ex, state))
    }
}
