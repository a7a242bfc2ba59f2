"""Preprocessing entry points: ``preprocess``, ``KimiK3VisionProcessor``,
``prepare_kimi_k3_encoder_inputs`` and ``navit_resize_config``.

Reproduces ``KimiK3VisionProcessor.preprocess`` / ``KimiK25VisionProcessor.preprocess``
of the checkpoints (``kimi_k3_vision_processing.py``, ``media_utils.py``) and sglang's
deferred flow (``kimi_k3_image_processing.prepare_kimi_k3_encoder_inputs``). The pixel
work runs in Rust with the GIL released; this module only loads images and checks inputs.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import copy
import io
import json
import math
import numbers
import os
import secrets
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, NamedTuple, Optional, Union

import numpy as np
import numpy.typing as npt
import PIL
from PIL import Image, ImageOps, PngImagePlugin

from . import _native
from ._native import ImageError
from .config import MediaProcConfig, load_media_proc_cfg, resolve_pillow_compat

__all__ = [
    "DEFAULT_MAX_IMAGE_PIXELS",
    "NUM_THREADS_ENV",
    "ImageTooLargeError",
    "KimiK3EncoderInputs",
    "KimiK3VisionProcessor",
    "PREPROCESSOR_CONFIG_NAME",
    "count_image_tokens",
    "navit_resize_config",
    "prepare_kimi_k3_encoder_inputs",
    "preprocess",
]

#: PIL modes whose 8-bit bands the Rust core takes as they are (HWC uint8): L, LA,
#: RGB, RGBA; the core does their resize too (RGBA / LA premultiplied, as Pillow).
_NATIVE_MODES = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}

#: Modes Pillow always resizes with NEAREST (``Image.resize`` forces it, reference-spec
#: §5.2); Pillow's own resize is used for them (a cheap 8-bit index copy, whose result
#: does not depend on the pass order).
_NEAREST_MODES = frozenset({"P", "1"})

#: 8-bit modes whose Pillow BICUBIC resize is the plain per-channel 8-bit resample of
#: reference-spec §5.1 (no premultiplication): resized in Rust by
#: ``_native.resize_bicubic``, which follows ``pillow_compat``.  ``L`` lands here only
#: with a ``transparency`` entry under a background config.
_RUST_RESIZE_MODES = frozenset({"L", "CMYK", "RGBX", "YCbCr", "HSV", "LAB", "RGBa", "La", "PA"})

#: Bands that ``np.asarray`` gives as signed bytes but Pillow stores (and resamples) XOR 128:
#: ``LAB``'s a and b. Resampling ``array ^ flip`` is Pillow's resample bit for bit (checked
#: against Pillow 12.3.0 and 13.0.0).
_SIGNED_BANDS = {"LAB": np.array([0, 128, 128], dtype=np.uint8)}

#: 3-band modes, stored by Pillow in 4-byte pixels whose 4th byte its resample sets to 0.
_THREE_BAND_MODES = frozenset({"YCbCr", "HSV", "LAB"})

#: EXIF orientation values that ``ImageOps.exif_transpose`` acts on; 5..8 swap the sides.
_EXIF_ORIENTATION_TAG = 0x0112
_TRANSPOSING_ORIENTATIONS = frozenset(range(2, 9))
_SIDE_SWAPPING_ORIENTATIONS = frozenset(range(5, 9))

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
        TypeError: ``width`` or ``height`` is not an int.
        ImageError: ``width`` or ``height`` is outside 1..2**53.
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
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {value!r}")
    if not (1 <= width <= 2**53 and 1 <= height <= 2**53):
        raise ImageError(f"image width and height must be in 1..2**53, got {width}x{height}")
    return _resize_dict(_native.navit_resize_config(int(width), int(height), cfg.native))


def count_image_tokens(sizes: Any, media_proc_cfg: Union[Mapping[str, Any], MediaProcConfig]) -> npt.NDArray[np.int64]:
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

    Example:
        >>> count_image_tokens([[1920, 1080], [4000, 3000]], kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG).tolist()
        [2691, 4200]
    """
    cfg = MediaProcConfig.from_dict(media_proc_cfg)
    given = np.asarray(sizes)
    if given.size == 0:
        given = given.reshape(-1, 2) if given.ndim <= 1 or given.shape[-1] == 2 else given
    if given.ndim != 2 or given.shape[1] != 2:
        raise ImageError(f"sizes must have shape [n, 2] (width, height), got {given.shape}")
    if given.size and given.dtype.kind not in "iu":
        raise TypeError(f"sizes must be integers, got dtype {given.dtype}")
    if given.dtype.kind == "u" and given.size and given.max() > 2**62:
        raise ImageError(f"image sizes must be at most 2**53 pixels, got {given.max()}")
    return _native.count_image_tokens(np.ascontiguousarray(given, dtype=np.int64), cfg.native)


def _resize_dict(t: tuple[int, int, int, int, int]) -> dict[str, int]:
    num_tokens, new_width, new_height, pad_width, pad_height = t
    return {
        "num_tokens": num_tokens,
        "new_width": new_width,
        "new_height": new_height,
        "pad_width": pad_width,
        "pad_height": pad_height,
    }


# ---------------------------------------------------------------------------
# inputs: media dicts, encoded data, torch tensors, numpy arrays, EXIF
# ---------------------------------------------------------------------------


def _split_media(item: Any) -> tuple[Any, Any]:
    """``(image, content_hash)`` of a ``{"type": "image", "image": ...}`` dict, or ``(item, None)``."""
    if isinstance(item, Mapping):
        if item.get("type") != "image" or "image" not in item:
            raise ValueError(f"Unsupported Kimi-K3 encoder media item: {item}")
        return item["image"], item.get("content_hash")
    return item, None


def _unwrap_media(item: Any) -> Any:
    """Return the image of a ``{"type": "image", "image": ...}`` media dict, or ``item``."""
    return _split_media(item)[0]


#: Default ``max_image_pixels``: the size at which Pillow itself raises
#: ``DecompressionBombError`` (2 x ``PIL.Image.MAX_IMAGE_PIXELS`` at import time).
DEFAULT_MAX_IMAGE_PIXELS: Optional[int] = (
    2 * Image.MAX_IMAGE_PIXELS if Image.MAX_IMAGE_PIXELS is not None else None
)


class ImageTooLargeError(ImageError):
    """An encoded image's header claims more pixels than ``max_image_pixels``."""


#: Encoded data as ``Image.open`` is given it: a ``BytesIO`` over the bytes, or a path.
_Source = Union[io.BytesIO, str, "os.PathLike[str]"]


