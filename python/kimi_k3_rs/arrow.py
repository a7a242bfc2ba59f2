"""Arrow tables of preprocessed images: one fixed schema, one row per input image.

The schema (:func:`arrow_schema`), whatever the batch (uniform or ragged sizes):

* ``pixel_values``: ``large_list<T>``, flat, ``n * 3 * ps * ps`` values per row (``n``
  patches of the row's image, as :func:`kimi_k3_rs.preprocess` gives them, patch-major),
  ``T`` = ``float`` (float32), ``halffloat`` (float16) or ``uint16`` (the bfloat16 bit
  patterns). The field metadata names the dtype and the patch size, e.g.
  ``{"kimi_k3_rs.dtype": "bfloat16", "patch_size": "14"}``. Large lists (int64 offsets):
  a plain list's int32 offsets overflow within a few dozen 8000x8000 K3 rows.
* ``grid_thw``: ``fixed_size_list<int64>[3]``, ``(1, h_patches, w_patches)``.
* ``num_tokens``: ``int64``, the LLM token count (the sizing's ``num_tokens``).
* ``error``: nullable ``string``, the message of an image that failed (``on_error="null"``).
* pass-through columns (e.g. ``path``), first, in the order given.

pyarrow is optional (the ``arrow`` extra); it is imported when a function here is called.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from . import errors
from .config import MediaProcConfig, TransparentBgConfig
from .deferred import prepare_kimi_k3_encoder_inputs
from .processor import preprocess

__all__ = ["arrow_schema", "pixel_values_from_arrow", "preprocess_to_arrow"]

#: Field metadata key of ``pixel_values`` naming the dtype of the values.
DTYPE_KEY = "kimi_k3_rs.dtype"
#: Field metadata key of ``pixel_values`` giving the patch edge in pixels.
PATCH_SIZE_KEY = "patch_size"
#: The columns every table of this module has, in order, after the pass-through ones.
FIXED_COLUMNS = ("pixel_values", "grid_thw", "num_tokens", "error")

_STORAGE = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}


def _pyarrow() -> Any:
    """The ``pyarrow`` module, or the ImportError that says which extra to install."""
    try:
        import pyarrow
        import pyarrow.compute
    except ImportError as exc:
        raise errors.missing_extra("kimi_k3_rs.arrow", "pyarrow", "arrow") from exc
    return pyarrow


def _value_type(pa: Any, dtype: str) -> Any:
    return {"float32": pa.float32(), "float16": pa.float16(), "bfloat16": pa.uint16()}[dtype]


def arrow_schema(dtype: str = "float32", patch_size: int = 14, extra_fields: Iterable[Any] = ()) -> Any:
    """The schema of every table :func:`preprocess_to_arrow` returns for these settings.

    Args:
        dtype: ``"float32"``, ``"float16"`` or ``"bfloat16"`` (the ``dtype`` option):
            the values are ``float``, ``halffloat`` or ``uint16`` (bfloat16 bits).
        patch_size: the config's ``patch_size`` in pixels (14), stored in the metadata.
        extra_fields: pass-through columns, placed first: ``pyarrow.Field`` objects or
            ``(name, type)`` pairs.

    Returns:
        A ``pyarrow.Schema``: the extra fields, then ``pixel_values``, ``grid_thw``,
        ``num_tokens`` and ``error`` (see the module doc).

    Raises:
        ImportError: pyarrow is not installed.
        ValueError: an unknown ``dtype``; an extra field named like a fixed column.

    Example:
        >>> from kimi_k3_rs.arrow import arrow_schema
        >>> arrow_schema("bfloat16").field("pixel_values").metadata
        {b'kimi_k3_rs.dtype': b'bfloat16', b'patch_size': b'14'}
    """
    pa = _pyarrow()
    if dtype not in _STORAGE:
        raise errors.bad_column("pixel_values", f"dtype must be 'float32', 'float16' or 'bfloat16', got {errors.abbreviate(dtype)}")
    extras = [f if isinstance(f, pa.Field) else pa.field(*f) for f in extra_fields]
    for f in extras:
        if f.name in FIXED_COLUMNS:
            raise errors.bad_column(f.name, "is one of the output columns")
    pixel_values = pa.field(
        "pixel_values",
        pa.large_list(pa.field("element", _value_type(pa, dtype), nullable=False)),
        metadata={DTYPE_KEY: dtype, PATCH_SIZE_KEY: str(int(patch_size))},
    )
    return pa.schema(
        [
            *extras,
            pixel_values,
            pa.field("grid_thw", pa.list_(pa.field("element", pa.int64(), nullable=False), 3)),
            pa.field("num_tokens", pa.int64()),
            pa.field("error", pa.string()),
        ]
    )


def _cfg_dict(media_proc_cfg: Mapping[str, Any] | MediaProcConfig) -> dict[str, Any]:
    """A plain ``media_proc_cfg`` dict (what the deferred flow and Ray workers take)."""
    if isinstance(media_proc_cfg, MediaProcConfig):
        out: dict[str, Any] = {}
        for f in fields(media_proc_cfg):
            if f.name == "native":
                continue
            value = getattr(media_proc_cfg, f.name)
            out[f.name] = value.as_dict() if isinstance(value, TransparentBgConfig) else value
        return out
    if not isinstance(media_proc_cfg, Mapping):
        raise errors.not_a_mapping("media_proc_cfg", media_proc_cfg)
    return dict(media_proc_cfg)


def _message(exc: BaseException) -> str:
    """The message of one image's failure, without the batch index of a one-image call."""
    text = str(exc)
    return text.removeprefix("image 0: ")


