"""Images per second of one folder of the same images: a Python loop, the CLI, Ray Data.

    python benchmarks/bench_datasets.py [--images 200] [--preset kimi-k3|kimi-k2.5] [--cpus 2]

The folder holds ``--images`` JPEGs made from the photos shipped in ``tests/data/``
(each photo at one of several scales, so the batch is ragged). Each figure is one run,
wall clock, from the files on disk to the pixels in memory:

* ``python loop``: ``kimi_k3_rs.preprocess(path, cfg)`` over the files, one thread.
* ``cli, N threads``: ``kimi-k3-rs preprocess FOLDER --num-threads N`` (a new process,
  stdout discarded; process start and imports included).
* ``ray, N CPUs``: ``read_binary_files`` -> ``kimi_k3_rs.ray.preprocess_dataset`` (its
  defaults, and 2 actors of 0.5 CPU) -> every batch in the driver, on a local
  cluster of N CPUs started beforehand; ``ray.init`` is reported on its own line.

Reported figures, not a pass/fail check. Run it on a quiet machine; on 2 cores, Ray's
own overhead (actor start, object store, scheduling) dominates.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

import kimi_k3_rs

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "camera.png"]
SCALES = [1.0, 1.5, 2.0, 3.0, 0.75]


def make_folder(folder: Path, count: int) -> list[Path]:
    """``count`` JPEGs (quality 90), photo ``i % 4`` at scale ``SCALES[i // 4 % 5]``."""
    paths = []
    for i in range(count):
        with Image.open(DATA / PHOTOS[i % len(PHOTOS)]) as img:
            rgb = img.convert("RGB")
            scale = SCALES[(i // len(PHOTOS)) % len(SCALES)]
            rgb = rgb.resize((round(rgb.width * scale), round(rgb.height * scale)), Image.Resampling.BICUBIC)
            path = folder / f"{i:04d}.jpg"
            rgb.save(path, quality=90)
        paths.append(path)
    return paths


def report(name: str, seconds: float, count: int) -> None:
    print(f"{name:<34} {seconds:8.2f} s  {count / seconds:8.1f} images/s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--preset", choices=["kimi-k3", "kimi-k2.5"], default="kimi-k3")
    parser.add_argument("--cpus", type=int, default=2, help="threads of the CLI run and CPUs of the Ray cluster")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray runs")
    args = parser.parse_args()
    cfg = kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG if args.preset == "kimi-k3" else kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
    work = Path(tempfile.mkdtemp(prefix="kb", dir="/tmp"))
    try:
        folder = work / "images"
        folder.mkdir()
        paths = make_folder(folder, args.images)
        mb = sum(p.stat().st_size for p in paths) / 1e6
        print(f"{args.images} JPEGs ({mb:.1f} MB) from tests/data, preset {args.preset}, "
              f"{os.cpu_count()} CPUs visible, kimi_k3_rs {kimi_k3_rs.__version__} ({kimi_k3_rs.simd_path})")

        start = time.perf_counter()
        for path in paths:
            kimi_k3_rs.preprocess(str(path), cfg)
        report("python loop, 1 thread", time.perf_counter() - start, len(paths))

        for threads in sorted({1, args.cpus}):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "kimi_k3_rs", "preprocess", str(folder), "--preset", args.preset,
                            "--num-threads", str(threads)], check=True, stdout=subprocess.DEVNULL)
            report(f"cli, {threads} thread{'s' if threads > 1 else ''}", time.perf_counter() - start, len(paths))

        if args.no_ray:
            return
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        import logging

        import ray

        from kimi_k3_rs.ray import preprocess_dataset

        start = time.perf_counter()
        ray.init(num_cpus=args.cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
                 _temp_dir=str(work / "ray"), log_to_driver=False, logging_level=logging.WARNING)
        print(f"{'ray.init, ' + str(args.cpus) + ' CPUs (startup)':<34} {time.perf_counter() - start:8.2f} s", flush=True)
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        ray.data.DataContext.get_current().enable_progress_bars = False
        runs = [("defaults", {}), ("2 actors x 0.5 CPU", {"concurrency": 2, "num_cpus": 0.5})]
        for label, kwargs in runs:
            start = time.perf_counter()
            ds = ray.data.read_binary_files(str(folder), include_paths=True)
            rows = 0
            for batch in preprocess_dataset(ds, cfg, **kwargs).iter_batches(batch_size=None, batch_format="pyarrow"):
                rows += batch.num_rows
            assert rows == len(paths), rows
            report(f"ray, {args.cpus} CPUs, {label}", time.perf_counter() - start, len(paths))
        ray.shutdown()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
