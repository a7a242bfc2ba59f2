"""Side-by-side speed of kimi_k3_rs and the checkpoint's Pillow + numpy pipeline.

Runs the reference (``tests/reference.py``: Pillow ``Image.resize(BICUBIC)`` +
the checkpoint's numpy pad / normalise / patchify) and ``kimi_k3_rs.preprocess``
in one process on the same noise images. It checks that the outputs are
bit-identical, then prints the median milliseconds and the ratios. kimi_k3_rs runs
single-threaded unless a row says otherwise. numpy's element-wise loops are
single-threaded too.

Usage (from the repository root, after ``pip install .``)::

    python benchmarks/bench_preprocess.py [--repeat N] [--quick] [--json results.json]

There are four tables.

1. End to end. ``ref`` is the reference from a PIL image. ``np`` is kimi_k3_rs from
   a numpy array (zero-copy input). ``PIL`` is kimi_k3_rs from the PIL image (one
   ``np.asarray`` copy). ``out=`` is from the array, into a reused output buffer.
   ``2 thr`` is from the array, with ``num_threads=2``. ``floor`` is (input bytes +
   output bytes) / the copy bandwidth of a large warm ``np.copyto``, measured in the
   same run.
2. Targets of issue #4. Each row holds one ratio.
3. Bytes in (issue #12): JPEG and PNG files made from a shipped photo, end to end from
   the bytes: ``ref`` (``Image.open`` + the reference), ``ours`` (native decode where
   ``decode_path()`` says so), ``0.1.0 path`` (Pillow decode + ``np.asarray`` + ours, what
   0.1.0 did with bytes), ``ours PIL`` (the decoded PIL image in), and the decode alone,
   native vs Pillow; then a batch of 8 JPEGs on 2 threads vs 1. Wall-clock medians of
   at least 21 interleaved runs.
4. Peak memory of one 8000x8000 K2.5 call, measured in a child process.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import PIL
from PIL import Image

import kimi_k3_rs
from kimi_k3_rs import _native

OPTIONS_13 = _native.Options("13", "float32", 1)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from reference import reference_preprocess  # noqa: E402

SIZES = [(224, 224), (1920, 1080), (4032, 3024), (8000, 8000)]
PRESETS = {"K2.5": kimi_k3_rs.kimi_k25_media_proc_cfg, "K3": kimi_k3_rs.kimi_k3_media_proc_cfg}


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
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def torch_resize() -> Callable[[np.ndarray, int, int], Any] | None:
    """torch's antialiased uint8 bicubic (inexact), when torch is installed."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    torch.set_num_threads(1)

    def run(array: np.ndarray, width: int, height: int) -> Any:
        x = torch.from_numpy(array).permute(2, 0, 1)[None]
        return F.interpolate(x, size=(height, width), mode="bicubic", antialias=True, align_corners=False)

    return run


