"""Sizing: ``navit_resize_config`` and ``count_image_tokens`` against the HF sizing expression (spec section 2), up to the edges.

Reference vectors, random and exhaustive sizes, the side-limit assertion, the
sizing property test with sizes and config integers up to 2**31 - 1 (examples:
``KIMI_HARDENING_EXAMPLES``), sizes up to 2**53 and past it, and the size checks
of ``navit_resize_config``.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import kimi_k3_rs
import reference
from helpers import (
    EXAMPLES,
    K25,
    MAX_INT,
    OK_ERRORS,
    assert_bit_equal,
    cfg,
    exact,
    noise,
    noise_array,
    record,
)
from reference import navit_resize_image

KEYS = {"num_tokens", "new_width", "new_height", "pad_width", "pad_height"}
PRESETS = {"kimi_k25": 16384, "kimi_k3": 65536}
ImageError = kimi_k3_rs.ImageError


def ours(w, h, L, ps=14, m=2, S=512, fixed=None):
    return kimi_k3_rs.navit_resize_config(w, h, ps, m, L, S, fixed)


def theirs(w, h, L, ps=14, m=2, S=512, fixed=None):
    return navit_resize_image(w, h, ps, m, L, S, fixed)


# --- spec section 2 reference vectors, verbatim --------------------------------------
# W, H, K2.5 (new_w, new_h, pad_w, pad_h, tokens), K3 (same)
SPEC_VECTORS = [
    (640, 480, (640, 480, 4, 24, 414), (640, 480, 4, 24, 414)),
    (1920, 1080, (1920, 1080, 12, 12, 2691), (1920, 1080, 12, 12, 2691)),
    (1024, 1024, (1024, 1024, 12, 12, 1369), (1024, 1024, 12, 12, 1369)),
    (4000, 3000, (2073, 1554, 27, 14, 4200), (4000, 3000, 4, 24, 15444)),
    (3840, 2160, (2392, 1345, 16, 27, 4214), (3840, 2160, 24, 24, 10764)),
    (9000, 4000, (2693, 1196, 23, 8, 4171), (5386, 2393, 18, 15, 16598)),
    (10000, 10000, (1792, 1792, 0, 0, 4096), (3585, 3585, 27, 27, 16641)),
    (2000, 20000, (568, 5685, 20, 27, 4284), (716, 7168, 12, 0, 6656)),
    (8366, 10, (7167, 8, 1, 20, 256), (7167, 8, 1, 20, 256)),
    (10000, 10, (7168, 7, 0, 21, 256), (7168, 7, 0, 21, 256)),
    (3, 5, (3, 5, 25, 23, 1), (3, 5, 25, 23, 1)),
    (29, 29, (29, 29, 27, 27, 4), (29, 29, 27, 27, 4)),
]


def as_tuple(d):
    return (d["new_width"], d["new_height"], d["pad_width"], d["pad_height"], d["num_tokens"])


@pytest.mark.parametrize("w,h,k25,k3", SPEC_VECTORS, ids=[f"{v[0]}x{v[1]}" for v in SPEC_VECTORS])
def test_spec_vectors(w, h, k25, k3):
    assert as_tuple(theirs(w, h, 16384)) == k25  # the reference itself
    assert as_tuple(theirs(w, h, 65536)) == k3
    assert as_tuple(ours(w, h, 16384)) == k25
    assert as_tuple(ours(w, h, 65536)) == k3


def test_return_type_is_plain_dict_of_ints():
    d = ours(640, 480, 16384)
    assert isinstance(d, dict)
    assert set(d) == KEYS
    for key, value in d.items():
        assert type(value) is int, (key, type(value))


def test_side_cap_lands_on_7167():
    # width * (7168 / width) is not always 7168: the f64 product must not be simplified
    assert ours(8366, 10, 16384)["new_width"] == 7167
    assert ours(8366, 10, 65536)["new_width"] == 7167
    assert ours(10000, 10, 16384)["new_width"] == 7168


def test_side_cap_7167_family():
    """Every width in 7169..30000 (height 10): the capped side equals the reference."""
    for L in PRESETS.values():
        for w in range(7169, 30001):
            assert ours(w, 10, L) == theirs(w, 10, L), w


def test_huge_size_exact_product():
    # pw*ph >= 2**53: the quotient must be formed from the exact product (spec section 2)
    w, h = 1_176_685_622, 1_898_098_090
    pw, ph = w // 14, h // 14
    assert pw * ph >= 2**53
    assert 16384 / (pw * ph) != 16384 / (float(pw) * float(ph))  # the trap is real
    for L in PRESETS.values():
        assert ours(w, h, L) == theirs(w, h, L)


def test_huge_random_sizes():
    rng = np.random.default_rng(2024)
    ws = np.exp(rng.uniform(np.log(2**20), np.log(2**31 - 1), 20000)).astype(np.int64)
    hs = np.exp(rng.uniform(np.log(2**20), np.log(2**31 - 1), 20000)).astype(np.int64)
    for L in PRESETS.values():
        for w, h in zip(ws.tolist(), hs.tolist()):
            assert ours(w, h, L) == theirs(w, h, L), (w, h, L)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_random_sizes_log_uniform(preset):
    """>= 100,000 random sizes per preset, log-uniform over 1..100000 per side."""
    L = PRESETS[preset]
    rng = np.random.default_rng(L)
    n = 110_000
    ws = np.exp(rng.uniform(0.0, np.log(100_000.5), n)).astype(np.int64)
    hs = np.exp(rng.uniform(0.0, np.log(100_000.5), n)).astype(np.int64)
    ws = np.clip(ws, 1, 100_000).tolist()
    hs = np.clip(hs, 1, 100_000).tolist()
    bad = []
    for w, h in zip(ws, hs):
        if ours(w, h, L) != theirs(w, h, L):
            bad.append((w, h))
            if len(bad) >= 10:
                break
    assert not bad, f"{preset}: navit_resize_config disagrees with the reference for {bad}"


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_small_sizes_exhaustive(preset):
    """Every size with both sides in 1..200, plus 1xN / Nx1 strips up to 20000."""
    L = PRESETS[preset]
    for w in range(1, 201):
        for h in range(1, 201):
            assert ours(w, h, L) == theirs(w, h, L), (w, h)
    for n in range(1, 20001, 7):
        assert ours(1, n, L) == theirs(1, n, L), (1, n)
        assert ours(n, 1, L) == theirs(n, 1, L), (n, 1)


def test_never_upscales_and_pads_to_28():
    rng = np.random.default_rng(7)
    for w, h in rng.integers(1, 20000, (5000, 2)).tolist():
        for L in PRESETS.values():
            d = ours(w, h, L)
            assert 1 <= d["new_width"] <= min(w, 7168)
            assert 1 <= d["new_height"] <= min(h, 7168)
            assert (d["new_width"] + d["pad_width"]) % 28 == 0
            assert (d["new_height"] + d["pad_height"]) % 28 == 0
            assert 0 <= d["pad_width"] < 28 and 0 <= d["pad_height"] < 28
            assert d["num_tokens"] == (d["new_width"] + d["pad_width"]) * (d["new_height"] + d["pad_height"]) // 784


def test_side_limit_assertion_becomes_value_error():
    msg = "token_width 256 * merge_kernel_size 2 > patch_limit_on_one_side 511"
    with pytest.raises(AssertionError, match=re.escape(msg)):
        theirs(10000, 100, 16384, S=511)
    with pytest.raises(ValueError, match=re.escape(msg)) as info:
        ours(10000, 100, 16384, S=511)
    assert str(info.value) == msg
    assert not isinstance(info.value, AssertionError)


def test_side_limit_assertion_height():
    msg = "token_height 256 * merge_kernel_size 2 > patch_limit_on_one_side 511"
    with pytest.raises(ValueError, match=re.escape(msg)):
        ours(100, 10000, 16384, S=511)


def test_side_limit_skipped_with_fixed_output_tokens():
    d = ours(10000, 100, 16384, S=511, fixed=64)
    assert d == theirs(10000, 100, 16384, S=511, fixed=64)
    assert d["num_tokens"] == 64


@pytest.mark.parametrize("fixed", [64, 64.0, 1, 5000])
def test_fixed_output_tokens_is_int(fixed):
    d = ours(1024, 768, 16384, fixed=fixed)
    assert d == theirs(1024, 768, 16384, fixed=fixed)
    assert type(d["num_tokens"]) is int and d["num_tokens"] == int(fixed)
    # the grid is not changed by fixed_output_tokens
    free = ours(1024, 768, 16384)
    assert {k: v for k, v in d.items() if k != "num_tokens"} == {k: v for k, v in free.items() if k != "num_tokens"}


def test_default_fixed_output_tokens_is_none():
    assert kimi_k3_rs.navit_resize_config(640, 480, 14, 2, 16384, 512) == theirs(640, 480, 16384)


@given(
    w=st.integers(1, 60000),
    h=st.integers(1, 60000),
    ps=st.integers(1, 40),
    m=st.integers(1, 4),
    L=st.integers(1, 300000),
    S=st.integers(1, 1100),
)
def test_generic_parameters(w, h, ps, m, L, S):
    """Any positive parameters: same dict, or the same side-limit message as ValueError."""
    try:
        expected = theirs(w, h, L, ps=ps, m=m, S=S)
    except AssertionError as exc:
        with pytest.raises(ValueError) as info:
            ours(w, h, L, ps=ps, m=m, S=S)
        assert str(info.value) == str(exc)
    else:
        assert ours(w, h, L, ps=ps, m=m, S=S) == expected


def test_zero_size_rejected():
    with pytest.raises((ValueError, ZeroDivisionError)):
        ours(0, 10, 16384)
    with pytest.raises((ValueError, ZeroDivisionError)):
        ours(10, 0, 16384)


# ---------------------------------------------------------------------------
# sizing math at the edges (property test: sizes and config integers up to 2**31 - 1)
# ---------------------------------------------------------------------------

EDGE_INTS = [1, 2, 3, 13, 14, 15, 27, 28, 29, 511, 512, 513, 2**16, 2**30, MAX_INT - 1, MAX_INT]
SIDES = st.one_of(st.integers(1, MAX_INT), st.sampled_from(EDGE_INTS), st.integers(1, 5000))
CONFIG_INTS = st.one_of(st.integers(1, MAX_INT), st.sampled_from(EDGE_INTS), st.integers(1, 64))
LIMITS = st.one_of(st.integers(1, 2**53), st.sampled_from([1, 2, 16384, 65536, 2**31 - 1, 2**53]), st.integers(1, 10**6))

SIZING_COUNT = {"examples": 0, "assertion_errors": 0}


@settings(max_examples=EXAMPLES)
@given(w=SIDES, h=SIDES, ps=CONFIG_INTS, m=CONFIG_INTS, limit=LIMITS, side=CONFIG_INTS,
       fixed=st.one_of(st.none(), st.integers(0, MAX_INT)))
@example(w=MAX_INT, h=MAX_INT, ps=1, m=1, limit=2**53, side=MAX_INT, fixed=None)
@example(w=MAX_INT, h=1, ps=MAX_INT, m=MAX_INT, limit=1, side=MAX_INT, fixed=None)
@example(w=8366, h=10, ps=14, m=2, limit=16384, side=512, fixed=None)
def _sizing_run(w, h, ps, m, limit, side, fixed):
    SIZING_COUNT["examples"] += 1
    media_proc_cfg = cfg("kimi_k25", patch_size=ps, merge_kernel_size=m, in_patch_limit=limit,
                         patch_limit_on_one_side=side, fixed_output_tokens=fixed)
    try:
        expected = reference.navit_resize_image(w, h, ps, m, limit, side, fixed)
    except AssertionError as exc:
        SIZING_COUNT["assertion_errors"] += 1
        with pytest.raises(kimi_k3_rs.KimiK3Error, match=f"^{re.escape(str(exc))}$"):
            kimi_k3_rs.navit_resize_config(w, h, ps, m, limit, side, fixed)
        with pytest.raises(kimi_k3_rs.KimiK3Error, match=f"^{re.escape(str(exc))}$"):
            kimi_k3_rs.count_image_tokens([[w, h]], media_proc_cfg)
        return
    assert kimi_k3_rs.navit_resize_config(w, h, ps, m, limit, side, fixed) == expected
    assert kimi_k3_rs.count_image_tokens([[w, h]], media_proc_cfg).tolist() == [expected["num_tokens"]]


def test_property_sizing_edges(record_property):
    """Sizes and config integers up to 2**31 - 1 (in_patch_limit up to 2**53): the
    reference's float64 result, or its assertion text, never a wrapped value."""
    for key in SIZING_COUNT:
        SIZING_COUNT[key] = 0
    _sizing_run()
    record(record_property, "property_sizing_edges", **SIZING_COUNT)


