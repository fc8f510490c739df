"""The release directory these tests check: ``RELEASE_DIST`` (``build/release-check/<version>``,
which ``make release-check`` builds first) and its SemVer version ``VERSION``. Without
RELEASE_DIST the directory is not collected at all (tests/conftest.py); with it but no release
there, the tests FAIL."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import upstream_dir

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hack"))

import release_check  # noqa: E402


def _env(name: str) -> str:
    value = os.environ.get(name, "")
    assert value, f"{name} is not set: run this through `make release-check`"
    return value


@pytest.fixture(scope="session")
def release_version() -> str:
    return _env("VERSION")


@pytest.fixture(scope="session")
def release_dist(release_version: str) -> Path:
    path = Path(_env("RELEASE_DIST")).resolve()
    assert (path / "SHA256SUMS").is_file(), f"{path}: no release there"
    return path


@pytest.fixture(scope="session")
def chart_tgz(release_dist: Path, release_version: str) -> Path:
    path = release_dist / f"{release_check.CHART_NAME}-{release_version}.tgz"
    assert path.is_file(), path
    return path


@pytest.fixture(scope="session")
def upstream() -> Path:
    """Upstream v1.0.1's files in the build cache (``make controlplane`` fetched them)."""
    return upstream_dir()