def end_to_end(args: argparse.Namespace, bandwidth: float, rows: list[dict[str, Any]]) -> None:
    header = (
        f"{'case':<11} {'preset':<6} {'resized -> padded':<24} {'ref':>8} {'np':>7} {'x':>5} "
        f"{'PIL':>7} {'x':>5} {'out=':>7} {'x':>5} {'2 thr':>7} {'x':>5} {'floor':>6} exact"
    )
    print(header)
    print("-" * len(header))
    rng = np.random.default_rng(0)
    for width, height in SIZES:
        if args.quick and width == 8000:
            continue
        array = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        image = Image.fromarray(array)
        for name, make_cfg in PRESETS.items():
            cfg = make_cfg()
            ref = reference_preprocess(image, cfg)
            ours = kimi_k3_rs.preprocess(array, cfg)
            exact = ours["pixel_values"].tobytes() == ref[0].tobytes() and np.array_equal(ours["grid_thws"], ref[1])
            r = kimi_k3_rs.navit_resize_config(
                width, height, cfg["patch_size"], cfg["merge_kernel_size"], cfg["in_patch_limit"], cfg["patch_limit_on_one_side"]
            )
            sizes = f"{r['new_width']}x{r['new_height']} -> {r['new_width'] + r['pad_width']}x{r['new_height'] + r['pad_height']}"
            repeat = max(2, args.repeat // 2) if width == 8000 else args.repeat
            out = np.empty_like(ours["pixel_values"])
            t = {
                "ref": median_ms(lambda: reference_preprocess(image, cfg), repeat),
                "np": median_ms(lambda: kimi_k3_rs.preprocess(array, cfg), repeat),
                "pil": median_ms(lambda: kimi_k3_rs.preprocess(image, cfg), repeat),
                "out": median_ms(lambda: kimi_k3_rs.preprocess(array, cfg, out=out), repeat),
                "thr2": median_ms(lambda: kimi_k3_rs.preprocess(array, cfg, num_threads=2), repeat),
            }
            floor = (array.nbytes + ours["pixel_values"].nbytes) / bandwidth * 1e3
            print(
                f"{f'{width}x{height}':<11} {name:<6} {sizes:<24} {t['ref']:8.2f} {t['np']:7.2f} {t['ref'] / t['np']:4.1f}x"
                f" {t['pil']:7.2f} {t['ref'] / t['pil']:4.1f}x {t['out']:7.2f} {t['ref'] / t['out']:4.1f}x"
                f" {t['thr2']:7.2f} {t['ref'] / t['thr2']:4.1f}x {floor:6.2f} {'yes' if exact else 'NO'}"
            )
            rows.append({"case": f"{width}x{height}", "preset": name, "sizes": sizes, "floor_ms": floor, "exact": exact, **t})


def targets(args: argparse.Namespace, bandwidth: float, results: list[dict[str, Any]]) -> None:
    """The rows of issue #4's target table (each a ratio measured side by side)."""
    rng = np.random.default_rng(1)

    def add(case: str, ref_ms: float, ours_ms: float, target: str, met: bool | None, note: str = "") -> None:
        """One row; ``met`` is None where the target is only reported."""
        results.append({"case": case, "ref_ms": ref_ms, "ours_ms": ours_ms, "ratio": ref_ms / ours_ms, "target": target, "met": met, "note": note})
        verdict = "-" if met is None else ("yes" if met else "NO")
        print(f"{case:<58} {ref_ms:9.2f} {ours_ms:9.2f} {ref_ms / ours_ms:6.1f}x  {target:<22} {verdict:<4} {note}")

    print(f"{'target (issue #4)':<58} {'ref ms':>9} {'ours ms':>9} {'ratio':>7}  {'target':<22} met  note")
    k25, k3 = kimi_k3_rs.kimi_k25_media_proc_cfg(), kimi_k3_rs.kimi_k3_media_proc_cfg()
    # (size, preset, name, fresh ratio, out= ratio, out= time / floor or None)
    for (w, h), cfg, name, min_fresh, min_out, max_floor in (
        ((1920, 1080), k25, "1920x1080 K2.5 (no resize)", 10, 15, 1.5),
        ((4032, 3024), k3, "4032x3024 K3 (no resize)", 10, 20, None),
    ):
        array = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        image = Image.fromarray(array)
        ref_ms = median_ms(lambda: reference_preprocess(image, cfg), args.repeat)
        fresh = median_ms(lambda: kimi_k3_rs.preprocess(array, cfg), args.repeat)
        out = np.empty_like(kimi_k3_rs.preprocess(array, cfg)["pixel_values"])
        reuse = median_ms(lambda: kimi_k3_rs.preprocess(array, cfg, out=out), args.repeat)
        floor = (array.nbytes + out.nbytes) / bandwidth * 1e3
        add(f"{name}, fresh output", ref_ms, fresh, f">= {min_fresh}x", ref_ms / fresh >= min_fresh)
        goal_out = f">= {min_out}x" + (f", <= {max_floor}x floor" if max_floor else "")
        met_out = ref_ms / reuse >= min_out and (max_floor is None or reuse / floor <= max_floor)
        add(f"{name}, out= reused", ref_ms, reuse, goal_out, met_out, f"{reuse / floor:.1f}x the memory floor ({floor:.2f} ms)")
    for (w, h), name in (((4032, 3024), "4032x3024 K2.5 (resized to 2069x1551)"), ((8000, 8000), "8000x8000 K2.5 (resized to 1793x1793)")):
        if args.quick and w == 8000:
            continue
        array = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        image = Image.fromarray(array)
        repeat = max(2, args.repeat // 2)
        ref_ms = median_ms(lambda: reference_preprocess(image, k25), repeat)
        ours_ms = median_ms(lambda: kimi_k3_rs.preprocess(array, k25), repeat)
        add(name, ref_ms, ours_ms, ">= 6x", ref_ms / ours_ms >= 6)
    # The resize stage alone, both exact.
    array = rng.integers(0, 256, (3024, 4032, 3), dtype=np.uint8)
    image = Image.fromarray(array)
    pil_ms = median_ms(lambda: image.resize((2069, 1551), Image.Resampling.BICUBIC), args.repeat)
    ours_ms = median_ms(lambda: _native.resize_bicubic(array, 2069, 1551, OPTIONS_13), args.repeat)
    same = np.array_equal(np.asarray(image.resize((2069, 1551), Image.Resampling.BICUBIC)), _native.resize_bicubic(array, 2069, 1551, OPTIONS_13))
    min_resize = {"avx2": 4, "avx512": 7}.get(kimi_k3_rs.simd_path)  # no target for other paths
    add(
        f"resize stage 4032x3024 -> 2069x1551 ({kimi_k3_rs.simd_path})",
        pil_ms,
        ours_ms,
        ">= 4x (AVX2), >= 7x (AVX-512)",
        None if min_resize is None else same and pil_ms / ours_ms >= min_resize,
        f"bit-exact: {'yes' if same else 'NO'}",
    )
    resize = torch_resize()
    if resize is not None:
        torch_ms = median_ms(lambda: resize(array, 2069, 1551), args.repeat)
        add("  torch antialiased bicubic, same resize (inexact)", pil_ms, torch_ms, "reported", None)
    else:
        print("  torch not installed: no torch column")
    # numpy input vs PIL input (ours both).
    array = rng.integers(0, 256, (1080, 1920, 3), dtype=np.uint8)
    image = Image.fromarray(array)
    pil_in = median_ms(lambda: kimi_k3_rs.preprocess(image, k25), args.repeat)
    numpy_in = median_ms(lambda: kimi_k3_rs.preprocess(array, k25), args.repeat)
    add(
        "numpy input vs PIL input, 1920x1080 K2.5 (ratio PIL/np)",
        pil_in,
        numpy_in,
        "numpy no slower (>= 1x)",
        pil_in / numpy_in >= 1,
        "ms columns: ours from PIL, ours from numpy",
    )
    # Batch of 8 resized images (case R20), 2 threads vs 1.
    batch = [rng.integers(0, 256, (2048, 2048, 3), dtype=np.uint8) for _ in range(8)]
    one = median_ms(lambda: kimi_k3_rs.preprocess(batch, k25, num_threads=1), max(2, args.repeat // 2))
    two = median_ms(lambda: kimi_k3_rs.preprocess(batch, k25, num_threads=2), max(2, args.repeat // 2))
    add("batch of 8 2048x2048 K2.5 (resized), 2 threads vs 1", one, two, "reported (>= 1.6x hoped)", None, "ms columns: 1 thread, 2 threads")


def interleaved_ms(fns: dict[str, Callable[[], Any]], runs: int) -> dict[str, float]:
    """Wall-clock median milliseconds of each function, the runs interleaved (so a slow
    phase of a shared machine hits every function alike) in a new seeded order each round
    (so that no function always runs right after another's frees), after one warm-up."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    order = random.Random(0)
    names = list(fns)
    for _ in range(runs):
        order.shuffle(names)
        for name in names:
            start = time.perf_counter()
            fns[name]()
            times[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}


def shipped_photo(width: int, height: int) -> Image.Image:
    """The shipped test photo (``tests/data/astronaut.png``) resized to the size: a real
    photograph, not noise, as issue #12 asks."""
    path = Path(__file__).resolve().parents[1] / "tests" / "data" / "astronaut.png"
    return Image.open(path).convert("RGB").resize((width, height), Image.Resampling.BICUBIC)


def screenshot(width: int = 1242, height: int = 2688) -> Image.Image:
    """A phone-screenshot-like RGB image: flat panels, text-like strokes, and photo
    thumbnails (shipped photos) in a scrolling list."""
    from PIL import ImageDraw

    image = Image.new("RGB", (width, height), (246, 246, 248))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, width, 140), fill=(28, 28, 30))
    thumb = shipped_photo(200, 200)
    for row, top in enumerate(range(180, height - 220, 240)):
        draw.rounded_rectangle((30, top, width - 30, top + 220), radius=24, fill=(255, 255, 255))
        image.paste(thumb, (50, top + 10))
        for line in range(4):
            draw.text((290, top + 30 + 40 * line), f"Message {row}.{line}: the quick brown fox " * 2, fill=(40, 40, 40))
    return image


def encoded(image: Image.Image, fmt: str) -> bytes:
    """Pillow's encoding as issue #12 measures it: JPEG q90 4:2:0, PNG compress_level 6."""
    import io

    buffer = io.BytesIO()
    if fmt == "JPEG":
        image.save(buffer, "JPEG", quality=90, subsampling=2)
    else:
        image.save(buffer, "PNG", compress_level=6)
    return buffer.getvalue()


def bytes_in(args: argparse.Namespace, results: list[dict[str, Any]]) -> None:
    """Issue #12's bytes-in table and targets: files in, features out."""
    import io

    runs = max(args.repeat, 21)
    k25 = kimi_k3_rs.kimi_k25_media_proc_cfg()
    print(f"decode paths: {kimi_k3_rs.decode_path()}")
    header = (
        f"{'bytes in (K2.5, 1 thread)':<34} {'ref':>8} {'ours':>8} {'x':>6} {'0.1.0 path':>10} {'x':>6} {'ours PIL':>8}"
        f" {'dec native':>10} {'dec Pillow':>10} {'x':>5} exact"
    )
    print(header)
    print("-" * len(header))
    cases = [
        ("4032x3024 JPEG q90 4:2:0", encoded(shipped_photo(4032, 3024), "JPEG"), 4.0, 1.6),
        ("4032x3024 PNG level 6", encoded(shipped_photo(4032, 3024), "PNG"), 2.8, None),
        ("1242x2688 screenshot PNG", encoded(screenshot(), "PNG"), 5.0, None),
        ("1920x1080 JPEG q90 4:2:0", encoded(shipped_photo(1920, 1080), "JPEG"), None, None),
    ]
    for name, data, min_ref, min_today in cases:
        with Image.open(io.BytesIO(data)) as opened:
            decoded = opened.copy()
        ref = reference_preprocess([data], k25)
        ours = kimi_k3_rs.preprocess(data, k25)
        exact = ours["pixel_values"].tobytes() == ref[0].tobytes()
        t = interleaved_ms(
            {
                "ref": lambda: reference_preprocess([data], k25),
                "ours": lambda: kimi_k3_rs.preprocess(data, k25),
                "today": lambda: kimi_k3_rs.preprocess(np.asarray(Image.open(io.BytesIO(data))), k25),
                "pil": lambda: kimi_k3_rs.preprocess(decoded, k25),
                "native_decode": lambda: _native.decode_image(data),
                "pillow_decode": lambda: Image.open(io.BytesIO(data)).load(),
            },
            runs,
        )
        print(
            f"{name:<34} {t['ref']:8.2f} {t['ours']:8.2f} {t['ref'] / t['ours']:5.1f}x {t['today']:10.2f}"
            f" {t['today'] / t['ours']:5.2f}x {t['pil']:8.2f} {t['native_decode']:10.2f} {t['pillow_decode']:10.2f}"
            f" {t['pillow_decode'] / t['native_decode']:4.2f}x {'yes' if exact else 'NO'}"
        )
        met = None if min_ref is None else t["ref"] / t["ours"] >= min_ref and (min_today is None or t["today"] / t["ours"] >= min_today)
        target = "reported" if min_ref is None else f">= {min_ref}x ref" + (f", >= {min_today}x 0.1.0" if min_today else "")
        results.append({"case": name, **t, "exact": exact, "target": target, "met": met})
    # Batch of 8 photos as JPEG bytes: 2 threads vs 1.
    batch = [encoded(shipped_photo(4032, 3024).rotate(90 * i, expand=False), "JPEG") for i in range(8)]
    t = interleaved_ms(
        {
            "one": lambda: kimi_k3_rs.preprocess(batch, k25, num_threads=1),
            "two": lambda: kimi_k3_rs.preprocess(batch, k25, num_threads=2),
        },
        max(5, runs // 4),
    )
    ratio = t["one"] / t["two"]
    print(f"batch of 8 4032x3024 JPEGs as bytes: 1 thread {t['one']:.1f} ms, 2 threads {t['two']:.1f} ms: {ratio:.2f}x (target >= 1.7x: {'met' if ratio >= 1.7 else 'NOT met'})")
    results.append({"case": "batch of 8 4032x3024 JPEGs, 2 threads vs 1", **t, "ratio": ratio, "target": ">= 1.7x", "met": ratio >= 1.7})


def peak_memory() -> dict[str, Any]:
    """Peak RSS growth of one 8000x8000 K2.5 call, in a child process."""
    # VmHWM (peak RSS of this process image; Linux). ru_maxrss would do, but after
    # fork + exec it starts from the parent's peak.
    code = (
        "import numpy as np, kimi_k3_rs\n"
        "def hwm():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('VmHWM:'):\n"
        "            return int(line.split()[1])\n"
        "a = np.empty((8000, 8000, 3), np.uint8)\n"
        "rng = np.random.default_rng(0)\n"
        "for y in range(0, 8000, 250):  # small temporaries: the peak so far is the input\n"
        "    a[y:y + 250] = rng.integers(0, 256, (250, 8000, 3), dtype=np.uint8)\n"
        "before = hwm()\n"
        "out = kimi_k3_rs.preprocess(a, kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG)\n"
        "after = hwm()\n"
        "print(before, after, out['pixel_values'].nbytes)\n"
    )
    before, after, out_bytes = (int(v) for v in subprocess.check_output([sys.executable, "-c", code], text=True).split())
    growth = (after - before) * 1024
    input_bytes = 8000 * 8000 * 3
    # Resize intermediate: the horizontal pass output (1793 x 8000 x 3 bytes, rows cropped to those read).
    intermediate = 1793 * 8000 * 3
    budget = out_bytes + 1.5 * intermediate
    print(
        f"peak RSS growth of one 8000x8000 K2.5 call: {growth / 2**20:.0f} MiB beyond the {input_bytes / 2**20:.0f} MiB input"
        f" (output {out_bytes / 2**20:.0f} MiB, resize intermediate {intermediate / 2**20:.0f} MiB;"
        f" budget output + 1.5 x intermediate = {budget / 2**20:.0f} MiB: {'met' if growth <= budget else 'NOT met'})"
    )
    return {"growth_bytes": growth, "output_bytes": out_bytes, "intermediate_bytes": intermediate, "budget_bytes": budget}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per case (median)")
    parser.add_argument("--quick", action="store_true", help="skip 8000x8000")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    if kimi_k3_rs.build_profile != "release":
        raise SystemExit("refusing to time a debug build of kimi_k3_rs")
    bandwidth = copy_bandwidth()
    machine = {
        "kimi_k3_rs": kimi_k3_rs.__version__,
        "pillow": PIL.__version__,
        "numpy": np.__version__,
        "cpu": cpu_model(),
        "simd_path": kimi_k3_rs.simd_path,
        "copy_bandwidth_gbs": bandwidth / 1e9,
        "max_rss_parent_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }
    print(
        f"kimi_k3_rs {machine['kimi_k3_rs']} | Pillow {machine['pillow']} | numpy {machine['numpy']} | CPU {machine['cpu']}"
        f" | SIMD {machine['simd_path']} | threads 1 unless stated | copy bandwidth {bandwidth / 1e9:.1f} GB/s (read+write)\n"
    )
    rows: list[dict[str, Any]] = []
    end_to_end(args, bandwidth, rows)
    print()
    target_rows: list[dict[str, Any]] = []
    targets(args, bandwidth, target_rows)
    print()
    bytes_rows: list[dict[str, Any]] = []
    bytes_in(args, bytes_rows)
    print()
    memory = peak_memory()
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "end_to_end": rows, "targets": target_rows, "bytes_in": bytes_rows, "memory": memory}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
