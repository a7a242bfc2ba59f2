"""Bit-exact parity of ``kimi_k3_rs.preprocess`` with the Pillow + NumPy reference.

Every comparison is exact (equal bytes of float32 ``pixel_values`` and equal
int64 ``grid_thws``).  The reference runs the installed Pillow, so the library
is called with ``pillow_compat=REF_COMPAT`` (the installed Pillow's pass-order
rule: "12", "12.2" or "13") and with the default ``"auto"``; every other
``pillow_compat`` whose rule picks the same pass order for every image of the call
must give the same bytes too.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

import kimi_k3_rs
from helpers import (
    CLIP_MEAN,
    CLIP_STD,
    K3_CHESSBOARD,
    REF_COMPAT,
    ROCKET,
    alpha_pattern_la,
    alpha_pattern_rgba,
    assert_output_matches,
    cfg,
    color_gradient,
    encode,
    hgradient,
    k3_before,
    mode_image,
    noise,
    noise_array,
    photo,
    pil,
    split_by_grid,
    upscale,
    vgradient,
)
from reference import (
    COMPATS,
    navit_resize_image,
    reference_preprocess,
    to_pil,
    vertical_first,
)


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def resized_sizes(images, media_proc_cfg):
    """``(w, h, new_w, new_h)`` of every image of a call."""
    sizes = []
    for item in images if isinstance(images, list) else [images]:
        img = to_pil(item)
        w, h = img.size
        rc = navit_resize_image(
            w, h, media_proc_cfg["patch_size"], media_proc_cfg["merge_kernel_size"],
            media_proc_cfg["in_patch_limit"], media_proc_cfg["patch_limit_on_one_side"],
            media_proc_cfg.get("fixed_output_tokens"),
        )
        sizes.append((w, h, rc["new_width"], rc["new_height"]))
    return sizes


def same_pass_order(compat, w, h, new_w, new_h):
    """Does ``compat`` resize ``w x h -> new_w x new_h`` as the installed Pillow does
    (one pass only, or the same order)?"""
    one_pass = new_w == w or new_h == h
    return one_pass or vertical_first(compat, w, h, new_w, new_h) == vertical_first(REF_COMPAT, w, h, new_w, new_h)


def _freeze(item):
    if isinstance(item, np.ndarray):
        return ("array", item.dtype.str, item.shape, item.tobytes())
    if isinstance(item, Image.Image):
        return ("image", item.mode, item.size, item.tobytes())
    if isinstance(item, dict):
        return ("dict", tuple(sorted((k, _freeze(v)) for k, v in item.items())))
    return ("other", type(item).__name__, copy.deepcopy(item))


def snapshot(images):
    """Frozen copies of the inputs, to check the library does not modify them."""
    return [_freeze(item) for item in (images if isinstance(images, list) else [images])]


def check(images, media_proc_cfg):
    """Run the reference once and the library with every relevant pillow_compat:
    ``"auto"``, the installed Pillow's, and each other one whose pass order is the
    installed Pillow's for every image of the call."""
    ref = reference_preprocess(images, media_proc_cfg)
    before_cfg = copy.deepcopy(media_proc_cfg)
    before_images = snapshot(images)

    assert_output_matches(kimi_k3_rs.preprocess(images, media_proc_cfg), ref)
    assert_output_matches(kimi_k3_rs.preprocess(images, media_proc_cfg, pillow_compat="auto"), ref)
    sizes = resized_sizes(images, media_proc_cfg)
    for compat in COMPATS:
        if all(same_pass_order(compat, *size) for size in sizes):
            assert_output_matches(kimi_k3_rs.preprocess(images, media_proc_cfg, pillow_compat=compat), ref)

    assert media_proc_cfg == before_cfg, "preprocess modified media_proc_cfg"
    assert snapshot(images) == before_images, "preprocess modified an input"
    return ref


# ---------------------------------------------------------------------------
# configurations
# ---------------------------------------------------------------------------

