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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import helpers
import numpy as np
import pytest
from PIL import Image

import kimi_k3_rs
from kimi_k3_rs import _native
from reference import reference_preprocess

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
    head = struct.pack(">IIBBBBB", w, h, 8, COLOR_TYPE[c], 0, 0, int(interlace))
    return SIG + chunk(b"IHDR", head) + b"".join(chunk(b"IDAT", p) for p in parts) + chunk(b"IEND", b"")


def pillow(data: bytes) -> np.ndarray | Exception:
    try:
        return np.asarray(Image.open(io.BytesIO(data)))
    except Exception as e:  # noqa: BLE001 - any failure of Pillow's is the reference
        return e


#: The failures of ``ZipDecode.c`` as ``ImageFile.load`` reports them.
ZIP_DECODE_ERRORS = (
    "image file is truncated",
    "broken data stream when reading image file",
    "unrecognized data stream contents when reading image file",
)


def check(data: bytes, exif_transpose: bool = False) -> str:
    """Decode natively and hold it to Pillow; returns "native", "pillow" or "error" (a
    native failure, or a fault of the chunk list, which sends the file to Pillow)."""
    ref = pillow(data)
    try:
        kind, value = _native.decode_image(data, exif_transpose=exif_transpose)
    except kimi_k3_rs.ImageError as e:
        assert isinstance(ref, Exception), f"native failed ({e}) where Pillow decodes"
        # A failure of the image data is the same failure as Pillow's: its message, less
        # the count of bytes it left ("image file is truncated (N bytes not processed)").
        detail = str(e).removeprefix("cannot decode PNG: ")
        if detail in ZIP_DECODE_ERRORS:
            assert str(ref).startswith(detail), (str(e), repr(ref))
        return "error"
    if kind == "pillow" and value.startswith("Pillow fails: "):
        # A fault of the chunk list: the file goes to Pillow, which raises its own error.
        assert isinstance(ref, Exception), f"routed as a fault ({value}) where Pillow decodes"
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


@pytest.mark.parametrize("extra", [1, 100, 1 << 20])
@pytest.mark.parametrize("cut", [0, 12])
def test_an_apng_whose_first_fdat_claims_more_than_the_file_holds_goes_to_pillow(extra: int, cut: int) -> None:
    """Pillow's `_open` reads 4 bytes of an fdAT met before any IDAT and ends there, as at
    an IDAT, and `load` decodes the frame's data as far as it goes: a length past the end
    is Pillow's to judge (the fuzz run of seed 828176828 found three such files the walk
    refused as "truncated chunk")."""
    frames = [photo("LA", 4, 13, name=n) for n in ("chelsea.png", "coffee.png")]
    buf = io.BytesIO()
    frames[0].save(buf, "PNG", save_all=True, append_images=frames[1:])
    full = buf.getvalue()
    table = {k: (pos, n) for k, pos, n in chunks(full)}
    idat, idat_len = table[b"IDAT"]
    data = full[:idat] + full[idat + idat_len :]  # IDAT removed: the fdAT comes first
    fdat = next(pos for k, pos, _ in chunks(data) if k == b"fdAT")
    n = struct.unpack(">I", data[fdat : fdat + 4])[0]
    data = data[:fdat] + struct.pack(">I", n + extra) + data[fdat + 4 : len(data) - cut]
    assert isinstance(pillow(data), np.ndarray)
    assert reason(data) == "fdAT chunk"
    assert check(data) == "pillow"
    assert isinstance(pillow(data), np.ndarray)


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


