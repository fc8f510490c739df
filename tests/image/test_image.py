"""The built image runs without a container engine (`make image-check`, as root; CI runs as root).

The root filesystem is unpacked from the layer of the OCI archive that `make image` wrote, a
kubeconfig is copied in, and the tree is bind-mounted read-only. Under ``chroot`` as UID 65532,
with nothing of the host's /usr and only the image config's entrypoint and environment, the
controller prints its version and then, against a private local control plane (its API server
listens on 127.0.0.1, which the chroot shares), answers /readyz. A second build from the same
inputs gives the same manifest digest.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentsandbox.devcluster.cluster import DevCluster, free_port
from tests.conftest import started_cluster
from tests.polling import eventually_sync

ROOT = Path(__file__).resolve().parents[2]
UID = 65532
KUBECONFIG = "/etc/agentsandbox/kubeconfig"


def version() -> str:
    override = os.environ.get("VERSION", "").strip()
    if override:
        return override
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


ARCHIVE = ROOT / "dist" / f"agent-sandbox-controller-{version()}-oci.tar"


def blobs(archive: Path) -> tuple[dict[str, Any], dict[str, Any], bytes]:
    """(manifest, config, the layer's gzip bytes) of the archive's one image."""
    with tarfile.open(archive) as tar:

        def read(name: str) -> bytes:
            f = tar.extractfile(name)
            assert f is not None, name
            return f.read()

        (desc,) = json.loads(read("index.json"))["manifests"]
        manifest = json.loads(read(f"blobs/sha256/{desc['digest'][7:]}"))
        config = json.loads(read(f"blobs/sha256/{manifest['config']['digest'][7:]}"))
        (layer,) = manifest["layers"]
        return manifest, config, read(f"blobs/sha256/{layer['digest'][7:]}")


@pytest.fixture(scope="module")
def image() -> tuple[dict[str, Any], dict[str, Any], bytes]:
    assert os.geteuid() == 0, "chroot and mount need root (CI runs as root)"
    assert ARCHIVE.is_file(), f"no {ARCHIVE.relative_to(ROOT)}: run `make image`"
    return blobs(ARCHIVE)


@contextlib.contextmanager
def read_only_rootfs(layer: bytes, base: Path) -> Iterator[Path]:
    """The layer unpacked under ``base`` (the kubeconfig to come is written into it), and its
    read-only bind mount, which the tests chroot into, with a tmpfs at /tmp as the Deployment's
    emptyDir there (kubernetes_asyncio's kubeconfig loader writes inline certificate data to
    temporary files). Unmounted and removed afterwards."""
    tree = base / "tree"
    tree.mkdir()
    (base / "layer.tar.gz").write_bytes(layer)
    with tarfile.open(base / "layer.tar.gz") as tar:
        tar.extractall(tree, filter="fully_trusted")  # our own archive, written by hack/image
    ro = base / "ro"
    ro.mkdir()
    subprocess.run(["mount", "--bind", str(tree), str(ro)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "mode=1777,size=16m", "tmpfs", str(ro / "tmp")],
            check=True,
        )
        yield ro
    finally:
        subprocess.run(["umount", str(ro / "tmp")], check=False)
        subprocess.run(["umount", str(ro)], check=False)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def rootfs(
    image: tuple[dict[str, Any], dict[str, Any], bytes],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Path]:
    with read_only_rootfs(image[2], tmp_path_factory.mktemp("image")) as ro:
        yield ro


def chroot_argv(rootfs: Path, config: dict[str, Any], *args: str) -> list[str]:
    user = config["config"]["User"]
    chroot = shutil.which("chroot") or "/usr/sbin/chroot"  # the host's, found on the host's PATH
    return [chroot, f"--userspec={user}", str(rootfs), *config["config"]["Entrypoint"], *args]


def image_env(config: dict[str, Any]) -> dict[str, str]:
    """The image config's environment alone (nothing of the host's)."""
    return dict(e.split("=", 1) for e in config["config"]["Env"])


def test_the_config_runs_python_as_65532_with_no_shell(
    image: tuple[dict[str, Any], dict[str, Any], bytes], rootfs: Path
) -> None:
    _, config, _ = image
    assert config["config"]["User"] == f"{UID}:{UID}"
    entry = config["config"]["Entrypoint"]
    assert entry[0] == "/usr/bin/python3.11" and entry[1] == "/usr/bin/agent-sandbox-controller"
    for shell in ("bin/sh", "usr/bin/sh", "bin/bash", "usr/bin/bash", "bin/dash", "usr/bin/dash"):
        assert not os.path.lexists(rootfs / shell), shell
    passwd = (rootfs / "etc/passwd").read_text()
    assert f"nonroot:x:{UID}:{UID}:" in passwd


def test_version_runs_under_chroot_as_65532_read_only(
    image: tuple[dict[str, Any], dict[str, Any], bytes], rootfs: Path
) -> None:
    _, config, _ = image
    with pytest.raises(OSError):  # the bind mount really is read-only
        (rootfs / "probe").write_text("x")
    proc = subprocess.run(
        chroot_argv(rootfs, config, "--version"),
        env=image_env(config),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("agent-sandbox-controller, version "), proc.stdout
    assert "python version:   3.11." in proc.stdout, proc.stdout


@contextlib.contextmanager
def kubeconfig_inside(rootfs: Path, cluster: DevCluster) -> Iterator[None]:
    """The cluster's kubeconfig at KUBECONFIG in the tree under the read-only mount (written
    through the writable tree, readable by 65532 only)."""
    tree = rootfs.parent / "tree"
    path = tree / KUBECONFIG.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cluster.kubeconfig, path)
    os.chown(path, UID, UID)
    path.chmod(0o400)
    try:
        yield
    finally:
        path.unlink()


def controller_ready_in_chroot(
    rootfs: Path, config: dict[str, Any], cluster: DevCluster, log: Path
) -> None:
    """The image's controller under chroot, against ``cluster``, answers /readyz with its
    informers synced and serves its metrics; it then stops on SIGTERM with exit code 0."""
    with kubeconfig_inside(rootfs, cluster):
        metrics, probes = free_port(), free_port()
        argv = chroot_argv(
            rootfs,
            config,
            f"--kubeconfig={KUBECONFIG}",
            "--extensions",
            "--leader-elect=false",
            f"--metrics-bind-address=127.0.0.1:{metrics}",
            f"--health-probe-bind-address=127.0.0.1:{probes}",
        )
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, env=image_env(config), stdout=out, stderr=out)
        try:

            def readyz() -> str | None:
                assert proc.poll() is None, log.read_text()
                try:
                    with urllib.request.urlopen(
                        f"http://127.0.0.1:{probes}/readyz?verbose", timeout=2
                    ) as r:
                        return str(r.read().decode()) if r.status == 200 else None
                except OSError:
                    return None

            body = eventually_sync(readyz, within=90, what="/readyz OK from the image's rootfs")
            assert "informers-synced" in body, body
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as r:
                assert b"agent_sandbox_build_info" in r.read()
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
        assert code == 0, log.read_text()


def test_the_controller_becomes_ready_under_chroot_read_only(
    image: tuple[dict[str, Any], dict[str, Any], bytes], rootfs: Path, tmp_path: Path
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
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "hack" / "image" / "build.py"),
            "--dist",
            str(tmp_path / "dist"),
            "--work",
            str(tmp_path / "work"),
        ],
        env=dict(os.environ, VERSION=version()),
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == expected
    assert (tmp_path / "dist" / ARCHIVE.name).read_bytes() == ARCHIVE.read_bytes()
