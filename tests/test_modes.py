"""Every PIL mode, every fill stage and background, both pass orders (issue #3).

Each image kind of :data:`helpers.MODE_KINDS` runs through the library and through
``tests/reference.py`` (the checkpoint's steps with the installed Pillow), under
K2.5, K3 ``after_resize`` (each background pattern, the dataclass defaults and no
background) and K3 ``before_resize``, with the published budget (no resize for these
small images) and with a reduced ``in_patch_limit`` (so that the resize runs in the
image's own mode).  Comparisons are exact (float32 bytes).

The other Pillow's pass order is covered here where it cannot change the bytes (sizes
the Pillow-13 vertical-first rule does not select, NEAREST modes) and by
``test_fingerprints.py`` (CMYK, P + tRNS and L + transparency cases recorded under
Pillow 12.3.0) where it does.
"""

from __future__ import annotations

import copy
import re
import warnings

import numpy as np
import pytest
from PIL import Image

import kimi_k3_rs
from helpers import (
    K3_CHESSBOARD,
    MODE_KINDS,
    REF_COMPAT,
    assert_output_matches,
    cfg,
    k3_before,
    mode_image,
)
from reference import navit_resize_image, reference_preprocess, vertical_first

#: the pass order the installed Pillow does not run for 120x400 (vertical first under "13" only)
OTHER_COMPAT = "12" if REF_COMPAT == "13" else "13"
BYTES_TRNS_WARNING = "Palette images with Transparency expressed in bytes"

CONFIGS = {
    "k25": cfg("kimi_k25"),
    "k3": cfg("kimi_k3"),  # after_resize, published chessboard
    "k3_before": k3_before(),
    "after_none": cfg("kimi_k3", transparent_bg_config=None),
    "after_white": cfg("kimi_k3", transparent_bg_config={"pattern": "white"}),
    "after_black": cfg("kimi_k3", transparent_bg_config={**K3_CHESSBOARD, "pattern": "black"}),
    "after_gray": cfg("kimi_k3", transparent_bg_config={"pattern": "gray"}),
    "after_defaults": cfg("kimi_k3", transparent_bg_config={}),  # dataclass defaults: black
    "before_chess_defaults": k3_before(transparent_bg_config={"pattern": "chessboard"}),  # 16 / 200
    "before_white": k3_before(transparent_bg_config={"pattern": "white"}),
}

#: kinds whose ``after_resize`` resize Pillow does in 16/32 bits (pass order not selectable)
PILLOW_RESIZED = {"I;16", "I;16+trns", "I;16B", "I", "F"}
#: kinds Pillow resizes with NEAREST (pass order irrelevant)
NEAREST_KINDS = {k for k, m in MODE_KINDS.items() if m in ("P", "1")}
CONVERTIBLE = [k for k in MODE_KINDS if k != "La"]


def with_limit(name, limit):
    out = copy.deepcopy(CONFIGS[name])
    if limit is not None:
        out["in_patch_limit"] = limit
    return out


