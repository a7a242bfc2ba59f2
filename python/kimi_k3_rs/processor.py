"""The ``preprocess`` entry point, and the package's former one-module API re-exported.

``preprocess`` reproduces ``kimi_k3_vision_processing.py: KimiK3VisionProcessor.preprocess``
(and ``kimi_k25_vision_processing.py: KimiK25VisionProcessor.preprocess``). The rest of
the API lives in its own modules and is re-exported here, so ``from
kimi_k3_rs.processor import X`` keeps working for every name of ``__all__``: sizing
(:mod:`kimi_k3_rs.sizing`), the HF processor (:mod:`kimi_k3_rs.hf`), sglang's deferred
flow (:mod:`kimi_k3_rs.deferred`), options (:mod:`kimi_k3_rs.options`) and errors
(:mod:`kimi_k3_rs.errors`). The pixel work runs in Rust with the GIL released.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _native  # noqa: F401  (kept as ``processor._native``: callers patch the core through it)
from ._input import run_batch
from .config import MediaProcConfig, call_setup
from .deferred import KimiK3EncoderInputs, prepare_kimi_k3_encoder_inputs
from .errors import ImageTooLargeError

if TYPE_CHECKING:  # resolved at run time by __getattr__ (kimi_k3_rs.hf imported on first use)
    from .hf import PREPROCESSOR_CONFIG_NAME, KimiK3VisionProcessor
from .options import (
    DEFAULT_MAX_DECODED_BYTES,
    DEFAULT_MAX_IMAGE_PIXELS,
    NUM_THREADS_ENV,
)
from .sizing import count_image_tokens, navit_resize_config

__all__ = [
    "DEFAULT_MAX_DECODED_BYTES",
    "DEFAULT_MAX_IMAGE_PIXELS",
    "NUM_THREADS_ENV",
    "PREPROCESSOR_CONFIG_NAME",
    "ImageTooLargeError",
    "KimiK3EncoderInputs",
    "KimiK3VisionProcessor",
    "count_image_tokens",
    "navit_resize_config",
    "prepare_kimi_k3_encoder_inputs",
    "preprocess",
]


def preprocess(
    images: Any,
    media_proc_cfg: Mapping[str, Any] | MediaProcConfig,
    *,
    pillow_compat: str = "auto",
    exif_transpose: bool = False,
    dtype: str = "float32",
    num_threads: int | None = None,
    out: np.ndarray | None = None,
    max_image_pixels: int | None = DEFAULT_MAX_IMAGE_PIXELS,
    max_decoded_bytes: int | None = DEFAULT_MAX_DECODED_BYTES,
    allowed_formats: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """Preprocess images exactly as the Kimi-K3 / K2.5 checkpoint processor does.

    Reproduces ``KimiK3VisionProcessor.preprocess`` (``kimi_k3_vision_processing.py``):
    NaViT sizing, Pillow BICUBIC resize, background compositing when
    ``transparent_bg_config`` is set (before or after the resize), zero padding to a
    multiple of ``patch_size * merge_kernel_size``, normalisation and patchify —
    the same float32 bits (``media_utils.py: navit_resize_image``, Pillow
    ``libImaging/Resample.c``, ``kimi_k3_vision_processing.py: fill_transparent_bg_with``).

    Args:
        images: one image or a list / tuple of images, in any mix of the types below.

            * ``PIL.Image.Image`` in any mode, opened lazily or not. ``L``, ``LA``,
              ``RGB`` and ``RGBA`` go to Rust as they are. Other modes take the
              reference's mode steps: under ``before_resize``, Pillow's ``convert``
              to RGB (RGBA when a background composites it); under ``after_resize``,
              the resize in the image's own mode, then that ``convert``. That resize
              runs in Rust for the 8-bit modes CMYK, RGBX, YCbCr, HSV, LAB, RGBa, La,
              PA and L with ``transparency``; Pillow does it for ``P`` and ``1``
              (NEAREST) and for ``I;16*``, ``I`` and ``F`` (16/32-bit resample; see
              Raises). A mode Pillow cannot convert to RGB (``La``) fails as in the
              reference.
            * numpy ``uint8`` array ``HxW``, ``HxWx1``, ``HxWx2``, ``HxWx3``, ``HxWx4``
              (read as L, L, LA, RGB, RGBA; always HWC; a numpy array is always one
              image). C-contiguous arrays, read-only ones included, are read in
              place, and so is ``a[..., :3]`` of a C-contiguous ``HxWx4`` array ``a``
              (RGBX / RGBA pixels); any other array is copied once
              (``np.ascontiguousarray``).
            * torch ``uint8`` tensor (torch is never imported by this package), read
              as sglang's staging helpers do: 2-D is ``HW``; 3-D with a first
              dimension of 1, 3 or 4 is ``CHW``, any other 3-D is ``HWC``. ``CHW`` and
              GPU tensors are copied once to a host ``HWC`` array.
            * ``bytes`` / ``bytearray`` / ``memoryview`` of an encoded file, a file
              path (``str`` / ``os.PathLike``) or a ``data:`` URL (base64), decoded as
              the checkpoint's Pillow decodes it: first frame of animations, mode kept
              (palette, ``transparency``, CMYK, 16-bit grey), no EXIF rotation. 8-bit
              L / LA / RGB / RGBA PNGs and L / RGB JPEGs are decoded by the core, with
              the GIL released and in parallel, with Pillow's bytes
              (:func:`kimi_k3_rs.decode_path` says which decoder runs); the rest by
              Pillow, on ``num_threads`` threads.
            * a media dict ``{"type": "image", "image": ...}`` around any of these
              (an optional ``"content_hash"`` is ignored here; see
              :func:`prepare_kimi_k3_encoder_inputs`).
            * a Kimi-K2.5 video chunk ``{"type": "video_chunk", "video_chunk": [frames...],
              "prompt": ...}`` (``kimi_k25_vision_processing.py: KimiK25VisionProcessor.preprocess``;
              build them with :func:`kimi_k3_rs.video.split_video_frames`), only with a
              config that has the six video keys (K2.5; K3 refuses it as sglang does).
              Frames are PIL images, uint8 arrays, bytes, paths or data URLs, each taken
              to RGB (``convert("RGB")``, alpha dropped, no background); the chunk is
              sized once from frame 0 and its frame count
              (:func:`kimi_k3_rs.video.count_video_chunk_tokens`) and every frame is
              resized to that size, whatever its own; its grid is ``[t, h, w]``, its
              patches frame-major.
        media_proc_cfg: the checkpoint's ``media_proc_cfg`` dict (or a
            :class:`MediaProcConfig`), e.g. ``kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG``.
        pillow_compat: ``"auto"`` (the installed Pillow), ``"12"`` (Pillow 12.1 and earlier:
            horizontal pass first), ``"12.2"`` (Pillow 12.2 - 12.3: vertical first for
            images over 100:1 tall) or ``"13"`` (Pillow 13: vertical first for tall
            down-scales); see :func:`kimi_k3_rs.resolve_pillow_compat`.
        exif_transpose: ``True`` applies ``PIL.ImageOps.exif_transpose`` to every PIL
            and decoded image (orientations 2..8) before anything else. Off by default:
            the checkpoint does not rotate. Arrays and tensors are never rotated.
        dtype: ``"float32"`` (default, the reference's values), ``"bfloat16"`` or
            ``"float16"`` (each value rounded to nearest-even from the exact float32
            one). bfloat16 comes back as ``ml_dtypes.bfloat16`` when ml_dtypes is
            installed, else as the ``uint16`` bit patterns.
        num_threads: threads for this call: images of the batch and bands of each
            image run in parallel on the package's own pool. None (default) reads the
            environment variable ``KIMI_K3_RS_NUM_THREADS``, else 1: a server already
            runs requests in parallel, so one call uses one core unless asked.
        out: an array to write ``pixel_values`` into instead of allocating one (for
            callers that pool memory): shape ``[N, 3, ps, ps]``, C-contiguous,
            writeable, dtype float32 / float16 / (uint16 or ml_dtypes.bfloat16) per
            ``dtype``. It is returned as ``pixel_values``.
        max_image_pixels: refuse encoded inputs (bytes, files, data URLs) whose header
            claims more pixels, before decoding (default: 2 x
            ``PIL.Image.MAX_IMAGE_PIXELS`` = 178,956,970, where Pillow itself refuses);
            None turns the check off. Arrays, tensors and PIL images are not limited.
        max_decoded_bytes: refuse encoded inputs whose header size decodes to more
            bytes (width x height x Pillow's bytes per pixel, first frame, times the
            copies its decoder holds: 4 for WebP, 5 for JPEG 2000, 2 for AVIF, 3 for
            Pillow's decoders written in Python), before decoding, on the native and
            the Pillow path alike (default 1 GiB); and, within it, inputs that decode
            to more than their file's size allows, with 16 bytes of resize filter taps
            per pixel of width and height and 128 of working rows per pixel of width:
            192 MiB, or 2,048 bytes per byte of the file where that is more (photos
            decode to 10 to 100 times their size; decompression bombs to thousands).
            None turns both checks off.
        allowed_formats: the Pillow format names (``"JPEG"``, ``"PNG"``, ...) encoded
            inputs may have, checked on their magic bytes before any decoder runs
            (native or Pillow), and on the format Pillow opens them as; None (the
            default, as the checkpoint) allows every format Pillow reads. Public
            endpoints should pass :data:`VISION_FORMATS`.

    Returns:
        ``{"pixel_values": [N, 3, patch_size, patch_size] of ``dtype``,
        "grid_thws": int64 [n_images, 3]}``; ``N`` is the sum of ``t * h * w`` over the
        grids (``t`` is 1 for an image), patches in item order, row-major over each grid. An empty list gives
        zero-row arrays.

    Raises:
        ValueError: ``Kimi-K3 image processor is missing deferred-preprocessing
            config: ...``; ``Unsupported data type: {type}``; ``Kimi-K3 preprocessing
            expects raw uint8 pixels, got {dtype}`` (arrays and tensors);
            ``Unsupported Kimi-K3 image channel count: {channels}``; ``Unsupported
            Kimi-K3 encoder media item: {item}`` (a ``video_chunk`` item included, for a
            config without the video keys); :class:`ConfigError` /
            :class:`ImageError` (``ValueError`` subclasses) for bad config values or
            image shapes, for a mode Pillow cannot convert to RGB, and for an ``I;16*``
            / ``I`` / ``F`` image under ``after_resize`` when ``pillow_compat`` is not
            the installed Pillow's and the pass order changes its bytes; the
            side-limit text as :class:`KimiK3Error`.
        ImageTooLargeError: (an :class:`ImageError`) an encoded image over
            ``max_image_pixels`` or ``max_decoded_bytes``, or decoding to more than
            its file's size allows; a JPEG over its cost bounds (a progressive one of
            more than 500 scans, more 8x8 blocks than 8 per byte of the file, more
            block passes in its scans than 2**23 or 64 per byte of the file).
        ImageError: a file or bytes object that cannot be read or decoded (missing,
            truncated, not an image, a format not in ``allowed_formats``), naming its
            batch index; a wrong ``out``;
            ``image {index}: video_chunk has no frames`` for an empty chunk.
        TypeError: ``media_proc_cfg`` is not a mapping; an unknown key inside
            ``transparent_bg_config``; ``exif_transpose`` is not a bool; ``out`` is not
            an array; ``num_threads`` is not an int; ``allowed_formats`` is not a list
            of str.
        MemoryError: naming the batch index, when an image's decode runs out of memory.

    Note:
        The pixel work runs with the GIL released, so threads preprocess in parallel.
        Input arrays are read in place: mutating one from another thread during the
        call gives unspecified (but memory-safe) output for that image. No Pillow
        warning is raised for palette images with a bytes ``transparency``.

    Examples:
        >>> import numpy as np, kimi_k3_rs
        >>> out = kimi_k3_rs.preprocess(np.zeros((224, 224, 3), np.uint8),
        ...                             kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)
        >>> out["pixel_values"].shape, out["grid_thws"].tolist()
        ((256, 3, 14, 14), [[1, 16, 16]])
    """
    cfg, opts = call_setup(
        media_proc_cfg,
        pillow_compat,
        exif_transpose,
        dtype,
        num_threads,
        max_image_pixels,
        max_decoded_bytes,
        allowed_formats,
    )
    pixel_values, grid_thws = run_batch(images, cfg, opts, out)
    return {"pixel_values": pixel_values, "grid_thws": grid_thws}


def __getattr__(name: str) -> Any:
    """``KimiK3VisionProcessor``: the class ``kimi_k3_rs.KimiK3VisionProcessor`` is (the
    transformers subclass when transformers imports), looked up on first access; and
    ``PREPROCESSOR_CONFIG_NAME`` (:mod:`kimi_k3_rs.hf`'s), so that importing this module
    imports none of :mod:`kimi_k3_rs.hf`."""
    if name == "KimiK3VisionProcessor":
        from .hf.public import public_class

        return public_class()
    if name == "PREPROCESSOR_CONFIG_NAME":
        from .hf import PREPROCESSOR_CONFIG_NAME

        return PREPROCESSOR_CONFIG_NAME
    raise AttributeError(f"module 'kimi_k3_rs.processor' has no attribute {name!r}")
