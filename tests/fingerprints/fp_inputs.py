"""Deterministic inputs for the per-Pillow fingerprints (one section for each
``pillow_compat`` rule: Pillow 12.1.0, 12.3.0, 13.0.0).

No numpy RNG: pixels come from an integer hash evaluated with wrapping uint32
arithmetic, which gives the same bytes under numpy 1.26 and 2.x (and so under
the Pillow 12.3.0 + numpy 1.26.4 environment that recorded ``pillow12.json``).
Shared by ``make_fingerprints.py`` and ``tests/test_fingerprints.py``.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Tuple

import numpy as np
from PIL import Image

from helpers import K3_CHESSBOARD, K25_IMAGE_KEYS  # the spec's published values
from reference import navit_resize_image, vertical_first

BANDS = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}

_U = np.uint32


def hash_plane(w: int, h: int, channel: int, salt: int) -> np.ndarray:
    """uint8 (h, w) plane: ((x*73856093) ^ (y*19349663) ^ (c*83492791)) mixed, mod 256."""
    x = np.arange(w, dtype=np.uint32)[None, :]
    y = np.arange(h, dtype=np.uint32)[:, None]
    cterm = _U(((channel + 8 * salt) * 83492791) & 0xFFFFFFFF)  # Python int: no scalar overflow
    v = (x * _U(73856093)) ^ (y * _U(19349663)) ^ cterm
    v = v ^ (v >> _U(13))
    v = v * _U(0x5BD1E995)
    v = v ^ (v >> _U(15))
    return (v >> _U(24)).astype(np.uint8)


#: other PIL modes (issue #3): name -> PIL mode
EXTRA_MODES = {"CMYK": "CMYK", "P+tRNS": "P", "L+transparency": "L"}

#: the transparent L value of "L+transparency" (pixels are quantised so that it is common)
L_TRANSPARENT_VALUE = 96


def _extra_mode_image(w: int, h: int, mode: str, salt: int) -> Image.Image:
    """CMYK (4 hash planes), P + bytes tRNS (PNG style; hash indices, palette and
    alphas), L + an int ``transparency`` (hash plane quantised to multiples of 32)."""
    if mode == "CMYK":
        arr = np.stack([hash_plane(w, h, ch, salt) for ch in range(4)], axis=2)
        return Image.frombytes("CMYK", (w, h), np.ascontiguousarray(arr).tobytes())
    if mode == "P+tRNS":
        img = Image.frombytes("P", (w, h), hash_plane(w, h, 0, salt).tobytes())
        palette = hash_plane(768, 1, 1, salt)[0]
        img.putpalette(palette.tolist())
        alphas = hash_plane(256, 1, 2, salt)[0]
        alphas = np.where(alphas < 64, np.uint8(0), np.where(alphas > 160, np.uint8(255), alphas))
        img.info["transparency"] = alphas.astype(np.uint8).tobytes()
        return img
    if mode == "L+transparency":
        plane = (hash_plane(w, h, 0, salt) // np.uint8(32)) * np.uint8(32)
        img = Image.frombytes("L", (w, h), plane.astype(np.uint8).tobytes())
        img.info["transparency"] = L_TRANSPARENT_VALUE
        return img
    raise KeyError(mode)


def hash_image(w: int, h: int, mode: str, salt: int = 0) -> Image.Image:
    if mode in EXTRA_MODES:
        img = _extra_mode_image(w, h, mode, salt)
        assert img.mode == EXTRA_MODES[mode], (img.mode, mode)
        return img
    planes = [hash_plane(w, h, ch, salt) for ch in range(BANDS[mode])]
    if mode in ("LA", "RGBA"):
        a = planes[-1]
        # make sure fully transparent and fully opaque pixels are common
        a = np.where(a < 48, np.uint8(0), np.where(a > 200, np.uint8(255), a)).astype(np.uint8)
        planes[-1] = a
    arr = planes[0] if mode == "L" else np.stack(planes, axis=2)
    img = Image.fromarray(np.ascontiguousarray(arr))
    assert img.mode == mode, (img.mode, mode)
    return img


def _k25(**kw: Any) -> Dict[str, Any]:
    out = copy.deepcopy(K25_IMAGE_KEYS)
    out.update(kw)
    return out


def _k3(**kw: Any) -> Dict[str, Any]:
    out = _k25(in_patch_limit=65536, transparent_bg_config=copy.deepcopy(K3_CHESSBOARD),
               transparent_bg_fill_stage="after_resize")
    out.update(kw)
    return out


CLIP = dict(image_mean=[0.48145466, 0.4578275, 0.40821073], image_std=[0.26862954, 0.26130258, 0.27577711])

#: name -> (width, height, mode, salt, media_proc_cfg)
CASES: Dict[str, Any] = {
    # tall: Pillow 13 runs the vertical pass first
    "tall_rgb_1242x2688_k25": (1242, 2688, "RGB", 1, _k25()),
    "tall_rgb_1500x6000_k25": (1500, 6000, "RGB", 2, _k25()),
    "tall_rgb_900x2400_k25_lim4000": (900, 2400, "RGB", 3, _k25(in_patch_limit=4000)),
    "tall_rgba_700x2100_k3_lim3000": (700, 2100, "RGBA", 4, _k3(in_patch_limit=3000)),
    "tall_l_600x1900_k3_lim2500": (600, 1900, "L", 5, _k3(in_patch_limit=2500)),
    "tall_la_500x1600_k3_lim2000": (500, 1600, "LA", 6, _k3(in_patch_limit=2000)),
    "tall_rgba_700x2100_k3before_lim3000": (700, 2100, "RGBA", 7,
                                            _k3(in_patch_limit=3000, transparent_bg_fill_stage="before_resize")),
    "tall_rgba_400x1500_after_none_lim1200": (400, 1500, "RGBA", 8,
                                              _k3(in_patch_limit=1200, transparent_bg_config=None)),
    "tall_rgb_640x2000_clip_lim2500": (640, 2000, "RGB", 9, _k25(in_patch_limit=2500, **CLIP)),
    "tall_rgb_1300x3000_k3_lim9000": (1300, 3000, "RGB", 10, _k3(in_patch_limit=9000)),
    # not vertical-first: both versions give the same bytes
    "tall_but_hfirst_rgb_1244x2629_k25": (1244, 2629, "RGB", 11, _k25()),
    "wide_rgb_2000x900_k25_lim3000": (2000, 900, "RGB", 12, _k25(in_patch_limit=3000)),
    "square_rgba_1024x1024_k3_lim2000": (1024, 1024, "RGBA", 13, _k3(in_patch_limit=2000)),
    "rgb_2600x1950_k25": (2600, 1950, "RGB", 14, _k25()),
    "l_800x600_k25_lim1000": (800, 600, "L", 15, _k25(in_patch_limit=1000)),
    "la_300x500_k3_lim300": (300, 500, "LA", 16, _k3(in_patch_limit=300)),
    "tiny_rgba_3x5_k3": (3, 5, "RGBA", 17, _k3()),
    # other PIL modes (issue #3); the resize runs in Rust (CMYK, L) or on RGB (P before_resize)
    "tall_cmyk_600x1900_k3_lim2500": (600, 1900, "CMYK", 18, _k3(in_patch_limit=2500)),
    "tall_cmyk_600x1900_k25_lim2500": (600, 1900, "CMYK", 19, _k25(in_patch_limit=2500)),
    "tall_cmyk_700x2100_after_none_lim3000": (700, 2100, "CMYK", 20,
                                              _k3(in_patch_limit=3000, transparent_bg_config=None)),
    "tall_ltrns_600x1900_k3_lim2500": (600, 1900, "L+transparency", 21, _k3(in_patch_limit=2500)),
    "tall_ptrns_500x1600_k25_lim2000": (500, 1600, "P+tRNS", 22, _k25(in_patch_limit=2000)),
    "tall_ptrns_500x1600_k3before_lim2000": (500, 1600, "P+tRNS", 23,
                                             _k3(in_patch_limit=2000, transparent_bg_fill_stage="before_resize")),
    # P after_resize: Pillow's NEAREST, the same bytes under both Pillow versions
    "tall_ptrns_500x1600_k3_lim2000": (500, 1600, "P+tRNS", 24, _k3(in_patch_limit=2000)),
    "cmyk_900x700_k3_lim1000": (900, 700, "CMYK", 25, _k3(in_patch_limit=1000)),
    # strips over 100:1: Pillow 12.2 - 12.3 runs the vertical pass first (Image.resize)
    "strip_rgb_10x8366_k25": (10, 8366, "RGB", 26, _k25()),  # -> 8x7167, and under 13
    "strip_l_2x20000_k3": (2, 20000, "L", 27, _k3()),  # -> 1x7168, and under 13
    "strip_rgba_70x7170_k3": (70, 7170, "RGBA", 28, _k3()),  # -> 69x7168, not under 13
}


def section(compat: str) -> str:
    """The section of ``pillow12.json`` recorded under the Pillow of ``pillow_compat``
    value ``compat``."""
    return f"pillow{compat}"


def resized_size(name: str) -> Tuple[int, int]:
    """The case's ``(new_width, new_height)`` (the reference's sizing)."""
    w, h, _, _, cfg = CASES[name]
    rc = navit_resize_image(w, h, cfg["patch_size"], cfg["merge_kernel_size"], cfg["in_patch_limit"],
                            cfg["patch_limit_on_one_side"], cfg.get("fixed_output_tokens"))
    return rc["new_width"], rc["new_height"]


def pass_order(name: str, compat: str) -> str:
    """The pass order of this case under ``compat``: ``"V"`` vertical first, ``"H"``
    horizontal first, ``"-"`` none (one pass or none; or P / 1 under ``after_resize``,
    resized with NEAREST, which has no pass order)."""
    w, h, mode, _, media_proc_cfg = CASES[name]
    new_w, new_h = resized_size(name)
    nearest = EXTRA_MODES.get(mode, mode) in ("P", "1") and media_proc_cfg.get("transparent_bg_fill_stage") == "after_resize"
    if nearest or new_w == w or new_h == h:
        return "-"
    return "V" if vertical_first(compat, w, h, new_w, new_h) else "H"


def case_names() -> List[str]:
    return sorted(CASES)


def case_input(name: str):
    w, h, mode, salt, media_proc_cfg = CASES[name]
    return hash_image(w, h, mode, salt), copy.deepcopy(media_proc_cfg)
