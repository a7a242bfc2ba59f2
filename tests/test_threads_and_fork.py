"""Threads: ``num_threads`` and ``KIMI_K3_RS_NUM_THREADS``, thread safety and GIL release, pools, fork safety, inputs mutated during a call.

No assertion depends on how fast the machine is: the GIL check compares the
longest stall of a pure-Python counter thread with the duration of the native
call it overlaps (a held GIL would stall the counter for the whole call).
"""

from __future__ import annotations

import os
import signal
import threading
import time
import warnings
from typing import Any, List

import numpy as np
import pytest

import kimi_k3_rs
import kimi_k3_rs.processor as processor_module
from helpers import (
    REF_COMPAT,
    alpha_pattern_la,
    alpha_pattern_rgba,
    assert_bit_equal,
    assert_output_matches,
    bf16_bits,
    bomb_png,
    cfg,
    encode,
    half_bits,
    mode_image,
    needs_fork,
    needs_linux,
    noise,
    noise_array,
    sanity_check,
    split_by_grid,
)
from reference import reference_preprocess

ENV = "KIMI_K3_RS_NUM_THREADS"

#: A call whose work is over the threshold below which ``num_threads`` > 1 still runs
#: on the calling thread (src/par.rs MIN_PARALLEL_WORK): 1024x1024 RGBA resized to
#: 701x701 under K3, 16 M units. Tests of the pools themselves use it, since smaller
#: calls never reach a pool.
POOLED_CFG = cfg("kimi_k3", in_patch_limit=2500)


def pooled_image(seed: int = 9) -> np.ndarray:
    return noise_array(1024, 1024, "RGBA", seed)


# ---------------------------------------------------------------------------
# concurrent calls and GIL release
# ---------------------------------------------------------------------------



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


# ---------------------------------------------------------------------------
# num_threads and KIMI_K3_RS_NUM_THREADS
# ---------------------------------------------------------------------------


def thread_batch():
    """Resized under both presets' budgets below: RGB / RGBA / L / LA, PIL and numpy."""
    return [
        noise(1300, 900, "RGB", 11),
        alpha_pattern_rgba(1100, 700, 12),
        noise_array(500, 1700, "L", 13),  # tall: vertical pass first under "13"
        alpha_pattern_la(900, 650, 14),
        noise_array(700, 500, "RGBA", 15),
        noise(1, 1, "RGB", 16),
        noise_array(640, 2200, "RGB", 17),  # tall
    ]


@pytest.mark.parametrize("preset", ["kimi_k25", "kimi_k3"])
@pytest.mark.parametrize("compat", ["12", "13"])
def test_threads_give_the_same_bytes(preset, compat):
    media_proc_cfg = cfg(preset, in_patch_limit=2000)
    images = thread_batch()
    one = kimi_k3_rs.preprocess(images, media_proc_cfg, pillow_compat=compat, num_threads=1)
    if compat == REF_COMPAT:
        assert_output_matches(one, reference_preprocess(images, media_proc_cfg))
    for n in (2, 3):
        many = kimi_k3_rs.preprocess(images, media_proc_cfg, pillow_compat=compat, num_threads=n)
        assert_bit_equal(many["grid_thws"], one["grid_thws"], "grid_thws")
        assert_bit_equal(many["pixel_values"], one["pixel_values"], f"num_threads={n}")
    half = kimi_k3_rs.preprocess(images, media_proc_cfg, pillow_compat=compat, num_threads=3, dtype="bfloat16")
    assert_bit_equal(half_bits(half["pixel_values"]), bf16_bits(one["pixel_values"]), "bfloat16, 3 threads")


