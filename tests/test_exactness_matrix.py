"""The exactness matrix (issue #21, "The net"): every way an image reaches the
pipeline, at every size, downscale, mode, config and thread count, gives the bits of
the reference run in the test (``tests/reference.py``: Pillow + numpy), zero tolerance
(float32 compared as ``uint32``), with the core's poison mode off and on.

The full product of the valid combinations of

* carrier: a numpy array, a PIL image opened lazily (``Image.open`` on the encoded
  bytes, not loaded), a loaded PIL image in one Pillow block, one over several blocks
  (Pillow's storage over ``Image.core.get_block_size()``), encoded bytes on the native
  route, bytes forced to Pillow (``KIMI_K3_RS_DECODE=pillow``), a file path, a data URL;
* size: 1x1 to 6000x4000 (over 16 MiB decoded in every mode), tall and wide, odd;
* downscale: none, about 2x, 5x, 20x and 60x, each through the ``in_patch_limit`` that
  gives it (``kimi_k3_rs.navit_resize_config``);
* mode: L, LA, RGB, RGBA, P, P with a tRNS, CMYK, I;16 (and the encoded format: PNG,
  JPEG, TIFF where the mode has it);
* config: K2.5, K3 after_resize, K3 before_resize; 1 and 2 threads

is too large to run whole, so a seeded sample of it runs: the seed is
``KIMI_K3_RS_MATRIX_SEED`` (default: today's date, ``YYYYMMDD``, so that CI sees another
slice each day), the count ``KIMI_K3_RS_MATRIX_CASES`` (default :data:`DEFAULT_CASES`;
``all`` runs the whole product). The sample is a prefix of the product shuffled by the
seed, so a case stays in it for any larger count. Each test id starts with the seed
and names the whole case; a failure is reproduced with::

    KIMI_K3_RS_MATRIX_SEED=<seed> python -m pytest tests/test_exactness_matrix.py -k '<id>'

Outside the sample, the sharpest cases always run: the issue's defects 1 (a PNG whose
zlib stream ends early, after a noise JPEG) and 2 (multi-block PIL images under a strong
downscale), an APNG whose frame 0 is smaller than its canvas, and the poison switch
itself (pooled outputs, ``out=`` arrays).
"""

from __future__ import annotations

import functools
import io
import itertools
import os
import random
import struct
import time
import warnings
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import kimi_k3_rs as k
import numpy as np
import pytest
from helpers import (
    alpha_pattern_rgba,
    data_url,
    encode,
    k3_before,
    mode_image,
    noise,
    png_chunk,
)
from kimi_k3_rs import _native
from kimi_k3_rs._input import native as native_decode
from PIL import Image
from reference import reference_preprocess

#: Cases the sample runs by default: about 150 s for the whole file on the 2 shared
#: cores of the development machine (see the module docstring for the knobs).
DEFAULT_CASES = 120
SEED = int(os.environ.get("KIMI_K3_RS_MATRIX_SEED") or time.strftime("%Y%m%d"))
_COUNT = os.environ.get("KIMI_K3_RS_MATRIX_CASES", "").strip().lower()

BLOCK = Image.core.get_block_size()

# ---------------------------------------------------------------------------
# The axes
# ---------------------------------------------------------------------------

#: mode kind (as written in ids) -> how it is built, the PIL mode, Pillow's storage
#: bytes per pixel, and the encoded formats it goes as
MODES: dict[str, tuple[str, str, int, tuple[str, ...]]] = {
    "L": ("L", "L", 1, ("PNG", "JPEG")),
    "LA": ("LA", "LA", 4, ("PNG",)),
    "RGB": ("RGB", "RGB", 4, ("PNG", "JPEG")),
    "RGBA": ("RGBA", "RGBA", 4, ("PNG",)),
    "P": ("P", "P", 1, ("PNG",)),
    "Ptrns": ("P+bytes_trns", "P", 1, ("PNG",)),
    "CMYK": ("CMYK", "CMYK", 4, ("JPEG", "TIFF")),
    "I16": ("I;16", "I;16", 2, ("PNG", "TIFF")),
}
#: modes a numpy array carries
ARRAY_MODES = ("L", "LA", "RGB", "RGBA")
#: (mode, format) the core decodes natively (8-bit L / LA / RGB / RGBA PNG, L / RGB JPEG)
NATIVE = {("L", "PNG"), ("LA", "PNG"), ("RGB", "PNG"), ("RGBA", "PNG"), ("L", "JPEG"), ("RGB", "JPEG")}
FORMAT_EXT = {"PNG": ("png", "image/png"), "JPEG": ("jpg", "image/jpeg"), "TIFF": ("tif", "image/tiff")}

