"""The controller's OCI image run without a container engine, as tests/image (dist/'s image,
`make image-check`) and tests/release_artifacts (the release's) run it, as root: the layer of the
archive's one image unpacked and bind-mounted read-only, and the image config's entrypoint run
under ``chroot`` as its user, with the config's environment alone."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentsandbox.devcluster.cluster import DevCluster, free_port
from tests.controller_process import becomes_ready

UID = 65532
KUBECONFIG = "/etc/agentsandbox/kubeconfig"

REPOSITORY = Path(__file__).resolve().parents[1]


def build_again(out: Path, version: str, *args: str) -> str:
    """Build the image once more with ``hack/image/build.py`` (``args``: e.g. ``--arch arm64``)
    into ``out/dist`` and ``out/work``, from the caches ``make image`` filled; its digest."""
    proc = subprocess.run(
        [
            sys.executable,
            str(REPOSITORY / "hack" / "image" / "build.py"),
            *args,
            "--dist",
            str(out / "dist"),
            "--work",
            str(out / "work"),
        ],
        env=dict(os.environ, VERSION=version),
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


#: (manifest, config, the layer's gzip bytes)
Image = tuple[dict[str, Any], dict[str, Any], bytes]


def blobs(archive: Path) -> Image:
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


def chroot_argv(rootfs: Path, config: dict[str, Any], *args: str) -> list[str]:
    user = config["config"]["User"]
    chroot = shutil.which("chroot") or "/usr/sbin/chroot"  # the host's, found on the host's PATH
    return [chroot, f"--userspec={user}", str(rootfs), *config["config"]["Entrypoint"], *args]


def image_env(config: dict[str, Any]) -> dict[str, str]:
    """The image config's environment alone (nothing of the host's)."""
    return dict(e.split("=", 1) for e in config["config"]["Env"])


def version_in_chroot(rootfs: Path, config: dict[str, Any]) -> str:
    """What the image's controller prints for ``--version`` under chroot; it must exit 0."""
    proc = subprocess.run(
        chroot_argv(rootfs, config, "--version"),
        env=image_env(config),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


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
        becomes_ready(
            argv,
            env=image_env(config),
            log=log,
            probes=probes,
            metrics=metrics,
            within=90,
            what="/readyz OK from the image's rootfs",
        )
