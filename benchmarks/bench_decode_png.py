"""Native PNG decoding (zlib-rs inflate, as ZipDecode.c) against Pillow's, on two large PNGs.

    python benchmarks/bench_decode_png.py [--runs 21]

The two files are made here with Pillow's encoder (``compress_level=6``):

* ``photo``: ``tests/data/astronaut.png`` as RGB, resized up to 4032x3024 with
  ``Image.BICUBIC`` (a phone-camera-sized photo).
* ``screenshot``: 1242x2688 RGB (a phone screenshot): a flat background, a
  status bar and a tab bar, list rows of flat cards with dark "text" runs (short
  bars of glyph height on a baseline grid), square icons, and
  ``tests/data/chelsea.png`` pasted in as an inline photo. Deterministic
  (``numpy.random.default_rng(0)``).

Each figure is the wall-clock median of ``--runs`` interleaved runs (native,
Pillow ``load()``, Pillow ``load()`` + ``np.asarray``, in a new seeded order each
round: a fixed order makes one contender always run after another's frees), one thread, from the
encoded bytes in memory. ``native`` is ``kimi_k3_rs._native.decode_image``: the
route (chunk walk) plus the decode into a fresh numpy array. It checks the
bytes are equal first. Reported figures, not a pass/fail check.
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import time
from pathlib import Path

import numpy as np
from PIL import Image

from kimi_k3_rs import _native

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"


def photo() -> Image.Image:
    src = Image.open(DATA / "astronaut.png").convert("RGB")
    return src.resize((4032, 3024), Image.BICUBIC)


def screenshot() -> Image.Image:
    rng = np.random.default_rng(0)
    w, h = 1242, 2688
    a = np.empty((h, w, 3), np.uint8)
    a[:] = (242, 242, 247)
    a[:132] = (248, 248, 248)  # status + navigation bar
    a[h - 250 :] = (250, 250, 250)  # tab bar
    for x in range(60, w, 250):  # tab icons
        a[h - 200 : h - 120, x : x + 80] = (0, 122, 255) if x == 60 else (142, 142, 147)
    y = 180
    while y < h - 300:
        card = int(rng.integers(150, 330))
        a[y : y + card, 40 : w - 40] = (255, 255, 255)
        a[y + 30 : y + 126, 70 : 166] = rng.integers(0, 256, 3)  # avatar
        for line in range(y + 36, y + card - 40, 48):  # text lines
            x = 200
            while x < w - 120:
                word = int(rng.integers(20, 150))
                shade = (28, 28, 30) if line == y + 36 else (99, 99, 102)
                a[line : line + 26, x : min(x + word, w - 80)] = shade
                x += word + int(rng.integers(12, 22))
        y += card + 24
    im = Image.fromarray(a)
    cat = Image.open(DATA / "chelsea.png").convert("RGB").resize((1002, 660), Image.BICUBIC)
    im.paste(cat, (120, 1500))
    return im


def encode(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG", compress_level=6)
    return buf.getvalue()


def bench(name: str, data: bytes, runs: int) -> None:
    kind, native = _native.decode_image(data)
    assert kind == "native", native
    ref = np.asarray(Image.open(io.BytesIO(data)))
    assert ref.shape == native.shape and np.array_equal(ref, native)

    def run_native() -> None:
        _native.decode_image(data)

    def run_load() -> None:
        Image.open(io.BytesIO(data)).load()

    def run_asarray() -> None:
        np.asarray(Image.open(io.BytesIO(data)))

    fns = {"native": run_native, "pillow load()": run_load, "pillow + asarray": run_asarray}
    times: dict[str, list[float]] = {k: [] for k in fns}
    order = random.Random(0)
    names = list(fns)
    for _ in range(runs):
        order.shuffle(names)
        for key in names:
            t = time.perf_counter()
            fns[key]()
            times[key].append(time.perf_counter() - t)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    h, w = ref.shape[:2]
    print(f"{name}: {w}x{h}, {len(data) / 1e6:.2f} MB PNG")
    for key, ms in med.items():
        ratio = "" if key == "native" else f"  ({ms / med['native']:.2f}x native)"
        print(f"  {key:<18} {ms:8.1f} ms{ratio}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21)
    args = ap.parse_args()
    for name, make in (("photo", photo), ("screenshot", screenshot)):
        bench(name, encode(make()), args.runs)


if __name__ == "__main__":
    main()
