"""Bad inputs, config values and options: the exception class and its message, and the library keeps working.

Error table: (bad input, exception class, exact message).  Messages reproduced
from sglang / the checkpoint code (reference-spec section 9) are compared in full
with ``pytest.raises(Cls, match=re.escape(msg))`` anchored at both ends; messages
of kimi_k3_rs's own must name the key and the value.  Then every entry point,
every bad item / config value / option (a ValueError / TypeError), truncated and
undecodable files (an ImageError naming the batch index).

Then one rule, one message (the public API and ``_native`` give the same class and text;
messages bounded and on one line), and no Rust panic reaches Python (fuzzed configs,
arrays and ``out=`` buffers): the sections below, each with its own header.
"""

from __future__ import annotations

import base64
import collections
import copy
import io
import itertools
import re
import struct
import threading
import types
import warnings
import zlib
from types import SimpleNamespace
from typing import Any, Callable, List

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

import kimi_k3_rs
from kimi_k3_rs import _native
from helpers import (
    K3,
    K3_CHESSBOARD,
    K25,
    OK_ERRORS,
    SEEDS,
    STRICT_DECODE,
    alpha_pattern_rgba,
    assert_bit_equal,
    assert_output_matches,
    cfg,
    encode,
    exact,
    from_pillow,
    native_files,
    noise,
    noise_array,
    png_chunk,
    sanity_check,
    set_path,
    with_path,
)
from reference import reference_preprocess

REQUIRED = ["patch_size", "merge_kernel_size", "in_patch_limit", "patch_limit_on_one_side", "image_mean", "image_std"]
MISSING_PREFIX = "Kimi-K3 image processor is missing deferred-preprocessing config: "
OWNER_MSG = "Kimi-K3 EPD owner-side preprocessing requires image_processor.media_proc_cfg"
ImageError = kimi_k3_rs.ImageError


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
    ("image_mean", NAN, ["nan"]),  # one value is broadcast (issue #13), but must be finite
    ("image_std", 0.0, ["0.0"]),
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


@pytest.mark.parametrize("key,good,bad", [
    ("patch_size", 14, True), ("patch_size", 14, 14.0), ("in_patch_limit", 4096, 4096.0),
    ("fixed_output_tokens", None, True), ("transparent_bg_config.chessboard_gray_value", 180, "180"),
])
def test_a_config_validated_once_by_content_still_refuses_a_value_equal_to_a_valid_one(key, good, bad):
    """``MediaProcConfig.from_dict`` keeps the configs of plain dicts by their content key:
    the same content gives the same object, a changed dict is validated again, and a
    value ``==`` to a kept one but of another type (True == 1, 14.0 == 14) still raises."""
    from kimi_k3_rs.config import MediaProcConfig

    media_proc_cfg = cfg("kimi_k3")
    set_path(media_proc_cfg, key, good)
    kept = MediaProcConfig.from_dict(media_proc_cfg)
    assert MediaProcConfig.from_dict(copy.deepcopy(media_proc_cfg)) is kept
    set_path(media_proc_cfg, key, bad)
    for _ in range(2):  # a failure is never kept
        with pytest.raises(kimi_k3_rs.ConfigError, match=re.escape(key.split(".")[-1])):
            kimi_k3_rs.preprocess(noise(30, 30, "RGBA", 0), media_proc_cfg)
    media_proc_cfg = cfg("kimi_k3", in_patch_limit=64)  # the same dict object, changed
    small = kimi_k3_rs.preprocess(noise(300, 300, "RGB", 0), media_proc_cfg)["grid_thws"].tolist()
    media_proc_cfg["in_patch_limit"] = 256
    assert kimi_k3_rs.preprocess(noise(300, 300, "RGB", 0), media_proc_cfg)["grid_thws"].tolist() != small
    # not kept: numpy values, mappings other than dict; validated (and right) each time
    numpy_mean = {**cfg("kimi_k3"), "image_mean": np.array([0.1, 0.2, 0.3])}
    assert MediaProcConfig.from_dict(numpy_mean).image_mean == (0.1, 0.2, 0.3)
    assert MediaProcConfig.from_dict(numpy_mean) is not MediaProcConfig.from_dict(numpy_mean)


def test_the_content_key_tells_apart_what_validation_tells_apart():
    """``_native.content_key``: equal keys for equal keys and values of equal types (a list
    and a tuple alike, as validation reads both as a sequence); different keys for ``True``,
    ``1`` and ``1.0``, for ``0.0`` and ``-0.0``, for another order of the keys, a nested
    change, ``"1"`` and ``1``; no key for what it does not read."""
    from kimi_k3_rs._native import content_key

    base = cfg("kimi_k3")
    key = content_key(base)
    assert isinstance(key, bytes) and content_key(copy.deepcopy(base)) == key
    assert content_key({**base, "image_mean": tuple(base["image_mean"])}) == key
    variants = [{**base, "patch_size": v} for v in (True, 14.0, "14", 15, 2**63 - 1)]
    variants += [{**base, "image_mean": m} for m in ([0.5, 0.5], [0.5, 0.5, -0.0], [[0.5, 0.5, 0.5]])]
    variants += [{**base, "image_mean": [0.0, 0.5, 0.5]}, {**base, "image_mean": [-0.0, 0.5, 0.5]}]
    variants.append(dict(reversed(list(base.items()))))
    variants.append({**base, "fixed_output_tokens": 0})
    bg = {**base["transparent_bg_config"], "chessboard_square_on_top_left": 1}
    variants.append({**base, "transparent_bg_config": bg})
    keys = [content_key(v) for v in variants]
    assert None not in keys and len(set(keys + [key])) == len(keys) + 1
    itself: dict[str, object] = {}
    itself["self"] = itself
    deep: object = 1
    for _ in range(9):
        deep = [deep]
    for unread in ({**base, "patch_size": np.int64(14)}, {**base, "image_std": np.array([0.5] * 3)},
                   {**base, "patch_size": 2**64}, {**base, 14: 14}, {**base, "x": "\ud800"},
                   {**base, "x": {1, 2}}, {**base, "x": deep}, itself):
        assert content_key(unread) is None
    shallow: object = 1
    for _ in range(7):
        shallow = [shallow]
    assert content_key({"x": shallow}) is not None
    for not_a_dict in (None, [base], list(base.items()), types.MappingProxyType(base), collections.OrderedDict(base)):
        assert content_key(not_a_dict) is None


def test_a_dict_changed_while_it_is_validated_leaves_no_other_config_under_its_key(monkeypatch):
    """Another thread may change a dict between its content key and its validation: the
    config kept under the key is still the one of the content the key names (validated from
    a copy made with the key, ``_native.content_snapshot``), through ``from_dict`` and
    ``call_setup`` alike."""
    from kimi_k3_rs._native import content_key, content_snapshot
    from kimi_k3_rs.config import MediaProcConfig, call_setup

    validate = MediaProcConfig._validate.__func__  # type: ignore[attr-defined]
    for n, setup in ((4321, MediaProcConfig.from_dict), (4322, lambda d: call_setup(d)[0])):
        media_proc_cfg = cfg("kimi_k3", in_patch_limit=n)  # content not kept yet

        def validate_while_changed(cls: Any, value: Any, d: dict[str, Any] = media_proc_cfg) -> Any:
            d["patch_size"] = 16  # the other thread's change
            return validate(cls, value)

        monkeypatch.setattr(MediaProcConfig, "_validate", classmethod(validate_while_changed))
        assert setup(media_proc_cfg).patch_size == 14
        monkeypatch.undo()
        assert setup(cfg("kimi_k3", in_patch_limit=n)).patch_size == 14
        assert setup(media_proc_cfg).patch_size == 16
    # the copy: what the key describes, its dicts and lists new
    media_proc_cfg = {**cfg("kimi_k3"), "image_mean": (0.5, [0.5], 0.5)}
    key, copied = content_snapshot(media_proc_cfg)
    assert key == content_key(media_proc_cfg) == content_key(copied) and copied == media_proc_cfg
    assert copied is not media_proc_cfg and copied["image_std"] is not media_proc_cfg["image_std"]
    assert copied["image_mean"][1] is not media_proc_cfg["image_mean"][1]
    bg = "transparent_bg_config"
    assert copied[bg] == media_proc_cfg[bg] and copied[bg] is not media_proc_cfg[bg]
    assert content_snapshot({**media_proc_cfg, "x": np.float64(1)}) is None


