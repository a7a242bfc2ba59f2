"""The ``kimi-k3-rs`` command line: preprocess image files and folders, print one line per image.

``kimi-k3-rs preprocess [PATH ...] [--preset kimi-k3|kimi-k2.5 | --config FILE_OR_FOLDER]
[--pillow-compat auto|12|13] [--exif-transpose] [--dtype float32|bfloat16|float16]
[--batch-size 16] [--num-threads N] [--output OUT.npz | --output DIR --format parquet
[--shard-size 1000]] [--ray [--ray-address ADDRESS]]``

With no path it runs on the photograph shipped in the package (``data/rocket.jpg``,
NASA, public domain). A folder stands for the image files under it, recursively
(extensions Pillow reads, case-insensitive, sorted; symlinks leading out of the folder
are not followed). A file that cannot be read gets a one-line error on stderr naming
it, the others are still processed (and written), and the exit status is 1; a path
that is not a regular file (a FIFO, a socket, a device) is skipped the same way, never
opened, and so is a folder under which no image file is found. ``--format`` needs
``--output`` and ``--shard-size`` needs ``--format parquet``: given without, they are
refused as bad arguments (status 2), not ignored. The npz holds ``pixel_values``,
``grid_thws``, ``paths`` and ``dtype`` (the dtype's name: bfloat16 is stored as its
``uint16`` bits); :func:`load_npz` reads it back. Files are decoded as the checkpoint
decodes them (Pillow, first frame, no EXIF rotation unless ``--exif-transpose`` is
given; the printed size then follows the orientation). Paths are printed with
backslash escapes (:func:`_shown`), so that every image is one line.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import secrets
import sys
import textwrap
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, BinaryIO

import numpy as np
from PIL import Image

from . import _files, errors
from ._input import from_native
from ._native import __version__
from .arrow import (
    _STORAGE,
    _check,
    _compute_rows,
    _pyarrow,
    _Rows,
    _to_table,
    arrow_schema,
)
from .config import kimi_k3_media_proc_cfg, kimi_k25_media_proc_cfg, load_media_proc_cfg

_PRESETS = {"kimi-k3": kimi_k3_media_proc_cfg, "kimi-k2.5": kimi_k25_media_proc_cfg}


def default_image_path() -> str:
    """Path of the embedded default photograph (``rocket.jpg``, 640x427 JPEG)."""
    return str(resources.files("kimi_k3_rs") / "data" / "rocket.jpg")


def image_extensions() -> frozenset[str]:
    """The lower-case file extensions (with the dot) of the formats the installed Pillow
    opens (``PIL.Image.registered_extensions()``), e.g. ``".jpg"``, ``".png"``."""
    return frozenset(ext.lower() for ext, fmt in Image.registered_extensions().items() if fmt in Image.OPEN)


def find_images(path: str) -> list[str]:
    """The image files a ``PATH`` argument stands for.

    A folder gives the files under it, recursively, whose extension (case-insensitive)
    is one of :func:`image_extensions`, sorted by path; symlinked folders are not
    entered and a symlinked file is kept only when it resolves inside the folder. Any
    other path (a file, or a missing one) is returned as it is.
    """
    if not os.path.isdir(path):
        return [path]
    root = os.path.realpath(path)
    extensions = image_extensions()
    found: list[str] = []
    for folder, _dirs, names in os.walk(path, followlinks=False):
        for name in names:
            full = os.path.join(folder, name)
            if os.path.splitext(name)[1].lower() not in extensions:
                continue
            if os.path.islink(full) and os.path.commonpath([root, os.path.realpath(full)]) != root:
                continue
            found.append(full)
    return sorted(found)


#: What :func:`_shown` writes for the characters that would break a line or a field.
_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _shown(path: str) -> str:
    r"""``path`` as the command line prints it: on one line, every byte of the name told.

    Backslash escapes, as in a Python string literal: ``\\`` for a backslash, ``\n``,
    ``\r``, ``\t``, ``\xNN`` / ``\uNNNN`` / ``\UNNNNNNNN`` for any other character
    that is not printable (``str.isprintable``: control and format characters,
    separators other than the space), and ``\xNN`` for a byte of the name that is not
    UTF-8 (``os.fsdecode`` gives it as a lone surrogate). Other characters, spaces and
    non-ASCII letters included, are printed as they are; a name without any of these
    is printed unchanged.
    """
    out = []
    for ch in path:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif "\udc80" <= ch <= "\udcff":  # os.fsdecode's escape of a byte that is not UTF-8
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(repr(ch)[1:-1])
    return "".join(out)


def _not_readable(path: str, arrow: bool) -> str | None:
    """Why the job skips ``path`` without opening it (None: it is read).

    A path that is not a regular file (after symlinks; ``os.stat``, which opens nothing):
    reading a FIFO would wait for a writer, a device could be endless. With ``arrow``
    (Parquet or Ray), a name that is not UTF-8, which an Arrow ``string`` column cannot
    hold. A path that cannot be ``stat``-ed (missing) is read, and fails there with
    the library's message.
    """
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        mode = None
    kind = None if mode is None else _files.irregular_kind(mode)
    if kind is not None:
        return f"not a regular file ({kind}); skipped"
    if arrow:
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            return "the name is not UTF-8, which the path column (an Arrow string) cannot hold; skipped"
    return None


#: Why a ``PATH`` folder under which :func:`find_images` found nothing gives no image.
_NO_IMAGES = ("no image files found under this folder (searched recursively, symlinked folders not entered, "
              "for the extensions the installed Pillow opens, such as .jpg and .png, in any case)")


def _inputs(args: Sequence[str], arrow: bool) -> Iterator[tuple[str, str | None]]:
    """The files the ``PATH`` arguments ``args`` stand for (:func:`find_images`), in
    order, each with None when it is to be read, else why it is skipped
    (:func:`_not_readable`); a folder under which no image file is found comes as
    itself with why (``_NO_IMAGES``), so that it is never a silent no-op."""
    for arg in args:
        found = find_images(arg)
        if not found:
            yield arg, _NO_IMAGES
        for path in found:
            yield path, _not_readable(path, arrow)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {errors.abbreviate(text)}")
    return value


#: ``kimi-k3-rs --help``'s description (plain text, as every help text of the command).
_DESCRIPTION = "Preprocess image files and folders as the Kimi-K3 / K2.5 checkpoint does;\nprint one line per image."

#: ``kimi-k3-rs preprocess --help``'s text after the options (plain text, kept as written).
_EPILOG = """\
A folder stands for the image files under it, recursively (the extensions the
installed Pillow opens, in any case), sorted; with no PATH, the embedded photo.

