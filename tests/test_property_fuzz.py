"""Hypothesis property tests against ``tests/reference.py`` and the fuzz harnesses (bad input never crashes).

* the property test: tiny images, random modes, configs and batch mixes, bit for
  bit against the reference (or the reference's error);
* fuzz harnesses over the Python API (every entry point, any value) and over
  mutated encoded files: a result or a ValueError / TypeError, never a crash,
  and the library keeps working.

Example counts: ``KIMI_HARDENING_EXAMPLES`` (default 2000) sets the examples of
the property tests (these and the sizing property test of ``test_geometry.py``);
the fuzz harnesses run a quarter of it. The long profile is run by hand (see
docs/hardening.md)::

    KIMI_HARDENING_EXAMPLES=50000 KIMI_HYPOTHESIS_PROFILE=slow \\
        python -m pytest tests/test_property_fuzz.py tests/test_geometry.py -k "property or fuzz" -s

Every hypothesis test prints (``-s``) and records (junit ``record_property``)
how many inputs it tried; ``KIMI_HARDENING_REPORT=path.json`` also appends the
counts to a JSON-lines file.

Known bugs found by the hardening tests (issue #6) are kept as ``xfail`` tests
(strict, see pyproject.toml): they start to fail, asking for the marker to be
removed, once the bug is fixed. They are listed in docs/hardening.md (findings
F1 ... F8).
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, Dict, List

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from PIL import Image

import kimi_k3_rs
from helpers import (
    BANDS,
    CLIP_MEAN,
    CLIP_STD,
    EXAMPLES,
    FUZZ_EXAMPLES,
    K3_CHESSBOARD,
    OK_ERRORS,
    REF_COMPAT,
    SEEDS,
    STRICT_DECODE,
    assert_output_matches,
    cfg,
    data_url,
    encode,
    from_pillow,
    mode_image,
    record,
    sanity_check,
    with_path,
)
from reference import reference_preprocess

# ---------------------------------------------------------------------------
# property test against the reference
# ---------------------------------------------------------------------------

MODES = ["L", "LA", "RGB", "RGBA", "P", "P+int_trns", "P+bytes_trns", "CMYK"]
LEVELS = np.array([0, 1, 2, 127, 128, 129, 253, 254, 255], np.uint8)


def _array(mode: str, w: int, h: int, seed: int, content: str) -> np.ndarray:
    rng = np.random.default_rng(seed)
    c = BANDS[mode]
    if content == "noise":
        a = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
    elif content == "levels":
        a = LEVELS[rng.integers(0, len(LEVELS), (h, w, c))]
    else:  # solid colour
        a = np.broadcast_to(rng.integers(0, 256, (1, 1, c), dtype=np.uint8), (h, w, c)).copy()
    if mode in ("LA", "RGBA"):  # alpha 0 and 255 common: both compositing branches
        a[..., -1] = np.array([0, 255, 0, 255, 37, 128, 200], np.uint8)[rng.integers(0, 7, (h, w))]
    return a[..., 0] if mode == "L" and rng.integers(0, 2) else a


@st.composite
def image_items(draw) -> Any:
    """One image input: a PIL image, a uint8 array (contiguous or a view) or PNG/TIFF bytes."""
    mode = draw(st.sampled_from(MODES))
    w, h = draw(st.integers(1, 48)), draw(st.integers(1, 48))
    seed = draw(st.integers(0, 2**32 - 1))
    if mode in BANDS:
        content = draw(st.sampled_from(["noise", "levels", "solid"]))
        a = _array(mode, w, h, seed, content)
        kind = draw(st.sampled_from(["pil", "array", "view", "png", "dict"]))
        if kind == "array":
            return a
        if kind == "view":  # a strided, non-contiguous view of a larger array
            big = np.zeros((h * 2, w * 2) + a.shape[2:], np.uint8)
            big[::2, ::2] = a
            return big[::2, ::2]
        img = Image.fromarray(np.ascontiguousarray(a[..., 0] if a.ndim == 3 and a.shape[2] == 1 else a))
        if kind == "png":
            return encode(img, "PNG")
        return {"type": "image", "image": img} if kind == "dict" else img
    img = mode_image(mode, w, h, seed)
    if draw(st.integers(0, 5)) == 0:
        return encode(img, "TIFF" if mode == "CMYK" else "PNG")
    return img


BG_CONFIGS = st.fixed_dictionaries(
    {},
    optional={
        "pattern": st.sampled_from(["chessboard", "white", "black", "gray"]),
        "chessboard_square_size": st.integers(1, 20),
        "chessboard_square_on_top_left": st.booleans(),
        "chessboard_white_value": st.integers(0, 255),
        "chessboard_gray_value": st.integers(0, 255),
    },
)
MEANS = st.one_of(
    st.sampled_from([[0.5, 0.5, 0.5], CLIP_MEAN, [0.0, 0.0, 0.0]]),
    st.lists(st.floats(-1.0, 2.0), min_size=3, max_size=3),
)
STDS = st.one_of(
    st.sampled_from([[0.5, 0.5, 0.5], CLIP_STD, [1.0, 1.0, 1.0]]),
    st.lists(st.one_of(st.floats(0.01, 2.0), st.floats(-2.0, -0.01)), min_size=3, max_size=3),
)


@st.composite
def media_proc_cfgs(draw) -> Dict[str, Any]:
    out = cfg(draw(st.sampled_from(["kimi_k25", "kimi_k3"])))
    out["patch_size"] = draw(st.one_of(st.just(14), st.integers(1, 16)))
    out["merge_kernel_size"] = draw(st.integers(1, 3))
    out["in_patch_limit"] = draw(st.integers(1, 700))  # small: most images are resized
    out["patch_limit_on_one_side"] = draw(st.one_of(st.just(512), st.integers(1, 64)))
    out["image_mean"] = draw(MEANS)
    out["image_std"] = draw(STDS)
    out["fixed_output_tokens"] = draw(st.one_of(st.none(), st.integers(0, 5000)))
    bg = draw(st.one_of(st.none(), st.just(K3_CHESSBOARD), BG_CONFIGS))
    out["transparent_bg_config"] = copy.deepcopy(bg)
    stage = draw(st.sampled_from(["before_resize", "after_resize", None]))
    if stage is None:
        out.pop("transparent_bg_fill_stage", None)  # the reference's default, before_resize
    else:
        out["transparent_bg_fill_stage"] = stage
    return out


def _snapshot(item: Any) -> Any:
    """What an input looks like, to check that a call leaves it unchanged."""
    if isinstance(item, dict):
        return _snapshot(item["image"])
    if isinstance(item, np.ndarray):
        return item.copy()
    if isinstance(item, Image.Image):
        return (item.mode, item.size, item.tobytes(), dict(item.info))
    return item


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b)
    return a == b


def _reference_or_errors(images: List[Any], media_proc_cfg: Dict[str, Any]):
    """``(ref, None)`` or ``(None, {side-limit texts of the failing images})``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pillow's warning for P + bytes transparency
        try:
            return reference_preprocess(images, media_proc_cfg), None
        except AssertionError:
            texts = set()
            for item in images:
                try:
                    reference_preprocess([item], media_proc_cfg)
                except AssertionError as exc:
                    texts.add(str(exc))
            return None, texts