def test_adler_in_an_idat_of_its_own_is_never_read() -> None:
    # Pillow reads one chunk at a time and stops at the last row, so it never
    # sees the checksum (issue #21: this file went to Pillow, now it is decoded
    # natively, as Pillow decodes it).
    a = np.asarray(photo("RGB", 20, 10))
    z = bytearray(zlib.compress(filtered(a.reshape(10, -1), 3)))
    z[-1] ^= 1
    head = chunk(b"IHDR", struct.pack(">IIBBBBB", 20, 10, 8, 2, 0, 0, 0))
    data = SIG + head + chunk(b"IDAT", bytes(z[:-4])) + chunk(b"IDAT", bytes(z[-4:])) + chunk(b"IEND", b"")
    assert np.array_equal(pillow(data), a)
    assert check(data) == "native"


def test_idat_splits_near_the_end_are_decoded_as_pillow_reads_them() -> None:
    # Every split of the zlib stream into two chunks in its last 40 bytes, with
    # the Adler-32 intact or damaged: where Pillow's read that completes the
    # last row ends decides what zlib sees (issue #21: these went to Pillow).
    for data in (save(photo("RGB", 23, 11)), encode(np.asarray(photo("LA", 9, 7)), interlace=True)):
        chunks_ = chunks(data)
        pos, n = next((p, n) for k, p, n in chunks_ if k == b"IDAT")
        z = data[pos + 8 : pos + n - 4]
        seen = {"native": 0, "pillow": 0, "error": 0}
        for damage in (0, 1):
            zz = z[:-1] + bytes([z[-1] ^ damage])
            for cut in range(len(zz) - 40, len(zz) + 1):
                split = data[:pos] + chunk(b"IDAT", zz[:cut]) + chunk(b"IDAT", zz[cut:]) + data[pos + n :]
                seen[check(split)] += 1
        assert seen["pillow"] == 0 and seen["native"] > 40 and seen["error"] > 0, seen


class Bits:
    """Deflate bits, least significant first (RFC 1951 3.1.1)."""

    def __init__(self) -> None:
        self.bits: list[int] = []

    def put(self, value: int, n: int) -> Bits:  # header fields, extra bits
        self.bits += [(value >> i) & 1 for i in range(n)]
        return self

    def code(self, value: int, n: int) -> Bits:  # a Huffman code, most significant bit first
        self.bits += [(value >> i) & 1 for i in reversed(range(n))]
        return self

    def fixed(self, sym: int) -> Bits:  # a symbol of the fixed literal/length code
        if sym < 144:
            return self.code(0x30 + sym, 8)
        if sym < 256:
            return self.code(0x190 + sym - 144, 9)
        return self.code(sym - 256, 7) if sym < 280 else self.code(0xC0 + sym - 280, 8)

    def block(self, last: bool, kind: int) -> Bits:
        return self.put(int(last), 1).put(kind, 2)

    def align(self) -> Bits:
        self.bits += [0] * (-len(self.bits) % 8)
        return self

    def literals(self, raw: bytes) -> Bits:
        self.block(False, 1)
        for x in raw:
            self.fixed(x)
        return self

    def stream(self, raw: bytes) -> bytes:
        """A zlib stream: header, these bits, then the Adler-32 of ``raw``."""
        self.align()
        body = bytes(sum(b << i for i, b in enumerate(self.bits[k : k + 8])) for k in range(0, len(self.bits), 8))
        return b"\x78\x01" + body + struct.pack(">I", zlib.adler32(raw))


def la_pixel(z: bytes) -> bytes:
    """A 1x1 LA PNG of the zlib stream ``z``."""
    return SIG + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 4, 0, 0, 0)) + chunk(b"IDAT", z) + chunk(b"IEND", b"")


def test_the_issue_21_file_fails_as_in_pillow() -> None:
    # A 1x1 LA pixel, then an invalid distance code: zlib reads it while it fills the row.
    data = la_pixel(bytes.fromhex("789c639850067f01990107"))
    ref = pillow(data)
    assert isinstance(ref, OSError) and "broken data stream" in str(ref)
    assert check(data) == "error"
    with pytest.raises(kimi_k3_rs.ImageError, match="broken data stream"):
        kimi_k3_rs.preprocess(data, kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)


