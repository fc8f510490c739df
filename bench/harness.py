"""What every benchmark scenario shares: the control plane, the controller process, namespaces,
process accounting, the audit log, machine facts and the result files.

A scenario is a module ``bench/pN_*.py`` with ``TITLE``, ``FULL`` and ``SMOKE`` (its sizes and
``cap_seconds``), ``async def run(b: Bench, size: dict, shared: dict) -> dict`` (the JSON, with a
flat ``figures`` dict of headline numbers; ``shared`` holds earlier scenarios' results),
``plot(result, png)``, ``rows(result) -> list[tuple[str, str, str]]`` (figure, measured, goal)
for its table and ``goals(result) -> list[tuple[str, str, str, bool]]`` (goal, target, measured,
met) for the goals table. ``bench/run.py`` runs them in order against one private control plane
and writes each result as ``<out>/<P>.json`` (``bench/results/`` by default, committed; the
cluster, the logs and the plots go to the work directory).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import platform
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from results import RESULTS as RESULTS
from results import git_state

from agentsandbox.api.conditions import is_condition_true
from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS
from agentsandbox.devcluster.cluster import DevCluster, free_port
from agentsandbox.kube.client import Client
from agentsandbox.kube.config import load_kubeconfig
from agentsandbox.kube.errors import NotFound
from agentsandbox.kube.resources import NAMESPACES, NODES

ROOT = Path(__file__).resolve().parents[1]
# everything a full run leaves besides its JSON (the cluster, logs, plots): not committed
WORK = Path(__file__).resolve().parent / "work"
EXE = Path(sys.executable).with_name("agent-sandbox-controller")

# upstream's CI-gate settings, verbatim (each checked against `agent-sandbox-controller --help`):
# QPS 1000 / burst 2000, 50 sandbox and 50 claim workers, 1 warm-pool and 1 template worker,
# pool batch 300, no replenish delay, no refill cap, events and observability annotations on
GATE_FLAGS: tuple[str, ...] = (
    "--kube-api-qps=1000",
    "--kube-api-burst=2000",
    "--sandbox-concurrent-workers=50",
    "--sandbox-claim-concurrent-workers=50",
    "--sandbox-warm-pool-concurrent-workers=1",
    "--sandbox-template-concurrent-workers=1",
    "--sandbox-warm-pool-max-batch-size=300",
    "--sandbox-warm-pool-replenish-delay=0s",
    "--sandbox-warm-pool-max-refill-rate=0",
)


class BenchError(RuntimeError):
    """The bench cannot go on (cluster unhealthy, controller died, a cap passed)."""


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (``p`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def summary_ms(values: Sequence[float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key, p in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100)):
        v = percentile(values, p)
        out[key] = None if v is None else round(v, 1)
    return out


def template(name: str) -> dict[str, Any]:
    """The bench's SandboxTemplate (the default, managed NetworkPolicy): one container, kwok
    makes its pod Ready."""
    return {
        "apiVersion": SANDBOX_TEMPLATES.api_version,
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


def warm_pool(name: str, tpl: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": tpl}},
    }


def warm_claim(name: str, pool: str) -> dict[str, Any]:
    """A v1beta1 SandboxClaim for a warm sandbox of ``pool`` (what the 1.0.x client sends)."""
    return {
        "apiVersion": SANDBOX_CLAIMS.api_version,
        "kind": "SandboxClaim",
        "metadata": {"name": name},
        "spec": {"warmPoolRef": {"name": pool}},
    }


def ready_sandbox(claim: dict[str, Any]) -> str | None:
    """The claim's ``status.sandbox.name`` once it is Ready=True with one, else None."""
    status = claim.get("status") or {}
    sandbox = (status.get("sandbox") or {}).get("name")
    return sandbox if sandbox and is_condition_true(status.get("conditions"), "Ready") else None


