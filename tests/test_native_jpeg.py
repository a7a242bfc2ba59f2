"""The native JPEG decoder (``_native.decode_image``) against Pillow, run here.

The native side loads the libjpeg the installed Pillow links
(``kimi_k3_rs._input.native.find_pillow_libjpeg``) and must give, for every file it
decodes, the bytes of ``np.asarray(Image.open(BytesIO(data)))``; it must fail
exactly where Pillow fails (truncated, corrupt) and hand to Pillow what it does
not decode (CMYK/YCCK, arithmetic coding, MPO, EXIF orientation when asked).
The corpus is encoded here by Pillow from the shipped photos, plus the files
under ``tests/data/jpeg/`` that Pillow cannot write (see its README).
"""

from __future__ import annotations

import io
import os
import random
import struct
import warnings
from typing import Any

import helpers
from reference import reference_preprocess
import kimi_k3_rs
import numpy as np
import pytest
from kimi_k3_rs import ImageError, ImageTooLargeError, _native
from kimi_k3_rs._input.native import find_pillow_libjpeg
from PIL import Image

JPEG_DIR = helpers.DATA_DIR / "jpeg"


@pytest.fixture(scope="module", autouse=True)
def libjpeg() -> str:
    path = find_pillow_libjpeg()
    assert path is not None, "the installed Pillow's libjpeg was not found"
    return _native.load_libjpeg(path)


def committed(name: str) -> bytes:
    return (JPEG_DIR / name).read_bytes()


