"""P5 — controller cost with the shipped Deployment's flags: CPU per pool sandbox, CPU per warm
claim, peak RSS with N sandboxes cached.

The controller runs with the container args of ``deploy/controller.yaml`` minus those that point
at in-cluster things (leader election, the metrics and health bind addresses; the harness sets
its own loopback ports and ``--leader-elect=false``). Two phases, each in the same namespace:

1. **fill**: a SandboxWarmPool of N, from its create call to N pool sandboxes Ready (a sandbox
   informer) → controller CPU during the fill / N = CPU ms per pool sandbox (create → Ready);
   then the peak RSS (VmHWM) with N sandboxes cached.
2. **claims**: C v1beta1 SandboxClaims with ``spec.warmPoolRef`` sent open loop at R/s → CPU from
   just before the first claim until every claim is Ready (``status.sandbox.name`` set) and the
   pool is back at N Ready members, / C = CPU ms per warm claim (adoption plus the replacement
   sandbox's create → Ready).

The whole machine's CPU (``/proc/stat``) over each phase is reported beside the controller's, and
the controller's share of it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import yaml
from ceiling import ReadyCounter, controller_cpu
from harness import (
    ROOT,
    Bench,
    BenchError,
    machine_cpu_seconds,
    mib_to_mb,
    ready_sandbox,
    template,
    wait_pool_status,
    warm_claim,
    warm_pool,
)

from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS
from agentsandbox.controllers.claim.plan import pool_owner
from agentsandbox.kube.informer import Informer

TITLE = "controller cost with the Deployment's flags: CPU per sandbox and per claim, RSS"
FULL: dict[str, Any] = {"pool": 1000, "claims": 200, "rate": 20.0, "cap_seconds": 900}
SMOKE: dict[str, Any] = {"pool": 5, "claims": 3, "rate": 20.0, "cap_seconds": 120}
POOL = "pool"
DEPLOYMENT = ROOT / "deploy" / "controller.yaml"
# in-cluster only: the harness binds loopback ports and turns leader election off itself
IN_CLUSTER = ("--leader-elect", "--metrics-bind-address", "--health-probe-bind-address")
GOAL_CPU_MS = 5.0
GOAL_RSS_MB = 110.0


def deployment_flags(path: Path = DEPLOYMENT) -> tuple[list[str], list[str]]:
    """(kept, dropped) container args of the agent-sandbox-controller Deployment."""
    for doc in yaml.safe_load_all(path.read_text()):
        if (doc or {}).get("kind") != "Deployment":
            continue
        (container,) = doc["spec"]["template"]["spec"]["containers"]
        args = [str(a) for a in container.get("args") or []]
        dropped = [a for a in args if a.split("=", 1)[0] in IN_CLUSTER]
        return [a for a in args if a not in dropped], dropped
    raise BenchError(f"no Deployment in {path}")


class ClaimWatch:
    """When each wanted claim is first seen Ready=True with ``status.sandbox.name``."""

    def __init__(self, b: Bench, ns: str) -> None:
        self.wanted: set[str] = set()
        self.ready_at: dict[str, float] = {}
        self.sandbox_of: dict[str, str] = {}
        self.all_ready = asyncio.Event()
        self.informer = Informer(b.api, SANDBOX_CLAIMS, ns)
        self.informer.add_handler(self._claim, self._claim)

    def _claim(self, *objs: dict[str, Any]) -> None:
        obj = objs[-1]
        name = obj["metadata"]["name"]
        sandbox = ready_sandbox(obj)
        if sandbox and name in self.wanted and name not in self.ready_at:
            self.ready_at[name] = time.monotonic()
            self.sandbox_of[name] = sandbox
            if len(self.ready_at) == len(self.wanted):
                self.all_ready.set()


async def run(b: Bench, size: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    n, c, rate = int(size["pool"]), int(size["claims"]), float(size["rate"])
    limit = 600.0
    flags, dropped = deployment_flags()
    with b.controller("P5", flags=flags) as proc:
        await proc.wait_ready()
        rss_idle = proc.rss()
        async with b.namespace("p5") as ns:
            await b.api.create(SANDBOX_TEMPLATES, template("tpl"), ns)
            members: set[str] = set()

            def is_member(sb: dict[str, Any]) -> bool:
                if pool_owner(sb) == POOL:
                    members.add(sb["metadata"]["name"])
                    return True
                return False

            cw = ClaimWatch(b, ns)
            cw.informer.start()
            try:
                async with ReadyCounter(b.api, ns, is_member) as pool:
                    await asyncio.wait_for(cw.informer.wait_synced(), 30)
                    # ---------------------------------------------------- fill
                    cpu0, mach0 = controller_cpu(b), machine_cpu_seconds()
                    pool.restart_series()
                    await b.api.create(SANDBOX_WARM_POOLS, warm_pool(POOL, "tpl", n), ns)
                    fill_s = await pool.wait(n, limit)
                    cpu1, mach1 = controller_cpu(b), machine_cpu_seconds()
                    fill_creates = pool.created
                    # the pool's status agrees before the first claim
                    await wait_pool_status(b.api, ns, POOL, n, limit)
                    await asyncio.sleep(2.0)  # the fill's last writes settle
                    rss_filled = proc.rss()
                    proc.check()
                    # ---------------------------------------------------- claims
                    names = [f"c-{i:04d}" for i in range(c)]
                    cw.wanted = set(names)
                    errors: list[str] = []

                    async def send(name: str) -> None:
                        try:
                            await b.api.create(SANDBOX_CLAIMS, warm_claim(name, POOL), ns)
                        except Exception as err:  # counted, reported
                            errors.append(repr(err))

                    cpu2, mach2 = controller_cpu(b), machine_cpu_seconds()
                    claims_t0 = time.monotonic()
                    claims_at = claims_t0 - pool.t0
                    tasks: list[asyncio.Task[None]] = []
                    for i, name in enumerate(names):  # open loop: due times only
                        delay = claims_t0 + i / rate - time.monotonic()
                        if delay > 0:
                            await asyncio.sleep(delay)
                        tasks.append(asyncio.create_task(send(name)))
                    await asyncio.gather(*tasks)
                    try:
                        await asyncio.wait_for(cw.all_ready.wait(), limit)
                    except TimeoutError:
                        raise BenchError(
                            f"only {len(cw.ready_at)} of {c} claims Ready "
                            f"({len(errors)} create errors)"
                        ) from None
                    claims_s = time.monotonic() - claims_t0
                    # the pool is refilled: N Ready members again (adopted ones have left it)
                    await pool.wait(n, limit)
                    refilled_s = time.monotonic() - claims_t0
                    cpu3, mach3 = controller_cpu(b), machine_cpu_seconds()
                    total_creates = pool.created
                    rss_end = proc.rss()
                    proc.check()
            finally:
                await cw.informer.stop()
    warm = sum(1 for k, sb in cw.sandbox_of.items() if sb in members)
    fill_cpu, claim_cpu = cpu1 - cpu0, cpu3 - cpu2
    fill_mach, claim_mach = mach1 - mach0, mach3 - mach2
    per_sandbox_ms = round(fill_cpu * 1000 / max(1, fill_creates), 2)
    per_claim_ms = round(claim_cpu * 1000 / c, 2)
    return {
        "pool": n,
        "claims": c,
        "rate": rate,
        "flags": list(proc.flags),
        "deployment_args_dropped": dropped,
        "namespace": ns,
        "fill": {
            "seconds": round(fill_s, 2),
            "creates": fill_creates,
            "controller_cpu_seconds": round(fill_cpu, 2),
            "machine_cpu_seconds": round(fill_mach, 2),
            "controller_share": round(fill_cpu / fill_mach, 3) if fill_mach else None,
        },
        "claim_phase": {
            "started_after_fill_start": round(claims_at, 2),
            "claims_ready_seconds": round(claims_s, 2),
            "refilled_seconds": round(refilled_s, 2),
            "claims_ready": len(cw.ready_at),
            "warm_hits": warm,
            "create_errors": len(errors),
            "pool_creates_during": total_creates - fill_creates,
            "controller_cpu_seconds": round(claim_cpu, 2),
            "machine_cpu_seconds": round(claim_mach, 2),
            "controller_share": round(claim_cpu / claim_mach, 3) if claim_mach else None,
        },
        "rss_mib": {
            "idle": {"now": rss_idle[0], "peak": rss_idle[1]},
            "filled": {"now": rss_filled[0], "peak": rss_filled[1]},
            "end": {"now": rss_end[0], "peak": rss_end[1]},
        },
        "fill_series": pool.series,
        "figures": {
            "cpu_ms_per_pool_sandbox": per_sandbox_ms,
            "cpu_ms_per_warm_claim": per_claim_ms,
            "peak_rss_mb_filled": mib_to_mb(rss_filled[1]),
            "peak_rss_mb_end": mib_to_mb(rss_end[1]),
            "fill_seconds": round(fill_s, 2),
            "controller_cpu_share_fill": round(fill_cpu / fill_mach, 3) if fill_mach else 0.0,
            "controller_cpu_share_claims": round(claim_cpu / claim_mach, 3) if claim_mach else 0.0,
            "warm_hits": warm,
        },
    }


def rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    f = result["figures"]
    fill, cl = result["fill"], result["claim_phase"]
    n, c = result["pool"], result["claims"]
    return [
        (f"CPU per pool sandbox (fill of {n})", f"{f['cpu_ms_per_pool_sandbox']} ms", "≤ 5 ms"),
        (
            f"CPU per warm claim ({c} at {result['rate']:g}/s, incl. refill)",
            f"{f['cpu_ms_per_warm_claim']} ms",
            "",
        ),
        (f"peak RSS with {n} sandboxes cached", f"{f['peak_rss_mb_filled']} MB", "≤ 110 MB"),
        ("peak RSS at the end", f"{f['peak_rss_mb_end']} MB", ""),
        (
            "controller / machine CPU, fill",
            f"{fill['controller_cpu_seconds']} s / {fill['machine_cpu_seconds']} s "
            f"({f['controller_cpu_share_fill']:.0%})",
            "",
        ),
        (
            "controller / machine CPU, claims",
            f"{cl['controller_cpu_seconds']} s / {cl['machine_cpu_seconds']} s "
            f"({f['controller_cpu_share_claims']:.0%})",
            "",
        ),
        ("claims Ready, warm", f"{cl['claims_ready']} / {c}, {cl['warm_hits']} warm", f"{c}"),
        (f"fill 0 → {n} Ready", f"{fill['seconds']} s", ""),
    ]


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bars) = plt.subplots(1, 2, figsize=(12, 4.5))
    s = result["fill_series"]
    ax.step([p[0] for p in s], [p[1] for p in s], where="post", label="Ready pool sandboxes")
    ax.axvline(result["fill"]["seconds"], color="grey", linestyle=":", label="fill done")
    ax.axvline(
        result["claim_phase"]["started_after_fill_start"],
        color="tab:red",
        linestyle="--",
        label=f"{result['claims']} claims start",
    )
    ax.set_xlabel("seconds after the pool was created")
    ax.set_ylabel("Ready pool sandboxes")
    ax.set_title(f"P5 (Deployment flags): fill of {result['pool']}, then {result['claims']} claims")
    ax.legend(loc="lower right")
    phases = ["fill", "claim_phase"]
    ctrl = [result[p]["controller_cpu_seconds"] for p in phases]
    mach = [result[p]["machine_cpu_seconds"] for p in phases]
    x = range(len(phases))
    bars.bar([i - 0.2 for i in x], mach, width=0.4, label="whole machine")
    bars.bar([i + 0.2 for i in x], ctrl, width=0.4, label="controller")
    bars.set_xticks(list(x), ["fill", "claims + refill"])
    bars.set_ylabel("CPU seconds")
    f = result["figures"]
    bars.set_title(
        f"{f['cpu_ms_per_pool_sandbox']} ms/sandbox, {f['cpu_ms_per_warm_claim']} ms/claim, "
        f"peak RSS {f['peak_rss_mb_filled']} MB"
    )
    bars.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


GOALS = (
    ("P5 CPU per pool sandbox", "<= 5 ms"),
    ("P5 peak RSS with 1000 sandboxes cached", "<= 110 MB"),
)


def goals(result: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    f = result["figures"]
    n = result["pool"]
    return [
        (
            "P5 CPU per pool sandbox",
            f"<= {GOAL_CPU_MS:g} ms",
            f"{f['cpu_ms_per_pool_sandbox']} ms (controller "
            f"{f['controller_cpu_share_fill']:.0%} of the machine's busy CPU during the fill)",
            f["cpu_ms_per_pool_sandbox"] <= GOAL_CPU_MS,
        ),
        (
            f"P5 peak RSS with {n} sandboxes cached",
            f"<= {GOAL_RSS_MB:g} MB",
            f"{f['peak_rss_mb_filled']} MB",
            f["peak_rss_mb_filled"] <= GOAL_RSS_MB,
        ),
    ]
