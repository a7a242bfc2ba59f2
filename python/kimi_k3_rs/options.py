"""Per-call options: validation of ``pillow_compat`` .. ``allowed_formats``, and the
resize pass-order rule ``pillow_compat`` names (:func:`resolve_pillow_compat`).

``CallOptions`` is what every entry point (``preprocess``, ``KimiK3VisionProcessor``,
``prepare_kimi_k3_encoder_inputs``) validates its keyword options into, through
:func:`kimi_k3_rs.config.call_setup`.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from typing import Any, Final

import PIL
from PIL import Image

from . import _native, errors
from ._pickling import ByConstructor

__all__ = [
    "DEFAULT_MAX_DECODED_BYTES",
    "DEFAULT_MAX_IMAGE_PIXELS",
    "NUM_THREADS_ENV",
    "VISION_FORMATS",
    "resolve_pillow_compat",
]

#: The formats a public endpoint needs (``allowed_formats=VISION_FORMATS``): what
#: phones, browsers and screenshot tools send. By default every format Pillow reads
#: is opened, as the checkpoint opens it.
VISION_FORMATS: tuple[str, ...] = ("JPEG", "MPO", "PNG", "WEBP", "GIF", "BMP", "TIFF", "PPM")

#: Default ``max_image_pixels``: the size at which Pillow itself raises
#: ``DecompressionBombError`` (2 x ``PIL.Image.MAX_IMAGE_PIXELS`` at import time).
DEFAULT_MAX_IMAGE_PIXELS: int | None = (
    2 * Image.MAX_IMAGE_PIXELS if Image.MAX_IMAGE_PIXELS is not None else None
)

#: Default ``max_decoded_bytes``: 1 GiB of decoded pixels per image.
DEFAULT_MAX_DECODED_BYTES: int | None = 1 << 30


def _check_limit(value: Any) -> bool:
    """Whether ``value`` is a valid limit: a positive int (not a bool) or None."""
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)


def _check_formats(value: Any) -> frozenset[str] | None:
    """``allowed_formats`` as a set of Pillow format names (upper case), or None.

    Raises:
        TypeError: not None and not a sequence of str (a lone str included).
        KimiK3Error: a name Pillow has no plugin for.
    """
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        raise errors.bad_allowed_formats(value)
    if not all(isinstance(name, str) for name in value):
        raise errors.bad_allowed_formats(value)
    Image.init()
    known = set(Image.ID) | {"MPO"}  # MPO: opened by the JPEG plugin (``jpeg_factory``)
    names = frozenset(name.upper() for name in value)
    unknown = sorted(names - known)
    if unknown:
        raise errors.unknown_formats(unknown, sorted(known))
    return names


def _check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise errors.not_a_flag(name, value)
    return value


class Unset(enum.Enum):
    """The type of :data:`UNSET`, so that ``help()`` shows a readable default."""

    UNSET = "unset"

    def __repr__(self) -> str:
        return "<not given: the processor's own>"


#: Marks an option that was not passed (None is a valid ``max_image_pixels``).
UNSET: Final = Unset.UNSET

#: Environment variable read when ``num_threads`` is None.
NUM_THREADS_ENV = "KIMI_K3_RS_NUM_THREADS"


def _env_threads() -> int:
    """The thread count of ``KIMI_K3_RS_NUM_THREADS``, 1 when unset or blank."""
    env = os.environ.get(NUM_THREADS_ENV, "").strip()
    if not env:
        return 1
    if not (env.isascii() and env.isdigit() and 1 <= int(env) <= 1024):
        raise errors.bad_env_threads(NUM_THREADS_ENV, env)
    return int(env)


@dataclass(frozen=True)
class CallOptions(ByConstructor):
    """The per-call options of every entry point, validated (the core checks
    ``pillow_compat``, ``dtype`` and ``num_threads``: ``native``); built by :meth:`make`.

    Pickling and copies: the keyword arguments of :meth:`make`, which a load calls
    (so a damaged pickle raises what ``make`` raises for those values)."""

    native: _native.Options
    exif_transpose: bool = False
    max_image_pixels: int | None = DEFAULT_MAX_IMAGE_PIXELS
    max_decoded_bytes: int | None = DEFAULT_MAX_DECODED_BYTES
    allowed_formats: frozenset[str] | None = None
    #: The resolved pass-order rule: ``"12"``, ``"12.2"`` or ``"13"`` (``native``'s).
    compat: str = field(init=False)
    #: ``"float32"``, ``"bfloat16"`` or ``"float16"`` (``native``'s).
    dtype: str = field(init=False)
    #: Threads of a call (``native``'s).
    num_threads: int = field(init=False)

    def __post_init__(self) -> None:
        # ``native``'s values as plain attributes: read on every call, without a call.
        for name, value in (
            ("compat", self.native.pillow_compat),
            ("dtype", self.native.dtype),
            ("num_threads", self.native.num_threads),
        ):
            object.__setattr__(self, name, value)

    def __eq__(self, other: object) -> bool:
        """Equal when every option is (``native`` compared by its values, so copies and
        unpickled options equal the original)."""
        if not isinstance(other, CallOptions):
            return NotImplemented
        return self._constructor_kwargs() == other._constructor_kwargs()

    def __hash__(self) -> int:
        return hash(tuple(self._constructor_kwargs().values()))

    def _constructor_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :meth:`make` (and of the processor) that give these options."""
        return {
            "pillow_compat": self.compat,
            "exif_transpose": self.exif_transpose,
            "dtype": self.dtype,
            "num_threads": self.num_threads,
            "max_image_pixels": self.max_image_pixels,
            "max_decoded_bytes": self.max_decoded_bytes,
            "allowed_formats": self.allowed_formats,
        }

    @classmethod
    def _construct(cls, **kwargs: Any) -> CallOptions:
        """A load goes through :meth:`make`, the constructor that validates."""
        return cls.make(**kwargs)

    @classmethod
    def make(
        cls,
        pillow_compat: Any = "auto",
        exif_transpose: Any = False,
        dtype: Any = "float32",
        num_threads: Any = None,
        max_image_pixels: Any = DEFAULT_MAX_IMAGE_PIXELS,
        max_decoded_bytes: Any = DEFAULT_MAX_DECODED_BYTES,
        allowed_formats: Any = None,
    ) -> CallOptions:
        """The options of these keyword arguments, validated (``num_threads=None`` reads
        ``KIMI_K3_RS_NUM_THREADS``); :func:`kimi_k3_rs.config.call_setup` keeps them by
        their values for the calls of an entry point.

        Raises:
            TypeError / KimiK3Error: as the entry points document, for a bad value.
        """
        native = _native.Options(
            resolve_pillow_compat(pillow_compat), dtype, _env_threads() if num_threads is None else num_threads
        )
        if not _check_limit(max_image_pixels):
            raise errors.bad_max_image_pixels(max_image_pixels)
        if not _check_limit(max_decoded_bytes):
            raise errors.bad_max_decoded_bytes(max_decoded_bytes)
        return cls(
            native=native,
            exif_transpose=_check_flag("exif_transpose", exif_transpose),
            max_image_pixels=max_image_pixels,
            max_decoded_bytes=max_decoded_bytes,
            allowed_formats=_check_formats(allowed_formats),
        )