def test_options_kept_by_the_types_of_their_items_too():
    """``allowed_formats`` given as a tuple is kept with its items' types: a ``str`` subclass
    equal to a kept name is validated again (here its ``upper()`` names no format)."""

    class Odd(str):
        def upper(self) -> str:
            return "NOTAFORMAT"

    image = noise(20, 20, "RGB", 0)
    kimi_k3_rs.preprocess(image, cfg("kimi_k3"), allowed_formats=("PNG",))
    for _ in range(2):
        with pytest.raises(kimi_k3_rs.KimiK3Error, match="NOTAFORMAT"):
            kimi_k3_rs.preprocess(image, cfg("kimi_k3"), allowed_formats=(Odd("PNG"),))


@pytest.mark.parametrize("name,good,bad", [
    ("exif_transpose", True, 1), ("num_threads", 2, 2.0), ("max_image_pixels", 100, 100.0), ("max_image_pixels", 1, True),
])
def test_options_validated_once_still_refuse_a_value_equal_to_a_valid_one(name, good, bad):
    """``call_setup`` keeps a call's config and options by their values with their types."""
    from kimi_k3_rs.config import call_setup

    assert call_setup(cfg("kimi_k25"), **{name: good}) is call_setup(cfg("kimi_k25"), **{name: good})
    with pytest.raises((TypeError, ValueError), match=name):
        kimi_k3_rs.preprocess(noise(30, 30, "RGB", 0), cfg("kimi_k25"), **{name: bad})


def test_options_follow_the_thread_variable_between_calls(monkeypatch):
    from kimi_k3_rs.options import CallOptions

    monkeypatch.setenv(kimi_k3_rs.NUM_THREADS_ENV, "3")
    assert CallOptions.make().num_threads == 3
    monkeypatch.setenv(kimi_k3_rs.NUM_THREADS_ENV, "2")
    assert CallOptions.make().num_threads == 2
    monkeypatch.setenv(kimi_k3_rs.NUM_THREADS_ENV, "x")
    with pytest.raises(ValueError, match=kimi_k3_rs.NUM_THREADS_ENV):
        CallOptions.make()


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


# ---------------------------------------------------------------------------
# bad items, config values and options on every entry point: ValueError / TypeError
# ---------------------------------------------------------------------------

def _dds_unknown_pixel_format() -> bytes:
    """A 128-byte DDS header whose pixel format flags are 0 (Pillow: NotImplementedError)."""
    return (b"DDS " + struct.pack("<I", 124) + struct.pack("<6I", 0x1007, 4, 4, 0, 0, 0) + b"\0" * 44
            + struct.pack("<4I", 32, 0, 0, 0) + b"\0" * 36)


def _png_broken_chunk() -> bytes:
    """A 4x4 PNG whose IDAT continues in a chunk with a non-alphabetic type
    (Pillow's load: ``SyntaxError: broken PNG file``)."""
    raw = np.arange(48, dtype=np.uint8).reshape(4, 4, 3)
    z = zlib.compress(b"".join(b"\x00" + raw[y].tobytes() for y in range(4)))
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0))
            + png_chunk(b"IDAT", z[:5]) + png_chunk(b"\x00\x00\x00\x00", z[5:]) + png_chunk(b"IEND", b""))


BAD_ITEM_OBJECTS = {
    "object-array": np.array([[None, 1]], dtype=object),
    "structured-array": np.zeros((4, 4), dtype=[("a", "u1"), ("b", "u1")]),
    "complex-array": np.zeros((4, 4, 3), np.complex64),
    "float16-array": np.zeros((4, 4, 3), np.float16),
    "datetime-array": np.zeros((4, 4), "datetime64[s]"),
    "7-channels": np.zeros((4, 4, 7), np.uint8),
    "100000-channels": np.zeros((1, 1, 100000), np.uint8),
    "5d": np.zeros((1, 2, 2, 3, 1), np.uint8),
    "zero-size-3d": np.zeros((0, 0, 3), np.uint8),
    "zero-channels-2x2": np.zeros((2, 2, 0), np.uint8),
    "set": {1, 2},
    "frozenset": frozenset(),
    "bool": True,
    "complex": 1j,
    "range": range(3),
    "generator": (i for i in range(3)),
    "type": np.ndarray,
    "ellipsis": ...,
    "nested-list": [[np.zeros((4, 4), np.uint8)]],
    "empty-bytes": b"",
    "png-signature-only": b"\x89PNG\r\n\x1a\n",
    "junk-bytes": bytes(range(256)) * 4,
    "html": b"<html><body>not an image</body></html>",
    "json": b'{"image": [1, 2, 3]}',
    "bytearray-junk": bytearray(b"GIF89a\x01"),
    "memoryview-junk": memoryview(b"BM" + b"\xff" * 60),
    "empty-str": "",
    "missing-file": "/nonexistent/dir/image.png",
    "directory": ".",
    "nul-in-path": "image\0.png",
    "data-url-empty": "data:image/png;base64,",
    "data-url-no-comma": "data:image/png;base64",
    "data-url-junk": "data:image/png;base64," + base64.b64encode(b"not an image").decode(),
    "data-url-bad-base64": "data:image/png;base64,abc",
    "media-dict-none": {"type": "image", "image": None},
    "media-dict-nested": {"type": "image", "image": {"type": "image", "image": b""}},
    "closed-pil": None,  # built in the test (a closed image)
}


@pytest.mark.parametrize("name", sorted(BAD_ITEM_OBJECTS))
def test_bad_items_raise_value_or_type_error(name, tmp_path):
    item = BAD_ITEM_OBJECTS[name]
    if name == "closed-pil":
        item = Image.new("RGB", (4, 4))
        item.close()
    for images in ([item], [noise(9, 9, "RGB", 0), item]):
        with pytest.raises(OK_ERRORS) as info:
            kimi_k3_rs.preprocess(images, K3)
        assert str(info.value), "an error without a message"
        with pytest.raises(OK_ERRORS):
            kimi_k3_rs.KimiK3VisionProcessor(K25).preprocess(images)
        try:
            kimi_k3_rs.prepare_kimi_k3_encoder_inputs(images, K25).materialize()
        except OK_ERRORS:
            pass
        else:  # prepare is lazy, materialize must fail
            pytest.fail("prepare + materialize accepted a bad item")
    sanity_check()


DECODER_LEAKS = {
    "png-broken-chunk": _png_broken_chunk,  # SyntaxError from Pillow's load
    "dds-unknown-pixel-format": _dds_unknown_pixel_format,  # NotImplementedError from Image.open
}


@pytest.mark.parametrize("name", sorted(DECODER_LEAKS))
def test_decoder_errors_are_image_errors(name):
    data = DECODER_LEAKS[name]()
    with pytest.raises(kimi_k3_rs.ImageError):
        kimi_k3_rs.preprocess([data], K25)
    with pytest.raises(kimi_k3_rs.ImageError):
        kimi_k3_rs.prepare_kimi_k3_encoder_inputs([data], K25).materialize()


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_truncated_files(name, tmp_path):
    """Every prefix length class of every format: the reference's result, or a
    ValueError / TypeError (from bytes and from a file)."""
    data = SEEDS[name]
    media_proc_cfg = cfg("kimi_k3", in_patch_limit=4)
    cuts = sorted({0, 1, 4, 8, 12, 16, 24, 33, 64, len(data) // 3, len(data) // 2, len(data) - 40,
                   len(data) - 12, len(data) - 2, len(data) - 1})
    path = tmp_path / f"cut.{name}"
    for cut in (c for c in cuts if 0 <= c < len(data)):
        part = data[:cut]
        path.write_bytes(part)
        for item in (part, str(path)):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out = kimi_k3_rs.preprocess(item, media_proc_cfg)
            except OK_ERRORS:
                continue
            except Exception as exc:
                if from_pillow(exc) and not STRICT_DECODE:
                    continue  # lenient mode only (F3)
                raise
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                assert_output_matches(out, reference_preprocess(part, media_proc_cfg))
    sanity_check()


