"""Every user input becomes what the core takes, its kind decided once.

The rest of the package uses only the names of this module: :func:`load_batch` (a
batch to the items of one native call: arrays, encoded files and row sources),
:func:`header_size` (an image's size from its header), :func:`classify` and its
:class:`Item` / :class:`Kind`, :func:`naming`, and the public names re-exported by
``kimi_k3_rs`` (:func:`decode_path`, :data:`DECODE_ENV`, :func:`enable_pillow_zero_copy`).

Laid out by job:

* ``kinds.py``: :func:`classify`, the one ``isinstance`` chain, and the adapters of each
  kind (media dicts, torch tensors, EXIF);
* ``encoded.py``: encoded data to PIL images (``Image.open`` as the checkpoint's
  ``_to_pil``), the format allow-list and the decompression-bomb guards (ICO headers
  included);
* ``native.py``: which encoded files the core decodes itself, its per-process
  self-check against Pillow, and finding Pillow's libjpeg;
* ``pil.py``: the reference's PIL mode steps, and Pillow's pixels read in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, cast

from .. import _native, errors
from ..config import MediaProcConfig
from ..errors import ImageError, KimiK3Error
from ..options import CallOptions
from .encoded import check_header, header_size, loaded_image
from .kinds import Item, Kind, as_list, chunk_frames, classify, frame_list, kind_of
from .native import DECODE_ENV, decode_path, route
from .pil import (
    core_pixels,
    enable_pillow_zero_copy,
    resize_in_mode,
    resize_order_check,
    rgb_frame,
)

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
    "header_size",
    "kind_of",
    "load_batch",
    "naming",
    "resize_in_mode",
    "resize_order_check",
]

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


def _load(item: Item, index: int, cfg: MediaProcConfig, opts: CallOptions) -> _native.BatchItem:
    """One input the core cannot decode itself, decoded (Pillow), with its mode steps
    (:func:`kimi_k3_rs._input.pil.core_pixels`): its uint8 array or row source, with its
    sizing if already resized."""
    with naming(index), loaded_image(
        item, opts.exif_transpose, opts.max_image_pixels, opts.max_decoded_bytes, opts.allowed_formats
    ) as loaded:
        pixels, resized = core_pixels(loaded, cfg, opts.native)
    return _native.BatchItem.image(pixels, index, resized)


def _routed(item: Item, index: int, opts: CallOptions) -> tuple[Item, _native.EncodedImage | None]:
    """:func:`kimi_k3_rs._input.native.route` of one item's image, with the limits of
    ``opts`` applied to a natively decoded file's header."""
    with naming(index):
        read, encoded = route(item, opts.exif_transpose, opts.allowed_formats)
        if encoded is not None:
            check_header(
                encoded.size, encoded.mode, opts.max_image_pixels, opts.max_decoded_bytes,
                file_bytes=len(read.value),
            )
    return read, encoded


def load_batch(
    images: Sequence[Any], cfg: MediaProcConfig, opts: CallOptions, indices: Sequence[int] | None = None
) -> list[_native.BatchItem]:
    """Load every image (and every frame of a ``video_chunk`` item) for one native call:
    one :class:`kimi_k3_rs._native.BatchItem` per input, in order.

    JPEG and PNG files that the core decodes itself (:mod:`kimi_k3_rs._input.native`)
    stay encoded, and are decoded in the native call, in parallel with the GIL
    released. The rest are decoded by Pillow here, on ``opts.num_threads`` threads when
    there are several (Pillow releases the GIL while it decodes).

    ``indices``: the numbers errors give the images (their batch positions by default).

    Raises:
        ImageError: naming the batch index of an image that cannot be read (see
            :func:`naming`); sglang's and the checkpoint's errors as they raise them.
    """
    batch: list[_native.BatchItem | None] = []
    pending: list[tuple[int, Item, int]] = []  # (batch slot, input, index) left to Pillow
    for position, value in enumerate(images):
        index = position if indices is None else indices[position]
        item = classify(value)
        if item.kind is Kind.OTHER_MEDIA:
            raise errors.unsupported_media_item(value)
        if item.kind is Kind.VIDEO_CHUNK:
            with naming(index):
                frames = chunk_frames(item.value, cfg)
            pixels = []
            for frame in frames:
                with naming(index), loaded_image(
                    Item(kind_of(frame), frame), opts.exif_transpose, opts.max_image_pixels,
                    opts.max_decoded_bytes, opts.allowed_formats,
                ) as image:
                    pixels.append(rgb_frame(image))
            batch.append(_native.BatchItem.video_chunk(pixels, index))
            continue
        read, encoded = _routed(item, index, opts) if item.kind is Kind.ENCODED else (item, None)
        if encoded is None:
            pending.append((len(batch), read, index))
            batch.append(None)
        else:
            batch.append(_native.BatchItem.image(encoded, index))
    if opts.num_threads > 1 and len(pending) > 1:
        with ThreadPoolExecutor(min(opts.num_threads, len(pending))) as pool:
            loads = list(pool.map(lambda job: _load(job[1], job[2], cfg, opts), pending))
    else:
        loads = [_load(item, index, cfg, opts) for _, item, index in pending]
    for (slot, _, _), loaded in zip(pending, loads):
        batch[slot] = loaded
    return cast(list[_native.BatchItem], batch)  # every slot filled
