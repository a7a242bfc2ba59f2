"""Thread safety and GIL release of ``kimi_k3_rs.preprocess``.

No assertion depends on how fast the machine is: the GIL check compares the
longest stall of a pure-Python counter thread with the duration of the native
call it overlaps (a held GIL would stall the counter for the whole call).
"""

from __future__ import annotations

import threading
import time

import kimi_k3_rs
from helpers import assert_output_matches, cfg, noise, noise_array
from reference import reference_preprocess


def test_concurrent_calls_identical():
    media_proc_cfg = cfg("kimi_k3", in_patch_limit=8000)
    images = [noise(1800, 1400, "RGBA", 1), noise_array(1500, 1100, "RGB", 2), noise(900, 2100, "L", 3)]
    ref = reference_preprocess(images, media_proc_cfg)
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg=media_proc_cfg)
    n_threads, rounds = 4, 3
    barrier = threading.Barrier(n_threads)
    results, errors = [], []

    def worker(k):
        try:
            barrier.wait(timeout=60)
            for r in range(rounds):
                if (k + r) % 2:
                    out = kimi_k3_rs.preprocess(images, media_proc_cfg)
                else:
                    out = processor.preprocess([{"type": "image", "image": im} for im in images])
                results.append(out)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert len(results) == n_threads * rounds
    for out in results:
        assert_output_matches(out, ref)


def test_shared_input_array_across_threads():
    """Many threads reading the same numpy array (read-only borrows must not conflict)."""
    arr = noise_array(1200, 900, "RGB", 7)
    media_proc_cfg = cfg("kimi_k25", in_patch_limit=3000)
    ref = reference_preprocess(arr, media_proc_cfg)
    outs, errors = [], []
    barrier = threading.Barrier(6)

    def worker():
        try:
            barrier.wait(timeout=60)
            outs.append(kimi_k3_rs.preprocess(arr, media_proc_cfg))
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    for out in outs:
        assert_output_matches(out, ref)


def _long_call_inputs():
    # numpy input: no Pillow decode in the Python layer, the time is spent in the native core
    media_proc_cfg = cfg("kimi_k25")
    images = [noise_array(3000, 2400, "RGB", s) for s in range(4)]
    return images, media_proc_cfg


def test_gil_released_during_native_work():
    images, media_proc_cfg = _long_call_inputs()
    kimi_k3_rs.preprocess(images[:1], media_proc_cfg)  # warm up

    stamps = []
    stop = threading.Event()

    def counter():
        # pure Python: can only run while it holds the GIL
        while not stop.is_set():
            stamps.append(time.perf_counter())

    # the native call must be long compared with the interpreter's switch interval
    call_time = 0.0
    attempts = 0
    t_start = t_end = 0.0
    while True:
        attempts += 1
        stamps.clear()
        stop.clear()
        thread = threading.Thread(target=counter)
        thread.start()
        while not stamps:
            time.sleep(0.001)
        t_start = time.perf_counter()
        kimi_k3_rs.preprocess(images, media_proc_cfg)
        t_end = time.perf_counter()
        stop.set()
        thread.join()
        call_time = t_end - t_start
        if call_time >= 0.25 or attempts >= 3:
            break
        images = images * 2

    inside = [s for s in stamps if t_start <= s <= t_end]
    points = [t_start] + inside + [t_end]
    longest_stall = max(b - a for a, b in zip(points, points[1:]))
    # with the GIL held by the native code the counter would stall for (almost) the whole call
    assert len(inside) > 100, f"counter made no progress during a {call_time:.3f}s call ({len(inside)} stamps)"
    assert longest_stall < 0.5 * call_time, (
        f"counter stalled {longest_stall:.3f}s during a {call_time:.3f}s call: the GIL is not released"
    )
