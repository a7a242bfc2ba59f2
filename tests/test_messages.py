"""One rule, one message: the public API and ``_native`` give the same class and text.

Every row feeds one bad value to the public API and to the compiled module directly
and asserts the exception class and the whole message. The texts are the Rust error
enum's (``src/error.rs``), or sglang's / the checkpoint's verbatim where they have
one. The same texts are asserted for the Rust API in ``tests/messages.rs``. The
second half checks the message rule: every caller value abbreviated, no message over
1,024 characters or on more than one line.
"""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from PIL import Image

import kimi_k3_rs
from kimi_k3_rs import _native

K25 = kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
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
