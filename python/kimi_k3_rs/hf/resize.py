"""The checkpoint's ``resize_image`` steps: Pillow's resize, the background, the padding.

``media_utils.py: resize_image`` and ``image_to_np``, as
:meth:`kimi_k3_rs.hf.KimiK3VisionProcessor.resize_image` runs them (:func:`resize_and_pad`);
the 8-bit resample and the compositing run in the Rust core.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from .. import _native, errors
from .._input import resize_in_mode, resize_order_check
from ..config import MediaProcConfig
from ..options import CallOptions


def _resize_like_pillow(image: Image.Image, size: tuple[int, int], options: _native.Options) -> Image.Image:
    """``image.resize(size, BICUBIC)`` as Pillow does it (``PIL/Image.py: Image.resize``),
    the 8-bit resample in the Rust core.

    * Same size: a copy (Pillow resamples nothing).
    * A down-scale: ``RGB``: the core; ``RGBA`` / ``LA``: Pillow's premultiplication
      (``convert("RGBa")`` / ``"La"``), the core, and back, as ``Image.resize`` does;
      other modes as the pipeline resizes them (:func:`kimi_k3_rs._input.pil.resize_in_mode`:
      ``P`` / ``1`` NEAREST by Pillow, 8-bit modes in the core, 16/32-bit ones by Pillow).
    * Anything else (an up-scale on a side, a zero side): Pillow itself (the core only
      down-scales), whose errors propagate.

    ``info`` (``transparency`` included) is carried over, as Pillow's resize does.
    """
    width, height = image.size
    new_width, new_height = size
    if size == image.size:
        return image.copy()
    if not (0 < new_width <= width and 0 < new_height <= height):
        resize_order_check(image.mode, image.size, size, options.pillow_compat)
        return image.resize(size, Image.Resampling.BICUBIC)
    mode = image.mode
    if mode == "RGB":
        out = Image.fromarray(_native.resize_bicubic(np.asarray(image), new_width, new_height, options))  # HxWx3: RGB
    elif mode in ("RGBA", "LA"):
        premultiplied = {"RGBA": "RGBa", "LA": "La"}[mode]
        resized = resize_in_mode(image.convert(premultiplied), size, options)
        out = resized.convert(mode)
    else:
        return resize_in_mode(image, size, options)
    out.info = image.info.copy()
    return out


def _fill_background(image: Image.Image, cfg: MediaProcConfig) -> np.ndarray:
    """``media_utils.py: fill_transparent_bg_with(image, bg)`` as a uint8 array.

    No background: ``convert("RGB")``; an ``RGB`` image as it is; an image with an ``A``
    band or a ``transparency`` entry: ``convert("RGBA")``, then composited by the core
    (:func:`kimi_k3_rs._native.composite`, the checkpoint's float32 arithmetic); any
    other image ``convert("RGB")``.
    """
    if cfg.transparent_bg_config is None:
        return np.asarray(image.convert("RGB"))
    if image.mode == "RGB":
        return np.asarray(image)
    if "A" not in image.getbands() and "transparency" not in image.info:
        return np.asarray(image.convert("RGB"))
    return _native.composite(np.asarray(image.convert("RGBA")), cfg.native)


def resize_and_pad(
    image: Image.Image,
    new_width: int,
    new_height: int,
    pad_width: int,
    pad_height: int,
    cfg: MediaProcConfig,
    options: CallOptions,
) -> np.ndarray:
    """The checkpoint's ``resize_image(image, new_width, new_height, pad_width, pad_height)``.

    :func:`_resize_like_pillow` to ``(new_width, new_height)``; then, when
    ``transparent_bg_fill_stage`` is ``"after_resize"``, :func:`_fill_background`; then
    ``np.asarray`` and ``np.pad(((0, pad_height), (0, pad_width), (0, 0)))`` with zeros.
    See :meth:`kimi_k3_rs.hf.KimiK3VisionProcessor.resize_image` for the result and errors.
    """
    if not isinstance(image, Image.Image):
        raise errors.not_a_pil_image()
    resized = _resize_like_pillow(image, (new_width, new_height), options.native)
    if cfg.transparent_bg_fill_stage == "after_resize":
        array = _fill_background(resized, cfg)
    else:
        array = np.asarray(resized)
    return np.pad(array, ((0, pad_height), (0, pad_width), (0, 0)), mode="constant", constant_values=0)
