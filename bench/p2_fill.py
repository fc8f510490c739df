"""P2 — pool fill: one SandboxWarmPool 0 → N Ready, against the same-run ceiling.

One controller process (upstream's gate flags) runs throughout. First the **ceiling**
(``ceiling.py``): a bare async loop creates the same N Sandbox objects (the pool's blueprint
without its owner) with a QPS 1000 / burst 2000 client at concurrency 16, 64 and 300, each in a
fresh namespace; the controller's Sandbox controller and kwok make them Ready; the fastest run is
the ceiling. Then the **pool**: a SandboxWarmPool with ``replicas: N`` in a fresh namespace, timed
from its create call to the informer event that shows the N-th pool sandbox Ready (the pool's own
``status.readyReplicas`` must agree afterwards). Reports seconds, ratio pool / ceiling, distinct
sandbox creates seen (must equal N) and the controller's CPU seconds per phase.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from ceiling import CONCURRENCIES, ReadyCounter, ceiling, controller_cpu
from harness import Bench, machine_cpu_seconds, template, wait_pool_status, warm_pool

from agentsandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS
from agentsandbox.controllers.claim.plan import pool_owner

TITLE = "pool fill 0 → N Ready vs the bare-create ceiling"
FULL: dict[str, Any] = {"replicas": 1000, "concurrencies": list(CONCURRENCIES), "cap_seconds": 900}
SMOKE: dict[str, Any] = {"replicas": 5, "concurrencies": list(CONCURRENCIES), "cap_seconds": 120}
POOL = "pool"
GOAL_RATIO = 1.15


async def pool_fill(b: Bench, n: int, limit: float) -> dict[str, Any]:
    """A SandboxWarmPool of ``n`` in a fresh namespace, 0 → n Ready."""
    async with b.namespace("p2") as ns:
        await b.api.create(SANDBOX_TEMPLATES, template("tpl"), ns)
        async with ReadyCounter(b.api, ns, lambda sb: pool_owner(sb) == POOL) as counter:
            cpu0, mach0 = controller_cpu(b), machine_cpu_seconds()
            counter.restart_series()
            await b.api.create(SANDBOX_WARM_POOLS, warm_pool(POOL, "tpl", n), ns)
            seconds = await counter.wait(n, limit)
            cpu1, mach1 = controller_cpu(b), machine_cpu_seconds()
            await wait_pool_status(b.api, ns, POOL, n, limit)  # the pool's own status agrees
            status_s = time.monotonic() - counter.t0
            await asyncio.sleep(2.0)  # late extra creates would show up here
            creates = counter.created
    return {
        "namespace": ns,
        "seconds": round(seconds, 2),
        "status_seconds": round(status_s, 2),
        "creates_seen": creates,
        "controller_cpu_seconds": round(cpu1 - cpu0, 2),
        "machine_cpu_seconds": round(mach1 - mach0, 2),
        "series": counter.series,
    }


async def run(b: Bench, size: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    n = int(size["replicas"])
    limit = 600.0
    with b.controller("P2") as proc:
        await proc.wait_ready()
        ceil = await ceiling(b, n, tuple(size["concurrencies"]), limit)
        proc.check()
        pool = await pool_fill(b, n, limit)
        proc.check()
        print(f"  pool: {pool['seconds']} s for {n} Ready", flush=True)
        rss_now, rss_peak = proc.rss()
        flags = list(proc.flags)
    ratio = round(pool["seconds"] / ceil["seconds"], 3)
    best = next(r for r in ceil["runs"] if r["concurrency"] == ceil["concurrency"])
    return {
        "replicas": n,
        "flags": flags,
        "ceiling": ceil,
        "pool": pool,
        "ratio": ratio,
        "controller_rss_mib": {"end": rss_now, "peak": rss_peak},
        "figures": {
            "pool_seconds": pool["seconds"],
            "ceiling_seconds": ceil["seconds"],
            "ceiling_concurrency": ceil["concurrency"],
            "ratio": ratio,
            "creates_seen": pool["creates_seen"],
            "controller_cpu_pool_seconds": pool["controller_cpu_seconds"],
            "controller_cpu_ceiling_seconds": best["controller_cpu_seconds"],
            "controller_peak_rss_mib": rss_peak,
        },
    }


def rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    f = result["figures"]
    n = result["replicas"]
    runs = ", ".join(f"c={r['concurrency']} {r['seconds']} s" for r in result["ceiling"]["runs"])
    return [
        (f"pool fill 0 → {n} Ready", f"{f['pool_seconds']} s", ""),
        ("ceiling (best bare create loop)", f"{f['ceiling_seconds']} s ({runs})", ""),
        ("ratio pool / ceiling", f"{f['ratio']:.2f}", f"≤ {GOAL_RATIO}"),
        ("sandbox creates seen", str(f["creates_seen"]), f"= {n}"),
        (
            "controller CPU: pool / best ceiling",
            f"{f['controller_cpu_pool_seconds']} s / {f['controller_cpu_ceiling_seconds']} s",
            "",
        ),
    ]


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in result["ceiling"]["runs"]:
        s = r["series"]
        ax.step(
            [p[0] for p in s],
            [p[1] for p in s],
            where="post",
            linestyle="--",
            label=f"ceiling: bare creates, concurrency {r['concurrency']} ({r['seconds']} s)",
        )
    s = result["pool"]["series"]
    ax.step(
        [p[0] for p in s],
        [p[1] for p in s],
        where="post",
        linewidth=2,
        color="black",
        label=f"SandboxWarmPool ({result['pool']['seconds']} s)",
    )
    ax.set_xlabel("seconds")
    ax.set_ylabel("Ready sandboxes")
    ax.set_title(
        f"P2 pool fill 0 → {result['replicas']}: {result['ratio']:.2f} x ceiling "
        f"(goal ≤ {GOAL_RATIO})"
    )
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


GOALS = (("P2 fill 0 -> 1000", "<= 1.15 x ceiling"), ("P2 creates for a pool of 1000", "= 1000"))


def goals(result: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    f = result["figures"]
    n = result["replicas"]
    return [
        (
            f"P2 fill 0 -> {n}",
            f"<= {GOAL_RATIO} x ceiling",
            f"{f['ratio']:.2f} x: {f['pool_seconds']} s vs {f['ceiling_seconds']} s",
            f["ratio"] <= GOAL_RATIO,
        ),
        (f"P2 creates for a pool of {n}", f"= {n}", str(f["creates_seen"]), f["creates_seen"] == n),
    ]
