"""The integration tests' own fixtures. The session's local control plane (``cluster``,
``namespace``, ``kubeconfig``, ``client``) is in tests/conftest.py, shared with tests/faults:
one control plane per session, whichever directories run.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentsandbox.controllers.sandbox import controller as sandbox_controller
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube.client import Client
from agentsandbox.kube.manager import Manager

from .runtime_helpers import running

UPSTREAM_SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "controlplane" / "upstream.sh"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


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