NAN, INF = float("nan"), float("inf")
#: (key path, value): extends tests/test_errors.py BAD_VALUES with the edges
BAD_CONFIG_VALUES = [
    ("patch_size", INF), ("patch_size", -INF), ("patch_size", NAN), ("patch_size", 2**31), ("patch_size", 2**64),
    ("patch_size", 14.0), ("patch_size", np.float64(14)), ("patch_size", [14]), ("patch_size", 1e300),
    ("merge_kernel_size", INF), ("merge_kernel_size", NAN), ("merge_kernel_size", 2**31), ("merge_kernel_size", None),
    ("in_patch_limit", INF), ("in_patch_limit", 2**53 + 1), ("in_patch_limit", 2**64), ("in_patch_limit", 16384.0),
    ("in_patch_limit", None),
    ("patch_limit_on_one_side", INF), ("patch_limit_on_one_side", NAN), ("patch_limit_on_one_side", 2**31),
    ("patch_limit_on_one_side", True), ("patch_limit_on_one_side", None),
    ("image_mean", [INF, 0.5, 0.5]), ("image_mean", [0.5, -INF, 0.5]), ("image_mean", np.zeros(4)),
    ("image_mean", np.zeros((1, 3))), ("image_mean", {"r": 0.5, "g": 0.5, "b": 0.5}), ("image_mean", {0.1, 0.2, 0.3}),
    ("image_mean", [0.5, None, 0.5]), ("image_mean", [1j, 0.5, 0.5]), ("image_mean", []), ("image_mean", b"abc"),
    ("image_std", [0.5, 0.5, -0.0]), ("image_std", [INF, 0.5, 0.5]), ("image_std", np.zeros(3)),
    ("image_std", [0.5, 0.5, NAN]), ("image_std", "abc"),
    ("fixed_output_tokens", NAN), ("fixed_output_tokens", INF), ("fixed_output_tokens", -1),
    ("fixed_output_tokens", 2**31), ("fixed_output_tokens", "5"), ("fixed_output_tokens", [5]),
    ("fixed_output_tokens", True),
    ("transparent_bg_fill_stage", None), ("transparent_bg_fill_stage", ""), ("transparent_bg_fill_stage", 0),
    ("transparent_bg_fill_stage", ["after_resize"]),
    ("transparent_bg_config", 0), ("transparent_bg_config", "white"), ("transparent_bg_config", [("pattern", "white")]),
    ("transparent_bg_config.pattern", None), ("transparent_bg_config.pattern", 1),
    ("transparent_bg_config.pattern", "checkerboard"),
    ("transparent_bg_config.chessboard_square_size", 2**31), ("transparent_bg_config.chessboard_square_size", INF),
    ("transparent_bg_config.chessboard_square_size", 8.5), ("transparent_bg_config.chessboard_square_size", None),
    ("transparent_bg_config.chessboard_white_value", NAN), ("transparent_bg_config.chessboard_white_value", 255.5),
    ("transparent_bg_config.chessboard_white_value", 1e300), ("transparent_bg_config.chessboard_gray_value", INF),
    ("transparent_bg_config.chessboard_gray_value", None),
    ("transparent_bg_config.chessboard_square_on_top_left", "yes"),
    ("transparent_bg_config.chessboard_square_on_top_left", 2),
    ("transparent_bg_config.chessboard_square_on_top_left", None),
]


@pytest.mark.parametrize("key,value", BAD_CONFIG_VALUES, ids=[f"{k}={v!r}" for k, v in BAD_CONFIG_VALUES])
def test_bad_config_values_on_every_entry_point(key, value):
    """A ValueError / TypeError that names the key (the pattern check names the
    pattern, as the reference does), from every function that takes a config."""
    media_proc_cfg = with_path(K3, key, value)
    name = key.split(".")[-1]
    calls: List[Callable[[], Any]] = [
        lambda: kimi_k3_rs.preprocess([noise(30, 30, "RGBA", 0)], media_proc_cfg),
        lambda: kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg),
        lambda: kimi_k3_rs.prepare_kimi_k3_encoder_inputs([noise(30, 30, "RGBA", 0)], media_proc_cfg),
        lambda: kimi_k3_rs.count_image_tokens([[30, 30]], media_proc_cfg),
        lambda: kimi_k3_rs.MediaProcConfig.from_dict(media_proc_cfg),
    ]
    for call in calls:
        with pytest.raises(OK_ERRORS) as info:
            call()
        msg = str(info.value)
        assert name in msg or (name == "pattern" and "pattern" in msg.lower()) or (
            key == "transparent_bg_config" and "transparent_bg_config" in msg
        ), msg
    sanity_check()


#: option -> bad values (every entry point that takes options)
BAD_OPTIONS = {
    "num_threads": [0, -1, 1025, 2**64, 2.0, "2", True, [2]],
    "dtype": ["float64", "float", None, np.float32, 1, ""],
    "pillow_compat": [13, "14", "12 ", "12.3", "13.0", None, "", b"13"],
    "max_image_pixels": [0, -5, 1.5, "100", True, [100], float("inf")],
    "exif_transpose": [1, 0, "yes", None],
}


@pytest.mark.parametrize("option", sorted(BAD_OPTIONS))
def test_bad_options_on_every_entry_point(option):
    img = noise_array(20, 20, "RGB", 0)
    for value in BAD_OPTIONS[option]:
        kw = {option: value}
        calls = [lambda: kimi_k3_rs.preprocess(img, K25, **kw), lambda: kimi_k3_rs.KimiK3VisionProcessor(K25, **kw)]
        if value is not None:  # None means "the processor's own" in prepare
            calls.append(lambda: kimi_k3_rs.prepare_kimi_k3_encoder_inputs([img], K25, **kw))
        for call in calls:
            with pytest.raises(OK_ERRORS, match=option.split("_")[0]):
                call()
    sanity_check()


@pytest.mark.parametrize("value", ["abc", "0", "-1", "1025", "99999999999999999999", "2.5", "²"])
def test_bad_num_threads_environment(value, monkeypatch):
    monkeypatch.setenv("KIMI_K3_RS_NUM_THREADS", value)
    with pytest.raises(ValueError, match="KIMI_K3_RS_NUM_THREADS|num_threads"):
        kimi_k3_rs.preprocess(noise_array(20, 20, "RGB", 0), K25)
    monkeypatch.delenv("KIMI_K3_RS_NUM_THREADS")
    sanity_check()


@pytest.mark.parametrize(
    "out",
    [
        np.zeros((4, 3, 14, 14), np.float64),
        np.zeros((4, 3, 14, 14), np.float32)[::-1],
        np.zeros((4, 3, 14, 14), np.float32, order="F"),
        np.zeros((5, 3, 14, 14), np.float32),
        np.zeros((4 * 3 * 14 * 14,), np.float32),
        np.zeros((4, 3, 14, 14), np.uint16),
        "out",
    ],
    ids=["float64", "reversed", "fortran", "wrong-rows", "flat", "uint16-for-float32", "str"],
)
def test_bad_out_arrays(out):
    """``out`` mistakes are errors, the array is left as it was where it was refused."""
    img = noise_array(28, 28, "RGB", 0)  # 2 x 2 patches under K2.5
    before = out.copy() if isinstance(out, np.ndarray) else None
    with pytest.raises(OK_ERRORS, match="out"):
        kimi_k3_rs.preprocess(img, K25, out=out)
    if before is not None:
        assert np.array_equal(out, before)
    readonly = np.zeros((4, 3, 14, 14), np.float32)
    readonly.flags.writeable = False
    with pytest.raises(OK_ERRORS, match="out|writeable"):
        kimi_k3_rs.preprocess(img, K25, out=readonly)
    assert not readonly.any()
    sanity_check()