#: carriers of decoded pixels (no format) and of encoded files (a format each)
DECODED_CARRIERS = ("numpy", "pil_block", "pil_blocks")
ENCODED_CARRIERS = ("pil_lazy", "bytes_native", "bytes_pillow", "path", "data_url")

#: 2311x1999 is over one block in the 4-byte modes only, 6000x4000 in every mode
SIZES: tuple[tuple[int, int], ...] = (
    (1, 1), (2, 3), (1, 900), (900, 1), (37, 5000), (5000, 37), (97, 89), (509, 251),
    (1021, 769), (2311, 1999), (6000, 4000),
)
#: downscale targets (1: none); a size takes a target its sizing reaches within 25 %
RATIOS = (1, 2, 5, 20, 60)
CONFIGS = ("k25", "k3", "k3before")
THREADS = (1, 2)


def config(name: str, in_patch_limit: int) -> dict[str, Any]:
    """The published config ``name`` with ``in_patch_limit`` set."""
    if name == "k3before":
        return k3_before(in_patch_limit=in_patch_limit)
    base = k.KIMI_K25_MEDIA_PROC_CFG if name == "k25" else k.KIMI_K3_MEDIA_PROC_CFG
    return {**base, "in_patch_limit": in_patch_limit}


def limit_for(w: int, h: int, ratio: int) -> int | None:
    """The ``in_patch_limit`` whose resize of ``w`` x ``h`` downscales by about ``ratio``
    (exactly none for 1), or None when the sizing cannot reach it."""
    patches = max(1, w // 14) * max(1, h // 14)
    limit = patches if ratio == 1 else max(1, round(patches / ratio**2))
    rc = k.navit_resize_config(w, h, 14, 2, limit, 512)
    actual = max(w / rc["new_width"], h / rc["new_height"])
    if ratio == 1:
        return limit if (rc["new_width"], rc["new_height"]) == (w, h) else None
    return limit if abs(actual / ratio - 1) <= 0.25 else None


def several_blocks(mode: str, w: int, h: int) -> bool:
    """Whether Pillow's arena holds a ``w`` x ``h`` image of ``mode`` in several blocks
    (``libImaging/Storage.c``: whole lines per block)."""
    line = w * MODES[mode][2]
    return h > max(1, BLOCK // line)


class Case(NamedTuple):
    carrier: str
    mode: str
    fmt: str  # "" for decoded carriers
    w: int
    h: int
    ratio: int
    limit: int
    cfg: str
    threads: int

    @property
    def id(self) -> str:
        fmt = f".{self.fmt.lower()}" if self.fmt else ""
        return (
            f"s{SEED}-{self.carrier}-{self.mode}{fmt}-{self.w}x{self.h}-r{self.ratio}"
            f"-ipl{self.limit}-{self.cfg}-t{self.threads}"
        )

    @property
    def source(self) -> tuple[Any, ...]:
        """What the reference reads: the decoded image, or the encoded file."""
        return (self.w, self.h, self.mode, self.fmt)


def full_product() -> list[Case]:
    """Every valid combination of the axes, in a fixed order."""
    cases = []
    for (w, h), ratio in itertools.product(SIZES, RATIOS):
        limit = limit_for(w, h, ratio)
        if limit is None:
            continue
        for mode, (_, _, _, formats) in MODES.items():
            carriers: list[tuple[str, str]] = []
            if mode in ARRAY_MODES:
                carriers.append(("numpy", ""))
            carriers.append(("pil_blocks" if several_blocks(mode, w, h) else "pil_block", ""))
            for fmt in formats:
                for carrier in ENCODED_CARRIERS:
                    if carrier != "bytes_native" or (mode, fmt) in NATIVE:
                        carriers.append((carrier, fmt))
            for (carrier, fmt), cfg, threads in itertools.product(carriers, CONFIGS, THREADS):
                cases.append(Case(carrier, mode, fmt, w, h, ratio, limit, cfg, threads))
    return cases


FULL = full_product()


def sample() -> list[Case]:
    """The seeded sample (a prefix of the product shuffled by :data:`SEED`), ordered so
    that the cases of one image run together (the caches below hold a few images)."""
    if _COUNT == "all":
        chosen = list(FULL)
    else:
        shuffled = list(FULL)
        random.Random(SEED).shuffle(shuffled)
        chosen = shuffled[: int(_COUNT or DEFAULT_CASES)]
    return sorted(chosen, key=lambda c: (c.w * c.h, c.w, c.mode, c.fmt, c.ratio, c.cfg, c.carrier, c.threads))


SAMPLE = sample()

# ---------------------------------------------------------------------------
# Inputs and references, made once per session (the large ones are costly)
# ---------------------------------------------------------------------------


#: alpha levels of the LA / RGBA images: transparent, partial, opaque
ALPHA_LEVELS = np.asarray([0, 37, 128, 255], np.uint8)
#: Pillow writes the PNGs up to this many pixels; larger ones are written by
#: :func:`png_file` (Pillow's adaptive filters and zlib take seconds over noise)
PILLOW_PNG_PIXELS = 1 << 22


@functools.lru_cache(maxsize=2)
def decoded(mode: str, w: int, h: int) -> Image.Image:
    """The seeded noise image of ``mode``: alpha in 0 / partial / 255 blocks (LA, RGBA);
    palette, tRNS, CMYK and 16-bit values as :func:`helpers.mode_image` makes them."""
    kind, pil_mode, _, _ = MODES[mode]
    seed = (w * 7919 + h) % 1000
    if mode in ("L", "RGB"):
        image = noise(w, h, mode, seed)
    elif mode in ("LA", "RGBA"):
        bands = 2 if mode == "LA" else 4
        pixels = np.empty((h, w, bands), np.uint8)
        pixels[..., :-1] = np.random.default_rng(seed).integers(0, 256, (h, w, bands - 1), dtype=np.uint8)
        columns = (np.arange(w) // 5 % 4).astype(np.uint8)
        rows = (np.arange(h) // 3 * 3 % 4).astype(np.uint8)
        pixels[..., -1] = ALPHA_LEVELS[(columns[None, :] + rows[:, None]) % 4]
        image = Image.fromarray(pixels)
    else:
        image = mode_image(kind, w, h, seed)
    assert image.mode == pil_mode
    return image


def png_file(image: Image.Image) -> bytes:
    """``image`` (L, LA, RGB, RGBA, P with its palette and tRNS, I;16) as a PNG whose
    rows take the five filter types in turn, in stored deflate blocks, over 1 MiB IDAT
    chunks: a valid file written in a fraction of Pillow's time for large noise."""
    color, depth = {"L": (0, 8), "LA": (4, 8), "RGB": (2, 8), "RGBA": (6, 8), "P": (3, 8), "I;16": (0, 16)}[image.mode]
    w, h = image.size
    if image.mode == "I;16":
        rows = np.frombuffer(image.tobytes(), "<u2").astype(">u2").view(np.uint8).reshape(h, -1)
    else:
        rows = np.asarray(image).reshape(h, -1)
    bpp = rows.shape[1] // w
    body = np.empty((h, rows.shape[1] + 1), np.uint8)
    body[:, 0] = np.arange(h) % 5
    for kind in range(5):  # uint8 arithmetic wraps modulo 256, as the filters do
        cur = rows[kind::5]
        above = np.arange(kind, h, 5) - 1
        up = rows[np.maximum(above, 0)]
        up[above < 0] = 0
        left = np.zeros_like(cur)
        left[:, bpp:] = cur[:, :-bpp]
        if kind == 0:
            out = cur
        elif kind == 1:
            out = cur - left
        elif kind == 2:
            out = cur - up
        elif kind == 3:
            out = cur - ((left >> 1) + (up >> 1) + (left & up & 1))
        else:
            up_left = np.zeros_like(cur)
            up_left[:, bpp:] = up[:, :-bpp]
            a, b, c = (v.astype(np.int16) for v in (left, up, up_left))
            pa, pb, pc = np.abs(b - c), np.abs(a - c), np.abs(a + b - 2 * c)
            out = cur - np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, up, up_left))
        body[kind::5, 1:] = out
    stream = zlib.compress(body.tobytes(), 0)
    out_chunks = [b"\x89PNG\r\n\x1a\n", png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 0))]
    if image.mode == "P":
        out_chunks.append(png_chunk(b"PLTE", bytes(image.getpalette() or [])))
        if "transparency" in image.info:
            out_chunks.append(png_chunk(b"tRNS", image.info["transparency"]))
    out_chunks += [png_chunk(b"IDAT", stream[i : i + (1 << 20)]) for i in range(0, len(stream), 1 << 20)]
    out_chunks.append(png_chunk(b"IEND", b""))
    return b"".join(out_chunks)


