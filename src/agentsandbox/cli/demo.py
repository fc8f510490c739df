"""``make demo``: set up the local control plane and show what the project can do so far.

Grows with the project. Today: a real control plane from source (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kwok) and a burst of simulated pods going Ready. The
warm pool and claims come with the controllers.
"""

from __future__ import annotations

import sys
import tempfile
import time
import uuid
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agentsandbox.devcluster import BinariesError, ClusterStartError, DevCluster
from agentsandbox.devcluster.binaries import repo_root, versions

PODS = 50


def _ready(pod: dict[str, object]) -> bool:
    status = pod.get("status")
    conds = status.get("conditions", []) if isinstance(status, dict) else []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def main() -> int:
    console = Console()
    root = repo_root() or Path.cwd()
    attached = DevCluster.attach(root / ".cluster")
    own = attached is None or not attached.healthy()
    if attached is not None and not own:
        cluster = attached
        console.print(f"reusing the cluster from `make cluster` at {cluster.server}")
    else:
        cluster = DevCluster(Path(tempfile.mkdtemp(prefix="agentsandbox-demo-")), nodes=10)
        with console.status(
            "starting the local control plane (etcd, apiserver, kcm, scheduler, kwok)"
        ):
            t0 = time.monotonic()
            try:
                cluster.start()
            except (ClusterStartError, BinariesError) as err:
                console.print(f"[red]error:[/] {err}")
                return 1
        console.print(f"control plane up in {time.monotonic() - t0:.1f}s at {cluster.server}")
    try:
        v = versions(cluster.bin_dir) if cluster.bin_dir else {}
        table = Table(title="local control plane")
        table.add_column("component")
        table.add_column("version")
        table.add_row("kubernetes", str(v.get("kubernetes", "?")))
        table.add_row("etcd", str(v.get("etcd", "?")))
        table.add_row("kwok", str(v.get("kwok", "?")))
        nodes = cluster.api("GET", "/api/v1/nodes")["items"]
        table.add_row("fake nodes Ready", str(sum(_ready(n) for n in nodes)))
        console.print(table)

        ns = f"demo-{uuid.uuid4().hex[:6]}"
        cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
        t0 = time.monotonic()
        for i in range(PODS):
            cluster.api(
                "POST",
                f"/api/v1/namespaces/{ns}/pods",
                {
                    "metadata": {"name": f"pod-{i}", "labels": {"app": "demo"}},
                    "spec": {"containers": [{"name": "c", "image": "example/app:1"}]},
                },
            )
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console) as progress:
            task = progress.add_task(f"{PODS} simulated pods going Ready", total=PODS)
            while True:
                items = cluster.api("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
                done = sum(_ready(p) for p in items)
                progress.update(task, completed=done)
                if done >= PODS:
                    break
                time.sleep(0.2)
        console.print(f"{PODS} pods scheduled and Ready in {time.monotonic() - t0:.2f}s")
        cluster.api("DELETE", f"/api/v1/namespaces/{ns}")
        console.print(
            "[yellow]not yet:[/] the SandboxWarmPool controller and claims served warm vs cold "
            "arrive with the controllers (see `issues`)."
        )
    finally:
        if own:
            cluster.stop(keep_logs=False)
            console.print("stopped the demo's control plane")
    return 0


if __name__ == "__main__":
    sys.exit(main())
