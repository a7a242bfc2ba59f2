"""Every user input becomes what the core takes, its kind decided once.

:func:`classify` is the one ``isinstance`` chain; :func:`load_batch` hands each input to
the one module that handles its kind, which returns what the core takes;
:func:`run_batch` runs the batch through the core. The rest of the package uses only
the names of this module: :func:`run_batch`, :func:`classify` (:class:`Item`,
:class:`Kind`), :func:`header_size` (an image's size from its header), :func:`as_list`,
:func:`chunk_frames`, :func:`frame_list`, :func:`naming`, :func:`from_native`, the mode
steps the HF processor's own resize takes
(:func:`resize_in_mode`, :func:`resize_order_check`), and the public names re-exported by
``kimi_k3_rs`` (:func:`decode_path`, :data:`DECODE_ENV`, :func:`enable_pillow_zero_copy`).

Laid out by kind:

* ``arrays.py``: numpy arrays and torch tensors (duck-typed) as the core reads them, and
  the frames of a video;
* ``pil.py``: PIL images: the reference's mode steps, Pillow's pixels read in place, EXIF;
* ``encoded.py``: encoded data (bytes, data URLs, paths): the format allow-list, the
  decompression-bomb guards (ICO headers included), the files the core decodes itself,
  the rest opened with Pillow as the checkpoint's ``_to_pil`` opens them;
* ``ico.py``: ICO headers read as Pillow reads them (the entries and their images'
  sizes), for ``encoded.py``'s bomb guard;
* ``native.py``: the core's decoders' per-process self-check against Pillow, and finding
  Pillow's libjpeg.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt
from PIL import Image

from .. import _native, errors
from ..errors import ImageError, KimiK3Error
from . import encoded
from .arrays import (
    core_array,
    frame_list,
    is_torch_tensor,
    tensor_array,
    tensor_layout,
)
from .native import DECODE_ENV, decode_path
from .pil import (
    apply_exif,
    core_pixels,
    enable_pillow_zero_copy,
    resize_in_mode,
    resize_order_check,
    rgb_frame,
)

if TYPE_CHECKING:
    from ..config import MediaProcConfig
    from ..options import CallOptions

__all__ = [
    "DECODE_ENV",
    "Item",
    "Kind",
    "as_list",
    "chunk_frames",
    "classify",
    "decode_path",
    "enable_pillow_zero_copy",
    "frame_list",
    "from_native",
    "header_size",
    "naming",
    "resize_in_mode",
    "resize_order_check",
    "run_batch",
]


class Kind(enum.Enum):
    """The kinds of input the package takes; ``OTHER`` is refused where it is read, with
    the error of the entry point that reads it."""

    ARRAY = "numpy array"
    TENSOR = "torch tensor"
    PIL = "PIL image"
    ENCODED = "encoded file"  # bytes-like, a data URL, or a path
    VIDEO_CHUNK = "video chunk"
    OTHER_MEDIA = "media dict of another type"  # neither an image nor a video chunk
    OTHER = "other"


@dataclass(frozen=True)
class Item:
    """One input with its kind: ``value`` is the array, tensor, PIL image, encoded data
    (bytes-like, ``str`` or ``os.PathLike``), the video chunk dict, or what was given;
    ``content_hash`` is a media dict's (None otherwise)."""

    kind: Kind
    value: Any
    content_hash: Any = None


def kind_of(value: Any) -> Kind:
    """The kind of an image value (not a media dict: a ``Mapping`` is ``OTHER``)."""
    if isinstance(value, np.ndarray):
        return Kind.ARRAY
    if isinstance(value, Image.Image):
        return Kind.PIL
    if isinstance(value, (bytes, bytearray, memoryview, str, os.PathLike)):
        return Kind.ENCODED
    if is_torch_tensor(value):
        return Kind.TENSOR
    return Kind.OTHER


def classify(item: Any) -> Item:
    """The kind of one batch item: a ``{"type": "video_chunk", ...}`` dict is a
    ``VIDEO_CHUNK``; a ``{"type": "image", "image": ...}`` dict is its image's kind, with
    its ``content_hash``; any other mapping ``OTHER_MEDIA``; any other value
    :func:`kind_of` it. Raises nothing: each reader refuses what it does not take with
    its own error."""
    if isinstance(item, Mapping):
        if item.get("type") == "video_chunk":
            return Item(Kind.VIDEO_CHUNK, item)
        if item.get("type") != "image" or "image" not in item:
            return Item(Kind.OTHER_MEDIA, item)
        image = item["image"]
        return Item(kind_of(image), image, item.get("content_hash"))
    return Item(kind_of(item), item)