def test_out_of_the_wrong_rank_is_named_with_its_shape():
    img = noise_array(28, 28, "RGB", 0)  # 2 x 2 patches under K2.5
    want = r"out must be a 4-D float32 numpy array of shape \[4, 3, 14, 14\], got shape \(2352,\)"
    with pytest.raises(kimi_k3_rs.ImageError, match=want):
        kimi_k3_rs.preprocess(img, K25, out=np.zeros(4 * 3 * 14 * 14, np.float32))


# ---------------------------------------------------------------------------
# unreadable inputs name their batch index; the library keeps working
# ---------------------------------------------------------------------------


def undecodable(tmp_path):
    good_png = encode(noise(60, 40, "RGB", 0), "PNG")
    good_jpeg = encode(noise(200, 150, "RGB", 1), "JPEG")
    return {
        "garbage bytes": b"definitely not an image",
        "empty bytes": b"",
        "truncated PNG": good_png[: len(good_png) // 2],
        "PNG signature only": good_png[:8],
        "truncated JPEG": good_jpeg[: len(good_jpeg) // 2],
        "missing file": str(tmp_path / "missing.png"),
        "missing Path": tmp_path / "missing.jpg",
        "directory": str(tmp_path),
        "data URL of garbage": "data:image/png;base64," + base64.b64encode(b"garbage!").decode(),
        "garbage media dict": {"type": "image", "image": b"\x89PNG\r\n\x1a\n" + b"\0" * 30},
    }


def test_unreadable_inputs_name_their_index(tmp_path):
    media_proc_cfg = cfg("kimi_k3", in_patch_limit=600)
    good = [noise(300, 200, "RGB", 5), encode(alpha_pattern_rgba(120, 90, 6), "PNG"), noise_array(50, 40, "L", 7)]
    ref = reference_preprocess(good, media_proc_cfg)
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg)
    for what, bad in undecodable(tmp_path).items():
        for index in (0, 1, 3):
            batch = good[:index] + [bad] + good[index:]
            for call in (lambda: kimi_k3_rs.preprocess(batch, media_proc_cfg),
                         lambda: processor.preprocess([{"type": "image", "image": b} if not isinstance(b, dict) else b
                                                       for b in batch])):
                with pytest.raises(kimi_k3_rs.ImageError) as info:
                    call()
                msg = str(info.value)
                assert msg.startswith(f"image {index}: "), (what, msg)
                assert "\n" not in msg and not isinstance(info.value, kimi_k3_rs.ImageTooLargeError), what
        # the next call works
        assert_output_matches(kimi_k3_rs.preprocess(good, media_proc_cfg), ref)
        assert_output_matches(processor.preprocess(good), ref)


def test_a_decode_error_names_its_batch_index():
    """A native decode that fails (a JPEG cut halfway) names its index in a batch of
    natively decoded files, on two threads."""
    files = native_files()
    bad = files["jpeg-420"][: len(files["jpeg-420"]) // 2]
    with pytest.raises(kimi_k3_rs.ImageError, match=r"^image 2: cannot decode JPEG"):
        kimi_k3_rs.preprocess([files["png-rgb"], files["jpeg-L"], bad], K25, num_threads=2)


def test_truncated_file_fails_cleanly_in_materialize():
    """A truncated file passes prepare (header only) and fails in materialize with ImageError."""
    png = encode(noise(200, 150, "RGB", 1), "PNG")
    truncated = png[: len(png) // 2]
    media_proc_cfg = kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
    enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([png, truncated], media_proc_cfg)
    assert enc.grid_thws.tolist() == [[1, 12, 16], [1, 12, 16]]  # 200x150 padded to 224x168
    with pytest.raises(kimi_k3_rs.ImageError, match="truncated"):
        enc.materialize([1])
    ref = reference_preprocess(png, media_proc_cfg)
    assert_bit_equal(enc.materialize([0])[0], ref[0])


def test_materialize_error_names_the_prepared_index():
    png = encode(noise(200, 150, "RGB", 1), "PNG")
    enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([png, png, png[:300]], kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)
    for indices in ([2], [0, 2], [2, 1]):
        with pytest.raises(kimi_k3_rs.ImageError, match=r"^image 2: "):
            enc.materialize(indices)


@pytest.mark.parametrize("url", ["data:image/png;base64,AAAAA", "data:,A", "data:no-comma"])
def test_malformed_data_url_is_an_image_error_naming_its_index(url):
    media_proc_cfg = kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
    with pytest.raises(kimi_k3_rs.ImageError, match=r"^image 1: "):
        kimi_k3_rs.preprocess([noise(30, 30, "RGB", 0), url], media_proc_cfg)


def _ppm() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 6), (10, 20, 30)).save(buffer, "PPM")
    return buffer.getvalue()


@pytest.mark.parametrize("stage", ["open", "load"])
@pytest.mark.parametrize("kind", [AttributeError, RuntimeError, ZeroDivisionError, OSError])
def test_any_plugin_fault_is_an_image_error_naming_the_image(stage, kind, monkeypatch):
    """Issue #13 (6): whatever a Pillow plugin raises while it opens or decodes an input
    (a SPIDER file gave AttributeError) is an ImageError naming the batch index, the
    original chained."""
    from PIL import PpmImagePlugin

    fault = kind("'SpiderImageFile' object has no attribute 'stkoffset'")

    def broken(self, *args):
        raise fault

    target = PpmImagePlugin.PpmImageFile
    monkeypatch.setattr(target, "_open" if stage == "open" else "load", broken)
    good = np.zeros((4, 4, 3), np.uint8)
    with pytest.raises(kimi_k3_rs.ImageError, match=r"^image 1: cannot read or decode it: ") as info:
        kimi_k3_rs.preprocess([good, _ppm()], kimi_k3_rs.kimi_k25_media_proc_cfg())
    cause = info.value.__cause__
    while cause is not None and cause is not fault:
        cause = cause.__cause__
    assert cause is fault


def test_memory_error_while_decoding_names_the_image(monkeypatch):
    from PIL import PpmImagePlugin

    def no_memory(self, *args):
        raise MemoryError()

    monkeypatch.setattr(PpmImagePlugin.PpmImageFile, "load", no_memory)
    with pytest.raises(MemoryError, match=r"^image 0: out of memory$"):
        kimi_k3_rs.preprocess(_ppm(), kimi_k3_rs.kimi_k25_media_proc_cfg())


@pytest.mark.parametrize(
    "mean",
    [0.5, np.array(0.5), np.float32(0.5), [0.5], (0.5,), np.array([0.5]), memoryview(np.array([0.5, 0.5, 0.5]))],
)
def test_one_mean_or_std_is_broadcast_to_every_channel(mean):
    """Issue #13 (10): a scalar, 0-d or one-element ``image_mean`` / ``image_std`` is
    broadcast to the three channels, as the checkpoint's ``np.array(mean)`` arithmetic
    broadcasts it; the values equal the three-number config's."""
    image = np.random.default_rng(5).integers(0, 256, (30, 44, 3), dtype=np.uint8)
    base = kimi_k3_rs.kimi_k25_media_proc_cfg()
    want = kimi_k3_rs.preprocess(image, {**base, "image_mean": [0.5] * 3, "image_std": [0.5] * 3})
    got = kimi_k3_rs.preprocess(image, {**base, "image_mean": mean, "image_std": mean})
    assert got["pixel_values"].tobytes() == want["pixel_values"].tobytes()


@pytest.mark.parametrize("key", ["image_mean", "image_std", "fixed_output_tokens"])
@pytest.mark.parametrize("value", [10**400, [10**400] * 3, np.array([0.5, 0.5]), "0.5", [0.5, 0.5]])
def test_overflowing_or_malformed_config_values_are_config_errors(key, value):
    """Issue #13 (10): no OverflowError or numpy error escapes: a ConfigError naming the
    key and the (abbreviated) value."""
    if key == "fixed_output_tokens" and not isinstance(value, int):
        value = 10**400 if isinstance(value, str) else value
    cfg = {**kimi_k3_rs.kimi_k25_media_proc_cfg(), key: value}
    with pytest.raises(kimi_k3_rs.ConfigError, match=rf'^media_proc_cfg\["{key}"\] must be ') as info:
        kimi_k3_rs.preprocess(np.zeros((8, 8, 3), np.uint8), cfg)
    assert len(str(info.value)) <= 1024


PER_IMAGE_FAULTS = {
    "zero-size PIL RGB": lambda: Image.new("RGB", (0, 5)),
    "zero-size PIL L": lambda: Image.new("L", (3, 0)),
    "zero-size PIL P": lambda: Image.new("P", (0, 3)),
    "embedded null path": lambda: "a\0b.png",
    "missing path": lambda: "/nonexistent/kimi.png",
    "empty bytes": lambda: b"",
    "not an image": lambda: b"hello, world, this is text",
    "bad data URL": lambda: "data:image/png;base64,@@@",
    "1-D array": lambda: np.zeros(4, np.uint8),
    "truncated JPEG": lambda: _truncated_jpeg(),
}


def _truncated_jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), (9, 99, 199)).save(buffer, "JPEG")
    return buffer.getvalue()[:-200]


