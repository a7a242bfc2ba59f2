"""kimi_k3_rs against recorded Pillow 12.3.0 and Pillow 13.0.0 fingerprints.

``tests/fingerprints/pillow12.json`` holds the sha256 of the reference's
``pixel_values`` (``make_fingerprints.py`` run under each Pillow version) for
inputs built without numpy's RNG (``fingerprints/fp_inputs.py``).  The
library must reproduce each version with the matching ``pillow_compat``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import kimi_k3_rs
from fingerprints import fp_inputs
from helpers import REF_COMPAT
from reference import reference_preprocess

DATA = json.loads((Path(__file__).resolve().parent / "fingerprints" / "pillow12.json").read_text())
NAMES = fp_inputs.case_names()
SECTION = {"12": "pillow12", "13": "pillow13"}


def sha(pixel_values: np.ndarray) -> str:
    assert pixel_values.dtype == np.float32
    return hashlib.sha256(np.ascontiguousarray(pixel_values).astype("<f4").tobytes()).hexdigest()


def test_recorded_versions():
    assert DATA["pillow12"]["pillow"] == "12.3.0"
    assert DATA["pillow13"]["pillow"] == "13.0.0"
    assert sorted(DATA["pillow12"]["cases"]) == NAMES == sorted(DATA["pillow13"]["cases"])


def test_tall_cases_differ_between_versions():
    """Not vacuous: for the vertical-first cases the two versions give different bytes,
    except where the resize is NEAREST (P under ``after_resize``), which has no pass order."""
    tall = [n for n in NAMES if fp_inputs.order_sensitive(n)]
    assert len(tall) >= 14
    nearest_tall = [n for n in NAMES if DATA["pillow13"]["cases"][n]["vertical_first_under_13"] and n not in tall]
    assert nearest_tall == ["tall_ptrns_500x1600_k3_lim2000"]
    for name in NAMES:
        a = DATA["pillow12"]["cases"][name]
        b = DATA["pillow13"]["cases"][name]
        assert a["input_sha256"] == b["input_sha256"]
        assert a["grid_thws"] == b["grid_thws"]
        if name in tall:
            assert a["sha256"] != b["sha256"], name
        else:
            assert a["sha256"] == b["sha256"], name


@pytest.mark.parametrize("name", NAMES)
def test_inputs_are_the_recorded_ones(name):
    img, _ = fp_inputs.case_input(name)
    assert hashlib.sha256(img.tobytes()).hexdigest() == DATA["pillow12"]["cases"][name]["input_sha256"]


@pytest.mark.parametrize("name", NAMES)
def test_fingerprints(name):
    img, media_proc_cfg = fp_inputs.case_input(name)
    outs = {}
    for compat in ("12", "13"):
        rec = DATA[SECTION[compat]]["cases"][name]
        out = kimi_k3_rs.preprocess(img, media_proc_cfg, pillow_compat=compat)
        outs[compat] = out
        assert out["grid_thws"].tolist() == rec["grid_thws"]
        assert list(out["pixel_values"].shape) == rec["pixel_values_shape"]
        assert sha(out["pixel_values"]) == rec["sha256"], f"pillow_compat={compat!r} differs from Pillow {DATA[SECTION[compat]]['pillow']}"
    auto = kimi_k3_rs.preprocess(img, media_proc_cfg)
    assert sha(auto["pixel_values"]) == sha(outs[REF_COMPAT]["pixel_values"])
    if fp_inputs.order_sensitive(name):
        assert not np.array_equal(outs["12"]["pixel_values"], outs["13"]["pixel_values"])


def test_reference_reproduces_installed_version():
    """The in-tree reference (installed Pillow) matches its own recorded section."""
    section = DATA[SECTION[REF_COMPAT]]
    for name in ("tall_rgb_1242x2688_k25", "tall_rgba_700x2100_k3_lim3000", "l_800x600_k25_lim1000",
                 "tall_cmyk_600x1900_k3_lim2500", "tall_ltrns_600x1900_k3_lim2500", "tall_ptrns_500x1600_k3_lim2000"):
        img, media_proc_cfg = fp_inputs.case_input(name)
        assert sha(reference_preprocess(img, media_proc_cfg)[0]) == section["cases"][name]["sha256"]
