"""The version lives in one place: ``Cargo.toml``'s ``[package] version``.

maturin copies it into the installed distribution's metadata (``pyproject.toml`` declares
``dynamic = ["version"]``), and ``kimi_k3_rs.__version__`` is the core's
``CARGO_PKG_VERSION``. All three must agree, in the editable install of the checkout and in
an installed release wheel (``scripts/check_wheel.sh`` runs this file against one).
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import kimi_k3_rs

CARGO_TOML = Path(__file__).resolve().parents[1] / "Cargo.toml"
PYPROJECT_TOML = CARGO_TOML.with_name("pyproject.toml")


def cargo_package_version() -> str:
    """The ``version`` key of Cargo.toml's ``[package]`` table (read as text: ``tomllib``
    is Python 3.11+, and the package supports 3.10)."""
    text = CARGO_TOML.read_text(encoding="utf-8")
    package = re.search(r"^\[package\]\n(.*?)(?=^\[)", text, re.M | re.S)
    assert package is not None, "Cargo.toml has no [package] table"
    version = re.search(r'^version\s*=\s*"([^"]+)"\s*$', package.group(1), re.M)
    assert version is not None, "Cargo.toml's [package] has no version"
    return version.group(1)


def test_installed_metadata_matches_cargo_toml() -> None:
    cargo = cargo_package_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", cargo), cargo
    assert importlib.metadata.version("kimi_k3_rs") == cargo
    assert kimi_k3_rs.__version__ == cargo


def test_pyproject_does_not_repeat_the_version() -> None:
    text = PYPROJECT_TOML.read_text(encoding="utf-8")
    project = re.search(r"^\[project\]\n(.*?)(?=^\[)", text, re.M | re.S)
    assert project is not None, "pyproject.toml has no [project] table"
    assert re.search(r'^dynamic\s*=\s*\[[^\]]*"version"', project.group(1), re.M)
    assert not re.search(r"^version\s*=", project.group(1), re.M)
