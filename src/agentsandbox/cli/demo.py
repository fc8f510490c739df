"""``make demo``: set up the local control plane and show what the project can do so far.

1. start (or reuse) a real control plane: etcd, kube-apiserver, kube-controller-manager,
   kube-scheduler and kwok with 10 fake nodes, our CRDs installed;
2. start ``agent-sandbox-controller --extensions`` in its own process, as a cluster would;
3. create a SandboxTemplate and a SandboxWarmPool and watch the pool fill (progress bar);
4. scale the pool up through the ``/scale`` subresource and watch it refill;
5. send SandboxClaims at a steady rate: v1beta1 claims naming the pool (``spec.warmPoolRef``),
   served warm by adopting a pool sandbox, then v1alpha1 claims with ``warmpool: "none"``, served
   cold from the template; one namespace-wide claim watch times each from its create call to
   the event that shows it Ready=True with ``status.sandbox.name``;
6. watch the pool refill behind the claims, print summary tables and write a plot of the pool
   over time and the claim latencies by launch type (``demo-output/warmpool.png``).

The sizes (``--pool``, ``--scaled``, ``--warm-claims``, ``--cold-claims``, ``--claim-rate``) and
the plot's directory (``--out-dir``) are flags; without them it is the demo described above.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
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

from agentsandbox.api.conditions import is_condition_true, is_sandbox_ready
from agentsandbox.api.kinds import SANDBOX_CLAIM
from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_WARM_POOLS, SANDBOXES
from agentsandbox.cli.demo_plot import percentile, plot
from agentsandbox.controllers.claim.plan import pool_owner
from agentsandbox.devcluster.binaries import BinariesError, repo_root, versions
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.devcluster.process import ClusterStartError
from agentsandbox.kube.client import Client
from agentsandbox.kube.config import load_kubeconfig
from agentsandbox.kube.errors import KubeError
from agentsandbox.kube.informer import Informer

POOL_NAME = "agents"
TEMPLATE = "python-runtime"


@dataclasses.dataclass(frozen=True)
class Size:
    """How big the demo is (each field is a flag): the pool, what it is scaled to, the claims."""

    pool: int = 50
    scaled: int = 80
    warm_claims: int = 20
    cold_claims: int = 5
    claim_rate: float = 10.0  # claims/s, open loop: each claim is sent at its scheduled time

    def __post_init__(self) -> None:
        claims = (self.warm_claims, self.cold_claims)
        if not (0 < self.pool <= self.scaled and min(claims) >= 0 and sum(claims) > 0):
            raise ValueError("the demo needs 0 < pool <= scaled and at least one claim")
        if self.warm_claims > self.scaled or self.claim_rate <= 0:
            raise ValueError("more warm claims than pool sandboxes, or no claim rate")


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


@dataclasses.dataclass
class ClaimRun:
    """What the claim phase saw: per claim, what was asked, when, and what served it."""

    asked: dict[str, str] = dataclasses.field(default_factory=dict)  # claim -> "warm" | "cold"
    sent: dict[str, float] = dataclasses.field(default_factory=dict)  # just before the POST
    ready: dict[str, float] = dataclasses.field(default_factory=dict)  # first Ready event
    sandbox: dict[str, str] = dataclasses.field(default_factory=dict)  # claim -> sandbox
    pool_members: set[str] = dataclasses.field(default_factory=set)  # ever in the pool
    started: float = 0.0  # first claim sent (demo clock)
    cold_started: float = 0.0  # first cold claim sent (demo clock)
    pool_low: int = 0  # fewest Ready pool sandboxes seen during the claims (from `scaled`)
    all_ready: float = 0.0  # last claim Ready (demo clock)
    refilled: float = 0.0  # pool back at SCALED Ready (demo clock)

    def served(self, claim: str) -> str:
        return "warm" if self.sandbox.get(claim) in self.pool_members else "cold"

    def latencies_ms(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {"warm": [], "cold": []}
        for name, t in self.ready.items():
            out[self.served(name)].append((t - self.sent[name]) * 1000)
        return out


def _claim_body(name: str, warm: bool) -> tuple[dict[str, Any], Any]:
    if warm:  # the 1.0.x client's form: a claim on a named pool
        return {
            "apiVersion": SANDBOX_CLAIM.api_version,
            "kind": "SandboxClaim",
            "metadata": {"name": name},
            "spec": {"warmPoolRef": {"name": POOL_NAME}},
        }, SANDBOX_CLAIMS
    # the 0.4.x client's form, asking for no pool: a cold start from the template
    return {
        "apiVersion": f"{SANDBOX_CLAIM.group}/v1alpha1",
        "kind": "SandboxClaim",
        "metadata": {"name": name},
        "spec": {"sandboxTemplateRef": {"name": TEMPLATE}, "warmpool": "none"},
    }, dataclasses.replace(SANDBOX_CLAIMS, version="v1alpha1")


async def _claims(
    console: Console,
    cluster: DevCluster,
    ns: str,
    series: list[tuple[float, int, int]],
    t0: float,
    limit: float = 60.0,
    size: Size = Size(),
) -> ClaimRun:
    """Send the claims open loop, time them from one claim watch, then watch the refill."""
    scaled = size.scaled
    run = ClaimRun(pool_low=scaled)
    client = Client(await load_kubeconfig(str(cluster.kubeconfig)), qps=0, pool_size=32)
    pool_ready: set[str] = set()  # pool sandboxes Ready now
    all_ready = asyncio.Event()
    refilled = asyncio.Event()
    total = size.warm_claims + size.cold_claims

    def on_sandbox(*objs: dict[str, Any]) -> None:
        sb = objs[-1]
        name = sb["metadata"]["name"]
        if pool_owner(sb) == POOL_NAME:
            run.pool_members.add(name)
            if is_sandbox_ready(sb) and not sb["metadata"].get("deletionTimestamp"):
                pool_ready.add(name)
            else:
                pool_ready.discard(name)
        else:
            pool_ready.discard(name)
        if run.started:
            run.pool_low = min(run.pool_low, len(pool_ready))
        if run.ready and len(run.ready) == total and len(pool_ready) >= scaled:
            refilled.set()

    def on_sandbox_gone(sb: dict[str, Any]) -> None:
        pool_ready.discard(sb["metadata"]["name"])

    def on_pool(*objs: dict[str, Any]) -> None:
        st = objs[-1].get("status") or {}
        series.append(
            (time.monotonic() - t0, int(st.get("replicas", 0)), int(st.get("readyReplicas", 0)))
        )

    def on_claim(*objs: dict[str, Any]) -> None:
        claim = objs[-1]
        name = claim["metadata"]["name"]
        status = claim.get("status") or {}
        sandbox = (status.get("sandbox") or {}).get("name")
        ready = is_condition_true(status.get("conditions"), "Ready")
        if ready and sandbox and name in run.asked and name not in run.ready:
            run.ready[name] = time.monotonic()
            run.sandbox[name] = sandbox
            if len(run.ready) == total:
                all_ready.set()

    sandboxes = Informer(client, SANDBOXES, ns)
    sandboxes.add_handler(on_sandbox, on_sandbox, on_sandbox_gone)
    pools = Informer(client, SANDBOX_WARM_POOLS, ns)
    pools.add_handler(on_pool, on_pool)
    claims = Informer(client, SANDBOX_CLAIMS, ns)  # both versions: one storage, no conversion
    claims.add_handler(on_claim, on_claim)
    informers = (sandboxes, pools, claims)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    try:
        for inf in informers:
            inf.start()
        await asyncio.wait_for(asyncio.gather(*(inf.wait_synced() for inf in informers)), 20)
        schedule = [(f"warm-{i:02d}", True) for i in range(size.warm_claims)]
        schedule += [(f"cold-{i:02d}", False) for i in range(size.cold_claims)]
        with Progress(*columns, TimeElapsedColumn(), console=console) as progress:
            bar = progress.add_task(
                f"{size.warm_claims} warm + {size.cold_claims} cold claims at "
                f"{size.claim_rate:.0f}/s → Ready",
                total=total,
            )
            pool_bar = progress.add_task(
                f"pool Ready (adopted ones replaced) → {scaled}", total=scaled
            )

            def show() -> None:
                run.pool_low = min(run.pool_low, len(pool_ready))
                progress.update(bar, completed=len(run.ready))
                progress.update(pool_bar, completed=len(pool_ready))

            start = time.monotonic()
            run.started = start - t0
            tasks = []
            for i, (name, warm) in enumerate(schedule):
                await asyncio.sleep(max(0.0, start + i / size.claim_rate - time.monotonic()))
                body, resource = _claim_body(name, warm)
                run.asked[name] = "warm" if warm else "cold"
                run.sent[name] = time.monotonic()
                if not warm and not run.cold_started:
                    run.cold_started = run.sent[name] - t0
                tasks.append(asyncio.create_task(client.create(resource, body, ns)))
                show()
            await asyncio.gather(*tasks)
            deadline = time.monotonic() + limit
            while not all_ready.is_set():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{total - len(run.ready)} claims not Ready in {limit:.0f}s")
                show()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(all_ready.wait(), 0.05)
            run.all_ready = time.monotonic() - t0
            if len(pool_ready) >= scaled:  # no sandbox event since the last claim was Ready
                refilled.set()
            while not refilled.is_set():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"pool not back at {scaled} Ready in {limit:.0f}s")
                show()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(refilled.wait(), 0.05)
            show()
        run.refilled = time.monotonic() - t0
        while True:  # the pool's own status agrees
            st = (await client.get(SANDBOX_WARM_POOLS, POOL_NAME, ns)).get("status") or {}
            on_pool({"status": st})
            if st.get("readyReplicas") == scaled or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
    finally:
        for inf in informers:
            await inf.stop()
        await client.close()
    return run


def parse_args(argv: list[str] | None = None) -> tuple[Size, Path | None]:
    """The demo's size and where its plot goes (by default ``demo-output/`` in the repository)."""
    parser = argparse.ArgumentParser(
        prog="python -m agentsandbox.cli.demo",
        description="Start (or reuse) the local control plane and show the controller at work.",
    )
    fields = dataclasses.fields(Size)
    for f in fields:
        kind = type(f.default)
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=f.default)
    parser.add_argument("--out-dir", type=Path, default=None, help="where the plot is written")
    args = parser.parse_args(argv)
    try:
        size = Size(*(getattr(args, f.name) for f in fields))
    except ValueError as err:
        parser.error(str(err))
    return size, args.out_dir


