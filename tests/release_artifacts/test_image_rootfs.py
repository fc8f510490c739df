"""The release's OCI archive, not dist/'s: its layer unpacked and mounted read-only, the
controller under chroot as UID 65532 prints the release's version and answers /readyz against the
session's local control plane (as `make image-check` does for dist/; tests/image_chroot.py's
helpers). Needs root (chroot, mount): CI runs as root; elsewhere the module skips with the
declared reason NOT_ROOT (tests/conftest.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentsandbox.devcluster.cluster import DevCluster
from tests.conftest import NOT_ROOT
from tests.image_chroot import (
    UID,
    Image,
    blobs,
    controller_ready_in_chroot,
    read_only_rootfs,
    version_in_chroot,
)
from tests.release_env import release_check


@pytest.fixture(scope="module")
def image(release_dist: Path, release_version: str) -> Image:
    if os.geteuid() != 0:
        pytest.skip(NOT_ROOT)
    archive = release_dist / release_check.archive_name(release_version)
    assert archive.is_file(), archive
    return blobs(archive)


@pytest.fixture(scope="module")
def rootfs(image: Image, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with read_only_rootfs(image[2], tmp_path_factory.mktemp("release-image")) as ro:
        yield ro


def test_the_release_image_prints_its_version_as_65532(
    image: Image, rootfs: Path, release_version: str
) -> None:
    _, config, _ = image
    assert config["config"]["User"] == f"{UID}:{UID}"
    assert config["config"]["Labels"]["org.opencontainers.image.version"] == release_version
    out = version_in_chroot(rootfs, config)
    pep440 = release_check.to_pep440(release_version)
    assert out.startswith(f"agent-sandbox-controller, version {pep440} "), out


def test_the_release_image_runs_the_controller_to_readyz(
    image: Image, rootfs: Path, cluster: DevCluster, tmp_path: Path
) -> None:
    controller_ready_in_chroot(rootfs, image[1], cluster, tmp_path / "controller.log")
