"""Every input type the checkpoint processor accepts (issue #3).

Encoded files made here with Pillow and from the real photos (JPEG baseline /
progressive / CMYK, PNG palette + tRNS / 16-bit grey / grey + alpha / L and RGB with
tRNS, GIF, WebP, BMP, PPM / PGM, TIFF), given as bytes, paths, ``data:`` URLs, media
dicts and lazily opened PIL images; EXIF orientation (off by default, opt-in on every
decode path); numpy arrays in every layout; torch tensors read as sglang reads them;
``content_hash`` carried through; mixed batches and their permutations; the error
messages verbatim.  Every pixel comparison is exact against ``tests/reference.py``.

torch is not installed in the test environment (its wheel is over 500 MB), so the
tensor reading is tested with :class:`FakeTensor`, a test double with the part of the
``torch.Tensor`` surface the library uses (``dtype``, ``shape``, ``detach``,
``device``, ``cpu``, ``numpy``); ``test_real_torch_tensors`` repeats the checks with
real tensors wherever torch is importable.
"""

from __future__ import annotations

import functools
import io
import warnings

import numpy as np
import pytest
from PIL import Image, ImageOps

import kimi_k3_rs
import kimi_k3_rs.processor as processor_module
from helpers import (
    DATA_DIR,
    K3_CHESSBOARD,
    ROCKET,
    assert_output_matches,
    cfg,
    data_url,
    encode,
    exact,
    k3_before,
    mode_image,
    noise_array,
    split_by_grid,
)
from reference import reference_preprocess

CONFIGS = {
    "k25": cfg("kimi_k25", in_patch_limit=300),
    "k3": cfg("kimi_k3", in_patch_limit=300),
    "k3_before": k3_before(in_patch_limit=300),
    "after_none": cfg("kimi_k3", in_patch_limit=300, transparent_bg_config=None),
}


def opened(raw: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(raw))
    img.load()
    return img


@functools.lru_cache(maxsize=None)
def photo(name: str) -> Image.Image:
    img = Image.open(ROCKET if name == "rocket.jpg" else DATA_DIR / name)
    img.load()
    return img


# ---------------------------------------------------------------------------
# encoded files: name -> (builder, expected PIL mode after decoding)
# ---------------------------------------------------------------------------


def _animated(fmt, frames, **kw):
    return encode(frames[0], fmt, save_all=True, append_images=frames[1:], **kw)


def _rgba_photo():
    rgba = photo("coffee.png").convert("RGBA")
    a = np.asarray(rgba).copy()
    a[::3, :, 3] = 0
    a[:, ::5, 3] = 128
    return Image.fromarray(a)