@functools.lru_cache(maxsize=2)
def encoded(mode: str, fmt: str, w: int, h: int) -> bytes:
    """The image of :func:`decoded` as a ``fmt`` file (its header checked; the pixels of
    :func:`png_file` by :func:`test_png_file_holds_its_image`)."""
    image = decoded(mode, w, h)
    if fmt == "PNG" and w * h > PILLOW_PNG_PIXELS:
        data = png_file(image)
    else:
        options = {"PNG": {"compress_level": 1}, "JPEG": {"quality": 90}, "TIFF": {}}[fmt]
        data = encode(image, fmt, **options)
    with Image.open(io.BytesIO(data)) as back:
        assert back.mode == image.mode and back.size == image.size, (back.mode, back.size)
        assert ("transparency" in back.info) == (mode == "Ptrns")
    return data


@functools.lru_cache(maxsize=2)
def reference(source: tuple[Any, ...], cfg: str, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """The reference's ``(pixel_values, grid_thws)`` of a case's source (:attr:`Case.source`)."""
    w, h, mode, fmt = source
    item = encoded(mode, fmt, w, h) if fmt else decoded(mode, w, h)
    return quiet_reference(item, config(cfg, limit))


def quiet_reference(item: Any, media_proc_cfg: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The reference, without Pillow's warning on P images with a bytes tRNS (the
    library never gives it; ``filterwarnings = error`` would fail the test)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Palette images with Transparency expressed in bytes")
        return reference_preprocess([item], media_proc_cfg)


def in_arena(image: Image.Image, blocks: str) -> Image.Image:
    """A copy of ``image`` in Pillow's own storage, checked to be in one block
    (``blocks="block"``) or in several (``"blocks"``; Pillow's export refuses rows spread
    over blocks)."""
    copy = image.copy()
    try:
        copy.__arrow_c_array__()
        one = True
    except ValueError as exc:
        assert "not contiguous" in str(exc), exc
        one = False
    assert one == (blocks == "block"), (image.mode, image.size, blocks)
    return copy


@contextmanager
def poison(on: bool) -> Iterator[None]:
    previous = _native._set_poison(on)
    try:
        yield
    finally:
        _native._set_poison(previous)


def route(monkeypatch: pytest.MonkeyPatch, decode: str) -> None:
    """Encoded inputs of this test go ``decode`` ("auto" or "pillow"): the variable is
    read once per process (``native_decode._checked``), so its result is reset here and
    restored after the test."""
    if os.environ.get(native_decode.DECODE_ENV, "auto") != decode:
        monkeypatch.setenv(native_decode.DECODE_ENV, decode)
        monkeypatch.setattr(native_decode, "_paths", None)


def bits_mismatch(got: dict[str, np.ndarray], want: tuple[np.ndarray, np.ndarray]) -> str | None:
    """None when ``got`` has the reference's grid and float32 bits, else what differs."""
    pv, grid = got["pixel_values"], got["grid_thws"]
    want_pv, want_grid = want
    if grid.dtype != np.int64 or not np.array_equal(grid, want_grid):
        return f"grid_thws {grid.tolist()} != {want_grid.tolist()}"
    if pv.dtype != np.float32 or pv.shape != want_pv.shape:
        return f"pixel_values {pv.dtype} {pv.shape} != float32 {want_pv.shape}"
    diff = pv.view(np.uint32) != want_pv.view(np.uint32)
    if diff.any():
        first = tuple(int(i) for i in np.argwhere(diff)[0])
        return (
            f"{int(diff.sum())} of {diff.size} values differ; first at {first}: "
            f"got {pv[first]!r}, expected {want_pv[first]!r}"
        )
    return None


def check_both(make_input: Any, want: tuple[np.ndarray, np.ndarray], media_proc_cfg: dict[str, Any], **kw: Any) -> None:
    """``preprocess(make_input(), ...)`` gives ``want``'s bits with poison off and on
    (each call gets a fresh input; both outcomes are reported)."""
    failures = []
    for on in (False, True):
        with poison(on):
            try:
                got = k.preprocess(make_input(), media_proc_cfg, **kw)
            except Exception as exc:  # noqa: BLE001 - reported with the other run's outcome
                failures.append(f"poison {'on' if on else 'off'}: {type(exc).__name__}: {exc}")
                continue
        bad = bits_mismatch(got, want)
        if bad:
            failures.append(f"poison {'on' if on else 'off'}: {bad}")
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------------
# The sampled matrix
# ---------------------------------------------------------------------------


def test_the_sample_is_drawn_from_the_whole_product():
    """The product covers every axis value, and the sample is what the knobs ask for."""
    seen = {field: {getattr(c, field) for c in FULL} for field in ("carrier", "mode", "ratio", "cfg", "threads")}
    assert seen["carrier"] == set(DECODED_CARRIERS + ENCODED_CARRIERS)
    assert seen["mode"] == set(MODES)
    assert seen["ratio"] == set(RATIOS)
    assert seen["cfg"] == set(CONFIGS) and seen["threads"] == set(THREADS)
    assert {(c.w, c.h) for c in FULL} == set(SIZES)
    assert {c.mode for c in FULL if c.carrier == "pil_blocks"} == set(MODES)
    assert len({c.id for c in FULL}) == len(FULL)
    want = len(FULL) if _COUNT == "all" else min(len(FULL), int(_COUNT or DEFAULT_CASES))
    assert len(SAMPLE) == want and set(SAMPLE) <= set(FULL)
    print(f"\n[matrix] seed {SEED}: {len(SAMPLE)} of {len(FULL)} cases")


@pytest.mark.parametrize("mode", ["L", "LA", "RGB", "RGBA", "P", "Ptrns", "I16"])
def test_png_file_holds_its_image(mode):
    """The matrix's own PNG writer: Pillow reads its files (all five filter types, odd
    widths) back as the image, palette and tRNS included."""
    for w, h in ((1, 1), (1, 7), (13, 11), (61, 23)):
        image = decoded(mode, w, h)
        with Image.open(io.BytesIO(png_file(image))) as back:
            assert back.mode == image.mode and back.size == image.size
            assert back.tobytes() == image.tobytes()
            assert back.info.get("transparency") == image.info.get("transparency")
            assert back.getpalette() == image.getpalette()


def carried(case: Case, tmp_path: Any) -> Callable[[], Any]:
    """A function that gives the case's image as its carrier carries it (a new lazy
    image each call: the first use loads one)."""
    if not case.fmt:
        image = decoded(case.mode, case.w, case.h)
        item: Any = np.asarray(image) if case.carrier == "numpy" else in_arena(image, case.carrier[len("pil_") :])
        return lambda: item
    data = encoded(case.mode, case.fmt, case.w, case.h)
    ext, mime = FORMAT_EXT[case.fmt]
    if case.carrier == "pil_lazy":
        return lambda: Image.open(io.BytesIO(data))
    if case.carrier == "path":
        path = tmp_path / f"image.{ext}"
        path.write_bytes(data)
        item = str(path)
    elif case.carrier == "data_url":
        item = data_url(data, mime)
    else:
        item = data
    return lambda: item


@pytest.mark.slow
@pytest.mark.parametrize("case", SAMPLE, ids=[c.id for c in SAMPLE])
def test_matrix(case: Case, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """One case of the sample: the reference's bits, poison off and on.
    ``bytes_pillow`` runs under ``KIMI_K3_RS_DECODE=pillow``, the other encoded carriers
    under ``auto``; ``bytes_native`` is checked to be decoded by the core."""
    route(monkeypatch, "pillow" if case.carrier == "bytes_pillow" else "auto")
    if case.carrier == "bytes_native":
        data = encoded(case.mode, case.fmt, case.w, case.h)
        assert k.decode_path()[case.fmt.lower()].startswith("native:")
        assert isinstance(_native.route_encoded(data), _native.EncodedImage), _native.route_encoded(data)
    want = reference(case.source, case.cfg, case.limit)
    check_both(carried(case, tmp_path), want, config(case.cfg, case.limit), num_threads=case.threads)


# ---------------------------------------------------------------------------
# The sharpest cases, always run
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("w", "h", "cfg", "limit"),
    [(6000, 4000, "k25", 1024), (6000, 4000, "k3", 1024), (6000, 4000, "k3before", 1024),
     (4100, 4805, "k25", 256), (4100, 4805, "k3", 256), (4100, 4805, "k3before", 256)],
)
def test_multi_block_pil_under_a_strong_downscale(w, h, cfg, limit):
    """Issue #21 defect 2: a PIL RGB image over several Pillow blocks, downscaled so that
    a band needs more input rows than one block holds ("Image rows are not contiguous");
    1 and 2 threads."""
    image = in_arena(decoded("RGB", w, h), "blocks")
    want = reference((w, h, "RGB", ""), cfg, limit)
    for threads in THREADS:
        check_both(lambda: image, want, config(cfg, limit), num_threads=threads)


def test_multi_block_pil_opened_lazily_from_a_photo_sized_jpeg():
    """Defect 2 as the issue met it: a 6000x4000 JPEG opened with ``Image.open`` under K3
    with ``in_patch_limit=1024`` (Pillow loads it over several blocks)."""
    data = encoded("RGB", "JPEG", 6000, 4000)
    want = reference((6000, 4000, "RGB", "JPEG"), "k3", 1024)
    check_both(lambda: Image.open(io.BytesIO(data)), want, config("k3", 1024))


def _short_png(w: int, h: int) -> bytes:
    """The issue's victim: an RGB PNG whose zlib stream holds one row and ends there,
    over two IDAT chunks (Pillow leaves the other rows zero)."""
    z = zlib.compress(b"\0" * (1 + 3 * w))
    return (
        b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + png_chunk(b"IDAT", z[:-10]) + png_chunk(b"IDAT", z[-10:]) + png_chunk(b"IEND", b"")
    )


@functools.lru_cache(maxsize=1)
def noise_jpegs(w: int, h: int) -> tuple[bytes, ...]:
    """Three noise JPEGs of the issue's reproducer (``default_rng(1)``)."""
    rng = np.random.default_rng(1)
    return tuple(encode(Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)), "JPEG") for _ in range(3))


