"""Type stubs of the compiled module ``kimi_k3_rs._native`` (public docs live in the .py layer)."""

from typing import Any, Optional

import numpy as np
import numpy.typing as npt

__version__: str
build_profile: str
simd_path: str
"""The kernels this CPU runs, detected at import: ``"avx512"`` (AVX-512 F + BW resize, AVX2
normalise), ``"avx2"`` (AVX2 + FMA), ``"sse4.1"`` or ``"scalar"``. Every path gives the same bits."""

class KimiK3Error(ValueError):
    """Base class of kimi_k3_rs errors."""

class ConfigError(KimiK3Error):
    """A media_proc_cfg value is missing or invalid."""

class ImageError(KimiK3Error):
    """An image cannot be preprocessed."""

class MediaProcConfig:
    """A validated media_proc_cfg (immutable)."""

    def __new__(
        cls,
        patch_size: int,
        merge_kernel_size: int,
        in_patch_limit: int,
        patch_limit_on_one_side: int,
        image_mean: list[float],
        image_std: list[float],
        *,
        fixed_output_tokens: Optional[int] = None,
        transparent_bg_config: Optional[tuple[str, int, bool, int, int]] = None,
        transparent_bg_fill_stage: str = "before_resize",
    ) -> MediaProcConfig: ...
    @property
    def patch_size(self) -> int: ...

def navit_resize_config(width: int, height: int, config: MediaProcConfig, /) -> tuple[int, int, int, int, int]:
    """(num_tokens, new_width, new_height, pad_width, pad_height) of one image."""

def navit_resize_configs(
    sizes: list[tuple[int, int]], config: MediaProcConfig, /
) -> list[tuple[int, int, int, int, int]]:
    """navit_resize_config for many (width, height) pairs."""

def count_image_tokens(sizes: npt.NDArray[np.int64], config: MediaProcConfig, /) -> npt.NDArray[np.int64]:
    """num_tokens of every (width, height) row of an int64 [n, 2] array; GIL released."""

def preprocess(
    images: list[npt.NDArray[np.uint8]],
    config: MediaProcConfig,
    *,
    pillow_compat: str,
    resized_from: Optional[list[Optional[tuple[int, int]]]] = None,
    out: Optional[npt.NDArray[Any]] = None,
    dtype: str = "float32",
    num_threads: int = 1,
) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
    """(pixel_values [N, 3, ps, ps] float32, or uint16 bits of bfloat16/float16; grid_thws int64 [n, 3])."""

def resize_bicubic(
    image: npt.NDArray[np.uint8], new_width: int, new_height: int, *, pillow_compat: str
) -> npt.NDArray[np.uint8]:
    """Pillow BICUBIC resize of an HxW / HxWxC uint8 array (channels independent); GIL released."""