def pillow_decode(data: bytes) -> tuple[np.ndarray | None, BaseException | None]:
    """Pillow's array, or what it raised. Its warnings (``Corrupt EXIF data`` from the
    DPI lookup in ``JpegImageFile._open``) are not decode failures: ignored."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as im:
                im.load()
                return np.asarray(im), None
    except Exception as e:  # noqa: BLE001  (whatever Pillow raises is compared below)
        return None, e


def assert_same_as_pillow(data: bytes, label: str) -> str:
    """Native succeeds iff Pillow does, with the same array, and fails in the image data
    with Pillow's message, or sends a file whose headers Pillow fails on to Pillow;
    returns "ok" or "error"."""
    ref, err = pillow_decode(data)
    if err is None:
        kind, arr = _native.decode_image(data)
        assert kind == "native", (label, arr)
        assert arr.dtype == ref.dtype == np.uint8, label
        assert arr.shape == ref.shape, (label, arr.shape, ref.shape)
        assert np.array_equal(arr, ref), label
        return "ok"
    try:
        kind, reason = _native.decode_image(data)
    except ImageError as exc:
        ours = exc
    else:
        # A header fault: the file goes to Pillow, which raises its own error.
        assert kind == "pillow" and reason.startswith("Pillow fails: "), (label, kind, reason, err)
        return "error"
    # A failure in the image data is Pillow's too, message included (less the count of
    # bytes left in "image file is truncated (N bytes not processed)"): JpegDecode.c
    # turns any libjpeg error into "broken data stream when reading image file". (A file
    # refused by the cost model is a bound of the package's, with a message of its own.)
    data_error = str(err).startswith(("image file is truncated", "broken data stream"))
    if data_error and not isinstance(ours, ImageTooLargeError):
        assert str(err).startswith(str(ours).removeprefix("cannot decode JPEG: ")), (label, ours, err)
    return "error"


def seg(code: int, body: bytes) -> bytes:
    return bytes([0xFF, code]) + struct.pack(">H", len(body) + 2) + body


def remove_segment(data: bytes, code: int) -> bytes:
    at = data.index(bytes([0xFF, code]))
    (length,) = struct.unpack(">H", data[at + 2 : at + 4])
    return data[:at] + data[at + 2 + length :]


def _corpus() -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for name in helpers.PHOTOS:
        rgb = helpers.photo(name).convert("RGB")
        stem = name.removesuffix(".png")
        for sub in (0, 1, 2):
            for q in (50, 90, 100):
                out[f"{stem} 4:{('4:4', '2:2', '2:0')[sub]} q{q}"] = helpers.encode(rgb, "JPEG", quality=q, subsampling=sub)
            out[f"{stem} progressive sub{sub}"] = helpers.encode(rgb, "JPEG", quality=85, subsampling=sub, progressive=True)
        out[f"{stem} optimize"] = helpers.encode(rgb, "JPEG", quality=90, optimize=True)
        out[f"{stem} progressive optimize q100"] = helpers.encode(rgb, "JPEG", quality=100, progressive=True, optimize=True)
        grey = rgb.convert("L")
        out[f"{stem} L"] = helpers.encode(grey, "JPEG", quality=90)
        out[f"{stem} L progressive"] = helpers.encode(grey, "JPEG", quality=75, progressive=True)
        out[f"{stem} keep_rgb"] = helpers.encode(rgb, "JPEG", quality=90, keep_rgb=True)
        for opt in ("restart_marker_blocks", "restart_marker_rows"):
            data = helpers.encode(rgb, "JPEG", quality=90, **{opt: 3})
            if b"\xff\xdd" in data:  # a Pillow that has the option wrote a DRI segment
                out[f"{stem} {opt}"] = data
    astronaut = helpers.photo("astronaut.png").convert("RGB")
    for w, h in ((1, 1), (3, 5), (17, 33), (641, 479), (2, 2), (9, 1)):
        img = astronaut.resize((w, h), Image.Resampling.BICUBIC)
        for sub in (0, 2):
            out[f"{w}x{h} sub{sub}"] = helpers.encode(img, "JPEG", quality=90, subsampling=sub)
        out[f"{w}x{h} progressive"] = helpers.encode(img, "JPEG", quality=90, subsampling=1, progressive=True)
        out[f"{w}x{h} L"] = helpers.encode(img.convert("L"), "JPEG", quality=90)
    for name in sorted(os.listdir(JPEG_DIR)):
        if name.startswith(("s4", "s_", "restart", "rgb")):
            out[name] = committed(name)
    # The colour space libjpeg picks for 3 components: Adobe transform 0 (RGB),
    # no marker with component ids 'R','G','B' (RGB), JFIF over those ids (YCbCr).
    no_adobe = remove_segment(committed("rgb_adobe.jpg"), 0xEE)
    out["RGB ids, no Adobe"] = no_adobe
    out["RGB ids under JFIF"] = no_adobe[:2] + seg(0xE0, b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0") + no_adobe[2:]
    return out


@pytest.fixture(scope="module")
def corpus() -> dict[str, bytes]:
    return _corpus()


def test_finds_and_loads_pillows_libjpeg(libjpeg: str) -> None:
    path = find_pillow_libjpeg()
    assert path is not None and os.path.isfile(path)
    assert os.path.basename(path).startswith("libjpeg")
    assert libjpeg.startswith("libjpeg-turbo") and f"(libjpeg API 6.2) at {path}" in libjpeg
    # Later loads keep the first library.
    assert _native.load_libjpeg("/nonexistent/libjpeg.so.62") == libjpeg


def test_corpus_is_pillows_bytes(corpus: dict[str, bytes]) -> None:
    assert len(corpus) >= 100
    for label, data in corpus.items():
        assert assert_same_as_pillow(data, label) == "ok", label


def test_jfif_over_rgb_ids_differs_from_rgb() -> None:
    """The corpus' colour-space variants really decode differently (libjpeg decides)."""
    no_adobe = remove_segment(committed("rgb_adobe.jpg"), 0xEE)
    jfif = no_adobe[:2] + seg(0xE0, b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0") + no_adobe[2:]
    rgb = _native.decode_image(committed("rgb_adobe.jpg"))[1]
    assert np.array_equal(_native.decode_image(no_adobe)[1], rgb)
    assert not np.array_equal(_native.decode_image(jfif)[1], rgb)


def test_routed_to_pillow() -> None:
    rgb = helpers.photo("chelsea.png").convert("RGB")
    cmyk = helpers.encode(rgb.convert("CMYK"), "JPEG", quality=90)
    assert _native.decode_image(cmyk) == ("pillow", "CMYK JPEG")
    assert _native.decode_image(committed("ycck.jpg")) == ("pillow", "CMYK JPEG")
    for name in ("arithmetic.jpg", "arithmetic_progressive.jpg"):
        assert _native.decode_image(committed(name)) == ("pillow", "arithmetic-coded JPEG")
        assert pillow_decode(committed(name))[1] is None  # Pillow's libjpeg decodes them
    mpo = io.BytesIO()
    rgb.save(mpo, "MPO", save_all=True, append_images=[rgb.rotate(90)])
    assert _native.decode_image(mpo.getvalue()) == ("pillow", "MPO (JPEG with an MPF segment)")


def test_exif_orientation_routing() -> None:
    rgb = helpers.photo("coffee.png").convert("RGB")
    exif = Image.Exif()
    exif[0x0112] = 6
    with_exif = helpers.encode(rgb, "JPEG", quality=90, exif=exif.tobytes())
    with_xmp = helpers.encode(rgb, "JPEG", quality=90, xmp=b'<x tiff:Orientation="6"/>')
    for data in (with_exif, with_xmp):
        assert b"\xff\xe1" in data
        assert _native.decode_image(data, exif_transpose=True) == ("pillow", "EXIF/XMP orientation")
        assert assert_same_as_pillow(data, "orientation 6, not transposed") == "ok"
    plain = helpers.encode(rgb, "JPEG", quality=90)
    assert _native.decode_image(plain, exif_transpose=True)[0] == "native"


def truncation_files() -> list[tuple[str, bytes]]:
    astronaut = helpers.photo("astronaut.png").convert("RGB")
    camera = helpers.photo("camera.png").convert("L")
    return [
        ("baseline 4:2:0", helpers.encode(astronaut, "JPEG", quality=90)),
        ("progressive", helpers.encode(astronaut, "JPEG", quality=90, progressive=True)),
        ("L progressive", helpers.encode(camera, "JPEG", quality=80, progressive=True)),
        ("restart every block", committed("restart_every_block_odd.jpg")),
        ("4:4:0 progressive", committed("s440_progressive_odd.jpg")),
    ]


def test_truncation_matches_pillow() -> None:
    outcomes: dict[str, list[str]] = {}
    for label, data in truncation_files():
        sos = data.index(b"\xff\xda")
        cuts = {3 + (len(data) - 3) * i // 20 for i in range(20)}
        cuts |= {sos, sos + 1, sos + 14, len(data) - 2, len(data) - 1, len(data)}
        outcomes[label] = [assert_same_as_pillow(data[:cut], f"{label} cut at {cut}") for cut in sorted(cuts)]
    # What Pillow does (and so native): any cut before the end fails ("image file is
    # truncated"), even of EOI alone, except where libjpeg needs no byte past the last
    # MCU: restart markers closing the last block make the missing EOI harmless.
    for label, seen in outcomes.items():
        assert seen[-1] == "ok"
        assert seen[-3:-1] == (["ok", "ok"] if label == "restart every block" else ["error", "error"]), label
        assert seen.count("ok") == (3 if label == "restart every block" else 1), label


def test_truncated_message() -> None:
    data = truncation_files()[0][1]
    _ref, err = pillow_decode(data[:-1])
    assert isinstance(err, OSError) and str(err).startswith("image file is truncated")
    with pytest.raises(ImageError, match="^cannot decode JPEG: image file is truncated$"):
        _native.decode_image(data[:-1])


def mutate(rng: random.Random, data: bytes, lo: int, hi: int) -> bytes:
    t = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 4])):
        op, i = rng.random(), rng.randrange(lo, hi)
        if op < 0.55:
            t[i] = rng.choice([rng.randrange(256), 0xFF, 0x00, 0x01, 0xD9, 0xD8])
        elif op < 0.7:
            del t[i : i + rng.randrange(1, 6)]
        else:
            t[i:i] = bytes([0xFF, rng.randrange(256)])
    return bytes(t)