@pytest.mark.parametrize("decode", ["auto", "pillow"])
def test_a_png_ending_early_after_a_noise_jpeg(decode, monkeypatch):
    """Issue #21 defect 1: a 3000x2000 PNG (over 16 MiB decoded) whose zlib stream ends on
    a row boundary, right after a noise JPEG of the same size: zeros where Pillow wrote
    nothing, never the earlier request's pixels; poison off and on, both routes."""
    route(monkeypatch, decode)
    w, h = 3000, 2000
    victim = _short_png(w, h)
    want = reference_preprocess([victim], config("k3", 65536))
    assert not np.asarray(Image.open(io.BytesIO(victim)))[1:].any()
    cfg = config("k3", 65536)
    for jpeg in noise_jpegs(w, h):
        for on in (False, True):
            with poison(on):
                k.preprocess(jpeg, cfg)  # request A
                got = k.preprocess(victim, cfg)  # request B
            bad = bits_mismatch(got, want)
        assert bad is None, f"poison {'on' if on else 'off'}: {bad}"


def _apng_small_frame_zero(mode: str, w: int, h: int, fw: int, fh: int) -> bytes:
    """An APNG of canvas ``w`` x ``h`` whose frame 0 (the IDAT image) is ``fw`` x ``fh``
    (Pillow decodes it into the canvas's top-left corner, zeros elsewhere)."""
    small = encode(decoded(mode, fw, fh), "PNG", compress_level=1)
    idat, pos = b"", 8
    while pos < len(small):
        n = struct.unpack(">I", small[pos : pos + 4])[0]
        if small[pos + 4 : pos + 8] == b"IDAT":
            idat += small[pos + 8 : pos + 8 + n]
        pos += n + 12
    color = {"L": 0, "RGB": 2, "RGBA": 6, "LA": 4}[mode]
    return (
        b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0))
        + png_chunk(b"acTL", struct.pack(">II", 1, 0))
        + png_chunk(b"fcTL", struct.pack(">IIIIIHHBB", 0, fw, fh, 0, 0, 1, 10, 0, 0))
        + png_chunk(b"IDAT", idat) + png_chunk(b"IEND", b"")
    )


