"""The per-call options and the checks added with them, tested independently.

``dtype`` (bfloat16 / float16 rounding computed here from the float32 bits),
``out=``, ``num_threads`` and ``KIMI_K3_RS_NUM_THREADS``, ``max_image_pixels``
(decompression bombs), decode errors naming the batch index, the deferred flow
following its processor's options, ``count_image_tokens`` and the size checks of
``navit_resize_config``.  Every value is compared exactly (bits), against
``tests/reference.py`` or a formula written here. Several tests pin bugs found
while writing them (sizing over 2**73 patch products, Pillow's limit under
``max_image_pixels``, data URL errors, materialize's error index, ``out=`` messages).
"""

from __future__ import annotations

import base64
import importlib.util
import re

import numpy as np
import pytest

import kimi_k3_rs
from helpers import (
    REF_COMPAT,
    alpha_pattern_la,
    alpha_pattern_rgba,
    assert_bit_equal,
    assert_output_matches,
    cfg,
    encode,
    noise,
    noise_array,
)
from reference import reference_preprocess

HAS_ML_DTYPES = importlib.util.find_spec("ml_dtypes") is not None
OTHER_COMPAT = {"12": "13", "13": "12"}[REF_COMPAT]
ENV = "KIMI_K3_RS_NUM_THREADS"
ImageError = kimi_k3_rs.ImageError


def exact(msg: str) -> str:
    return f"^{re.escape(msg)}$"


def u32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


def small_batch():
    """Resized (in_patch_limit=600) RGB / RGBA / L / LA images, PIL and numpy, odd sizes."""
    return [
        noise(300, 200, "RGB", 1),
        alpha_pattern_rgba(257, 190, 2),
        noise_array(150, 333, "L", 3),
        alpha_pattern_la(211, 97, 4),
        noise_array(61, 45, "RGB", 5),  # not resized
    ]


# ---------------------------------------------------------------------------
# 5. unreadable inputs name their batch index; the library keeps working
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
