"""What calls leave behind them: resident memory stays flat over many calls, outputs own their memory (large ones
in the library's pool only once freed), no leaked references or file descriptors. (The peak of one call:
``test_memory_peak.py``.)"""

from __future__ import annotations

import gc
import os
import sys
import weakref

import numpy as np

import kimi_k3_rs
from helpers import (
    K25,
    SEEDS,
    assert_bit_equal,
    assert_output_matches,
    bf16_bits,
    bomb_png,
    cfg,
    encode,
    f16_bits,
    half_bits,
    mode_image,
    needs_linux,
    noise,
    noise_array,
)
from reference import reference_preprocess


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# ---------------------------------------------------------------------------
# resident memory, references, file descriptors
# ---------------------------------------------------------------------------

def _memory_workload(n_calls: int) -> None:
    k3 = cfg("kimi_k3", in_patch_limit=40)
    k25 = cfg("kimi_k25", in_patch_limit=30)
    rgba = noise_array(64, 48, "RGBA", 1)
    rgb = noise_array(70, 50, "RGB", 2)
    pil = mode_image("CMYK", 60, 40, 3)
    png = encode(noise(50, 40, "LA", 4), "PNG")
    out = np.empty((64, 3, 14, 14), np.float32)
    proc = kimi_k3_rs.KimiK3VisionProcessor(k3)
    bad = np.zeros((4, 4), np.float32)
    for i in range(n_calls):
        step = i % 10
        if step == 0:
            kimi_k3_rs.preprocess([rgba, rgb], k3)
        elif step == 1:
            kimi_k3_rs.preprocess([pil, png], k25, num_threads=2)
        elif step == 2:
            proc.preprocess([{"type": "image", "image": rgba}])
        elif step == 3:
            n = kimi_k3_rs.preprocess(rgb, k3)["pixel_values"].shape[0]
            kimi_k3_rs.preprocess(rgb, k3, out=out[:n])
        elif step == 4:
            kimi_k3_rs.prepare_kimi_k3_encoder_inputs([png, rgba], k3).materialize()
        elif step == 5:
            kimi_k3_rs.count_image_tokens([[1920, 1080], [i + 1, 77]], k3)
        elif step == 6:
            try:
                kimi_k3_rs.preprocess([rgb, bad], k3)
            except ValueError:
                pass
        elif step == 7:
            try:
                kimi_k3_rs.preprocess([rgb, b"junk" * 10], k3)
            except ValueError:
                pass
        elif step == 8:
            try:
                kimi_k3_rs.preprocess([bomb_png()], k3)
            except ValueError:
                pass
        else:
            kimi_k3_rs.preprocess([rgba], k3, dtype="bfloat16", num_threads=3)


@needs_linux
def test_resident_memory_flat_over_2000_calls():
    """2,000 mixed calls (all input kinds, options, errors, bombs) after a warm-up:
    RSS grows by less than 8 MB (the soak script runs 10,000 larger ones)."""
    _memory_workload(300)
    gc.collect()
    start = rss_bytes()
    _memory_workload(1000)
    gc.collect()
    middle = rss_bytes()
    _memory_workload(1000)
    gc.collect()
    end = rss_bytes()
    print(f"\n[hardening] RSS start {start / 2**20:.1f} MB, +1000 calls {middle / 2**20:.1f} MB, "
          f"+2000 calls {end / 2**20:.1f} MB")
    assert end - start < 8 * 2**20, (start, middle, end)


def test_no_reference_leaks_on_inputs_and_outputs():
    """Inputs are not kept alive (refcounts back to where they were, after errors
    too); outputs are freed when the caller drops them (no hidden cache)."""
    arr = noise_array(60, 40, "RGBA", 1)
    pil = noise(60, 40, "RGB", 2)
    data = encode(pil, "PNG")
    media_proc_cfg = cfg("kimi_k3", in_patch_limit=20)
    objects = [arr, pil, data, media_proc_cfg]
    kimi_k3_rs.preprocess([arr, pil, data], media_proc_cfg)
    before = [sys.getrefcount(o) for o in objects]
    for _ in range(200):
        kimi_k3_rs.preprocess([arr, pil, data], media_proc_cfg)
        try:
            kimi_k3_rs.preprocess([arr, pil, data, np.zeros((2, 2), np.int16)], media_proc_cfg)
        except ValueError:
            pass
        kimi_k3_rs.preprocess([arr], media_proc_cfg, num_threads=2)
    gc.collect()
    assert [sys.getrefcount(o) for o in objects] == before
    out = kimi_k3_rs.preprocess([arr], media_proc_cfg)
    refs = [weakref.ref(out["pixel_values"]), weakref.ref(out["grid_thws"])]
    del out
    gc.collect()
    assert all(r() is None for r in refs), "outputs kept alive by the library"


