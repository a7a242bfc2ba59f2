"""Encoded images (bytes, paths, data URLs) to what the core takes, with the format
allow-list and the decompression-bomb guards.

:func:`load` hands a JPEG or PNG the core decodes itself to the core as it is
(:func:`route`, :mod:`kimi_k3_rs._input.native`); it opens the rest as the checkpoint's
``kimi_k3_vision_processing.py: _to_pil`` does (``Image.open``, lazily; first frame; no
EXIF rotation), refusing data whose header claims more than ``max_image_pixels`` before
anything is decoded, and takes it through the reference's mode steps
(:func:`kimi_k3_rs._input.pil.core_pixels`).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import contextvars
import io
import os
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO, Union

import numpy as np
from PIL import Image, ImageFile
from PIL import _imaging as _pillow_core  # what ``PIL.Image.core`` is

from .. import _files, _native, errors
from ..errors import ImageError
from . import ico
from .native import NATIVE_FORMATS, in_force
from .pil import SIDE_SWAPPING_ORIENTATIONS, apply_exif, core_pixels, exif_orientation

if TYPE_CHECKING:
    from ..config import MediaProcConfig
    from ..options import CallOptions

#: What Pillow's openers and decoders raise on a corrupt or unreadable file besides
#: ``ValueError``: ``OSError`` (missing, truncated, unidentified), ``SyntaxError``
#: (broken PNG chunks), ``NotImplementedError`` (DDS), ``RuntimeError`` (AVIF),
#: ``KeyError`` / ``IndexError`` / ``struct.error`` / ``EOFError`` (other plugins).
DECODE_ERRORS = (OSError, SyntaxError, NotImplementedError, RuntimeError, KeyError, IndexError, EOFError, struct.error)

#: Encoded data as ``Image.open`` is given it: a ``BytesIO`` over the bytes, or a path.
_Source = Union[io.BytesIO, str, "os.PathLike[str]"]


def encoded_source(data: Any) -> _Source:
    """Encoded image data (a :data:`Kind.ENCODED <kimi_k3_rs._input.Kind>` value)
    as the checkpoint's ``_to_pil`` hands it to ``Image.open``.

    ``bytes`` / ``bytearray`` / ``memoryview``: the encoded file; ``str`` starting with
    ``data:``: base64 after the first comma; both become a ``BytesIO``. Other ``str``
    and ``os.PathLike``: a path, returned as it is.
    """
    if isinstance(data, (bytes, bytearray, memoryview)):
        return io.BytesIO(bytes(data))
    if isinstance(data, str) and data.startswith("data:"):
        _, comma, payload = data.partition(",")
        if not comma:
            raise errors.data_url_without_comma(data)
        try:
            return io.BytesIO(base64.b64decode(payload, validate=True))
        except binascii.Error as exc:
            raise errors.data_url_not_base64(exc) from exc
    path: str | os.PathLike[str] = data  # the other encoded values: a path
    return path


def _check_pixels(size: tuple[int, int], max_image_pixels: int | None, what: str = "image") -> None:
    """Refuse encoded data whose header claims more than ``max_image_pixels`` pixels;
    ``what`` names the header (the image, or one entry of an ICO)."""
    width, height = size
    if max_image_pixels is not None and width * height > max_image_pixels:
        raise errors.too_many_pixels(what, width, height, max_image_pixels)


#: Bytes per pixel of Pillow's storage of each mode (``libImaging/Storage.c``):
#: 1-band 8-bit modes take 1, the 16-bit ones 2, every other mode 4.
_PILLOW_PIXEL_BYTES = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16L": 2, "I;16B": 2, "I;16N": 2}

#: Whole decoded images that a format's Pillow decoder holds at once, where more than
#: one: WebP (still or animated) is decoded by libwebp's animation decoder, which keeps
#: the current and the previous canvas, then copied into a ``bytes`` and into the image
#: (measured: a 4000x4000 WebP peaks at 4 x 64 MB under Pillow 12 and 13); JPEG 2000 by
#: OpenJPEG, which holds every band as 32-bit samples beside Pillow's storage (4 bytes a
#: band: 5 copies for L and RGBA, 4 for RGB); AVIF by libavif, which holds the YUV planes
#: beside it (up to 1.5 times its size, for 12-bit 4:4:4).
_DECODED_COPIES = {"WEBP": 4, "JPEG2000": 5, "AVIF": 2}

#: Whole decoded images that Pillow's decoders written in Python (``ImageFile.PyDecoder``,
#: registered in ``Image.DECODERS``: BMP RLE, QOI, FITS gzip, DDS, BLP, MSP, ...) hold:
#: the ``bytearray`` they build, its ``bytes`` copy (``set_as_raw``) and the image.
_PYTHON_DECODER_COPIES = 3

#: What any encoded file may decode to (within ``max_decoded_bytes``), whatever its size:
#: every image of 1 byte a pixel under the default pixel limit (2 x Pillow's
#: ``MAX_IMAGE_PIXELS``, 179 MB), such as the blank 1-bit scan of an A4 page at 1200 dpi
#: (139 MB from 17 KB). Measured costs at the floor, K3, both fill stages, native and
#: Pillow decode: a 1-bit 13377x13377 PNG 1.2 s and 373 MiB, a 50-megapixel RGB or RGBA
#: PNG 0.9 s and 378 MiB.
_DECODED_BYTES_FLOOR = 192 << 20

#: What a file may decode to per byte of its size, where that allows more than
#: :data:`_DECODED_BYTES_FLOOR`. Photos decode to 10 to 100 times their size (an AVIF at
#: 0.1 bit per pixel, counted as 2 copies of Pillow's 4-byte pixels: 640); only nearly
#: blank images go past 2048, and decompression bombs by far (a 144-byte animated WebP:
#: 1 GB, a 1.3 KB BMP RLE: 535 MB).
_DECODED_BYTES_PER_FILE_BYTE = 2048

#: Bytes of filter taps the BICUBIC resize holds per pixel of the input's width and
#: of its height, counted with the decoded bytes against the file's size: a downscale
#: by ``s`` has about ``4 * s`` taps of 4 bytes per output pixel (Pillow's
#: ``precompute_coeffs``, kept by the core as ``Coefficients``). Nothing beside the
#: pixels of a photo, the bulk of a very wide or tall one: a 73 KB PNG of
#: 25,000,000x1 decodes to 75 MB and its taps take 400 MB.
_TAP_BYTES_PER_SIDE_PIXEL = 16

#: Bytes of working rows the resize holds per pixel of the input's width, counted with
#: its taps: the horizontal pass reads 16 whole rows at once (it transposes them in
#: tiles), of up to 4 bytes a pixel (a conversion to ``RGBA`` for compositing), held
#: twice (Pillow's converted band, and the core's copy). Nothing beside the pixels of a
#: photo, the bulk of a very wide file of a few rows: a 12 KB palette PNG with ``tRNS``
#: of 6,291,448x16 decodes to 101 MB, and its working rows took 806 MB.
_ROW_BYTES_PER_WIDTH_PIXEL = 128


def _decoders(image: Image.Image) -> set[str]:
    """The names of the decoders Pillow will run to load the opened ``image`` (its tiles'
    codecs; none once loaded)."""
    return {tile[0] for tile in getattr(image, "tile", None) or ()}


def _decoded_copies(image: Image.Image) -> int:
    """Whole decoded images Pillow's decoder of the opened ``image`` holds at once:
    :data:`_PYTHON_DECODER_COPIES` for a decoder written in Python, else the format's
    :data:`_DECODED_COPIES` (1 by default)."""
    if not _decoders(image).isdisjoint(Image.DECODERS):
        return _PYTHON_DECODER_COPIES
    return _DECODED_COPIES.get(image.format or "", 1)


def check_header(
    size: tuple[int, int],
    mode: str,
    max_image_pixels: int | None,
    max_decoded_bytes: int | None,
    copies: int = 1,
    file_bytes: int | None = None,
) -> None:
    """Refuse encoded data whose header (size, Pillow mode) claims more than
    ``max_image_pixels`` pixels or decodes to more than ``max_decoded_bytes`` bytes
    (``width * height *`` Pillow's bytes per pixel of ``mode``, times the ``copies``
    of the decoded image its decoder holds, :func:`_decoded_copies`), or, for a file of
    ``file_bytes`` bytes, to more than its size allows with its resize's filter taps
    and working rows (:data:`_TAP_BYTES_PER_SIDE_PIXEL` per pixel of width and height,
    :data:`_ROW_BYTES_PER_WIDTH_PIXEL` more per pixel of width):
    :data:`_DECODED_BYTES_FLOOR` (192 MiB), or :data:`_DECODED_BYTES_PER_FILE_BYTE`
    (2048) bytes per byte of the file where that is more. None turns the pixel check
    off, and both byte checks. The one check of every decode path, native or Pillow."""
    _check_pixels(size, max_image_pixels)
    if max_decoded_bytes is None:
        return
    width, height = size
    nbytes = width * height * _PILLOW_PIXEL_BYTES.get(mode, 4) * copies
    if nbytes > max_decoded_bytes:
        raise errors.too_many_decoded_bytes(width, height, nbytes, max_decoded_bytes)
    resize = _TAP_BYTES_PER_SIDE_PIXEL * (width + height) + _ROW_BYTES_PER_WIDTH_PIXEL * width
    if file_bytes is not None and nbytes + resize > max(_DECODED_BYTES_FLOOR, _DECODED_BYTES_PER_FILE_BYTE * file_bytes):
        raise errors.decodes_beyond_its_size(width, height, nbytes, resize, file_bytes)


#: The ``max_image_pixels`` of the input this thread (or task) is opening or decoding;
#: :data:`_PILLOWS` outside kimi_k3_rs's own opening, where Pillow's check is Pillow's.
_PILLOWS: Any = object()
_LIMIT: contextvars.ContextVar[Any] = contextvars.ContextVar("kimi_k3_rs_max_image_pixels", default=_PILLOWS)
_pillow_bomb_check = Image._decompression_bomb_check


def _bomb_check(size: tuple[int, int], *args: Any, **kwargs: Any) -> None:
    """Pillow's size check (``PIL/Image.py: _decompression_bomb_check``, called by
    ``Image.open`` and by the plugins for nested sizes) with ``max_image_pixels`` in
    place of ``Image.MAX_IMAGE_PIXELS`` while kimi_k3_rs opens or decodes an input of
    this thread (:func:`pixel_limit`): None turns it off, and it warns nothing. Every
    other caller, in any thread, gets Pillow's own check unchanged."""
    limit = _LIMIT.get()
    if limit is _PILLOWS:
        _pillow_bomb_check(size, *args, **kwargs)
    else:
        _check_pixels((int(size[0]), int(size[1])), limit)


