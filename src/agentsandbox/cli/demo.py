"""``make demo``: set up the local control plane and show what the project can do so far.

1. start (or reuse) a real control plane: etcd, kube-apiserver, kube-controller-manager,
   kube-scheduler and kwok with 10 fake nodes, our CRDs installed;
2. start ``agent-sandbox-controller --extensions`` in its own process, as a cluster would;
3. create a SandboxTemplate and a SandboxWarmPool and watch the pool fill (progress bar);
4. scale the pool up through the ``/scale`` subresource and watch it refill;
5. print a summary table and write a plot of the pool over time (``demo-output/warmpool.png``).

Claims served warm vs cold come with the SandboxClaim controller.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agentsandbox.devcluster import BinariesError, ClusterStartError, DevCluster
from agentsandbox.devcluster.binaries import repo_root, versions

POOL = 50
SCALED = 80


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(cluster: DevCluster, ns: str, name: str) -> dict[str, Any]:
    pool = cluster.api(
        "GET", f"/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{ns}/sandboxwarmpools/{name}"
    )
    return dict(pool.get("status") or {})


def _fill(
    console: Console,
    cluster: DevCluster,
    ns: str,
    name: str,
    target: int,
    label: str,
    series: list[tuple[float, int, int]],
    t0: float,
    timeout: float = 180.0,
) -> float:
    start = time.monotonic()
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(label, total=target)
        while True:
            st = _status(cluster, ns, name)
            ready, current = int(st.get("readyReplicas", 0)), int(st.get("replicas", 0))
            series.append((time.monotonic() - t0, current, ready))
            progress.update(task, completed=ready)
            if ready >= target:
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"pool did not reach {target} Ready in {timeout:.0f}s")
            time.sleep(0.1)


def _wait_ready(proc: subprocess.Popen[bytes], port: int, limit: float = 60.0) -> None:
    """Until the controller's /readyz answers 200 (caches synced)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise OSError(f"agent-sandbox-controller exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError("agent-sandbox-controller did not become ready")