PROPERTY_COUNT = {"examples": 0, "images": 0, "side_limit_errors": 0}


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    images=st.lists(image_items(), min_size=1, max_size=4),
    media_proc_cfg=media_proc_cfgs(),
    num_threads=st.sampled_from([1, 1, 2, 3]),
    compat=st.sampled_from(["auto", REF_COMPAT]),
)
# Regression examples (kept from the runs; see docs/hardening.md).
@example(images=[np.zeros((1, 1), np.uint8)], media_proc_cfg=cfg("kimi_k25", patch_size=1, merge_kernel_size=1,
                                                                   in_patch_limit=1, patch_limit_on_one_side=1),
         num_threads=2, compat="auto")
@example(images=[np.full((48, 1, 4), 255, np.uint8), np.zeros((1, 48, 2), np.uint8)],
         media_proc_cfg=cfg("kimi_k3", in_patch_limit=1, patch_limit_on_one_side=3), num_threads=3, compat="auto")
def _property_run(images, media_proc_cfg, num_threads, compat):
    PROPERTY_COUNT["examples"] += 1
    PROPERTY_COUNT["images"] += len(images)
    before = [_snapshot(item) for item in images]
    ref, side_errors = _reference_or_errors(images, media_proc_cfg)
    if ref is None:
        PROPERTY_COUNT["side_limit_errors"] += 1
        with pytest.raises(kimi_k3_rs.KimiK3Error) as info:
            kimi_k3_rs.preprocess(images, media_proc_cfg, num_threads=num_threads, pillow_compat=compat)
        assert str(info.value) in side_errors, (str(info.value), side_errors)
    else:
        out = kimi_k3_rs.preprocess(images, media_proc_cfg, num_threads=num_threads, pillow_compat=compat)
        assert_output_matches(out, ref)
    for item, snap in zip(images, before):
        assert _same(_snapshot(item), snap), "the call changed its input"


