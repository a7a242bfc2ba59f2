"""Error table: (bad input, exception class, exact message).

Messages reproduced from sglang / the checkpoint code (reference-spec section 9)
are compared in full with ``pytest.raises(Cls, match=re.escape(msg))`` anchored
at both ends; messages of kimi_k3_rs's own must name the key and the value.
"""

from __future__ import annotations

import copy
import itertools
import re
from types import SimpleNamespace

import numpy as np
import pytest

import kimi_k3_rs
from helpers import (
    K3_CHESSBOARD,
    alpha_pattern_rgba,
    assert_output_matches,
    cfg,
    noise,
    noise_array,
)
from reference import reference_preprocess

REQUIRED = ["patch_size", "merge_kernel_size", "in_patch_limit", "patch_limit_on_one_side", "image_mean", "image_std"]
MISSING_PREFIX = "Kimi-K3 image processor is missing deferred-preprocessing config: "
OWNER_MSG = "Kimi-K3 EPD owner-side preprocessing requires image_processor.media_proc_cfg"


def exact(msg: str) -> str:
    return f"^{re.escape(msg)}$"


def entry_points(media_proc_cfg, images):
    """Every public function that takes a media_proc_cfg."""
    yield lambda: kimi_k3_rs.preprocess(images, media_proc_cfg)
    yield lambda: kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg=media_proc_cfg)
    yield lambda: kimi_k3_rs.prepare_kimi_k3_encoder_inputs(images, media_proc_cfg)
    yield lambda: kimi_k3_rs.prepare_kimi_k3_encoder_inputs(images, SimpleNamespace(media_proc_cfg=media_proc_cfg))


# ---------------------------------------------------------------------------
# missing required keys: every non-empty subset, in the documented order
# ---------------------------------------------------------------------------

SUBSETS = [combo for r in range(1, 7) for combo in itertools.combinations(REQUIRED, r)]


@pytest.mark.parametrize("missing", SUBSETS, ids=lambda c: "-".join(c))
def test_missing_keys(missing):
    for base in ("kimi_k25", "kimi_k3"):
        media_proc_cfg = cfg(base)
        # remove in a scrambled order: the message order must not depend on it
        for key in sorted(missing, reverse=True):
            del media_proc_cfg[key]
        msg = MISSING_PREFIX + ", ".join(missing)
        for call in entry_points(media_proc_cfg, [noise(20, 20, "RGB", 0)]):
            with pytest.raises(ValueError, match=exact(msg)):
                call()


def test_missing_keys_checked_before_images():
    media_proc_cfg = cfg("kimi_k3")
    del media_proc_cfg["image_mean"]
    msg = MISSING_PREFIX + "image_mean"
    for images in ([12345], [b"not an image"], [np.zeros((4, 4), np.float32)], 3.5):
        for call in entry_points(media_proc_cfg, images):
            with pytest.raises(ValueError, match=exact(msg)):
                call()


def test_fixed_output_tokens_is_optional():
    media_proc_cfg = cfg("kimi_k25")
    del media_proc_cfg["fixed_output_tokens"]
    img = noise(50, 40, "RGB", 0)
    assert_output_matches(kimi_k3_rs.preprocess(img, media_proc_cfg), reference_preprocess(img, media_proc_cfg))


# ---------------------------------------------------------------------------
# processor without media_proc_cfg
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "owner",
    [
        object(),
        SimpleNamespace(),
        SimpleNamespace(media_proc_cfg=None),
        SimpleNamespace(media_proc_cfg=[("patch_size", 14)]),
        SimpleNamespace(media_proc_cfg="kimi_k3"),
        SimpleNamespace(image_processor=SimpleNamespace(media_proc_cfg={})),
    ],
    ids=["object", "empty-namespace", "none", "list", "str", "nested"],
)
def test_owner_without_media_proc_cfg(owner):
    with pytest.raises(ValueError, match=exact(OWNER_MSG)):
        kimi_k3_rs.prepare_kimi_k3_encoder_inputs([noise(20, 20, "RGB", 0)], owner)


# ---------------------------------------------------------------------------
# media items
# ---------------------------------------------------------------------------

BAD_ITEMS = [
    {"type": "video"},
    {"type": "image"},
    {"type": "video", "video": "clip.mp4"},
    {"type": "audio", "image": "x"},
    {"type": "video_chunk", "video_chunk": []},
]