def reference_quiet(image, media_proc_cfg):
    """The reference, without Pillow's bytes-tRNS warning (which the library never gives)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=BYTES_TRNS_WARNING)
        return reference_preprocess(image, media_proc_cfg)


def state(image):
    return (image.mode, image.size, image.tobytes(), dict(image.info), image.getpalette())


def resized_size(image, media_proc_cfg):
    w, h = image.size
    rc = navit_resize_image(w, h, 14, 2, media_proc_cfg["in_patch_limit"], 512, None)
    return rc["new_width"], rc["new_height"]


@pytest.mark.parametrize("limit", [None, 40], ids=["no-resize", "resize"])
@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("kind", CONVERTIBLE)
def test_mode_parity(kind, config, limit):
    media_proc_cfg = with_limit(config, limit)
    image = mode_image(kind, 150, 110, seed=3)
    assert image.mode == MODE_KINDS[kind]
    ref = reference_quiet(image, media_proc_cfg)
    if limit is not None:
        assert resized_size(image, media_proc_cfg) != image.size  # the resize really runs
    before = state(image)
    for compat in ("auto", REF_COMPAT, OTHER_COMPAT):  # 150x110 is never vertical-first
        assert_output_matches(kimi_k3_rs.preprocess(image, media_proc_cfg, pillow_compat=compat), ref)
    assert state(image)[:3] == before[:3], "the input image changed"
    # the same image inside a media dict and a mixed batch
    batch = [{"type": "image", "image": image}, mode_image("RGB+trns", 30, 20, 1)]
    out = kimi_k3_rs.preprocess(batch, media_proc_cfg)
    n = int(np.prod(ref[1][0]))
    assert np.array_equal(out["pixel_values"][:n].view(np.uint32), ref[0].view(np.uint32))


@pytest.mark.parametrize("config", ["k25", "k3", "k3_before", "after_none"])
@pytest.mark.parametrize("limit", [None, 40])
def test_la_cannot_be_converted_as_in_the_reference(config, limit):
    """``La`` has no conversion to RGB in Pillow: the checkpoint fails, so do we (clearly)."""
    media_proc_cfg = with_limit(config, limit)
    image = mode_image("La", 150, 110, seed=3)
    with pytest.raises(ValueError, match="conversion from La to L not supported"):
        reference_preprocess(image, media_proc_cfg)
    with pytest.raises(kimi_k3_rs.ImageError, match=r"^image 0: cannot convert a mode La image to RGB \(Pillow: "):
        kimi_k3_rs.preprocess(image, media_proc_cfg)
    # the library stays usable
    rgb = mode_image("RGB+trns", 40, 30, 2)
    assert_output_matches(kimi_k3_rs.preprocess(rgb, media_proc_cfg), reference_preprocess(rgb, media_proc_cfg))


def tall_expectation(kind, config):
    """What the other pass order gives for a vertical-first down-scale."""
    stage = CONFIGS[config].get("transparent_bg_fill_stage", "before_resize")
    if stage == "before_resize":
        return "differs"  # converted first, then RGB bicubic in Rust
    if kind in NEAREST_KINDS:
        return "same"
    bg = CONFIGS[config].get("transparent_bg_config")
    if kind == "LAB" and bg is not None:
        return "same"  # composited away entirely (test_lab_after_resize_alpha_quirk)
    if kind == "PA" and bg is None:
        return "same"  # black: the resized PA has no palette (test_pa_after_resize_palette_quirk)
    if kind in PILLOW_RESIZED:
        return "error"
    return "differs"


@pytest.mark.parametrize("config", ["k25", "k3", "k3_before", "after_none", "after_gray"])
@pytest.mark.parametrize("kind", CONVERTIBLE)
def test_tall_modes(kind, config):
    media_proc_cfg = with_limit(config, 60)
    image = mode_image(kind, 120, 400, seed=5)
    new_w, new_h = resized_size(image, media_proc_cfg)
    assert [vertical_first(c, 120, 400, new_w, new_h) for c in ("12", "12.2", "13")] == [False, False, True]
    ref = reference_quiet(image, media_proc_cfg)
    assert_output_matches(kimi_k3_rs.preprocess(image, media_proc_cfg), ref)
    assert_output_matches(kimi_k3_rs.preprocess(image, media_proc_cfg, pillow_compat=REF_COMPAT), ref)
    expected = tall_expectation(kind, config)
    if expected == "error":
        msg = (f"image 0: mode {image.mode} images are resized by the installed Pillow "
               f"{Image.__version__} (its 16/32-bit resample), whose pass order is "
               f"pillow_compat={REF_COMPAT!r}, not {OTHER_COMPAT!r}, and the order changes the "
               f"result for 120x400 -> {new_w}x{new_h}; use pillow_compat='auto'")
        with pytest.raises(kimi_k3_rs.ImageError, match=f"^{re.escape(msg)}$"):
            kimi_k3_rs.preprocess(image, media_proc_cfg, pillow_compat=OTHER_COMPAT)
        return
    other = kimi_k3_rs.preprocess(image, media_proc_cfg, pillow_compat=OTHER_COMPAT)
    assert np.array_equal(other["grid_thws"], ref[1])
    same = np.array_equal(other["pixel_values"].view(np.uint32), ref[0].view(np.uint32))
    assert same == (expected == "same"), f"{kind} under {config}: pillow_compat={OTHER_COMPAT} {expected}"


@pytest.mark.parametrize("size", [(1, 3000), (3000, 1)], ids=["vertical-only", "horizontal-only"])
@pytest.mark.parametrize("kind", sorted(PILLOW_RESIZED))
def test_pillow_resized_modes_single_pass_any_order(kind, size):
    """A resize that runs one pass has no pass order: every pillow_compat is exact."""
    media_proc_cfg = with_limit("after_none", None)
    media_proc_cfg["patch_limit_on_one_side"] = 10  # 3000 px -> 140 px
    image = mode_image(kind, *size, seed=6)
    ref = reference_quiet(image, media_proc_cfg)
    assert ref[0].shape[0] > 0
    for compat in ("12", "13"):
        assert_output_matches(kimi_k3_rs.preprocess(image, media_proc_cfg, pillow_compat=compat), ref)


def test_bytes_trns_palette_gives_no_warning():
    """Pillow warns when ``convert("RGB")`` drops a bytes tRNS; the library gets the same
    pixels without the warning (pytest turns warnings into errors)."""
    image = mode_image("P+bytes_trns", 150, 110, seed=3)
    for config in ("k25", "after_none"):
        media_proc_cfg = with_limit(config, 40)
        with pytest.warns(UserWarning, match=BYTES_TRNS_WARNING):
            ref = reference_preprocess(image, media_proc_cfg)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = kimi_k3_rs.preprocess(image, media_proc_cfg)
        assert_output_matches(out, ref)
        assert image.info["transparency"]  # the caller's image keeps its tRNS


def test_lab_after_resize_alpha_quirk():
    """Pillow's resample leaves LAB's padding byte 0, which LittleCMS's LAB -> RGBA copies
    into the alpha: after a resize the checkpoint composites a LAB image away entirely."""
    image = mode_image("LAB", 150, 110, seed=3)
    media_proc_cfg = with_limit("after_white", 40)
    ref = reference_preprocess(image, media_proc_cfg)
    assert np.all((ref[0] == 1.0) | (ref[0] == -1.0))  # white background, -1 padding
    assert_output_matches(kimi_k3_rs.preprocess(image, media_proc_cfg), ref)


def test_pa_after_resize_palette_quirk():
    """Pillow's BICUBIC resize of PA drops the palette (black colours, alpha kept)."""
    image = mode_image("PA", 150, 110, seed=3)
    media_proc_cfg = with_limit("after_none", 40)
    ref = reference_preprocess(image, media_proc_cfg)
    assert np.all(ref[0] == -1.0)
    assert_output_matches(kimi_k3_rs.preprocess(image, media_proc_cfg), ref)