FILES = {
    "jpeg_baseline_photo": (lambda: encode(photo("astronaut.png"), "JPEG", quality=90), "RGB"),
    "jpeg_progressive_photo": (lambda: encode(photo("chelsea.png"), "JPEG", quality=85, progressive=True), "RGB"),
    "jpeg_grey_photo": (lambda: encode(photo("camera.png"), "JPEG"), "L"),
    "jpeg_cmyk_photo": (lambda: encode(photo("coffee.png").convert("CMYK"), "JPEG", quality=92), "CMYK"),
    "jpeg_embedded_rocket": (lambda: ROCKET.read_bytes(), "RGB"),
    "png_palette_trns_photo": (
        lambda: encode(_quantized_with_trns(photo("chelsea.png")), "PNG"), "P"),
    "png_palette_trns_noise": (lambda: encode(mode_image("P+bytes_trns", 300, 220, 4), "PNG"), "P"),
    "png_palette_int_trns": (lambda: encode(mode_image("P+int_trns", 300, 220, 5), "PNG"), "P"),
    "png_16bit_grey_photo": (lambda: encode(_grey16(photo("camera.png")), "PNG"), "I;16"),
    "png_grey_alpha": (lambda: encode(mode_image("LA", 300, 220, 6), "PNG"), "LA"),
    "png_grey_trns": (lambda: encode(mode_image("L+trns", 300, 220, 7), "PNG"), "L"),
    "png_rgb_trns": (lambda: encode(mode_image("RGB+trns", 300, 220, 8), "PNG"), "RGB"),
    "png_rgba_photo": (lambda: encode(_rgba_photo(), "PNG"), "RGBA"),
    "png_1bit": (lambda: encode(mode_image("1", 300, 220, 9), "PNG"), "1"),
    "gif_photo": (lambda: encode(photo("coffee.png").quantize(200), "GIF"), "P"),
    "gif_animated_trns": (
        lambda: _animated("GIF", [mode_image("P+int_trns", 300, 220, s) for s in range(3)], transparency=7), "P"),
    "webp_lossy_photo": (lambda: encode(photo("astronaut.png"), "WEBP", quality=80), "RGB"),
    "webp_lossless_alpha": (lambda: encode(_rgba_photo(), "WEBP", lossless=True), "RGBA"),
    "webp_animated": (
        lambda: _animated("WEBP", [Image.fromarray(noise_array(200, 150, "RGB", s)) for s in range(3)],
                          lossless=True), "RGB"),
    "bmp_rgb_photo": (lambda: encode(photo("chelsea.png"), "BMP"), "RGB"),
    "bmp_palette": (lambda: encode(mode_image("P", 300, 220, 10), "BMP"), "P"),
    "bmp_1bit": (lambda: encode(mode_image("1", 300, 220, 11), "BMP"), "1"),
    "ppm_rgb_photo": (lambda: encode(photo("coffee.png"), "PPM"), "RGB"),
    "pgm_grey_photo": (lambda: encode(photo("camera.png"), "PPM"), "L"),
    "tiff_rgb_photo": (lambda: encode(photo("astronaut.png"), "TIFF"), "RGB"),
    "tiff_cmyk": (lambda: encode(mode_image("CMYK", 300, 220, 12), "TIFF"), "CMYK"),
    "tiff_16bit_grey": (lambda: encode(mode_image("I;16", 300, 220, 13), "TIFF"), "I;16"),
    "tiff_ycbcr": (lambda: encode(mode_image("YCbCr", 300, 220, 14), "TIFF"), "YCbCr"),
    "tiff_lab": (lambda: encode(mode_image("LAB", 300, 220, 15), "TIFF"), "LAB"),
    "tiff_float": (lambda: encode(mode_image("F", 300, 220, 16), "TIFF"), "F"),
    "tiff_int32": (lambda: encode(mode_image("I", 300, 220, 17), "TIFF"), "I"),
}


def _quantized_with_trns(img):
    p = img.quantize(128)
    alphas = bytes([0 if i % 5 == 0 else (128 if i % 5 == 1 else 255) for i in range(128)])
    p.info["transparency"] = alphas
    return p


def _grey16(img):
    a = np.asarray(img.convert("L")).astype(np.uint16) * 257  # most values saturate
    a[: a.shape[0] // 2] //= 300  # the top half stays below 256
    return Image.frombytes("I;16", img.size, a.astype("<u2").tobytes())


@functools.lru_cache(maxsize=None)
def file_bytes(name: str) -> bytes:
    return FILES[name][0]()


def reference_of(raw: bytes, media_proc_cfg, *, exif_transpose=False):
    img = opened(raw)
    if exif_transpose:
        img = ImageOps.exif_transpose(img)
    return reference_of_items(img, media_proc_cfg)


@pytest.mark.parametrize("name", sorted(FILES))
def test_encoded_file_modes(name):
    """Pillow decodes each file into the mode the test means (palette kept, 16-bit grey kept...)."""
    img = Image.open(io.BytesIO(file_bytes(name)))
    assert img.mode == FILES[name][1]
    if name.startswith("png_palette"):
        assert "transparency" in img.info
    if name == "gif_animated_trns":
        assert img.n_frames == 3 and img.info["transparency"] == 7


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("name", sorted(FILES))
def test_encoded_files(name, config):
    raw = file_bytes(name)
    media_proc_cfg = CONFIGS[config]
    ref = reference_of(raw, media_proc_cfg)
    assert_output_matches(kimi_k3_rs.preprocess(raw, media_proc_cfg), ref)
    assert_output_matches(kimi_k3_rs.preprocess(Image.open(io.BytesIO(raw)), media_proc_cfg), ref)  # lazy


@pytest.mark.parametrize("name", ["png_palette_trns_photo", "jpeg_cmyk_photo", "png_16bit_grey_photo",
                                  "gif_animated_trns", "webp_lossless_alpha", "tiff_lab"])
def test_every_decode_path(name, tmp_path):
    raw = file_bytes(name)
    path = tmp_path / f"{name}.bin"
    path.write_bytes(raw)
    media_proc_cfg = CONFIGS["k3"]
    ref = reference_of(raw, media_proc_cfg)
    lazy = Image.open(path)  # a caller's lazily opened file (closed at the end)
    items = [raw, bytearray(raw), memoryview(raw), str(path), path, data_url(raw),
             {"type": "image", "image": raw, "content_hash": "h"}, {"type": "image", "image": str(path)}, lazy]
    with lazy:
        check_every_path(items, raw, media_proc_cfg, ref)


def check_every_path(items, raw, media_proc_cfg, ref):
    for item in items:
        assert_output_matches(kimi_k3_rs.preprocess(item, media_proc_cfg), ref)
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg)
    out = processor.preprocess(items)
    assert out["grid_thws"].tolist() == ref[1].tolist() * len(items)
    for block in split_by_grid(out["pixel_values"], out["grid_thws"]):
        assert np.array_equal(block.view(np.uint32), ref[0].view(np.uint32))
    enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs(items, processor)
    assert enc.grid_thws.tolist() == ref[1].tolist() * len(items)
    assert enc.original_image_sizes == [list(opened(raw).size)] * len(items)
    assert np.array_equal(enc.materialize([6])[0].view(np.uint32), ref[0].view(np.uint32))