Image._decompression_bomb_check = _bomb_check


@contextlib.contextmanager
def pixel_limit(max_image_pixels: int | None) -> Iterator[None]:
    """Apply ``max_image_pixels`` at Pillow's own check points (:func:`_bomb_check`)
    in this thread while the block opens or decodes an input."""
    token = _LIMIT.set(max_image_pixels)
    try:
        yield
    finally:
        _LIMIT.reset(token)


#: What ``Image.open`` takes from a plugin (its magic-bytes test or its open) as "not
#: this format": it then tries the next plugin.
_NOT_THIS_FORMAT = (SyntaxError, IndexError, TypeError, struct.error)


def _magic_formats(prefix: bytes) -> tuple[list[str], list[str]]:
    """What Pillow's plugins say of encoded data from its first 16 bytes, in
    ``Image.open``'s order: the formats whose magic-bytes test accepts them, and the
    formats whose plugin has no such test (``Image.open`` tries those on any data)."""
    Image.init()
    accepting, untested = [], []
    for format_id in Image.ID:
        accept = Image.OPEN[format_id][1]
        if accept is None:
            untested.append(format_id)
            continue
        try:
            accepted = accept(prefix)
        except _NOT_THIS_FORMAT:
            continue
        if accepted and not isinstance(accepted, str):
            accepting.append(format_id)
    return accepting, untested


