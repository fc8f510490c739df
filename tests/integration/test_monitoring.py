"""deploy/monitoring: the Grafana dashboard and the Prometheus alert rules query only what a
running controller exports.

The controller runs with --extensions and leader election, serves one warm and one cold claim
(each carrying the client's first-requested-at annotation, as k8s-agent-sandbox 1.0.x writes it),
the pool is scaled to 0, then /metrics is scraped. Every metric name in every query must be a
sample name of that scrape, and every label a query matches or groups by must be a label of one
of its metrics (or a label Prometheus adds to a target: job, instance, pod, ...).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from agentsandbox.api.keys import ANNOTATION_CLIENT_FIRST_REQUESTED_AT
from agentsandbox.devcluster.cluster import DevCluster, free_port
from tests.polling import eventually_sync

from .test_deploy import DEPLOY, EXE, serve_warm_and_cold

MONITORING = DEPLOY / "monitoring"
# Labels a Prometheus scrape (Kubernetes service discovery, a ServiceMonitor) adds to a target.
TARGET_LABELS = {"job", "instance", "pod", "namespace", "service", "endpoint", "container"}
AGGREGATIONS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "group", "limitk", "limit_ratio",
}  # fmt: skip
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "by", "without", "on"}
KEYWORDS |= {"ignoring", "group_left", "group_right"}

Samples = dict[str, set[str]]  # sample name -> the label names seen on it


def dashboard() -> dict[str, Any]:
    return dict(json.loads((MONITORING / "grafana-dashboard.json").read_text()))


def rules() -> dict[str, Any]:
    return dict(yaml.safe_load((MONITORING / "alerts.yaml").read_text()))


def all_panels(d: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in d["panels"]:
        yield p
        yield from p.get("panels", [])


def queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every query of the dashboard (panels and variables) and the rules."""
    out = []
    d = dashboard()
    for p in all_panels(d):
        for t in p.get("targets", []):
            out.append((f"panel {p['title']!r} {t['refId']}", t["expr"]))
    for v in d["templating"]["list"]:
        if v["type"] == "query":
            m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", v["definition"])
            assert m, v["definition"]
            out.append((f"variable {v['name']}", f"group by ({m[2]}) ({m[1]})"))
    for g in rules()["spec"]["groups"]:
        for r in g["rules"]:
            out.append((f"alert {r['alert']}", r["expr"]))
    return out


def metrics_and_labels(expr: str) -> tuple[set[str], set[str]]:
    """The metric names a PromQL expression selects and the label names it matches or groups by
    (a small tokenizer, enough for the queries here: no string concatenation, no subqueries)."""
    e = re.sub(r"\$\{[^}]*\}|\$\w+", "", expr)  # Grafana variables ($__rate_interval, $job)
    labels: set[str] = set()
    for body in re.findall(r"\{([^}]*)\}", e):
        labels |= set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", body))
    e = re.sub(r"\{[^}]*\}", " ", e)
    for _, group in re.findall(
        r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", e
    ):
        labels |= {x.strip() for x in group.split(",") if x.strip()}
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)  # range selectors
    e = re.sub(r'"[^"]*"', " ", e)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        word = m.group(0)
        after = e[m.end() :].lstrip()
        if after.startswith("(") or word in AGGREGATIONS or word.lower() in KEYWORDS:
            continue
        if m.start() > 0 and (e[m.start() - 1].isdigit() or e[m.start() - 1] == "."):
            continue  # the exponent of a number such as 1e3
        names.add(word)
    return names, labels


def test_the_tokenizer_finds_metrics_and_labels() -> None:
    names, labels = metrics_and_labels(
        'histogram_quantile(0.99, sum by (le, launch_type) (rate(a_ms_bucket{x="y",z=~"$v"}'
        "[$__rate_interval]))) / on (pool) group_left b_total > 1e3 and max(c) < 1"
    )
    assert names == {"a_ms_bucket", "b_total", "c"}
    assert labels == {"le", "launch_type", "x", "z", "pool"}


# ----------------------------------------------------------------------------- shape
def test_the_dashboard_covers_claims_pools_and_the_controller() -> None:
    d = dashboard()
    panels = [p for p in all_panels(d) if p["type"] != "row"]
    assert len({p["id"] for p in all_panels(d)}) == len(list(all_panels(d)))
    for p in panels:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"] and all(t["expr"].strip() for t in p["targets"]), p["title"]
        assert {"h", "w", "x", "y"} <= set(p["gridPos"]), p["title"]
    exprs = " ".join(t["expr"] for p in panels for t in p["targets"])
    for needed in (
        "agent_sandbox_claim_controller_startup_latency_ms_bucket",  # claim latency
        "launch_type",  # ... warm vs cold
        'agent_sandbox_claim_creation_total{launch_type="warm"',  # warm-hit ratio
        "agent_sandbox_warmpool_desired_replicas",
        "agent_sandbox_warmpool_ready_replicas",
        "controller_runtime_reconcile_total",
        "controller_runtime_reconcile_errors_total",
        "workqueue_depth",
    ):
        assert needed in exprs, needed


