"""``spec.operatingMode`` (upstream HEAD #801) beside ``spec.replicas``, against the real control
plane: the Sandbox controller treats ``Suspended`` as replicas 0 and ``Running`` as replicas 1, so
a sandbox suspended by upstream HEAD (``operatingMode: Suspended``, no replicas) stays suspended
here; the CRD rejects a spec whose two fields disagree, with a message that says how to fix it.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.resources import SANDBOXES
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import Invalid
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.resources import PODS
from tests.polling import eventually, stays

from .test_sandbox_controller import (
    condition,
    get_or_none,
    new_sandbox,
    ready_is,
    wait_ready,
)

MODE_DISAGREES = (
    "spec.operatingMode and spec.replicas disagree: Suspended means replicas 0 and Running "
    "means replicas 1; change both together, or remove spec.replicas"
)


@pytest.fixture(scope="module")
def sandbox_controller_options() -> dict[str, Any]:
    return {"workers": 2, "cluster_domain": "cluster.local"}


async def wait_suspended(client: Client, name: str, ns: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        sb = await client.get(SANDBOXES, name, ns)
        suspended = condition(sb, "Suspended")
        return sb if suspended is not None and suspended["status"] == "True" else None

    sb = await eventually(check, within=15.0, what=f"sandbox {name} Suspended=True")
    assert ready_is(sb, "False", "SandboxSuspended")
    assert await get_or_none(client, PODS, name, ns) is None
    return sb


async def test_a_suspended_sandbox_has_no_pod_and_running_brings_it_back(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    # as upstream HEAD stores it: operatingMode only, no replicas
    await client.create(SANDBOXES, new_sandbox("held", operatingMode="Suspended"), namespace)
    sb = await wait_suspended(client, "held", namespace)
    assert "replicas" not in sb["spec"]
    suspended = condition(sb, "Suspended")
    assert suspended is not None and suspended["status"] == "True"
    await stays(
        lambda: get_or_none(client, PODS, "held", namespace),
        accept=lambda pod: pod is None,
        for_=0.5,
        what="no pod over a later pass either",
    )

    await client.patch(SANDBOXES, "held", {"spec": {"operatingMode": "Running"}}, namespace)
    sb = await wait_ready(client, "held", namespace)
    assert sb["status"]["replicas"] == 1
    assert (await client.get(PODS, "held", namespace))["metadata"]["name"] == "held"
    assert keys.ANNOTATION_POD_NAME not in (sb["metadata"].get("annotations") or {})

    # and back: Suspended deletes the pod again
    await client.patch(SANDBOXES, "held", {"spec": {"operatingMode": "Suspended"}}, namespace)
    sb = await wait_suspended(client, "held", namespace)
    assert keys.ANNOTATION_POD_NAME not in (sb["metadata"].get("annotations") or {})


async def test_a_running_sandbox_is_suspended_by_operating_mode_with_replicas_zero(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    await client.create(SANDBOXES, new_sandbox("both", replicas=1), namespace)
    await wait_ready(client, "both", namespace)
    # replicas is set, so operatingMode alone would disagree with it: change both together
    patch = {"spec": {"operatingMode": "Suspended", "replicas": 0}}
    await client.patch(SANDBOXES, "both", patch, namespace)
    await wait_suspended(client, "both", namespace)
    # or drop replicas and let the mode decide
    patch = {"spec": {"operatingMode": "Running", "replicas": None}}
    await client.patch(SANDBOXES, "both", patch, namespace)
    sb = await wait_ready(client, "both", namespace)
    assert "replicas" not in sb["spec"] and sb["spec"]["operatingMode"] == "Running"


@pytest.mark.parametrize(("mode", "replicas"), [("Suspended", 1), ("Running", 0)])
async def test_contradicting_operating_mode_and_replicas_are_rejected(
    client: Client, namespace: str, mode: str, replicas: int
) -> None:
    body = new_sandbox("contra", operatingMode=mode, replicas=replicas)
    with pytest.raises(Invalid) as err:
        await client.create(SANDBOXES, body, namespace)
    assert MODE_DISAGREES in err.value.message


async def test_operating_mode_alone_is_rejected_beside_a_disagreeing_replicas(
    client: Client, namespace: str
) -> None:
    # what upstream 1.0.x's GKE snapshot path sends to a sandbox that has replicas: 1
    await client.create(SANDBOXES, new_sandbox("patched", replicas=1), namespace)
    with pytest.raises(Invalid) as err:
        await client.patch(
            SANDBOXES, "patched", {"spec": {"operatingMode": "Suspended"}}, namespace
        )
    assert MODE_DISAGREES in err.value.message
