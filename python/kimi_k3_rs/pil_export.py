"""Zero-copy input of PIL images: the core reads Pillow's own pixel memory.

A PIL image of mode ``L``, ``LA``, ``RGB`` or ``RGBA`` reaches the Rust core through
Pillow's Arrow C data interface export (``Image.__arrow_c_array__``, Pillow >= 11.2.1),
read by ``_native.pil_pixels``: no ``tobytes()`` copy (about 34 ms of GIL-holding work
for a 12 MP image). Pillow exports only an image held in one block of memory; its
default allocator splits images over 16 MiB (larger than 2048x2048 RGB) into 16 MiB
blocks, so the core reads those band by band (``_native.pil_rows``: each band cropped,
exported and copied, a few MB at a time, at most one block a crop, as the export
needs), unless :func:`enable_pillow_zero_copy` is called. Either way the output is the
same, bit for bit.
"""

from __future__ import annotations

import numpy as np
from PIL import Image
from PIL import _imaging as _pillow_core  # what ``PIL.Image.core`` is

from . import _native

__all__ = ["enable_pillow_zero_copy"]

#: The PIL modes the core takes as they are (as ``modes._NATIVE_MODES``).
_EXPORTED_MODES = frozenset({"L", "LA", "RGB", "RGBA"})

#: The 8-bit modes whose stored bytes ``_native.pil_rows`` reads band by band.
_STORED_MODES = _EXPORTED_MODES | {"La", "PA", "YCbCr", "HSV", "LAB", "CMYK", "RGBX", "RGBa"}


def enable_pillow_zero_copy() -> None:
    """Make Pillow allocate every new image in one block, so that images of any size
    reach the core without a copy of their pixels.

    Calls ``PIL.Image.core.set_use_block_allocator(1)``: Pillow then allocates each new
    image with one ``calloc`` instead of its default arena of 16 MiB blocks (in which an
    image over 16 MiB, e.g. larger than 2048x2048 RGB, spans several blocks and cannot be
    exported through Pillow's Arrow interface, so it is copied with ``tobytes()``). With
    it, the ``tobytes()`` copy of a large decoded photo is skipped: about 100 ms of a
    12 MP K2.5 call and several hundred ms of a 64 MP one (``benchmarks/bench_pil_input.py``;
    Pillow's decode takes the same time either way); the output is the same bit for bit.

    This is a **process-wide Pillow setting**, not a kimi_k3_rs one: it changes how every
    later image of the process is allocated, by any library; images that exist already
    keep their memory. kimi_k3_rs never changes it on its own; call this once at start-up
    if the trade suits the process. Trade-offs: Pillow's arena reuses freed blocks
    (``set_blocks_max``) and the single-block allocator does not; a single block is
    limited to 2 GiB (Pillow raises ``MemoryError`` for a larger image, about 23000 x
    23000 RGB, which the arena could hold). To undo it:
    ``PIL.Image.core.set_use_block_allocator(0)``.

    Images Pillow maps onto other memory (``Image.frombuffer``, ``Image.fromarray`` of
    an ``L`` / ``RGBA`` array, memory-mapped files, ``Image.fromarrow``) and processes
    that set ``Image.core.set_alignment`` are read through ``np.asarray`` whatever this
    setting.
    """
    _pillow_core.set_use_block_allocator(1)


def _exportable(image: Image.Image, modes: frozenset[str] | None = _EXPORTED_MODES) -> bool:
    """Whether ``image`` has one of the ``modes`` this library reads from Pillow's
    export (None: any mode, for an image whose bands are converted before they are
    exported), pixels, and a Pillow whose export of it (or of its crops) is safe: Pillow
    >= 11.2.1, rows without padding (the export of 11.2.1 - 12.3 ignores
    ``Image.core.set_alignment``'s padded rows)."""
    width, height = image.size
    return (
        (modes is None or image.mode in modes)
        and hasattr(image, "__arrow_c_array__")
        and width * height > 0
        and _pillow_core.get_alignment() == 1
    )


def _exported_pixels(image: Image.Image) -> np.ndarray | None:
    """``np.asarray(image)``'s values read from the image's own memory (a read-only
    view; a packed copy for ``LA``), or None where they must be copied instead.

    None for an image :func:`_exportable` rules out, one Pillow refuses to export
    (several memory blocks: :func:`enable_pillow_zero_copy`), or whose export is not the
    layout this library reads (the copy gives the same values). Also for read-only
    images before Pillow 13, whose rows Pillow maps onto memory it did not allocate
    (``frombuffer``, ``fromarray``, mmap-loaded files, ``fromarrow``: the export of
    11.2.1 - 12.3, ``libImaging/Arrow.c``, takes the storage's first block without
    looking at the row pointers and dereferences a NULL block list). The image is loaded
    first (as ``np.asarray`` would load it).
    """
    if not _exportable(image):
        return None
    image.load()
    if image.readonly:
        return None
    try:
        return _native.pil_pixels(image)
    except ValueError:  # Pillow refuses (several blocks), or an unknown layout (ImageError)
        return None


def _twin(image: Image.Image) -> Image.Image:
    """A new ``Image`` on the loaded ``image``'s storage, info and palette
    (``Image._new``), no pixel copied: it stays usable after ``image`` is closed (the
    batch loop closes the files it opened before the native call reads their rows)."""
    image.load()
    return image._new(image.im)


def _pixels_of(image: Image.Image) -> np.ndarray | _native.PillowRows:
    """The pixels of a PIL image as ``np.asarray(image)`` gives them: read in place
    where :func:`_exported_pixels` can; else, for an image Pillow holds in several
    blocks or maps onto memory it did not allocate, a ``PillowRows`` the core reads
    band by band during the call (each band of rows cropped into images Pillow owns, one
    block of its memory each, exported and copied into the band's buffer, so the image
    is never copied whole);
    else (a Pillow that cannot export) copied by ``np.asarray``."""
    exported = _exported_pixels(image)  # loads the image
    if exported is not None:
        return exported
    if _exportable(image):
        return _native.pil_rows(_twin(image))
    return np.asarray(image)


def _stored_rows(image: Image.Image) -> _native.PillowRows | None:
    """An 8-bit image (``_STORED_MODES``) as a ``PillowRows``, which the core reads
    band by band: Pillow's stored bytes (``LAB``'s a and b XOR 128, as Pillow
    resamples them), never copied whole; None where Pillow cannot export it."""
    if not _exportable(image, _STORED_MODES):
        return None
    return _native.pil_rows(_twin(image))


def _converted_rows(image: Image.Image, mode: str) -> _native.PillowRows | None:
    """``image.convert(mode)`` (``mode`` one the core takes) as a ``PillowRows`` whose
    bands the core converts one at a time as it reads them: Pillow's conversions to
    these modes are pixel by pixel, so the bands are the whole conversion's, and it is
    never held whole. None where Pillow cannot export the bands (the caller converts
    the whole image)."""
    if not _exportable(image, None):
        return None
    return _native.pil_rows(_twin(image), mode)