def fails_as_pillow(data: bytes, message: str) -> None:
    """Pillow fails on ``data`` with ``message``, and so do the native decode and
    ``preprocess`` (``image 0: cannot decode PNG: <message>``)."""
    ref = pillow(data)
    assert isinstance(ref, OSError) and str(ref) == message
    assert check(data) == "error"
    with pytest.raises(kimi_k3_rs.ImageError, match=f"^image 0: cannot decode PNG: {message}$"):
        kimi_k3_rs.preprocess(data, kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        # A byte of row 3 is written before the bad code: Pillow's call for row 1 (of one
        # row) stopped at row 2's first literal, and it unfiltered row 1 first.
        (b"\0\x01\x02\x03" + b"\x07\x04\x05\x06" + b"\0\x07\x08\x09" + b"\0",
         "unrecognized data stream contents when reading image file"),
        # The bad code follows row 1's last byte: the call that filled row 1 reads on into it.
        (b"\0\x01\x02\x03" + b"\x07\x04\x05\x06", "broken data stream when reading image file"),
    ],
)
def test_a_row_of_an_unknown_filter_then_a_broken_code_fails_as_in_pillow(rows: bytes, message: str) -> None:
    # A 3x5 L image whose row 1 has filter type 7, then an invalid distance code
    # (fixed code 30). The native decode inflates many rows a call; it failed with the
    # broken stream in the first case (the damaged middle of a large PNG showed it).
    z = Bits().literals(rows).fixed(257).code(30, 5).stream(rows)
    data = SIG + chunk(b"IHDR", struct.pack(">IIBBBBB", 3, 5, 8, 0, 0, 0, 0)) + chunk(b"IDAT", z) + chunk(b"IEND", b"")
    fails_as_pillow(data, message)


def test_a_row_completed_from_held_bits_leaves_its_reads_byte_to_the_next_call() -> None:
    # A 1x14 grey PNG (decoder fuzz, seed 941787112, case PNG:22079): IDAT chunks of 26,
    # 1, 5 and 2 bytes, the stream's Adler-32 wrong. In the 1-byte read, zlib completes
    # row 12 from bits it holds and leaves the byte; ZipDecode.c goes on while the read
    # lasts, so row 13 takes it, the last row completes in the 5-byte read and the bad
    # Adler-32 is never read. The native decode ended the read after row 12 (dropping
    # the byte) and failed: "broken data stream".
    data = bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000010000000e0800000000cb2829800000001a4944"
        "4154785e63f064facdf48c8989e907933cd337262e2014646200f27e02bd722100000001494441"
        "5432e0ef2c680000000549444154fd03006407716859cb0000000249444154076a9edda33b0000"
        "000049454e44ae426082"
    )
    assert isinstance(pillow(data), np.ndarray)
    assert check(data) == "native"
    want, _ = reference_preprocess([pillow(data)], kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)
    got = kimi_k3_rs.preprocess(data, kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG)["pixel_values"]
    assert got.tobytes() == want.tobytes()


def test_a_bulk_call_that_completed_no_row_is_followed_by_one_with_room() -> None:
    # A 28x37 RGB PNG (decoder fuzz, seed 1520604209, case PNG:4101) whose zlib data is 5
    # bytes in IDAT chunks of 1 and 4 (then an empty one): a fixed block whose first match
    # reaches back past the start. Pillow's call with the 4-byte read and room for a row
    # meets it ("broken data stream"). The native decode inflated 3 of the 4 bytes in bulk
    # (no row completed), then gave the last byte with no room, as after a call that
    # completed a row; zlib-rs reads no distance without room, so the reads ran out:
    # "image file is truncated". Now a bulk call that completed no row is followed by
    # one with room for the row.
    data = bytes.fromhex(
        "89504e470d0a1a0a0000000d494844520000001c000000250802000000de1a1ea600000001494441"
        "54686b51948200000004494441540502794bc18a99fc000000004944415435af061e000000004945"
        "4e44ae426082"
    )
    message = "broken data stream when reading image file"
    fails_as_pillow(data, message)


