"""Type stubs of the compiled module ``kimi_k3_rs._native`` (``src/python/``).

The public API and its documentation live in the Python layer; this module is the
Rust core's glue: extract and borrow, run with the GIL released, wrap.
"""

import os
from collections.abc import Sequence
from typing import Any, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "BatchItem",
    "ConfigError",
    "EncodedImage",
    "ImageError",
    "ImageTooLargeError",
    "KimiK3Error",
    "MediaProcConfig",
    "Options",
    "PillowRows",
    "__version__",
    "abbreviate",
    "build_profile",
    "composite",
    "content_key",
    "content_snapshot",
    "count_image_tokens",
    "count_video_chunk_tokens",
    "decode_image",
    "image_size",
    "load_libjpeg",
    "navit_resize_config",
    "navit_resize_video_chunk",
    "pil_pixels",
    "pil_rows",
    "preprocess",
    "resize_bicubic",
    "route_encoded",
    "simd_path",
    "size_items",
    "vertical_first",
]

__version__: str
build_profile: str
simd_path: str
"""The kernels this process runs, set at import: the fastest this CPU runs, ``"avx512"``
(AVX-512 F + BW resize, AVX2 normalise), ``"avx2"`` (AVX2 + FMA), ``"sse4.1"`` or
``"scalar"``, or the one the environment variable ``KIMI_K3_RS_SIMD`` names (for tests and
comparisons; a name of no path, or of one this CPU lacks, fails the import with a
``KimiK3Error`` naming the variable and value). Every path gives the same bits."""

class KimiK3Error(ValueError):
    """Base class of kimi_k3_rs errors (a ValueError)."""

class ConfigError(KimiK3Error):
    """A media_proc_cfg value is missing or invalid."""

class ImageError(KimiK3Error):
    """An image cannot be preprocessed (shape, size, channels, unreadable data)."""

class ImageTooLargeError(ImageError):
    """An encoded image's header claims more pixels than max_image_pixels."""

@final
class MediaProcConfig:
    """A validated media_proc_cfg (immutable); values as the checkpoint's numpy code takes them."""

    def __new__(
        cls,
        patch_size: Any,
        merge_kernel_size: Any,
        in_patch_limit: Any,
        patch_limit_on_one_side: Any,
        image_mean: Any,
        image_std: Any,
        *,
        fixed_output_tokens: Any = None,
        transparent_bg_config: Any = None,
        transparent_bg_fill_stage: Any,
        video: Any = None,
    ) -> MediaProcConfig: ...
    @property
    def patch_size(self) -> int: ...
    @property
    def merge_kernel_size(self) -> int: ...
    @property
    def in_patch_limit(self) -> int: ...
    @property
    def patch_limit_on_one_side(self) -> int: ...
    @property
    def fixed_output_tokens(self) -> int | None: ...
    @property
    def image_mean(self) -> tuple[float, float, float]: ...
    @property
    def image_std(self) -> tuple[float, float, float]: ...
    @property
    def transparent_bg_config(self) -> dict[str, Any] | None: ...
    @property
    def transparent_bg_fill_stage(self) -> str: ...
    @property
    def video(self) -> dict[str, Any] | None: ...
    def __reduce__(self) -> tuple[Any, tuple[type[MediaProcConfig], tuple[Any, ...], dict[str, Any]]]:
        """Pickling and ``copy``: ``copyreg.__newobj_ex__`` with the constructor's arguments."""

@final
class Options:
    """The options of a call (pass order, output dtype, threads), validated once.

    ``pillow_compat``: the resize pass-order rule of a Pillow release, ``"12"`` (Pillow
    12.0 - 12.1), ``"12.2"`` (12.2 - 12.3) or ``"13"`` (13); ``"auto"`` is resolved by
    ``kimi_k3_rs.resolve_pillow_compat`` before it gets here. Anything else: ``KimiK3Error``."""

    def __new__(cls, pillow_compat: Any, dtype: Any, num_threads: Any) -> Options: ...
    @property
    def pillow_compat(self) -> str:
        """``"12"``, ``"12.2"`` or ``"13"``."""
    @property
    def dtype(self) -> str: ...
    @property
    def num_threads(self) -> int: ...
    def __reduce__(self) -> tuple[type[Options], tuple[str, str, int]]:
        """Pickling and ``copy``: ``Options(pillow_compat, dtype, num_threads)``."""

def abbreviate(value: object, /, *, quote: bool = True) -> str:
    """A caller's value as messages show it: at most 200 characters, one line (a string
    as its repr, or as it is with ``quote=False``)."""

def content_key(value: object, /) -> bytes | None:
    """The key by which a plain ``dict`` ``media_proc_cfg`` is validated once: equal for two
    dicts with the same ``str`` keys in order and values of the same types and contents (a
    list and a tuple alike); None for other types and for values it does not read."""

def content_snapshot(value: object, /) -> tuple[bytes, dict[str, Any]] | None:
    """``content_key(value)`` with a copy of ``value`` that the key describes, made in the
    same walk (new dicts and lists, other values shared); None where the key is None."""

def navit_resize_config(width: Any, height: Any, config: MediaProcConfig, /) -> tuple[int, int, int, int, int]:
    """(num_tokens, new_width, new_height, pad_width, pad_height) of one image."""

def size_items(
    items: list[tuple[int, int, int]], config: MediaProcConfig, /
) -> tuple[list[tuple[int, int, int, int, int]], npt.NDArray[np.int64]]:
    """The sizing of every (width, height, frames) item (frames 0: an image; else a K2.5 video
    chunk of that many frames sized from frame 0), and their grid_thws int64 [n, 3]."""

