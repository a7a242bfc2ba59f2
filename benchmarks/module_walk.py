"""How an input travels through the package's Python modules in one warm call (issue #22).

For each of five inputs, one warm ``kimi_k3_rs.preprocess(item, preset)`` call runs under
``sys.setprofile``; every Python call and return inside ``kimi_k3_rs`` moves the walk to
the module of the frame that runs next. Printed per input:

* ``modules``: the package modules the walk visits;
* ``returns``: the times it comes back to a module it had left before (the walk with
  repeats of the same module merged: ``processor > config > processor`` is one return);
* the walk itself, with ``--walk``.

Usage (from the repository root, after ``pip install .``)::

    python benchmarks/module_walk.py [--walk]
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import numpy as np
from PIL import Image

import kimi_k3_rs

PACKAGE = "kimi_k3_rs"


def inputs() -> dict[str, Callable[[], Any]]:
    """The issue's five inputs, each made fresh per call (a lazily opened image is loaded
    by the call)."""
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)
    jpeg, png = io.BytesIO(), io.BytesIO()
    Image.fromarray(rgb).save(jpeg, "JPEG", quality=90)
    Image.fromarray(rgb).convert("P").save(png, "PNG")
    cmyk = Image.fromarray(rgb).convert("CMYK")
    return {
        "numpy uint8": lambda: rgb,
        "PIL RGB": lambda: Image.fromarray(rgb),
        "JPEG bytes (native decode)": lambda: jpeg.getvalue(),
        "palette PNG bytes (Pillow path)": lambda: png.getvalue(),
        "PIL CMYK, resized in its own mode": lambda: cmyk.copy(),
    }


def walk(item: Any, cfg: dict[str, Any]) -> list[str]:
    """The modules of ``kimi_k3_rs`` the call runs in, in order, repeats merged."""
    seen: list[str] = []

    def module_of(frame: FrameType | None) -> str | None:
        while frame is not None:
            name = frame.f_globals.get("__name__", "")
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                return str(name)
            frame = frame.f_back
        return None

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            here = module_of(frame)
        elif event == "return":
            here = module_of(frame.f_back)
        else:
            return
        if here is not None and (not seen or seen[-1] != here):
            seen.append(here)

    sys.setprofile(profile)
    try:
        kimi_k3_rs.preprocess(item, cfg)
    finally:
        sys.setprofile(None)
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--walk", action="store_true", help="print each walk too")
    args = parser.parse_args()
    cfg = kimi_k3_rs.KIMI_K3_MEDIA_PROC_CFG
    print(f"{'input':36} {'modules':>8} {'returns':>8}")
    for name, make in inputs().items():
        kimi_k3_rs.preprocess(make(), cfg)  # warm: imports, plugins, the self-check
        seen = walk(make(), cfg)
        returns = sum(1 for i, module in enumerate(seen) if module in seen[:i])
        print(f"{name:36} {len(set(seen)):>8} {returns:>8}")
        if args.walk:
            print("    " + " > ".join(module.removeprefix(PACKAGE + ".") for module in seen))


if __name__ == "__main__":
    main()
