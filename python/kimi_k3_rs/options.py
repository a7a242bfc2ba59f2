"""Per-call options: validation of ``pillow_compat`` .. ``max_image_pixels``, and ``out=`` / dtypes.

``_Options`` is what every entry point (``preprocess``, ``KimiK3VisionProcessor``,
``prepare_kimi_k3_encoder_inputs``) validates its keyword options into.
"""

from __future__ import annotations

import enum
import numbers
import os
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from PIL import Image

from .config import resolve_pillow_compat
from .errors import ImageError

__all__ = ["DEFAULT_MAX_IMAGE_PIXELS", "NUM_THREADS_ENV"]

#: Default ``max_image_pixels``: the size at which Pillow itself raises
#: ``DecompressionBombError`` (2 x ``PIL.Image.MAX_IMAGE_PIXELS`` at import time).
DEFAULT_MAX_IMAGE_PIXELS: int | None = (
    2 * Image.MAX_IMAGE_PIXELS if Image.MAX_IMAGE_PIXELS is not None else None
)


def _check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


class _Unset(enum.Enum):
    """The type of :data:`_UNSET`, so that ``help()`` shows a readable default."""

    UNSET = "unset"

    def __repr__(self) -> str:
        return "<not given: the processor's own>"


#: Marks an option that was not passed (None is a valid ``max_image_pixels``).
_UNSET: Final = _Unset.UNSET

#: Environment variable read when ``num_threads`` is None.
NUM_THREADS_ENV = "KIMI_K3_RS_NUM_THREADS"
_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class _Options:
    """The per-call options of every entry point, validated."""

    compat: str
    exif_transpose: bool = False
    dtype: str = "float32"
    num_threads: int = 1
    max_image_pixels: int | None = DEFAULT_MAX_IMAGE_PIXELS

    @classmethod
    def make(
        cls,
        pillow_compat: Any = "auto",
        exif_transpose: Any = False,
        dtype: Any = "float32",
        num_threads: Any = None,
        max_image_pixels: Any = DEFAULT_MAX_IMAGE_PIXELS,
    ) -> _Options:
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be 'float32', 'bfloat16' or 'float16', got {dtype!r}")
        if num_threads is None:
            env = os.environ.get(NUM_THREADS_ENV, "").strip()
            if env and not (env.isascii() and env.isdigit() and 1 <= int(env) <= 1024):
                raise ValueError(f"{NUM_THREADS_ENV} must be an integer in 1..1024, got {env!r}")
            num_threads = int(env) if env else 1
        if isinstance(num_threads, bool) or not isinstance(num_threads, numbers.Integral):
            raise TypeError(f"num_threads must be an int or None, got {num_threads!r}")
        if not 1 <= int(num_threads) <= 1024:
            raise ValueError(f"num_threads must be in 1..1024, got {num_threads}")
        num_threads = int(num_threads)
        if max_image_pixels is not None and (
            isinstance(max_image_pixels, bool) or not isinstance(max_image_pixels, int) or max_image_pixels < 1
        ):
            raise ValueError(f"max_image_pixels must be a positive int or None, got {max_image_pixels!r}")
        return cls(
            compat=resolve_pillow_compat(pillow_compat),
            exif_transpose=_check_flag("exif_transpose", exif_transpose),
            dtype=dtype,
            num_threads=num_threads,
            max_image_pixels=max_image_pixels,
        )


def _as_native_out(out: Any, dtype: str) -> np.ndarray:
    """The caller's ``out`` array as the element type the core writes (a view, no copy)."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array, got {type(out).__name__}")
    expected = {"float32": ("float32",), "float16": ("float16",), "bfloat16": ("bfloat16", "uint16")}[dtype]
    if out.dtype.name not in expected:
        raise ImageError(f"out has dtype {out.dtype}, expected {' or '.join(expected)} for dtype={dtype!r}")
    if not out.dtype.isnative:
        raise ImageError(f"out must have the native byte order, got dtype {out.dtype.str!r}")
    if not (out.flags.c_contiguous and out.flags.aligned and out.flags.writeable):
        raise ImageError("out must be a C-contiguous, aligned, writeable array")
    return out if dtype == "float32" else out.view(np.uint16)


def _from_native(values: np.ndarray, dtype: str) -> np.ndarray:
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
