"""One batch through the core: load every input, then preprocess them in one native call.

Shared by :func:`kimi_k3_rs.processor.preprocess`, ``KimiK3VisionProcessor.preprocess``
(:mod:`kimi_k3_rs.hf`) and ``KimiK3EncoderInputs.materialize`` (:mod:`kimi_k3_rs.deferred`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _native, errors
from .config import MediaProcConfig
from .decoding import _check_header, _loaded
from .errors import ImageError, KimiK3Error
from .inputs import _unwrap_media
from .modes import _pixels
from .native_decode import _route
from .options import _from_native, _Options
from .video import _chunk_frames, _is_video_chunk, _rgb_frame


@contextlib.contextmanager
def _naming(index: int) -> Iterator[None]:
    """Name image ``index`` of a batch in what reading it raises: an :class:`ImageError`
    gets the index in front (its class kept), a ``MemoryError`` stays one with the
    index, and any other exception becomes an :class:`ImageError` ``image {index}:
    cannot read or decode it: {exc}`` (chained): a file Pillow cannot decode, a closed
    PIL image, a ``load``, ``__array__`` or tensor conversion that raises. Passed on as
    they are: the package's errors about the call (a :class:`KimiK3Error` that is not
    an :class:`ImageError`), and another project's texts (:func:`errors.is_verbatim`),
    which sglang and the checkpoint raise without an index."""
    try:
        yield
    except ImageError as exc:
        raise errors.at_image(index, exc) from exc
    except MemoryError as exc:
        raise errors.memory_at_image(index, exc) from exc
    except Exception as exc:
        if isinstance(exc, KimiK3Error) or errors.is_verbatim(exc):
            raise
        raise errors.at_image(index, errors.unreadable(exc)) from exc


def _load(
    image: Any, index: int, cfg: MediaProcConfig, opts: _Options
) -> tuple[np.ndarray | _native.PillowRows, tuple[int, int, int, int, int] | None]:
    """One input the core cannot decode itself, decoded (Pillow), with its mode steps
    (:func:`kimi_k3_rs.modes._pixels`): ``(uint8 array, its sizing if already resized)``."""
    with _naming(index), _loaded(
        image, opts.exif_transpose, opts.max_image_pixels, opts.max_decoded_bytes, opts.allowed_formats
    ) as loaded:
        return _pixels(loaded, cfg, opts.native)


def _routed(item: Any, index: int, opts: _Options) -> tuple[Any, _native.EncodedImage | None]:
    """:func:`kimi_k3_rs.native_decode._route` of one item's image, with the limits of
    ``opts`` applied to a natively decoded file's header."""
    with _naming(index):
        data, encoded = _route(_unwrap_media(item), opts.exif_transpose, opts.allowed_formats)
        if encoded is not None:
            _check_header(
                encoded.size, encoded.mode, opts.max_image_pixels, opts.max_decoded_bytes, file_bytes=len(data)
            )
    return data, encoded


def _run(
    images: Sequence[Any],
    cfg: MediaProcConfig,
    opts: _Options,
    out: np.ndarray | None = None,
    indices: Sequence[int] | None = None,
) -> tuple[np.ndarray, npt.NDArray[np.int64]]:
    """Load every image (and every frame of a ``video_chunk`` item), then preprocess the
    batch in one native call; a chunk's frames are consecutive arrays, one item there.

    JPEG and PNG files that the core decodes itself (:mod:`kimi_k3_rs.native_decode`)
    go to it encoded, and are decoded in the native call, in parallel with the GIL
    released. The rest are decoded by Pillow here, on ``num_threads`` threads when
    there are several (Pillow releases the GIL while it decodes).

    ``indices``: the numbers errors give the images (their batch positions by default).
    """
    arrays: list[Any] = []
    resized: list[tuple[int, int, int, int, int] | None] = []
    names: list[int] = []  # the item index of every array
    chunks: list[tuple[int, int]] = []  # (first array, frames) of every video chunk
    pending: list[tuple[int, Any, int]] = []  # (array slot, input, index) left to Pillow
    for position, item in enumerate(images):
        index = position if indices is None else indices[position]
        if _is_video_chunk(item):
            with _naming(index):
                frames = _chunk_frames(item, cfg)
            chunks.append((len(arrays), len(frames)))
            for frame in frames:
                with _naming(index), _loaded(
                    frame, opts.exif_transpose, opts.max_image_pixels, opts.max_decoded_bytes, opts.allowed_formats
                ) as image:
                    arrays.append(_rgb_frame(image))
                resized.append(None)
                names.append(index)
            continue
        data, encoded = _routed(item, index, opts)
        if encoded is None:
            pending.append((len(arrays), data, index))
        arrays.append(encoded)
        resized.append(None)
        names.append(index)
    if opts.num_threads > 1 and len(pending) > 1:
        with ThreadPoolExecutor(min(opts.num_threads, len(pending))) as pool:
            loads = list(pool.map(lambda job: _load(job[1], job[2], cfg, opts), pending))
    else:
        loads = [_load(data, index, cfg, opts) for _, data, index in pending]
    for (slot, _, _), (array, sizing) in zip(pending, loads):
        arrays[slot], resized[slot] = array, sizing
    pixel_values, grid_thws = _native.preprocess(
        arrays, cfg.native, opts.native, resized=resized, out=out, indices=names, chunks=chunks
    )
    return (out if out is not None else _from_native(pixel_values, opts.dtype)), grid_thws