CONFIGS = {
    "k25": cfg("kimi_k25"),
    "k3": cfg("kimi_k3"),
    "k3_before": k3_before(),
    "after_none": cfg("kimi_k3", transparent_bg_config=None),
    "before_none_explicit": cfg("kimi_k3", transparent_bg_config=None, transparent_bg_fill_stage="before_resize"),
    "after_white": cfg("kimi_k3", transparent_bg_config={"pattern": "white"}),
    "after_black": cfg("kimi_k3", transparent_bg_config={**K3_CHESSBOARD, "pattern": "black"}),
    "after_gray": cfg("kimi_k3", transparent_bg_config={"pattern": "gray"}),
    "before_gray": k3_before(transparent_bg_config={"pattern": "gray"}),
    "before_white": k3_before(transparent_bg_config={"pattern": "white"}),
    "chess_5_bottom": cfg(
        "kimi_k3",
        transparent_bg_config={
            "pattern": "chessboard",
            "chessboard_square_size": 5,
            "chessboard_square_on_top_left": False,
            "chessboard_white_value": 240,
            "chessboard_gray_value": 100,
        },
    ),
    "chess_1": cfg("kimi_k3", transparent_bg_config={"pattern": "chessboard", "chessboard_square_size": 1}),
    "chess_defaults": cfg("kimi_k3", transparent_bg_config={"pattern": "chessboard"}),
    "bg_empty_dict": cfg("kimi_k3", transparent_bg_config={}),
    "before_chess_3": k3_before(
        transparent_bg_config={"pattern": "chessboard", "chessboard_square_size": 3, "chessboard_gray_value": 0}
    ),
    "clip_k25": cfg("kimi_k25", image_mean=CLIP_MEAN, image_std=CLIP_STD),
    "clip_k3": cfg("kimi_k3", image_mean=CLIP_MEAN, image_std=CLIP_STD),
    "odd_mean_std": cfg("kimi_k25", image_mean=[0.1, 0.9, 0.33], image_std=[0.7, 0.123, 2.5]),
    "no_optional_keys": {  # only the six required keys
        "patch_size": 14,
        "merge_kernel_size": 2,
        "in_patch_limit": 16384,
        "patch_limit_on_one_side": 512,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    },
}

ALPHA_CONFIGS = sorted(CONFIGS)
PLAIN_CONFIGS = ["k25", "k3", "k3_before", "after_none", "after_white", "clip_k25", "clip_k3", "no_optional_keys"]


def with_limit(name, limit):
    out = copy.deepcopy(CONFIGS[name])
    out["in_patch_limit"] = limit
    return out


# ---------------------------------------------------------------------------
# real photos
# ---------------------------------------------------------------------------

PHOTO_NAMES = ["astronaut.png", "chelsea.png", "coffee.png", "camera.png", "rocket.jpg"]


@functools.lru_cache(maxsize=None)
def cached_photo(name):
    return photo(name)


@functools.lru_cache(maxsize=None)
def cached_upscaled(name, factor):
    return upscale(cached_photo(name), factor)


@pytest.mark.parametrize("name", PHOTO_NAMES)
@pytest.mark.parametrize(
    "config",
    [("k25", None), ("k3", None), ("k25", 1000), ("k25", 3000), ("k3", 5000), ("clip_k25", 3000),
     ("k3_before", 2000), ("after_none", 700)],
    ids=lambda c: f"{c[0]}-{c[1]}",
)
def test_photos(name, config):
    base, limit = config
    media_proc_cfg = CONFIGS[base] if limit is None else with_limit(base, limit)
    check(cached_photo(name), media_proc_cfg)


@pytest.mark.parametrize(
    "name,factor,config",
    [
        ("astronaut.png", 4, "k25"),  # 2048x2048 -> 1795x1795
        ("chelsea.png", 5, "k25"),
        ("coffee.png", 4, "k25"),
        ("camera.png", 4, "k25"),  # L
        ("camera.png", 4, "k3"),  # L, after_resize (no resize: fits the K3 budget)
        ("rocket.jpg", 4, "k25"),
        ("rocket.jpg", 8, "k3"),  # 5120x3416 -> resized by the K3 preset
        ("astronaut.png", 4, "clip_k25"),
    ],
)
def test_upscaled_photos(name, factor, config):
    img = cached_upscaled(name, factor)
    ref = check(img, CONFIGS[config])
    # make sure the preset really resized (otherwise the test would be weaker than intended)
    rc = navit_resize_image(img.width, img.height, 14, 2, CONFIGS[config]["in_patch_limit"], 512, None)
    if (name, config) != ("camera.png", "k3"):
        assert (rc["new_width"], rc["new_height"]) != img.size
    assert ref[0].shape[0] > 0


def data_url(raw: bytes, mime: str) -> str:
    return f"data:{mime};base64," + base64.b64encode(raw).decode("ascii")


