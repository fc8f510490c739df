"""deploy/monitoring/alerts.yaml without a cluster: the warm share alert (autoscaler review #18)
and that every family the rules query is documented in docs/metrics.md.

tests/integration/test_monitoring.py checks each queried metric and label against a running
controller; this checks what the rule says.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
ALERTS = ROOT / "deploy" / "monitoring" / "alerts.yaml"
SERVED = "agent_sandbox_warmpool_claims_served_total"


def alerts() -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return {r["alert"]: r for g in doc["spec"]["groups"] for r in g["rules"]}


def test_the_warm_share_alert_fires_per_pool_below_the_target_over_ten_minutes() -> None:
    """Autoscaler review #18: the realised warm share of each pool (claims served warm, Ready or
    not, over all claims that asked for the pool) below the target (0.95) for 10 minutes, and
    only with enough claims in the window to mean something."""
    rule = alerts()["AgentSandboxWarmShareLow"]
    expr = " ".join(rule["expr"].split())
    assert rule["for"] == "10m"
    assert expr.count(SERVED) >= 3, "numerator, denominator and the minimum-claims guard"
    assert re.search(r'served=~?"warm_ready\|warm_not_ready"|served!="cold"', expr), expr
    assert "by (namespace, pool)" in expr, "per pool"
    assert "[10m]" in expr
    assert re.search(r"\)\s*<\s*0\.95\b", expr), "the target"
    assert re.search(r"increase\(" + SERVED + r"\[10m\]\)\s*\)\s*>=\s*\d+", expr), (
        "a minimum number of claims"
    )
    assert "{{ $labels.pool }}" in rule["annotations"]["summary"]


def documented_names(doc: str) -> set[str]:
    """Every `name` of docs/metrics.md, with a shortened sibling (`x_desired_replicas`,
    `_ready_replicas`) expanded on the stem of the full name before it on the same line."""
    out: set[str] = set()
    for line in doc.splitlines():
        full: list[str] = []
        for token in re.findall(r"`(\w+)`", line):
            if token.startswith("_") and full:
                stem = full[-1]
                while stem:
                    stem = stem.rpartition("_")[0]
                    out.add(stem + token)
            else:
                full.append(token)
                out.add(token)
    return out


def test_every_family_the_rules_query_is_documented() -> None:
    text = ALERTS.read_text()
    doc = (ROOT / "docs" / "metrics.md").read_text()
    queried = set(re.findall(r"\b((?:agent_sandbox|controller_runtime|workqueue)_\w+)", text))
    documented = documented_names(doc)
    missing = sorted(
        name
        for name in queried
        if name not in documented and not name.endswith(("_bucket", "_count", "_sum"))
    )
    assert SERVED in queried
    assert not missing, missing


CREATES = "agent_sandbox_warmpool_sandbox_creates_total"
BEFORE_READY = "agent_sandbox_warmpool_sandbox_deletes_before_ready_total"


def test_the_pool_churn_alert_fires_when_deletes_before_ready_are_a_large_share_of_creates() -> (
    None
):
    """Autoscaler review #18: a pool that deletes many of the sandboxes it creates before they
    were Ready (an autoscaler or another writer flapping its size, sandboxes stuck and replaced)
    for 15 minutes, per pool, above a threshold share, with enough creates to mean something."""
    rule = alerts()["AgentSandboxWarmPoolChurn"]
    expr = " ".join(rule["expr"].split())
    assert rule["for"] == "15m"
    assert BEFORE_READY in expr
    assert expr.count(CREATES) >= 2, "the denominator and the minimum-creates guard"
    assert 'result="success"' in expr
    assert "by (namespace, pool)" in expr, "per pool"
    assert "[15m]" in expr
    assert re.search(r"\)\s*>\s*0\.\d+\b", expr), "the threshold share"
    assert re.search(r"\[15m\]\)\s*\)\s*>=\s*\d+", expr), "a minimum number of creates"
    assert "{{ $labels.pool }}" in rule["annotations"]["summary"]


def test_the_pool_churn_alert_leaves_out_pools_shrunk_between_scheduled_bursts() -> None:
    """A pool whose autoscaler learnt a schedule of bursts deletes the members being made after
    each burst on purpose (about half of what it creates when few claims come between
    bursts): the churn alert leaves out the pools whose learnt period is above 0."""
    expr = " ".join(alerts()["AgentSandboxWarmPoolChurn"]["expr"].split())
    assert re.search(
        r"unless on \(namespace, pool\) max by \(namespace, pool\) "
        r"\(agent_sandbox_warmpool_autoscaler_burst_period_seconds\) > 0\s*$",
        expr,
    ), expr


def test_the_autoscaler_stalled_alert_fires_per_autoscaler_while_its_breaker_is_tripped() -> None:
    """Issue: a tripped circuit breaker (the pool's members never become Ready) alerts, per
    autoscaler, from the decisions counted under the breaker's reasons."""
    rule = alerts()["AgentSandboxWarmPoolAutoscalerStalled"]
    expr = " ".join(rule["expr"].split())
    assert rule["for"] == "5m"
    assert "agent_sandbox_warmpool_autoscaler_decisions_total" in expr
    assert 'reason=~"MembersNeverReady|PoolNotReady"' in expr
    assert "by (namespace, autoscaler)" in expr
    assert re.search(r"\)\s*>\s*0\b", expr)
    assert "{{ $labels.autoscaler }}" in rule["annotations"]["summary"]