@pytest.mark.parametrize("name", sorted(PER_IMAGE_FAULTS))
def test_every_per_image_error_names_its_index(name):
    """Issue #13 (11): every per-image error names its batch index, on preprocess and on
    the deferred flow (sizing or materialize)."""
    good = np.zeros((4, 4, 3), np.uint8)
    cfg = kimi_k3_rs.kimi_k25_media_proc_cfg()
    batch = [good, good, PER_IMAGE_FAULTS[name]()]
    with pytest.raises(kimi_k3_rs.ImageError, match=r"^image 2: "):
        kimi_k3_rs.preprocess(batch, cfg, num_threads=2)
    with pytest.raises(kimi_k3_rs.ImageError, match=r"^image 2: "):
        kimi_k3_rs.prepare_kimi_k3_encoder_inputs(batch, cfg).materialize()


# ---------------------------------------------------------------------------
# Issue #21 (8): any fault met while input k is read names k
# ---------------------------------------------------------------------------


class _FaultyTensor:
    """The ``torch.Tensor`` surface the library reads (a uint8 HWC tensor), whose
    conversion to numpy raises ``fault``: from ``numpy()`` itself, or from the
    ``__array__`` of what ``numpy()`` returns."""

    __module__ = "torch"
    dtype = "torch.uint8"
    shape = (6, 5, 3)

    def __init__(self, fault, where):
        self.fault, self.where = fault, where

    def numpy(self):
        if self.where == "numpy":
            raise self.fault
        fault = self.fault

        class Faulty:
            def __array__(self, *args, **kwargs):
                raise fault

        return Faulty()


def _patched(monkeypatch, target, name, fault):
    """Make ``target.name`` raise ``fault`` (undone by ``monkeypatch``)."""

    def broken(self, *args, **kwargs):
        raise fault

    monkeypatch.setattr(target, name, broken)


def _lazy_pil(fault, tmp_path, monkeypatch):
    from PIL import PpmImagePlugin

    _patched(monkeypatch, PpmImagePlugin.PpmImageFile, "load", fault)
    return Image.open(io.BytesIO(_ppm()))


def _exif_fault(make):
    """An input made by ``make(tmp_path)`` whose EXIF cannot be read (Pillow's
    ``getexif`` raises the fault; read under ``exif_transpose``)."""

    def faulty(fault, tmp_path, monkeypatch):
        _patched(monkeypatch, Image.Image, "getexif", fault)
        return make(tmp_path)

    return faulty


def _ppm_file(tmp_path):
    path = tmp_path / "faulty.ppm"
    path.write_bytes(_ppm())
    return str(path)


#: Each carrier of an input, with a fault met while it is read:
#: ``name -> (make(fault, tmp_path, monkeypatch) -> the input, exif_transpose)``.
#: Encoded inputs are PPM files (Pillow's route, where ``exif_transpose`` reads the
#: EXIF with Pillow). numpy arrays have no Python step that reads them (the core
#: reads them and names its own errors); they are the good inputs beside.
FAULTY_INPUTS = {
    "PIL lazy (load raises)": (_lazy_pil, False),
    "PIL loaded (getexif raises)": (_exif_fault(lambda tmp_path: noise(7, 5, "RGB", 0)), True),
    "bytes": (_exif_fault(lambda tmp_path: _ppm()), True),
    "path": (_exif_fault(_ppm_file), True),
    "data URL": (_exif_fault(lambda tmp_path: "data:image/x-portable-pixmap;base64,"
                             + base64.b64encode(_ppm()).decode()), True),
    "media dict": (_exif_fault(lambda tmp_path: {"type": "image", "image": _ppm()}), True),
    "tensor (numpy raises)": (lambda fault, tmp_path, monkeypatch: _FaultyTensor(fault, "numpy"), False),
    "tensor (__array__ raises)": (lambda fault, tmp_path, monkeypatch: _FaultyTensor(fault, "__array__"), False),
}


def _faulty_entries(exif_transpose):
    """Every entry that reads a batch, by name: preprocess on one and two threads, the
    processor, and both deferred flows through materialize."""
    k25 = kimi_k3_rs.kimi_k25_media_proc_cfg()
    processor = kimi_k3_rs.KimiK3VisionProcessor(k25, exif_transpose=exif_transpose)
    return {
        "preprocess": lambda batch: kimi_k3_rs.preprocess(batch, k25, exif_transpose=exif_transpose),
        "preprocess 2 threads": lambda batch: kimi_k3_rs.preprocess(batch, k25, exif_transpose=exif_transpose,
                                                                    num_threads=2),
        "processor": lambda batch: processor.preprocess([b if isinstance(b, dict) else {"type": "image", "image": b}
                                                         for b in batch]),
        "k3 deferred": lambda batch: kimi_k3_rs.prepare_kimi_k3_encoder_inputs(
            batch, k25, exif_transpose=exif_transpose).materialize(),
        "k25 deferred": lambda batch: kimi_k3_rs.prepare_kimi_k25_encoder_inputs(
            batch, k25, exif_transpose=exif_transpose).materialize(),
    }


@pytest.mark.parametrize("kind", [ValueError, TypeError, AttributeError, ZeroDivisionError])
@pytest.mark.parametrize("carrier", sorted(FAULTY_INPUTS))
def test_any_fault_reading_an_input_names_it(carrier, kind, tmp_path, monkeypatch):
    """Whatever reading input 2 raises (Pillow, a tensor, an ``__array__``, the
    caller's object) is an ImageError ``image 2: cannot read or decode it: {kind}: ...``
    with the fault chained, on every entry; the library then works on."""
    fault = kind("the fault of input 2")
    make, exif_transpose = FAULTY_INPUTS[carrier]
    good = [np.zeros((4, 4, 3), np.uint8), noise_array(9, 7, "L", 1)]  # no EXIF read
    for name, entry in _faulty_entries(exif_transpose).items():
        with pytest.raises(ImageError, match=rf"^image 2: cannot read or decode it: {kind.__name__}: ") as info:
            entry([*good, make(fault, tmp_path, monkeypatch)])
        cause = info.value.__cause__
        while cause is not None and cause is not fault:
            cause = cause.__cause__
        assert cause is fault, name
        monkeypatch.undo()
    sanity_check()


def test_closed_pil_image_names_its_index():
    """The reported case: a closed PIL image at position 2 of a batch (Pillow's
    ``ValueError: Operation on closed image`` escaped without the index), in every
    entry, in a video chunk's frames too."""
    good = [np.zeros((4, 4, 3), np.uint8), noise(9, 7, "RGB", 1)]
    for mode in ("RGB", "RGBA", "L", "LA", "P", "CMYK", "I;16"):
        closed = Image.new(mode, (6, 5))
        closed.close()
        for exif_transpose in (False, True):
            for entry in _faulty_entries(exif_transpose).values():
                with pytest.raises(ImageError, match=exact("image 2: cannot read or decode it: ValueError: "
                                                           "Operation on closed image")):
                    entry([*good, closed])
    closed = Image.new("RGB", (6, 5))
    closed.close()
    chunk = {"type": "video_chunk", "video_chunk": [noise(9, 7, "RGB", 2), closed]}
    with pytest.raises(ImageError, match=r"^image 1: cannot read or decode it: ValueError: Operation on closed image"):
        kimi_k3_rs.preprocess([good[0], chunk], kimi_k3_rs.kimi_k25_media_proc_cfg())
    sanity_check()