def check_format(source: _Source | bytes, allowed_formats: frozenset[str] | None) -> None:
    """Refuse encoded data (its source, or its bytes) before any decoder sees it when
    none of the formats its magic bytes may be (:func:`_magic_formats`) is in
    ``allowed_formats``; the error names the first the magic bytes match (None allows
    every format). What passes is checked again once opened
    (:func:`_check_opened_format`)."""
    if allowed_formats is None:
        return
    if isinstance(source, bytes):
        prefix = source[:16]
    else:
        with _binary_file(source) as fp:
            prefix = fp.read(16)
    accepting, untested = _magic_formats(prefix)
    if allowed_formats.isdisjoint(accepting) and allowed_formats.isdisjoint(untested):
        fmt = accepting[0] if accepting else "unknown"
        if fmt == "JPEG" and "MPO" in allowed_formats:  # an MPO starts as a JPEG does
            return
        raise errors.format_not_allowed(fmt, allowed_formats)


def _check_opened_format(image: Image.Image, allowed_formats: frozenset[str] | None) -> None:
    """Refuse an opened image whose plugin's format is not allowed (an MPO behind JPEG
    magic bytes, a format whose plugin has no magic-bytes test)."""
    if allowed_formats is not None and image.format not in allowed_formats:
        image.close()
        raise errors.format_not_allowed(str(image.format), allowed_formats)