def _encoded_source(data: Any) -> _Source:
    """Encoded image data as the checkpoint's ``_to_pil`` hands it to ``Image.open``.

    ``bytes`` / ``bytearray`` / ``memoryview``: the encoded file; ``str`` starting with
    ``data:``: base64 after the first comma; both become a ``BytesIO``. Other ``str``
    and ``os.PathLike``: a path, returned as it is.
    """
    if isinstance(data, (bytes, bytearray, memoryview)):
        return io.BytesIO(bytes(data))
    if isinstance(data, str) and data.startswith("data:"):
        _, comma, payload = data.partition(",")
        if not comma:
            raise ImageError(f"data: URL without a ',' before its payload: {data[:40]!r}")
        try:
            return io.BytesIO(base64.b64decode(payload, validate=True))
        except binascii.Error as exc:
            raise ImageError(f"data: URL payload is not base64: {exc}") from exc
    if isinstance(data, (str, os.PathLike)):
        return data
    raise ValueError(f"Unsupported data type: {type(data)}")


def _check_pixels(size: tuple[int, int], max_image_pixels: Optional[int], what: str = "image") -> None:
    """Refuse encoded data whose header claims more than ``max_image_pixels`` pixels;
    ``what`` names the header (the image, or one entry of an ICO)."""
    width, height = size
    if max_image_pixels is not None and width * height > max_image_pixels:
        raise ImageTooLargeError(
            f"{what} of {width}x{height} = {width * height} pixels is over "
            f"max_image_pixels={max_image_pixels} (a decompression bomb?); "
            "pass a larger max_image_pixels, or None, to decode it"
        )


def _is_torch_tensor(data: Any) -> bool:
    """Duck-typed ``torch.Tensor`` check that never imports torch."""
    module = type(data).__module__
    return (module == "torch" or module.startswith("torch.")) and hasattr(data, "numpy") and hasattr(data, "dtype")


def _tensor_layout(tensor: Any) -> tuple[int, int, Optional[int], bool]:
    """``(height, width, channels or None, chw)`` of a uint8 tensor, sglang's reading.

    2-D is ``HW``; 3-D with a first dimension of 1, 3 or 4 is ``CHW``, any other 3-D
    is ``HWC`` (``kimi_k3_image_processing.to_hwc_uint8``). Checks dtype and channels
    with sglang's messages.
    """
    dtype = str(tensor.dtype)
    if dtype != "torch.uint8":
        raise ValueError(f"Kimi-K3 preprocessing expects raw uint8 pixels, got {dtype}")
    shape = tuple(int(v) for v in tensor.shape)
    if len(shape) == 2:
        return shape[0], shape[1], None, False
    if len(shape) == 3:
        if shape[0] in (1, 3, 4):
            return shape[1], shape[2], shape[0], True
        if shape[2] not in (1, 2, 3, 4):
            raise ValueError(f"Unsupported Kimi-K3 image channel count: {shape[2]}")
        return shape[0], shape[1], shape[2], False
    raise ImageError(f"expected an HW, CHW or HWC uint8 tensor, got shape {list(shape)}")


def _tensor_array(tensor: Any) -> np.ndarray:
    """A uint8 ``HxW`` / ``HxWxC`` numpy view of a torch tensor (copied off a GPU only)."""
    _, _, _, chw = _tensor_layout(tensor)
    if hasattr(tensor, "detach"):
        tensor = tensor.detach()
    device = getattr(tensor, "device", None)
    if device is not None and getattr(device, "type", "cpu") != "cpu":
        tensor = tensor.cpu()
    array = np.asarray(tensor.numpy())
    return array.transpose(1, 2, 0) if chw else array


def _exif_orientation(image: Image.Image) -> Any:
    """The EXIF Orientation value ``ImageOps.exif_transpose`` reads (1 when absent)."""
    return image.getexif().get(_EXIF_ORIENTATION_TAG, 1)


def _apply_exif(image: Image.Image, exif_transpose: bool) -> Image.Image:
    """``ImageOps.exif_transpose(image)`` when asked and the orientation moves pixels."""
    if exif_transpose and _exif_orientation(image) in _TRANSPOSING_ORIENTATIONS:
        return ImageOps.exif_transpose(image)
    return image


@contextlib.contextmanager
def _loaded(
    data: Any, exif_transpose: bool = False, max_image_pixels: Optional[int] = None
) -> Iterator[Union[Image.Image, np.ndarray]]:
    """Yield the image of ``data`` (a PIL image or a uint8 array); a file this function
    opened is closed afterwards. Tensors become numpy views; EXIF is applied on request;
    encoded data over ``max_image_pixels`` is refused from its header."""
    if isinstance(data, np.ndarray):
        yield data
        return
    if _is_torch_tensor(data):
        yield _tensor_array(data)
        return
    if isinstance(data, Image.Image):
        yield _apply_exif(data, exif_transpose)
        return
    with _open_encoded(_encoded_source(data), max_image_pixels) as image:
        _check_pixels(image.size, max_image_pixels)
        yield _apply_exif(image, exif_transpose)


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


def _open_encoded(source: _Source, max_image_pixels: Optional[int]) -> Image.Image:
    """``Image.open(source)``, lazily, as the checkpoint opens encoded data (Pillow picks
    the first frame of animated files; no EXIF rotation).

    Under a ``max_image_pixels`` limit, an ICO is checked first (:func:`_check_ico`),
    since Pillow decodes it inside ``Image.open``. Data over Pillow's own limit is
    opened through the plugins (:func:`_open_unchecked`) when the limit allows its
    size; the caller checks the size of what is returned against the limit. A
    ``ValueError`` raised inside ``Image.open`` (an ICO whose image is shorter than its
    header says) becomes an :class:`ImageError`, as the decode errors of :func:`_naming`.
    """
    if max_image_pixels is not None:
        _check_ico(source, max_image_pixels)
    try:
        return Image.open(source)
    except ValueError as exc:
        raise ImageError(f"cannot read or decode it: {type(exc).__name__}: {exc}") from exc
    except Image.DecompressionBombError as exc:  # over Pillow's own limit
        try:
            image = _open_unchecked(source)
        except Image.DecompressionBombError as inner:  # raised by the plugin itself
            raise ImageTooLargeError(str(inner)) from inner
        width, height = image.size
        if max_image_pixels is not None and width * height > max_image_pixels:
            image.close()
            raise ImageTooLargeError(str(exc)) from exc
        return image