@pytest.mark.parametrize(
    "kind", ["pil", "str_path", "pathlike", "bytes", "data_url", "media_dict", "media_dict_bytes"]
)
@pytest.mark.parametrize("config", ["k25", "k3"])
def test_input_kinds_embedded_photo(kind, config):
    media_proc_cfg = with_limit(config, 1000)
    raw = ROCKET.read_bytes()
    item = {
        "pil": cached_photo("rocket.jpg"),
        "str_path": str(ROCKET),
        "pathlike": Path(ROCKET),
        "bytes": raw,
        "data_url": data_url(raw, "image/jpeg"),
        "media_dict": {"type": "image", "image": cached_photo("rocket.jpg")},
        "media_dict_bytes": {"type": "image", "image": raw},
    }[kind]
    check(item, media_proc_cfg)
    # every input kind gives the bytes of the PIL image
    assert_output_matches(kimi_k3_rs.preprocess(item, media_proc_cfg),
                          reference_preprocess(cached_photo("rocket.jpg"), media_proc_cfg))


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "TIFF", "PPM"])
@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA", "LA"])
def test_encoded_png_and_friends(fmt, mode, tmp_path):
    if fmt in ("PPM", "BMP") and mode == "LA":
        mode = "L"
    if fmt == "PPM" and mode == "RGBA":
        mode = "RGB"
    img = noise(97, 61, mode, seed=5) if mode in ("RGB", "L") else alpha_pattern_rgba(97, 61, 5).convert(mode)
    raw = encode(img, fmt)
    path = tmp_path / f"img.{fmt.lower()}"
    path.write_bytes(raw)
    for config in ("k25", "k3", "k3_before"):
        media_proc_cfg = with_limit(config, 12)
        check(raw, media_proc_cfg)
        check(str(path), media_proc_cfg)


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_animated_png_first_frame(mode):
    frames = [noise(90, 70, mode, seed=s) for s in range(3)]
    raw = encode(frames[0], "PNG", save_all=True, append_images=frames[1:])
    for config in ("k25", "k3"):
        ref = check(raw, with_limit(config, 20))
        # the first frame is the one processed
        assert_output_matches(kimi_k3_rs.preprocess(frames[0], with_limit(config, 20)), ref)


# ---------------------------------------------------------------------------
# synthetic content
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA", "LA"])
@pytest.mark.parametrize("config", PLAIN_CONFIGS)
@pytest.mark.parametrize("limit", [None, 150])
def test_noise_modes(mode, config, limit):
    img = noise(301, 203, mode, seed=11)
    check(img, CONFIGS[config] if limit is None else with_limit(config, limit))


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA", "LA"])
@pytest.mark.parametrize("config", ["k25", "k3", "k3_before"])
@pytest.mark.parametrize("size", [(70001, 3), (3, 70001), (20000, 40)])
def test_rows_wider_than_a_tile_of_the_horizontal_pass(mode, config, size):
    """Rows over 64 KiB are resized in tiles of input columns (``resize/passes.rs``): one
    output pixel's taps past a tile (a 70,001x3 image down to 7,168 wide), tile ends
    inside a band, and the tall case where the horizontal pass is the small one."""
    img = noise(*size, mode, seed=5)
    check(img, CONFIGS[config])


@pytest.mark.parametrize("config", ALPHA_CONFIGS)
@pytest.mark.parametrize("limit", [None, 90])
def test_alpha_pattern_rgba(config, limit):
    img = alpha_pattern_rgba(173, 129, seed=3)
    check(img, CONFIGS[config] if limit is None else with_limit(config, limit))


@pytest.mark.parametrize("config", ALPHA_CONFIGS)
@pytest.mark.parametrize("limit", [None, 90])
def test_alpha_pattern_la(config, limit):
    img = alpha_pattern_la(157, 141, seed=4)
    check(img, CONFIGS[config] if limit is None else with_limit(config, limit))


@pytest.mark.parametrize("config", ["k3", "k3_before", "after_none", "chess_5_bottom", "k25"])
@pytest.mark.parametrize("limit", [None, 200])
def test_random_alpha(config, limit):
    rgba = noise(240, 170, "RGBA", seed=9)  # uniformly random alpha
    la = noise(240, 170, "LA", seed=10)  # uniformly random alpha
    media_proc_cfg = CONFIGS[config] if limit is None else with_limit(config, limit)
    check(rgba, media_proc_cfg)
    check(la, media_proc_cfg)