def as_list(images: Any) -> list[Any]:
    """``images`` as a list: a list or tuple of inputs, or one input."""
    if isinstance(images, (list, tuple)):
        return list(images)
    return [images]


def chunk_frames(item: Mapping[str, Any], cfg: MediaProcConfig) -> Sequence[Any]:
    """The frames of a ``video_chunk`` item; sglang's ``Unsupported Kimi-K3 encoder media
    item`` for a config without video keys or an item without frames to read, an
    :class:`ImageError` for an empty chunk (the caller names the item)."""
    if cfg.video is None or "video_chunk" not in item:
        raise errors.unsupported_media_item(item)
    try:
        frames = frame_list(item["video_chunk"])
    except errors.KimiK3Error:
        raise errors.unsupported_media_item(item) from None
    if len(frames) == 0:
        raise errors.empty_video_chunk()
    return frames


class naming:
    """Name image ``index`` of a batch in what reading it raises: an :class:`ImageError`
    gets the index in front (its class kept), a ``MemoryError`` stays one with the
    index, and any other exception becomes an :class:`ImageError` ``image {index}:
    cannot read or decode it: {exc}`` (chained): a file Pillow cannot decode, a closed
    PIL image, a ``load``, ``__array__`` or tensor conversion that raises. Passed on as
    they are: the package's errors about the call (a :class:`KimiK3Error` that is not
    an :class:`ImageError`), and another project's texts (:func:`errors.is_verbatim`),
    which sglang and the checkpoint raise without an index. (A class rather than a
    generator: it is entered for every image of every call.)"""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc is None or not isinstance(exc, Exception):
            return
        if isinstance(exc, ImageError):
            raise errors.at_image(self.index, exc) from exc
        if isinstance(exc, MemoryError):
            raise errors.memory_at_image(self.index, exc) from exc
        if isinstance(exc, KimiK3Error) or errors.is_verbatim(exc):
            return
        raise errors.at_image(self.index, errors.unreadable(exc)) from exc


def header_size(data: Any, exif_transpose: bool, allowed_formats: frozenset[str] | None = None) -> tuple[int, int]:
    """``(width, height)`` of one image (not a media dict) as the pixel path will see
    it, reading no pixels where it can (file headers, :func:`encoded.encoded_size
    <kimi_k3_rs._input.encoded.encoded_size>`; tensor shapes; EXIF orientations 5..8
    swap the sides). No ``max_image_pixels`` limit applies: sizing works on any size;
    ``allowed_formats`` does.

    Raises:
        ValueError: the checkpoint's ``Unsupported data type`` for a value of no kind the
            package reads; what reading the header raises (an :class:`ImageError` for
            unreadable data).
    """
    kind = kind_of(data)
    if kind is Kind.ARRAY:
        return _native.image_size(data)
    if kind is Kind.PIL:
        return encoded.oriented_size(data, exif_transpose)
    if kind is Kind.TENSOR:
        height, width, _, _ = tensor_layout(data)
        if height == 0 or width == 0:
            raise errors.empty_tensor(tuple(data.shape))
        return width, height
    if kind is not Kind.ENCODED:
        raise errors.unsupported_data_type(data)
    return encoded.encoded_size(data, exif_transpose, allowed_formats)


def _frame(value: Any, opts: CallOptions) -> np.ndarray:
    """One frame of a ``video_chunk`` as the uint8 ``HxWx3`` array the core resizes
    (:func:`kimi_k3_rs._input.pil.rgb_frame`)."""
    kind = kind_of(value)
    if kind is Kind.ENCODED:
        with encoded.loaded_image(
            value, opts.exif_transpose, opts.max_image_pixels, opts.max_decoded_bytes, opts.allowed_formats
        ) as image:
            return rgb_frame(image)
    if kind is Kind.TENSOR:
        return rgb_frame(tensor_array(value))
    if kind is Kind.PIL:
        return rgb_frame(apply_exif(value) if opts.exif_transpose else value)
    if kind is not Kind.ARRAY:
        raise errors.unsupported_data_type(value)
    return rgb_frame(value)


