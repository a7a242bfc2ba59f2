"""Tensors and ``BatchFeature`` for the HF processor's ``preprocess`` (:mod:`kimi_k3_rs.hf`).

The arrays become torch tensors as ``return_tensors`` asks (:func:`to_tensors`), and the
mapping transformers' ``BatchFeature`` when it imports (:func:`batch_feature`). torch and
transformers are looked up once per process, on first use, never at import.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import errors
from ..options import UNSET

#: ``torch`` when it can be imported, None when not, ``UNSET`` until first looked up.
_TORCH: Any = UNSET


def _torch_module() -> Any:
    """The ``torch`` module, or None; imported once per process (an install whose import
    fails in any way counts as absent)."""
    global _TORCH
    if _TORCH is UNSET:
        try:
            import torch
        except Exception:  # noqa: BLE001 (not installed, or broken: numpy arrays)
            torch = None
        _TORCH = torch
    return _TORCH


def to_tensors(out: dict[str, np.ndarray], return_tensors: Any) -> dict[str, Any]:
    """The arrays as ``return_tensors`` asks: ``"np"`` as they are; ``"pt"`` as torch
    tensors sharing their memory; None as torch tensors when torch imports (the
    checkpoint builds torch tensors whatever is asked), else as they are."""
    if return_tensors == "np":
        return out
    if return_tensors is None:
        torch = _torch_module()
        if torch is None:
            return out
    elif return_tensors == "pt":
        torch = _torch_module()
        if torch is None:
            raise errors.no_torch()
    else:
        raise errors.bad_return_tensors(return_tensors)
    tensors = {}
    for key, value in out.items():
        if value.dtype.name in ("bfloat16", "uint16") and key == "pixel_values":
            tensors[key] = torch.from_numpy(value.view(np.uint16)).view(torch.bfloat16)
        else:
            tensors[key] = torch.from_numpy(value)
    return tensors


#: transformers' ``BatchFeature`` class, None when transformers cannot be imported, or
#: ``UNSET`` until the first
#: :meth:`kimi_k3_rs.hf.KimiK3VisionProcessor.preprocess` call looks.
_BATCH_FEATURE: Any = UNSET


def _find_batch_feature() -> Any:
    """``transformers.image_processing_utils.BatchFeature`` when it subclasses
    ``transformers.feature_extraction_utils.BatchFeature`` (4.57, 5.x), else the latter;
    None when that cannot be imported (not installed, or broken)."""
    try:
        base = importlib.import_module("transformers.feature_extraction_utils").BatchFeature
    except Exception:  # noqa: BLE001 (not installed (ImportError), or broken: plain dicts)
        return None
    try:
        image = importlib.import_module("transformers.image_processing_utils").BatchFeature
    except Exception:  # noqa: BLE001 (an older or partial install: the base class)
        return base
    return image if isinstance(image, type) and issubclass(image, base) else base


def batch_feature(data: dict[str, Any]) -> Mapping[str, Any]:
    """``BatchFeature(data)`` when transformers can be imported, else ``data``.

    The class is ``transformers.image_processing_utils.BatchFeature``, the one the
    checkpoint's vision processor returns (transformers 4.57 and 5 also have
    ``feature_extraction_utils.BatchFeature``, its base, used when the first cannot be
    imported; :func:`_find_batch_feature`). Serving code that checks for it, or calls ``.to(device)`` / ``.data`` on
    it, gets one. The values are wrapped as they are (no ``tensor_type`` conversion, so
    no copy). The import is tried once per process, on the first call; an install that
    fails to import counts as absent.
    """
    global _BATCH_FEATURE
    if _BATCH_FEATURE is UNSET:
        _BATCH_FEATURE = _find_batch_feature()
    if _BATCH_FEATURE is None:
        return data
    batch: Mapping[str, Any] = _BATCH_FEATURE(data=data)
    return batch
