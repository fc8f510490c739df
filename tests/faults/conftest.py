"""The fault suite (``make test-faults``): every test here is marked ``faults``.

Tests that need no control plane of their own use the session's (tests/conftest.py: one per
session, shared with tests/integration); the API-fault tests restart kube-apiserver, so they get
a private control plane per module (``private_cluster``), with the audit log on (blocking: a
write's event is on disk before its answer).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentsandbox.devcluster.cluster import DevCluster
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
