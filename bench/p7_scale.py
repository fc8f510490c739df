"""P7 — scale: 20 pools in one namespace growing step by step to N sandboxes.

At each step the pools' replicas are raised (merge patches) so that they sum to the step's N,
then the bench waits for convergence (every pool's members Ready per a sandbox watch, and every
pool's ``status.readyReplicas`` agreeing) and measures:

- **no-op passes**: each pool is touched (an annotation patch; the warm-pool controller has no
  predicate on its ``For`` source, so a metadata change enqueues the pool) ``noop_rounds`` times,
  one at a time, and the pass that follows is timed; a 21st ``probe`` pool of a fixed 10
  sandboxes is touched as well and reported apart (its pass should not grow with the namespace);
- **one-replacement passes**: one pool sandbox is deleted (one pool after the other) and the
  bench waits for the pool to be back at full Ready; the pass that recreated it is the warm-pool
  pass whose [start, end] holds the replacement's create in the apiserver's audit log
  (``requestReceivedTimestamp``);
- the controller's RSS (now / peak) and the time to converge.

Per-reconcile durations come from the controller's own log: it runs with
``--zap-log-level=debug`` and logs one ``"reconciled"`` line per pass with ``controller``,
``request`` and ``duration_ms`` (``kube/controller.py``); the bench tails that file. At the last
step a churn of ``churn`` (10 %) of the sandboxes is deleted at once and timed until every pool
is back Ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import random
import time
from pathlib import Path
from typing import Any

from harness import Bench, BenchError, mib_to_mb, percentile, template, until, warm_pool

from agentsandbox.api.conditions import is_sandbox_ready
from agentsandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS, SANDBOXES
from agentsandbox.controllers.claim.plan import pool_owner
from agentsandbox.controllers.warmpool.controller import CONTROLLER_NAME as POOL_CONTROLLER
from agentsandbox.kube import transport as kube_transport
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import NotFound
from agentsandbox.kube.informer import Informer

TITLE = "Scale: 20 pools in one namespace, reconcile time, memory, convergence"
# FULL: the pool worker fills at most one 300-sandbox batch per pass, one pool at a time; the
# whole of FULL took 551 s on the 2-core machine (shared with other runs): 10k fits its cap
FULL: dict[str, Any] = {
    "pools": 20,
    "steps": [1000, 5000, 10000],
    "noop_rounds": 3,
    "replacements": 20,
    "churn": 0.10,
    "converge_limit": 900,
    "cap_seconds": 1200,
}
SMOKE: dict[str, Any] = {
    "pools": 20,
    "steps": [20, 40],
    "noop_rounds": 1,
    "replacements": 5,
    "churn": 0.10,
    "converge_limit": 120,
    "cap_seconds": 240,
}
TEMPLATE = "tpl"
# a 21st pool of a fixed size: its no-op pass shows whether a pass costs more as the namespace
# grows (an unindexed cache), apart from the 20 pools' own growth
PROBE = "probe"
PROBE_REPLICAS = 10
OUR_AGENT = kube_transport._USER_AGENT.split(" ")[0]
RSS_GOAL_MB = 300.0  # MB (10^6 bytes); /proc gives MiB, converted with mib_to_mb
# "flat": the 20 pools' no-op pass p50 at the last step over the first step at most this
NOOP_FLAT_MAX = 1.5


def pool_name(i: int) -> str:
    return f"pool-{i:02d}"


def split(total: int, pools: int) -> list[int]:
    base, extra = divmod(total, pools)
    return [base + (1 if i < extra else 0) for i in range(pools)]


class ReconcileLog:
    """Tails the controller's JSON log for the warm-pool controller's ``reconciled`` lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.entries: list[dict[str, Any]] = []  # {"request", "end", "start", "ms"}

    def poll(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        cut = data.rfind(b"\n") + 1
        self.offset += cut
        for line in data[:cut].splitlines():
            if b'"reconciled"' not in line or POOL_CONTROLLER.encode() not in line:
                continue
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if rec.get("msg") != "reconciled" or rec.get("controller") != POOL_CONTROLLER:
                    continue
                end, ms = float(rec["ts"]), float(rec["duration_ms"])
                self.entries.append(
                    {"request": rec["request"], "end": end, "start": end - ms / 1000, "ms": ms}
                )

    async def first_after(self, request: str, wall: float, limit: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + limit
        seen = 0
        while True:
            self.poll()
            for e in self.entries[seen:]:
                if e["request"] == request and e["end"] >= wall:
                    return e
            seen = len(self.entries)
            if time.monotonic() > deadline:
                raise BenchError(f"P7: no reconcile of {request} logged within {limit:.0f} s")
            await asyncio.sleep(0.01)


class Pools:
    """Ready members per pool (sandbox informer) and the pools' status (pool informer)."""

    def __init__(self, client: Client, ns: str, names: list[str]) -> None:
        self.ready: dict[str, set[str]] = {n: set() for n in names}
        self.members: dict[str, set[str]] = {n: set() for n in names}
        self.want: dict[str, int] = dict.fromkeys(names, 0)
        self.changed = asyncio.Event()
        self.sandboxes = Informer(client, SANDBOXES, ns)
        self.sandboxes.add_handler(self._sb, self._sb, self._sb_gone)
        self.pools = Informer(client, SANDBOX_WARM_POOLS, ns)
        self.pools.add_handler(self._pool, self._pool)

    def _sb(self, *objs: dict[str, Any]) -> None:
        sb = objs[-1]
        owner, name = pool_owner(sb), sb["metadata"]["name"]
        if owner not in self.ready:
            return
        self.members[owner].add(name)
        if is_sandbox_ready(sb) and not sb["metadata"].get("deletionTimestamp"):
            self.ready[owner].add(name)
        else:
            self.ready[owner].discard(name)
        self.changed.set()

    def _sb_gone(self, sb: dict[str, Any]) -> None:
        name = sb["metadata"]["name"]
        for group in (*self.ready.values(), *self.members.values()):
            group.discard(name)
        self.changed.set()

    def _pool(self, *objs: dict[str, Any]) -> None:
        self.changed.set()

    def status_ready(self, name: str) -> int | None:
        obj = self.pools.get(name, self.ns)
        return None if obj is None else (obj.get("status") or {}).get("readyReplicas")

    def converged(self, names: list[str] | None = None) -> bool:
        for n in names or list(self.want):
            want = self.want[n]
            if len(self.ready[n]) != want or len(self.members[n]) != want:
                return False
            if (self.status_ready(n) or 0) != want:
                return False
        return True

    async def until(self, cond: Any, limit: float, what: str) -> None:
        await until(self.changed, cond, limit, f"P7: {what}")

    async def __aenter__(self) -> Pools:
        self.ns = self.sandboxes.namespace
        for inf in (self.sandboxes, self.pools):
            inf.start()
        await asyncio.gather(self.sandboxes.wait_synced(), self.pools.wait_synced())
        return self

    async def __aexit__(self, *exc: object) -> None:
        for inf in (self.sandboxes, self.pools):
            await inf.stop()


def _wall(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def dist(values: list[float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {"n": len(values)}
    for key, p in (("p50", 50), ("p99", 99), ("max", 100)):
        v = percentile(values, p)
        out[key] = None if v is None else round(v, 2)
    return out


async def run(b: Bench, size: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    npools = int(size["pools"])
    steps = [int(s) for s in size["steps"]]
    limit = float(size["converge_limit"])
    names = [pool_name(i) for i in range(npools)]
    every_pool = [*names, PROBE]
    rng = random.Random(7)
    results: list[dict[str, Any]] = []
    churn: dict[str, Any] = {}
    with b.controller("P7", extra=("--zap-log-level=debug",)) as proc:
        await proc.wait_ready()
        rlog = ReconcileLog(proc.log)
        async with b.namespace("p7") as ns, Pools(b.api, ns, every_pool) as pools:
            await b.api.create(SANDBOX_TEMPLATES, template(TEMPLATE), ns)
            pools.want[PROBE] = PROBE_REPLICAS
            await b.api.create(SANDBOX_WARM_POOLS, warm_pool(PROBE, TEMPLATE, PROBE_REPLICAS), ns)
            for step_i, total in enumerate(steps):
                print(f"P7: step {total} sandboxes", flush=True)
                want = split(total, npools)
                t0 = time.monotonic()
                for name, replicas in zip(names, want, strict=True):
                    pools.want[name] = replicas
                    if step_i == 0:
                        await b.api.create(
                            SANDBOX_WARM_POOLS, warm_pool(name, TEMPLATE, replicas), ns
                        )
                    else:
                        await b.api.patch(
                            SANDBOX_WARM_POOLS, name, {"spec": {"replicas": replicas}}, ns
                        )
                await pools.until(pools.converged, limit, f"{total} sandboxes converged")
                converge_s = time.monotonic() - t0
                print(f"P7: {total} converged in {converge_s:.1f} s", flush=True)
                proc.check()
                await asyncio.sleep(1.0)
                rlog.poll()

                # (a) no-op passes: touch each pool, time the pass that follows
                noop: list[float] = []
                probe: list[float] = []
                for r in range(int(size["noop_rounds"])):
                    for name in every_pool:
                        wall = time.time()
                        await b.api.patch(
                            SANDBOX_WARM_POOLS,
                            name,
                            {"metadata": {"annotations": {"bench/touch": f"{total}-{r}"}}},
                            ns,
                        )
                        e = await rlog.first_after(f"{ns}/{name}", wall)
                        (probe if name == PROBE else noop).append(e["ms"])

                # (b) one-replacement passes: delete one pool sandbox, time the recreating pass
                start = b.audit_offset()
                deletes: list[tuple[str, float]] = []
                for k in range(int(size["replacements"])):
                    name = names[k % npools]
                    if not pools.ready[name]:
                        continue
                    victim = sorted(pools.ready[name])[0]
                    wall = time.time()
                    with contextlib.suppress(NotFound):
                        await b.api.delete(SANDBOXES, victim, ns)
                    deletes.append((name, wall))
                    await pools.until(
                        lambda n=name, v=victim: v not in pools.members[n] and pools.converged([n]),
                        limit,
                        f"{name} replaced {victim}",
                    )
                await asyncio.sleep(0.5)
                window = await b.audit_window(start)
                rlog.poll()
                creates = sorted(
                    _wall(ev["requestReceivedTimestamp"])
                    for ev in window.events()
                    if (ev.get("objectRef") or {}).get("namespace") == ns
                    and (ev.get("objectRef") or {}).get("resource") == "sandboxes"
                    and not (ev.get("objectRef") or {}).get("subresource")
                    and ev.get("verb") == "create"
                    and (ev.get("userAgent") or "").split(" ")[0] == OUR_AGENT
                )
                first_wall = deletes[0][1] if deletes else time.time()
                passes = [e for e in rlog.entries if e["end"] >= first_wall]
                replace: list[float] = []
                unmatched = 0
                for c in creates:
                    hit = [e for e in passes if e["start"] - 0.002 <= c <= e["end"] + 0.002]
                    if hit:
                        replace.append(hit[0]["ms"])
                    else:
                        unmatched += 1
                rss_now, rss_peak = proc.rss()
                step = {
                    "sandboxes": total,
                    "replicas_per_pool": [min(want), max(want)],
                    "converge_seconds": round(converge_s, 1),
                    "noop_reconcile_ms": dist(noop),
                    "probe_noop_reconcile_ms": dist(probe),
                    "replacement_reconcile_ms": dist(replace),
                    "replacements": len(deletes),
                    "replacement_creates_seen": len(creates),
                    "replacement_creates_unmatched": unmatched,
                    "pool_passes_during_replacements": len(passes),
                    "rss_mib": {"now": rss_now, "peak": rss_peak},
                    "controller_cpu_seconds": round(proc.cpu(), 1),
                }
                results.append(step)
                print(f"P7: step {json.dumps(step)}", flush=True)

            # churn: 10 % of the sandboxes at once, time until every pool is back Ready
            every = [(n, s) for n in names for s in sorted(pools.ready[n])]
            victims = rng.sample(every, max(1, round(float(size["churn"]) * len(every))))
            gone = {s for _, s in victims}
            sem = asyncio.Semaphore(50)

            async def kill(sb: str) -> None:
                async with sem:
                    with contextlib.suppress(NotFound):
                        await b.api.delete(SANDBOXES, sb, ns)

            cpu0 = proc.cpu()
            t0 = time.monotonic()
            await asyncio.gather(*(kill(s) for s in gone))
            deleted_s = time.monotonic() - t0
            await pools.until(
                lambda: not any(gone & m for m in pools.members.values()) and pools.converged(),
                limit,
                "churn recovered",
            )
            churn = {
                "sandboxes": len(every),
                "deleted": len(gone),
                "delete_calls_seconds": round(deleted_s, 1),
                "recover_seconds": round(time.monotonic() - t0, 1),
                "controller_cpu_seconds": round(proc.cpu() - cpu0, 1),
                "rss_mib": dict(zip(("now", "peak"), proc.rss(), strict=True)),
            }
            print(f"P7: churn {json.dumps(churn)}", flush=True)
            flags = list(proc.flags)

    first, last = results[0], results[-1]
    figures: dict[str, Any] = {}
    for s in results:
        n = s["sandboxes"]
        figures[f"noop_p50_ms_{n}"] = s["noop_reconcile_ms"]["p50"]
        figures[f"noop_p99_ms_{n}"] = s["noop_reconcile_ms"]["p99"]
        figures[f"probe_noop_p50_ms_{n}"] = s["probe_noop_reconcile_ms"]["p50"]
        figures[f"replace_p50_ms_{n}"] = s["replacement_reconcile_ms"]["p50"]
        figures[f"replace_p99_ms_{n}"] = s["replacement_reconcile_ms"]["p99"]
        figures[f"rss_mib_{n}"] = s["rss_mib"]["now"]
        figures[f"converge_s_{n}"] = s["converge_seconds"]
    f50, l50 = first["noop_reconcile_ms"]["p50"], last["noop_reconcile_ms"]["p50"]
    figures["noop_p50_growth"] = round(l50 / f50, 2) if f50 and l50 else None
    p50s = first["probe_noop_reconcile_ms"]["p50"], last["probe_noop_reconcile_ms"]["p50"]
    figures["probe_noop_p50_growth"] = round(p50s[1] / p50s[0], 2) if all(p50s) else None
    figures["rss_peak_mib"] = last["rss_mib"]["peak"]
    figures["rss_peak_mb"] = mib_to_mb(last["rss_mib"]["peak"])
    figures["churn_recover_s"] = churn["recover_seconds"]
    return {
        "namespace": ns,
        "pools": npools,
        "steps": results,
        "churn": churn,
        "flags": flags,
        "figures": figures,
    }


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = result["steps"]
    xs = [s["sandboxes"] for s in steps]
    fig, (ax, mem) = plt.subplots(1, 2, figsize=(12, 4.5))
    for kind, key, color in (
        ("no-op", "noop_reconcile_ms", "tab:blue"),
        ("one replacement", "replacement_reconcile_ms", "tab:orange"),
    ):
        ax.plot(xs, [s[key]["p50"] for s in steps], "o-", color=color, label=f"{kind} p50")
        ax.plot(xs, [s[key]["p99"] for s in steps], "o--", color=color, label=f"{kind} p99")
    ax.plot(
        xs,
        [s["probe_noop_reconcile_ms"]["p50"] for s in steps],
        "o-",
        color="tab:green",
        label=f"no-op p50, fixed {PROBE_REPLICAS}-sandbox probe pool",
    )
    ax.set_xlabel("sandboxes in the namespace (20 pools)")
    ax.set_ylabel("warm-pool reconcile (ms)")
    ax.set_title("warm-pool reconcile duration per pass")
    ax.set_ylim(bottom=0)
    ax.legend()
    mem.plot(xs, [mib_to_mb(s["rss_mib"]["now"]) for s in steps], "o-", label="RSS now")
    mem.plot(xs, [mib_to_mb(s["rss_mib"]["peak"]) for s in steps], "o--", label="RSS peak")
    mem.axhline(RSS_GOAL_MB, color="tab:red", lw=0.8, label=f"goal {RSS_GOAL_MB:g} MB at 10k")
    mem.set_xlabel("sandboxes")
    mem.set_ylabel("controller RSS (MB)")
    twin = mem.twinx()
    twin.bar(xs, [s["converge_seconds"] for s in steps], width=max(xs) * 0.05, alpha=0.3)
    twin.set_ylabel("time to converge (s)")
    mem.legend(loc="upper left")
    mem.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    for s in result["steps"]:
        n, no, rp = s["sandboxes"], s["noop_reconcile_ms"], s["replacement_reconcile_ms"]
        out.append((f"{n}: no-op reconcile p50/p99", f"{no['p50']} / {no['p99']} ms", ""))
        pr = s["probe_noop_reconcile_ms"]
        out.append(
            (
                f"{n}: no-op reconcile of the {PROBE_REPLICAS}-sandbox probe pool p50/max",
                f"{pr['p50']} / {pr['max']} ms",
                "",
            )
        )
        out.append((f"{n}: one-replacement reconcile p50/p99", f"{rp['p50']} / {rp['p99']} ms", ""))
        goal = f"peak <= {RSS_GOAL_MB:g} MB at 10 000" if n >= 10000 else ""
        rss = s["rss_mib"]
        out.append(
            (
                f"{n}: controller RSS now/peak",
                f"{rss['now']} / {rss['peak']} MiB = {mib_to_mb(rss['now'])} / "
                f"{mib_to_mb(rss['peak'])} MB",
                goal,
            )
        )
        out.append((f"{n}: time to converge", f"{s['converge_seconds']} s", ""))
    c = result["churn"]
    out.append(
        (
            f"churn: {c['deleted']} of {c['sandboxes']} deleted at once",
            f"back Ready in {c['recover_seconds']} s",
            "",
        )
    )
    f = result["figures"]
    out.append(
        (
            "no-op p50 of the 20 pools, last step / first step",
            f"{f['noop_p50_growth']}x",
            f"<= {NOOP_FLAT_MAX:g}x (flat)",
        )
    )
    out.append(
        (
            f"no-op p50 of the {PROBE_REPLICAS}-sandbox probe pool, last step / first step",
            f"{f.get('probe_noop_p50_growth')}x",
            "",
        )
    )
    return out


GOALS = (
    ("P7 controller RSS at 10000 sandboxes (goal at 10 000)", "peak <= 300 MB"),
    ("P7 no-op pass flat 1000 -> 10000 (the 20 pools' p50)", "<= 1.5x"),
)


def goals(result: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    f = result["figures"]
    first, last = result["steps"][0]["sandboxes"], result["steps"][-1]["sandboxes"]
    growth = f["noop_p50_growth"]
    flat = growth is not None and growth <= NOOP_FLAT_MAX
    probe = f.get("probe_noop_p50_growth")
    return [
        (
            f"P7 controller RSS at {last} sandboxes (goal at 10 000)",
            f"peak <= {RSS_GOAL_MB:g} MB",
            f"{f['rss_peak_mb']} MB ({f['rss_peak_mib']} MiB)",
            last >= 10000 and f["rss_peak_mb"] <= RSS_GOAL_MB,
        ),
        (
            f"P7 no-op pass flat {first} -> {last} (the 20 pools' p50)",
            f"<= {NOOP_FLAT_MAX:g}x",
            f"{growth}x: {'flat' if flat else 'not flat'} (the {PROBE_REPLICAS}-sandbox probe "
            f"pool's p50: {probe}x)",
            flat,
        ),
    ]
