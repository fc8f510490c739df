"""agent-sandbox-controller as a process: upstream args, a Sandbox served, SIGTERM, no CRDs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from agentsandbox.devcluster.cluster import DevCluster, free_port
from tests.polling import eventually_sync

EXE = Path(sys.executable).with_name("agent-sandbox-controller")


def sandbox_body(name: str) -> dict[str, object]:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": name},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "x/y:1"}]}}},
    }


def test_console_script_runs_the_manager_serves_sandboxes_and_stops_on_sigterm(
    cluster: DevCluster, namespace: str, tmp_path: Path
) -> None:
    metrics_port, probe_port = free_port(), free_port()
    log = tmp_path / "controller.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(EXE),
                f"--kubeconfig={cluster.kubeconfig}",
                "--extensions",
                "--leader-elect=true",
                f"--leader-election-namespace={namespace}",
                f"--metrics-bind-address=127.0.0.1:{metrics_port}",
                f"--health-probe-bind-address=127.0.0.1:{probe_port}",
                "--kube-api-qps=100",
                "--kube-api-burst=200",
                "--enable-pprof",
                "--zap-log-level=info",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        cluster.api(
            "POST",
            f"/apis/agents.x-k8s.io/v1beta1/namespaces/{namespace}/sandboxes",
            sandbox_body("web"),
        )
        path = f"/apis/agents.x-k8s.io/v1beta1/namespaces/{namespace}/sandboxes/web"

        def sandbox() -> dict[str, Any]:
            assert proc.poll() is None, log.read_text()
            return dict(cluster.api("GET", path))

        def is_ready(sb: dict[str, Any]) -> bool:
            conds = {c["type"]: c for c in (sb.get("status") or {}).get("conditions", [])}
            return bool(conds.get("Ready", {}).get("status") == "True")

        sb = eventually_sync(
            sandbox, accept=is_ready, within=60, what="the sandbox Ready", interval=0.2
        )
        assert sb["status"]["podIPs"]
        with urllib.request.urlopen(f"http://127.0.0.1:{probe_port}/readyz", timeout=5) as r:
            assert r.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert 'controller_runtime_reconcile_total{controller="sandbox"' in text
        lease = cluster.api(
            "GET",
            f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/"
            "a3317529.agent-sandbox.x-k8s.io",
        )
        assert lease["spec"]["holderIdentity"]
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0, log.read_text()
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert any("enable-pprof has no effect" in entry["msg"] for entry in lines)


def test_missing_crds_end_start_up_with_one_line(cluster: DevCluster, tmp_path: Path) -> None:
    bare = DevCluster(tmp_path / "bare", nodes=1, bin_dir=cluster.bin_dir)
    bare.start()
    try:
        t0 = time.monotonic()
        proc = subprocess.run(
            [
                str(EXE),
                f"--kubeconfig={bare.kubeconfig}",
                "--leader-elect=false",
                "--metrics-bind-address=0",
                "--health-probe-bind-address=0",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        took = time.monotonic() - t0
    finally:
        bare.stop(keep_logs=False)
    assert proc.returncode == 1
    assert "agents.x-k8s.io/v1beta1 is not served: install the CRDs first" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert took < 15