@dataclass
class _Rows:
    """One batch, preprocessed image by image where it failed (no pyarrow needed).

    ``flat``: the good images' pixels, ``[N, 3, ps, ps]`` of the storage dtype, in
    order; per image: ``grids`` (int64 ``[3]`` or None), ``tokens``, ``messages`` (None
    when it worked), ``sizes`` (original ``(width, height)``) and ``resizes`` (the
    sizing dict) or None where unknown.
    """

    flat: np.ndarray
    grids: list[Any]
    tokens: list[int | None]
    messages: list[str | None]
    sizes: list[tuple[int, int] | None]
    resizes: list[dict[str, int] | None]

    def offsets(self, ps: int) -> np.ndarray:
        """int64 ``[n + 1]`` value offsets of each image's row into ``flat`` (flattened)."""
        row_values = np.array([0 if g is None else int(np.prod(g)) * 3 * ps * ps for g in self.grids], np.int64)
        offsets = np.zeros(len(self.grids) + 1, np.int64)
        np.cumsum(row_values, out=offsets[1:])
        return offsets


def _one_call(items: Sequence[Any], cfg: dict[str, Any], options: dict[str, Any], ps: int, storage: Any) -> _Rows:
    """All of ``items`` in one native call (sizing first, then the pixels into one buffer)."""
    enc = prepare_kimi_k3_encoder_inputs(items, cfg, **options)
    flat = np.empty((int(enc.grid_thws.prod(axis=1).sum()), 3, ps, ps), storage)
    if items:
        got = preprocess(list(items), cfg, out=flat, **options)["grid_thws"]
        if not np.array_equal(got, enc.grid_thws):
            raise errors.wrong_grids()
    return _Rows(
        flat=flat,
        grids=list(enc.grid_thws),
        tokens=[int(t) for t in enc.num_tokens],
        messages=[None] * len(items),
        sizes=[(int(w), int(h)) for w, h in enc.original_image_sizes],
        resizes=list(enc.resize_configs),
    )


def _compute_rows(items: Sequence[Any], cfg: dict[str, Any], options: dict[str, Any], on_error: str) -> _Rows:
    """Preprocess a batch; with ``on_error="null"`` an image that fails is isolated
    (the batch is run again image by image) and gets its message instead of pixels."""
    ps = int(MediaProcConfig.from_dict(cfg).patch_size)
    storage = _STORAGE[options.get("dtype", "float32")]
    try:
        return _one_call(items, cfg, options, ps, storage)
    except (ValueError, OSError):
        if on_error == "raise":
            raise
    rows = _Rows(np.empty((0, 3, ps, ps), storage), [], [], [], [], [])
    parts: list[np.ndarray] = []
    for item in items:
        try:
            one = _one_call([item], cfg, options, ps, storage)
        except (ValueError, OSError) as exc:
            rows.grids.append(None)
            rows.tokens.append(None)
            rows.messages.append(_message(exc))
            rows.sizes.append(None)
            rows.resizes.append(None)
            continue
        parts.append(one.flat)
        for name in ("grids", "tokens", "messages", "sizes", "resizes"):
            getattr(rows, name).extend(getattr(one, name))
    if parts:
        rows.flat = np.concatenate(parts)
    return rows


