//! The resize of a whole [`ImageView`] in its own bands, for the modes the
//! caller resizes before the pipeline ([`resize_view`]).

use super::{Pixels, Resize};
use crate::buffers::{poison, try_zeroed};
use crate::config::PillowCompat;
use crate::error::KimiError;
use crate::image::ImageView;
use crate::simd::{Execution, SimdPath};

/// Pillow BICUBIC resize of one image in its own bands (channels independent,
/// no premultiplication), for the modes the caller resizes before the
/// pipeline. Only down-scales, so the output is never larger than the input.
/// Returns packed pixels, `new_height * new_width * channels` bytes, whatever
/// the view's pixel stride; a view of a [`RowSource`](crate::RowSource) is read band by band.
/// [`resize_view_into`] writes them into the caller's memory instead.
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
    let mut out = try_zeroed(resized_len(image, new_width, new_height)?)?;
    resize_view_into(image, new_width, new_height, compat, &mut out)?;
    Ok(out)
}

/// [`resize_view`] into `out`, `new_height * new_width * channels` bytes of
/// any contents, every one of which is written (filled with
/// [`POISON_BYTE`](crate::POISON_BYTE) first in the poison mode, so that a
/// byte left unwritten shows). The Python binding's `resize_bicubic` hands it
/// the memory of a new numpy array, so no pass zeroes it first.
///
/// # Errors
/// As [`resize_view`], and `KimiError::OutShape` when `out` has another length.
pub fn resize_view_into(
    image: &ImageView<'_>,
    new_width: usize,
    new_height: usize,
    compat: PillowCompat,
    out: &mut [u8],
) -> Result<(), KimiError> {
    let len = resized_len(image, new_width, new_height)?;
    if out.len() != len {
        return Err(KimiError::OutShape {
            got: format!("[{}]", out.len()),
            expected: format!("[{len}]"),
        });
    }
    poison(out);
    let run = Execution {
        path: SimdPath::detect(),
        parallel: false,
    };
    let resize = Resize {
        width: image.width,
        height: image.height,
        pixel_stride: image.pixel_stride,
        channels: image.channels,
        new_width,
        new_height,
        premultiplied: false,
        background: None,
    };
    resize.run_into(Pixels::of(image), compat, run, out)?;
    Ok(())
}

/// The bytes of `image` resized to `new_width x new_height` by
/// [`resize_view`]: `new_height * new_width * channels`, no more than the
/// image's pixels.
///
/// # Errors
/// `KimiError::EmptyImage` for a zero new side, `KimiError::Upscale` for a new
/// side larger than `image`'s.
pub fn resized_len(
    image: &ImageView<'_>,
    new_width: usize,
    new_height: usize,
) -> Result<usize, KimiError> {
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
    Ok(new_width * new_height * image.channels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::noise;

    #[test]
    fn into_writes_every_byte_of_any_memory_and_checks_its_length() {
        // RGB in 3- and 4-byte pixels, L; memory that held other bytes.
        let data = noise(97 * 61 * 4, 7);
        for (channels, stride) in [(3, 3), (3, 4), (1, 1)] {
            let bytes = &data[..97 * 61 * stride];
            let view = ImageView::with_stride(bytes, 97, 61, channels, stride).unwrap();
            let compat = PillowCompat::V13;
            let want = resize_view(&view, 40, 33, compat).unwrap();
            for fill in [0x00, 0xA5, 0xFF] {
                let mut out = vec![fill; want.len()];
                resize_view_into(&view, 40, 33, compat, &mut out).unwrap();
                assert!(
                    out == want,
                    "{channels} channels in {stride}, over {fill:#x}"
                );
            }
            let mut short = vec![0; want.len() - 1];
            let err = resize_view_into(&view, 40, 33, compat, &mut short).unwrap_err();
            assert!(matches!(err, KimiError::OutShape { .. }), "{err}");
            assert_eq!(resized_len(&view, 40, 33).unwrap(), 40 * 33 * channels);
            assert!(resized_len(&view, 98, 33).is_err() && resized_len(&view, 40, 0).is_err());
        }
    }
}