async def wait_pool_status(client: Client, ns: str, pool: str, n: int, limit: float) -> None:
    """Until the pool's own status says ``n`` replicas, ``n`` Ready."""
    deadline = time.monotonic() + limit
    while True:
        st = (await client.get(SANDBOX_WARM_POOLS, pool, ns)).get("status") or {}
        if st.get("readyReplicas") == n and st.get("replicas") == n:
            return
        if time.monotonic() > deadline:
            raise BenchError(f"pool {ns}/{pool} status never showed {n} Ready: {st}")
        await asyncio.sleep(0.1)


async def until(changed: asyncio.Event, cond: Any, limit: float, what: str) -> None:
    """Until ``cond()`` holds, looking again whenever ``changed`` is set (at least every 0.5 s)."""
    deadline = time.monotonic() + limit
    while not cond():
        changed.clear()
        left = deadline - time.monotonic()
        if left <= 0:
            raise BenchError(f"{what} not reached within {limit:.0f} s")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), min(left, 0.5))


# --------------------------------------------------------------------------- processes
def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU of a live process (and its reaped children), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


MIB_IN_MB = 1024 * 1024 / 1e6


def mib_to_mb(mib: float) -> float:
    """MiB (what /proc reports, in KiB / 1024) to MB (10^6 bytes, the unit of the goals)."""
    return round(mib * MIB_IN_MB, 1)


def proc_rss_mib(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS = VmHWM) in MiB (2^20 bytes)."""
    now = peak = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            now = int(line.split()[1]) / 1024
        elif line.startswith("VmHWM:"):
            peak = int(line.split()[1]) / 1024
    return round(now, 1), round(peak, 1)


def machine_cpu_seconds() -> float:
    """All CPU time the machine spent (every process), from /proc/stat."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    busy = sum(int(x) for i, x in enumerate(first) if i not in (3, 4))  # minus idle, iowait
    return busy / os.sysconf("SC_CLK_TCK")


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:  # loopback only
        return bool(resp.status == 200)


@dataclass
class ControllerProcess:
    """``agent-sandbox-controller --extensions`` in its own process."""

    popen: subprocess.Popen[bytes]
    log: Path
    flags: tuple[str, ...]
    metrics_port: int
    health_port: int
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def cpu(self) -> float:
        return proc_cpu_seconds(self.pid)

    def rss(self) -> tuple[float, float]:
        """(now, peak) in MiB."""
        return proc_rss_mib(self.pid)

    def check(self) -> None:
        if self.popen.poll() is not None:
            raise BenchError(f"the controller exited ({self.popen.returncode}); see {self.log}")

    def metrics_text(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:  # loopback only
            return str(resp.read().decode())

    async def wait_ready(self, limit: float = 60.0) -> None:
        deadline = time.monotonic() + limit
        url = f"http://127.0.0.1:{self.health_port}/readyz"
        while True:
            self.check()
            try:
                if await asyncio.to_thread(_http_ok, url):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise BenchError(f"controller /readyz not OK within {limit}s; see {self.log}")
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)