def test_corrupt_scan_data_matches_pillow() -> None:
    """Corrupt entropy-coded data: libjpeg only warns on most (Pillow ignores warnings), fails on some."""
    rng = random.Random(12)
    seen: dict[str, int] = {"ok": 0, "error": 0}
    for label, data in truncation_files():
        sos = data.index(b"\xff\xda")
        for trial in range(40):
            seen[assert_same_as_pillow(mutate(rng, data, sos + 16, len(data) - 2), f"{label} #{trial}")] += 1
    assert seen["ok"] >= 50 and seen["error"] >= 20, seen


def test_corrupt_headers_match_pillow() -> None:
    """Mutated headers (segments Pillow's parser reads: JFIF, EXIF, ICC, Photoshop, Adobe, DQT, SOF, SOS)."""
    base = helpers.encode(helpers.photo("chelsea.png").convert("RGB").resize((96, 64)), "JPEG", quality=90)
    photoshop = b"Photoshop 3.0\0" + b"8BIM\x03\xed\0\0" + struct.pack(">I", 16) + bytes(16) + b"8BIM\x04\x04\x01a\0\0\0\x03abc\0"
    extra = (
        seg(0xE1, b"Exif\0\0MM\0*\0\0\0\x08\0\0\0\0\0\0")
        + seg(0xED, photoshop)
        + seg(0xE2, b"ICC_PROFILE\0\x01\x01" + bytes(40))
        + seg(0xEE, b"Adobe\0d\0\0\0\0\x01")
        + seg(0xFE, b"comment")
    )
    rich = base[:20] + extra + base[20:]
    rng = random.Random(5)
    seen: dict[str, int] = {"ok": 0, "error": 0}
    for data in (base, rich):
        sos = data.index(b"\xff\xda")
        for trial in range(200):
            mutated = mutate(rng, data, 2, sos + 12)
            kind: Any = "native"
            try:
                kind, reason = _native.decode_image(mutated)
            except ImageError:
                pass
            if kind == "native" or (kind == "pillow" and reason.startswith("Pillow fails: ")):
                seen[assert_same_as_pillow(mutated, f"header #{trial}")] += 1
    assert seen["ok"] >= 100 and seen["error"] >= 100, seen