@contextlib.contextmanager
def loaded_image(
    data: Any,
    exif_transpose: bool = False,
    max_image_pixels: int | None = None,
    max_decoded_bytes: int | None = None,
    allowed_formats: frozenset[str] | None = None,
) -> Iterator[Image.Image | np.ndarray]:
    """Yield the image of encoded ``data`` (a PIL image or a uint8 array: a large L /
    RGB / RGBA file is decoded into an array, :func:`_load_into_array`), closed
    afterwards; EXIF is applied on request; data of a format not in
    ``allowed_formats``, or over ``max_image_pixels`` or ``max_decoded_bytes``, is
    refused from its magic bytes and header."""
    source = encoded_source(data)
    check_format(source, allowed_formats)
    # An ICO's entries are checked from their own headers (which know the XOR + AND
    # mask layout whose doubled height Pillow's ICO plugin checks): no second check.
    is_ico = max_image_pixels is not None and _check_ico(source, max_image_pixels)
    with pixel_limit(None if is_ico else max_image_pixels), _open_encoded(source) as image:
        _check_opened_format(image, allowed_formats)
        check_header(
            image.size, image.mode, max_image_pixels, max_decoded_bytes, _decoded_copies(image), _file_bytes(source)
        )
        pixels = None if exif_transpose else _load_into_array(image)
        if pixels is not None:
            yield pixels
            return
        _load(image)
        yield apply_exif(image) if exif_transpose else image


def load(data: Any, index: int, cfg: MediaProcConfig, opts: CallOptions) -> _native.BatchItem:
    """Encoded ``data`` as the core takes it, image ``index`` of its batch: the file
    itself when the core decodes it (:func:`route`), else decoded by Pillow
    (:func:`pillow_load`).

    Raises:
        ImageError: data that cannot be read or decoded, over the limits of ``opts`` or
            of a format not allowed (the caller names the image).
    """
    read, native = route(data, index, opts)
    return native if native is not None else pillow_load(read, index, cfg, opts)


def pillow_load(data: Any, index: int, cfg: MediaProcConfig, opts: CallOptions) -> _native.BatchItem:
    """Encoded ``data`` that the core does not decode (:func:`route` said so), decoded by
    Pillow (:func:`loaded_image`, with the limits of ``opts``) and taken through the
    reference's mode steps (:func:`kimi_k3_rs._input.pil.core_pixels`): image ``index``
    of its batch, with its sizing if already resized."""
    with loaded_image(
        data, opts.exif_transpose, opts.max_image_pixels, opts.max_decoded_bytes, opts.allowed_formats
    ) as image:
        if isinstance(image, np.ndarray):  # read in place: C-contiguous, or RGB of RGBX
            return _native.BatchItem.image(image, index)
        pixels, resized = core_pixels(image, cfg, opts.native)
    return _native.BatchItem.image(pixels, index, resized)


#: The magic bytes of the formats the core reads: those with a native decoder
#: (``decode.rs: Format::sniff``), and BLP1, whose JPEG stream it checks for the JPEG cost bounds.
_MAGIC = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"BLP1")


def _encoded_bytes(data: Any) -> bytes | None:
    """The encoded file ``data`` (bytes-like, a data URL or a path) as bytes when it is a
    JPEG, PNG or BLP1 (read whole, as Pillow's ``load`` reads it); None for any other
    format (a path of another format is read no further than its magic bytes)."""
    source = encoded_source(data)
    if isinstance(source, io.BytesIO):
        raw = source.getvalue()
    else:
        with open_path(source) as fp:
            raw = fp.read(8)
            if not raw.startswith(_MAGIC):
                return None
            raw += fp.read()
    return raw if raw.startswith(_MAGIC) else None


