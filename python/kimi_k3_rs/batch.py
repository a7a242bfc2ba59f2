"""One batch through the core: load every input, then preprocess them in one native call.

Shared by :func:`kimi_k3_rs.processor.preprocess`, ``KimiK3VisionProcessor.preprocess``
(:mod:`kimi_k3_rs.hf`) and ``KimiK3EncoderInputs.materialize`` (:mod:`kimi_k3_rs.deferred`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _native, errors
from .config import MediaProcConfig
from .decoding import _loaded
from .errors import _DECODE_ERRORS, ImageError
from .inputs import _unwrap_media
from .modes import _pixels
from .options import _from_native, _Options
from .video import _chunk_frames, _is_video_chunk, _rgb_frame


@contextlib.contextmanager
def _naming(index: int) -> Iterator[None]:
    """Put the batch index in front of image errors; a file or bytes object that
    Pillow cannot read or decode becomes an :class:`ImageError`."""
    try:
        yield
    except ImageError as exc:
        raise errors.at_image(index, exc) from exc
    except _DECODE_ERRORS as exc:
        raise errors.at_image(index, errors.unreadable(exc)) from exc


def _run(
    images: Sequence[Any],
    cfg: MediaProcConfig,
    opts: _Options,
    out: np.ndarray | None = None,
    indices: Sequence[int] | None = None,
) -> tuple[np.ndarray, npt.NDArray[np.int64]]:
    """Load every image (and every frame of a ``video_chunk`` item), then preprocess the
    batch in one native call; a chunk's frames are consecutive arrays, one item there.

    ``indices``: the numbers errors give the images (their batch positions by default).
    """
    arrays: list[np.ndarray] = []
    resized: list[tuple[int, int, int, int, int] | None] = []
    names: list[int] = []  # the item index of every array
    chunks: list[tuple[int, int]] = []  # (first array, frames) of every video chunk
    for position, item in enumerate(images):
        index = position if indices is None else indices[position]
        if _is_video_chunk(item):
            with _naming(index):
                frames = _chunk_frames(item, cfg)
            chunks.append((len(arrays), len(frames)))
            for frame in frames:
                with _naming(index), _loaded(frame, opts.exif_transpose, opts.max_image_pixels) as image:
                    arrays.append(_rgb_frame(image))
                resized.append(None)
                names.append(index)
            continue
        with _naming(index), _loaded(_unwrap_media(item), opts.exif_transpose, opts.max_image_pixels) as image:
            array, sizing = _pixels(image, cfg, opts.native)
        arrays.append(array)
        resized.append(sizing)
        names.append(index)
    pixel_values, grid_thws = _native.preprocess(
        arrays, cfg.native, opts.native, resized=resized, out=out, indices=names, chunks=chunks
    )
    return (out if out is not None else _from_native(pixel_values, opts.dtype)), grid_thws
