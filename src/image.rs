//! The borrowed 8-bit HWC image every stage reads: [`ImageView`].

use crate::error::KimiError;

/// A borrowed 8-bit image: `height * width * channels` bytes, row-major, HWC.
///
/// `channels` is 1 (`L`), 2 (`LA`), 3 (`RGB`) or 4 (`RGBA`); the last channel
/// of 2 and 4 is alpha (straight, not premultiplied). The input of the whole
/// pipeline ([`crate::preprocess_image`]) and of the pad / normalise / patchify
/// stage ([`crate::normalize::pad_normalize_patchify`]).
#[derive(Debug, Clone, Copy)]
pub struct ImageView<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) width: usize,
    pub(crate) height: usize,
    pub(crate) channels: usize,
    pub(crate) resized_from: Option<(u64, u64)>,
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
        if !(1..=4).contains(&channels) {
            return Err(KimiError::Channels(channels));
        }
        if width == 0 || height == 0 {
            return Err(KimiError::EmptyImage {
                width: width as u64,
                height: height as u64,
            });
        }
        let expected = width
            .checked_mul(height)
            .and_then(|n| n.checked_mul(channels))
            .ok_or(KimiError::Overflow {
                what: "image bytes",
            })?;
        if data.len() != expected {
            return Err(KimiError::BufferSize {
                len: data.len(),
                height,
                width,
                channels,
                expected,
            });
        }
        Ok(Self {
            data,
            width,
            height,
            channels,
            resized_from: None,
        })
    }

    /// Mark the pixels as already resized (for example by Pillow, for a mode
    /// this crate does not resize itself) from an original of
    /// `width x height` pixels: the sizing uses the original size, the view
    /// must have the resulting `new_width x new_height`, and the resize step is
    /// skipped (compositing and normalisation still run).
    #[must_use]
    pub fn resized_from(mut self, width: u64, height: u64) -> Self {
        self.resized_from = Some((width, height));
        self
    }

    /// A view of pixels the crate made itself, whose length is
    /// `width * height * channels` by construction (checked in debug builds).
    pub(crate) fn from_parts(data: &'a [u8], width: usize, height: usize, channels: usize) -> Self {
        debug_assert_eq!(data.len(), width * height * channels);
        Self {
            data,
            width,
            height,
            channels,
            resized_from: None,
        }
    }

    /// The pixels: `height * width * channels` bytes, row-major, HWC.
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

    /// Bytes per pixel (1 to 4).
    #[must_use]
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// The size the sizing rule is applied to: the original one.
    #[must_use]
    pub fn original_size(&self) -> (u64, u64) {
        self.resized_from
            .unwrap_or((self.width as u64, self.height as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accessors_and_original_size() {
        let data = [7u8; 5 * 3 * 2];
        let view = ImageView::new(&data, 5, 3, 2).unwrap();
        assert_eq!((view.width(), view.height(), view.channels()), (5, 3, 2));
        assert_eq!(view.data().len(), 30);
        assert_eq!(view.original_size(), (5, 3));
        assert_eq!(view.resized_from(50, 30).original_size(), (50, 30));
        let inner = ImageView::from_parts(&data, 3, 5, 2);
        assert_eq!(
            (inner.width, inner.height, inner.resized_from),
            (3, 5, None)
        );
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
