//! The resize of a whole [`ImageView`] in its own bands, for the modes the
//! caller resizes before the pipeline ([`resize_view`]).

use super::{Pixels, Resize};
use crate::buffers::try_buffer;
use crate::config::PillowCompat;
use crate::error::KimiError;
use crate::image::ImageView;
use crate::simd::{Execution, SimdPath};

/// Pillow BICUBIC resize of one image in its own bands (channels independent,
/// no premultiplication), for the modes the caller resizes before the
/// pipeline. Only down-scales, so the output is never larger than the input.
/// Returns packed pixels, `new_height * new_width * channels` bytes, whatever
/// the view's pixel stride; a view of a [`RowSource`](crate::RowSource) is read band by band.
///
/// Source: Pillow `libImaging/Resample.c`, `ImagingResample` (8-bit bands).
///
/// # Errors
/// `KimiError::EmptyImage` for a zero new side, `KimiError::Upscale` for a new
/// side larger than the image's; `KimiError::ScratchAllocation` when memory
/// runs out; `KimiError::ImageRows` when the source's rows cannot be read.
pub fn resize_view(
    image: &ImageView<'_>,
    new_width: usize,
    new_height: usize,
    compat: PillowCompat,
) -> Result<Vec<u8>, KimiError> {
    let (w, h) = (image.width, image.height);
    if new_width == 0 || new_height == 0 {
        return Err(KimiError::EmptyImage {
            width: new_width as i128,
            height: new_height as i128,
        });
    }
    if new_width > w || new_height > h {
        return Err(KimiError::Upscale {
            width: w as u64,
            height: h as u64,
            new_width: new_width as u64,
            new_height: new_height as u64,
        });
    }
    let run = Execution {
        path: SimdPath::detect(),
        parallel: false,
    };
    let len = new_width * new_height * image.channels;
    let mut out = try_buffer(len)?;
    let resize = Resize {
        width: w,
        height: h,
        pixel_stride: image.pixel_stride,
        channels: image.channels,
        new_width,
        new_height,
        premultiplied: false,
        background: None,
    };
    resize.run_into(Pixels::of(image), compat, run, &mut out)?;
    Ok(out)
}
