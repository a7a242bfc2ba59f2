"""PIL images read in place through Pillow's Arrow export (issue #12, part 2).

An ``L`` / ``LA`` / ``RGB`` / ``RGBA`` PIL image reaches the core without
``tobytes()`` (``_native.pil_pixels``: RGB at Pillow's 4-byte pixel stride). Every
output here is compared exactly with the reference pipeline run in the test and with
the numpy-input path; ``Image.tobytes`` is counted, so a silent fall-back to
``np.asarray`` fails the zero-copy tests, and the fall-back cases (an image in several
memory blocks, Pillow-mapped memory, a failing or malformed export) are shown to copy
and still give the same bytes.
"""

from __future__ import annotations

import functools
import gc
import io
import itertools
import os
import random
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from PIL import Image

import kimi_k3_rs
from helpers import assert_bit_equal, assert_output_matches, cfg, k3_before, mode_image
from kimi_k3_rs import _native
from reference import reference_preprocess

CONFIGS = {"k25": cfg("kimi_k25"), "k3": cfg("kimi_k3"), "k3_before": k3_before()}
#: a budget small enough for the sizes below to be resized in the image's own mode
SMALL = {name: {**c, "in_patch_limit": 64} for name, c in CONFIGS.items()}
MODES = ("L", "LA", "RGB", "RGBA")
BANDS = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}


