//! JPEG through the libjpeg-turbo that the installed Pillow links (placeholder).

use std::path::Path;

use super::{Header, Limits, Route};
use crate::error::KimiError;

/// Load the libjpeg at `path` (the one the installed Pillow links) for this
/// process; later calls return the first result. Returns a description of the
/// library, e.g. `"libjpeg-turbo 3.2.0 (libjpeg API 6.2)"`.
///
/// # Errors
/// Why it cannot be used: not found, not libjpeg API 6.2, not libjpeg-turbo.
pub fn load(_path: &Path) -> Result<String, String> {
    Err("native JPEG decoding is not built yet".into())
}

/// Read a JPEG's headers: see [`super::route`].
///
/// # Errors
/// As [`super::route`].
pub fn route(_data: &[u8], _exif_transpose: bool) -> Result<Route, KimiError> {
    Ok(Route::Pillow("native JPEG decoding is not built yet"))
}

/// Decode a JPEG whose [`route`] was `Route::Native(header)` into `out`
/// (`header.decoded_len()` bytes).
///
/// # Errors
/// `KimiError::Decode` for corrupt or truncated data.
pub fn decode_into(
    _data: &[u8],
    _header: &Header,
    _limits: &Limits,
    _out: &mut [u8],
) -> Result<(), KimiError> {
    Err(KimiError::Decode {
        format: "JPEG",
        detail: "native JPEG decoding is not built yet".into(),
    })
}
