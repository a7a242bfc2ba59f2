"""Serving integration (issue #5): the processor as a checkpoint-processor replacement.

* ``KimiK3VisionProcessor.preprocess`` returns a transformers ``BatchFeature`` when
  transformers can be imported and a plain ``dict`` otherwise (both checked whatever is
  installed: transformers is blocked, or faked, through ``sys.modules``);
* ``to_dict`` / ``save_pretrained`` / ``from_pretrained`` round trips;
* sglang's deferred pattern replayed on a mixed batch: prepare on every rank, split
  by owner rank, materialize, gather, compare with ``tests/reference.py`` bit for bit;
  the deferred flow follows its processor's options and detects a replaced file;
* the two scripts in ``examples/`` run (so CI runs them), with and without transformers;
* sglang's Kimi-K2.5 deferred entry, ``prepare_kimi_k25_encoder_inputs``, replayed the
  same way, then what it differs in: its messages and the RGB conversion of ``_to_pil_rgb``
  (the last section).

The reported cases about token counts, grids, output keys and configs are in
``test_cases.py`` and not repeated here.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import types
import warnings
from collections import UserDict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from PIL import Image

import kimi_k3_rs
import kimi_k3_rs.processor as processor_module
from kimi_k3_rs.deferred import KimiK25EncoderInputs, prepare_kimi_k25_encoder_inputs
from kimi_k3_rs.hf import outputs as hf_outputs
from helpers import (
    K3_CFG,
    K25_CFG,
    REF_COMPAT,
    REPO_DIR,
    alpha_pattern_la,
    alpha_pattern_rgba,
    assert_bit_equal,
    assert_output_matches,
    cfg,
    encode,
    exact,
    mode_image,
    noise,
    noise_array,
    split_by_grid,
    u32,
)
from reference import navit_resize_image, reference_preprocess

try:  # what the package does: transformers counts only if it imports (the checkpoint's class)
    from transformers.image_processing_utils import BatchFeature as HFBatchFeature
except Exception:  # noqa: BLE001 - absent or broken
    HFBatchFeature = None
HAS_TRANSFORMERS = HFBatchFeature is not None
EXAMPLES = REPO_DIR / "examples"


def small_medias():
    images = [noise(300, 200, "RGB", 1), alpha_pattern_rgba(150, 260, 2), noise_array(90, 40, "L", 3)]
    return images, [{"type": "image", "image": im} for im in images]


def forget_transformers_lookup(monkeypatch):
    """The package looks for transformers once per process; make it look again (restored after)."""
    monkeypatch.setattr(hf_outputs, "_BATCH_FEATURE", hf_outputs.UNSET)


@pytest.fixture
def no_transformers(monkeypatch):
    """Make ``import transformers...`` fail, whether or not it is installed."""
    forget_transformers_lookup(monkeypatch)
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.setitem(sys.modules, "transformers.feature_extraction_utils", None)


@pytest.fixture
def fake_transformers(monkeypatch):
    """A stand-in ``transformers.feature_extraction_utils.BatchFeature`` recording its calls."""
    forget_transformers_lookup(monkeypatch)
    calls = []

    class BatchFeature(UserDict):
        def __init__(self, data=None, tensor_type=None, **kwargs):
            calls.append({"data": data, "tensor_type": tensor_type, **kwargs})
            super().__init__(data)

    package = types.ModuleType("transformers")
    module = types.ModuleType("transformers.feature_extraction_utils")
    module.BatchFeature = BatchFeature
    package.feature_extraction_utils = module
    monkeypatch.setitem(sys.modules, "transformers", package)
    monkeypatch.setitem(sys.modules, "transformers.feature_extraction_utils", module)
    return BatchFeature, calls


# ---------------------------------------------------------------------------
# BatchFeature or dict
# ---------------------------------------------------------------------------


def test_output_type_follows_installed_transformers():
    media_proc_cfg = cfg("kimi_k3", in_patch_limit=800)
    images, medias = small_medias()
    out = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg).preprocess(medias)
    if HAS_TRANSFORMERS:
        assert type(out) is HFBatchFeature
    else:
        assert type(out) is dict
    assert_output_matches(out, reference_preprocess(images, media_proc_cfg))
    # the module-level function always returns a plain dict
    assert type(kimi_k3_rs.preprocess(images, media_proc_cfg)) is dict


def test_plain_dict_without_transformers(no_transformers):
    """The lookup happens on the first call after the fixture reset it: transformers is "absent"."""
    media_proc_cfg = cfg("kimi_k3", in_patch_limit=800)
    images, medias = small_medias()
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg)
    ref = reference_preprocess(images, media_proc_cfg)
    for kwargs in ({}, {"return_tensors": None}, {"return_tensors": "np"}):
        out = processor.preprocess(medias, **kwargs)
        assert type(out) is dict and list(out) == ["pixel_values", "grid_thws"]
        assert_output_matches(out, ref)
    assert processor(medias[:1])["grid_thws"].tolist() == ref[1][:1].tolist()  # __call__
    empty = processor.preprocess([])
    assert type(empty) is dict and empty == {}


def test_batch_feature_when_transformers_is_importable(fake_transformers, monkeypatch):
    BatchFeature, calls = fake_transformers
    media_proc_cfg = cfg("kimi_k25", in_patch_limit=800)
    images, medias = small_medias()
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg)
    ref = reference_preprocess(images, media_proc_cfg)
    for kwargs in ({}, {"return_tensors": "np"}):
        calls.clear()
        out = processor.preprocess(medias, **kwargs)
        assert type(out) is BatchFeature
        assert_output_matches(out, ref)
        # wrapped as is: no tensor_type conversion, the arrays themselves (no copy)
        assert len(calls) == 1 and calls[0]["tensor_type"] is None
        assert set(calls[0]) == {"data", "tensor_type"}
        assert out["pixel_values"] is calls[0]["data"]["pixel_values"]
        assert out["grid_thws"] is calls[0]["data"]["grid_thws"]
    empty = processor.preprocess([])
    assert type(empty) is BatchFeature and len(empty) == 0 and dict(empty) == {}
    # looked up once: later calls do not import again
    monkeypatch.setitem(sys.modules, "transformers.feature_extraction_utils", None)
    assert type(processor.preprocess(medias[:1])) is BatchFeature
    # bad return_tensors is still refused
    with pytest.raises(ValueError, match="return_tensors"):
        processor.preprocess(medias, return_tensors="jax")


def test_broken_transformers_falls_back_to_dict(monkeypatch):
    """An install whose import fails with something else than ImportError does not break preprocess."""
    package = types.ModuleType("transformers")

    class Exploding(types.ModuleType):
        def __getattr__(self, name):
            raise RuntimeError("broken install")

    forget_transformers_lookup(monkeypatch)
    monkeypatch.setitem(sys.modules, "transformers", package)
    monkeypatch.setitem(sys.modules, "transformers.feature_extraction_utils",
                        Exploding("transformers.feature_extraction_utils"))
    images, medias = small_medias()
    media_proc_cfg = cfg("kimi_k25", in_patch_limit=800)
    out = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg).preprocess(medias)
    assert type(out) is dict
    assert_output_matches(out, reference_preprocess(images, media_proc_cfg))


@pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers is not installed (optional)")
def test_real_batch_feature():
    BatchFeature = HFBatchFeature
    media_proc_cfg = cfg("kimi_k3", in_patch_limit=800)
    images, medias = small_medias()
    ref = reference_preprocess(images, media_proc_cfg)
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg)
    out = processor.preprocess(medias, return_tensors="np")
    assert isinstance(out, BatchFeature) and isinstance(out, Mapping)
    assert out.pixel_values is out["pixel_values"] and sorted(out.keys()) == ["grid_thws", "pixel_values"]
    assert_output_matches(out, ref)
    half = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg, dtype="float16").preprocess(medias)
    assert isinstance(half, BatchFeature) and half["pixel_values"].dtype == np.float16
    assert np.array_equal(half["pixel_values"], ref[0].astype(np.float16))
    assert isinstance(processor.preprocess([]), BatchFeature) and len(processor.preprocess([])) == 0


# ---------------------------------------------------------------------------
# to_dict / save_pretrained / from_pretrained
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("preset,spec", [("KIMI_K3_MEDIA_PROC_CFG", K3_CFG), ("KIMI_K25_MEDIA_PROC_CFG", K25_CFG)])
def test_to_dict_is_the_checkpoint_layout(preset, spec):
    processor = kimi_k3_rs.KimiK3VisionProcessor(getattr(kimi_k3_rs, preset), pillow_compat="12", dtype="float16")
    d = processor.to_dict()
    checkpoint_class = "KimiK3VisionProcessor" if preset == "KIMI_K3_MEDIA_PROC_CFG" else "KimiK25VisionProcessor"
    layout = {"image_processor_type": checkpoint_class, "media_proc_cfg": spec}
    if checkpoint_class == "KimiK25VisionProcessor":
        layout["num_frames_per_chunk"] = 4  # K2.5's __init__ sets it (test_hf.py: against the checkpoint's)
    if "_processor_class" in d:
        layout["_processor_class"] = None  # transformers 4.x sets it (test_hf.py: against the checkpoint's)
    assert d == layout
    assert json.loads(json.dumps(d)) == d
    # a fresh copy every time
    d["media_proc_cfg"]["in_patch_limit"] = 1
    d["media_proc_cfg"]["image_mean"][0] = 0.0
    assert processor.to_dict() == layout
    assert processor.media_proc_cfg == spec


def custom_cfg():
    out = cfg("kimi_k3", in_patch_limit=np.int64(900), transparent_bg_fill_stage="before_resize",
              transparent_bg_config={"pattern": "gray"}, fixed_output_tokens=None)
    out["image_mean"] = (0.48145466, 0.4578275, 0.40821073)
    out["image_std"] = np.array([0.26862954, 0.26130258, 0.27577711])
    out["some_future_key"] = {"nested": (1, np.float32(2.5), [np.int16(3)])}
    return out


def test_to_dict_gives_json_types():
    media_proc_cfg = custom_cfg()
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg)
    d = processor.to_dict()["media_proc_cfg"]
    assert d["image_mean"] == [0.48145466, 0.4578275, 0.40821073] and type(d["image_mean"]) is list
    assert d["image_std"] == [0.26862954, 0.26130258, 0.27577711] and type(d["image_std"]) is list
    assert d["in_patch_limit"] == 900 and type(d["in_patch_limit"]) is int
    assert d["some_future_key"] == {"nested": [1, 2.5, [3]]}
    assert json.loads(json.dumps(d)) == d
    # the JSON copy configures the same pixels
    images, _ = small_medias()
    again = kimi_k3_rs.KimiK3VisionProcessor(d)
    assert_output_matches(again.preprocess(images), reference_preprocess(images, d))
    a, b = processor.preprocess(images), again.preprocess(images)
    assert_bit_equal(a["pixel_values"], b["pixel_values"])


@pytest.mark.parametrize("which", ["k3", "k25", "custom"])
def test_save_pretrained_round_trip(tmp_path, which):
    media_proc_cfg = {"k3": kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG, "k25": kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG,
                      "custom": custom_cfg()}[which]
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg)
    folder = tmp_path / "a" / "b" / "ckpt"  # created, parents included
    written = processor.save_pretrained(folder)
    path = folder / "preprocessor_config.json"
    assert written == [str(path)]
    assert sorted(os.listdir(folder)) == ["preprocessor_config.json"]  # no temporary file left
    on_disk = json.loads(path.read_text(encoding="utf-8"))
    assert on_disk == processor.to_dict()
    assert list(on_disk) == sorted(processor.to_dict())
    # the file is readable like any file the user creates there (not mkstemp's 0600)
    probe = folder / "probe"
    probe.write_text("x")
    assert (path.stat().st_mode & 0o777) == (probe.stat().st_mode & 0o777)
    probe.unlink()

    images, medias = small_medias()
    images.append(noise(2100, 1500, "RGBA", 4))  # resized under K2.5
    medias.append({"type": "image", "image": images[-1]})
    want = processor.preprocess(medias)
    for target in (folder, str(folder), path):
        loaded = kimi_k3_rs.KimiK3VisionProcessor.from_pretrained(target)
        assert loaded.to_dict() == processor.to_dict()
        assert loaded.media_proc_cfg == on_disk["media_proc_cfg"]
        assert_output_matches(loaded.preprocess(medias), (want["pixel_values"], want["grid_thws"]))
    assert_output_matches(want, reference_preprocess(images, on_disk["media_proc_cfg"]))
    # options are given again at load time
    half = kimi_k3_rs.KimiK3VisionProcessor.from_pretrained(folder, dtype="float16", pillow_compat="12")
    assert half.preprocess(medias[:1])["pixel_values"].dtype == np.float16
    # saving again replaces the file
    other = kimi_k3_rs.KimiK3VisionProcessor(cfg("kimi_k25", in_patch_limit=321))
    assert other.save_pretrained(folder) == [str(path)]
    assert kimi_k3_rs.KimiK3VisionProcessor.from_pretrained(folder).media_proc_cfg["in_patch_limit"] == 321
    assert sorted(os.listdir(folder)) == ["preprocessor_config.json"]


def test_checkpoint_file_to_saved_folder(tmp_path):
    """A checkpoint's preprocessor_config.json (auto_map, extra keys) -> load -> save -> load."""
    ckpt = tmp_path / "Kimi-K3"
    ckpt.mkdir()
    (ckpt / "preprocessor_config.json").write_text(json.dumps({
        "auto_map": {"AutoImageProcessor": "kimi_k3_vision_processing.KimiK3VisionProcessor"},
        "media_proc_cfg": K3_CFG,
        "processor_class": "KimiK3Processor",
    }), encoding="utf-8")
    processor = kimi_k3_rs.KimiK3VisionProcessor.from_pretrained(ckpt)
    processor.save_pretrained(tmp_path / "copy")
    again = kimi_k3_rs.KimiK3VisionProcessor.from_pretrained(tmp_path / "copy")
    assert again.media_proc_cfg == processor.media_proc_cfg == K3_CFG


