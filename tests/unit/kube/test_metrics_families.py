"""Metric families as controller-runtime v0.23.3 exports them: buckets, names, labels, process.

References: controller-runtime ``pkg/internal/controller/metrics/metrics.go`` (reconcile
families, ``ProcessCollector``), ``pkg/metrics/workqueue.go`` (work queue histograms),
``pkg/metrics/leaderelection.go`` (``leader_election_*``).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any, cast

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agentsandbox.kube import metrics
from agentsandbox.kube.client import Client
from agentsandbox.kube.controller import Controller
from agentsandbox.kube.errors import NotFound
from agentsandbox.kube.leaderelection import LeaderElector
from agentsandbox.kube.reconcile import Request, Result
from tests.polling import eventually

# controller-runtime v0.23.3, ReconcileTime: copied from the Go source, not computed.
GO_RECONCILE_TIME_BUCKETS = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
    0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30,
    40, 50, 60,
]  # fmt: skip
# ExponentialBuckets(10e-9, 10, 12) as Go's float64 multiplication yields them; these are the
# ``le`` strings a Go controller prints.
GO_WORKQUEUE_LE = [
    "1e-08", "1e-07", "1e-06", "9.999999999999999e-06", "9.999999999999999e-05", "0.001",
    "0.01", "0.1", "1", "10", "100", "1000",
]  # fmt: skip


def bucket_bounds(family: str, labels: dict[str, str]) -> list[float]:
    """The finite ``le`` bounds of one labelled histogram on our registry, in order."""
    for metric in metrics.REGISTRY.collect():
        if metric.name != family:
            continue
        return [
            float(s.labels["le"])
            for s in metric.samples
            if s.name == f"{family}_bucket"
            and all(s.labels.get(k) == v for k, v in labels.items())
            and s.labels["le"] != "+Inf"
        ]
    raise AssertionError(f"{family} is not registered")


def test_reconcile_time_buckets_are_controller_runtimes() -> None:
    metrics.RECONCILE_TIME.labels("buckets-test").observe(0.001)
    bounds = bucket_bounds(
        "controller_runtime_reconcile_time_seconds", {"controller": "buckets-test"}
    )
    assert bounds == [float(b) for b in GO_RECONCILE_TIME_BUCKETS]


def test_workqueue_duration_buckets_are_exponential_10ns_to_1000s() -> None:
    expected = [float(le) for le in GO_WORKQUEUE_LE]
    for family, child in (
        ("workqueue_queue_duration_seconds", metrics.WORKQUEUE_QUEUE_DURATION),
        ("workqueue_work_duration_seconds", metrics.WORKQUEUE_WORK_DURATION),
    ):
        child.labels("buckets-test", "buckets-test").observe(0.002)
        labels = {"name": "buckets-test", "controller": "buckets-test"}
        assert bucket_bounds(family, labels) == expected, family
    # Same float64 values as Go, so the same text (Python prints 1.0 where Go prints 1).
    text = generate_latest(metrics.REGISTRY).decode()
    assert 'le="9.999999999999999e-06"' in text and 'le="1e-08"' in text


def family_labels() -> dict[str, set[str]]:
    """Every family on the registry -> the label names its samples carry (minus ``le``)."""
    text = generate_latest(metrics.REGISTRY).decode()
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        names = out.setdefault(family.name, set())
        for sample in family.samples:
            names.update(k for k in sample.labels if k not in ("le", "quantile"))
    return out


async def _noop(request: Request) -> Result:
    return Result()


def test_terminal_errors_and_timeouts_exist_at_zero_per_controller() -> None:
    Controller("families-test", _noop)
    for name in (
        "controller_runtime_terminal_reconcile_errors_total",
        "controller_runtime_reconcile_timeouts_total",
    ):
        assert metrics.REGISTRY.get_sample_value(name, {"controller": "families-test"}) == 0.0
    labels = family_labels()
    assert labels["controller_runtime_terminal_reconcile_errors"] == {"controller"}
    assert labels["controller_runtime_reconcile_timeouts"] == {"controller"}


def test_no_created_series_go_does_not_export() -> None:
    metrics.RECONCILE_TOTAL.labels("created-test", "success").inc()
    metrics.RECONCILE_TIME.labels("created-test").observe(0.1)
    text = generate_latest(metrics.REGISTRY).decode()
    assert "_created" not in text


def test_process_metrics_are_exported_with_gos_names() -> None:
    names = set(family_labels())
    for name in (
        "process_cpu_seconds",  # the parser drops a counter's _total
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_start_time_seconds",
        "process_open_fds",
        "process_max_fds",
    ):
        assert name in names, name
    assert (metrics.REGISTRY.get_sample_value("process_resident_memory_bytes", {}) or 0) > 0
    assert "python_info" in names and "python_gc_objects_collected" in names


class FakeLeases:
    """Just enough of :class:`Client` for one Lease: get, create, update (no conflicts)."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0

    def _stored(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        self.lease = copy.deepcopy(body)
        self.lease.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return copy.deepcopy(self.lease)

    async def get(self, resource: object, name: str, namespace: str) -> dict[str, Any]:
        if self.lease is None:
            raise NotFound(404, "NotFound", "no lease")
        return copy.deepcopy(self.lease)

    async def create(self, resource: object, body: dict[str, Any], ns: str) -> dict[str, Any]:
        return self._stored(body)

    async def update(self, resource: object, body: dict[str, Any], ns: str) -> dict[str, Any]:
        return self._stored(body)


async def test_leader_slowpath_counts_renewals_that_read_the_lease_first() -> None:
    """client-go counts a leader's read-then-write renewal; every renewal of ours is one."""
    name = "slowpath-test"
    elector = LeaderElector(
        cast(Client, FakeLeases()),
        name=name,
        namespace="ns",
        lease_duration=2.0,
        renew_deadline=1.0,
        retry_period=0.05,
    )

    def slowpath() -> float | None:
        return metrics.REGISTRY.get_sample_value("leader_election_slowpath_total", {"name": name})

    assert slowpath() == 0.0
    elector.start()
    try:
        await asyncio.wait_for(elector.wait_leading(), 5)
        assert slowpath() == 0.0  # acquiring (creating the Lease) is not a renewal
        # renewals come every retry_period (0.05 s) of real time; the 10 s only stops a hung
        # test, the count is what is checked
        await eventually(
            lambda: (slowpath() or 0) >= 2,
            within=10.0,
            what="two slow-path renewals",
            interval=0.02,
        )
    finally:
        await elector.stop()
    assert family_labels()["leader_election_slowpath"] == {"name"}
