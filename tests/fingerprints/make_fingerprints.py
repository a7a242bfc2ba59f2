"""Record sha256 fingerprints of the reference output under the installed Pillow.

Run it under one Pillow of each ``pillow_compat`` rule: 12.1.0 (``"12"``), 12.3.0
(``"12.2"``) and 13.0.0 (``"13"``), e.g.:

    python3 -m venv /work/pil121 && /work/pil121/bin/pip install pillow==12.1.0 numpy==1.26.4
    /work/pil121/bin/python tests/fingerprints/make_fingerprints.py

Each run updates its own section (``"pillow12"``, ``"pillow12.2"`` or ``"pillow13"``) of
``tests/fingerprints/pillow12.json``; ``tests/test_fingerprints.py`` checks
``kimi_k3_rs`` with each ``pillow_compat`` against them.
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
    section = fp_inputs.section(reference.PILLOW_COMPAT)
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    results = {}
    for name in fp_inputs.case_names():
        img, media_proc_cfg = fp_inputs.case_input(name)
        pv, grid = reference.reference_preprocess(img, media_proc_cfg)
        results[name] = {
            "sha256": fingerprint(pv),
            "input_sha256": hashlib.sha256(img.tobytes()).hexdigest(),
            "grid_thws": grid.tolist(),
            "pixel_values_shape": list(pv.shape),
            "pass_order": fp_inputs.pass_order(name, reference.PILLOW_COMPAT),
        }
        print(section, name, results[name]["sha256"][:16], results[name]["pass_order"])
    data[section] = {
        "pillow": PIL.__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "cases": results,
    }
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