def test_verbatim_texts_stay_as_they_are_among_other_images():
    """The texts of sglang and the checkpoint, built in Python or in the core, keep their
    class and text (no index) in a batch, though any other fault of the same class
    names its image."""
    good = np.zeros((4, 4, 3), np.uint8)
    k25 = kimi_k3_rs.kimi_k25_media_proc_cfg()
    for item, cls, text in [
        (3.5, ValueError, "Unsupported data type: <class 'float'>"),
        ({"type": "image"}, ValueError, "Unsupported Kimi-K3 encoder media item: {'type': 'image'}"),
        (_TensorOfDtype("torch.float32"), ValueError, "Kimi-K3 preprocessing expects raw uint8 pixels, got torch.float32"),
        # the core's texts (its sizing runs under the deferred flow's naming)
        (np.zeros((4, 4, 5), np.uint8), ValueError, "Unsupported Kimi-K3 image channel count: 5"),
        (np.zeros((4, 4, 3), np.float32), ValueError, "Kimi-K3 preprocessing expects raw uint8 pixels, got float32"),
    ]:
        batch = [good, good, item]
        for call in (kimi_k3_rs.preprocess, kimi_k3_rs.prepare_kimi_k3_encoder_inputs):
            with pytest.raises(cls, match=exact(text)) as info:
                result = call(batch, k25)
                if not isinstance(result, dict):  # the deferred flow: its pixels
                    result.materialize()
            assert type(info.value) is cls


class _TensorOfDtype:
    __module__ = "torch"
    shape = (4, 4, 3)

    def __init__(self, dtype):
        self.dtype = dtype

    def numpy(self):
        raise AssertionError("not read: its dtype is refused first")


# -----------------------------------------------------------------------------
# From the former test_messages.py:
#
# One rule, one message: the public API and ``_native`` give the same class and text.
#
# Every row feeds one bad value to the public API and to the compiled module directly
# and asserts the exception class and the whole message. The texts are the Rust error
# enum's (``src/error.rs``), or sglang's / the checkpoint's verbatim where they have
# one. The same texts are asserted for the Rust API in ``tests/messages.rs``. The
# second half checks the message rule: every caller value abbreviated, no message over
# 1,024 characters or on more than one line.
# -----------------------------------------------------------------------------


IMAGE = np.zeros((28, 28, 3), np.uint8)
NATIVE_CFG = kimi_k3_rs.MediaProcConfig.from_dict(K25).native
NATIVE_OPTS = _native.Options("13", "float32", 1)


def native_config(**changes):
    """``_native.MediaProcConfig`` of K2.5 with ``changes``."""
    values = {key: K25[key] for key in ("patch_size", "merge_kernel_size", "in_patch_limit",
                                         "patch_limit_on_one_side", "image_mean", "image_std")}
    keywords = {"fixed_output_tokens": None, "transparent_bg_config": None,
                "transparent_bg_fill_stage": "before_resize"}
    for key, value in changes.items():
        (keywords if key in keywords else values)[key] = value
    return _native.MediaProcConfig(*values.values(), **keywords)


def public_config(**changes):
    return kimi_k3_rs.preprocess(IMAGE, {**K25, **changes})


def raises(call, cls, text):
    """``call()`` raises exactly ``cls`` (not a subclass) with exactly ``text``."""
    with pytest.raises(BaseException) as info:
        call()
    assert type(info.value) is cls, (type(info.value), info.value)
    assert str(info.value) == text


CONFIG_ROWS = [
    ({"patch_size": 0}, kimi_k3_rs.ConfigError,
     'media_proc_cfg["patch_size"] must be an integer in 1..=2**31-1, got 0'),
    ({"patch_size": -3}, kimi_k3_rs.ConfigError,
     'media_proc_cfg["patch_size"] must be an integer in 1..=2**31-1, got -3'),
    ({"patch_size": 2**80}, kimi_k3_rs.ConfigError,
     f'media_proc_cfg["patch_size"] must be an integer in 1..=2**31-1, got {2**80}'),
    ({"patch_size": 14.5}, kimi_k3_rs.ConfigError,
     'media_proc_cfg["patch_size"] must be an integer in 1..=2**31-1, got 14.5'),
    ({"merge_kernel_size": "2"}, kimi_k3_rs.ConfigError,
     "media_proc_cfg[\"merge_kernel_size\"] must be an integer in 1..=2**31-1, got '2'"),
    ({"in_patch_limit": 0}, kimi_k3_rs.ConfigError,
     'media_proc_cfg["in_patch_limit"] must be an integer in 1..=2**53, got 0'),
    ({"patch_limit_on_one_side": True}, kimi_k3_rs.ConfigError,
     'media_proc_cfg["patch_limit_on_one_side"] must be an integer in 1..=2**31-1, got True'),
    ({"image_std": (0.5, 0, 0.5)}, kimi_k3_rs.ConfigError,
     'media_proc_cfg["image_std"] must be three finite non-zero numbers (or one, for every channel), got (0.5, 0, 0.5)'),
    ({"image_mean": [float("nan"), 0.5, 0.5]}, kimi_k3_rs.ConfigError,
     'media_proc_cfg["image_mean"] must be three finite numbers (or one, for every channel), got [nan, 0.5, 0.5]'),
    ({"image_mean": {0.1, 0.2, 0.3}}, kimi_k3_rs.ConfigError,
     'media_proc_cfg["image_mean"] must be three finite numbers (or one, for every channel), got {0.1, 0.2, 0.3}'),
    ({"fixed_output_tokens": -1}, kimi_k3_rs.ConfigError,
     'media_proc_cfg["fixed_output_tokens"] must be None or a number in 0..=2**31-1, got -1'),
    ({"transparent_bg_config": {"pattern": "plaid"}}, kimi_k3_rs.ConfigError,
     "Invalid background pattern: plaid"),
    ({"transparent_bg_config": {"chessboard_square_size": 0}}, kimi_k3_rs.ConfigError,
     'media_proc_cfg["transparent_bg_config.chessboard_square_size"] must be an integer in 1..=2**31-1, got 0'),
    ({"transparent_bg_config": {"chessboard_white_value": 256}}, kimi_k3_rs.ConfigError,
     'media_proc_cfg["transparent_bg_config.chessboard_white_value"] must be an integer in 0..=255, got 256'),
    ({"transparent_bg_config": {"colour": 1}}, TypeError,
     "TransparentBgConfig.__init__() got an unexpected keyword argument 'colour'"),
    ({"transparent_bg_config": 5}, TypeError,
     'media_proc_cfg["transparent_bg_config"] must be a dict or None, got 5'),
    ({"transparent_bg_fill_stage": "after"}, kimi_k3_rs.ConfigError,
     "media_proc_cfg[\"transparent_bg_fill_stage\"] must be 'before_resize' or 'after_resize', got 'after'"),
]


@pytest.mark.parametrize("changes,cls,text", CONFIG_ROWS, ids=[str(r[0]) for r in CONFIG_ROWS])
def test_config_values(changes, cls, text):
    raises(lambda: public_config(**changes), cls, text)
    raises(lambda: kimi_k3_rs.KimiK3VisionProcessor({**K25, **changes}), cls, text)
    raises(lambda: native_config(**changes), cls, text)


