"""Ray Data: preprocess a dataset of images on a cluster, into the schema of :mod:`kimi_k3_rs.arrow`.

:class:`KimiK3Preprocessor` is the callable class ``Dataset.map_batches`` runs on
its actors (pyarrow batches in and out); :func:`preprocess_dataset` wires it with
defaults that leave CPUs for the read and write tasks; :func:`count_tokens_dataset`
adds token counts from image sizes, no pixels touched. Ray (the ``ray`` extra, with
``ray[data]``) is imported when a function here is called.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import errors
from .arrow import _check, _pyarrow, preprocess_to_arrow
from .config import MediaProcConfig
from .sizing import count_image_tokens

__all__ = ["KimiK3Preprocessor", "count_tokens_dataset", "preprocess_dataset"]

#: CPUs one :class:`KimiK3Preprocessor` actor holds by default: fractional, so that on a
#: small cluster the read and write tasks (1 CPU each) still find a CPU
#: (ray-project/ray#44687).
DEFAULT_ACTOR_CPUS = 0.75
#: Images per batch by default (one native call each).
DEFAULT_BATCH_SIZE = 16


def _ray() -> Any:
    """The ``ray`` module with ``ray.data``, or the ImportError that says which extra to install."""
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise errors.missing_extra("kimi_k3_rs.ray", "ray[data]", "ray") from exc
    return ray


class KimiK3Preprocessor:
    """The ``map_batches`` callable: a pyarrow batch of images in, the fixed schema out.

    Each actor builds it in ``__init__`` from the plain ``media_proc_cfg`` dict (the
    config is validated there, on every worker). Each call runs
    :func:`kimi_k3_rs.arrow.preprocess_to_arrow` on the batch's ``column`` in one
    native call (image by image where one fails, with ``on_error="null"``).

    Args:
        media_proc_cfg: the ``media_proc_cfg`` dict (or a :class:`MediaProcConfig`).
        column: the input column: encoded image ``bytes`` (``read_binary_files``),
            file paths or ``data:`` URLs.
        drop_column: whether the output leaves ``column`` out; default (None): only
            when it holds binary data (the bytes are not needed after decoding). Every
            other column of the batch passes through, first, in order.
        on_error: ``"raise"`` (default; the task fails) or ``"null"`` (the image's row
            gets null pixels and its ``error``).
        **options: the options of :func:`kimi_k3_rs.preprocess` except ``out``.

    Raises:
        ImportError: pyarrow is not installed.
        ValueError / TypeError: a bad config, ``on_error`` or option (in ``__init__``);
            the calls raise as :func:`preprocess_to_arrow`, and
            ``ValueError("column 'x': is not in the batch")`` for a missing column.
    """

    def __init__(
        self,
        media_proc_cfg: Mapping[str, Any] | MediaProcConfig,
        *,
        column: str = "bytes",
        drop_column: bool | None = None,
        on_error: str = "raise",
        **options: Any,
    ) -> None:
        self.media_proc_cfg, _, _ = _check(media_proc_cfg, on_error, options)
        self.column = column
        self.drop_column = drop_column
        self.on_error = on_error
        self.options = options

    def __call__(self, batch: Any) -> Any:
        """Preprocess one batch.

        Args:
            batch: a ``pyarrow.Table`` (``batch_format="pyarrow"``) holding ``column``.

        Returns:
            A ``pyarrow.Table``: the pass-through columns, then ``pixel_values``,
            ``grid_thw``, ``num_tokens``, ``error`` (:func:`kimi_k3_rs.arrow.arrow_schema`),
            one row per input row.
        """
        pa = _pyarrow()
        if self.column not in batch.column_names:
            raise errors.bad_column(self.column, "is not in the batch")
        images = batch.column(self.column)
        drop = self.drop_column
        if drop is None:
            drop = pa.types.is_binary(images.type) or pa.types.is_large_binary(images.type)
        keep = {name: batch.column(name) for name in batch.column_names if not (drop and name == self.column)}
        return preprocess_to_arrow(
            images.to_pylist(), self.media_proc_cfg, on_error=self.on_error, columns=keep, **self.options
        )


def _cluster_cpus(ray: Any) -> float:
    """The CPUs of the connected cluster (``ray.init()`` first when none is)."""
    if not ray.is_initialized():
        ray.init()
    return float(ray.cluster_resources().get("CPU", 1.0))


def preprocess_dataset(
    ds: Any,
    media_proc_cfg: Mapping[str, Any] | MediaProcConfig,
    *,
    column: str = "bytes",
    batch_size: int = DEFAULT_BATCH_SIZE,
    concurrency: int | tuple[int, int] | None = None,
    num_cpus: float = DEFAULT_ACTOR_CPUS,
    ray_remote_args: Mapping[str, Any] | None = None,
    **options: Any,
) -> Any:
    """Preprocess a Ray Dataset of images: ``ds.map_batches`` over a pool of :class:`KimiK3Preprocessor` actors.

    Works on ``ray.data.read_binary_files(folder, include_paths=True)`` (columns
    ``bytes`` and ``path``: ``path`` passes through), on a Parquet dataset of image
    bytes, or on any dataset whose ``column`` holds bytes, paths or ``data:`` URLs.
    The result is lazy, as Ray Data is: ``write_parquet``, ``iter_batches``, ...
    run it.

    Args:
        ds: a ``ray.data.Dataset``.
        media_proc_cfg: the ``media_proc_cfg`` dict (or a :class:`MediaProcConfig`).
        column: the input column (see :class:`KimiK3Preprocessor`).
        batch_size: images per batch, one native call each (default 16).
        concurrency: actors (an int, or a ``(min, max)`` autoscaling range); default:
            as many as fit in the cluster's CPUs less one, ``num_cpus`` each, at least
            1 and at most the CPU count, so that a read or write task always finds a
            CPU (on 2 CPUs: 1 actor; on 16: 16).
        num_cpus: CPUs each actor holds (default 0.75, fractional). ``num_threads``
            defaults to match it (``max(1, round(num_cpus))`` threads per call).
        ray_remote_args: more ``map_batches`` resource / scheduling arguments, e.g.
            ``{"scheduling_strategy": "SPREAD"}``.
        **options: ``drop_column``, ``on_error`` and the options of
            :func:`kimi_k3_rs.preprocess` except ``out`` (see
            :class:`KimiK3Preprocessor`).

    Returns:
        A ``ray.data.Dataset`` of the :func:`kimi_k3_rs.arrow.arrow_schema` schema, one
        row per input row, the input's other columns first.

    Raises:
        ImportError: Ray or pyarrow is not installed.
        ValueError / TypeError: a bad config, ``on_error`` or option, checked here
            before anything runs; the job's tasks raise as :class:`KimiK3Preprocessor`.
    """
    ray = _ray()
    constructor: dict[str, Any] = {key: options.pop(key) for key in ("drop_column", "on_error") if key in options}
    options.setdefault("num_threads", max(1, round(num_cpus)))
    cfg = _check(media_proc_cfg, constructor.get("on_error", "raise"), options)[0]  # fail here, not on the workers
    if concurrency is None:
        cpus = _cluster_cpus(ray)
        concurrency = int(max(1, min(cpus, math.floor((cpus - 1) / num_cpus + 1e-9))))
    remote: dict[str, Any] = dict(ray_remote_args or {})
    kwargs: dict[str, Any] = {"column": column, **constructor, **options}
    size: dict[str, int] = {"size": concurrency} if isinstance(concurrency, int) else {"min_size": concurrency[0], "max_size": concurrency[1]}
    return ds.map_batches(
        KimiK3Preprocessor,
        fn_constructor_args=(cfg,),
        fn_constructor_kwargs=kwargs,
        batch_size=batch_size,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(**size),
        num_cpus=num_cpus,
        zero_copy_batch=True,
        **remote,
    )


def _count_tokens_batch(batch: Any, media_proc_cfg: dict[str, Any], width_column: str, height_column: str) -> Any:
    """``num_tokens`` appended to a pyarrow batch, from its width and height columns."""
    pa = _pyarrow()
    for name in (width_column, height_column):
        if name not in batch.column_names:
            raise errors.bad_column(name, "is not in the batch")
    sizes = np.stack(
        [np.asarray(batch.column(width_column).to_numpy(), np.int64), np.asarray(batch.column(height_column).to_numpy(), np.int64)],
        axis=1,
    )
    tokens = count_image_tokens(sizes, media_proc_cfg)
    if "num_tokens" in batch.column_names:
        batch = batch.drop_columns(["num_tokens"])
    return batch.append_column("num_tokens", pa.array(tokens, pa.int64()))


def count_tokens_dataset(ds: Any, media_proc_cfg: Mapping[str, Any] | MediaProcConfig, *, width_column: str, height_column: str) -> Any:
    """Add an int64 ``num_tokens`` column from image sizes: a stateless map, no pixels.

    Each batch goes through :func:`kimi_k3_rs.count_image_tokens` (the sizing in Rust,
    millions of sizes per second), for schedulers and placeholder expansion.

    Args:
        ds: a ``ray.data.Dataset`` with integer width and height columns (pixels).
        media_proc_cfg: the ``media_proc_cfg`` dict (or a :class:`MediaProcConfig`).
        width_column, height_column: the names of those columns.

    Returns:
        A ``ray.data.Dataset``: every input column, then ``num_tokens`` (replacing one
        of that name).

    Raises:
        ImportError: Ray or pyarrow is not installed.
        ValueError / TypeError: a bad config (here); in the tasks, a missing column
            (``ValueError``), sizes that are not positive integers (as
            ``count_image_tokens``).
    """
    _ray()
    _pyarrow()
    cfg = _check(media_proc_cfg, "raise", {})[0]
    fn = functools.partial(_count_tokens_batch, media_proc_cfg=cfg, width_column=width_column, height_column=height_column)
    return ds.map_batches(fn, batch_format="pyarrow", zero_copy_batch=True)