def header_faults() -> dict[str, tuple[bytes, str]]:
    """JPEGs with a header fault that Pillow fails on, each with Pillow's exception
    (class: message) as ``Image.open`` + ``load`` gives it."""
    base = helpers.encode(helpers.photo("chelsea.png").convert("RGB").resize((24, 16)), "JPEG", quality=90)
    sof, sos = base.index(b"\xff\xc0"), base.index(b"\xff\xda")
    (sof_len,) = struct.unpack(">H", base[sof + 2 : sof + 4])
    frame = base[sof + 4 : sof + 2 + sof_len]

    def with_sof(body: bytes) -> bytes:
        return base[:sof] + seg(0xC0, body) + base[sof + 2 + sof_len :]

    def first(segment: bytes) -> bytes:
        return base[:2] + segment + base[2:]

    unidentified = "UnidentifiedImageError: cannot identify image file"
    return {
        "cut in a marker length": (base[: sof + 3], unidentified),
        "cut in a segment": (base[: sof + 8], "OSError: Truncated File Read"),
        "cut between segments before SOF": (base[:sof], unidentified),
        "cut between segments after SOF": (base[:sos], "OSError: cannot load this image"),
        "cut after the FF of SOS": (base[: sos + 1], "OSError: cannot load this image"),
        "marker FF50 (FF01..FFBF)": (base[:sof] + b"\xff\x50" + base[sof:], unidentified),
        "JFIF of 6 bytes": (first(seg(0xE0, b"JFIF\0\x01")), unidentified),
        "Adobe of 6 bytes": (first(seg(0xEE, b"Adobe\0")), unidentified),
        "SOF of 4 bytes": (with_sof(frame[:4]), unidentified),
        "SOF of 5 bytes": (with_sof(frame[:5]), unidentified),
        "SOF length 0": (base[:sof] + b"\xff\xc0\0\0" + base[sof + 2 + sof_len :], unidentified),
        "SOF component list cut": (with_sof(frame[:-1]), unidentified),
        "SOF of 12 bits": (with_sof(b"\x0c" + frame[1:]), unidentified),
        "SOF of 2 components": (with_sof(frame[:5] + b"\x02" + frame[6:12]), unidentified),
        "SOF of zero width": (with_sof(frame[:3] + b"\0\0" + frame[5:]), unidentified),
        "ICC fragment of 13 bytes": (first(seg(0xE2, b"ICC_PROFILE\0\x01")), unidentified),
        "DQT table cut": (first(seg(0xDB, bytes(11))), unidentified),
        "Photoshop block cut in its name length": (first(seg(0xED, b"Photoshop 3.0\0" + b"8BIM\x04\x04")), unidentified),
        "no SOF before SOS": (base[:sof] + base[sof + 2 + sof_len :], unidentified),
    }


HEADER_FAULTS = header_faults()


@pytest.mark.parametrize("fault", list(HEADER_FAULTS))
def test_header_faults_go_to_pillow_and_fail_with_its_message(fault: str) -> None:
    # The header walk sends a file Pillow fails on to Pillow, which raises: preprocess's
    # message is Pillow's (it was the walk's own, "truncated marker length" and the like).
    helpers.assert_header_fault_goes_to_pillow(*HEADER_FAULTS[fault])