@pytest.mark.parametrize("item", BAD_ITEMS, ids=lambda i: str(i))
def test_unsupported_media_item(item):
    msg = f"Unsupported Kimi-K3 encoder media item: {item}"
    with pytest.raises(ValueError, match=exact(msg)):
        kimi_k3_rs.prepare_kimi_k3_encoder_inputs([item], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
    with pytest.raises(ValueError, match=exact(msg)):
        kimi_k3_rs.prepare_kimi_k3_encoder_inputs([noise(10, 10, "RGB", 0), item], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
    # preprocess and the processor reject it too (class only: the HF processor's own wording differs)
    with pytest.raises(ValueError):
        kimi_k3_rs.preprocess([item], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
    with pytest.raises(ValueError):
        kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg=kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG).preprocess([item])


# ---------------------------------------------------------------------------
# image data errors
# ---------------------------------------------------------------------------

DATA_ERRORS = [
    (np.zeros((8, 8, 3), np.float32), ValueError, "Kimi-K3 preprocessing expects raw uint8 pixels, got float32"),
    (np.zeros((8, 8, 3), np.float64), ValueError, "Kimi-K3 preprocessing expects raw uint8 pixels, got float64"),
    (np.zeros((8, 8), np.uint16), ValueError, "Kimi-K3 preprocessing expects raw uint8 pixels, got uint16"),
    (np.zeros((8, 8, 4), np.int64), ValueError, "Kimi-K3 preprocessing expects raw uint8 pixels, got int64"),
    (np.zeros((8, 8, 3), np.int8), ValueError, "Kimi-K3 preprocessing expects raw uint8 pixels, got int8"),
    (np.zeros((8, 8, 3), bool), ValueError, "Kimi-K3 preprocessing expects raw uint8 pixels, got bool"),
    (np.zeros((8, 8, 5), np.uint8), ValueError, "Unsupported Kimi-K3 image channel count: 5"),
    (np.zeros((8, 8, 6), np.uint8), ValueError, "Unsupported Kimi-K3 image channel count: 6"),
    (np.zeros((8, 8, 0), np.uint8), ValueError, "Unsupported Kimi-K3 image channel count: 0"),
    (12345, ValueError, "Unsupported data type: <class 'int'>"),
    (3.5, ValueError, "Unsupported data type: <class 'float'>"),
    (None, ValueError, "Unsupported data type: <class 'NoneType'>"),
    (object(), ValueError, "Unsupported data type: <class 'object'>"),
    ({"type": "image", "image": 7}, ValueError, "Unsupported data type: <class 'int'>"),
]


@pytest.mark.parametrize("item,cls,msg", DATA_ERRORS, ids=[m for _, _, m in DATA_ERRORS])
def test_image_data_errors(item, cls, msg):
    for config in (kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG, kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG):
        with pytest.raises(cls, match=exact(msg)):
            kimi_k3_rs.preprocess([item], config)
        with pytest.raises(cls, match=exact(msg)):
            kimi_k3_rs.preprocess([noise(9, 9, "RGB", 0), item], config)
        if not isinstance(item, dict):
            with pytest.raises(cls, match=exact(msg)):
                kimi_k3_rs.preprocess(item, config)
            with pytest.raises(cls, match=exact(msg)):
                kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg=config).preprocess([{"type": "image", "image": item}])


@pytest.mark.parametrize(
    "arr",
    [np.zeros((0, 5, 3), np.uint8), np.zeros((5, 0, 3), np.uint8), np.zeros((0, 0), np.uint8),
     np.zeros((2, 4, 4, 3), np.uint8), np.zeros((12,), np.uint8), np.zeros((), np.uint8)],
    ids=["zero-height", "zero-width", "zero-both", "4d", "1d", "0d"],
)
def test_bad_array_shapes(arr):
    with pytest.raises(ValueError):
        kimi_k3_rs.preprocess([arr], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)


# ---------------------------------------------------------------------------
# background pattern
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("stage", ["after_resize", "before_resize"])
@pytest.mark.parametrize("pattern", ["plaid", "Chessboard", "grey", ""])
def test_invalid_background_pattern(stage, pattern):
    media_proc_cfg = cfg("kimi_k3", transparent_bg_fill_stage=stage,
                         transparent_bg_config={**K3_CHESSBOARD, "pattern": pattern})
    with pytest.raises(ValueError, match=exact(f"Invalid background pattern: {pattern}")):
        kimi_k3_rs.preprocess([alpha_pattern_rgba(40, 30, 1)], media_proc_cfg)


# ---------------------------------------------------------------------------
# bad config values: ConfigError naming the key and the value
# ---------------------------------------------------------------------------

NAN = float("nan")

# (key path, bad value, acceptable reprs in the message)
BAD_VALUES = [
    ("patch_size", 0, None),
    ("patch_size", -14, None),
    ("patch_size", True, None),
    ("patch_size", "14", None),
    ("patch_size", None, None),
    ("patch_size", 14.5, None),
    ("merge_kernel_size", 0, None),
    ("merge_kernel_size", -2, None),
    ("merge_kernel_size", False, None),
    ("merge_kernel_size", "2", None),
    ("in_patch_limit", 0, None),
    ("in_patch_limit", -16384, None),
    ("in_patch_limit", "16384", None),
    ("in_patch_limit", NAN, None),
    ("in_patch_limit", True, None),
    ("patch_limit_on_one_side", 0, None),
    ("patch_limit_on_one_side", -512, None),
    ("patch_limit_on_one_side", "512", None),
    ("image_mean", [0.5, 0.5], None),
    ("image_mean", [0.5, 0.5, 0.5, 0.5], None),
    ("image_mean", [NAN, 0.5, 0.5], ["nan"]),
    ("image_mean", [0.5, float("inf"), 0.5], ["inf"]),
    ("image_mean", "0.5", None),
    ("image_mean", 0.5, None),
    ("image_mean", None, None),
    ("image_mean", [0.5, "0.5", 0.5], ["'0.5'"]),
    ("image_mean", [True, 0.5, 0.5], ["True"]),
    ("image_std", [0.5, 0.0, 0.5], ["0.0"]),
    ("image_std", [0, 0, 0], ["0"]),
    ("image_std", [0.5, 0.5], None),
    ("image_std", [NAN, 0.5, 0.5], ["nan"]),
    ("image_std", "0.5", None),
    ("transparent_bg_fill_stage", "during_resize", None),
    ("transparent_bg_fill_stage", "After_Resize", None),
    ("transparent_bg_fill_stage", 1, None),
    ("transparent_bg_config.chessboard_square_size", 0, None),
    ("transparent_bg_config.chessboard_square_size", -8, None),
    ("transparent_bg_config.chessboard_square_size", "8", None),
    ("transparent_bg_config.chessboard_white_value", 256, None),
    ("transparent_bg_config.chessboard_gray_value", -1, None),
    ("transparent_bg_config.chessboard_gray_value", "180", None),
]


def set_path(media_proc_cfg, path, value):
    parts = path.split(".")
    target = media_proc_cfg
    for part in parts[:-1]:
        target = target[part]
    target[parts[-1]] = value


@pytest.mark.parametrize("key,value,shown", BAD_VALUES, ids=[f"{k}={v!r}" for k, v, _ in BAD_VALUES])
def test_bad_config_values(key, value, shown):
    media_proc_cfg = cfg("kimi_k3")
    set_path(media_proc_cfg, key, copy.deepcopy(value))
    name = key.split(".")[-1]
    reprs = [repr(value)] + (shown or [])
    for call in entry_points(media_proc_cfg, [noise(30, 30, "RGBA", 0)]):
        with pytest.raises(kimi_k3_rs.ConfigError) as info:
            call()
        msg = str(info.value)
        assert name in msg, msg
        assert any(r in msg for r in reprs), f"{msg!r} shows none of {reprs}"
        assert isinstance(info.value, ValueError)


def test_bad_value_in_navit_resize_config():
    for args in ((100, 100, 0, 2, 16384, 512), (100, 100, 14, 0, 16384, 512),
                 (100, 100, 14, 2, 0, 512), (100, 100, 14, 2, 16384, 0)):
        with pytest.raises(ValueError):
            kimi_k3_rs.navit_resize_config(*args)


@pytest.mark.parametrize("key", ["colour", "type", "chessboard_size"])
def test_unknown_key_in_transparent_bg_config(key):
    media_proc_cfg = cfg("kimi_k3", transparent_bg_config={**K3_CHESSBOARD, key: "white"})
    for call in entry_points(media_proc_cfg, [noise(30, 30, "RGBA", 0)]):
        with pytest.raises(TypeError, match=re.escape(key)):
            call()


@pytest.mark.parametrize("bad", ["chessboard", 5, ["pattern", "white"]])
def test_transparent_bg_config_wrong_type(bad):
    media_proc_cfg = cfg("kimi_k3", transparent_bg_config=bad)
    with pytest.raises((TypeError, ValueError), match="transparent_bg_config"):
        kimi_k3_rs.preprocess([noise(30, 30, "RGBA", 0)], media_proc_cfg)


def test_unknown_top_level_keys_accepted():
    extra = cfg("kimi_k3", in_patch_limit=500)
    extra.update({"foo": 1, "config_type": "something.else", "preserve_image_mode": True,
                  "in_patch_limit_video": 123, "nested": {"a": [1, 2]}})
    img = alpha_pattern_rgba(300, 200, 5)
    ref = reference_preprocess(img, cfg("kimi_k3", in_patch_limit=500))
    assert_output_matches(kimi_k3_rs.preprocess(img, extra), ref)
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg=extra)
    assert_output_matches(processor.preprocess([img]), ref)


def test_errors_leave_library_usable():
    media_proc_cfg = cfg("kimi_k25", in_patch_limit=300)
    img = noise_array(200, 100, "RGB", 1)
    ref = reference_preprocess(img, media_proc_cfg)
    for bad in ([np.zeros((3, 3), np.float32)], [12], [b"xx"], [{"type": "video"}]):
        with pytest.raises((ValueError, OSError)):
            kimi_k3_rs.preprocess(bad, media_proc_cfg)
        assert_output_matches(kimi_k3_rs.preprocess(img, media_proc_cfg), ref)


def test_side_limit_error_through_preprocess():
    media_proc_cfg = cfg("kimi_k25", patch_limit_on_one_side=511)
    msg = "token_width 256 * merge_kernel_size 2 > patch_limit_on_one_side 511"
    with pytest.raises(ValueError, match=exact(msg)):
        kimi_k3_rs.preprocess([noise(10000, 100, "RGB", 0)], media_proc_cfg)
    enc_msg = None
    try:
        kimi_k3_rs.prepare_kimi_k3_encoder_inputs([noise(10000, 100, "RGB", 0)], media_proc_cfg)
    except ValueError as exc:
        enc_msg = str(exc)
    assert enc_msg == msg
