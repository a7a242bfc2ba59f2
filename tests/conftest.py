"""pytest configuration: hypothesis profiles and shared fixtures.

Hypothesis profile: ``fast`` (default, CI) or ``slow``, chosen with the
environment variable ``KIMI_HYPOTHESIS_PROFILE``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:  # make `import reference, helpers` work in any import mode
    sys.path.insert(0, str(TESTS_DIR))

import helpers  # noqa: E402

settings.register_profile(
    "fast",
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "slow",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("KIMI_HYPOTHESIS_PROFILE", "fast"))


@pytest.fixture(scope="session")
def kimi():
    """The package under test (imported lazily so collection reports import errors per test)."""
    import kimi_k3_rs

    return kimi_k3_rs


@pytest.fixture(scope="session")
def cases():
    """The reported cases R01..R23, keyed by id."""
    return helpers.cases_by_id()


@pytest.fixture(scope="session")
def ref_compat() -> str:
    return helpers.REF_COMPAT


@pytest.fixture(scope="session")
def photos():
    """The real photos (tests/data + the package's embedded rocket.jpg), loaded once."""
    return {name: helpers.photo(name) for name in helpers.PHOTOS + ["rocket.jpg"]}


@pytest.fixture(scope="session", autouse=True)
def poisoned_session():
    """The whole suite runs with the core's poison mode on (see :func:`poison`), unless
    ``KIMI_K3_RS_POISON=0``: every parity test then also proves that no byte of a buffer
    of unspecified contents is read before it is written."""
    from kimi_k3_rs import _native

    on = os.environ.get("KIMI_K3_RS_POISON", "1") != "0"
    previous = _native._set_poison(on)
    yield on
    _native._set_poison(previous)


@pytest.fixture
def poison():
    """The core's poison mode on for the test (``_native._set_poison``): every buffer of
    unspecified contents starts as 0xA5 bytes, so a byte read before it is written shows
    as a mismatch against the reference."""
    from kimi_k3_rs import _native

    previous = _native._set_poison(True)
    try:
        yield
    finally:
        _native._set_poison(previous)


@pytest.fixture
def fresh_self_check():
    """After the test, the native decoders' self-check is forgotten
    (``kimi_k3_rs._input.native._paths``), so that a forced one (``KIMI_K3_RS_DECODE``,
    a patched decoder) does not outlive the test: the next one sees the process's own."""
    from kimi_k3_rs._input import native

    yield
    native._paths = None
