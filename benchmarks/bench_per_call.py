"""The Python layer's cost per call (issue #24, item 4): ``kimi_k3_rs.preprocess`` against
the native call it makes, one small image from numpy, one thread.

For each size (224x224, 512x600) and preset (K2.5, K3): ``preprocess(array, cfg)`` with the
preset's dict (the config validated once and kept by its content, the options once per set
of values) and with its :class:`~kimi_k3_rs.MediaProcConfig` (kept by identity, as a
processor object holds it), against ``_native.preprocess([_native.BatchItem.image(array,
0)], cfg, options)`` with the config and options made before the loop: the work no Python
layer can skip. All give the same bytes (checked). Wall-clock per call
(``time.perf_counter_ns``), blocks of ``--calls`` calls, the three run in turn, ``--repeat``
blocks each; medians. The overhead is the difference of the medians; the issue's target is
at most 15 us. It grows with the image: the native call leaves the interpreter's caches
cold for the Python work after it.

    python benchmarks/bench_per_call.py [--repeat 31] [--calls 200]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import kimi_k3_rs
from kimi_k3_rs import _native
from kimi_k3_rs.config import call_setup

SIZES = [(224, 224), (512, 600)]
PRESETS = {"K2.5": kimi_k3_rs.kimi_k25_media_proc_cfg, "K3": kimi_k3_rs.kimi_k3_media_proc_cfg}


def per_call_us(fn: Callable[[], Any], calls: int) -> float:
    """Mean wall-clock microseconds of one call of ``fn`` over ``calls`` calls."""
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls / 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=31, help="blocks of calls per side (median)")
    parser.add_argument("--calls", type=int, default=200, help="calls per block")
    args = parser.parse_args()
    print(f"simd_path {kimi_k3_rs.simd_path}, one thread, us per call, medians of {args.repeat} blocks of {args.calls}")
    print(f"{'case':<18} {'dict':>8} {'config':>8} {'native':>8} {'overhead dict':>14} {'overhead config':>16} exact")
    rng = np.random.default_rng(0)
    for width, height in SIZES:
        array = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        for name, preset in PRESETS.items():
            cfg_dict = preset()
            cfg, opts = call_setup(cfg_dict)

            def ours(array: np.ndarray = array, cfg_dict: dict[str, Any] = cfg_dict) -> dict[str, np.ndarray]:
                return kimi_k3_rs.preprocess(array, cfg_dict)

            def ours_config(array: np.ndarray = array, cfg: Any = cfg) -> dict[str, np.ndarray]:
                return kimi_k3_rs.preprocess(array, cfg)

            def native(array: np.ndarray = array, cfg: Any = cfg, opts: Any = opts) -> tuple[np.ndarray, np.ndarray]:
                return _native.preprocess([_native.BatchItem.image(array, 0)], cfg.native, opts.native)

            pixel_values, grid_thws = native()
            exact = all(
                np.array_equal(got["pixel_values"], pixel_values) and np.array_equal(got["grid_thws"], grid_thws)
                for got in (ours(), ours_config())
            )
            fns = {"dict": ours, "config": ours_config, "native": native}
            times: dict[str, list[float]] = {k: [] for k in fns}
            for _ in range(args.repeat):
                for k, fn in fns.items():
                    times[k].append(per_call_us(fn, args.calls))
            med = {k: statistics.median(v) for k, v in times.items()}
            case = f"{width}x{height} {name}"
            print(
                f"{case:<18} {med['dict']:8.1f} {med['config']:8.1f} {med['native']:8.1f} "
                f"{med['dict'] - med['native']:14.1f} {med['config'] - med['native']:16.1f} {exact}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
