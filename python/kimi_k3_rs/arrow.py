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

    Examples:
        >>> from kimi_k3_rs.arrow import arrow_schema
        >>> arrow_schema("bfloat16").field("pixel_values").metadata
        {b'kimi_k3_rs.dtype': b'bfloat16', b'patch_size': b'14'}
    """
    pa = _pyarrow()
    dtype = _checked_dtype(dtype, "dtype")
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

    Examples:
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


def _checked_dtype(value: Any, source: str) -> str:
    """``value`` when it names a dtype of this module, else the ValueError naming ``source``."""
    if isinstance(value, str) and value in _STORAGE:
        return value
    raise errors.bad_column(
        "pixel_values", f"{source} must be 'float32', 'float16' or 'bfloat16', got {errors.abbreviate(value)}"
    )


def _checked_patch_size(value: Any, source: str) -> int:
    """``value`` when it is a positive int (not a bool), else the ValueError naming ``source``."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 1:
        return int(value)
    raise errors.bad_column("pixel_values", f"{source} must be a positive int, got {errors.abbreviate(value)}")


def _table_column(table: Any, name: str) -> tuple[Any, dict[bytes, bytes]] | None:
    """The column ``name`` of a table or batch and its field metadata, None when absent.

    Raises:
        ValueError: the table has several columns of that name.
    """
    found = table.schema.get_all_field_indices(name)
    if not found:
        return None
    if len(found) > 1:
        raise errors.bad_column(name, f"appears {len(found)} times in the table")
    return table.column(found[0]), table.schema.field(found[0]).metadata or {}


def _valid_chunks(pa: Any, name: str, column: Any) -> list[Any]:
    """The chunks of ``column``, each passing pyarrow's full validation (offsets in
    order and within the values, buffers of the right sizes), so nothing reads past
    its buffers.

    Raises:
        ValueError: a chunk pyarrow refuses (e.g. decreasing offsets of an IPC table).
    """
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    for chunk in chunks:
        try:
            chunk.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise errors.bad_column(name, f"is not valid Arrow data: {errors.abbreviate(str(exc), quote=False)}") from exc
    return chunks


def _layout_dtype(pa: Any, value_type: Any, dtype: Any, meta: dict[bytes, bytes]) -> str:
    """The dtype of the values: ``dtype``, else the metadata's, else the value type's;
    the value type must be the one that dtype is stored as."""
    raw = meta.get(DTYPE_KEY.encode())
    if dtype is not None:
        dtype = _checked_dtype(dtype, "dtype")
    elif raw is not None:
        dtype = _checked_dtype(raw.decode("utf-8", "backslashreplace"), f"field metadata {DTYPE_KEY!r}")
    else:
        dtype = next((d for d in _STORAGE if _value_type(pa, d) == value_type), None)
        if dtype is None:
            raise errors.unknown_layout("dtype")
    if value_type != _value_type(pa, dtype):
        raise errors.bad_column(
            "pixel_values", f"holds {value_type} values, but dtype {dtype} is stored as {_value_type(pa, dtype)}"
        )
    return str(dtype)


def _grid_rows(pa: Any, grid: Any) -> list[Any]:
    """The ``grid_thw`` rows as Python lists (None for a null row), the column validated.

    Raises:
        ValueError: not a list column of integers; a chunk pyarrow refuses.
    """
    kind = grid.type
    if not (
        (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind))
        and pa.types.is_integer(kind.value_type)
    ):
        raise errors.bad_column("grid_thw", f"must be a list of integers per row, got type {kind}")
    _valid_chunks(pa, "grid_thw", grid)
    rows: list[Any] = grid.to_pylist()
    return rows


def _grid_patches(index: int, thw: Any) -> int:
    """The patch count ``t * h * w`` of ``grid_thw`` row ``index``.

    Raises:
        ValueError: the row is not three positive integers.
    """
    if not (isinstance(thw, list) and len(thw) == 3 and all(isinstance(v, int) and v >= 1 for v in thw)):
        raise errors.bad_column("grid_thw", f"row {index}: must be three positive integers (t, h, w), got {errors.abbreviate(thw)}")
    return int(thw[0] * thw[1] * thw[2])


