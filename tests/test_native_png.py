"""Native PNG decoding (``src/decode/png.rs``) against the installed Pillow (issue #12).

``_native.decode_image(data)`` either decodes natively, hands the file to Pillow with a
reason, or raises ``ImageError``. For every file made here the rule is checked against
``np.asarray(Image.open(BytesIO(data)))`` run in the test: a native result has Pillow's
shape, dtype and bytes; a native ``ImageError`` only where Pillow raises too; and a
native success only where Pillow succeeds. The corpus is made from the shipped photos
with Pillow's encoder (L / LA / RGB / RGBA, odd sizes, compress levels, ``optimize``,
APNG), plus files Pillow cannot write, made by the helpers below: Adam7-interlaced
(pure numpy + zlib, every filter type), 16-bit RGB, and hand-cut chunk lists.
Cuts and corruptions (CRC flips before / after the first IDAT, an Adler-32 flip,
trailing garbage, no IEND, a zlib stream that ends early) are swept.
"""

from __future__ import annotations

import io
import random
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import kimi_k3_rs
from kimi_k3_rs import _native

DATA = Path(__file__).resolve().parent / "data"
SIG = b"\x89PNG\r\n\x1a\n"
ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
COLOR_TYPE = {1: 0, 2: 4, 3: 2, 4: 6}


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def chunks(data: bytes) -> list[tuple[bytes, int, int]]:
    """(type, offset of the chunk, total chunk length) of each whole chunk."""
    out, pos = [], 8
    while pos + 12 <= len(data):
        n = struct.unpack(">I", data[pos : pos + 4])[0]
        out.append((data[pos + 4 : pos + 8], pos, n + 12))
        pos += n + 12
    return out


def photo(mode: str, w: int, h: int, name: str = "astronaut.png") -> Image.Image:
    im = Image.open(DATA / name).convert("RGBA")
    if (w, h) != im.size:
        im = im.resize((w, h), Image.BICUBIC)
    if mode in ("LA", "RGBA"):  # a real alpha channel: the photo's own luminance
        im.putalpha(im.convert("L").point(lambda v: 255 - v))
    return im.convert(mode)


def save(im: Image.Image, **kw: Any) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG", **kw)
    return buf.getvalue()


