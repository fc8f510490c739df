"""SandboxClaim metrics: upstream's ``TestRecordCreationLatencyMetric`` and
``TestSandboxClaimCreationMetric`` (docs/design/claim.md, "Tests"), the guard annotations (#1114,
#1087), the client-measured latency (#565) and the label values.

The families live on the process-wide registry, so every assertion is on the change of one
labelled series, each test using its own ``sandbox_template`` value.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.timefmt import format_rfc3339_nano, parse_rfc3339
from agentsandbox.controllers.claim import metrics as cm
from agentsandbox.kube.metrics import REGISTRY

NOW = datetime(2026, 5, 21, 10, 0, 0, tzinfo=UTC)
NOW_S = NOW.timestamp()

STARTUP = "agent_sandbox_claim_startup_latency_ms"
CONTROLLER = "agent_sandbox_claim_controller_startup_latency_ms"
CLIENT = "agent_sandbox_client_claim_startup_latency_ms"
CREATION = "agent_sandbox_creation_latency_ms"


def value(name: str, labels: dict[str, str]) -> float:
    got = REGISTRY.get_sample_value(name, labels)
    return 0.0 if got is None else got


def count(family: str, launch: str, template: str, namespace: str | None = None) -> float:
    labels = {"launch_type": launch, "sandbox_template": template}
    if namespace is not None:
        labels["namespace"] = namespace
    return value(f"{family}_count", labels)


def total(family: str, launch: str, template: str, namespace: str | None = None) -> float:
    labels = {"launch_type": launch, "sandbox_template": template}
    if namespace is not None:
        labels["namespace"] = namespace
    return value(f"{family}_sum", labels)


def ago(seconds: float) -> str:
    return format_rfc3339_nano(NOW - timedelta(seconds=seconds))


def ready(status: str = "True", ltt: str | None = None) -> dict[str, Any]:
    cond: dict[str, Any] = {"type": "Ready", "status": status, "reason": "SandboxReady"}
    if ltt is not None:
        cond["lastTransitionTime"] = ltt
    return cond


def claim(
    template: str | None,
    annotations: dict[str, str] | None = None,
    ready_status: str | None = "True",
    pool: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if template is not None:
        spec["sandboxTemplateRef"] = {"name": template}
    if pool is not None:
        spec["warmPoolRef"] = {"name": pool}
    status = {"conditions": [ready(ready_status)]} if ready_status else {}
    return {
        "metadata": {"name": "c", "namespace": "default", "annotations": annotations or {}},
        "spec": spec,
        "status": status,
    }


def sandbox(
    launch: str | None = "cold",
    created: str | None = None,
    ready_ltt: str | None = None,
    template_annotation: str | None = None,
    pod_name: str | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "sb", "namespace": namespace, "labels": {}, "annotations": {}}
    if launch is not None:
        meta["labels"][keys.LABEL_LAUNCH_TYPE] = launch
    if created is not None:
        meta["creationTimestamp"] = created
    if template_annotation is not None:
        meta["annotations"][keys.ANNOTATION_SANDBOX_TEMPLATE_REF] = template_annotation
    if pod_name is not None:
        meta["annotations"][keys.ANNOTATION_POD_NAME] = pod_name
    status = {"conditions": [ready("True", ready_ltt)]} if ready_ltt else {}
    return {"metadata": meta, "status": status}


def unique() -> str:
    return f"tmpl-{uuid.uuid4().hex[:8]}"


def first_ready(c: dict[str, Any], sb: dict[str, Any] | None, now: float) -> None:
    """``observe_first_ready`` with the Sandbox annotated with the claim's template, as the
    controllers annotate every Sandbox they make (the histograms take the template from it)."""
    template = (c.get("spec") or {}).get("sandboxTemplateRef", {}).get("name")
    if sb is not None and template:
        sb["metadata"]["annotations"].setdefault(keys.ANNOTATION_SANDBOX_TEMPLATE_REF, template)
    cm.observe_first_ready(c, sb, now)


# --- upstream TestRecordCreationLatencyMetric ----------------------------------------------------
WEBHOOK = keys.ANNOTATION_WEBHOOK_FIRST_OBSERVED_AT
OBSERVED = keys.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT


@pytest.mark.parametrize(
    ("case", "annotations", "ready_status", "with_sandbox", "startup", "controller"),
    [
        ("first Ready with webhook annotation", {WEBHOOK: ago(10)}, "True", True, 1, 0),
        ("missing webhook annotation", {}, "True", True, 0, 0),
        ("Ready False", {WEBHOOK: ago(10)}, "False", True, 0, 0),
        # Upstream passes the old status (Ready True); our controller calls only on the first
        # transition, and a claim that was Ready before carries the guard annotation.
        (
            "already Ready before",
            {WEBHOOK: ago(10), keys.ANNOTATION_CLAIM_FIRST_READY_AT: ago(5)},
            "True",
            True,
            0,
            0,
        ),
        ("nil sandbox: launch unknown", {WEBHOOK: ago(10)}, "True", False, 1, 0),
        (
            "observability annotation present",
            {WEBHOOK: ago(10), OBSERVED: ago(8)},
            "True",
            True,
            1,
            1,
        ),
        ("future webhook time", {WEBHOOK: ago(-30), OBSERVED: ago(8)}, "True", True, 0, 1),
    ],
)
def test_record_creation_latency_metric(
    case: str,
    annotations: dict[str, str],
    ready_status: str,
    with_sandbox: bool,
    startup: int,
    controller: int,
) -> None:
    spec_template = unique()
    sb = sandbox("cold") if with_sandbox else None
    launch = "cold" if with_sandbox else "unknown"
    template = spec_template if with_sandbox else "__unknown__"  # no sandbox: upstream's label
    before = (count(STARTUP, launch, template), count(CONTROLLER, launch, template))
    first_ready(claim(spec_template, annotations, ready_status), sb, NOW_S)
    after = (count(STARTUP, launch, template), count(CONTROLLER, launch, template))
    assert (after[0] - before[0], after[1] - before[1]) == (startup, controller), case


def test_latencies_are_whole_milliseconds_in_upstreams_buckets() -> None:
    template = unique()
    annotations = {WEBHOOK: ago(1.2345678), OBSERVED: ago(0.75)}
    first_ready(claim(template, annotations), sandbox("warm"), NOW_S)
    assert total(STARTUP, "warm", template) == 1234.0  # truncated, not rounded
    assert total(CONTROLLER, "warm", template) == 750.0
    labels = {"launch_type": "warm", "sandbox_template": template}
    assert value(f"{STARTUP}_bucket", {**labels, "le": "1000.0"}) == 0
    assert value(f"{STARTUP}_bucket", {**labels, "le": "1250.0"}) == 1
    assert value(f"{CONTROLLER}_bucket", {**labels, "le": "750.0"}) == 1


def test_buckets_are_upstreams() -> None:
    startup = [100, 250, 500, 750, 1000, 1250, 1500, 2000, 2500]
    startup += [5000, 10000, 30000, 60000, 120000, 240000]
    creation = [50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000]
    creation += [120000, 240000, 300000, 600000]
    assert list(cm.CLAIM_STARTUP_BUCKETS) == startup
    assert list(cm.CREATION_LATENCY_BUCKETS) == creation
    for hist, buckets in (
        (cm.CLAIM_STARTUP_LATENCY, startup),
        (cm.CLAIM_CONTROLLER_STARTUP_LATENCY, startup),
        (cm.CLIENT_CLAIM_STARTUP_LATENCY, startup),
        (cm.SANDBOX_CREATION_LATENCY, creation),
    ):
        assert list(hist._upper_bounds) == [*map(float, buckets), float("inf")]
    assert cm.CLAIM_STARTUP_LATENCY._labelnames == ("launch_type", "sandbox_template")
    assert cm.CLAIM_CONTROLLER_STARTUP_LATENCY._labelnames == ("launch_type", "sandbox_template")
    assert cm.CLIENT_CLAIM_STARTUP_LATENCY._labelnames == ("launch_type", "sandbox_template")
    assert cm.SANDBOX_CREATION_LATENCY._labelnames == (
        "namespace",
        "launch_type",
        "sandbox_template",
    )
    assert cm.CLAIM_CREATION_TOTAL._labelnames == (
        "namespace",
        "sandbox_template",
        "launch_type",
        "warmpool_name",
        "pod_condition",
        "created_by",  # upstream #1039
    )


# --- client-measured latency (#565) ----------------------------------------------------------
@pytest.mark.parametrize(
    ("written", "expected_ms"),
    [
        # what the released 1.0.8 client writes: datetime.now(UTC).isoformat()
        ((NOW - timedelta(seconds=2.5)).isoformat(), 2500.0),
        # Go's RFC3339Nano, nine fraction digits
        ("2026-05-21T09:59:57.123456789Z", 2876.0),
        # no zone: read as UTC
        ("2026-05-21T09:59:59.5", 500.0),
    ],
)
def test_client_latency_parses_the_python_clients_isoformat(
    written: str, expected_ms: float
) -> None:
    template = unique()
    annotations = {keys.ANNOTATION_CLIENT_FIRST_REQUESTED_AT: written}
    first_ready(claim(template, annotations), sandbox("cold"), NOW_S)
    assert count(CLIENT, "cold", template) == 1
    assert total(CLIENT, "cold", template) == expected_ms


@pytest.mark.parametrize("written", ["", "yesterday", "2026-13-01T00:00:00Z", ago(-1)])
def test_client_latency_skips_unparsable_and_future_times(written: str) -> None:
    template = unique()
    annotations = {keys.ANNOTATION_CLIENT_FIRST_REQUESTED_AT: written, OBSERVED: ago(1)}
    first_ready(claim(template, annotations), sandbox("cold"), NOW_S)
    assert count(CLIENT, "cold", template) == 0
    assert count(CONTROLLER, "cold", template) == 1  # the others still recorded


# --- sandbox creation latency --------------------------------------------------------------------
def test_creation_latency_is_sandbox_ready_transition_minus_creation() -> None:
    template = unique()
    sb = sandbox("warm", created=ago(60), ready_ltt=ago(57), namespace="team-a")
    first_ready(claim(template), sb, NOW_S)
    assert count(CREATION, "warm", template, "team-a") == 1
    assert total(CREATION, "warm", template, "team-a") == 3000.0


@pytest.mark.parametrize(
    "sb",
    [
        None,
        sandbox("cold", created=None, ready_ltt=ago(1)),
        sandbox("cold", created=ago(5), ready_ltt=None),  # not Ready
        sandbox("cold", created=ago(5), ready_ltt=ago(10)),  # negative
    ],
)
def test_creation_latency_skipped_without_both_times(sb: dict[str, Any] | None) -> None:
    template = unique()
    first_ready(claim(template), sb, NOW_S)
    for launch in ("cold", "unknown"):
        assert count(CREATION, launch, template, "default") == 0


# --- guard annotations (#1114, #1087) ------------------------------------------------------------
def test_first_ready_annotations_then_restart_never_double_counts() -> None:
    template = unique()
    c = claim(template, {OBSERVED: ago(2)})
    sb = sandbox("cold", created=ago(3), ready_ltt=ago(1))
    first_ready(c, sb, NOW_S)
    guard = cm.first_ready_annotations(c, NOW_S)
    assert guard == {
        keys.ANNOTATION_CREATION_LATENCY_RECORDED: "true",
        keys.ANNOTATION_CLAIM_FIRST_READY_AT: "2026-05-21T10:00:00Z",
    }
    c["metadata"]["annotations"].update(guard)
    # A readiness flap, or a new process seeing the claim Ready again: nothing more.
    first_ready(c, sb, NOW_S + 60)
    assert count(CONTROLLER, "cold", template) == 1
    assert count(CREATION, "cold", template, "default") == 1
    assert cm.first_ready_annotations(c, NOW_S + 60) == {}


@pytest.mark.parametrize(
    "guard",
    [
        {keys.ANNOTATION_CREATION_LATENCY_RECORDED: "true"},
        {keys.ANNOTATION_CLAIM_FIRST_READY_AT: "unknown"},  # upstream's backfill sentinel
    ],
)
def test_either_guard_annotation_skips_every_histogram(guard: dict[str, str]) -> None:
    template = unique()
    annotations = {OBSERVED: ago(2), WEBHOOK: ago(2), **guard}
    sb = sandbox("cold", created=ago(3), ready_ltt=ago(1))
    first_ready(claim(template, annotations), sb, NOW_S)
    assert count(CONTROLLER, "cold", template) == 0
    assert count(STARTUP, "cold", template) == 0
    assert count(CREATION, "cold", template, "default") == 0
    missing = cm.first_ready_annotations(claim(template, guard), NOW_S)
    assert set(missing) == {
        keys.ANNOTATION_CREATION_LATENCY_RECORDED,
        keys.ANNOTATION_CLAIM_FIRST_READY_AT,
    } - set(guard)


def test_first_ready_at_has_nanosecond_format() -> None:
    got = cm.first_ready_annotations(claim("t"), NOW_S + 0.25)
    assert got[keys.ANNOTATION_CLAIM_FIRST_READY_AT] == "2026-05-21T10:00:00.25Z"


# --- controller-first-observed-at ------------------------------------------------------------
def test_controller_first_observed_is_added_once() -> None:
    c = claim("t", ready_status=None)
    got = cm.controller_first_observed(c, NOW_S + 0.123456)
    assert got == {OBSERVED: "2026-05-21T10:00:00.123456Z"}
    assert parse_rfc3339(got[OBSERVED]) == NOW + timedelta(microseconds=123456)
    c["metadata"]["annotations"].update(got)
    assert cm.controller_first_observed(c, NOW_S + 5) is None
    assert cm.controller_first_observed({"metadata": {}}, NOW_S) == {
        OBSERVED: "2026-05-21T10:00:00Z"
    }


# --- label values --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("c", "sb", "template", "launch"),
    [
        # the sandbox's annotation, written by the controller, not the claim's mutable spec
        (claim("named"), sandbox("cold", template_annotation="other"), "other", "cold"),
        # 1.0.x warmPoolRef claims: the sandbox's template annotation (#899)
        (claim(None, pool="p"), sandbox("warm", template_annotation="from-sb"), "from-sb", "warm"),
        (claim(None, pool="p"), sandbox("warm"), "__unknown__", "warm"),
        (claim(None, pool="p"), None, "__unknown__", "unknown"),
        # the launch-type label wins over the pod-name annotation
        (claim("t"), sandbox("cold", pod_name="sb"), "__unknown__", "cold"),
        # unlabelled: upstream's pod-name rule
        (claim("t"), sandbox(None, pod_name="sb"), "__unknown__", "warm"),
        (claim("t"), sandbox(None), "__unknown__", "cold"),
    ],
)
def test_label_values(
    c: dict[str, Any], sb: dict[str, Any] | None, template: str, launch: str
) -> None:
    assert cm.claim_template(c, sb) == template
    assert cm.claim_launch_type(sb) == launch


# --- upstream TestSandboxClaimCreationMetric ------------------------------------------------
def creation_total(
    ns: str, template: str, launch: str, pool: str, cond: str, created_by: str = ""
) -> float:
    labels = {
        "namespace": ns,
        "sandbox_template": template,
        "launch_type": launch,
        "warmpool_name": pool,
        "pod_condition": cond,
        "created_by": created_by,
    }
    return value("agent_sandbox_claim_creation_total", labels)


@pytest.mark.parametrize(
    ("args", "labels"),
    [
        (("cold", "none", False), ("cold", "none", "not_ready")),
        (("warm", "test-pool", True), ("warm", "test-pool", "ready")),
        (("warm", "test-pool", False), ("warm", "test-pool", "not_ready")),
        (("cold", "", False), ("cold", "none", "not_ready")),  # empty pool ⇒ none
    ],
)
def test_sandbox_claim_creation_metric(
    args: tuple[str, str, bool], labels: tuple[str, str, str]
) -> None:
    ns = f"ns-{uuid.uuid4().hex[:8]}"
    launch, pool, is_ready = args
    assert creation_total(ns, "test-template", *labels) == 0
    cm.count_claim_creation(ns, "test-template", launch, pool, is_ready)
    assert creation_total(ns, "test-template", *labels) == 1
    cm.count_claim_creation(ns, "test-template", launch, pool, is_ready)
    assert creation_total(ns, "test-template", *labels) == 2


def test_claim_creation_without_template_counts_unknown() -> None:
    ns = f"ns-{uuid.uuid4().hex[:8]}"
    cm.count_claim_creation(ns, "", "warm", "p", True)
    assert creation_total(ns, "__unknown__", "warm", "p", "ready") == 1


def test_claim_creation_counts_the_claims_created_by_label() -> None:
    ns = f"ns-{uuid.uuid4().hex[:8]}"
    claim = {"metadata": {"labels": {keys.LABEL_CREATED_BY: "python-client"}}}
    cm.count_claim_creation(ns, "t", "warm", "p", True, created_by=cm.claim_created_by(claim))
    assert creation_total(ns, "t", "warm", "p", "ready", "python-client") == 1
    assert creation_total(ns, "t", "warm", "p", "ready") == 0
    assert cm.claim_created_by({"metadata": {}}) == ""


# --- bounded label values (security review #5) ------------------------------------------------
def test_created_by_and_template_labels_come_from_bounded_sets() -> None:
    """Security review #5: metric label values chosen by users must come from bounded sets.

    1000 claims with distinct ``agents.x-k8s.io/created-by`` values add at most one series per
    known value (``go-client``, ``python-client``, ``controller``, ``unknown``, or ``""`` when
    the claim has none), as upstream v1.0.1's ``NormalizeCreatedBy`` does; the Sandbox gauge's
    ``created_by`` is bounded the same way. The first-Ready histograms take the template from
    the controller-written annotation of the claim's Sandbox, not from the claim's mutable spec.
    """
    from agentsandbox.controllers.sandbox.metrics import created_by as sandbox_created_by

    ns = f"ns-{uuid.uuid4().hex[:8]}"
    for i in range(1000):
        c = {"metadata": {"labels": {keys.LABEL_CREATED_BY: f"random-{i}"}}}
        cm.count_claim_creation(ns, "t", "cold", "", False, created_by=cm.claim_created_by(c))
    for known in ("go-client", "python-client", "controller"):
        c = {"metadata": {"labels": {keys.LABEL_CREATED_BY: known}}}
        assert cm.claim_created_by(c) == known
        cm.count_claim_creation(ns, "t", "cold", "", False, created_by=cm.claim_created_by(c))
    cm.count_claim_creation(ns, "t", "cold", "", False, created_by=cm.claim_created_by({}))
    values = {
        sample.labels["created_by"]
        for family in REGISTRY.collect()
        if family.name == "agent_sandbox_claim_creation"
        for sample in family.samples
        if sample.labels.get("namespace") == ns
    }
    assert values <= {"", "unknown", "go-client", "python-client", "controller"}, values
    assert creation_total(ns, "t", "cold", "none", "not_ready", "unknown") == 1000
    sb_labels = {"metadata": {"labels": {keys.LABEL_CREATED_BY: "x" * 63}}}
    assert sandbox_created_by(sb_labels) == "unknown"
    # the claim's spec was changed to another name after its sandbox was made from template t
    mutated = claim(f"random-{uuid.uuid4().hex}")
    assert cm.claim_template(mutated, sandbox("cold", template_annotation="t")) == "t"