def _open_unchecked(source: _Source) -> Image.Image:
    """Open encoded data whose header is over Pillow's own limit, lazily.

    ``Image.open`` refuses such data (``DecompressionBombError``) before anything
    else; this asks the format plugins directly, as ``Image.open`` does minus that
    check, reading only the header. Used only where the caller's
    ``max_image_pixels`` allows the size, or to read the size (sizing works on any
    size). A file opened here is closed with the image.
    """
    is_path = not isinstance(source, io.BytesIO)
    fp: Any = open(source, "rb") if is_path else source  # noqa: SIM115 (closed by the image, or below)
    fp.seek(0)
    prefix = fp.read(16)
    Image.init()
    for format_id in Image.ID:
        factory, accept = Image.OPEN[format_id]
        if accept is not None and not accept(prefix):
            continue
        fp.seek(0)
        try:
            image = factory(fp, os.fspath(source) if is_path else "")
        except (OSError, SyntaxError, ValueError):
            continue
        image._exclusive_fp = is_path  # close the file with the image, as Image.open(path) does
        return image
    fp.close()
    raise Image.UnidentifiedImageError("cannot identify image file")


@contextlib.contextmanager
def _binary_file(source: _Source) -> Iterator[BinaryIO]:
    """``source`` as a binary file at offset 0: the ``BytesIO`` itself, or the path
    opened for reading (closed afterwards)."""
    if isinstance(source, io.BytesIO):
        source.seek(0)
        yield source
        return
    with open(source, "rb") as fp:
        yield fp


#: The first 4 bytes of an ICO (reserved 0, type 1), ``_MAGIC`` of ``PIL/IcoImagePlugin.py``.
_ICO_MAGIC = b"\x00\x00\x01\x00"

#: The signature ``IcoFile.frame`` looks for to read an entry as a PNG (else as a DIB).
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

#: The DIB header sizes whose width and height are 32-bit (``BmpImagePlugin._bitmap``:
#: ``BITMAPINFOHEADER`` and later); 12 (``BITMAPCOREHEADER``) has 16-bit ones; Pillow
#: refuses any other size.
_DIB_INFO_HEADERS = frozenset({40, 52, 56, 64, 108, 124})


class _IcoEntry(NamedTuple):
    """One entry of an ICO directory (``IcoFile.__init__``) and the size of its image."""

    index: int  # position in the directory
    dim: tuple[int, int]  # the directory's width and height (a 0 byte means 256)
    color_depth: int  # Pillow's order among entries of equal area (lowest first)
    offset: int  # where the entry's image starts in the file
    kind: str  # "PNG" or "DIB", told apart as ``IcoFile.frame`` does
    size: Optional[tuple[int, int]]  # the image's own size; None when its header cannot be read


def _ico_entries(source: _Source) -> Optional[list[_IcoEntry]]:
    """The entries of an ICO, in the order Pillow ranks them, from their headers only.

    Mirrors ``PIL/IcoImagePlugin.py``, ``IcoFile.__init__``: a 6-byte header (reserved,
    type, count: ``<HHH``) and one 16-byte entry per image (width and height bytes, 0
    meaning 256; colours; reserved; planes; bits per pixel; data size; data offset:
    ``<BBBBHHII``), ranked by area, largest first, ties by colour depth, lowest first.
    Each image's size comes from its first 24 bytes (:func:`_ico_image_size`). The
    first-ranked entry is the one ``IcoImageFile`` decodes (Pillow 10.4 to 13 alike);
    when it is a PNG, its size is the one Pillow's PNG parser gives
    (:func:`_ico_png_size`).

    Returns:
        None when ``source`` does not start with the ICO magic, or its directory is
        cut short (Pillow's ICO plugin refuses such a file without decoding it).
    """
    with _binary_file(source) as fp:
        head = fp.read(6)
        if len(head) < 6 or not head.startswith(_ICO_MAGIC):
            return None
        count = int.from_bytes(head[4:], "little")
        directory = fp.read(16 * count)
        if len(directory) < 16 * count:
            return None
        entries = []
        for index in range(count):
            width, height, colours, _, _, bpp, _, offset = struct.unpack_from("<BBBBHHII", directory, 16 * index)
            color_depth = bpp or (colours != 0 and math.ceil(math.log(colours, 2))) or 256
            kind, size = _ico_image_size(fp, offset)
            entries.append(_IcoEntry(index, (width or 256, height or 256), color_depth, offset, kind, size))
        entries.sort(key=lambda entry: entry.color_depth)
        entries.sort(key=lambda entry: entry.dim[0] * entry.dim[1], reverse=True)
        if entries and entries[0].kind == "PNG":
            entries[0] = entries[0]._replace(size=_ico_png_size(fp, entries[0].offset))
    return entries