@pytest.mark.parametrize(
    ("mode", "w", "h", "cfg"),
    [("RGB", 3000, 2000, "k25"), ("RGBA", 3000, 2000, "k3"), ("LA", 3000, 2000, "k3before"), ("L", 5000, 4000, "k3")],
)
def test_an_apng_whose_frame_zero_is_smaller_than_its_canvas(mode, w, h, cfg):
    """An APNG over 16 MiB decoded whose frame 0 covers part of the canvas: Pillow
    leaves the rest zero (the decode-into-array path must too), after a noise request
    of the same size; poison off and on."""
    data = _apng_small_frame_zero(mode, w, h, 1001, 701)
    with Image.open(io.BytesIO(data)) as image:
        assert image.size == (w, h) and image.mode == mode
        pixels = np.asarray(image)
        assert pixels[:701, :1001].any() and not pixels[701:].any() and not pixels[:, 1001:].any()
    media_proc_cfg = config(cfg, 16384)
    want = quiet_reference(data, media_proc_cfg)
    jpeg = encode(noise(w, h, "RGB", 9), "JPEG")
    for on in (False, True):
        with poison(on):
            k.preprocess(jpeg, media_proc_cfg)
            got = k.preprocess(data, media_proc_cfg)
        bad = bits_mismatch(got, want)
        assert bad is None, f"poison {'on' if on else 'off'}: {bad}"