def test_property_against_reference(record_property):
    """Random tiny images (1..48 px, modes L/LA/RGB/RGBA/P/CMYK, arrays, views, PIL,
    PNG/TIFF bytes, media dicts), random configs (patch sizes, merge sizes, small
    in_patch_limit, side caps incl. odd ones, backgrounds, stages, CLIP and random
    mean/std, fixed tokens) and batches of 1..4: bit-equal to the reference, the
    side-limit assertion as KimiK3Error with the reference's text, inputs unchanged."""
    for key in PROPERTY_COUNT:
        PROPERTY_COUNT[key] = 0
    _property_run()
    record(record_property, "property_against_reference", **PROPERTY_COUNT)
    assert PROPERTY_COUNT["examples"] >= min(EXAMPLES, 100)


# ---------------------------------------------------------------------------
# fuzz harnesses (hypothesis) over the Python API and over encoded files
# ---------------------------------------------------------------------------

ARRAY_DTYPES = [np.uint8] * 6 + [np.int8, np.uint16, np.int32, np.float32, np.float64, bool, np.complex64, object]
PIL_KINDS = sorted(set(["L", "LA", "RGB", "RGBA"]) | set(
    ["P", "P+int_trns", "P+bytes_trns", "P+rgba_palette", "1", "1+trns", "L+trns", "RGB+trns", "CMYK", "I;16",
     "I;16+trns", "I;16B", "I", "F", "RGBX", "YCbCr", "HSV", "LAB", "PA", "RGBa", "La"]))


@st.composite
def fuzz_arrays(draw) -> np.ndarray:
    ndim = draw(st.integers(0, 5))
    dims = st.one_of(st.integers(0, 6), st.integers(7, 60))
    shape = tuple(draw(dims) for _ in range(ndim))
    if ndim == 3 and draw(st.booleans()):
        shape = shape[:2] + (draw(st.integers(1, 4)),)
    assume(int(np.prod(shape, dtype=np.int64)) <= 60 * 60 * 8)
    dtype = draw(st.sampled_from(ARRAY_DTYPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a = rng.integers(0, 256, shape).astype(dtype) if dtype is not object else np.empty(shape, object)
    view = draw(st.sampled_from(["as-is", "reversed", "transposed", "readonly", "fortran"]))
    if view == "reversed" and a.ndim:
        a = a[::-1]
    elif view == "transposed" and a.ndim >= 2:
        a = a.swapaxes(0, 1)
    elif view == "readonly":
        a.flags.writeable = False
    elif view == "fortran":
        a = np.asfortranarray(a)
    return a


@st.composite
def fuzz_pil(draw) -> Image.Image:
    kind = draw(st.sampled_from(PIL_KINDS))
    w, h = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**16))
    if kind in BANDS:
        a = _array(kind, w, h, seed, "noise")
        return Image.fromarray(a[..., 0] if a.ndim == 3 and a.shape[2] == 1 else a)
    return mode_image(kind, w, h, seed)


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
                    st.text(max_size=12), st.binary(max_size=80), st.just(...), st.just(object()),
                    st.complex_numbers(allow_nan=True))

def _prefix(data: bytes, n: int) -> bytes:
    return data[:n]


def _seed(name: str) -> bytes:
    return SEEDS[name]


SEED_BYTES = st.sampled_from(sorted(SEEDS)).map(_seed)
FUZZ_ITEMS = st.recursive(
    st.one_of(SCALARS, fuzz_arrays(), fuzz_pil(), st.builds(data_url, st.binary(max_size=60)), SEED_BYTES,
              st.builds(_prefix, SEED_BYTES, st.integers(0, 400))),
    lambda inner: st.one_of(
        st.fixed_dictionaries({"type": st.sampled_from(["image", "video", "audio", 1]), "image": inner},
                              optional={"content_hash": SCALARS}),
        st.lists(inner, max_size=3),
    ),
    max_leaves=4,
)

