"""Differential fuzzing of the JPEG and PNG decoders against Pillow (issue #21, the net).

Every case is one mutated file, decoded three ways, all in this process:

* the native route: ``kimi_k3_rs.preprocess(data, cfg)`` as it is (the core decodes the
  file itself where ``_native.route_encoded`` says so, else Pillow does);
* forced to Pillow: the same call with the decode paths ``KIMI_K3_RS_DECODE=pillow``
  gives (``native_decode._paths`` swapped in for the call: re-running the self-check
  for every file would cost more than the case);
* the reference: ``tests/reference.py`` (``Image.open`` + ``load``, then the
  checkpoint's steps in Pillow and numpy).

The outcomes must match: all three raise (the package with Pillow's message, whichever
decoder failed: a header fault of a native format goes to Pillow, which raises; a native
decode that fails on the image data raises Pillow's message), or all three give the same ``pixel_values``
and ``grid_thws`` bits; or the reference decodes and both package routes raise
``ImageTooLargeError``, a bound the package sets on purpose (counted as ``limit``). Where the core decodes natively, its pixels
(``_native.decode_image``) must also be ``np.asarray(Image.open(...))``'s, since
``pixel_values`` can hide a decoded byte (an alpha over black, a channel that
``convert`` drops).

The corpus is made here with Pillow's encoder from a seeded generator (small images,
8 to 64 px a side, a few larger ones so that Pillow's 64 KiB reads split the data):
PNG in every colour type and bit depth, ``tRNS``, palettes, Adam7 (written here: Pillow
writes no interlaced PNG), APNG (frame 0 the ``IDAT`` image, or smaller than the
canvas); JPEG grey, YCbCr at three subsamplings, CMYK, progressive, optimised, with
restart markers, plus the committed files of ``tests/data/jpeg`` that Pillow cannot
write. Each case takes one file and applies one to three mutations: truncation, bit
flips, byte edits, chunk / marker edits (removed, duplicated, swapped, inserted), zlib
streams re-made (levels, strategies, window sizes, flushes with bytes after them, early
ends, preset dictionaries) or damaged near their end, CRC damage, ``IDAT`` chunks split
at random points, ``IHDR`` / ``fcTL`` / ``SOF`` / ``SOS`` / ``DQT`` / ``DHT`` edits.

Reproduce a failure from its message: ``KIMI_K3_RS_FUZZ_SEED`` (default 21) and the
case index name the file, ``python tests/test_decoder_differential.py --seed S --case
PNG:I --write f.png`` writes it. ``KIMI_K3_RS_FUZZ_CASES`` (default 2000) is the number
of files per format. Run as a script with ``--seconds N`` for a longer run with a new
seed (the outcome table is printed; ``pytest -s`` prints it for the test run too). Both
run with the core's poison mode on (``tests/conftest.py``), so a decoded byte left
unwritten shows too.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import re
import struct
import sys
import time
import warnings
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import helpers  # tests/ is on the path: conftest.py puts it there, a script runs from it
import kimi_k3_rs
import numpy as np
import pytest
import reference
from kimi_k3_rs import _native, errors
from kimi_k3_rs._input import native as native_decode
from PIL import Image, UnidentifiedImageError

SEED = int(os.environ.get("KIMI_K3_RS_FUZZ_SEED", "21"))
CASES = int(os.environ.get("KIMI_K3_RS_FUZZ_CASES", "2000"))
#: ``max_image_pixels`` of the package's calls; the reference raises above it too
#: (Pillow's ``DecompressionBombError`` above twice ``Image.MAX_IMAGE_PIXELS``), so that
#: a mutated header cannot make a case decode hundreds of megapixels.
LIMIT = 1 << 22
CONFIGS = [helpers.K3_CFG, helpers.K25_CFG]
FORMATS = ("PNG", "JPEG")

# -- PNG files ---------------------------------------------------------------------------

SIG = b"\x89PNG\r\n\x1a\n"
ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
#: PNG colour type -> samples per pixel.
SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def split_png(data: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The whole chunks of a PNG as (type, body), and whatever follows them."""
    out, pos = [], 8
    while pos + 12 <= len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        if pos + 12 + n > len(data):
            break
        out.append((data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]))
        pos += 12 + n
    return out, data[pos:]


def join_png(chunks: list[tuple[bytes, bytes]], tail: bytes = b"") -> bytes:
    return SIG + b"".join(chunk(k, b) for k, b in chunks) + tail


def idat_stream(chunks: list[tuple[bytes, bytes]]) -> bytes:
    return b"".join(b for k, b in chunks if k == b"IDAT")


