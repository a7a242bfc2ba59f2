"""``kimi_k3_rs.arrow``: one fixed schema, pixels bit for bit with ``preprocess``, zero copy, Parquet."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
ds = pytest.importorskip("pyarrow.dataset")

import kimi_k3_rs  # noqa: E402
from helpers import DATA_DIR, K3_CFG, K25_CFG, alpha_pattern_rgba, cfg, exact, noise  # noqa: E402
from kimi_k3_rs import arrow  # noqa: E402
from kimi_k3_rs.arrow import arrow_schema, pixel_values_from_arrow, preprocess_to_arrow  # noqa: E402

DTYPES = ["float32", "float16", "bfloat16"]


def bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


def ragged_images():
    """Different sizes, modes and kinds: arrays, a PIL RGBA, file paths, bytes."""
    return [
        noise(300, 200, "RGB", 1),
        np.asarray(noise(123, 457, "RGB", 2)),
        alpha_pattern_rgba(210, 150, seed=4),
        str(DATA_DIR / "camera.png"),
        (DATA_DIR / "coffee.png").read_bytes(),
    ]


def uniform_images():
    return [np.asarray(noise(224, 224, "RGB", seed)) for seed in range(3)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("media_proc_cfg", [K3_CFG, K25_CFG], ids=["k3", "k25"])
def test_round_trip_matches_preprocess(dtype, media_proc_cfg):
    images = ragged_images()
    table = preprocess_to_arrow(images, media_proc_cfg, dtype=dtype, columns={"i": list(range(len(images)))})
    assert table.num_rows == len(images)
    assert table.column_names == ["i", "pixel_values", "grid_thw", "num_tokens", "error"]
    want = kimi_k3_rs.preprocess(images, media_proc_cfg, dtype=dtype)
    got = pixel_values_from_arrow(table)
    assert [g.shape[1:] for g in got] == [(3, 14, 14)] * len(images)
    assert got[0].dtype == want["pixel_values"].dtype
    assert bits(np.concatenate(got)).tobytes() == bits(want["pixel_values"]).tobytes()
    assert table["grid_thw"].to_pylist() == want["grid_thws"].tolist()
    assert table["error"].null_count == len(images)
    assert table["i"].to_pylist() == list(range(len(images)))
    for one, image in zip(got, images):  # each row is that image alone
        assert bits(one).tobytes() == bits(kimi_k3_rs.preprocess([image], media_proc_cfg, dtype=dtype)["pixel_values"]).tobytes()


def test_num_tokens_from_the_sizing():
    images = ragged_images()
    enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs(images, K25_CFG)
    table = preprocess_to_arrow(images, K25_CFG)
    assert table["num_tokens"].to_pylist() == enc.num_tokens
    assert enc.num_tokens == kimi_k3_rs.count_image_tokens(enc.original_image_sizes, K25_CFG).tolist()
    fixed = cfg("kimi_k25", fixed_output_tokens=77)
    assert preprocess_to_arrow(images[:2], fixed)["num_tokens"].to_pylist() == [77, 77]


def test_no_copy_of_the_output(monkeypatch):
    """The values buffer is the array the core wrote; reading back gives views of it."""
    seen = []
    real = arrow.preprocess

    def spy(images, media_proc_cfg, **kwargs):
        seen.append(kwargs["out"])
        return real(images, media_proc_cfg, **kwargs)

    monkeypatch.setattr(arrow, "preprocess", spy)
    table = preprocess_to_arrow(ragged_images(), K3_CFG, dtype="bfloat16")
    (out,) = seen
    chunk = table["pixel_values"].chunk(0)
    assert chunk.type.value_type == pa.uint16()
    assert chunk.offsets.type == pa.int64()
    assert chunk.values.buffers()[1].address == out.ctypes.data
    views = pixel_values_from_arrow(table)
    assert views[0].ctypes.data == out.ctypes.data
    assert all(np.shares_memory(v, out) for v in views)
    assert not views[0].flags.writeable


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_schema_for_uniform_and_ragged_batches(dtype):
    path = pa.field("path", pa.string())
    uniform = preprocess_to_arrow(uniform_images(), K3_CFG, dtype=dtype, columns={"path": ["u0", "u1", "u2"]})
    ragged = preprocess_to_arrow(ragged_images(), K3_CFG, dtype=dtype, columns={"path": list("abcde")})
    empty = preprocess_to_arrow([], K3_CFG, dtype=dtype, columns={"path": pa.array([], pa.string())})
    want = arrow_schema(dtype, 14, [path])
    for table in (uniform, ragged, empty):
        assert table.schema.equals(want, check_metadata=True), table.schema
    meta = want.field("pixel_values").metadata
    assert meta == {b"kimi_k3_rs.dtype": dtype.encode(), b"patch_size": b"14"}
    assert want.field("grid_thw").type.list_size == 3 and want.field("grid_thw").type.value_type == pa.int64()
    assert want.field("num_tokens").type == pa.int64()
    assert want.field("error").type == pa.string() and want.field("error").nullable


@pytest.mark.parametrize("dtype", DTYPES)
def test_parquet_folder_of_both_reads_back_with_plain_pyarrow(tmp_path, dtype):
    uniform_images_, ragged_images_ = uniform_images(), ragged_images()
    uniform = preprocess_to_arrow(uniform_images_, K3_CFG, dtype=dtype, columns={"path": ["u0", "u1", "u2"]})
    ragged = preprocess_to_arrow(ragged_images_, K3_CFG, dtype=dtype, columns={"path": list("abcde")})
    pq.write_table(uniform, tmp_path / "part-00000.parquet")
    pq.write_table(ragged, tmp_path / "part-00001.parquet")
    dataset = ds.dataset(tmp_path, format="parquet")
    assert dataset.schema.equals(uniform.schema, check_metadata=True)
    back = dataset.to_table()
    assert back.num_rows == 8
    assert back["path"].to_pylist() == ["u0", "u1", "u2", *"abcde"]
    want = kimi_k3_rs.preprocess(uniform_images_ + ragged_images_, K3_CFG, dtype=dtype)
    got = pixel_values_from_arrow(back)
    assert bits(np.concatenate(got)).tobytes() == bits(want["pixel_values"]).tobytes()
    assert back["grid_thw"].to_pylist() == want["grid_thws"].tolist()


def test_on_error_null_keeps_the_rest(tmp_path):
    good = ragged_images()
    missing = str(tmp_path / "missing.png")
    images = [good[0], b"not an image", good[1], missing, good[3]]
    table = preprocess_to_arrow(images, K3_CFG, on_error="null", columns={"n": [0, 1, 2, 3, 4]})
    assert table.schema.equals(arrow_schema("float32", 14, [pa.field("n", pa.int64())]), check_metadata=True)
    errors = table["error"].to_pylist()
    assert errors[0] is None and errors[2] is None and errors[4] is None
    assert "cannot read or decode" in errors[1] and not errors[1].startswith("image ")
    assert "missing.png" in errors[3]
    assert table["pixel_values"].to_pylist()[1] is None
    assert table["grid_thw"].to_pylist()[3] is None and table["num_tokens"].to_pylist()[3] is None
    pixels = pixel_values_from_arrow(table)
    assert pixels[1] is None and pixels[3] is None
    for i in (0, 2, 4):
        want = kimi_k3_rs.preprocess([images[i]], K3_CFG)
        assert bits(pixels[i]).tobytes() == bits(want["pixel_values"]).tobytes()
        assert table["grid_thw"][i].as_py() == want["grid_thws"][0].tolist()
    path = tmp_path / "with-nulls.parquet"
    pq.write_table(table, path)
    back = pq.read_table(path)
    assert back["error"].to_pylist() == errors
    assert [p is None for p in pixel_values_from_arrow(back)] == [False, True, False, True, False]


def test_on_error_raise_names_the_image():
    images = [ragged_images()[0], b"not an image"]
    with pytest.raises(kimi_k3_rs.ImageError, match="image 1: cannot read or decode"):
        preprocess_to_arrow(images, K3_CFG)


def test_config_and_option_errors_raise_in_both_modes():
    for on_error in ("raise", "null"):
        with pytest.raises(kimi_k3_rs.ConfigError):
            preprocess_to_arrow([b"x"], {**K3_CFG, "patch_size": 0}, on_error=on_error)
        with pytest.raises(TypeError):
            preprocess_to_arrow([b"x"], K3_CFG, on_error=on_error, out=np.zeros(1))
        with pytest.raises(ValueError):
            preprocess_to_arrow([b"x"], K3_CFG, on_error=on_error, dtype="float64")
    with pytest.raises(ValueError, match="on_error must be 'raise' or 'null'"):
        preprocess_to_arrow([], K3_CFG, on_error="skip")
    with pytest.raises(ValueError, match="has 1 values for 2 images"):
        preprocess_to_arrow(uniform_images()[:2], K3_CFG, columns={"path": ["a"]})
    with pytest.raises(ValueError, match="is one of the output columns"):
        preprocess_to_arrow(uniform_images()[:1], K3_CFG, columns={"error": ["a"]})


def test_media_proc_config_object_and_single_image():
    image = uniform_images()[0]
    table = preprocess_to_arrow(image, kimi_k3_rs.MediaProcConfig.from_dict(K3_CFG))
    want = kimi_k3_rs.preprocess(image, K3_CFG)["pixel_values"]
    assert bits(pixel_values_from_arrow(table)[0]).tobytes() == bits(want).tobytes()


def test_reading_columns_without_metadata():
    images = ragged_images()
    table = preprocess_to_arrow(images, cfg("kimi_k3", patch_size=16), dtype="float16")
    want = kimi_k3_rs.preprocess(images, cfg("kimi_k3", patch_size=16), dtype="float16")["pixel_values"]
    plain = table.cast(pa.schema([f.remove_metadata() for f in table.schema]))  # e.g. after a metadata-dropping step
    got = pixel_values_from_arrow(plain)  # dtype from the value type, patch size from grid_thw
    assert got[0].shape[1:] == (3, 16, 16)
    assert bits(np.concatenate(got)).tobytes() == bits(want).tobytes()
    with pytest.raises(ValueError, match="patch size"):
        pixel_values_from_arrow(table["pixel_values"])
    column = pixel_values_from_arrow(table["pixel_values"], patch_size=16)
    assert bits(np.concatenate(column)).tobytes() == bits(want).tobytes()
    sliced = pixel_values_from_arrow(table.slice(2, 2))
    assert bits(np.concatenate(sliced)).tobytes() == bits(np.concatenate(got[2:4])).tobytes()
    with pytest.raises(TypeError, match="expected a pyarrow Table"):
        pixel_values_from_arrow([1, 2])


def test_bfloat16_as_ml_dtypes_when_installed():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    table = preprocess_to_arrow(uniform_images()[:1], K3_CFG, dtype="bfloat16")
    assert pixel_values_from_arrow(table)[0].dtype == ml_dtypes.bfloat16


def test_missing_pyarrow_says_which_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match=r"pip install 'kimi_k3_rs\[arrow\]'"):
        preprocess_to_arrow([], K3_CFG)


# ---------------------------------------------------------------------------
# hostile tables: every one a ValueError naming what is wrong (#21 defect 5)
# ---------------------------------------------------------------------------


def small_table():
    """Two rows of 8 and 4 patches of 14x14 (4704 and 2352 values), ``grid_thw`` and metadata."""
    return preprocess_to_arrow([np.zeros((28, 56, 3), np.uint8), np.zeros((28, 28, 3), np.uint8)], K3_CFG)


def with_metadata(table, **changes):
    """``table`` with ``pixel_values``'s field metadata updated (``None`` drops a key)."""
    index = table.schema.get_field_index("pixel_values")
    field = table.schema.field(index)
    meta = {k.decode(): v for k, v in field.metadata.items()}
    for key, value in changes.items():
        key = {"dtype": "kimi_k3_rs.dtype"}.get(key, key)
        if value is None:
            meta.pop(key)
        else:
            meta[key] = value
    return table.cast(table.schema.set(index, field.with_metadata(meta)))


