"""The built image runs without a container engine (`make image-check`, as root; CI runs as root).

The root filesystem is unpacked from the layer of the OCI archive that `make image` wrote, a
kubeconfig is copied in, and the tree is bind-mounted read-only. Under ``chroot`` as UID 65532,
with nothing of the host's /usr and only the image config's entrypoint and environment, the
controller prints its version and then, against a private local control plane (its API server
listens on 127.0.0.1, which the chroot shares), answers /readyz. A second build from the same
inputs gives the same manifest digest.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import started_cluster
from tests.image_chroot import (
    UID,
    Image,
    blobs,
    build_again,
    controller_ready_in_chroot,
    read_only_rootfs,
    version_in_chroot,
)

ROOT = Path(__file__).resolve().parents[2]


def version() -> str:
    override = os.environ.get("VERSION", "").strip()
    if override:
        return override
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


ARCHIVE = ROOT / "dist" / f"agent-sandbox-controller-{version()}-oci.tar"


@pytest.fixture(scope="module")
def image() -> Image:
    assert os.geteuid() == 0, "chroot and mount need root (CI runs as root)"
    assert ARCHIVE.is_file(), f"no {ARCHIVE.relative_to(ROOT)}: run `make image`"
    return blobs(ARCHIVE)


@pytest.fixture(scope="module")
def rootfs(image: Image, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with read_only_rootfs(image[2], tmp_path_factory.mktemp("image")) as ro:
        yield ro


def test_the_config_runs_python_as_65532_with_no_shell(image: Image, rootfs: Path) -> None:
    _, config, _ = image
    assert config["config"]["User"] == f"{UID}:{UID}"
    entry = config["config"]["Entrypoint"]
    assert entry[0] == "/usr/bin/python3.11" and entry[1] == "/usr/bin/agent-sandbox-controller"
    for shell in ("bin/sh", "usr/bin/sh", "bin/bash", "usr/bin/bash", "bin/dash", "usr/bin/dash"):
        assert not os.path.lexists(rootfs / shell), shell
    passwd = (rootfs / "etc/passwd").read_text()
    assert f"nonroot:x:{UID}:{UID}:" in passwd


def test_version_runs_under_chroot_as_65532_read_only(image: Image, rootfs: Path) -> None:
    _, config, _ = image
    with pytest.raises(OSError):  # the bind mount really is read-only
        (rootfs / "probe").write_text("x")
    out = version_in_chroot(rootfs, config)
    assert out.startswith("agent-sandbox-controller, version "), out
    assert "python version:   3.11." in out, out


def test_the_controller_becomes_ready_under_chroot_read_only(
    image: Image, rootfs: Path, tmp_path: Path
) -> None:
    """Over 30 s: a private control plane starts (about 20 s), then the controller in the
    chroot syncs its informers."""
    _, config, _ = image
    with started_cluster("agentsandbox-image-", nodes=1) as cluster:
        controller_ready_in_chroot(rootfs, config, cluster, tmp_path / "controller.log")


def test_a_second_build_gives_the_same_digest(tmp_path: Path) -> None:
    """Over 30 s: the whole build again (about a minute: our wheel, the root filesystem, the
    bytecode, the gzip), from the caches `make image` filled, into a directory of its own."""
    expected = (ROOT / "dist" / "image.digest").read_text().strip()
    assert build_again(tmp_path, version()) == expected
    assert (tmp_path / "dist" / ARCHIVE.name).read_bytes() == ARCHIVE.read_bytes()
