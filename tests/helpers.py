"""Shared, import-only helpers of the test suite (no kimi_k3_rs import here).

Input builders, the published configs as the spec states them, case loading,
exact-comparison helpers and what the hardening tests share (``sanity_check``
imports kimi_k3_rs when it is called).  ``conftest.py`` exposes some of them as
fixtures; test modules import them directly (``tests/`` is on ``sys.path``).
"""

from __future__ import annotations

import base64
import copy
import functools
import io
import json
import os
import re
import struct
import sys
import traceback
import zlib
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import pytest
from PIL import Image, UnidentifiedImageError

import reference

TESTS_DIR = Path(__file__).resolve().parent
DATA_DIR = TESTS_DIR / "data"
REPO_DIR = TESTS_DIR.parent
ROCKET = REPO_DIR / "python" / "kimi_k3_rs" / "data" / "rocket.jpg"
PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "camera.png"]
#: The reported cases: the project's shared copy beside the checkout when there is
#: one (CI lays it there), else the copy vendored in tests/data (a plain clone).
_SHARED_CASES = Path(__file__).resolve().parents[2] / "shared" / "cases" / "reported-cases.json"
CASES_JSON = _SHARED_CASES if _SHARED_CASES.is_file() else DATA_DIR / "reported-cases.json"

#: the pillow_compat value the reference reproduces (the installed Pillow)
REF_COMPAT = reference.PILLOW_COMPAT

# ---------------------------------------------------------------------------
# Published configs, written out from reference-spec.md section 1 (not taken
# from the package, so that the presets can be checked against them).
# ---------------------------------------------------------------------------

K3_CHESSBOARD = {
    "pattern": "chessboard",
    "chessboard_square_size": 8,
    "chessboard_square_on_top_left": True,
    "chessboard_white_value": 255,
    "chessboard_gray_value": 180,
}

#: the image keys of both presets (spec section 1 table)
K25_IMAGE_KEYS: Dict[str, Any] = {
    "patch_size": 14,
    "merge_kernel_size": 2,
    "in_patch_limit": 16384,
    "patch_limit_on_one_side": 512,
    "fixed_output_tokens": None,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}
K3_IMAGE_KEYS: Dict[str, Any] = {
    **K25_IMAGE_KEYS,
    "in_patch_limit": 65536,
    "transparent_bg_config": K3_CHESSBOARD,
    "transparent_bg_fill_stage": "after_resize",
}

K25_CFG: Dict[str, Any] = {
    **K25_IMAGE_KEYS,
    "in_patch_limit_each_frame": 4096,
    "in_patch_limit_video": None,
    "sample_fps": 2.0,
    "max_num_frames_each_video": None,
    "temporal_merge_kernel_size": 4,
    "timestamp_mode": "hh:mm:ss.fff",
    "config_type": "media_proc.processors.moonvit.MoonViTMediaProcessorConfig",
}
K3_CFG: Dict[str, Any] = {
    **K3_IMAGE_KEYS,
    "in_patch_limit_each_frame": 16384,
    "sample_fps": 8.0,
    "temporal_merge_kernel_size": 4,
    "config_type": "media_proc.processors.moonvit.MoonViTMediaProcessorConfig",
}

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

PROFILES = {"kimi_k25": K25_CFG, "kimi_k3": K3_CFG}


def cfg(base: str = "kimi_k25", **overrides: Any) -> Dict[str, Any]:
    """A fresh copy of a published config with keys replaced / added."""
    out = copy.deepcopy(PROFILES[base])
    out.update(copy.deepcopy(overrides))
    return out


def k3_before(**overrides: Any) -> Dict[str, Any]:
    return cfg("kimi_k3", transparent_bg_fill_stage="before_resize", **overrides)


# ---------------------------------------------------------------------------
# Input builders
# ---------------------------------------------------------------------------

BANDS = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}