def filtered(rows: np.ndarray, bpp: int) -> bytes:
    """PNG-filter each row (uint8, one row per line) with filter type row % 5."""
    out = []
    prev = np.zeros(rows.shape[1], np.int16)
    for k, row in enumerate(rows.astype(np.int16)):
        a = np.concatenate([np.zeros(bpp, np.int16), row[:-bpp]])
        c = np.concatenate([np.zeros(bpp, np.int16), prev[:-bpp]])
        pa, pb, pc = np.abs(prev - c), np.abs(a - c), np.abs(a + prev - 2 * c)
        paeth = np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, prev, c))
        pred = [np.zeros_like(row), a, prev, (a + prev) // 2, paeth][k % 5]
        out.append(bytes([k % 5]) + ((row - pred) % 256).astype(np.uint8).tobytes())
        prev = row
    return b"".join(out)


def encode(a: np.ndarray, interlace: bool, split: int | None = None, level: int = 6) -> bytes:
    """An 8-bit PNG of `a` (HxW or HxWxC), Adam7 or not, its zlib stream in IDATs of `split` bytes."""
    h, w = a.shape[:2]
    c = 1 if a.ndim == 2 else a.shape[2]
    a3 = a.reshape(h, w, c)
    passes = ADAM7 if interlace else [(0, 0, 1, 1)]
    raw = b""
    for x0, y0, dx, dy in passes:
        sub = a3[y0::dy, x0::dx]
        if sub.size:
            raw += filtered(sub.reshape(sub.shape[0], -1), c)
    z = zlib.compress(raw, level)
    parts = [z] if split is None else [z[i : i + split] for i in range(0, len(z), split)]
    if len(parts) > 1 and len(parts[-1]) < 64:  # else Pillow may not check the Adler-32: see below
        parts[-2:] = [parts[-2] + parts[-1]]
    head = struct.pack(">IIBBBBB", w, h, 8, COLOR_TYPE[c], 0, 0, int(interlace))
    return SIG + chunk(b"IHDR", head) + b"".join(chunk(b"IDAT", p) for p in parts) + chunk(b"IEND", b"")


def pillow(data: bytes) -> np.ndarray | Exception:
    try:
        return np.asarray(Image.open(io.BytesIO(data)))
    except Exception as e:  # noqa: BLE001 - any failure of Pillow's is the reference
        return e


def check(data: bytes, exif_transpose: bool = False) -> str:
    """Decode natively and hold it to Pillow; returns "native", "pillow" or "error"."""
    ref = pillow(data)
    try:
        kind, value = _native.decode_image(data, exif_transpose=exif_transpose)
    except kimi_k3_rs.ImageError as e:
        assert isinstance(ref, Exception), f"native failed ({e}) where Pillow decodes"
        return "error"
    if kind == "pillow":
        assert isinstance(value, str) and value
        return "pillow"
    assert kind == "native"
    assert isinstance(ref, np.ndarray), f"native decoded where Pillow raises {ref!r}"
    assert value.dtype == ref.dtype == np.uint8 and value.shape == ref.shape
    assert np.array_equal(value, ref)
    return "native"


def reason(data: bytes, exif_transpose: bool = False) -> str:
    kind, value = _native.decode_image(data, exif_transpose=exif_transpose)
    assert kind == "pillow", kind
    return str(value)


# -- the exactness corpus --------------------------------------------------------------


@pytest.mark.parametrize("mode", ["L", "LA", "RGB", "RGBA"])
@pytest.mark.parametrize("size", [(1, 1), (3, 5), (17, 33), (641, 479)])
def test_pillow_written_files_decode_natively_to_pillows_bytes(mode: str, size: tuple[int, int]) -> None:
    data = save(photo(mode, *size, name="chelsea.png"))
    assert check(data) == "native"


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA"])
@pytest.mark.parametrize("options", [{"compress_level": 0}, {"compress_level": 1}, {"compress_level": 9}, {"optimize": True}])
def test_compress_levels_and_optimize(mode: str, options: dict[str, Any]) -> None:
    assert check(save(photo(mode, 300, 200, name="coffee.png"), **options)) == "native"


@pytest.mark.parametrize("name", ["astronaut.png", "camera.png", "chelsea.png", "coffee.png"])
def test_shipped_photos_as_they_are(name: str) -> None:
    assert check((DATA / name).read_bytes()) == "native"


@pytest.mark.parametrize("mode", ["L", "LA", "RGB", "RGBA"])
@pytest.mark.parametrize("size", [(1, 1), (1, 9), (9, 1), (3, 5), (8, 8), (17, 33), (97, 61)])
def test_adam7_interlaced(mode: str, size: tuple[int, int]) -> None:
    a = np.asarray(photo(mode, *size, name="coffee.png"))
    data = encode(a, interlace=True, split=500)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(data))), a)  # the helper is a valid encoder
    assert check(data) == "native"
    assert check(encode(a, interlace=False)) == "native"


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
@pytest.mark.parametrize("default_image", [False, True])
def test_apng_frame_zero(mode: str, default_image: bool) -> None:
    frames = [photo(mode, 64, 48, name=n) for n in ("chelsea.png", "coffee.png", "astronaut.png")]
    buf = io.BytesIO()
    frames[0].save(buf, "PNG", save_all=True, append_images=frames[1:], default_image=default_image)
    data = buf.getvalue()
    kinds = [k for k, _, _ in chunks(data)]
    # default_image: the IDAT is not an animation frame (no fcTL before it).
    assert (kinds.index(b"fcTL") > kinds.index(b"IDAT")) == default_image
    im = Image.open(io.BytesIO(data))
    assert im.n_frames == 3
    assert np.array_equal(np.asarray(im), np.asarray(frames[0]))  # frame 0 is the IDAT image
    assert check(data) == "native"


def test_apng_frame_zero_smaller_than_the_canvas_goes_to_pillow() -> None:
    data = save(photo("RGBA", 16, 8))
    ihdr_end = 8 + 25
    fctl = chunk(b"fcTL", struct.pack(">IIIIIHHBB", 0, 8, 8, 4, 0, 1, 10, 0, 0))
    actl = chunk(b"acTL", struct.pack(">II", 1, 0))
    data = data[:ihdr_end] + actl + fctl + data[ihdr_end:]
    assert reason(data) == "APNG frame 0 smaller than the image"
    assert check(data) == "pillow"


# -- what goes to Pillow -----------------------------------------------------------


