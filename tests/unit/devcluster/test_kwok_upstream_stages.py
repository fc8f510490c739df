"""The kwok stages that play a kubelet for upstream's e2e pods (hack/conformance/) apply to those
pods only, and leave every other pod on the stages it had.

kwok evaluates each ``matchExpressions`` key as a jq query; the keys of the pod stages use a small
subset of jq (paths with ``.field``, ``["key"]``, ``[0]``, and ``| tojson``), evaluated here the
way gojq does (``tojson`` is compact JSON), so that which stages a pod matches can be checked
without running kwok. The integration run (``make conformance``) checks them against kwok itself.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

import pytest
import yaml

STEP = re.compile(r'\.([A-Za-z_][A-Za-z0-9_]*)|\["([^"]+)"\]|\[(\d+)\]')


def query(key: str, obj: Any) -> Any:
    path, _, pipe = key.partition("|")
    value = obj
    pos = 0
    path = path.strip()
    while pos < len(path):
        m = STEP.match(path, pos)
        assert m is not None, f"unsupported jq in {key!r} at {path[pos:]!r}"
        field, quoted, index = m.groups()
        if index is not None:
            value = (
                value[int(index)] if isinstance(value, list) and len(value) > int(index) else None
            )
        else:
            value = value.get(field or quoted) if isinstance(value, dict) else None
        pos = m.end()
    pipe = pipe.strip()
    if pipe == "tojson":
        return json.dumps(value, separators=(",", ":"))
    assert not pipe, f"unsupported jq in {key!r}: {pipe!r}"
    return value


def matches(stage: dict[str, Any], pod: dict[str, Any]) -> bool:
    for expr in stage["spec"]["selector"]["matchExpressions"]:
        value = query(expr["key"], pod)
        op = expr["operator"]
        if op == "Exists" and value is None:
            return False
        if op == "DoesNotExist" and value is not None:
            return False
        if op == "In" and (value is None or str(value) not in expr["values"]):
            return False
        if op == "NotIn" and value is not None and str(value) in expr["values"]:
            return False
    return True


@pytest.fixture(scope="module")
def pod_stages() -> dict[str, dict[str, Any]]:
    text = resources.files("agentsandbox.devcluster").joinpath("kwok-stages.yaml").read_text()
    docs = [d for d in yaml.safe_load_all(text) if d["kind"] == "Stage"]
    return {d["metadata"]["name"]: d for d in docs if d["spec"]["resourceRef"]["kind"] == "Pod"}


def pod(
    phase: str,
    command: list[str] | None = None,
    *,
    restart: str = "Always",
    pre_stop: list[str] | None = None,
    deleted: bool = False,
    lifecycle: str | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "busybox:1.36"}
    if command is not None:
        container["command"] = command
    if pre_stop is not None:
        container["lifecycle"] = {"preStop": {"exec": {"command": pre_stop}}}
    meta: dict[str, Any] = {"name": "p", "labels": {}}
    if lifecycle:
        meta["labels"]["kwok.agentsandbox.dev/lifecycle"] = lifecycle
    if deleted:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"restartPolicy": restart, "containers": [container]},
        "status": {"phase": phase},
    }


def matching(stages: dict[str, dict[str, Any]], p: dict[str, Any]) -> set[str]:
    return {name for name, stage in stages.items() if matches(stage, p)}


EXIT_0 = ["sh", "-c", "exit 0"]
SLEEP_2 = ["sh", "-c", "sleep 2; exit 0"]


def test_upstreams_completing_pods_run_then_succeed(pod_stages: dict[str, Any]) -> None:
    for command, stage, ms in (
        (EXIT_0, "pod-complete-exit-0", 1000),
        (SLEEP_2, "pod-complete-sleep-2", 2000),
    ):
        assert matching(pod_stages, pod("Pending", command, restart="Never")) == {"pod-ready"}
        assert matching(pod_stages, pod("Running", command, restart="Never")) == {stage}
        assert pod_stages[stage]["spec"]["delay"]["durationMilliseconds"] == ms
        assert "phase: Succeeded" in pod_stages[stage]["spec"]["next"]["statusTemplate"]
        assert matching(pod_stages, pod("Succeeded", command, restart="Never")) == set()


def test_the_same_command_restarting_or_another_command_keeps_running(
    pod_stages: dict[str, Any],
) -> None:
    for p in (
        pod("Running", EXIT_0),  # restartPolicy Always: a real pod would restart, not finish
        pod("Running", ["sh", "-c", "exit 0", "x"], restart="Never"),
        pod("Running", ["sh", "-c", "sleep infinity"], restart="Never"),
        pod("Running", ["exit 0"], restart="Never"),
        pod("Running", None, restart="Never"),
    ):
        assert matching(pod_stages, p) == set(), p


def test_a_pod_with_upstreams_prestop_hook_is_deleted_three_seconds_later(
    pod_stages: dict[str, Any],
) -> None:
    held = pod("Running", ["sh", "-c", "sleep infinity"], pre_stop=["sh", "-c", "sleep 3"])
    assert matching(pod_stages, held) == set()
    held_deleted = pod(
        "Running", ["sh", "-c", "sleep infinity"], pre_stop=["sh", "-c", "sleep 3"], deleted=True
    )
    assert matching(pod_stages, held_deleted) == {"pod-delete-after-prestop"}
    assert pod_stages["pod-delete-after-prestop"]["spec"]["delay"]["durationMilliseconds"] == 3000
    other_hook = pod("Running", pre_stop=["sh", "-c", "sleep 30"], deleted=True)
    assert matching(pod_stages, other_hook) == {"pod-delete"}


def test_every_other_pod_keeps_its_stages(pod_stages: dict[str, Any]) -> None:
    assert matching(pod_stages, pod("Pending")) == {"pod-ready"}
    assert matching(pod_stages, pod("Running")) == set()
    assert matching(pod_stages, pod("Running", deleted=True)) == {"pod-delete"}
    assert matching(pod_stages, pod("Pending", lifecycle="never-ready")) == {
        "pod-running-never-ready"
    }
    assert matching(pod_stages, pod("Running", lifecycle="succeed")) == {"pod-succeed"}
    assert matching(pod_stages, pod("Running", lifecycle="fail")) == {"pod-fail"}
    # the label wins over the command
    labelled = pod("Running", EXIT_0, restart="Never", lifecycle="never-ready")
    assert matching(pod_stages, labelled) == set()
    labelled = pod("Running", EXIT_0, restart="Never", lifecycle="fail")
    assert matching(pod_stages, labelled) == {"pod-fail"}
