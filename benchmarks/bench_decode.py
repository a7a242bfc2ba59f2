"""Native JPEG decode (``_native.decode_image``) against Pillow's and simplejpeg's.

    python benchmarks/bench_decode.py [--runs 21] [--sizes 4032x3024,8000x6000]
        [--photo astronaut.png | --photo pattern] [--noise 6] [--progressive] [--wall]
        [--features]

The files: a shipped photo (``tests/data/<photo>``) resized to each size (BICUBIC), or,
with ``--photo pattern``, the self-check's synthetic image (gradients, XOR edges and
+-24 noise: a high-entropy file whose decode is mostly Huffman decoding), optionally
with uniform noise of +-``--noise`` added (camera-like grain), saved by Pillow at
quality 90, 4:2:0. Each run decodes the same bytes from memory:

* ``pillow load``: ``Image.open(BytesIO(data)).load()`` (Pillow's RGBX image).
* ``simplejpeg``: ``simplejpeg.decode_jpeg(data, "RGB", fastdct=False,
  fastupsample=False)``, the libjpeg-turbo it bundles (a benchmark-only peer:
  ``pip install simplejpeg``; the row is left out when it is not installed).
* ``native``: ``_native.decode_image(data)``: the route (marker and scan walk) and the
  decode, through the libjpeg-turbo the installed Pillow links, loaded at run time,
  into a fresh array.
* with ``--features`` (and ``--wall``): ``kimi_k3_rs.preprocess(data, K2.5)`` on 1 and on
  2 threads, bytes to features: the decode streamed into the resize (on 2 threads,
  decoded ahead on the second while the first resizes), padded, normalised, patchified.

All three outputs are checked equal to ``np.asarray`` of Pillow's image first. Runs
alternate, in a new (seeded) order each round, so that drift affects all alike and no one
always runs right after Pillow's load (which frees large blocks); the
figures are medians of the calling thread's CPU time (``time.thread_time``; every
decoder runs on the calling thread), or of wall-clock time with ``--wall``. Set
``OPENBLAS_NUM_THREADS=1`` so numpy's BLAS threads stay idle. Reported figures, not
a pass/fail check.
"""

from __future__ import annotations

import argparse
import functools
import io
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kimi_k3_rs
import numpy as np
from kimi_k3_rs import _native
from kimi_k3_rs._input.native import _pattern, find_pillow_libjpeg
from PIL import Image

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"


def bundled_turbo(module: Any) -> str:
    """The "libjpeg-turbo version X.Y.Z" banner inside an extension's files."""
    key = b"libjpeg-turbo version "
    for path in Path(module.__file__).parent.glob("*.so"):
        data = path.read_bytes()
        at = data.find(key)
        if at >= 0:
            return data[at:data.index(b"\0", at)].decode()
    return "libjpeg-turbo version unknown"


def make_file(args: argparse.Namespace, width: int, height: int) -> bytes:
    if args.photo == "pattern":
        pixels = _pattern(width, height, 1)
    else:
        image = Image.open(DATA / args.photo).convert("RGB")
        pixels = np.asarray(image.resize((width, height), Image.Resampling.BICUBIC))
    if args.noise:
        grain = np.random.default_rng(0).integers(-args.noise, args.noise + 1, pixels.shape)
        pixels = np.clip(pixels.astype(np.int16) + grain, 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=90, subsampling=2, progressive=args.progressive)
    return buf.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--sizes", default="4032x3024,8000x6000")
    parser.add_argument("--photo", default="astronaut.png", help="a file of tests/data, or 'pattern'")
    parser.add_argument("--noise", type=int, default=0, help="add uniform noise of +-NOISE")
    parser.add_argument("--progressive", action="store_true")
    parser.add_argument("--wall", action="store_true", help="wall-clock time, not CPU time")
    parser.add_argument("--features", action="store_true", help="bytes to K2.5 features on 1 and 2 threads too")
    args = parser.parse_args()
    if args.features and not args.wall:
        parser.error("--features measures latency on 2 threads: add --wall")

    path = find_pillow_libjpeg()
    if path is None:
        raise SystemExit("the installed Pillow's libjpeg was not found")
    print("native:", _native.load_libjpeg(path))
    try:
        import simplejpeg
    except ImportError:
        simplejpeg = None
        print("simplejpeg: not installed (pip install simplejpeg), its row is left out")
    else:
        print(f"simplejpeg {simplejpeg.__version__}: {bundled_turbo(simplejpeg)}")

    for size in args.sizes.split(","):
        width, height = (int(v) for v in size.split("x"))
        data = make_file(args, width, height)
        kind = "progressive" if args.progressive else "baseline"
        noise = f" + noise {args.noise}" if args.noise else ""
        print(f"\n{args.photo}{noise} at {width}x{height}, q90 4:2:0 {kind}: {len(data) / 1e6:.2f} MB")
        measure(data, simplejpeg, args.runs, args.wall, args.features)


def measure(data: bytes, simplejpeg: Any, runs: int, wall: bool, features: bool) -> None:
    """Check the decoders agree on ``data``, then print their medians and ratios."""
    clock = time.perf_counter if wall else time.thread_time

    def pillow_load() -> Image.Image:
        im = Image.open(io.BytesIO(data))
        im.load()
        return im

    def peer() -> np.ndarray:
        return simplejpeg.decode_jpeg(data, "RGB", fastdct=False, fastupsample=False)  # type: ignore[no-any-return]

    def native() -> np.ndarray:
        kind, arr = _native.decode_image(data)
        assert kind == "native", arr
        return arr  # type: ignore[no-any-return]

    decoders: dict[str, Callable[[], Any]] = {"pillow load": pillow_load}
    if simplejpeg is not None:
        decoders["simplejpeg"] = peer
    decoders["native"] = native
    if features:
        for threads in (1, 2):
            decoders[f"features {threads}t"] = functools.partial(
                kimi_k3_rs.preprocess, data, kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG, num_threads=threads
            )
    reference = np.asarray(pillow_load())
    for name, fn in decoders.items():
        if name in ("simplejpeg", "native") and not np.array_equal(fn(), reference):
            raise SystemExit(f"{name} decode differs from Pillow's")
    times: dict[str, list[float]] = {name: [] for name in decoders}
    names, order = list(decoders), random.Random(0)
    for _ in range(runs):
        # a new order each round (seeded): the call right after Pillow's (which frees large
        # blocks) may pay more for its output's memory, so no one may always be there
        order.shuffle(names)
        for name in names:
            t0 = clock()
            decoders[name]()
            times[name].append(clock() - t0)
    med = {name: statistics.median(t) for name, t in times.items()}
    what = "wall" if wall else "CPU"
    for name in decoders:
        print(f"{name:12s} {med[name] * 1e3:8.1f} ms ({what}, median of {runs})")
    print(f"native / pillow load: {med['native'] / med['pillow load']:.3f}")
    if "simplejpeg" in med:
        print(f"native / simplejpeg:  {med['native'] / med['simplejpeg']:.3f}")
        print(f"simplejpeg / pillow load: {med['simplejpeg'] / med['pillow load']:.3f}")
    if features:
        base = med.get("simplejpeg", med["native"])
        against = "simplejpeg" if "simplejpeg" in med else "native"
        for threads in (1, 2):
            print(f"features {threads}t / {against} decode: {med[f'features {threads}t'] / base:.3f}")
        print(f"features 1t / features 2t (latency): {med['features 1t'] / med['features 2t']:.3f}")

if __name__ == "__main__":
    main()