@pytest.mark.parametrize("alpha", [0, 37, 128, 255])
@pytest.mark.parametrize("config", ["k3", "k3_before", "after_none", "after_gray", "k25"])
def test_uniform_alpha(alpha, config):
    a = noise_array(120, 90, "RGBA", seed=alpha)
    a[:, :, 3] = alpha
    check(pil(a, "RGBA"), with_limit(config, 40))
    check(pil(a, "RGBA"), CONFIGS[config])


@pytest.mark.parametrize("config", ["k25", "k3", "clip_k3"])
@pytest.mark.parametrize("limit", [None, 300])
def test_gradients(config, limit):
    media_proc_cfg = CONFIGS[config] if limit is None else with_limit(config, limit)
    check(hgradient(700, 300), media_proc_cfg)
    check(vgradient(300, 500, "L"), media_proc_cfg)
    check(pil(color_gradient(641, 479), "RGB"), media_proc_cfg)


# ---------------------------------------------------------------------------
# tiny images and thin strips
# ---------------------------------------------------------------------------

TINY_SIZES = [(1, 1), (3, 5), (5, 3), (13, 13), (14, 14), (28, 28), (29, 29), (1, 2), (2, 1),
              (1, 700), (700, 1), (1, 9000), (9000, 1), (2, 20000), (8366, 10), (10000, 10), (10, 8366)]


