"""Peak memory of one call on large and hostile inputs (issue #13, item 4).

For every accepted input, the growth of a child process's peak RSS over its RSS just
before the call stays within three terms: the same input decoded by Pillow alone
(measured the same way, in another child), plus the output's bytes, plus 64 MiB. Inputs
that would cost more are refused from their headers (``max_decoded_bytes``). Where the
call's memory cannot be had at all (item 5, an allocation that fails under
``RLIMIT_AS``), see ``test_bombs_and_limits.py``; what calls leave behind them,
``test_memory_across_calls.py``.

Each measurement runs in a fresh interpreter; the peak is reset just before the call
(``/proc/self/clear_refs``), so Linux only.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import needs_linux, png_chunk
from PIL import Image

pytestmark = [needs_linux, pytest.mark.slow]

MIB = 2**20

MEASURE = r"""
import io, json, os, sys
import numpy as np
from PIL import Image
import kimi_k3_rs

mode, path, side = sys.argv[1], sys.argv[2], int(sys.argv[3])
kwargs = json.loads(sys.argv[4])
cfg = {**kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG, **kwargs.pop("cfg", {})}
if path:
    data = open(path, "rb").read()
else:  # a side x side RGBA array with varied colour and alpha
    data = np.empty((side, side, 4), np.uint8)
    data[...] = (np.arange(side, dtype=np.uint32) % 251).astype(np.uint8)[:, None, None]
    data[..., 3] = (np.arange(side, dtype=np.uint32) * 7 % 256).astype(np.uint8)[None, :]


def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))


with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) restarts from the current RSS
before = status("VmRSS:")
out_bytes, outcome = 0, None
try:
    if mode in ("pillow", "ours-pil"):  # decoded by Pillow alone; then, a PIL input
        image = Image.open(io.BytesIO(data))
        image.load()
        outcome = [image.mode, list(image.size)]
    if mode != "pillow":
        given = image if mode == "ours-pil" else data
        result = kimi_k3_rs.preprocess(given, cfg, **kwargs)
        out_bytes = result["pixel_values"].nbytes
        outcome = list(result["pixel_values"].shape)
except Exception as exc:
    outcome = f"{type(exc).__name__}: {exc}"
