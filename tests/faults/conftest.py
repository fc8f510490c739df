"""The fault suite (``make test-faults``): every test here is marked ``faults``.

Tests that need no control plane of their own use the session's (tests/conftest.py: one per
session, shared with tests/integration); the API-fault tests restart kube-apiserver, so they get
a private control plane per module (``private_cluster``), with the audit log on (blocking: a
write's event is on disk before its answer), and a second kube-apiserver on its etcd that no
fault touches (``witness``), through which the claim history watches (``wclient``).
"""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agentsandbox.devcluster.cluster import DevCluster, free_port
from agentsandbox.devcluster.process import Component, spawn, wait_healthy
from agentsandbox.kube.client import Client
from agentsandbox.kube.config import load_kubeconfig
from tests.conftest import started_cluster
from tests.integration.invariants import controller_process

from .faultkit import ProxyProcess, delete_namespace, kubeconfig_via, proxy


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


@pytest.fixture(scope="module")
def witness(
    private_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """A second kube-apiserver on the private control plane's etcd, which the faults never touch
    (the tests kill and restart the first one); returns a kubeconfig of it. The claim history
    watches through it: its watch goes on across a restart of the first kube-apiserver, whose
    rebuilt watch cache would answer 410 Gone (a gap in the history). It keeps its watch cache:
    served from etcd itself, a watch of sandboxes was seen to deliver nothing more after an
    etcd compaction (the compaction test then timed out waiting for the history), while the
    cache's own watch of etcd, at its head, goes on."""
    port = free_port()
    certs = tmp_path_factory.mktemp("witness-certs")
    argv = []
    for arg in private_cluster._argv("kube-apiserver"):
        if arg.startswith("--audit-"):
            continue  # the first kube-apiserver's audit log is the one the tests read
        if arg.startswith("--secure-port="):
            arg = f"--secure-port={port}"
        elif arg.startswith("--cert-dir="):
            arg = f"--cert-dir={certs}"
        argv.append(arg)
    argv += ["--endpoint-reconciler-type=none"]
    ctx = private_cluster._ssl_context()

    def ready() -> bool:
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{port}/readyz", timeout=2, context=ctx
            ) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    comp = Component("kube-apiserver-witness", argv, private_cluster.logs / "witness.log", ready)
    spawn(comp, private_cluster.workdir)
    try:
        wait_healthy(comp, 120)
        yield kubeconfig_via(private_cluster, f"https://127.0.0.1:{port}", certs)
    finally:
        assert comp.proc is not None
        comp.proc.kill()
        comp.proc.wait(10)


@pytest.fixture
async def wclient(witness: Path) -> AsyncIterator[Client]:
    """A client of the witness kube-apiserver (for the claim history's watches)."""
    c = Client(await load_kubeconfig(str(witness)), qps=0)
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
def pns(private_cluster: DevCluster) -> Iterator[str]:
    """A fresh namespace on the module's private control plane, deleted afterwards, and gone
    before the next test starts (:func:`delete_namespace`: the next may kill kube-apiserver)."""
    name = f"f-{uuid.uuid4().hex[:10]}"
    private_cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    yield name
    delete_namespace(private_cluster, name)


@pytest.fixture
def fault_proxy(private_cluster: DevCluster, tmp_path: Path) -> Iterator[ProxyProcess]:
    """The HTTP fault proxy in front of the private kube-apiserver, and the controller behind
    it."""
    target = f"127.0.0.1:{private_cluster.ports['kube-apiserver']}"
    with (
        proxy(target, tmp_path, http_pki=private_cluster.pki) as px,
        controller_process(
            private_cluster,
            tmp_path / "controller.log",
            kubeconfig=kubeconfig_via(private_cluster, px.url_http, tmp_path),
        ) as proc,
    ):
        yield px
        assert proc.poll() is None, "the controller exited"