# ---------------------------------------------------------------------------
# The poison switch itself
# ---------------------------------------------------------------------------


def _bad_png(w: int, h: int) -> bytes:
    """An RGB PNG the native decoder takes and fails on (its data ends inside a row)."""
    rows = np.asarray(noise(w, h, "RGB", 4)).reshape(h, -1)
    raw = b"".join(b"\0" + row.tobytes() for row in rows)
    return (
        b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + png_chunk(b"IDAT", zlib.compress(raw[: 10 * (1 + 3 * w) + 7])) + png_chunk(b"IEND", b"")
    )


def test_the_poison_switch_reaches_an_out_array(monkeypatch):
    """The switch is live end to end: under poison, an ``out=`` array is poisoned before
    the images are written, so the slot of an image whose native decode fails holds
    0xA5A5A5A5 words; without it, the slot keeps the caller's NaN."""
    route(monkeypatch, "auto")
    good = encode(noise(300, 200, "RGB", 1), "PNG")
    bad = _bad_png(280, 280)
    assert isinstance(_native.route_encoded(bad), _native.EncodedImage)
    cfg = config("k3", 65536)
    n = k.preprocess([good, np.zeros((280, 280, 3), np.uint8)], cfg)["pixel_values"].shape[0]
    want_good = reference_preprocess([good], cfg)[0]
    for on in (False, True):
        out = np.full((n, 3, 14, 14), np.nan, np.float32)
        with poison(on), pytest.raises(k.ImageError, match=r"^image 1: cannot decode PNG"):
            k.preprocess([good, bad], cfg, out=out)
        words = out.view(np.uint32)
        assert np.array_equal(words[: len(want_good)], want_good.view(np.uint32))
        rest = words[len(want_good) :]
        if on:
            assert (rest == 0xA5A5A5A5).all() and not np.isnan(out).any()
        else:
            assert np.isnan(out[len(want_good) :]).all() and not (words == 0xA5A5A5A5).any()


