//! One item of a `preprocess` batch ([`PyBatchItem`], `_native.BatchItem`),
//! built by `kimi_k3_rs._input.load_batch`: an image (its pixels, with its
//! sizing when the caller already resized it) or a video chunk (its frames),
//! with the number errors give it. [`borrow_items`] borrows a batch of them
//! for the core's [`BatchItem`]s.

use numpy::PyReadonlyArrayDyn;
use pyo3::prelude::*;

use super::arrow::PillowRows;
use super::borrow::{array_view, borrow_array};
use super::decode::PyEncodedImage;
use super::errors::at_image;
use crate::error::KimiError;
use crate::geometry::ResizeConfig;
use crate::{BatchItem, ImageView};

/// The pixels of one image or frame.
enum Pixels {
    /// A uint8 `HxW` / `HxWxC` numpy array (dtype, shape and layout are
    /// checked when it is borrowed, the errors naming the item).
    Array(Py<PyAny>),
    /// An encoded file the core decodes.
    Encoded(Py<PyEncodedImage>),
    /// A PIL image read band by band.
    Rows(Py<PillowRows>),
}

impl Pixels {
    fn new(value: &Bound<'_, PyAny>) -> Self {
        if let Ok(encoded) = value.cast::<PyEncodedImage>() {
            Pixels::Encoded(encoded.clone().unbind())
        } else if let Ok(rows) = value.cast::<PillowRows>() {
            Pixels::Rows(rows.clone().unbind())
        } else {
            Pixels::Array(value.clone().unbind())
        }
    }

    fn object<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        match self {
            Pixels::Array(array) => array.bind(py).clone(),
            Pixels::Encoded(encoded) => encoded.bind(py).clone().into_any(),
            Pixels::Rows(rows) => rows.bind(py).clone().into_any(),
        }
    }
}

/// What an item holds.
enum Content {
    /// One image, with its sizing when already resized to it.
    Image {
        pixels: Pixels,
        resized: Option<ResizeConfig>,
    },
    /// The frames of a video chunk (at least one), sized together from frame 0.
    Chunk(Vec<Pixels>),
}

/// One item of a `preprocess` batch: an image or a video chunk, and `index`,
/// the number errors give it (its position in the caller's batch).
#[pyclass(frozen, module = "kimi_k3_rs._native", name = "BatchItem")]
pub(crate) struct PyBatchItem {
    content: Content,
    index: usize,
}

#[pymethods]
impl PyBatchItem {
    /// An image: a uint8 `HxW` / `HxWxC` numpy array, an `EncodedImage` or a
    /// `PillowRows`; `resized`, when given, the sizing `(num_tokens,
    /// new_width, new_height, pad_width, pad_height)` of the original image
    /// that the caller already resized the pixels to (own-mode resize): it is
    /// not computed again.
    #[staticmethod]
    #[pyo3(signature = (pixels, index, /, resized=None))]
    fn image(
        pixels: &Bound<'_, PyAny>,
        index: usize,
        resized: Option<(u64, u64, u64, u64, u64)>,
    ) -> Self {
        let resized = resized.map(
            |(num_tokens, new_width, new_height, pad_width, pad_height)| ResizeConfig {
                num_tokens,
                new_width,
                new_height,
                pad_width,
                pad_height,
            },
        );
        Self {
            content: Content::Image {
                pixels: Pixels::new(pixels),
                resized,
            },
            index,
        }
    }

    /// A K2.5 video chunk of `frames` (each as the pixels of [`Self::image`]):
    /// one item, one grid `[len(frames), gh, gw]`, sized from frame 0.
    ///
    /// # Errors
    /// `ImageError` `image {index}: a video_chunk must have at least 1 frame,
    /// got 0` for no frames.
    #[staticmethod]
    #[pyo3(signature = (frames, index, /))]
    fn video_chunk(frames: Vec<Bound<'_, PyAny>>, index: usize) -> PyResult<Self> {
        if frames.is_empty() {
            return Err(at_image(index, KimiError::ChunkFrames { frames: 0 }));
        }
        Ok(Self {
            content: Content::Chunk(frames.iter().map(Pixels::new).collect()),
            index,
        })
    }

    /// The number errors give the item.
    #[getter]
    fn index(&self) -> usize {
        self.index
    }

    /// Its pixels: the image's, or the chunk's frames in order.
    #[getter]
    fn pixels<'py>(&self, py: Python<'py>) -> Vec<Bound<'py, PyAny>> {
        match &self.content {
            Content::Image { pixels, .. } => vec![pixels.object(py)],
            Content::Chunk(frames) => frames.iter().map(|f| f.object(py)).collect(),
        }
    }
}