def test_animated_files_use_the_first_frame():
    for name in ("gif_animated_trns", "webp_animated"):
        raw = file_bytes(name)
        first = opened(raw)
        assert getattr(first, "n_frames", 1) == 3
        out = kimi_k3_rs.preprocess(raw, CONFIGS["k3"])
        assert_output_matches(out, reference_preprocess(first.copy(), CONFIGS["k3"]))


# ---------------------------------------------------------------------------
# EXIF orientation: off by default, opt-in on every decode path
# ---------------------------------------------------------------------------


def with_orientation(img, orientation, fmt="JPEG"):
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(img, fmt, exif=exif.tobytes())


@functools.lru_cache(maxsize=None)
def oriented(orientation, fmt="JPEG"):
    base = Image.fromarray(noise_array(120, 70, "RGB", orientation))
    base = base.resize((240, 140), Image.Resampling.BICUBIC)  # smooth enough for JPEG
    return with_orientation(base, orientation, fmt)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_transpose_opt_in(orientation, fmt, tmp_path):
    raw = oriented(orientation, fmt)
    assert Image.open(io.BytesIO(raw)).getexif()[0x0112] == orientation
    media_proc_cfg = cfg("kimi_k3", in_patch_limit=100)
    ref_plain = reference_of(raw, media_proc_cfg)
    ref_rot = reference_of(raw, media_proc_cfg, exif_transpose=True)
    path = tmp_path / f"img.{fmt.lower()}"
    path.write_bytes(raw)
    lazy = Image.open(path)
    items = [raw, str(path), path, data_url(raw), {"type": "image", "image": raw}, lazy, opened(raw)]
    with lazy:
        check_exif_paths(items, raw, orientation, media_proc_cfg, ref_plain, ref_rot)


def check_exif_paths(items, raw, orientation, media_proc_cfg, ref_plain, ref_rot):
    for item in items:
        assert_output_matches(kimi_k3_rs.preprocess(item, media_proc_cfg), ref_plain)
        assert_output_matches(kimi_k3_rs.preprocess(item, media_proc_cfg, exif_transpose=True), ref_rot)
    w, h = opened(raw).size
    rotated_size = [h, w] if orientation >= 5 else [w, h]
    processor = kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg, exif_transpose=True)
    assert_output_matches(processor.preprocess([{"type": "image", "image": raw}]), ref_rot)
    for owner, kwargs in ((processor, {}), (media_proc_cfg, {"exif_transpose": True})):
        enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs(items, owner, **kwargs)
        assert enc.original_image_sizes == [rotated_size] * len(items)
        assert enc.grid_thws.tolist() == ref_rot[1].tolist() * len(items)
        for got in enc.materialize([0, 5]):
            assert np.array_equal(got.view(np.uint32), ref_rot[0].view(np.uint32))
    enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs(items, processor, exif_transpose=False)
    assert enc.original_image_sizes == [[w, h]] * len(items)
    # arrays are never rotated
    arr = np.asarray(opened(raw))
    assert np.array_equal(kimi_k3_rs.preprocess(arr, media_proc_cfg, exif_transpose=True)["pixel_values"],
                          ref_plain[0])