#: Config values of every type; large *valid* patch sizes are left out on
#: purpose (a 1x1 image then asks for exabytes: F1, tested above).
WEIRD_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 40), st.sampled_from([0, -1, 2**31 - 1, 2**31, 2**53 + 1, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
    st.lists(st.one_of(st.floats(allow_nan=True), st.integers(-2, 2), st.text(max_size=2)), max_size=4),
    st.sampled_from(["chessboard", "white", "black", "gray", "before_resize", "after_resize"]),
    st.dictionaries(st.sampled_from(list(K3_CHESSBOARD) + ["colour"]), st.integers(-1, 300), max_size=3),
)
SAFE_SIZE_KEYS = {"patch_size": 64, "merge_kernel_size": 8}
CONFIG_KEYS = ["patch_size", "merge_kernel_size", "in_patch_limit", "patch_limit_on_one_side", "image_mean",
               "image_std", "fixed_output_tokens", "transparent_bg_config", "transparent_bg_fill_stage",
               "transparent_bg_config.pattern", "transparent_bg_config.chessboard_square_size",
               "transparent_bg_config.chessboard_white_value", "transparent_bg_config.chessboard_square_on_top_left"]


@st.composite
def fuzz_configs(draw) -> Any:
    if draw(st.integers(0, 30)) == 30:
        return draw(SCALARS)
    out = cfg(draw(st.sampled_from(["kimi_k25", "kimi_k3"])), in_patch_limit=draw(st.integers(1, 2000)))
    if draw(st.booleans()):
        out["transparent_bg_fill_stage"] = draw(st.sampled_from(["before_resize", "after_resize"]))
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2, 3]))):
        key = draw(st.sampled_from(CONFIG_KEYS + ["__delete__"]))
        if key == "__delete__":
            out.pop(draw(st.sampled_from(CONFIG_KEYS[:9])), None)
            continue
        value = draw(WEIRD_VALUES)
        bound = SAFE_SIZE_KEYS.get(key)
        if bound is not None and isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 2**31 - 1:
            value = min(value, bound)
        if "." in key and not isinstance(out.get("transparent_bg_config"), dict):
            out["transparent_bg_config"] = dict(K3_CHESSBOARD)
        out = with_path(out, key, value)
    return out


OPTION_VALUES = {
    "num_threads": st.sampled_from([None, 1, 2, 3, 0, -1, 1025, 2.0, "2", True]),
    "dtype": st.sampled_from(["float32", "bfloat16", "float16", "float64", None, 1]),
    "pillow_compat": st.sampled_from(["auto", "12", "12.2", "13", "14", "12.3", None, 13]),
    # never None here: a forged header must not be decoded (the bomb tests cover None)
    "max_image_pixels": st.sampled_from([10**6, 1, 100, 0, -1, 1.5, "x", True]),
    "exif_transpose": st.sampled_from([False, True, 1, None]),
}
VALID_OPTION_VALUES = {
    "num_threads": st.sampled_from([None, 1, 2, 3]),
    "dtype": st.sampled_from(["float32", "bfloat16", "float16"]),
    "pillow_compat": st.sampled_from(["auto", "12", "12.2", "13"]),
    "max_image_pixels": st.sampled_from([10**6, 10**7, 100]),
    "exif_transpose": st.booleans(),
}
FUZZ_OPTIONS = st.one_of(st.fixed_dictionaries({}, optional=VALID_OPTION_VALUES),
                         st.fixed_dictionaries({}, optional=OPTION_VALUES))
#: half valid images (any mix), half anything
FUZZ_BATCHES = st.one_of(st.lists(image_items(), min_size=0, max_size=3), FUZZ_ITEMS)
ENTRY_POINTS = ["preprocess", "processor", "prepare", "count_image_tokens", "navit_resize_config"]


def _call_entry(entry: str, items: Any, media_proc_cfg: Any, options: Dict[str, Any], ints: List[Any]) -> Any:
    if entry == "preprocess":
        out = kimi_k3_rs.preprocess(items, media_proc_cfg, **options)
        pv, grid = out["pixel_values"], out["grid_thws"]
        assert grid.ndim == 2 and grid.shape[1] == 3 and grid.dtype == np.int64
        assert pv.ndim == 4 and pv.shape[1] == 3 and pv.shape[2] == pv.shape[3]
        assert pv.shape[0] == int(grid.prod(axis=1).sum()) if len(grid) else pv.shape[0] == 0
        return out
    if entry == "processor":
        return kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg, **options).preprocess(items)
    if entry == "prepare":
        enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs(items, media_proc_cfg, **options)
        parts = enc.materialize()
        assert [p.shape[0] for p in parts] == [int(g[1] * g[2]) for g in enc.grid_thws]
        return parts
    if entry == "count_image_tokens":
        return kimi_k3_rs.count_image_tokens([ints[:2]] if len(ints) >= 2 else ints, media_proc_cfg)
    defaults = [100, 100, 14, 2, 16384, 512]
    return kimi_k3_rs.navit_resize_config(*(ints[:6] + defaults[len(ints[:6]):]))


API_FUZZ_COUNT = {"examples": 0, "returned": 0, "value_or_type_errors": 0, "pillow_leaks": 0}