# --------------------------------------------------------------------------- audit log
@dataclass
class AuditWindow:
    """Writes the apiserver logged (policy: Metadata for write verbs) between two offsets."""

    path: Path
    start: int = 0
    end: int = 0

    def events(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        with self.path.open("rb") as f:
            f.seek(self.start)
            data = f.read(self.end - self.start)
        for line in data.splitlines():
            with contextlib.suppress(ValueError):
                ev = json.loads(line)
                if ev.get("stage") == "ResponseComplete":
                    out.append(ev)
        return out


# --------------------------------------------------------------------------- the bench
class Bench:
    """One private control plane (audit log on), a client, and the scenario helpers."""

    def __init__(
        self, out: Path, *, smoke: bool, nodes: int = 10, work: Path | None = None
    ) -> None:
        """``out``: where the results' JSON goes; ``work``: the cluster, the controllers' logs
        and the plots (``out`` itself when not given)."""
        self.out = out
        self.work = work or out
        self.smoke = smoke
        self.workdir = self.work / "cluster"
        self.cluster = DevCluster(
            self.workdir, nodes=nodes, crd_paths=[ROOT / "deploy" / "crds"], audit=True
        )
        self.client: Client | None = None
        self.controllers: list[ControllerProcess] = []

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        self.cluster.start()
        self.cluster_start_seconds = round(time.monotonic() - t0, 1)

    def stop(self) -> None:
        for c in self.controllers:
            c.stop()
        self.cluster.stop(keep_logs=False)

    async def connect(self) -> Client:
        if self.client is None:
            # the load generator is not rate limited: the schedule is its limit
            cfg = await load_kubeconfig(str(self.cluster.kubeconfig))
            # its own user agent: in the audit log the bench's writes are never the controller's
            self.client = Client(cfg, qps=0, pool_size=400, user_agent="agentsandbox-bench")
        return self.client

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
            self.client = None

    @property
    def api(self) -> Client:
        assert self.client is not None, "connect() first"
        return self.client

    async def check_healthy(self) -> None:
        """Fail clearly when the control plane is not fit to measure."""
        if not self.cluster.healthy():
            dead = [n for n, c in self.cluster.components.items() if not c.alive()]
            raise BenchError(f"control plane unhealthy (stopped: {dead or 'none'}; /readyz not ok)")
        nodes = (await self.api.list(NODES)).items
        ready = [
            n
            for n in nodes
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (n.get("status") or {}).get("conditions") or []
            )
        ]
        if len(ready) < self.cluster.nodes:
            raise BenchError(f"only {len(ready)} of {self.cluster.nodes} nodes Ready")

    # ----------------------------------------------------------------- CPU accounting
    def component_pids(self) -> dict[str, int]:
        """PIDs of the control plane's processes this bench started (kube-apiserver, etcd, ...)."""
        out: dict[str, int] = {}
        for name, comp in self.cluster.components.items():
            pid = comp.proc.pid if comp.proc is not None else comp.pid
            if pid:
                out[name] = pid
        return out

    def cpu_snapshot(self) -> dict[str, float]:
        """CPU seconds so far of every control-plane process, the running controllers
        (``controller``), this process (``bench``, the load generator) and the machine."""
        snap: dict[str, float] = {}
        for name, pid in self.component_pids().items():
            with contextlib.suppress(OSError, ValueError, IndexError):
                snap[name] = proc_cpu_seconds(pid)
        ctl = 0.0
        for c in self.controllers:
            with contextlib.suppress(OSError, ValueError, IndexError):
                ctl += c.cpu()
        snap["controller"] = ctl
        snap["bench"] = proc_cpu_seconds(os.getpid())
        snap["machine"] = machine_cpu_seconds()
        snap["wall"] = time.monotonic()
        return snap

    # ----------------------------------------------------------------- controller
    @contextlib.contextmanager
    def controller(
        self, name: str, flags: Sequence[str] = GATE_FLAGS, extra: Sequence[str] = ()
    ) -> Iterator[ControllerProcess]:
        log = self.work / f"{name}-controller.log"
        metrics, health = free_port(), free_port()
        # ours last (a later flag wins): whatever a flag set says, the bench's controller
        # talks to the bench cluster, binds loopback only and does not elect a leader
        argv = [
            str(EXE),
            *flags,
            *extra,
            "--extensions",
            f"--kubeconfig={self.cluster.kubeconfig}",
            "--leader-elect=false",
            f"--metrics-bind-address=127.0.0.1:{metrics}",
            f"--health-probe-bind-address=127.0.0.1:{health}",
        ]
        with log.open("wb") as out:
            popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        proc = ControllerProcess(popen, log, tuple(flags) + tuple(extra), metrics, health)
        self.controllers.append(proc)
        try:
            yield proc
        finally:
            proc.stop()
            self.controllers.remove(proc)

    # ----------------------------------------------------------------- namespaces
    async def wait_namespaces_gone(self, limit: float = 300.0) -> None:
        """Each scenario starts once the previous one's namespaces are gone (their teardown
        would load the next measurement). Not in a smoke run, which measures nothing worth
        keeping apart: each wait is 5 to 10 s whatever the size (kube-controller-manager's
        namespace controller waits a fixed 5 s before it empties a deleted namespace, then
        requeues while pods are still terminating), and the waits were most of the smoke's
        time. A scenario works in namespaces of its own, so another's teardown changes none of
        its objects."""
        if self.smoke:
            return
        deadline = time.monotonic() + limit
        while True:
            left = [
                n["metadata"]["name"]
                for n in (await self.api.list(NAMESPACES)).items
                if n["metadata"]["name"].startswith("bench-")
            ]
            if not left:
                return
            if time.monotonic() > deadline:
                raise BenchError(f"namespaces of an earlier scenario still there: {left}")
            await asyncio.sleep(0.5)

    @contextlib.asynccontextmanager
    async def namespace(self, prefix: str) -> AsyncIterator[str]:
        """A fresh ``bench-<prefix>-<id>`` namespace, deleted afterwards (the next scenario
        waits for it to be gone)."""
        ns = f"bench-{prefix}-{uuid.uuid4().hex[:6]}"
        await self.api.create(NAMESPACES, {"metadata": {"name": ns}})
        try:
            yield ns
        finally:
            with contextlib.suppress(NotFound):
                await self.api.delete(NAMESPACES, ns)

    # ----------------------------------------------------------------- audit
    @property
    def audit_path(self) -> Path:
        return self.cluster.logs / "audit.log"

    def audit_offset(self) -> int:
        try:
            return self.audit_path.stat().st_size
        except FileNotFoundError:
            return 0

    async def audit_window(self, start: int) -> AuditWindow:
        """The audit events from ``start`` to now (batch mode flushes within ~1 s)."""
        await asyncio.sleep(2.0)
        return AuditWindow(self.audit_path, start, self.audit_offset())

    # ----------------------------------------------------------------- results
    def write(self, name: str, result: dict[str, Any]) -> Path:
        path = self.out / f"{name}.json"
        path.write_text(json.dumps(result, indent=2, default=str))
        return path


