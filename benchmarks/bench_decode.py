"""Native JPEG decode (``_native.decode_image``) against Pillow's, on one large photo.

    python benchmarks/bench_decode.py [--runs 21] [--photo astronaut.png] [--progressive]

The file: a shipped photo resized up to 4032x3024 (BICUBIC) and saved by Pillow at
quality 90, 4:2:0 (a phone-camera-sized JPEG). Each run decodes the same bytes:

* ``pillow load``: ``Image.open(BytesIO(data)).load()`` (what the pipeline would do
  without the native path); the ratio is against this.
* ``pillow load + asarray``: the same, then ``np.asarray`` (Pillow's RGBX image to the
  HxWx3 array the native path returns directly).
* ``native``: ``_native.decode_image(data)``, the libjpeg Pillow links, loaded at run
  time, writing rows straight into the returned array.

Runs alternate (pillow, native, pillow, ...) so drift affects both; the figures are
medians of wall-clock time. Reported figures, not a pass/fail check.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from pathlib import Path

import numpy as np
from kimi_k3_rs import _native
from kimi_k3_rs._input.native import find_pillow_libjpeg
from PIL import Image

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--photo", default="astronaut.png")
    parser.add_argument("--progressive", action="store_true")
    args = parser.parse_args()

    path = find_pillow_libjpeg()
    if path is None:
        raise SystemExit("the installed Pillow's libjpeg was not found")
    print(_native.load_libjpeg(path))
    img = Image.open(DATA / args.photo).convert("RGB").resize((4032, 3024), Image.Resampling.BICUBIC)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90, subsampling=2, progressive=args.progressive)
    data = buf.getvalue()
    kind = "progressive" if args.progressive else "baseline"
    print(f"{args.photo} at 4032x3024, q90 4:2:0 {kind}: {len(data) / 1e6:.2f} MB")

    def pillow_load() -> Image.Image:
        im = Image.open(io.BytesIO(data))
        im.load()
        return im

    def pillow() -> np.ndarray:
        return np.asarray(pillow_load())

    def native() -> np.ndarray:
        kind, arr = _native.decode_image(data)
        assert kind == "native", arr
        return arr  # type: ignore[no-any-return]

    if not np.array_equal(pillow(), native()):
        raise SystemExit("native decode differs from Pillow's")
    runs = {"pillow load": pillow_load, "pillow load + asarray": pillow, "native": native}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.runs):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(t) for name, t in times.items()}
    for name in runs:
        print(f"{name:22s} {med[name] * 1e3:8.1f} ms (median of {args.runs})")
    print(f"native / pillow load: {med['native'] / med['pillow load']:.3f}")


if __name__ == "__main__":
    main()
