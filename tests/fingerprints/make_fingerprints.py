"""Record sha256 fingerprints of the reference output under the installed Pillow.

Run it once under Pillow 12.3.0 (+ numpy 1.26.4) and once under Pillow 13.0.0:

    python3 -m venv /work/venv12 && /work/venv12/bin/pip install pillow==12.3.0 numpy==1.26.4
    /work/venv12/bin/python tests/fingerprints/make_fingerprints.py
    /work/venv/bin/python   tests/fingerprints/make_fingerprints.py

Each run updates its own section ("pillow12" or "pillow13") of
``tests/fingerprints/pillow12.json``; ``tests/test_fingerprints.py`` checks
``kimi_k3_rs`` with ``pillow_compat="12"`` / ``"13"`` against them.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402
import PIL  # noqa: E402

import fp_inputs  # noqa: E402
import reference  # noqa: E402

OUT = HERE / "pillow12.json"


def fingerprint(pixel_values: np.ndarray) -> str:
    assert pixel_values.dtype == np.float32
    return hashlib.sha256(np.ascontiguousarray(pixel_values).astype("<f4").tobytes()).hexdigest()


def main() -> None:
    major = int(PIL.__version__.split(".")[0])
    section = "pillow13" if major >= 13 else "pillow12"
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    results = {}
    for name in fp_inputs.case_names():
        img, media_proc_cfg = fp_inputs.case_input(name)
        w, h, _, _, _ = fp_inputs.CASES[name]
        pv, grid = reference.reference_preprocess(img, media_proc_cfg)
        rc = reference.navit_resize_image(w, h, 14, media_proc_cfg["merge_kernel_size"],
                                          media_proc_cfg["in_patch_limit"],
                                          media_proc_cfg["patch_limit_on_one_side"], None)
        results[name] = {
            "sha256": fingerprint(pv),
            "input_sha256": hashlib.sha256(img.tobytes()).hexdigest(),
            "grid_thws": grid.tolist(),
            "pixel_values_shape": list(pv.shape),
            "vertical_first_under_13": reference.vertical_first_under_13(w, h, rc["new_width"], rc["new_height"]),
        }
        print(section, name, results[name]["sha256"][:16], results[name]["vertical_first_under_13"])
    data[section] = {
        "pillow": PIL.__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "cases": results,
    }
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
