"""P2 — pool fill: one SandboxWarmPool 0 -> N Ready, against the same-run ceiling.

Run with ``make bench SCENARIO=warmpool_fill`` (``--replicas 1000`` by default). Starts a private
local control plane (10 kwok nodes) unless ``AGENTSANDBOX_CLUSTER_DIR`` names a running one, and
``agent-sandbox-controller --extensions`` in its own process with upstream's CI-gate settings
(QPS 1000 / burst 2000, 50 sandbox workers, pool batch 300).

1. **ceiling**: a bare async loop creates N Sandbox objects directly (the pool's own blueprint,
   without the pool owner), with the same client QPS limits; the same Sandbox controller and kwok
   make them Ready. Nothing of the warm pool runs.
2. **pool**: a SandboxWarmPool with ``replicas: N``; time from its creation to
   ``status.readyReplicas == N``.

Both are timed by watching Sandboxes with an informer (no polling LISTs). Reports seconds, the
ratio pool / ceiling, sandbox creates seen, and writes ``bench/results/warmpool_fill.json`` and a
PNG of Ready sandboxes over time.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from agentsandbox.api.conditions import is_sandbox_ready
from agentsandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS, SANDBOXES
from agentsandbox.controllers.warmpool_plan import build_blueprint
from agentsandbox.devcluster import DevCluster
from agentsandbox.devcluster.cluster import free_port
from agentsandbox.kube.client import Client
from agentsandbox.kube.config import load_kubeconfig
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.resources import NAMESPACES

RESULTS = Path(__file__).parent / "results"
QPS, BURST = 1000.0, 2000


def template(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": name},
        "spec": {
            "podTemplate": {
                "metadata": {"labels": {"app": "bench"}},
                "spec": {
                    "containers": [
                        {
                            "name": "python",
                            "image": "registry.example/python-runtime:3.11",
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                        }
                    ]
                },
            }
        },
    }


class ReadyCounter:
    """Counts Ready sandboxes in one namespace from an informer; records a time series."""

    def __init__(self, client: Client, namespace: str) -> None:
        self.informer = Informer(client, SANDBOXES, namespace)
        self.created = 0
        self.ready: set[str] = set()
        self.series: list[tuple[float, int]] = []
        self.t0 = time.monotonic()
        self.done = asyncio.Event()
        self.target = 0
        self.informer.add_handler(self._add, self._update, None)

    def _add(self, obj: dict[str, Any]) -> None:
        self.created += 1
        self._update(obj, obj)

    def _update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        if is_sandbox_ready(new):
            self.ready.add(new["metadata"]["name"])
        else:
            self.ready.discard(new["metadata"]["name"])
        self.series.append((time.monotonic() - self.t0, len(self.ready)))
        if self.target and len(self.ready) >= self.target:
            self.done.set()

    async def __aenter__(self) -> ReadyCounter:
        self.informer.start()
        await self.informer.wait_synced()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.informer.stop()

    async def wait(self, target: int, limit: float) -> float:
        self.target = target
        if len(self.ready) >= target:
            self.done.set()
        await asyncio.wait_for(self.done.wait(), limit)
        return time.monotonic() - self.t0


async def ceiling(client: Client, n: int, limit: float) -> dict[str, Any]:
    ns = f"bench-ceiling-{uuid.uuid4().hex[:6]}"
    await client.create(NAMESPACES, {"metadata": {"name": ns}})
    tpl = template("tpl")
    tpl["metadata"]["namespace"] = ns
    fake_pool = {
        "metadata": {"name": "ceiling", "namespace": ns, "uid": "0"},
        "spec": {"replicas": n, "sandboxTemplateRef": {"name": "tpl"}},
    }
    body = build_blueprint(fake_pool, tpl, "00000000")
    body["metadata"].pop("ownerReferences")
    async with ReadyCounter(client, ns) as counter:
        counter.t0 = time.monotonic()
        sem = asyncio.Semaphore(100)

        async def one(_: int) -> None:
            async with sem:
                await client.create(SANDBOXES, copy.deepcopy(body), ns)

        await asyncio.gather(*(one(i) for i in range(n)))
        created_s = time.monotonic() - counter.t0
        seconds = await counter.wait(n, limit)
    return {
        "namespace": ns,
        "seconds": round(seconds, 2),
        "all_created_after": round(created_s, 2),
        "creates_seen": counter.created,
        "series": counter.series,
    }


async def pool_fill(client: Client, n: int, limit: float) -> dict[str, Any]:
    ns = f"bench-pool-{uuid.uuid4().hex[:6]}"
    await client.create(NAMESPACES, {"metadata": {"name": ns}})
    await client.create(SANDBOX_TEMPLATES, template("tpl"), ns)
    async with ReadyCounter(client, ns) as counter:
        counter.t0 = time.monotonic()
        await client.create(
            SANDBOX_WARM_POOLS,
            {
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                "kind": "SandboxWarmPool",
                "metadata": {"name": "pool"},
                "spec": {"replicas": n, "sandboxTemplateRef": {"name": "tpl"}},
            },
            ns,
        )
        seconds = await counter.wait(n, limit)
        deadline = time.monotonic() + limit
        while True:  # the pool's own status must agree
            st = (await client.get(SANDBOX_WARM_POOLS, "pool", ns)).get("status") or {}
            if st.get("readyReplicas") == n or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        status_s = time.monotonic() - counter.t0
        await asyncio.sleep(2.0)  # late extra creates would show up here
    return {
        "namespace": ns,
        "seconds": round(seconds, 2),
        "status_seconds": round(status_s, 2),
        "creates_seen": counter.created,
        "series": counter.series,
    }


def plot(results: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for key, label in (("ceiling", "ceiling: bare create loop"), ("pool", "SandboxWarmPool")):
        series = results[key]["series"]
        ax.plot([s[0] for s in series], [s[1] for s in series], label=label)
    ax.set_xlabel("seconds")
    ax.set_ylabel("Ready sandboxes")
    ax.set_title(
        f"P2 pool fill, {results['replicas']} sandboxes (ratio {results['ratio']:.2f} x ceiling)"
    )
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def start_controller(cluster: DevCluster) -> tuple[subprocess.Popen[bytes], Path]:
    log = RESULTS / "warmpool_fill-controller.log"
    argv = [
        str(Path(sys.executable).with_name("agent-sandbox-controller")),
        f"--kubeconfig={cluster.kubeconfig}",
        "--extensions",
        "--leader-elect=false",
        f"--metrics-bind-address=127.0.0.1:{free_port()}",
        f"--health-probe-bind-address=127.0.0.1:{free_port()}",
        f"--kube-api-qps={QPS:.0f}",
        f"--kube-api-burst={BURST}",
        "--sandbox-concurrent-workers=50",
        "--sandbox-warm-pool-concurrent-workers=50",
        "--sandbox-warm-pool-max-batch-size=300",
    ]
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT), log


async def measure(
    cluster: DevCluster, proc: subprocess.Popen[bytes], log: Path, n: int, limit: float
) -> dict[str, Any]:
    client = Client(
        await load_kubeconfig(str(cluster.kubeconfig)), qps=QPS, burst=BURST, pool_size=100
    )
    try:
        await asyncio.sleep(3.0)  # controller start-up (cache sync)
        if proc.poll() is not None:
            raise RuntimeError(f"controller exited; see {log}")
        cpu0 = _cpu_seconds(proc.pid)
        ceil = await ceiling(client, n, limit)
        print(f"ceiling: {ceil['seconds']} s for {n} Ready", flush=True)
        cpu1 = _cpu_seconds(proc.pid)
        pool = await pool_fill(client, n, limit)
        cpu2 = _cpu_seconds(proc.pid)
        print(f"pool:    {pool['seconds']} s for {n} Ready", flush=True)
    finally:
        await client.close()
    return {
        "replicas": n,
        "ceiling": ceil,
        "pool": pool,
        "ratio": round(pool["seconds"] / ceil["seconds"], 3),
        "controller_cpu_seconds": {
            "ceiling_phase": round(cpu1 - cpu0, 2),
            "pool_phase": round(cpu2 - cpu1, 2),
        },
    }


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replicas", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    reuse = os.environ.get("AGENTSANDBOX_CLUSTER_DIR")
    attached = DevCluster.attach(Path(reuse)) if reuse else None
    root = Path(__file__).resolve().parents[1]
    cluster = attached or DevCluster(
        Path(tempfile.mkdtemp(prefix="agentsandbox-bench-")),
        nodes=10,
        crd_paths=[root / "deploy" / "crds"],
    )
    if attached is None:
        cluster.start()
    proc, log = start_controller(cluster)
    try:
        results = asyncio.run(measure(cluster, proc, log, args.replicas, args.timeout))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        if attached is None:
            cluster.stop(keep_logs=False)
    slim = {k: v for k, v in results.items()}
    (RESULTS / "warmpool_fill.json").write_text(json.dumps(slim, indent=2))
    plot(results, RESULTS / "warmpool_fill.png")
    print(
        f"\nP2 pool fill, {args.replicas} sandboxes\n"
        f"  ceiling (bare create loop): {results['ceiling']['seconds']:>7.2f} s "
        f"({results['ceiling']['creates_seen']} creates)\n"
        f"  SandboxWarmPool:            {results['pool']['seconds']:>7.2f} s "
        f"({results['pool']['creates_seen']} creates; status agreed at "
        f"{results['pool']['status_seconds']} s)\n"
        f"  ratio pool / ceiling:       {results['ratio']:>7.3f}\n"
        f"  controller CPU: {results['controller_cpu_seconds']}\n"
        f"wrote {RESULTS / 'warmpool_fill.json'} and warmpool_fill.png"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
