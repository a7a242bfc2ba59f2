"""The docs site's Python examples run as written, and its API page lists the public names.

Each page of ``docs/`` runs as ``tests/test_readme.py`` runs README.md: its ```python blocks
in order, in one namespace per page, in a fresh temporary working directory. A block marked
``<!-- not run: REASON -->`` is left out; ``NOT_RUN`` says how many each page has, so a new
one is a decision made here.
"""

from __future__ import annotations

import importlib
import re
import tempfile
from pathlib import Path

import pytest
from test_readme import not_run_reasons, python_blocks, run_blocks

DOCS = Path(__file__).parents[1] / "docs"
PAGES = sorted(DOCS.glob("*.md"))

# pages whose python blocks are not all run: the number left out
NOT_RUN = {"hardening.md": 4}   # the findings' reproductions, on the code before each fix

# the pages with examples (a page that loses all of them fails here)
WITH_EXAMPLES = {"index.md", "inputs.md", "drop-ins.md", "datasets.md", "cli.md"}


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_docs_python_blocks_run(page, tmp_path, monkeypatch):
    text = page.read_text(encoding="utf-8")
    assert len(not_run_reasons(text)) == NOT_RUN.get(page.name, 0)
    blocks = python_blocks(text)
    assert bool(blocks) == (page.name in WITH_EXAMPLES), f"{page.name}: {len(blocks)} python blocks"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))   # the blocks' temporary folders too
    run_blocks(blocks, f"docs/{page.name}")


def _api_members() -> dict[str, list[str]]:
    """The ``::: module`` entries of docs/api.md and the members each lists."""
    members: dict[str, list[str]] = {}
    module = ""
    for line in (DOCS / "api.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("::: "):
            module = line[4:].strip()
            members[module] = []
        elif module and re.fullmatch(r" {8}- \S+", line):
            members[module].append(line.strip()[2:])
    return members


def test_api_page_lists_each_modules_all():
    """api.md documents exactly ``__all__`` (the two preset dicts, served by ``__getattr__``, in its text)."""
    members = _api_members()
    assert set(members) == {"kimi_k3_rs", "kimi_k3_rs.arrow", "kimi_k3_rs.ray", "kimi_k3_rs.deferred",
                            "kimi_k3_rs.hf", "kimi_k3_rs.video", "kimi_k3_rs.cli"}
    presets = {"KIMI_K3_MEDIA_PROC_CFG", "KIMI_K25_MEDIA_PROC_CFG"}
    for name, listed in members.items():
        module = importlib.import_module(name)
        public = getattr(module, "__all__", None)
        if public is None:   # kimi_k3_rs.cli: no __all__, its documented entry points
            public = ["main", "load_npz", "default_image_path"]
        expected = set(public) - presets if name == "kimi_k3_rs" else set(public)
        assert sorted(listed) == sorted(expected), name
    text = (DOCS / "api.md").read_text(encoding="utf-8")
    assert all(f"`kimi_k3_rs.{p}`" in text for p in presets)