def test_a_distance_too_far_back_right_after_a_row_is_the_next_rows_failure() -> None:
    # An 8x57 grey PNG (decoder fuzz, seed 531648110, case PNG:114851): row 0 has an unknown
    # filter type, and the match right after it reaches back past the start. zlib checks a
    # match's distance only with room to write it, so Pillow's call for row 0 (of one row)
    # leaves first, row 0 is unfiltered and the failure is its filter type; the native
    # decode's call of many rows met the distance first ("broken data stream").
    data = bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000080000003908000000002e42355f00000018494441"
        "54785e72f8b32ae59b6ae44b00000000ffff6a23608db640ac43930ba100000002494441540813309c"
        "766c000000004944415435af061e0000000049454e44ae426082"
    )
    message = "unrecognized data stream contents when reading image file"
    fails_as_pillow(data, message)


@pytest.mark.parametrize(
    ("mode", "w", "h", "interlace"),
    [
        ("LA", 39, 19, True),  # decoder fuzz, seed 1, case PNG:9928 (this Adam7 39x19 LA)
        ("L", 40, 20, False),
        ("RGB", 17, 9, False),
        ("RGBA", 13, 11, True),
    ],
)
@pytest.mark.parametrize(
    ("dist", "message"),
    [
        (29, "unrecognized data stream contents when reading image file"),  # 24577 back
        (30, "broken data stream when reading image file"),  # an invalid distance code
    ],
)
def test_a_match_right_after_a_row_fails_as_in_pillow_where_zlib_meets_it_in_its_fast_path(
    mode: str, w: int, h: int, interlace: bool, dist: int, message: str
) -> None:
    # The image's second filtered row (in stream order) has filter type 7, then a match
    # whose distance reaches back past the start, or whose distance code is invalid, then
    # 32 bytes zlib never decodes. Pillow's call for that row reads on with no room: it
    # decodes the distance code there (an invalid one fails first), but checks a distance
    # only with room to write, so the row's filter type is the failure. The native decode's
    # call of many rows (260 bytes of room or more) meets the match in zlib-rs's
    # inflate_fast, which reports every error as "repeated call with bad state": it took a
    # distance too far back for an error of the row's own call ("broken data stream").
    c = len(mode)
    passes = ADAM7 if interlace else [(0, 0, 1, 1)]
    n0, n1 = [len(range(x0, w, dx)) * c for x0, y0, dx, dy in passes for _ in range(y0, h, dy) if x0 < w][:2]
    px = np.random.default_rng(w).integers(0, 256, n0 + n1, np.uint8).tobytes()
    rows = b"\0" + px[:n0] + b"\7" + px[n0:]
    z = Bits().literals(rows).fixed(257).code(dist, 5).put(0, 13 + 8 * 32).stream(rows)
    head = chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, COLOR_TYPE[c], 0, 0, int(interlace)))
    fails_as_pillow(SIG + head + chunk(b"IDAT", z) + chunk(b"IEND", b""), message)


