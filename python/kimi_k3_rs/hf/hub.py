"""``preprocessor_config.json`` and Hub repo ids: the HF processor's config found, read, written.

What :class:`kimi_k3_rs.hf.KimiK3VisionProcessor`'s ``from_pretrained``, ``to_dict`` and
``save_pretrained`` do with the file: a local path or a Hub repo id
resolved through ``huggingface_hub`` (imported only then), config values as JSON types,
and the file written atomically.
"""

from __future__ import annotations

import contextlib
import copy
import os
import secrets
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import errors

__all__ = ["PREPROCESSOR_CONFIG_NAME"]

#: File name of a checkpoint's image-processor config (read by ``from_pretrained``,
#: written by ``save_pretrained``).
PREPROCESSOR_CONFIG_NAME = "preprocessor_config.json"


def _is_repo_id(path: str) -> bool:
    """Whether ``path`` (not an existing file or folder) can name a Hub repository:
    ``name`` or ``owner/name``, not absolute, not ``./``, ``../`` or ``~``."""
    if os.path.isabs(path) or path.startswith((".", "~")) or "\\" in path:
        return False
    return 1 <= len(path.split("/")) <= 2 and all(path.split("/"))


def resolve_config_path(
    path: str | os.PathLike[str],
    *,
    revision: str | None,
    cache_dir: str | os.PathLike[str] | None,
    token: str | bool | None,
    local_files_only: bool,
    subfolder: str | None,
) -> str:
    """The local path ``from_pretrained`` reads: ``path`` (joined with ``subfolder``) when
    it exists or cannot be a repo id, else ``preprocessor_config.json`` of that Hub repo,
    downloaded (or found in the cache) by ``huggingface_hub.hf_hub_download``.

    Raises:
        FileNotFoundError: a repo id without huggingface_hub installed.
        OSError / ValueError: ``huggingface_hub``'s errors for a repo id.
    """
    location = os.fspath(path)
    if subfolder:
        local = os.path.join(location, subfolder)
    else:
        local = location
    if not os.path.exists(local) and isinstance(path, str) and _is_repo_id(location):
        try:
            from huggingface_hub import hf_hub_download
        except ImportError as exc:
            raise errors.not_found_and_no_hub(location) from exc
        local = hf_hub_download(
            location,
            PREPROCESSOR_CONFIG_NAME,
            subfolder=subfolder or None,
            revision=revision,
            cache_dir=None if cache_dir is None else os.fspath(cache_dir),
            token=token,
            local_files_only=local_files_only,
        )
    return local


def jsonable(value: Any) -> Any:
    """A copy of a config value with numpy arrays / scalars and tuples as JSON types."""
    if isinstance(value, Mapping):
        return {key: jsonable(item) for key, item in value.items()}
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    return copy.deepcopy(value)


def write_config(folder: str, text: str) -> str:
    """Write ``text`` as ``folder/preprocessor_config.json`` atomically; return its path.

    The folder is created (with its parents) if missing; the text goes to a fresh name
    beside the target and is renamed over it, so a reader never sees half a file.

    Raises:
        OSError: the folder cannot be created or the file cannot be written.
    """
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, PREPROCESSOR_CONFIG_NAME)
    # a fresh name beside the target (same file system), opened like any new file
    # (permissions from the umask, unlike mkstemp's 0600)
    tmp = os.path.join(folder, f".{PREPROCESSOR_CONFIG_NAME}.{os.getpid()}.{secrets.token_hex(8)}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path