def owned(width: int, height: int, mode: str, seed: int = 0) -> Image.Image:
    """Noise in an image whose memory Pillow allocated itself (``Image.fromarray`` of
    an L / RGBA array maps the array instead: a read-only image, not exported)."""
    rng = np.random.default_rng(seed)
    shape = (height, width) if mode == "L" else (height, width, BANDS[mode])
    values = rng.integers(0, 256, shape, dtype=np.uint8)
    if mode in ("LA", "RGBA"):  # alpha levels that exercise the composite
        levels = np.array([0, 37, 128, 255], np.uint8)
        values[..., -1] = levels[(np.arange(width)[None, :] // 3 + np.arange(height)[:, None]) % 4]
    image = Image.fromarray(values).copy()
    assert image.mode == mode and not image.readonly
    return image


@pytest.fixture
def copies(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The modes of the images ``Image.tobytes`` is called on (``np.asarray`` of a PIL
    image goes through it), from the moment the fixture is set up."""
    calls: list[str] = []
    original = Image.Image.tobytes

    def counting(self: Image.Image, *args: Any, **kwargs: Any) -> bytes:
        calls.append(self.mode)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Image.Image, "tobytes", counting)
    yield calls


@pytest.fixture
def block_allocator() -> Iterator[None]:
    """:func:`kimi_k3_rs.enable_pillow_zero_copy` for one test, then Pillow's setting back."""
    before = Image.core.get_use_block_allocator()
    kimi_k3_rs.enable_pillow_zero_copy()
    assert Image.core.get_use_block_allocator() == 1
    try:
        yield
    finally:
        Image.core.set_use_block_allocator(before)


def check(image: Any, config: dict[str, Any], copies: list[str], *, copied: int = 0, **kw: Any) -> None:
    """``image`` through the library equals the reference and (for a PIL image whose
    mode the core takes as it is) the numpy path, with ``copied`` ``tobytes`` calls
    during the library's own run."""
    want = reference_preprocess([image], config)
    native = isinstance(image, Image.Image) and image.mode in MODES and "transparency" not in image.info
    array = np.asarray(image) if native else None
    copies.clear()
    out = kimi_k3_rs.preprocess(image, config, **kw)
    assert len(copies) == copied, copies
    assert_output_matches(out, want)
    if array is not None:
        from_numpy = kimi_k3_rs.preprocess(array, config, **kw)
        assert_bit_equal(out["pixel_values"], from_numpy["pixel_values"])
        assert np.array_equal(out["grid_thws"], from_numpy["grid_thws"])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [(1, 1), (3, 5), (37, 23), (130, 400), (401, 97)])
@pytest.mark.parametrize("config", sorted(SMALL))
def test_small_images_read_in_place(mode: str, size: tuple[int, int], config: str, copies: list[str]) -> None:
    # Budget of 64 patches: 130x400 is resized vertical-first under Pillow 13, 401x97
    # horizontal-first, 1x1 .. 37x23 are not resized.
    check(owned(*size, mode, seed=size[0]), SMALL[config], copies)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_presets_read_in_place(mode: str, config: str, copies: list[str]) -> None:
    # 1242x2688 RGB is 13 MiB (one block); K2.5 resizes it vertical-first under Pillow 13.
    check(owned(1242, 2688, mode, seed=3), CONFIGS[config], copies, num_threads=2)


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_the_16_mib_block_boundary(mode: str, copies: list[str]) -> None:
    # 2048x2048 x 4 bytes is exactly one 16 MiB block: exported. One row more spans
    # two blocks: Pillow refuses, the core reads it band by band (no tobytes),
    # same bytes.
    check(owned(2048, 2048, mode, seed=5), CONFIGS["k3"], copies)
    check(owned(2048, 2049, mode, seed=6), CONFIGS["k25"], copies)


def test_large_images_read_in_place_with_the_opt_in(block_allocator: None, copies: list[str]) -> None:
    big = owned(3000, 2100, "RGB", seed=7)  # 24 MiB in Pillow's 4-byte pixels
    check(big, CONFIGS["k25"], copies)
    check(owned(2100, 3000, "RGBA", seed=8), CONFIGS["k3"], copies)


#: a budget under which 2100x3000 is not resized (1 patch = 14x14 px)
UNRESIZED = {**CONFIGS["k3"], "in_patch_limit": 40_000, "patch_limit_on_one_side": 400}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("config", ["k25", "k3", "k3_before", "k3_unresized"])
@pytest.mark.parametrize("num_threads", [1, 2])
def test_without_the_opt_in_large_images_are_read_band_by_band(
    mode: str, config: str, num_threads: int, copies: list[str]
) -> None:
    # Over one block (24 MiB in Pillow's 4-byte pixels): the core reads its bands (no
    # tobytes); resized band by band, or read whole into a working buffer where it is
    # not resized or composited before the resize.
    assert Image.core.get_use_block_allocator() == 0  # Pillow's default, untouched
    size = (2100, 3000) if mode != "L" else (4200, 4100)  # L: 1 byte a pixel
    config_dict = UNRESIZED if config == "k3_unresized" else CONFIGS[config]
    check(owned(*size, mode, seed=7), config_dict, copies, num_threads=num_threads)


#: Bytes a pixel of the modes the library resizes in the image's own mode, as
#: ``Image.frombytes`` takes them (not La, which the checkpoint cannot convert to RGB).
OTHER_MODES = {"CMYK": 4, "RGBX": 4, "RGBa": 4, "YCbCr": 3, "HSV": 3, "LAB": 3, "PA": 2}


@pytest.mark.parametrize("mode", [*OTHER_MODES, "L with transparency"])
@pytest.mark.parametrize("config", ["k25", "k3"])
def test_large_images_of_other_modes_are_resized_band_by_band(mode: str, config: str, copies: list[str]) -> None:
    # Over one block: the resize in the image's own mode reads Pillow's stored bytes band
    # by band (no tobytes, no np.asarray), LAB's a and b as Pillow stores them.
    rng = np.random.default_rng(20)
    if mode == "L with transparency":  # K3 makes it RGBA from its colour key
        image = Image.frombytes("L", (4200, 4100), rng.integers(0, 8, 4200 * 4100, dtype=np.uint8).tobytes())
        image.info["transparency"] = 7
    else:
        data = rng.integers(0, 256, 2100 * 3000 * OTHER_MODES[mode], dtype=np.uint8).tobytes()
        image = Image.frombytes(mode, (2100, 3000), data)
    assert not image.readonly and not image.im.isblock()
    check(image, CONFIGS[config], copies)


def patch_limit(size: tuple[int, int], ratio: int) -> int:
    """The ``in_patch_limit`` under which an image of ``size`` is downscaled about
    ``ratio`` times on each side (14x14 patches)."""
    return max(1, (size[0] // 14) * (size[1] // 14) // ratio**2)


def gradient_jpeg(width: int, height: int) -> Image.Image:
    """A JPEG photo's stand-in (gradients), as ``Image.open`` gives it (not loaded)."""
    gradient = Image.linear_gradient("L").resize((width, height))
    buffer = io.BytesIO()
    Image.merge("RGB", (gradient, gradient.rotate(180), gradient.transpose(Image.Transpose.FLIP_LEFT_RIGHT))).save(
        buffer, "JPEG", quality=90
    )
    return Image.open(buffer)


@pytest.mark.parametrize(
    ("image", "config", "limit"),
    [
        (lambda: owned(6000, 4000, "RGB", seed=30), "k25", 1024),  # the issue's, in Pillow's memory
        (lambda: gradient_jpeg(6000, 4000), "k3", 1024),
        (lambda: owned(4100, 4805, "RGB", seed=31), "k3", 256),
    ],
    ids=["6000x4000-k25-1024", "6000x4000-jpeg-k3-1024", "4100x4805-k3-256"],
)
def test_a_strong_downscale_of_an_image_over_one_block(image: Any, config: str, limit: int, copies: list[str]) -> None:
    # Issue #21 defect 2: a band's input rows under a strong downscale are more than
    # one Pillow block holds; cropped as one piece, they spanned blocks and Pillow
    # refused to export them ("Image rows are not contiguous in memory"). The rows are
    # read a block at a time.
    check(image(), {**CONFIGS[config], "in_patch_limit": limit}, copies)


#: Bytes a pixel in Pillow's storage (``libImaging/Storage.c``) where it is not 4.
STORAGE_BYTES = {"L": 1, "P": 1, "1": 1, "I;16": 2, "I;16B": 2}
#: Images of every kind of row source: the core's modes (read as stored), the modes
#: resized in their own mode (CMYK, YCbCr, ...: stored rows; P, 1, I;16, I, F: Pillow's
#: resize), and every mode converted band by band (K2.5 and ``before_resize``). La is
#: left out: the checkpoint cannot convert it.
GRID_KINDS = (
    *MODES, "P", "P+bytes_trns", "P+int_trns", "P+rgba_palette", "PA", "1", "L+trns", "RGB+trns", "CMYK",
    "YCbCr", "HSV", "LAB", "RGBX", "RGBa", "I;16", "I;16B", "I", "F",
)
#: About how many times each side is downscaled (through ``in_patch_limit``).
RATIOS = (2, 5, 20, 60)
#: The whole grid; a seeded sample of it runs, as ``test_exactness_matrix.py``'s: the
#: first ``KIMI_K3_RS_MATRIX_CASES`` cases (16 unless set; ``all``: the whole grid) of
#: the grid shuffled by ``KIMI_K3_RS_MATRIX_SEED`` (default: today, ``YYYYMMDD``; in
#: each test id), run in the grid's order.
GRID = list(itertools.product(GRID_KINDS, RATIOS, sorted(CONFIGS), (1, 2)))
SEED = int(os.environ.get("KIMI_K3_RS_MATRIX_SEED") or time.strftime("%Y%m%d"))
_COUNT = os.environ.get("KIMI_K3_RS_MATRIX_CASES", "").strip().lower()
_SHUFFLED = random.Random(SEED).sample(GRID, len(GRID))
SAMPLE = sorted(_SHUFFLED if _COUNT == "all" else _SHUFFLED[: int(_COUNT or 16)], key=GRID.index)


def pillows_own(kind: str, width: int, height: int, seed: int) -> Image.Image:
    """A ``kind`` image (one of :data:`MODES`, or a ``helpers.mode_image`` kind) in
    memory Pillow allocated (a copy of what ``mode_image`` maps, with its info)."""
    image = owned(width, height, kind, seed) if kind in MODES else mode_image(kind, width, height, seed).copy()
    assert not image.im.isblock() and not image.readonly  # Pillow's blocks, not one
    return image


@functools.lru_cache(maxsize=1)
def over_one_block(kind: str) -> Image.Image:
    """A :func:`pillows_own` ``kind`` image a little over one Pillow block: 2100 px
    wide (4200 and 3000 for 1- and 2-byte pixels), 50 rows more than one block holds.
    Kept for the next case of the same kind (the sample runs kind by kind)."""
    mode = kind if kind in MODES else mode_image(kind, 1, 1).mode
    pixel = STORAGE_BYTES.get(mode, 4)
    width = {1: 4200, 2: 3000, 4: 2100}[pixel]
    return pillows_own(kind, width, Image.core.get_block_size() // (width * pixel) + 50, seed=32)


@pytest.mark.filterwarnings("ignore:Palette images with Transparency expressed in bytes")
@pytest.mark.parametrize(
    ("kind", "ratio", "config", "num_threads"),
    SAMPLE,
    ids=[f"{k}-{r}x-{c}-{n}threads-seed{SEED}" for k, r, c, n in SAMPLE],
)
def test_images_over_one_block_at_any_downscale(
    kind: str, ratio: int, config: str, num_threads: int, copies: list[str]
) -> None:
    # Every mode, read as stored, resized in its own mode or converted band by band,
    # exactly the reference's bytes at every downscale, on 1 and 2 threads.
    image = over_one_block(kind)
    check(image, {**CONFIGS[config], "in_patch_limit": patch_limit(image.size, ratio)}, copies,
          num_threads=num_threads)


@pytest.fixture
def small_blocks() -> Iterator[None]:
    """Pillow's arena allocating the test's images in 8 KiB blocks
    (``Image.core.set_block_size``), then its block size back."""
    before = Image.core.get_block_size()
    Image.core.set_block_size(8192)
    try:
        yield
    finally:
        Image.core.set_block_size(before)


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.filterwarnings("ignore:Palette images with Transparency expressed in bytes")
@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("kind", [kind for kind in GRID_KINDS if kind != "LAB"])
def test_images_over_many_blocks_of_any_size(kind: str, config: str, copies: list[str]) -> None:
    # In 8 KiB blocks, a 2100x48 image spans many blocks, and so does every band's
    # rows: 3 rows of 1-byte pixels a block; 4-byte rows are longer than a block, each
    # its own block. The rows are read a block at a time, however many rows a block
    # holds. (LAB is left out: Pillow converts it through LittleCMS, 30 ms a call, and
    # here a call a row.)
    check(pillows_own(kind, 2100, 48, seed=33), {**CONFIGS[config], "in_patch_limit": 64}, copies, num_threads=2)


@pytest.mark.parametrize("raised", [OSError("disk gone"), KeyboardInterrupt()])
@pytest.mark.parametrize("num_threads", [1, 2])
def test_a_band_that_cannot_be_read_names_the_image_and_ctrl_c_stays_ctrl_c(
    raised: BaseException, num_threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A P image over one block under K3 is converted to RGB band by band during the
    # call; the conversion of the fourth band fails. An Exception is the image's
    # ImageError; a KeyboardInterrupt is raised as it is (not an ImageError, which a
    # loop recording per-image errors would swallow). The next call works.
    image = owned(3000, 2800, "RGB", seed=21).convert("P")
    cfg_k3 = {**CONFIGS["k3"], "in_patch_limit": 60_000, "patch_limit_on_one_side": 400}  # not resized
    want = reference_preprocess([image], cfg_k3)
    original, bands = Image.Image.convert, []

    def failing(self: Image.Image, *args: Any, **kwargs: Any) -> Image.Image:
        if self.size[0] == 3000 and self.size[1] < 2800:  # a band of the image
            bands.append(self.size)
            if len(bands) == 4:
                raise raised
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Image.Image, "convert", failing)
    if isinstance(raised, KeyboardInterrupt):
        with pytest.raises(KeyboardInterrupt):
            kimi_k3_rs.preprocess([image, image], cfg_k3, num_threads=num_threads)
    else:
        with pytest.raises(kimi_k3_rs.ImageError, match=r"^image \d: cannot read the image's rows: OSError: disk gone"):
            kimi_k3_rs.preprocess([image, image], cfg_k3, num_threads=num_threads)
    assert len(bands) >= 4
    monkeypatch.setattr(Image.Image, "convert", original)
    assert_output_matches(kimi_k3_rs.preprocess(image, cfg_k3, num_threads=num_threads), want)


def test_a_multi_block_image_is_not_copied_before_the_call() -> None:
    """Without the opt-in, an image over one Pillow block goes to the core as a
    ``PillowRows``, which reads it band by band during the call: nothing of its pixels
    is copied on the Python side (np.asarray's tobytes() holds the encoded chunks and
    their join, twice the packed image)."""
    import tracemalloc

    from kimi_k3_rs._input.pil import _pixels_of

    image = owned(3000, 2100, "RGB", seed=18)  # 24 MiB in Pillow's 4-byte pixels
    packed = 3000 * 2100 * 3
    peaks = {}
    for name, read in (("ours", _pixels_of), ("np.asarray", np.asarray)):
        tracemalloc.start()
        try:
            pixels = read(image)
            peaks[name] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        del pixels
    assert isinstance(_pixels_of(image), _native.PillowRows)
    assert peaks["ours"] < 64 << 10, peaks
    assert peaks["np.asarray"] > 1.9 * packed, peaks


def test_band_by_band_images_outlive_their_closed_image(copies: list[str]) -> None:
    # An LA TIFF over one block (which Pillow does not decode into the core's array):
    # decoded by Pillow and closed inside the batch loop; its bands are read later, in
    # the native call, from the storage the PillowRows keeps.
    buffer = io.BytesIO()
    owned(2600, 2000, "LA", seed=19).save(buffer, "TIFF")
    check(buffer.getvalue(), CONFIGS["k3"], copies)
    check(buffer.getvalue(), CONFIGS["k25"], copies, num_threads=2)


@pytest.mark.parametrize("mode", MODES)
def test_encoded_inputs_outlive_their_closed_image(mode: str, copies: list[str]) -> None:
    # Bytes Pillow decodes (TIFF: PNG and JPEG are decoded natively) are opened, read in
    # place and closed inside the batch loop; the view keeps Pillow's storage alive until
    # the native call is done.
    kimi_k3_rs.decode_path()  # the self-check (which uses np.asarray) runs before counting
    buffer = io.BytesIO()
    owned(300, 200, mode, seed=9).save(buffer, "TIFF")
    data = buffer.getvalue()
    check(data, SMALL["k3"], copies)
    check(data, CONFIGS["k25"], copies)


def test_converted_modes_are_read_in_place(copies: list[str]) -> None:
    # P with a background is converted to RGBA; L with transparency to RGBA; the
    # converted image is Pillow's, read in place.
    p = owned(64, 48, "RGB", seed=10).convert("P")
    p.info["transparency"] = 3
    check(p, CONFIGS["k3"], copies)
    check(p, SMALL["k3_before"], copies)
    grey = owned(64, 48, "L", seed=11)
    grey.info["transparency"] = 7
    check(grey, CONFIGS["k3"], copies)
    check(owned(64, 48, "RGB", seed=12).convert("CMYK"), CONFIGS["k25"], copies)


def test_the_view_has_np_asarrays_values_and_outlives_the_image() -> None:
    for mode in MODES:
        image = owned(53, 37, mode, seed=13)
        want = np.asarray(image).copy()
        view = _native.pil_pixels(image)
        assert view.dtype == np.uint8 and view.shape == want.shape
        assert np.array_equal(view, want)
        if mode != "LA":
            assert not view.flags.writeable
        image.close()
        del image
        gc.collect()
        assert np.array_equal(view, want)
    rgb = _native.pil_pixels(owned(53, 37, "RGB"))
    assert rgb.strides == (53 * 4, 4, 1)  # Pillow's 4-byte pixels, read as they are


def test_pillow_mapped_memory_is_read_band_by_band(copies: list[str]) -> None:
    # Image.fromarray of an L / RGBA array maps it (read-only); Pillow < 13 crashes
    # exporting such an image, so the core reads it band by band (its crops, which
    # Pillow owns, are exported).
    for mode in ("L", "RGBA"):
        mapped = Image.fromarray(np.asarray(owned(40, 30, mode, seed=14)))
        assert mapped.readonly
        check(mapped, SMALL["k3"], copies)


def test_a_row_alignment_is_copied(copies: list[str]) -> None:
    before = Image.core.get_alignment()
    Image.core.set_alignment(16)
    try:
        image = owned(37, 23, "RGB", seed=15)
        check(image, SMALL["k25"], copies, copied=1)
    finally:
        Image.core.set_alignment(before)


class FailingExport(Image.Image):
    """A PIL image whose Arrow export raises (an older or stricter Pillow)."""

    def __arrow_c_array__(self, requested_schema: object = None) -> tuple[object, object]:
        raise ValueError("no export here")


class WrongExport(Image.Image):
    """A PIL image whose Arrow export is another image's."""

    other: Image.Image

    def __arrow_c_array__(self, requested_schema: object = None) -> tuple[object, object]:
        return self.other.__arrow_c_array__()


def subclassed(cls: type, image: Image.Image) -> Any:
    out = cls()
    out.im, out._mode, out._size = image.im, image.mode, image.size
    return out


def test_a_failing_export_is_read_band_by_band(copies: list[str]) -> None:
    # Read band by band: the crops are plain images, whose export works.
    image = subclassed(FailingExport, owned(37, 23, "RGB", seed=16))
    check(image, SMALL["k25"], copies)


@pytest.mark.parametrize(
    ("mode", "other", "detail"),
    [
        ("RGB", ("L", (37, 23)), 'its format is "C", expected "+w:4" with one child'),
        ("L", ("RGB", (37, 23)), 'its format is "+w:4", expected "C"'),
        ("RGB", ("RGB", (38, 23)), "the array has length 874, offset 0, null count 0; expected 851, 0, 0"),
        ("RGBA", ("RGB", (37, 23)), "its child is not named after the mode"),
    ],
)
def test_a_malformed_export_is_refused_then_read_band_by_band(
    mode: str, other: tuple[str, tuple[int, int]], detail: str, copies: list[str]
) -> None:
    image = subclassed(WrongExport, owned(37, 23, mode, seed=17))
    image.other = owned(*other[1], other[0])
    with pytest.raises(kimi_k3_rs.ImageError) as info:
        _native.pil_pixels(image)
    assert str(info.value) == f"the Arrow export of the {mode} image is not usable: {detail}"
    check(image, SMALL["k3"], copies)  # read band by band, through the crops' export


def test_pil_pixels_refuses_what_it_cannot_read() -> None:
    with pytest.raises(kimi_k3_rs.ImageError, match="the mode is not L, LA, RGB or RGBA"):
        _native.pil_pixels(owned(4, 4, "RGB").convert("P"))
    with pytest.raises(ValueError, match="multiple array blocks|not contiguous"):
        _native.pil_pixels(Image.new("RGB", (2048, 2049)))  # Pillow's own refusal
    with pytest.raises(kimi_k3_rs.ImageError, match="positive"):
        _native.pil_pixels(Image.new("RGB", (0, 3)))

    class Capsules:
        mode, size = "RGB", (1, 1)

        def __arrow_c_array__(self) -> tuple[object, object]:
            array = owned(1, 1, "RGB").__arrow_c_array__()
            return array[1], array[0]  # swapped: each capsule has the other's name

    with pytest.raises(ValueError, match="incorrect name"):
        _native.pil_pixels(Capsules())


def test_enable_pillow_zero_copy_is_documented_and_exported() -> None:
    assert "enable_pillow_zero_copy" in kimi_k3_rs.__all__
    doc = kimi_k3_rs.enable_pillow_zero_copy.__doc__ or ""
    assert "process-wide Pillow setting" in doc and "set_use_block_allocator(0)" in doc