print(json.dumps({"grown": status("VmHWM:") - before, "out": out_bytes, "outcome": outcome}))
"""


def _measure(mode: str, path: Path | None = None, side: int = 0, decode: str = "auto", **kwargs: Any) -> dict[str, Any]:
    env = {**{k: v for k, v in os.environ.items() if k != "KIMI_K3_RS_DECODE"}, "KIMI_K3_RS_DECODE": decode}
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", MEASURE, mode, str(path or ""), str(side), json.dumps(kwargs)],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _streamed_png(path: Path, side: int, *, kind: str = "RGBA") -> None:
    """A side x side PNG of 7 distinct rows (colour and alpha vary along each row),
    compressed row by row, so the test never holds the decoded image: ``kind`` RGBA,
    LA, RGB or grey with a tRNS colour key ("RGB-key", "L-key"), or 16-bit grey
    ("I;16")."""
    x = np.arange(side, dtype=np.uint32)
    rows = []
    for k in range(7):
        channels = [(x * 3 + 40 * k) % 256, (x + 9 * k) % 256, np.full(side, 31 * k % 256)]
        if kind in ("LA", "L-key", "I;16"):
            channels = channels[:1]
        if kind in ("RGBA", "LA"):
            channels.append((x * 7 + 50 * k) % 256)
        row = np.stack(channels, 1).astype(np.uint8)
        if kind == "I;16":  # big-endian 16-bit samples
            row = np.stack([row[:, 0], (x * 5 % 256).astype(np.uint8)], 1)
        rows.append(b"\x00" + row.tobytes())
    z = zlib.compressobj(1)
    idat = b"".join(z.compress(rows[y % 7]) for y in range(side)) + z.flush()
    colour_type = {"RGBA": 6, "LA": 4, "RGB-key": 2, "L-key": 0, "I;16": 0}[kind]
    ihdr = struct.pack(">IIBBBBB", side, side, 16 if kind == "I;16" else 8, colour_type, 0, 0, 0)
    trns = {"RGB-key": struct.pack(">HHH", 40, 9, 0), "L-key": struct.pack(">H", 40)}.get(kind)
    trns = png_chunk(b"tRNS", trns) if trns else b""
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + trns + png_chunk(b"IDAT", idat)
                     + png_chunk(b"IEND", b""))


def _large_screen_gif(path: Path, width: int, height: int) -> None:
    """A 35-byte GIF: a width x height logical screen holding one 1x1 frame."""
    gif = b"GIF89a" + struct.pack("<HHBBB", width, height, 0, 0, 0)
    gif += b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0x80) + b"\0\0\0\xff\xff\xff"
    path.write_bytes(gif + b"\x02\x02\x44\x01\x00" + b"\x3b")


def _large_canvas_webp(path: Path, width: int, height: int) -> None:
    """A 144-byte animated WebP: a width x height canvas (VP8X) with two 1x1 frames."""
    import io

    one = io.BytesIO()
    Image.new("RGBA", (1, 1), (10, 20, 30, 255)).save(one, "WEBP", lossless=True)
    riff = one.getvalue()
    start = riff.index(b"VP8L")
    (n,) = struct.unpack("<I", riff[start + 4:start + 8])
    vp8l = riff[start:start + 8 + n + (n & 1)]

    def chunk(tag: bytes, body: bytes) -> bytes:
        return tag + struct.pack("<I", len(body)) + body + b"\0" * (len(body) & 1)

    def u24(v: int) -> bytes:
        return struct.pack("<I", v)[:3]

    vp8x = chunk(b"VP8X", bytes([0x12, 0, 0, 0]) + u24(width - 1) + u24(height - 1))
    anim = chunk(b"ANIM", bytes(6))
    frame = chunk(b"ANMF", u24(0) * 4 + u24(100) + b"\0" + vp8l)
    body = b"WEBP" + vp8x + anim + frame + frame
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)


def _within_bound(name: str, ours: dict[str, Any], pillow_grown: int) -> None:
    bound = pillow_grown + ours["out"] + 64 * MIB
    print(f"\n[memory] {name}: ours +{ours['grown'] / MIB:.0f} MiB, Pillow alone +{pillow_grown / MIB:.0f} MiB, "
          f"output {ours['out'] / MIB:.0f} MiB, bound {bound / MIB:.0f} MiB")
    assert ours["grown"] <= bound, (name, ours, pillow_grown)


@pytest.mark.parametrize("decode", ["auto", "pillow"])
def test_rgba_png_13000_costs_no_more_than_pillow_plus_output(tmp_path, decode):
    """A 13000x13000 RGBA PNG (16 MB here, 657 KB in the report) under K3: decoded
    natively band by band as the resize reads it (or, forced to Pillow, by Pillow into
    the pipeline's array), resized premultiplied without a full-size copy, composited in
    place. It cost Pillow + 1.3 GB on 0.1.0, and forced to Pillow 1,940 MiB before
    Pillow decoded into the pipeline's array; natively, it cost 841 MiB while the core
    decoded it whole (200 MiB now: the output, 149 MiB, plus 51)."""
    path = tmp_path / "rgba.png"
    _streamed_png(path, 13000)
    pillow = _measure("pillow", path)
    assert pillow["outcome"] == ["RGBA", [13000, 13000]]
    ours = _measure("ours", path, decode=decode, max_image_pixels=None)
    assert ours["outcome"] == [66564, 3, 14, 14], ours
    _within_bound(f"13000x13000 RGBA PNG, K3, decode={decode}", ours, pillow["grown"])
    if decode == "auto":  # decoded band by band into the resize (issue #24 item 2): no Pillow term
        assert ours["grown"] <= ours["out"] + 64 * MIB, ours


def test_rgba_png_13000_on_8_threads_costs_no_more_than_pillow_plus_output(tmp_path):
    """The 13000x13000 RGBA PNG on 8 threads (more than this machine's cores): the
    bands in flight share one budget of working memory, so more threads do not add
    more. With 5 MB of bands per thread it grew 17.6 MiB over its bound."""
    path = tmp_path / "rgba.png"
    _streamed_png(path, 13000)
    pillow = _measure("pillow", path)
    ours = _measure("ours", path, max_image_pixels=None, num_threads=8)
    assert ours["outcome"] == [66564, 3, 14, 14], ours
    _within_bound("13000x13000 RGBA PNG, K3, 8 threads", ours, pillow["grown"])


def test_la_png_on_the_pillow_path_costs_no_more_than_pillow_plus_output(tmp_path):
    """A 12000x12000 LA PNG forced to Pillow: Pillow's image (in several blocks) is
    read by the core band by band. Copied once after Pillow's load, it grew by 843 MiB,
    82 over its bound."""
    path = tmp_path / "la.png"
    _streamed_png(path, 12000, kind="LA")
    pillow = _measure("pillow", path)
    assert pillow["outcome"] == ["LA", [12000, 12000]]
    ours = _measure("ours", path, decode="pillow", max_image_pixels=None)
    assert ours["outcome"][1:] == [3, 14, 14], ours
    _within_bound("12000x12000 LA PNG on the Pillow path, K3", ours, pillow["grown"])


@pytest.mark.parametrize("num_threads", [1, 2])
@pytest.mark.parametrize(("in_patch_limit", "patches"), [(65536, 66564), (1024, 1024), (16, 16)])
def test_decoded_pil_image_costs_no_more_than_pillow_plus_output(tmp_path, in_patch_limit, patches, num_threads):
    """An 8000x8000 JPEG decoded by Pillow, then given as a PIL image (in several
    blocks of Pillow's memory): the core reads it band by band. Copied once before
    the call, it grew by the image (+244 MiB) on top of Pillow's decode. Under a strong
    downscale (``in_patch_limit`` 1024: about 18x; 16: about 140x) a band reads no more
    input rows than its thread's share holds: reading all of a 64-row band's, it grew by
    325 MiB at 1024 on 2 threads, and by 506 / 431 at 16 on 1 / 2 threads (bounds 312, 310)."""
    path = tmp_path / "decoded.jpg"
    gradient = Image.linear_gradient("L").resize((8000, 8000))
    Image.merge("RGB", (gradient, gradient.rotate(90), gradient.rotate(45))).save(path, quality=90)
    pillow = _measure("pillow", path)
    ours = _measure("ours-pil", path, num_threads=num_threads, cfg={"in_patch_limit": in_patch_limit})
    assert ours["outcome"] == [patches, 3, 14, 14], ours
    _within_bound(f"8000x8000 PIL image, K3 in_patch_limit={in_patch_limit}, {num_threads} threads", ours,
                  pillow["grown"])


#: K3 compositing before the resize (the reference's default stage) instead of after it.
BEFORE = {"cfg": {"transparent_bg_fill_stage": "before_resize"}}


@pytest.mark.parametrize("stage", ["after_resize", "before_resize"])
@pytest.mark.parametrize("kind", ["L-key", "I;16"])
def test_grey_png_with_mode_steps_costs_no_more_than_pillow_plus_output(tmp_path, kind, stage):
    """A 12000x12000 grey PNG with a tRNS colour key, and a 16-bit one, both left to
    Pillow by the native decoder. After the resize: the keyed one is resized in mode L
    (Pillow's image read band by band), then made RGBA from its key; the 16-bit one is
    resized by Pillow in I;16 (the reference's own step). Before it: each is converted
    (to RGBA, to RGB) band by band as the core reads it. The keyed one grew by 144 MiB
    more (an np.asarray copy) after the resize, and by 1,157 MiB before it (its whole
    RGBA conversion, then a composited copy)."""
    path = tmp_path / "grey.png"
    _streamed_png(path, 12000, kind=kind)
    pillow = _measure("pillow", path)
    ours = _measure("ours", path, max_image_pixels=None, **(BEFORE if stage == "before_resize" else {}))
    assert ours["outcome"][1:] == [3, 14, 14], ours
    _within_bound(f"12000x12000 {kind} PNG, K3 {stage}", ours, pillow["grown"])


@pytest.mark.parametrize("stage", ["after_resize", "before_resize"])
def test_cmyk_jpeg_costs_no_more_than_pillow_plus_output(tmp_path, stage):
    """An 8000x8000 CMYK JPEG (Pillow decodes every CMYK JPEG): resized in CMYK from
    Pillow's image band by band, then converted; or, before the resize, converted to
    RGB band by band as the core reads it. Through np.asarray it held a copy of the
    image (+244 MiB) and tobytes()'s chunks; converted whole before the resize, it grew
    33 MiB over its bound."""
    path = tmp_path / "cmyk.jpg"
    gradient = Image.linear_gradient("L").resize((8000, 8000))
    bands = (gradient, gradient.rotate(90), gradient.rotate(45), gradient.rotate(180))
    Image.merge("CMYK", bands).save(path, quality=90)
    pillow = _measure("pillow", path)
    assert pillow["outcome"] == ["CMYK", [8000, 8000]]
    ours = _measure("ours", path, **(BEFORE if stage == "before_resize" else {}))
    assert ours["outcome"] == [66564, 3, 14, 14], ours
    _within_bound(f"8000x8000 CMYK JPEG, K3 {stage}", ours, pillow["grown"])


@pytest.mark.parametrize("decode", ["auto", "pillow"])
def test_rgba_png_composited_before_the_resize_costs_no_more_than_pillow_plus_output(tmp_path, decode):
    """A 10000x10000 RGBA PNG under K3 with ``before_resize``: each band's input rows
    are composited as the resize reads them. With a composited copy of the whole image
    it grew by 860 MiB, 265 over its bound."""
    path = tmp_path / "rgba.png"
    _streamed_png(path, 10000)
    pillow = _measure("pillow", path)
    ours = _measure("ours", path, decode=decode, max_image_pixels=None, **BEFORE)
    assert ours["outcome"][1:] == [3, 14, 14], ours
    _within_bound(f"10000x10000 RGBA PNG, K3 before_resize, decode={decode}", ours, pillow["grown"])


def test_rgb_png_with_a_colour_key_costs_no_more_than_pillow_plus_output(tmp_path):
    """A 10000x10000 RGB PNG with a tRNS colour key (the native decoder leaves it to
    Pillow, and K3 reads it as RGB): Pillow decodes it into the pipeline's array.
    It grew by 782 MiB (bound 596) when a colour key kept it out of that path."""
    path = tmp_path / "keyed.png"
    _streamed_png(path, 10000, kind="RGB-key")
    pillow = _measure("pillow", path)
    assert pillow["outcome"] == ["RGB", [10000, 10000]]
    ours = _measure("ours", path, max_image_pixels=None)
    assert ours["outcome"][1:] == [3, 14, 14], ours
    _within_bound("10000x10000 RGB PNG with tRNS, K3", ours, pillow["grown"])


@pytest.mark.parametrize("num_threads", [1, 2])
def test_large_jpeg_from_bytes_is_never_decoded_whole(tmp_path, num_threads):
    """Issue #24 item 2: an 8000x6000 JPEG from bytes under K2.5 is decoded band by
    band as the resize reads it (on 2 threads, decoded ahead on the second while the
    first resizes), so the peak grows by at most the output plus 64 MiB, with no
    Pillow term: the decoded image alone is 137 MiB (it grew by 194 MiB when it was
    decoded whole)."""
    import kimi_k3_rs

    path = tmp_path / "photo.jpg"
    grain = [Image.effect_noise((8000, 6000), sigma) for sigma in (40, 50, 60)]
    Image.merge("RGB", grain).save(path, "JPEG", quality=90)
    cfg = kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
    ours = _measure("ours", path, cfg=cfg, num_threads=num_threads)
    assert ours["outcome"] == [148 * 112, 3, 14, 14], ours
    grown, bound = ours["grown"], ours["out"] + 64 * MIB
    print(f"\n[memory] 8000x6000 JPEG from bytes, K2.5, {num_threads} thread(s): ours +{grown / MIB:.0f} MiB, "
          f"output {ours['out'] / MIB:.0f} MiB, bound {bound / MIB:.0f} MiB")
    assert grown <= bound, ours


def test_large_jpeg_on_the_pillow_path_costs_no_more_than_pillow_plus_output(tmp_path):
    """An 8000x8000 JPEG forced to Pillow (as every JPEG is where the native decoder
    is unavailable): Pillow decodes it into the pipeline's array, no copy after. With
    a copy of Pillow's image after its load (band by band, the cheapest copy) it grew
    by 508 MiB, over the 459 MiB bound; through np.asarray (0.1.0) by more."""
    path = tmp_path / "large.jpg"
    gradient = Image.linear_gradient("L").resize((8000, 8000))
    Image.merge("RGB", (gradient, gradient.rotate(90), gradient.rotate(45))).save(path, quality=90)
    pillow = _measure("pillow", path)
    assert pillow["outcome"] == ["RGB", [8000, 8000]]
    ours = _measure("ours", path, decode="pillow")
    assert ours["outcome"] == [66564, 3, 14, 14], ours
    _within_bound("8000x8000 JPEG on the Pillow path, K3", ours, pillow["grown"])


def test_rgba_array_16000_makes_no_full_size_copy():
    """A decoded 16000x16000 RGBA array (1 GiB) under K3: no Pillow term, so the call
    may grow the peak by the output plus 64 MiB (the 39 MB composited resize result and the bands'
    working memory). 0.1.0 made a premultiplied copy of the whole array (+1 GB)."""
    ours = _measure("ours", None, 16000)
    assert ours["outcome"] == [66564, 3, 14, 14], ours
    _within_bound("16000x16000 RGBA array, K3", ours, 0)


def test_gif_with_a_large_screen_costs_no_more_than_pillow_plus_output(tmp_path):
    """A 35-byte GIF whose 9000x9000 screen holds one 1x1 frame (Pillow alone grows by
    under 1 MB: the screen's pages are never written); 0.1.0 grew by 342 MB."""
    path = tmp_path / "screen.gif"
    _large_screen_gif(path, 9000, 9000)
    pillow = _measure("pillow", path)
    assert pillow["outcome"] == ["P", [9000, 9000]]
    ours = _measure("ours", path)
    assert ours["outcome"][1:] == [3, 14, 14], ours
    _within_bound("9000x9000-screen GIF, K3", ours, pillow["grown"])


def test_webp_with_a_large_canvas_is_refused_before_decoding(tmp_path):
    """A 144-byte WebP with a 16000x11000 canvas: Pillow alone grows by 2.8 GB (four
    canvases). With the pixel limit off, the default max_decoded_bytes (1 GiB) counts
    the four canvases and refuses it from its header; it cost 3.0 GB on 0.1.0."""
    path = tmp_path / "canvas.webp"
    _large_canvas_webp(path, 16000, 11000)
    assert len(path.read_bytes()) == 144
    ours = _measure("ours", path, max_image_pixels=None)
    assert ours["outcome"] == (
        "ImageTooLargeError: image 0: image of 16000x11000 decodes to 2816000000 bytes, over "
        "max_decoded_bytes=1073741824 (a decompression bomb?); pass a larger max_decoded_bytes, "
        "or None, to decode it"
    )
    assert ours["grown"] < 16 * MIB, ours
