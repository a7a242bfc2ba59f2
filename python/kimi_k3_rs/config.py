"""``media_proc_cfg`` validation and the published presets.

Reproduces the config handling of the Kimi-K2.5 / Kimi-K3 checkpoint processors
(``kimi_k3_vision_processing.py``: ``KimiK3VisionProcessor.__init__`` and the
``TransparentBgConfig`` dataclass) with sglang's required-key check
(``kimi_k3_image_processing.py``), for the ``media_proc_cfg`` object of a checkpoint's
``preprocessor_config.json``.
"""

from __future__ import annotations

import copy
import json
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, SupportsInt, cast

import numpy as np
import PIL

from . import _native
from ._native import ConfigError, KimiK3Error

__all__ = [
    "REQUIRED_KEYS",
    "TRANSPARENT_BG_DEFAULTS",
    "MediaProcConfig",
    "TransparentBgConfig",
    "kimi_k3_media_proc_cfg",
    "kimi_k25_media_proc_cfg",
    "load_media_proc_cfg",
    "resolve_pillow_compat",
]

#: The keys sglang requires, in the order its error message lists them.
REQUIRED_KEYS = (
    "patch_size",
    "merge_kernel_size",
    "in_patch_limit",
    "patch_limit_on_one_side",
    "image_mean",
    "image_std",
)

#: Field defaults of the reference ``TransparentBgConfig`` dataclass, used for
#: keys missing inside ``transparent_bg_config`` (not the published K3 values).
TRANSPARENT_BG_DEFAULTS: dict[str, Any] = {
    "pattern": "black",
    "chessboard_square_size": 16,
    "chessboard_square_on_top_left": True,
    "chessboard_white_value": 255,
    "chessboard_gray_value": 200,
}

_PATTERNS = ("chessboard", "white", "black", "gray")
_FILL_STAGES = ("before_resize", "after_resize")
_MAX_INT = 2**31 - 1

_KIMI_K25: dict[str, Any] = {
    "patch_size": 14,
    "merge_kernel_size": 2,
    "in_patch_limit": 16384,
    "patch_limit_on_one_side": 512,
    "fixed_output_tokens": None,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "in_patch_limit_each_frame": 4096,
    "in_patch_limit_video": None,
    "sample_fps": 2.0,
    "max_num_frames_each_video": None,
    "temporal_merge_kernel_size": 4,
    "timestamp_mode": "hh:mm:ss.fff",
    "config_type": "media_proc.processors.moonvit.MoonViTMediaProcessorConfig",
}

_KIMI_K3: dict[str, Any] = {
    "patch_size": 14,
    "merge_kernel_size": 2,
    "in_patch_limit": 65536,
    "patch_limit_on_one_side": 512,
    "fixed_output_tokens": None,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "in_patch_limit_each_frame": 16384,
    "sample_fps": 8.0,
    "temporal_merge_kernel_size": 4,
    "transparent_bg_config": {
        "pattern": "chessboard",
        "chessboard_square_size": 8,
        "chessboard_square_on_top_left": True,
        "chessboard_white_value": 255,
        "chessboard_gray_value": 180,
    },
    "transparent_bg_fill_stage": "after_resize",
    "config_type": "media_proc.processors.moonvit.MoonViTMediaProcessorConfig",
}


def kimi_k25_media_proc_cfg() -> dict[str, Any]:
    """Return a fresh copy of the published Kimi-K2.5 ``media_proc_cfg`` (its ``preprocessor_config.json``)."""
    return copy.deepcopy(_KIMI_K25)


def kimi_k3_media_proc_cfg() -> dict[str, Any]:
    """Return a fresh copy of the published Kimi-K3 ``media_proc_cfg`` (its ``preprocessor_config.json``)."""
    return copy.deepcopy(_KIMI_K3)


def _bad(key: str, rule: str, value: Any) -> ConfigError:
    return ConfigError(f'media_proc_cfg["{key}"] must be {rule}, got {value!r}')


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _positive_int(key: str, value: Any, maximum: int = _MAX_INT) -> int:
    if not _is_int(value) or not 1 <= int(value) <= maximum:
        raise _bad(key, f"an integer in 1..{maximum}", value)
    return int(value)


def _byte(key: str, value: Any) -> int:
    """A colour value 0..255: an int, or a float with an integral value (same arithmetic)."""
    is_number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not is_number or not (math.isfinite(value) and float(value).is_integer() and 0 <= value <= 255):
        raise _bad(key, "an integer in 0..255", value)
    return int(value)


def _three_floats(key: str, value: Any, *, nonzero: bool) -> tuple[float, float, float]:
    """Three finite reals (list, tuple or numpy array), as the reference's ``np.array(value)``."""
    items = list(value) if isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, (str, bytes)) else None
    ok = (
        items is not None
        and len(items) == 3
        and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in items)
    )
    if ok:
        floats = tuple(float(v) for v in items)  # type: ignore[union-attr]
        ok = all(math.isfinite(v) and (v != 0.0 or not nonzero) for v in floats)
    if not ok:
        rule = "three finite non-zero numbers" if nonzero else "three finite numbers"
        raise _bad(key, rule, value)
    return floats  # type: ignore[return-value]


