"""The Sandbox controller's children against the real local control plane (pods run by kwok,
the real garbage collector in kube-controller-manager).

One manager with the Sandbox controller runs in-process for the whole module; every test works
in its own namespace.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.resources import SANDBOXES
from agentsandbox.kube.client import Client
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.resources import CONFIGMAPS, PERSISTENTVOLUMECLAIMS, PODS, SERVICES
from tests.polling import eventually, stays

from .test_sandbox_controller import (
    CLUSTER_DOMAIN,
    condition,
    event_reasons,
    get_or_none,
    new_sandbox,
    ready_is,
    wait_event,
    wait_ready,
)


@pytest.fixture(scope="module")
def sandbox_controller_options() -> dict[str, Any]:
    return {"workers": 4, "cluster_domain": CLUSTER_DOMAIN}


def claim(name: str, *, labels: dict[str, str] | None = None, owner: Any = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


DATA_VCT = {
    "metadata": {"name": "data"},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
}


# ------------------------------------------------------------ a PVC that is not ours blocks the pod
async def test_a_pvc_owned_by_another_controller_blocks_the_pod(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    """A deliberate fix: upstream creates the pod, which then mounts the foreign volume."""
    owner = await client.create(
        CONFIGMAPS, {"metadata": {"name": "someone-else"}, "data": {}}, namespace
    )
    foreign = await client.create(
        PERSISTENTVOLUMECLAIMS, claim("data-grab", owner=owner), namespace
    )
    await client.create(SANDBOXES, new_sandbox("grab", volumeClaimTemplates=[DATA_VCT]), namespace)

    async def blocked() -> dict[str, Any] | None:
        sb = await client.get(SANDBOXES, "grab", namespace)
        return sb if ready_is(sb, "False", "ReconcilerError") else None

    sb = await eventually(blocked, within=15.0, what="Ready=False ReconcilerError")
    assert condition(sb, "Ready")["message"] == (  # type: ignore[index]
        'Error seen: PVC "data-grab" is owned by ConfigMap/someone-else '
        f'(UID: {owner["metadata"]["uid"]}), not by sandbox "grab"\n'
        'pod "grab" is not created: it would mount PVC "data-grab", not owned by sandbox "grab"'
    )
    await wait_event(client, namespace, "grab", "Warning", "ReconcilerError")
    await stays(
        lambda: get_or_none(client, PODS, "grab", namespace),
        accept=lambda pod: pod is None,
        for_=1.0,
        what="no pod over a few more passes (backoff)",
    )
    assert "replicas" not in sb["status"]
    kept = await client.get(PERSISTENTVOLUMECLAIMS, "data-grab", namespace)
    assert kept["metadata"]["ownerReferences"] == foreign["metadata"]["ownerReferences"]


async def test_a_refused_pvc_blocks_the_pod_until_it_is_labelled_adoptable(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    mine = await client.create(PERSISTENTVOLUMECLAIMS, claim("data-later"), namespace)
    created = await client.create(
        SANDBOXES, new_sandbox("later", volumeClaimTemplates=[DATA_VCT]), namespace
    )

    async def blocked() -> dict[str, Any] | None:
        sb = await client.get(SANDBOXES, "later", namespace)
        return sb if ready_is(sb, "False", "ReconcilerError") else None

    sb = await eventually(blocked, within=15.0, what="Ready=False ReconcilerError")
    message = condition(sb, "Ready")["message"]  # type: ignore[index]
    assert 'PVC "data-later" already exists and has no controller' in message
    assert 'pod "later" is not created: it would mount PVC "data-later"' in message
    await wait_event(client, namespace, "later", "Warning", "AdoptionRefused")
    assert await get_or_none(client, PODS, "later", namespace) is None

    await client.patch(
        PERSISTENTVOLUMECLAIMS,
        "data-later",
        {"metadata": {"labels": {keys.LABEL_ADOPTABLE: "true"}}},
        namespace,
    )
    pod = await eventually(
        lambda: get_or_none(client, PODS, "later", namespace), within=20, what="pod created"
    )
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "data-later"}} in pod["spec"][
        "volumes"
    ]
    adopted = await client.get(PERSISTENTVOLUMECLAIMS, "data-later", namespace)
    assert adopted["metadata"]["uid"] == mine["metadata"]["uid"]
    assert adopted["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]


# ---------------------------------------------------------------------------------- pod metadata
async def test_pod_template_label_and_annotation_edits_reach_the_live_pod(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    sb = new_sandbox("meta", labels={"team": "a", "tier": "gold"})
    sb["spec"]["podTemplate"]["metadata"]["annotations"] = {"note": "one", "old": "x"}
    await client.create(SANDBOXES, sb, namespace)
    await wait_ready(client, "meta", namespace)
    first = await client.get(PODS, "meta", namespace)
    assert first["metadata"]["labels"]["tier"] == "gold"

    edit = {
        "spec": {
            "podTemplate": {
                "metadata": {
                    "labels": {"team": "b", "tier": None},
                    "annotations": {"note": "two", "old": None},
                }
            }
        }
    }
    await client.patch(SANDBOXES, "meta", edit, namespace)

    async def synced() -> dict[str, Any] | None:
        pod = await client.get(PODS, "meta", namespace)
        return pod if pod["metadata"]["labels"].get("team") == "b" else None

    pod = await eventually(synced, within=15.0, what="the new label on the pod")
    assert pod["metadata"]["uid"] == first["metadata"]["uid"]  # the same pod, not a new one
    assert pod["metadata"]["labels"] == {
        "team": "b",
        keys.LABEL_SANDBOX_NAME_HASH: name_hash("meta"),
    }
    annotations = pod["metadata"]["annotations"]
    assert annotations["note"] == "two" and "old" not in annotations
    assert annotations[keys.ANNOTATION_PROPAGATED_LABELS] == "team"
    assert annotations[keys.ANNOTATION_PROPAGATED_ANNOTATIONS] == "note"


# ---------------------------------------------------------------------------------- GC
async def test_deleting_a_sandbox_removes_its_pod_and_service_through_the_garbage_collector(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    """Needs kube-controller-manager's garbage collector: up to ~20 s."""
    await client.create(SANDBOXES, new_sandbox("bye", service=True), namespace)
    await wait_ready(client, "bye", namespace)
    assert await get_or_none(client, SERVICES, "bye", namespace) is not None
    await client.delete(SANDBOXES, "bye", namespace)

    async def collected() -> bool:
        return (
            await get_or_none(client, PODS, "bye", namespace) is None
            and await get_or_none(client, SERVICES, "bye", namespace) is None
            and await get_or_none(client, SANDBOXES, "bye", namespace) is None
        )

    await eventually(collected, within=30, what="pod and service garbage-collected")


