"""TEMP (helper's file replaces it)."""
from __future__ import annotations

import glob
import os


def find_pillow_libjpeg() -> str | None:
    import PIL
    hits = glob.glob(os.path.join(os.path.dirname(PIL.__file__), "..", "pillow.libs", "libjpeg*.so*"))
    return hits[0] if hits else None
