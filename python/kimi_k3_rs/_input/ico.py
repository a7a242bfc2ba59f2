"""ICO headers: the entries of an ICO and their images' sizes, read as Pillow reads them.

Mirrors ``PIL/IcoImagePlugin.py`` (``IcoFile.__init__``, ``IcoFile.frame``) and
``PIL/BmpImagePlugin.py`` (``_bitmap``) without decoding any pixels, so the decoder's
bomb guard (:mod:`kimi_k3_rs._input.encoded`) can refuse an ICO before Pillow decodes it
inside ``Image.open``: :func:`entries`, each an :class:`IcoEntry`.
"""

from __future__ import annotations

import math
import struct
from typing import BinaryIO, NamedTuple

from PIL import PngImagePlugin

#: The first 4 bytes of an ICO (reserved 0, type 1), ``_MAGIC`` of ``PIL/IcoImagePlugin.py``.
MAGIC = b"\x00\x00\x01\x00"

#: The signature ``IcoFile.frame`` looks for to read an entry as a PNG (else as a DIB).
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

#: The DIB header sizes whose width and height are 32-bit (``BmpImagePlugin._bitmap``:
#: ``BITMAPINFOHEADER`` and later); 12 (``BITMAPCOREHEADER``) has 16-bit ones; Pillow
#: refuses any other size.
_DIB_INFO_HEADERS = frozenset({40, 52, 56, 64, 108, 124})


class IcoEntry(NamedTuple):
    """One entry of an ICO directory (``IcoFile.__init__``) and the size of its image."""

    position: int  # index in the directory (``index`` would hide ``tuple.index``)
    dim: tuple[int, int]  # the directory's width and height (a 0 byte means 256)
    color_depth: int  # Pillow's order among entries of equal area (lowest first)
    offset: int  # where the entry's image starts in the file
    kind: str  # "PNG" or "DIB", told apart as ``IcoFile.frame`` does
    size: tuple[int, int] | None  # the image's own size; None when its header cannot be read


def entries(fp: BinaryIO) -> list[IcoEntry] | None:
    """The entries of an ICO, in the order Pillow ranks them, from their headers only.

    Mirrors ``PIL/IcoImagePlugin.py``, ``IcoFile.__init__``: a 6-byte header (reserved,
    type, count: ``<HHH``) and one 16-byte entry per image (width and height bytes, 0
    meaning 256; colours; reserved; planes; bits per pixel; data size; data offset:
    ``<BBBBHHII``), ranked by area, largest first, ties by colour depth, lowest first.
    Each image's size comes from its first 24 bytes (:func:`_image_size`). The
    first-ranked entry is the one ``IcoImageFile`` decodes (Pillow 10.4 to 13 alike);
    when it is a PNG, its size is the one Pillow's PNG parser gives
    (:func:`_png_size`).

    Args:
        fp: the encoded data, a binary file at offset 0.

    Returns:
        None when ``fp`` does not start with the ICO magic, or its directory is
        cut short (Pillow's ICO plugin refuses such a file without decoding it).
    """
    head = fp.read(6)
    if len(head) < 6 or not head.startswith(MAGIC):
        return None
    count = int.from_bytes(head[4:], "little")
    directory = fp.read(16 * count)
    if len(directory) < 16 * count:
        return None
    entries = []
    for index in range(count):
        width, height, colours, _, _, bpp, _, offset = struct.unpack_from("<BBBBHHII", directory, 16 * index)
        color_depth = bpp or (colours != 0 and math.ceil(math.log(colours, 2))) or 256  # noqa: FURB163 (as Pillow)
        kind, size = _image_size(fp, offset)
        entries.append(IcoEntry(index, (width or 256, height or 256), color_depth, offset, kind, size))
    entries.sort(key=lambda entry: entry.color_depth)
    entries.sort(key=lambda entry: entry.dim[0] * entry.dim[1], reverse=True)
    if entries and entries[0].kind == "PNG":
        entries[0] = entries[0]._replace(size=_png_size(fp, entries[0].offset))
    return entries


def _image_size(fp: BinaryIO, offset: int) -> tuple[str, tuple[int, int] | None]:
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


def _png_size(fp: BinaryIO, offset: int) -> tuple[int, int] | None:
    """The size of the PNG at ``offset`` as ``IcoFile.frame`` opens it (``PngImageFile``,
    headers only): that of its last ``IHDR`` before the image data, wherever it lies,
    which the first chunk alone does not tell. None when Pillow cannot read the PNG's
    header (``IcoFile.frame`` then fails on it before decoding anything)."""
    # (imported here: kimi_k3_rs._input.encoded imports this module)
    from .encoded import DECODE_ERRORS

    fp.seek(offset)
    try:
        return PngImagePlugin.PngImageFile(fp).size
    except (ValueError, *DECODE_ERRORS):
        return None