def _load(item: Item, index: int, cfg: MediaProcConfig, opts: CallOptions, *, routed: bool = False) -> _native.BatchItem:
    """One input (not an array) as the core takes it, from the module of its kind;
    ``routed``: encoded data that :func:`encoded.route <kimi_k3_rs._input.encoded.route>`
    left to Pillow."""
    with naming(index):
        if item.kind is Kind.ENCODED:
            return (encoded.pillow_load if routed else encoded.load)(item.value, index, cfg, opts)
        if item.kind is Kind.PIL:
            image = apply_exif(item.value) if opts.exif_transpose else item.value
            pixels, resized = core_pixels(image, cfg, opts.native)
            return _native.BatchItem.image(pixels, index, resized)
        if item.kind is Kind.TENSOR:
            return _native.BatchItem.image(core_array(tensor_array(item.value)), index)
        raise errors.unsupported_data_type(item.value)


def load_batch(
    images: Sequence[Any], cfg: MediaProcConfig, opts: CallOptions, indices: Sequence[int] | None = None
) -> list[_native.BatchItem]:
    """Load every image (and every frame of a ``video_chunk`` item) for one native call:
    one :class:`kimi_k3_rs._native.BatchItem` per input, in order.

    Each input is classified once (:func:`classify`) and handed to the module of its
    kind, which returns what the core takes. JPEG and PNG files that the core decodes
    itself (:func:`encoded.route <kimi_k3_rs._input.encoded.route>`) stay encoded, and
    are decoded in the native call, in parallel with the GIL released. The rest are
    decoded by Pillow here: with one thread, each input in turn (the first that cannot
    be read raises); with ``opts.num_threads`` > 1, the encoded inputs are routed first,
    then those left to Pillow, the PIL images and the tensors are loaded on that many
    threads when there are several (Pillow releases the GIL while it decodes).

    ``indices``: the numbers errors give the images (their batch positions by default).

    Raises:
        ImageError: naming the batch index of an image that cannot be read (see
            :func:`naming`); sglang's and the checkpoint's errors as they raise them.
    """
    threaded = opts.num_threads > 1
    batch: list[_native.BatchItem | None] = []
    pending: list[tuple[int, Item, int]] = []  # (batch slot, input, index) left to the threads
    for position, value in enumerate(images):
        index = position if indices is None else indices[position]
        item = classify(value)
        if item.kind is Kind.ARRAY:
            batch.append(_native.BatchItem.image(core_array(item.value), index))
            continue
        if item.kind is Kind.OTHER_MEDIA:
            raise errors.unsupported_media_item(value)
        if item.kind is Kind.VIDEO_CHUNK:
            with naming(index):
                frames = [_frame(frame, opts) for frame in chunk_frames(item.value, cfg)]
            batch.append(_native.BatchItem.video_chunk(frames, index))
            continue
        if not threaded:
            batch.append(_load(item, index, cfg, opts))
            continue
        if item.kind is Kind.ENCODED:
            with naming(index):
                read, native = encoded.route(item.value, index, opts)
            if native is not None:
                batch.append(native)
                continue
            item = Item(Kind.ENCODED, read)
        pending.append((len(batch), item, index))
        batch.append(None)
    if len(pending) > 1:
        with ThreadPoolExecutor(min(opts.num_threads, len(pending))) as pool:
            loads = list(pool.map(lambda job: _load(job[1], job[2], cfg, opts, routed=True), pending))
    else:
        loads = [_load(item, index, cfg, opts, routed=True) for _, item, index in pending]
    for (slot, _, _), loaded in zip(pending, loads):
        batch[slot] = loaded
    return cast(list[_native.BatchItem], batch)  # every slot filled


def run_batch(
    images: Any,
    cfg: MediaProcConfig,
    opts: CallOptions,
    out: np.ndarray | None = None,
    indices: Sequence[int] | None = None,
) -> tuple[np.ndarray, npt.NDArray[np.int64]]:
    """Preprocess a batch (one input, or a list / tuple of them: :func:`as_list`;
    :func:`load_batch`) in one native call: ``(pixel_values, grid_thws)``,
    ``pixel_values`` in ``out`` when given, else of ``opts.dtype``'s numpy type
    (:func:`from_native`).

    ``indices``: the numbers errors give the images (their batch positions by default).
    """
    items = load_batch(as_list(images), cfg, opts, indices)
    pixel_values, grid_thws = _native.preprocess(items, cfg.native, opts.native, out=out)
    return (out if out is not None else from_native(pixel_values, opts.dtype)), grid_thws


def from_native(values: np.ndarray, dtype: str) -> np.ndarray:
    """Give half-precision bits their numpy type: float16, and ml_dtypes.bfloat16 when
    ml_dtypes is installed (else the uint16 bit patterns)."""
    if dtype == "float16":
        return values.view(np.float16)
    if dtype == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            return values
        return values.view(ml_dtypes.bfloat16)
    return values