def with_stream(chunks: list[tuple[bytes, bytes]], z: bytes, cuts: list[int]) -> list[tuple[bytes, bytes]]:
    """``chunks`` with its IDAT run replaced by ``z`` cut at the offsets ``cuts``."""
    at = next((i for i, (k, _) in enumerate(chunks) if k in (b"IDAT", b"IEND")), len(chunks))
    rest = [c for c in chunks[at:] if c[0] != b"IDAT"]
    bounds = [0, *sorted(c for c in cuts if 0 <= c <= len(z)), len(z)]
    return chunks[:at] + [(b"IDAT", z[a:b]) for a, b in pairwise(bounds)] + rest


def picture(rng: random.Random, w: int, h: int, bands: int) -> np.ndarray:
    """Gradients, edges and some noise (so that every PNG filter type gets chosen)."""
    g = np.random.default_rng(rng.getrandbits(32))
    y, x = np.mgrid[0:h, 0:w]
    planes = [(x * rng.randrange(1, 9) + y * rng.randrange(0, 9) + rng.randrange(256)) for _ in range(bands)]
    base = np.stack(planes, axis=-1) + g.integers(-rng.randrange(1, 40), 40, (h, w, bands))
    if rng.random() < 0.3:
        base[g.random((h, w)) < 0.2] = g.integers(0, 256, bands)
    return (base % 256).astype(np.uint8)


