"""Runtime metrics, named as controller-runtime and client-go name them.

Existing dashboards for Go controllers carry over unchanged. Our own runtime adds a few
``agentsandbox_runtime_*`` series that make faults visible (watch restarts, 410 relists), so
fault tests can prove the fault really happened.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

_EXP_BUCKETS = (*(0.005 * (2**i) for i in range(14)), float("inf"))  # 5 ms .. ~41 s

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
    buckets=_EXP_BUCKETS,
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
    buckets=_EXP_BUCKETS,
    registry=REGISTRY,
)
WORKQUEUE_WORK_DURATION = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes",
    ["name", "controller"],
    buckets=_EXP_BUCKETS,
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
    "1 indicates master. 'name' is the string used to identify the lease.",
    ["name"],
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