@pytest.mark.parametrize("kind", ["P", "P+int_trns", "P+bytes_trns", "1", "CMYK", "I;16", "LAB"])
def test_mode_batch_order(kind):
    """Mixed modes in one batch: each block equals the image alone; a permutation
    permutes grid rows and blocks the same way."""
    media_proc_cfg = with_limit("k3", 50)
    images = [mode_image(kind, 160, 90, 1), mode_image("L+trns", 70, 140, 2),
              mode_image("RGB+trns", 30, 30, 3), np.zeros((20, 50, 2), np.uint8)]
    out = kimi_k3_rs.preprocess(images, media_proc_cfg)
    rows = np.cumsum(out["grid_thws"].prod(axis=1))[:-1]
    blocks = np.split(out["pixel_values"], rows)
    for item, block in zip(images, blocks):
        assert np.array_equal(kimi_k3_rs.preprocess(item, media_proc_cfg)["pixel_values"], block)
    perm = [3, 1, 0, 2]
    pout = kimi_k3_rs.preprocess([images[i] for i in perm], media_proc_cfg)
    assert np.array_equal(pout["grid_thws"], out["grid_thws"][perm])
    assert np.array_equal(pout["pixel_values"], np.concatenate([blocks[i] for i in perm]))


def test_mode_paths_from_threads():
    """The Pillow steps and the Rust resize of other modes are safe to run concurrently
    on shared images (the same bytes from every thread)."""
    import threading

    media_proc_cfg = with_limit("k3", 60)
    images = [mode_image(kind, 160, 120, i) for i, kind in enumerate(
        ["P+bytes_trns", "CMYK", "L+trns", "I;16", "PA", "YCbCr", "1+trns", "P+int_trns"])]
    ref = reference_quiet(images, media_proc_cfg)
    results, errors = [], []
    barrier = threading.Barrier(4)

    def worker():
        try:
            barrier.wait(timeout=60)
            for _ in range(3):
                results.append(kimi_k3_rs.preprocess(images, media_proc_cfg))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 12
    for out in results:
        assert_output_matches(out, ref)


@pytest.mark.parametrize("preset", ["kimi_k25", "kimi_k3"])
def test_palette_image_without_a_palette_fails_where_pillow_fails(preset):
    """A P PNG with tRNS but no PLTE (found by the decoder differential): Pillow's
    ``convert("RGB")`` asserts a palette, so the reference raises; the package gave
    pixels under K2.5 (its 1x1 probe crop got Pillow's default palette)."""
    import io
    import struct
    import zlib

    def chunk(t: bytes, d: bytes) -> bytes:
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 3, 0, 0, 0))
           + chunk(b"tRNS", b"\x00") + chunk(b"IDAT", zlib.compress(b"\0\0\1\0\1\0")) + chunk(b"IEND", b""))
    config = cfg(preset)
    if preset == "kimi_k25":
        with pytest.raises(AssertionError):
            reference_preprocess([png], config)
        with pytest.raises(kimi_k3_rs.ImageError, match="AssertionError"):
            kimi_k3_rs.preprocess(png, config)
    else:
        assert_output_matches(kimi_k3_rs.preprocess(png, config), reference_preprocess([png], config))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["L+trns", "1+trns"])
@pytest.mark.parametrize("config", ["k3", "k3_before"])
def test_keyed_grey_over_several_blocks_under_a_strong_downscale(kind, config):
    """``1`` / ``L`` with a transparency key are composited as ``LA`` (converted band by
    band as the core reads them): a 6000x4000 image (24 MB, in several blocks of
    Pillow's arena) downscaled about 20x, on 1 and 2 threads, gives the reference's
    bits (which composites ``convert("RGBA")``)."""
    image = mode_image(kind, 6000, 4000, seed=5)
    media_proc_cfg = with_limit(config, 200)
    assert resized_size(image, media_proc_cfg)[0] <= 6000 // 15
    ref = reference_quiet(image, media_proc_cfg)
    for threads in (1, 2):
        assert_output_matches(kimi_k3_rs.preprocess(image, media_proc_cfg, num_threads=threads), ref)
