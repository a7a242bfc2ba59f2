"""kimi_k3_rs: bit-exact, fast Kimi-K3 / Kimi-K2.5 image preprocessing.

Drop-in for the checkpoint processors' image path (``kimi_k3_vision_processing.py``,
``kimi_k25_vision_processing.py``): the same ``pixel_values`` float32 bits and
``grid_thws``, computed in Rust with the GIL released.

``KIMI_K3_MEDIA_PROC_CFG`` and ``KIMI_K25_MEDIA_PROC_CFG`` are the published
``media_proc_cfg`` dicts; every access returns a fresh copy, so mutating one
never changes what the library or later readers get.

``KimiK3VisionProcessor`` is resolved on first access (PEP 562), so that importing the
package never imports transformers: a ``transformers`` ``BaseImageProcessor`` subclass
when transformers can be imported, else the plain class of :mod:`kimi_k3_rs.hf`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._native import __version__, build_profile, simd_path
from .config import (
    MediaProcConfig,
    TransparentBgConfig,
    VideoConfig,
    kimi_k3_media_proc_cfg,
    kimi_k25_media_proc_cfg,
    load_media_proc_cfg,
    resolve_pillow_compat,
)
from .deferred import (
    KimiK3EncoderInputs,
    KimiK25EncoderInputs,
    prepare_kimi_k3_encoder_inputs,
    prepare_kimi_k25_encoder_inputs,
)
from .errors import ConfigError, ImageError, ImageTooLargeError, KimiK3Error

if TYPE_CHECKING:  # resolved at run time by __getattr__ (no transformers import here)
    from .hf import KimiK3VisionProcessor
from ._input import DECODE_ENV, decode_path, enable_pillow_zero_copy
from .options import (
    DEFAULT_MAX_DECODED_BYTES,
    DEFAULT_MAX_IMAGE_PIXELS,
    NUM_THREADS_ENV,
    VISION_FORMATS,
)
from .processor import preprocess
from .sizing import count_image_tokens, navit_resize_config
from .video import (
    VideoChunkPlan,
    count_video_chunk_tokens,
    split_video_frames,
    split_video_plan,
    timestamp_as_str,
)

__all__ = [
    "DECODE_ENV",
    "DEFAULT_MAX_DECODED_BYTES",
    "DEFAULT_MAX_IMAGE_PIXELS",
    "KIMI_K3_MEDIA_PROC_CFG",
    "KIMI_K25_MEDIA_PROC_CFG",
    "NUM_THREADS_ENV",
    "VISION_FORMATS",
    "ConfigError",
    "ImageError",
    "ImageTooLargeError",
    "KimiK3EncoderInputs",
    "KimiK3Error",
    "KimiK3VisionProcessor",
    "KimiK25EncoderInputs",
    "MediaProcConfig",
    "TransparentBgConfig",
    "VideoChunkPlan",
    "VideoConfig",
    "__version__",
    "build_profile",
    "count_image_tokens",
    "count_video_chunk_tokens",
    "decode_path",
    "enable_pillow_zero_copy",
    "kimi_k3_media_proc_cfg",
    "kimi_k25_media_proc_cfg",
    "load_media_proc_cfg",
    "navit_resize_config",
    "prepare_kimi_k3_encoder_inputs",
    "prepare_kimi_k25_encoder_inputs",
    "preprocess",
    "resolve_pillow_compat",
    "simd_path",
    "split_video_frames",
    "split_video_plan",
    "timestamp_as_str",
]

_PRESETS = {
    "KIMI_K3_MEDIA_PROC_CFG": kimi_k3_media_proc_cfg,
    "KIMI_K25_MEDIA_PROC_CFG": kimi_k25_media_proc_cfg,
}


def __getattr__(name: str) -> Any:
    """Serve the preset dicts as fresh copies, ``KimiK3VisionProcessor`` and the
    :mod:`kimi_k3_rs.hf` package (PEP 562).

    ``KimiK3VisionProcessor`` is looked up once (:func:`kimi_k3_rs.hf.public.public_class`,
    which imports transformers when it is installed), then kept as a module global.
    ``kimi_k3_rs.hf`` is imported on first access (importing it sets it as an attribute),
    so that ``import kimi_k3_rs`` imports none of it.
    """
    if name in _PRESETS:
        return _PRESETS[name]()
    if name == "hf":
        import importlib

        return importlib.import_module(".hf", __name__)
    if name == "KimiK3VisionProcessor":
        from .hf.public import public_class

        cls = public_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module 'kimi_k3_rs' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names, those served by ``__getattr__`` included."""
    return sorted(set(globals()) | set(_PRESETS) | {"KimiK3VisionProcessor", "hf"})
