"""The integration tests' own fixtures. The session's local control plane (``cluster``,
``namespace``, ``kubeconfig``, ``client``) is in tests/conftest.py, shared with tests/faults:
one control plane per session, whichever directories run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentsandbox.controllers.sandbox import controller as sandbox_controller
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube.client import Client
from agentsandbox.kube.manager import Manager

from .runtime_helpers import running


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


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