def _plot(series: list[tuple[float, int, int]], marks: list[tuple[float, str]], out: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    t = [s[0] for s in series]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(t, [s[1] for s in series], label="sandboxes (status.replicas)")
    ax.plot(t, [s[2] for s in series], label="Ready (status.readyReplicas)")
    for x, text in marks:
        ax.axvline(x, color="grey", linestyle=":")
        ax.annotate(text, (x, 0), rotation=90, fontsize=8, va="bottom", ha="right")
    ax.set_xlabel("seconds")
    ax.set_ylabel("sandboxes")
    ax.set_title("SandboxWarmPool filling on the local control plane")
    ax.legend(loc="lower right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return True


def main() -> int:
    console = Console()
    root = repo_root() or Path.cwd()
    attached = DevCluster.attach(root / ".cluster")
    own = attached is None or not attached.healthy()
    if attached is not None and not own:
        cluster = attached
        console.print(f"reusing the cluster from `make cluster` at {cluster.server}")
        # it may predate our current CRDs
        cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", str(root / "deploy" / "crds")
        )
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    else:
        cluster = DevCluster(
            Path(tempfile.mkdtemp(prefix="agentsandbox-demo-")),
            nodes=10,
            crd_paths=[root / "deploy" / "crds"],
        )
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
    controller: subprocess.Popen[bytes] | None = None
    log_path = Path(tempfile.mkstemp(prefix="agentsandbox-controller-", suffix=".log")[1])
    try:
        v = versions(cluster.bin_dir) if cluster.bin_dir else {}
        nodes = cluster.api("GET", "/api/v1/nodes")["items"]
        console.print(
            f"kubernetes {v.get('kubernetes', '?')}, etcd {v.get('etcd', '?')}, "
            f"kwok {v.get('kwok', '?')}, {len(nodes)} fake nodes"
        )
        probe_port = _free_port()
        exe = Path(sys.executable).with_name("agent-sandbox-controller")
        argv = [
            str(exe) if exe.exists() else sys.executable,
            *([] if exe.exists() else ["-m", "agentsandbox.cli.controller"]),
            f"--kubeconfig={cluster.kubeconfig}",
            "--extensions",
            "--leader-elect=false",
            f"--metrics-bind-address=127.0.0.1:{_free_port()}",
            f"--health-probe-bind-address=127.0.0.1:{probe_port}",
            "--kube-api-qps=1000",
            "--kube-api-burst=2000",
            "--sandbox-concurrent-workers=50",
            "--sandbox-warm-pool-concurrent-workers=4",
        ]
        with log_path.open("wb") as log:
            controller = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        console.print(f"started agent-sandbox-controller (pid {controller.pid}, log {log_path})")
        _wait_ready(controller, probe_port)

        ns = f"demo-{uuid.uuid4().hex[:6]}"
        cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
        ext = f"/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{ns}"
        cluster.api(
            "POST",
            f"{ext}/sandboxtemplates",
            {
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                "kind": "SandboxTemplate",
                "metadata": {"name": "python-runtime"},
                "spec": {
                    "podTemplate": {
                        "spec": {
                            "containers": [
                                {"name": "python", "image": "registry.example/python-runtime:3.11"}
                            ]
                        }
                    }
                },
            },
        )
        t0 = time.monotonic()
        series: list[tuple[float, int, int]] = []
        marks: list[tuple[float, str]] = [(0.0, f"pool created ({POOL})")]
        cluster.api(
            "POST",
            f"{ext}/sandboxwarmpools",
            {
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                "kind": "SandboxWarmPool",
                "metadata": {"name": "agents"},
                "spec": {"replicas": POOL, "sandboxTemplateRef": {"name": "python-runtime"}},
            },
        )
        fill = _fill(
            console, cluster, ns, "agents", POOL, f"warm pool filling 0 → {POOL}", series, t0
        )
        marks.append((time.monotonic() - t0, f"scaled to {SCALED}"))
        cluster.kubectl("scale", "sandboxwarmpool/agents", "-n", ns, f"--replicas={SCALED}")
        scale = _fill(
            console,
            cluster,
            ns,
            "agents",
            SCALED,
            f"scaled {POOL} → {SCALED} via /scale",
            series,
            t0,
        )
        pool = cluster.kubectl("get", "sandboxwarmpool", "agents", "-n", ns).stdout
        console.print(pool.rstrip())

        table = Table(title="warm pool on the local control plane")
        table.add_column("step")
        table.add_column("sandboxes", justify="right")
        table.add_column("seconds", justify="right")
        table.add_column("sandboxes/s", justify="right")
        table.add_row("fill 0 → Ready", str(POOL), f"{fill:.2f}", f"{POOL / fill:.0f}")
        table.add_row(
            "scale up → Ready", str(SCALED - POOL), f"{scale:.2f}", f"{(SCALED - POOL) / scale:.0f}"
        )
        console.print(table)
        out = root / "demo-output" / "warmpool.png"
        if _plot(series, marks, out):
            console.print(f"plot: {out}")
        console.print(
            "[yellow]not yet:[/] SandboxClaims served warm vs cold arrive with the claim "
            "controller."
        )
        cluster.api("DELETE", f"/api/v1/namespaces/{ns}")
    except (TimeoutError, OSError, subprocess.CalledProcessError) as err:
        detail = ""
        if isinstance(err, urllib.error.HTTPError):
            detail = err.read().decode(errors="replace")
        console.print(f"[red]demo failed:[/] {err} {detail}; controller log: {log_path}")
        return 1
    finally:
        if controller is not None and controller.poll() is None:
            os.kill(controller.pid, signal.SIGTERM)
            try:
                controller.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(controller.pid, signal.SIGKILL)
        if own:
            cluster.stop(keep_logs=False)
            console.print("stopped the demo's control plane")
    return 0


if __name__ == "__main__":
    sys.exit(main())
