"""The order in which a watcher sees a claim's observability annotations and its Ready, against the
real control plane (docs/design/claim.md, "Observability").

Upstream's e2e test (``TestSandboxClaimObservabilityAnnotation``) waits for a claim's Ready and
then reads ``agents.x-k8s.io/controller-first-observed-at`` from it: that only holds when the
annotation is on the claim no later than the status write that makes it Ready. Reading once
after Ready only sees the order when our controller loses a race; a watch sees every state. So
here every watch event of 20 warm and 5 cold claims is checked: an event with Ready=True carries
the first-observed annotation; the annotation never changes once written; and the first-Ready
guard annotations never come before Ready=True.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.api.timefmt import parse_rfc3339
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube.client import Client
from agentsandbox.kube.informer import Informer
from tests.polling import eventually

from .invariants import SandboxHistory, checked_history, ready_reason
from .test_claims import claim_obj, controllers, wait_claims_ready
from .test_warmpool import pool_obj, template_obj, wait_ready_pool

WARM = 20
COLD = 5
OBSERVED = keys.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT
GUARDS = (keys.ANNOTATION_CLAIM_FIRST_READY_AT, keys.ANNOTATION_CREATION_LATENCY_RECORDED)


@pytest.fixture(autouse=True)
async def claim_history(
    cluster: DevCluster, namespace: str, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of each test, checked against the claim rules at its end
    (tests/integration/invariants.py)."""
    async with checked_history(cluster, request.node.nodeid) as history:
        yield history


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


async def test_every_ready_claim_a_watcher_sees_carries_the_first_observed_annotation(
    client: Client, namespace: str
) -> None:
    events: list[dict[str, Any]] = []  # every claim object the watch delivered, in order

    def on_add(obj: dict[str, Any]) -> None:
        events.append(obj)

    def on_update(_old: dict[str, Any], new: dict[str, Any]) -> None:
        events.append(new)

    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), namespace)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", WARM), namespace)
    watcher = Informer(client, SANDBOX_CLAIMS, namespace)
    watcher.add_handler(on_add, on_update)
    watcher.start()
    try:
        await asyncio.wait_for(watcher.wait_synced(), 10)
        async with controllers(client):
            await wait_ready_pool(client, namespace, "pool", WARM, within=60)
            warm = {f"w-{i:02d}" for i in range(WARM)}
            cold = {f"c-{i:02d}" for i in range(COLD)}
            started = dt.datetime.now(dt.UTC)
            await asyncio.gather(
                *(
                    client.create(SANDBOX_CLAIMS, claim_obj(n, pool="pool"), namespace)
                    for n in warm
                ),
                *(
                    client.create(
                        SANDBOX_CLAIMS, claim_obj(n, template="tpl", warmpool="none"), namespace
                    )
                    for n in cold
                ),
            )
            final = await wait_claims_ready(client, namespace, warm | cold, 60)
            launch = {
                c["metadata"]["name"]: (
                    await client.get(SANDBOXES, c["status"]["sandbox"]["name"], namespace)
                )["metadata"]["labels"].get(keys.LABEL_LAUNCH_TYPE)
                for c in final
            }

            def latest() -> dict[str, dict[str, Any]]:
                return {e["metadata"]["name"]: e for e in events}

            def guarded() -> bool:  # the guards are the last write: the watch has seen it all
                now = latest()
                return all(
                    all(g in _annotations(now.get(n, {"metadata": {}})) for g in GUARDS)
                    for n in warm | cold
                )

            await eventually(guarded, within=10, what="every claim's guards on the watch")
    finally:
        await watcher.stop()

    problems: list[str] = []
    first_observed: dict[str, str] = {}
    ready_events = 0
    was_ready: set[str] = set()
    for obj in events:
        name = obj["metadata"]["name"]
        rv = obj["metadata"]["resourceVersion"]
        ann = _annotations(obj)
        ready = ready_reason(obj)[0] == "True"
        value = ann.get(OBSERVED)
        if ready:
            ready_events += 1
            was_ready.add(name)
            if not value:
                problems.append(f"{name}@{rv}: Ready=True without {OBSERVED}")
        if value and first_observed.setdefault(name, value) != value:
            problems.append(f"{name}@{rv}: {OBSERVED} changed to {value}")
        for guard in GUARDS:
            if guard in ann and name not in was_ready:
                problems.append(f"{name}@{rv}: {guard} before Ready=True")
    versions: dict[str, set[str]] = {}
    for obj in events:
        versions.setdefault(obj["metadata"]["name"], set()).add(obj["metadata"]["resourceVersion"])
    per_claim = sorted(len(v) for v in versions.values())
    print(
        f"\n{len(events)} claim watch events, {ready_events} with Ready=True, "
        f"{WARM} warm + {COLD} cold claims; versions per claim (the create included) "
        f"min {per_claim[0]} median {per_claim[len(per_claim) // 2]} max {per_claim[-1]}"
    )
    assert problems == [], problems[:10]
    assert was_ready == warm | cold, "a Ready event for every claim"
    assert launch == {**dict.fromkeys(warm, "warm"), **dict.fromkeys(cold, "cold")}, launch
    for name, obj in latest().items():  # what upstream's e2e test reads on the Ready claim
        when = parse_rfc3339(_annotations(obj)[OBSERVED])
        assert when >= started, (name, when, started)