# Calls on both sides of the work below which a call stays on the calling thread
# (src/par.rs MIN_PARALLEL_WORK: 8 M units, about one per output value written plus
# half a unit per resize multiply-add), and images of a pooled batch that run whole.
THRESHOLD_CASES = {
    # not resized, 1932x1092 padded: 6.3 M values, one thread
    "1920x1080 RGB K3 (under)": ([(1920, 1080, "RGB")], "kimi_k3", {}),
    # 2100x1204 padded: 7.6 M values, one thread
    "2100x1200 RGB K3 (just under)": ([(2100, 1200, "RGB")], "kimi_k3", {}),
    # 2212x1260 padded: 8.4 M values, patch rows split over the pool
    "2200x1240 RGBA K3 (just over)": ([(2200, 1240, "RGBA")], "kimi_k3", {}),
    # two images under it, together over it: one image per task
    "2 x 1920x1080 K2.5 (pooled batch)": ([(1920, 1080, "RGB"), (1920, 1080, "LA")], "kimi_k25", {}),
    # resized to 396x396: 6.9 M units, one thread
    "800x800 -> 396x396 (under)": ([(800, 800, "RGB")], "kimi_k25", {"in_patch_limit": 800}),
    # resized to 353x1110, vertical pass first under "13": 15 M units, bands over the pool
    "700x2200 tall, resized (over)": ([(700, 2200, "RGB")], "kimi_k25", {"in_patch_limit": 2000}),
    # resized to 701x701 (premultiplied RGBA): 16 M units
    "1024x1024 RGBA resized (over)": ([(1024, 1024, "RGBA")], "kimi_k3", {"in_patch_limit": 2500}),
}


@pytest.mark.parametrize("case", list(THRESHOLD_CASES))
def test_threads_around_the_serial_threshold_give_the_reference_bytes(case):
    sizes, preset, overrides = THRESHOLD_CASES[case]
    media_proc_cfg = cfg(preset, **overrides)
    images = [noise_array(w, h, mode, 40 + k) for k, (w, h, mode) in enumerate(sizes)]
    ref = reference_preprocess(images, media_proc_cfg)
    for n in (1, 2, 3):
        out = kimi_k3_rs.preprocess(images, media_proc_cfg, pillow_compat=REF_COMPAT, num_threads=n)
        assert_output_matches(out, ref)
    half = kimi_k3_rs.preprocess(images, media_proc_cfg, pillow_compat=REF_COMPAT, num_threads=2, dtype="bfloat16")
    assert_bit_equal(half_bits(half["pixel_values"]), bf16_bits(ref[0]), "bfloat16, 2 threads")


def test_threads_on_processor_and_materialize():
    media_proc_cfg = cfg("kimi_k3", in_patch_limit=2000)
    images = thread_batch()
    ref = reference_preprocess(images, media_proc_cfg)
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg, num_threads=3)
    assert_output_matches(processor.preprocess(images), ref)
    enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs(images, processor)
    for got, want in zip(enc.materialize([6, 0, 3]), [split_by_grid(*ref)[i] for i in (6, 0, 3)]):
        assert_bit_equal(got, want, "materialize")


@pytest.fixture
def spy_threads(monkeypatch):
    """Record the ``num_threads`` the Python layer hands to the native core."""
    seen = []
    real = processor_module._native.preprocess

    def spy(images, config, options, **kwargs):
        seen.append(options.num_threads)
        return real(images, config, options, **kwargs)

    monkeypatch.setattr(processor_module._native, "preprocess", spy)
    return seen


def test_env_var_read_when_num_threads_is_none(monkeypatch, spy_threads):
    assert kimi_k3_rs.NUM_THREADS_ENV == ENV
    media_proc_cfg = cfg("kimi_k25", in_patch_limit=2000)
    images = thread_batch()[:3]
    monkeypatch.delenv(ENV, raising=False)
    base = kimi_k3_rs.preprocess(images, media_proc_cfg)
    assert spy_threads == [1]  # default: one thread
    for env, want in (("2", 2), ("3", 3), (" 2 ", 2), ("", 1)):
        monkeypatch.setenv(ENV, env)
        spy_threads.clear()
        out = kimi_k3_rs.preprocess(images, media_proc_cfg)
        assert spy_threads == [want], env
        assert_bit_equal(out["pixel_values"], base["pixel_values"], f"env {env!r}")
        # an explicit value wins over the environment
        spy_threads.clear()
        kimi_k3_rs.preprocess(images, media_proc_cfg, num_threads=1)
        assert spy_threads == [1]
    # the processor reads it too (when built), and prepare/materialize follows the processor
    monkeypatch.setenv(ENV, "3")
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg)
    spy_threads.clear()
    processor.preprocess(images)
    kimi_k3_rs.prepare_kimi_k3_encoder_inputs(images, processor).materialize()
    kimi_k3_rs.prepare_kimi_k3_encoder_inputs(images, media_proc_cfg).materialize()
    assert spy_threads == [3, 3, 3]


