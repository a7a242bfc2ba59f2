"""Side-by-side speed of kimi_k3_rs and the checkpoint's Pillow + numpy pipeline.

Runs the reference (``tests/reference.py``: Pillow ``Image.resize(BICUBIC)`` +
the checkpoint's numpy pad / normalise / patchify) and ``kimi_k3_rs.preprocess``
in one process on the same noise images, checks that the outputs are bit-identical,
and prints milliseconds (median) and ratios. Single-threaded: kimi_k3_rs runs one
image on one thread, numpy's element-wise loops are single-threaded too.

Usage (from the repository root, after ``pip install .``)::

    python benchmarks/bench_preprocess.py [--repeat N] [--quick]

Columns: ``ref`` = reference from a PIL image; ``ours np`` = kimi_k3_rs from a
numpy array (zero-copy input); ``ours PIL`` = from the PIL image (one
``np.asarray`` copy); ``floor`` = (input bytes + output bytes) / the copy
bandwidth of a large warm ``np.copyto`` measured in the same run.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import PIL
from PIL import Image

import kimi_k3_rs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from reference import reference_preprocess  # noqa: E402

SIZES = [(224, 224), (1920, 1080), (4032, 3024), (8000, 8000)]


def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def copy_bandwidth() -> float:
    """Bytes moved (read + written) per second by a warm 256 MiB ``np.copyto``."""
    src = np.ones(64 * 1024 * 1024, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    seconds = min(_timed(lambda: np.copyto(dst, src)) for _ in range(5))
    return 2 * src.nbytes / seconds


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per case (median)")
    parser.add_argument("--quick", action="store_true", help="skip 8000x8000")
    args = parser.parse_args()
    if kimi_k3_rs.build_profile != "release":
        raise SystemExit("refusing to time a debug build of kimi_k3_rs")
    bandwidth = copy_bandwidth()
    print(
        f"kimi_k3_rs {kimi_k3_rs.__version__} | Pillow {PIL.__version__} | numpy {np.__version__}"
        f" | CPU {cpu_model()} | threads 1 | copy bandwidth {bandwidth / 1e9:.1f} GB/s (read+write)"
    )
    header = f"{'case':<11} {'preset':<5} {'resized -> padded':<24} {'ref ms':>8} {'ours np':>8} {'ratio':>6} {'ours PIL':>8} {'ratio':>6} {'floor':>6} exact"
    print(header)
    print("-" * len(header))
    rng = np.random.default_rng(0)
    for width, height in SIZES:
        if args.quick and width == 8000:
            continue
        array = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        image = Image.fromarray(array)
        for name, cfg in (("K2.5", kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG), ("K3", kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)):
            ref = reference_preprocess(image, cfg)
            ours = kimi_k3_rs.preprocess(array, cfg)
            exact = ours["pixel_values"].tobytes() == ref[0].tobytes() and np.array_equal(ours["grid_thws"], ref[1])
            r = kimi_k3_rs.navit_resize_config(
                width, height, cfg["patch_size"], cfg["merge_kernel_size"], cfg["in_patch_limit"], cfg["patch_limit_on_one_side"]
            )
            sizes = f"{r['new_width']}x{r['new_height']} -> {r['new_width'] + r['pad_width']}x{r['new_height'] + r['pad_height']}"
            repeat = max(2, args.repeat // 2) if width == 8000 else args.repeat
            t_ref = median_ms(lambda: reference_preprocess(image, cfg), repeat)
            t_np = median_ms(lambda: kimi_k3_rs.preprocess(array, cfg), repeat)
            t_pil = median_ms(lambda: kimi_k3_rs.preprocess(image, cfg), repeat)
            floor = (array.nbytes + ours["pixel_values"].nbytes) / bandwidth * 1e3
            print(
                f"{f'{width}x{height}':<11} {name:<5} {sizes:<24} {t_ref:8.2f} {t_np:8.2f} {t_ref / t_np:5.1f}x"
                f" {t_pil:8.2f} {t_ref / t_pil:5.1f}x {floor:6.2f} {'yes' if exact else 'NO'}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