def test_outputs_own_their_memory():
    """No output is a view into an input or into a buffer that is reused or freed."""
    arr = noise_array(60, 40, "RGB", 1)
    media_proc_cfg = cfg("kimi_k25", in_patch_limit=10_000)  # no resize: the input is read in place
    ref = reference_preprocess(arr.copy(), media_proc_cfg)
    out = kimi_k3_rs.preprocess(arr, media_proc_cfg)
    pv, grid = out["pixel_values"], out["grid_thws"]
    assert not np.shares_memory(pv, arr) and not np.shares_memory(grid, arr)
    assert pv.flags.writeable and grid.flags.writeable and pv.flags.c_contiguous
    arr[:] = 0  # the input changes: the output does not
    del arr
    gc.collect()
    _ = [np.full((64, 64), 7, np.uint8) for _ in range(100)]  # reuse freed memory
    assert_output_matches(out, ref)
    # a second call gets a fresh array, not the first one again
    again = kimi_k3_rs.preprocess(noise_array(60, 40, "RGB", 1), media_proc_cfg)
    assert not np.shares_memory(again["pixel_values"], pv)
    pv[:] = 0
    assert_output_matches(again, ref)
    # materialize: arrays independent of the inputs and of the encoder object
    images = [noise_array(60, 40, "RGB", 1), noise(30, 50, "RGBA", 2)]
    enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs(images, media_proc_cfg)
    parts = enc.materialize()
    expected = [reference_preprocess(im, media_proc_cfg)[0] for im in images]
    del enc, images
    gc.collect()
    for got, want in zip(parts, expected):
        assert got.tobytes() == want.tobytes()
    # out= is written and returned as is
    buf = np.full(pv.shape, np.nan, np.float32)
    res = kimi_k3_rs.preprocess(noise_array(60, 40, "RGB", 1), media_proc_cfg, out=buf)
    assert res["pixel_values"] is buf
    assert buf.tobytes() == ref[0].tobytes()


def test_large_outputs_reuse_freed_memory_never_live_arrays():
    """Outputs of 16 MiB and more live in memory the library keeps once the caller
    frees them (so that the next call does not fault its pages in again): a later
    call reuses it only when no array or view of it is left, writes every value
    again, and the arrays behave as numpy's own."""
    media_proc_cfg = cfg("kimi_k3")  # not resized: 2604x1820 padded, 56 MB of float32
    a, b = noise_array(2600, 1800, "RGB", 5), noise_array(2600, 1800, "RGB", 6)
    ref_a, ref_b = reference_preprocess(a, media_proc_cfg)[0], reference_preprocess(b, media_proc_cfg)[0]
    out = kimi_k3_rs.preprocess(a, media_proc_cfg)["pixel_values"]
    assert out.nbytes >= 16 * 2**20
    assert out.flags.c_contiguous and out.flags.writeable and out.flags.aligned
    assert_bit_equal(out, ref_a)
    first = out.__array_interface__["data"][0]
    view = out[5:9]  # keeps the memory alive after `out` is gone
    alive = weakref.ref(out)
    del out
    gc.collect()
    second = kimi_k3_rs.preprocess(b, media_proc_cfg, num_threads=2)["pixel_values"]
    assert not np.shares_memory(second, view)
    assert_bit_equal(view, ref_a[5:9])
    assert_bit_equal(second, ref_b)
    addresses = {first, second.__array_interface__["data"][0]}
    done = weakref.ref(second)
    del view, second
    gc.collect()
    assert alive() is None and done() is None, "outputs kept alive by the library"
    # Both blocks are free now: the next calls of that size get them back, with
    # every value written again (no stale value of the previous output survives).
    third = kimi_k3_rs.preprocess(b, media_proc_cfg)["pixel_values"]
    fourth = kimi_k3_rs.preprocess(a, media_proc_cfg, num_threads=3)["pixel_values"]
    assert {third.__array_interface__["data"][0], fourth.__array_interface__["data"][0]} == addresses
    assert_bit_equal(third, ref_b)
    assert_bit_equal(fourth, ref_a)
    del third, fourth
    gc.collect()
    # Half-precision outputs of that size share the pool (half the bytes: 28 MB).
    half = kimi_k3_rs.preprocess(a, media_proc_cfg, dtype="float16")["pixel_values"]
    assert half.dtype == np.float16 and half.flags.c_contiguous
    assert_bit_equal(half_bits(half), f16_bits(ref_a), "float16")
    bf = kimi_k3_rs.preprocess(b, media_proc_cfg, dtype="bfloat16", num_threads=2)["pixel_values"]
    assert_bit_equal(half_bits(bf), bf16_bits(ref_b), "bfloat16")


@needs_linux
def test_no_file_descriptor_leak_on_errors(tmp_path):
    """Files opened by the library are closed on every error path too."""
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(SEEDS["png"][: len(SEEDS["png"]) // 2])
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(bomb_png())
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"junk" * 100)
    good = tmp_path / "good.png"
    good.write_bytes(SEEDS["png"])
    paths = [str(truncated), str(bomb), str(junk), bomb]
    kimi_k3_rs.preprocess(str(good), K25)
    before = open_fds()
    for _ in range(50):
        for path in paths:
            for call in (
                lambda: kimi_k3_rs.preprocess([str(good), path], K25),
                lambda: kimi_k3_rs.prepare_kimi_k3_encoder_inputs([str(good), path], K25).materialize(),
                lambda: kimi_k3_rs.preprocess([str(good), path, np.zeros((2, 2), np.float32)], K25),
            ):
                try:
                    call()
                except ValueError:
                    pass
    gc.collect()
    assert open_fds() == before