def test_sizing_past_the_edges_is_a_clear_error():
    for args in [(0, 5), (5, 0), (2**53 + 1, 5), (5, 2**64), (-1, 5)]:
        with pytest.raises(OK_ERRORS, match="width|height|size"):
            kimi_k3_rs.navit_resize_config(*args, 14, 2, 16384, 512)
    for key, value in [("patch_size", MAX_INT + 1), ("merge_kernel_size", 2**63), ("in_patch_limit", 2**53 + 1),
                       ("patch_limit_on_one_side", 2**64), ("fixed_output_tokens", MAX_INT + 1)]:
        with pytest.raises(kimi_k3_rs.ConfigError, match=key):
            kimi_k3_rs.count_image_tokens([[100, 100]], cfg("kimi_k25", **{key: value}))


@pytest.mark.parametrize("sizes", [[[2**64, 1]], [[1, -(2**63) - 1]], [[float("inf"), 1]], [[float("nan"), 1]],
                                   [[2**63 - 1, 1]], np.array([[2**64 - 1, 1]], np.uint64)])
def test_count_image_tokens_sizes_past_int64(sizes):
    """Sizes numpy cannot hold as int64 (or not integers at all): a ValueError or
    TypeError, never an OverflowError (found on ba66658, fixed in 5f02da5)."""
    with pytest.raises(OK_ERRORS):
        kimi_k3_rs.count_image_tokens(sizes, K25)