OPTION_ROWS = [
    ({"num_threads": 0}, kimi_k3_rs.KimiK3Error, "num_threads must be an integer in 1..=1024, got 0"),
    ({"num_threads": 5000}, kimi_k3_rs.KimiK3Error, "num_threads must be an integer in 1..=1024, got 5000"),
    ({"num_threads": 1.5}, TypeError, "num_threads must be an int or None, got 1.5"),
    ({"num_threads": True}, TypeError, "num_threads must be an int or None, got True"),
    ({"dtype": "int8"}, kimi_k3_rs.KimiK3Error, "dtype must be 'float32', 'bfloat16' or 'float16', got 'int8'"),
    ({"dtype": np.float32}, kimi_k3_rs.KimiK3Error,
     "dtype must be 'float32', 'bfloat16' or 'float16', got <class 'numpy.float32'>"),
    ({"pillow_compat": "14"}, kimi_k3_rs.KimiK3Error, "pillow_compat must be 'auto', '12', '12.2' or '13', got '14'"),
    ({"pillow_compat": 13}, kimi_k3_rs.KimiK3Error, "pillow_compat must be 'auto', '12', '12.2' or '13', got 13"),
]


@pytest.mark.parametrize("option,cls,text", OPTION_ROWS, ids=[str(r[0]) for r in OPTION_ROWS])
def test_options(option, cls, text):
    raises(lambda: kimi_k3_rs.preprocess(IMAGE, K25, **option), cls, text)
    raises(lambda: kimi_k3_rs.KimiK3VisionProcessor(K25, **option), cls, text)
    raises(lambda: kimi_k3_rs.prepare_kimi_k3_encoder_inputs([IMAGE], K25, **option), cls, text)
    native = {"pillow_compat": "13", "dtype": "float32", "num_threads": 1, **option}
    raises(lambda: _native.Options(native["pillow_compat"], native["dtype"], native["num_threads"]), cls, text)


class FakeTensor:
    """A duck-typed torch tensor (the package recognises torch by module name)."""

    def __init__(self, array):
        self._array = array
        self.dtype = "torch.uint8"
        self.shape = array.shape

    def numpy(self):
        return self._array


FakeTensor.__module__ = "torch"

ARRAY_ROWS = [
    (np.zeros((4, 4, 5), np.uint8), ValueError, "Unsupported Kimi-K3 image channel count: 5"),
    (np.zeros((4, 4, 3), np.float32), ValueError, "Kimi-K3 preprocessing expects raw uint8 pixels, got float32"),
    (np.zeros((2, 2, 2, 2), np.uint8), kimi_k3_rs.ImageError,
     "image 0: expected an HxW or HxWxC uint8 array, got shape (2, 2, 2, 2)"),
    (np.zeros((0, 4, 3), np.uint8), kimi_k3_rs.ImageError,
     "image 0: image width and height must be positive, got 4x0"),
]


@pytest.mark.parametrize("array,cls,text", ARRAY_ROWS, ids=[r[2][:40] for r in ARRAY_ROWS])
def test_arrays(array, cls, text):
    raises(lambda: kimi_k3_rs.preprocess([array], K25), cls, text)
    raises(lambda: _native.preprocess([_native.BatchItem.image(array, 0)], NATIVE_CFG, NATIVE_OPTS), cls, text)
    # sizing alone (the deferred flow) checks arrays with the same words
    lone = text.removeprefix("image 0: ")
    raises(lambda: _native.image_size(array), cls, lone)
    raises(lambda: kimi_k3_rs.prepare_kimi_k3_encoder_inputs([array], K25), cls, text)


def test_tensor_channels_match_the_array_rule():
    """A torch HWC tensor is checked in Python (torch's layout rule); same words as the core."""
    text = "Unsupported Kimi-K3 image channel count: 6"
    raises(lambda: kimi_k3_rs.preprocess([FakeTensor(np.zeros((5, 5, 6), np.uint8))], K25), ValueError, text)
    raises(lambda: _native.preprocess([_native.BatchItem.image(np.zeros((5, 5, 6), np.uint8), 0)], NATIVE_CFG, NATIVE_OPTS), ValueError, text)


def test_batch_items_name_their_errors():
    """A native batch item carries the number its errors give it, a chunk's frames included."""
    bad = np.zeros((2, 2, 2, 2), np.uint8)
    items = [_native.BatchItem.image(IMAGE, 0), _native.BatchItem.video_chunk([IMAGE, bad], 7)]
    raises(lambda: _native.preprocess(items, NATIVE_CFG, NATIVE_OPTS), kimi_k3_rs.ImageError,
           "image 7: expected an HxW or HxWxC uint8 array, got shape (2, 2, 2, 2)")
    raises(lambda: _native.BatchItem.video_chunk([], 3), kimi_k3_rs.ImageError,
           "image 3: a video_chunk must have at least 1 frame, got 0")
    raises(lambda: _native.preprocess([IMAGE], NATIVE_CFG, NATIVE_OPTS), TypeError,
           "'ndarray' object is not an instance of 'BatchItem'")
    image, chunk = _native.BatchItem.image(IMAGE, 5, (4, 28, 28, 0, 0)), items[1]
    assert (image.index, chunk.index) == (5, 7)
    assert image.pixels[0] is IMAGE and [p is f for p, f in zip(chunk.pixels, [IMAGE, bad])] == [True, True]


OUT_ROWS = [
    (np.zeros((4, 3, 14, 14), np.float64), kimi_k3_rs.ImageError,
     "out has dtype float64, expected float32 for dtype='float32'"),
    (np.zeros((2352,), np.float32), kimi_k3_rs.ImageError,
     "out must be a 4-D float32 numpy array of shape [4, 3, 14, 14], got shape (2352,)"),
    (np.zeros((2, 3, 14, 14), np.float32), kimi_k3_rs.ImageError,
     "out has shape [2, 3, 14, 14], expected [4, 3, 14, 14]"),
    (np.zeros((4, 3, 14, 14), np.float32)[:, :, :, ::-1], kimi_k3_rs.ImageError,
     "out must be a C-contiguous, aligned, writeable array"),
    (np.zeros((4, 3, 14, 14), ">f4"), kimi_k3_rs.ImageError,
     "out must have the native byte order, got dtype '>f4'"),
    ([0.0] * 2352, TypeError, "out must be a numpy array, got list"),
]


@pytest.mark.parametrize("out,cls,text", OUT_ROWS, ids=[r[2][:40] for r in OUT_ROWS])
def test_out(out, cls, text):
    raises(lambda: kimi_k3_rs.preprocess(IMAGE, K25, out=out), cls, text)
    raises(lambda: _native.preprocess([_native.BatchItem.image(IMAGE, 0)], NATIVE_CFG, NATIVE_OPTS, out=out), cls, text)


@pytest.mark.parametrize("size,text", [
    ((0, 5), "image width and height must be positive, got 0x5"),
    ((-1, 5), "image width and height must be positive, got -1x5"),
    ((2**53 + 1, 5), f"image width and height must be at most 2**53 pixels, got {2**53 + 1}x5"),
])
def test_sizes(size, text):
    raises(lambda: kimi_k3_rs.navit_resize_config(*size, 14, 2, 16384, 512), kimi_k3_rs.ImageError, text)
    raises(lambda: _native.navit_resize_config(*size, NATIVE_CFG), kimi_k3_rs.ImageError, text)
    raises(lambda: kimi_k3_rs.count_image_tokens([size], K25), kimi_k3_rs.ImageError, text)


def test_sizes_shape_and_side_limit():
    text = "sizes must have shape [n, 2] (width, height), got (3,)"
    raises(lambda: kimi_k3_rs.count_image_tokens([1, 2, 3], K25), kimi_k3_rs.ImageError, text)
    raises(lambda: _native.count_image_tokens(np.array([1, 2, 3]), NATIVE_CFG), kimi_k3_rs.ImageError, text)
    odd = {**K25, "patch_limit_on_one_side": 511}
    text = "token_width 256 * merge_kernel_size 2 > patch_limit_on_one_side 511"
    wide = np.zeros((100, 10000, 3), np.uint8)
    raises(lambda: kimi_k3_rs.preprocess(wide, odd), kimi_k3_rs.KimiK3Error, text)
    native_odd = native_config(patch_limit_on_one_side=511)
    raises(lambda: _native.preprocess([_native.BatchItem.image(wide, 0)], native_odd, NATIVE_OPTS), kimi_k3_rs.KimiK3Error, text)
    raises(lambda: _native.navit_resize_config(10000, 100, native_odd), kimi_k3_rs.KimiK3Error, text)


