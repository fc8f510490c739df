"""The controller process's ``/metrics`` against upstream's metric families (docs/metrics.md).

Upstream = agent-sandbox 35b9757f on controller-runtime v0.23.3 (which registers the reconcile,
work queue, ``rest_client_requests_total``, leader election, process and Go families). The test
fails when an upstream family disappears, when one of the known-missing families appears without
this file being updated, or when a family nobody announced shows up.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import urllib.request
from pathlib import Path

from agentsandbox.devcluster.cluster import DevCluster, free_port
from tests.polling import eventually_sync

from .test_controller_process import EXE, sandbox_body

LEASE = "a3317529.agent-sandbox.x-k8s.io"

# Upstream families this implementation exports: name -> label names (``le`` aside).
UPSTREAM: dict[str, set[str]] = {
    "controller_runtime_reconcile_total": {"controller", "result"},
    "controller_runtime_reconcile_errors_total": {"controller"},
    "controller_runtime_terminal_reconcile_errors_total": {"controller"},
    "controller_runtime_reconcile_panics_total": {"controller"},
    "controller_runtime_reconcile_time_seconds": {"controller"},
    "controller_runtime_reconcile_timeouts_total": {"controller"},
    "controller_runtime_max_concurrent_reconciles": {"controller"},
    "controller_runtime_active_workers": {"controller"},
    "workqueue_depth": {"name", "controller", "priority"},
    "workqueue_adds_total": {"name", "controller"},
    "workqueue_queue_duration_seconds": {"name", "controller"},
    "workqueue_work_duration_seconds": {"name", "controller"},
    "workqueue_retries_total": {"name", "controller"},
    "workqueue_unfinished_work_seconds": {"name", "controller"},
    "workqueue_longest_running_processor_seconds": {"name", "controller"},
    "rest_client_requests_total": {"code", "method", "host"},
    "leader_election_master_status": {"name"},
    "leader_election_slowpath_total": {"name"},
    "process_cpu_seconds_total": set(),
    "process_open_fds": set(),
    "process_max_fds": set(),
    "process_virtual_memory_bytes": set(),
    "process_resident_memory_bytes": set(),
    "process_start_time_seconds": set(),
    # core (docs/metrics.md, "Always registered"): registered with or without --extensions
    "agent_sandboxes": {
        "namespace",
        "ready_condition",
        "expired",
        "launch_type",
        "sandbox_template",
        "owned_by",
        "created_by",  # upstream HEAD #1039
    },
    "agent_sandbox_build_info": {
        "git_version",
        "git_commit",
        "build_date",
        "go_version",
        "compiler",
        "platform",
    },
}
# Upstream families exported with --extensions that have samples only once a claim was counted
# (docs/metrics.md, "With `--extensions`: the SandboxClaim families"; the client one is upstream
# HEAD's #565): name -> (type, label names).
# prometheus_client prints HELP/TYPE for a labelled family with no samples (Go's registry leaves
# such a vector out), so each must be present; its labels are checked when it has samples.
UPSTREAM_CLAIM: dict[str, tuple[str, set[str]]] = {
    "agent_sandbox_claim_startup_latency_ms": ("histogram", {"launch_type", "sandbox_template"}),
    "agent_sandbox_claim_controller_startup_latency_ms": (
        "histogram",
        {"launch_type", "sandbox_template"},
    ),
    "agent_sandbox_client_claim_startup_latency_ms": (
        "histogram",
        {"launch_type", "sandbox_template"},
    ),
    "agent_sandbox_creation_latency_ms": (
        "histogram",
        {"namespace", "launch_type", "sandbox_template"},
    ),
    "agent_sandbox_claim_creation_total": (
        "counter",
        {
            "namespace",
            "sandbox_template",
            "launch_type",
            "warmpool_name",
            "pod_condition",
            "created_by",  # upstream HEAD #1039
        },
    ),
}
# Labels upstream has and we do not (family -> labels). controller-runtime's priority queue
# labels the depth by priority; our work queue has no priorities.
KNOWN_MISSING_LABELS: dict[str, set[str]] = {"workqueue_depth": {"priority"}}

# Upstream families we do not export yet; each must fail this test when it arrives, so that it
# moves to UPSTREAM with its labels.
KNOWN_MISSING = {
    # Go's process collector on Linux has these too; prometheus_client's has not
    "process_virtual_memory_max_bytes",
    "process_network_receive_bytes_total",
    "process_network_transmit_bytes_total",
    # controller-runtime's metrics server imports certwatcher; we serve plain HTTP only
    "certwatcher_read_certificate_total",
    "certwatcher_read_certificate_errors_total",
}
# go_* has no Python equivalent by name; python_info and python_gc_* stand in for it.
KNOWN_MISSING_PREFIXES = ("go_",)

# Ours, not upstream's: explicit names, and our own prefixes (runtime and warm-pool families).
OURS = {
    "rest_client_request_duration_seconds",
    "rest_client_rate_limiter_duration_seconds",
    "python_info",
    "python_gc_objects_collected_total",
    "python_gc_objects_uncollectable_total",
    "python_gc_collections_total",
}
OUR_PREFIXES = ("agentsandbox_runtime_", "agent_sandbox_warmpool_")

_TYPE = re.compile(r"^# TYPE (\S+) (\S+)$", re.M)
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="')


def families(text: str) -> dict[str, tuple[str, set[str], int]]:
    """Family name -> (type, label names seen on its samples, sample count)."""
    out: dict[str, tuple[str, set[str], int]] = {
        name: (kind, set(), 0) for name, kind in _TYPE.findall(text)
    }
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        sample = m.group(1)
        for family in (sample, *(sample.removesuffix(s) for s in ("_bucket", "_sum", "_count"))):
            if family in out:
                kind, labels, count = out[family]
                labels.update(n for n in _LABEL.findall(m.group(2) or "") if n != "le")
                out[family] = (kind, labels, count + 1)
                break
    return out


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return str(resp.read().decode())


def test_metric_families_are_upstreams_and_the_gaps_are_announced(
    cluster: DevCluster, namespace: str, tmp_path: Path
) -> None:
    metrics_port = free_port()
    log = tmp_path / "controller.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(EXE),
                f"--kubeconfig={cluster.kubeconfig}",
                "--extensions",
                f"--leader-election-namespace={namespace}",
                f"--metrics-bind-address=127.0.0.1:{metrics_port}",
                f"--health-probe-bind-address=127.0.0.1:{free_port()}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        cluster.api(
            "POST",
            f"/apis/agents.x-k8s.io/v1beta1/namespaces/{namespace}/sandboxes",
            sandbox_body("metrics"),
        )
        reconciled = re.compile(
            r'^controller_runtime_reconcile_total\{controller="sandbox",result="success"\} '
            r"[1-9]",
            re.M,
        )

        def reconciled_once() -> str:
            assert proc.poll() is None, log.read_text()
            try:
                text = scrape(metrics_port)
            except OSError:
                text = ""
            leading = f'leader_election_master_status{{name="{LEASE}"}} 1.0' in text
            return text if leading and reconciled.search(text) else ""

        text = eventually_sync(
            reconciled_once, within=60, what="a sandbox reconcile in /metrics", interval=0.2
        )
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0, log.read_text()

    found = families(text)
    names = set(found)
    missing = (set(UPSTREAM) | set(UPSTREAM_CLAIM)) - names
    assert not missing, f"upstream families gone: {sorted(missing)}"
    arrived = {n for n in names if n in KNOWN_MISSING or n.startswith(KNOWN_MISSING_PREFIXES)}
    assert not arrived, f"known-missing families now exported, move them to UPSTREAM: {arrived}"
    unannounced = {
        n
        for n in names - set(UPSTREAM) - set(UPSTREAM_CLAIM) - OURS
        if not n.startswith(OUR_PREFIXES)
    }
    assert not unannounced, f"families nobody announced: {sorted(unannounced)}"
    for name, labels in UPSTREAM.items():
        _, seen, count = found[name]
        assert count > 0, f"{name} has no samples"
        assert seen == labels - KNOWN_MISSING_LABELS.get(name, set()), name
    for name, (kind, labels) in UPSTREAM_CLAIM.items():
        found_kind, seen, count = found[name]
        assert found_kind == kind, name
        assert count == 0 or seen == labels, name
    assert found["controller_runtime_reconcile_time_seconds"][0] == "histogram"
    assert found["agent_sandboxes"][0] == "gauge"
    assert found["agent_sandbox_build_info"][0] == "gauge"
    assert re.search(r"^agent_sandbox_build_info\{[^}]*\} 1\.0$", text, re.M), text
    # The Sandbox this test created, counted from the informer cache.
    ours = [
        line
        for line in text.splitlines()
        if line.startswith("agent_sandboxes{") and f'namespace="{namespace}"' in line
    ]
    assert len(ours) == 1 and ours[0].endswith(" 1.0"), ours
    assert 'owned_by="None"' in ours[0] and 'sandbox_template="unknown"' in ours[0], ours
    assert 'created_by=""' in ours[0], ours  # the Sandbox has no agents.x-k8s.io/created-by
    assert found["process_resident_memory_bytes"][0] == "gauge"