def with_column(table, name, array):
    return table.set_column(table.schema.get_field_index(name), name, array)


def list_of(values, lengths, kind=None):
    """A large list column of ``values`` cut into rows of ``lengths`` (None: a null row)."""
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum([n or 0 for n in lengths], out=offsets[1:])
    mask = pa.array([n is None for n in lengths])
    return pa.LargeListArray.from_arrays(pa.array(offsets), values, type=kind, mask=mask)


def zeros(n, kind=None):
    kind = kind or pa.float32()
    return pa.array(np.zeros(n, kind.to_pandas_dtype()), kind)


def ipc_round_trip(table):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return pa.ipc.open_stream(sink.getvalue()).read_all()


def decreasing_offsets():
    """An IPC table whose offsets go down (rows 0..588, then 588..0): pyarrow's cheap
    validation lets it through, ``validate(full=True)`` refuses it."""
    values = pa.array(np.arange(1176, dtype=np.float32))
    offsets = pa.py_buffer(np.array([588, 0, 588], np.int64))
    column = pa.Array.from_buffers(pa.large_list(pa.float32()), 2, [None, offsets], children=[values])
    return ipc_round_trip(pa.table({"pixel_values": column}))


PV = "column 'pixel_values': "
GRID = "column 'grid_thw': "
TYPE = PV + "must be a list or large_list column, got type "