def filtered(rows: np.ndarray, bpp: int, rng: random.Random) -> bytes:
    """Each row (bytes of one line) with a random PNG filter type."""
    out = []
    prev = np.zeros(rows.shape[1], np.int16)
    for row in rows.astype(np.int16):
        kind = rng.randrange(5)
        a = np.concatenate([np.zeros(bpp, np.int16), row[:-bpp]])
        c = np.concatenate([np.zeros(bpp, np.int16), prev[:-bpp]])
        pa, pb, pc = np.abs(prev - c), np.abs(a - c), np.abs(a + prev - 2 * c)
        paeth = np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, prev, c))
        pred = [np.zeros_like(row), a, prev, (a + prev) // 2, paeth][kind]
        out.append(bytes([kind]) + ((row - pred) % 256).astype(np.uint8).tobytes())
        prev = row
    return b"".join(out)


def hand_png(rng: random.Random, w: int, h: int, color: int, depth: int, interlace: bool) -> bytes:
    """A PNG Pillow cannot write: Adam7 or 16-bit, every filter type, random IDAT cuts."""
    c = SAMPLES[color]
    a = picture(rng, w, h, c * depth // 8)
    bpp = max(1, c * depth // 8)
    raw = b""
    for x0, y0, dx, dy in ADAM7 if interlace else [(0, 0, 1, 1)]:
        sub = a[y0::dy, x0::dx]
        if sub.size:
            raw += filtered(sub.reshape(sub.shape[0], -1), bpp, rng)
    z = zlib.compress(raw, rng.randrange(10))
    head = (b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, int(interlace)))
    cuts = [rng.randrange(len(z) + 1) for _ in range(rng.randrange(3))]
    return join_png(with_stream([head, (b"IEND", b"")], z, cuts))


def fctl(seq: int, w: int, h: int, x: int, y: int) -> tuple[bytes, bytes]:
    return (b"fcTL", struct.pack(">IIIIIHHBB", seq, w, h, x, y, 1, 10, 0, 0))


def png_corpus(rng: random.Random) -> list[tuple[str, bytes]]:
    files: list[tuple[str, bytes]] = []
    for _ in range(40):
        big = rng.random() < 0.1  # over Pillow's 64 KiB read at compress_level 0
        w, h = (rng.randrange(120, 200), rng.randrange(100, 140)) if big else (rng.randrange(1, 65), rng.randrange(1, 65))
        mode = rng.choice(["L", "LA", "RGB", "RGBA"] * 3 + ["P", "1", "I;16"])  # mostly what the core decodes
        bands = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}.get(mode, 3)
        im = Image.fromarray(picture(rng, w, h, bands).squeeze(-1) if bands == 1 else picture(rng, w, h, bands))
        params: dict[str, Any] = {"compress_level": 0 if big else rng.randrange(10)}
        if rng.random() < 0.2:
            params["optimize"] = True
        if mode == "P":
            im = im.convert("P", palette=Image.Palette.ADAPTIVE, colors=rng.choice([2, 4, 16, 256]))
            if rng.random() < 0.5:
                params["transparency"] = rng.randrange(4)
        elif mode == "1":
            im = im.convert("1")
        elif mode == "I;16":
            im = im.convert("L").convert("I;16")
        elif mode in ("L", "RGB") and rng.random() < 0.15:
            params["transparency"] = rng.randrange(256) if mode == "L" else tuple(rng.randrange(256) for _ in range(3))
        buf = io.BytesIO()
        im.save(buf, "PNG", **params)
        files.append((f"{w}x{h} {mode} {params}", buf.getvalue()))
    for _ in range(16):
        color, depth = rng.choice([(0, 8), (4, 8), (2, 8), (6, 8), (2, 16), (0, 16), (6, 16)])
        w, h = rng.randrange(1, 40), rng.randrange(1, 40)
        interlace = rng.random() < 0.75
        files.append((f"{w}x{h} colour {color} depth {depth} adam7={interlace}", hand_png(rng, w, h, color, depth, interlace)))
    for _ in range(8):
        w, h = rng.randrange(4, 48), rng.randrange(4, 48)
        mode = rng.choice(["RGB", "RGBA", "L", "LA"])
        frames = [Image.fromarray(picture(rng, w, h, len(mode)).squeeze()).convert(mode) for _ in range(rng.randrange(2, 4))]
        buf = io.BytesIO()
        frames[0].save(buf, "PNG", save_all=True, append_images=frames[1:], default_image=rng.random() < 0.3)
        data = buf.getvalue()
        files.append((f"APNG {w}x{h} {mode}", data))
        chunks, _ = split_png(data)
        for i, (kind, body) in enumerate(chunks):
            if kind == b"fcTL" and struct.unpack(">I", body[:4])[0] == 0:  # frame 0, made smaller
                fw, fh = rng.randrange(1, w + 1), rng.randrange(1, h + 1)
                chunks[i] = fctl(0, fw, fh, rng.randrange(w - fw + 1), rng.randrange(h - fh + 1))
                files.append((f"APNG {w}x{h} {mode}, frame 0 {fw}x{fh}", join_png(chunks)))
                break
    return files


# -- PNG mutations -----------------------------------------------------------------------


def fix_crcs(data: bytes) -> bytes:
    chunks, tail = split_png(data)
    return join_png(chunks, tail) if data.startswith(SIG) else data


def raw_of(chunks: list[tuple[bytes, bytes]]) -> bytes:
    """The inflated IDAT stream (what there is of it)."""
    d = zlib.decompressobj()
    try:
        return d.decompress(idat_stream(chunks))
    except zlib.error:
        return b""


def row_bytes(chunks: list[tuple[bytes, bytes]]) -> int:
    """Filtered bytes of one row (filter byte included), non-interlaced reading."""
    head = next((b for k, b in chunks if k == b"IHDR"), b"")
    if len(head) < 13:
        return 1
    w, _, depth, color = struct.unpack(">IIBB", head[:10])
    return 1 + (w * SAMPLES.get(color, 1) * depth + 7) // 8


def remade_stream(rng: random.Random, raw: bytes, row: int) -> tuple[bytes, str]:
    """``raw`` compressed again, some way zlib can write (and a few it would not)."""
    cut = len(raw)
    how = rng.randrange(6)
    if how == 1 and raw:  # ends early: on a row boundary, or inside a row
        cut = rng.randrange(len(raw) // row + 1) * row if rng.random() < 0.6 else rng.randrange(len(raw))
    elif how == 2:  # more data than rows
        raw += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        cut = len(raw)
    wbits = rng.choice([15, 15, 9, 12, 14])
    level = rng.randrange(10)
    strategy = rng.choice([zlib.Z_DEFAULT_STRATEGY, zlib.Z_FILTERED, zlib.Z_HUFFMAN_ONLY, zlib.Z_RLE, zlib.Z_FIXED])
    zdict = bytes(rng.randrange(256) for _ in range(8)) if how == 3 else None
    co = zlib.compressobj(level, zlib.DEFLATED, wbits, 9, strategy, **({"zdict": zdict} if zdict else {}))
    flush = rng.choice([zlib.Z_FINISH, zlib.Z_SYNC_FLUSH, zlib.Z_FULL_FLUSH, zlib.Z_PARTIAL_FLUSH, zlib.Z_BLOCK])
    if how == 4 and cut > 1:  # a flush inside the data (an empty stored block there)
        mid = rng.randrange(1, cut)
        z = co.compress(raw[:mid]) + co.flush(rng.choice([zlib.Z_SYNC_FLUSH, zlib.Z_FULL_FLUSH])) + co.compress(raw[mid:cut])
    else:
        z = co.compress(raw[:cut])
    z += co.flush(flush)
    after = b""
    if flush != zlib.Z_FINISH or how == 5:  # bytes after the flush: whatever their symbols say
        after = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 12)))
    desc = f"zlib level {level} strategy {strategy} wbits {wbits} flush {flush} cut {cut}/{len(raw)}"
    return z + after, desc + (" zdict" if zdict else "") + (f" + {after.hex()}" if after else "")


