"""Zero-copy input of PIL images: the core reads Pillow's own pixel memory.

A PIL image of mode ``L``, ``LA``, ``RGB`` or ``RGBA`` reaches the Rust core through
Pillow's Arrow C data interface export (``Image.__arrow_c_array__``, Pillow >= 11.2.1),
read by ``_native.pil_pixels``: no ``tobytes()`` copy (about 34 ms of GIL-holding work
for a 12 MP image). Pillow exports only an image held in one block of memory; its
default allocator splits images over 16 MiB (larger than 2048x2048 RGB) into 16 MiB
blocks, so those still go through ``np.asarray(image)`` unless
:func:`enable_pillow_zero_copy` is called. Either way the output is the same, bit for bit.
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


def _exported_pixels(image: Image.Image) -> np.ndarray | None:
    """``np.asarray(image)``'s values read from the image's own memory (a read-only
    view; a packed copy for ``LA``), or None where they must be copied instead.

    None (the caller copies with ``np.asarray``) for another mode, an empty image, a
    Pillow without the export (< 11.2.1), an image Pillow refuses to export (several
    memory blocks: :func:`enable_pillow_zero_copy`), or whose export is not the layout
    this library reads (the copy gives the same values). Also for images whose export
    is unsafe before Pillow 13 (``libImaging/Arrow.c`` of 11.2.1 - 12.3 takes the
    storage's first block without looking at the row pointers): read-only images, whose
    rows Pillow maps onto memory it did not allocate (``frombuffer``, ``fromarray``,
    mmap-loaded files, ``fromarrow``: the export dereferences a NULL block list), and a
    row alignment other than 1 (``Image.core.set_alignment``: the export ignores the
    padded rows). The image is loaded first (as ``np.asarray`` would load it).
    """
    if image.mode not in _EXPORTED_MODES or not hasattr(image, "__arrow_c_array__"):
        return None
    width, height = image.size
    if width * height == 0:
        return None
    image.load()
    if image.readonly or _pillow_core.get_alignment() != 1:
        return None
    try:
        return _native.pil_pixels(image)
    except ValueError:  # Pillow refuses (several blocks), or an unknown layout (ImageError)
        return None


def _pixels_of(image: Image.Image) -> np.ndarray:
    """The pixels of a PIL image as ``np.asarray(image)`` gives them, without a copy
    where :func:`_exported_pixels` can read them in place."""
    exported = _exported_pixels(image)
    return np.asarray(image) if exported is None else exported
