"""The resize stage against its peers, one thread, in one process (issue #24, item 3).

For each case of the resize table: Pillow ``Image.resize(BICUBIC)`` (the reference, exact),
ours (``_native.resize_bicubic``, exact: checked against Pillow here), fast_image_resize
(through ``cykooz.resizer``, Catmull-Rom convolution, its best CPU extension) and OpenCV
``cv2.resize(INTER_CUBIC)`` (both inexact: a different filter support and fixed point). CPU
time per call (``time.process_time``), medians of ``--repeat`` rounds in which the peers run
interleaved, in a new (seeded) order each round: the call right after Pillow's pays about a
fifth more for its output's memory (Pillow frees large blocks), so a fixed order loaded that
cost on whoever came second. The peers are benchmark-only: ``pip install opencv-python-headless cykooz.resizer``.

    python benchmarks/bench_resize_peers.py [--repeat 15] [--before DIR]

``--before DIR`` also times the ``_native`` extension in ``DIR`` (``_native.abi3.so``: another
build, e.g. ``target/release/libkimi_k3_rs.so`` of an earlier commit) in the same rounds,
its bytes checked too, and prints ours / before.

Ours runs ``kimi_k3_rs.simd_path``'s kernels (printed; on ``avx512``, which of its kernels the
CPU runs, also printed); the Rust benchmarks time the AVX2 and AVX-512 paths on these cases
(``cargo bench --bench preprocess -- resize_peer_cases``).
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
from PIL import Image

import kimi_k3_rs
from kimi_k3_rs import _native

#: (source width, height) -> (resized width, height): the issue's table.
CASES = [
    ((8000, 8000), (1793, 1793)),
    ((4032, 3024), (2069, 1551)),
    ((1242, 2688), (1223, 2646)),
    ((1920, 1080), (1288, 728)),
]


def avx512_kernel() -> str:
    """Which AVX-512 resize kernel this CPU runs (Linux ``/proc/cpuinfo``; "unknown" elsewhere):
    the quads with VNNI, VBMI and VL (``resize/quads.rs``), the VNNI kernel on byte columns with
    VNNI alone, else the F + BW one."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((set(line.split()) for line in f if line.startswith("flags")), set())
    except OSError:
        return "unknown"
    if {"avx512_vnni", "avx512vbmi", "avx512vl"} <= flags:
        return "quads (VNNI + VBMI)"
    return "VNNI on byte columns" if "avx512_vnni" in flags else "F + BW"


def cpu_ms(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return (time.process_time() - start) * 1e3


def load_before(folder: str) -> ModuleType:
    """The ``_native`` extension built in ``folder``, loaded beside ours (as ``before._native``)."""
    path = Path(folder) / "_native.abi3.so"
    spec = importlib.util.spec_from_file_location("before._native", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"no extension at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def peers(
    array: np.ndarray, size: tuple[int, int], before: ModuleType | None
) -> dict[str, Callable[[], object]]:
    """Each contender's one call, on the same HxWx3 uint8 array."""
    new_w, new_h = size
    image = Image.fromarray(array)
    options = _native.Options("13", "float32", 1)
    out: dict[str, Callable[[], object]] = {
        "pillow": lambda: image.resize(size, Image.Resampling.BICUBIC),
        "ours": lambda: _native.resize_bicubic(array, new_w, new_h, options),
    }
    if before is not None:
        old_options = before.Options("13", "float32", 1)
        out["before"] = lambda: before.resize_bicubic(array, new_w, new_h, old_options)
    try:
        import cykooz_resizer as fir

        src = fir.ImageData(array.shape[1], array.shape[0], fir.PixelType.U8x3, array.tobytes())
        dst = fir.ImageData(new_w, new_h, fir.PixelType.U8x3)
        resizer = fir.Resizer()
        resizer.cpu_extensions = fir.CpuExtensions.avx2
        fir_options = fir.ResizeOptions(resize_alg=fir.ResizeAlg.convolution(fir.FilterType.catmull_rom))
        out["fast_image_resize"] = lambda: resizer.resize(src, dst, fir_options)
    except ImportError:
        pass
    try:
        import cv2

        cv2.setNumThreads(1)
        out["cv2"] = lambda: cv2.resize(array, size, interpolation=cv2.INTER_CUBIC)
    except ImportError:
        pass
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--before", metavar="DIR", help="a folder holding another build's _native.abi3.so")
    args = parser.parse_args()
    before = load_before(args.before) if args.before else None
    rng = np.random.default_rng(0)
    order = random.Random(0)
    kernel = f" (kernel: {avx512_kernel()})" if kimi_k3_rs.simd_path == "avx512" else ""
    print(f"simd_path {kimi_k3_rs.simd_path}{kernel}, one thread, CPU ms medians of {args.repeat}")
    extra = f" {'before':>8} {'ours/before':>11}" if before else ""
    print(f"{'case':<28} {'pillow':>8} {'ours':>8} {'fir':>8} {'cv2':>8} {'ours/fir':>9} {'ours/cv2':>9}{extra} exact")
    for (w, h), size in CASES:
        array = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        calls = peers(array, size, before)
        reference = np.asarray(calls["pillow"]())
        exact = all(np.array_equal(reference, calls[name]()) for name in ("ours", "before") if name in calls)
        times: dict[str, list[float]] = {name: [] for name in calls}
        names = list(calls)
        for _ in range(args.repeat):
            # a new order each round: the call after Pillow's (which frees its large blocks)
            # pays about a fifth more for its output's pages, so no one may always be there
            order.shuffle(names)
            for name in names:
                times[name].append(cpu_ms(calls[name]))
        med = {name: statistics.median(t) for name, t in times.items()}
        fir, cv = med.get("fast_image_resize", float("nan")), med.get("cv2", float("nan"))
        extra = f" {med['before']:8.2f} {med['ours'] / med['before']:11.2f}" if before else ""
        print(f"{f'{w}x{h} -> {size[0]}x{size[1]}':<28} {med['pillow']:8.2f} {med['ours']:8.2f} {fir:8.2f} "
              f"{cv:8.2f} {med['ours'] / fir:9.2f} {med['ours'] / cv:9.2f}{extra} {exact}")


if __name__ == "__main__":
    main()
