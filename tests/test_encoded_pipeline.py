"""Encoded inputs through the whole pipeline, on both decode paths (issue #12): JPEG and
PNG files the core decodes, and files Pillow decodes, from bytes / paths / data URLs,
exact against the reference run in the test (zero tolerance) under K2.5, K3 and K3
composited before the resize; large files (streamed into the resize by the native
decoders, or decoded by Pillow into the pipeline's array); threads; truncated files
failing where Pillow fails; paths that are no regular file. Which decoder takes a file:
``test_decoder_routing.py``; their limits: ``test_bombs_and_limits.py``.
"""

from __future__ import annotations

import base64
import io
import os
import re

import numpy as np
import pytest
from helpers import cfg, encode, native_files, photo, photo_rgb, pillow_files, upscale
from PIL import Image
from reference import reference_preprocess

import kimi_k3_rs as k
from kimi_k3_rs import _native
from kimi_k3_rs._input import native as native_decode

pytestmark = pytest.mark.usefixtures("fresh_self_check")  # each test sees the process's real self-check

CONFIGS = {
    "k25": cfg("kimi_k25"),
    "k3": cfg("kimi_k3"),
    "k3-before": cfg("kimi_k3", transparent_bg_fill_stage="before_resize"),
}
FILES = native_files()
PILLOW_FILES = pillow_files()


@pytest.mark.parametrize("preset", sorted(CONFIGS))
@pytest.mark.parametrize("name", sorted(FILES) + sorted(PILLOW_FILES))
def test_bytes_through_the_pipeline_equal_the_reference(name, preset):
    data = FILES.get(name) or PILLOW_FILES[name]
    media_proc_cfg = CONFIGS[preset]
    want_pv, want_grid = reference_preprocess([data], media_proc_cfg)
    got = k.preprocess(data, media_proc_cfg)
    assert np.array_equal(got["grid_thws"], want_grid)
    assert got["pixel_values"].tobytes() == want_pv.tobytes()


def test_paths_data_urls_bytearray_and_media_dicts(tmp_path):
    media_proc_cfg = CONFIGS["k3"]
    inputs, expected = [], []
    for i, name in enumerate(("jpeg-420", "png-rgba", "png-la")):
        data = FILES[name]
        path = tmp_path / f"{i}.img"
        path.write_bytes(data)
        mime = "image/jpeg" if name.startswith("jpeg") else "image/png"
        url = f"data:{mime};base64," + base64.b64encode(data).decode()
        inputs += [str(path), path, url, bytearray(data), memoryview(data), {"type": "image", "image": data}]
        expected += [data] * 6
    want_pv, want_grid = reference_preprocess(expected, media_proc_cfg)
    for threads in (1, 2):
        got = k.preprocess(inputs, media_proc_cfg, num_threads=threads)
        assert np.array_equal(got["grid_thws"], want_grid)
        assert got["pixel_values"].tobytes() == want_pv.tobytes()


