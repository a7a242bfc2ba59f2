"""Soak test for issue #6: resident memory stays flat over many calls.

Runs ``--calls`` (default 10,000) calls of realistic sizes through every entry
point and input kind, errors included, and prints the resident set size
(``/proc/self/statm``, Linux) every ``--interval`` calls. The baseline is taken
after ``--warmup`` calls (allocator pools, thread pools, Pillow plugins and numpy
caches settle there); the script exits with status 1 when RSS grows past the
baseline by more than ``--max-growth-pct`` percent (default 5) or
``--max-growth-mb`` MB (default 32), whichever is larger.

The workload cycles through (one step per call):

0. numpy RGB ``--size`` (default 1280x720), K2.5 preset;
1. PIL RGBA (3/4 of ``--size``), K3 preset (chessboard after the resize);
2. JPEG bytes of a photo-like image, K3, through ``KimiK3VisionProcessor``;
3. PNG palette image with ``transparency`` bytes, K3 before_resize;
4. ``out=`` reuse of one preallocated buffer;
5. ``dtype="bfloat16"`` with ``num_threads=2``;
6. ``prepare_kimi_k3_encoder_inputs`` + ``materialize`` on a JPEG and an array;
7. ``count_image_tokens`` on 1,000 sizes;
8. errors: a float32 array, undecodable bytes, a truncated JPEG, the 65-byte
   100000x100000 PNG (ImageTooLargeError);
9. a 4-image batch (mixed kinds), ``num_threads=4``.

Usage::

    python benchmarks/soak.py                     # 10,000 calls
    python benchmarks/soak.py --calls 2000 --interval 250 --size 640x480
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import struct
import sys
import time
import zlib

import numpy as np
from PIL import Image

import kimi_k3_rs


def rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def photo_like(w: int, h: int, seed: int) -> np.ndarray:
    """Smooth gradients plus noise: compresses like a photo, resizes like one."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([x / w * 255, y / h * 255, (x + y) / (w + h) * 255], axis=2)
    noise = rng.normal(0, 12, (h, w, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def encode(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def bomb_png(w: int = 100000, h: int = 100000) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))


def make_workload(width: int, height: int):
    k25 = kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
    k3 = kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG
    k3_before = dict(k3, transparent_bg_fill_stage="before_resize")
    rgb = photo_like(width, height, 1)
    rgba_arr = np.dstack([photo_like(width * 3 // 4, height * 3 // 4, 2),
                          np.tile(np.array([0, 128, 255], np.uint8), height * 3 // 4 * (width * 3 // 4) // 3 + 1)
                          [: height * 3 // 4 * (width * 3 // 4)].reshape(height * 3 // 4, width * 3 // 4)])
    rgba = Image.fromarray(rgba_arr, "RGBA")
    jpeg = encode(Image.fromarray(photo_like(1024, 768, 3)), "JPEG", quality=90)
    palette = Image.fromarray(photo_like(640, 480, 4)).convert("P", palette=Image.Palette.ADAPTIVE)
    palette.info["transparency"] = bytes([0, 64, 128, 255] * 64)
    png_p = encode(palette, "PNG")
    proc = kimi_k3_rs.KimiK3VisionProcessor(k3)
    n_rows = kimi_k3_rs.preprocess(rgb, k25)["pixel_values"].shape[0]
    out = np.empty((n_rows, 3, 14, 14), np.float32)
    sizes = np.random.default_rng(5).integers(1, 20000, (1000, 2))
    bad_array = np.zeros((64, 64, 3), np.float32)
    junk = os.urandom(4096)
    truncated = jpeg[: len(jpeg) // 2]
    bomb = bomb_png()

    def expect_error(call) -> None:
        try:
            call()
        except ValueError:
            return
        raise AssertionError("no error")

    steps = [
        lambda: kimi_k3_rs.preprocess(rgb, k25),
        lambda: kimi_k3_rs.preprocess(rgba, k3),
        lambda: proc.preprocess([{"type": "image", "image": jpeg}]),
        lambda: kimi_k3_rs.preprocess(png_p, k3_before),
        lambda: kimi_k3_rs.preprocess(rgb, k25, out=out),
        lambda: kimi_k3_rs.preprocess(rgba, k3, dtype="bfloat16", num_threads=2),
        lambda: kimi_k3_rs.prepare_kimi_k3_encoder_inputs([jpeg, rgb], k3).materialize(),
        lambda: kimi_k3_rs.count_image_tokens(sizes, k3),
        lambda: [expect_error(lambda: kimi_k3_rs.preprocess(item, k3)) for item in (bad_array, junk, truncated, bomb)],
        lambda: kimi_k3_rs.preprocess([rgb, rgba, jpeg, png_p], k3, num_threads=4),
    ]
    return steps


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--interval", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--size", default="1280x720", help="WxH of the main numpy input")
    parser.add_argument("--max-growth-pct", type=float, default=5.0)
    parser.add_argument("--max-growth-mb", type=float, default=32.0)
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))

    steps = make_workload(width, height)
    print(f"kimi_k3_rs {kimi_k3_rs.__version__} ({kimi_k3_rs.build_profile}, {kimi_k3_rs.simd_path}), "
          f"Pillow {Image.__version__}, numpy {np.__version__}, Python {sys.version.split()[0]}")
    print(f"{args.calls} calls, main input {width}x{height}, RSS every {args.interval} calls")
    print(f"{'calls':>7} {'RSS MB':>9} {'vs baseline':>12} {'s':>8}")
    start = time.perf_counter()
    baseline = None
    peak = 0.0
    for i in range(1, args.calls + 1):
        steps[(i - 1) % len(steps)]()
        if i == args.warmup:
            gc.collect()
            baseline = rss_mb()
        if i % args.interval == 0 or i == args.calls:
            gc.collect()
            rss = rss_mb()
            peak = max(peak, rss)
            delta = "" if baseline is None else f"{rss - baseline:+.1f} MB"
            print(f"{i:>7} {rss:>9.1f} {delta:>12} {time.perf_counter() - start:>8.1f}", flush=True)
    final = rss_mb()
    if baseline is None:
        baseline = final
    growth = final - baseline
    allowed = max(args.max_growth_mb, baseline * args.max_growth_pct / 100)
    print(f"baseline (after {args.warmup} calls) {baseline:.1f} MB, final {final:.1f} MB, peak {peak:.1f} MB, "
          f"growth {growth:+.1f} MB ({100 * growth / baseline:+.2f} %), allowed {allowed:.1f} MB")
    if growth > allowed:
        print("FAIL: resident memory grew")
        return 1
    print("OK: resident memory flat")
    return 0


if __name__ == "__main__":
    sys.exit(main())