@pytest.mark.parametrize("on", [False, True], ids=["poison_off", "poison_on"])
def test_out_arrays_are_overwritten_in_full(on):
    """An ``out=`` array filled with NaN, or with garbage bits, is overwritten with the
    reference's bits everywhere (an RGBA image under K3, composited, padded)."""
    image = alpha_pattern_rgba(1001, 703, 3)
    cfg = config("k3", 2000)
    want_pv, want_grid = reference_preprocess([image], cfg)
    garbage = np.random.default_rng(5).integers(0, 2**32, want_pv.size, dtype=np.uint32).view(np.float32)
    for fill in (np.float32(np.nan), garbage.reshape(want_pv.shape)):
        out = np.empty_like(want_pv)
        out[...] = fill
        with poison(on):
            got = k.preprocess(image, cfg, out=out, num_threads=2)
        assert got["pixel_values"] is out
        bad = bits_mismatch({"pixel_values": out, "grid_thws": got["grid_thws"]}, (want_pv, want_grid))
        assert bad is None, f"filled with {fill.flat[0]!r}...: {bad}"


def test_pooled_outputs_under_poison_give_the_reference_bits():
    """Two calls in a row with outputs over 16 MiB (the second takes the first's pooled
    memory, poisoned) give the reference's bits, each time, with 1 and 2 threads."""
    image = alpha_pattern_rgba(2900, 2100, 6)
    cfg = config("k3before", 65536)
    want = reference_preprocess([image], cfg)
    assert want[0].nbytes >= 16 << 20
    addresses = []
    with poison(True):
        for threads in (1, 2, 1, 2):
            got = k.preprocess(image, cfg, num_threads=threads)
            bad = bits_mismatch(got, want)
            assert bad is None, f"{threads} threads: {bad}"
            addresses.append(got["pixel_values"].ctypes.data)
            del got  # its memory goes back to the pool for the next call
    assert len(set(addresses)) < len(addresses), "no call took a pooled output"


