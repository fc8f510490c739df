"""The release's OCI archive pushes to a registry as README.md says, and install.yaml's pinned
image then resolves there (`make release-check`, after hack/release_check.py; not in make test).

crane (hack/crane/build.sh, its path in ``CRANE``) serves an in-memory registry on 127.0.0.1 and
pushes; the release directory is ``RELEASE_DIST`` (``build/release-check/<version>``), built
with ``VERSION``. No network beyond 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agentsandbox.devcluster.cluster import free_port
from tests.polling import eventually_sync
from tests.release_env import env, release_check


@pytest.fixture(scope="module")
def crane() -> str:
    path = env("CRANE")
    assert os.access(path, os.X_OK), path
    return path


@pytest.fixture(scope="module")
def dist() -> Path:
    path = Path(env("RELEASE_DIST"))
    assert (path / release_check.archive_name(env("VERSION"))).is_file(), path
    return path


@pytest.fixture(scope="module")
def registry(crane: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``crane registry serve`` on a free 127.0.0.1 port; stopped by its PID."""
    port = free_port()
    log = tmp_path_factory.mktemp("registry") / "registry.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [crane, "registry", "serve", "--address", f"127.0.0.1:{port}"],
            stdout=out,
            stderr=out,
        )
    try:

        def up() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        eventually_sync(up, within=30, what="crane's registry answers /v2/")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _crane(crane: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([crane, *args], capture_output=True, text=True, timeout=120, check=False)


def _install_image(dist: Path) -> str:
    docs = [d for d in yaml.safe_load_all((dist / "install.yaml").read_text()) if d]
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return str(c["image"])


def test_crane_pushes_the_unpacked_layout_and_install_yamls_digest_resolves(
    crane: str, dist: Path, registry: str, tmp_path: Path
) -> None:
    version = env("VERSION")
    archive = dist / release_check.archive_name(version)
    digest = (dist / "image.digest").read_text().strip()
    # crane push reads a file as a docker tarball: the OCI layout archive is unpacked first
    refused = _crane(crane, "push", str(archive), f"{registry}/agent-sandbox-controller:x")
    assert refused.returncode != 0 and "manifest.json" in refused.stderr, refused.stderr
    layout = tmp_path / "layout"
    layout.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(layout, filter="data")
    tag = version.replace("+", "_")
    ref = f"{registry}/agent-sandbox-controller:{tag}"
    pushed = _crane(crane, "push", str(layout), ref)
    assert pushed.returncode == 0, pushed.stderr
    assert pushed.stdout.strip() == f"{registry}/agent-sandbox-controller@{digest}"
    assert _crane(crane, "digest", ref).stdout.strip() == digest

    # install.yaml's reference, its repository moved to this registry, pulls the same bytes
    image = _install_image(dist)
    assert image.endswith(f":{tag}@{digest}"), image
    local = f"{registry}/agent-sandbox-controller:{image.rsplit('/', 1)[-1].split(':', 1)[1]}"
    manifest = subprocess.run(
        [crane, "manifest", local], capture_output=True, timeout=120, check=False
    )
    assert manifest.returncode == 0, manifest.stderr
    assert "sha256:" + hashlib.sha256(manifest.stdout).hexdigest() == digest
    config = json.loads(_crane(crane, "config", local).stdout)
    assert config["config"]["User"] == "65532:65532"
    assert config["config"]["Labels"]["org.opencontainers.image.version"] == version