@pytest.mark.parametrize("env", ["abc", "-1", "0", "2.5", "+3", "1e3", "4096", "two"])
def test_bad_env_var(monkeypatch, env):
    monkeypatch.setenv(ENV, env)
    img = noise(40, 30, "RGB", 0)
    media_proc_cfg = kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
    with pytest.raises(ValueError) as info:
        kimi_k3_rs.preprocess(img, media_proc_cfg)
    assert ENV in str(info.value) or "num_threads" in str(info.value)
    assert not isinstance(info.value, TypeError)
    with pytest.raises(ValueError):
        kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg)
    with pytest.raises(ValueError):
        kimi_k3_rs.prepare_kimi_k3_encoder_inputs([img], media_proc_cfg)
    # not read when num_threads is given
    out = kimi_k3_rs.preprocess(img, media_proc_cfg, num_threads=2)
    assert_output_matches(out, reference_preprocess(img, media_proc_cfg))


@pytest.mark.parametrize("bad,cls", [(0, ValueError), (-1, ValueError), (1025, ValueError),
                                     ("2", TypeError), (True, TypeError), (False, TypeError),
                                     (2.0, TypeError), ([2], TypeError)])
def test_bad_num_threads(monkeypatch, bad, cls):
    monkeypatch.delenv(ENV, raising=False)
    img = noise(40, 30, "RGB", 0)
    media_proc_cfg = kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
    with pytest.raises(cls, match="num_threads"):
        kimi_k3_rs.preprocess(img, media_proc_cfg, num_threads=bad)
    with pytest.raises(cls, match="num_threads"):
        kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg, num_threads=bad)
    with pytest.raises(cls, match="num_threads"):
        kimi_k3_rs.prepare_kimi_k3_encoder_inputs([img], media_proc_cfg, num_threads=bad)


# ---------------------------------------------------------------------------
# many threads and mixed calls, fork, pools
# ---------------------------------------------------------------------------

def _thread_workload():
    """(label, call) pairs and their single-threaded results (or the error class)."""
    k3_small = cfg("kimi_k3", in_patch_limit=120)
    k25_small = cfg("kimi_k25", in_patch_limit=200)
    rgba = noise_array(320, 240, "RGBA", 1)
    rgb = noise_array(300, 200, "RGB", 2)
    pil_p = mode_image("P+bytes_trns", 200, 150, 3)
    png = encode(noise(180, 260, "LA", 4), "PNG")
    big = pooled_image(5)
    work = []
    for threads in (1, 2, 3, 4):
        work.append((f"pool-{threads}", lambda t=threads: kimi_k3_rs.preprocess(big, POOLED_CFG, num_threads=t)))
        work.append((f"rgba-k3-{threads}", lambda t=threads: kimi_k3_rs.preprocess([rgba, rgb], k3_small, num_threads=t)))
        work.append((f"mix-k25-{threads}", lambda t=threads: kimi_k3_rs.preprocess([pil_p, png, rgb], k25_small, num_threads=t)))
        work.append((f"bf16-{threads}", lambda t=threads: kimi_k3_rs.preprocess([rgb], k3_small, num_threads=t, dtype="float16")))
        work.append((f"bad-{threads}", lambda t=threads: kimi_k3_rs.preprocess([rgb, b"junk"], k3_small, num_threads=t)))
        work.append((f"bomb-{threads}", lambda t=threads: kimi_k3_rs.preprocess([rgb, bomb_png()], k3_small, num_threads=t)))
    expected = {}
    for label, call in work:
        try:
            out = call()
            expected[label] = (out["pixel_values"].copy(), out["grid_thws"].copy())
        except ValueError as exc:
            expected[label] = type(exc)
    return work, expected


