"""Core metrics: the ``agent_sandboxes`` collector (docs/metrics.md, "Always registered") — its
label derivation, the
launch-type precedence, per-scrape aggregation from the informer cache — and
``agent_sandbox_build_info``.
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agentsandbox.api import keys
from agentsandbox.cli.controller import BuildInfoCollector, build_info, version_text
from agentsandbox.controllers.sandbox.metrics import (
    LABELS,
    SandboxCollector,
    SandboxLabels,
    count_sandboxes,
    sandbox_labels,
)
from agentsandbox.kube import metrics

EXT = "extensions.agents.x-k8s.io"


def sb(
    namespace: str = "default",
    ready: tuple[str, str] | None = None,
    launch: str | None = None,
    pod_name: str | None = None,
    template: str | None = None,
    owner: tuple[str, str] | None = None,
    controller: bool = True,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "s", "namespace": namespace, "labels": {}, "annotations": {}}
    if launch is not None:
        meta["labels"][keys.LABEL_LAUNCH_TYPE] = launch
    if pod_name is not None:
        meta["annotations"][keys.ANNOTATION_POD_NAME] = pod_name
    if template is not None:
        meta["annotations"][keys.ANNOTATION_SANDBOX_TEMPLATE_REF] = template
    if owner is not None:
        api_version, kind = owner
        meta["ownerReferences"] = [
            {
                "apiVersion": api_version,
                "kind": kind,
                "name": "o",
                "uid": "u",
                "controller": controller,
            }
        ]
    status: dict[str, Any] = {}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": ready[0], "reason": ready[1]}]
    return {"metadata": meta, "spec": {}, "status": status}


def created(sandbox: dict[str, Any], by: str) -> dict[str, Any]:
    sandbox["metadata"]["labels"][keys.LABEL_CREATED_BY] = by
    return sandbox


# (case, sandbox, expected labels: ns, ready_condition, expired, launch_type, template, owned_by,
# created_by)
TABLE: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("bare, no status", sb(), ("default", "false", "false", "cold", "unknown", "None", "")),
    (
        "ready",
        sb(ready=("True", "DependenciesReady")),
        ("default", "true", "false", "cold", "unknown", "None", ""),
    ),
    (
        "not ready",
        sb(ready=("False", "DependenciesNotReady")),
        ("default", "false", "false", "cold", "unknown", "None", ""),
    ),
    (
        "expired",
        sb(ready=("False", "SandboxExpired")),
        ("default", "false", "true", "cold", "unknown", "None", ""),
    ),
    (
        "template annotation",
        sb(template="py"),
        ("default", "false", "false", "cold", "py", "None", ""),
    ),
    (
        "empty template annotation",
        sb(template=""),
        ("default", "false", "false", "cold", "unknown", "None", ""),
    ),
    (
        "claim-owned v1beta1",
        sb(owner=(f"{EXT}/v1beta1", "SandboxClaim")),
        ("default", "false", "false", "cold", "unknown", "SandboxClaim", ""),
    ),
    (
        "claim-owned v1alpha1 (any version)",
        sb(owner=(f"{EXT}/v1alpha1", "SandboxClaim")),
        ("default", "false", "false", "cold", "unknown", "SandboxClaim", ""),
    ),
    (
        "kind from another group",
        sb(owner=("example.com/v1", "SandboxClaim")),
        ("default", "false", "false", "cold", "unknown", "None", ""),
    ),
    (
        "owner reference that is not the controller",
        sb(owner=(f"{EXT}/v1beta1", "SandboxClaim"), controller=False),
        ("default", "false", "false", "cold", "unknown", "None", ""),
    ),
    (
        "other kind of our group",
        sb(owner=(f"{EXT}/v1beta1", "SandboxTemplate")),
        ("default", "false", "false", "cold", "unknown", "None", ""),
    ),
    # launch_type precedence: 1. the label
    (
        "label cold beats pod-name annotation",
        sb(launch="cold", pod_name="s", owner=(f"{EXT}/v1beta1", "SandboxClaim")),
        ("default", "false", "false", "cold", "unknown", "SandboxClaim", ""),
    ),
    (
        "label warm",
        sb(launch="warm", owner=(f"{EXT}/v1beta1", "SandboxClaim")),
        ("default", "false", "false", "warm", "unknown", "SandboxClaim", ""),
    ),
    (
        "label cold beats pool ownership",
        sb(launch="cold", owner=(f"{EXT}/v1beta1", "SandboxWarmPool")),
        ("default", "false", "false", "cold", "unknown", "SandboxWarmPool", ""),
    ),
    # 2. unlabelled pool sandbox (not claimed yet): warm, pod or not
    (
        "unclaimed pool sandbox without pod",
        sb(owner=(f"{EXT}/v1beta1", "SandboxWarmPool")),
        ("default", "false", "false", "warm", "unknown", "SandboxWarmPool", ""),
    ),
    # 3. unlabelled otherwise: upstream's pod-name rule
    (
        "unlabelled with pod-name",
        sb(pod_name="s", owner=(f"{EXT}/v1beta1", "SandboxClaim")),
        ("default", "false", "false", "warm", "unknown", "SandboxClaim", ""),
    ),
    (
        "unlabelled, empty pod-name",
        sb(pod_name=""),
        ("default", "false", "false", "cold", "unknown", "None", ""),
    ),
    # created_by: the Sandbox's agents.x-k8s.io/created-by label (upstream #1039)
    (
        "pool sandbox created by the controller",
        created(sb(owner=(f"{EXT}/v1beta1", "SandboxWarmPool")), "controller"),
        ("default", "false", "false", "warm", "unknown", "SandboxWarmPool", "controller"),
    ),
    (
        "claimed by the python client",
        created(sb(launch="cold", owner=(f"{EXT}/v1beta1", "SandboxClaim")), "python-client"),
        ("default", "false", "false", "cold", "unknown", "SandboxClaim", "python-client"),
    ),
    (
        "unknown label value falls back",
        sb(launch="lukewarm"),
        ("default", "false", "false", "cold", "unknown", "None", ""),
    ),
]


@pytest.mark.parametrize(("case", "sandbox", "expected"), TABLE, ids=[t[0] for t in TABLE])
def test_label_derivation(case: str, sandbox: dict[str, Any], expected: tuple[str, ...]) -> None:
    got = sandbox_labels(sandbox)
    assert tuple(got) == expected, case
    assert got._fields == LABELS


def test_count_groups_identical_label_tuples() -> None:
    sandboxes = [
        sb("a", ready=("True", "DependenciesReady"), launch="warm"),
        sb("a", ready=("True", "DependenciesReady"), launch="warm"),
        sb("a", ready=("True", "DependenciesReady"), launch="cold"),
        sb("b"),
    ]
    assert count_sandboxes(sandboxes) == {
        SandboxLabels("a", "true", "false", "warm", "unknown", "None", ""): 2,
        SandboxLabels("a", "true", "false", "cold", "unknown", "None", ""): 1,
        SandboxLabels("b", "false", "false", "cold", "unknown", "None", ""): 1,
    }


class FakeInformer:
    def __init__(self, objects: list[dict[str, Any]], synced: bool = True) -> None:
        self.objects = objects
        self.synced = synced
        self.lists = 0

    def has_synced(self) -> bool:
        return self.synced

    def list(self) -> list[dict[str, Any]]:
        self.lists += 1
        return list(self.objects)


def scrape(registry: CollectorRegistry) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        if family.name == "agent_sandboxes":
            assert family.type == "gauge"
            for s in family.samples:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_collector_reads_the_cache_on_every_scrape() -> None:
    informer = FakeInformer([sb("a"), sb("a")])
    registry = CollectorRegistry()
    registry.register(SandboxCollector(informer))  # type: ignore[arg-type]
    assert informer.lists == 0  # registration describes, it does not collect
    key = tuple(
        sorted(
            {
                "namespace": "a",
                "ready_condition": "false",
                "expired": "false",
                "launch_type": "cold",
                "sandbox_template": "unknown",
                "owned_by": "None",
                "created_by": "",
            }.items()
        )
    )
    assert scrape(registry) == {key: 2.0}
    informer.objects.pop()
    assert scrape(registry) == {key: 1.0}
    informer.objects.clear()
    assert scrape(registry) == {}
    assert informer.lists == 3
    assert "# TYPE agent_sandboxes gauge" in generate_latest(registry).decode()


def test_collector_emits_no_samples_before_the_cache_synced() -> None:
    informer = FakeInformer([sb("a")], synced=False)
    registry = CollectorRegistry()
    registry.register(SandboxCollector(informer))  # type: ignore[arg-type]
    assert scrape(registry) == {}
    assert informer.lists == 0


def test_register_replacing_swaps_the_collector_of_a_previous_manager() -> None:
    first = SandboxCollector(FakeInformer([sb("first-ns")]))  # type: ignore[arg-type]
    second = SandboxCollector(FakeInformer([sb("second-ns")]))  # type: ignore[arg-type]
    try:
        metrics.register_replacing("test-agent-sandboxes", first)
        metrics.register_replacing("test-agent-sandboxes", second)  # no duplicate error
        text = generate_latest(metrics.REGISTRY).decode()
        assert 'namespace="second-ns"' in text and 'namespace="first-ns"' not in text
    finally:
        metrics.REGISTRY.unregister(second)
        metrics._REPLACEABLE.pop("test-agent-sandboxes", None)


# --- agent_sandbox_build_info ----------------------------------------------------------------
def test_build_info_is_one_with_upstreams_label_names_and_the_version_blocks_values() -> None:
    info = build_info()
    assert list(info) == [
        "git_version",
        "git_commit",
        "build_date",
        "go_version",
        "compiler",
        "platform",
    ]
    text = version_text()
    for label in ("git_version", "git_commit", "build_date", "go_version", "compiler", "platform"):
        assert info[label] in text, label
    registry = CollectorRegistry()
    registry.register(BuildInfoCollector(info))
    families = {
        f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())
    }
    family = families["agent_sandbox_build_info"]
    assert family.type == "gauge"
    [sample] = family.samples
    assert sample.value == 1.0 and sample.labels == info


def test_build_info_defaults_are_upstreams_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    import agentsandbox.cli.controller as controller

    monkeypatch.setattr(controller, "GIT_SHA", "unknown")
    monkeypatch.setattr(controller, "BUILD_DATE", "unknown")
    info = controller.build_info()
    assert (info["git_commit"], info["build_date"]) == ("unknown", "unknown")
    assert "/" in info["platform"]
