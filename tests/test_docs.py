"""README.md's and the docs site's Python examples run as written, against the installed
package, and the API page lists the public names.

Every ```python block of README.md is run, in order, in one namespace (a block may use
names from the blocks before it), inside a fresh temporary working directory, which also
holds the blocks' ``tempfile`` folders. Any exception fails the test with the block's
number and text. A block preceded by a ``<!-- not run: REASON -->`` line is left out and
counted. Each page of ``docs/`` runs the same way, in one namespace per page; ``NOT_RUN``
says how many blocks each page leaves out, so a new one is a decision made here.
"""

from __future__ import annotations

import importlib
import re
import tempfile
import traceback
from pathlib import Path

import pytest

README = Path(__file__).parents[1] / "README.md"

# A fence opens with ```python on a line of its own and closes with the next ``` line; a
# `<!-- not run: REASON -->` line right before the fence marks a block that is not run.
_PYTHON_BLOCK = re.compile(
    r"(?:^<!-- not run: (?P<reason>[^\n]*?) -->[ \t]*\n)?^```python[ \t]*\n(?P<body>.*?)^```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)


def python_blocks(text: str) -> list[str]:
    """The bodies of the ```python blocks of a Markdown text that are run, in order."""
    return [m.group("body") for m in _PYTHON_BLOCK.finditer(text) if m.group("reason") is None]


def not_run_reasons(text: str) -> list[str]:
    """The reasons of the ```python blocks marked ``<!-- not run: REASON -->``, in order."""
    return [m.group("reason") for m in _PYTHON_BLOCK.finditer(text) if m.group("reason") is not None]


def run_blocks(blocks: list[str], source: str = "README.md") -> dict[str, object]:
    """Run the blocks in order in one namespace; fail with the number and text of one that raises."""
    namespace: dict[str, object] = {"__name__": "__readme__"}
    for number, block in enumerate(blocks, 1):
        try:
            exec(compile(block, f"{source} python block {number}", "exec"), namespace)
        except (Exception, SystemExit) as exc:
            failure = (
                f"{source} python block {number} of {len(blocks)} raised "
                f"{type(exc).__name__}: {exc}\n\n```python\n{block}```\n\n{traceback.format_exc()}"
            )
        else:
            continue
        pytest.fail(failure, pytrace=False)   # outside the except: no "during handling" chain
    return namespace


def test_readme_python_blocks_run(tmp_path, monkeypatch):
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    assert blocks, f"no ```python block in {README}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))   # the blocks' temporary folders too
    run_blocks(blocks)


def test_a_raising_block_fails_with_its_number_and_text():
    """The runner is not vacuous: only python blocks run, they share names, and one that raises fails."""
    text = "intro\n\n```python\nx = 1\n```\n\n```bash\nexit 1\n```\n\n```python\nraise ValueError(x)\n```\n"
    blocks = python_blocks(text)
    assert blocks == ["x = 1\n", "raise ValueError(x)\n"]
    assert run_blocks(blocks[:1])["x"] == 1
    with pytest.raises(pytest.fail.Exception) as failed:
        run_blocks(blocks)
    message = str(failed.value)
    assert "block 2 of 2 raised ValueError: 1" in message
    assert "raise ValueError(x)" in message


def test_a_marked_block_is_left_out_and_counted():
    text = "```python\nx = 1\n```\n<!-- not run: needs a GPU -->\n```python\nraise SystemExit\n```\n"
    assert python_blocks(text) == ["x = 1\n"]
    assert not_run_reasons(text) == ["needs a GPU"]


def test_readme_runs_every_python_block():
    assert not_run_reasons(README.read_text(encoding="utf-8")) == []


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