def _same_result(got, want) -> bool:
    if isinstance(want, type):
        return isinstance(got, want)
    return (not isinstance(got, BaseException) and got["pixel_values"].tobytes() == want[0].tobytes()
            and np.array_equal(got["grid_thws"], want[1]))


def test_many_threads_mixed_calls_match_single_thread():
    """16 Python threads, each running the whole workload (1..4 pool threads,
    errors interleaved) in its own order: every result equals the one-thread result;
    a deadlock fails the test (join timeout) instead of hanging it."""
    work, expected = _thread_workload()
    failures: List[str] = []
    barrier = threading.Barrier(16)

    def worker(k: int) -> None:
        order = np.random.default_rng(k).permutation(len(work))
        try:
            barrier.wait(timeout=60)
            for i in order:
                label, call = work[i]
                try:
                    got: Any = call()
                except ValueError as exc:
                    got = exc
                if not _same_result(got, expected[label]):
                    failures.append(f"thread {k}: {label}: {got!r:.200}")
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(f"thread {k}: {exc!r}")

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(16)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 240
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "deadlock: threads still running after 240 s"
    assert not failures, failures[:5]


def _fork_and_check(expected_bytes: bytes, timeout: float = 60.0) -> str:
    """Fork; the child runs ``num_threads=2`` (and 3, a new pool) on ``pooled_image()``
    and compares with ``expected_bytes``; returns '' on success or a failure description."""
    img = pooled_image()
    media_proc_cfg = POOLED_CFG
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+: fork with threads
        pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 3
        try:
            signal.alarm(int(timeout) + 5)  # belt and braces: the parent kills us too
            ok = all(
                kimi_k3_rs.preprocess(img, media_proc_cfg, num_threads=t)["pixel_values"].tobytes() == expected_bytes
                for t in (2, 3, 2)
            )
            code = 0 if ok else 1
        except BaseException:
            code = 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            return "" if code == 0 else f"child exited with {code} (1: wrong output, 2: exception)"
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return f"child deadlocked (killed after {timeout:.0f} s)"


@needs_fork
def test_fork_after_the_pool_was_built():
    """Use the 2-thread pool, fork, use num_threads=2 (and 3) in the child: same
    output, no deadlock; the parent keeps working after."""
    img = pooled_image()
    media_proc_cfg = POOLED_CFG
    expected = kimi_k3_rs.preprocess(img, media_proc_cfg, num_threads=2)["pixel_values"].tobytes()
    assert kimi_k3_rs.preprocess(img, media_proc_cfg, num_threads=1)["pixel_values"].tobytes() == expected
    for _ in range(3):
        assert _fork_and_check(expected) == ""
    assert kimi_k3_rs.preprocess(img, media_proc_cfg, num_threads=2)["pixel_values"].tobytes() == expected


@needs_fork
def test_fork_while_another_thread_is_in_a_call():
    """Fork while another thread keeps the pool busy (workers mid-job at fork time)."""
    img = pooled_image()
    media_proc_cfg = POOLED_CFG
    expected = kimi_k3_rs.preprocess(img, media_proc_cfg, num_threads=2)["pixel_values"].tobytes()
    busy_img = pooled_image(3)
    stop = threading.Event()
    errors: List[BaseException] = []

    def busy() -> None:
        try:
            while not stop.is_set():
                kimi_k3_rs.preprocess(busy_img, POOLED_CFG, num_threads=2)
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    thread = threading.Thread(target=busy, daemon=True)
    thread.start()
    try:
        results = []
        for _ in range(6):
            time.sleep(0.013)
            results.append(_fork_and_check(expected))
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not errors, errors
    assert results == [""] * len(results), results


