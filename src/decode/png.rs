//! PNG through the `png` crate (placeholder).

use super::{Header, Limits, Route};
use crate::error::KimiError;

/// Read a PNG's headers: see [`super::route`].
///
/// # Errors
/// As [`super::route`].
pub fn route(_data: &[u8], _exif_transpose: bool) -> Result<Route, KimiError> {
    Ok(Route::Pillow("native PNG decoding is not built yet"))
}

/// Decode a PNG whose [`route`] was `Route::Native(header)` into `out`
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
        format: "PNG",
        detail: "native PNG decoding is not built yet".into(),
    })
}
