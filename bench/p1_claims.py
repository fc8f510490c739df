"""P1 — claim rate sweep: warm-claim latency at 10, 20, 30, 50, 75 claims/s, then the gate shape.

Each step runs in its own namespace (removed, and gone, before the next): a SandboxTemplate and a
SandboxWarmPool of ``pool`` Ready, then ``claims`` v1beta1 SandboxClaims (``spec.warmPoolRef``)
sent **open loop** by one asyncio generator: claim ``i`` is due at ``t0 + i / rate`` and its POST
starts then, whatever the earlier ones are doing. One namespace-wide claim watch records when each
claim is first seen Ready=True with ``status.sandbox.name``; latency = that moment minus the
claim's **scheduled** send time (a late send counts against us). The pool refills behind the
claims; the step ends when it is back at ``pool`` Ready (that refill is what P3 reports for the
gate shape).

A step counts only if the achieved send rate is ≥ 95 % of its nominal rate. The **knee** is the
highest counting rate with p99 ≤ 500 ms and every claim Ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

from harness import (
    GATE_FLAGS,
    ROOT,
    Bench,
    BenchError,
    ready_sandbox,
    summary_ms,
    template,
    wait_pool_status,
    warm_claim,
    warm_pool,
)

from agentsandbox.api.conditions import is_sandbox_ready
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.controllers.claim.plan import pool_owner
from agentsandbox.devcluster.standin import StandinRuntime
from agentsandbox.kube.client import Client
from agentsandbox.kube.informer import Informer

TITLE = "claim rate sweep (warm-claim latency, open loop)"
POOL = "pool"
P99_GOAL_MS = 500.0
KNEE_GOAL = 30.0
P50_GOAL_MS = 150.0
FULL: dict[str, Any] = {
    "rates": [10, 20, 30, 50, 75],
    "claims": 200,
    "pool": 300,
    "gate": {"rate": 75, "claims": 750, "pool": 1050},
    "crosscheck": 20,
    "cap_seconds": 1500,
}
SMOKE: dict[str, Any] = {
    "rates": [5],
    "claims": 4,
    "pool": 6,
    "gate": {"rate": 5, "claims": 5, "pool": 7},
    "crosscheck": 3,
    "cap_seconds": 300,
}


class Watches:
    """One sandbox watch (pool members, pool Ready over time) and one claim watch (Ready)."""

    def __init__(self, client: Client, ns: str) -> None:
        self.t0 = time.monotonic()
        self.members: set[str] = set()
        self.ready: set[str] = set()
        self.series: list[tuple[float, int]] = []
        self.wanted: set[str] = set()
        self.pending: set[str] = set()
        self.ready_at: dict[str, float] = {}
        self.sandbox_of: dict[str, str] = {}
        self.target = 0
        self.full = asyncio.Event()
        self.all_ready = asyncio.Event()
        self.sandboxes = Informer(client, SANDBOXES, ns)
        self.sandboxes.add_handler(self._sandbox, self._sandbox, self._gone)
        self.claims = Informer(client, SANDBOX_CLAIMS, ns)
        self.claims.add_handler(self._claim, self._claim)

    def _sandbox(self, *objs: dict[str, Any]) -> None:
        sb = objs[-1]
        name = sb["metadata"]["name"]
        if pool_owner(sb) == POOL:
            self.members.add(name)
            if is_sandbox_ready(sb) and not sb["metadata"].get("deletionTimestamp"):
                self.ready.add(name)
            else:
                self.ready.discard(name)
        else:
            self.ready.discard(name)
        self.changed()

    def _gone(self, sb: dict[str, Any]) -> None:
        self.ready.discard(sb["metadata"]["name"])
        self.changed()

    def changed(self) -> None:
        n = len(self.ready)
        if not self.series or self.series[-1][1] != n:
            self.series.append((time.monotonic() - self.t0, n))
        if self.target and n >= self.target:
            self.full.set()

    def _claim(self, *objs: dict[str, Any]) -> None:
        obj = objs[-1]
        name = obj["metadata"]["name"]
        sandbox = ready_sandbox(obj)
        if sandbox and name in self.pending:
            self.ready_at[name] = time.monotonic()
            self.sandbox_of[name] = sandbox
            self.pending.discard(name)
            if not self.pending:
                self.all_ready.set()

    def expect(self, names: set[str]) -> None:
        """Claims to wait for (``all_ready`` is set once each of them was seen Ready)."""
        self.wanted = set(names)
        self.pending = set(names) - self.ready_at.keys()
        self.all_ready.clear()
        if not self.pending:
            self.all_ready.set()

    async def wait_full(self, target: int, limit: float) -> float:
        self.target = target
        self.full.clear()
        self.changed()
        t = time.monotonic()
        await asyncio.wait_for(self.full.wait(), limit)
        return time.monotonic() - t

    async def __aenter__(self) -> Watches:
        for inf in (self.sandboxes, self.claims):
            inf.start()
        await asyncio.gather(self.sandboxes.wait_synced(), self.claims.wait_synced())
        return self

    async def __aexit__(self, *exc: object) -> None:
        for inf in (self.sandboxes, self.claims):
            await inf.stop()


async def step(
    b: Bench, rate: float, claims: int, pool: int, limit: float = 300.0
) -> dict[str, Any]:
    """One rate step in a fresh namespace (see the module doc)."""
    client = b.api
    async with b.namespace(f"p1-{int(rate)}") as ns:
        await client.create(SANDBOX_TEMPLATES, template("tpl"), ns)
        async with Watches(client, ns) as w:
            t_fill = time.monotonic()
            await client.create(SANDBOX_WARM_POOLS, warm_pool(POOL, "tpl", pool), ns)
            await w.wait_full(pool, limit)
            await wait_pool_status(client, ns, POOL, pool, limit)
            fill_s = time.monotonic() - t_fill
            await asyncio.sleep(1.0)  # the fill's last writes settle
            names = [f"c-{i:04d}" for i in range(claims)]
            w.expect(set(names))
            w.target = 0
            scheduled: dict[str, float] = {}
            sent: dict[str, float] = {}
            errors: dict[str, str] = {}

            async def send(name: str) -> None:
                sent[name] = time.monotonic()
                try:
                    await client.create(SANDBOX_CLAIMS, warm_claim(name, POOL), ns)
                except Exception as err:  # counted and reported
                    errors[name] = repr(err)

            t0 = time.monotonic() + 0.05
            tasks: list[asyncio.Task[None]] = []
            for i, name in enumerate(names):  # due times only, never a response
                scheduled[name] = t0 + i / rate
                delay = scheduled[name] - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(send(name)))
            await asyncio.gather(*tasks)
            with contextlib.suppress(TimeoutError):
                left = max(scheduled.values()) + 60 - time.monotonic()
                await asyncio.wait_for(w.all_ready.wait(), max(0.0, left))
            last_ready = max(w.ready_at.values(), default=time.monotonic())
            refill_from_first = refill_from_last = None
            try:
                await w.wait_full(pool, limit)
                back = time.monotonic()
                refill_from_first = back - t0
                refill_from_last = back - last_ready
            except TimeoutError:
                pass
    spread = sorted(sent.values())
    span = spread[-1] - spread[0] if len(spread) > 1 else 0.0
    achieved = (claims - 1) / span if span else float(rate)
    latencies = [(w.ready_at[k] - scheduled[k]) * 1000 for k in names if k in w.ready_at]
    warm = sum(1 for k in w.ready_at if w.sandbox_of[k] in w.members)
    lateness = [(sent[k] - scheduled[k]) * 1000 for k in names if k in sent]
    return {
        "rate": rate,
        "claims": claims,
        "pool": pool,
        "rate_achieved": round(achieved, 2),
        "counts": achieved >= 0.95 * rate,
        "send_lateness_ms": summary_ms(lateness),
        "create_errors": len(errors),
        "claims_ready": len(w.ready_at),
        "warm_hits": warm,
        "warm_hit_ratio": round(warm / len(w.ready_at), 3) if w.ready_at else 0.0,
        "latency_ms": summary_ms(latencies),
        "pool_fill_seconds": round(fill_s, 2),
        "refill_seconds_from_first_claim": _r(refill_from_first),
        "refill_seconds_after_last_claim_ready": _r(refill_from_last),
        "latencies_ms": sorted(round(x, 1) for x in latencies),
        "pool_series": [(round(t - (t0 - w.t0), 3), n) for t, n in w.series],
    }


SDK_PYTHON = ROOT / ".venv-sdk108" / "bin" / "python"
CROSSCHECK_PAUSE = 0.1


async def crosscheck(b: Bench, count: int) -> dict[str, Any]:
    """The same sequential warm claims measured twice: by the released 1.0.8 client (its own
    ``create_sandbox`` call, claim → claim Ready) and by this generator (POST → the Ready event
    on its watch), in one namespace against one pool. The two p50s should agree within 20 ms."""
    if not SDK_PYTHON.exists():
        raise BenchError(f"{SDK_PYTHON} missing: run `make sdk-venvs`")
    client = b.api
    async with b.namespace("p1-sdk") as ns:
        await client.create(SANDBOX_TEMPLATES, template("tpl"), ns)
        async with StandinRuntime() as standin, Watches(client, ns) as w:
            await client.create(SANDBOX_WARM_POOLS, warm_pool(POOL, "tpl", count + 5), ns)
            await w.wait_full(count + 5, 120)
            await wait_pool_status(client, ns, POOL, count + 5, 120)
            proc = await asyncio.create_subprocess_exec(
                str(SDK_PYTHON),
                str(Path(__file__).with_name("sdk_latency.py")),
                f"--kubeconfig={b.cluster.kubeconfig}",
                f"--namespace={ns}",
                f"--api-url={standin.url}",
                f"--warm-pool={POOL}",
                f"--count={count}",
                f"--pause={CROSSCHECK_PAUSE}",
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(proc.communicate(), 60 + 5 * count)
            if proc.returncode != 0:
                raise BenchError(f"sdk_latency.py exited {proc.returncode}: {err.decode()[-2000:]}")
            sdk = json.loads(out.decode().strip().splitlines()[-1])
            await w.wait_full(count + 5, 120)
            ours: list[float] = []
            for i in range(count):
                name = f"x-{i:03d}"
                w.expect({name})
                t = time.monotonic()
                await client.create(SANDBOX_CLAIMS, warm_claim(name, POOL), ns)
                await asyncio.wait_for(w.all_ready.wait(), 60)
                ours.append(round((w.ready_at[name] - t) * 1000, 1))
                await client.delete(SANDBOX_CLAIMS, name, ns)
                await asyncio.sleep(CROSSCHECK_PAUSE)
    sdk_p50 = summary_ms(sdk["create_ms"])["p50"]
    our_p50 = summary_ms(ours)["p50"]
    return {
        "sdk": sdk["sdk"],
        "claims": count,
        "sdk_create_ms": sdk["create_ms"],
        "generator_ms": ours,
        "sdk_p50_ms": sdk_p50,
        "generator_p50_ms": our_p50,
        "p50_difference_ms": None
        if sdk_p50 is None or our_p50 is None
        else round(sdk_p50 - our_p50, 1),
    }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def knee(steps: list[dict[str, Any]]) -> float:
    """The highest counting rate with p99 ≤ 500 ms and every claim Ready (0 if none)."""
    ok = [
        s["rate"]
        for s in steps
        if s["counts"]
        and s["claims_ready"] == s["claims"]
        and (s["latency_ms"].get("p99") or 1e9) <= P99_GOAL_MS
    ]
    return float(max(ok, default=0))


async def run(b: Bench, size: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    with b.controller("P1") as proc:
        await proc.wait_ready()
        cpu0 = proc.cpu()
        for rate in size["rates"]:
            await b.wait_namespaces_gone()
            await b.check_healthy()
            s = await step(b, float(rate), int(size["claims"]), int(size["pool"]))
            proc.check()
            lat = s["latency_ms"]
            print(
                f"  {rate:>3}/s: achieved {s['rate_achieved']}/s, ready {s['claims_ready']}/"
                f"{s['claims']}, warm {s['warm_hit_ratio']:.2f}, p50 {lat['p50']} p90 "
                f"{lat['p90']} p99 {lat['p99']} max {lat['max']} ms",
                flush=True,
            )
            steps.append(s)
        gate_size = size["gate"]
        await b.wait_namespaces_gone()
        await b.check_healthy()
        gate = await step(
            b, float(gate_size["rate"]), int(gate_size["claims"]), int(gate_size["pool"])
        )
        proc.check()
        print(
            f"  gate {gate['rate']:g}/s x {gate['claims']} (pool {gate['pool']}): "
            f"p50 {gate['latency_ms']['p50']} p99 {gate['latency_ms']['p99']} ms, "
            f"refill {gate['refill_seconds_from_first_claim']} s",
            flush=True,
        )
        cpu = proc.cpu() - cpu0
        rss_now, rss_peak = proc.rss()
        await b.wait_namespaces_gone()
        cross = await crosscheck(b, int(size["crosscheck"]))
        print(
            f"  cross-check ({cross['claims']} sequential claims): k8s-agent-sandbox "
            f"{cross['sdk']} p50 {cross['sdk_p50_ms']} ms, generator p50 "
            f"{cross['generator_p50_ms']} ms",
            flush=True,
        )
    below = [s for s in steps if s["rate"] <= knee(steps) and s["counts"]]
    p50_below = max((s["latency_ms"]["p50"] or 0.0 for s in below), default=None)
    figures = {
        "knee_claims_per_s": knee(steps),
        "all_claims_ready": all(s["claims_ready"] == s["claims"] for s in [*steps, gate]),
        "worst_p50_below_knee_ms": p50_below if below else None,
        "gate_p99_ms": gate["latency_ms"]["p99"],
        "gate_warm_hit_ratio": gate["warm_hit_ratio"],
        "controller_cpu_seconds": round(cpu, 2),
        "controller_rss_peak_mib": rss_peak,
        "sdk_minus_generator_p50_ms": cross["p50_difference_ms"],
    }
    if figures["worst_p50_below_knee_ms"] is None:
        # no step under the knee: report the lowest rate's p50 (never a null figure)
        figures["worst_p50_below_knee_ms"] = steps[0]["latency_ms"]["p50"]
    return {
        "flags": list(GATE_FLAGS),
        "figures": figures,
        "steps": steps,
        "gate": gate,
        "crosscheck": cross,
        "controller_rss_mib": {"now": rss_now, "peak": rss_peak},
    }


def rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    for s in [*result["steps"], result["gate"]]:
        lat = s["latency_ms"]
        tag = "gate " if s is result["gate"] else ""
        out.append(
            (
                f"{tag}{s['rate']:g}/s x {s['claims']} (pool {s['pool']})",
                f"p50 {lat['p50']} / p90 {lat['p90']} / p99 {lat['p99']} / max {lat['max']} ms;"
                f" ready {s['claims_ready']}/{s['claims']}; warm {s['warm_hit_ratio']:.2f};"
                f" sent {s['rate_achieved']}/s{'' if s['counts'] else ' (does not count)'}",
                "p99 <= 500 ms" if not tag else "reported",
            )
        )
    f = result["figures"]
    out.append(("knee", f"{f['knee_claims_per_s']:g} claims/s", f">= {KNEE_GOAL:g} claims/s"))
    out.append(("p50 below the knee (worst)", f"{f['worst_p50_below_knee_ms']} ms", "<= 150 ms"))
    c = result["crosscheck"]
    out.append(
        (
            f"released client {c['sdk']} vs generator ({c['claims']} claims)",
            f"p50 {c['sdk_p50_ms']} vs {c['generator_p50_ms']} ms",
            "within 20 ms",
        )
    )
    return out


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (cdf, pool) = plt.subplots(1, 2, figsize=(13, 4.8))
    for s in [*result["steps"], result["gate"]]:
        lat = s["latencies_ms"]
        if not lat:
            continue
        ys = [(i + 1) / len(lat) for i in range(len(lat))]
        label = f"{s['rate']:g}/s x {s['claims']}" + (" (gate)" if s is result["gate"] else "")
        cdf.plot(lat, ys, label=label)
    cdf.axvline(P99_GOAL_MS, color="grey", linestyle=":", label="500 ms")
    cdf.set_xscale("log")
    cdf.set_xlabel("claim latency, scheduled send -> Ready event (ms)")
    cdf.set_ylabel("share of claims")
    cdf.set_title(f"P1 claim latency CDF (knee {result['figures']['knee_claims_per_s']:g}/s)")
    cdf.legend(loc="lower right", fontsize=8)
    gate = result["gate"]
    pool.plot([p[0] for p in gate["pool_series"]], [p[1] for p in gate["pool_series"]])
    pool.set_xlabel("seconds from the first claim")
    pool.set_ylabel("Ready pool sandboxes")
    pool.set_title(f"gate shape: pool of {gate['pool']} drained and refilled")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
