"""The Sandbox controller against the real local control plane (pods run by kwok).

One manager with the Sandbox controller runs in-process for the whole module; every test works
in its own namespace.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.resources import SANDBOXES
from agentsandbox.api.timefmt import format_rfc3339_nano
from agentsandbox.devcluster.cluster import LIFECYCLE_LABEL
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import NotFound
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.resources import EVENTS, PERSISTENTVOLUMECLAIMS, PODS, SERVICES
from tests.polling import eventually, stays

CLUSTER_DOMAIN = "test.example"


@pytest.fixture(scope="module")
def sandbox_controller_options() -> dict[str, Any]:
    return {"workers": 4, "cluster_domain": CLUSTER_DOMAIN}


def new_sandbox(name: str, *, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    pod_template: dict[str, Any] = {
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}
    }
    if labels:
        pod_template["metadata"] = {"labels": labels}
    return {
        "apiVersion": SANDBOXES.api_version,
        "kind": "Sandbox",
        "metadata": {"name": name},
        "spec": {"podTemplate": pod_template, **spec},
    }


def condition(sb: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for c in ((sb or {}).get("status") or {}).get("conditions") or ():
        if c["type"] == type_:
            return dict(c)
    return None


def ready_is(sb: dict[str, Any] | None, status: str, reason: str) -> bool:
    c = condition(sb, "Ready")
    return c is not None and c["status"] == status and c["reason"] == reason


async def get_or_none(client: Client, resource: Any, name: str, ns: str) -> dict[str, Any] | None:
    try:
        return await client.get(resource, name, ns)
    except NotFound:
        return None


async def wait_ready(client: Client, name: str, ns: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        sb = await client.get(SANDBOXES, name, ns)
        return sb if ready_is(sb, "True", "DependenciesReady") else None

    return await eventually(check, within=15.0, what=f"sandbox {name} Ready")


async def event_reasons(client: Client, ns: str, name: str) -> list[tuple[str, str]]:
    listed = await client.list(EVENTS, ns, field_selector=f"regarding.name={name}")
    return [
        (e["type"], e["reason"])
        for e in listed.items
        if e.get("reportingController") == "sandbox-controller"
        and e["regarding"].get("kind") == "Sandbox"
    ]


async def wait_event(client: Client, ns: str, name: str, type_: str, reason: str) -> None:
    async def check() -> bool:
        return (type_, reason) in await event_reasons(client, ns, name)

    await eventually(check, within=15.0, what=f"{type_} event {reason} on {name}")


# ---------------------------------------------------------------------------------------------
async def test_sandbox_becomes_ready_with_pod_ips_once_its_pod_runs(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    created = await client.create(SANDBOXES, new_sandbox("web", labels={"team": "a"}), namespace)
    sb = await wait_ready(client, "web", namespace)
    status = sb["status"]
    assert condition(sb, "Ready") == {
        "type": "Ready",
        "status": "True",
        "reason": "DependenciesReady",
        "message": "Pod is Ready",
        "observedGeneration": created["metadata"]["generation"],
        "lastTransitionTime": condition(sb, "Ready")["lastTransitionTime"],  # type: ignore[index]
    }
    pod = await client.get(PODS, "web", namespace)
    assert status["podIPs"] == [ip["ip"] for ip in pod["status"]["podIPs"]] != []
    assert status["replicas"] == 1
    assert status["selector"] == f"{keys.LABEL_SANDBOX_NAME_HASH}={name_hash('web')}"
    assert "service" not in status
    # upstream v1.0.1 never adds the deprecated pod-name annotation; neither do we
    assert keys.ANNOTATION_POD_NAME not in (sb["metadata"].get("annotations") or {})

    assert pod["metadata"]["labels"] == {
        "team": "a",
        keys.LABEL_SANDBOX_NAME_HASH: name_hash("web"),
    }
    assert pod["metadata"]["annotations"][keys.ANNOTATION_PROPAGATED_LABELS] == "team"
    [ref] = pod["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
        "Sandbox",
        "web",
        created["metadata"]["uid"],
        True,
    )
    assert any(
        f.get("manager") == "sandbox-controller" and f.get("operation") == "Update"
        for f in pod["metadata"].get("managedFields", [])
    )
    await wait_event(client, namespace, "web", "Normal", "PodCreated")


async def test_service_true_creates_the_headless_service_and_fqdn(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    await client.create(SANDBOXES, new_sandbox("svc", service=True), namespace)
    sb = await wait_ready(client, "svc", namespace)
    assert condition(sb, "Ready")["message"] == "Pod is Ready; Service Exists"  # type: ignore[index]
    assert sb["status"]["service"] == "svc"
    assert sb["status"]["serviceFQDN"] == f"svc.{namespace}.svc.{CLUSTER_DOMAIN}"
    svc = await client.get(SERVICES, "svc", namespace)
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {keys.LABEL_SANDBOX_NAME_HASH: name_hash("svc")}
    assert not svc["spec"].get("ports")
    assert svc["metadata"]["ownerReferences"][0]["uid"] == sb["metadata"]["uid"]

    # service: false deletes it and clears the status fields
    await client.patch(SANDBOXES, "svc", {"spec": {"service": False}}, namespace)

    async def gone() -> bool:
        current = await client.get(SANDBOXES, "svc", namespace)
        return (
            await get_or_none(client, SERVICES, "svc", namespace) is None
            and "serviceFQDN" not in current["status"]
        )

    await eventually(gone, within=15.0, what="service deleted and status cleared")


async def test_scale_to_zero_suspends_and_back_to_one_recreates_the_pod(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    await client.create(SANDBOXES, new_sandbox("sus", service=True), namespace)
    await wait_ready(client, "sus", namespace)
    first = await client.get(PODS, "sus", namespace)

    # 1 -> 0 through the scale subresource
    await client.patch(SANDBOXES, "sus", {"spec": {"replicas": 0}}, namespace, subresource="scale")

    async def suspended() -> dict[str, Any] | None:
        sb = await client.get(SANDBOXES, "sus", namespace)
        s = condition(sb, "Suspended")
        return sb if s is not None and s["status"] == "True" else None

    sb = await eventually(suspended, within=15.0, what="Suspended=True")
    assert await get_or_none(client, PODS, "sus", namespace) is None
    assert condition(sb, "Ready")["message"] == "Sandbox is suspended"  # type: ignore[index]
    assert condition(sb, "Suspended")["reason"] == "PodTerminated"  # type: ignore[index]
    assert condition(sb, "PodScheduled") is None
    assert not {"replicas", "podIPs", "nodeName"} & set(sb["status"])
    assert keys.ANNOTATION_POD_NAME not in (sb["metadata"].get("annotations") or {})
    assert await client.get(SERVICES, "sus", namespace)  # the Service stays
    scale = await client.get(SANDBOXES, "sus", namespace, subresource="scale")
    assert scale["spec"].get("replicas", 0) == 0 and scale["status"].get("replicas", 0) == 0

    # 0 -> 1 through the spec
    await client.patch(SANDBOXES, "sus", {"spec": {"replicas": 1}}, namespace)
    sb = await wait_ready(client, "sus", namespace)
    second = await client.get(PODS, "sus", namespace)
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    s = condition(sb, "Suspended")
    assert s is not None and (s["status"], s["reason"]) == ("False", "NotSuspended")
    scale = await client.get(SANDBOXES, "sus", namespace, subresource="scale")
    assert scale["status"]["replicas"] == 1
    assert scale["status"]["selector"] == f"{keys.LABEL_SANDBOX_NAME_HASH}={name_hash('sus')}"


async def test_a_deleted_pod_is_recreated(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    await client.create(SANDBOXES, new_sandbox("phoenix"), namespace)
    await wait_ready(client, "phoenix", namespace)
    old = await client.get(PODS, "phoenix", namespace)
    await client.delete(PODS, "phoenix", namespace)

    async def replaced() -> dict[str, Any] | None:
        pod = await get_or_none(client, PODS, "phoenix", namespace)
        if pod is None or pod["metadata"]["uid"] == old["metadata"]["uid"]:
            return None
        return pod

    await eventually(replaced, within=15.0, what="a new pod")
    await wait_ready(client, "phoenix", namespace)
    await wait_event(client, namespace, "phoenix", "Normal", "PodRecreated")


async def test_past_shutdown_time_with_delete_removes_the_sandbox(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    await client.create(SANDBOXES, new_sandbox("doomed", service=True), namespace)
    await wait_ready(client, "doomed", namespace)
    past = format_rfc3339_nano(datetime.now(UTC) - timedelta(seconds=1))
    await client.patch(
        SANDBOXES,
        "doomed",
        {"spec": {"shutdownTime": past, "shutdownPolicy": "Delete"}},
        namespace,
    )

    async def all_gone() -> bool:
        return all(
            [
                await get_or_none(client, SANDBOXES, "doomed", namespace) is None,
                await get_or_none(client, PODS, "doomed", namespace) is None,
                await get_or_none(client, SERVICES, "doomed", namespace) is None,
            ]
        )

    await eventually(all_gone, within=15.0, what="sandbox, pod and service deleted")


async def test_reaching_shutdown_time_with_retain_keeps_the_sandbox_expired(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    soon = datetime.now(UTC) + timedelta(seconds=3)
    await client.create(
        SANDBOXES,
        new_sandbox("kept", service=True, shutdownTime=format_rfc3339_nano(soon)),
        namespace,
    )
    sb = await wait_ready(client, "kept", namespace)
    assert sb["spec"]["shutdownPolicy"] == "Retain"  # the CRD default

    # nothing else happens: only the controller's own timer can expire it
    async def expired() -> dict[str, Any] | None:
        current = await client.get(SANDBOXES, "kept", namespace)
        pod = await get_or_none(client, PODS, "kept", namespace)
        svc = await get_or_none(client, SERVICES, "kept", namespace)
        if pod is None and svc is None and set(current.get("status", {})) == {"conditions"}:
            return current
        return None

    sb = await eventually(
        expired, within=15.0, what="pod and service gone, status reduced to conditions"
    )
    assert datetime.now(UTC) >= soon
    c = condition(sb, "Ready")
    assert c is not None
    assert (c["status"], c["reason"], c["message"]) == (
        "False",
        "SandboxExpired",
        "Sandbox has expired",
    )
    await wait_event(client, namespace, "kept", "Normal", "SandboxExpired")


async def test_pvcs_are_created_owned_wired_into_the_pod_and_survive_suspend(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    vct = {
        "metadata": {"name": "data", "labels": {"tier": "fast"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    created = await client.create(
        SANDBOXES, new_sandbox("disk", volumeClaimTemplates=[vct]), namespace
    )

    async def pvc_and_pod() -> tuple[dict[str, Any], dict[str, Any]] | None:
        pvc = await get_or_none(client, PERSISTENTVOLUMECLAIMS, "data-disk", namespace)
        pod = await get_or_none(client, PODS, "disk", namespace)
        return (pvc, pod) if pvc and pod else None

    pvc, pod = await eventually(pvc_and_pod, within=15.0, what="PVC and pod")
    assert pvc["metadata"]["labels"] == {
        "tier": "fast",
        keys.LABEL_SANDBOX_NAME_HASH: name_hash("disk"),
    }
    assert pvc["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "data-disk"}} in pod["spec"][
        "volumes"
    ]

    # no PV provisioner runs here: the pod may stay Pending, and the Sandbox says so (within
    # the first-status grace, 1 s: a first "not ready yet" status waits that long for the pod)
    async def reported() -> dict[str, Any] | None:
        sb = await client.get(SANDBOXES, "disk", namespace)
        return sb if condition(sb, "Ready") is not None else None

    await eventually(reported, within=15.0, what="the Sandbox's Ready condition")

    await client.patch(SANDBOXES, "disk", {"spec": {"replicas": 0}}, namespace)

    async def suspended() -> bool:
        sb = await client.get(SANDBOXES, "disk", namespace)
        return ready_is(sb, "False", "SandboxSuspended") and (
            await get_or_none(client, PODS, "disk", namespace) is None
        )

    await eventually(suspended, within=15.0, what="suspended without pod")
    kept = await client.get(PERSISTENTVOLUMECLAIMS, "data-disk", namespace)
    assert kept["metadata"]["uid"] == pvc["metadata"]["uid"]


def user_pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": "mine"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }


async def test_an_unowned_same_name_pod_is_not_adopted_without_the_opt_in_label(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    mine = await client.create(PODS, user_pod("squat"), namespace)
    await client.create(SANDBOXES, new_sandbox("squat"), namespace)

    async def refused() -> dict[str, Any] | None:
        sb = await client.get(SANDBOXES, "squat", namespace)
        return sb if ready_is(sb, "False", "ReconcilerError") else None

    sb = await eventually(refused, within=15.0, what="Ready=False ReconcilerError")
    assert condition(sb, "Ready")["message"] == (  # type: ignore[index]
        'Error seen: pod "squat" already exists and has no controller; sandbox "squat" does '
        'not adopt it unless it is labelled agents.x-k8s.io/adoptable="true"'
    )
    assert "replicas" not in sb["status"]
    await wait_event(client, namespace, "squat", "Warning", "AdoptionRefused")
    untouched = await client.get(PODS, "squat", namespace)
    assert "ownerReferences" not in untouched["metadata"]
    assert untouched["metadata"]["labels"] == {"app": "mine"}
    assert untouched["metadata"]["uid"] == mine["metadata"]["uid"]

    # opting in later: the retry adopts it
    await client.patch(
        PODS, "squat", {"metadata": {"labels": {keys.LABEL_ADOPTABLE: "true"}}}, namespace
    )
    sb = await eventually(
        lambda: _ready_sandbox(client, "squat", namespace), within=20, what="adopted and Ready"
    )
    adopted = await client.get(PODS, "squat", namespace)
    assert adopted["metadata"]["uid"] == mine["metadata"]["uid"]
    assert adopted["metadata"]["ownerReferences"][0]["uid"] == sb["metadata"]["uid"]


async def _ready_sandbox(client: Client, name: str, ns: str) -> dict[str, Any] | None:
    sb = await client.get(SANDBOXES, name, ns)
    return sb if ready_is(sb, "True", "DependenciesReady") else None


async def test_an_unowned_pod_with_the_opt_in_label_is_adopted(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    mine = await client.create(
        PODS, user_pod("welcome", {"app": "mine", keys.LABEL_ADOPTABLE: "true"}), namespace
    )
    created = await client.create(SANDBOXES, new_sandbox("welcome"), namespace)
    await wait_ready(client, "welcome", namespace)
    pod = await client.get(PODS, "welcome", namespace)
    assert pod["metadata"]["uid"] == mine["metadata"]["uid"]
    [ref] = pod["metadata"]["ownerReferences"]
    assert (ref["uid"], ref["controller"]) == (created["metadata"]["uid"], True)
    assert pod["metadata"]["labels"][keys.LABEL_SANDBOX_NAME_HASH] == name_hash("welcome")
    await wait_event(client, namespace, "welcome", "Normal", "Adopted")


@pytest.mark.parametrize(
    ("lifecycle", "phase", "reason", "message"),
    [
        ("succeed", "Succeeded", "PodSucceeded", "Pod completed successfully"),
        ("fail", "Failed", "PodFailed", "Pod failed"),
    ],
)
async def test_a_terminated_pod_gives_finished_and_is_kept(
    client: Client,
    sandbox_manager: Manager,
    namespace: str,
    lifecycle: str,
    phase: str,
    reason: str,
    message: str,
) -> None:
    await client.create(
        SANDBOXES, new_sandbox("job", labels={LIFECYCLE_LABEL: lifecycle}), namespace
    )

    async def finished() -> dict[str, Any] | None:
        sb = await client.get(SANDBOXES, "job", namespace)
        return sb if condition(sb, "Finished") else None

    sb = await eventually(finished, within=15.0, what="Finished condition")
    f = condition(sb, "Finished")
    assert f is not None and (f["status"], f["reason"], f["message"]) == ("True", reason, message)
    r = condition(sb, "Ready")
    assert r is not None
    assert (r["status"], r["reason"], r["message"]) == (
        "False",
        "DependenciesNotReady",
        f"Pod exists with phase: {phase}",
    )
    first = await client.get(PODS, "job", namespace)
    await stays(
        lambda: client.get(PODS, "job", namespace),
        accept=lambda pod: (
            pod["metadata"]["uid"] == first["metadata"]["uid"]  # kept, never recreated
            and pod["status"]["phase"] == phase
        ),
        for_=0.5,
        what=f"the pod kept in phase {phase}, never recreated",
    )
