"""Files opened without blocking: only regular files are read.

Reading a FIFO waits for a writer, a character device such as ``/dev/zero`` never ends:
a path that is not a regular file is refused before it is opened (``os.stat``), the open
itself never waits (``O_NONBLOCK``), and ``os.fstat`` checks again what was opened (the
path may have been replaced in between). Used for every path the package reads: image
files (the Pillow and native decode paths), config files, the command line's inputs.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

#: What a file that is not a regular one is, by its ``stat`` test.
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class NotRegularFileError(OSError):
    """A path that is not a regular file (after symlinks); ``kind`` says what it is."""

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        super().__init__(f"not a regular file ({kind}): {os.fspath(path)!r}")
        self.kind = kind


def irregular_kind(mode: int) -> str | None:
    """None for a regular file's ``st_mode``, else what the file is (``"a FIFO"``,
    ``"a folder"``, ...; ``"not a file"`` for a type with no name here)."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def _check(path: str | os.PathLike[str], info: os.stat_result) -> os.stat_result:
    kind = irregular_kind(info.st_mode)
    if kind is not None:
        raise NotRegularFileError(path, kind)
    return info


def open_regular(path: str | os.PathLike[str]) -> tuple[BinaryIO, os.stat_result]:
    """``open(path, "rb")`` of a regular file, and its ``os.fstat``; nothing blocks.

    Raises:
        NotRegularFileError: (an ``OSError``) ``path`` is a folder, a FIFO, a socket or a
            device (after symlinks), checked before the open and again after it.
        OSError: as ``open`` raises it (``FileNotFoundError``, ``PermissionError``).
        ValueError: ``path`` cannot name a file (an embedded null byte).
    """
    _check(path, os.stat(path))
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    fp = os.fdopen(os.open(path, flags), "rb")
    try:
        return fp, _check(path, os.fstat(fp.fileno()))
    except BaseException:
        fp.close()
        raise
