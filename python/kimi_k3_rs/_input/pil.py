"""PIL images: the reference's mode steps, with the resample in Rust where it is 8-bit;
Pillow's pixels read in place; EXIF orientations.

Reproduces what ``kimi_k3_vision_processing.py: fill_transparent_bg_with`` and Pillow's
``Image.resize`` / ``Image.convert`` do to an image of each mode; the Rust core then
composites, pads, normalises and patchifies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import PIL
from PIL import Image, ImageOps
from PIL import _imaging as _pillow_core  # what ``PIL.Image.core`` is

from .. import _native, errors
from ..options import resolve_pillow_compat

if TYPE_CHECKING:
    from ..config import MediaProcConfig

__all__ = ["enable_pillow_zero_copy"]

#: PIL modes whose 8-bit bands the Rust core takes as they are (HWC uint8): L, LA,
#: RGB, RGBA; the core does their resize too (RGBA / LA premultiplied, as Pillow).
_NATIVE_MODES = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}

#: Modes Pillow always resizes with NEAREST (Pillow ``PIL/Image.py: Image.resize``
#: forces it); Pillow's own resize is used for them (a cheap 8-bit index copy, whose result
#: does not depend on the pass order).
_NEAREST_MODES = frozenset({"P", "1"})

#: 8-bit modes whose Pillow BICUBIC resize is the plain per-channel 8-bit resample of
#: Pillow ``libImaging/Resample.c`` (no premultiplication): resized in Rust by
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
SIDE_SWAPPING_ORIENTATIONS = frozenset(range(5, 9))


def exif_orientation(image: Image.Image) -> Any:
    """The EXIF Orientation value ``ImageOps.exif_transpose`` reads (1 when absent)."""
    return image.getexif().get(_EXIF_ORIENTATION_TAG, 1)


def apply_exif(image: Image.Image) -> Image.Image:
    """``ImageOps.exif_transpose(image)`` when the orientation moves pixels (the callers
    call it under ``exif_transpose=True``)."""
    if exif_orientation(image) in _TRANSPOSING_ORIENTATIONS:
        return ImageOps.exif_transpose(image)
    return image


def _convert(image: Image.Image, mode: str) -> Image.Image:
    """``image.convert(mode)``; Pillow's ``ValueError`` becomes a clear :class:`ImageError`."""
    try:
        return image.convert(mode)
    except ValueError as exc:
        raise errors.cannot_convert(image.mode, mode, exc) from exc


def _composite_input(image: Image.Image, cfg: MediaProcConfig, *, owned: bool) -> np.ndarray | _native.PillowRows:
    """What ``fill_transparent_bg_with(image, bg)`` starts from, as a uint8 array.

    The Rust core then does the rest of ``kimi_k3_vision_processing.py:
    fill_transparent_bg_with`` on it: composite an RGBA (or LA) array onto the
    background, or drop its alpha when ``bg`` is None.

    * L / LA / RGB / RGBA (L only without ``transparency`` or without a background):
      the bands as they are (no Pillow step).

    Every result is the image's pixels as ``np.asarray`` gives them, read from the
    image's own memory where Pillow can export it (:func:`kimi_k3_rs._input.pil._pixels_of`),
    a conversion band by band as the core reads it (:func:`_converted`).
    * ``bg`` None: ``convert("RGB")``. A ``P`` image whose ``transparency`` is bytes
      (PNG ``tRNS``) is converted from an image on the same pixels without that entry:
      the same pixels, without the warning Pillow gives because bytes cannot be carried
      into RGB.
    * ``bg`` set: ``convert("RGBA")`` when the image has an ``A`` band or a
      ``transparency`` entry, else ``convert("RGB")``; but ``1`` / ``L`` with a
      ``transparency`` entry convert to ``LA`` (Pillow's ``convert_transparent``: the
      grey, alpha 0 where the pixel is the key, else 255), whose RGBA is ``L, L, L, A``,
      so its grey composite is each channel of the RGBA's, and the core resizes one
      channel rather than three.

    ``owned``: ``image`` is ours (a resize result), so it may be changed in place.
    """
    mode = image.mode
    bg = cfg.transparent_bg_config
    has_transparency = "transparency" in image.info
    if mode in ("RGB", "RGBA", "LA") or (mode == "L" and (bg is None or not has_transparency)):
        return _pixels_of(image)
    if bg is None:
        if mode == "P" and isinstance(image.info.get("transparency"), bytes):
            image = image if owned else _twin(image)
            del image.info["transparency"]
        return _converted(image, "RGB")
    if mode in ("1", "L") and has_transparency:
        return _converted(image, "LA")
    if "A" in image.getbands() or has_transparency:
        return _converted(image, "RGBA")
    return _converted(image, "RGB")