#: The first Pillow release of each resize pass-order rule, newest first:
#: ``(major, minor)`` and its ``pillow_compat`` value; older releases are ``"12"``.
_PILLOW_COMPAT_SINCE: tuple[tuple[tuple[int, int], str], ...] = (((13, 0), "13"), ((12, 2), "12.2"))


def resolve_pillow_compat(pillow_compat: Any) -> str:
    """Resolve ``pillow_compat`` to ``"12"``, ``"12.2"`` or ``"13"``, the resize pass-order
    rule of a Pillow release (``reference-spec.md`` section 5.1):

    * ``"12"``: Pillow 12.0 - 12.1, horizontal pass first, always.
    * ``"12.2"``: Pillow 12.2 - 12.3, vertical pass first for an image more than 100
      times as tall as wide that loses height (``Image.resize``, python-pillow PR 9524).
    * ``"13"``: Pillow 13, vertical pass first when the height loses more than twice as
      many pixels as the width (``ImagingResampleInner``, PR 9549).

    ``"auto"`` means the installed Pillow, by its major and minor version
    (``_PILLOW_COMPAT_SINCE``). Other values are checked by the core.

    Raises:
        KimiK3Error: any value other than ``"auto"``, ``"12"``, ``"12.2"`` or ``"13"``.
    """
    if pillow_compat == "auto":
        major, minor = (int(part) for part in PIL.__version__.split(".")[:2])
        return next((compat for since, compat in _PILLOW_COMPAT_SINCE if (major, minor) >= since), "12")
    return _native.Options(pillow_compat, "float32", 1).pillow_compat
