"""The ``dtype`` option (bfloat16 / float16 = float32 rounded to nearest-even) and ``out=`` arrays.

The half-precision bits are computed here from the float32 bits (no library);
every value is compared exactly (bits) against ``tests/reference.py``.  Several
tests pin ``out=`` messages found wrong while writing them.
"""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import pytest

import kimi_k3_rs
from helpers import (
    CLIP_MEAN,
    CLIP_STD,
    alpha_pattern_la,
    alpha_pattern_rgba,
    assert_bit_equal,
    assert_output_matches,
    bf16_bits,
    cfg,
    f16_bits,
    half_bits,
    noise,
    noise_array,
    u32,
)
from reference import reference_preprocess

HAS_ML_DTYPES = importlib.util.find_spec("ml_dtypes") is not None
ImageError = kimi_k3_rs.ImageError


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
# dtype: bfloat16 / float16 = float32 rounded to nearest-even
# ---------------------------------------------------------------------------


# Padding pixels are 0, so (0 - mean) / std lands exactly on these values:
# 1 + 2**-8 is a bfloat16 tie with an even upper half (rounds down), 1 + 2**-7 + 2**-8 a
# tie with an odd one (rounds up); 1 + 2**-11 / 1 + 2**-10 + 2**-11 are float16 ties.
BF16_TIES = [-(1 + 2**-8), -(1 + 2**-7 + 2**-8), -(1 + 2**-10 + 2**-11)]
F16_TIES = [1 + 2**-11, 1 + 2**-10 + 2**-11, 1 + 2**-8]

DTYPE_CONFIGS = {
    "k25": cfg("kimi_k25", in_patch_limit=600),
    "k3": cfg("kimi_k3", in_patch_limit=600),
    "clip": cfg("kimi_k25", in_patch_limit=600, image_mean=CLIP_MEAN, image_std=CLIP_STD),
    "ties": cfg("kimi_k25", in_patch_limit=600, image_mean=BF16_TIES, image_std=[1.0, 1.0, 1.0]),
    "ties_neg": cfg("kimi_k3", in_patch_limit=600, image_mean=F16_TIES, image_std=[1.0, 1.0, 1.0]),
    # float16 overflow to +-inf, float16 subnormals and underflow to 0
    "f16_overflow": cfg("kimi_k25", in_patch_limit=600, image_std=[1e-5, 2e-5, 3e-5]),
    "f16_subnormal": cfg("kimi_k25", in_patch_limit=600, image_std=[1e6, 3e5, 1e7]),
    # float32 values near FLT_MAX: bfloat16 rounds some of them up to inf
    "bf16_overflow": cfg("kimi_k25", in_patch_limit=600, image_mean=[0.0, 0.0, 0.0],
                         image_std=[1 / 3.4e38, 1 / 3.398e38, 1 / 1e38]),
    # 1 / 1e-320 overflows to inf in float64: 0 * inf = NaN on the padding, inf elsewhere
    "nan": cfg("kimi_k25", in_patch_limit=600, image_mean=[0.0, 0.0, 0.0], image_std=[1e-320, 1.0, 1.0]),
}


@pytest.fixture(scope="module")
def dtype_results():
    images = small_batch()
    out = {}
    for name, media_proc_cfg in DTYPE_CONFIGS.items():
        f32 = kimi_k3_rs.preprocess(images, media_proc_cfg)
        with np.errstate(all="ignore"):
            ref = reference_preprocess(images, media_proc_cfg)
        assert_output_matches(f32, ref)
        out[name] = (media_proc_cfg, images, f32["pixel_values"], f32["grid_thws"])
    return out


@pytest.mark.parametrize("name", sorted(DTYPE_CONFIGS))
def test_bfloat16_is_float32_rounded_to_nearest_even(dtype_results, name):
    media_proc_cfg, images, f32, grid = dtype_results[name]
    out = kimi_k3_rs.preprocess(images, media_proc_cfg, dtype="bfloat16")
    pv = out["pixel_values"]
    if HAS_ML_DTYPES:
        assert pv.dtype.name == "bfloat16"
    else:
        # ml_dtypes is not installed in the test environment: the bit patterns come back as uint16
        assert pv.dtype == np.uint16
    assert pv.shape == f32.shape and pv.flags.c_contiguous
    assert np.array_equal(out["grid_thws"], grid)
    assert_bit_equal(half_bits(pv), bf16_bits(f32), f"bfloat16 ({name})")


@pytest.mark.parametrize("name", sorted(DTYPE_CONFIGS))
def test_float16_is_float32_rounded_to_nearest_even(dtype_results, name):
    media_proc_cfg, images, f32, grid = dtype_results[name]
    out = kimi_k3_rs.preprocess(images, media_proc_cfg, dtype="float16")
    pv = out["pixel_values"]
    assert pv.dtype == np.float16 and pv.shape == f32.shape and pv.flags.c_contiguous
    assert np.array_equal(out["grid_thws"], grid)
    assert_bit_equal(half_bits(pv), f16_bits(f32), f"float16 ({name})")


