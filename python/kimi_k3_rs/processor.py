"""Preprocessing entry points: ``preprocess``, ``KimiK3VisionProcessor``,
``prepare_kimi_k3_encoder_inputs`` and ``navit_resize_config``.

Reproduces ``KimiK3VisionProcessor.preprocess`` / ``KimiK25VisionProcessor.preprocess``
of the checkpoints (``kimi_k3_vision_processing.py``, ``media_utils.py``) and sglang's
deferred flow (``kimi_k3_image_processing.prepare_kimi_k3_encoder_inputs``). The pixel
work runs in Rust with the GIL released; this module only loads images and checks inputs.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import io
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import numpy as np
import numpy.typing as npt
from PIL import Image

from . import _native
from ._native import ImageError
from .config import MediaProcConfig, load_media_proc_cfg, resolve_pillow_compat

__all__ = [
    "KimiK3EncoderInputs",
    "KimiK3VisionProcessor",
    "navit_resize_config",
    "prepare_kimi_k3_encoder_inputs",
    "preprocess",
]

#: Pillow modes whose 8-bit bands the Rust core takes as they are (HWC uint8).
_NATIVE_MODES = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}

ImageInput = Union[Image.Image, npt.NDArray[np.uint8], bytes, str, "os.PathLike[str]", Mapping[str, Any]]


def navit_resize_config(
    width: int,
    height: int,
    patch_size: int,
    merge_kernel_size: int,
    in_patch_limit: int,
    patch_limit_on_one_side: int,
    fixed_output_tokens: Optional[int] = None,
) -> dict[str, int]:
    """Compute the resize and padding of one image (the NaViT sizing rule).

    Reproduces ``media_utils.navit_resize_image`` (checkpoint) / sglang's
    ``navit_resize_config`` bit for bit, including its float64 arithmetic
    (reference-spec §2; e.g. 8366x10 gives ``new_width`` 7167 under K2.5).

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
        ImageError: ``width`` or ``height`` is 0.
        KimiK3Error: the reference's side-limit assertion fails, same text, e.g.
            ``token_width 256 * merge_kernel_size 2 > patch_limit_on_one_side 511``.

    Example:
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
    for name, value in (("width", width), ("height", height)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
            raise TypeError(f"{name} must be a non-negative int, got {value!r}")
    return _resize_dict(_native.navit_resize_config(int(width), int(height), cfg.native))


def _resize_dict(t: tuple[int, int, int, int, int]) -> dict[str, int]:
    num_tokens, new_width, new_height, pad_width, pad_height = t
    return {
        "num_tokens": num_tokens,
        "new_width": new_width,
        "new_height": new_height,
        "pad_width": pad_width,
        "pad_height": pad_height,
    }


def _unwrap_media(item: Any) -> Any:
    """Return the image of a ``{"type": "image", "image": ...}`` media dict, or ``item``."""
    if isinstance(item, Mapping):
        if item.get("type") != "image" or "image" not in item:
            raise ValueError(f"Unsupported Kimi-K3 encoder media item: {item}")
        return item["image"]
    return item


def _decode(data: Any) -> Image.Image:
    """Open encoded image data as the checkpoint's ``_to_pil`` does (no EXIF rotation), lazily."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return Image.open(io.BytesIO(bytes(data)))
    if isinstance(data, str) and data.startswith("data:"):
        return Image.open(io.BytesIO(base64.b64decode(data.split(",", 1)[1])))
    if isinstance(data, (str, os.PathLike)):
        return Image.open(data)
    raise ValueError(f"Unsupported data type: {type(data)}")


@contextlib.contextmanager
def _loaded(data: Any) -> Iterator[Union[Image.Image, np.ndarray]]:
    """Yield the image of ``data``; a file this function opened is closed afterwards."""
    if isinstance(data, (Image.Image, np.ndarray)):
        yield data
        return
    with _decode(data) as image:
        yield image


def _check_array(array: np.ndarray) -> None:
    """Check a caller's HWC uint8 array (sglang's messages for dtype and channels)."""
    if array.dtype != np.uint8:
        raise ValueError(f"Kimi-K3 preprocessing expects raw uint8 pixels, got {array.dtype}")
    if array.ndim == 3 and array.shape[2] not in (1, 2, 3, 4):
        raise ValueError(f"Unsupported Kimi-K3 image channel count: {array.shape[2]}")
    if array.ndim not in (2, 3):
        raise ImageError(f"expected an HxW or HxWxC uint8 array, got shape {array.shape}")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ImageError(f"image width and height must be positive, got shape {array.shape}")


def _image_size(image: Union[Image.Image, np.ndarray]) -> tuple[int, int]:
    if isinstance(image, np.ndarray):
        _check_array(image)
        return int(image.shape[1]), int(image.shape[0])
    return image.size


def _has_alpha(image: Image.Image) -> bool:
    return "A" in image.getbands() or "transparency" in image.info


def _to_composite_input(image: Image.Image, cfg: MediaProcConfig) -> Image.Image:
    """The image ``fill_transparent_bg_with`` works on: RGB, or RGBA when it composites."""
    if cfg.transparent_bg_config is None or image.mode == "RGB" or not _has_alpha(image):
        return image.convert("RGB")
    return image.convert("RGBA")


def _pixels(
    image: Union[Image.Image, np.ndarray], cfg: MediaProcConfig, compat: str
) -> tuple[np.ndarray, Optional[tuple[int, int]]]:
    """Turn one loaded image into (uint8 HWC array, original size if already resized).

    Arrays and PIL ``L`` (without ``transparency``), ``LA``, ``RGB``, ``RGBA`` go to
    Rust as they are. Other modes take Pillow's own steps where the reference uses
    them: before the resize, ``convert`` (as ``fill_transparent_bg_with`` does);
    under ``after_resize``, Pillow's ``resize`` in the image's own mode (NEAREST for
    ``P`` / ``1``), then ``convert``; Rust then composites, pads and normalises.
    """
    if isinstance(image, np.ndarray):
        _check_array(image)
        return np.ascontiguousarray(image), None  # copies only a non-contiguous array
    mode = image.mode
    if mode in _NATIVE_MODES and not (mode == "L" and "transparency" in image.info):
        return np.asarray(image), None
    if cfg.transparent_bg_fill_stage == "before_resize":
        return np.asarray(_to_composite_input(image, cfg)), None
    width, height = image.size
    _, new_width, new_height, _, _ = _native.navit_resize_config(width, height, cfg.native)
    if mode not in ("P", "1") and compat != resolve_pillow_compat("auto"):
        dh, dw = height - new_height, width - new_width
        if new_width != width and dh > 0 and dh > 2 * dw:
            raise ImageError(
                f"mode {mode} images are resized by the installed Pillow, whose pass order "
                f"differs from pillow_compat={compat!r} for {width}x{height} -> "
                f"{new_width}x{new_height}"
            )
    resized = image.resize((new_width, new_height), Image.Resampling.BICUBIC)
    return np.asarray(_to_composite_input(resized, cfg)), (width, height)


def _as_list(images: Any) -> list[Any]:
    if isinstance(images, (list, tuple)):
        return list(images)
    return [images]


def _run(
    images: Sequence[Any], cfg: MediaProcConfig, compat: str
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    arrays: list[np.ndarray] = []
    resized_from: list[Optional[tuple[int, int]]] = []
    for item in images:
        with _loaded(_unwrap_media(item)) as image:
            array, original = _pixels(image, cfg, compat)
        arrays.append(array)
        resized_from.append(original)
    return _native.preprocess(arrays, cfg.native, pillow_compat=compat, resized_from=resized_from)


def preprocess(
    images: Any,
    media_proc_cfg: Union[Mapping[str, Any], MediaProcConfig],
    *,
    pillow_compat: str = "auto",
) -> dict[str, np.ndarray]:
    """Preprocess images exactly as the Kimi-K3 / K2.5 checkpoint processor does.

    Reproduces ``KimiK3VisionProcessor.preprocess`` (``kimi_k3_vision_processing.py``):
    NaViT sizing, Pillow BICUBIC resize, background compositing when
    ``transparent_bg_config`` is set (before or after the resize), zero padding to a
    multiple of ``patch_size * merge_kernel_size``, normalisation and patchify —
    the same float32 bits (reference-spec §3, §4).

    Args:
        images: one image or a list of images. An image is a ``PIL.Image.Image``, a
            numpy ``uint8`` array ``HxW`` or ``HxWxC`` with C in 1, 2, 3, 4 (read as
            L, LA, RGB, RGBA; a numpy array is always one image), ``bytes`` of an
            encoded file, a file path (``str`` / ``os.PathLike``), a ``data:`` URL, or a
            media dict ``{"type": "image", "image": ...}`` around any of these. Files
            are decoded by Pillow (first frame, no EXIF rotation). A non-contiguous
            array is copied once (``np.ascontiguousarray``); others are read in place.
        media_proc_cfg: the checkpoint's ``media_proc_cfg`` dict (or a
            :class:`MediaProcConfig`), e.g. ``kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG``.
        pillow_compat: ``"auto"`` (the installed Pillow), ``"12"`` (horizontal pass
            first) or ``"13"`` (Pillow 13: vertical first for tall down-scales).

    Returns:
        ``{"pixel_values": float32 [N, 3, patch_size, patch_size],
        "grid_thws": int64 [n_images, 3]}``; ``N`` is the sum of ``h * w`` over the
        grids, patches in image order, row-major over each grid. An empty list gives
        zero-row arrays.

    Raises:
        ValueError: ``Kimi-K3 image processor is missing deferred-preprocessing
            config: ...``; ``Unsupported data type: {type}``; ``Kimi-K3 preprocessing
            expects raw uint8 pixels, got {dtype}``; ``Unsupported Kimi-K3 image channel
            count: {channels}``; ``Unsupported Kimi-K3 encoder media item: {item}``;
            :class:`ConfigError` / :class:`ImageError` (``ValueError`` subclasses) for bad
            config values or image shapes; the side-limit text as :class:`KimiK3Error`.
        TypeError: ``media_proc_cfg`` is not a mapping.
        OSError: a file or bytes object Pillow cannot decode.

    Note:
        The pixel work runs with the GIL released, so threads preprocess in parallel.
        Input arrays are read in place: mutating one from another thread during the
        call gives unspecified (but memory-safe) output for that image.

    Example:
        >>> import numpy as np, kimi_k3_rs
        >>> out = kimi_k3_rs.preprocess(np.zeros((224, 224, 3), np.uint8),
        ...                             kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)
        >>> out["pixel_values"].shape, out["grid_thws"].tolist()
        ((256, 3, 14, 14), [[1, 16, 16]])
    """
    cfg = MediaProcConfig.from_dict(media_proc_cfg)
    compat = resolve_pillow_compat(pillow_compat)
    pixel_values, grid_thws = _run(_as_list(images), cfg, compat)
    return {"pixel_values": pixel_values, "grid_thws": grid_thws}


def _to_tensors(out: dict[str, np.ndarray], return_tensors: Optional[str]) -> dict[str, Any]:
    if return_tensors in (None, "np"):
        return out
    if return_tensors == "pt":
        try:
            import torch
        except ImportError as exc:
            raise ImportError(
                "return_tensors='pt' needs torch, which is not installed; "
                "use return_tensors='np' or install torch"
            ) from exc
        return {k: torch.from_numpy(v) for k, v in out.items()}
    raise ValueError(f"return_tensors must be None, 'np' or 'pt', got {return_tensors!r}")


class KimiK3VisionProcessor:
    """Drop-in for the checkpoint's ``KimiK3VisionProcessor`` (and K2.5's) image path.

    Reproduces ``kimi_k3_vision_processing.KimiK3VisionProcessor`` where servers touch
    it: the ``media_proc_cfg`` attribute and ``preprocess(medias, return_tensors)``.

    Args:
        media_proc_cfg: the checkpoint's ``media_proc_cfg`` dict; validated here.
        pillow_compat: ``"auto"``, ``"12"`` or ``"13"`` (see :func:`preprocess`).

    Raises:
        ValueError / TypeError: as :meth:`MediaProcConfig.from_dict`.
    """

    def __init__(self, media_proc_cfg: Mapping[str, Any], *, pillow_compat: str = "auto") -> None:
        self.config = MediaProcConfig.from_dict(media_proc_cfg)
        self.media_proc_cfg: dict[str, Any] = copy.deepcopy(dict(media_proc_cfg))
        self.pillow_compat = resolve_pillow_compat(pillow_compat)

    @classmethod
    def from_pretrained(
        cls, path: Union[str, "os.PathLike[str]"], *, pillow_compat: str = "auto"
    ) -> KimiK3VisionProcessor:
        """Load ``preprocessor_config.json`` (a file, or a checkpoint folder holding it).

        Only its nested ``media_proc_cfg`` is read; top-level keys beside it are ignored.

        Raises:
            FileNotFoundError: no such file.
            ConfigError: the file has no ``media_proc_cfg`` object; bad values.
        """
        return cls(load_media_proc_cfg(path), pillow_compat=pillow_compat)

    def preprocess(self, medias: Sequence[Any], return_tensors: Optional[str] = None) -> dict[str, Any]:
        """Preprocess media dicts or bare images.

        Args:
            medias: list of ``{"type": "image", "image": ...}`` dicts or images
                (see :func:`preprocess` for the accepted image types).
            return_tensors: ``None`` / ``"np"`` for numpy, ``"pt"`` for torch tensors
                (shared memory, no copy; needs torch).

        Returns:
            ``{"pixel_values": float32 [N, 3, ps, ps], "grid_thws": int64 [n, 3]}``;
            an empty list gives an empty dict, as the reference's ``BatchFeature({})``.

        Raises:
            As :func:`preprocess`; ``ImportError`` for ``"pt"`` without torch.
        """
        medias = _as_list(medias)
        if not medias:
            return {}
        pixel_values, grid_thws = _run(medias, self.config, self.pillow_compat)
        return _to_tensors({"pixel_values": pixel_values, "grid_thws": grid_thws}, return_tensors)

    __call__ = preprocess


@dataclass
class KimiK3EncoderInputs:
    """Geometry of a batch, computed without touching pixels; pixels on demand.

    Attributes:
        grid_thws: int64 ``[n, 3]``, ``(1, h_patches, w_patches)`` per image.
        resize_configs: per image, the dict :func:`navit_resize_config` returns.
        num_tokens: per image, the LLM token count.
        original_image_sizes: per image, ``[width, height]`` in pixels.
    """

    grid_thws: npt.NDArray[np.int64]
    resize_configs: list[dict[str, int]]
    num_tokens: list[int]
    original_image_sizes: list[list[int]]
    _images: list[Any] = field(repr=False)
    _config: MediaProcConfig = field(repr=False)
    _compat: str = field(repr=False)

    def materialize(self, indices: Optional[Sequence[int]] = None) -> list[npt.NDArray[np.float32]]:
        """Preprocess the images at ``indices`` (all when None), in that order.

        Returns:
            One float32 ``[h * w, 3, ps, ps]`` array per index, each equal to
            :func:`preprocess` on that image alone.

        Raises:
            IndexError: an index out of range. Otherwise as :func:`preprocess`.
        """
        order = range(len(self._images)) if indices is None else list(indices)
        chosen = [self._images[i] for i in order]
        if not chosen:
            return []
        pixel_values, grid_thws = _run(chosen, self._config, self._compat)
        rows = np.cumsum(grid_thws.prod(axis=1))[:-1]
        return list(np.split(pixel_values, rows))


def prepare_kimi_k3_encoder_inputs(
    images: Any,
    image_processor_or_media_proc_cfg: Any,
    *,
    pillow_compat: str = "auto",
) -> KimiK3EncoderInputs:
    """Compute every image's geometry up front; defer pixel work to ``materialize``.

    Reproduces sglang's ``prepare_kimi_k3_encoder_inputs``
    (``kimi_k3_image_processing.py``): every rank computes grids and token counts;
    only the rank that owns an image materialises its ``pixel_values``. Files are
    opened lazily (header only) to read their size.

    Args:
        images: as :func:`preprocess`.
        image_processor_or_media_proc_cfg: an object with a ``media_proc_cfg`` dict
            attribute (e.g. :class:`KimiK3VisionProcessor`) or the dict itself.
        pillow_compat: ``"auto"``, ``"12"`` or ``"13"``.

    Returns:
        A :class:`KimiK3EncoderInputs`.

    Raises:
        ValueError: ``Kimi-K3 EPD owner-side preprocessing requires
            image_processor.media_proc_cfg`` when there is no ``media_proc_cfg`` dict;
            the missing-keys message; ``Unsupported Kimi-K3 encoder media item: {item}``;
            ``Unsupported data type: {type}``; dtype / channel messages for arrays.
    """
    if isinstance(image_processor_or_media_proc_cfg, Mapping):
        media_proc_cfg = image_processor_or_media_proc_cfg
    else:
        media_proc_cfg = getattr(image_processor_or_media_proc_cfg, "media_proc_cfg", None)
    if not isinstance(media_proc_cfg, Mapping):
        raise ValueError("Kimi-K3 EPD owner-side preprocessing requires image_processor.media_proc_cfg")
    cfg = MediaProcConfig.from_dict(media_proc_cfg)
    compat = resolve_pillow_compat(pillow_compat)
    items = [_unwrap_media(item) for item in _as_list(images)]
    sizes = []
    for item in items:
        with _loaded(item) as image:  # reads the header only
            sizes.append(_image_size(image))
    configs = [_resize_dict(t) for t in _native.navit_resize_configs(sizes, cfg.native)]
    ps = cfg.patch_size
    grid = np.array(
        [[1, (r["new_height"] + r["pad_height"]) // ps, (r["new_width"] + r["pad_width"]) // ps] for r in configs],
        dtype=np.int64,
    ).reshape(-1, 3)
    return KimiK3EncoderInputs(
        grid_thws=grid,
        resize_configs=configs,
        num_tokens=[r["num_tokens"] for r in configs],
        original_image_sizes=[[w, h] for w, h in sizes],
        _images=items,
        _config=cfg,
        _compat=compat,
    )
