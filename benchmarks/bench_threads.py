"""Thread scaling of ``kimi_k3_rs.preprocess``: the target rows of issue #12 section 5.

Rows:

1. One 512x600 and one 1920x1080 RGB numpy image (K3 and K2.5 presets; neither
   is resized, so the call is the pad / normalise / patchify into a new
   output): ``num_threads=2`` against ``num_threads=1``, runs interleaved (1, 2,
   2, 1, ...), wall-clock medians; the ratio is median(1 thread) /
   median(2 threads), so >= 0.95 means two threads are not slower than one.
2. One 8000x8000 RGB numpy image under K3 (resized to 3586x3586, 157 MB of
   float32 output), a new output every call, ``num_threads=2``: median, p90
   and p90 / median of the calls (target p90 <= 1.25 x median), with one
   thread beside it. ``fresh`` frees each output before the next call (the
   usual loop: the library reuses the freed memory); ``cold`` keeps every
   output of its (at most 10) calls alive, so that each call gets memory
   that was never touched (1.6 GB held at the end).

Every time is ``time.perf_counter`` around one in-process
``kimi_k3_rs.preprocess(array, cfg, num_threads=n)`` call (output allocation
included). Beside the wall clock: this process's user and system CPU per call
(``getrusage``; system time is mostly page faults), and, on Linux, the CPU
time other processes took during the calls (``/proc/stat``): on a shared
2-core host a second thread only helps when that is near zero.

Usage (from the repository root, after ``maturin develop --release``)::

    python benchmarks/bench_threads.py [--small-runs 51] [--big-runs 30] [--skip-small] [--skip-big]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import kimi_k3_rs
import numpy as np

PRESETS = {"K3": kimi_k3_rs.kimi_k3_media_proc_cfg, "K2.5": kimi_k3_rs.kimi_k25_media_proc_cfg}
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def busy_seconds() -> float | None:
    """CPU seconds all processes have spent busy since boot (None off Linux)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(fields) - fields[3] - fields[4]) / TICK


class Call:
    """Wall, user and system seconds of one call, and other processes' CPU seconds meanwhile."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        b0, r0 = busy_seconds(), resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        self.result = fn()
        self.wall = time.perf_counter() - start
        r1, b1 = resource.getrusage(resource.RUSAGE_SELF), busy_seconds()
        self.user = r1.ru_utime - r0.ru_utime
        self.sys = r1.ru_stime - r0.ru_stime
        self.others = None if b0 is None or b1 is None else max(0.0, b1 - b0 - self.user - self.sys)


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def small_rows(runs: int) -> None:
    rng = np.random.default_rng(0)
    print(f"single image, numpy in, new output, {runs} interleaved runs per thread count")
    print(f"{'image':<11} {'preset':<6} {'1 thr ms':>9} {'2 thr ms':>9} {'1/2 ratio':>10}  {'others ms/call':>14}  target >= 0.95")
    for width, height in ((512, 600), (1920, 1080)):
        array = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        for name, make in PRESETS.items():
            cfg = make()
            for threads in (1, 2, 1, 2):  # warm up both pools and the allocator
                kimi_k3_rs.preprocess(array, cfg, num_threads=threads)
            calls: dict[int, list[Call]] = {1: [], 2: []}
            for k in range(runs):
                for threads in (1, 2) if k % 2 == 0 else (2, 1):
                    call = Call(lambda a=array, c=cfg, t=threads: kimi_k3_rs.preprocess(a, c, num_threads=t))
                    call.result = None  # freed before the next call, as in a serving loop
                    calls[threads].append(call)
            m1 = statistics.median(c.wall for c in calls[1])
            m2 = statistics.median(c.wall for c in calls[2])
            others = [c.others for c in calls[1] + calls[2] if c.others is not None]
            load = f"{statistics.mean(others) * 1e3:14.2f}" if others else f"{'-':>14}"
            print(
                f"{f'{width}x{height}':<11} {name:<6} {m1 * 1e3:9.3f} {m2 * 1e3:9.3f} {m1 / m2:10.3f}  {load}"
                f"  {'met' if m1 / m2 >= 0.95 else 'MISSED'}"
            )


def big_rows(runs: int) -> None:
    rng = np.random.default_rng(1)
    array = rng.integers(0, 256, (8000, 8000, 3), dtype=np.uint8)
    cfg = kimi_k3_rs.kimi_k3_media_proc_cfg()
    print(f"\n8000x8000 RGB, K3, new output every call, {runs} calls")
    print(
        f"{'output':<6} {'threads':<7} {'median ms':>9} {'p90 ms':>8} {'min ms':>7} {'max ms':>7} {'p90/med':>8}"
        f" {'user ms':>8} {'sys ms':>7} {'sys max':>8} {'others ms':>9}"
    )
    for mode in ("fresh", "cold"):
        for threads in (2, 1):
            kept: list[Any] = []
            kimi_k3_rs.preprocess(array, cfg, num_threads=threads)
            calls = []
            for _ in range(runs if mode == "fresh" else min(runs, 10)):
                call = Call(lambda t=threads: kimi_k3_rs.preprocess(array, cfg, num_threads=t))
                if mode == "cold":
                    kept.append(call.result)
                call.result = None
                calls.append(call)
            del kept
            walls = [c.wall for c in calls]
            med, q90 = statistics.median(walls), p90(walls)
            others = [c.others for c in calls if c.others is not None]
            note = ("  <= 1.25: " + ("met" if q90 <= 1.25 * med else "MISSED")) if threads == 2 and mode == "fresh" else ""
            print(
                f"{mode:<6} {threads:<7} {med * 1e3:9.1f} {q90 * 1e3:8.1f} {min(walls) * 1e3:7.1f} {max(walls) * 1e3:7.1f}"
                f" {q90 / med:8.3f} {statistics.median(c.user for c in calls) * 1e3:8.1f}"
                f" {statistics.median(c.sys for c in calls) * 1e3:7.1f} {max(c.sys for c in calls) * 1e3:8.1f}"
                f" {statistics.median(others) * 1e3 if others else float('nan'):9.1f}{note}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--small-runs", type=int, default=51)
    parser.add_argument("--big-runs", type=int, default=30)
    parser.add_argument("--skip-small", action="store_true")
    parser.add_argument("--skip-big", action="store_true")
    args = parser.parse_args()
    print(f"kimi_k3_rs {kimi_k3_rs.__version__}, simd path {kimi_k3_rs._native.simd_path}")
    if not args.skip_small:
        small_rows(args.small_runs)
    if not args.skip_big:
        big_rows(args.big_runs)


if __name__ == "__main__":
    main()
