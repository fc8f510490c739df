"""A real local control plane for the integration tests (one per test session).

The cluster is started by the project itself (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok). If it cannot be started the tests FAIL; they never skip.
Set AGENTSANDBOX_CLUSTER_DIR=.cluster to reuse a cluster started by ``make cluster``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentsandbox.controllers.sandbox import controller as sandbox_controller
from agentsandbox.devcluster.binaries import BinariesError, repo_root
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.devcluster.process import ClusterStartError
from agentsandbox.kube.client import Client
from agentsandbox.kube.manager import Manager

from .runtime_helpers import running

TESTDATA = Path(__file__).parent / "testdata"
UPSTREAM_SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "controlplane" / "upstream.sh"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


def _crd_paths() -> list[Path]:
    paths = [TESTDATA / "crds"]
    root = repo_root()
    if root is not None and (root / "deploy" / "crds").is_dir():
        paths.append(root / "deploy" / "crds")
    return [p for p in paths if p.is_dir()]


def upstream_dir() -> Path:
    """Where the build cache holds upstream agent-sandbox's files: the Go module pinned in
    hack/controlplane/upstream/version.env, which ``make controlplane`` fetches. Like the control
    plane binaries, the script reports the cached directory, fetching first when it is missing."""
    proc = subprocess.run(
        ["bash", str(UPSTREAM_SCRIPT)], stdout=subprocess.PIPE, stderr=None, text=True, check=False
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        pytest.fail(f"{UPSTREAM_SCRIPT} failed (exit code {proc.returncode})", pytrace=False)
    path = Path(lines[-1].strip())
    if not (path / ".module.json").is_file():
        pytest.fail(f"{UPSTREAM_SCRIPT} printed {path}, which holds no module", pytrace=False)
    return path


@pytest.fixture(scope="session")
def upstream() -> Path:
    """Upstream agent-sandbox's files (its CRDs and example manifests) at the pinned release.
    Cannot be found: the test FAILS (never a skip)."""
    return upstream_dir()


@contextlib.contextmanager
def started_cluster(prefix: str, **options: Any) -> Iterator[DevCluster]:
    """A control plane of its own in a fresh directory (``DevCluster`` options), started, stopped
    by PID afterwards; its directory (logs) is kept only when the code inside failed. A start
    that fails FAILS the test (never a skip)."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    cl = DevCluster(workdir, crd_paths=_crd_paths(), **options)
    try:
        cl.start()
    except (ClusterStartError, BinariesError) as err:
        pytest.fail(f"could not start the local control plane: {err}", pytrace=False)
    failed = False
    try:
        yield cl
    except BaseException:
        failed = True
        raise
    finally:
        cl.stop(keep_logs=True)
        if not failed:
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster() -> Iterator[DevCluster]:
    reuse = os.environ.get("AGENTSANDBOX_CLUSTER_DIR")
    if reuse:
        attached = DevCluster.attach(Path(reuse))
        if attached is None or not attached.healthy():
            pytest.fail(f"AGENTSANDBOX_CLUSTER_DIR={reuse}: no healthy cluster there")
        yield attached
        return
    with started_cluster("agentsandbox-test-cluster-", nodes=10) as cl:
        yield cl


@pytest.fixture
def namespace(cluster: DevCluster) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (the namespace controller empties it)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    yield name
    cluster.api("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
def kubeconfig(cluster: DevCluster) -> str:
    return str(cluster.kubeconfig)


@pytest.fixture
async def client(kubeconfig: str) -> AsyncIterator[Client]:
    """A client of the session's control plane, unthrottled (qps 0), default pool size (100)."""
    async with Client.from_kubeconfig(kubeconfig, qps=0) as c:
        yield c


@pytest.fixture(scope="module")
async def module_client(cluster: DevCluster) -> AsyncIterator[Client]:
    """One unthrottled client (qps 0) for the whole module: for module-scoped fixtures (the
    controllers a module shares, its namespaces)."""
    async with Client.from_kubeconfig(str(cluster.kubeconfig), qps=0) as c:
        yield c


@pytest.fixture(scope="module")
async def sandbox_manager(
    module_client: Client, sandbox_controller_options: dict[str, Any]
) -> AsyncIterator[Manager]:
    """A manager running only the Sandbox controller, for the whole module (no servers, no
    leader election), started and its informers synced. The module using it says how the
    controller is set up in a ``sandbox_controller_options`` fixture (``setup``'s keywords)."""
    mgr = Manager(module_client)
    sandbox_controller.setup(mgr, **sandbox_controller_options)
    async with running(mgr):
        await asyncio.wait_for(mgr.wait_started(), 10)
        await asyncio.wait_for(mgr.informers.wait_synced(), 10)
        yield mgr