@pytest.mark.parametrize(
    ("w", "h", "interlace", "rows"),
    [
        (3, 5, False, 2),  # decoder fuzz, seed 260740027, case PNG:25875 (a 65x5 LA)
        (3, 23, True, 1),  # case PNG:20024 (this Adam7 3x23 L)
        (999, 70, False, 65),  # rows 0-64 fill the native decode's 64 KiB call
    ],
)
@pytest.mark.parametrize(
    ("header", "message"),
    [
        (0b111, "broken data stream when reading image file"),  # last, of invalid type 3
        (0b000, "unrecognized data stream contents when reading image file"),  # a stored one
    ],
)
def test_a_rows_filter_type_is_checked_once_its_call_has_read_on_to_the_end_of_the_read(
    w: int, h: int, interlace: bool, rows: int, header: int, message: str
) -> None:
    # An L image's first `rows` filtered rows (in stream order), the last of filter type 7,
    # then a sync flush, in one read whose last byte is the next block's header. ZipDecode.c
    # unfilters a row once the inflate call that filled it has returned, and zlib reads on
    # in that call, with no room, to the end of the read: an invalid block type there fails
    # first ("broken data stream"); a stored block's header lets it check the filter type.
    # The native decode inflated the rows in one call given all but the read's last byte,
    # and unfiltered the last row before the call that read that byte: "unrecognized data
    # stream contents" for both.
    passes = ADAM7 if interlace else [(0, 0, 1, 1)]
    lengths = [len(range(x0, w, dx)) for x0, y0, dx, dy in passes for _ in range(y0, h, dy) if x0 < w]
    rng = np.random.default_rng(rows)
    raw = b"".join(b"\0" + rng.integers(0, 4, n, np.uint8).tobytes() for n in lengths[:rows])
    raw = raw[: -lengths[rows - 1] - 1] + b"\7" + raw[-lengths[rows - 1] :]
    co = zlib.compressobj()
    z = co.compress(raw) + co.flush(zlib.Z_SYNC_FLUSH) + bytes([header])
    assert len(z) <= 65536  # one read
    head = chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, int(interlace)))
    data = SIG + head + chunk(b"IDAT", z) + chunk(b"IEND", b"")
    fails_as_pillow(data, message)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # decoder fuzz, seed 636329738, case PNG:9098: the run ends at a damaged chunk type
        (bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000013000000050806000001d0d8e7dc00000011494441"
        "54682414e30493a47f9ff697adea07abf475de644dcc0000000049c54e444f777b02"
        ), "broken PNG file (chunk b'I\\xc5ND')"),
        # case PNG:11130: the run ends at a damaged chunk type
        (bytes.fromhex(
        "89504e470d0a1a0a0000000d494844520000000a0000001108040000004e2af56e00000005494441"
        "54480d030000d4232cc5000000024944415400007cfbbdba0000000449444154011ed686979e4a94"
        "0000000349444154e60df12bb15e7700000049454e44ae426082"
        ), "broken PNG file (chunk b'END\\xae')"),
    ],
)
def test_reads_running_out_before_a_broken_chunk_header_fail_as_pillow(data: bytes, message: str) -> None:
    # The IDAT run ends before the image does, and what follows is not a chunk header
    # Pillow's chunk reader takes (`ChunkStream.read`): its SyntaxError, "broken PNG file
    # (chunk b'...')" with the bytes' repr; the native decode said "image file is
    # truncated". (`reads_run_out`'s unit test covers the short headers.)
    ref = pillow(data)
    assert isinstance(ref, SyntaxError) and str(ref) == message
    assert check(data) == "error"
    with pytest.raises(kimi_k3_rs.ImageError) as got:
        _native.decode_image(data)
    assert str(got.value) == f"cannot decode PNG: {message}"


PIXEL = b"\0\xc8\x64"  # filter 0, grey 200, alpha 100
#: What follows the pixel's literals in the zlib stream, and whether Pillow decodes the file.
TAILS: dict[str, tuple[Callable[[Bits], Bits], bool]] = {
    "end of stream": (lambda b: b.fixed(256).block(True, 1).fixed(256), True),
    "a literal, then an invalid block": (lambda b: b.fixed(7).block(True, 3), True),
    "a match too far back": (lambda b: b.fixed(257).code(29, 5).put(0, 13).block(True, 3), True),
    "an invalid distance code": (lambda b: b.fixed(257).code(30, 5), False),
    "an invalid literal/length code": (lambda b: b.fixed(286), False),
    "an invalid block type": (lambda b: b.fixed(256).block(False, 3), False),
    "bad stored block lengths": (lambda b: b.fixed(256).block(False, 0).align().put(5, 16).put(5, 16), False),
    "too many length codes": (lambda b: b.fixed(256).block(False, 2).put(30, 5), False),
    "an empty stored block, then the end": (
        lambda b: b.fixed(256).block(False, 0).align().put(0, 16).put(0xFFFF, 16).block(True, 1).fixed(256),
        True,
    ),
    "a stored byte, then an invalid block": (
        lambda b: b.fixed(256).block(False, 0).align().put(1, 16).put(0xFFFE, 16).put(255, 8).block(True, 3),
        True,
    ),
}