def noise_array(w: int, h: int, mode: str = "RGB", seed: int = 0) -> np.ndarray:
    """README noise recipe, as an array (L: 2-D)."""
    c = BANDS[mode]
    a = np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)
    if mode == "L":
        a = a[..., 0]
    return a


def pil(a: np.ndarray, mode: Optional[str] = None) -> Image.Image:
    """``Image.fromarray`` with the mode implied by the array (checked)."""
    img = Image.fromarray(np.ascontiguousarray(a))
    if mode is not None:
        assert img.mode == mode, (img.mode, mode)
    return img


def noise(w: int, h: int, mode: str = "RGB", seed: int = 0) -> Image.Image:
    """README noise recipe: ``default_rng(seed).integers(0,256,(h,w,c))`` -> PIL."""
    return pil(noise_array(w, h, mode, seed), mode)


def solid(w: int, h: int, rgb: Sequence[int], mode: str = "RGB") -> Image.Image:
    return Image.new(mode, (w, h), tuple(rgb) if len(rgb) > 1 else rgb[0])


def hgradient(w: int, h: int, mode: str = "RGB") -> Image.Image:
    """R=G=B=floor(x*255/(w-1))."""
    row = (np.arange(w, dtype=np.int64) * 255 // max(w - 1, 1)).astype(np.uint8)
    g = np.broadcast_to(row[None, :], (h, w))
    if mode == "L":
        return pil(g, "L")
    return pil(np.repeat(g[:, :, None], 3, axis=2), "RGB")


def vgradient(w: int, h: int, mode: str = "RGB") -> Image.Image:
    """R=G=B=floor(y*255/(h-1))."""
    col = (np.arange(h, dtype=np.int64) * 255 // max(h - 1, 1)).astype(np.uint8)
    g = np.broadcast_to(col[:, None], (h, w))
    if mode == "L":
        return pil(g, "L")
    return pil(np.repeat(g[:, :, None], 3, axis=2), "RGB")


def color_gradient(w: int, h: int) -> np.ndarray:
    """A smooth RGB test card (distinct channels), uint8 HxWx3."""
    y, x = np.mgrid[0:h, 0:w].astype(np.int64)
    r = x * 255 // max(w - 1, 1)
    g = y * 255 // max(h - 1, 1)
    b = ((x + y) * 255 // max(w + h - 2, 1)) ^ ((x // 7) & 1) * 40
    return np.stack([r, g, b], axis=2).astype(np.uint8)


def alpha_pattern_rgba(w: int, h: int, seed: int = 0, levels: Sequence[int] = (0, 37, 128, 255)) -> Image.Image:
    """RGBA noise whose alpha takes only the given levels, in blocks and stripes."""
    rng = np.random.default_rng(seed)
    rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    y, x = np.mgrid[0:h, 0:w]
    idx = ((x // 5) + (y // 3) * 3) % len(levels)
    alpha = np.asarray(levels, dtype=np.uint8)[idx]
    return pil(np.dstack([rgb, alpha]), "RGBA")


def alpha_pattern_la(w: int, h: int, seed: int = 0, levels: Sequence[int] = (0, 37, 128, 255)) -> Image.Image:
    rng = np.random.default_rng(seed)
    lum = rng.integers(0, 256, (h, w), dtype=np.uint8)
    y, x = np.mgrid[0:h, 0:w]
    idx = ((x // 4) + (y // 6)) % len(levels)
    alpha = np.asarray(levels, dtype=np.uint8)[idx]
    return pil(np.dstack([lum, alpha]), "LA")


def photo(name: str) -> Image.Image:
    path = ROCKET if name == "rocket.jpg" else DATA_DIR / name
    img = Image.open(path)
    img.load()
    return img


def upscale(img: Image.Image, factor: int) -> Image.Image:
    """A larger copy made by Pillow (so the published presets really resize)."""
    return img.resize((img.width * factor, img.height * factor), Image.Resampling.BICUBIC)


def encode(img: Image.Image, fmt: str, **kw: Any) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def photo_rgb(w: int, h: int) -> Image.Image:
    """The astronaut photo in RGB, resized (bicubic) to ``w`` x ``h``."""
    return photo("astronaut.png").convert("RGB").resize((w, h), Image.Resampling.BICUBIC)


@functools.lru_cache(maxsize=None)
def native_files() -> Dict[str, bytes]:
    """Files the native decoders take (issue #12), by name: a 700x525 photo as JPEG
    (baseline 4:2:0, progressive 4:4:4, grey; 37x1203 at 4:2:2) and as PNG (RGB, RGBA
    and LA with varied alpha; grey at 1242x269)."""
    rgb = photo_rgb(700, 525)
    rgba = rgb.convert("RGBA")
    rgba.putalpha(Image.linear_gradient("L").resize(rgb.size))
    la = rgba.convert("LA")
    return {
        "jpeg-420": encode(rgb, "JPEG", quality=90, subsampling=2),
        "jpeg-444-progressive": encode(rgb, "JPEG", quality=95, subsampling=0, progressive=True),
        "jpeg-L": encode(rgb.convert("L"), "JPEG", quality=80),
        "jpeg-odd": encode(rgb.resize((37, 1203)), "JPEG", quality=70, subsampling=1),
        "png-rgb": encode(rgb, "PNG"),
        "png-rgba": encode(rgba, "PNG"),
        "png-la": encode(la, "PNG"),
        "png-l": encode(rgb.convert("L").resize((1242, 269)), "PNG", compress_level=1),
    }


@functools.lru_cache(maxsize=None)
def pillow_files() -> Dict[str, bytes]:
    """Files the native decoders must not take, by name: each goes to Pillow, with the
    same result (a CMYK JPEG, a palette PNG with tRNS, a 16-bit PNG, a lossless WebP)."""
    return {
        "jpeg-cmyk": encode(photo_rgb(120, 90).convert("CMYK"), "JPEG"),
        "png-p-trns": encode(photo_rgb(120, 90).quantize(64), "PNG", transparency=3),
        "png-rgb16": encode(photo_rgb(64, 48).convert("I;16"), "PNG"),
        "webp": encode(photo_rgb(120, 90), "WEBP", lossless=True),
    }


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def bomb_png(w: int = 100000, h: int = 100000) -> bytes:
    """R19: a 65-byte PNG whose header claims w x h RGB (empty IDAT)."""
    return (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + png_chunk(b"IDAT", zlib.compress(b""))
        + png_chunk(b"IEND", b"")
    )


# ---------------------------------------------------------------------------
# Reported cases
# ---------------------------------------------------------------------------


def load_cases() -> List[Dict[str, Any]]:
    with open(CASES_JSON, encoding="utf-8") as f:
        return json.load(f)


def cases_by_id() -> Dict[str, Dict[str, Any]]:
    return {c["id"]: c for c in load_cases()}


def apply_overrides(base: Dict[str, Any], overrides: Dict[str, Any]) -> Dict[str, Any]:
    """Apply a case's ``cfg_overrides`` (``__delete__``, ``__media_proc_cfg__``)."""
    if "__media_proc_cfg__" in overrides:
        out = copy.deepcopy(overrides["__media_proc_cfg__"])
    else:
        out = copy.deepcopy(base)
    for key in overrides.get("__delete__", []):
        out.pop(key, None)
    for key, value in overrides.items():
        if key.startswith("__") and key.endswith("__"):
            continue
        out[key] = copy.deepcopy(value)
    return out


def case_cfg(case: Dict[str, Any], profile: Optional[str] = None) -> Dict[str, Any]:
    profile = profile or case["profile"]
    assert isinstance(profile, str)
    return apply_overrides(PROFILES[profile], case["cfg_overrides"])


# ---------------------------------------------------------------------------
# Output helpers
# ---------------------------------------------------------------------------


def grid_rows(grid_thws: Any) -> List[int]:
    return [int(t) * int(h) * int(w) for t, h, w in np.asarray(grid_thws).tolist()]


def split_by_grid(pixel_values: np.ndarray, grid_thws: Any) -> List[np.ndarray]:
    out = []
    start = 0
    for rows in grid_rows(grid_thws):
        out.append(pixel_values[start : start + rows])
        start += rows
    assert start == pixel_values.shape[0]
    return out


def pixel_at(pixel_values: np.ndarray, grid_thws: Any, x: int, y: int, index: int = 0) -> np.ndarray:
    """The 3 normalised channel values at column x, row y of image ``index``
    of a batch, read through the patch layout of spec section 3.5."""
    ps = pixel_values.shape[-1]
    block = split_by_grid(pixel_values, grid_thws)[index]
    t, gh, gw = (int(v) for v in np.asarray(grid_thws)[index])
    assert 0 <= y < gh * ps and 0 <= x < gw * ps
    n = (y // ps) * gw + (x // ps)
    return block[n, :, y % ps, x % ps]


def unpatchify(pixel_values: np.ndarray, grid_thw: Any) -> np.ndarray:
    """Inverse of the patch layout for one image: ``(Hp, Wp, 3)`` float32."""
    t, gh, gw = (int(v) for v in grid_thw)
    ps = pixel_values.shape[-1]
    x = pixel_values.reshape(t, gh, gw, 3, ps, ps).transpose(0, 1, 4, 2, 5, 3)
    return x.reshape(t, gh * ps, gw * ps, 3)[0]


def describe_mismatch(actual: np.ndarray, expected: np.ndarray) -> str:
    if actual.shape != expected.shape:
        return f"shape {actual.shape} != {expected.shape}"
    a = actual.view(np.uint32) if actual.dtype == np.float32 else actual
    e = expected.view(np.uint32) if expected.dtype == np.float32 else expected
    diff = np.argwhere(a != e)
    first = tuple(int(v) for v in diff[0]) if len(diff) else None
    msg = f"{len(diff)} of {a.size} values differ; first at {first}"
    if first is not None:
        msg += f": got {actual[first]!r}, expected {expected[first]!r}"
        msg += f"; max |diff| = {float(np.max(np.abs(actual.astype(np.float64) - expected))):.6g}"
    return msg


def assert_bit_equal(actual: Any, expected: np.ndarray, what: str = "pixel_values") -> None:
    actual = np.asarray(actual)
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if not np.array_equal(actual.view(np.uint8) if actual.dtype == np.float32 else actual,
                          expected.view(np.uint8) if expected.dtype == np.float32 else expected):
        raise AssertionError(f"{what}: {describe_mismatch(actual, expected)}")


def assert_output_matches(out: Any, ref: Tuple[np.ndarray, np.ndarray]) -> None:
    """``out`` (mapping from kimi_k3_rs) equals the reference bit for bit."""
    ref_pv, ref_grid = ref
    ps = ref_pv.shape[-1]
    pv = out["pixel_values"]
    grid = out["grid_thws"]
    assert isinstance(pv, np.ndarray) and isinstance(grid, np.ndarray)
    assert pv.dtype == np.float32, pv.dtype
    assert grid.dtype == np.int64, grid.dtype
    assert grid.ndim == 2 and grid.shape[1] == 3, grid.shape
    assert pv.ndim == 4 and pv.shape[1:] == (3, ps, ps), pv.shape
    assert_bit_equal(grid, ref_grid, "grid_thws")
    assert_bit_equal(pv, ref_pv, "pixel_values")


def iter_images(images: Any) -> Iterable[Any]:
    return images if isinstance(images, list) else [images]


# ---------------------------------------------------------------------------
# Images in every PIL mode (issue #3), built from seeded noise
# ---------------------------------------------------------------------------

#: kinds accepted by :func:`mode_image` -> the PIL mode they produce
MODE_KINDS: Dict[str, str] = {
    "P": "P",
    "P+int_trns": "P",  # GIF style: one transparent palette index
    "P+bytes_trns": "P",  # PNG tRNS style: one alpha byte per palette entry
    "P+rgba_palette": "P",  # palette with alpha, but no transparency entry
    "1": "1",
    "1+trns": "1",
    "L+trns": "L",
    "RGB+trns": "RGB",
    "LA": "LA",
    "CMYK": "CMYK",
    "I;16": "I;16",
    "I;16+trns": "I;16",
    "I;16B": "I;16B",
    "I": "I",
    "F": "F",
    "RGBX": "RGBX",
    "YCbCr": "YCbCr",
    "HSV": "HSV",
    "LAB": "LAB",
    "PA": "PA",
    "RGBa": "RGBa",
    "La": "La",
}


def _palette(rng: np.random.Generator, n: int = 256, channels: int = 3) -> List[int]:
    return rng.integers(0, 256, n * channels, dtype=np.uint8).tolist()


def mode_image(kind: str, w: int, h: int, seed: int = 0) -> Image.Image:
    """A ``w`` x ``h`` image of the given kind (see :data:`MODE_KINDS`).

    Pixels are seeded noise with structure where it matters: palette indices and L
    values come from small sets so that the transparent index / value is common;
    16/32-bit values mix 0..255 with values the conversion saturates or clamps.
    """
    rng = np.random.default_rng(seed)
    size = (w, h)
    if kind.startswith("P") and kind != "PA":
        idx = rng.integers(0, 256, (h, w), dtype=np.uint8)
        idx[rng.random((h, w)) < 0.3] = 7  # make index 7 common
        img = Image.frombytes("P", size, idx.tobytes())
        if kind == "P+rgba_palette":
            img.putpalette(_palette(rng, channels=4), "RGBA")
        else:
            img.putpalette(_palette(rng))
        if kind == "P+int_trns":
            img.info["transparency"] = 7
        elif kind == "P+bytes_trns":
            alphas = np.asarray([0, 37, 128, 255, 200], np.uint8)[rng.integers(0, 5, 256)]
            alphas[7] = 0
            img.info["transparency"] = alphas.tobytes()
        return img
    if kind in ("1", "1+trns"):
        bits = (rng.random((h, w)) < 0.5).astype(np.uint8) * 255
        img = Image.fromarray(bits).convert("1", dither=Image.Dither.NONE)
        if kind == "1+trns":
            img.info["transparency"] = 255
        return img
    if kind == "L+trns":
        lum = np.asarray([0, 60, 100, 101, 180, 255], np.uint8)[rng.integers(0, 6, (h, w))]
        img = Image.fromarray(lum)
        img.info["transparency"] = 100
        return img
    if kind == "RGB+trns":
        img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        img.info["transparency"] = (0, 0, 0)
        return img
    if kind in ("I;16", "I;16+trns", "I;16B"):
        small = rng.integers(0, 256, (h, w))
        big = rng.integers(0, 65536, (h, w))
        values = np.where(rng.random((h, w)) < 0.5, small, big).astype(np.uint16)
        if kind == "I;16B":
            return Image.frombytes("I;16B", size, values.astype(">u2").tobytes())
        img = Image.frombytes("I;16", size, values.astype("<u2").tobytes())
        if kind == "I;16+trns":
            values[rng.random((h, w)) < 0.3] = 200
            img = Image.frombytes("I;16", size, values.astype("<u2").tobytes())
            img.info["transparency"] = 200
        return img
    if kind == "I":
        values = rng.integers(-400, 700, (h, w)).astype(np.int32)
        return Image.frombytes("I", size, values.astype("<i4").tobytes())
    if kind == "F":
        values = (rng.random((h, w)) * 500 - 100).astype(np.float32)
        return Image.frombytes("F", size, values.astype("<f4").tobytes())
    if kind in ("CMYK", "RGBX", "RGBa"):
        return Image.frombytes(kind, size, rng.integers(0, 256, (h, w, 4), dtype=np.uint8).tobytes())
    if kind in ("YCbCr", "HSV", "LAB"):
        return Image.frombytes(kind, size, rng.integers(0, 256, (h, w, 3), dtype=np.uint8).tobytes())
    if kind in ("LA", "La"):
        a = rng.integers(0, 256, (h, w, 2), dtype=np.uint8)
        a[..., 1] = np.asarray([0, 37, 128, 255], np.uint8)[rng.integers(0, 4, (h, w))]
        return Image.frombytes(kind, size, a.tobytes())
    if kind == "PA":
        a = rng.integers(0, 256, (h, w, 2), dtype=np.uint8)
        a[..., 1] = np.asarray([0, 37, 128, 255], np.uint8)[rng.integers(0, 4, (h, w))]
        img = Image.frombytes("PA", size, a.tobytes())
        img.putpalette(_palette(rng))
        return img
    raise KeyError(kind)


# ---------------------------------------------------------------------------
# Shared by the hardening tests (bombs, errors, threads, memory, property / fuzz)
# ---------------------------------------------------------------------------

#: examples of the property tests; the fuzz harnesses run a quarter of it (see
#: test_property_fuzz.py for the long profile)
EXAMPLES = int(os.environ.get("KIMI_HARDENING_EXAMPLES", "2000"))
FUZZ_EXAMPLES = max(EXAMPLES // 4, 50)
#: Exceptions raised inside Pillow's decoders must come out as ImageError (findings
#: F3 and F8, fixed in 662b6e8). ``KIMI_HARDENING_LENIENT_DECODE=1`` counts them as
#: ``pillow_leaks`` instead of failing, to survey an older revision or a new Pillow.
STRICT_DECODE = os.environ.get("KIMI_HARDENING_LENIENT_DECODE", "") in ("", "0")

K25 = cfg("kimi_k25")
K3 = cfg("kimi_k3")
OK_ERRORS = (ValueError, TypeError)
MAX_INT = 2**31 - 1

LINUX = sys.platform.startswith("linux")
needs_linux = pytest.mark.skipif(not LINUX, reason="reads /proc (Linux only)")
needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def exact(msg: str) -> str:
    """A ``match=`` pattern for exactly ``msg``."""
    return f"^{re.escape(msg)}$"


def u32(a: np.ndarray) -> np.ndarray:
    """The float32 bits of ``a``."""
    return np.ascontiguousarray(a).view(np.uint32)


def bf16_bits(f32: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> bfloat16, from the bits (no library)."""
    bits = u32(f32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def f16_bits(f32: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return f32.astype(np.float16).view(np.uint16)


def half_bits(pixel_values: np.ndarray) -> np.ndarray:
    """The 16-bit patterns of a half-precision result (uint16, float16 or ml_dtypes.bfloat16)."""
    assert pixel_values.itemsize == 2, pixel_values.dtype
    return pixel_values.view(np.uint16)


def data_url(raw: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(raw).decode("ascii")


def set_path(media_proc_cfg, path, value):
    """Set the dotted key ``path`` of ``media_proc_cfg`` in place."""
    parts = path.split(".")
    target = media_proc_cfg
    for part in parts[:-1]:
        target = target[part]
    target[parts[-1]] = value


def with_path(media_proc_cfg: Dict[str, Any], path: str, value: Any) -> Dict[str, Any]:
    """A deep copy of ``media_proc_cfg`` with the dotted key ``path`` set."""
    out = copy.deepcopy(media_proc_cfg)
    set_path(out, path, value)
    return out


def record(record_property, name: str, **counts: Any) -> None:
    """Print, record (junit) and optionally append to KIMI_HARDENING_REPORT the counts of a harness."""
    line = {"test": name, "examples_setting": EXAMPLES, **counts}
    print(f"\n[hardening] {json.dumps(line)}")
    for key, value in counts.items():
        record_property(key, value)
    path = os.environ.get("KIMI_HARDENING_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")


def sanity_check() -> None:
    """The library still gives the reference's bytes (called after errors)."""
    import kimi_k3_rs  # here, not at import time (see the module docstring)

    img = noise_array(40, 30, "RGBA", 3)
    media_proc_cfg = cfg("kimi_k3", in_patch_limit=3)
    assert_output_matches(kimi_k3_rs.preprocess(img, media_proc_cfg), reference.reference_preprocess(img, media_proc_cfg))


def pillow_failure(data: bytes) -> str:
    """``preprocess``'s message for encoded ``data`` (image 0) that Pillow fails on:
    the exception of Pillow's ``Image.open`` + ``load``, as the package's Pillow path
    reports it (``cannot read or decode it: <class>: <message>``, the object repr of
    "cannot identify image file <...>" left out)."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
    except Exception as e:  # noqa: BLE001 - any failure of Pillow's is the reference
        text = "cannot identify image file" if isinstance(e, UnidentifiedImageError) else str(e)
        return f"image 0: cannot read or decode it: {type(e).__name__}: {text}"
    raise AssertionError("Pillow decodes it")


def assert_header_fault_goes_to_pillow(data: bytes, pillows: str, reason_prefix: str = "") -> None:
    """A file whose headers Pillow fails on: Pillow's ``Image.open`` + ``load`` raises
    ``pillows`` (its class and message, a prefix), the native route sends it to Pillow
    (its reason starting with ``reason_prefix``), and ``preprocess`` raises Pillow's
    failure as :func:`pillow_failure` words it."""
    import kimi_k3_rs
    from kimi_k3_rs import _native

    with pytest.raises(Exception) as ref, Image.open(io.BytesIO(data)) as im:  # Pillow's class: checked below
        im.load()
    assert f"{type(ref.value).__name__}: {ref.value}".startswith(pillows)
    kind, reason = _native.decode_image(data)
    assert kind == "pillow" and reason.startswith(reason_prefix), reason
    with pytest.raises(kimi_k3_rs.ImageError) as ours:
        kimi_k3_rs.preprocess(data, kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
    assert str(ours.value) == pillow_failure(data) == f"image 0: cannot read or decode it: {pillows}"


def from_pillow(exc: BaseException) -> bool:
    """Whether an exception was raised inside Pillow (its innermost frame is in PIL)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and f"{os.sep}PIL{os.sep}" in frames[-1].filename


def encoded_seeds() -> Dict[str, bytes]:
    """Small files of every supported format (the seeds of the truncation tests and the decode fuzzer)."""
    rgb = Image.fromarray(np.random.default_rng(5).integers(0, 256, (23, 31, 3), dtype=np.uint8))
    rgba = alpha_pattern_rgba(31, 23, 5)
    seeds = {
        "png": encode(rgb, "PNG"),
        "png-rgba": encode(rgba, "PNG"),
        "png-p-trns": encode(mode_image("P+bytes_trns", 31, 23, 1), "PNG"),
        "png-i16": encode(mode_image("I;16", 31, 23, 2), "PNG"),
        "jpeg": encode(rgb, "JPEG", quality=90),
        "jpeg-progressive": encode(rgb, "JPEG", progressive=True),
        "gif": encode(rgb.convert("P"), "GIF"),
        "gif-animated": encode(rgb.convert("P"), "GIF", save_all=True, append_images=[rgba.convert("P")]),
        "bmp": encode(rgb, "BMP"),
        "tiff": encode(rgb, "TIFF"),
        "tiff-lzw": encode(rgba, "TIFF", compression="tiff_lzw"),
        "tiff-cmyk": encode(rgb.convert("CMYK"), "TIFF"),
        "webp": encode(rgb, "WEBP", quality=80),
        "webp-lossless": encode(rgba, "WEBP", lossless=True),
        "ppm": encode(rgb, "PPM"),
        "tga": encode(rgba, "TGA"),
        "ico": encode(rgba, "ICO"),
    }
    return seeds


SEEDS = encoded_seeds()
