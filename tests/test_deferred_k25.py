"""sglang's Kimi-K2.5 deferred entry, ``prepare_kimi_k25_encoder_inputs``.

Replays sglang's flow (``kimi_k25_image_processing.py``) as ``test_serving.py`` does for
K3: geometry up front on every rank, the owner split, ``materialize`` bit-equal to
``preprocess``; then what the K2.5 entry differs in: its messages (verbatim, class
included) and the RGB conversion of ``_to_pil_rgb``.
"""

from __future__ import annotations

import base64
import warnings
from concurrent.futures import ThreadPoolExecutor

import kimi_k3_rs
import numpy as np
import pytest
from helpers import (
    alpha_pattern_la,
    alpha_pattern_rgba,
    assert_bit_equal,
    cfg,
    encode,
    exact,
    mode_image,
    noise,
    noise_array,
    split_by_grid,
)
from kimi_k3_rs.deferred import KimiK25EncoderInputs, prepare_kimi_k25_encoder_inputs
from PIL import Image
from reference import navit_resize_image, reference_preprocess

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
