//! The borrowed 8-bit HWC image every stage reads: [`ImageView`].

use crate::decode::Header;
use crate::error::KimiError;

/// A borrowed 8-bit image: `height * width * pixel_stride` bytes, row-major, HWC.
///
/// `channels` is 1 (`L`), 2 (`LA`), 3 (`RGB`) or 4 (`RGBA`); the last channel
/// of 2 and 4 is alpha (straight, not premultiplied). Pixels are packed
/// (`pixel_stride == channels`, [`ImageView::new`]), or RGB pixels are stored 4
/// bytes apart with a pad byte the pipeline never reads (`RGBX`, Pillow's own
/// storage of `RGB`, [`ImageView::with_stride`]). The input of the whole
/// pipeline ([`crate::preprocess_image`]) and of the pad / normalise / patchify
/// stage ([`crate::normalize::pad_normalize_patchify`]). A view is pixels only:
/// its place in a batch (sized from its size, already resized, resized to
/// another image's sizing, or a frame of a video chunk) is its
/// [`BatchItem`](crate::BatchItem).
#[derive(Debug, Clone, Copy)]
pub struct ImageView<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) width: usize,
    pub(crate) height: usize,
    pub(crate) channels: usize,
    /// Bytes from one pixel to the next: `channels`, or 4 for 3 channels.
    pub(crate) pixel_stride: usize,
    /// `Some(header)`: `data` is an encoded file, decoded natively when its
    /// pixels are needed ([`ImageView::encoded`]).
    pub(crate) encoded: Option<Header>,
    /// `Some(source)`: `data` is empty and the pixels are read from `source`,
    /// band by band, as the pipeline needs them ([`ImageView::from_rows`]).
    pub(crate) rows: Option<&'a dyn RowSource>,
}

/// Pixels that are not in one buffer, read a band of whole rows at a time
/// ([`ImageView::from_rows`]): the pipeline copies each band it resizes, so
/// the image is never copied whole (the Python binding reads a PIL image held
/// in several blocks of Pillow's memory this way). Called from the pipeline's
/// worker threads, bands in parallel.
pub trait RowSource: Sync + std::fmt::Debug {
    /// Copy rows `first..end` into `out`, `(end - first) * width *
    /// pixel_stride` bytes (the view's shape).
    ///
    /// # Errors
    /// Why the rows cannot be read (the message of [`KimiError::ImageRows`]).
    fn read_rows(&self, first: usize, end: usize, out: &mut [u8]) -> Result<(), String>;

    /// Whether the rows are made in order (a decoder's): the pipeline then
    /// reads them band after band, on one thread, and [`release`](Self::release)s
    /// each band's predecessors' rows. `false` by default: bands read in any
    /// order, in parallel.
    fn in_order(&self) -> bool {
        false
    }

    /// No row before `row` will be read again (told before each band of an
    /// [`in_order`](Self::in_order) source): the source may free them. A later
    /// read of one must still give its bytes, at whatever cost. Nothing by
    /// default.
    fn release(&self, row: usize) {
        let _ = row;
    }

    /// How many readers of these rows threads may read at once, each
    /// [in order](Self::in_order) from the row of its first read (a decoder
    /// that starts there), and what starting one at a row costs per row before
    /// it, as a fraction of reading and resizing a row: a parallel resize
    /// gives each reader ([`lane`](Self::lane)) a run of bands, shorter the
    /// further down it starts. `(1, 0.0)` by default: this source alone.
    fn lanes(&self) -> (usize, f64) {
        (1, 0.0)
    }

    /// Reader `i` of [`lanes`](Self::lanes) (reader 0 reads as this source
    /// does); `None` past the last, and by default.
    fn lane(&self, i: usize) -> Option<&dyn RowSource> {
        let _ = i;
        None
    }
}

impl<'a> ImageView<'a> {
    /// Wrap a pixel buffer.
    ///
    /// # Arguments
    /// * `data` - `height * width * channels` bytes.
    /// * `width`, `height` - size in pixels (>= 1).
    /// * `channels` - 1, 2, 3 or 4.
    ///
    /// # Errors
    /// `KimiError::Channels` for another channel count, `KimiError::EmptyImage`
    /// for a zero side, `KimiError::BufferSize` when the length does not match.
    pub fn new(
        data: &'a [u8],
        width: usize,
        height: usize,
        channels: usize,
    ) -> Result<Self, KimiError> {
        Self::with_stride(data, width, height, channels, channels)
    }