def route(data: Any, index: int, opts: CallOptions) -> tuple[Any, _native.BatchItem | None]:
    """Route encoded ``data``, image ``index`` of its batch: ``(its bytes, its batch
    item)`` when the core decodes it natively, its header checked against the limits of
    ``opts`` (:func:`check_header`), else ``(data for Pillow, None)`` (a JPEG or PNG
    already read comes back as its bytes, so a path is read once).

    Every JPEG (and the JPEG inside a BLP1 file) is checked against the JPEG cost bounds
    here (scans, 8x8 blocks per byte of the file, block passes of the scans: the core's
    ``decode::jpeg::route``), whichever decoder runs it, and
    every JPEG and PNG for ``allowed_formats`` (an MPO, which only Pillow tells from a
    JPEG, goes to Pillow when MPO is not allowed, and is refused there).
    Nothing is native while ``ImageFile.LOAD_TRUNCATED_IMAGES`` is true (Pillow then
    decodes truncated files, the native decoders refuse them), nor for a format whose
    self-check failed (:func:`kimi_k3_rs._input.native.in_force`).

    A JPEG or PNG whose headers Pillow fails on (cut or corrupt) goes to Pillow, which
    raises its own error: the failure is Pillow's.

    Raises:
        ImageError: a JPEG over its cost bounds, or a format not in ``allowed_formats``.
    """
    raw = _encoded_bytes(data)
    if raw is None:
        return data, None
    allowed_formats = opts.allowed_formats
    check_format(raw, allowed_formats)
    routed = _native.route_encoded(raw, exif_transpose=opts.exif_transpose)
    if not isinstance(routed, _native.EncodedImage) or ImageFile.LOAD_TRUNCATED_IMAGES:
        return raw, None
    if allowed_formats is not None and routed.format == "JPEG" and "MPO" not in allowed_formats:
        return raw, None
    if routed.format not in NATIVE_FORMATS or not in_force(routed.format):
        return raw, None
    check_header(routed.size, routed.mode, opts.max_image_pixels, opts.max_decoded_bytes, file_bytes=len(raw))
    return raw, _native.BatchItem.image(routed, index)


#: Per PIL mode: the mode of Pillow's storage that :func:`_load_into_array` maps onto
#: a numpy array, and its bytes per pixel (``RGB`` is stored as ``RGBX``).
_MAPPED_STORAGE = {"L": ("L", 1), "RGB": ("RGBX", 4), "RGBA": ("RGBA", 4)}

#: Pillow decoders that pick their unpacker by the storage's own mode, and so refuse the
#: ``RGBX`` storage mapped for an ``RGB`` image ("broken data stream"): JPEG 2000's
#: (``libImaging/Jpeg2KDecode.c: j2k_unpackers``). Every other decoder unpacks by the
#: image's raw mode into either.
_STORAGE_MODE_DECODERS = frozenset({"jpeg2k"})


def _load_into_array(image: Image.Image) -> np.ndarray | None:
    """``image.load()`` into a new numpy array, for an image larger than one block of
    Pillow's arena: ``np.asarray(image)``'s values (``RGB`` as the colour bytes of
    Pillow's 4-byte pixels, which the core reads in place), with no copy of the
    decoded image. None, the image left unloaded, for another mode, an ``L`` image with
    a ``transparency`` (which the mode steps read; ``RGB`` and ``RGBA`` ones go to the
    core as they are), an ``RGB`` image whose decoder needs storage of its own mode
    (:data:`_STORAGE_MODE_DECODERS`), or a smaller image (Pillow exports those in place).

    The image's storage is set, before its load, to an image Pillow maps onto the
    array (``Image.frombuffer``): ``ImageFile.load`` creates storage only where there
    is none (``load_prepare``), so Pillow's own decoder writes its pixels, the same
    bytes, into the array. A plugin that makes storage of its own (a TIFF turned on
    load, a file mapped from disk) is seen after the load: None, the image then loaded.
    """
    original, (width, height) = image.mode, image.size
    storage = _MAPPED_STORAGE.get(original)
    if storage is None or (original == "L" and "transparency" in image.info) or image._im is not None:
        return None
    mode, depth = storage
    if mode != original and not _decoders(image).isdisjoint(_STORAGE_MODE_DECODERS):
        return None
    if width * height * depth <= _pillow_core.get_block_size():
        return None
    # Zeroed, as Pillow's own storage is (``ImagingAllocateArray``: calloc): several
    # decoders finish without writing every pixel (a PNG whose zlib stream ends early
    # on a row boundary, an APNG whose first frame is smaller than the canvas), and
    # the reference reads zeros there.
    array = np.zeros((height, width, depth) if depth > 1 else (height, width), np.uint8)
    mapped = Image.frombuffer(mode, image.size, array, "raw", mode, 0, 1).im
    image.im = mapped
    _load(image)
    if image.im is not mapped or (image.mode, image.size) != (original, (width, height)):
        return None
    return array[..., :3] if original == "RGB" else array