def _lane_jpegs() -> dict[str, bytes]:
    """JPEGs of one scan large enough (over 4 MiB decoded) for a parallel run to split
    their resize among decoders that start at rows of their own (``Lanes``): every
    chroma sampling Pillow writes, grey, restart markers, and a size that is no
    multiple of an iMCU row."""
    h, w = 1951, 2601
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // w, y * 255 // h, (x + y) * 255 // (w + h)], axis=-1)
    grain = np.random.default_rng(31).integers(-12, 13, base.shape)
    photo = Image.fromarray((base + grain).clip(0, 255).astype(np.uint8))
    even = photo.crop((0, 0, 2600, 1950))
    return {
        "420-odd": encode(photo, "JPEG", quality=90),
        "422": encode(even, "JPEG", quality=90, subsampling=1),
        "444": encode(even, "JPEG", quality=90, subsampling=0),
        "L": encode(photo.convert("L").resize((2900, 2100)), "JPEG", quality=90),
        "420-restart": encode(even, "JPEG", quality=85, restart_marker_rows=1),
    }


@pytest.mark.slow
def test_jpeg_lanes_equal_the_reference():
    """Issue #24: a large JPEG of one scan from bytes, resized on 2 threads or more, is
    read by a decoder per thread, each from its run of bands' first row (libjpeg's
    ``jpeg_skip_scanlines`` past the rows before): the reference's bits for every
    sampling, K2.5 / K3 / K3 composited before the resize, a strong and a slight
    downscale, 2 to 4 threads, poison off and on. A damaged copy (cut short, or 4 KiB
    of garbage in its scan, above and below the lanes' split) gives on 1 to 3 threads
    what Pillow gives: its error, or the reference's bits of the pixels it decodes."""
    for name, data in _lane_jpegs().items():
        assert isinstance(_native.route_encoded(data), _native.EncodedImage), name
        with Image.open(io.BytesIO(data)) as image:
            pixels = np.asarray(image)
            assert pixels.nbytes >= 4 << 20 and not image.info.get("progressive"), name
        patches = (pixels.shape[0] // 14) * (pixels.shape[1] // 14)
        for cfg, limit in (("k25", 16384), ("k3", patches // 400), ("k3before", patches * 4 // 5)):
            want = reference_preprocess([pixels], config(cfg, limit))
            for threads in (2, 3, 4):
                check_both(lambda: data, want, config(cfg, limit), num_threads=threads)
    rng = np.random.default_rng(32)
    for name in ("420-odd", "420-restart"):
        data = _lane_jpegs()[name]
        cuts = [data[: int(len(data) * f)] for f in (0.3, 0.7, 0.95, 0.999)]
        # Garbage with markers in it (a fatal error), and without (libjpeg warns and
        # decodes the scan's garbage: Pillow gives the pixels).
        garbage = [
            data[:at] + rng.integers(0, top, 4096, dtype=np.uint8).tobytes() + data[at + 4096 :]
            for at in (len(data) // 5, len(data) * 3 // 4)
            for top in (256, 255)
        ]
        for i, damaged in enumerate(cuts + garbage):
            try:
                with Image.open(io.BytesIO(damaged)) as image:
                    want: Any = reference_preprocess([np.asarray(image)], config("k25", 4096))
            except OSError as exc:
                want = str(exc)
            for threads in (1, 2, 3):
                try:
                    with poison(True):
                        got = k.preprocess(damaged, config("k25", 4096), num_threads=threads)
                except k.ImageError as exc:
                    assert isinstance(want, str), (name, i, threads, str(exc))
                    assert want.startswith(str(exc).split(": ", 2)[2]), (name, i, threads, str(exc), want)
                else:
                    assert not isinstance(want, str), (name, i, threads, want)
                    assert bits_mismatch(got, want) is None, (name, i, threads)
