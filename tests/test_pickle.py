"""Pickling: the processor, the configs, the options, the exceptions, the deferred inputs.

Every class round-trips through ``pickle`` (every protocol), ``copy.copy`` and
``copy.deepcopy`` with the same behaviour (the same outputs, the same options); a
processor captured by a ``multiprocessing`` spawn pool and by ``datasets.map(num_proc=2)``
gives the bits of the in-process call, and a worker's ``ImageError`` reaches the driver.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import io
import multiprocessing
import pickle

import kimi_k3_rs
import numpy as np
import pytest
from helpers import (
    CLIP_MEAN,
    CLIP_STD,
    alpha_pattern_la,
    alpha_pattern_rgba,
    assert_bit_equal,
    cfg,
    encode,
    exact,
    mode_image,
    noise,
    noise_array,
)
from kimi_k3_rs import _native
from kimi_k3_rs.deferred import prepare_kimi_k25_encoder_inputs
from kimi_k3_rs.options import _Options
from PIL import Image

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


def round_trips(value):
    """``value`` through every pickle protocol, ``copy.copy`` and ``copy.deepcopy``."""
    out = [(f"pickle protocol {p}", pickle.loads(pickle.dumps(value, protocol=p))) for p in PROTOCOLS]
    return [*out, ("copy.copy", copy.copy(value)), ("copy.deepcopy", copy.deepcopy(value))]


CONFIGS = {
    "k3": kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG,
    "k25": kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG,
    "k3 white before_resize": cfg("kimi_k3", transparent_bg_config={"pattern": "white"},
                                  transparent_bg_fill_stage="before_resize"),
    "clip fixed tokens": cfg("kimi_k25", image_mean=CLIP_MEAN, image_std=CLIP_STD, fixed_output_tokens=77.9),
}


def images():
    return [noise_array(300, 200, "RGB", 1), np.asarray(alpha_pattern_rgba(150, 260, 2)),
            noise_array(90, 40, "L", 3)]


def native_attrs(native_cfg):
    names = ("patch_size", "merge_kernel_size", "in_patch_limit", "patch_limit_on_one_side", "image_mean",
             "image_std", "fixed_output_tokens", "transparent_bg_config", "transparent_bg_fill_stage")
    return {name: getattr(native_cfg, name) for name in names}


@pytest.mark.parametrize("name", CONFIGS)
def test_native_media_proc_config(name):
    native = kimi_k3_rs.MediaProcConfig.from_dict(CONFIGS[name]).native
    options = _native.Options("13", "float32", 1)
    want_pv, want_grid = _native.preprocess(images(), native, options)
    for how, copied in round_trips(native):
        assert type(copied) is _native.MediaProcConfig, how
        assert native_attrs(copied) == native_attrs(native), how
        pv, grid = _native.preprocess(images(), copied, options)
        assert_bit_equal(grid, want_grid, f"{how}: grid_thws")
        assert_bit_equal(pv, want_pv, f"{how}: pixel_values")


@pytest.mark.parametrize("args", [("12", "float32", 1), ("13", "bfloat16", 2), ("13", "float16", 3)])
def test_native_options(args):
    options = _native.Options(*args)
    native = kimi_k3_rs.MediaProcConfig.from_dict(CONFIGS["k3"]).native
    want = _native.preprocess(images(), native, options)[0]
    for how, copied in round_trips(options):
        assert type(copied) is _native.Options, how
        assert (copied.pillow_compat, copied.dtype, copied.num_threads) == args, how
        assert_bit_equal(_native.preprocess(images(), native, copied)[0].view(np.uint16), want.view(np.uint16), how)


@pytest.mark.parametrize("name", CONFIGS)
def test_media_proc_config_and_background(name):
    config = kimi_k3_rs.MediaProcConfig.from_dict(CONFIGS[name])
    want = kimi_k3_rs.preprocess(images(), config)
    for how, copied in round_trips(config):
        assert type(copied) is kimi_k3_rs.MediaProcConfig and copied == config, how
        assert native_attrs(copied.native) == native_attrs(config.native), how
        got = kimi_k3_rs.preprocess(images(), copied)
        assert_bit_equal(got["pixel_values"], want["pixel_values"], how)
    background = config.transparent_bg_config
    if background is not None:
        for how, copied in round_trips(background):
            assert type(copied) is kimi_k3_rs.TransparentBgConfig and copied == background, how
            assert copied.as_dict() == background.as_dict(), how


def test_options():
    options = _Options.make("12", True, "bfloat16", 2, 10**6)
    for how, copied in round_trips(options):
        assert type(copied) is _Options, how
        fields = ("compat", "exif_transpose", "dtype", "num_threads", "max_image_pixels")
        assert [getattr(copied, f) for f in fields] == ["12", True, "bfloat16", 2, 10**6], how
        assert type(copied.native) is _native.Options, how


def processors():
    yield kimi_k3_rs.KimiK3VisionProcessor(kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
    media_proc_cfg = dict(kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG, future_key={"nested": [1, 2]})
    yield kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg, pillow_compat="12", exif_transpose=True,
                                           dtype="bfloat16", num_threads=2, max_image_pixels=10**6)


@pytest.mark.parametrize("processor", list(processors()), ids=["k3 defaults", "k25 options"])
def test_processor(processor):
    medias = [{"type": "image", "image": im} for im in images()]
    want = processor.preprocess(medias, return_tensors="np")
    for how, copied in round_trips(processor):
        assert type(copied) is type(processor), how
        assert copied.media_proc_cfg == processor.media_proc_cfg, how
        assert copied.to_dict() == processor.to_dict(), how
        assert copied.config == processor.config, how
        assert copied.options == processor.options, how
        assert (copied.pillow_compat, copied.exif_transpose) == (processor.pillow_compat, processor.exif_transpose)
        got = copied.preprocess(medias, return_tensors="np")
        assert_bit_equal(got["grid_thws"], want["grid_thws"], how)
        assert_bit_equal(got["pixel_values"].view(np.uint16), want["pixel_values"].view(np.uint16), how)
    # a deep copy is independent: the copied processor's dict is its own
    deep = copy.deepcopy(processor)
    assert deep._media_proc_cfg is not processor._media_proc_cfg


EXCEPTIONS = [
    kimi_k3_rs.KimiK3Error("max_image_pixels must be a positive int or None, got 0"),
    kimi_k3_rs.ConfigError("Kimi-K3 image processor is missing deferred-preprocessing config: patch_size"),
    kimi_k3_rs.ImageError("image 3: cannot read or decode it: OSError: truncated"),
    kimi_k3_rs.ImageTooLargeError("image of 20000x20000 = 400000000 pixels is over max_image_pixels=1"),
]


def raised():
    """Exceptions as the package raises them (core and Python messages)."""
    cases = [
        lambda: kimi_k3_rs.preprocess([b"not an image"], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG),
        lambda: kimi_k3_rs.preprocess([np.zeros((2, 2, 2, 2), np.uint8)], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG),
        lambda: kimi_k3_rs.MediaProcConfig.from_dict(cfg("kimi_k3", patch_size=0)),
        lambda: kimi_k3_rs.MediaProcConfig.from_dict({"patch_size": 14}),
        lambda: kimi_k3_rs.preprocess([encode(noise(64, 64), "PNG")], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG,
                                      max_image_pixels=100),
        lambda: kimi_k3_rs.preprocess([noise(8, 8)], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG, num_threads=0),
    ]
    out = []
    for case in cases:
        with pytest.raises(kimi_k3_rs.KimiK3Error) as info:
            case()
        out.append(info.value)
    return out


def test_exceptions():
    errors = EXCEPTIONS + raised()
    assert {type(e) for e in errors} == {type(e) for e in EXCEPTIONS}
    for error in errors:
        for how, copied in round_trips(error):
            assert type(copied) is type(error), how
            assert str(copied) == str(error) and copied.args == error.args, how
            assert isinstance(copied, ValueError) and isinstance(copied, kimi_k3_rs.KimiK3Error), how
    for cls in (kimi_k3_rs.KimiK3Error, kimi_k3_rs.ConfigError, kimi_k3_rs.ImageError,
                kimi_k3_rs.ImageTooLargeError):
        assert pickle.loads(pickle.dumps(cls)) is cls
        assert cls.__module__ == "kimi_k3_rs"


def encoder_items(tmp_path):
    path = tmp_path / "photo.png"
    noise(400, 300, "RGB", 4).save(path)
    lazy_path = tmp_path / "lazy.png"
    alpha_pattern_la(90, 70, 5).save(lazy_path)
    lazy = Image.open(lazy_path)  # opened, not loaded
    jpeg = encode(noise(200, 120, "RGB", 6), "JPEG")
    return [
        noise(2300, 1700, "RGB", 1),
        {"type": "image", "image": alpha_pattern_rgba(300, 200, 2), "content_hash": "h"},
        mode_image("P+bytes_trns", 70, 50, 3),
        mode_image("P+rgba_palette", 70, 50, 3),
        mode_image("CMYK", 60, 90, 3),
        lazy,
        str(path),
        path,
        jpeg,
        "data:image/jpeg;base64," + __import__("base64").b64encode(jpeg).decode(),
        noise_array(50, 30, "RGBA", 7)[:, ::2],
    ]


@pytest.mark.parametrize("entry", ["k3", "k25"])
@pytest.mark.parametrize("preset", ["k3", "k25"])
def test_encoder_inputs(tmp_path, entry, preset):
    prepare = kimi_k3_rs.prepare_kimi_k3_encoder_inputs if entry == "k3" else prepare_kimi_k25_encoder_inputs
    processor = kimi_k3_rs.KimiK3VisionProcessor(CONFIGS[preset], dtype="bfloat16")
    enc = prepare(encoder_items(tmp_path), processor)
    want = enc.materialize()
    for how, copied in round_trips(enc):
        assert type(copied) is type(enc), how
        assert_bit_equal(copied.grid_thws, enc.grid_thws, how)
        assert (copied.resize_configs, copied.num_tokens, copied.original_image_sizes, copied.content_hashes) == (
            enc.resize_configs, enc.num_tokens, enc.original_image_sizes, enc.content_hashes), how
        got = copied.materialize([10, 0, 5, 2, 3])
        for i, g in zip([10, 0, 5, 2, 3], got):
            assert_bit_equal(g.view(np.uint16), want[i].view(np.uint16), f"{how}: image {i}")
        for i, g in enumerate(copied.materialize()):
            assert_bit_equal(g.view(np.uint16), want[i].view(np.uint16), f"{how}: image {i}")


def test_encoder_inputs_grid_message_survives_pickling(tmp_path):
    path = tmp_path / "img.png"
    noise(300, 200, "RGB", 0).save(path)
    k3 = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([str(path)], kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)
    k25 = prepare_kimi_k25_encoder_inputs([str(path)], kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)
    k3, k25 = pickle.loads(pickle.dumps(k3)), pickle.loads(pickle.dumps(k25))
    noise(200, 300, "RGB", 1).save(path)  # replaced where materialize runs
    with pytest.raises(ValueError, match=exact("Kimi-K3 deferred CPU preprocessing produced wrong grids")):
        k3.materialize()
    with pytest.raises(ValueError, match=exact("Kimi-K2.5 deferred CPU preprocessing produced wrong grids")):
        k25.materialize()


# ---------------------------------------------------------------------------
# across processes
# ---------------------------------------------------------------------------


def _preprocess_in_worker(processor, image):
    """What a worker runs: the captured processor on one image."""
    out = processor.preprocess([image], return_tensors="np")
    return np.asarray(out["pixel_values"]).view(np.uint16).copy(), np.asarray(out["grid_thws"])


def _pool_images():
    return [noise_array(60, 40, "RGB", 0), encode(alpha_pattern_rgba(50, 70, 1), "PNG"),
            noise_array(30, 30, "L", 2), encode(mode_image("P+bytes_trns", 40, 20, 3), "PNG")]


@pytest.mark.parametrize("preset", ["k3", "k25"])
def test_spawn_pool(tmp_path, preset):
    processor = kimi_k3_rs.KimiK3VisionProcessor(CONFIGS[preset], pillow_compat="12", dtype="bfloat16")
    items = _pool_images()
    want = [_preprocess_in_worker(processor, image) for image in items]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        got = pool.map(functools.partial(_preprocess_in_worker, processor), items)
        # a worker's ImageError reaches the driver: class and message
        missing = str(tmp_path / "missing.png")
        with pytest.raises(kimi_k3_rs.ImageError) as local:
            _preprocess_in_worker(processor, missing)
        with pytest.raises(kimi_k3_rs.ImageError) as remote:
            pool.apply(_preprocess_in_worker, (processor, missing))
        assert type(remote.value) is type(local.value) and str(remote.value) == str(local.value)
        with pytest.raises(kimi_k3_rs.ImageTooLargeError, match="max_image_pixels=100"):
            limited = kimi_k3_rs.KimiK3VisionProcessor(CONFIGS[preset], max_image_pixels=100)
            pool.apply(_preprocess_in_worker, (limited, items[1]))
    for (pv, grid), (want_pv, want_grid) in zip(got, want):
        assert_bit_equal(grid, want_grid, "grid_thws")
        assert_bit_equal(pv, want_pv, "pixel_values")


def _materialize_in_worker(enc, indices):
    """What an owner rank runs on deferred inputs it received."""
    return [f.view(np.uint32).copy() for f in enc.materialize(indices)]


@pytest.mark.parametrize("entry", ["k3", "k25"])
def test_spawn_pool_owners_materialize(tmp_path, entry):
    """sglang's flow across processes: the driver prepares, owners materialise their images."""
    prepare = kimi_k3_rs.prepare_kimi_k3_encoder_inputs if entry == "k3" else prepare_kimi_k25_encoder_inputs
    path = tmp_path / "photo.png"
    alpha_pattern_rgba(90, 60, 1).save(path)
    items = [*_pool_images(), str(path), {"type": "image", "image": Image.open(path), "content_hash": "h"}]
    enc = prepare(items, kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
    owned = [[0, 2, 4], [5, 3, 1]]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.map(functools.partial(_materialize_in_worker, enc), owned)
    want = enc.materialize()
    for indices, features in zip(owned, results):
        for i, feature in zip(indices, features):
            assert_bit_equal(feature, want[i].view(np.uint32), f"image {i}")


def test_datasets_map_num_proc(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    processor = kimi_k3_rs.KimiK3VisionProcessor(CONFIGS["k3"])
    pngs = [encode(im, "PNG") for im in (noise(40, 30, "RGB", 0), alpha_pattern_rgba(30, 50, 1),
                                          noise(20, 20, "L", 2), alpha_pattern_la(30, 20, 3))]

    def run(example):
        out = processor.preprocess([io.BytesIO(example["png"]).getvalue()], return_tensors="np")
        pv = np.asarray(out["pixel_values"])
        return {"digest": hashlib.sha256(pv.tobytes()).hexdigest(), "grid": out["grid_thws"][0].tolist()}

    want = [run({"png": png}) for png in pngs]
    ds = datasets.Dataset.from_dict({"png": pngs})
    mapped = ds.map(run, num_proc=2, remove_columns=["png"])
    assert [{"digest": d, "grid": g} for d, g in zip(mapped["digest"], mapped["grid"])] == want