def _load(image: Image.Image) -> None:
    """``image.load()``: any fault of the decoder becomes an :class:`ImageError` naming
    it (chained); a ``MemoryError`` stays one."""
    try:
        image.load()
    except (ImageError, MemoryError):
        raise
    except Exception as exc:  # any fault of a third-party decoder: an ImageError
        raise errors.unreadable(exc) from exc


def _open_encoded(source: _Source) -> Image.Image:
    """Open encoded data lazily, as the checkpoint's ``Image.open`` does (Pillow picks
    the first frame of animated files; no EXIF rotation), through the format plugins
    (:func:`_open_plugins`): Pillow's own pixel limit and its warning do not run, the
    caller checks ``max_image_pixels`` itself (so None turns every limit off).

    Any exception a plugin raises
    becomes an :class:`ImageError` naming it (chained); a ``MemoryError`` stays one.
    The size checks inside the plugins (GIF frames, ICNS / ICO / BLP entries, WebP
    canvases) apply ``max_image_pixels`` too (:func:`pixel_limit`).
    """
    try:
        return _open_plugins(source)
    except (ImageError, MemoryError):
        raise
    except Exception as exc:  # any fault of a third-party plugin: an ImageError
        raise errors.unreadable(exc) from exc


def _open_plugins(source: _Source) -> Image.Image:
    """``Image.open(source)`` without its pixel-limit check: the format plugins in
    Pillow's order (``PIL/Image.py: Image.open`` / ``_open_core``), a plugin that does
    not recognise the data (``SyntaxError``, ``IndexError``, ``TypeError``,
    ``struct.error``, from its test or its open) skipped, any other exception raised,
    as ``Image.open`` does.
    Only the header is read. A file opened here is closed with the image.

    Raises:
        UnidentifiedImageError: no plugin takes the data.
    """
    fp: Any
    if isinstance(source, io.BytesIO):
        is_path, fp, filename = False, source, ""
    else:
        is_path, fp = True, open_path(source)
        filename = os.fspath(source)
    try:
        fp.seek(0)
        prefix = fp.read(16)
        Image.init()
        for format_id in Image.ID:
            factory, accept = Image.OPEN[format_id]
            try:
                accepted = accept(prefix) if accept is not None else True
                if not accepted or isinstance(accepted, str):  # a str: Pillow's "possible format" warning
                    continue
                fp.seek(0)
                image = factory(fp, filename)
            except _NOT_THIS_FORMAT:
                continue
            image._exclusive_fp = is_path  # close the file with the image, as Image.open(path) does
            return image
    except BaseException:
        if is_path:
            fp.close()
        raise
    if is_path:
        fp.close()
    raise errors.unidentified()


def _file_bytes(source: _Source) -> int:
    """The size of the encoded file ``source`` (0 for a path to something other than a
    regular file, such as a pipe)."""
    if isinstance(source, io.BytesIO):
        return source.getbuffer().nbytes
    return os.stat(source).st_size


def open_path(path: str | os.PathLike[str]) -> BinaryIO:
    """``open(path, "rb")`` of a regular file, without blocking (:func:`_files.open_regular`:
    a FIFO or a device is refused before it is opened, with the ``OSError``
    :class:`~kimi_k3_rs._files.NotRegularFileError`); a path that cannot name a file (an
    embedded null byte) is an :class:`ImageError`, like a missing file."""
    try:
        return _files.open_regular(path)[0]  # the caller closes it
    except ValueError as exc:
        raise errors.unreadable(exc) from exc