    /// Wrap a pixel buffer whose pixels are `pixel_stride` bytes apart, the
    /// colour bytes first: packed pixels (`pixel_stride == channels`, as
    /// [`ImageView::new`]), or RGB in 4-byte pixels (`channels` 3,
    /// `pixel_stride` 4: `R, G, B, pad`), the layout Pillow stores `RGB` images
    /// in and exports through its Arrow C data interface
    /// (`libImaging/Storage.c: ImagingNewPrologueSubtype`, `pixelsize = 4`).
    /// The pad byte is never read for a value: the output equals the packed
    /// RGB image's, bit for bit.
    ///
    /// # Arguments
    /// * `data` - `height * width * pixel_stride` bytes.
    /// * `width`, `height` - size in pixels (>= 1).
    /// * `channels` - 1, 2, 3 or 4.
    /// * `pixel_stride` - bytes per pixel: `channels`, or 4 when `channels` is 3.
    ///
    /// # Errors
    /// As [`ImageView::new`]; `KimiError::PixelStride` for another stride.
    pub fn with_stride(
        data: &'a [u8],
        width: usize,
        height: usize,
        channels: usize,
        pixel_stride: usize,
    ) -> Result<Self, KimiError> {
        let expected = checked_len(width, height, channels, pixel_stride)?;
        if data.len() != expected {
            return Err(KimiError::BufferSize {
                len: data.len(),
                height,
                width,
                channels: pixel_stride,
                expected,
            });
        }
        debug_assert_eq!(data.len(), width * height * pixel_stride);
        Ok(Self::unchecked(data, width, height, channels, pixel_stride))
    }

    /// An encoded JPEG or PNG file whose [`crate::decode::route`] was
    /// `Route::Native(header)`: the pipeline sizes it from `header` and decodes
    /// it (on the worker that processes it, into a per-thread buffer) only when
    /// it runs the image, so a batch's files are decoded in parallel and never
    /// all held at once.
    ///
    /// Source: the checkpoint's `_to_pil` (`Image.open` of the bytes) followed
    /// by `KimiK3VisionProcessor.preprocess`; the decode gives Pillow's bytes
    /// ([`crate::decode`]).
    ///
    /// # Errors
    /// `KimiError::Channels` / `EmptyImage` for a header outside the shapes a
    /// view admits (the routers never produce one).
    pub fn encoded(data: &'a [u8], header: Header) -> Result<Self, KimiError> {
        check_shape(header.width, header.height, header.channels)?;
        Ok(Self {
            encoded: Some(header),
            ..Self::unchecked(
                data,
                header.width,
                header.height,
                header.channels,
                header.channels,
            )
        })
    }

    /// A view of pixels read from `source` as they are needed (nothing is read
    /// here), `pixel_stride` bytes a pixel as for [`ImageView::with_stride`]:
    /// a resize reads the input rows of each band, an image that is not
    /// resized is read band by band of patch rows (a band's copy is a few MB at
    /// most). [`ImageView::data`] is empty.
    ///
    /// # Errors
    /// As [`ImageView::with_stride`], but for the buffer's length.
    pub fn from_rows(
        source: &'a dyn RowSource,
        width: usize,
        height: usize,
        channels: usize,
        pixel_stride: usize,
    ) -> Result<Self, KimiError> {
        checked_len(width, height, channels, pixel_stride)?;
        Ok(Self {
            rows: Some(source),
            ..Self::unchecked(&[], width, height, channels, pixel_stride)
        })
    }

    /// A view of pixels the crate made itself, whose length is
    /// `width * height * channels` by construction (checked in debug builds).
    pub(crate) fn from_parts(data: &'a [u8], width: usize, height: usize, channels: usize) -> Self {
        debug_assert_eq!(data.len(), width * height * channels);
        Self::unchecked(data, width, height, channels, channels)
    }

    /// The view of `data` with this shape, pixels `pixel_stride` bytes apart,
    /// unchecked.
    fn unchecked(
        data: &'a [u8],
        width: usize,
        height: usize,
        channels: usize,
        pixel_stride: usize,
    ) -> Self {
        Self {
            data,
            width,
            height,
            channels,
            pixel_stride,
            encoded: None,
            rows: None,
        }
    }