@pytest.mark.parametrize("tail", list(TAILS))
def test_what_follows_the_last_row_fails_where_zlib_reads_it(tail: str) -> None:
    make, ok = TAILS[tail]
    data = la_pixel(make(Bits().literals(PIXEL)).stream(PIXEL))
    assert isinstance(pillow(data), np.ndarray) == ok  # the case is what it says
    assert check(data) == ("native" if ok else "error")


def test_bit_flips_after_the_last_row() -> None:
    # Every bit of the last 12 bytes of the zlib stream (the last symbols, the
    # Adler-32) of small files: the native outcome is Pillow's every time.
    seen = {"native": 0, "pillow": 0, "error": 0}
    for mode, w, h in (("LA", 1, 1), ("RGB", 5, 3), ("L", 7, 2), ("RGBA", 3, 3)):
        data = save(photo(mode, w, h))
        pos, n = next((p, n) for k, p, n in chunks(data) if k == b"IDAT")
        for at in range(pos + n - 16, pos + n - 4):
            for bit in range(8):
                bad = flip(data, at, bit)
                body = bad[pos + 4 : pos + n - 4]
                seen[check(bad[: pos + n - 4] + struct.pack(">I", zlib.crc32(body)) + bad[pos + n :])] += 1
    assert seen["native"] > 20 and seen["error"] > 100, seen


def test_a_stream_end_on_a_row_boundary_counts_in_the_read_of_its_row() -> None:
    # A 1x2 L image whose stream ends after row 0: Pillow leaves row 1 zero when
    # the same read holds the end of the stream, and fails when a later one does.
    raw = b"\0\x4d"
    z = Bits().literals(raw).fixed(256).block(True, 1).fixed(256).stream(raw)
    head = chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 2, 8, 0, 0, 0, 0))
    whole = SIG + head + chunk(b"IDAT", z) + chunk(b"IEND", b"")
    assert np.array_equal(pillow(whole), [[77], [0]])
    assert check(whole) == "native"
    split = SIG + head + chunk(b"IDAT", z[:-4]) + chunk(b"IDAT", z[-4:]) + chunk(b"IEND", b"")
    assert isinstance(pillow(split), OSError)
    assert check(split) == "error"


def test_a_row_zlib_holds_back_at_the_end_of_a_read_completes_in_the_next() -> None:
    # A 2x3 L image: row 0 in literals, row 1 a match whose bits end the first
    # IDAT chunk, then the end of the stream in the second. Pillow's call that
    # fills row 0 reads the match with no room for it and its read is over, so
    # row 1 completes in the second read, in the call that also reads the end
    # of the stream: row 2 stays zero. Split one chunk later, the end of the
    # stream is read with row 1 in the first read, and after it in the second.
    raw = b"\0\5\6\0\5\6"
    bits = Bits().literals(raw[:3]).fixed(257).code(2, 5)
    assert len(bits.bits) == 39  # the match ends in byte 5 of the deflate data
    z = bits.fixed(256).block(True, 1).fixed(256).stream(raw)
    head = chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 3, 8, 0, 0, 0, 0))
    for cut, ok in ((7, True), (8, False), (len(z), True)):
        data = SIG + head + chunk(b"IDAT", z[:cut]) + chunk(b"IDAT", z[cut:]) + chunk(b"IEND", b"")
        ref = pillow(data)
        assert isinstance(ref, np.ndarray) == ok, cut
        if ok:
            assert ref.tolist() == [[5, 6], [5, 6], [0, 0]]
        assert check(data) == ("native" if ok else "error")