def _to_table(pa: Any, rows: _Rows, schema: Any, extra_arrays: Sequence[Any], ps: int) -> Any:
    """The Arrow table of ``rows``; the values buffer is ``rows.flat`` itself (no copy)."""
    dtype = schema.field("pixel_values").metadata[DTYPE_KEY.encode()].decode()
    values = pa.Array.from_buffers(_value_type(pa, dtype), rows.flat.size, [None, pa.py_buffer(rows.flat)])
    failed = np.array([m is not None for m in rows.messages], bool)
    pixel_values = pa.LargeListArray.from_arrays(
        pa.array(rows.offsets(ps)),
        values,
        type=schema.field("pixel_values").type,
        mask=pa.array(failed) if failed.any() else None,
    )
    grid_thw = pa.array([None if g is None else [int(v) for v in g] for g in rows.grids], schema.field("grid_thw").type)
    arrays = [*extra_arrays, pixel_values, grid_thw, pa.array(rows.tokens, pa.int64()), pa.array(rows.messages, pa.string())]
    return pa.Table.from_arrays(arrays, schema=schema)


def _check(media_proc_cfg: Any, on_error: str, options: dict[str, Any]) -> tuple[dict[str, Any], int, str]:
    """Validate the config, ``on_error`` and the options once: (config dict, patch size, dtype)."""
    if on_error not in ("raise", "null"):
        raise errors.bad_on_error(on_error)
    cfg = _cfg_dict(media_proc_cfg)
    prepare_kimi_k3_encoder_inputs([], cfg, **options)  # raises for a bad config or option
    return cfg, int(MediaProcConfig.from_dict(cfg).patch_size), options.get("dtype", "float32")


def preprocess_to_arrow(
    images: Any,
    media_proc_cfg: Mapping[str, Any] | MediaProcConfig,
    *,
    on_error: str = "raise",
    columns: Mapping[str, Any] | None = None,
    **options: Any,
) -> Any:
    """Preprocess a batch into a ``pyarrow.Table`` of the fixed schema, one row per image.

    The pixels are those of :func:`kimi_k3_rs.preprocess` on the same images and
    options, bit for bit; the table's values buffer IS the output array (no copy:
    ``pa.py_buffer`` over it, int64 offsets), except on the ``on_error="null"`` path
    after a failure, where the good images' rows are joined once.

    Args:
        images: as :func:`kimi_k3_rs.preprocess` (one image or a list).
        media_proc_cfg: the ``media_proc_cfg`` dict or a :class:`MediaProcConfig`.
        on_error: ``"raise"`` (default): an image that fails raises, as ``preprocess``
            does (naming its batch index). ``"null"``: that image's row gets null
            ``pixel_values``, ``grid_thw`` and ``num_tokens`` and its message in
            ``error``; the other images are still processed. Errors of the config or
            the options raise in both modes.
        columns: pass-through columns, ``{name: values}``, each ``len(images)`` long
            (a list, numpy array, ``pyarrow.Array`` or ``ChunkedArray``), placed first.
        **options: the options of :func:`kimi_k3_rs.preprocess` except ``out``
            (``pillow_compat``, ``exif_transpose``, ``dtype``, ``num_threads``,
            ``max_image_pixels``). ``dtype`` picks the value type (module doc).

    Returns:
        A ``pyarrow.Table`` with :func:`arrow_schema` ``(dtype, patch_size, fields of
        columns)``; ``num_tokens`` is the sizing's count (``navit_resize_config``'s
        ``num_tokens``, ``fixed_output_tokens`` when the config sets it).

    Raises:
        ImportError: pyarrow is not installed.
        ValueError: a bad ``on_error``; a pass-through column of the wrong length or
            named like an output column; with ``on_error="raise"``, everything
            :func:`kimi_k3_rs.preprocess` raises.
        TypeError: an unknown option, ``out`` among them; as ``preprocess``.

    Example:
        >>> import numpy as np, kimi_k3_rs
        >>> from kimi_k3_rs.arrow import preprocess_to_arrow
        >>> t = preprocess_to_arrow([np.zeros((28, 56, 3), np.uint8)], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
        >>> t.column_names, t["grid_thw"].to_pylist(), t["num_tokens"].to_pylist()
        (['pixel_values', 'grid_thw', 'num_tokens', 'error'], [[1, 2, 4]], [2])
    """
    pa = _pyarrow()
    cfg, ps, dtype = _check(media_proc_cfg, on_error, options)
    items = list(images) if isinstance(images, (list, tuple)) else [images]
    extra_arrays: list[Any] = []
    extra_fields: list[Any] = []
    for name, values in (columns or {}).items():
        array = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values)
        if len(array) != len(items):
            raise errors.bad_column(name, f"has {len(array)} values for {len(items)} images")
        extra_arrays.append(array)
        extra_fields.append(pa.field(name, array.type))
    schema = arrow_schema(dtype, ps, extra_fields)
    return _to_table(pa, _compute_rows(items, cfg, options, on_error), schema, extra_arrays, ps)


