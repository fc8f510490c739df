"""One warm and one cold claim through the controller process, then a scrape of /metrics: every
claim family carries the right ``launch_type`` (the label the claim controller writes, not
upstream's pod-name guess that calls cold sandboxes warm)."""

from __future__ import annotations

import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS
from agentsandbox.devcluster.cluster import DevCluster, free_port
from agentsandbox.kube.client import Client
from tests.polling import eventually

from .invariants import SandboxHistory, checked_history
from .test_claims import claim_obj, controller_process, wait_claims_ready
from .test_warmpool import (
    pool_obj,
    template_obj,
    wait_ready_pool,
)


@pytest.fixture(autouse=True)
async def claim_history(
    cluster: DevCluster, namespace: str, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of each test, checked against the claim rules at its end
    (tests/integration/invariants.py)."""
    async with checked_history(cluster, request.node.nodeid) as history:
        yield history


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


async def test_metrics_after_one_warm_and_one_cold_claim_carry_the_right_launch_type(
    client: Client,
    namespace: str,
    cluster: DevCluster,
    tmp_path: Path,
) -> None:
    port = free_port()
    log = tmp_path / "controller.log"
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), namespace)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 1), namespace)
    with controller_process(cluster, log, metrics_port=port):
        await wait_ready_pool(client, namespace, "pool", 1, within=30)
        await client.create(SANDBOX_CLAIMS, claim_obj("warm", pool="pool"), namespace)
        await client.create(
            SANDBOX_CLAIMS, claim_obj("cold", template="tpl", warmpool="none"), namespace
        )
        await wait_claims_ready(client, namespace, {"warm", "cold"}, 30)

        def replacement_counted() -> dict[str, list[tuple[dict[str, str], float]]] | None:
            got = scrape(port)
            gauge = {
                (labels["launch_type"], labels["owned_by"]): value
                for labels, value in got.get("agent_sandboxes", [])
                if labels.get("namespace") == namespace
            }
            return got if gauge.get(("warm", "SandboxWarmPool")) == 1.0 else None

        samples = await eventually(  # the pool's replacement is the last to be counted
            replacement_counted, within=10, what="the pool's replacement in agent_sandboxes"
        )

    def ours(name: str) -> list[tuple[dict[str, str], float]]:
        return [
            (labels, value)
            for labels, value in samples.get(name, [])
            if labels.get("namespace", namespace) == namespace
        ]

    creations = {
        (labels["launch_type"], labels["warmpool_name"], labels["pod_condition"]): value
        for labels, value in ours("agent_sandbox_claim_creation_total")
    }
    assert creations == {("warm", "pool", "ready"): 1.0, ("cold", "none", "not_ready"): 1.0}
    # autoscaler review #18: the warm claim asked for the pool and got a Ready member; the cold
    # one (warmpool: none) asked for no pool and is not counted
    served = {
        (labels["pool"], labels["served"]): value
        for labels, value in ours("agent_sandbox_warmpool_claims_served_total")
    }
    assert served == {("pool", "warm_ready"): 1.0}, served
    for family in (
        "agent_sandbox_claim_controller_startup_latency_ms_count",
        "agent_sandbox_creation_latency_ms_count",
    ):
        by_type = {labels["launch_type"]: value for labels, value in ours(family)}
        assert by_type.get("warm") == 1.0 and by_type.get("cold") == 1.0, (family, by_type)
    gauge = {
        (labels["launch_type"], labels["owned_by"]): value
        for labels, value in ours("agent_sandboxes")
        if labels["namespace"] == namespace
    }
    assert gauge.get(("warm", "SandboxClaim")) == 1.0, gauge
    assert gauge.get(("cold", "SandboxClaim")) == 1.0, gauge
    assert gauge.get(("warm", "SandboxWarmPool")) == 1.0, gauge  # the replacement
    assert samples.get("agent_sandbox_build_info"), "build info is exported"