@contextlib.contextmanager
def _binary_file(source: _Source) -> Iterator[BinaryIO]:
    """``source`` as a binary file at offset 0: the ``BytesIO`` itself, or the path
    opened for reading (closed afterwards)."""
    if isinstance(source, io.BytesIO):
        source.seek(0)
        yield source
        return
    with open_path(source) as fp:
        yield fp


def _ico_entries(source: _Source) -> list[ico.IcoEntry] | None:
    """The entries of an ICO as Pillow ranks them, from their headers only
    (:func:`kimi_k3_rs._input.ico.entries`); None when ``source`` is not an ICO (told
    from its magic here: other files never reach the ICO reader)."""
    with _binary_file(source) as fp:
        if fp.read(len(ico.MAGIC)) != ico.MAGIC:
            return None
        fp.seek(0)
        return ico.entries(fp)


def _check_ico(source: _Source, max_image_pixels: int) -> bool:
    """Refuse an ICO with :class:`ImageTooLargeError`, before Pillow's ICO plugin decodes
    it inside ``Image.open``, when one of its entries claims more than ``max_image_pixels``;
    whether ``source`` is an ICO.

    Every entry whose image header can be read is checked (:func:`_ico_entries`): its
    directory size, and its image's own size. Checking them all, not only the one
    Pillow picks, is conservative, and does not rest on Pillow's choice of entry.
    Entries whose header cannot be read are left to Pillow, which fails on such an
    entry if it picks it. Data that is not an ICO is left as it is.
    """
    entries = _ico_entries(source)
    for entry in entries or ():
        if entry.size is not None:
            _check_pixels(entry.dim, max_image_pixels, f"ICO entry {entry.position}'s directory size")
            _check_pixels(entry.size, max_image_pixels, f"ICO entry {entry.position}'s {entry.kind}")
    return entries is not None


def encoded_size(data: Any, exif_transpose: bool, allowed_formats: frozenset[str] | None = None) -> tuple[int, int]:
    """``(width, height)`` of encoded ``data`` as the pixel path will see it, from its
    header (EXIF orientations 5..8 swap the sides). No ``max_image_pixels`` limit
    applies: sizing works on any size; ``allowed_formats`` does (:func:`check_format`).
    An ICO, which Pillow decodes to open it, is sized from its headers
    (:func:`_ico_entries`).

    Raises:
        ImageError: unreadable data, or a format not in ``allowed_formats``.
    """
    source = encoded_source(data)
    try:
        check_format(source, allowed_formats)
        entries = _ico_entries(source)
        if entries and entries[0].size is not None:  # an ICO: what Pillow decodes (it has no EXIF)
            return entries[0].size
        with pixel_limit(None), _open_encoded(source) as image:  # the header only
            _check_opened_format(image, allowed_formats)
            return oriented_size(image, exif_transpose)
    except DECODE_ERRORS as exc:  # unreadable: as preprocess says it
        raise errors.unreadable(exc) from exc


def oriented_size(image: Image.Image, exif_transpose: bool) -> tuple[int, int]:
    """``image.size``, swapped when ``exif_transpose`` would turn the image (5..8),
    unless the format's plugin turns it itself when it loads (:func:`_turned_on_load`)."""
    width, height = image.size
    if (
        exif_transpose
        and exif_orientation(image) in SIDE_SWAPPING_ORIENTATIONS
        and not _turned_on_load(image)
    ):
        return height, width
    return width, height


def _turned_on_load(image: Image.Image) -> bool:
    """Whether the plugin applies the orientation itself when it loads, so that
    ``image.size`` already is the turned size and ``ImageOps.exif_transpose`` then
    finds nothing to do (Pillow 13's TIFF plugin: ``TiffImageFile._setup`` swaps the
    size for orientations 5..8, ``load_end`` turns the pixels). Seen from the tiles:
    they cover the stored raster, ``image.size`` with its sides swapped."""
    tiles = getattr(image, "tile", None) or []  # an ImageFile's, before it loads
    extents = [tile[1] for tile in tiles if tile[1] is not None]  # (x0, y0, x1, y1)
    if not extents:
        return False
    stored = (max(e[2] for e in extents), max(e[3] for e in extents))
    width, height = image.size
    return width != height and stored == (height, width)