def _truncations(data: bytes) -> list[bytes]:
    cuts = sorted({len(data) * i // 24 for i in range(1, 24)} | {len(data) - 2, len(data) - 1})
    return [data[:cut] for cut in cuts]


@pytest.mark.parametrize("name", ["jpeg-420", "jpeg-444-progressive", "png-rgb"])
def test_truncated_files_fail_where_pillow_fails(name):
    for data in _truncations(FILES[name]):
        try:
            with Image.open(io.BytesIO(data)) as image:
                want = np.asarray(image)
        except (OSError, SyntaxError, ValueError):
            want = None
        if want is None:
            with pytest.raises(k.ImageError, match=r"^image 0: "):
                k.preprocess(data, CONFIGS["k25"])
        else:
            want_pv, _ = reference_preprocess([want], CONFIGS["k25"])
            assert k.preprocess(data, CONFIGS["k25"])["pixel_values"].tobytes() == want_pv.tobytes()


def _large(mode: str, side: int) -> Image.Image:
    """A side x side photo in ``mode`` (RGBA / LA with varied alpha), over one 16 MiB
    block of Pillow's arena in Pillow's storage."""
    image = photo_rgb(side, side)
    if mode in ("RGBA", "LA"):
        alpha = Image.linear_gradient("L").resize((side, side)).rotate(30)
        image = image.convert(mode[:-1]).copy()
        image.putalpha(alpha)
        return image
    return image.convert(mode)


@pytest.mark.parametrize(
    ("mode", "fmt", "side"),
    [("RGB", "TIFF", 2100), ("RGB", "BMP", 2100), ("RGB", "WEBP", 2100), ("RGB", "PPM", 2100),
     ("RGBA", "TIFF", 2100), ("RGBA", "WEBP", 2100), ("L", "TIFF", 4200), ("L", "PPM", 4200),
     ("LA", "TIFF", 2100), ("RGB", "JPEG", 2100), ("RGBA", "PNG", 2100), ("RGB-key", "PNG", 2100),
     ("L-key", "PNG", 4200)],
)
def test_pillow_decodes_large_images_into_the_pipelines_array(mode, fmt, side, monkeypatch):
    """Issue #13 (4): an L / RGB / RGBA file Pillow decodes that is larger than one
    Pillow block is decoded into a numpy array of Pillow's storage layout (Pillow's
    decoder, its bytes), not copied after; bit-exact to the reference under K2.5, K3
    and K3 before_resize. LA (and JPEG / PNG forced to Pillow) likewise through Pillow."""
    from kimi_k3_rs._input import encoded as decoding

    monkeypatch.setenv("KIMI_K3_RS_DECODE", "pillow")
    native_decode._paths = None
    mode, _, key = mode.partition("-")  # "-key": a tRNS colour key, which L's mode steps read
    options = {"lossless": True} if fmt == "WEBP" else {"transparency": (40, 9, 0) if mode == "RGB" else 7} if key else {}
    data = encode(_large(mode, side), fmt, **options)
    assert Image.open(io.BytesIO(data)).mode == mode
    assert ("transparency" in Image.open(io.BytesIO(data)).info) == bool(key)
    taken = []
    original = decoding._load_into_array
    monkeypatch.setattr(decoding, "_load_into_array", lambda image: taken.append(original(image)) or taken[-1])
    for config in CONFIGS.values():
        want_pv, want_grid = reference_preprocess([Image.open(io.BytesIO(data))], config)
        got = k.preprocess(data, config)
        assert got["pixel_values"].tobytes() == want_pv.tobytes()
        assert np.array_equal(got["grid_thws"], want_grid)
    # Mapped for L / RGB / RGBA; LA, and L with a colour key, keep Pillow's own storage.
    assert all((array is not None) == (mode != "LA" and not (mode == "L" and key)) for array in taken), taken
    assert len(taken) == len(CONFIGS)


def test_a_tiff_pillow_turns_on_load_keeps_pillows_storage(monkeypatch):
    """A TIFF whose orientation Pillow 13 applies while loading it gets storage of its
    own: the array is not used, and the result is still the reference's."""
    image = _large("RGB", 2100).crop((0, 0, 2100, 1900))
    exif = Image.Exif()
    exif[0x0112] = 6
    data = encode(image, "TIFF", exif=exif)
    from PIL import ImageOps

    for exif_transpose in (False, True):
        opened = Image.open(io.BytesIO(data))
        want_pv, _ = reference_preprocess([ImageOps.exif_transpose(opened) if exif_transpose else opened], CONFIGS["k25"])
        got = k.preprocess(data, CONFIGS["k25"], exif_transpose=exif_transpose)
        assert got["pixel_values"].tobytes() == want_pv.tobytes()


def test_threads_equal_serial_on_a_mixed_batch():
    batch = list(FILES.values()) + list(PILLOW_FILES.values()) + [upscale(photo("camera.png"), 2)]
    serial = k.preprocess(batch, CONFIGS["k3"], num_threads=1)
    for threads in (2, 3):
        got = k.preprocess(batch, CONFIGS["k3"], num_threads=threads)
        assert np.array_equal(got["grid_thws"], serial["grid_thws"])
        assert got["pixel_values"].tobytes() == serial["pixel_values"].tobytes()


def _large_files() -> dict[str, bytes]:
    """Files larger than the streamed decode's chunks (256 KiB of rows) and its decode
    ahead (8 MiB): camera-like grain on a photo as JPEG (baseline 4:2:0, progressive
    4:4:4, grey) and PNG (RGB, RGBA with varied alpha, LA, grey)."""
    rng = np.random.default_rng(24)
    pixels = np.asarray(photo_rgb(4000, 3000)).astype(np.int16)
    pixels += rng.integers(-6, 7, pixels.shape, dtype=np.int16)
    rgb = Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
    small = rgb.resize((2900, 2100))
    rgba = small.convert("RGBA")
    rgba.putalpha(Image.fromarray(rng.integers(0, 256, (2100, 2900), dtype=np.uint8)))
    return {
        "jpeg-420-4000x3000": encode(rgb, "JPEG", quality=90),
        "jpeg-444-progressive-2900x2100": encode(small, "JPEG", quality=90, subsampling=0, progressive=True),
        "jpeg-L-4000x3000": encode(rgb.convert("L"), "JPEG", quality=90),
        "png-rgb-2900x2100": encode(small, "PNG", compress_level=1),
        "png-rgba-2900x2100": encode(rgba, "PNG", compress_level=1),
        "png-la-2900x2100": encode(rgba.convert("LA"), "PNG", compress_level=1),
        "png-L-4000x3000": encode(rgb.convert("L"), "PNG", compress_level=1),
    }


@pytest.mark.slow
def test_large_files_streamed_into_the_resize_equal_the_reference():
    """Issue #24 item 2: a JPEG or PNG from bytes is decoded band by band as the resize
    reads it (on two threads or more, decoded ahead on a second thread while the bands
    before are resized), never whole: every byte as the reference's, resized under
    K2.5, K3 and K3 composited before the resize, or not resized (2900x2100 under a
    limit it fits), on 1, 2 and 3 threads, under the poison mode (every chunk of
    decoded rows starts as garbage); a damaged file fails on 1 and 2 threads with the
    message of the whole decode (``_native.decode_image``), Pillow's."""
    unresized = cfg("kimi_k25", in_patch_limit=40000, patch_limit_on_one_side=512)
    for name, data in _large_files().items():
        assert isinstance(_native.route_encoded(data), _native.EncodedImage), name  # decoded natively
        with Image.open(io.BytesIO(data)) as image:
            pixels = np.asarray(image)
        presets = dict(CONFIGS)
        if "2900x2100" in name:
            presets["unresized"] = unresized
        for preset, config in presets.items():
            want_pv, want_grid = reference_preprocess([pixels], config)
            for threads in (1, 2, 3):
                got = k.preprocess(data, config, num_threads=threads)
                assert np.array_equal(got["grid_thws"], want_grid), (name, preset)
                assert got["pixel_values"].tobytes() == want_pv.tobytes(), (name, preset, threads)
        # A JPEG cut halfway; a PNG whose middle 4 KiB of image data are zeros (a PNG cut
        # short goes to Pillow: its chunk walk finds the IDAT run truncated).
        if data.startswith(b"\x89PNG"):
            middle = (data.index(b"IDAT") + data.rindex(b"IEND")) // 2
            damaged = data[:middle] + bytes(4096) + data[middle + 4096 :]
        else:
            damaged = data[: len(data) // 2]
        assert isinstance(_native.route_encoded(damaged), _native.EncodedImage), name
        with pytest.raises(k.ImageError) as whole:
            _native.decode_image(damaged)
        with Image.open(io.BytesIO(damaged)) as image, pytest.raises(OSError) as pillow:
            image.load()
        assert str(pillow.value).startswith(str(whole.value).split(": ", 1)[1]), name
        for threads in (1, 2):
            with pytest.raises(k.ImageError) as streamed:
                k.preprocess(damaged, CONFIGS["k25"], num_threads=threads)
            assert str(streamed.value) == f"image 0: {whole.value}", (name, threads)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("entry", ["preprocess", "prepare", "count"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder"])
def test_a_path_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path, kind, entry):
    """An image path that is a FIFO (reading it waited for a writer), ``/dev/zero``
    (read without end) or a folder is refused before it is opened, on every entry that
    reads a path: an ImageError naming the image and what the path is."""
    if kind == "fifo":
        path, what = tmp_path / "photo.png", "a FIFO"
        os.mkfifo(path)
    elif kind == "dev-zero":
        path, what = "/dev/zero", "a character device"
    else:
        path, what = tmp_path, "a folder"
    config = k.KIMI_K3_MEDIA_PROC_CFG
    call = {
        "preprocess": lambda: k.preprocess([path], config),
        "prepare": lambda: k.prepare_kimi_k3_encoder_inputs([path], config),
        "count": lambda: k.KimiK3VisionProcessor(config).media_tokens_calculator({"type": "image", "image": path}),
    }[entry]
    with pytest.raises(k.ImageError, match=re.escape(f"not a regular file ({what})")):
        call()
