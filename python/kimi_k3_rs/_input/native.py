"""Native JPEG / PNG decoding: the per-format self-check, ``decode_path()``, and finding
Pillow's libjpeg.

The core decodes JPEG with the libjpeg-turbo that the installed Pillow links (loaded
at run time) and PNG with zlib's inflate (the ``zlib-rs`` port) called as Pillow's
``ZipDecode.c`` calls it, giving the bytes of the checkpoint's ``_to_pil`` (``Image.open``
+ ``load``) for the files its headers route natively (``_native.route_encoded``, read by
:func:`kimi_k3_rs._input.encoded.route`); every other file goes to Pillow. On first use
each format is checked once per process (:func:`in_force`): a small corpus made with
Pillow's encoder is decoded both ways, and any disagreement leaves that format with
Pillow. A forked child inherits the result. ``KIMI_K3_RS_DECODE=pillow`` sends every file to Pillow.
"""

from __future__ import annotations

import glob
import io
import os
import threading
from typing import Any

import numpy as np
import PIL
from PIL import Image

from .. import _native, errors

__all__ = ["DECODE_ENV", "decode_path", "find_pillow_libjpeg"]

#: Environment variable: ``pillow`` sends every encoded input to Pillow; ``auto``
#: (or unset) uses the native decoders where the self-check passes.
DECODE_ENV = "KIMI_K3_RS_DECODE"

#: The formats with a native decoder, by the key ``decode_path()`` gives them.
NATIVE_FORMATS = {"JPEG": "jpeg", "PNG": "png"}

_lock = threading.Lock()
#: ``format key -> (native in force, why)``, once the self-check has run.
_paths: dict[str, tuple[bool, str]] | None = None


def _reset_lock_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_lock_in_child)


def decode_path() -> dict[str, str]:
    """Which decoder each natively decodable format uses in this process, and why.

    Returns ``{"jpeg": ..., "png": ...}``: a text starting ``native:`` (with the
    library and the number of files of the self-check it agreed with Pillow on) or
    ``pillow:`` (with the reason: ``KIMI_K3_RS_DECODE=pillow``, no libjpeg beside the
    installed Pillow, or the file the self-check disagreed on). Runs the self-check
    on first use (once per process, under a lock; tens of milliseconds).

    Raises:
        KimiK3Error: ``KIMI_K3_RS_DECODE`` is set to something other than ``auto``
            or ``pillow``.
    """
    return {key: why for key, (_, why) in _checked().items()}


def in_force(fmt: str) -> bool:
    """Whether the core decodes files of ``fmt`` (a key of :data:`NATIVE_FORMATS`) in this
    process: its self-check passed (run on first use)."""
    return _checked()[NATIVE_FORMATS[fmt]][0]


def _checked() -> dict[str, tuple[bool, str]]:
    global _paths
    paths = _paths
    if paths is None:
        with _lock:
            if _paths is None:
                _paths = _self_check()
            paths = _paths
    return paths


def _pattern(width: int, height: int, seed: int) -> np.ndarray:
    """A photo-like RGB test image: smooth gradients with edges and some noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x ^ y) & 255], axis=-1)
    noise = rng.integers(-24, 25, size=base.shape)
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def _corpus(fmt: str) -> list[tuple[str, bytes]]:
    """Files of ``fmt`` made with the installed Pillow's encoder, each with a name."""
    files = []
    for width, height in ((1, 1), (33, 17), (64, 48), (127, 65)):
        rgb = Image.fromarray(_pattern(width, height, width * height))
        variants: list[tuple[str, Image.Image, dict[str, Any]]]
        if fmt == "JPEG":
            variants = [
                ("L q90", rgb.convert("L"), {"quality": 90}),
                *((f"RGB 4:{s} q{q}", rgb, {"quality": q, "subsampling": i})
                  for i, s in enumerate(("4:4", "2:2", "2:0")) for q in (50, 95)),
                ("RGB progressive", rgb, {"quality": 85, "progressive": True}),
                ("L progressive", rgb.convert("L"), {"quality": 75, "progressive": True}),
            ]
        else:
            variants = [
                (f"{mode} level {level}", rgb.convert(mode), {"compress_level": level})
                for mode in ("L", "LA", "RGB", "RGBA") for level in (1, 6)
            ]
        for name, image, params in variants:
            buffer = io.BytesIO()
            image.save(buffer, fmt, **params)
            files.append((f"{width}x{height} {name}", buffer.getvalue()))
    return files