@dataclass(frozen=True)
class TransparentBgConfig:
    """``transparent_bg_config``: the background transparent pixels are composited onto.

    Reproduces the reference dataclass ``TransparentBgConfig``
    (``kimi_k3_vision_processing.py``); missing keys take its field defaults.

    Attributes:
        pattern: ``"chessboard"``, ``"white"`` (255), ``"black"`` (0) or ``"gray"`` (128).
        chessboard_square_size: square edge in pixels of the resized image.
        chessboard_square_on_top_left: ``True`` puts a white square at the top left.
        chessboard_white_value: value 0..255 of the white squares.
        chessboard_gray_value: value 0..255 of the gray squares.
    """

    pattern: str = "black"
    chessboard_square_size: int = 16
    chessboard_square_on_top_left: bool = True
    chessboard_white_value: int = 255
    chessboard_gray_value: int = 200

    @classmethod
    def from_dict(cls, value: Any) -> TransparentBgConfig:
        """Validate a ``transparent_bg_config`` mapping.

        Raises:
            TypeError: ``value`` is not a mapping, or has a key the reference dataclass
                does not know (same text as the dataclass constructor).
            ValueError: ``Invalid background pattern: {pattern}`` for an unknown pattern.
            ConfigError: a square size or colour value out of range.
        """
        if not isinstance(value, Mapping):
            raise TypeError(
                f'media_proc_cfg["transparent_bg_config"] must be a dict or None, got {value!r}'
            )
        for key in value:
            if key not in TRANSPARENT_BG_DEFAULTS:
                raise TypeError(
                    f"TransparentBgConfig.__init__() got an unexpected keyword argument '{key}'"
                )
        merged = {**TRANSPARENT_BG_DEFAULTS, **value}
        pattern = merged["pattern"]
        if not isinstance(pattern, str) or pattern not in _PATTERNS:
            raise ConfigError(f"Invalid background pattern: {pattern}")
        top_left = merged["chessboard_square_on_top_left"]
        if not (isinstance(top_left, bool) or (_is_int(top_left) and top_left in (0, 1))):
            raise _bad("transparent_bg_config.chessboard_square_on_top_left", "a bool", top_left)
        return cls(
            pattern=pattern,
            chessboard_square_size=_positive_int(
                "transparent_bg_config.chessboard_square_size", merged["chessboard_square_size"]
            ),
            chessboard_square_on_top_left=bool(top_left),
            chessboard_white_value=_byte(
                "transparent_bg_config.chessboard_white_value", merged["chessboard_white_value"]
            ),
            chessboard_gray_value=_byte(
                "transparent_bg_config.chessboard_gray_value", merged["chessboard_gray_value"]
            ),
        )

    def as_tuple(self) -> tuple[str, int, bool, int, int]:
        """Return the fields in the order ``_native.MediaProcConfig`` takes them."""
        return (
            self.pattern,
            self.chessboard_square_size,
            self.chessboard_square_on_top_left,
            self.chessboard_white_value,
            self.chessboard_gray_value,
        )