@dataclass
class _Layout:
    """A ``pixel_values`` column checked up front (:func:`_layout`).

    ``chunks``: its Arrow chunks (lists or large lists, valid); ``dtype``: a key of
    ``_STORAGE``, the values' type being the one it is stored as; ``patch_size``;
    ``rows``: per row, ``(chunk, start, stop)`` into that chunk's values, each span
    a positive whole number of ``3 * ps * ps`` values without nulls, or None for a
    null row.
    """

    chunks: list[Any]
    dtype: str
    patch_size: int
    rows: list[tuple[int, int, int] | None]


def _layout_patch_size(patch_size: Any, meta: dict[bytes, bytes], spans: list[Any], grids: list[Any] | None) -> int:
    """The patch edge: ``patch_size``, else the metadata's, else the one whose patches
    make the first non-empty row's ``grid_thw`` (every row is checked against it after)."""
    raw = meta.get(PATCH_SIZE_KEY.encode())
    if patch_size is not None:
        return _checked_patch_size(patch_size, "patch_size")
    if raw is not None:
        digits = raw.isdigit() and len(raw) <= 18  # ASCII digits that fit an int64
        value = int(raw) if digits else raw.decode("utf-8", "backslashreplace")
        return _checked_patch_size(value, f"field metadata {PATCH_SIZE_KEY!r}")
    if grids is None:
        raise errors.unknown_layout("patch size")
    for index, span in enumerate(spans):
        if span is not None and span[2] > span[1]:
            values = (span[2] - span[1]) // (3 * _grid_patches(index, grids[index]))
            return max(math.isqrt(values), 1)  # checked against every row by _layout
    raise errors.unknown_layout("patch size")


def _layout(pa: Any, table_or_column: Any, dtype: Any, patch_size: Any) -> _Layout:
    """Check everything :func:`pixel_values_from_arrow` reads, before it reads a value.

    The column's type; the dtype (argument, metadata or value type) against the value
    type; every chunk by pyarrow's full validation; every row's span (no null values,
    a positive whole number of patches); the patch size (argument, metadata, or derived
    from ``grid_thw``); and, when the table has ``grid_thw``, that each row's grid is
    three positive integers whose patches are the row's values.

    Raises:
        TypeError: ``table_or_column`` is not an Arrow table, batch or array.
        ValueError: naming the column, and the row where one row is at fault.
    """
    meta: dict[bytes, bytes] = {}
    grid = None
    if isinstance(table_or_column, (pa.Table, pa.RecordBatch)):
        found = _table_column(table_or_column, "pixel_values")
        if found is None:
            raise errors.bad_column("pixel_values", "is not in the table")
        column, meta = found
        grid = (_table_column(table_or_column, "grid_thw") or (None, {}))[0]
    elif isinstance(table_or_column, (pa.Array, pa.ChunkedArray)):
        column = table_or_column
    else:
        raise errors.not_arrow(table_or_column)
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        raise errors.bad_column("pixel_values", f"must be a list or large_list column, got type {column.type}")
    chunks = _valid_chunks(pa, "pixel_values", column)
    dtype = _layout_dtype(pa, column.type.value_type, dtype, meta)
    spans: list[tuple[int, int, int] | None] = []
    for number, chunk in enumerate(chunks):
        offsets = chunk.offsets.to_numpy()
        valid = chunk.is_valid().to_numpy(zero_copy_only=False)
        values = chunk.values
        for i in range(len(chunk)):
            start, stop = int(offsets[i]), int(offsets[i + 1])
            if valid[i] and values.null_count and values.slice(start, stop - start).null_count:
                raise errors.bad_column("pixel_values", f"row {len(spans)}: holds null values")
            spans.append((number, start, stop) if valid[i] else None)
    grids = None if grid is None else _grid_rows(pa, grid)
    ps = _layout_patch_size(patch_size, meta, spans, grids)
    patch = 3 * ps * ps
    for index, span in enumerate(spans):
        if span is None:
            continue
        count = span[2] - span[1]
        if count == 0 or count % patch:
            raise errors.bad_column(
                "pixel_values",
                f"row {index}: {count} values are not one or more whole {ps}x{ps} patches ({patch} values each)",
            )
        if grids is not None and _grid_patches(index, grids[index]) * patch != count:
            raise errors.bad_column(
                "grid_thw",
                f"row {index}: {grids[index]} is {_grid_patches(index, grids[index])} patches of {patch} values, "
                f"but the row's pixel_values has {count} values",
            )
    return _Layout(chunks, dtype, ps, spans)


