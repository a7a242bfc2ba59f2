"""Pure Pillow + NumPy transcription of the Kimi-K2.5 / Kimi-K3 checkpoint image
preprocessor (``docs/reference-spec.md`` sections 1-5).

This module is the ground truth of the test suite.  It never imports
``kimi_k3_rs``.  Every step is written the way the Hugging Face remote code
(``media_utils.py``, ``kimi_k25_vision_processing.py``,
``kimi_k3_vision_processing.py``) writes it, so that the bytes it produces are
the checkpoint's bytes *for the installed Pillow*, whose resize pass order is the
``pillow_compat`` value :data:`PILLOW_COMPAT` (Pillow 12.0 - 12.1: ``"12"``,
12.2 - 12.3: ``"12.2"``, 13: ``"13"``; :func:`vertical_first`).

It must keep working under numpy 1.26 and Pillow 12.3.0 as well, because
``tests/fingerprints/make_fingerprints.py`` runs it there.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import math
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import PIL
from PIL import Image

__all__ = [
    "COMPATS",
    "PILLOW_COMPAT",
    "TransparentBgConfig",
    "navit_resize_image",
    "fill_transparent_bg_with",
    "to_pil",
    "resize_and_composite",
    "normalize",
    "navit_patchify",
    "reference_preprocess_one",
    "reference_preprocess",
    "vertical_first",
]


#: every ``pillow_compat`` value, one per pass-order rule (:func:`vertical_first`).
COMPATS: Tuple[str, ...] = ("12", "12.2", "13")


def _pillow_compat(version: str) -> str:
    """The ``pillow_compat`` value of Pillow ``version`` (its major.minor)."""
    major, minor = (int(part) for part in version.split(".")[:2])
    if major >= 13:
        return "13"
    return "12.2" if (major, minor) >= (12, 2) else "12"


#: the ``pillow_compat`` value whose bytes this reference produces (the
#: installed Pillow's pass order, spec section 5.1).
PILLOW_COMPAT: str = _pillow_compat(PIL.__version__)


# ---------------------------------------------------------------------------
# Section 2: sizing (verbatim HF expression, Python float semantics)
# ---------------------------------------------------------------------------


def navit_resize_image(
    width: int,
    height: int,
    patch_size: int,
    merge_kernel_size: int,
    in_patch_limit: int,
    patch_limit_on_one_side: int,
    fixed_output_tokens: Optional[Any],
) -> Dict[str, int]:
    """``media_utils.navit_resize_image`` (image part), transcribed verbatim.

    Raises ``AssertionError`` with the reference text when a token side exceeds
    ``patch_limit_on_one_side`` (only reachable with an odd limit).
    """
    s1 = math.sqrt(
        in_patch_limit
        / (max(1.0, width // patch_size) * max(1.0, height // patch_size))
    )
    s2 = patch_limit_on_one_side * patch_size / width
    s3 = patch_limit_on_one_side * patch_size / height
    scale = min(1.0, s1, s2, s3)
    new_w, new_h = max(1, int(width * scale)), max(1, int(height * scale))
    new_w = min(new_w, patch_limit_on_one_side * patch_size)
    new_h = min(new_h, patch_limit_on_one_side * patch_size)

    factor = merge_kernel_size * patch_size
    pad_height = (factor - new_h % factor) % factor
    pad_width = (factor - new_w % factor) % factor

    if fixed_output_tokens is not None:
        num_tokens = int(fixed_output_tokens)
    else:
        token_height = (new_h + pad_height) // factor
        token_width = (new_w + pad_width) // factor
        assert token_height * merge_kernel_size <= patch_limit_on_one_side, (
            f"token_height {token_height} * merge_kernel_size {merge_kernel_size} "
            f"> patch_limit_on_one_side {patch_limit_on_one_side}"
        )
        assert token_width * merge_kernel_size <= patch_limit_on_one_side, (
            f"token_width {token_width} * merge_kernel_size {merge_kernel_size} "
            f"> patch_limit_on_one_side {patch_limit_on_one_side}"
        )
        num_tokens = token_height * token_width
    return {
        "num_tokens": num_tokens,
        "new_width": new_w,
        "new_height": new_h,
        "pad_width": pad_width,
        "pad_height": pad_height,
    }


def vertical_first(compat: str, width: int, height: int, new_w: int, new_h: int) -> bool:
    """Does the Pillow of ``pillow_compat`` value ``compat`` run the vertical pass first
    for ``Image.resize((new_w, new_h), BICUBIC)`` of a ``width`` x ``height`` image?

    * ``"12"`` (Pillow 12.0 - 12.1): never, ``ImagingResampleInner`` runs the
      horizontal pass first.
    * ``"12.2"`` (Pillow 12.2.0 - 12.3.0, ``PIL/Image.py: Image.resize``, python-pillow
      PR 9524): an image more than 100 times as tall as wide, losing height, is
      resized in two calls, ``(width, new_h)`` then ``(new_w, new_h)``.
    * ``"13"`` (Pillow 13.0.0, ``ImagingResampleInner``, PR 9549, which also removed
      the Python rule): when ``H - new_h > 0`` and ``H - new_h > 2 * (W - new_w)``.
    """
    if compat == "12":
        return False
    if compat == "12.2":
        return height > width * 100 and new_h < height
    if compat == "13":
        dh = height - new_h
        return dh > 0 and dh > 2 * (width - new_w)
    raise ValueError(f"unknown pillow_compat {compat!r}")


# ---------------------------------------------------------------------------
# Section 4.2: transparent background compositing (K3)
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class TransparentBgConfig:
    """The checkpoint's dataclass; unknown keys raise ``TypeError``."""

    pattern: str = "black"
    chessboard_square_size: int = 16
    chessboard_square_on_top_left: bool = True
    chessboard_white_value: int = 255
    chessboard_gray_value: int = 200