def test_a_header_fault_does_not_lift_the_cost_bounds() -> None:
    # A frame of 60000x60000 in a few hundred bytes: over the cost model's blocks per
    # byte. With a header fault before it the file goes to Pillow, whose Image.open
    # fails: nothing is decoded. A segment Pillow reads without failing (a JFIF of 7
    # bytes) leaves the file to the cost model.
    frame = struct.pack(">BHHB", 8, 60000, 60000, 3) + b"\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    scan = seg(0xDA, b"\x03\x01\x00\x02\x11\x03\x11\x00\x3f\x00") + bytes(200) + b"\xff\xd9"
    body = seg(0xDB, bytes(65)) + seg(0xC0, frame) + scan
    with pytest.raises(ImageTooLargeError, match="blocks"):
        kimi_k3_rs.preprocess(b"\xff\xd8" + seg(0xE0, b"JFIF\0\x01\x01") + body, kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
    faulty = b"\xff\xd8" + seg(0xEE, b"Adobe\0") + body
    with pytest.raises(ImageError, match="^image 0: cannot read or decode it: UnidentifiedImageError: cannot identify image file$"):
        kimi_k3_rs.preprocess(faulty, kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)


def exif_with_resolution(kind: int, count: int, value: bytes, *, big_endian: bool = False) -> bytes:
    """An Exif APP1 body whose IFD0 holds ResolutionUnit (SHORT 2) and an XResolution
    of TIFF type ``kind``, ``count`` items, its 4-byte value field ``value`` (inline, or
    the offset of 8 bytes after the IFD holding 72/1)."""
    e = ">" if big_endian else "<"
    ifd, entries = 8, 2
    after = ifd + 2 + 12 * entries + 4
    field = value if value else struct.pack(f"{e}I", after)
    body = struct.pack(f"{e}H", entries)
    body += struct.pack(f"{e}HHI", 0x0128, 3, 1) + struct.pack(f"{e}H", 2) + b"\0\0"
    body += struct.pack(f"{e}HHI", 0x011A, kind, count) + field
    body += b"\0\0\0\0" + struct.pack(f"{e}II", 72, 1)
    head = b"MM\0*" if big_endian else b"II*\0"
    return b"Exif\0\0" + head + struct.pack(f"{e}I", ifd) + body


@pytest.mark.parametrize(
    ("label", "kind", "count", "value", "native"),
    [
        # the comment says what Pillow 13's open does
        ("RATIONAL 72/1", 5, 1, b"", True),  # 72 dpi
        ("BYTE of 1", 1, 1, b"\x05\0\0\0", False),  # b"\x05"[1]: IndexError, fails
        ("UNDEFINED of 1", 7, 1, b"\x05\0\0\0", False),  # the same
        ("BYTE of 2", 1, 2, b"\x05\x01\0\0", False),  # 5 / 1: 5 dpi
        ("ASCII of 1", 2, 1, b"a\0\0\0", False),  # 72 dpi
        ("SHORT of 1", 3, 1, b"\x48\0\0\0", False),  # a number, no [0]: 72 dpi
        ("RATIONAL of 0", 5, 0, b"\0\0\0\0", False),  # no data, skipped: 72 dpi
    ],
)
def test_an_exif_resolution_pillow_may_fail_on_goes_to_pillow(
    label: str, kind: int, count: int, value: bytes, native: bool
) -> None:
    # Fuzz (EXIF mutations): with no JFIF dpi, Pillow's open reads IFD0's XResolution
    # and indexes items 0 and 1; bytes or a string of fewer than two raise an IndexError
    # it does not catch, so Image.open fails, where the native decode gave pixels. Any
    # XResolution other than one RATIONAL now goes to Pillow: its pixels or its error.
    photo = helpers.encode(helpers.photo("chelsea.png").convert("RGB").resize((40, 24)), "JPEG", quality=90)
    assert photo.startswith(b"\xff\xd8\xff\xe0")  # a JFIF segment Pillow writes with no dpi
    for big_endian in (False, True):
        data = photo[:2] + seg(0xE1, exif_with_resolution(kind, count, value, big_endian=big_endian)) + photo[2:]
        kind_, reason = _native.decode_image(data)
        assert (kind_ == "native") == native, (label, kind_, reason)
        cfg = kimi_k3_rs.KIMI_K25_MEDIA_PROC_CFG
        _, err = pillow_decode(data)
        if err is None:
            helpers.assert_output_matches(kimi_k3_rs.preprocess(data, cfg), reference_preprocess([data], cfg))
        else:
            with pytest.raises(ImageError) as ours:
                kimi_k3_rs.preprocess(data, cfg)
            assert str(ours.value) == helpers.pillow_failure(data), label


def test_trailing_data_after_eoi() -> None:
    data = truncation_files()[0][1]
    for tail in (b"\0" * 10, b"\xff\xd8\xff\xe0junk", b"\xff"):
        assert assert_same_as_pillow(data + tail, repr(tail)) == "ok"