@needs_linux
def test_pools_per_thread_count_are_bounded():
    """Repeated calls reuse the pool of their num_threads: the threads the library
    holds do not grow with the number of calls (pools evicted by earlier tests may
    still be winding down, so the count may drop meanwhile)."""
    img = pooled_image(0)
    kimi_k3_rs.preprocess(img, POOLED_CFG, num_threads=5)
    before = len(os.listdir("/proc/self/task"))
    for _ in range(30):
        kimi_k3_rs.preprocess(img, POOLED_CFG, num_threads=5)
        kimi_k3_rs.preprocess(img, POOLED_CFG, num_threads=1)
    assert len(os.listdir("/proc/self/task")) <= before


def _threads_settle_at_most(limit: int) -> int:
    """This process's thread count once it is at most `limit` (evicted pools' workers
    exit asynchronously), or the count after 20 s."""
    deadline = time.monotonic() + 20
    while True:
        count = len(os.listdir("/proc/self/task"))
        if count <= limit or time.monotonic() > deadline:
            return count
        time.sleep(0.05)


@needs_linux
def test_distinct_thread_counts_keep_only_the_last_four_pools():
    """F6: one pool per distinct num_threads used to be kept forever (2..40 left 819
    threads alive). Only the 4 most recently used pools are kept; an evicted count
    still works and gives the same bytes."""
    img = pooled_image(1)
    expected = kimi_k3_rs.preprocess(img, POOLED_CFG)["pixel_values"]
    baseline = len(os.listdir("/proc/self/task"))
    for n in range(2, 41):
        got = kimi_k3_rs.preprocess(img, POOLED_CFG, num_threads=n)["pixel_values"]
        assert got.tobytes() == expected.tobytes(), n
    kept = 37 + 38 + 39 + 40
    assert _threads_settle_at_most(baseline + kept) <= baseline + kept
    # An evicted count builds its pool again; the other evicted ones stay gone.
    got = kimi_k3_rs.preprocess(img, POOLED_CFG, num_threads=2)["pixel_values"]
    assert got.tobytes() == expected.tobytes()
    kept = 38 + 39 + 40 + 2
    assert _threads_settle_at_most(baseline + kept) <= baseline + kept


# ---------------------------------------------------------------------------
# an input mutated by another thread during a call
# ---------------------------------------------------------------------------

def test_input_mutated_during_the_call_is_memory_safe():
    """Documented: the output for that image is unspecified, but memory-safe. Every
    value is still a normalised byte of the right channel (here 0 or 255 without a
    resize, any byte with one), the shapes are the planned ones, and the library
    keeps working."""
    arr = np.zeros((600, 800, 3), np.uint8)
    no_resize = cfg("kimi_k25", in_patch_limit=10**6, patch_limit_on_one_side=10**4)
    resize = cfg("kimi_k25", in_patch_limit=500)
    stop = threading.Event()

    def mutate() -> None:
        value = 0
        while not stop.is_set():
            value = 255 - value
            arr[...] = value  # numpy releases the GIL for the fill

    shapes = {}
    for name, media_proc_cfg in (("no_resize", no_resize), ("resize", resize)):
        out = kimi_k3_rs.preprocess(arr, media_proc_cfg)
        shapes[name] = (out["pixel_values"].shape, out["grid_thws"].tolist())
    thread = threading.Thread(target=mutate, daemon=True)
    thread.start()
    try:
        for i in range(40):
            name, media_proc_cfg = (("no_resize", no_resize), ("resize", resize))[i % 2]
            out = kimi_k3_rs.preprocess(arr, media_proc_cfg, num_threads=1 + i % 3)
            pv = out["pixel_values"]
            assert (pv.shape, out["grid_thws"].tolist()) == shapes[name]
            assert np.isfinite(pv).all() and pv.min() >= -1.0 and pv.max() <= 1.0
            if name == "no_resize":
                assert np.isin(pv, [-1.0, 1.0]).all()
    finally:
        stop.set()
        thread.join(timeout=60)
    sanity_check()