def _disagreement(fmt: str) -> tuple[str | None, int]:
    """The first corpus file the native decoder does not decode as Pillow does (None
    when all agree), and the number of files."""
    corpus = _corpus(fmt)
    for name, data in corpus:
        try:
            path, native = _native.decode_image(data)
        except ValueError as exc:  # ImageError: a decoder fault is a disagreement, reported by name
            return f"{name} ({errors.abbreviate(exc)})", len(corpus)
        if path != "native":
            return f"{name} (routed to Pillow: {native})", len(corpus)
        # Pillow's own pixel limit, which a caller may have lowered, is no part of the check
        # (imported here: kimi_k3_rs._input.encoded imports this module)
        from .encoded import pixel_limit

        with pixel_limit(None), Image.open(io.BytesIO(data)) as image:
            expected = np.asarray(image)
        if native.shape != expected.shape or not np.array_equal(native, expected):
            return name, len(corpus)
    return None, len(corpus)


def _self_check() -> dict[str, tuple[bool, str]]:
    forced = os.environ.get(DECODE_ENV, "").strip().lower()
    if forced not in ("", "auto", "pillow"):
        raise errors.bad_decode_env(DECODE_ENV, forced)
    if forced == "pillow":
        return {key: (False, f"pillow: {DECODE_ENV}=pillow") for key in NATIVE_FORMATS.values()}
    paths: dict[str, tuple[bool, str]] = {}
    library = find_pillow_libjpeg()
    try:
        jpeg_library = _native.load_libjpeg(library) if library else None
    except OSError as exc:
        paths["jpeg"] = (False, f"pillow: cannot use {library}: {errors.abbreviate(exc, quote=False)}")
    else:
        if jpeg_library is None:
            paths["jpeg"] = (False, "pillow: no libjpeg found beside the installed Pillow")
    for fmt, key in NATIVE_FORMATS.items():
        if key in paths:
            continue
        library_text = jpeg_library if fmt == "JPEG" else "zlib-rs inflate"
        bad, count = _disagreement(fmt)
        if bad is None:
            paths[key] = (True, f"native: {library_text}, agrees with Pillow {PIL.__version__} on {count} files")
        else:
            paths[key] = (False, f"pillow: the native {fmt} decoder disagrees with Pillow {PIL.__version__} on {bad}")
    return paths


# --- libjpeg -----------------------------------------------------------------
#
# Find the libjpeg the installed Pillow uses, for the native JPEG decoder.
#
# The native decoder (``_native.load_libjpeg``) must run the very library Pillow
# decodes with, so that its pixels are Pillow's: Linux wheels bundle
# libjpeg-turbo as ``site-packages/pillow.libs/libjpeg-<hash>.so.62.*``, macOS
# wheels as ``PIL/.dylibs/libjpeg.62.*.dylib``; a Pillow built from source links
# the system's.


def _mapped_libjpeg() -> str | None:
    """The libjpeg mapped into this process (Linux ``/proc/self/maps``), if any."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6:
            continue
        path = fields[5]
        name = os.path.basename(path)
        if name.startswith("libjpeg") and ".so" in name and os.path.isfile(path):
            return path
    return None


def find_pillow_libjpeg() -> str | None:
    """Path of the shared libjpeg that ``PIL._imaging`` links, or ``None``.

    Imports ``PIL.Image`` (which loads ``PIL._imaging`` and so its libjpeg),
    then reads the mapped path from ``/proc/self/maps``; where that is not
    available (macOS) or shows none, globs ``pillow.libs/libjpeg*.so*`` and
    ``PIL/.dylibs/libjpeg*.dylib`` next to the ``PIL`` package.
    """
    try:
        import PIL.Image  # loads PIL._imaging, which links libjpeg
        from PIL import features
    except ImportError:
        return None
    if not features.check_codec("jpg"):
        return None
    mapped = _mapped_libjpeg()
    if mapped is not None:
        return mapped
    pil_dir = os.path.dirname(os.path.abspath(PIL.Image.__file__))
    patterns = (
        os.path.join(os.path.dirname(pil_dir), "pillow.libs", "libjpeg*.so*"),
        os.path.join(pil_dir, ".dylibs", "libjpeg*.dylib"),
    )
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None