def test_exif_transpose_palette_image():
    """The transpose runs before the mode steps (a P image stays P, NEAREST under K3)."""
    img = mode_image("P+int_trns", 90, 50, 2)
    exif = Image.Exif()
    exif[0x0112] = 6
    raw = encode(img, "PNG", exif=exif.tobytes())
    assert opened(raw).mode == "P"
    for config in ("k3", "k25"):
        media_proc_cfg = cfg("kimi_k3" if config == "k3" else "kimi_k25", in_patch_limit=12)
        ref = reference_of(raw, media_proc_cfg, exif_transpose=True)
        assert ref[1].tolist() != reference_of(raw, media_proc_cfg)[1].tolist()
        assert_output_matches(kimi_k3_rs.preprocess(raw, media_proc_cfg, exif_transpose=True), ref)


@pytest.mark.parametrize("bad", [1, "yes", None, 0.0])
def test_exif_transpose_must_be_bool(bad):
    msg = f"exif_transpose must be True or False, got {bad!r}"
    img = mode_image("RGB+trns", 10, 10, 0)
    with pytest.raises(TypeError, match=exact(msg)):
        kimi_k3_rs.preprocess(img, CONFIGS["k3"], exif_transpose=bad)
    with pytest.raises(TypeError, match=exact(msg)):
        kimi_k3_rs.KimiK3VisionProcessor(CONFIGS["k3"], exif_transpose=bad)
    if bad is not None:  # None means "the processor's setting" here
        with pytest.raises(TypeError, match=exact(msg)):
            kimi_k3_rs.prepare_kimi_k3_encoder_inputs([img], CONFIGS["k3"], exif_transpose=bad)


# ---------------------------------------------------------------------------
# numpy arrays
# ---------------------------------------------------------------------------


def capture_native(monkeypatch):
    """Record the arrays handed to ``_native.preprocess`` (to check what was copied)."""
    seen = []
    original = processor_module._native.preprocess

    def spy(items, *args, **kwargs):
        seen.extend(pixels for item in items for pixels in item.pixels)
        return original(items, *args, **kwargs)

    monkeypatch.setattr(processor_module._native, "preprocess", spy)
    return seen


VIEWS = {
    "every_other_column": lambda a: a[:, ::2, :3],
    "flipped_rows": lambda a: a[::-1],
    "flipped_columns_2ch": lambda a: a[:, ::-1, 1:3],
    "transposed": lambda a: a.transpose(1, 0, 2),
    "single_channel_view": lambda a: a[:, :, 2],
    "single_channel_keepdims": lambda a: a[:, :, 1:2],
    "fortran_order": lambda a: np.asfortranarray(a[:, :, :3]),
    "crop": lambda a: a[10:90, 20:170],
    "rgb_of_rgba": lambda a: a[:, :, :3],  # 4-byte pixels: read in place
    "rgb_of_rgba_crop": lambda a: a[10:90, :, :3],  # its base is the whole array: copied
}
#: Views the core reads in place though they are not C-contiguous.
IN_PLACE_VIEWS = {"rgb_of_rgba"}


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("config", ["k25", "k3", "k3_before"])
def test_numpy_views_are_read_correctly(view, config, monkeypatch):
    base = noise_array(200, 120, "RGBA", seed=3)
    arr = VIEWS[view](base)
    arr.setflags(write=False)  # read-only views are fine too
    ref = reference_preprocess(np.ascontiguousarray(arr), CONFIGS[config])
    seen = capture_native(monkeypatch)
    assert_output_matches(kimi_k3_rs.preprocess(arr, CONFIGS[config]), ref)
    # a copy only when the array is neither C-contiguous nor RGB in 4-byte pixels
    assert np.shares_memory(seen[0], arr) == (arr.flags.c_contiguous or view in IN_PLACE_VIEWS)