# ---------------------------------------------------------------------------
# count_image_tokens
# ---------------------------------------------------------------------------


def tokens_formula(sizes: np.ndarray, ps: int, m: int, limit: int, side: int) -> np.ndarray:
    """Vectorised float64 transcription of reference-spec section 2 (exact while pw*ph < 2**53)."""
    w = sizes[:, 0].astype(np.int64)
    h = sizes[:, 1].astype(np.int64)
    pw = np.maximum(1, w // ps)
    ph = np.maximum(1, h // ps)
    assert np.all(pw.astype(np.float64) * ph < 2.0**53)
    s1 = np.sqrt(limit / (pw * ph).astype(np.float64))
    s2 = (side * ps) / w.astype(np.float64)
    s3 = (side * ps) / h.astype(np.float64)
    scale = np.minimum(np.minimum(1.0, s1), np.minimum(s2, s3))
    new_w = np.minimum(np.maximum(1, np.trunc(w * scale).astype(np.int64)), side * ps)
    new_h = np.minimum(np.maximum(1, np.trunc(h * scale).astype(np.int64)), side * ps)
    f = m * ps
    return ((new_h + f - 1) // f) * ((new_w + f - 1) // f)


def random_sizes(seed: int, n: int = 200_000) -> np.ndarray:
    """Log-uniform widths / heights 1..2**20 (with extreme aspect ratios), plus a band
    around the K2.5 / K3 budgets and the per-side cap."""
    rng = np.random.default_rng(seed)
    sizes = np.exp(rng.uniform(0, math.log(2**20), (n, 2))).astype(np.int64)
    k, b = n // 4, n // 100
    sizes[:k] = rng.integers(1500, 4200, (k, 2))  # around the budgets' square sides
    sizes[k : k + b, 0] = rng.integers(7100, 7300, b)  # the side cap, 7167/7168
    sizes[k + b : k + 2 * b] = rng.integers(1, 60, (b, 2))  # tiny
    return sizes


@pytest.mark.parametrize("preset,seed", [("KIMI_K25_MEDIA_PROC_CFG", 1), ("KIMI_K3_MEDIA_PROC_CFG", 2)])
def test_count_image_tokens_random_sizes(preset, seed):
    media_proc_cfg = getattr(kimi_k3_rs, preset)
    limit = media_proc_cfg["in_patch_limit"]
    sizes = random_sizes(seed)
    counts = kimi_k3_rs.count_image_tokens(sizes, media_proc_cfg)
    assert counts.dtype == np.int64 and counts.shape == (len(sizes),)
    assert_bit_equal(counts, tokens_formula(sizes, 14, 2, limit, 512), "formula")
    # the reference's own Python arithmetic, every size
    ref = np.array([navit_resize_image(int(w), int(h), 14, 2, limit, 512, None)["num_tokens"] for w, h in sizes])
    assert_bit_equal(counts, ref, "reference")
    # navit_resize_config (one Python call per size: a 20,000-size sample)
    sample = np.random.default_rng(seed + 10).choice(len(sizes), 20_000, replace=False)
    for i in sample:
        w, h = (int(v) for v in sizes[i])
        rc = kimi_k3_rs.navit_resize_config(w, h, 14, 2, limit, 512)
        assert rc["num_tokens"] == counts[i], (w, h)
        # num_tokens == grid product / merge_kernel_size**2 (fixed_output_tokens None)
        gh, gw = (rc["new_height"] + rc["pad_height"]) // 14, (rc["new_width"] + rc["pad_width"]) // 14
        assert gh * gw == 4 * rc["num_tokens"], (w, h)


def check_against_reference(sizes):
    for preset in ("KIMI_K25_MEDIA_PROC_CFG", "KIMI_K3_MEDIA_PROC_CFG"):
        media_proc_cfg = getattr(kimi_k3_rs, preset)
        limit = media_proc_cfg["in_patch_limit"]
        counts = kimi_k3_rs.count_image_tokens(sizes, media_proc_cfg)
        for (w, h), got in zip(sizes.tolist(), counts.tolist()):
            want = navit_resize_image(w, h, 14, 2, limit, 512, None)
            assert got == want["num_tokens"], (w, h, preset)
            assert kimi_k3_rs.navit_resize_config(w, h, 14, 2, limit, 512) == want, (w, h, preset)


def test_count_image_tokens_huge_sizes():
    """Sides 2**20..2**36 (up to a 2**72 patch product): pw * ph passes 2**53, so the
    quotient must come from the exact product (reference-spec section 2)."""
    rng = np.random.default_rng(5)
    sizes = np.exp(rng.uniform(math.log(2**20), math.log(2**36), (2000, 2))).astype(np.int64)
    edges = [[1176685622, 1898098090], [2**53, 1], [1, 2**53], [2**53, 27], [2**31 - 1, 2**31 - 1],
             [14 * 2**36, 14 * (2**37 - 1)]]  # the last one: patch product just under 2**73
    check_against_reference(np.concatenate([sizes, np.array(edges, np.int64)]))


@pytest.mark.parametrize("w,h", [(2**53, 2**53), (14 * 2**36, 14 * 2**37), (14 * 2**40, 14 * 2**33), (2**50, 2**40)])
def test_sizing_up_to_2_53(w, h):
    check_against_reference(np.array([[w, h]], np.int64))


def test_count_image_tokens_input_forms():
    media_proc_cfg = kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG
    pairs = [[1920, 1080], [4000, 3000], [8366, 10], [3, 5], [2000, 20000]]
    want = [2691, 15444, 256, 1, 6656]  # reference-spec section 2 table (K3)
    arr = np.array(pairs)
    for sizes in (pairs, [tuple(p) for p in pairs], tuple(tuple(p) for p in pairs), arr,
                  arr.astype(np.int32), arr.astype(np.uint16), np.asfortranarray(arr),
                  arr[:, ::-1][:, ::-1], np.repeat(arr, 2, axis=0)[::2]):
        out = kimi_k3_rs.count_image_tokens(sizes, media_proc_cfg)
        assert out.dtype == np.int64 and out.tolist() == want
    # (width, height) order matters
    assert kimi_k3_rs.count_image_tokens(arr[:, ::-1], media_proc_cfg).tolist() == [
        navit_resize_image(h, w, 14, 2, 65536, 512, None)["num_tokens"] for w, h in pairs]
    empty = kimi_k3_rs.count_image_tokens(np.zeros((0, 2), np.int64), media_proc_cfg)
    assert empty.dtype == np.int64 and empty.shape == (0,)
    # a MediaProcConfig works as well as the dict
    validated = kimi_k3_rs.MediaProcConfig.from_dict(media_proc_cfg)
    assert kimi_k3_rs.count_image_tokens(pairs, validated).tolist() == want


@pytest.mark.parametrize("fixed", [0, 1, 64, 64.0, 100000])
def test_count_image_tokens_fixed_output_tokens(fixed):
    media_proc_cfg = cfg("kimi_k25", fixed_output_tokens=fixed)
    sizes = random_sizes(7, 5000)
    counts = kimi_k3_rs.count_image_tokens(sizes, media_proc_cfg)
    assert counts.tolist() == [int(fixed)] * len(sizes)
    for w, h in sizes[:200]:
        assert kimi_k3_rs.navit_resize_config(int(w), int(h), 14, 2, 16384, 512, fixed)["num_tokens"] == int(fixed)
    # the side-limit assertion is skipped too (odd patch_limit_on_one_side)
    odd = cfg("kimi_k25", fixed_output_tokens=fixed, patch_limit_on_one_side=511)
    assert kimi_k3_rs.count_image_tokens([[10000, 100]], odd).tolist() == [int(fixed)]


def test_count_image_tokens_side_limit_assertion():
    odd = cfg("kimi_k25", patch_limit_on_one_side=511)
    with pytest.raises(ValueError, match=exact("token_width 256 * merge_kernel_size 2 > patch_limit_on_one_side 511")):
        kimi_k3_rs.count_image_tokens([[100, 100], [10000, 100]], odd)


@pytest.mark.parametrize("sizes", [
    [[1, 2, 3]], [1, 2], 5, np.zeros((3, 2, 1), np.int64), np.zeros((2, 0), np.int64), [[[1, 2]]],
])
def test_count_image_tokens_bad_shapes(sizes):
    with pytest.raises(kimi_k3_rs.ImageError, match=r"\[n, 2\]"):
        kimi_k3_rs.count_image_tokens(sizes, kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)


@pytest.mark.parametrize("sizes", [[[0, 5]], [[5, 0]], [[0, 0]], [[-1, 5]], [[5, -7]],
                                   [[100, 100], [-(2**40), 3]], np.array([[3, 3], [1, 0]], np.int32)])
def test_count_image_tokens_zero_or_negative(sizes):
    with pytest.raises(kimi_k3_rs.ImageError):
        kimi_k3_rs.count_image_tokens(sizes, kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)


@pytest.mark.parametrize("sizes", [[[2**53 + 1, 5]], [[5, 2**62]]])
def test_count_image_tokens_over_2_53_is_an_image_error(sizes):
    with pytest.raises(kimi_k3_rs.ImageError):
        kimi_k3_rs.count_image_tokens(sizes, kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)


def test_per_image_num_tokens_is_grid_product_over_merge_squared():
    images = [noise(1300, 900, "RGB", 1), noise_array(29, 29, "RGB", 2), noise(8366, 10, "RGB", 3),
              noise(1, 1, "L", 4), noise(2000, 700, "RGBA", 5)]
    sizes = [[1300, 900], [29, 29], [8366, 10], [1, 1], [2000, 700]]
    for media_proc_cfg in (kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG, kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG,
                           cfg("kimi_k25", merge_kernel_size=4, in_patch_limit=3000),
                           cfg("kimi_k3", merge_kernel_size=1, patch_size=16, in_patch_limit=3000)):
        m = media_proc_cfg["merge_kernel_size"]
        enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs(images, media_proc_cfg)
        grid = enc.grid_thws
        assert enc.num_tokens == (grid[:, 1] * grid[:, 2] // m**2).tolist()
        assert np.all(grid[:, 1] * grid[:, 2] % m**2 == 0)
        assert kimi_k3_rs.count_image_tokens(sizes, media_proc_cfg).tolist() == enc.num_tokens
        if media_proc_cfg["patch_size"] == 14 and m == 2:
            assert_bit_equal(kimi_k3_rs.preprocess(images, media_proc_cfg)["grid_thws"], grid, "grid_thws")


# ---------------------------------------------------------------------------
# navit_resize_config size checks
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("w,h", [(0, 5), (5, 0), (0, 0), (-1, 5), (5, -1), (-(2**60), 3),
                                 (2**53 + 1, 5), (5, 2**53 + 1), (2**64, 2**64), (np.uint64(2**63), 5)])
def test_navit_resize_config_bad_sizes(w, h):
    with pytest.raises(kimi_k3_rs.ImageError, match="must be positive|must be at most 2\\*\\*53 pixels"):
        kimi_k3_rs.navit_resize_config(w, h, 14, 2, 16384, 512)


@pytest.mark.parametrize("w,h", [(1.0, 5), (5, 5.0), ("5", 5), (True, 5), (5, False), (None, 5),
                                 (np.float64(5), 5), (5, [5])])
def test_navit_resize_config_non_int(w, h):
    with pytest.raises(TypeError, match="must be an int"):
        kimi_k3_rs.navit_resize_config(w, h, 14, 2, 16384, 512)


def test_navit_resize_config_limits_and_numpy_ints():
    assert kimi_k3_rs.navit_resize_config(2**53, 1, 14, 2, 16384, 512) == navit_resize_image(
        2**53, 1, 14, 2, 16384, 512, None)
    assert kimi_k3_rs.navit_resize_config(1, 1, 14, 2, 16384, 512) == navit_resize_image(1, 1, 14, 2, 16384, 512, None)
    for t in (np.int8, np.int32, np.int64, np.uint16, np.uint64):
        assert kimi_k3_rs.navit_resize_config(t(100), t(77), 14, 2, 16384, 512) == navit_resize_image(
            100, 77, 14, 2, 16384, 512, None)
