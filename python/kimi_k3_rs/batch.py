"""One batch through the core: :func:`kimi_k3_rs._input.load_batch`, then one native call.

Shared by :func:`kimi_k3_rs.processor.preprocess`, ``KimiK3VisionProcessor.preprocess``
(:mod:`kimi_k3_rs.hf`) and ``KimiK3EncoderInputs.materialize`` (:mod:`kimi_k3_rs.deferred`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _native
from ._input import load_batch
from .config import MediaProcConfig
from .options import CallOptions, from_native


def run_batch(
    images: Sequence[Any],
    cfg: MediaProcConfig,
    opts: CallOptions,
    out: np.ndarray | None = None,
    indices: Sequence[int] | None = None,
) -> tuple[np.ndarray, npt.NDArray[np.int64]]:
    """Preprocess a batch (:func:`kimi_k3_rs._input.load_batch`) in one native call:
    ``(pixel_values, grid_thws)``, ``pixel_values`` in ``out`` when given.

    ``indices``: the numbers errors give the images (their batch positions by default).
    """
    items = load_batch(images, cfg, opts, indices)
    pixel_values, grid_thws = _native.preprocess(items, cfg.native, opts.native, out=out)
    return (out if out is not None else from_native(pixel_values, opts.dtype)), grid_thws