@pytest.mark.parametrize("shape", ["HxW", "HxWx1", "HxWx2", "HxWx3", "HxWx4"])
def test_numpy_contiguous_and_readonly_read_in_place(shape, monkeypatch):
    base = noise_array(90, 60, "RGBA", seed=4)
    arr = {"HxW": base[:, :, 0], "HxWx1": base[:, :, :1], "HxWx2": base[:, :, :2],
           "HxWx3": base[:, :, :3], "HxWx4": base}[shape].copy()
    arr.setflags(write=False)
    seen = capture_native(monkeypatch)
    out = kimi_k3_rs.preprocess(arr, CONFIGS["k3"])
    assert seen[0] is arr
    assert_output_matches(out, reference_preprocess(arr, CONFIGS["k3"]))


# ---------------------------------------------------------------------------
# torch tensors (sglang's reading), through a test double
# ---------------------------------------------------------------------------


class FakeDtype:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"


class FakeDevice:
    def __init__(self, type_):
        self.type = type_


class FakeTensor:
    """The ``torch.Tensor`` surface the library reads, over a numpy array."""

    __module__ = "torch"  # what ``type(tensor).__module__`` says for real tensors

    def __init__(self, array, device="cpu", dtype=None, calls=None):
        self._array = array
        self.dtype = FakeDtype(dtype or {np.dtype(np.uint8): "uint8", np.dtype(np.float32): "float32",
                                         np.dtype(np.int64): "int64"}[array.dtype])
        self.device = FakeDevice(device)
        self.calls = calls if calls is not None else []

    @property
    def shape(self):
        return tuple(self._array.shape)

    def dim(self):
        return self._array.ndim

    def detach(self):
        self.calls.append("detach")
        return FakeTensor(self._array, self.device.type, self.dtype.name, self.calls)

    def cpu(self):
        self.calls.append("cpu")
        return FakeTensor(self._array.copy(), "cpu", self.dtype.name, self.calls)

    def numpy(self):
        if self.device.type != "cpu":
            raise TypeError("can't convert cuda:0 device type tensor to numpy")
        self.calls.append("numpy")
        return self._array


def test_fake_tensor_is_detected_as_torch():
    assert kimi_k3_rs._input.arrays.is_torch_tensor(FakeTensor(np.zeros((2, 2), np.uint8)))
    assert not kimi_k3_rs._input.arrays.is_torch_tensor(np.zeros((2, 2), np.uint8))


TENSOR_LAYOUTS = {
    # name: (array given to the tensor, the HWC array it means)
    "HW": lambda a: (a[:, :, 0].copy(), a[:, :, 0]),
    "CHW_1": lambda a: (np.ascontiguousarray(a[:, :, :1].transpose(2, 0, 1)), a[:, :, :1]),
    "CHW_3": lambda a: (np.ascontiguousarray(a[:, :, :3].transpose(2, 0, 1)), a[:, :, :3]),
    "CHW_4": lambda a: (np.ascontiguousarray(a.transpose(2, 0, 1)), a),
    "HWC_2": lambda a: (a[:, :, :2].copy(), a[:, :, :2]),
    "HWC_3": lambda a: (a[:, :, :3].copy(), a[:, :, :3]),
    "HWC_4": lambda a: (a.copy(), a),
}


@pytest.mark.parametrize("layout", sorted(TENSOR_LAYOUTS))
@pytest.mark.parametrize("config", ["k25", "k3", "k3_before", "after_none"])
def test_tensor_layouts(layout, config):
    tensor_data, hwc = TENSOR_LAYOUTS[layout](noise_array(150, 100, "RGBA", seed=7))
    tensor = FakeTensor(tensor_data)
    ref = reference_preprocess(np.ascontiguousarray(hwc), CONFIGS[config])
    assert_output_matches(kimi_k3_rs.preprocess(tensor, CONFIGS[config]), ref)
    assert_output_matches(kimi_k3_rs.preprocess([{"type": "image", "image": tensor}], CONFIGS[config]), ref)
    enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([tensor], CONFIGS[config])
    assert enc.original_image_sizes == [[150, 100]]
    assert np.array_equal(enc.materialize()[0].view(np.uint32), ref[0].view(np.uint32))


def test_tensor_layout_rule_is_sglangs():
    """A 3-D tensor whose first dimension is 1, 3 or 4 is CHW even when it could be HWC."""
    data = noise_array(3, 4, "RGB", seed=1)  # shape (4, 3, 3): first dim 4 -> CHW 4x(3x3)
    assert data.shape == (4, 3, 3)
    out = kimi_k3_rs.preprocess(FakeTensor(data), CONFIGS["k25"])
    ref = reference_preprocess(np.ascontiguousarray(data.transpose(1, 2, 0)), CONFIGS["k25"])
    assert_output_matches(out, ref)