def main(argv: list[str] | None = None) -> int:
    size, out_dir = parse_args(argv)
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
    try:
        return show(console, cluster, size, out_dir or root / "demo-output")
    finally:
        if own:
            cluster.stop(keep_logs=False)
            console.print("stopped the demo's control plane")


def show(console: Console, cluster: DevCluster, size: Size, out_dir: Path) -> int:
    """Steps 2-6 on a running control plane with our CRDs; the plot is ``out_dir/warmpool.png``.
    It stops the controller process it starts, and deletes its namespace when it succeeded."""
    pool_size, scaled = size.pool, size.scaled
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
            "--sandbox-claim-concurrent-workers=50",
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
                "metadata": {"name": TEMPLATE},
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
        marks: list[tuple[float, str]] = [(0.0, f"pool created ({pool_size})")]
        cluster.api(
            "POST",
            f"{ext}/sandboxwarmpools",
            {
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                "kind": "SandboxWarmPool",
                "metadata": {"name": POOL_NAME},
                "spec": {"replicas": pool_size, "sandboxTemplateRef": {"name": TEMPLATE}},
            },
        )
        label = f"warm pool filling 0 → {pool_size}"
        fill = _fill(console, cluster, ns, POOL_NAME, pool_size, label, series, t0)
        marks.append((time.monotonic() - t0, f"scaled to {scaled}"))
        cluster.kubectl("scale", f"sandboxwarmpool/{POOL_NAME}", "-n", ns, f"--replicas={scaled}")
        scale = _fill(
            console,
            cluster,
            ns,
            POOL_NAME,
            scaled,
            f"scaled {pool_size} → {scaled} via /scale",
            series,
            t0,
        )
        run = asyncio.run(_claims(console, cluster, ns, series, t0, size=size))
        marks.append((run.started, f"{size.warm_claims} warm claims"))
        marks.append((run.cold_started, "cold claims"))
        examples = Table(title="a few of the claims (kubectl get sandboxclaims shows them all)")
        for col in ("claim", "asked as", "sandbox", "pool member?", "latency ms"):
            examples.add_column(col, justify="right" if col.endswith("ms") else "left")
        picks = sorted(run.ready, key=lambda n: (run.asked[n], n))
        picks = [n for n in picks if run.asked[n] == "cold"][:2] + [
            n for n in picks if run.asked[n] == "warm"
        ][:3]
        for name in picks:
            examples.add_row(
                name,
                "v1beta1 warmPoolRef" if run.asked[name] == "warm" else "v1alpha1 warmpool=none",
                run.sandbox[name],
                "yes: warm" if run.served(name) == "warm" else "no: cold",
                f"{(run.ready[name] - run.sent[name]) * 1000:.0f}",
            )
        console.print(examples)
        console.print(
            f"the pool went down to {run.pool_low} Ready during the claims and was back at "
            f"{scaled} Ready {run.refilled - run.all_ready:.2f}s after the last claim was Ready"
        )
        pool = cluster.kubectl("get", "sandboxwarmpool", POOL_NAME, "-n", ns).stdout
        console.print(pool.rstrip())

        table = Table(title="warm pool on the local control plane")
        table.add_column("step")
        table.add_column("sandboxes", justify="right")
        table.add_column("seconds", justify="right")
        table.add_column("sandboxes/s", justify="right")
        table.add_row("fill 0 → Ready", str(pool_size), f"{fill:.2f}", f"{pool_size / fill:.0f}")
        added = scaled - pool_size
        table.add_row("scale up → Ready", str(added), f"{scale:.2f}", f"{added / scale:.0f}")
        adopted = sum(1 for name in run.ready if run.served(name) == "warm")
        table.add_row(
            f"refill {adopted} adopted (1st claim→{scaled} Ready)",
            str(adopted),
            f"{run.refilled - run.started:.2f}",
            "",
        )
        console.print(table)

        lat = run.latencies_ms()
        table = Table(
            title=f"SandboxClaims, {size.claim_rate:.0f}/s: create call → watch event Ready=True "
            "with status.sandbox.name"
        )
        table.add_column("launch")
        table.add_column("served from")
        table.add_column("claims", justify="right")
        table.add_column("p50 ms", justify="right")
        table.add_column("p90 ms", justify="right")
        table.add_column("max ms", justify="right")
        origin = {
            "warm": "pool member, adopted",
            "cold": "new, from the template",
        }
        for kind in ("warm", "cold"):
            values = lat[kind]
            if not values:
                continue
            table.add_row(
                kind,
                origin[kind],
                str(len(values)),
                *(f"{percentile(values, p):.0f}" for p in (50, 90, 100)),
            )
        console.print(table)
        console.print(
            "[dim]kwok pods start at once (no image pull, no container start): a cold claim here "
            "costs only the extra Sandbox → Pod → Ready round trips; on real nodes it takes "
            "seconds.[/]"
        )
        mismatched = sorted(n for n in run.ready if run.served(n) != run.asked[n])
        if mismatched:
            console.print(f"[yellow]served otherwise than asked:[/] {', '.join(mismatched)}")
        out = out_dir / "warmpool.png"
        if plot(series, marks, run, out):
            console.print(f"plot: {out}")
        cluster.api("DELETE", f"/api/v1/namespaces/{ns}")
    except (TimeoutError, OSError, KubeError, subprocess.CalledProcessError) as err:
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
