"""Find the libjpeg the installed Pillow uses, for the native JPEG decoder.

The native decoder (``_native.load_libjpeg``) must run the very library Pillow
decodes with, so that its pixels are Pillow's: Linux wheels bundle
libjpeg-turbo as ``site-packages/pillow.libs/libjpeg-<hash>.so.62.*``, macOS
wheels as ``PIL/.dylibs/libjpeg.62.*.dylib``; a Pillow built from source links
the system's.
"""

from __future__ import annotations

import glob
import os

__all__ = ["find_pillow_libjpeg"]


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