def test_tensor_reading_and_copies(monkeypatch):
    hwc = noise_array(64, 32, "RGB", seed=2)
    calls = []
    seen = capture_native(monkeypatch)
    kimi_k3_rs.preprocess(FakeTensor(hwc, calls=calls), CONFIGS["k3"])
    assert calls == ["detach", "numpy"]
    assert np.shares_memory(seen[-1], hwc)  # HWC CPU tensor: read in place
    chw = np.ascontiguousarray(hwc.transpose(2, 0, 1))
    kimi_k3_rs.preprocess(FakeTensor(chw), CONFIGS["k3"])
    assert not np.shares_memory(seen[-1], chw)  # CHW: one HWC copy
    calls = []
    out = kimi_k3_rs.preprocess(FakeTensor(hwc, device="cuda", calls=calls), CONFIGS["k3"])
    assert calls == ["detach", "cpu", "numpy"]
    assert_output_matches(out, reference_preprocess(hwc, CONFIGS["k3"]))
    # prepare reads the shape only
    calls = []
    kimi_k3_rs.prepare_kimi_k3_encoder_inputs([FakeTensor(hwc, device="cuda", calls=calls)], CONFIGS["k3"])
    assert calls == []


TENSOR_ERRORS = [
    (FakeTensor(np.zeros((8, 8, 3), np.float32)), "Kimi-K3 preprocessing expects raw uint8 pixels, got torch.float32"),
    (FakeTensor(np.zeros((3, 8, 8), np.int64)), "Kimi-K3 preprocessing expects raw uint8 pixels, got torch.int64"),
    (FakeTensor(np.zeros((8, 8, 5), np.uint8)), "Unsupported Kimi-K3 image channel count: 5"),
    (FakeTensor(np.zeros((8, 8, 6), np.uint8)), "Unsupported Kimi-K3 image channel count: 6"),
]


@pytest.mark.parametrize("tensor,msg", TENSOR_ERRORS, ids=[m for _, m in TENSOR_ERRORS])
def test_tensor_errors(tensor, msg):
    for call in (
        lambda: kimi_k3_rs.preprocess([tensor], CONFIGS["k3"]),
        lambda: kimi_k3_rs.preprocess(tensor, CONFIGS["k25"]),
        lambda: kimi_k3_rs.prepare_kimi_k3_encoder_inputs([{"type": "image", "image": tensor}], CONFIGS["k3"]),
        lambda: kimi_k3_rs.KimiK3VisionProcessor(CONFIGS["k3"]).preprocess([tensor]),
    ):
        with pytest.raises(ValueError, match=exact(msg)):
            call()


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (7,), (0, 5), (3, 0, 4)])
def test_tensor_bad_shapes(shape):
    with pytest.raises(kimi_k3_rs.ImageError):
        kimi_k3_rs.preprocess(FakeTensor(np.zeros(shape, np.uint8)), CONFIGS["k3"])


def test_real_torch_tensors():
    """The same reading with real torch tensors (runs where torch is installed; the
    test double above covers the logic everywhere)."""
    torch = pytest.importorskip("torch")
    hwc = noise_array(150, 100, "RGBA", seed=7)
    for data, mean in ((hwc[:, :, 0], hwc[:, :, 0]), (hwc.transpose(2, 0, 1), hwc),
                       (hwc[:, :, :3].transpose(2, 0, 1), hwc[:, :, :3]), (hwc[:, :, :2], hwc[:, :, :2])):
        tensor = torch.from_numpy(np.ascontiguousarray(data))
        assert_output_matches(kimi_k3_rs.preprocess(tensor, CONFIGS["k3"]),
                              reference_preprocess(np.ascontiguousarray(mean), CONFIGS["k3"]))
    with pytest.raises(ValueError, match=exact("Kimi-K3 preprocessing expects raw uint8 pixels, got torch.float32")):
        kimi_k3_rs.preprocess(torch.zeros((8, 8, 3)), CONFIGS["k3"])


