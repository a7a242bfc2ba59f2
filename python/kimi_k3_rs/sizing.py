"""Image sizing: the NaViT resize / padding rule and token counts, no pixels touched.

Reproduces ``media_utils.py: navit_resize_image`` of the checkpoints and sglang's
``kimi_k3_image_processing.py: navit_resize_config``; the arithmetic runs in Rust.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _native, errors
from .config import MediaProcConfig

__all__ = ["count_image_tokens", "navit_resize_config"]


def navit_resize_config(
    width: int,
    height: int,
    patch_size: int,
    merge_kernel_size: int,
    in_patch_limit: int,
    patch_limit_on_one_side: int,
    fixed_output_tokens: int | None = None,
) -> dict[str, int]:
    """Compute the resize and padding of one image (the NaViT sizing rule).

    Reproduces ``media_utils.navit_resize_image`` (checkpoint) / sglang's
    ``navit_resize_config`` bit for bit, including its float64 arithmetic
    (e.g. 8366x10 gives ``new_width`` 7167 under K2.5).

    Args:
        width: original image width in pixels (``PIL.Image.size[0]``), 1..2**53.
        height: original image height in pixels, 1..2**53.
        patch_size: patch edge in pixels (14).
        merge_kernel_size: spatial merge factor (2).
        in_patch_limit: patch budget before merging (16384 K2.5, 65536 K3).
        patch_limit_on_one_side: per-side cap in patches (512).
        fixed_output_tokens: when not None, reported as ``num_tokens`` (after ``int()``);
            sizes are unchanged.

    Returns:
        ``{"num_tokens", "new_width", "new_height", "pad_width", "pad_height"}`` (ints;
        sizes in pixels, padding added right / bottom).

    Raises:
        ConfigError: a parameter is not a positive integer in range.
        TypeError: ``width`` or ``height`` is not an int.
        ImageError: ``width`` or ``height`` is outside 1..2**53.
        KimiK3Error: the reference's side-limit assertion fails, same text, e.g.
            ``token_width 256 * merge_kernel_size 2 > patch_limit_on_one_side 511``.

    Examples:
        >>> from kimi_k3_rs import navit_resize_config
        >>> navit_resize_config(4000, 3000, 14, 2, 16384, 512)["new_width"]
        2073
    """
    cfg = MediaProcConfig.from_dict(
        {
            "patch_size": patch_size,
            "merge_kernel_size": merge_kernel_size,
            "in_patch_limit": in_patch_limit,
            "patch_limit_on_one_side": patch_limit_on_one_side,
            "image_mean": (0.0, 0.0, 0.0),
            "image_std": (1.0, 1.0, 1.0),
            "fixed_output_tokens": fixed_output_tokens,
        }
    )
    return resize_dict(_native.navit_resize_config(width, height, cfg.native))


def count_image_tokens(sizes: Any, media_proc_cfg: Mapping[str, Any] | MediaProcConfig) -> npt.NDArray[np.int64]:
    """LLM token count of every image size, for schedulers and placeholder expansion.

    The sizing of :func:`navit_resize_config` over a whole array, in Rust with the GIL
    released (millions of sizes per second); each count equals ``num_tokens`` there:
    ``(padded_h / F) * (padded_w / F)`` with ``F = patch_size * merge_kernel_size``, or
    ``fixed_output_tokens`` when the config sets it.

    Args:
        sizes: ``[n, 2]`` integers, one ``(width, height)`` in pixels per row
            (anything ``np.asarray(sizes, np.int64)`` accepts).
        media_proc_cfg: the ``media_proc_cfg`` dict or a :class:`MediaProcConfig`.

    Returns:
        int64 ``[n]``.

    Raises:
        ImageError: ``sizes`` is not ``[n, 2]``, or a size is 0, negative or over 2**53.
        TypeError: ``sizes`` are not integers (floats are not truncated silently).
        KimiK3Error: the side-limit assertion (see :func:`navit_resize_config`).
        ValueError / TypeError: as :meth:`MediaProcConfig.from_dict`.

    Examples:
        >>> import kimi_k3_rs
        >>> kimi_k3_rs.count_image_tokens([[1920, 1080], [4000, 3000]], kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG).tolist()
        [2691, 4200]
    """
    cfg = MediaProcConfig.from_dict(media_proc_cfg)
    given = np.asarray(sizes)
    if given.size == 0:
        given = given.reshape(-1, 2) if given.ndim <= 1 or given.shape[-1] == 2 else given
    if given.size and given.dtype.kind not in "iu":
        raise errors.sizes_not_integers(given.dtype)
    if given.dtype.kind == "u" and given.ndim == 2 and given.size and given.max() > 2**53:
        # Too large for int64 maybe; the core's own check names the first such size.
        row = np.argwhere(given > 2**53)[0][0]
        _native.navit_resize_config(int(given[row, 0]), int(given[row, 1]), cfg.native)
    return _native.count_image_tokens(np.ascontiguousarray(given, dtype=np.int64), cfg.native)


def resize_dict(t: tuple[int, int, int, int, int]) -> dict[str, int]:
    num_tokens, new_width, new_height, pad_width, pad_height = t
    return {
        "num_tokens": num_tokens,
        "new_width": new_width,
        "new_height": new_height,
        "pad_width": pad_width,
        "pad_height": pad_height,
    }
