"""The SandboxWarmPoolAutoscaler's Prometheus series (autoscaler review #18: "there are no
Prometheus series for desired, rate, refill or predicted share"): each decision
sets its autoscaler's gauges and counts its reason; deleting the autoscaler removes them all."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agentsandbox.controllers.autoscaler import controller as autoscaler_controller
from agentsandbox.controllers.autoscaler.metrics import record
from agentsandbox.controllers.autoscaler.plan import ArrivalBins, Decision
from agentsandbox.kube import metrics as kube_metrics
from agentsandbox.kube.reconcile import Request

from .test_act import NS, FakeScaleApi, autoscaler_obj, setup_reconciler

LABELS = {"namespace": NS, "autoscaler": "auto"}
GAUGES = {
    "agent_sandbox_warmpool_autoscaler_desired_replicas": "replicas",
    "agent_sandbox_warmpool_autoscaler_recommended_replicas": "recommended",
    "agent_sandbox_warmpool_autoscaler_peakedness": "peakedness",
    "agent_sandbox_warmpool_autoscaler_predicted_warm_share": "predicted_warm_share",
    "agent_sandbox_warmpool_autoscaler_claim_arrival_rate": "arrival_rate",
    "agent_sandbox_warmpool_autoscaler_refill_seconds": "refill_time",
}
CURRENT = "agent_sandbox_warmpool_autoscaler_current_replicas"
BURST_PERIOD = "agent_sandbox_warmpool_autoscaler_burst_period_seconds"
DECISIONS = "agent_sandbox_warmpool_autoscaler_decisions_total"


def sample(name: str, **extra: str) -> float | None:
    return kube_metrics.REGISTRY.get_sample_value(name, {**LABELS, **extra})


def spy_decisions(monkeypatch: pytest.MonkeyPatch, reason: str | None = None) -> list[Decision]:
    """Record every decision the reconciler takes (optionally with its reason replaced)."""
    seen: list[Decision] = []
    real = autoscaler_controller.decide

    def decide(*args: Any) -> Decision:
        d = real(*args)
        if reason is not None:
            d = dataclasses.replace(d, reason=reason)
        seen.append(d)
        return d

    monkeypatch.setattr(autoscaler_controller, "decide", decide)
    return seen


async def test_a_decision_sets_its_autoscalers_gauges_and_counts_its_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Autoscaler review #18: desired, current, recommended, predicted warm share, peakedness, the
    measured arrival rate and refill time the decision used, per (namespace, autoscaler)."""
    api = FakeScaleApi(replicas=1)
    rec, _, _, clock = setup_reconciler(api, autoscaler_obj())
    # 60 claims over the last minute: a non-zero rate
    rec.windows.bins[f"{NS}/pool/pool"] = ArrivalBins.of(
        [clock.now - i for i in range(60)], rec.bin_width, 0.05
    )
    decisions = spy_decisions(monkeypatch)
    before = sample(DECISIONS, reason="ScaledUp") or 0.0
    await rec.reconcile(Request(NS, "auto"))
    (d,) = decisions
    assert d.reason == "ScaledUp" and d.arrival_rate > 0 and d.refill_time > 0
    for name, attr in GAUGES.items():
        assert sample(name) == pytest.approx(getattr(d, attr)), name
    assert sample(CURRENT) == 1.0, "the target's spec.replicas as read"
    assert sample(DECISIONS, reason="ScaledUp") == before + 1
    assert sample(BURST_PERIOD, pool="pool") == 0.0, "no schedule of bursts learnt"


async def test_the_learnt_burst_period_is_a_series_of_the_autoscaler_and_its_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The churn alert leaves out the pools shrunk between scheduled bursts: it needs the
    period per pool; a series of a pool no longer targeted goes, and so do they all with the
    autoscaler."""
    api = FakeScaleApi(replicas=3)
    rec, informer, _, _ = setup_reconciler(api, autoscaler_obj())
    real = autoscaler_controller.decide

    def decide(*args: Any) -> Decision:
        return dataclasses.replace(real(*args), burst_period=600.0)

    monkeypatch.setattr(autoscaler_controller, "decide", decide)
    await rec.reconcile(Request(NS, "auto"))
    assert sample(BURST_PERIOD, pool="pool") == 600.0
    record(NS, "auto", real_decision(), 3, pool="other")
    assert sample(BURST_PERIOD, pool="pool") is None, "the pool no longer targeted"
    assert sample(BURST_PERIOD, pool="other") == 0.0
    informer.remove(dict(api.autoscaler or {}))
    assert await rec.reconcile(Request(NS, "auto")) is None
    assert sample(BURST_PERIOD, pool="other") is None


def real_decision() -> Decision:
    return Decision(
        replicas=3,
        reason="Steady",
        message="",
        arrival_rate=0.0,
        refill_time=1.0,
        predicted_warm_share=1.0,
    )


async def test_a_reason_outside_the_known_set_is_counted_as_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reason label is bounded: a reason the metrics do not know is counted as `other`."""
    api = FakeScaleApi(replicas=3)
    rec, _, _, _ = setup_reconciler(api, autoscaler_obj())
    spy_decisions(monkeypatch, reason="SomethingNew")
    before = sample(DECISIONS, reason="other") or 0.0
    await rec.reconcile(Request(NS, "auto"))
    assert sample(DECISIONS, reason="other") == before + 1
    assert sample(DECISIONS, reason="SomethingNew") is None


async def test_deleting_the_autoscaler_removes_its_series() -> None:
    """Autoscaler review #18: label values only of autoscalers that exist."""
    api = FakeScaleApi(replicas=3)
    rec, informer, _, _ = setup_reconciler(api, autoscaler_obj())
    await rec.reconcile(Request(NS, "auto"))
    assert sample(CURRENT) == 3.0
    assert decision_series(), "the decision was counted"
    informer.remove(dict(api.autoscaler or {}))
    assert await rec.reconcile(Request(NS, "auto")) is None
    for name in (*GAUGES, CURRENT):
        assert sample(name) is None, name
    assert decision_series() == []


def decision_series() -> list[dict[str, str]]:
    """The labels of every decisions_total series of the test's autoscaler."""
    return [
        s.labels
        for family in kube_metrics.REGISTRY.collect()
        for s in family.samples
        if s.name == DECISIONS and s.labels.get("autoscaler") == "auto"
    ]


def test_every_decision_reason_of_the_plan_has_its_own_label_value() -> None:
    """A reason ``decide()`` can give is counted under its own name, never folded into
    ``other`` (the circuit breaker's two reasons were missing once)."""
    from agentsandbox.controllers.autoscaler import metrics, plan

    reasons = {v for k, v in vars(plan).items() if k.startswith("REASON_") and isinstance(v, str)}
    assert reasons <= set(metrics.REASONS), reasons - set(metrics.REASONS)
