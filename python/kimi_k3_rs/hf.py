"""The Hugging Face processor: ``KimiK3VisionProcessor``, a drop-in for the checkpoint's.

Reproduces ``kimi_k3_vision_processing.py: KimiK3VisionProcessor`` (and K2.5's
``kimi_k25_vision_processing.py: KimiK25VisionProcessor``) where servers touch it:
``media_proc_cfg``, ``preprocess(medias, return_tensors)``, ``from_pretrained`` /
``save_pretrained``.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import errors
from .batch import _run
from .config import MediaProcConfig, load_media_proc_cfg
from .inputs import _as_list
from .options import _UNSET, DEFAULT_MAX_IMAGE_PIXELS, _Options

__all__ = ["PREPROCESSOR_CONFIG_NAME", "KimiK3VisionProcessor"]


def _to_tensors(out: dict[str, np.ndarray], return_tensors: str | None) -> dict[str, Any]:
    if return_tensors in (None, "np"):
        return out
    if return_tensors == "pt":
        try:
            import torch
        except ImportError as exc:
            raise errors.no_torch() from exc
        tensors = {}
        for key, value in out.items():
            if value.dtype.name in ("bfloat16", "uint16") and key == "pixel_values":
                tensors[key] = torch.from_numpy(value.view(np.uint16)).view(torch.bfloat16)
            else:
                tensors[key] = torch.from_numpy(value)
        return tensors
    raise errors.bad_return_tensors(return_tensors)


#: File name of a checkpoint's image-processor config (read by ``from_pretrained``,
#: written by ``save_pretrained``).
PREPROCESSOR_CONFIG_NAME = "preprocessor_config.json"


#: transformers' ``BatchFeature`` class, None when transformers cannot be imported, or
#: ``_UNSET`` until the first :meth:`KimiK3VisionProcessor.preprocess` call looks.
_BATCH_FEATURE: Any = _UNSET


def _batch_feature(data: dict[str, Any]) -> Mapping[str, Any]:
    """``transformers.BatchFeature(data)`` when transformers can be imported, else ``data``.

    The checkpoint's processor returns a ``BatchFeature``; serving code that checks
    for it (or calls ``.to(device)`` on it) gets one. The values are wrapped as they
    are (no ``tensor_type`` conversion, so no copy). The import is tried once per
    process, on the first call (a failed import costs ~0.15 ms, too much to repeat per
    call); an install that fails to import counts as absent.
    """
    global _BATCH_FEATURE
    if _BATCH_FEATURE is _UNSET:
        try:
            from transformers.feature_extraction_utils import BatchFeature
        except Exception:  # noqa: BLE001 (not installed (ImportError), or broken: plain dicts)
            BatchFeature = None
        _BATCH_FEATURE = BatchFeature
    if _BATCH_FEATURE is None:
        return data
    batch: Mapping[str, Any] = _BATCH_FEATURE(data=data)
    return batch


def _jsonable(value: Any) -> Any:
    """A copy of a config value with numpy arrays / scalars and tuples as JSON types."""
    if isinstance(value, Mapping):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    return copy.deepcopy(value)


class KimiK3VisionProcessor:
    """Drop-in for the checkpoint's ``KimiK3VisionProcessor`` (and K2.5's) image path.

    Reproduces ``kimi_k3_vision_processing.KimiK3VisionProcessor`` where servers touch
    it: the ``media_proc_cfg`` attribute and ``preprocess(medias, return_tensors)``.

    The config is validated once, here; ``media_proc_cfg`` returns a fresh copy of it
    on every access, so mutating that copy never changes what the processor does.

    Args:
        media_proc_cfg: the checkpoint's ``media_proc_cfg`` dict; validated here.
        pillow_compat: ``"auto"``, ``"12"`` or ``"13"`` (see :func:`preprocess`).
        exif_transpose: apply EXIF orientation to PIL and decoded images (default
            False, as the checkpoint; see :func:`preprocess`).
        dtype, num_threads, max_image_pixels: as :func:`preprocess`, for every call.

    Raises:
        ValueError / TypeError: as :meth:`MediaProcConfig.from_dict` and the options
            of :func:`preprocess`.
    """

    def __init__(
        self,
        media_proc_cfg: Mapping[str, Any],
        *,
        pillow_compat: str = "auto",
        exif_transpose: bool = False,
        dtype: str = "float32",
        num_threads: int | None = None,
        max_image_pixels: int | None = DEFAULT_MAX_IMAGE_PIXELS,
    ) -> None:
        self.config = MediaProcConfig.from_dict(media_proc_cfg)
        self._media_proc_cfg: dict[str, Any] = copy.deepcopy(dict(media_proc_cfg))
        self.options = _Options.make(pillow_compat, exif_transpose, dtype, num_threads, max_image_pixels)

    @property
    def media_proc_cfg(self) -> dict[str, Any]:
        """A copy of the ``media_proc_cfg`` dict the processor was built with."""
        return copy.deepcopy(self._media_proc_cfg)

    @property
    def pillow_compat(self) -> str:
        """The resolved pass order, ``"12"`` or ``"13"``."""
        return self.options.compat

    @property
    def exif_transpose(self) -> bool:
        """Whether EXIF orientation is applied."""
        return self.options.exif_transpose

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        **options: Any,
    ) -> KimiK3VisionProcessor:
        """Load ``preprocessor_config.json`` (a file, or a checkpoint folder holding it).

        Only its nested ``media_proc_cfg`` is read; top-level keys beside it are ignored.
        ``options`` are the keyword options of the constructor.

        Raises:
            FileNotFoundError: no such file.
            ConfigError: the file has no ``media_proc_cfg`` object; bad values.
        """
        return cls(load_media_proc_cfg(path), **options)

    def to_dict(self) -> dict[str, Any]:
        """The ``preprocessor_config.json`` content of this processor.

        The checkpoint's layout, ``{"media_proc_cfg": {...}}``, with the
        ``media_proc_cfg`` the processor was built with (unknown keys such as the video
        keys and ``config_type`` included), as JSON types: tuples and numpy arrays become
        lists, numpy scalars Python numbers. The per-call options (``pillow_compat``,
        ``exif_transpose``, ``dtype``, ``num_threads``, ``max_image_pixels``) are this
        library's runtime choices, not part of the checkpoint's config: they are not
        included; pass them again to :meth:`from_pretrained`.

        Returns:
            A new dict; mutating it changes nothing in the processor.

        Example:
            >>> import kimi_k3_rs
            >>> proc = kimi_k3_rs.KimiK3VisionProcessor(kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
            >>> proc.to_dict()["media_proc_cfg"]["in_patch_limit"]
            65536
        """
        return {"media_proc_cfg": _jsonable(self._media_proc_cfg)}

    def save_pretrained(self, save_directory: str | os.PathLike[str]) -> list[str]:
        """Write ``preprocessor_config.json`` (:meth:`to_dict`) into a folder.

        ``KimiK3VisionProcessor.from_pretrained(save_directory)`` then builds a
        processor with the same ``media_proc_cfg`` (and so the same outputs, given the
        same options). The file is written to a temporary name and renamed, so a reader
        never sees half a file; an existing ``preprocessor_config.json`` is replaced.

        Args:
            save_directory: the folder; created (with its parents) if missing.

        Returns:
            ``[path]``: the file written (as transformers' ``save_pretrained`` returns
            the files it wrote).

        Raises:
            OSError: the folder cannot be created (e.g. ``save_directory`` is a file) or
                the file cannot be written.
            TypeError: a value of an unknown ``media_proc_cfg`` key cannot be written
                as JSON.
        """
        folder = os.fspath(save_directory)
        os.makedirs(folder, exist_ok=True)
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"
        path = os.path.join(folder, PREPROCESSOR_CONFIG_NAME)
        # a fresh name beside the target (same file system), opened like any new file
        # (permissions from the umask, unlike mkstemp's 0600)
        tmp = os.path.join(folder, f".{PREPROCESSOR_CONFIG_NAME}.{os.getpid()}.{secrets.token_hex(8)}.tmp")
        try:
            with open(tmp, "x", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return [path]

    def preprocess(self, medias: Sequence[Any], return_tensors: str | None = None) -> Mapping[str, Any]:
        """Preprocess media dicts or bare images, as the checkpoint processor's ``preprocess``.

        Args:
            medias: one image / media dict, or a list / tuple of
                ``{"type": "image", "image": ...}`` dicts or bare images, in any mix
                (see :func:`preprocess` for the accepted image types).
            return_tensors: ``None`` / ``"np"`` for numpy arrays, ``"pt"`` for torch
                tensors (sharing the arrays' memory, no copy; needs torch).

        Returns:
            A transformers ``BatchFeature`` when transformers can be imported (what the
            checkpoint's processor returns), else a plain ``dict``; the same keys and
            values either way: ``"pixel_values"`` (``[N, 3, ps, ps]`` of the
            processor's ``dtype``, float32 by default) and ``"grid_thws"`` (int64
            ``[n, 3]``). An empty list gives an empty mapping, as the reference's
            ``BatchFeature({})``.

        Raises:
            ValueError: ``return_tensors`` is not None, ``"np"`` or ``"pt"``; and as
                :func:`preprocess`: :class:`ImageError` for an input that cannot be read
                or decoded (naming its batch index), :class:`ImageTooLargeError` for an
                encoded input over ``max_image_pixels``, sglang's messages for
                unsupported inputs.
            TypeError: as :func:`preprocess`.
            ImportError: ``return_tensors="pt"`` without torch.
        """
        medias = _as_list(medias)
        if not medias:
            return _batch_feature({})
        pixel_values, grid_thws = _run(medias, self.config, self.options)
        return _batch_feature(
            _to_tensors({"pixel_values": pixel_values, "grid_thws": grid_thws}, return_tensors)
        )

    __call__ = preprocess
