"""The ``kimi-k3-rs`` command line: preprocess image files, print one line per image.

``kimi-k3-rs preprocess [PATH ...] [--preset kimi-k3|kimi-k2.5 | --config FILE_OR_FOLDER]
[--pillow-compat auto|12|13] [--exif-transpose] [--output out.npz]``

With no path it runs on the photograph shipped in the package (``data/rocket.jpg``,
NASA, public domain). A file that cannot be read gets a one-line error on stderr, the
others are still processed (and written), and the exit status is 1. Files are decoded
as the checkpoint decodes them (Pillow, first frame, no EXIF rotation unless
``--exif-transpose`` is given; the printed size then follows the orientation).
"""

from __future__ import annotations

import argparse
import sys
import time
from importlib import resources
from typing import Any, Optional, Sequence

import numpy as np
from PIL import Image

from . import _native
from .config import MediaProcConfig, kimi_k3_media_proc_cfg, kimi_k25_media_proc_cfg, load_media_proc_cfg
from .processor import _header_size, preprocess

_PRESETS = {"kimi-k3": kimi_k3_media_proc_cfg, "kimi-k2.5": kimi_k25_media_proc_cfg}


def default_image_path() -> str:
    """Path of the embedded default photograph (``rocket.jpg``, 640x427 JPEG)."""
    return str(resources.files("kimi_k3_rs") / "data" / "rocket.jpg")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kimi-k3-rs", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("preprocess", help="preprocess image files like the Kimi-K3 / K2.5 checkpoint")
    p.add_argument("paths", nargs="*", metavar="PATH", help="image files (default: the embedded photo)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--preset", choices=sorted(_PRESETS), default="kimi-k3", help="published config (default kimi-k3)")
    group.add_argument("--config", metavar="FILE_OR_FOLDER", help="preprocessor_config.json or a checkpoint folder")
    p.add_argument("--pillow-compat", choices=["auto", "12", "13"], default="auto", help="resize pass order (default: installed Pillow)")
    p.add_argument(
        "--exif-transpose",
        action="store_true",
        help="apply the EXIF orientation before preprocessing (the checkpoint does not)",
    )
    p.add_argument("--output", metavar="OUT.npz", help="write pixel_values, grid_thws and paths to this .npz")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit status (0, or 1 when a file failed)."""
    args = _parser().parse_args(argv)
    media_proc_cfg: Any = load_media_proc_cfg(args.config) if args.config else _PRESETS[args.preset]()
    config = MediaProcConfig.from_dict(media_proc_cfg)
    paths = args.paths or [default_image_path()]
    status = 0
    done_paths: list[str] = []
    pixel_values: list[np.ndarray] = []
    grid_thws: list[np.ndarray] = []
    for path in paths:
        start = time.perf_counter()
        try:
            with Image.open(path) as image:
                size = _header_size(image, args.exif_transpose)
                out = preprocess(
                    image, config, pillow_compat=args.pillow_compat, exif_transpose=args.exif_transpose
                )
        except (OSError, ValueError) as exc:
            print(f"kimi-k3-rs: {path}: {exc}", file=sys.stderr)
            status = 1
            continue
        ms = (time.perf_counter() - start) * 1e3
        t, h, w = (int(v) for v in out["grid_thws"][0])
        tokens, new_width, new_height, pad_width, pad_height = _native.navit_resize_config(
            size[0], size[1], config.native
        )
        print(
            f"{path}\t{size[0]}x{size[1]} -> {new_width}x{new_height}"
            f" (padded {new_width + pad_width}x{new_height + pad_height})"
            f"\tgrid {t}x{h}x{w}\t{tokens} tokens\t{ms:.1f} ms"
        )
        done_paths.append(path)
        pixel_values.append(out["pixel_values"])
        grid_thws.append(out["grid_thws"])
    if args.output:
        ps = config.patch_size
        np.savez(
            args.output,
            pixel_values=np.concatenate(pixel_values) if pixel_values else np.zeros((0, 3, ps, ps), np.float32),
            grid_thws=np.concatenate(grid_thws) if grid_thws else np.zeros((0, 3), np.int64),
            paths=np.array(done_paths, dtype=str),
        )
    return status
