"""Two builds of kimi_k3_rs side by side: the same calls, timed in interleaved processes.

Each build is a folder that holds an installed ``kimi_k3_rs`` (``pip install --no-deps
--target DIR wheel.whl``); both run under this interpreter, whose site-packages give numpy
and Pillow. Rounds alternate the two builds (A B A B ...), each a fresh process that makes
the inputs, warms up and times every case ``--calls`` times; a case's figure is the median
over all its calls of all rounds, so a busy spell of the machine falls on both builds
alike. The outputs of the two builds are compared bit for bit (a digest per case).

Usage (from the repository root)::

    python benchmarks/compare_builds.py BASE_DIR NEW_DIR [--rounds 6] [--calls 5]

The cases are the ``numpy`` and ``bytes`` inputs of ``bench_preprocess.py`` (end to end and
bytes in), one thread, K2.5 and K3.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

WORKER = "--worker"


def _cases() -> dict[str, Callable[[], Any]]:
    """name -> a call of the build on this process's path (inputs made once, here)."""
    import numpy as np
    from PIL import Image

    import kimi_k3_rs

    k25, k3 = kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG, kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG
    rng = np.random.default_rng(0)
    photo = Image.open(os.path.join(os.path.dirname(__file__), "..", "tests", "data", "astronaut.png")).convert("RGB")
    cases: dict[str, Callable[[], Any]] = {}
    for w, h in [(224, 224), (1920, 1080), (4032, 3024)]:
        array = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        for name, cfg in (("K2.5", k25), ("K3", k3)):
            cases[f"numpy {w}x{h} {name}"] = lambda a=array, c=cfg: kimi_k3_rs.preprocess(a, c)
        rgba = rng.integers(0, 256, (h, w, 4), dtype=np.uint8)
        cases[f"numpy RGBA {w}x{h} K3"] = lambda a=rgba: kimi_k3_rs.preprocess(a, k3)
    for w, h in [(1920, 1080), (4032, 3024)]:
        image = photo.resize((w, h), Image.Resampling.BICUBIC)
        for fmt, kw in (("JPEG", {"quality": 90}), ("PNG", {"compress_level": 6})):
            buf = io.BytesIO()
            image.save(buf, fmt, **kw)
            data = buf.getvalue()
            cases[f"bytes {fmt} {w}x{h} K2.5"] = lambda d=data: kimi_k3_rs.preprocess(d, k25)
    big = photo.resize((6000, 4000), Image.Resampling.BICUBIC)
    buf = io.BytesIO()
    big.save(buf, "PNG", compress_level=1)
    data = buf.getvalue()
    cases["bytes PNG 6000x4000 K2.5 (decoded into an array)"] = lambda d=data: kimi_k3_rs.preprocess(d, k25)
    return cases


def _worker(calls: int) -> None:
    """Time every case ``calls`` times after one warm-up; print JSON {case: [ms...], digests}."""
    cases = _cases()
    times: dict[str, list[float]] = {}
    digests: dict[str, str] = {}
    for name, call in cases.items():
        out = call()
        digests[name] = hashlib.sha256(out["pixel_values"].tobytes()).hexdigest()
        times[name] = []
        for _ in range(calls):
            start = time.perf_counter()
            call()
            times[name].append((time.perf_counter() - start) * 1e3)
    print(json.dumps({"times": times, "digests": digests}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="folder holding the base build's kimi_k3_rs")
    parser.add_argument("new", help="folder holding the new build's kimi_k3_rs")
    parser.add_argument("--rounds", type=int, default=6, help="processes per build, interleaved")
    parser.add_argument("--calls", type=int, default=5, help="timed calls per case per process")
    args = parser.parse_args()
    builds = {"base": args.base, "new": args.new}
    times: dict[str, dict[str, list[float]]] = {b: {} for b in builds}
    digests: dict[str, dict[str, str]] = {}
    for _ in range(args.rounds):
        for build, folder in builds.items():
            env = {**os.environ, "PYTHONPATH": os.path.abspath(folder)}
            done = subprocess.run(
                [sys.executable, __file__, WORKER, str(args.calls)], env=env, capture_output=True, text=True, check=True
            )
            result = json.loads(done.stdout)
            digests[build] = result["digests"]
            for case, ms in result["times"].items():
                times[build].setdefault(case, []).extend(ms)
    print(f"{'case':<52} {'base ms':>9} {'new ms':>9} {'new/base':>9}  same bits")
    for case in times["base"]:
        base, new = statistics.median(times["base"][case]), statistics.median(times["new"][case])
        same = digests["base"][case] == digests["new"][case]
        print(f"{case:<52} {base:9.2f} {new:9.2f} {new / base:9.3f}  {'yes' if same else 'NO'}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == WORKER:
        _worker(int(sys.argv[2]))
    else:
        main()