def test_dtype_configs_reach_the_rounding_corner_cases(dtype_results):
    """The configs above really produce ties (both parities), overflow, subnormals and NaN."""
    f32 = np.concatenate([r[2].ravel() for r in dtype_results.values()])
    bits = u32(f32)
    bf_tie = (bits & 0xFFFF) == 0x8000
    assert np.any(bf_tie & (((bits >> 16) & 1) == 0)) and np.any(bf_tie & (((bits >> 16) & 1) == 1))
    finite = np.isfinite(f32)
    assert np.any(finite & ((bf16_bits(f32) & 0x7FFF) == 0x7F80))  # finite float32 -> bfloat16 inf
    h = f16_bits(f32).view(np.float16)
    assert np.any(finite & np.isinf(h))
    assert np.any((h != 0) & (np.abs(h.astype(np.float32)) < np.float32(2**-14)))  # float16 subnormal
    assert np.any((f32 != 0) & (h == 0))
    mant = bits & 0x1FFF
    assert np.any(finite & (np.abs(f32) >= 2**-14) & (np.abs(f32) < 65504) & (mant == 0x1000))  # f16 ties
    assert np.any(np.isnan(f32)) and np.any(np.isinf(f32))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_dtypes_on_every_entry_point(dtype):
    media_proc_cfg = DTYPE_CONFIGS["clip"]
    images = small_batch()
    f32 = kimi_k3_rs.preprocess(images, media_proc_cfg)["pixel_values"]
    want = bf16_bits(f32) if dtype == "bfloat16" else f16_bits(f32)
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg, dtype=dtype)
    got = processor.preprocess([{"type": "image", "image": im} for im in images])["pixel_values"]
    assert_bit_equal(half_bits(got), want, "processor")
    for owner, kwargs in ((processor, {}), (media_proc_cfg, {"dtype": dtype})):
        enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs(images, owner, **kwargs)
        parts = enc.materialize()
        assert all(p.itemsize == 2 for p in parts)
        assert_bit_equal(np.concatenate([half_bits(p) for p in parts]), want, "materialize")
    # an explicit dtype overrides the processor's
    enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs(images, processor, dtype="float32")
    assert_bit_equal(np.concatenate(enc.materialize()), f32, "materialize float32")


def test_empty_batch_half_dtypes():
    for dtype, np_dtype in (("float16", np.float16), ("bfloat16", None)):
        pv = kimi_k3_rs.preprocess([], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG, dtype=dtype)["pixel_values"]
        assert pv.shape == (0, 3, 14, 14) and pv.itemsize == 2
        if np_dtype is not None:
            assert pv.dtype == np_dtype


@pytest.mark.parametrize("bad", ["float64", "bf16", "BFLOAT16", "float32 ", "", None, np.float32, "half"])
def test_bad_dtype(bad):
    img = noise(40, 30, "RGB", 0)
    media_proc_cfg = kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
    with pytest.raises(ValueError, match="dtype"):
        kimi_k3_rs.preprocess(img, media_proc_cfg, dtype=bad)
    with pytest.raises(ValueError, match="dtype"):
        kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg, dtype=bad)
    if bad is not None:  # None means "the processor's" here
        with pytest.raises(ValueError, match="dtype"):
            kimi_k3_rs.prepare_kimi_k3_encoder_inputs([img], media_proc_cfg, dtype=bad)


# ---------------------------------------------------------------------------
# out=
# ---------------------------------------------------------------------------


def test_out_float32_reused_across_calls():
    media_proc_cfg = cfg("kimi_k3", in_patch_limit=600)
    batch_a = small_batch()
    fresh_a = kimi_k3_rs.preprocess(batch_a, media_proc_cfg)
    n = fresh_a["pixel_values"].shape[0]
    out = np.full((n, 3, 14, 14), np.nan, np.float32)
    res = kimi_k3_rs.preprocess(batch_a, media_proc_cfg, out=out)
    assert res["pixel_values"] is out
    assert_output_matches(res, (fresh_a["pixel_values"], fresh_a["grid_thws"]))
    # a second batch with the same row count, other pixels, written into the same buffer
    batch_b = [  # the sizes of small_batch(), other pixels and modes
        noise_array(300, 200, "RGBA", 91),
        noise(257, 190, "L", 92),
        noise(150, 333, "RGB", 93),
        noise_array(211, 97, "LA", 94),
        noise(61, 45, "RGBA", 95),
    ]
    fresh_b = kimi_k3_rs.preprocess(batch_b, media_proc_cfg)
    assert fresh_b["pixel_values"].shape[0] == n
    assert not np.array_equal(u32(fresh_b["pixel_values"]), u32(fresh_a["pixel_values"]))
    res = kimi_k3_rs.preprocess(batch_b, media_proc_cfg, out=out, num_threads=2)
    assert res["pixel_values"] is out
    assert_output_matches(res, reference_preprocess(batch_b, media_proc_cfg))