def _converted(image: Image.Image, mode: str) -> np.ndarray | _native.PillowRows:
    """``image.convert(mode)``'s pixels: converted band by band as the core reads them
    (:func:`kimi_k3_rs._input.pil._converted_rows`), so the conversion is never held
    whole, where Pillow exports; else converted here and read as
    :func:`kimi_k3_rs._input.pil._pixels_of` reads it. A mode Pillow cannot convert is
    the same :class:`ImageError` either way (a 1x1 crop is converted first)."""
    rows = _converted_rows(image, mode)
    if rows is None:
        return _pixels_of(_convert(image, mode))
    # Pillow's refusal, raised here: a 1x1 crop with the image's palette (a crop of a P
    # image without one gets a default palette, which convert would take), cropped as
    # ``Image.crop`` crops a loaded image, without its size check (of 1 pixel).
    probe = image._new(image.im.crop((0, 0, 1, 1)))
    probe.palette = image.palette.copy() if image.palette is not None else None
    _convert(probe, mode)
    return rows


def resize_order_check(mode: str, size: tuple[int, int], new_size: tuple[int, int], compat: str) -> None:
    """Refuse a Pillow-resized mode when ``pillow_compat`` picks another pass order than
    the installed Pillow's for this resize and the order changes the bytes (both passes run)."""
    installed = resolve_pillow_compat("auto")
    (width, height), (new_width, new_height) = size, new_size
    if width == new_width or height == new_height:
        return
    if _native.vertical_first(compat, *size, *new_size) != _native.vertical_first(installed, *size, *new_size):
        raise errors.pass_order(mode, PIL.__version__, installed, compat, size, new_size)