def byte_edit(rng: random.Random, b: bytearray, at: int) -> str:
    """One edit of ``b`` at ``at``: the byte set (0, 255 or random), 1-4 random bytes
    inserted, or 1-4 bytes removed; what was done."""
    edit = rng.randrange(3)
    if edit == 0:
        b[at] = rng.choice([0, 255, rng.randrange(256)])
    elif edit == 1:
        b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 5)))
    else:
        del b[at : at + rng.randrange(1, 5)]
    return f"byte edit {edit} at {at}"


def png_mutation(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    if len(data) < 12:
        return data + bytes(rng.randrange(256) for _ in range(4)), "bytes appended"
    chunks, tail = split_png(data)
    idat = [i for i, (k, _) in enumerate(chunks) if k == b"IDAT"]
    kind = rng.choice(
        ["truncate", "truncate", "flip", "flip", "bytes", "chunk", "chunk", "crc", "split", "split", "ihdr", "apng"]
        + ["stream"] * 6 + ["damage"] * 4  # what zlib reads near the last row: where decoders differ most
    )
    if kind == "truncate":
        cut = len(data) - rng.randrange(min(len(data), 96)) if rng.random() < 0.6 else rng.randrange(8, len(data) + 1)
        return data[:cut], f"truncated at {cut} of {len(data)}"
    if kind == "flip" or kind == "bytes":
        b = bytearray(data)
        done = []
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(8, len(b)) if len(b) > 8 else 0
            if kind == "flip":
                b[at] ^= 1 << rng.randrange(8)
                done.append(f"bit flip at {at}")
            else:
                done.append(byte_edit(rng, b, at))
        fixed = rng.random() < 0.5
        return (fix_crcs(bytes(b)) if fixed else bytes(b)), ", ".join(done) + (", CRCs fixed" if fixed else "")
    if kind == "chunk" and chunks:
        i = rng.randrange(len(chunks))
        op = rng.randrange(5)
        extra = rng.choice(
            [
                (b"tEXt", b"Comment\0fuzz"),
                (b"zTXt", b"Comment\0\0" + zlib.compress(b"x" * rng.randrange(50))),
                (b"iTXt", b"XML:com.adobe.xmp\0\0\0\0\0<x/>"),
                (b"gAMA", struct.pack(">I", 45455)),
                (b"pHYs", struct.pack(">IIB", 2835, 2835, 1)),
                (b"tRNS", bytes(rng.randrange(256) for _ in range(rng.choice([1, 2, 6])))),
                (b"PLTE", bytes(rng.randrange(256) for _ in range(3 * rng.randrange(1, 5)))),
                (b"IEND", b""),
                (b"IDAT", b""),
                (b"IDAT", zlib.compress(b"\0" * 3)),
                (b"acTL", struct.pack(">II", rng.randrange(3), 0)),
                (b"vpAg", b"\0" * 9),
                (b"ABCD", b"critical"),
                (b"sRGB", b""),
            ]
        )
        if op == 0:
            desc = f"chunk {chunks[i][0]!r} removed"
            del chunks[i]
        elif op == 1:
            desc = f"chunk {chunks[i][0]!r} duplicated"
            chunks.insert(i, chunks[i])
        elif op == 2 and i + 1 < len(chunks):
            desc = f"chunks {chunks[i][0]!r} {chunks[i + 1][0]!r} swapped"
            chunks[i], chunks[i + 1] = chunks[i + 1], chunks[i]
        else:
            desc = f"chunk {extra[0]!r} inserted at {i}"
            chunks.insert(i, extra)
        return join_png(chunks, tail), desc
    if kind in ("stream", "damage", "split") and idat:
        z = idat_stream(chunks)
        desc = ""
        if kind == "stream":
            z, desc = remade_stream(rng, raw_of(chunks), row_bytes(chunks))
        elif kind == "damage" and z:
            b = bytearray(z)
            near = rng.randrange(1, min(len(b), 24) + 1)  # the tail: the last rows, the Adler-32
            for _ in range(rng.randrange(1, 3)):
                at = len(b) - rng.randrange(1, near + 1) if rng.random() < 0.8 else rng.randrange(len(b))
                b[at] ^= 1 << rng.randrange(8)
            if rng.random() < 0.3:
                at = len(b) - rng.randrange(0, 6)
                b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))
            z, desc = bytes(b), f"zlib stream damaged: {bytes(b[-near - 4 :]).hex()}"
        cuts = [rng.randrange(len(z) + 1) for _ in range(rng.randrange(4))]
        if rng.random() < 0.4 and z:  # a cut near the end: Pillow reads each chunk alone
            cuts.append(len(z) - rng.randrange(min(len(z), 12)))
        return join_png(with_stream(chunks, z, cuts), tail), f"{desc} IDAT cuts {sorted(cuts)}".strip()
    if kind == "crc" and chunks:
        b = bytearray(data)
        pos, offsets = 8, []
        for k, body in chunks:
            offsets.append(pos + 8 + len(body))
            pos += 12 + len(body)
        at = rng.choice(offsets) + rng.randrange(4)
        b[at] ^= 1 << rng.randrange(8)
        return bytes(b), f"CRC damaged at {at}"
    if kind == "ihdr" and chunks and chunks[0][0] == b"IHDR" and len(chunks[0][1]) == 13:
        w, h, depth, color, comp, filt, lace = struct.unpack(">IIBBBBB", chunks[0][1])
        field = rng.randrange(5)
        if field == 0:
            w = max(0, w + rng.choice([-1, 1, 7, -w, 1 << rng.randrange(24)]))
        elif field == 1:
            h = max(0, h + rng.choice([-1, 1, 7, -h, 1 << rng.randrange(20)]))
        elif field == 2:
            depth = rng.choice([1, 2, 4, 8, 16, 3])
        elif field == 3:
            color = rng.choice([0, 2, 3, 4, 6, 1])
        else:
            lace ^= 1
        chunks[0] = (b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, comp, filt, lace))
        return join_png(chunks, tail), f"IHDR {w}x{h} depth {depth} colour {color} interlace {lace}"
    if kind == "apng" and chunks and chunks[0][0] == b"IHDR" and len(chunks[0][1]) >= 8:
        w, h = struct.unpack(">II", chunks[0][1][:8])
        fw, fh = rng.randrange(1, w + 2), rng.randrange(1, h + 2)
        at = idat[0] if idat else len(chunks)
        seq = rng.choice([0, 0, 1])
        new = [(b"acTL", struct.pack(">II", rng.randrange(1, 3), 0)), fctl(seq, fw, fh, rng.randrange(2), rng.randrange(2))]
        chunks[1:1] = [c for c in new if not any(k == c[0] for k, _ in chunks)]
        return join_png(chunks, tail), f"APNG frame 0 {fw}x{fh} seq {seq}"
    return data[: len(data) - 1], "truncated by one byte"