def test_small_streams_split_at_every_offset() -> None:
    # Tiny images of repeated rows (matches that span rows), streams that end
    # early (on a row boundary or not) or with a sync flush, cut into IDAT
    # chunks at every offset (sometimes twice): where a read ends decides
    # which call completes a row, reads the end of the stream, or holds a
    # symbol back; the native outcome is Pillow's every time.
    rng = random.Random(21)
    seen = {"native": 0, "pillow": 0, "error": 0}
    for _ in range(60):
        w, h = rng.randrange(1, 5), rng.randrange(2, 7)
        color, c = rng.choice([(0, 1), (4, 2), (2, 3), (6, 4)])
        px = bytes(rng.choice([0, 5, 5, 7]) for _ in range(w * c))
        raw = b"".join(b"\0" + (px if rng.random() < 0.8 else rng.randbytes(w * c)) for _ in range(h))
        keep = rng.randrange(1, len(raw) + 1) if rng.random() < 0.5 else len(raw)
        if rng.random() < 0.5:
            keep = max(1, keep // (1 + w * c)) * (1 + w * c)
        strategy = rng.choice([zlib.Z_FIXED, zlib.Z_RLE, zlib.Z_DEFAULT_STRATEGY])
        co = zlib.compressobj(rng.randrange(10), zlib.DEFLATED, 15, 9, strategy)
        z = co.compress(raw[:keep]) + co.flush(rng.choice([zlib.Z_FINISH, zlib.Z_FINISH, zlib.Z_SYNC_FLUSH]))
        head = chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0))
        for cut in range(len(z) + 1):
            bounds = [0, *sorted({cut, rng.randrange(len(z) + 1)} if rng.random() < 0.3 else {cut}), len(z)]
            idats = b"".join(chunk(b"IDAT", z[a:b]) for a, b in zip(bounds, bounds[1:]))
            seen[check(SIG + head + idats + chunk(b"IEND", b""))] += 1
    assert seen["pillow"] == 0 and seen["native"] > 300 and seen["error"] > 300, seen


def test_pillows_64_kib_reads_bound_what_zlib_reads_after_the_last_row() -> None:
    # 81 rows of 808 grey pixels in a stored block that ends at byte 65536 of the
    # IDAT data, then an invalid block: Pillow's read of the last row ends before
    # it. An empty stored block in front moves the last row into the next read.
    w, h = 808, 81
    a = np.asarray(photo("L", w, h))
    raw = b"".join(b"\0" + row.tobytes() for row in a)
    assert len(raw) == 65536 - 7

    def stored(b: Bits, data: bytes) -> Bits:
        b.block(False, 0).align().put(len(data), 16).put(~len(data) & 0xFFFF, 16)
        for x in data:
            b.put(x, 8)
        return b

    head = chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
    for empty_first, ok in ((False, True), (True, False)):
        bits = stored(Bits(), b"") if empty_first else Bits()
        data = SIG + head + chunk(b"IDAT", stored(bits, raw).block(True, 3).stream(raw)) + chunk(b"IEND", b"")
        assert isinstance(pillow(data), np.ndarray) == ok
        assert check(data) == ("native" if ok else "error")


@pytest.mark.parametrize("plte", [[b""], [b"\1\2"], [b"\0" * 3, b"\xff" * 6], [b"\7" * 1000]])
def test_plte_chunks_of_non_palette_images_are_ignored(plte: list[bytes]) -> None:
    # PngStream.chunk_PLTE keeps a palette for "P" only (they went to Pillow).
    data = save(photo("RGBA", 12, 5))
    data = data[:33] + b"".join(chunk(b"PLTE", p) for p in plte) + data[33:]
    assert check(data) == "native"


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