def _ico_image_size(fp: BinaryIO, offset: int) -> tuple[str, Optional[tuple[int, int]]]:
    """``(kind, size)`` of the image an ICO entry holds at ``offset``, from its first 24 bytes.

    As ``IcoFile.frame`` tells them apart: a PNG when it starts with the PNG signature,
    its size then the width and height of its first chunk, an ``IHDR`` (big-endian
    u32); otherwise a DIB (a BMP without its file header), whose size is read as
    ``BmpImagePlugin._bitmap`` reads it: u16 sides in a 12-byte header, u32 in the
    others, the height taken as ``2**32 - height`` when its top byte is 0xFF (a
    top-down bitmap); then halved, as ``IcoFile.frame`` does, since a DIB in an ICO
    counts its AND mask in the height. ``size`` is None when the header is cut short,
    or is not one that Pillow reads.
    """
    fp.seek(offset)
    data = fp.read(24)
    if data.startswith(_PNG_SIGNATURE):
        if len(data) < 24 or data[12:16] != b"IHDR":
            return "PNG", None
        return "PNG", struct.unpack(">II", data[16:24])
    header_size = int.from_bytes(data[:4], "little") if len(data) >= 12 else 0
    if header_size == 12:
        width, height = struct.unpack_from("<HH", data, 4)
    elif header_size in _DIB_INFO_HEADERS:
        width, height = struct.unpack_from("<II", data, 4)
        if data[11] == 0xFF:
            height = 2**32 - height
    else:
        return "DIB", None
    return "DIB", (width, height // 2)


def _ico_png_size(fp: BinaryIO, offset: int) -> Optional[tuple[int, int]]:
    """The size of the PNG at ``offset`` as ``IcoFile.frame`` opens it (``PngImageFile``,
    headers only): that of its last ``IHDR`` before the image data, wherever it lies,
    which the first chunk alone does not tell. None when Pillow cannot read the PNG's
    header (``IcoFile.frame`` then fails on it before decoding anything)."""
    fp.seek(offset)
    try:
        return PngImagePlugin.PngImageFile(fp).size
    except (ValueError, *_DECODE_ERRORS):
        return None


def _check_ico(source: _Source, max_image_pixels: int) -> None:
    """Refuse an ICO with :class:`ImageTooLargeError`, before Pillow's ICO plugin decodes
    it inside ``Image.open``, when one of its entries claims more than ``max_image_pixels``.

    Every entry whose image header can be read is checked (:func:`_ico_entries`): its
    directory size, and its image's own size. Checking them all, not only the one
    Pillow picks, is conservative, and does not rest on Pillow's choice of entry.
    Entries whose header cannot be read are left to Pillow, which fails on such an
    entry if it picks it. Data that is not an ICO is left as it is.
    """
    for entry in _ico_entries(source) or ():
        if entry.size is not None:
            _check_pixels(entry.dim, max_image_pixels, f"ICO entry {entry.index}'s directory size")
            _check_pixels(entry.size, max_image_pixels, f"ICO entry {entry.index}'s {entry.kind}")


def _header_size(data: Any, exif_transpose: bool) -> tuple[int, int]:
    """``(width, height)`` of one input as the pixel path will see it, reading no pixels
    where it can (file headers; tensor shapes; EXIF orientations 5..8 swap the sides).
    No ``max_image_pixels`` limit applies: sizing works on any size. An ICO, which
    Pillow decodes to open it, is sized from its headers (:func:`_ico_entries`)."""
    if isinstance(data, np.ndarray):
        _check_array(data)
        return int(data.shape[1]), int(data.shape[0])
    if isinstance(data, Image.Image):
        return _oriented_size(data, exif_transpose)
    if _is_torch_tensor(data):
        height, width, _, _ = _tensor_layout(data)
        if height == 0 or width == 0:
            raise ImageError(f"image width and height must be positive, got shape {list(data.shape)}")
        return width, height
    source = _encoded_source(data)
    entries = _ico_entries(source)
    if entries and entries[0].size is not None:  # an ICO: what Pillow decodes (it has no EXIF)
        return entries[0].size
    with _open_encoded(source, None) as image:  # the header only
        return _oriented_size(image, exif_transpose)


def _oriented_size(image: Image.Image, exif_transpose: bool) -> tuple[int, int]:
    """``image.size``, swapped when ``exif_transpose`` would turn the image (5..8)."""
    width, height = image.size
    if exif_transpose and _exif_orientation(image) in _SIDE_SWAPPING_ORIENTATIONS:
        return height, width
    return width, height


# ---------------------------------------------------------------------------
# PIL modes: the reference's mode steps, with the resample in Rust where it is 8-bit
# ---------------------------------------------------------------------------


def _convert(image: Image.Image, mode: str) -> Image.Image:
    """``image.convert(mode)``; Pillow's ``ValueError`` becomes a clear :class:`ImageError`."""
    try:
        return image.convert(mode)
    except ValueError as exc:
        raise ImageError(
            f"cannot convert a mode {image.mode} image to {mode} (Pillow: {exc}); "
            "the checkpoint's processor fails on it the same way"
        ) from exc


def _composite_input(image: Image.Image, cfg: MediaProcConfig, *, owned: bool) -> np.ndarray:
    """What ``fill_transparent_bg_with(image, bg)`` starts from, as a uint8 array.

    The Rust core then does the rest of reference-spec §4.2 on it: composite an RGBA
    (or LA) array onto the background, or drop its alpha when ``bg`` is None.

    * L / LA / RGB / RGBA (L only without ``transparency`` or without a background):
      the bands as they are (no Pillow step).
    * ``bg`` None: ``convert("RGB")``. A ``P`` image whose ``transparency`` is bytes
      (PNG ``tRNS``) is converted from a copy without that entry: the same pixels,
      without the warning Pillow gives because bytes cannot be carried into RGB.
    * ``bg`` set: ``convert("RGBA")`` when the image has an ``A`` band or a
      ``transparency`` entry, else ``convert("RGB")``.

    ``owned``: ``image`` is ours (a resize result), so it may be changed in place.
    """
    mode = image.mode
    bg = cfg.transparent_bg_config
    has_transparency = "transparency" in image.info
    if mode in ("RGB", "RGBA", "LA") or (mode == "L" and (bg is None or not has_transparency)):
        return np.asarray(image)
    if bg is None:
        if mode == "P" and isinstance(image.info.get("transparency"), bytes):
            if not owned:
                image = image.copy()
            del image.info["transparency"]
        return np.asarray(_convert(image, "RGB"))
    if "A" in image.getbands() or has_transparency:
        return np.asarray(_convert(image, "RGBA"))
    return np.asarray(_convert(image, "RGB"))


def _delegated_resize_order_check(mode: str, size: tuple[int, int], new_size: tuple[int, int], compat: str) -> None:
    """Refuse a Pillow-resized mode when ``pillow_compat`` is not the installed Pillow's
    order and the order changes the bytes (both passes run, vertical-first rule holds)."""
    installed = resolve_pillow_compat("auto")
    if compat == installed:
        return
    (width, height), (new_width, new_height) = size, new_size
    dh, dw = height - new_height, width - new_width
    if dw != 0 and dh > 0 and dh > 2 * dw:
        raise ImageError(
            f"mode {mode} images are resized by the installed Pillow {PIL.__version__} "
            f"(its 16/32-bit resample), whose pass order is pillow_compat={installed!r}, not "
            f"{compat!r}, and the order changes the result for {width}x{height} -> "
            f"{new_width}x{new_height}; use pillow_compat='auto'"
        )


def _resize_in_mode(image: Image.Image, new_size: tuple[int, int], compat: str) -> Image.Image:
    """``image.resize(new_size, BICUBIC)`` in the image's own mode, as Pillow does it
    (reference-spec §5.2), for every mode but L / LA / RGB / RGBA (done by the core).

    * ``P``, ``1``: Pillow's own resize (it forces NEAREST; palette and ``info`` kept).
    * CMYK, RGBX, YCbCr, HSV, LAB, RGBa, La, PA, L (with ``transparency``): the 8-bit
      per-channel bicubic in Rust (``pillow_compat`` honoured), then a PIL image of the
      same mode with the bytes and ``info`` that Pillow's resize gives (padding byte 0
      for 3-band modes; an empty palette for PA, as Pillow's resample leaves it).
    * Anything else (``I;16``, ``I;16L``, ``I;16B``, ``I;16N``, ``I``, ``F``): Pillow's
      own 16/32-bit resize; :class:`ImageError` when ``pillow_compat`` asks for the other
      Pillow's pass order on a size where the order matters.
    """
    mode = image.mode
    if mode in _NEAREST_MODES:
        return image.resize(new_size, Image.Resampling.BICUBIC)  # Pillow switches to NEAREST
    if mode not in _RUST_RESIZE_MODES:
        _delegated_resize_order_check(mode, image.size, new_size, compat)
        return image.resize(new_size, Image.Resampling.BICUBIC)
    array = np.asarray(image)
    flip = _SIGNED_BANDS.get(mode)
    if flip is not None:
        array = array ^ flip  # the bytes Pillow stores (and resamples) for LAB
    resized = _native.resize_bicubic(array, new_size[0], new_size[1], pillow_compat=compat)
    if mode in _THREE_BAND_MODES:
        # Pillow stores 3 bands in 4-byte pixels and its resample zeroes the 4th byte,
        # which LAB -> RGBA (LittleCMS) copies into the alpha; ``merge`` writes it as 0 too
        # (``frombuffer`` would write 255) and takes the bands as Pillow stores them (LAB's
        # a and b still XOR 128, so no flip back).
        out = Image.merge(mode, [Image.fromarray(np.ascontiguousarray(resized[..., i])) for i in range(3)])
    elif mode == "PA":
        # Pillow's BICUBIC resize of PA returns an image whose palette is empty (its
        # resample does not copy it), so the checkpoint sees black colours with the
        # resized alpha; a new PA image has that same empty palette.
        out = Image.new("PA", new_size)
        out.frombytes(resized.tobytes())
    else:
        out = Image.frombuffer(mode, new_size, resized, "raw", mode, 0, 1)
    out.info = image.info.copy()
    return out


def _pixels(
    image: Union[Image.Image, np.ndarray], cfg: MediaProcConfig, compat: str
) -> tuple[np.ndarray, Optional[tuple[int, int]]]:
    """Turn one loaded image into (uint8 HWC array, original size if already resized).

    Arrays and PIL ``L`` (without ``transparency``, or with no background), ``LA``,
    ``RGB``, ``RGBA`` go to Rust as they are. For other modes the reference's mode steps
    run here (reference-spec §3.1, §4.1, §5.2): before the resize, Pillow's ``convert``
    (as ``fill_transparent_bg_with`` does); under ``after_resize``, the resize in the
    image's own mode (:func:`_resize_in_mode`), then the ``convert``; Rust composites,
    pads, normalises and patchifies.
    """
    if isinstance(image, np.ndarray):
        _check_array(image)
        return np.ascontiguousarray(image), None  # copies only a non-contiguous array
    mode = image.mode
    if mode in _NATIVE_MODES and not (
        mode == "L" and cfg.transparent_bg_config is not None and "transparency" in image.info
    ):
        return np.asarray(image), None
    if cfg.transparent_bg_fill_stage == "before_resize":
        return _composite_input(image, cfg, owned=False), None
    width, height = image.size
    _, new_width, new_height, _, _ = _native.navit_resize_config(width, height, cfg.native)
    if (new_width, new_height) == (width, height):  # Pillow's resize would be a copy
        return _composite_input(image, cfg, owned=False), None
    resized = _resize_in_mode(image, (new_width, new_height), compat)
    return _composite_input(resized, cfg, owned=True), (width, height)


def _as_list(images: Any) -> list[Any]:
    if isinstance(images, (list, tuple)):
        return list(images)
    return [images]


def _check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


#: Marks an option that was not passed (None is a valid ``max_image_pixels``).
_UNSET: Any = object()

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
    max_image_pixels: Optional[int] = DEFAULT_MAX_IMAGE_PIXELS

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
        if not 1 <= num_threads <= 1024:
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


#: What Pillow's openers and decoders raise on a corrupt or unreadable file besides
#: ``ValueError``: ``OSError`` (missing, truncated, unidentified), ``SyntaxError``
#: (broken PNG chunks), ``NotImplementedError`` (DDS), ``RuntimeError`` (AVIF),
#: ``KeyError`` / ``IndexError`` / ``struct.error`` / ``EOFError`` (other plugins).
_DECODE_ERRORS = (OSError, SyntaxError, NotImplementedError, RuntimeError, KeyError, IndexError, EOFError, struct.error)


@contextlib.contextmanager
def _naming(index: int) -> Iterator[None]:
    """Put the batch index in front of image errors; a file or bytes object that
    Pillow cannot read or decode becomes an :class:`ImageError`."""
    try:
        yield
    except ImageError as exc:
        raise type(exc)(f"image {index}: {exc}") from exc
    except _DECODE_ERRORS as exc:
        raise ImageError(f"image {index}: cannot read or decode it: {type(exc).__name__}: {exc}") from exc


def _run(
    images: Sequence[Any],
    cfg: MediaProcConfig,
    opts: _Options,
    out: Optional[np.ndarray] = None,
    indices: Optional[Sequence[int]] = None,
) -> tuple[np.ndarray, npt.NDArray[np.int64]]:
    """Load every image, then preprocess the batch in one native call.

    ``indices``: the numbers errors give the images (their batch positions by default).
    """
    arrays: list[np.ndarray] = []
    resized_from: list[Optional[tuple[int, int]]] = []
    for position, item in enumerate(images):
        with _naming(position if indices is None else indices[position]):
            with _loaded(_unwrap_media(item), opts.exif_transpose, opts.max_image_pixels) as image:
                array, original = _pixels(image, cfg, opts.compat)
        arrays.append(array)
        resized_from.append(original)
    pixel_values, grid_thws = _native.preprocess(
        arrays,
        cfg.native,
        pillow_compat=opts.compat,
        resized_from=resized_from,
        out=None if out is None else _as_native_out(out, opts.dtype),
        dtype=opts.dtype,
        num_threads=opts.num_threads,
    )
    return (out if out is not None else _from_native(pixel_values, opts.dtype)), grid_thws


def preprocess(
    images: Any,
    media_proc_cfg: Union[Mapping[str, Any], MediaProcConfig],
    *,
    pillow_compat: str = "auto",
    exif_transpose: bool = False,
    dtype: str = "float32",
    num_threads: Optional[int] = None,
    out: Optional[np.ndarray] = None,
    max_image_pixels: Optional[int] = DEFAULT_MAX_IMAGE_PIXELS,
) -> dict[str, np.ndarray]:
    """Preprocess images exactly as the Kimi-K3 / K2.5 checkpoint processor does.

    Reproduces ``KimiK3VisionProcessor.preprocess`` (``kimi_k3_vision_processing.py``):
    NaViT sizing, Pillow BICUBIC resize, background compositing when
    ``transparent_bg_config`` is set (before or after the resize), zero padding to a
    multiple of ``patch_size * merge_kernel_size``, normalisation and patchify —
    the same float32 bits (reference-spec §3, §4, §5.2).

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
              image). A non-C-contiguous array is copied once
              (``np.ascontiguousarray``); others, read-only ones included, are read in
              place.
            * torch ``uint8`` tensor (torch is never imported by this package), read
              as sglang's staging helpers do: 2-D is ``HW``; 3-D with a first
              dimension of 1, 3 or 4 is ``CHW``, any other 3-D is ``HWC``. ``CHW`` and
              GPU tensors are copied once to a host ``HWC`` array.
            * ``bytes`` / ``bytearray`` / ``memoryview`` of an encoded file, a file
              path (``str`` / ``os.PathLike``) or a ``data:`` URL (base64), decoded by
              Pillow as the checkpoint does: first frame of animations, mode kept
              (palette, ``transparency``, CMYK, 16-bit grey), no EXIF rotation.
            * a media dict ``{"type": "image", "image": ...}`` around any of these
              (an optional ``"content_hash"`` is ignored here; see
              :func:`prepare_kimi_k3_encoder_inputs`).
        media_proc_cfg: the checkpoint's ``media_proc_cfg`` dict (or a
            :class:`MediaProcConfig`), e.g. ``kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG``.
        pillow_compat: ``"auto"`` (the installed Pillow), ``"12"`` (horizontal pass
            first) or ``"13"`` (Pillow 13: vertical first for tall down-scales).
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

    Returns:
        ``{"pixel_values": [N, 3, patch_size, patch_size] of ``dtype``,
        "grid_thws": int64 [n_images, 3]}``; ``N`` is the sum of ``h * w`` over the
        grids, patches in image order, row-major over each grid. An empty list gives
        zero-row arrays.

    Raises:
        ValueError: ``Kimi-K3 image processor is missing deferred-preprocessing
            config: ...``; ``Unsupported data type: {type}``; ``Kimi-K3 preprocessing
            expects raw uint8 pixels, got {dtype}`` (arrays and tensors);
            ``Unsupported Kimi-K3 image channel count: {channels}``; ``Unsupported
            Kimi-K3 encoder media item: {item}``; :class:`ConfigError` /
            :class:`ImageError` (``ValueError`` subclasses) for bad config values or
            image shapes, for a mode Pillow cannot convert to RGB, and for an ``I;16*``
            / ``I`` / ``F`` image under ``after_resize`` when ``pillow_compat`` is not
            the installed Pillow's and the pass order changes its bytes; the
            side-limit text as :class:`KimiK3Error`.
        ImageTooLargeError: (an :class:`ImageError`) an encoded image over
            ``max_image_pixels``.
        ImageError: a file or bytes object that cannot be read or decoded (missing,
            truncated, not an image), naming its batch index; a wrong ``out``.
        TypeError: ``media_proc_cfg`` is not a mapping; an unknown key inside
            ``transparent_bg_config``; ``exif_transpose`` is not a bool; ``out`` is not
            an array; ``num_threads`` is not an int.

    Note:
        The pixel work runs with the GIL released, so threads preprocess in parallel.
        Input arrays are read in place: mutating one from another thread during the
        call gives unspecified (but memory-safe) output for that image. No Pillow
        warning is raised for palette images with a bytes ``transparency``.

    Example:
        >>> import numpy as np, kimi_k3_rs
        >>> out = kimi_k3_rs.preprocess(np.zeros((224, 224, 3), np.uint8),
        ...                             kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)
        >>> out["pixel_values"].shape, out["grid_thws"].tolist()
        ((256, 3, 14, 14), [[1, 16, 16]])
    """
    cfg = MediaProcConfig.from_dict(media_proc_cfg)
    opts = _Options.make(pillow_compat, exif_transpose, dtype, num_threads, max_image_pixels)
    pixel_values, grid_thws = _run(_as_list(images), cfg, opts, out)
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
        tensors = {}
        for key, value in out.items():
            if value.dtype.name in ("bfloat16", "uint16") and key == "pixel_values":
                tensors[key] = torch.from_numpy(value.view(np.uint16)).view(torch.bfloat16)
            else:
                tensors[key] = torch.from_numpy(value)
        return tensors
    raise ValueError(f"return_tensors must be None, 'np' or 'pt', got {return_tensors!r}")


#: File name of a checkpoint's image-processor config (read by ``from_pretrained``,
#: written by ``save_pretrained``).
PREPROCESSOR_CONFIG_NAME = "preprocessor_config.json"


#: transformers' ``BatchFeature`` class, None when transformers cannot be imported, or
#: ``_UNSET`` until the first :meth:`KimiK3VisionProcessor.preprocess` call looks.
_BATCH_FEATURE: Any = _UNSET


def _batch_feature(data: dict[str, Any]) -> Mapping[str, Any]:
    """``transformers.BatchFeature(data)`` when transformers can be imported, else ``data``.

    The checkpoint's processor returns a ``BatchFeature``; serving code that checks
    for it (or calls ``.to(device)`` on it) gets one. The values are wrapped as they
    are (no ``tensor_type`` conversion, so no copy). The import is tried once per
    process, on the first call (a failed import costs ~0.15 ms, too much to repeat per
    call); an install that fails to import counts as absent.
    """
    global _BATCH_FEATURE
    if _BATCH_FEATURE is _UNSET:
        try:
            from transformers.feature_extraction_utils import BatchFeature
        except Exception:  # not installed (ImportError), or broken: plain dicts
            BatchFeature = None
        _BATCH_FEATURE = BatchFeature
    if _BATCH_FEATURE is None:
        return data
    return _BATCH_FEATURE(data=data)


def _jsonable(value: Any) -> Any:
    """A copy of a config value with numpy arrays / scalars and tuples as JSON types."""
    if isinstance(value, Mapping):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    return copy.deepcopy(value)


class KimiK3VisionProcessor:
    """Drop-in for the checkpoint's ``KimiK3VisionProcessor`` (and K2.5's) image path.

    Reproduces ``kimi_k3_vision_processing.KimiK3VisionProcessor`` where servers touch
    it: the ``media_proc_cfg`` attribute and ``preprocess(medias, return_tensors)``.

    The config is validated once, here; ``media_proc_cfg`` returns a fresh copy of it
    on every access, so mutating that copy never changes what the processor does.

    Args:
        media_proc_cfg: the checkpoint's ``media_proc_cfg`` dict; validated here.
        pillow_compat: ``"auto"``, ``"12"`` or ``"13"`` (see :func:`preprocess`).
        exif_transpose: apply EXIF orientation to PIL and decoded images (default
            False, as the checkpoint; see :func:`preprocess`).
        dtype, num_threads, max_image_pixels: as :func:`preprocess`, for every call.

    Raises:
        ValueError / TypeError: as :meth:`MediaProcConfig.from_dict` and the options
            of :func:`preprocess`.
    """

    def __init__(
        self,
        media_proc_cfg: Mapping[str, Any],
        *,
        pillow_compat: str = "auto",
        exif_transpose: bool = False,
        dtype: str = "float32",
        num_threads: Optional[int] = None,
        max_image_pixels: Optional[int] = DEFAULT_MAX_IMAGE_PIXELS,
    ) -> None:
        self.config = MediaProcConfig.from_dict(media_proc_cfg)
        self._media_proc_cfg: dict[str, Any] = copy.deepcopy(dict(media_proc_cfg))
        self.options = _Options.make(pillow_compat, exif_transpose, dtype, num_threads, max_image_pixels)

    @property
    def media_proc_cfg(self) -> dict[str, Any]:
        """A copy of the ``media_proc_cfg`` dict the processor was built with."""
        return copy.deepcopy(self._media_proc_cfg)

    @property
    def pillow_compat(self) -> str:
        """The resolved pass order, ``"12"`` or ``"13"``."""
        return self.options.compat

    @property
    def exif_transpose(self) -> bool:
        """Whether EXIF orientation is applied."""
        return self.options.exif_transpose

    @classmethod
    def from_pretrained(
        cls,
        path: Union[str, "os.PathLike[str]"],
        **options: Any,
    ) -> KimiK3VisionProcessor:
        """Load ``preprocessor_config.json`` (a file, or a checkpoint folder holding it).

        Only its nested ``media_proc_cfg`` is read; top-level keys beside it are ignored.
        ``options`` are the keyword options of the constructor.

        Raises:
            FileNotFoundError: no such file.
            ConfigError: the file has no ``media_proc_cfg`` object; bad values.
        """
        return cls(load_media_proc_cfg(path), **options)

    def to_dict(self) -> dict[str, Any]:
        """The ``preprocessor_config.json`` content of this processor.

        The checkpoint's layout, ``{"media_proc_cfg": {...}}``, with the
        ``media_proc_cfg`` the processor was built with (unknown keys such as the video
        keys and ``config_type`` included), as JSON types: tuples and numpy arrays become
        lists, numpy scalars Python numbers. The per-call options (``pillow_compat``,
        ``exif_transpose``, ``dtype``, ``num_threads``, ``max_image_pixels``) are this
        library's runtime choices, not part of the checkpoint's config: they are not
        included; pass them again to :meth:`from_pretrained`.

        Returns:
            A new dict; mutating it changes nothing in the processor.

        Example:
            >>> proc = KimiK3VisionProcessor(kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
            >>> proc.to_dict()["media_proc_cfg"]["in_patch_limit"]
            65536
        """
        return {"media_proc_cfg": _jsonable(self._media_proc_cfg)}

    def save_pretrained(self, save_directory: Union[str, "os.PathLike[str]"]) -> list[str]:
        """Write ``preprocessor_config.json`` (:meth:`to_dict`) into a folder.

        ``KimiK3VisionProcessor.from_pretrained(save_directory)`` then builds a
        processor with the same ``media_proc_cfg`` (and so the same outputs, given the
        same options). The file is written to a temporary name and renamed, so a reader
        never sees half a file; an existing ``preprocessor_config.json`` is replaced.

        Args:
            save_directory: the folder; created (with its parents) if missing.

        Returns:
            ``[path]``: the file written (as transformers' ``save_pretrained`` returns
            the files it wrote).

        Raises:
            OSError: the folder cannot be created (e.g. ``save_directory`` is a file) or
                the file cannot be written.
            TypeError: a value of an unknown ``media_proc_cfg`` key cannot be written
                as JSON.
        """
        folder = os.fspath(save_directory)
        os.makedirs(folder, exist_ok=True)
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"
        path = os.path.join(folder, PREPROCESSOR_CONFIG_NAME)
        # a fresh name beside the target (same file system), opened like any new file
        # (permissions from the umask, unlike mkstemp's 0600)
        tmp = os.path.join(folder, f".{PREPROCESSOR_CONFIG_NAME}.{os.getpid()}.{secrets.token_hex(8)}.tmp")
        try:
            with open(tmp, "x", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return [path]

    def preprocess(self, medias: Sequence[Any], return_tensors: Optional[str] = None) -> Mapping[str, Any]:
        """Preprocess media dicts or bare images, as the checkpoint processor's ``preprocess``.

        Args:
            medias: one image / media dict, or a list / tuple of
                ``{"type": "image", "image": ...}`` dicts or bare images, in any mix
                (see :func:`preprocess` for the accepted image types).
            return_tensors: ``None`` / ``"np"`` for numpy arrays, ``"pt"`` for torch
                tensors (sharing the arrays' memory, no copy; needs torch).

        Returns:
            A transformers ``BatchFeature`` when transformers can be imported (what the
            checkpoint's processor returns), else a plain ``dict``; the same keys and
            values either way: ``"pixel_values"`` (``[N, 3, ps, ps]`` of the
            processor's ``dtype``, float32 by default) and ``"grid_thws"`` (int64
            ``[n, 3]``). An empty list gives an empty mapping, as the reference's
            ``BatchFeature({})``.

        Raises:
            ValueError: ``return_tensors`` is not None, ``"np"`` or ``"pt"``; and as
                :func:`preprocess`: :class:`ImageError` for an input that cannot be read
                or decoded (naming its batch index), :class:`ImageTooLargeError` for an
                encoded input over ``max_image_pixels``, sglang's messages for
                unsupported inputs.
            TypeError: as :func:`preprocess`.
            ImportError: ``return_tensors="pt"`` without torch.
        """
        medias = _as_list(medias)
        if not medias:
            return _batch_feature({})
        pixel_values, grid_thws = _run(medias, self.config, self.options)
        return _batch_feature(
            _to_tensors({"pixel_values": pixel_values, "grid_thws": grid_thws}, return_tensors)
        )

    __call__ = preprocess


@dataclass
class KimiK3EncoderInputs:
    """Geometry of a batch, computed without touching pixels; pixels on demand.

    Attributes:
        grid_thws: int64 ``[n, 3]``, ``(1, h_patches, w_patches)`` per image.
        resize_configs: per image, the dict :func:`navit_resize_config` returns.
        num_tokens: per image, the LLM token count.
        original_image_sizes: per image, ``[width, height]`` in pixels (after the EXIF
            transpose when ``exif_transpose`` was set).
        content_hashes: per image, the ``"content_hash"`` of its media dict, unchanged,
            or None (no media dict, or no such key).
    """

    grid_thws: npt.NDArray[np.int64]
    resize_configs: list[dict[str, int]]
    num_tokens: list[int]
    original_image_sizes: list[list[int]]
    content_hashes: list[Any]
    _images: list[Any] = field(repr=False)
    _config: MediaProcConfig = field(repr=False)
    _options: _Options = field(repr=False)

    def materialize(self, indices: Optional[Sequence[int]] = None) -> list[npt.NDArray[np.float32]]:
        """Preprocess the images at ``indices`` (all when None), in that order.

        Returns:
            One float32 ``[h * w, 3, ps, ps]`` array per index, each equal to
            :func:`preprocess` on that image alone.

        Raises:
            IndexError: an index out of range.
            ValueError: ``Kimi-K3 deferred CPU preprocessing produced wrong grids``
                (sglang's check) when an image no longer has the size read up front
                (e.g. a file replaced in between). Otherwise as :func:`preprocess`.
        """
        order = list(range(len(self._images))) if indices is None else list(indices)
        chosen = [self._images[i] for i in order]
        if not chosen:
            return []
        pixel_values, grid_thws = _run(chosen, self._config, self._options, indices=order)
        if not np.array_equal(grid_thws, self.grid_thws[order]):
            raise ValueError("Kimi-K3 deferred CPU preprocessing produced wrong grids")
        rows = np.cumsum(grid_thws.prod(axis=1))[:-1]
        return list(np.split(pixel_values, rows))


def prepare_kimi_k3_encoder_inputs(
    images: Any,
    image_processor_or_media_proc_cfg: Any,
    *,
    pillow_compat: Optional[str] = None,
    exif_transpose: Optional[bool] = None,
    dtype: Optional[str] = None,
    num_threads: Optional[int] = None,
    max_image_pixels: Any = _UNSET,
) -> KimiK3EncoderInputs:
    """Compute every image's geometry up front; defer pixel work to ``materialize``.

    Reproduces sglang's ``prepare_kimi_k3_encoder_inputs``
    (``kimi_k3_image_processing.py``): every rank computes grids and token counts;
    only the rank that owns an image materialises its ``pixel_values``. Files are
    opened lazily (header only) to read their size, whatever their size; tensors are
    not copied. With ``exif_transpose`` the orientation is read too.

    Args:
        images: as :func:`preprocess`; media dicts may carry ``"content_hash"``, kept
            per image in :attr:`KimiK3EncoderInputs.content_hashes`.
        image_processor_or_media_proc_cfg: an object with a ``media_proc_cfg`` dict
            attribute (e.g. :class:`KimiK3VisionProcessor`) or the dict itself. Given a
            :class:`KimiK3VisionProcessor`, its validated config and its options are
            used, so ``materialize`` gives exactly what its ``preprocess`` gives.
        pillow_compat, exif_transpose, dtype, num_threads, max_image_pixels: as
            :func:`preprocess`, for ``materialize``; when not given, the processor's
            own (a :class:`KimiK3VisionProcessor`), else :func:`preprocess`'s defaults.
            The sizes follow ``exif_transpose`` (orientations 5..8 swap the sides).

    Returns:
        A :class:`KimiK3EncoderInputs`.

    Raises:
        ValueError: ``Kimi-K3 EPD owner-side preprocessing requires
            image_processor.media_proc_cfg`` when there is no ``media_proc_cfg`` dict;
            the missing-keys message; ``Unsupported Kimi-K3 encoder media item: {item}``;
            ``Unsupported data type: {type}``; dtype / channel messages for arrays and
            tensors; :class:`ImageError` for a file that cannot be read.
        TypeError: ``exif_transpose`` is not a bool.
    """
    processor = image_processor_or_media_proc_cfg
    if isinstance(processor, KimiK3VisionProcessor):
        cfg = processor.config
        base = processor.options
    else:
        media_proc_cfg = processor if isinstance(processor, Mapping) else getattr(processor, "media_proc_cfg", None)
        if not isinstance(media_proc_cfg, Mapping):
            raise ValueError("Kimi-K3 EPD owner-side preprocessing requires image_processor.media_proc_cfg")
        cfg = MediaProcConfig.from_dict(media_proc_cfg)
        flag = getattr(processor, "exif_transpose", False)
        base = _Options.make(exif_transpose=flag if isinstance(flag, bool) else False)
    opts = _Options.make(
        base.compat if pillow_compat is None else pillow_compat,
        base.exif_transpose if exif_transpose is None else exif_transpose,
        base.dtype if dtype is None else dtype,
        base.num_threads if num_threads is None else num_threads,
        base.max_image_pixels if max_image_pixels is _UNSET else max_image_pixels,
    )
    split = [_split_media(item) for item in _as_list(images)]
    items = [image for image, _ in split]
    try:
        sizes = [_header_size(item, opts.exif_transpose) for item in items]  # reads headers only
    except (ImageError, *_DECODE_ERRORS):
        for index, item in enumerate(items):  # again, to name the image that fails
            with _naming(index):
                _header_size(item, opts.exif_transpose)
        raise
    configs = [_resize_dict(t) for t in _native.navit_resize_configs(sizes, cfg.native)]
    ps = cfg.patch_size
    grid = np.ones((len(configs), 3), dtype=np.int64)
    grid[:, 1] = [(r["new_height"] + r["pad_height"]) // ps for r in configs]
    grid[:, 2] = [(r["new_width"] + r["pad_width"]) // ps for r in configs]
    return KimiK3EncoderInputs(
        grid_thws=grid,
        resize_configs=configs,
        num_tokens=[r["num_tokens"] for r in configs],
        original_image_sizes=[[w, h] for w, h in sizes],
        content_hashes=[content_hash for _, content_hash in split],
        _images=items,
        _config=cfg,
        _options=opts,
    )