# -- JPEG files and mutations ------------------------------------------------------------


def jpeg_corpus(rng: random.Random) -> list[tuple[str, bytes]]:
    files: list[tuple[str, bytes]] = []
    for _ in range(48):
        w, h = (rng.randrange(1, 65), rng.randrange(1, 65)) if rng.random() < 0.9 else (rng.randrange(1, 9), rng.randrange(1, 9))
        mode = rng.choice(["RGB", "RGB", "RGB", "L", "CMYK"])
        im = Image.fromarray(picture(rng, w, h, 3)).convert(mode)
        params: dict[str, Any] = {"quality": rng.randrange(5, 101)}
        if mode == "RGB":
            params["subsampling"] = rng.randrange(3)
            if rng.random() < 0.1:
                params.update(keep_rgb=True, subsampling=0)  # RGB components: no subsampling
        if rng.random() < 0.35:
            params["progressive"] = True
        if rng.random() < 0.3:
            params["optimize"] = True
        if rng.random() < 0.3:
            params[rng.choice(["restart_marker_blocks", "restart_marker_rows"])] = rng.randrange(1, 4)
        if rng.random() < 0.15:
            params["comment"] = b"fuzz"
        if rng.random() < 0.15:
            exif = Image.Exif()
            exif[0x0112] = rng.randrange(1, 9)
            params["exif"] = exif.tobytes()
        buf = io.BytesIO()
        im.save(buf, "JPEG", **params)
        files.append((f"{w}x{h} {mode} {params}", buf.getvalue()))
    for path in sorted((helpers.DATA_DIR / "jpeg").glob("*.jpg")):
        if "528_scans" not in path.name:  # over the package's scan limit on purpose
            files.append((path.name, path.read_bytes()))
    return files