    /// The pixels: `height * width * pixel_stride` bytes, row-major, HWC.
    #[must_use]
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Width in pixels.
    #[must_use]
    pub fn width(&self) -> usize {
        self.width
    }

    /// Height in pixels.
    #[must_use]
    pub fn height(&self) -> usize {
        self.height
    }

    /// Channels per pixel (1 to 4).
    #[must_use]
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Bytes from one pixel to the next: `channels`, or 4 for RGB stored in
    /// 4-byte pixels ([`ImageView::with_stride`]).
    #[must_use]
    pub fn pixel_stride(&self) -> usize {
        self.pixel_stride
    }
}

/// Check a shape and a pixel stride (`channels`, or 4 for 3 channels), and
/// give the bytes of such an image.
///
/// # Errors
/// As [`ImageView::with_stride`], but for the buffer's length.
fn checked_len(
    width: usize,
    height: usize,
    channels: usize,
    pixel_stride: usize,
) -> Result<usize, KimiError> {
    check_shape(width, height, channels)?;
    if pixel_stride != channels && (channels, pixel_stride) != (3, 4) {
        return Err(KimiError::PixelStride {
            channels,
            pixel_stride,
        });
    }
    width
        .checked_mul(height)
        .and_then(|n| n.checked_mul(pixel_stride))
        .ok_or(KimiError::Overflow {
            what: "image bytes",
        })
}

/// Check the shape of an image before its bytes: 1 to 4 channels, no zero side.
///
/// # Errors
/// `KimiError::Channels` for another channel count, `KimiError::EmptyImage` for
/// a zero side.
pub fn check_shape(width: usize, height: usize, channels: usize) -> Result<(), KimiError> {
    if !(1..=4).contains(&channels) {
        return Err(KimiError::Channels(channels));
    }
    if width == 0 || height == 0 {
        return Err(KimiError::EmptyImage {
            width: width as i128,
            height: height as i128,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accessors() {
        let data = [7u8; 5 * 3 * 2];
        let view = ImageView::new(&data, 5, 3, 2).unwrap();
        assert_eq!((view.width(), view.height(), view.channels()), (5, 3, 2));
        assert_eq!(view.data().len(), 30);
        let inner = ImageView::from_parts(&data, 3, 5, 2);
        assert_eq!((inner.width, inner.height, inner.pixel_stride), (3, 5, 2));
    }

    #[test]
    fn with_stride_checks_stride_and_length() {
        let data = [1u8; 5 * 3 * 4];
        let view = ImageView::with_stride(&data, 5, 3, 3, 4).unwrap();
        assert_eq!((view.channels(), view.pixel_stride()), (3, 4));
        assert_eq!(ImageView::new(&data, 5, 3, 4).unwrap().pixel_stride(), 4);
        assert_eq!(
            ImageView::with_stride(&data, 5, 3, 4, 4)
                .unwrap()
                .pixel_stride(),
            4
        );
        assert_eq!(
            ImageView::with_stride(&data[..15], 5, 3, 1, 1)
                .unwrap()
                .pixel_stride(),
            1
        );
        for (channels, stride) in [(1, 4), (2, 4), (3, 2), (3, 5), (4, 3)] {
            assert_eq!(
                ImageView::with_stride(&data, 5, 3, channels, stride).unwrap_err(),
                KimiError::PixelStride {
                    channels,
                    pixel_stride: stride
                }
            );
        }
        assert_eq!(
            ImageView::with_stride(&data[..45], 5, 3, 3, 4).unwrap_err(),
            KimiError::BufferSize {
                len: 45,
                height: 3,
                width: 5,
                channels: 4,
                expected: 60
            }
        );
        assert!(matches!(
            ImageView::with_stride(&data, 0, 3, 3, 4),
            Err(KimiError::EmptyImage { .. })
        ));
        assert!(matches!(
            ImageView::with_stride(&data, usize::MAX, 3, 3, 4),
            Err(KimiError::Overflow { .. })
        ));
    }

    #[test]
    fn rejects_zero_sides() {
        assert!(matches!(
            ImageView::new(&[], 0, 4, 3),
            Err(KimiError::EmptyImage {
                width: 0,
                height: 4
            })
        ));
    }
}