def _ml_bfloat16() -> Any:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return ml_dtypes.bfloat16


def pixel_values_from_arrow(
    table_or_column: Any, *, dtype: str | None = None, patch_size: int | None = None
) -> list[np.ndarray | None]:
    """The ``pixel_values`` of each row as ``[n, 3, ps, ps]`` arrays (None for a null row).

    The arrays are read-only views of Arrow's buffers (no copy) where the values have
    no validity bitmap, as in every table :func:`preprocess_to_arrow` writes and in
    Parquet read back by pyarrow; otherwise (values with nulls) they are copies.

    Args:
        table_or_column: a ``pyarrow.Table`` or ``RecordBatch`` with a ``pixel_values``
            column, or that column alone (``Array`` / ``ChunkedArray`` of large or
            plain lists).
        dtype: ``"float32"``, ``"float16"`` or ``"bfloat16"``; default: the field
            metadata (``kimi_k3_rs.dtype``), else the value type (``float`` /
            ``halffloat`` / ``uint16`` read as bfloat16 bits).
        patch_size: the patch edge; default: the field metadata (``patch_size``), else
            derived from a ``grid_thw`` column of the table.

    Returns:
        One entry per row: ``float32``, ``float16``, or ``ml_dtypes.bfloat16`` when
        ml_dtypes is installed (else the ``uint16`` bits) ``[h * w, 3, ps, ps]``
        arrays, in row order; None for a null row.

    Raises:
        ImportError: pyarrow is not installed.
        TypeError: ``table_or_column`` is not an Arrow table, batch or array.
        ValueError: no ``pixel_values`` column; the dtype or the patch size cannot be
            told (a bare column without ``patch_size=``); a row whose length is not a
            multiple of ``3 * ps * ps``.
    """
    pa = _pyarrow()
    grid = None
    if isinstance(table_or_column, (pa.Table, pa.RecordBatch)):
        if "pixel_values" not in table_or_column.schema.names:
            raise errors.bad_column("pixel_values", "is not in the table")
        meta = {k.decode(): v.decode() for k, v in (table_or_column.schema.field("pixel_values").metadata or {}).items()}
        dtype = dtype or meta.get(DTYPE_KEY)
        if patch_size is None and PATCH_SIZE_KEY in meta:
            patch_size = int(meta[PATCH_SIZE_KEY])
        if "grid_thw" in table_or_column.schema.names:
            grid = table_or_column.column("grid_thw")
        column = table_or_column.column("pixel_values")
    elif isinstance(table_or_column, (pa.Array, pa.ChunkedArray)):
        column = table_or_column
    else:
        raise errors.not_arrow(table_or_column)
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    value_type = column.type.value_type
    if dtype is None:
        dtype = {pa.float32(): "float32", pa.float16(): "float16", pa.uint16(): "bfloat16"}.get(value_type)
    if dtype not in _STORAGE:
        raise errors.unknown_layout("dtype")
    if patch_size is None and grid is not None:
        for length, thw in zip(pa.compute.list_value_length(column).to_pylist(), grid.to_pylist()):
            if length and thw:
                patch_size = math.isqrt(length // (3 * int(np.prod(thw))))
                break
    if patch_size is None:
        raise errors.unknown_layout("patch size")
    ps = int(patch_size)
    view = _ml_bfloat16() if dtype == "bfloat16" else None
    result: list[np.ndarray | None] = []
    for chunk in chunks:
        offsets = chunk.offsets.to_numpy()
        if len(chunk):
            values = chunk.values.to_numpy(zero_copy_only=chunk.values.null_count == 0)
            values = values.view(_STORAGE[dtype]) if dtype != "float16" else values
            if view is not None:
                values = values.view(view)
        nulls = chunk.is_null().to_numpy(zero_copy_only=False)
        for i in range(len(chunk)):
            if nulls[i]:
                result.append(None)
                continue
            start, stop = int(offsets[i]), int(offsets[i + 1])
            if (stop - start) % (3 * ps * ps):
                raise errors.bad_column("pixel_values", f"a row of {stop - start} values is not whole {ps}x{ps} patches")
            result.append(values[start:stop].reshape(-1, 3, ps, ps))
    return result
