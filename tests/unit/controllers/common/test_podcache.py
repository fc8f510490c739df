"""controllers/common/podcache.py: the cached pod keeps what the controllers read, nothing else."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from agentsandbox.api.conditions import is_condition_true
from agentsandbox.api.hashing import name_hash
from agentsandbox.controllers.common.podcache import POD_SELECTOR, pod_informer, slim_pod
from agentsandbox.controllers.sandbox.plan import plan
from agentsandbox.controllers.sandbox.types import Snapshot

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "p",
        "namespace": "ns",
        "uid": "u1",
        "resourceVersion": "7",
        "labels": {POD_SELECTOR: "abc", "app": "x"},
        "annotations": {"a": "b"},
        "ownerReferences": [{"kind": "Sandbox", "name": "p", "uid": "s1", "controller": True}],
        "deletionTimestamp": "2026-12-03T00:00:00Z",
    },
    "spec": {
        "nodeName": "kwok-node-1",
        "containers": [{"name": "c", "image": "i", "env": [{"name": "SECRET", "value": "x"}]}],
        "tolerations": [{"key": "k"}],
    },
    "status": {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "podIP": "10.0.0.1",
        "podIPs": [{"ip": "10.0.0.1"}],
        "containerStatuses": [{"name": "c", "ready": True}],
        "qosClass": "Burstable",
        "startTime": "2026-12-03T00:00:00Z",
    },
}


def test_slim_pod_keeps_metadata_phase_conditions_ips_and_node() -> None:
    pod = slim_pod(copy.deepcopy(POD))
    assert pod["metadata"] == POD["metadata"]
    assert pod["spec"] == {"nodeName": "kwok-node-1"}
    assert pod["status"] == {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "podIP": "10.0.0.1",
        "podIPs": [{"ip": "10.0.0.1"}],
    }
    assert is_condition_true(pod["status"]["conditions"], "Ready")


def test_slim_pod_tolerates_a_pod_without_spec_or_status() -> None:
    assert slim_pod({"metadata": {"name": "p"}}) == {"metadata": {"name": "p"}}
    assert slim_pod({"metadata": {"name": "p"}, "spec": {}})["spec"] == {}


@pytest.mark.parametrize(
    "phase, conditions",
    [
        ("Running", [{"type": "Ready", "status": "True"}]),
        ("Running", [{"type": "Ready", "status": "False"}]),
        ("Pending", [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]),
        ("Succeeded", []),
        ("Failed", []),
    ],
)
def test_the_sandbox_plan_is_the_same_from_a_slim_pod(
    phase: str, conditions: list[dict[str, Any]]
) -> None:
    """The Sandbox controller's decisions (pod step, status, events) read nothing dropped."""
    sb = {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "s1",
            "generation": 2,
            "resourceVersion": "9",
        },
        "spec": {
            "podTemplate": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            }
        },
    }
    full = copy.deepcopy(POD)
    del full["metadata"]["deletionTimestamp"]
    full["metadata"]["labels"][POD_SELECTOR] = name_hash("p")
    full["metadata"]["ownerReferences"][0].update(
        apiVersion="agents.x-k8s.io/v1beta1", uid="s1", blockOwnerDeletion=True
    )
    full["status"]["phase"] = phase
    full["status"]["conditions"] = conditions
    now = datetime(2026, 12, 3, tzinfo=UTC)
    a = plan(Snapshot(sandbox=sb, now=now, pods={"p": full}))
    b = plan(Snapshot(sandbox=sb, now=now, pods={"p": slim_pod(copy.deepcopy(full))}))
    assert a.status == b.status
    assert a.events == b.events
    assert a.pod is not None and b.pod is not None
    assert (a.pod.step.action, a.pod.step.body) == (b.pod.step.action, b.pod.step.body)


class _Mgr:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def get_informer(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        return object()


def test_every_caller_asks_for_the_same_scope_and_transform() -> None:
    mgr = _Mgr()
    pod_informer(mgr)  # type: ignore[arg-type]
    pod_informer(mgr)  # type: ignore[arg-type]
    first, second = mgr.calls
    assert first == second
    assert first[1] == {"label_selector": POD_SELECTOR, "transform": slim_pod}
