"""The public ``kimi_k3_rs.KimiK3VisionProcessor``: the plain class of :mod:`kimi_k3_rs.hf`,
or, when transformers imports, its subclass that is also a transformers
``BaseImageProcessor`` (built once per process, on first access)."""

from __future__ import annotations

from typing import Any

from ..options import UNSET
from .processor import KimiK3VisionProcessor

#: The class ``kimi_k3_rs.KimiK3VisionProcessor`` names, once looked up (``UNSET`` before).
_PUBLIC_CLASS: Any = UNSET


def public_class() -> type[KimiK3VisionProcessor]:
    """The class ``kimi_k3_rs.KimiK3VisionProcessor`` resolves to, built once per process.

    When ``transformers.image_processing_utils.BaseImageProcessor`` imports: a subclass
    of :class:`KimiK3VisionProcessor` and of it (this module's methods first, so the
    checkpoint's behaviour wins over transformers' defaults; what the checkpoint's class
    inherits from it, ``__init__``'s kept keywords, ``to_dict`` and ``__call__``, is
    transformers' own through ``_image_processor_base``), named
    ``kimi_k3_rs.KimiK3VisionProcessor`` (so instances pickle by reference to it).
    Otherwise (not installed, or failing to import): :class:`KimiK3VisionProcessor`.
    """
    global _PUBLIC_CLASS
    if _PUBLIC_CLASS is UNSET:
        try:
            from transformers.image_processing_utils import BaseImageProcessor
        except Exception:  # noqa: BLE001 (absent or broken: the plain class)
            _PUBLIC_CLASS = KimiK3VisionProcessor
        else:
            namespace = {
                "__doc__": KimiK3VisionProcessor.__doc__,
                "__module__": "kimi_k3_rs",
                "__qualname__": "KimiK3VisionProcessor",
                "model_input_names": ["pixel_values", "grid_thws"],
                "_image_processor_base": BaseImageProcessor,
            }
            _PUBLIC_CLASS = type("KimiK3VisionProcessor", (KimiK3VisionProcessor, BaseImageProcessor), namespace)
    cls: type[KimiK3VisionProcessor] = _PUBLIC_CLASS
    return cls