# ---------------------------------------------------------------------------------- Service
async def test_a_drifted_service_selector_is_restored(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    await client.create(SANDBOXES, new_sandbox("drift", service=True), namespace)
    await wait_ready(client, "drift", namespace)
    track = {keys.LABEL_SANDBOX_NAME_HASH: name_hash("drift")}
    await client.patch(
        SERVICES,
        "drift",
        {"spec": {"selector": {"app": "elsewhere", keys.LABEL_SANDBOX_NAME_HASH: None}}},
        namespace,
    )

    async def restored() -> dict[str, Any] | None:
        svc = await client.get(SERVICES, "drift", namespace)
        return svc if svc["spec"].get("selector") == track else None

    svc = await eventually(restored, within=15.0, what="selector restored")
    assert (
        svc["metadata"]["labels"][keys.LABEL_SANDBOX_NAME_HASH]
        == track[keys.LABEL_SANDBOX_NAME_HASH]
    )


async def test_an_unowned_selectorless_headless_service_with_the_opt_in_label_is_adopted(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    """The apiserver defaults a selector-less headless Service to RequireDualStack with both
    families; adding our selector must still be a valid update on a single-stack cluster."""
    mine = await client.create(
        SERVICES,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "hl", "labels": {keys.LABEL_ADOPTABLE: "true"}},
            "spec": {"clusterIP": "None"},
        },
        namespace,
    )
    created = await client.create(SANDBOXES, new_sandbox("hl", service=True), namespace)
    sb = await wait_ready(client, "hl", namespace)
    assert sb["status"]["service"] == "hl"
    svc = await client.get(SERVICES, "hl", namespace)
    assert svc["metadata"]["uid"] == mine["metadata"]["uid"]
    assert svc["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    assert svc["spec"]["selector"] == {keys.LABEL_SANDBOX_NAME_HASH: name_hash("hl")}
    assert svc["spec"]["clusterIP"] == "None"
    assert ("Normal", "Adopted") in await event_reasons(client, namespace, "hl")
