"""kimi_k3_rs against recorded Pillow 12.1.0, 12.3.0 and 13.0.0 fingerprints.

``tests/fingerprints/pillow12.json`` holds the sha256 of the reference's
``pixel_values`` (``make_fingerprints.py`` run under each Pillow version, one
section for each ``pillow_compat`` rule: ``"12"``, ``"12.2"``, ``"13"``) for
inputs built without numpy's RNG (``fingerprints/fp_inputs.py``).  The
library must reproduce each version with the matching ``pillow_compat``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

import kimi_k3_rs
from fingerprints import fp_inputs
from helpers import REF_COMPAT
from reference import COMPATS, reference_preprocess

DATA = json.loads((Path(__file__).resolve().parent / "fingerprints" / "pillow12.json").read_text())
NAMES = fp_inputs.case_names()
SECTION = {compat: DATA[fp_inputs.section(compat)] for compat in COMPATS}


def sha(pixel_values: np.ndarray) -> str:
    assert pixel_values.dtype == np.float32
    return hashlib.sha256(np.ascontiguousarray(pixel_values).astype("<f4").tobytes()).hexdigest()


def test_recorded_versions():
    assert {compat: SECTION[compat]["pillow"] for compat in COMPATS} == {"12": "12.1.0", "12.2": "12.3.0", "13": "13.0.0"}
    assert sorted(DATA) == sorted(fp_inputs.section(compat) for compat in COMPATS)
    for compat in COMPATS:
        assert sorted(SECTION[compat]["cases"]) == NAMES


def test_cases_differ_between_versions_by_pass_order():
    """Not vacuous: two versions give different bytes exactly where their rules pick
    different pass orders, and every pair of versions has such cases."""
    for a, b in itertools.combinations(COMPATS, 2):
        differ = 0
        for name in NAMES:
            rec_a, rec_b = SECTION[a]["cases"][name], SECTION[b]["cases"][name]
            assert rec_a["input_sha256"] == rec_b["input_sha256"]
            assert rec_a["grid_thws"] == rec_b["grid_thws"]
            orders_differ = fp_inputs.pass_order(name, a) != fp_inputs.pass_order(name, b)
            assert (rec_a["sha256"] != rec_b["sha256"]) == orders_differ, (name, a, b)
            differ += orders_differ
        assert differ >= 2, (a, b)


@pytest.mark.parametrize("name", NAMES)
def test_recorded_pass_order(name):
    """Each section recorded the pass order its rule gives (make_fingerprints.py)."""
    for compat in COMPATS:
        assert SECTION[compat]["cases"][name]["pass_order"] == fp_inputs.pass_order(name, compat)


@pytest.mark.parametrize("name", NAMES)
def test_inputs_are_the_recorded_ones(name):
    img, _ = fp_inputs.case_input(name)
    for compat in COMPATS:
        assert hashlib.sha256(img.tobytes()).hexdigest() == SECTION[compat]["cases"][name]["input_sha256"]


@pytest.mark.parametrize("name", NAMES)
def test_fingerprints(name):
    img, media_proc_cfg = fp_inputs.case_input(name)
    outs = {}
    for compat in COMPATS:
        rec = SECTION[compat]["cases"][name]
        out = kimi_k3_rs.preprocess(img, media_proc_cfg, pillow_compat=compat)
        outs[compat] = out
        assert out["grid_thws"].tolist() == rec["grid_thws"]
        assert list(out["pixel_values"].shape) == rec["pixel_values_shape"]
        assert sha(out["pixel_values"]) == rec["sha256"], f"pillow_compat={compat!r} differs from Pillow {SECTION[compat]['pillow']}"
    auto = kimi_k3_rs.preprocess(img, media_proc_cfg)
    assert sha(auto["pixel_values"]) == sha(outs[REF_COMPAT]["pixel_values"])


def test_reference_reproduces_installed_version():
    """The in-tree reference (installed Pillow) matches its own recorded section."""
    section = SECTION[REF_COMPAT]
    for name in ("tall_rgb_1242x2688_k25", "tall_rgba_700x2100_k3_lim3000", "l_800x600_k25_lim1000",
                 "tall_cmyk_600x1900_k3_lim2500", "tall_ltrns_600x1900_k3_lim2500", "tall_ptrns_500x1600_k3_lim2000",
                 "strip_rgb_10x8366_k25", "strip_rgba_70x7170_k3"):
        img, media_proc_cfg = fp_inputs.case_input(name)
        assert sha(reference_preprocess(img, media_proc_cfg)[0]) == section["cases"][name]["sha256"]