def resize_in_mode(image: Image.Image, new_size: tuple[int, int], options: _native.Options) -> Image.Image:
    """``image.resize(new_size, BICUBIC)`` in the image's own mode, as Pillow does it
    (Pillow ``PIL/Image.py: Image.resize``), for every mode but L / LA / RGB / RGBA (done by the core).

    * ``P``, ``1``: Pillow's own resize (it forces NEAREST; palette and ``info`` kept).
    * CMYK, RGBX, YCbCr, HSV, LAB, RGBa, La, PA, L (with ``transparency``): the 8-bit
      per-channel bicubic in Rust (``pillow_compat`` honoured) of the bytes Pillow stores,
      read band by band (``_native.pil_rows``; ``np.asarray`` where Pillow cannot export
      them), then a PIL image of the
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
        resize_order_check(mode, image.size, new_size, options.pillow_compat)
        return image.resize(new_size, Image.Resampling.BICUBIC)
    stored: np.ndarray | _native.PillowRows | None = _stored_rows(image)  # read band by band
    if stored is None:
        stored = np.asarray(image)
        flip = _SIGNED_BANDS.get(mode)
        if flip is not None:
            stored = stored ^ flip  # the bytes Pillow stores (and resamples) for LAB
    resized = _native.resize_bicubic(stored, new_size[0], new_size[1], options)
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


def core_pixels(
    image: Image.Image, cfg: MediaProcConfig, options: _native.Options
) -> tuple[np.ndarray | _native.PillowRows, tuple[int, int, int, int, int] | None]:
    """Turn one loaded PIL image into (uint8 HWC array or a ``PillowRows`` the core reads
    band by band, its sizing if already resized).

    PIL ``L`` (without ``transparency``, or with no background), ``LA``,
    ``RGB``, ``RGBA`` go to Rust as they are. For other modes the reference's mode steps
    run here (the checkpoint's ``_to_pil``, ``kimi_k3_vision_processing.py:
    KimiK3VisionProcessor.preprocess`` and Pillow ``PIL/Image.py: Image.resize``):
    before the resize, Pillow's ``convert`` (as ``fill_transparent_bg_with`` does);
    under ``after_resize``, the resize in the image's own mode
    (:func:`resize_in_mode`), then the ``convert``; Rust composites, pads, normalises
    and patchifies.

    A PIL image's pixels are read in place, without ``tobytes()``, where Pillow can
    export them (:mod:`kimi_k3_rs._input.pil`): the array is then a read-only view of
    the image's memory (an RGB one with Pillow's 4-byte pixel stride, which the core
    reads as it is), with the values ``np.asarray`` gives; an image in several blocks,
    and a conversion, are read band by band during the native call.
    """
    mode = image.mode
    if mode in _NATIVE_MODES and not (
        mode == "L" and cfg.transparent_bg_config is not None and "transparency" in image.info
    ):
        return _pixels_of(image), None
    if cfg.transparent_bg_fill_stage == "before_resize":
        return _composite_input(image, cfg, owned=False), None
    width, height = image.size
    sizing = _native.navit_resize_config(width, height, cfg.native)  # the only sizing of it
    _, new_width, new_height, _, _ = sizing
    if (new_width, new_height) == (width, height):  # Pillow's resize would be a copy
        return _composite_input(image, cfg, owned=False), None
    resized = resize_in_mode(image, (new_width, new_height), options)
    return _composite_input(resized, cfg, owned=True), sizing


# --- Pillow export -----------------------------------------------------------
#
# Zero-copy input of PIL images: the core reads Pillow's own pixel memory.
#
# A PIL image of mode ``L``, ``LA``, ``RGB`` or ``RGBA`` reaches the Rust core through
# Pillow's Arrow C data interface export (``Image.__arrow_c_array__``, Pillow >= 11.2.1),
# read by ``_native.pil_pixels``: no ``tobytes()`` copy (about 34 ms of GIL-holding work
# for a 12 MP image). Pillow exports only an image held in one block of memory; its
# default allocator splits images over 16 MiB (larger than 2048x2048 RGB) into 16 MiB
# blocks, so the core reads those band by band (``_native.pil_rows``: each band cropped,
# exported and copied, a few MB at a time, at most one block a crop, as the export
# needs), unless :func:`enable_pillow_zero_copy` is called. Either way the output is the
# same, bit for bit.



#: The PIL modes the core takes as they are (the keys of ``_NATIVE_MODES``).
_EXPORTED_MODES = frozenset(_NATIVE_MODES)

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


def rgb_frame(image: Image.Image | np.ndarray) -> np.ndarray:
    """One frame as the uint8 ``HxWx3`` array the core resizes: PIL images through
    ``convert("RGB")`` (the checkpoint's ``_to_pil``); ``HxW`` / 1-, 2- and 4-channel
    arrays as that conversion reads L, LA and RGBA (grey repeated, alpha dropped). Other
    arrays go to the core as they are, which names what is wrong with them."""
    if isinstance(image, Image.Image):
        return np.asarray(image if image.mode == "RGB" else image.convert("RGB"))
    if image.dtype != np.uint8:
        return image
    if image.ndim == 2:
        return np.repeat(image[:, :, None], 3, axis=2)
    if image.ndim == 3 and image.shape[2] in (1, 2):
        return np.repeat(image[:, :, :1], 3, axis=2)
    if image.ndim == 3 and image.shape[2] == 4:
        return np.ascontiguousarray(image[:, :, :3])
    return image if image.flags.c_contiguous else np.ascontiguousarray(image)
