"""The exceptions of kimi_k3_rs, in one place: ours, and those Pillow's decoders raise.

``KimiK3Error`` (a ``ValueError``), ``ConfigError`` and ``ImageError`` are defined by
the compiled core; :class:`ImageTooLargeError` is defined here. All four are public as
``kimi_k3_rs.<name>``.
"""

from __future__ import annotations

import struct

from ._native import ConfigError, ImageError, KimiK3Error

__all__ = ["ConfigError", "ImageError", "ImageTooLargeError", "KimiK3Error"]


class ImageTooLargeError(ImageError):
    """An encoded image's header claims more pixels than ``max_image_pixels``."""


ImageTooLargeError.__module__ = "kimi_k3_rs"

#: What Pillow's openers and decoders raise on a corrupt or unreadable file besides
#: ``ValueError``: ``OSError`` (missing, truncated, unidentified), ``SyntaxError``
#: (broken PNG chunks), ``NotImplementedError`` (DDS), ``RuntimeError`` (AVIF),
#: ``KeyError`` / ``IndexError`` / ``struct.error`` / ``EOFError`` (other plugins).
_DECODE_ERRORS = (OSError, SyntaxError, NotImplementedError, RuntimeError, KeyError, IndexError, EOFError, struct.error)
