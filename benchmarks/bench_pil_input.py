"""PIL input vs numpy input of ``kimi_k3_rs.preprocess``, and the zero-copy opt-in.

A PIL ``L`` / ``LA`` / ``RGB`` / ``RGBA`` image reaches the core through Pillow's Arrow
export, without ``tobytes()`` (``kimi_k3_rs._input.pil``), when Pillow holds it in one
memory block: by default images up to 16 MiB (2048x2048 RGB).

Usage (from the repository root, after ``pip install .`` or ``maturin develop --release``)::

    python benchmarks/bench_pil_input.py [--runs 21] [--large-runs 7] [--no-large]

1. Default Pillow settings, K2.5, one thread: the same RGB image given as a PIL image
   and as a numpy array, 1920x1080 and 2048x2048; medians of ``--runs`` interleaved
   runs (in a new seeded order each round) and their ratio (target: PIL within 1.15x of numpy). Outputs are checked equal.
2. 4032x3024 (12 MP) and 8000x8000 (64 MP) JPEGs decoded by Pillow under three
   process-wide allocator settings, each round in a new seeded order (medians of
   ``--large-runs``):
   Pillow's default arena of 16 MiB blocks (the core reads the image band by band),
   ``kimi_k3_rs.enable_pillow_zero_copy()`` (``set_use_block_allocator(1)``), and a
   block size large enough for one block (``set_block_size``). Columns: decode
   (``Image.open(...).load()``), preprocess of the decoded PIL image, and their sum.
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import kimi_k3_rs
import numpy as np
import PIL
from PIL import Image
from PIL import _imaging as pillow_core

CFG = kimi_k3_rs.kimi_k25_media_proc_cfg()


def timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """Wall-clock milliseconds of one call ``fn(*args)``, and its result."""
    start = time.perf_counter()
    result = fn(*args)
    return (time.perf_counter() - start) * 1e3, result


def run(pixels: Any) -> dict[str, Any]:
    """One single-threaded K2.5 call."""
    return kimi_k3_rs.preprocess(pixels, CFG, num_threads=1)


def decode(data: bytes) -> Image.Image:
    """Pillow's decode of ``data``, loaded."""
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def photo_like(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A smooth colour field with mild noise (compresses like a photo, unlike pure noise)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([x / width * 255, y / height * 255, (x + y) / (width + height) * 255], axis=2)
    noisy = base + rng.normal(0, 12, (height, width, 3)).astype(np.float32)
    return np.clip(noisy, 0, 255).astype(np.uint8)


def pil_vs_numpy(runs: int) -> None:
    order = random.Random(0)
    print(f"1. PIL vs numpy input, K2.5, num_threads=1, default Pillow allocator, median of {runs}")
    print(f"{'size':>11} {'numpy ms':>9} {'PIL ms':>8} {'PIL/numpy':>9}  exported")
    for width, height in [(1920, 1080), (2048, 2048)]:
        array = photo_like(width, height)
        image = Image.fromarray(array)  # an RGB image in Pillow's own memory
        exported = kimi_k3_rs._input.pil._exported_pixels(image) is not None
        a, b = run(array), run(image)  # also the warm-up
        assert np.array_equal(a["pixel_values"].view(np.uint32), b["pixel_values"].view(np.uint32))
        times: dict[str, list[float]] = {"numpy": [], "PIL": []}
        inputs = [("numpy", array), ("PIL", image)]
        for _ in range(runs):
            order.shuffle(inputs)  # a new order each round: no input always runs second
            for key, given in inputs:
                times[key].append(timed(run, given)[0])
        t_np, t_pil = (statistics.median(times[k]) for k in ("numpy", "PIL"))
        print(f"{width:>5}x{height:<5} {t_np:9.2f} {t_pil:8.2f} {t_pil / t_np:9.3f}  {exported}")


def allocators(runs: int) -> None:
    order = random.Random(0)
    print(f"\n2. Decoded JPEG as PIL input, K2.5, num_threads=1, median of {runs} (ms)")
    saved = (pillow_core.get_use_block_allocator(), pillow_core.get_block_size())
    print(f"{'size':>11} {'allocator':<28} {'decode':>7} {'preprocess':>10} {'total':>7}  exported")
    try:
        for width, height in [(4032, 3024), (8000, 8000)]:
            buffer = io.BytesIO()
            Image.fromarray(photo_like(width, height, seed=1)).save(buffer, "JPEG", quality=90)
            data = buffer.getvalue()
            one_block = -(-width * height * 4 // (1 << 20)) << 20  # MiB multiple, >= the image
            settings = {
                "default (16 MiB arena)": (0, saved[1]),
                "enable_pillow_zero_copy()": None,
                f"set_block_size({one_block >> 20} MiB)": (0, one_block),
            }
            decoding: dict[str, list[float]] = {k: [] for k in settings}
            running: dict[str, list[float]] = {k: [] for k in settings}
            exported: dict[str, bool] = {}
            want = None
            names = list(settings)
            for _ in range(runs + 1):  # the first round warms up
                order.shuffle(names)
                for name in names:
                    setting = settings[name]
                    if setting is None:
                        kimi_k3_rs.enable_pillow_zero_copy()
                    else:
                        pillow_core.set_use_block_allocator(setting[0])
                        pillow_core.set_block_size(setting[1])
                    ms, image = timed(decode, data)
                    decoding[name].append(ms)
                    exported[name] = kimi_k3_rs._input.pil._exported_pixels(image) is not None
                    ms, out = timed(run, image)
                    running[name].append(ms)
                    bits = out["pixel_values"].view(np.uint32)
                    want = bits if want is None else want
                    assert np.array_equal(bits, want)
                    del image, out, bits
            for name in settings:
                d, p = statistics.median(decoding[name][1:]), statistics.median(running[name][1:])
                print(f"{width:>5}x{height:<5} {name:<28} {d:7.1f} {p:10.1f} {d + p:7.1f}  {exported[name]}")
    finally:
        pillow_core.set_use_block_allocator(saved[0])
        pillow_core.set_block_size(saved[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--large-runs", type=int, default=7)
    parser.add_argument("--no-large", action="store_true", help="skip the 12 MP / 64 MP table")
    args = parser.parse_args()
    print(f"kimi_k3_rs {kimi_k3_rs.__version__} ({kimi_k3_rs.build_profile}, {kimi_k3_rs.simd_path}), Pillow {PIL.__version__}")
    pil_vs_numpy(args.runs)
    if not args.no_large:
        allocators(args.large_runs)


if __name__ == "__main__":
    main()