def header_faults() -> dict[str, tuple[bytes, str]]:
    """PNGs with a fault of the chunk list that Pillow fails on, each with Pillow's
    exception (class: message) as ``Image.open`` + ``load`` gives it."""
    data = save(photo("RGB", 8, 8))
    ihdr, rest = data[8:33], data[33:]
    idat, end = rest[: rest.index(b"IEND") - 4], rest[rest.index(b"IEND") - 4 :]

    def head(w: int = 8, d: int = 8, f: int = 0) -> bytes:
        return chunk(b"IHDR", struct.pack(">IIBBBBB", w, 8, d, 2, 0, f, 0))

    def with_chunks(*pre: bytes, first: bytes = ihdr, post: bytes = b"") -> bytes:
        return SIG + first + b"".join(pre) + idat + post + end

    actl = chunk(b"acTL", struct.pack(">II", 1, 0))
    unidentified = "UnidentifiedImageError: cannot identify image file"
    return {
        "cut in a chunk header before IDAT": (data[:36], unidentified),
        "cut in the IHDR data": (data[:20], "OSError: Truncated File Read"),
        "cut in the IHDR CRC": (data[:31], unidentified),
        "bad chunk type": (with_chunks(chunk(b"a\x01cd", b"")), unidentified),
        "bad CRC before IDAT": (flip(data, 32), unidentified),
        "IHDR flip (bad CRC)": (flip(data, 8 + 8 + 9, 1), unidentified),
        "short IHDR": (with_chunks(first=chunk(b"IHDR", ihdr[8:20])), "ValueError: Truncated IHDR chunk"),
        "unknown filter category": (with_chunks(first=head(f=1)), unidentified),
        "bit depth 3": (with_chunks(first=head(d=3)), unidentified),
        "zero width": (with_chunks(first=head(w=0)), unidentified),
        "short gAMA": (with_chunks(chunk(b"gAMA", b"\0\0")), "ValueError: Truncated gAMA chunk"),
        "short sRGB": (with_chunks(chunk(b"sRGB", b"")), "ValueError: Truncated sRGB chunk"),
        "short pHYs": (with_chunks(chunk(b"pHYs", bytes(8))), "ValueError: Truncated pHYs chunk"),
        "cHRM of 30 bytes": (with_chunks(chunk(b"cHRM", bytes(30))), "ValueError: Truncated cHRM chunk"),
        "iCCP method 1": (with_chunks(chunk(b"iCCP", b"icc\0\x01" + zlib.compress(b"x"))), unidentified),
        "zTXt method 1": (with_chunks(chunk(b"zTXt", b"k\0\x01" + zlib.compress(b"x"))), unidentified),
        "short acTL": (with_chunks(chunk(b"acTL", bytes(4))), "ValueError: APNG contains truncated acTL chunk"),
        "fcTL sequence error": (
            with_chunks(actl, chunk(b"fcTL", struct.pack(">IIIIIHHBB", 5, 8, 8, 0, 0, 1, 1, 0, 0))), unidentified),
        "fcTL outside the canvas": (
            with_chunks(actl, chunk(b"fcTL", struct.pack(">IIIIIHHBB", 0, 9, 8, 0, 0, 1, 1, 0, 0))), unidentified),
        "short gAMA after IDAT": (with_chunks(post=chunk(b"gAMA", b"\0")), "ValueError: Truncated gAMA chunk"),
        "cut in a chunk after IDAT": (
            SIG + ihdr + idat + chunk(b"tEXt", b"Comment\0" + b"x" * 40)[:-10], "OSError: Truncated File Read"),
    }


HEADER_FAULTS = header_faults()


@pytest.mark.parametrize("fault", list(HEADER_FAULTS))
def test_header_faults_go_to_pillow_and_fail_with_its_message(fault: str) -> None:
    # The chunk walk sends a file Pillow fails on to Pillow, which raises: preprocess's
    # message is Pillow's (it was the walk's own, "truncated before IDAT" and the like).
    helpers.assert_header_fault_goes_to_pillow(*HEADER_FAULTS[fault], reason_prefix="Pillow fails: ")