def raw_png(w: int, h: int, depth: int, color: int, rows: np.ndarray) -> bytes:
    """A PNG of filter-0 `rows` (one packed row per line, already in file byte order)."""
    raw = b"".join(b"\0" + r.tobytes() for r in rows)
    head = struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 0)
    return SIG + chunk(b"IHDR", head) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def rgb16(w: int, h: int) -> bytes:
    return raw_png(w, h, 16, 2, (np.arange(w * h * 3, dtype=">u2").reshape(h, w * 3) * 97).astype(">u2"))


def grey4(w: int, h: int) -> bytes:
    return raw_png(w, h, 4, 0, (np.arange(h * (w // 2), dtype=np.uint8).reshape(h, w // 2) * 37))


ROUTED = {
    "P": (lambda: save(photo("RGB", 20, 10).convert("P")), "palette PNG"),
    "P + tRNS": (lambda: save(photo("RGB", 20, 10).convert("P"), transparency=3), "palette PNG"),
    "RGB + tRNS": (lambda: save(photo("RGB", 20, 10), transparency=(1, 2, 3)), "tRNS"),
    "L + tRNS": (lambda: save(photo("L", 20, 10), transparency=7), "tRNS"),
    "I;16": (lambda: save(photo("L", 20, 10).convert("I;16")), "16-bit PNG"),
    "16-bit RGB": (lambda: rgb16(20, 10), "16-bit PNG"),
    "1-bit": (lambda: save(photo("L", 20, 10).convert("1")), "1/2/4-bit grey PNG"),
    "4-bit grey": (lambda: grey4(20, 10), "1/2/4-bit grey PNG"),
}


@pytest.mark.parametrize("kind", list(ROUTED))
def test_modes_the_native_path_leaves_to_pillow(kind: str) -> None:
    make, why = ROUTED[kind]
    data = make()
    assert reason(data) == why
    assert isinstance(pillow(data), np.ndarray)


XMP = b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:Description tiff:Orientation="6"/></x:xmpmeta>'
EXIF_ROTATED = Image.Exif()
EXIF_ROTATED[0x0112] = 6


@pytest.mark.parametrize("where", ["before IDAT", "after IDAT"])
@pytest.mark.parametrize("tag", ["eXIf", "iTXt XMP", "tEXt XMP"])
def test_orientation_sends_the_file_to_pillow_only_for_exif_transpose(where: str, tag: str) -> None:
    from PIL import ImageOps

    body = {
        "eXIf": chunk(b"eXIf", EXIF_ROTATED.tobytes()[6:]),
        "iTXt XMP": chunk(b"iTXt", b"XML:com.adobe.xmp\0\0\0\0\0" + XMP),
        "tEXt XMP": chunk(b"tEXt", b"XML:com.adobe.xmp\0" + XMP),
    }[tag]
    plain = save(photo("RGB", 30, 20))
    cut = 8 + 25 if where == "before IDAT" else len(plain) - 12
    data = plain[:cut] + body + plain[cut:]
    im = Image.open(io.BytesIO(data))
    assert ImageOps.exif_transpose(im).size == (20, 30)  # Pillow sees the orientation there
    assert reason(data, exif_transpose=True) == "EXIF/XMP orientation"
    assert check(data) == "native"


# -- cuts and corruptions -------------------------------------------------------------


def sweep(data: bytes, offsets: list[int]) -> dict[str, int]:
    seen = {"native": 0, "pillow": 0, "error": 0}
    for cut in offsets:
        seen[check(data[:cut])] += 1
    return seen


def test_cuts_at_every_offset_single_idat() -> None:
    for data in (save(photo("RGB", 41, 29)), encode(np.asarray(photo("RGBA", 41, 29)), interlace=True)):
        seen = sweep(data, list(range(8, len(data) + 1)))  # shorter is no PNG signature
        # The last row's bytes are needed: native decodes exactly the cuts past them.
        assert seen["native"] >= 12 and seen["error"] > len(data) // 2, seen


def test_cuts_in_a_multi_idat_file() -> None:
    data = save(photo("RGB", 300, 220))  # Pillow writes 64 KiB IDAT chunks
    assert sum(k == b"IDAT" for k, _, _ in chunks(data)) > 1
    rng = random.Random(5)
    offsets = sorted({rng.randrange(8, len(data)) for _ in range(60)} | set(range(len(data) - 60, len(data) + 1)))
    seen = sweep(data, offsets)
    assert seen["native"] >= 12 and seen["error"] + seen["pillow"] > 40, seen


def flip(data: bytes, at: int, bit: int = 0) -> bytes:
    b = bytearray(data)
    b[at] ^= 1 << bit
    return bytes(b)


def test_crc_flips_fail_before_the_first_idat_only() -> None:
    data = save(photo("RGB", 40, 30), dpi=(72, 72))
    table = {k: (pos, n) for k, pos, n in chunks(data)}
    for kind in (b"IHDR", b"pHYs"):  # checked by Pillow's _open
        pos, n = table[kind]
        bad = flip(data, pos + n - 1)
        assert check(bad) == "error"
        assert isinstance(pillow(bad), Exception)
    pos, n = table[b"IDAT"]  # never checked
    assert check(flip(data, pos + n - 1)) == "native"


def test_adler_flip_fails_like_pillow() -> None:
    for data in (save(photo("RGB", 40, 30)), encode(np.asarray(photo("LA", 40, 30)), interlace=True)):
        pos, n = next((p, n) for k, p, n in chunks(data) if k == b"IDAT")
        for at in range(pos + n - 8, pos + n - 4):  # the four Adler-32 bytes
            assert check(flip(data, at)) == "error"


def test_adler_in_an_idat_of_its_own_goes_to_pillow() -> None:
    # Pillow reads no further than the last row there, so it never sees the checksum.
    a = np.asarray(photo("RGB", 20, 10))
    z = bytearray(zlib.compress(filtered(a.reshape(10, -1), 3)))
    z[-1] ^= 1
    head = chunk(b"IHDR", struct.pack(">IIBBBBB", 20, 10, 8, 2, 0, 0, 0))
    data = SIG + head + chunk(b"IDAT", bytes(z[:-4])) + chunk(b"IDAT", bytes(z[-4:])) + chunk(b"IEND", b"")
    assert isinstance(pillow(data), np.ndarray)
    assert reason(data) == "IDAT split near its end"


def test_bit_flips_in_the_image_data() -> None:
    data = save(photo("RGBA", 40, 30))
    pos, n = next((p, n) for k, p, n in chunks(data) if k == b"IDAT")
    rng = random.Random(9)
    seen = {"native": 0, "pillow": 0, "error": 0}
    for _ in range(120):
        seen[check(flip(data, rng.randrange(pos + 8, pos + n - 4), rng.randrange(8)))] += 1
    assert seen["error"] > 60, seen


def test_trailing_garbage_no_iend_and_chunks_after_idat() -> None:
    data = save(photo("RGB", 40, 30))
    assert check(data + b"\0garbage after IEND") == "native"
    assert check(data[:-12]) == "native"  # no IEND
    assert check(data[:-12] + b"\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8") == "native"  # not a chunk: Pillow stops
    text = chunk(b"tEXt", b"Comment\0" + b"x" * 40)
    assert check(data[:-12] + text[:-10]) == "error"  # a chunk cut short after IDAT fails in load_end
    assert check(data[:-12] + text[:-1] + b"!" + data[-12:]) == "native"  # no CRC check after IDAT


def test_zlib_stream_ending_early() -> None:
    a = np.asarray(photo("RGB", 20, 10))
    raw = filtered(a.reshape(10, -1), 3)
    head = chunk(b"IHDR", struct.pack(">IIBBBBB", 20, 10, 8, 2, 0, 0, 0))

    def file(raw: bytes) -> bytes:
        return SIG + head + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")

    short = file(raw[: 4 * 61])  # four whole rows: Pillow leaves the rest zero
    ref = pillow(short)
    assert isinstance(ref, np.ndarray) and not ref[4:].any() and np.array_equal(ref[:4], a[:4])
    assert check(short) == "native"
    assert check(file(raw[: 4 * 61 + 7])) == "error"  # inside a row
    assert check(file(b"")) == "error"
    assert check(file(raw + b"\0" * 200)) == "native"  # more data than rows


def test_bad_headers_raise_image_error() -> None:
    data = save(photo("RGB", 8, 8))
    for bad in (data[:20], data[:33], flip(data, 8 + 8 + 9, 1)):  # cut in IHDR, cut before IDAT, IHDR flip
        assert isinstance(pillow(bad), Exception)
        with pytest.raises(kimi_k3_rs.ImageError, match="cannot decode PNG"):
            _native.decode_image(bad)