@pytest.mark.parametrize("size", TINY_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA", "LA"])
@pytest.mark.parametrize("config", ["k25", "k3", "k3_before"])
def test_tiny_and_strips(size, mode, config):
    w, h = size
    check(noise(w, h, mode, seed=w * 31 + h), CONFIGS[config])


@pytest.mark.parametrize("size", [(1, 1), (3, 5), (29, 29), (1, 300), (300, 1)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_tiny_with_tiny_budget(size):
    # in_patch_limit 1 / patch_limit_on_one_side 1 shrink everything to a single patch budget
    w, h = size
    for config in ("k25", "k3"):
        media_proc_cfg = with_limit(config, 1)
        check(noise(w, h, "RGBA", seed=1), media_proc_cfg)
        small_side = copy.deepcopy(media_proc_cfg)
        small_side["patch_limit_on_one_side"] = 2
        check(noise(w, h, "RGB", seed=2), small_side)


# ---------------------------------------------------------------------------
# Pass order: the rule of each pillow_compat
# ---------------------------------------------------------------------------

TALL = [
    # (w, h, mode, config, in_patch_limit, vertical first under pillow_compat "12", "12.2", "13")
    (1242, 2688, "RGB", "k25", None, "HHV"),  # -> 1223x2646
    (1500, 6000, "RGB", "k25", None, "HHV"),  # -> 897x3588
    (900, 2400, "RGB", "k25", 4000, "HHV"),
    (600, 1900, "L", "k3", 2500, "HHV"),
    (700, 2100, "RGBA", "k3", 3000, "HHV"),
    (500, 1600, "LA", "k3", 2000, "HHV"),
    (700, 2100, "RGBA", "k3_before", 3000, "HHV"),
    (640, 2000, "RGB", "clip_k25", 2500, "HHV"),
    (1244, 2629, "RGB", "k25", None, "HHH"),  # taller than 2:1 but horizontal first (6 > 2*3 is false)
    (10, 8366, "RGB", "k25", None, "HVV"),  # -> 8x7167: over 100:1
    (70, 7170, "RGBA", "k3", None, "HVH"),  # -> 69x7168: over 100:1, and 2 > 2*1 is false
]


@pytest.mark.parametrize("w,h,mode,config,limit,orders", TALL, ids=lambda v: str(v))
def test_tall_images(w, h, mode, config, limit, orders):
    """The library with the installed Pillow's pass order gives the reference's bytes, and
    every pillow_compat with the other order gives other bytes (noise), so none is ignored."""
    media_proc_cfg = CONFIGS[config] if limit is None else with_limit(config, limit)
    img = noise(w, h, mode, seed=w + h)
    rc = navit_resize_image(w, h, 14, 2, media_proc_cfg["in_patch_limit"], 512, None)
    new_w, new_h = rc["new_width"], rc["new_height"]
    assert "".join("V" if vertical_first(c, w, h, new_w, new_h) else "H" for c in COMPATS) == orders
    ref = check(img, media_proc_cfg)
    for compat in COMPATS:
        if not same_pass_order(compat, w, h, new_w, new_h):
            other = kimi_k3_rs.preprocess(img, media_proc_cfg, pillow_compat=compat)
            assert np.array_equal(other["grid_thws"], ref[1])
            assert not np.array_equal(other["pixel_values"], ref[0]), f"pillow_compat={compat!r} had no effect"


def test_1242x2688_sizes():
    rc = navit_resize_image(1242, 2688, 14, 2, 16384, 512, None)
    assert (rc["new_width"], rc["new_height"]) == (1223, 2646)


def order_grid():
    """``(w, h, new_w, new_h)`` down-scales that run both passes: every size up to 6x24,
    and sizes around the boundaries of the rules (height 100 times the width, Pillow
    12.2; a height loss of twice the width loss, Pillow 13)."""
    cases = [(w, h, nw, nh) for w in range(2, 7) for h in range(2, 25) for nw in range(1, w) for nh in range(1, h)]
    for w in (2, 3, 5):
        for h in range(100 * w - 1, 100 * w + 3):
            for nw in range(1, w):
                two_dw = 2 * (w - nw)
                for nh in {1, h // 3, h - two_dw - 1, h - two_dw, h - two_dw + 1, h - 1}:
                    cases.append((w, h, nw, nh))
    return cases


ORDER_GRID = order_grid()


def pillow_orders(im, new_w, new_h):
    """The installed Pillow's bytes with the horizontal pass first and with the vertical
    pass first: two calls that resize one axis each (one pass each, under every Pillow)."""
    w, h = im.size
    bicubic = Image.Resampling.BICUBIC
    horizontal_first = np.asarray(im.resize((new_w, h), bicubic).resize((new_w, new_h), bicubic))
    vertical_first_ = np.asarray(im.resize((w, new_h), bicubic).resize((new_w, new_h), bicubic))
    return horizontal_first, vertical_first_


def grid_image(index, w, h):
    """Noise, in L or RGB by turns."""
    return noise(w, h, ("L", "RGB")[index % 2], seed=index)


def core_resize(im, new_w, new_h, compat):
    options = kimi_k3_rs._native.Options(compat, "float32", 1)
    return kimi_k3_rs._native.resize_bicubic(np.asarray(im), new_w, new_h, options)


def test_pass_order_of_the_installed_pillow():
    """``Image.resize(BICUBIC)`` of the installed Pillow, size by size over
    :data:`ORDER_GRID`, equals the core's with ``resolve_pillow_compat("auto")``, and
    runs the pass order the reference's rule for :data:`REF_COMPAT` says; the grid
    tells that rule apart from every other one (cases where the orders give other bytes)."""
    auto = kimi_k3_rs.resolve_pillow_compat("auto")
    assert auto == REF_COMPAT
    telling = dict.fromkeys(COMPATS, 0)
    for index, (w, h, new_w, new_h) in enumerate(ORDER_GRID):
        im = grid_image(index, w, h)
        got = np.asarray(im.resize((new_w, new_h), Image.Resampling.BICUBIC))
        orders = pillow_orders(im, new_w, new_h)
        case = f"Pillow {Image.__version__}: {w}x{h} -> {new_w}x{new_h}"
        assert np.array_equal(got, orders[vertical_first(REF_COMPAT, w, h, new_w, new_h)]), case
        assert np.array_equal(core_resize(im, new_w, new_h, auto), got), case
        if not np.array_equal(*orders):
            for compat in COMPATS:
                telling[compat] += vertical_first(compat, w, h, new_w, new_h) != vertical_first(REF_COMPAT, w, h, new_w, new_h)
    assert telling.pop(REF_COMPAT) == 0
    assert min(telling.values()) >= 20, telling


@pytest.mark.parametrize("compat", COMPATS)
def test_pass_order_of_each_pillow_compat(compat):
    """The core with ``pillow_compat=compat`` runs the pass order of that Pillow's rule
    (the reference's), size by size over :data:`ORDER_GRID`, whatever Pillow is installed."""
    assert kimi_k3_rs._native.Options(compat, "float32", 1).pillow_compat == compat
    for index, (w, h, new_w, new_h) in enumerate(ORDER_GRID):
        im = grid_image(index, w, h)
        want = pillow_orders(im, new_w, new_h)[vertical_first(compat, w, h, new_w, new_h)]
        assert np.array_equal(core_resize(im, new_w, new_h, compat), want), f"{compat}: {w}x{h} -> {new_w}x{new_h}"


@pytest.mark.parametrize("kind", ["I;16", "F"])
@pytest.mark.parametrize("compat", COMPATS)
def test_pillow_resized_mode_pass_order(kind, compat):
    """A mode the installed Pillow resizes itself (16/32-bit, under ``after_resize``) gives
    the reference's bytes under a pillow_compat with the installed Pillow's pass order, and
    ImageError under any other: 70x7170 -> 69x7168 (K3) is vertical first under "12.2" only."""
    image = mode_image(kind, 70, 7170, seed=3)
    ref = reference_preprocess(image, CONFIGS["k3"])
    assert [vertical_first(c, 70, 7170, 69, 7168) for c in COMPATS] == [False, True, False]
    if same_pass_order(compat, 70, 7170, 69, 7168):
        assert_output_matches(kimi_k3_rs.preprocess(image, CONFIGS["k3"], pillow_compat=compat), ref)
    else:
        msg = f"whose pass order is pillow_compat={REF_COMPAT!r}, not {compat!r}, and the order changes the result for 70x7170 -> 69x7168"
        with pytest.raises(kimi_k3_rs.ImageError, match=re.escape(msg)):
            kimi_k3_rs.preprocess(image, CONFIGS["k3"], pillow_compat=compat)


@pytest.mark.parametrize(
    "version,compat",
    [("11.3.0", "12"), ("12.0.0", "12"), ("12.1.0", "12"), ("12.1.1", "12"), ("12.2.0", "12.2"),
     ("12.3.0", "12.2"), ("12.4.0.dev0", "12.2"), ("13.0.0", "13"), ("13.1.2", "13"), ("14.0.0", "13")],
)
def test_auto_follows_the_pillow_version(version, compat, monkeypatch):
    """``pillow_compat="auto"`` reads the installed Pillow's major and minor version."""
    import PIL

    monkeypatch.setattr(PIL, "__version__", version)
    assert kimi_k3_rs.resolve_pillow_compat("auto") == compat
    assert kimi_k3_rs.KimiK3VisionProcessor(CONFIGS["k3"]).pillow_compat == compat


# ---------------------------------------------------------------------------
# numpy array inputs
# ---------------------------------------------------------------------------

ARRAY_SHAPES = {
    "HxW": lambda a: a[:, :, 0],
    "HxWx1": lambda a: a[:, :, :1],
    "HxWx2": lambda a: a[:, :, :2],
    "HxWx3": lambda a: a[:, :, :3],
    "HxWx4": lambda a: a,
}
ARRAY_MODE = {"HxW": "L", "HxWx1": "L", "HxWx2": "LA", "HxWx3": "RGB", "HxWx4": "RGBA"}


@pytest.mark.parametrize("shape", sorted(ARRAY_SHAPES))
@pytest.mark.parametrize("config", ["k25", "k3", "k3_before", "after_none", "after_white", "clip_k3"])
@pytest.mark.parametrize("limit", [None, 100])
def test_numpy_arrays(shape, config, limit):
    base = noise_array(211, 157, "RGBA", seed=21)
    arr = np.ascontiguousarray(ARRAY_SHAPES[shape](base))
    media_proc_cfg = CONFIGS[config] if limit is None else with_limit(config, limit)
    ref = check(arr, media_proc_cfg)
    # the array gives the same bytes as the PIL image of that mode
    img = pil(arr[:, :, 0] if arr.ndim == 3 and arr.shape[2] == 1 else arr, ARRAY_MODE[shape])
    assert_output_matches(kimi_k3_rs.preprocess(img, media_proc_cfg), ref)


@pytest.mark.parametrize("config", ["k25", "k3"])
@pytest.mark.parametrize("limit", [None, 1024])
@pytest.mark.parametrize("num_threads", [1, 2])
def test_numpy_array_large_enough_to_fetch_ahead(config, limit, num_threads):
    """An array of at least 64 MiB is resized in place, each tile of the horizontal pass
    fetching the next one's input while it is summed (``FETCH_AHEAD_BYTES`` in
    ``resize/passes.rs``; AVX-512 VNNI + VBMI): 5000x4500 RGB (67.5 MB), downscaled about
    2.7x (the preset's limit) and 12x, on one thread and on two."""
    arr = noise_array(5000, 4500, "RGB", seed=24)
    assert arr.nbytes >= 64 << 20
    media_proc_cfg = CONFIGS[config] if limit is None else with_limit(config, limit)
    ref = reference_preprocess(arr, media_proc_cfg)
    assert_output_matches(kimi_k3_rs.preprocess(arr, media_proc_cfg, num_threads=num_threads), ref)


@pytest.mark.parametrize("config", ["k25", "k3"])
def test_numpy_non_contiguous(config):
    """A strided view is either read correctly or rejected, never misread."""
    base = noise_array(300, 200, "RGBA", seed=5)
    views = [base[:, ::2, :3], base[::-1, :, :], base.transpose(1, 0, 2), base[:, :, 1]]
    for view in views:
        ref = reference_preprocess(np.ascontiguousarray(view), with_limit(config, 100))
        try:
            out = kimi_k3_rs.preprocess(view, with_limit(config, 100))
        except ValueError:
            continue
        assert_output_matches(out, ref)


def test_numpy_readonly_array():
    arr = noise_array(90, 60, "RGB", seed=1)
    arr.setflags(write=False)
    check(arr, with_limit("k25", 10))


# ---------------------------------------------------------------------------
# batches
# ---------------------------------------------------------------------------


def test_mixed_batch():
    raw_png = encode(alpha_pattern_rgba(64, 50, seed=8), "PNG")
    images = [
        noise(640, 480, "RGB", seed=1),
        noise_array(300, 200, "L", seed=2),
        alpha_pattern_rgba(200, 300, seed=3),
        pil(noise_array(90, 70, "RGBA", seed=4)[:, :, 2:], "LA"),
        noise(1, 1, "RGB", seed=5),
        raw_png,
        {"type": "image", "image": noise_array(33, 47, "RGBA", seed=6)},
        noise_array(2000, 30, "RGBA", seed=7)[:, :, :3].copy(),
        noise_array(13, 900, "RGBA", seed=8)[:, :, :2].copy(),
        hgradient(1000, 700),
    ]
    for config in ("k25", "k3", "k3_before", "after_none", "chess_5_bottom", "clip_k3"):
        for limit in (None, 700):
            media_proc_cfg = CONFIGS[config] if limit is None else with_limit(config, limit)
            ref = check(images, media_proc_cfg)
            # per-image blocks equal single-image calls
            blocks = split_by_grid(ref[0], ref[1])
            assert len(blocks) == len(images)
            for item, block in zip(images[:3], blocks[:3]):
                single = kimi_k3_rs.preprocess([item], media_proc_cfg)
                assert np.array_equal(single["pixel_values"].view(np.uint32), block.view(np.uint32))


def test_batch_permutation():
    images = [noise(640, 480, "RGB", 1), noise(1000, 200, "RGB", 2), noise(28, 28, "RGB", 3)]
    media_proc_cfg = with_limit("k3", 600)
    out = kimi_k3_rs.preprocess(images, media_proc_cfg)
    blocks = split_by_grid(out["pixel_values"], out["grid_thws"])
    perm = [2, 0, 1]
    out_p = kimi_k3_rs.preprocess([images[i] for i in perm], media_proc_cfg)
    assert np.array_equal(out_p["grid_thws"], out["grid_thws"][perm])
    assert np.array_equal(out_p["pixel_values"], np.concatenate([blocks[i] for i in perm]))


def test_single_image_equals_list_of_one():
    img = noise(100, 80, "RGB", 0)
    a = kimi_k3_rs.preprocess(img, CONFIGS["k25"])
    b = kimi_k3_rs.preprocess([img], CONFIGS["k25"])
    assert np.array_equal(a["pixel_values"], b["pixel_values"])
    assert np.array_equal(a["grid_thws"], b["grid_thws"])


@pytest.mark.parametrize("config", ["k25", "k3"])
def test_empty_list(config):
    out = kimi_k3_rs.preprocess([], CONFIGS[config])
    assert out["pixel_values"].shape == (0, 3, 14, 14)
    assert out["pixel_values"].dtype == np.float32
    assert out["grid_thws"].shape == (0, 3)
    assert out["grid_thws"].dtype == np.int64


def test_other_patch_sizes():
    media_proc_cfg = cfg("kimi_k3", patch_size=16, merge_kernel_size=2, in_patch_limit=600)
    check([noise(333, 222, "RGBA", 1), noise(50, 50, "L", 2)], media_proc_cfg)
    media_proc_cfg = cfg("kimi_k25", patch_size=7, merge_kernel_size=3, in_patch_limit=2000, patch_limit_on_one_side=90)
    check([noise(333, 222, "RGB", 1), noise(700, 50, "LA", 2)], media_proc_cfg)


def test_fixed_output_tokens_does_not_change_pixels():
    img = noise(1024, 768, "RGB", 0)
    ref = check(img, cfg("kimi_k25", fixed_output_tokens=64))
    assert ref[0].shape[0] == 4144


# ---------------------------------------------------------------------------
# hypothesis sweep
# ---------------------------------------------------------------------------

SWEEP_CONFIGS = ["k25", "k3", "k3_before", "after_none", "after_gray", "chess_5_bottom", "bg_empty_dict", "clip_k3"]


@given(
    w=st.integers(1, 320),
    h=st.integers(1, 320),
    mode=st.sampled_from(["RGB", "L", "RGBA", "LA"]),
    config=st.sampled_from(SWEEP_CONFIGS),
    limit=st.one_of(st.none(), st.integers(1, 600)),
    as_array=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_sweep(w, h, mode, config, limit, as_array, seed):
    media_proc_cfg = CONFIGS[config] if limit is None else with_limit(config, limit)
    arr = noise_array(w, h, mode, seed)
    item = arr if as_array else pil(arr, mode)
    check(item, media_proc_cfg)


@given(
    w=st.integers(1, 1200),
    h=st.integers(1, 3000),
    config=st.sampled_from(["k25", "k3", "k3_before"]),
    limit=st.integers(50, 3000),
    mode=st.sampled_from(["RGB", "RGBA", "L"]),
)
def test_sweep_tall(w, h, config, limit, mode):
    """Taller shapes, where the pass-order rule matters (same compat as the reference)."""
    media_proc_cfg = with_limit(config, limit)
    check(noise(w, h, mode, seed=w * 7 + h), media_proc_cfg)


# ---------------------------------------------------------------------------
# every kernel path, chosen by KIMI_K3_RS_SIMD
# ---------------------------------------------------------------------------

SIMD_PATHS = ["scalar", "sse4.1", "avx2", "avx512"]

#: A child's work: K2.5 and K3 features (``in_patch_limit`` 1024, so that every image is
#: resized) of three noise images (RGB downscaled 3.9x, its rows over a tile of the
#: horizontal pass; RGBA, composited under K3; L), the sha256 of each preset's.
_CHILD = """
import hashlib, sys
import numpy as np
import kimi_k3_rs
sys.path.insert(0, {tests!r})
from helpers import cfg, noise
images = [noise(4100, 700, "RGB", 1), noise(900, 650, "RGBA", 2), noise(333, 1201, "L", 3)]
print(kimi_k3_rs.simd_path)
for preset in ("kimi_k25", "kimi_k3"):
    out = kimi_k3_rs.preprocess(images, cfg(preset, in_patch_limit=1024))
    print(hashlib.sha256(out["pixel_values"].tobytes()).hexdigest())
"""


def _child(simd: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KIMI_K3_RS_SIMD"}
    if simd is not None:
        env["KIMI_K3_RS_SIMD"] = simd
    code = _CHILD.format(tests=str(Path(__file__).resolve().parent))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


def test_every_simd_path_gives_the_reference_bytes():
    """``KIMI_K3_RS_SIMD`` runs the kernels of the path it names (``simd_path`` says which),
    and every path this CPU runs gives the reference's bytes; a path the CPU lacks, or a
    name of none, fails the import with a ``KimiK3Error`` naming the variable and value."""
    images = [noise(4100, 700, "RGB", 1), noise(900, 650, "RGBA", 2), noise(333, 1201, "L", 3)]
    want = []
    for preset in ("kimi_k25", "kimi_k3"):
        pixel_values, _ = reference_preprocess(images, cfg(preset, in_patch_limit=1024))
        want.append(hashlib.sha256(pixel_values.tobytes()).hexdigest())
    fastest = _child(None)
    assert fastest.returncode == 0, fastest.stderr
    best = fastest.stdout.split()[0]
    assert fastest.stdout.split()[1:] == want
    runs = SIMD_PATHS[: SIMD_PATHS.index(best) + 1]
    for path in runs + [" avx2 "] * ("avx2" in runs):
        got = _child(path)
        assert got.returncode == 0, got.stderr
        assert got.stdout.split() == [path.strip(), *want], path
    assert _child("").stdout.split()[0] == best
    for path in SIMD_PATHS[len(runs):]:
        got = _child(path)
        assert got.returncode != 0
        assert f"KIMI_K3_RS_SIMD must be a path this CPU runs, got '{path}'" in got.stderr
    for bad in ("AVX2", "avx9", "sse41"):
        got = _child(bad)
        assert got.returncode != 0
        assert "kimi_k3_rs.KimiK3Error: KIMI_K3_RS_SIMD must be one of scalar, sse4.1, avx2, avx512" in got.stderr
        assert f"got '{bad}'" in got.stderr