def count_image_tokens(sizes: npt.NDArray[np.int64], config: MediaProcConfig, /) -> npt.NDArray[np.int64]:
    """num_tokens of every (width, height) row of an int64 [n, 2] array; GIL released."""

def count_video_chunk_tokens(sizes: npt.NDArray[np.int64], config: MediaProcConfig, /) -> npt.NDArray[np.int64]:
    """num_tokens of every (width, height, num_frames) video chunk row of an int64 [n, 3] array; GIL released."""

def navit_resize_video_chunk(
    width: Any, height: Any, num_frames: Any, config: MediaProcConfig, /
) -> tuple[int, int, int, int, int]:
    """(num_tokens, new_width, new_height, pad_width, pad_height) of a K2.5 video chunk."""

def composite(image: npt.NDArray[np.uint8], config: MediaProcConfig, /) -> npt.NDArray[np.uint8]:
    """fill_transparent_bg_with of an HxWx4 / HxWx2 uint8 array: HxWx3 / HxWx1."""

@final
class EncodedImage:
    """A JPEG / PNG file the core decodes itself (``route_encoded``'s result)."""

    @property
    def format(self) -> str: ...
    @property
    def size(self) -> tuple[int, int]: ...
    @property
    def mode(self) -> str: ...
    @property
    def decoded_bytes(self) -> int: ...

def route_encoded(data: bytes, /, *, exif_transpose: bool = False) -> EncodedImage | str | None:
    """EncodedImage (native), the reason Pillow decodes it (str), or None (not JPEG/PNG)."""

def load_libjpeg(path: str | os.PathLike[str], /) -> str:
    """Load the libjpeg the installed Pillow links; its description. OSError when unusable."""

def decode_image(data: bytes, /, *, exif_transpose: bool = False) -> tuple[str, Any]:
    """("native", uint8 array) | ("pillow", reason) | ("unknown", "") for one encoded file."""

def _set_poison(on: bool, /) -> bool:
    """Test switch: buffers of unspecified contents start as 0xA5 bytes; the previous setting."""

def image_size(image: npt.NDArray[Any], /) -> tuple[int, int]:
    """(width, height) of a uint8 HxW / HxWxC array, checked as preprocess checks it."""

def pil_pixels(image: Any, /) -> npt.NDArray[np.uint8]:
    """np.asarray(image) of an L / LA / RGB / RGBA PIL image, read through its Arrow export
    without a copy (a read-only view; RGB at Pillow's 4-byte pixel stride; LA packed).
    Pillow's ValueError when it cannot export; ImageError for an unusable export."""

@final
class PillowRows:
    """A PIL image (8-bit bands, or converted to them band by band) the core reads band by band
    (``pil_rows``'s result)."""

def pil_rows(image: Any, /, convert: str | None = None) -> PillowRows:
    """The loaded PIL image ``image``, read by ``preprocess`` / ``resize_bicubic`` band by band
    (each band cropped, converted to ``convert`` when given, and exported: Pillow's stored
    bytes). ImageError when the bands' mode is not an 8-bit one (L, LA, La, PA, RGB, YCbCr,
    HSV, LAB, RGBA, CMYK, RGBX, RGBa). ``image`` must stay open while the rows are read."""

@final
class BatchItem:
    """One item of a ``preprocess`` batch (``kimi_k3_rs._input.load_batch`` builds them): an
    image or a K2.5 video chunk, and ``index``, the number errors give it (``image {index}: ...``)."""

    @staticmethod
    def image(
        pixels: npt.NDArray[Any] | EncodedImage | PillowRows,
        index: int,
        /,
        resized: tuple[int, int, int, int, int] | None = None,
    ) -> BatchItem:
        """An image: a uint8 HxW / HxWxC array (checked by ``preprocess``), an EncodedImage or a
        PillowRows; ``resized``: the (num_tokens, new_width, new_height, pad_width, pad_height) of
        the original image that the pixels were already resized to (not computed again)."""
    @staticmethod
    def video_chunk(frames: Sequence[npt.NDArray[Any] | EncodedImage | PillowRows], index: int, /) -> BatchItem:
        """A video chunk: one grid [len(frames), gh, gw], sized from frame 0. ImageError for no frames."""
    @property
    def index(self) -> int: ...
    @property
    def pixels(self) -> list[npt.NDArray[Any] | EncodedImage | PillowRows]:
        """The image's pixels, or the chunk's frames in order."""

def preprocess(
    items: list[BatchItem],
    config: MediaProcConfig,
    options: Options,
    *,
    out: npt.NDArray[Any] | None = None,
) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
    """(pixel_values [N, 3, ps, ps] float32, or uint16 bits of bfloat16/float16; grid_thws int64 [n, 3])."""

def vertical_first(pillow_compat: Any, width: int, height: int, new_width: int, new_height: int, /) -> bool:
    """Whether the Pillow of ``pillow_compat`` (``"12"``, ``"12.2"`` or ``"13"``) runs the vertical
    pass first when it resizes ``width`` x ``height`` to ``new_width`` x ``new_height``:
    ``"12"`` never, ``"12.2"`` when ``height > 100 * width`` and ``new_height < height``,
    ``"13"`` when ``height - new_height > 0`` and ``> 2 * (width - new_width)``."""

def resize_bicubic(
    image: npt.NDArray[np.uint8] | PillowRows, new_width: int, new_height: int, options: Options
) -> npt.NDArray[np.uint8]:
    """Pillow BICUBIC resize of a C-contiguous HxW / HxWxC uint8 array (C 1 to 4; also
    ``a[..., :3]`` of a C-contiguous HxWx4 ``a``), or of a PillowRows read band by band
    (channels independent); only down-scales."""
