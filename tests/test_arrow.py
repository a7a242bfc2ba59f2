"""``kimi_k3_rs.arrow``: one fixed schema, pixels bit for bit with ``preprocess``, zero copy, Parquet."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
ds = pytest.importorskip("pyarrow.dataset")

import kimi_k3_rs  # noqa: E402
from helpers import DATA_DIR, K3_CFG, K25_CFG, alpha_pattern_rgba, cfg, noise  # noqa: E402
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