def segments(data: bytes) -> list[tuple[int, int, int]]:
    """(start, end, marker) of each marker segment, and (start, end, -1) of each scan's
    entropy-coded data (up to the next marker that is no RST and no stuffed 0xFF)."""
    out, pos = [], 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        code = data[pos + 1]
        if code == 0xD9:
            out.append((pos, pos + 2, code))
            break
        (n,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        end = min(len(data), pos + 2 + n)
        out.append((pos, end, code))
        pos = end
        if code == 0xDA:
            while pos + 1 < len(data) and not (data[pos] == 0xFF and data[pos + 1] not in (0x00, *range(0xD0, 0xD8))):
                pos += 1
            out.append((end, pos, -1))
    return out


def jpeg_mutation(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    if len(data) < 12:
        return data + bytes(rng.randrange(256) for _ in range(4)), "bytes appended"
    segs = [(s, e) for s, e, code in segments(data) if code >= 0]
    scans = [(s, e) for s, e, code in segments(data) if code < 0 and e > s]
    heads = [(s, e) for s, e, code in segments(data) if code in (0xC0, 0xC1, 0xC2, 0xC4, 0xDB, 0xDA, 0xDD)]
    kind = rng.choice(["truncate", "truncate", "flip", "flip", "flip", "bytes", "segment", "segment", "field", "scan", "tail"])
    b = bytearray(data)
    if kind == "truncate":
        cut = rng.randrange(2, len(data) + 1)
        return data[:cut], f"truncated at {cut} of {len(data)}"
    if kind == "flip":
        at = []
        for _ in range(rng.randrange(1, 4)):
            s, e = rng.choice(scans) if scans and rng.random() < 0.7 else (2, len(b))
            at.append(rng.randrange(s, e))
            b[at[-1]] ^= 1 << rng.randrange(8)
        return bytes(b), f"bit flips at {at}"
    if kind == "bytes":
        done = byte_edit(rng, b, rng.randrange(2, len(b)))
        return bytes(b), done
    if kind == "segment" and segs:
        s, e = rng.choice(segs)
        op = rng.randrange(4)
        if op == 0:
            return data[:s] + data[e:], f"segment at {s}..{e} removed"
        if op == 1:
            return data[:e] + data[s:e] + data[e:], f"segment at {s}..{e} duplicated"
        if op == 2:
            s2, e2 = rng.choice(segs)
            if s2 > e:
                return data[:s] + data[s2:e2] + data[e:s2] + data[s:e] + data[e2:], f"segments {s} and {s2} swapped"
        new = rng.choice(
            [
                b"\xff\xfe\x00\x06fuzz",
                b"\xff\xdd\x00\x04" + struct.pack(">H", rng.randrange(4)),
                bytes([0xFF, 0xD0 + rng.randrange(8)]),
                b"\xff\xe1\x00\x08Exif\0\0",
                b"\xff\xd9",
                b"\xff\xd8",
            ]
        )
        return data[:s] + new + data[s:], f"{new.hex()} inserted at {s}"
    if kind == "field" and heads:
        # SOF dims / components / sampling, DQT / DHT / SOS / DRI fields: one byte changed
        s, e = rng.choice(heads)
        at = rng.randrange(s + 4, e) if e > s + 4 else s + 1
        old = b[at]
        b[at] = rng.choice([0, 1, 2, 3, 4, 0x11, 0x22, 0x44, 0xFF, rng.randrange(256), (old + 1) % 256, (old - 1) % 256])
        return bytes(b), f"marker {data[s + 1]:02x} byte {at - s} {old} -> {b[at]}"
    if kind == "scan" and scans:
        s, e = rng.choice(scans)
        at = rng.randrange(s, e + 1)
        new = rng.choice([b"\xff\x00", bytes([0xFF, 0xD0 + rng.randrange(8)]), b"\xff", b"\x00" * 4, b"\xff\xff"])
        return data[:at] + new + data[at:], f"{new.hex()} inserted in scan data at {at}"
    if kind == "tail":
        op = rng.randrange(3)
        if op == 0 and data.endswith(b"\xff\xd9"):
            return data[:-2], "EOI removed"
        tail = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
        return (data + b"\xff\xd9" if op == 1 else data + tail), "bytes after EOI"
    return data[:-1], "truncated by one byte"


# -- the differential loop ---------------------------------------------------------------

MAKERS: dict[str, tuple[Callable[[random.Random], list[tuple[str, bytes]]], Callable[[random.Random, bytes], tuple[bytes, str]]]] = {
    "PNG": (png_corpus, png_mutation),
    "JPEG": (jpeg_corpus, jpeg_mutation),
}
_corpora: dict[tuple[int, str], list[tuple[str, bytes]]] = {}


def corpus(seed: int, fmt: str) -> list[tuple[str, bytes]]:
    key = (seed, fmt)
    if key not in _corpora:
        _corpora[key] = MAKERS[fmt][0](random.Random(f"{seed}:{fmt}:corpus"))
    return _corpora[key]


def case(seed: int, fmt: str, index: int) -> tuple[bytes, str]:
    """Mutated file ``index`` of the seed and format, and what was done to it."""
    rng = random.Random(f"{seed}:{fmt}:{index}")
    files = corpus(seed, fmt)
    name, data = files[rng.randrange(len(files))]
    steps = [name]
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        data, what = MAKERS[fmt][1](rng, data)
        steps.append(what)
    return data, " | ".join(steps)


_paths: dict[str, Any] = {}


def decode_paths() -> dict[str, Any]:
    """``native_decode._paths`` as the self-check leaves it (``auto``) and as
    ``KIMI_K3_RS_DECODE=pillow`` sets it, each made once by the package's own
    mechanism (the variable read when ``_paths`` is unset)."""
    if not _paths:
        saved = os.environ.pop(native_decode.DECODE_ENV, None)
        try:
            for mode in ("pillow", "auto"):
                os.environ[native_decode.DECODE_ENV] = mode
                native_decode._paths = None
                kimi_k3_rs.decode_path()
                _paths[mode] = native_decode._paths
        finally:
            os.environ.pop(native_decode.DECODE_ENV, None)
            if saved is not None:
                os.environ[native_decode.DECODE_ENV] = saved
        native_decode._paths = _paths["auto"]
        assert all(native for native, _ in _paths["auto"].values()), _paths["auto"]
    return _paths


@contextlib.contextmanager
def decoding(mode: str) -> Iterator[None]:
    saved = native_decode._paths
    native_decode._paths = decode_paths()[mode]
    try:
        yield
    finally:
        native_decode._paths = saved


def attempt(fn: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """fn()'s value, or what it raised; warnings (Pillow's EXIF / bomb warnings, which
    the checkpoint's code does not turn into errors either) ignored."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(), None
    except Exception as e:  # noqa: BLE001 - any failure is compared below
        return None, e


def reference_outputs(data: bytes, cfg: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    limit = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = LIMIT // 2  # Pillow raises above twice this
    try:
        return reference.reference_preprocess_one(data, cfg)
    finally:
        Image.MAX_IMAGE_PIXELS = limit


def package_outputs(data: bytes, cfg: dict[str, Any], mode: str) -> tuple[np.ndarray, np.ndarray]:
    with decoding(mode):
        out = kimi_k3_rs.preprocess(data, cfg, max_image_pixels=LIMIT)
    return out["pixel_values"], out["grid_thws"][0]


def reference_pixels(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        return np.asarray(im)


def native_pixels(data: bytes) -> np.ndarray:
    kind, pixels = _native.decode_image(data)
    assert kind == "native", (kind, pixels)
    return pixels


def same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def shown(value: Any, error: BaseException | None) -> str:
    if error is not None:
        return f"error {type(error).__name__}: {str(error)[:160]}"
    return "ok"


def route_of(data: bytes) -> str:
    """Where the package decodes ``data``: native, pillow, or error (refused from its
    headers); ``native`` only up to ``LIMIT`` pixels (``_native.decode_image`` has no
    limit of its own)."""
    try:
        routed = _native.route_encoded(data)
    except kimi_k3_rs.ImageError:
        return "error"
    if not isinstance(routed, _native.EncodedImage):
        return "pillow"
    return "native" if routed.size[0] * routed.size[1] <= LIMIT else "native, over the limit"


#: Pillow's messages for a failure in the image data (``ImageFile.load``, and its chunk
#: reader once the ``IDAT`` run is used up), which a native decode gives too.
DATA_ERRORS = (
    "image file is truncated",
    "broken data stream when reading image file",
    "unrecognized data stream contents when reading image file",
    "broken PNG file (chunk ",
)


def pillows_message(error: BaseException, want: BaseException) -> bool:
    """Whether the package's ``error`` for image 0 is Pillow's failure ``want`` (the
    reference's): from the Pillow path ``cannot read or decode it: <Pillow's exception>``,
    the object repr of ``cannot identify image file <...>`` left out, as the package's
    ``errors.unreadable`` shows it; from a native decode ``cannot decode <format>:
    <Pillow's message>`` for a failure in the image data, less the count of bytes left
    in "image file is truncated (N bytes not processed)". A bound of the package's
    (``ImageTooLargeError``) has a message of its own."""
    if isinstance(error, kimi_k3_rs.ImageTooLargeError):
        return True
    if isinstance(want, UnidentifiedImageError):
        want = errors.unidentified()
    text = str(error).removeprefix("image 0: ")
    native = re.sub("^cannot decode (JPEG|PNG): ", "", text)
    if native != text:
        return native.startswith(DATA_ERRORS) and str(want).startswith(native)
    return text == str(errors.unreadable(want))


def differential(data: bytes, cfg: dict[str, Any]) -> tuple[str, str, str | None]:
    """(route, outcome, disagreement): outcome ``ok`` (all three equal), ``error`` (all
    raise, the package with Pillow's message: :func:`pillows_message`) or ``limit`` (the
    reference decodes, both package routes refuse with an ``ImageTooLargeError``: a
    bound the package sets on purpose); the disagreement says what differs, None when
    nothing does."""
    route = route_of(data)
    ref = attempt(lambda: reference_outputs(data, cfg))
    runs = {"native route": attempt(lambda: package_outputs(data, cfg, "auto")),
            "forced to Pillow": attempt(lambda: package_outputs(data, cfg, "pillow"))}
    limit = ref[1] is None and all(isinstance(e, kimi_k3_rs.ImageTooLargeError) for _, e in runs.values())
    if route == "native" and not limit:
        runs["decoded pixels"] = attempt(lambda: native_pixels(data))
    bad = []
    for name, (value, error) in runs.items():
        want_value, want_error = attempt(lambda: reference_pixels(data)) if name == "decoded pixels" else ref
        if limit or ((error is None) == (want_error is None) and (error is not None or same(value, want_value))):
            if error is not None and want_error is not None and name != "decoded pixels" and not pillows_message(error, want_error):
                bad.append(f"{name}: {shown(None, error)}, reference: {shown(None, want_error)} (messages differ)")
            continue
        bad.append(f"{name}: {shown(value, error)}, reference: {shown(want_value, want_error)}"
                   + (" (values differ)" if error is None and want_error is None else ""))
    outcome = "limit" if limit else "ok" if ref[1] is None else "error"
    return route.split(",")[0], outcome, "; ".join(bad) or None


def run(seed: int, fmt: str, indices: Iterator[int], table: Counter[tuple[str, str, str]]) -> list[str]:
    """Differential cases ``indices`` of ``fmt``; counts go to ``table``
    ((format, route, outcome) -> files), disagreements are returned as messages."""
    failures = []
    for i in indices:
        data, steps = case(seed, fmt, i)
        try:
            route, outcome, bad = differential(data, CONFIGS[i % len(CONFIGS)])
        except BaseException as exc:  # a Rust panic (pyo3's PanicException) is a finding too
            if type(exc).__name__ != "PanicException":
                raise
            route, outcome, bad = "?", "panic", f"panicked: {exc}"
        table[(fmt, route, "disagree" if bad else outcome)] += 1
        if bad:
            failures.append(f"seed {seed} case {fmt}:{i} [{steps}]: {bad}")
    return failures


def format_table(table: Counter[tuple[str, str, str]], seed: int, seconds: float) -> str:
    outcomes = ("ok", "error", "limit", "disagree")
    lines = [f"decoder differential, seed {seed}, {seconds:.1f} s (route: where the package decodes the file)",
             f"{'format':6} {'route':8} {'both ok, equal':>15} {'both error':>11} {'limit':>6} {'disagree':>9} {'files':>7}"]
    for fmt in FORMATS:
        for route in ("native", "pillow", "error", "all"):
            row = [sum(n for (f, r, o), n in table.items() if f == fmt and route in (r, "all") and o == want)
                   for want in outcomes]
            if sum(row):
                lines.append(f"{fmt:6} {route:8} {row[0]:>15} {row[1]:>11} {row[2]:>6} {row[3]:>9} {sum(row):>7}")
    return "\n".join(lines)


# -- the tests ---------------------------------------------------------------------------

_table: Counter[tuple[str, str, str]] = Counter()


@pytest.fixture(scope="module", autouse=True)
def outcome_table() -> Iterator[Counter[tuple[str, str, str]]]:
    start = time.perf_counter()
    yield _table
    print("\n" + format_table(_table, SEED, time.perf_counter() - start))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_native_route_and_pillow_route_fail_and_succeed_as_the_reference(fmt: str) -> None:
    decode_paths()
    failures = run(SEED, fmt, iter(range(CASES)), _table)
    assert not failures, f"{len(failures)} of {CASES} files disagree:\n" + "\n".join(failures[:20])
    counts = {(r, o): n for (f, r, o), n in _table.items() if f == fmt}
    # The net reaches the native decoder both ways: files it decodes and files it refuses.
    assert counts.get(("native", "ok"), 0) >= CASES // 10, counts
    assert counts.get(("native", "error"), 0) + counts.get(("error", "error"), 0) >= CASES // 10, counts


def main() -> None:
    parser = argparse.ArgumentParser(description="Differential fuzzing of the native decoders against Pillow.")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to run (both formats, alternating)")
    parser.add_argument("--seed", type=int, default=None, help="default: a new one (printed)")
    parser.add_argument("--case", help="FORMAT:INDEX, one case only: run it and print it")
    parser.add_argument("--write", help="with --case: write the mutated file here")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print(f"seed {seed}", flush=True)
    decode_paths()
    _native._set_poison(True)  # as the test suite runs (tests/conftest.py)
    if args.case:
        fmt, index = args.case.split(":")
        data, steps = case(seed, fmt, int(index))
        if args.write:
            Path(args.write).write_bytes(data)
        print(steps)
        print(differential(data, CONFIGS[int(index) % len(CONFIGS)]))
        return
    table: Counter[tuple[str, str, str]] = Counter()
    start, index, failures = time.perf_counter(), 0, []
    while time.perf_counter() - start < args.seconds:
        for fmt in FORMATS:
            failures += run(seed, fmt, iter(range(index, index + 100)), table)
        index += 100
    print("\n".join(failures[:50]))
    print(format_table(table, seed, time.perf_counter() - start))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