@settings(max_examples=FUZZ_EXAMPLES, suppress_health_check=list(HealthCheck))
@given(
    entry=st.sampled_from(ENTRY_POINTS),
    items=FUZZ_BATCHES,
    media_proc_cfg=fuzz_configs(),
    options=FUZZ_OPTIONS,
    ints=st.lists(st.one_of(st.integers(-(2**65), 2**65), st.integers(0, 5000), st.floats(), st.none()),
                  min_size=0, max_size=7),
)
def _api_fuzz_run(entry, items, media_proc_cfg, options, ints):
    API_FUZZ_COUNT["examples"] += 1
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _call_entry(entry, items, media_proc_cfg, options, ints)
        API_FUZZ_COUNT["returned"] += 1
    except OK_ERRORS:
        API_FUZZ_COUNT["value_or_type_errors"] += 1
    except Exception as exc:
        if from_pillow(exc) and not STRICT_DECODE:
            API_FUZZ_COUNT["pillow_leaks"] += 1  # lenient mode only (F3, F8)
            return
        raise


def test_api_fuzz_never_crashes(record_property):
    """Arbitrary objects, arrays of any dtype / shape / layout, PIL images of every
    mode, encoded and truncated files, data URLs, media dicts, nested lists, configs
    with values of any type and options of any value, on every entry point: a result
    or a ValueError / TypeError, never a panic, crash or hang; then the library works."""
    for key in API_FUZZ_COUNT:
        API_FUZZ_COUNT[key] = 0
    _api_fuzz_run()
    record(record_property, "api_fuzz", **API_FUZZ_COUNT)
    sanity_check()


MUTATIONS = st.lists(
    st.tuples(st.sampled_from(["truncate", "flip", "flip", "set", "set", "delete", "insert", "int32"]),
              st.integers(0, 2**16), st.integers(0, 255)),
    min_size=1, max_size=3,
)
INT32_EDGES = [b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\x00\x01\x00\x00"]


def _mutate(data: bytes, mutations) -> bytes:
    b = bytearray(data)
    for op, pos, val in mutations:
        if not b:
            break
        i = pos % len(b)
        if op == "truncate":
            del b[i:]
        elif op == "flip":
            b[i] ^= 1 << (val % 8)
        elif op == "set":
            b[i] = val
        elif op == "delete":
            del b[i:i + 1 + val % 32]
        elif op == "insert":
            b[i:i] = bytes([val]) * (1 + val % 16)
        else:
            b[i:i + 4] = INT32_EDGES[val % len(INT32_EDGES)]
    return bytes(b)


DECODE_FUZZ_COUNT = {"examples": 0, "decoded": 0, "value_or_type_errors": 0, "pillow_leaks": 0}


@settings(max_examples=FUZZ_EXAMPLES, suppress_health_check=list(HealthCheck))
@given(seed=st.sampled_from(sorted(SEEDS)), mutations=MUTATIONS, k3=st.booleans(), prepare=st.booleans())
def _decode_fuzz_run(seed, mutations, k3, prepare):
    DECODE_FUZZ_COUNT["examples"] += 1
    data = _mutate(SEEDS[seed], mutations)
    media_proc_cfg = cfg("kimi_k3" if k3 else "kimi_k25", in_patch_limit=6)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if prepare:
                enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([data], media_proc_cfg, max_image_pixels=10**6)
                pv = enc.materialize()[0]
                out = {"pixel_values": pv, "grid_thws": enc.grid_thws}
            else:
                out = kimi_k3_rs.preprocess(data, media_proc_cfg, max_image_pixels=10**6)
    except OK_ERRORS:
        DECODE_FUZZ_COUNT["value_or_type_errors"] += 1
        return
    except Exception as exc:
        if from_pillow(exc) and not STRICT_DECODE:
            DECODE_FUZZ_COUNT["pillow_leaks"] += 1  # lenient mode only (F3, F8)
            return
        raise
    DECODE_FUZZ_COUNT["decoded"] += 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ref = reference_preprocess(data, media_proc_cfg)
        except Exception:
            return  # the reference fails on it where the library does not (e.g. a load error on a re-read)
    assert_output_matches(out, ref)


def test_decode_fuzz_mutated_files(record_property):
    """Mutated encoded files of 13 formats (truncations, bit flips, int32 edges,
    insertions, deletions), through preprocess or prepare + materialize: the
    reference's result, or a ValueError / TypeError."""
    for key in DECODE_FUZZ_COUNT:
        DECODE_FUZZ_COUNT[key] = 0
    _decode_fuzz_run()
    record(record_property, "decode_fuzz", **DECODE_FUZZ_COUNT)
    sanity_check()