def test_save_pretrained_errors(tmp_path):
    processor = kimi_k3_rs.KimiK3VisionProcessor(kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
    a_file = tmp_path / "file"
    a_file.write_text("not a folder")
    with pytest.raises(OSError):
        processor.save_pretrained(a_file)
    with pytest.raises(OSError):
        processor.save_pretrained(a_file / "sub")
    # a value JSON cannot hold: TypeError, and the folder's existing file stays as it was
    folder = tmp_path / "ckpt"
    processor.save_pretrained(folder)
    before = (folder / "preprocessor_config.json").read_bytes()
    bad = kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG
    bad["some_object"] = object()
    with pytest.raises(TypeError):
        kimi_k3_rs.KimiK3VisionProcessor(bad).save_pretrained(folder)
    assert (folder / "preprocessor_config.json").read_bytes() == before
    assert sorted(os.listdir(folder)) == ["preprocessor_config.json"]


# ---------------------------------------------------------------------------
# sglang's deferred pattern on a mixed batch
# ---------------------------------------------------------------------------


def reference_quietly(items, media_proc_cfg):
    """The reference; Pillow warns on ``convert("RGB")`` of a palette image with a bytes
    ``transparency`` (kimi_k3_rs gives the same pixels without the warning)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Palette images with Transparency", UserWarning)
        return reference_preprocess(items, media_proc_cfg)


def mixed_request(tmp_path):
    """(server input, reference input, original (w, h), content_hash) per image."""
    rgb = noise(2300, 1700, "RGB", 1)  # resized under K2.5
    rgba = alpha_pattern_rgba(1900, 1900, 2)  # resized under K2.5; chessboard under K3
    tall = noise_array(300, 7500, "L", 3)  # over the side cap: resized under both
    la = alpha_pattern_la(500, 400, 4)
    jpeg_path = tmp_path / "photo.jpg"
    noise(1000, 800, "RGB", 5).save(jpeg_path, quality=85)
    png_path = tmp_path / "alpha.png"
    alpha_pattern_rgba(640, 360, 6).save(png_path)
    palette = encode(mode_image("P+bytes_trns", 700, 500, 7), "PNG")
    grey = encode(noise(120, 90, "L", 8), "PNG")
    url = "data:image/png;base64," + base64.b64encode(grey).decode()
    cmyk = encode(mode_image("CMYK", 400, 900, 9), "JPEG")
    wide = noise_array(8000, 300, "RGBA", 10)[:, ::2]  # non-contiguous view, 4000x300
    dot = noise_array(1, 1, "RGBA", 11)
    rows = [
        (rgb, rgb, None),
        ({"type": "image", "image": rgba, "content_hash": "h-rgba"}, rgba, "h-rgba"),
        (tall, tall, None),
        (la, la, None),
        (str(jpeg_path), str(jpeg_path), None),
        ({"type": "image", "image": png_path, "content_hash": "h-png"}, png_path, "h-png"),
        (palette, palette, None),
        ({"type": "image", "image": url}, url, None),
        ({"type": "image", "image": cmyk, "content_hash": b"\x00\x01"}, cmyk, b"\x00\x01"),
        (wide, np.ascontiguousarray(wide), None),
        (dot, dot, None),
    ]
    sizes = [(2300, 1700), (1900, 1900), (300, 7500), (500, 400), (1000, 800), (640, 360), (700, 500),
             (120, 90), (400, 900), (4000, 300), (1, 1)]
    return [r[0] for r in rows], [r[1] for r in rows], sizes, [r[2] for r in rows]


@pytest.mark.parametrize("preset", ["KIMI_K3_MEDIA_PROC_CFG", "KIMI_K25_MEDIA_PROC_CFG"])
@pytest.mark.parametrize("world_size", [3])
def test_deferred_owner_split_replay(tmp_path, preset, world_size):
    media_proc_cfg = getattr(kimi_k3_rs, preset)
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg)
    items, ref_items, sizes, hashes = mixed_request(tmp_path)
    n = len(items)
    ref_pv, ref_grid = reference_quietly(ref_items, media_proc_cfg)
    ref_blocks = split_by_grid(ref_pv, ref_grid)
    m = media_proc_cfg["merge_kernel_size"]

    # 1. every rank prepares the whole request (geometry only) and they all agree
    per_rank = [kimi_k3_rs.prepare_kimi_k3_encoder_inputs(items, processor) for _ in range(world_size)]
    enc = per_rank[0]
    for other in per_rank[1:]:
        assert_bit_equal(other.grid_thws, enc.grid_thws, "grid_thws across ranks")
        assert other.num_tokens == enc.num_tokens and other.resize_configs == enc.resize_configs
    assert_bit_equal(enc.grid_thws, ref_grid, "grid_thws")
    assert enc.original_image_sizes == [list(s) for s in sizes]
    assert enc.content_hashes == hashes
    assert enc.resize_configs == [navit_resize_image(w, h, 14, 2, media_proc_cfg["in_patch_limit"], 512, None)
                                  for w, h in sizes]
    tokens = kimi_k3_rs.count_image_tokens(enc.original_image_sizes, media_proc_cfg)
    assert enc.num_tokens == tokens.tolist()
    assert enc.num_tokens == (enc.grid_thws[:, 1] * enc.grid_thws[:, 2] // m**2).tolist()

    # 2. owners: round-robin, each rank materializes its own images (a reversed order for
    #    rank 1, to check that materialize follows the order it is given), in parallel
    owned = {rank: [i for i in range(n) if i % world_size == rank] for rank in range(world_size)}
    owned[1].reverse()
    with ThreadPoolExecutor(world_size) as pool:
        results = dict(zip(owned, pool.map(lambda r: per_rank[r].materialize(owned[r]), owned)))

    # 3. gather in the original order
    features = [None] * n
    for rank, indices in owned.items():
        assert len(results[rank]) == len(indices)
        for i, feature in zip(indices, results[rank]):
            assert features[i] is None
            features[i] = feature
    rows = [int(t * h * w) for t, h, w in enc.grid_thws.tolist()]
    assert sum(len(f) for f in features) == sum(rows)  # sglang's feature-length check
    for i in range(n):
        assert features[i].shape == (rows[i], 3, 14, 14) and features[i].dtype == np.float32
        assert_bit_equal(features[i], ref_blocks[i], f"image {i} (owner rank {i % world_size})")

    # the whole batch at once, split by grid product, gives the same rows
    batch = processor.preprocess(items, return_tensors="np")
    assert_bit_equal(batch["grid_thws"], enc.grid_thws, "grid_thws")
    assert_bit_equal(batch["pixel_values"], ref_pv, "pixel_values")
    for i, block in enumerate(np.split(batch["pixel_values"], np.cumsum(rows)[:-1])):
        assert_bit_equal(block, features[i], f"image {i}")


def test_deferred_with_half_precision_processor(tmp_path):
    """A bfloat16 processor as ``image_processor_or_media_proc_cfg``: owners get bfloat16 rows."""
    media_proc_cfg = cfg("kimi_k3", in_patch_limit=4000)
    items, ref_items, _, _ = mixed_request(tmp_path)
    items, ref_items = items[3:9], ref_items[3:9]
    ref_pv, ref_grid = reference_quietly(ref_items, media_proc_cfg)
    bits = ref_pv.view(np.uint32).astype(np.uint64)
    want = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg, dtype="bfloat16", num_threads=2)
    enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs(items, processor)
    assert_bit_equal(enc.grid_thws, ref_grid, "grid_thws")
    parts = {i: f for i, f in zip([5, 0, 3], enc.materialize([5, 0, 3]))}
    parts.update(zip([1, 2, 4], enc.materialize([1, 2, 4])))
    gathered = np.concatenate([parts[i].view(np.uint16) for i in range(len(items))])
    assert_bit_equal(gathered, want, "bfloat16 rows")


# ---------------------------------------------------------------------------
# the deferred flow follows its processor
# ---------------------------------------------------------------------------


def test_prepare_follows_processor_pillow_compat():
    media_proc_cfg = kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
    img = noise(1242, 2688, "RGB", 0)  # K2.5: 1242x2688 -> 1038x2248, vertical pass first under "13"
    by_compat = {c: kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg, pillow_compat=c) for c in ("12", "13")}
    outs = {c: p.preprocess([{"type": "image", "image": img}]) for c, p in by_compat.items()}
    assert not np.array_equal(u32(outs["12"]["pixel_values"]), u32(outs["13"]["pixel_values"]))
    assert_output_matches(outs[REF_COMPAT], reference_preprocess(img, media_proc_cfg))
    for compat, processor in by_compat.items():
        assert processor.pillow_compat == compat
        enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([img], processor)
        assert_bit_equal(enc.grid_thws, outs[compat]["grid_thws"], "grid_thws")
        assert_bit_equal(enc.materialize()[0], outs[compat]["pixel_values"], f"materialize {compat}")
        # an explicit pillow_compat wins over the processor's
        other = {"12": "13", "13": "12"}[compat]
        enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([img], processor, pillow_compat=other)
        assert_bit_equal(enc.materialize()[0], outs[other]["pixel_values"], "override")
    # mutating the copy returned by media_proc_cfg changes neither path
    processor = by_compat["12"]
    mutated = processor.media_proc_cfg
    mutated["in_patch_limit"] = 100
    mutated["image_mean"][0] = 0.9
    mutated["patch_size"] = 16
    assert processor.media_proc_cfg == media_proc_cfg
    assert_output_matches(processor.preprocess([img]), (outs["12"]["pixel_values"], outs["12"]["grid_thws"]))
    enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([img], processor)
    assert_bit_equal(enc.materialize()[0], outs["12"]["pixel_values"], "after mutation")


def test_materialize_detects_a_replaced_file(tmp_path):
    media_proc_cfg = kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG
    path = tmp_path / "img.png"
    other = noise(64, 48, "RGB", 1)
    noise(300, 200, "RGB", 0).save(path)
    enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([other, str(path)], media_proc_cfg)
    assert enc.grid_thws.tolist() == [[1, 4, 6], [1, 16, 22]]
    noise(200, 300, "RGB", 2).save(path)  # replaced: other size
    msg = "Kimi-K3 deferred CPU preprocessing produced wrong grids"
    for indices in (None, [1], [1, 0]):
        with pytest.raises(ValueError, match=exact(msg)):
            enc.materialize(indices)
    # the image that did not change still materializes
    assert_bit_equal(enc.materialize([0])[0], reference_preprocess(other, media_proc_cfg)[0])


# ---------------------------------------------------------------------------
# the examples (CI runs them through this test)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("script", ["hf_processor.py", "sglang_deferred.py"])
@pytest.mark.parametrize("transformers", ["as installed", "blocked"])
def test_examples_run(tmp_path, script, transformers):
    env = dict(os.environ)
    if transformers == "blocked":
        shim = tmp_path / "shim" / "transformers"
        shim.mkdir(parents=True)
        (shim / "__init__.py").write_text('raise ImportError("transformers blocked by the test")\n')
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shim.parent), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, str(EXAMPLES / script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.rstrip().endswith("example: OK"), proc.stdout
    assert "FAILED" not in proc.stdout + proc.stderr
    if script == "hf_processor.py":
        batch_type = "BatchFeature" if transformers == "as installed" and HAS_TRANSFORMERS else "builtins.dict"
        assert "output: " in proc.stdout and batch_type in proc.stdout, proc.stdout
        assert "image 3: 300x7600 -> resized 282x7168, grid 1x512x22, 2816 tokens" in proc.stdout


# -----------------------------------------------------------------------------
# From the former test_deferred_k25.py:
#
# sglang's Kimi-K2.5 deferred entry, ``prepare_kimi_k25_encoder_inputs``.
#
# Replays sglang's flow (``kimi_k25_image_processing.py``) as ``test_serving.py`` does for
# K3: geometry up front on every rank, the owner split, ``materialize`` bit-equal to
# ``preprocess``; then what the K2.5 entry differs in: its messages (verbatim, class
# included) and the RGB conversion of ``_to_pil_rgb``.
# -----------------------------------------------------------------------------


K25 = kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
K3 = kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG
NO_CONFIG = "Kimi-K2.5 encoder preprocessing needs NaViT media config"
WRONG_GRIDS = "Kimi-K2.5 deferred CPU preprocessing produced wrong grids"
NOT_PIL = "Kimi-K2.5 encoder preprocessing expects PIL or uint8 tensors"


class FakeTensor:
    """The ``torch.Tensor`` surface the package reads (torch is recognised by module name)."""

    def __init__(self, array, dtype="torch.uint8"):
        self._array = array
        self.dtype = dtype
        self.shape = array.shape

    def numpy(self):
        return self._array


FakeTensor.__module__ = "torch"


def request(tmp_path):
    """(server input, reference input, original (w, h), content_hash) per image."""
    rgb = noise(2300, 1700, "RGB", 1)  # resized under K2.5
    rgba = alpha_pattern_rgba(300, 200, 2)
    la = alpha_pattern_la(120, 90, 3)
    path = tmp_path / "photo.png"
    noise(400, 300, "RGB", 4).save(path)
    palette = encode(mode_image("P+bytes_trns", 70, 50, 5), "PNG")
    url = "data:image/png;base64," + base64.b64encode(encode(noise(60, 40, "L", 6), "PNG")).decode()
    chw = noise_array(50, 30, "RGB", 7).transpose(2, 0, 1).copy()
    rows = [
        (rgb, rgb, (2300, 1700), None),
        ({"type": "image", "image": rgba, "content_hash": "h-rgba"}, rgba, (300, 200), "h-rgba"),
        (la, la, (120, 90), None),
        ({"type": "image", "image": str(path)}, str(path), (400, 300), None),
        (palette, palette, (70, 50), None),
        (url, url, (60, 40), None),
        (FakeTensor(chw), np.ascontiguousarray(chw.transpose(1, 2, 0)), (50, 30), None),
        (noise_array(1, 1, "RGBA", 8), noise_array(1, 1, "RGBA", 8), (1, 1), None),
    ]
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows]


@pytest.mark.parametrize("world_size", [1, 3])
def test_k25_owner_split_replay(tmp_path, world_size):
    processor = kimi_k3_rs.KimiK3VisionProcessor(K25)
    items, ref_items, sizes, hashes = request(tmp_path)
    n = len(items)
    with warnings.catch_warnings():  # Pillow's convert("RGB") of a palette with bytes transparency
        warnings.filterwarnings("ignore", "Palette images with Transparency", UserWarning)
        ref_pv, ref_grid = reference_preprocess(ref_items, K25)
    ref_blocks = split_by_grid(ref_pv, ref_grid)

    # 1. every rank computes the geometry, and they agree
    per_rank = [prepare_kimi_k25_encoder_inputs(items, processor) for _ in range(world_size)]
    enc = per_rank[0]
    assert type(enc) is KimiK25EncoderInputs and isinstance(enc, kimi_k3_rs.KimiK3EncoderInputs)
    for other in per_rank[1:]:
        assert_bit_equal(other.grid_thws, enc.grid_thws, "grid_thws across ranks")
        assert other.num_tokens == enc.num_tokens and other.resize_configs == enc.resize_configs
    assert enc.grid_thws.dtype == np.int64 and enc.grid_thws.shape == (n, 3)
    assert_bit_equal(enc.grid_thws, ref_grid, "grid_thws")
    assert enc.original_image_sizes == [list(s) for s in sizes]
    assert enc.content_hashes == hashes
    assert enc.resize_configs == [navit_resize_image(w, h, 14, 2, 16384, 512, None) for w, h in sizes]
    assert enc.num_tokens == kimi_k3_rs.count_image_tokens(sizes, K25).tolist()

    # 2. owners materialise their own images (rank 1 in reversed order), in parallel
    owned = {rank: [i for i in range(n) if i % world_size == rank] for rank in range(world_size)}
    if world_size > 1:
        owned[1].reverse()
    with ThreadPoolExecutor(world_size) as pool:
        results = dict(zip(owned, pool.map(lambda r: per_rank[r].materialize(owned[r]), owned)))

    # 3. gather: bit-equal to the reference and to preprocess of the whole batch
    features = {}
    for rank, indices in owned.items():
        features.update(zip(indices, results[rank]))
    batch = kimi_k3_rs.preprocess(items, K25)
    blocks = split_by_grid(batch["pixel_values"], batch["grid_thws"])
    for i in range(n):
        assert features[i].dtype == np.float32 and features[i].shape == ref_blocks[i].shape
        assert_bit_equal(features[i], ref_blocks[i], f"image {i}")
        assert_bit_equal(features[i], blocks[i], f"image {i} against preprocess")
    assert [len(f) for f in enc.materialize()] == [len(b) for b in ref_blocks]
    assert enc.materialize([]) == []


def test_k25_follows_the_processor_options():
    img = noise(1242, 2688, "RGB", 0)  # vertical pass first under "13"
    for compat in ("12", "13"):
        processor = kimi_k3_rs.KimiK3VisionProcessor(K25, pillow_compat=compat, dtype="bfloat16")
        want = processor.preprocess([img])
        enc = prepare_kimi_k25_encoder_inputs([img], processor)
        assert_bit_equal(enc.grid_thws, want["grid_thws"], "grid_thws")
        got = enc.materialize()[0]
        assert got.dtype == want["pixel_values"].dtype
        assert_bit_equal(got.view(np.uint16), want["pixel_values"].view(np.uint16), f"bfloat16 {compat}")
        # an explicit option wins over the processor's
        f32 = prepare_kimi_k25_encoder_inputs([img], processor, dtype="float32").materialize()[0]
        assert_bit_equal(f32, kimi_k3_rs.preprocess([img], K25, pillow_compat=compat)["pixel_values"])


@pytest.mark.parametrize("kind", ["RGBA", "LA", "P+bytes_trns", "P+rgba_palette", "PA", "L+trns", "RGB"])
@pytest.mark.parametrize("stage", ["after_resize", "before_resize"])
def test_k25_takes_images_as_rgb(kind, stage):
    """sglang's ``_to_pil_rgb``: ``convert("RGB")`` first, so a background of the config
    (here K3's chessboard) is never applied."""
    media_proc_cfg = dict(K3, transparent_bg_fill_stage=stage)
    img = {"RGBA": alpha_pattern_rgba(700, 500, 1), "RGB": noise(700, 500, "RGB", 1)}.get(kind) or mode_image(
        kind, 700, 500, 1)
    enc = prepare_kimi_k25_encoder_inputs([img], media_proc_cfg)
    got = enc.materialize()[0]
    with pytest.warns(UserWarning) if kind == "P+bytes_trns" else _nothing():
        rgb = img.convert("RGB")
    assert_bit_equal(got, kimi_k3_rs.preprocess([rgb], media_proc_cfg)["pixel_values"], f"{kind} as RGB")
    assert_bit_equal(enc.grid_thws, kimi_k3_rs.prepare_kimi_k3_encoder_inputs([img], media_proc_cfg).grid_thws)
    if kind == "RGBA":  # the K3 entry composites the chessboard: another result
        k3 = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([img], media_proc_cfg).materialize()[0]
        assert not np.array_equal(k3.view(np.uint32), got.view(np.uint32))


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_k25_equals_the_k3_entry_without_background():
    images = [alpha_pattern_rgba(300, 260, 3), noise(200, 100, "L", 4)]
    for media_proc_cfg in (K25, cfg("kimi_k3", transparent_bg_config=None)):
        k25 = prepare_kimi_k25_encoder_inputs(images, media_proc_cfg).materialize()
        k3 = kimi_k3_rs.prepare_kimi_k3_encoder_inputs(images, media_proc_cfg).materialize()
        for a, b in zip(k25, k3):
            assert_bit_equal(a, b)


class WithConfig:
    def __init__(self, media_proc_cfg):
        self.media_proc_cfg = media_proc_cfg


@pytest.mark.parametrize(
    "holder",
    [
        object(),
        WithConfig(None),
        WithConfig([("patch_size", 14)]),
        "patch_size",
        *[WithConfig({k: v for k, v in K25.items() if k != key})
          for key in ("patch_size", "merge_kernel_size", "in_patch_limit", "patch_limit_on_one_side",
                      "image_mean", "image_std")],
        {k: v for k, v in K25.items() if k != "in_patch_limit"},
    ],
)
def test_k25_config_message(holder):
    with pytest.raises(ValueError, match=exact(NO_CONFIG)) as info:
        prepare_kimi_k25_encoder_inputs([noise(20, 20)], holder)
    assert type(info.value) is ValueError  # sglang's class
    # the K3 entry keeps its own texts
    with pytest.raises(ValueError) as k3:
        kimi_k3_rs.prepare_kimi_k3_encoder_inputs([noise(20, 20)], holder)
    assert "Kimi-K3" in str(k3.value)


def test_k25_config_from_attribute_and_bad_values():
    enc = prepare_kimi_k25_encoder_inputs([noise(30, 20)], WithConfig(K25))
    assert enc.grid_thws.tolist() == [[1, 2, 4]]
    with pytest.raises(kimi_k3_rs.ConfigError, match="patch_size"):
        prepare_kimi_k25_encoder_inputs([noise(30, 20)], dict(K25, patch_size=0))


@pytest.mark.parametrize(
    "item",
    [
        {"type": "video", "image": "x"},
        {"type": "image"},
        {"image": np.zeros((4, 4, 3), np.uint8)},
        {"type": "video_chunk", "video_chunk": [1, 2]},
    ],
)
def test_k25_media_item_message(item):
    msg = f"Unsupported Kimi-K2.5 encoder media item: {kimi_k3_rs.errors.abbreviate(item)}"
    with pytest.raises(ValueError, match=exact(msg)) as info:
        prepare_kimi_k25_encoder_inputs([noise(20, 20), item], K25)
    assert type(info.value) is ValueError


@pytest.mark.parametrize(
    "image",
    [
        None,
        5,
        3.5,
        [np.zeros((4, 4, 3), np.uint8)],
        np.zeros((4, 4, 3), np.float32),
        np.zeros((4, 4), np.int64),
        FakeTensor(np.zeros((3, 4, 4), np.float32), dtype="torch.float32"),
    ],
)
def test_k25_type_message(image):
    for item in (image, {"type": "image", "image": image}):
        with pytest.raises(TypeError, match=exact(NOT_PIL)) as info:
            prepare_kimi_k25_encoder_inputs([noise(20, 20), item], K25)
        assert type(info.value) is TypeError


def test_k25_other_messages_as_the_k3_entry(tmp_path):
    with pytest.raises(ValueError, match=exact("Unsupported Kimi-K3 image channel count: 5")):
        prepare_kimi_k25_encoder_inputs([FakeTensor(np.zeros((6, 6, 5), np.uint8))], K25)
    missing = tmp_path / "missing.png"
    with pytest.raises(kimi_k3_rs.ImageError, match="^image 1: cannot read or decode it"):
        prepare_kimi_k25_encoder_inputs([noise(20, 20), str(missing)], K25)
    with pytest.raises(TypeError, match="exif_transpose must be True or False"):
        prepare_kimi_k25_encoder_inputs([noise(20, 20)], K25, exif_transpose=1)


def test_k25_materialize_detects_a_replaced_file(tmp_path):
    path = tmp_path / "img.png"
    other = noise(64, 48, "RGB", 1)
    noise(300, 200, "RGB", 0).save(path)
    enc = prepare_kimi_k25_encoder_inputs([other, str(path)], K25)
    assert enc.grid_thws.tolist() == [[1, 4, 6], [1, 16, 22]]
    noise(200, 300, "RGB", 2).save(path)
    for indices in (None, [1], [1, 0]):
        with pytest.raises(ValueError, match=exact(WRONG_GRIDS)) as info:
            enc.materialize(indices)
        assert type(info.value) is ValueError
    assert_bit_equal(enc.materialize([0])[0], reference_preprocess(other, K25)[0])
    # the K3 entry keeps its own text
    k3 = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([str(path)], K25)
    noise(300, 200, "RGB", 3).save(path)
    with pytest.raises(ValueError, match=exact("Kimi-K3 deferred CPU preprocessing produced wrong grids")):
        k3.materialize()


def test_k25_sizes_follow_exif_transpose():
    img = noise(60, 40, "RGB", 0)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate: sides swap
    img.info["exif"] = exif.tobytes()
    data = encode(img, "JPEG", exif=exif.tobytes())
    assert prepare_kimi_k25_encoder_inputs([data], K25).original_image_sizes == [[60, 40]]
    enc = prepare_kimi_k25_encoder_inputs([data], K25, exif_transpose=True)
    assert enc.original_image_sizes == [[40, 60]]
    assert_bit_equal(enc.materialize()[0], kimi_k3_rs.preprocess([data], K25, exif_transpose=True)["pixel_values"])
