"""Zero-copy input of PIL images: the core reads Pillow's own pixel memory.

A PIL image of mode ``L``, ``LA``, ``RGB`` or ``RGBA`` reaches the Rust core through
Pillow's Arrow C data interface export (``Image.__arrow_c_array__``, Pillow >= 11.2.1),
read by ``_native.pil_pixels``: no ``tobytes()`` copy (about 34 ms of GIL-holding work
for a 12 MP image). Pillow exports only an image held in one block of memory; its
default allocator splits images over 16 MiB (larger than 2048x2048 RGB) into 16 MiB
blocks, so those are copied once, band by band, unless :func:`enable_pillow_zero_copy`
is called. Either way the output is the same, bit for bit.
"""

from __future__ import annotations

import numpy as np
from PIL import Image
from PIL import _imaging as _pillow_core  # what ``PIL.Image.core`` is

from . import _native

__all__ = ["enable_pillow_zero_copy"]

#: The PIL modes the core takes as they are (as ``modes._NATIVE_MODES``).
_EXPORTED_MODES = frozenset({"L", "LA", "RGB", "RGBA"})


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


def _exportable(image: Image.Image) -> bool:
    """Whether ``image`` has a mode this library reads from Pillow's export, pixels,
    and a Pillow whose export of it (or of its crops) is safe: Pillow >= 11.2.1, rows
    without padding (the export of 11.2.1 - 12.3 ignores ``Image.core.set_alignment``'s
    padded rows)."""
    width, height = image.size
    return (
        image.mode in _EXPORTED_MODES
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


#: Bytes of Pillow memory (4 bytes a pixel for RGB) per band of :func:`_banded_pixels`:
#: half a block of Pillow's default arena, so a band is always one block.
_BAND_BYTES = 8 << 20


def _banded_pixels(image: Image.Image) -> np.ndarray | None:
    """``np.asarray(image)``'s values copied band by band: each band of rows is cropped
    (a new image of one block) and its export copied into one new array, so the pixels
    are copied once, row after row (``RGB`` keeps Pillow's 4-byte pixels, which the core
    reads as they are, so each band is one ``memcpy``). ``np.asarray`` copies them
    through ``tobytes()``, which holds the encoded chunks and their join at once (twice
    the image: +830 MiB for a 12000x12000 RGB image). None when a band cannot be
    exported (the caller copies with ``np.asarray``)."""
    width, height = image.size
    rows = max(1, _BAND_BYTES // (4 * width))
    out: np.ndarray | None = None
    for y0 in range(0, height, rows):
        y1 = min(height, y0 + rows)
        try:
            band = _native.pil_pixels(image.crop((0, y0, width, y1)))
        except ValueError:
            return None
        if band.ndim == 3 and band.shape[2] == 3 and band.strides[1] == 4:
            # The pad byte is in the band's memory: its pixels whole, copied as they are.
            band = np.lib.stride_tricks.as_strided(band, (y1 - y0, width, 4), band.strides, writeable=False)
        if out is None:
            out = np.empty((height, *band.shape[1:]), np.uint8)
        out[y0:y1] = band
    if out is not None and image.mode == "RGB":
        return out[..., :3]
    return out


def _pixels_of(image: Image.Image) -> np.ndarray:
    """The pixels of a PIL image as ``np.asarray(image)`` gives them: read in place
    where :func:`_exported_pixels` can, else copied once, band by band
    (:func:`_banded_pixels`), else by ``np.asarray``."""
    exported = _exported_pixels(image)
    if exported is None and _exportable(image):
        exported = _banded_pixels(image)
    return np.asarray(image) if exported is None else exported