def test_the_alerts_are_a_prometheus_rule_with_the_three_kinds() -> None:
    r = rules()
    assert (r["apiVersion"], r["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    alerts = {rule["alert"]: rule for g in r["spec"]["groups"] for rule in g["rules"]}
    assert {
        "AgentSandboxWarmPoolNotProgressing",
        "AgentSandboxWarmHitRatioLow",
        "AgentSandboxReconcileErrors",
    } <= set(alerts)
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        assert re.fullmatch(r"\d+m", rule["for"]), name
        doc, _, anchor = rule["annotations"]["runbook"].partition("#")
        assert (DEPLOY.parent / doc).is_file(), (name, doc)
        headings = re.findall(r"^#+ (.+)$", (DEPLOY.parent / doc).read_text(), re.M)
        slugs = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}
        assert not anchor or anchor in slugs, (name, anchor, slugs)


# ----------------------------------------------------------------------------- vs a controller
@pytest.fixture(scope="module")
def scraped(cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Samples:
    ns = f"monitoring-{uuid.uuid4().hex[:6]}"
    cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    port = free_port()
    log = tmp_path_factory.mktemp("monitoring") / "controller.log"
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(EXE),
                f"--kubeconfig={cluster.kubeconfig}",
                "--extensions",
                "--leader-elect=true",
                f"--leader-election-namespace={ns}",
                f"--metrics-bind-address=127.0.0.1:{port}",
                f"--health-probe-bind-address=127.0.0.1:{free_port()}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        requested = datetime.now(UTC).isoformat()
        serve_warm_and_cold(
            cluster,
            ns,
            lambda: proc.poll() is None,
            log,
            claim_annotations={ANNOTATION_CLIENT_FIRST_REQUESTED_AT: requested},
        )
        # an autoscaler of the pool: its decisions are counted (the autoscaler's families, which
        # the alerts query, exist only once one decides); with no refill measured by this
        # process it keeps the pool's size, and stands back when the patch below changes it
        cluster.api(
            "POST",
            f"/apis/autoscaling.agentsandbox.dev/v1alpha1/namespaces/{ns}/sandboxwarmpoolautoscalers",
            {
                "apiVersion": "autoscaling.agentsandbox.dev/v1alpha1",
                "kind": "SandboxWarmPoolAutoscaler",
                "metadata": {"name": "auto"},
                "spec": {
                    "scaleTargetRef": {
                        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                        "kind": "SandboxWarmPool",
                        "name": "pool",
                    },
                    "minReplicas": 0,
                    "maxReplicas": 5,
                    "targetWarmShare": 0.99,
                },
            },
        )
        autoscaler = (
            f"/apis/autoscaling.agentsandbox.dev/v1alpha1/namespaces/{ns}"
            "/sandboxwarmpoolautoscalers/auto"
        )
        eventually_sync(  # its first decision made (the size it owns), before the patch below
            lambda: "desiredReplicas" in (cluster.api("GET", autoscaler).get("status") or {}),
            within=30.0,
            what="the autoscaler's first decision",
        )
        # scale the pool to 0: its sandbox is deleted (agent_sandbox_warmpool_sandbox_deletes_total)
        cluster.kubectl(
            "patch", "-n", ns, "sandboxwarmpools.extensions.agents.x-k8s.io/pool",
            "--type=merge", "-p", '{"spec": {"replicas": 0}}',
        )  # fmt: skip
        pool = f"/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{ns}/sandboxwarmpools/pool"
        eventually_sync(
            lambda: (cluster.api("GET", pool).get("status") or {}).get("replicas") == 0,
            within=30.0,
            what="pool scaled to 0",
        )

        def scrape() -> str | None:  # once the delete and a decision are counted
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
            counted = re.search(r"^agent_sandbox_warmpool_sandbox_deletes_total\{", text, re.M)
            decided = re.search(r"^agent_sandbox_warmpool_autoscaler_decisions_total\{", text, re.M)
            return text if counted and decided else None

        text = eventually_sync(
            scrape, within=15, what="the sandbox's delete and a decision counted in /metrics"
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        cluster.api("DELETE", f"/api/v1/namespaces/{ns}")
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, set()).update(s.labels)
    return samples


@pytest.mark.parametrize(("where", "expr"), queries(), ids=[w for w, _ in queries()])
def test_every_metric_and_label_queried_is_exported(
    scraped: Samples, where: str, expr: str
) -> None:
    names, labels = metrics_and_labels(expr)
    assert names, (where, expr)
    missing = sorted(n for n in names if n not in scraped)
    assert not missing, f"{where}: not exported by the controller: {missing}"
    known = set().union(*(scraped[n] for n in names)) | TARGET_LABELS
    assert labels <= known, f"{where}: labels {sorted(labels - known)} not on {sorted(names)}"