def count_by(events: Sequence[dict[str, Any]]) -> Counter[tuple[str, str, str]]:
    """(user agent, resource[/subresource], verb) → count."""
    out: Counter[tuple[str, str, str]] = Counter()
    for ev in events:
        ref = ev.get("objectRef") or {}
        sub = ref.get("subresource")
        res = ref.get("resource", "?") + (f"/{sub}" if sub else "")
        agent = (ev.get("userAgent") or "?").split(" ")[0]
        out[(agent, res, ev.get("verb", "?"))] += 1
    return out


def cpu_usage(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """What each process spent between two ``Bench.cpu_snapshot()`` calls: CPU seconds, the
    cores it used on average (seconds / wall), and its share of the machine's busy CPU."""
    wall = after["wall"] - before["wall"]
    machine = after["machine"] - before["machine"]
    cpus = os.cpu_count() or 1
    procs: dict[str, Any] = {}
    for name in sorted(after):
        if name in ("wall", "machine") or name not in before:
            continue
        spent = after[name] - before[name]
        procs[name] = {
            "cpu_seconds": round(spent, 2),
            "cores": round(spent / wall, 3) if wall > 0 else None,
            "share_of_machine_busy": round(spent / machine, 3) if machine > 0 else None,
        }
    return {
        "wall_seconds": round(wall, 2),
        "machine_busy_cpu_seconds": round(machine, 2),
        "machine_busy_share": round(machine / (wall * cpus), 3) if wall > 0 else None,
        "processes": procs,
    }


def machine_facts(cluster: DevCluster) -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_gib = 0.0
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem_gib = int(Path("/proc/meminfo").read_text().split()[1]) / 1024 / 1024
    versions: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        versions = json.loads(cluster.state_file.read_text()).get("versions", {})
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(mem_gib, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "control_plane": versions,
        "kwok_nodes": cluster.nodes,
        **git_state(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "ssl": ssl.OPENSSL_VERSION,
    }
