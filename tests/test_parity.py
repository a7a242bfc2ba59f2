"""Bit-exact parity of ``kimi_k3_rs.preprocess`` with the Pillow + NumPy reference.

Every comparison is exact (equal bytes of float32 ``pixel_values`` and equal
int64 ``grid_thws``).  The reference runs the installed Pillow, so the library
is called with ``pillow_compat=REF_COMPAT`` ("13" under Pillow 13.0.0) and with
the default ``"auto"``; when no image of the call meets the Pillow-13
vertical-first rule the other pass order must give the same bytes too.
"""

from __future__ import annotations

import base64
import copy
import functools
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
    noise,
    noise_array,
    photo,
    pil,
    split_by_grid,
    upscale,
    vgradient,
)
from reference import (
    navit_resize_image,
    reference_preprocess,
    to_pil,
    vertical_first_under_13,
)

OTHER_COMPAT = {"12": "13", "13": "12"}[REF_COMPAT]


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def any_vertical_first(images, media_proc_cfg):
    for item in images if isinstance(images, list) else [images]:
        img = to_pil(item)
        w, h = img.size
        rc = navit_resize_image(
            w, h, media_proc_cfg["patch_size"], media_proc_cfg["merge_kernel_size"],
            media_proc_cfg["in_patch_limit"], media_proc_cfg["patch_limit_on_one_side"],
            media_proc_cfg.get("fixed_output_tokens"),
        )
        if vertical_first_under_13(w, h, rc["new_width"], rc["new_height"]):
            return True
    return False


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


def check(images, media_proc_cfg, *, other_order=None):
    """Run the reference once and the library with every relevant pillow_compat.

    ``other_order``: None = decide from the vertical-first rule; True/False
    force whether the other pass order must match too.
    """
    ref = reference_preprocess(images, media_proc_cfg)
    before_cfg = copy.deepcopy(media_proc_cfg)
    before_images = snapshot(images)

    assert_output_matches(kimi_k3_rs.preprocess(images, media_proc_cfg), ref)
    assert_output_matches(kimi_k3_rs.preprocess(images, media_proc_cfg, pillow_compat="auto"), ref)
    assert_output_matches(kimi_k3_rs.preprocess(images, media_proc_cfg, pillow_compat=REF_COMPAT), ref)
    if other_order is None:
        other_order = not any_vertical_first(images, media_proc_cfg)
    if other_order:
        assert_output_matches(kimi_k3_rs.preprocess(images, media_proc_cfg, pillow_compat=OTHER_COMPAT), ref)

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
# Pillow 13 vertical-first pass order
# ---------------------------------------------------------------------------

TALL = [
    # (w, h, mode, config, in_patch_limit)
    (1242, 2688, "RGB", "k25", None),  # -> 1223x2646, vertical first under Pillow 13
    (1500, 6000, "RGB", "k25", None),  # -> 897x3588
    (900, 2400, "RGB", "k25", 4000),
    (600, 1900, "L", "k3", 2500),
    (700, 2100, "RGBA", "k3", 3000),
    (500, 1600, "LA", "k3", 2000),
    (700, 2100, "RGBA", "k3_before", 3000),
    (640, 2000, "RGB", "clip_k25", 2500),
    (1244, 2629, "RGB", "k25", None),  # taller than 2:1 but horizontal first (6 > 2*3 is false)
]


@pytest.mark.parametrize("w,h,mode,config,limit", TALL, ids=lambda v: str(v))
def test_tall_images(w, h, mode, config, limit):
    media_proc_cfg = CONFIGS[config] if limit is None else with_limit(config, limit)
    img = noise(w, h, mode, seed=w + h)
    rc = navit_resize_image(w, h, 14, 2, media_proc_cfg["in_patch_limit"], 512, None)
    vfirst = vertical_first_under_13(w, h, rc["new_width"], rc["new_height"])
    assert vfirst == ((w, h) != (1244, 2629))
    ref = check(img, media_proc_cfg)
    if vfirst:
        other = kimi_k3_rs.preprocess(img, media_proc_cfg, pillow_compat=OTHER_COMPAT)
        assert np.array_equal(other["grid_thws"], ref[1])
        # the two pass orders really differ on noise, so pillow_compat is not ignored
        assert not np.array_equal(other["pixel_values"], ref[0]), "pillow_compat had no effect on a tall image"


def test_1242x2688_sizes():
    rc = navit_resize_image(1242, 2688, 14, 2, 16384, 512, None)
    assert (rc["new_width"], rc["new_height"]) == (1223, 2646)


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
