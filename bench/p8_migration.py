"""P8 — the status migration: an upgrade from our earlier release at P7's size.

Our earlier release wrote a Sandbox's status without upstream v1.0.1's ``Suspended`` (False,
``NotSuspended``) and ``PodScheduled`` conditions and without ``status.nodeName``. A controller
upgraded in place finds every Sandbox in that shape and gives each one status write on its first
pass. This scenario measures that pass:

1. a controller (the gate flags) fills 20 pools to ``sandboxes`` Ready members and stops;
2. the bench rewrites every member's status to the earlier release's shape (only ``Ready``, no
   ``nodeName``), as the earlier release left it;
3. a controller with the shipped Deployment's flags starts, and the bench times until every
   Sandbox carries the new conditions, counts the status writes in the apiserver's audit log
   (per second, and any 429), and meanwhile probes the API server with a GET every
   ``probe_interval`` seconds, against a baseline taken just before.

"Floods the API server" is read as: the probe's p99 during the pass above 1 s, or any 429 the
API server answered the pass with. A flood would call for pacing; the figures say whether it does.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from pathlib import Path
from typing import Any

from harness import Bench, BenchError, mib_to_mb, percentile, template, until, warm_pool
from p5_cost import deployment_flags
from p7_scale import OUR_AGENT, Pools, _wall, pool_name, split

from agentsandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS, SANDBOXES
from agentsandbox.kube.client import PatchType
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.resources import NAMESPACES

TITLE = "Status migration: 10 000 Sandboxes of our earlier release get v1.0.1's conditions"
FULL: dict[str, Any] = {
    "pools": 20,
    "sandboxes": 10000,
    "rewrite_concurrency": 50,
    "probe_interval": 0.1,
    "baseline_probes": 50,
    "converge_limit": 900,
    "cap_seconds": 1800,
}
SMOKE: dict[str, Any] = {
    "pools": 2,
    "sandboxes": 20,
    "rewrite_concurrency": 10,
    "probe_interval": 0.1,
    "baseline_probes": 5,
    "converge_limit": 120,
    "cap_seconds": 300,
}
TEMPLATE = "tpl"
PROBE_P99_MAX_MS = 1000.0
NEW_CONDITIONS = ("Suspended", "PodScheduled")


def migrated(sb: dict[str, Any]) -> bool:
    have = {c.get("type") for c in (sb.get("status") or {}).get("conditions") or ()}
    return all(t in have for t in NEW_CONDITIONS)


def earlier_shape(sb: dict[str, Any]) -> dict[str, Any]:
    """The merge patch that puts a status back in the earlier release's shape."""
    conditions = [
        c for c in (sb.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"
    ]
    return {"status": {"conditions": conditions, "nodeName": None}}


class Migration:
    """When each Sandbox of the namespace was first seen with the new conditions."""

    def __init__(self, b: Bench, ns: str, names: set[str], clock_zero: float) -> None:
        self.names = names
        self.zero = clock_zero
        self.at: dict[str, float] = {}
        self.changed = asyncio.Event()
        self.informer = Informer(b.api, SANDBOXES, ns)
        self.informer.add_handler(self._seen, self._seen)

    def _seen(self, *objs: dict[str, Any]) -> None:
        sb = objs[-1]
        name = sb["metadata"]["name"]
        if name in self.names and name not in self.at and migrated(sb):
            self.at[name] = time.monotonic()
            self.changed.set()

    def done(self) -> bool:
        return len(self.at) == len(self.names)


async def probe(b: Bench, ns: str, interval: float, out: list[tuple[float, float]]) -> None:
    """GET the namespace every ``interval`` s: (monotonic start, milliseconds)."""
    while True:
        t0 = time.monotonic()
        await b.api.get(NAMESPACES, ns)
        out.append((t0, (time.monotonic() - t0) * 1000.0))
        await asyncio.sleep(interval)


def _ms(values: list[float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {"n": len(values)}
    for key, p in (("p50", 50), ("p99", 99), ("max", 100)):
        v = percentile(values, p)
        out[key] = None if v is None else round(v, 1)
    return out


async def run(b: Bench, size: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    npools, total = int(size["pools"]), int(size["sandboxes"])
    limit = float(size["converge_limit"])
    names = [pool_name(i) for i in range(npools)]
    async with b.namespace("p8") as ns, Pools(b.api, ns, names) as pools:
        await b.api.create(SANDBOX_TEMPLATES, template(TEMPLATE), ns)
        # 1. the fill, by a controller with the gate flags
        t0 = time.monotonic()
        with b.controller("P8-fill") as fill:
            await fill.wait_ready()
            for name, replicas in zip(names, split(total, npools), strict=True):
                pools.want[name] = replicas
                await b.api.create(SANDBOX_WARM_POOLS, warm_pool(name, TEMPLATE, replicas), ns)
            await pools.until(pools.converged, limit, f"{total} sandboxes Ready")
        fill_s = time.monotonic() - t0
        print(f"P8: {total} Ready in {fill_s:.1f} s; the fill controller stopped", flush=True)

        # 2. every member's status as the earlier release left it
        members = {s for group in pools.ready.values() for s in group}
        if len(members) != total:
            raise BenchError(f"P8: {len(members)} Ready members, {total} wanted")
        sem = asyncio.Semaphore(int(size["rewrite_concurrency"]))

        async def rewrite(name: str) -> None:
            async with sem:
                sb = await b.api.get(SANDBOXES, name, ns)
                await b.api.patch(
                    SANDBOXES,
                    name,
                    earlier_shape(sb),
                    ns,
                    patch_type=PatchType.MERGE,
                    subresource="status",
                )

        t0 = time.monotonic()
        await asyncio.gather(*(rewrite(n) for n in sorted(members)))
        rewrite_s = time.monotonic() - t0
        listed = (await b.api.list(SANDBOXES, ns)).items
        left_new = sum(1 for sb in listed if migrated(sb))
        if left_new:
            raise BenchError(f"P8: {left_new} Sandboxes still carry the new conditions")
        print(f"P8: {total} statuses rewritten in {rewrite_s:.1f} s", flush=True)

        # 3. the upgraded controller, with the shipped Deployment's flags
        probes: list[tuple[float, float]] = []
        baseline_task = asyncio.create_task(probe(b, ns, float(size["probe_interval"]), probes))
        await until(
            asyncio.Event(),
            lambda: len(probes) >= int(size["baseline_probes"]),
            60.0,
            "P8: baseline probes",
        )
        baseline_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await baseline_task
        baseline = [ms for _, ms in probes]
        probes.clear()

        flags, _ = deployment_flags()
        audit_start = b.audit_offset()
        wall0 = time.time()
        start = time.monotonic()
        watch = Migration(b, ns, members, start)
        watch.informer.start()
        await watch.informer.wait_synced()
        if watch.at:
            raise BenchError(f"P8: {len(watch.at)} Sandboxes migrated before the controller ran")
        task = asyncio.create_task(probe(b, ns, float(size["probe_interval"]), probes))
        try:
            with b.controller("P8", flags=flags) as proc:
                await proc.wait_ready(limit=120.0)
                ready_s = time.monotonic() - start
                await until(watch.changed, watch.done, limit, f"P8: {total} Sandboxes migrated")
                done = time.monotonic()
                migrate_s = done - start
                rss_now, rss_peak = proc.rss()
                cpu = proc.cpu()
                # a few seconds more: no second write per Sandbox follows
                await asyncio.sleep(3.0)
                window = await b.audit_window(audit_start)
                flags_used = list(proc.flags)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await watch.informer.stop()
        for sb in (await b.api.list(SANDBOXES, ns)).items:
            if not migrated(sb):
                raise BenchError(f"P8: {sb['metadata']['name']} lost its new conditions")

    writes: list[float] = []
    refused = 0
    for ev in window.events():
        ref = ev.get("objectRef") or {}
        if (
            ref.get("namespace") == ns
            and ref.get("resource") == "sandboxes"
            and ref.get("subresource") == "status"
            and ev.get("verb") in ("patch", "update", "apply")
            and (ev.get("userAgent") or "").split(" ")[0] == OUR_AGENT
        ):
            writes.append(_wall(ev["requestReceivedTimestamp"]) - wall0)
            if (ev.get("responseStatus") or {}).get("code") == 429:
                refused += 1
    per_second = Counter(int(t) for t in writes)
    during = [ms for t, ms in probes if t <= done]
    firsts = sorted(t - start for t in watch.at.values())
    series = [(round(t, 2), i + 1) for i, t in enumerate(firsts)]
    step = max(1, len(series) // 400)
    figures = {
        "sandboxes": total,
        "migrate_seconds": round(migrate_s, 1),
        "controller_ready_seconds": round(ready_s, 1),
        "status_writes": len(writes),
        "status_writes_per_sandbox": round(len(writes) / total, 3),
        "status_writes_peak_per_second": max(per_second.values(), default=0),
        "status_writes_mean_per_second": round(len(writes) / migrate_s, 1) if migrate_s else None,
        "writes_answered_429": refused,
        "probe_baseline_ms": _ms(baseline),
        "probe_during_ms": _ms(during),
        "controller_cpu_seconds": round(cpu, 1),
        "cpu_ms_per_sandbox": round(cpu * 1000 / total, 2),
        "rss_mib": {"now": rss_now, "peak": rss_peak},
        "rss_peak_mb": mib_to_mb(rss_peak),
    }
    return {
        "namespace": ns,
        "pools": npools,
        "fill_seconds": round(fill_s, 1),
        "rewrite_seconds": round(rewrite_s, 1),
        "migrated_series": series[::step] + series[-1:],
        "probe_series": [(round(t - start, 2), round(ms, 1)) for t, ms in probes],
        "flags": flags_used,
        "figures": figures,
    }


def flooded(f: dict[str, Any]) -> bool:
    p99 = f["probe_during_ms"]["p99"]
    return bool(f["writes_answered_429"]) or (p99 is not None and p99 > PROBE_P99_MAX_MS)


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, lat) = plt.subplots(1, 2, figsize=(12, 4.5))
    s = result["migrated_series"]
    ax.step([p[0] for p in s], [p[1] for p in s], where="post")
    ax.set_xlabel("seconds after the upgraded controller started")
    ax.set_ylabel("Sandboxes with v1.0.1's conditions")
    ax.set_title(f"P8: {result['figures']['sandboxes']} Sandboxes migrated")
    p = result["probe_series"]
    lat.plot([x[0] for x in p], [x[1] for x in p], ".", markersize=3)
    lat.axhline(PROBE_P99_MAX_MS, color="tab:red", lw=0.8, label="1 s")
    lat.set_xlabel("seconds after the upgraded controller started")
    lat.set_ylabel("GET namespace (ms)")
    lat.set_title("API server probe during the pass")
    lat.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    f = result["figures"]
    n = f["sandboxes"]
    base, dur = f["probe_baseline_ms"], f["probe_during_ms"]
    return [
        (
            f"{n} Sandboxes migrated, from the controller's start",
            f"{f['migrate_seconds']} s (caches synced after {f['controller_ready_seconds']} s)",
            "",
        ),
        (
            "status writes per Sandbox",
            f"{f['status_writes_per_sandbox']} ({f['status_writes']} writes)",
            "1",
        ),
        (
            "status writes per second, peak / mean",
            f"{f['status_writes_peak_per_second']} / {f['status_writes_mean_per_second']}",
            "",
        ),
        ("writes the API server answered 429", str(f["writes_answered_429"]), "0"),
        (
            "API server probe (GET) p50 / p99, before → during",
            f"{base['p50']} / {base['p99']} ms → {dur['p50']} / {dur['p99']} ms",
            f"p99 <= {PROBE_P99_MAX_MS:g} ms",
        ),
        (
            "controller CPU for the pass",
            f"{f['controller_cpu_seconds']} s ({f['cpu_ms_per_sandbox']} ms per Sandbox)",
            "",
        ),
        (
            "controller RSS now / peak",
            f"{f['rss_mib']['now']} / {f['rss_mib']['peak']} MiB",
            "",
        ),
    ]


GOALS = (
    ("P8 status writes per Sandbox in the migration pass", "1"),
    ("P8 the migration pass does not flood the API server", "probe p99 <= 1 s, no 429"),
)


def goals(result: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    f = result["figures"]
    dur = f["probe_during_ms"]
    return [
        (
            f"P8 status writes per Sandbox in the migration pass ({f['sandboxes']})",
            "1",
            f"{f['status_writes_per_sandbox']}",
            f["status_writes"] == f["sandboxes"],
        ),
        (
            "P8 the migration pass does not flood the API server",
            f"probe p99 <= {PROBE_P99_MAX_MS:g} ms, no 429",
            f"p99 {dur['p99']} ms, {f['writes_answered_429']} answered 429",
            not flooded(f),
        ),
    ]