@pytest.mark.parametrize("offset", [0, 1, 2, 3])
def test_out_at_every_float_offset_from_16_bytes(offset):
    """The vector kernel streams whole patches into 16-byte aligned output and
    leaves a misaligned ``out`` to the table path: the same bits either way."""
    media_proc_cfg = kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
    images = [noise_array(300, 200, "RGB", 5), noise(257, 190, "RGBA", 6), noise(98, 70, "L", 7)]
    want = reference_preprocess(images, media_proc_cfg)
    n = want[0].size
    buf = np.full(n + 8, np.nan, np.float32)
    first = (-buf.ctypes.data % 16) // 4 + offset  # the first 16-byte aligned float, + offset
    out = buf[first:first + n].reshape(want[0].shape)
    assert (out.ctypes.data % 16 == 0) == (offset == 0)
    res = kimi_k3_rs.preprocess(images, media_proc_cfg, out=out)
    assert res["pixel_values"] is out
    assert_output_matches(res, want)


@pytest.mark.parametrize("dtype,out_dtypes", [
    ("float16", ["float16"]),
    ("bfloat16", ["uint16"] + (["bfloat16"] if HAS_ML_DTYPES else [])),
])
def test_out_half_dtypes(dtype, out_dtypes):
    media_proc_cfg = DTYPE_CONFIGS["clip"]
    images = small_batch()
    f32 = kimi_k3_rs.preprocess(images, media_proc_cfg)["pixel_values"]
    want = bf16_bits(f32) if dtype == "bfloat16" else f16_bits(f32)
    for name in out_dtypes:
        np_dtype = np.dtype(name) if name != "bfloat16" else np.dtype(__import__("ml_dtypes").bfloat16)
        out = np.zeros(f32.shape, np_dtype)
        res = kimi_k3_rs.preprocess(images, media_proc_cfg, dtype=dtype, out=out)
        assert res["pixel_values"] is out and out.dtype == np_dtype
        assert_bit_equal(out.view(np.uint16), want, f"out {name}")


def test_out_empty_batch():
    out = np.empty((0, 3, 14, 14), np.float32)
    assert kimi_k3_rs.preprocess([], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG, out=out)["pixel_values"] is out


def _bad_outs(n):
    good = (n, 3, 14, 14)
    readonly = np.zeros(good, np.float32)
    readonly.flags.writeable = False
    wide = np.zeros((n, 3, 14, 28), np.float32)
    return [
        ("rows+1", np.zeros((n + 1, 3, 14, 14), np.float32), ImageError, r"shape"),
        ("rows-1", np.zeros((n - 1, 3, 14, 14), np.float32), ImageError, r"shape"),
        ("patch 16", np.zeros((n, 3, 16, 16), np.float32), ImageError, r"shape"),
        ("channels 4", np.zeros((n, 4, 14, 14), np.float32), ImageError, r"shape"),
        ("flat", np.zeros(n * 3 * 14 * 14, np.float32), ImageError, r"out"),
        ("float64", np.zeros(good, np.float64), ImageError, r"dtype"),
        ("float16", np.zeros(good, np.float16), ImageError, r"dtype"),
        ("int32", np.zeros(good, np.int32), ImageError, r"dtype"),
        ("strided", wide[..., ::2], ImageError, r"contiguous"),
        ("fortran", np.asfortranarray(np.zeros(good, np.float32)), ImageError, r"contiguous"),
        ("read-only", readonly, ImageError, r"writeable"),
        ("list", np.zeros(good, np.float32).tolist(), TypeError, r"out must be a numpy array"),
        ("bytearray", bytearray(n * 3 * 14 * 14 * 4), TypeError, r"out must be a numpy array"),
    ]



def test_bad_out_raises_clear_errors_and_never_crashes():
    media_proc_cfg = kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
    img = noise(300, 200, "RGB", 0)
    ref = reference_preprocess(img, media_proc_cfg)
    n = ref[0].shape[0]
    for what, out, cls, pattern in _bad_outs(n):
        before = np.array(out, copy=True) if isinstance(out, np.ndarray) else None
        with pytest.raises(cls, match=pattern) as info:
            kimi_k3_rs.preprocess(img, media_proc_cfg, out=out)
        assert "\n" not in str(info.value), what
        if before is not None:  # nothing written into a refused buffer
            assert np.array_equal(out, before, equal_nan=True), what
        # the library is fine afterwards
        assert_output_matches(kimi_k3_rs.preprocess(img, media_proc_cfg), ref)


