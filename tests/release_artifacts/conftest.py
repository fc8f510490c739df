"""The release directory these tests check: ``RELEASE_DIST`` (``build/release-check/<version>``,
which ``make release-check`` builds first) and its SemVer version ``VERSION``. Without
RELEASE_DIST the directory is not collected at all (tests/conftest.py); with it but no release
there, the tests FAIL."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import upstream_dir
from tests.release_env import env, release_check


@pytest.fixture(scope="session")
def release_version() -> str:
    return env("VERSION")


@pytest.fixture(scope="session")
def release_dist(release_version: str) -> Path:
    path = Path(env("RELEASE_DIST")).resolve()
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
