"""Which decoder takes an encoded input (issue #12): ``_native.route_encoded`` (the JPEG
and PNG files the core decodes, the rest left to Pillow), the per-process self-check
against Pillow and ``decode_path()``, ``KIMI_K3_RS_DECODE``, a forked child, Pillow's
``LOAD_TRUNCATED_IMAGES``. What each native decoder decodes and declines, and how it
fails: ``test_native_jpeg.py``, ``test_native_png.py``; encoded inputs through the
whole pipeline: ``test_encoded_pipeline.py``.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import K25, encode, native_files, photo_rgb, pillow_failure, pillow_files
from PIL import Image, ImageFile
from reference import reference_preprocess

import kimi_k3_rs as k
from kimi_k3_rs import _native
from kimi_k3_rs._input import encoded
from kimi_k3_rs._input import native as native_decode
from kimi_k3_rs.options import CallOptions

pytestmark = pytest.mark.usefixtures("fresh_self_check")  # each test sees the process's real self-check

FILES = native_files()
PILLOW_FILES = pillow_files()


def test_decode_path_reports_native_for_both_formats_here():
    paths = k.decode_path()
    assert set(paths) == {"jpeg", "png"}
    assert paths["jpeg"].startswith("native: libjpeg"), paths
    assert paths["png"].startswith("native: zlib-rs inflate"), paths
    assert f"agrees with Pillow {Image.__version__}" in paths["jpeg"]


@pytest.mark.parametrize("name", sorted(FILES))
def test_native_routes_and_decodes_as_pillow(name):
    data = FILES[name]
    routed = _native.route_encoded(data)
    assert isinstance(routed, _native.EncodedImage), routed
    path, pixels = _native.decode_image(data)
    assert path == "native"
    with Image.open(io.BytesIO(data)) as image:
        expected = np.asarray(image)
        assert routed.size == image.size and routed.mode == image.mode
    assert pixels.dtype == expected.dtype and pixels.shape == expected.shape
    assert np.array_equal(pixels, expected)


@pytest.mark.parametrize("name", sorted(PILLOW_FILES))
def test_other_files_route_to_pillow(name):
    routed = _native.route_encoded(PILLOW_FILES[name])
    assert routed is None or isinstance(routed, str), routed


def test_native_inputs_never_reach_pillow(monkeypatch):
    """The JPEG / PNG files of a batch are decoded by the core: Pillow's open is not called."""
    want = k.preprocess([np.asarray(Image.open(io.BytesIO(FILES[n]))) for n in FILES], K25)
    k.decode_path()  # the self-check itself uses Pillow

    def no_open(*args, **kwargs):
        raise AssertionError("Image.open called for a natively decoded input")

    monkeypatch.setattr(Image, "open", no_open)
    got = k.preprocess(list(FILES.values()), K25, num_threads=2)
    assert got["pixel_values"].tobytes() == want["pixel_values"].tobytes()


def test_load_truncated_images_sends_everything_to_pillow(monkeypatch):
    opened = []
    real_open = Image.open

    def counting_open(*args, **kwargs):
        opened.append(1)
        return real_open(*args, **kwargs)

    k.decode_path()
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    monkeypatch.setattr(Image, "open", counting_open)
    got = k.preprocess([FILES["jpeg-420"], FILES["png-rgb"]], K25)
    want_pv, _ = reference_preprocess([FILES["jpeg-420"], FILES["png-rgb"]], K25)
    assert len(opened) >= 2
    assert got["pixel_values"].tobytes() == want_pv.tobytes()


def test_load_truncated_images_lets_pillow_decode_a_png_with_a_bad_ancillary_crc(monkeypatch):
    # Pillow skips the CRC of an ancillary chunk under LOAD_TRUNCATED_IMAGES; the PNG
    # walk's fault sends the file to Pillow, which then decodes it (the walk raised).
    data = bytearray(encode(photo_rgb(12, 8), "PNG", dpi=(72, 72)))
    at = data.index(b"pHYs") + 4 + 9
    data[at] ^= 1  # its CRC
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    got = k.preprocess(bytes(data), K25)
    want_pv, _ = reference_preprocess(bytes(data), K25)
    assert got["pixel_values"].tobytes() == want_pv.tobytes()


def test_a_forced_mismatch_disables_that_format_only(monkeypatch):
    real = _native.decode_image

    def off_by_one(data, **kwargs):
        path, pixels = real(data, **kwargs)
        if data.startswith(b"\xff\xd8") and path == "native":
            pixels = pixels.copy()
            pixels.flat[0] ^= 1
        return path, pixels

    monkeypatch.setattr(_native, "decode_image", off_by_one)
    native_decode._paths = None
    paths = k.decode_path()
    assert paths["jpeg"].startswith("pillow: the native JPEG decoder disagrees with Pillow"), paths
    assert paths["png"].startswith("native:"), paths
    # the JPEG now goes through Pillow, still exact
    read, native = encoded.route(FILES["jpeg-420"], 0, CallOptions.make())
    assert native is None and read == FILES["jpeg-420"]
    want_pv, _ = reference_preprocess([FILES["jpeg-420"]], K25)
    assert k.preprocess(FILES["jpeg-420"], K25)["pixel_values"].tobytes() == want_pv.tobytes()


def _child(code: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_env_forces_pillow_and_rejects_other_values():
    out = _child("import kimi_k3_rs as k; print(k.decode_path())", KIMI_K3_RS_DECODE="pillow")
    assert out == str({"jpeg": "pillow: KIMI_K3_RS_DECODE=pillow", "png": "pillow: KIMI_K3_RS_DECODE=pillow"})
    out = _child(
        "import kimi_k3_rs as k\ntry:\n    k.decode_path()\nexcept k.KimiK3Error as e:\n    print(e)",
        KIMI_K3_RS_DECODE="turbo",
    )
    assert out == "KIMI_K3_RS_DECODE must be 'auto' or 'pillow', got 'turbo'"


def test_a_forked_child_inherits_the_self_check():
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    parent = k.decode_path()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the result must be there without running the check again
        os.close(read)
        ok = native_decode._paths is not None and k.decode_path() == parent
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)


def test_a_file_cut_anywhere_in_its_headers_fails_with_pillows_message():
    # A small JPEG cut at every byte up to its scan data, and a small PNG up to its IDAT
    # data (one test: the same sweep of both formats). A cut there is a header fault,
    # which sends the file to Pillow: preprocess raises Pillow's error (the header walks
    # raised their own: "truncated marker length", "truncated before IDAT", ...).
    picture = photo_rgb(24, 16)
    jpeg, png = encode(picture, "JPEG", quality=90), encode(picture, "PNG")
    sos = jpeg.index(b"\xff\xda")
    ends = {"JPEG": sos + 2 + int.from_bytes(jpeg[sos + 2 : sos + 4], "big"), "PNG": png.index(b"IDAT") + 4}
    seen = set()
    for fmt, data in (("JPEG", jpeg), ("PNG", png)):
        for cut in range(1, ends[fmt]):
            want = pillow_failure(data[:cut])
            with pytest.raises(k.ImageError) as ours:
                k.preprocess(data[:cut], K25)
            assert str(ours.value) == want, (fmt, cut)
            seen.add(want.removeprefix("image 0: cannot read or decode it: "))
    assert seen == {
        "UnidentifiedImageError: cannot identify image file",
        "OSError: Truncated File Read",
        "OSError: cannot load this image",
    }
