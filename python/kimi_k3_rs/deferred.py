"""sglang's deferred flow: every image's geometry up front, its pixels on demand.

Reproduces sglang's ``kimi_k3_image_processing.py: prepare_kimi_k3_encoder_inputs``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _native, errors
from .batch import _naming, _run
from .config import MediaProcConfig
from .decoding import _header_size
from .errors import _DECODE_ERRORS, ImageError
from .hf import KimiK3VisionProcessor
from .inputs import _as_list, _split_media
from .options import _UNSET, _Options, _Unset
from .sizing import _resize_dict

__all__ = ["KimiK3EncoderInputs", "prepare_kimi_k3_encoder_inputs"]

@dataclass
class KimiK3EncoderInputs:
    """Geometry of a batch, computed without touching pixels; pixels on demand.

    Attributes:
        grid_thws: int64 ``[n, 3]``, ``(1, h_patches, w_patches)`` per image.
        resize_configs: per image, the dict :func:`navit_resize_config` returns.
        num_tokens: per image, the LLM token count.
        original_image_sizes: per image, ``[width, height]`` in pixels (after the EXIF
            transpose when ``exif_transpose`` was set).
        content_hashes: per image, the ``"content_hash"`` of its media dict, unchanged,
            or None (no media dict, or no such key).
    """

    grid_thws: npt.NDArray[np.int64]
    resize_configs: list[dict[str, int]]
    num_tokens: list[int]
    original_image_sizes: list[list[int]]
    content_hashes: list[Any]
    _images: list[Any] = field(repr=False)
    _config: MediaProcConfig = field(repr=False)
    _options: _Options = field(repr=False)

    def materialize(self, indices: Sequence[int] | None = None) -> list[npt.NDArray[np.float32]]:
        """Preprocess the images at ``indices`` (all when None), in that order.

        Returns:
            One float32 ``[h * w, 3, ps, ps]`` array per index, each equal to
            :func:`preprocess` on that image alone.

        Raises:
            IndexError: an index out of range.
            ValueError: ``Kimi-K3 deferred CPU preprocessing produced wrong grids``
                (sglang's check) when an image no longer has the size read up front
                (e.g. a file replaced in between). Otherwise as :func:`preprocess`.
        """
        order = list(range(len(self._images))) if indices is None else list(indices)
        chosen = [self._images[i] for i in order]
        if not chosen:
            return []
        pixel_values, grid_thws = _run(chosen, self._config, self._options, indices=order)
        if not np.array_equal(grid_thws, self.grid_thws[order]):
            raise errors.wrong_grids()
        rows = np.cumsum(grid_thws.prod(axis=1))[:-1]
        return list(np.split(pixel_values, rows))


def prepare_kimi_k3_encoder_inputs(
    images: Any,
    image_processor_or_media_proc_cfg: Any,
    *,
    pillow_compat: str | None = None,
    exif_transpose: bool | None = None,
    dtype: str | None = None,
    num_threads: int | None = None,
    max_image_pixels: int | None | _Unset = _UNSET,
) -> KimiK3EncoderInputs:
    """Compute every image's geometry up front; defer pixel work to ``materialize``.

    Reproduces sglang's ``prepare_kimi_k3_encoder_inputs``
    (``kimi_k3_image_processing.py``): every rank computes grids and token counts;
    only the rank that owns an image materialises its ``pixel_values``. Files are
    opened lazily (header only) to read their size, whatever their size; tensors are
    not copied. With ``exif_transpose`` the orientation is read too.

    Args:
        images: as :func:`preprocess`; media dicts may carry ``"content_hash"``, kept
            per image in :attr:`KimiK3EncoderInputs.content_hashes`.
        image_processor_or_media_proc_cfg: an object with a ``media_proc_cfg`` dict
            attribute (e.g. :class:`KimiK3VisionProcessor`) or the dict itself. Given a
            :class:`KimiK3VisionProcessor`, its validated config and its options are
            used, so ``materialize`` gives exactly what its ``preprocess`` gives.
        pillow_compat, exif_transpose, dtype, num_threads, max_image_pixels: as
            :func:`preprocess`, for ``materialize``; when not given, the processor's
            own (a :class:`KimiK3VisionProcessor`), else :func:`preprocess`'s defaults.
            The sizes follow ``exif_transpose`` (orientations 5..8 swap the sides).

    Returns:
        A :class:`KimiK3EncoderInputs`.

    Raises:
        ValueError: ``Kimi-K3 EPD owner-side preprocessing requires
            image_processor.media_proc_cfg`` when there is no ``media_proc_cfg`` dict;
            the missing-keys message; ``Unsupported Kimi-K3 encoder media item: {item}``;
            ``Unsupported data type: {type}``; dtype / channel messages for arrays and
            tensors; :class:`ImageError` for a file that cannot be read.
        TypeError: ``exif_transpose`` is not a bool.
    """
    processor = image_processor_or_media_proc_cfg
    if isinstance(processor, KimiK3VisionProcessor):
        cfg = processor.config
        base = processor.options
    else:
        media_proc_cfg = processor if isinstance(processor, Mapping) else getattr(processor, "media_proc_cfg", None)
        if not isinstance(media_proc_cfg, Mapping):
            raise errors.no_media_proc_cfg()
        cfg = MediaProcConfig.from_dict(media_proc_cfg)
        flag = getattr(processor, "exif_transpose", False)
        base = _Options.make(exif_transpose=flag if isinstance(flag, bool) else False)
    opts = _Options.make(
        base.compat if pillow_compat is None else pillow_compat,
        base.exif_transpose if exif_transpose is None else exif_transpose,
        base.dtype if dtype is None else dtype,
        base.num_threads if num_threads is None else num_threads,
        base.max_image_pixels if max_image_pixels is _UNSET else max_image_pixels,
    )
    split = [_split_media(item) for item in _as_list(images)]
    items = [image for image, _ in split]
    try:
        sizes = [_header_size(item, opts.exif_transpose) for item in items]  # reads headers only
    except (ImageError, *_DECODE_ERRORS):
        for index, item in enumerate(items):  # again, to name the image that fails
            with _naming(index):
                _header_size(item, opts.exif_transpose)
        raise
    tuples, grid = _native.navit_resize_configs(sizes, cfg.native)
    configs = [_resize_dict(t) for t in tuples]
    return KimiK3EncoderInputs(
        grid_thws=grid,
        resize_configs=configs,
        num_tokens=[r["num_tokens"] for r in configs],
        original_image_sizes=[[w, h] for w, h in sizes],
        content_hashes=[content_hash for _, content_hash in split],
        _images=items,
        _config=cfg,
        _options=opts,
    )