def _bg_config(bg: Any) -> Optional[TransparentBgConfig]:
    if bg is None or isinstance(bg, TransparentBgConfig):
        return bg
    return TransparentBgConfig(**bg)


def _background(cfg: TransparentBgConfig, height: int, width: int) -> np.ndarray:
    """The uint8 ``(H, W)`` background plane (same value in all 3 channels)."""
    pattern = cfg.pattern
    if pattern == "white":
        return np.full((height, width), 255, dtype=np.uint8)
    if pattern == "black":
        return np.full((height, width), 0, dtype=np.uint8)
    if pattern == "gray":
        return np.full((height, width), 128, dtype=np.uint8)
    if pattern == "chessboard":
        s = cfg.chessboard_square_size
        ys = (np.arange(height) // s)[:, None]
        xs = (np.arange(width) // s)[None, :]
        parity = (ys + xs) % 2
        gray_parity = 1 if cfg.chessboard_square_on_top_left else 0
        return np.where(
            parity == gray_parity,
            np.uint8(cfg.chessboard_gray_value),
            np.uint8(cfg.chessboard_white_value),
        ).astype(np.uint8)
    raise ValueError(f"Invalid background pattern: {pattern}")


def fill_transparent_bg_with(image: Image.Image, bg: Any) -> Image.Image:
    """K3 ``fill_transparent_bg_with`` (spec section 4.2), float32 arithmetic.

    ``bg`` is ``None``, a :class:`TransparentBgConfig` or a dict of its fields
    (missing fields take the dataclass defaults black/16/True/255/200).
    """
    cfg = _bg_config(bg)
    if cfg is None:
        return image.convert("RGB")
    if image.mode == "RGB":
        return image
    has_alpha = ("A" in image.getbands()) or ("transparency" in image.info)
    if not has_alpha:
        return image.convert("RGB")
    rgba = np.asarray(image.convert("RGBA"))
    height, width = rgba.shape[:2]
    background = _background(cfg, height, width).astype(np.float32)[:, :, None]
    alpha = rgba[:, :, 3:4].astype(np.float32) / np.float32(255)
    rgb = rgba[:, :, :3].astype(np.float32)
    one = np.float32(1)
    out = alpha * rgb + (one - alpha) * background
    assert out.dtype == np.float32
    return Image.fromarray(np.ascontiguousarray(out.astype(np.uint8)))


# ---------------------------------------------------------------------------
# Section 3.1: loading
# ---------------------------------------------------------------------------


def _array_to_pil(arr: np.ndarray) -> Image.Image:
    if arr.dtype != np.uint8:
        raise ValueError(f"Kimi-K3 preprocessing expects raw uint8 pixels, got {arr.dtype}")
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.ndim == 2:
        return Image.fromarray(np.ascontiguousarray(arr))  # L
    if arr.ndim == 3 and arr.shape[2] in (2, 3, 4):
        return Image.fromarray(np.ascontiguousarray(arr))  # LA / RGB / RGBA
    raise ValueError(f"Unsupported Kimi-K3 image channel count: {arr.shape[-1]}")


def to_pil(item: Any) -> Image.Image:
    """Turn one accepted input into a PIL image in its own mode (no conversion)."""
    if isinstance(item, dict):
        if item.get("type") != "image" or "image" not in item:
            raise ValueError(f"Unsupported Kimi-K3 encoder media item: {item}")
        item = item["image"]
    if isinstance(item, Image.Image):
        return item
    if isinstance(item, np.ndarray):
        return _array_to_pil(item)
    if isinstance(item, (bytes, bytearray, memoryview)):
        img = Image.open(io.BytesIO(bytes(item)))
        img.load()
        return img
    if isinstance(item, str) and item.startswith("data:"):
        payload = item.split(",", 1)[1]
        img = Image.open(io.BytesIO(base64.b64decode(payload)))
        img.load()
        return img
    if isinstance(item, (str, os.PathLike)):
        # same decode as Image.open(path); reading the bytes first leaves no file open
        with open(item, "rb") as f:
            img = Image.open(io.BytesIO(f.read()))
        img.load()
        return img
    raise ValueError(f"Unsupported data type: {type(item)}")


# ---------------------------------------------------------------------------
# Sections 3.3 - 3.5 and 4.1
# ---------------------------------------------------------------------------


def resize_and_composite(
    image: Image.Image,
    new_size: Tuple[int, int],
    bg: Any,
    stage: str,
) -> Image.Image:
    """Section 4.1: the (transparent_bg_config, transparent_bg_fill_stage) pair."""
    if stage == "before_resize":
        image = fill_transparent_bg_with(image, bg)
        if image.size != tuple(new_size):
            image = image.resize(tuple(new_size), Image.Resampling.BICUBIC)
        return image
    if stage == "after_resize":
        if image.size != tuple(new_size):
            image = image.resize(tuple(new_size), Image.Resampling.BICUBIC)
        return fill_transparent_bg_with(image, bg)
    raise ValueError(f"unsupported transparent_bg_fill_stage {stage!r}")


def normalize(x_uint8: np.ndarray, image_mean: Sequence[float], image_std: Sequence[float]) -> np.ndarray:
    """Section 3.4, exactly as the HF code (float64 mean and 1/std arrays)."""
    x = (x_uint8 / 255.0).astype(np.float32)
    mean = np.array(image_mean)
    std_inv = 1.0 / np.array(image_std)
    x -= mean
    x *= std_inv
    return x


def navit_patchify(pixel_values: np.ndarray, patch_size: int) -> Tuple[np.ndarray, Tuple[int, int, int]]:
    """Section 3.5: ``(T, Hp, Wp, 3)`` -> ``(T*gh*gw, 3, ps, ps)``, ``(T, gh, gw)``."""
    t, h, w, c = pixel_values.shape
    assert c == 3, "pixel_values must have 3 channels"
    gh, gw = h // patch_size, w // patch_size
    patches = pixel_values.reshape(t, gh, patch_size, gw, patch_size, c)
    patches = patches.transpose(0, 1, 3, 5, 2, 4)
    patches = patches.reshape(-1, c, patch_size, patch_size)
    return patches, (t, gh, gw)


def reference_uint8(item: Any, media_proc_cfg: Dict[str, Any]) -> Tuple[np.ndarray, Dict[str, int]]:
    """The resized, composited, padded ``uint8 (Hp, Wp, 3)`` canvas + resize config."""
    image = to_pil(item)
    width, height = image.size
    rc = navit_resize_image(
        width,
        height,
        media_proc_cfg["patch_size"],
        media_proc_cfg["merge_kernel_size"],
        media_proc_cfg["in_patch_limit"],
        media_proc_cfg["patch_limit_on_one_side"],
        media_proc_cfg.get("fixed_output_tokens"),
    )
    bg = media_proc_cfg.get("transparent_bg_config")
    stage = media_proc_cfg.get("transparent_bg_fill_stage", "before_resize")
    image = resize_and_composite(image, (rc["new_width"], rc["new_height"]), bg, stage)
    arr = np.asarray(image)
    assert arr.dtype == np.uint8 and arr.ndim == 3 and arr.shape[2] == 3, (image.mode, arr.shape)
    assert arr.shape[:2] == (rc["new_height"], rc["new_width"])
    arr = np.pad(
        arr,
        ((0, rc["pad_height"]), (0, rc["pad_width"]), (0, 0)),
        mode="constant",
        constant_values=0,
    )
    return arr, rc


def reference_preprocess_one(item: Any, media_proc_cfg: Dict[str, Any]) -> Tuple[np.ndarray, np.ndarray]:
    """One image -> ``(pixel_values float32 [n,3,ps,ps], grid_thw int64 [3])``."""
    arr, _ = reference_uint8(item, media_proc_cfg)
    x = normalize(arr, media_proc_cfg["image_mean"], media_proc_cfg["image_std"])
    x = np.expand_dims(x, axis=0)
    patches, grid = navit_patchify(x, media_proc_cfg["patch_size"])
    return np.ascontiguousarray(patches, dtype=np.float32), np.array(grid, dtype=np.int64)


def reference_preprocess(images: Any, media_proc_cfg: Dict[str, Any]) -> Tuple[np.ndarray, np.ndarray]:
    """Batch -> ``(pixel_values float32 [N,3,ps,ps], grid_thws int64 [n,3])``.

    ``images`` is one image or a list; an image is a PIL image, a uint8 array
    (HxW, HxWx1..4), a media dict, bytes, a path or a ``data:`` URL.
    """
    if not isinstance(images, (list, tuple)):
        images = [images]
    ps = media_proc_cfg["patch_size"]
    pvs: List[np.ndarray] = []
    grids: List[np.ndarray] = []
    for item in images:
        pv, grid = reference_preprocess_one(item, media_proc_cfg)
        pvs.append(pv)
        grids.append(grid)
    if not pvs:
        return np.zeros((0, 3, ps, ps), np.float32), np.zeros((0, 3), np.int64)
    return np.concatenate(pvs, axis=0), np.stack(grids).astype(np.int64)