HOSTILE = {
    # the patch size: argument and metadata (ZeroDivisionError and wrong shapes before)
    "patch_size 0 in the metadata": (lambda: with_metadata(small_table(), patch_size="0"), {},
                                     PV + "field metadata 'patch_size' must be a positive int, got 0"),
    "patch_size not a number in the metadata": (lambda: with_metadata(small_table(), patch_size="1e1"), {},
                                                PV + "field metadata 'patch_size' must be a positive int, got '1e1'"),
    "patch_size not utf-8 in the metadata": (lambda: with_metadata(small_table(), patch_size=b"\xff"), {},
                                             PV + "field metadata 'patch_size' must be a positive int, got '\\\\xff'"),
    "patch_size=0": (small_table, {"patch_size": 0}, PV + "patch_size must be a positive int, got 0"),
    "patch_size=-14": (small_table, {"patch_size": -14}, PV + "patch_size must be a positive int, got -14"),
    "patch_size=True": (small_table, {"patch_size": True}, PV + "patch_size must be a positive int, got True"),
    "patch_size=14.0": (small_table, {"patch_size": 14.0}, PV + "patch_size must be a positive int, got 14.0"),
    "patch_size='14'": (small_table, {"patch_size": "14"}, PV + "patch_size must be a positive int, got '14'"),
    "patch_size=7 (not the table's)": (small_table, {"patch_size": 7},
                                       GRID + "row 0: [1, 2, 4] is 8 patches of 147 values, but the row's "
                                       "pixel_values has 4704 values"),
    # the dtype: argument, metadata, and values of another type (wrong rows before)
    "dtype=3": (small_table, {"dtype": 3}, PV + "dtype must be 'float32', 'float16' or 'bfloat16', got 3"),
    "dtype='float64'": (small_table, {"dtype": "float64"},
                        PV + "dtype must be 'float32', 'float16' or 'bfloat16', got 'float64'"),
    "dtype float64 in the metadata": (lambda: with_metadata(small_table(), dtype="float64"), {},
                                      PV + "field metadata 'kimi_k3_rs.dtype' must be 'float32', 'float16' or "
                                      "'bfloat16', got 'float64'"),
    "metadata bfloat16 over float values": (lambda: with_metadata(small_table(), dtype="bfloat16"), {},
                                            PV + "holds float values, but dtype bfloat16 is stored as uint16"),
    "dtype=float16 over float values": (small_table, {"dtype": "float16"},
                                        PV + "holds float values, but dtype float16 is stored as halffloat"),
    "dtype=float32 over double values": (lambda: list_of(zeros(588, pa.float64()), [588]),
                                         {"dtype": "float32", "patch_size": 14},
                                         PV + "holds double values, but dtype float32 is stored as float"),
    "dtype=float16 over uint16 values": (lambda: list_of(zeros(588, pa.uint16()), [588]),
                                         {"dtype": "float16", "patch_size": 14},
                                         PV + "holds uint16 values, but dtype float16 is stored as halffloat"),
    "int32 values, no dtype": (lambda: list_of(zeros(588, pa.int32()), [588]), {"patch_size": 14},
                               "cannot tell the dtype of the pixel_values column; pass dtype="),
    # the column's type (AttributeError / IndexError before)
    "fixed_size_list": (lambda: pa.FixedSizeListArray.from_arrays(zeros(1176), 588), {"patch_size": 14},
                        TYPE + "fixed_size_list<item: float>[588]"),
    "struct": (lambda: pa.array([{"a": 1.0}]), {"patch_size": 14}, TYPE + "struct<a: double>"),
    "dictionary": (lambda: pa.array(["a"]).dictionary_encode(), {"patch_size": 14},
                   TYPE + "dictionary<values=string, indices=int32, ordered=0>"),
    "list_view": (lambda: pa.ListViewArray.from_arrays(pa.array([0, 588], pa.int32()), pa.array([588, 588], pa.int32()),
                                                       zeros(1176)), {"patch_size": 14}, TYPE + "list_view<item: float>"),
    "large_list_view": (lambda: pa.LargeListViewArray.from_arrays(pa.array([0], pa.int64()), pa.array([588], pa.int64()),
                                                                  zeros(588)), {"patch_size": 14},
                        TYPE + "large_list_view<item: float>"),
    "a float column": (lambda: zeros(588), {"patch_size": 14}, TYPE + "float"),
    "pixel_values a string column of a table": (lambda: with_column(small_table(), "pixel_values", pa.array(["a", "b"])),
                                                {}, TYPE + "string"),
    # the rows
    "null values inside a row": (lambda: list_of(pa.array([0.0] * 1175 + [None], pa.float32()), [588, 588]),
                                 {"patch_size": 14}, PV + "row 1: holds null values"),
    "a row of part of a patch": (lambda: list_of(zeros(1088), [588, 500]), {"patch_size": 14},
                                 PV + "row 1: 500 values are not one or more whole 14x14 patches (588 values each)"),
    "an empty non-null row": (lambda: list_of(zeros(588), [588, 0]), {"patch_size": 14},
                              PV + "row 1: 0 values are not one or more whole 14x14 patches (588 values each)"),
    # the columns of a table
    "no pixel_values column": (lambda: small_table().drop_columns(["pixel_values"]), {},
                               PV + "is not in the table"),
    "two pixel_values columns": (lambda: small_table().append_column("pixel_values", pa.array([1, 2])), {},
                                 PV + "appears 2 times in the table"),
    "two grid_thw columns": (lambda: small_table().append_column("grid_thw", pa.array([1, 2])), {},
                             GRID + "appears 2 times in the table"),
    # grid_thw (checked against the rows; ZeroDivisionError / a wrong patch size before)
    "grid_thw negative": (lambda: with_column(small_table(), "grid_thw", pa.array([[1, -2, -4], [1, 2, 2]])), {},
                          GRID + "row 0: must be three positive integers (t, h, w), got [1, -2, -4]"),
    "grid_thw zero": (lambda: with_column(small_table(), "grid_thw", pa.array([[1, 2, 4], [0, 2, 2]])), {},
                      GRID + "row 1: must be three positive integers (t, h, w), got [0, 2, 2]"),
    "grid_thw two values": (lambda: with_column(small_table(), "grid_thw", pa.array([[2, 4], [2, 2]])), {},
                            GRID + "row 0: must be three positive integers (t, h, w), got [2, 4]"),
    "grid_thw null on a row with pixels": (lambda: with_column(small_table(), "grid_thw", pa.array([[1, 2, 4], None])), {},
                                           GRID + "row 1: must be three positive integers (t, h, w), got None"),
    "grid_thw with a null value": (lambda: with_column(small_table(), "grid_thw", pa.array([[1, 2, None], [1, 2, 2]])),
                                   {}, GRID + "row 0: must be three positive integers (t, h, w), got [1, 2, None]"),
    "grid_thw other than the rows": (lambda: with_column(small_table(), "grid_thw", pa.array([[1, 2, 4], [1, 2, 4]])),
                                     {}, GRID + "row 1: [1, 2, 4] is 8 patches of 588 values, but the row's "
                                     "pixel_values has 2352 values"),
    "grid_thw huge, no metadata": (lambda: with_metadata(with_column(small_table(), "grid_thw",
                                                                     pa.array([[2**40] * 3, [1, 2, 2]])),
                                                         dtype=None, patch_size=None), {},
                                   GRID + f"row 0: [{2**40}, {2**40}, {2**40}] is {2**120} patches of 3 values, "
                                   "but the row's pixel_values has 4704 values"),
    "grid_thw of strings": (lambda: with_column(small_table(), "grid_thw", pa.array(["1,2,4", "1,2,2"])), {},
                            GRID + "must be a list of integers per row, got type string"),
    "grid_thw of floats": (lambda: with_column(small_table(), "grid_thw", pa.array([[1.0, 2.0, 4.0], [1.0, 2.0, 2.0]])), {},
                           GRID + "must be a list of integers per row, got type list<item: double>"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_tables_raise_value_error_naming_the_fault(name):
    build, kwargs, message = HOSTILE[name]
    with pytest.raises(ValueError, match=exact(message)):
        pixel_values_from_arrow(build(), **kwargs)


@pytest.mark.parametrize("where", ["pixel_values", "grid_thw"])
def test_invalid_arrow_data_is_refused_before_any_read(where):
    """Decreasing offsets (an IPC table that ``validate(full=True)`` refuses) gave rows
    out of other rows' values; now pyarrow's full validation runs first, on both columns read."""
    bad = decreasing_offsets()
    with pytest.raises(pa.ArrowInvalid):
        bad.validate(full=True)
    if where == "pixel_values":
        table = bad
    else:
        grid = pa.Array.from_buffers(pa.large_list(pa.int64()), 2, [None, pa.py_buffer(np.array([3, 0, 3], np.int64))],
                                     children=[pa.array([1, 1, 1])])
        table = ipc_round_trip(pa.table({"pixel_values": list_of(zeros(1176), [588, 588]), "grid_thw": grid}))
    with pytest.raises(ValueError, match=f"^{re.escape(f'column {where!r}: is not valid Arrow data: ')}.*non-monotonic offset"):
        pixel_values_from_arrow(table, patch_size=14)


def test_odd_but_valid_tables_read_exactly():
    """Chunked with empty chunks, sliced (offsets into a larger values buffer), plain
    lists, values with a validity bitmap whose nulls sit under null rows only, extra
    columns: all read as the same rows, without copies."""
    images = ragged_images()
    table = preprocess_to_arrow(images, K3_CFG, on_error="null", columns={"extra": [str(i) for i in range(5)]})
    want = pixel_values_from_arrow(table)
    chunk = table["pixel_values"].chunk(0)
    empty = chunk.slice(0, 0)
    rechunked = pa.chunked_array([empty, chunk.slice(0, 2), empty, chunk.slice(2, 1), chunk.slice(3)])
    plain = rechunked.cast(pa.list_(pa.field("element", pa.float32(), nullable=False)))
    got = pixel_values_from_arrow(rechunked, patch_size=14)
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
    assert [g.tobytes() for g in pixel_values_from_arrow(plain, patch_size=14)] == [w.tobytes() for w in want]
    assert all(np.shares_memory(g, w) for g, w in zip(got, want))
    sliced = pixel_values_from_arrow(table.slice(1, 3))
    assert [s.tobytes() for s in sliced] == [w.tobytes() for w in want[1:4]]
    # a null row over values with nulls: the row is None, the others are views
    values = chunk.values
    masked = pa.array(np.r_[np.zeros(588, bool), np.ones(588, bool), np.zeros(len(values) - 1176, bool)])
    row_lengths = [588, None, len(values) - 1176]
    with_nulls = pa.LargeListArray.from_arrays(
        pa.array(np.array([0, 588, 1176, len(values)], np.int64)),
        pa.Array.from_buffers(pa.float32(), len(values), [pa.array(~masked.to_numpy(zero_copy_only=False)).buffers()[1],
                                                          values.buffers()[1]]),
        mask=pa.array([n is None for n in row_lengths]),
    )
    assert with_nulls.values.null_count == 588
    rows = pixel_values_from_arrow(with_nulls, patch_size=14)
    flat = np.concatenate([w for w in want if w is not None]).reshape(-1)
    assert rows[1] is None
    assert rows[0].tobytes() == flat[:588].tobytes() and rows[2].tobytes() == flat[1176:].tobytes()
    assert np.shares_memory(rows[0], want[0]) and not rows[0].flags.writeable
    assert pixel_values_from_arrow(pa.chunked_array([], pa.large_list(pa.float32())), patch_size=14) == []