--output OUT.npz writes the arrays pixel_values, grid_thws, paths and dtype (the
name of pixel_values' dtype; bfloat16 is stored as its uint16 bits); read it
back with kimi_k3_rs.cli.load_npz(path). --output DIR --format parquet writes
DIR/part-00000.parquet, ... of --shard-size images each.

Exit status: 0 when every image was processed; 1 when a file could not be read
or was skipped, a folder held no image file, or the output could not be written
(one line on stderr each); 2 for bad arguments, a bad config, or an --output
that cannot be written."""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's help layout, the description and epilog kept as written, and option
    help wrapped between words only (never inside ``--ray-address`` at its hyphen)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The command's parser and its ``preprocess`` subcommand's parser."""
    parser = argparse.ArgumentParser(prog="kimi-k3-rs", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"kimi-k3-rs {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("preprocess", help="preprocess image files like the Kimi-K3 / K2.5 checkpoint",
                       description=_DESCRIPTION, epilog=_EPILOG, formatter_class=_HelpFormatter)
    p.add_argument("paths", nargs="*", metavar="PATH", help="image files or folders (default: the embedded photo)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--preset", choices=sorted(_PRESETS), default="kimi-k3", help="published config (default kimi-k3)")
    group.add_argument("--config", metavar="FILE_OR_FOLDER", help="preprocessor_config.json or a checkpoint folder")
    p.add_argument("--pillow-compat", choices=["auto", "12", "12.2", "13"], default="auto", help="resize pass order (default: installed Pillow)")
    p.add_argument(
        "--exif-transpose",
        action="store_true",
        help="apply the EXIF orientation before preprocessing (the checkpoint does not)",
    )
    p.add_argument("--dtype", choices=sorted(_STORAGE), default="float32", help="pixel_values dtype (default float32)")
    p.add_argument(
        "--output",
        metavar="OUT.npz|DIR",
        help="npz: this file (its name must end in .npz); parquet: this folder (new or empty)",
    )
    p.add_argument("--format", choices=["npz", "parquet"], help="what --output writes (default npz; needs --output)")
    p.add_argument("--shard-size", type=_positive, metavar="N",
                   help="images per Parquet file (default 1000; needs --format parquet)")
    p.add_argument("--batch-size", type=_positive, default=16, metavar="N", help="images per native call (default 16)")
    p.add_argument("--num-threads", type=_positive, default=None, metavar="N", help="threads of each call (default 1)")
    p.add_argument(
        "--ray",
        action="store_true",
        help="run the job on Ray Data (on a new local cluster unless --ray-address or $RAY_ADDRESS names one)",
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        default=None,
        help="an existing Ray cluster (default: $RAY_ADDRESS, else a new local one); implies --ray",
    )
    return parser, p


#: The options that act only together with another, each refused without it (argparse
#: gives no such rule): (its ``dest``, its flag, whether ``args`` hold what it needs,
#: what it needs). Their defaults (None: not given) are set by :func:`_parse_args`.
_NEEDS: tuple[tuple[str, str, Callable[[argparse.Namespace], bool], str], ...] = (
    ("format", "--format", lambda args: args.output is not None, "--output"),
    ("shard_size", "--shard-size", lambda args: args.format == "parquet", "--format parquet"),
)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments of :func:`main`, parsed; an option given without the one it needs
    (:data:`_NEEDS`) exits as argparse does for a bad argument (usage and one error
    line on stderr, status 2) instead of being ignored."""
    parser, preprocess = _parser()
    args = parser.parse_args(argv)
    for dest, flag, satisfied, needed in _NEEDS:
        if getattr(args, dest) is not None and not satisfied(args):
            preprocess.error(f"argument {flag}: not allowed without {needed}")
    args.format = args.format or "npz"
    args.shard_size = args.shard_size or 1000
    return args


def _check_output(output: str, fmt: str) -> None:
    """Refuse an ``--output`` that cannot be written, before any image is read.

    Raises:
        ValueError: npz: the name does not end in ``.npz``, it is a folder, or its
            folder does not exist; parquet: it exists and is not an empty folder, or
            its parent folder does not exist.
    """
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise errors.bad_output(output, f"folder {parent} does not exist")
    if fmt == "npz":
        if not output.endswith(".npz"):
            raise errors.bad_output(output, "an npz file name must end in .npz")
        if os.path.isdir(output):
            raise errors.bad_output(output, "is a folder")
    elif os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
        raise errors.bad_output(output, "must be a new or an empty folder for --format parquet")


@dataclass
class _Done:
    """One processed image: what its line prints and what the output keeps."""

    path: str
    message: str | None
    size: tuple[int, int] | None
    resize: dict[str, int] | None
    grid: tuple[int, ...] | None
    pixels: np.ndarray | None
    ms: float


def _create(folder: str, name: str | None = None) -> tuple[str, BinaryIO]:
    """A new file in ``folder``, open for writing: ``(its path, the file)``.

    Created as a plain ``open(path, "w")`` creates a file (mode ``0o666`` less the
    umask), but never over an existing one (``O_EXCL``). ``name``: its name; None: a
    hidden temporary name of its own (``.kimi-k3-rs-<random>.tmp``).

    Raises:
        OSError: the file cannot be created there (a folder that cannot be written,
            ``/proc``, a read-only file system, ...).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    while True:
        path = os.path.join(folder, name or f".kimi-k3-rs-{secrets.token_hex(8)}.tmp")
        try:
            fd = os.open(path, flags, 0o666)
        except FileExistsError:
            if name is not None:
                raise
            continue  # another temporary name
        return path, os.fdopen(fd, "wb")


class _NpzSink:
    """Collects the good images, then writes one ``.npz`` (the entries
    :func:`load_npz` reads) atomically: into a temporary
    file created in the output's folder when the sink is made (before any image is
    read, so an output that cannot be written is refused up front), then
    ``os.replace``-d onto the output."""

    def __init__(self, path: str, ps: int, dtype: str) -> None:
        self.path, self.ps, self.dtype = path, ps, dtype
        self.pixels: list[np.ndarray] = []
        self.grids: list[tuple[int, ...]] = []
        self.paths: list[str] = []
        self.tmp, self.file = _create(os.path.dirname(os.path.abspath(path)))

    def add(self, done: Sequence[_Done], table: Any) -> None:
        for d in done:
            if d.pixels is not None and d.grid is not None:
                self.pixels.append(d.pixels)
                self.grids.append(d.grid)
                self.paths.append(d.path)

    def close(self) -> None:
        """Write the file (the temporary file is removed if that fails)."""
        storage = _STORAGE[self.dtype]
        pixel_values = np.concatenate(self.pixels) if self.pixels else np.zeros((0, 3, self.ps, self.ps), storage)
        grid_thws = np.array(self.grids, np.int64).reshape(-1, 3)
        try:
            with self.file:
                np.savez(self.file, pixel_values=pixel_values, grid_thws=grid_thws,
                         paths=np.array(self.paths, dtype=str), dtype=np.array(self.dtype))
            os.replace(self.tmp, self.path)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Remove the temporary file (nothing is written)."""
        self.file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp)


def load_npz(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read back the ``.npz`` that ``kimi-k3-rs preprocess --output OUT.npz`` writes.

    The archive holds ``pixel_values`` (float32, float16, or bfloat16 stored as its
    ``uint16`` bit patterns, since numpy has no bfloat16), ``grid_thws``, ``paths``
    and ``dtype``, a 0-d string array naming pixel_values' dtype (``"float32"``,
    ``"float16"`` or ``"bfloat16"``), which is what tells bfloat16 bits from
    integers. The file is read with ``allow_pickle=False`` and closed on return.

    Args:
        path: the ``.npz`` file.

    Returns:
        ``{"pixel_values", "grid_thws", "paths", "dtype"}``: ``pixel_values``
        ``[n_patches, 3, ps, ps]`` as :func:`kimi_k3_rs.preprocess` gives it for that
        dtype: float32, float16, or ``ml_dtypes.bfloat16`` when ml_dtypes is installed
        (else the ``uint16`` bits; ``a.view(np.uint16).astype(np.uint32) << 16`` viewed
        as float32 widens them exactly, and
        ``torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)`` makes the tensor
        a model takes); ``grid_thws`` int64 ``[n_images, 3]`` (t, h, w in patches,
        ``pixel_values`` holding ``t * h * w`` patches per image, in order);
        ``paths`` a list of the ``n_images`` paths as given or found (str);
        ``dtype`` the dtype's name (str).

    Raises:
        OSError: the file cannot be read.
        ValueError: naming the file: it is not an npz archive; an entry is missing;
            ``dtype`` is not one of the three names, or ``pixel_values`` is not stored
            as that dtype is (float32, float16, uint16); the shapes do not agree
            (``pixel_values`` not ``[n, 3, ps, ps]``, ``grid_thws`` not int64
            ``[m, 3]``, ``m`` paths, ``n`` the sum of the grids' products).

    Example (``main`` runs ``kimi-k3-rs preprocess --dtype bfloat16 --output OUT.npz``):
        >>> import os, tempfile
        >>> from kimi_k3_rs.cli import load_npz, main
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     out = os.path.join(folder, "rocket.npz")
        ...     status = main(["preprocess", "--dtype", "bfloat16", "--output", out])
        ...     archive = load_npz(out)  # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
        /...rocket.jpg 640x427 -> 640x427 (padded 644x448) grid 1x32x46 368 tokens ... ms
        >>> status, archive["dtype"], archive["pixel_values"].shape, archive["grid_thws"].tolist()
        (0, 'bfloat16', (1472, 3, 14, 14), [[1, 32, 46]])
    """
    name = os.fspath(path)

    def bad(why: str) -> ValueError:
        return ValueError(f"{errors.abbreviate(name, quote=False)}: {why}")

    keys = ("pixel_values", "grid_thws", "paths", "dtype")
    try:
        archive = np.load(name, allow_pickle=False)
        if isinstance(archive, np.lib.npyio.NpzFile):
            with archive:
                entries = {k: archive[k] for k in keys if k in archive.files}
    except (ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise bad("not an npz archive of arrays") from exc
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise bad("not an npz archive (a single .npy array)")
    missing = [k for k in keys if k not in entries]
    if missing:
        raise bad(f"no {', '.join(missing)} entry (kimi-k3-rs preprocess --output OUT.npz writes {', '.join(keys)})")
    pixel_values, grid_thws, paths, dtype = (entries[k] for k in keys)
    name_of_dtype = str(dtype) if dtype.ndim == 0 and dtype.dtype.kind == "U" else None
    if name_of_dtype not in _STORAGE:
        got = errors.abbreviate(dtype.item() if dtype.ndim == 0 else dtype)
        raise bad(f"dtype must be a 0-d string array 'float32', 'float16' or 'bfloat16', got {got}")
    if pixel_values.dtype != _STORAGE[name_of_dtype]:
        raise bad(f"pixel_values of {name_of_dtype} must be stored as {np.dtype(_STORAGE[name_of_dtype])}, "
                  f"not {pixel_values.dtype}")
    if (pixel_values.ndim != 4 or pixel_values.shape[1] != 3 or pixel_values.shape[2] != pixel_values.shape[3]
            or grid_thws.dtype != np.int64 or grid_thws.ndim != 2 or grid_thws.shape[1] != 3
            or paths.shape != (len(grid_thws),) or int(np.prod(grid_thws, axis=1).sum()) != len(pixel_values)):
        raise bad(f"shapes do not agree: pixel_values {pixel_values.dtype}{list(pixel_values.shape)}, "
                  f"grid_thws {grid_thws.dtype}{list(grid_thws.shape)}, paths {list(paths.shape)}")
    return {
        "pixel_values": from_native(pixel_values, name_of_dtype),
        "grid_thws": grid_thws,
        "paths": [str(p) for p in paths.tolist()],
        "dtype": name_of_dtype,
    }


class _ParquetSink:
    """Writes shards ``part-00000.parquet``, ... of ``shard_size`` rows (failed images
    included, with their ``error``), each written to a hidden temp name and renamed.
    The folder and the first shard's temporary file are created when the sink is made
    (before any image is read, so an output that cannot be written is refused up front)."""

    def __init__(self, folder: str, shard_size: int) -> None:
        self.folder, self.shard_size = folder, shard_size
        self.tables: list[Any] = []
        self.rows = 0
        self.shards = 0
        os.makedirs(folder, exist_ok=True)
        self.next: tuple[str, BinaryIO] | None = _create(folder, self._name(0, tmp=True))

    @staticmethod
    def _name(shard: int, tmp: bool = False) -> str:
        return f".part-{shard:05d}.parquet.tmp" if tmp else f"part-{shard:05d}.parquet"

    def add(self, done: Sequence[_Done], table: Any) -> None:
        self.tables.append(table)
        self.rows += table.num_rows
        while self.rows >= self.shard_size:
            self._write(self.shard_size)

    def _write(self, rows: int) -> None:
        pa = _pyarrow()
        import pyarrow.parquet as pq

        table = pa.concat_tables(self.tables)
        shard, rest = table.slice(0, rows), table.slice(rows)
        tmp, file = self.next or _create(self.folder, self._name(self.shards, tmp=True))
        self.next = None
        try:
            with file:
                pq.write_table(shard, file)
            os.replace(tmp, os.path.join(self.folder, self._name(self.shards)))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        self.shards += 1
        self.tables, self.rows = ([rest] if rest.num_rows else []), rest.num_rows

    def close(self) -> None:
        """Write the last shard (an empty one when there was no image)."""
        if self.rows or not self.shards:
            self._write(self.rows)
        self.abort()

    def abort(self) -> None:
        """Remove the temporary file made ahead, if any (the shards written stay)."""
        if self.next is not None:
            tmp, file = self.next
            self.next = None
            file.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def _local_batches(paths: Sequence[str], cfg: dict[str, Any], options: dict[str, Any], batch_size: int,
                   parquet: bool, ps: int) -> Iterator[tuple[list[_Done], Any]]:
    """Each batch of ``paths`` in one native call (image by image where one fails)."""
    schema = None
    for start in range(0, len(paths), batch_size):
        chunk = list(paths[start : start + batch_size])
        t0 = time.perf_counter()
        rows = _compute_rows(chunk, cfg, options, "null")
        ms = (time.perf_counter() - t0) * 1e3 / len(chunk)
        table = None
        if parquet:
            pa = _pyarrow()
            schema = schema or arrow_schema(options["dtype"], ps, [pa.field("path", pa.string())])
            table = _to_table(pa, rows, schema, [pa.array(chunk, pa.string())], ps)
        yield _done_of(chunk, rows, ps, ms), table


def _done_of(chunk: Sequence[str], rows: _Rows, ps: int, ms: float) -> list[_Done]:
    offsets = rows.offsets(1) // 3
    flat = rows.flat.reshape(-1, 3, ps, ps)
    return [
        _Done(
            path=path,
            message=rows.messages[i],
            size=rows.sizes[i],
            resize=rows.resizes[i],
            grid=None if rows.grids[i] is None else tuple(int(v) for v in rows.grids[i]),
            pixels=None if rows.messages[i] is not None else flat[offsets[i] : offsets[i + 1]],
            ms=ms,
        )
        for i, path in enumerate(chunk)
    ]


def _ray_batches(paths: Sequence[str], cfg: dict[str, Any], options: dict[str, Any], batch_size: int,
                 address: str | None, ps: int) -> Iterator[tuple[list[_Done], Any]]:
    """The same job through :func:`kimi_k3_rs.ray.preprocess_dataset` (order kept)."""
    from .arrow import pixel_values_from_arrow
    from .ray import _ray, preprocess_dataset

    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    ds = ray.data.from_items([{"path": p} for p in paths])
    out = preprocess_dataset(ds, cfg, column="path", batch_size=batch_size, on_error="null", **options)
    t0 = time.perf_counter()
    for table in out.iter_batches(batch_size=batch_size, batch_format="pyarrow"):
        ms = (time.perf_counter() - t0) * 1e3 / max(1, table.num_rows)
        t0 = time.perf_counter()
        pixels = pixel_values_from_arrow(table)
        chunk = table.column("path").to_pylist()
        sizing = _compute_sizing(chunk, cfg, options)
        done = []
        for i, path in enumerate(chunk):
            message = table.column("error")[i].as_py()
            grid = table.column("grid_thw")[i].as_py()
            size, resize = sizing[i]
            done.append(_Done(path, message, size, resize, None if grid is None else tuple(grid), pixels[i], ms))
        yield done, table


def _compute_sizing(chunk: Sequence[str], cfg: dict[str, Any], options: dict[str, Any]) -> list[tuple[Any, Any]]:
    """(original size, sizing dict) of each path, read from the headers (None where unreadable)."""
    from .deferred import prepare_kimi_k3_encoder_inputs

    sizing_options = {k: v for k, v in options.items() if k in ("exif_transpose", "pillow_compat")}
    result: list[tuple[Any, Any]] = []
    for path in chunk:
        try:
            enc = prepare_kimi_k3_encoder_inputs([path], cfg, **sizing_options)
        except (ValueError, OSError):
            result.append((None, None))
            continue
        w, h = enc.original_image_sizes[0]
        result.append(((w, h), enc.resize_configs[0]))
    return result


def _line(d: _Done) -> str:
    assert d.grid is not None
    t, h, w = d.grid
    head = _shown(d.path)
    if d.size is not None and d.resize is not None:
        r = d.resize
        head += (
            f"\t{d.size[0]}x{d.size[1]} -> {r['new_width']}x{r['new_height']}"
            f" (padded {r['new_width'] + r['pad_width']}x{r['new_height'] + r['pad_height']})"
        )
    tokens = d.resize["num_tokens"] if d.resize is not None else None
    tail = "" if tokens is None else f"\t{tokens} token{'' if tokens == 1 else 's'}"
    return f"{head}\tgrid {t}x{h}x{w}{tail}\t{d.ms:.1f} ms"


def _printer(total: int) -> tuple[Callable[[str, bool], None], Callable[[int], None], Callable[[], None]]:
    """(write a line to stdout or stderr, advance the bar, close): a tqdm bar on stderr
    when stderr is a terminal, plain flushed lines otherwise."""
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=total, file=sys.stderr, unit="image", dynamic_ncols=True)

        def write(text: str, error: bool) -> None:
            bar.write(text, file=sys.stderr if error else sys.stdout)

        return write, bar.update, bar.close

    def plain(text: str, error: bool) -> None:
        print(text, file=sys.stderr if error else sys.stdout, flush=True)

    return plain, lambda n: None, lambda: None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    0 when every image was processed; 1 when an image could not be read or was
    skipped (not a regular file, or a folder under which no image file is found; the
    others are still processed and written) or the output could not be written; 2 for
    bad arguments: argparse's (usage and an error line; among them an option given
    without the one it needs, :data:`_NEEDS`), a bad config (missing file, not a
    regular file, too large, no ``media_proc_cfg``, bad values) or an ``--output`` that
    cannot be written (its file, or folder, is created before any image is read). Every
    other error is one line on stderr, ``kimi-k3-rs: <what>: <why>``, naming the file
    (paths escaped, :func:`_shown`).
    """
    args = _parse_args(argv)
    try:
        media_proc_cfg: Any = load_media_proc_cfg(args.config) if args.config else _PRESETS[args.preset]()
        options: dict[str, Any] = {
            "pillow_compat": args.pillow_compat,
            "exif_transpose": args.exif_transpose,
            "dtype": args.dtype,
            "num_threads": args.num_threads,
        }
        cfg, ps, _ = _check(media_proc_cfg, "null", options)
    except (OSError, ValueError, TypeError) as exc:
        print(f"kimi-k3-rs: config {_shown(args.config or args.preset)}: {exc}", file=sys.stderr)
        return 2
    use_ray = args.ray or args.ray_address is not None
    parquet = args.format == "parquet"
    try:
        if args.output is not None:
            _check_output(args.output, args.format)
        if args.format == "parquet" or use_ray:
            _pyarrow()
        if use_ray:
            from .ray import _ray

            if not (args.ray_address or os.environ.get("RAY_ADDRESS")):
                # A new local cluster: its servers listen on the loopback interface only
                # (read when Ray is imported; without it Ray binds the node's reachable IP).
                os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
            _ray()
    except (ValueError, ImportError) as exc:
        print(f"kimi-k3-rs: {exc}", file=sys.stderr)
        return 2
    sink: _NpzSink | _ParquetSink | None = None
    if args.output is not None:
        try:
            sink = _NpzSink(args.output, ps, args.dtype) if args.format == "npz" else _ParquetSink(args.output, args.shard_size)
        except OSError as exc:
            print(f"kimi-k3-rs: {errors.bad_output(args.output, f'cannot be written: {exc.strerror or exc}')}",
                  file=sys.stderr)
            return 2
    try:
        return _job(args, cfg, options, ps, use_ray, parquet, sink)
    except BaseException:
        if sink is not None:
            sink.abort()
        raise


def _job(args: argparse.Namespace, cfg: dict[str, Any], options: dict[str, Any], ps: int, use_ray: bool,
         parquet: bool, sink: _NpzSink | _ParquetSink | None) -> int:
    """The job of :func:`main` once its arguments are checked and its output created:
    the paths found (:func:`_inputs`; those it refuses skipped, with a line on
    stderr), processed batch by batch, their lines printed, the output written."""
    status = 0
    paths = []
    for path, why in _inputs(args.paths or [default_image_path()], arrow=use_ray or parquet):
        if why is None:
            paths.append(path)
        else:
            print(f"kimi-k3-rs: {_shown(path)}: {why}", file=sys.stderr, flush=True)
            status = 1
    if use_ray:
        address = args.ray_address or os.environ.get("RAY_ADDRESS") or None
        batches = _ray_batches(paths, cfg, options, args.batch_size, address, ps)
    else:
        batches = _local_batches(paths, cfg, options, args.batch_size, parquet, ps)
    write, advance, close = _printer(len(paths))
    try:
        for done, table in batches:
            for d in done:
                if d.message is not None:
                    write(f"kimi-k3-rs: {_shown(d.path)}: {d.message}", True)
                    status = 1
                else:
                    write(_line(d), False)
            advance(len(done))
            if sink is not None:
                sink.add(done, table)
    finally:
        close()
    if sink is not None:
        try:
            sink.close()
        except OSError as exc:
            print(f"kimi-k3-rs: {_shown(args.output)}: {exc}", file=sys.stderr)
            return 1
    return status
