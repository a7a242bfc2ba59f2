"""The public Python API contract of ``kimi_k3_rs``."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

import kimi_k3_rs
from helpers import (
    K3_CFG,
    K3_IMAGE_KEYS,
    K25_CFG,
    K25_IMAGE_KEYS,
    alpha_pattern_rgba,
    assert_output_matches,
    bomb_png,
    cfg,
    noise,
    noise_array,
    split_by_grid,
)
from reference import navit_resize_image, reference_preprocess

HAS_TORCH = importlib.util.find_spec("torch") is not None


# ---------------------------------------------------------------------------
# presets
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,image_keys,video_keys",
    [
        ("KIMI_K25_MEDIA_PROC_CFG", K25_IMAGE_KEYS,
         {"in_patch_limit_each_frame": 4096, "sample_fps": 2.0, "temporal_merge_kernel_size": 4,
          "timestamp_mode": "hh:mm:ss.fff"}),
        ("KIMI_K3_MEDIA_PROC_CFG", K3_IMAGE_KEYS,
         {"in_patch_limit_each_frame": 16384, "sample_fps": 8.0, "temporal_merge_kernel_size": 4}),
    ],
)
def test_preset_values(name, image_keys, video_keys):
    preset = getattr(kimi_k3_rs, name)
    assert isinstance(preset, dict)
    for key, value in {**image_keys, **video_keys}.items():
        assert key in preset, key
        assert preset[key] == value, key
        assert type(preset[key]) is type(value) or value is None, key
    if name == "KIMI_K25_MEDIA_PROC_CFG":
        assert "transparent_bg_config" not in preset or preset["transparent_bg_config"] is None
        assert preset.get("transparent_bg_fill_stage", "before_resize") == "before_resize"


def test_presets_are_json_serialisable():
    for preset in (kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG, kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG):
        assert json.loads(json.dumps(preset)) == preset


@pytest.mark.parametrize("name", ["KIMI_K3_MEDIA_PROC_CFG", "KIMI_K25_MEDIA_PROC_CFG"])
def test_presets_are_fresh_deep_copies(name):
    first = getattr(kimi_k3_rs, name)
    reference_copy = copy.deepcopy(first)
    assert getattr(kimi_k3_rs, name) is not first
    first["patch_size"] = 99
    first["image_mean"][0] = 0.0
    first["in_patch_limit"] = 1
    if isinstance(first.get("transparent_bg_config"), dict):
        first["transparent_bg_config"]["pattern"] = "plaid"
        first["transparent_bg_config"]["chessboard_square_size"] = 1
    later = getattr(kimi_k3_rs, name)
    assert later == reference_copy
    assert later["patch_size"] == 14
    # and preprocess with the later copy is unaffected
    img = alpha_pattern_rgba(300, 200, seed=1)
    assert_output_matches(kimi_k3_rs.preprocess(img, later), reference_preprocess(img, reference_copy))


def test_presets_give_reference_results():
    img = alpha_pattern_rgba(700, 500, seed=2)
    assert_output_matches(kimi_k3_rs.preprocess(img, kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG), reference_preprocess(img, K3_CFG))
    assert_output_matches(kimi_k3_rs.preprocess(img, kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG), reference_preprocess(img, K25_CFG))


def test_exception_hierarchy():
    assert issubclass(kimi_k3_rs.KimiK3Error, ValueError)
    assert issubclass(kimi_k3_rs.ConfigError, kimi_k3_rs.KimiK3Error)
    assert issubclass(kimi_k3_rs.ImageError, kimi_k3_rs.KimiK3Error)
    assert not issubclass(kimi_k3_rs.ConfigError, kimi_k3_rs.ImageError)


# ---------------------------------------------------------------------------
# preprocess()
# ---------------------------------------------------------------------------


def test_preprocess_returns_dict_of_arrays():
    out = kimi_k3_rs.preprocess(noise(100, 60, "RGB", 0), kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)
    assert isinstance(out, dict)
    assert {"pixel_values", "grid_thws"} <= set(out)
    assert out["pixel_values"].dtype == np.float32 and out["pixel_values"].flags.c_contiguous
    assert out["grid_thws"].dtype == np.int64
    assert out["grid_thws"].tolist() == [[1, 6, 8]]


@pytest.mark.parametrize("preset", ["KIMI_K3_MEDIA_PROC_CFG", "KIMI_K25_MEDIA_PROC_CFG"])
def test_preprocess_empty_list(preset):
    out = kimi_k3_rs.preprocess([], getattr(kimi_k3_rs, preset))
    assert out["pixel_values"].shape == (0, 3, 14, 14) and out["pixel_values"].dtype == np.float32
    assert out["grid_thws"].shape == (0, 3) and out["grid_thws"].dtype == np.int64
    out = kimi_k3_rs.preprocess([], cfg("kimi_k25", patch_size=16))
    assert out["pixel_values"].shape == (0, 3, 16, 16)


@pytest.mark.parametrize("bad", ["14", "auto ", "", "11", 13, None])
def test_preprocess_rejects_bad_pillow_compat(bad):
    with pytest.raises(ValueError, match="pillow_compat"):
        kimi_k3_rs.preprocess(noise(10, 10, "RGB", 0), kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG, pillow_compat=bad)


def test_pillow_compat_is_keyword_only():
    with pytest.raises(TypeError):
        kimi_k3_rs.preprocess(noise(10, 10, "RGB", 0), kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG, "13")


# ---------------------------------------------------------------------------
# KimiK3VisionProcessor
# ---------------------------------------------------------------------------


def test_processor_media_proc_cfg_and_preprocess():
    media_proc_cfg = cfg("kimi_k3", in_patch_limit=800)
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg=media_proc_cfg)
    assert isinstance(processor.media_proc_cfg, dict)
    assert processor.media_proc_cfg == media_proc_cfg
    images = [noise(300, 200, "RGB", 1), alpha_pattern_rgba(150, 260, 2), noise_array(90, 40, "L", 3)]
    medias = [{"type": "image", "image": im} for im in images]
    ref = reference_preprocess(images, media_proc_cfg)
    for kwargs in ({}, {"return_tensors": None}, {"return_tensors": "np"}):
        out = processor.preprocess(medias, **kwargs)
        assert isinstance(out, Mapping)
        assert_output_matches(out, ref)
    # raw images are accepted as medias too
    assert_output_matches(processor.preprocess(images), ref)


def test_processor_positional_config_and_pillow_compat():
    media_proc_cfg = cfg("kimi_k25")
    img = noise(1242, 2688, "RGB", 0)  # vertical first under Pillow 13
    for compat in ("12", "13"):
        processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg, pillow_compat=compat)
        a = processor.preprocess([{"type": "image", "image": img}])
        b = kimi_k3_rs.preprocess(img, media_proc_cfg, pillow_compat=compat)
        assert np.array_equal(a["pixel_values"], b["pixel_values"])
    default = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg).preprocess([img])
    assert_output_matches(default, reference_preprocess(img, media_proc_cfg))


def test_processor_constructor_validation():
    with pytest.raises(ValueError, match=re.escape(
            "Kimi-K3 image processor is missing deferred-preprocessing config: in_patch_limit")):
        bad = cfg("kimi_k3")
        del bad["in_patch_limit"]
        kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg=bad)
    with pytest.raises(kimi_k3_rs.ConfigError, match="patch_size"):
        kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg=cfg("kimi_k3", patch_size=0))
    with pytest.raises(ValueError, match="pillow_compat"):
        kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg=cfg("kimi_k3"), pillow_compat="11")


def test_processor_empty_list_is_empty_mapping():
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg=kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
    out = processor.preprocess([])
    assert isinstance(out, Mapping)
    assert len(out) == 0 and dict(out) == {}


def test_return_tensors_pt():
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg=kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
    medias = [{"type": "image", "image": noise(30, 30, "RGB", 0)}]
    if not HAS_TORCH:
        # a clear error naming torch, not an AttributeError deep inside
        with pytest.raises((ImportError, ValueError), match="(?i)torch"):
            processor.preprocess(medias, return_tensors="pt")
        return
    import torch  # pragma: no cover - torch is not in the test environment

    out = processor.preprocess(medias, return_tensors="pt")
    assert isinstance(out["pixel_values"], torch.Tensor) and out["pixel_values"].dtype == torch.float32
    assert out["grid_thws"].dtype == torch.int64


def test_return_tensors_unknown():
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg=kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
    with pytest.raises(ValueError, match="return_tensors"):
        processor.preprocess([noise(30, 30, "RGB", 0)], return_tensors="tf-ish")


def write_checkpoint(folder: Path, media_proc_cfg: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "preprocessor_config.json"
    payload = {
        "auto_map": {"AutoImageProcessor": "kimi_k3_vision_processing.KimiK3VisionProcessor",
                     "AutoProcessor": "kimi_k3_processor.KimiK3Processor"},
        "media_proc_cfg": media_proc_cfg,
        "processor_class": "KimiK3Processor",
        "some_future_key": {"nested": [1, 2, 3]},
    }
    path.write_text(json.dumps(payload, indent=2), encoding="utf-8")
    return path


@pytest.mark.parametrize("as_type", [str, Path])
def test_from_pretrained_folder_and_file(tmp_path, as_type):
    media_proc_cfg = cfg("kimi_k3", in_patch_limit=1234, transparent_bg_config={"pattern": "gray"})
    path = write_checkpoint(tmp_path / "ckpt", media_proc_cfg)
    img = alpha_pattern_rgba(400, 300, seed=3)
    ref = reference_preprocess(img, media_proc_cfg)
    for target in (path.parent, path):
        processor = kimi_k3_rs.KimiK3VisionProcessor.from_pretrained(as_type(target))
        assert isinstance(processor, kimi_k3_rs.KimiK3VisionProcessor)
        assert processor.media_proc_cfg == media_proc_cfg
        assert_output_matches(processor.preprocess([{"type": "image", "image": img}]), ref)


def test_from_pretrained_published_k25(tmp_path):
    path = write_checkpoint(tmp_path, K25_CFG)
    processor = kimi_k3_rs.KimiK3VisionProcessor.from_pretrained(path)
    assert processor.media_proc_cfg == K25_CFG
    img = noise(2100, 1500, "RGBA", 5)
    assert_output_matches(processor.preprocess([img]), reference_preprocess(img, K25_CFG))


def test_from_pretrained_missing_keys(tmp_path):
    bad = cfg("kimi_k3")
    del bad["image_std"]
    path = write_checkpoint(tmp_path, bad)
    with pytest.raises(ValueError, match=re.escape(
            "Kimi-K3 image processor is missing deferred-preprocessing config: image_std")):
        kimi_k3_rs.KimiK3VisionProcessor.from_pretrained(path)


def test_from_pretrained_missing_file(tmp_path):
    with pytest.raises((OSError, ValueError)):
        kimi_k3_rs.KimiK3VisionProcessor.from_pretrained(tmp_path / "nowhere")


# ---------------------------------------------------------------------------
# prepare_kimi_k3_encoder_inputs
# ---------------------------------------------------------------------------


def encoder_images():
    return [
        noise(640, 480, "RGB", 1),
        alpha_pattern_rgba(1000, 200, 2),
        noise_array(28, 28, "L", 3),
        {"type": "image", "image": noise(3000, 900, "RGB", 4)},
    ]


def sizes():
    return [[640, 480], [1000, 200], [28, 28], [3000, 900]]


@pytest.mark.parametrize("holder", ["processor", "namespace", "dict"])
def test_prepare_encoder_inputs(holder):
    media_proc_cfg = cfg("kimi_k3", in_patch_limit=4000)
    owner = {
        "processor": kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg=media_proc_cfg),
        "namespace": SimpleNamespace(media_proc_cfg=media_proc_cfg),
        "dict": media_proc_cfg,
    }[holder]
    images = encoder_images()
    enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs(images, owner)
    ref_pv, ref_grid = reference_preprocess(images, media_proc_cfg)

    assert isinstance(enc.grid_thws, np.ndarray) and enc.grid_thws.dtype == np.int64
    assert enc.grid_thws.shape == (4, 3)
    assert np.array_equal(enc.grid_thws, ref_grid)
    expected_rcs = [navit_resize_image(w, h, 14, 2, 4000, 512, None) for w, h in sizes()]
    assert [dict(rc) for rc in enc.resize_configs] == expected_rcs
    assert list(enc.num_tokens) == [rc["num_tokens"] for rc in expected_rcs]
    assert all(type(n) is int for n in enc.num_tokens)
    assert [[int(v) for v in s] for s in enc.original_image_sizes] == sizes()

    blocks = split_by_grid(ref_pv, ref_grid)
    every = enc.materialize()
    assert isinstance(every, list) and len(every) == 4
    for got, want in zip(every, blocks):
        assert got.dtype == np.float32
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert len(enc.materialize(None)) == 4
    some = enc.materialize([2, 0])
    assert len(some) == 2
    assert np.array_equal(some[0].view(np.uint32), blocks[2].view(np.uint32))
    assert np.array_equal(some[1].view(np.uint32), blocks[0].view(np.uint32))
    # each equals preprocess of that image alone
    for i, item in enumerate(images):
        alone = kimi_k3_rs.preprocess(item, media_proc_cfg)["pixel_values"]
        assert np.array_equal(alone.view(np.uint32), every[i].view(np.uint32))


def test_prepare_encoder_inputs_pillow_compat():
    img = noise(1500, 6000, "RGB", 0)
    media_proc_cfg = cfg("kimi_k25")
    for compat in ("12", "13"):
        enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([img], media_proc_cfg, pillow_compat=compat)
        want = kimi_k3_rs.preprocess(img, media_proc_cfg, pillow_compat=compat)["pixel_values"]
        assert np.array_equal(enc.materialize()[0], want)
    enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([img], media_proc_cfg)
    assert_output_matches({"pixel_values": enc.materialize()[0], "grid_thws": enc.grid_thws},
                          reference_preprocess(img, media_proc_cfg))


def test_prepare_encoder_inputs_empty():
    enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
    assert enc.grid_thws.shape == (0, 3) and enc.grid_thws.dtype == np.int64
    assert list(enc.num_tokens) == [] and list(enc.resize_configs) == [] and list(enc.original_image_sizes) == []
    assert enc.materialize() == []


def test_prepare_encoder_inputs_is_lazy_about_pixels():
    """Sizes come from the header: a decompression bomb is only rejected when materialized
    (or up front); either way the size math matches navit_resize_config."""
    raw = bomb_png()
    try:
        enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([raw], kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)
    except (ValueError, Image.DecompressionBombError):
        return
    assert enc.grid_thws.tolist() == [[1, 128, 128]]
    assert list(enc.num_tokens) == [4096]
    with pytest.raises((ValueError, Image.DecompressionBombError)):
        enc.materialize()


def test_prepare_encoder_inputs_does_not_leak_files(tmp_path):
    """Files opened to read sizes are closed even when nothing is materialized."""
    import gc
    import warnings

    path = tmp_path / "a.jpg"
    noise(64, 48, "RGB", 0).save(path)
    png = tmp_path / "b.png"
    noise(64, 48, "RGBA", 1).save(png)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([str(path), png], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
        assert enc.grid_thws.tolist() == [[1, 4, 6], [1, 4, 6]]
        del enc
        gc.collect()
    leaks = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert not leaks, [str(w.message) for w in leaks]


def test_preprocess_paths_do_not_leak_files(tmp_path):
    """Every file preprocess opens is closed again (single- and multi-frame files)."""
    import gc
    import warnings

    from PIL import Image as PILImage

    frames = [noise(40, 30, "RGB", s) for s in range(3)]
    paths = [tmp_path / "a.jpg", tmp_path / "b.png", tmp_path / "anim.png"]
    frames[0].save(paths[0])
    frames[1].save(paths[1])
    frames[0].save(paths[2], save_all=True, append_images=frames[1:])  # APNG, 3 frames
    with PILImage.open(paths[2]) as check_frames:
        assert check_frames.n_frames == 3
    gc.collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for path in paths:
            kimi_k3_rs.preprocess(str(path), kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
            kimi_k3_rs.preprocess(path, kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)
        gc.collect()
    leaks = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert not leaks, [str(w.message) for w in leaks]
