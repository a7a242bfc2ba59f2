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
from collections.abc import Sequence
from importlib import resources
from typing import Any

import numpy as np

from ._native import __version__
from .config import kimi_k3_media_proc_cfg, kimi_k25_media_proc_cfg, load_media_proc_cfg
from .deferred import prepare_kimi_k3_encoder_inputs
from .hf import KimiK3VisionProcessor

_PRESETS = {"kimi-k3": kimi_k3_media_proc_cfg, "kimi-k2.5": kimi_k25_media_proc_cfg}


def default_image_path() -> str:
    """Path of the embedded default photograph (``rocket.jpg``, 640x427 JPEG)."""
    return str(resources.files("kimi_k3_rs") / "data" / "rocket.jpg")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kimi-k3-rs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"kimi-k3-rs {__version__}")
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    0 when every image was processed; 1 when an image could not be read (the others
    are still processed and written) or the ``.npz`` could not be written; 2 for a bad
    config (missing file, no ``media_proc_cfg``, bad values). Every error is one line
    on stderr, ``kimi-k3-rs: <what>: <why>``.
    """
    args = _parser().parse_args(argv)
    try:
        media_proc_cfg: Any = load_media_proc_cfg(args.config) if args.config else _PRESETS[args.preset]()
        processor = KimiK3VisionProcessor(
            media_proc_cfg, pillow_compat=args.pillow_compat, exif_transpose=args.exif_transpose
        )
    except (OSError, ValueError, TypeError) as exc:
        print(f"kimi-k3-rs: config {args.config or args.preset}: {exc}", file=sys.stderr)
        return 2
    paths = args.paths or [default_image_path()]
    status = 0
    done_paths: list[str] = []
    pixel_values: list[np.ndarray] = []
    grid_thws: list[np.ndarray] = []
    for path in paths:
        start = time.perf_counter()
        try:
            encoder_inputs = prepare_kimi_k3_encoder_inputs([path], processor)
            (features,) = encoder_inputs.materialize()
        except (OSError, ValueError) as exc:
            print(f"kimi-k3-rs: {path}: {exc}", file=sys.stderr)
            status = 1
            continue
        ms = (time.perf_counter() - start) * 1e3
        (width, height), r = encoder_inputs.original_image_sizes[0], encoder_inputs.resize_configs[0]
        t, h, w = (int(v) for v in encoder_inputs.grid_thws[0])
        print(
            f"{path}\t{width}x{height} -> {r['new_width']}x{r['new_height']}"
            f" (padded {r['new_width'] + r['pad_width']}x{r['new_height'] + r['pad_height']})"
            f"\tgrid {t}x{h}x{w}\t{r['num_tokens']} tokens\t{ms:.1f} ms"
        )
        done_paths.append(path)
        pixel_values.append(features)
        grid_thws.append(encoder_inputs.grid_thws)
    if args.output:
        ps = processor.config.patch_size
        try:
            np.savez(
                args.output,
                pixel_values=np.concatenate(pixel_values) if pixel_values else np.zeros((0, 3, ps, ps), np.float32),
                grid_thws=np.concatenate(grid_thws) if grid_thws else np.zeros((0, 3), np.int64),
                paths=np.array(done_paths, dtype=str),
            )
        except OSError as exc:
            print(f"kimi-k3-rs: {args.output}: {exc}", file=sys.stderr)
            return 1
    return status