# ---------------------------------------------------------------------------
# content_hash, mixed batches, errors
# ---------------------------------------------------------------------------


def test_content_hash_carried_through():
    img = mode_image("P+int_trns", 60, 40, 1)
    items = [{"type": "image", "image": img, "content_hash": "sha256:abc"}, img,
             {"type": "image", "image": encode(img, "GIF")}, {"type": "image", "image": img, "content_hash": None},
             {"type": "image", "image": np.zeros((5, 5), np.uint8), "content_hash": "0x1f"}]
    enc = kimi_k3_rs.prepare_kimi_k3_encoder_inputs(items, CONFIGS["k3"])
    assert enc.content_hashes == ["sha256:abc", None, None, None, "0x1f"]
    assert len(enc.materialize()) == 5
    # preprocess accepts (and ignores) the key
    out = kimi_k3_rs.preprocess(items[:1], CONFIGS["k3"])
    assert_output_matches(out, reference_preprocess(img, CONFIGS["k3"]))


def mixed_items(tmp_path):
    """(library input, reference input) pairs of many types, modes and sizes."""
    gif = file_bytes("gif_animated_trns")
    cmyk_path = tmp_path / "cmyk.jpg"
    cmyk_path.write_bytes(file_bytes("jpeg_cmyk_photo"))
    grey16 = file_bytes("png_16bit_grey_photo")
    base = noise_array(130, 70, "RGBA", seed=9)
    chw = np.ascontiguousarray(base[:, :, :3].transpose(2, 0, 1))
    return [
        (gif, opened(gif)),
        (str(cmyk_path), opened(cmyk_path.read_bytes())),
        (data_url(grey16), opened(grey16)),
        ({"type": "image", "image": mode_image("P+bytes_trns", 90, 200, 1), "content_hash": "x"},
         mode_image("P+bytes_trns", 90, 200, 1)),
        (base[:, ::2, 1:3], np.ascontiguousarray(base[:, ::2, 1:3])),
        (FakeTensor(chw), np.ascontiguousarray(base[:, :, :3])),
        (mode_image("1", 33, 17, 2), mode_image("1", 33, 17, 2)),
        (mode_image("LAB", 100, 60, 3), mode_image("LAB", 100, 60, 3)),
        (Image.open(io.BytesIO(file_bytes("tiff_cmyk"))), opened(file_bytes("tiff_cmyk"))),
        (mode_image("L+trns", 1, 1, 4), mode_image("L+trns", 1, 1, 4)),
        (np.zeros((3, 700), np.uint8), np.zeros((3, 700), np.uint8)),
    ]


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_mixed_batch_and_permutations(config, tmp_path):
    media_proc_cfg = CONFIGS[config]
    pairs = mixed_items(tmp_path)
    ref = reference_of_items([r for _, r in pairs], media_proc_cfg)
    out = kimi_k3_rs.preprocess([item for item, _ in pairs], media_proc_cfg)
    assert_output_matches(out, ref)
    blocks = split_by_grid(out["pixel_values"], out["grid_thws"])
    rng = np.random.default_rng(0)
    for _ in range(3):
        perm = rng.permutation(len(pairs))
        pairs = mixed_items(tmp_path)  # fresh lazy images and file handles
        pout = kimi_k3_rs.preprocess([pairs[i][0] for i in perm], media_proc_cfg)
        assert np.array_equal(pout["grid_thws"], out["grid_thws"][perm])
        assert np.array_equal(pout["pixel_values"].view(np.uint32),
                              np.concatenate([blocks[i] for i in perm]).view(np.uint32))