/// The pixels of one image or frame, borrowed for a call.
enum Borrowed<'py> {
    /// A uint8 `HxW` / `HxWxC` array.
    Array(PyReadonlyArrayDyn<'py, u8>),
    /// An encoded file (its bytes are immutable).
    Encoded(Bound<'py, PyEncodedImage>),
    /// A PIL image read band by band.
    Rows(Bound<'py, PillowRows>),
}

/// One item, borrowed: what [`BatchItem`] is made from.
enum BorrowedItem<'py> {
    /// An image, with its sizing when already resized to it.
    Image(Borrowed<'py>, Option<ResizeConfig>),
    /// A video chunk's frames.
    Chunk(Vec<Borrowed<'py>>),
}

/// A borrowed batch: every item with the index errors give it, and that
/// index for each of its views (the core names a view by its position among
/// the views of the batch, [`crate::item_views`]).
pub(crate) struct BorrowedItems<'py> {
    items: Vec<(BorrowedItem<'py>, usize)>,
    view_indices: Vec<usize>,
}

/// Borrow the pixels of a batch of items (arrays for reading, with every
/// dtype and shape check; errors name the item's index).
pub(crate) fn borrow_items<'py>(
    py: Python<'py>,
    items: &[Bound<'py, PyBatchItem>],
) -> PyResult<BorrowedItems<'py>> {
    let borrow = |pixels: &Pixels, index: usize| -> PyResult<Borrowed<'py>> {
        Ok(match pixels {
            Pixels::Array(array) => Borrowed::Array(borrow_array(array.bind(py), Some(index))?),
            Pixels::Encoded(encoded) => Borrowed::Encoded(encoded.bind(py).clone()),
            Pixels::Rows(rows) => Borrowed::Rows(rows.bind(py).clone()),
        })
    };
    let mut borrowed = BorrowedItems {
        items: Vec::with_capacity(items.len()),
        view_indices: Vec::with_capacity(items.len()),
    };
    for item in items {
        let PyBatchItem { content, index } = item.get();
        let item = match content {
            Content::Image { pixels, resized } => {
                BorrowedItem::Image(borrow(pixels, *index)?, *resized)
            }
            Content::Chunk(frames) => BorrowedItem::Chunk(
                frames
                    .iter()
                    .map(|frame| borrow(frame, *index))
                    .collect::<PyResult<_>>()?,
            ),
        };
        let views = match &item {
            BorrowedItem::Image(..) => 1,
            BorrowedItem::Chunk(frames) => frames.len(),
        };
        borrowed
            .view_indices
            .extend(std::iter::repeat_n(*index, views));
        borrowed.items.push((item, *index));
    }
    Ok(borrowed)
}

/// The core's view of borrowed pixels, errors naming `index` (no copy: an
/// encoded file is decoded, and a `PillowRows` read band by band, when the
/// pipeline runs it).
fn view<'a>(py: Python<'_>, image: &'a Borrowed<'_>, index: usize) -> PyResult<ImageView<'a>> {
    match image {
        Borrowed::Array(array) => array_view(array, Some(index)),
        Borrowed::Encoded(encoded) => {
            let encoded = encoded.get();
            ImageView::encoded(encoded.data.as_bytes(py), encoded.header)
                .map_err(|e| at_image(index, e))
        }
        Borrowed::Rows(rows) => rows.get().view().map_err(|e| at_image(index, e)),
    }
}

impl BorrowedItems<'_> {
    /// The core's items of the batch.
    pub(crate) fn items(&self, py: Python<'_>) -> PyResult<Vec<BatchItem<'_>>> {
        self.items
            .iter()
            .map(|(item, index)| {
                Ok(match item {
                    BorrowedItem::Image(image, None) => BatchItem::Image(view(py, image, *index)?),
                    BorrowedItem::Image(image, Some(r)) => {
                        BatchItem::PreResized(view(py, image, *index)?, *r)
                    }
                    BorrowedItem::Chunk(frames) => BatchItem::VideoChunk(
                        frames
                            .iter()
                            .map(|frame| view(py, frame, *index))
                            .collect::<PyResult<_>>()?,
                    ),
                })
            })
            .collect()
    }

    /// The index errors give view `k` of the batch (its item's).
    pub(crate) fn index(&self, k: usize) -> usize {
        self.view_indices.get(k).copied().unwrap_or(k)
    }

    /// The `KeyboardInterrupt` (or other non-`Exception`) that reading the
    /// rows of one of the images met, if any (taken: it is raised once).
    pub(crate) fn interrupt(&self) -> Option<PyErr> {
        let mut images = self.items.iter().flat_map(|(item, _)| match item {
            BorrowedItem::Image(image, _) => std::slice::from_ref(image),
            BorrowedItem::Chunk(frames) => frames.as_slice(),
        });
        images.find_map(|image| match image {
            Borrowed::Rows(rows) => rows.get().take_interrupt(),
            _ => None,
        })
    }
}
