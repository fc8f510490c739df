"""The fault suite (``make test-faults``): every test here is marked ``faults``.

Tests that need no control plane of their own use the session's (tests/conftest.py: one per
session, shared with tests/integration); the API-fault tests restart kube-apiserver, so they get
a private control plane per module (``private_cluster``), with the audit log on (blocking: a
write's event is on disk before its answer).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube.client import Client
from agentsandbox.kube.config import load_kubeconfig
from tests.conftest import started_cluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/faults" in str(item.fspath):
            item.add_marker(pytest.mark.faults)
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="module")
def private_cluster() -> Iterator[DevCluster]:
    """A control plane of this module's own (4 kwok nodes), so kube-apiserver may be killed."""
    with started_cluster(
        "agentsandbox-faults-",
        nodes=4,
        audit=True,
        apiserver_args=("--audit-log-mode=blocking",),  # nothing answered is lost by a kill
    ) as cl:
        yield cl


@pytest.fixture
async def pclient(private_cluster: DevCluster) -> AsyncIterator[Client]:
    """A client of the module's private control plane (no client-side rate limit)."""
    c = Client(await load_kubeconfig(str(private_cluster.kubeconfig)), qps=0, pool_size=100)
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
def pns(private_cluster: DevCluster) -> Iterator[str]:
    """A fresh namespace on the module's private control plane, deleted afterwards."""
    name = f"f-{uuid.uuid4().hex[:10]}"
    private_cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    yield name
    with contextlib.suppress(OSError):
        private_cluster.api("DELETE", f"/api/v1/namespaces/{name}")
