"""P1 at one rate — warm-claim latency, open loop at 10 claims/s against a Ready pool of 150.

Run with ``make bench SCENARIO=claim_latency`` (``--claims 100 --rate 10 --pool 150`` by
default). Starts a private local control plane (10 kwok nodes) unless
``AGENTSANDBOX_CLUSTER_DIR`` names a running one, and ``agent-sandbox-controller --extensions``
in its own process with upstream's gate flags (QPS 1000 / burst 2000, 50 sandbox and 50 claim
workers, 1 warm-pool and 1 template worker, pool batch 300).

1. create a SandboxTemplate and a SandboxWarmPool of ``--pool``; wait until that many pool
   sandboxes are Ready (a sandbox watch) and the pool's status agrees;
2. send ``--claims`` v1beta1 SandboxClaims (``spec.warmPoolRef``) **open loop**: claim ``i`` is
   due at ``t0 + i / rate``; a generator coroutine starts each POST at its due time whatever
   the earlier ones are doing (it never waits for a response);
3. one namespace-wide claim watch records when each claim is first seen Ready=True with
   ``status.sandbox.name``. Latency = that event's time minus the claim's **scheduled** send time
   (so a late send counts against the system, not in its favour).

Reports the achieved send rate, claims Ready, the warm-hit ratio (the claim's sandbox was ever a
member of the pool), latency p50/p90/p99/max, the controller's CPU during the claims, and writes
``bench/results/claim_latency.json`` and ``claim_latency.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from agentsandbox.api.conditions import is_condition_true, is_sandbox_ready
from agentsandbox.api.kinds import SANDBOX_CLAIM
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.controllers.claim_plan import pool_owner
from agentsandbox.devcluster import DevCluster
from agentsandbox.devcluster.cluster import free_port
from agentsandbox.kube.client import Client
from agentsandbox.kube.config import load_kubeconfig
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.resources import NAMESPACES

RESULTS = Path(__file__).parent / "results"
POOL = "pool"
# upstream's gate settings, verbatim (each checked against `agent-sandbox-controller --help`)
GATE_FLAGS = (
    "--kube-api-qps=1000",
    "--kube-api-burst=2000",
    "--sandbox-concurrent-workers=50",
    "--sandbox-claim-concurrent-workers=50",
    "--sandbox-warm-pool-concurrent-workers=1",
    "--sandbox-template-concurrent-workers=1",
    "--sandbox-warm-pool-max-batch-size=300",
)


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


def claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_CLAIM.api_version,
        "kind": "SandboxClaim",
        "metadata": {"name": name},
        "spec": {"warmPoolRef": {"name": POOL}},
    }


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


class Watches:
    """One sandbox watch (pool membership, pool Ready count) and one claim watch (Ready time)."""

    def __init__(self, client: Client, ns: str, t0: float) -> None:
        self.t0 = t0
        self.pool_members: set[str] = set()
        self.pool_ready: set[str] = set()
        self.pool_series: list[tuple[float, int]] = []
        self.claims_wanted: set[str] = set()
        self.ready_at: dict[str, float] = {}
        self.sandbox_of: dict[str, str] = {}
        self.pool_target = 0
        self.pool_full = asyncio.Event()
        self.all_ready = asyncio.Event()
        self.sandboxes = Informer(client, SANDBOXES, ns)
        self.sandboxes.add_handler(self._sandbox, self._sandbox, self._sandbox_gone)
        self.claims = Informer(client, SANDBOX_CLAIMS, ns)
        self.claims.add_handler(self._claim, self._claim)

    def _sandbox(self, *objs: dict[str, Any]) -> None:
        sb = objs[-1]
        name = sb["metadata"]["name"]
        if pool_owner(sb) == POOL:
            self.pool_members.add(name)
            if is_sandbox_ready(sb) and not sb["metadata"].get("deletionTimestamp"):
                self.pool_ready.add(name)
            else:
                self.pool_ready.discard(name)
        else:
            self.pool_ready.discard(name)
        self.pool_changed()

    def _sandbox_gone(self, sb: dict[str, Any]) -> None:
        self.pool_ready.discard(sb["metadata"]["name"])
        self.pool_changed()

    def pool_changed(self) -> None:
        n = len(self.pool_ready)
        if not self.pool_series or self.pool_series[-1][1] != n:
            self.pool_series.append((time.monotonic() - self.t0, n))
        if self.pool_target and n >= self.pool_target:
            self.pool_full.set()

    def _claim(self, *objs: dict[str, Any]) -> None:
        obj = objs[-1]
        name = obj["metadata"]["name"]
        status = obj.get("status") or {}
        sandbox = (status.get("sandbox") or {}).get("name")
        ready = is_condition_true(status.get("conditions"), "Ready")
        if ready and sandbox and name in self.claims_wanted and name not in self.ready_at:
            self.ready_at[name] = time.monotonic()
            self.sandbox_of[name] = sandbox
            if len(self.ready_at) == len(self.claims_wanted):
                self.all_ready.set()

    async def __aenter__(self) -> Watches:
        for inf in (self.sandboxes, self.claims):
            inf.start()
        await asyncio.gather(self.sandboxes.wait_synced(), self.claims.wait_synced())
        return self

    async def __aexit__(self, *exc: object) -> None:
        for inf in (self.sandboxes, self.claims):
            await inf.stop()


async def run(
    client: Client, proc: subprocess.Popen[bytes], n: int, rate: float, pool: int, limit: float
) -> dict[str, Any]:
    ns = f"bench-claims-{uuid.uuid4().hex[:6]}"
    await client.create(NAMESPACES, {"metadata": {"name": ns}})
    await client.create(SANDBOX_TEMPLATES, template("tpl"), ns)
    bench_t0 = time.monotonic()
    async with Watches(client, ns, bench_t0) as w:
        w.pool_target = pool
        await client.create(
            SANDBOX_WARM_POOLS,
            {
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                "kind": "SandboxWarmPool",
                "metadata": {"name": POOL},
                "spec": {"replicas": pool, "sandboxTemplateRef": {"name": "tpl"}},
            },
            ns,
        )
        await asyncio.wait_for(w.pool_full.wait(), limit)
        fill_s = time.monotonic() - bench_t0
        deadline = time.monotonic() + limit
        while True:  # the pool's own status agrees before the first claim
            st = (await client.get(SANDBOX_WARM_POOLS, POOL, ns)).get("status") or {}
            if st.get("readyReplicas") == pool:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"pool status never showed {pool} Ready: {st}")
            await asyncio.sleep(0.1)
        print(
            f"pool of {pool} Ready in {fill_s:.1f} s; sending {n} claims at {rate:g}/s", flush=True
        )
        await asyncio.sleep(1.0)  # let the fill's last writes settle
        w.pool_target = 0

        names = [f"c-{i:04d}" for i in range(n)]
        w.claims_wanted = set(names)
        scheduled: dict[str, float] = {}
        sent: dict[str, float] = {}
        answered: dict[str, float] = {}
        errors: dict[str, str] = {}

        async def send(name: str) -> None:
            sent[name] = time.monotonic()
            try:
                await client.create(SANDBOX_CLAIMS, claim(name), ns)
            except Exception as err:  # counted, reported
                errors[name] = repr(err)
            answered[name] = time.monotonic()

        cpu0 = _cpu_seconds(proc.pid)
        t0 = time.monotonic() + 0.05
        tasks: list[asyncio.Task[None]] = []
        for i, name in enumerate(names):  # the generator: due times only, never a response
            scheduled[name] = t0 + i / rate
            delay = scheduled[name] - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(send(name)))
        await asyncio.gather(*tasks)
        with_deadline = max(scheduled.values()) + limit
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(w.all_ready.wait(), max(0.0, with_deadline - time.monotonic()))
        claims_done = time.monotonic()
        cpu1 = _cpu_seconds(proc.pid)
        # the pool refills behind the claims (reported, not part of the latency)
        w.pool_full.clear()
        w.pool_target = pool
        w.pool_changed()
        try:
            await asyncio.wait_for(w.pool_full.wait(), limit)
            refill_s: float | None = time.monotonic() - claims_done
        except TimeoutError:
            refill_s = None

    send_times = sorted(sent.values())
    span = send_times[-1] - send_times[0] if len(send_times) > 1 else 0.0
    lateness = [(sent[k] - scheduled[k]) * 1000 for k in names]
    latencies = [(w.ready_at[k] - scheduled[k]) * 1000 for k in names if k in w.ready_at]
    warm = sum(1 for k in w.ready_at if w.sandbox_of[k] in w.pool_members)
    create_ms = [(answered[k] - sent[k]) * 1000 for k in names if k in answered]
    return {
        "namespace": ns,
        "claims": n,
        "rate_target": rate,
        "rate_achieved": round((n - 1) / span, 2) if span else None,
        "send_lateness_ms": {
            "p50": round(percentile(lateness, 50), 1),
            "max": round(max(lateness), 1),
        },
        "create_call_ms": {
            "p50": round(percentile(create_ms, 50), 1),
            "p99": round(percentile(create_ms, 99), 1),
        },
        "create_errors": len(errors),
        "claims_ready": len(w.ready_at),
        "warm_hits": warm,
        "warm_hit_ratio": round(warm / len(w.ready_at), 3) if w.ready_at else 0.0,
        "latency_ms": {
            p: round(percentile(latencies, q), 1)
            for p, q in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100))
        }
        if latencies
        else {},
        "pool": pool,
        "pool_fill_seconds": round(fill_s, 2),
        "refill_seconds_after_last_claim_ready": None if refill_s is None else round(refill_s, 2),
        "controller_cpu_seconds_during_claims": round(cpu1 - cpu0, 2),
        "flags": list(GATE_FLAGS),
        "points": [
            (round(scheduled[k] - t0, 3), round((w.ready_at[k] - scheduled[k]) * 1000, 1))
            for k in names
            if k in w.ready_at
        ],
        "pool_series": [(round(t - (t0 - bench_t0), 3), c) for t, c in w.pool_series],
    }


def plot(results: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, hist) = plt.subplots(1, 2, figsize=(12, 4.5))
    pts = results["points"]
    ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=10, label="claim latency (ms)")
    ax.set_xlabel("scheduled send time (s after the first claim)")
    ax.set_ylabel("scheduled send → Ready event (ms)")
    lat = results["latency_ms"]
    ax.set_title(
        f"{results['claims']} warm claims open loop at {results['rate_target']:g}/s: "
        f"p50 {lat.get('p50')} ms, p99 {lat.get('p99')} ms"
    )
    twin = ax.twinx()
    series = [s for s in results["pool_series"] if s[0] >= -1.0]
    twin.step([s[0] for s in series], [s[1] for s in series], where="post", color="tab:green")
    twin.set_ylabel("Ready pool sandboxes", color="tab:green")
    twin.set_ylim(bottom=0)
    ax.set_ylim(bottom=0)
    hist.hist([p[1] for p in pts], bins=30)
    hist.set_xlabel("latency (ms)")
    hist.set_ylabel("claims")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def start_controller(cluster: DevCluster) -> tuple[subprocess.Popen[bytes], Path]:
    log = RESULTS / "claim_latency-controller.log"
    argv = [
        str(Path(sys.executable).with_name("agent-sandbox-controller")),
        f"--kubeconfig={cluster.kubeconfig}",
        "--extensions",
        "--leader-elect=false",
        f"--metrics-bind-address=127.0.0.1:{free_port()}",
        f"--health-probe-bind-address=127.0.0.1:{free_port()}",
        *GATE_FLAGS,
    ]
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT), log


async def measure(
    cluster: DevCluster,
    proc: subprocess.Popen[bytes],
    log: Path,
    args: argparse.Namespace,
) -> dict[str, Any]:
    client = Client(
        await load_kubeconfig(str(cluster.kubeconfig)), qps=0, pool_size=200
    )  # the load generator is not rate limited: the schedule is the limit
    try:
        await asyncio.sleep(3.0)  # controller start-up (cache sync)
        if proc.poll() is not None:
            raise RuntimeError(f"controller exited; see {log}")
        return await run(client, proc, args.claims, args.rate, args.pool, args.timeout)
    finally:
        await client.close()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--claims", type=int, default=100)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--pool", type=int, default=150)
    parser.add_argument("--timeout", type=float, default=120.0)
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
    load = os.getloadavg()
    if attached is None:
        cluster.start()
    proc, log = start_controller(cluster)
    try:
        results = asyncio.run(measure(cluster, proc, log, args))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        if attached is None:
            cluster.stop(keep_logs=False)
    results["load_average_before"] = [round(x, 2) for x in load]
    results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    (RESULTS / "claim_latency.json").write_text(json.dumps(results, indent=2))
    plot(results, RESULTS / "claim_latency.png")
    lat = results["latency_ms"]
    rows = [
        ("claims sent (open loop)", f"{results['claims']} at {results['rate_target']:g}/s"),
        ("achieved send rate", f"{results['rate_achieved']} claims/s"),
        (
            "send lateness vs schedule",
            f"p50 {results['send_lateness_ms']['p50']} ms, "
            f"max {results['send_lateness_ms']['max']} ms",
        ),
        ("create errors", str(results["create_errors"])),
        ("claims Ready", f"{results['claims_ready']} / {results['claims']}"),
        ("warm-hit ratio", f"{results['warm_hit_ratio']:.2f} ({results['warm_hits']} adopted)"),
        *((f"latency {k}", f"{v:.0f} ms") for k, v in lat.items()),
        ("pool fill 0 → Ready", f"{results['pool']} in {results['pool_fill_seconds']} s"),
        ("refill after last claim Ready", f"{results['refill_seconds_after_last_claim_ready']} s"),
        ("controller CPU during claims", f"{results['controller_cpu_seconds_during_claims']} s"),
        (
            "load average before / after",
            f"{results['load_average_before']} / {results['load_average_after']}",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"\nWarm-claim latency, scheduled send → Ready event (pool of {results['pool']})")
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
    print(f"wrote {RESULTS / 'claim_latency.json'} and claim_latency.png")
    return 0 if results["claims_ready"] == results["claims"] else 1


if __name__ == "__main__":
    sys.exit(main())
