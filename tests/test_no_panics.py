"""No Rust panic reaches Python (issue #13, defect 1): over fuzzed configs, arrays,
``out=`` buffers and buffers shared across threads, every Python entry point either
returns or raises an ``Exception`` (never ``pyo3_runtime.PanicException``, a
``BaseException``), and a busy buffer is a clear ``ValueError`` naming the argument.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kimi_k3_rs
from kimi_k3_rs import _native

K25 = kimi_k3_rs.kimi_k25_media_proc_cfg()

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.lists(st.floats(-2, 2), max_size=4),
)
config_keys = st.sampled_from(
    ["patch_size", "merge_kernel_size", "in_patch_limit", "patch_limit_on_one_side", "image_mean", "image_std", "fixed_output_tokens"]
)
dtypes = st.sampled_from([np.uint8, np.uint16, np.float32, np.int8, bool])


@st.composite
def arrays(draw):
    dtype = draw(dtypes)
    shape = draw(st.lists(st.integers(0, 40), min_size=0, max_size=4))
    array = np.zeros(shape, dtype=dtype)
    if array.ndim >= 2 and draw(st.booleans()):
        array = array[::2]  # not C-contiguous
    return array


def _no_panic(call) -> None:
    try:
        call()
    except Exception:
        pass
    except BaseException as exc:  # PanicException derives from BaseException
        pytest.fail(f"{type(exc).__module__}.{type(exc).__name__}: {exc}")


@given(key=config_keys, value=values, image=arrays())
def test_fuzzed_configs_and_arrays_never_panic(key, value, image):
    cfg = {**K25, key: value}
    _no_panic(lambda: kimi_k3_rs.preprocess(image, cfg))
    _no_panic(lambda: kimi_k3_rs.navit_resize_config(*image.shape[:2], 14, 2, 4096, 512) if image.ndim >= 2 else None)
    _no_panic(lambda: _native.image_size(image))
    _no_panic(lambda: _native.resize_bicubic(image, 3, 3, _native.Options("13", "float32", 1)))


@given(
    image=arrays(),
    out_shape=st.lists(st.integers(0, 20), min_size=0, max_size=5),
    out_dtype=st.sampled_from([np.float32, np.float16, np.uint16, np.float64, np.uint8]),
    dtype=st.sampled_from(["float32", "bfloat16", "float16"]),
    alias=st.booleans(),
)
def test_fuzzed_out_buffers_never_panic(image, out_shape, out_dtype, dtype, alias):
    out = np.zeros(out_shape, dtype=out_dtype)
    if alias and out.nbytes >= 12:  # an input that is a view of out
        image = out.reshape(-1).view(np.uint8)[:12].reshape(2, 2, 3)
    _no_panic(lambda: kimi_k3_rs.preprocess(image, K25, out=out, dtype=dtype))


def test_a_buffer_busy_in_another_thread_is_a_value_error_naming_it():
    """The 0.1.0 reproducer: one thread writes ``out`` while another reads a view of it."""
    big = np.random.default_rng(0).integers(0, 256, (600, 800, 3), dtype=np.uint8)
    n = kimi_k3_rs.preprocess(big, K25)["pixel_values"].shape[0]
    out = np.empty((n, 3, 14, 14), np.float32)
    view = out.reshape(-1).view(np.uint8)[:3600].reshape(30, 40, 3)
    stop = threading.Event()
    failures: list[BaseException] = []

    def writer() -> None:
        while not stop.is_set():
            try:
                kimi_k3_rs.preprocess(big, K25, out=out)
            except Exception:
                pass
            except BaseException as exc:
                failures.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    seen = set()
    try:
        for _ in range(200):
            try:
                kimi_k3_rs.preprocess(view, K25)
                seen.add("ok")
            except ValueError as exc:
                assert "in use by another call" in str(exc) or "out" in str(exc), exc
                seen.add("busy")
            except BaseException as exc:
                failures.append(exc)
    finally:
        stop.set()
        thread.join()
    assert not failures, failures
    assert seen  # every call returned or raised a ValueError