def test_verbatim_texts_keep_their_class():
    """sglang's texts are plain ValueErrors, in both layers (not our subclasses)."""
    raises(lambda: kimi_k3_rs.preprocess([{"type": "video"}], K25), ValueError,
           "Unsupported Kimi-K3 encoder media item: {'type': 'video'}")
    raises(lambda: kimi_k3_rs.preprocess([3.5], K25), ValueError, "Unsupported data type: <class 'float'>")
    missing = {k: v for k, v in K25.items() if k not in ("patch_size", "image_std")}
    raises(lambda: kimi_k3_rs.preprocess(IMAGE, missing), kimi_k3_rs.ConfigError,
           "Kimi-K3 image processor is missing deferred-preprocessing config: patch_size, image_std")


# --- the message rule: abbreviated values, bounded, one line ---------------------------

def test_abbreviate_renders_values_without_their_bulk():
    assert _native.abbreviate(b"\x00" * 791555) == "<bytes, 791555 bytes>"
    assert _native.abbreviate(Image.new("RGB", (640, 480))) == "<PIL.Image mode=RGB size=640x480>"
    assert _native.abbreviate(np.zeros((2, 3), np.uint8)) == "<numpy.ndarray shape=(2, 3) dtype=uint8>"
    assert _native.abbreviate({"type": "video", "image": b"xy"}) == "{'type': 'video', 'image': <bytes, 2 bytes>}"
    assert _native.abbreviate("it's") == repr("it's")
    assert _native.abbreviate("a\nb", quote=False) == "a\\nb"
    assert _native.abbreviate(OSError("gone")) == "OSError: gone"
    long = _native.abbreviate("x" * 10**6, quote=False)
    assert len(long) <= 200 and long.endswith("... (1000000 characters)")
    assert kimi_k3_rs.errors.abbreviate is _native.abbreviate


def huge_inputs():
    """Calls whose bad value is huge or spans lines."""
    big = b"\x89PNG" + b"\x00" * (40 * 2**20)
    image = Image.new("RGB", (64, 64))
    png = io.BytesIO()
    image.save(png, "PNG")
    return {
        "media dict around 40 MB": lambda: kimi_k3_rs.preprocess([{"type": "x", "image": big}], K25),
        "media dict around a PNG": lambda: kimi_k3_rs.preprocess([{"type": "x", "image": png.getvalue()}], K25),
        "media dict around a PIL image": lambda: kimi_k3_rs.preprocess([{"type": "x", "image": image}], K25),
        "a long pattern": lambda: public_config(transparent_bg_config={"pattern": "p\n" * 10**6}),
        "a long patch_size": lambda: public_config(patch_size="9" * 10**6),
        "a long mean": lambda: public_config(image_mean=list(range(10**5))),
        "a long dtype": lambda: kimi_k3_rs.preprocess(IMAGE, K25, dtype="f\n" * 10**6),
        "a long fill stage": lambda: public_config(transparent_bg_fill_stage="s" * 10**6),
        "a long data URL": lambda: kimi_k3_rs.preprocess(["data:" + "x" * 10**6], K25),
        "undecodable bytes": lambda: kimi_k3_rs.preprocess([big], K25),
        "a long missing path": lambda: kimi_k3_rs.preprocess(["/nonexistent/" + "d" * 200], K25),
        "a long bad key": lambda: public_config(transparent_bg_config={"k" * 10**6: 1}),
        "a long return_tensors": lambda: kimi_k3_rs.KimiK3VisionProcessor(K25).preprocess([IMAGE], "r" * 10**6),
    }


@pytest.mark.parametrize("name", list(huge_inputs()))
def test_messages_are_bounded_and_on_one_line(name):
    with pytest.raises((ValueError, TypeError)) as info:
        huge_inputs()[name]()
    text = str(info.value)
    assert len(text) <= 1024, len(text)
    assert "\n" not in text
    assert re.search(r"\S", text)


# -----------------------------------------------------------------------------
# From the former test_no_panics.py:
#
# No Rust panic reaches Python (issue #13, defect 1): over fuzzed configs, arrays,
# ``out=`` buffers and buffers shared across threads, every Python entry point either
# returns or raises an ``Exception`` (never ``pyo3_runtime.PanicException``, a
# ``BaseException``), and a busy buffer is a clear ``ValueError`` naming the argument.
# -----------------------------------------------------------------------------


values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.lists(st.floats(-2, 2), max_size=4),
)
config_keys = st.sampled_from(
    ["patch_size", "merge_kernel_size", "in_patch_limit", "patch_limit_on_one_side", "image_mean", "image_std", "fixed_output_tokens"]
)
dtypes = st.sampled_from([np.uint8, np.uint16, np.float32, np.int8, bool])


@st.composite
def arrays(draw):
    dtype = draw(dtypes)
    shape = draw(st.lists(st.integers(0, 40), min_size=0, max_size=4))
    array = np.zeros(shape, dtype=dtype)
    if array.ndim >= 2 and draw(st.booleans()):
        array = array[::2]  # not C-contiguous
    return array


def _no_panic(call) -> None:
    try:
        call()
    except Exception:
        pass
    except BaseException as exc:  # PanicException derives from BaseException
        pytest.fail(f"{type(exc).__module__}.{type(exc).__name__}: {exc}")


@given(key=config_keys, value=values, image=arrays())
def test_fuzzed_configs_and_arrays_never_panic(key, value, image):
    cfg = {**K25, key: value}
    _no_panic(lambda: kimi_k3_rs.preprocess(image, cfg))
    _no_panic(lambda: kimi_k3_rs.navit_resize_config(*image.shape[:2], 14, 2, 4096, 512) if image.ndim >= 2 else None)
    _no_panic(lambda: _native.image_size(image))
    _no_panic(lambda: _native.resize_bicubic(image, 3, 3, _native.Options("13", "float32", 1)))


@given(
    image=arrays(),
    out_shape=st.lists(st.integers(0, 20), min_size=0, max_size=5),
    out_dtype=st.sampled_from([np.float32, np.float16, np.uint16, np.float64, np.uint8]),
    dtype=st.sampled_from(["float32", "bfloat16", "float16"]),
    alias=st.booleans(),
)
def test_fuzzed_out_buffers_never_panic(image, out_shape, out_dtype, dtype, alias):
    out = np.zeros(out_shape, dtype=out_dtype)
    if alias and out.nbytes >= 12:  # an input that is a view of out
        image = out.reshape(-1).view(np.uint8)[:12].reshape(2, 2, 3)
    _no_panic(lambda: kimi_k3_rs.preprocess(image, K25, out=out, dtype=dtype))


def test_a_buffer_busy_in_another_thread_is_a_value_error_naming_it():
    """The 0.1.0 reproducer: one thread writes ``out`` while another reads a view of it."""
    big = np.random.default_rng(0).integers(0, 256, (600, 800, 3), dtype=np.uint8)
    n = kimi_k3_rs.preprocess(big, K25)["pixel_values"].shape[0]
    out = np.empty((n, 3, 14, 14), np.float32)
    view = out.reshape(-1).view(np.uint8)[:3600].reshape(30, 40, 3)
    stop = threading.Event()
    failures: list[BaseException] = []

    def writer() -> None:
        while not stop.is_set():
            try:
                kimi_k3_rs.preprocess(big, K25, out=out)
            except Exception:
                pass
            except BaseException as exc:
                failures.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    seen = set()
    try:
        for _ in range(200):
            try:
                kimi_k3_rs.preprocess(view, K25)
                seen.add("ok")
            except ValueError as exc:
                assert "in use by another call" in str(exc) or "out" in str(exc), exc
                seen.add("busy")
            except BaseException as exc:
                failures.append(exc)
    finally:
        stop.set()
        thread.join()
    assert not failures, failures
    assert seen  # every call returned or raised a ValueError