def reference_of_items(items, media_proc_cfg):
    """The reference, without Pillow's bytes-tRNS warning (which the library never gives)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Palette images with Transparency expressed in bytes")
        return reference_preprocess(items, media_proc_cfg)


INPUT_ERRORS = [
    ([1, 2], ValueError, "Unsupported data type: <class 'list'>"),
    ({"type": "image", "image": {"a": 1}}, ValueError, "Unsupported data type: <class 'dict'>"),
    ({1, 2}, ValueError, "Unsupported data type: <class 'set'>"),
    (3j, ValueError, "Unsupported data type: <class 'complex'>"),
    (True, ValueError, "Unsupported data type: <class 'bool'>"),
    (np.zeros((4, 4, 3), np.float16), ValueError, "Kimi-K3 preprocessing expects raw uint8 pixels, got float16"),
    (np.zeros((9, 9, 3), np.uint16)[:, ::2], ValueError, "Kimi-K3 preprocessing expects raw uint8 pixels, got uint16"),
    (np.zeros((4, 4, 7), np.uint8)[::2], ValueError, "Unsupported Kimi-K3 image channel count: 7"),
    ("data:image/png;base64", kimi_k3_rs.ImageError, "data: URL without a ',' before its payload: 'data:image/png;base64'"),
]


@pytest.mark.parametrize("item,cls,msg", INPUT_ERRORS, ids=[m for _, _, m in INPUT_ERRORS])
def test_input_errors(item, cls, msg):
    # Image errors (our class) name the failing image's batch index first.
    prefix = (lambda index: f"image {index}: ") if cls is kimi_k3_rs.ImageError else (lambda index: "")
    for index, call in (
        (0, lambda: kimi_k3_rs.preprocess([item], CONFIGS["k3"])),
        (1, lambda: kimi_k3_rs.preprocess([mode_image("CMYK", 9, 9, 0), item], CONFIGS["k25"])),
        (0, lambda: kimi_k3_rs.prepare_kimi_k3_encoder_inputs([item], CONFIGS["k3"])),
    ):
        with pytest.raises(cls, match=exact(prefix(index) + msg)):
            call()


@pytest.mark.parametrize("key", ["colour", "type", "chessboard_size"])
def test_unknown_transparent_bg_key_verbatim(key):
    msg = f"TransparentBgConfig.__init__() got an unexpected keyword argument '{key}'"
    media_proc_cfg = cfg("kimi_k3", transparent_bg_config={**K3_CHESSBOARD, key: 1})
    with pytest.raises(TypeError, match=exact(msg)):
        kimi_k3_rs.preprocess([mode_image("P+bytes_trns", 9, 9, 0)], media_proc_cfg)
    with pytest.raises(TypeError, match=exact(msg)):
        kimi_k3_rs.KimiK3VisionProcessor(media_proc_cfg)


def test_transparent_bg_defaults_inside_config():
    """Missing keys inside transparent_bg_config take the dataclass defaults
    (black, 16, True, 255, 200), not the published 8 / 180."""
    img = mode_image("P+bytes_trns", 120, 80, 3)
    for partial in ({}, {"pattern": "chessboard"}, {"pattern": "chessboard", "chessboard_square_size": 5},
                    {"chessboard_gray_value": 7}):
        media_proc_cfg = cfg("kimi_k3", transparent_bg_config=partial)
        assert_output_matches(kimi_k3_rs.preprocess(img, media_proc_cfg), reference_preprocess(img, media_proc_cfg))
    a = kimi_k3_rs.preprocess(img, cfg("kimi_k3", transparent_bg_config={"pattern": "chessboard"}))
    b = kimi_k3_rs.preprocess(img, cfg("kimi_k3"))  # published 8 / 180
    assert not np.array_equal(a["pixel_values"], b["pixel_values"])


@pytest.mark.parametrize("exif_transpose", [False, True])
@pytest.mark.parametrize("fmt", ["TIFF", "JPEG", "PNG", "WEBP"])
def test_header_sizing_agrees_with_decoding_for_every_orientation(fmt, exif_transpose):
    """Issue #13 (3): Pillow 13's TIFF plugin turns orientations 5..8 itself (its size
    is already the turned one); the deferred sizing must not turn it again. For every
    format and orientation the header sizes equal what ``preprocess`` decodes, and
    ``materialize`` (which checks its grids) gives ``preprocess``'s values."""
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (60, 200, 3), dtype=np.uint8))
    k3 = kimi_k3_rs.kimi_k3_media_proc_cfg()
    for orientation in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        data = encode(image, fmt, exif=exif.tobytes())
        want = kimi_k3_rs.preprocess(data, k3, exif_transpose=exif_transpose)
        deferred = kimi_k3_rs.prepare_kimi_k3_encoder_inputs([data], k3, exif_transpose=exif_transpose)
        assert deferred.grid_thws.tolist() == want["grid_thws"].tolist(), (orientation, deferred.grid_thws)
        (pixel_values,) = deferred.materialize()
        assert pixel_values.tobytes() == want["pixel_values"].tobytes()