@pytest.mark.parametrize("dtype,out_dtype", [("float16", "uint16"), ("float16", "float32"),
                                             ("bfloat16", "float16"), ("bfloat16", "float32"),
                                             ("float32", "uint16"), ("bfloat16", "int16")])
def test_out_dtype_must_follow_dtype(dtype, out_dtype):
    img = noise(60, 50, "RGB", 0)
    media_proc_cfg = kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
    n = kimi_k3_rs.preprocess(img, media_proc_cfg)["pixel_values"].shape[0]
    with pytest.raises(ImageError, match=re.escape(f"dtype={dtype!r}")):
        kimi_k3_rs.preprocess(img, media_proc_cfg, dtype=dtype, out=np.zeros((n, 3, 14, 14), out_dtype))


def test_out_aliasing_an_input_is_refused():
    """An input array that is a view of ``out``: refused (borrow check), no crash."""
    media_proc_cfg = kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
    img = noise_array(300, 200, "RGB", 0)
    ref = reference_preprocess(img, media_proc_cfg)
    out = np.zeros(ref[0].shape, np.float32)
    alias = out.view(np.uint8).reshape(-1)[: img.size].reshape(img.shape)
    alias[...] = img
    with pytest.raises(ImageError, match="out"):
        kimi_k3_rs.preprocess(alias, media_proc_cfg, out=out)
    assert_output_matches(kimi_k3_rs.preprocess(img, media_proc_cfg), ref)


def test_out_misaligned_or_byteswapped_messages_name_the_problem():
    media_proc_cfg = kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
    img = noise(300, 200, "RGB", 0)
    n = kimi_k3_rs.preprocess(img, media_proc_cfg)["pixel_values"].shape[0]
    raw = np.zeros(n * 3 * 14 * 14 * 4 + 1, np.uint8)
    misaligned = raw[1:].view(np.float32).reshape(n, 3, 14, 14)
    assert misaligned.flags.c_contiguous and not misaligned.flags.aligned
    with pytest.raises(ImageError, match="align"):
        kimi_k3_rs.preprocess(img, media_proc_cfg, out=misaligned)
    with pytest.raises(ImageError, match="(?i)byte.?order|endian|native"):
        kimi_k3_rs.preprocess(img, media_proc_cfg, out=np.zeros((n, 3, 14, 14), ">f4"))


def test_out_overlapping_an_input_through_another_base_is_refused():
    """Issue #13 (9): an ``out`` that shares memory with an input through a different
    base object (a memoryview, a ctypes buffer) is refused by its byte ranges, naming
    the image, before anything is written."""
    import ctypes

    cfg = kimi_k3_rs.kimi_k25_media_proc_cfg()
    image = np.random.default_rng(0).integers(0, 256, (28, 28, 3), dtype=np.uint8)
    n = kimi_k3_rs.preprocess(image, cfg)["pixel_values"].shape[0]
    values = 2 * n * 3 * 14 * 14
    buffer = (ctypes.c_float * values)()
    out = np.ctypeslib.as_array(buffer).reshape(2 * n, 3, 14, 14)
    out.fill(7.0)
    alias = np.ctypeslib.as_array(ctypes.cast(buffer, ctypes.POINTER(ctypes.c_uint8)), shape=(values * 4,))
    view = alias[1000 : 1000 + image.nbytes].reshape(28, 28, 3)
    with pytest.raises(kimi_k3_rs.ImageError, match=r"^out overlaps image 1$"):
        kimi_k3_rs.preprocess([image, view], cfg, out=out)
    assert (out == 7.0).all()  # nothing written
    through_memoryview = np.frombuffer(memoryview(out).cast("B"), dtype=np.uint8)[-image.nbytes :].reshape(28, 28, 3)
    with pytest.raises(kimi_k3_rs.ImageError, match=r"^out overlaps image 0$"):
        kimi_k3_rs.preprocess([through_memoryview, image], cfg, out=out)
    # A plain numpy view of the same `out` (numpy's base, so the borrow checker sees
    # it) names the image too, not a busy buffer of "another call".
    same_base = out.reshape(-1).view(np.uint8)[: image.nbytes].reshape(28, 28, 3)
    with pytest.raises(kimi_k3_rs.ImageError, match=r"^out overlaps image 1$"):
        kimi_k3_rs.preprocess([image, same_base], cfg, out=out)
    assert (out == 7.0).all()
    separate = np.empty_like(out)  # adjacent or unrelated memory is fine
    got = kimi_k3_rs.preprocess([image, image], cfg, out=separate)
    assert got["pixel_values"] is separate
