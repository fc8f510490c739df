"""``make soak``: an hour (``DURATION=``) of steady work on a private control plane, two
controller replicas with leader election, and what it leaves behind.

    make soak                       # one hour
    make soak DURATION=120s         # a short run (also 30m, 1h, or plain seconds)
    python bench/soak.py --duration 120s --out /tmp/soak

The load: claims at a steady rate (``--rate``, default 2/s) against a warm pool, each deleted
``--claim-lifetime`` seconds after it is Ready; the pool scaled between two sizes every
``--scale-every``; the template's pod template changed every ``--template-every``. The leader
(started first) runs the whole time un-restarted; the standby replica is restarted every
``--standby-restart`` (SIGTERM and SIGKILL in turn). Leader election runs with the real flags
(upstream's 15/10/2 s timings).

Reports, to ``soak.json`` and ``soak.md``: claims served, not served within 30 s, latency
percentiles (create -> Ready with a sandbox) per 5-minute window, the leader's and the standby's
RSS (MiB) every minute (``--sample-every``) and the leader's RSS slope (MB per 10 minutes, least
squares) after minute 10 (after half the run when shorter), and the invariants at the end (every
live claim Ready with exactly one sandbox, no sandbox ever with two claim owners, the pool
exactly at its replicas, nothing orphaned). Exit code 1 when an invariant fails or the leader
changed.

Where: without ``--out``, a full run (30 minutes or more) writes ``bench/results/soak.json``
(committed; ``python bench/report.py --write`` renders ``docs/reliability.md``'s soak tables
from it) and everything else (cluster, logs, ``soak.md``) to ``bench/work/soak/``; a shorter run
writes all of it to ``bench/work/soak/``. With ``--out DIR`` everything goes to ``DIR``, which
may not be inside ``bench/results/`` for a shorter run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from harness import (  # noqa: E402
    EXE,
    RESULTS,
    ROOT,
    WORK,
    ControllerProcess,
    machine_facts,
    mib_to_mb,
    percentile,
    ready_sandbox,
    template,
    warm_claim,
    warm_pool,
)
from results import SmokeInResults, refuse_smoke_in_results  # noqa: E402
from tests.integration.invariants import (  # noqa: E402
    SandboxHistory,
    check_invariants,
    check_owned,
    wait_ready_pool,
)

from agentsandbox.api.resources import (  # noqa: E402
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
)
from agentsandbox.cli.options import LEADER_ELECTION_ID  # noqa: E402
from agentsandbox.devcluster.cluster import DevCluster, free_port  # noqa: E402
from agentsandbox.kube.client import Client  # noqa: E402
from agentsandbox.kube.config import load_kubeconfig  # noqa: E402
from agentsandbox.kube.errors import KubeError, NotFound  # noqa: E402
from agentsandbox.kube.informer import Informer  # noqa: E402
from agentsandbox.kube.resources import NAMESPACES  # noqa: E402

AUDIT_POLICY = ROOT / "tests" / "testdata" / "audit-deletes.yaml"
FULL_SECONDS = 1800.0  # a run this long (30 minutes or more) is the soak whose JSON is committed
WINDOW = 300.0  # latency percentiles per 5 minutes
LATE = 30.0  # a claim not Ready within this is "not served"
SYSTEM_NS = "soak-system"


def seconds(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(h|m|s|)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 3600, 120s, 30m, 1h)")
    return float(m[1]) * {"h": 3600, "m": 60, "s": 1, "": 1}[m[2]]


def slope_mb_per_10min(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MB) points, in MB per 10 minutes."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    if var == 0:
        return None
    cov = sum((t - mx) * (v - my) for t, v in points)
    return round(cov / var * 600, 2)


def start_replica(cluster: DevCluster, out: Path, name: str) -> ControllerProcess:
    log = out / f"{name}.log"
    metrics, health = free_port(), free_port()
    flags = (
        "--extensions",
        f"--kubeconfig={cluster.kubeconfig}",
        "--leader-elect=true",
        f"--leader-election-namespace={SYSTEM_NS}",
        f"--metrics-bind-address=127.0.0.1:{metrics}",
        f"--health-probe-bind-address=127.0.0.1:{health}",
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        "--sandbox-concurrent-workers=8",
        "--sandbox-claim-concurrent-workers=8",
        "--zap-log-level=info",
    )
    with log.open("ab") as f:
        popen = subprocess.Popen([str(EXE), *flags], stdout=f, stderr=subprocess.STDOUT)
    return ControllerProcess(popen, log, flags, metrics, health)


def leading(proc: ControllerProcess) -> bool:
    try:
        text = proc.metrics_text()
    except OSError:
        return False
    return any(
        line.startswith("leader_election_master_status{")
        and f'name="{LEADER_ELECTION_ID}"' in line
        and line.rstrip().endswith(" 1.0")
        for line in text.splitlines()
    )


def _shown(path: Path) -> str:
    """A path as the committed JSON names it: repository-relative when inside the repository
    (no machine path in committed data)."""
    full = path.resolve()
    return str(full.relative_to(ROOT) if full.is_relative_to(ROOT) else full)


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.out
        # the audit log of every claim and sandbox delete tells the claim history's checks who
        # deleted a claim's sandbox (the soak's own client has a user agent of its own)
        self.cluster = DevCluster(
            self.out / "cluster",
            nodes=4,
            crd_paths=[ROOT / "deploy/crds"],
            audit=True,
            apiserver_args=("--audit-log-mode=blocking", f"--audit-policy-file={AUDIT_POLICY}"),
        )
        self.ns = f"soak-{uuid.uuid4().hex[:6]}"
        self.created: dict[str, float] = {}  # claim -> monotonic create time
        self.ready_at: dict[str, float] = {}
        self.ready_event: dict[str, asyncio.Event] = {}
        self.latencies: list[tuple[float, float]] = []  # (seconds since start, latency s)
        self.rss: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.t0 = 0.0
        self.leader: ControllerProcess
        self.standby: ControllerProcess

    def now(self) -> float:
        return time.monotonic() - self.t0

    def note(self, what: str, **extra: Any) -> None:
        self.events.append({"t": round(self.now(), 1), "what": what, **extra})
        print(f"[{self.now():7.1f}s] {what} {extra if extra else ''}", flush=True)

    # ------------------------------------------------------------------ load
    def on_claim(self, *objs: dict[str, Any]) -> None:
        claim = objs[-1]
        name = claim["metadata"]["name"]
        if name in self.created and name not in self.ready_at and ready_sandbox(claim):
            at = time.monotonic()
            self.ready_at[name] = at
            self.latencies.append((at - self.t0, at - self.created[name]))
            if name in self.ready_event:
                self.ready_event[name].set()

    async def claims(self, api: Client, stop: asyncio.Event) -> None:
        i = 0
        period = 1.0 / self.args.rate
        next_at = time.monotonic()
        tasks: set[asyncio.Task[None]] = set()
        while not stop.is_set():
            name = f"c-{i:06d}"
            i += 1
            self.created[name] = time.monotonic()
            task = asyncio.create_task(self.one_claim(api, name))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            next_at += period
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))
        await asyncio.gather(*tasks, return_exceptions=True)

    async def one_claim(self, api: Client, name: str) -> None:
        try:
            await api.create(SANDBOX_CLAIMS, warm_claim(name, "pool"), self.ns)
        except KubeError as err:
            self.errors.append(f"create {name}: {err}")
            return
        event = self.ready_event.setdefault(name, asyncio.Event())
        if name in self.ready_at:
            event.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), LATE)
        self.ready_event.pop(name, None)
        await asyncio.sleep(self.args.claim_lifetime)
        with contextlib.suppress(NotFound):
            await api.delete(SANDBOX_CLAIMS, name, self.ns)

    async def scaler(self, api: Client, stop: asyncio.Event) -> None:
        sizes = (self.args.pool, self.args.pool_high)
        k = 0
        while not await self.wait(stop, self.args.scale_every):
            k += 1
            size = sizes[k % 2]
            await api.patch(SANDBOX_WARM_POOLS, "pool", {"spec": {"replicas": size}}, self.ns)
            self.note("pool scaled", replicas=size)

    async def template_changer(self, api: Client, stop: asyncio.Event) -> None:
        k = 0
        while not await self.wait(stop, self.args.template_every):
            k += 1
            patch = {"spec": {"podTemplate": {"metadata": {"labels": {"soak-rev": str(k)}}}}}
            await api.patch(SANDBOX_TEMPLATES, "tpl", patch, self.ns)
            self.note("template changed", rev=k)

    async def standby_restarter(self, stop: asyncio.Event) -> None:
        k = 0
        while not await self.wait(stop, self.args.standby_restart):
            k += 1
            sig = signal.SIGTERM if k % 2 else signal.SIGKILL
            old = self.standby
            os.kill(old.pid, sig)
            await asyncio.to_thread(old.popen.wait, 30)
            self.standby = start_replica(self.cluster, self.out, f"standby-{k}")
            self.note("standby restarted", signal=sig.name, pid=self.standby.pid)

    async def sampler(self, stop: asyncio.Event) -> None:
        while True:
            row: dict[str, Any] = {"t": round(self.now(), 1)}
            for role, proc in (("leader", self.leader), ("standby", self.standby)):
                with contextlib.suppress(OSError):
                    row[f"{role}_rss_mib"] = proc.rss()[0]
            row["claims_created"] = len(self.created)
            row["claims_ready"] = len(self.ready_at)
            self.rss.append(row)
            if await self.wait(stop, self.args.sample_every):
                return

    @staticmethod
    async def wait(stop: asyncio.Event, seconds: float) -> bool:
        """Sleep ``seconds`` unless stopped; True if stopped."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)
        return stop.is_set()

    # ------------------------------------------------------------------ run
    async def run(self) -> dict[str, Any]:
        cfg = await load_kubeconfig(str(self.cluster.kubeconfig))
        api = Client(cfg, qps=0, pool_size=200, user_agent="agentsandbox-soak")
        try:
            await api.create(NAMESPACES, {"metadata": {"name": SYSTEM_NS}})
            await api.create(NAMESPACES, {"metadata": {"name": self.ns}})
            await api.create(SANDBOX_TEMPLATES, template("tpl"), self.ns)
            await api.create(SANDBOX_WARM_POOLS, warm_pool("pool", "tpl", self.args.pool), self.ns)
            self.leader = start_replica(self.cluster, self.out, "leader")
            deadline = time.monotonic() + 60
            while not leading(self.leader):
                self.leader.check()
                if time.monotonic() > deadline:
                    raise RuntimeError("the first replica never led")
                await asyncio.sleep(0.2)
            self.standby = start_replica(self.cluster, self.out, "standby-0")
            await self.standby.wait_ready()
            await wait_ready_pool(api, self.ns, "pool", self.args.pool, within=120)
            leader_pid = self.leader.pid
            self.t0 = time.monotonic()
            self.note("load starts", leader=leader_pid, standby=self.standby.pid)
            watcher = Informer(api, SANDBOX_CLAIMS, self.ns)
            watcher.add_handler(self.on_claim, self.on_claim)
            audit = self.cluster.logs / "audit.log"
            async with SandboxHistory(api, self.ns, audit=audit) as history, watcher:
                await asyncio.wait_for(watcher.wait_synced(), 30)
                stop = asyncio.Event()
                jobs = [
                    asyncio.create_task(self.claims(api, stop)),
                    asyncio.create_task(self.scaler(api, stop)),
                    asyncio.create_task(self.template_changer(api, stop)),
                    asyncio.create_task(self.standby_restarter(stop)),
                    asyncio.create_task(self.sampler(stop)),
                ]
                while self.now() < self.args.duration:
                    self.leader.check()
                    if any(j.done() and j.exception() for j in jobs):
                        break
                    await asyncio.sleep(1.0)
                stop.set()
                self.note("load stops")
                results = await asyncio.gather(*jobs, return_exceptions=True)
                for r in results:
                    if isinstance(r, BaseException):
                        self.errors.append(f"load task failed: {r!r}")
                invariants = await self.check(api, history)
            still_leader = self.leader.popen.poll() is None and leading(self.leader)
            return self.report(invariants, still_leader, leader_pid)
        finally:
            await api.close()

    async def check(self, api: Client, history: SandboxHistory) -> dict[str, Any]:
        out: dict[str, Any] = {}
        pool = (await api.get(SANDBOX_WARM_POOLS, "pool", self.ns))["spec"]["replicas"]
        checks: dict[str, Callable[[], Awaitable[Any]]] = {
            "pool_exactly_at_replicas": lambda: wait_ready_pool(api, self.ns, "pool", pool, 120),
            "live_claims_one_sandbox_each": lambda: self.live_claims(api),
            "nothing_orphaned": lambda: check_owned(api, self.ns),
            "claim_history": lambda: self.history_ok(history),
        }
        for key, fn in checks.items():
            try:
                await fn()
                out[key] = "ok"
            except AssertionError as err:
                out[key] = f"FAILED: {str(err)[:300]}"
        out["sandboxes_seen"] = history.created
        return out

    async def live_claims(self, api: Client) -> None:
        """Every claim still there (the load has stopped) is Ready with exactly one sandbox."""
        deadline = time.monotonic() + 60
        while True:
            live = [
                c
                for c in (await api.list(SANDBOX_CLAIMS, self.ns)).items
                if not c["metadata"].get("deletionTimestamp")
            ]
            if all(ready_sandbox(c) for c in live):
                break
            assert time.monotonic() < deadline, "live claims not Ready within 60 s"
            await asyncio.sleep(0.5)
        await check_invariants(api, self.ns, live)

    @staticmethod
    async def history_ok(history: SandboxHistory) -> None:
        """The claim rules over the whole run (tests/integration/invariants.py): no gap in the
        history, each claim's first Ready sandbox the only one it names while that lives, no
        sandbox with two claim owners, none a live claim was Ready with deleted by us."""
        await history.caught_up(within=120)
        history.check()

    # ------------------------------------------------------------------ report
    def report(self, invariants: dict[str, Any], still_leader: bool, pid: int) -> dict[str, Any]:
        windows = []
        start = 0.0
        while start < self.args.duration:
            lat = [ms * 1000 for t, ms in self.latencies if start <= t < start + WINDOW]
            windows.append(
                {
                    "from_s": start,
                    "to_s": min(start + WINDOW, self.args.duration),
                    "served": len(lat),
                    **{
                        k: (None if (v := percentile(lat, p)) is None else round(v, 1))
                        for k, p in (
                            ("p50_ms", 50),
                            ("p90_ms", 90),
                            ("p99_ms", 99),
                            ("max_ms", 100),
                        )
                    },
                }
            )
            start += WINDOW
        slope_from = min(600.0, self.args.duration / 2)
        points = [
            (r["t"], mib_to_mb(r["leader_rss_mib"]))
            for r in self.rss
            if r["t"] >= slope_from and "leader_rss_mib" in r
        ]
        served = len(self.ready_at)
        late = [n for n, t in self.created.items() if n not in self.ready_at]
        return {
            "duration_s": self.args.duration,
            "settings": {
                k: (_shown(v) if isinstance(v, Path) else v) for k, v in vars(self.args).items()
            },
            "claims_created": len(self.created),
            "claims_served": served,
            "claims_not_served_within_30s": len(late),
            "windows": windows,
            "rss_every_minute": self.rss,
            "leader_rss_slope_mb_per_10min": slope_mb_per_10min(points),
            "command": " ".join(["python", "bench/soak.py", *sys.argv[1:]]),
            "slope_from_s": slope_from,
            "leader_pid": pid,
            "leader_unrestarted_and_leading": still_leader,
            "standby_restarts": sum(1 for e in self.events if e["what"] == "standby restarted"),
            "events": self.events,
            "errors": self.errors[:50],
            "invariants": invariants,
            "machine": machine_facts(self.cluster),
        }


