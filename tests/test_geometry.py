"""``kimi_k3_rs.navit_resize_config`` against the HF sizing expression (spec section 2)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kimi_k3_rs
from reference import navit_resize_image

KEYS = {"num_tokens", "new_width", "new_height", "pad_width", "pad_height"}
PRESETS = {"kimi_k25": 16384, "kimi_k3": 65536}


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