def _numpy_values(pa: Any, chunk: Any, dtype: str) -> np.ndarray:
    """The values of a checked chunk as a read-only numpy view of Arrow's buffer (the
    validity bitmap left out: :func:`_layout` saw no null inside a row)."""
    values = chunk.values
    data = pa.Array.from_buffers(values.type, len(values), [None, values.buffers()[1]], offset=values.offset)
    array: np.ndarray = data.to_numpy(zero_copy_only=True)
    view = _ml_bfloat16() if dtype == "bfloat16" else None
    return array.view(view) if view is not None else array


def pixel_values_from_arrow(
    table_or_column: Any, *, dtype: str | None = None, patch_size: int | None = None
) -> list[np.ndarray | None]:
    """The ``pixel_values`` of each row as ``[n, 3, ps, ps]`` arrays (None for a null row).

    The arrays are read-only views of Arrow's values buffers (no copy). The whole
    column is checked before any row is read (and so is ``grid_thw`` when the table
    has one): a table that is not what :func:`preprocess_to_arrow` writes, or is
    damaged (an IPC file with decreasing offsets, values of another type than the
    dtype, rows that are not whole patches), raises instead of giving wrong rows.

    Args:
        table_or_column: a ``pyarrow.Table`` or ``RecordBatch`` with a ``pixel_values``
            column, or that column alone (``Array`` / ``ChunkedArray`` of large or
            plain lists). Other columns are not read, except ``grid_thw``.
        dtype: ``"float32"``, ``"float16"`` or ``"bfloat16"``; default: the field
            metadata (``kimi_k3_rs.dtype``), else the value type (``float`` /
            ``halffloat`` / ``uint16`` read as bfloat16 bits). The value type must be
            the one the dtype is stored as (module doc).
        patch_size: the patch edge, a positive int; default: the field metadata
            (``patch_size``), else derived from a ``grid_thw`` column of the table.

    Returns:
        One entry per row: ``float32``, ``float16``, or ``ml_dtypes.bfloat16`` when
        ml_dtypes is installed (else the ``uint16`` bits) ``[t * h * w, 3, ps, ps]``
        arrays, in row order; None for a null row.

    Raises:
        ImportError: pyarrow is not installed.
        TypeError: ``table_or_column`` is not an Arrow table, batch or array.
        ValueError: each naming the column (and the row, where one row is at fault):
            no ``pixel_values`` column, or several; a column that is not a list or
            large_list; a ``dtype`` or ``patch_size`` (argument or metadata) that is
            not valid; values of another type than the dtype's; the dtype or the patch
            size cannot be told (a bare column without ``patch_size=``); a chunk that
            pyarrow's full validation refuses; a non-null row with null values, or
            whose length is not one or more whole ``3 * ps * ps`` patches; a
            ``grid_thw`` column that is not lists of integers, or a row whose grid is
            not three positive integers giving the row's value count.

    Examples:
        >>> import numpy as np, kimi_k3_rs
        >>> from kimi_k3_rs.arrow import pixel_values_from_arrow, preprocess_to_arrow
        >>> t = preprocess_to_arrow([np.zeros((28, 56, 3), np.uint8)], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
        >>> [a.shape for a in pixel_values_from_arrow(t)]
        [(8, 3, 14, 14)]
    """
    pa = _pyarrow()
    layout = _layout(pa, table_or_column, dtype, patch_size)
    values = [_numpy_values(pa, chunk, layout.dtype) if len(chunk) else None for chunk in layout.chunks]
    ps = layout.patch_size
    result: list[np.ndarray | None] = []
    for span in layout.rows:
        if span is None:
            result.append(None)
            continue
        number, start, stop = span
        chunk_values = values[number]
        assert chunk_values is not None  # a chunk with a row has values
        result.append(chunk_values[start:stop].reshape((stop - start) // (3 * ps * ps), 3, ps, ps))
    return result
