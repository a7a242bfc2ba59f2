//! What a batch is written into and what it returns: a new buffer or a
//! caller's ([`Output`], [`OutBuffer`]), the checks of a caller's buffer, and
//! the results ([`Preprocessed`], [`BatchOutput`]).

use crate::buffers::{try_buffer, Zeroable};
use crate::error::KimiError;
use crate::geometry::ResizeConfig;
use crate::image::ImageView;
use crate::options::OutputDtype;

/// Output of [`preprocess_batch`](super::preprocess_batch).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchOutput {
    /// `float32 [sum of gh * gw, 3, patch_size, patch_size]`, flattened, images in order.
    pub pixel_values: Vec<f32>,
    /// One `(t, gh, gw)` per item (`t` is 1 for an image, the frame count of a
    /// video chunk).
    pub grid_thws: Vec<[u64; 3]>,
    /// The sizing of every view, in order (the frames of a chunk share theirs).
    pub resize_configs: Vec<ResizeConfig>,
}

/// A caller's buffer for `pixel_values`, with the shape it has (so that a
/// wrong one is named in the error).
#[derive(Debug)]
pub struct OutBuffer<'a, T> {
    /// The values, `shape` row-major.
    pub values: &'a mut [T],
    /// Its shape; must be `[n_patches, 3, patch_size, patch_size]`.
    pub shape: &'a [usize],
}

/// Where [`preprocess_into`](super::preprocess_into) writes `pixel_values`.
#[derive(Debug)]
pub enum Output<'a> {
    /// A new buffer, returned in [`Preprocessed::pixel_values`].
    New,
    /// A caller's float32 buffer (dtype float32).
    Float32(OutBuffer<'a, f32>),
    /// A caller's buffer of 16-bit patterns (dtype bfloat16 or float16).
    Bits16(OutBuffer<'a, u16>),
}

/// A new `pixel_values` buffer, flattened `[n_patches, 3, ps, ps]`.
#[derive(Debug, Clone, PartialEq)]
pub enum PixelValues {
    /// float32 values.
    Float32(Vec<f32>),
    /// bfloat16 or float16 bit patterns (as [`Options::dtype`](crate::Options::dtype) asked).
    Bits16(Vec<u16>),
}

/// What [`preprocess_into`](super::preprocess_into) returns.
#[derive(Debug, Clone, PartialEq)]
pub struct Preprocessed {
    /// The new buffer for [`Output::New`]; `None` when the caller's buffer was written.
    pub pixel_values: Option<PixelValues>,
    /// `[n_patches, 3, ps, ps]`: the shape of `pixel_values`.
    pub shape: [usize; 4],
    /// One `(t, gh, gw)` per item (`t` is 1 for an image, the frame count of a
    /// video chunk).
    pub grid_thws: Vec<[u64; 3]>,
    /// The sizing of every view, in order (the frames of a chunk share theirs).
    pub resize_configs: Vec<ResizeConfig>,
}

/// Check a caller's buffer against the plan and the dtype asked for (a buffer
/// of `u16` bits, `bits16`, takes bfloat16 or float16, an `f32` one float32:
/// `KimiError::OutDtype` naming the element types),
/// and that its memory overlaps no image's (the bounds check of
/// `np.may_share_memory`: the batch is read while `out` is written).
pub(super) fn check_out<T>(
    out: &OutBuffer<'_, T>,
    images: &[ImageView<'_>],
    dtype: OutputDtype,
    bits16: bool,
    expected: [usize; 4],
) -> Result<(), KimiError> {
    if bits16 == (dtype == OutputDtype::Float32) {
        let (got, expected) = if bits16 {
            ("u16", "f32")
        } else {
            ("f32", "u16")
        };
        return Err(KimiError::OutDtype {
            got: got.to_owned(),
            expected,
            dtype: dtype.name(),
        });
    }
    if out.shape.len() != 4 {
        return Err(KimiError::OutRank {
            dtype: dtype.name(),
            expected: format!("{expected:?}"),
            got: crate::error::py_tuple(out.shape),
        });
    }
    if out.shape != expected || out.values.len() != expected.iter().product::<usize>() {
        return Err(KimiError::OutShape {
            got: format!("{:?}", out.shape),
            expected: format!("{expected:?}"),
        });
    }
    let written = out.values.as_ptr_range();
    match overlapping_image(written.start as usize..written.end as usize, images) {
        Some(index) => Err(KimiError::OutOverlap { index }),
        None => Ok(()),
    }
}

/// The first image whose bytes overlap the address range `written` (an
/// output's bytes), as `numpy.may_share_memory` bounds them.
#[must_use]
pub fn overlapping_image(
    written: std::ops::Range<usize>,
    images: &[ImageView<'_>],
) -> Option<usize> {
    images.iter().position(|image| {
        let read = image.data.as_ptr_range();
        (read.start as usize) < written.end && written.start < read.end as usize
    })
}

/// A new output of `n` values ([`try_buffer`]: every one is written), or
/// `KimiError::Allocation`.
pub(super) fn new_values<T: Zeroable>(n: usize, shape: [usize; 4]) -> Result<Vec<T>, KimiError> {
    try_buffer(n).map_err(|e| KimiError::Allocation {
        shape: format!("{shape:?}"),
        reason: format!("out of memory ({} bytes)", e.bytes),
    })
}