@dataclass(frozen=True)
class MediaProcConfig:
    """A validated ``media_proc_cfg`` (the keys the image path reads).

    Build it once per model with :meth:`from_dict`; it holds the Rust config
    (``native``) used by every call.

    Attributes:
        patch_size: patch edge in pixels (14).
        merge_kernel_size: spatial merge factor (2); images are padded to a multiple
            of ``patch_size * merge_kernel_size`` pixels.
        in_patch_limit: patch budget before merging (16384 K2.5, 65536 K3).
        patch_limit_on_one_side: per-side cap in patches (512).
        image_mean: per-channel mean, ``[0, 1]`` units.
        image_std: per-channel std, ``[0, 1]`` units, non-zero.
        fixed_output_tokens: reported token count override (``int()`` of the value), or None.
        transparent_bg_config: the background, or None (alpha dropped).
        transparent_bg_fill_stage: ``"before_resize"`` (default) or ``"after_resize"``.
    """

    patch_size: int
    merge_kernel_size: int
    in_patch_limit: int
    patch_limit_on_one_side: int
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    fixed_output_tokens: int | None = None
    transparent_bg_config: TransparentBgConfig | None = None
    transparent_bg_fill_stage: str = "before_resize"
    native: _native.MediaProcConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        bg = self.transparent_bg_config
        native = _native.MediaProcConfig(
            self.patch_size,
            self.merge_kernel_size,
            self.in_patch_limit,
            self.patch_limit_on_one_side,
            list(self.image_mean),
            list(self.image_std),
            fixed_output_tokens=self.fixed_output_tokens,
            transparent_bg_config=None if bg is None else bg.as_tuple(),
            transparent_bg_fill_stage=self.transparent_bg_fill_stage,
        )
        object.__setattr__(self, "native", native)

    @classmethod
    def from_dict(cls, media_proc_cfg: Any) -> MediaProcConfig:
        """Validate a ``media_proc_cfg`` dict (``KimiK3VisionProcessor.__init__``'s and sglang's rules).

        Args:
            media_proc_cfg: the ``"media_proc_cfg"`` object of ``preprocessor_config.json``,
                or a :class:`MediaProcConfig` (returned unchanged). Unknown keys (video
                keys, ``config_type``, future keys) are ignored.

        Returns:
            The validated config.

        Raises:
            TypeError: ``media_proc_cfg`` is not a mapping; an unknown key inside
                ``transparent_bg_config``.
            ValueError: ``Kimi-K3 image processor is missing deferred-preprocessing
                config: {keys}`` (a :class:`ConfigError`) listing every missing required
                key; ``Invalid background pattern: {pattern}``; a :class:`ConfigError`
                naming the key and value for zero, negative, non-integer, NaN or infinite
                values, a zero std, mean/std not three numbers, or an unknown fill stage.

        Example:
            >>> cfg = MediaProcConfig.from_dict(kimi_k3_media_proc_cfg())
            >>> (cfg.in_patch_limit, cfg.transparent_bg_fill_stage)
            (65536, 'after_resize')
        """
        if isinstance(media_proc_cfg, MediaProcConfig):
            return media_proc_cfg
        if not isinstance(media_proc_cfg, Mapping):
            raise TypeError(f"media_proc_cfg must be a dict, got {type(media_proc_cfg).__name__}")
        missing = [k for k in REQUIRED_KEYS if k not in media_proc_cfg]
        if missing:
            raise ConfigError(
                "Kimi-K3 image processor is missing deferred-preprocessing config: "
                + ", ".join(missing)
            )
        fixed = media_proc_cfg.get("fixed_output_tokens")
        if fixed is not None:
            if not (isinstance(fixed, numbers.Real) and not isinstance(fixed, bool)) or not (
                math.isfinite(fixed) and 0 <= int(cast(SupportsInt, fixed)) <= _MAX_INT
            ):
                raise _bad("fixed_output_tokens", f"None or a number in 0..{_MAX_INT}", fixed)
            fixed = int(cast(SupportsInt, fixed))
        bg = media_proc_cfg.get("transparent_bg_config")
        stage = media_proc_cfg.get("transparent_bg_fill_stage", "before_resize")
        if not isinstance(stage, str) or stage not in _FILL_STAGES:
            raise _bad("transparent_bg_fill_stage", "'before_resize' or 'after_resize'", stage)
        return cls(
            patch_size=_positive_int("patch_size", media_proc_cfg["patch_size"]),
            merge_kernel_size=_positive_int("merge_kernel_size", media_proc_cfg["merge_kernel_size"]),
            in_patch_limit=_positive_int("in_patch_limit", media_proc_cfg["in_patch_limit"], 2**53),
            patch_limit_on_one_side=_positive_int(
                "patch_limit_on_one_side", media_proc_cfg["patch_limit_on_one_side"]
            ),
            image_mean=_three_floats("image_mean", media_proc_cfg["image_mean"], nonzero=False),
            image_std=_three_floats("image_std", media_proc_cfg["image_std"], nonzero=True),
            fixed_output_tokens=fixed,
            transparent_bg_config=None if bg is None else TransparentBgConfig.from_dict(bg),
            transparent_bg_fill_stage=stage,
        )



def load_media_proc_cfg(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read the nested ``media_proc_cfg`` of a ``preprocessor_config.json``.

    Args:
        path: the JSON file, or a checkpoint folder that holds ``preprocessor_config.json``.

    Returns:
        The ``media_proc_cfg`` dict (not yet validated); top-level keys beside it
        (``auto_map``, ...) are ignored.

    Raises:
        OSError: the file cannot be read (``FileNotFoundError`` when missing).
        ConfigError: the JSON has no ``media_proc_cfg`` object.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "preprocessor_config.json")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    inner = data.get("media_proc_cfg") if isinstance(data, dict) else None
    if not isinstance(inner, dict):
        raise ConfigError(f"{path} has no 'media_proc_cfg' object")
    return inner


def resolve_pillow_compat(pillow_compat: Any) -> str:
    """Resolve ``pillow_compat`` to ``"12"`` or ``"13"``.

    ``"auto"`` means the installed Pillow: major version 13 or later gives ``"13"``
    (vertical pass first for tall down-scales, Pillow 13 ``libImaging/Resample.c``), else ``"12"``.

    Raises:
        KimiK3Error: any value other than ``"auto"``, ``"12"`` or ``"13"``.
    """
    if pillow_compat == "auto":
        return "13" if int(PIL.__version__.split(".")[0]) >= 13 else "12"
    if pillow_compat in ("12", "13"):
        return str(pillow_compat)
    raise KimiK3Error(f"pillow_compat must be 'auto', '12' or '13', got {pillow_compat!r}")
