"""Runtime metrics, named as controller-runtime and client-go name them.

Existing dashboards for Go controllers carry over unchanged. Our own runtime adds a few
``agentsandbox_runtime_*`` series that make faults visible (watch restarts, 410 relists), so
fault tests can prove the fault really happened.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.registry import Collector

REGISTRY = CollectorRegistry(auto_describe=True)

# Go's client exports no ``<name>_created`` series; prometheus_client adds one gauge family per
# counter and histogram unless told not to (process-wide).
disable_created_metrics()  # type: ignore[no-untyped-call]


_REPLACEABLE: dict[str, Collector] = {}


def register_replacing(key: str, collector: Collector) -> None:
    """Register ``collector`` on :data:`REGISTRY`, first unregistering the one registered
    earlier under ``key``.

    For collectors bound to one manager (e.g. reading its informer cache): a process (or a test
    session) that builds a second manager replaces the first one's collector instead of failing
    on the duplicate family name.
    """
    previous = _REPLACEABLE.pop(key, None)
    if previous is not None:
        REGISTRY.unregister(previous)
    REGISTRY.register(collector)
    _REPLACEABLE[key] = collector


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """client_golang's ``prometheus.ExponentialBuckets``, multiplied step by step as Go does.

    Repeated multiplication (not ``start * factor**i``) gives the same float64 values as Go, so
    the ``le`` labels match Go's text byte for byte (``9.999999999999999e-06``).
    """
    out = []
    value = start
    for _ in range(count):
        out.append(value)
        value *= factor
    return tuple(out)


#: controller-runtime v0.23.3 ``controller_runtime_reconcile_time_seconds``
#: (pkg/internal/controller/metrics/metrics.go).
RECONCILE_TIME_BUCKETS: tuple[float, ...] = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5),
    *(0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5),
    *(5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60),
)
#: controller-runtime v0.23.3 work queue histograms: ``ExponentialBuckets(10e-9, 10, 12)``,
#: 10 ns .. 1000 s (pkg/metrics/workqueue.go).
WORKQUEUE_DURATION_BUCKETS = exponential_buckets(10e-9, 10, 12)

# Our own extras (not registered by controller-runtime).
_EXP_BUCKETS = (*(0.005 * (2**i) for i in range(14)), float("inf"))  # 5 ms .. ~41 s

# --- process and interpreter (controller-runtime: Go's ProcessCollector and GoCollector) ------
# ``process_*`` carry Go's names (process_resident_memory_bytes, process_cpu_seconds_total, ...);
# ``python_info`` and ``python_gc_*`` stand in for ``go_*``.
PROCESS = ProcessCollector(registry=REGISTRY)
PLATFORM = PlatformCollector(registry=REGISTRY)
GC = GCCollector(registry=REGISTRY)

# --- controller-runtime: reconciles -------------------------------------------------------
RECONCILE_TOTAL = Counter(
    "controller_runtime_reconcile_total",
    "Total number of reconciliations per controller",
    ["controller", "result"],
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "controller_runtime_reconcile_errors_total",
    "Total number of reconciliation errors per controller",
    ["controller"],
    registry=REGISTRY,
)
# Terminal errors are not retried (see kube.reconcile.is_terminal); our runtime has no
# per-reconcile timeout. Each Controller sets both to 0 at construction, as controller-runtime
# initialises them per controller, so dashboards and alerts written for Go controllers find
# the series.
RECONCILE_TERMINAL_ERRORS = Counter(
    "controller_runtime_terminal_reconcile_errors_total",
    "Total number of terminal reconciliation errors per controller",
    ["controller"],
    registry=REGISTRY,
)
RECONCILE_TIMEOUTS = Counter(
    "controller_runtime_reconcile_timeouts_total",
    "Total number of reconciliation timeouts per controller",
    ["controller"],
    registry=REGISTRY,
)
RECONCILE_PANICS = Counter(
    "controller_runtime_reconcile_panics_total",
    "Total number of reconciliation panics (unexpected exceptions) per controller",
    ["controller"],
    registry=REGISTRY,
)
RECONCILE_TIME = Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller",
    ["controller"],
    buckets=RECONCILE_TIME_BUCKETS,
    registry=REGISTRY,
)
MAX_CONCURRENT_RECONCILES = Gauge(
    "controller_runtime_max_concurrent_reconciles",
    "Maximum number of concurrent reconciles per controller",
    ["controller"],
    registry=REGISTRY,
)
ACTIVE_WORKERS = Gauge(
    "controller_runtime_active_workers",
    "Number of currently used workers per controller",
    ["controller"],
    registry=REGISTRY,
)

# --- client-go: work queue ----------------------------------------------------------------
WORKQUEUE_DEPTH = Gauge(
    "workqueue_depth", "Current depth of workqueue", ["name", "controller"], registry=REGISTRY
)
WORKQUEUE_ADDS = Counter(
    "workqueue_adds_total",
    "Total number of adds handled by workqueue",
    ["name", "controller"],
    registry=REGISTRY,
)
WORKQUEUE_RETRIES = Counter(
    "workqueue_retries_total",
    "Total number of retries handled by workqueue",
    ["name", "controller"],
    registry=REGISTRY,
)
WORKQUEUE_QUEUE_DURATION = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested",
    ["name", "controller"],
    buckets=WORKQUEUE_DURATION_BUCKETS,
    registry=REGISTRY,
)
WORKQUEUE_WORK_DURATION = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes",
    ["name", "controller"],
    buckets=WORKQUEUE_DURATION_BUCKETS,
    registry=REGISTRY,
)
WORKQUEUE_UNFINISHED_WORK = Gauge(
    "workqueue_unfinished_work_seconds",
    "Seconds of work in progress not yet observed by work_duration",
    ["name", "controller"],
    registry=REGISTRY,
)
WORKQUEUE_LONGEST_RUNNING = Gauge(
    "workqueue_longest_running_processor_seconds",
    "How many seconds the longest running processor for workqueue has been running",
    ["name", "controller"],
    registry=REGISTRY,
)

# --- client-go: REST client ---------------------------------------------------------------
REST_CLIENT_REQUESTS = Counter(
    "rest_client_requests_total",
    "Number of HTTP requests, partitioned by status code, method, and host",
    ["code", "method", "host"],
    registry=REGISTRY,
)
REST_CLIENT_LATENCY = Histogram(
    "rest_client_request_duration_seconds",
    "Request latency in seconds, broken down by verb and host",
    ["verb", "host"],
    buckets=_EXP_BUCKETS,
    registry=REGISTRY,
)
REST_CLIENT_RATE_LIMITER_DURATION = Histogram(
    "rest_client_rate_limiter_duration_seconds",
    "Client side rate limiter latency in seconds, broken down by verb and host",
    ["verb", "host"],
    buckets=_EXP_BUCKETS,
    registry=REGISTRY,
)

# --- leader election ----------------------------------------------------------------------
LEADER_ELECTION_STATUS = Gauge(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
    "1 indicates master. 'name' is the string used to identify the lease. Please make sure to "
    "group by name.",
    ["name"],
    registry=REGISTRY,
)
LEADER_ELECTION_SLOWPATH = Counter(
    "leader_election_slowpath_total",
    "Total number of slow path exercised in renewing leader leases. 'name' is the string used "
    "to identify the lease. Please make sure to group by name.",
    ["name"],
    registry=REGISTRY,
)

# --- our runtime: the event loop ----------------------------------------------------------
EVENT_LOOP_LAG = Gauge(
    "agentsandbox_runtime_event_loop_lag_seconds",
    "How much later than asked the event loop last ran a timer (0 when idle)",
    registry=REGISTRY,
)
EVENT_LOOP_STALLS = Counter(
    "agentsandbox_runtime_event_loop_stalls_total",
    "Times the event loop was blocked longer than the leader election renew deadline",
    registry=REGISTRY,
)

# --- our runtime: informers (make faults observable) ---------------------------------------
INFORMER_LISTS = Counter(
    "agentsandbox_runtime_informer_lists_total",
    "Full LISTs performed by an informer (initial list and relists)",
    ["resource"],
    registry=REGISTRY,
)
INFORMER_WATCH_STARTS = Counter(
    "agentsandbox_runtime_informer_watch_starts_total",
    "WATCH requests opened by an informer",
    ["resource"],
    registry=REGISTRY,
)
INFORMER_WATCH_ENDS = Counter(
    "agentsandbox_runtime_informer_watch_ends_total",
    "WATCH streams that ended, by reason (closed, gone, error)",
    ["resource", "reason"],
    registry=REGISTRY,
)
INFORMER_EVENTS = Counter(
    "agentsandbox_runtime_informer_events_total",
    "Events delivered by an informer to its store, by type (ADDED, MODIFIED, DELETED, BOOKMARK)",
    ["resource", "type"],
    registry=REGISTRY,
)