def markdown(r: dict[str, Any]) -> str:
    lines = [
        f"# Soak: {r['duration_s'] / 60:.0f} min",
        "",
        f"- claims created {r['claims_created']}, served {r['claims_served']}, "
        f"not served within 30 s {r['claims_not_served_within_30s']}",
        f"- leader un-restarted and still leading: {r['leader_unrestarted_and_leading']}; "
        f"standby restarts: {r['standby_restarts']}",
        f"- leader RSS slope after {r['slope_from_s'] / 60:.0f} min: "
        f"{r['leader_rss_slope_mb_per_10min']} MB / 10 min",
        "",
        "| window | served | p50 ms | p90 ms | p99 ms | max ms |",
        "|---|---|---|---|---|---|",
    ]
    for w in r["windows"]:
        lines.append(
            f"| {w['from_s'] / 60:.0f}-{w['to_s'] / 60:.0f} min | {w['served']} | {w['p50_ms']} "
            f"| {w['p90_ms']} | {w['p99_ms']} | {w['max_ms']} |"
        )
    lines += [
        "",
        "| minute | leader RSS MiB | standby RSS MiB | claims Ready |",
        "|---|---|---|---|",
    ]
    for row in r["rss_every_minute"]:
        lines.append(
            f"| {row['t'] / 60:.1f} | {row.get('leader_rss_mib')} | {row.get('standby_rss_mib')} "
            f"| {row['claims_ready']} |"
        )
    lines += ["", "| invariant | result |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in r["invariants"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=seconds, default=3600.0)
    p.add_argument("--rate", type=float, default=2.0, help="claims per second")
    p.add_argument("--claim-lifetime", type=seconds, default=20.0)
    p.add_argument("--pool", type=int, default=20)
    p.add_argument("--pool-high", type=int, default=40)
    # unset: these defaults, or shorter for a short run so that each still happens a few times
    p.add_argument("--scale-every", type=seconds, help="default min(120 s, duration/4)")
    p.add_argument("--template-every", type=seconds, help="default min(300 s, duration/2.5)")
    p.add_argument("--standby-restart", type=seconds, help="default min(180 s, duration/3)")
    p.add_argument("--sample-every", type=seconds, help="default min(60 s, duration/12)")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="every file here (default: see the module doc)",
    )
    args = p.parse_args(argv)
    full = args.duration >= FULL_SECONDS
    if args.out is None:
        json_dir = RESULTS if full else WORK / "soak"
        args.out = WORK / "soak"
    else:
        try:
            refuse_smoke_in_results(args.out, smoke=not full)
        except SmokeInResults as err:
            p.error(f"a run shorter than {FULL_SECONDS:.0f} s is not the soak: {err}")
        json_dir = args.out
    for key, full, part in (
        ("scale_every", 120.0, 4),
        ("template_every", 300.0, 2.5),
        ("standby_restart", 180.0, 3),
        ("sample_every", 60.0, 12),
    ):
        if getattr(args, key) is None:
            setattr(args, key, min(full, args.duration / part))
    args.out.mkdir(parents=True, exist_ok=True)
    soak = Soak(args)
    soak.cluster.start()
    try:
        result = asyncio.run(soak.run())
    finally:
        for proc in (getattr(soak, "standby", None), getattr(soak, "leader", None)):
            if proc is not None:
                proc.stop()
        soak.cluster.stop(keep_logs=False)
    json_dir.mkdir(parents=True, exist_ok=True)
    (json_dir / "soak.json").write_text(json.dumps(result, indent=2, default=str))
    md = markdown(result)
    (args.out / "soak.md").write_text(md)
    print(md)
    print(f"wrote {json_dir / 'soak.json'}; logs and soak.md in {args.out}")
    ok = result["leader_unrestarted_and_leading"] and all(
        v == "ok" for k, v in result["invariants"].items() if k != "sandboxes_seen"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
