"""P4 — no over-creation: 20 pools x 25 replicas created at once, 50 warm-pool workers.

A controller with upstream's gate flags except ``--sandbox-warm-pool-concurrent-workers=50``.
In a fresh namespace with one SandboxTemplate, all pools are POSTed at once. Creates are counted
twice, independently:

- a resuming watch (our informer) of the namespace's Sandboxes: distinct uids per pool, and the
  most live (not deleting) members ever seen per pool;
- the apiserver's audit log: ``create`` on ``sandboxes`` in the namespace, accepted (201) and
  attempted (any code).

Once every pool shows ``replicas`` Ready sandboxes and its status agrees, the bench waits a few
seconds more (late extra creates would show up), then counts. Goal: exactly pools x replicas.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ceiling import controller_cpu
from harness import GATE_FLAGS, Bench, BenchError, machine_cpu_seconds, template, warm_pool

from agentsandbox.api.conditions import is_sandbox_ready
from agentsandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS, SANDBOXES
from agentsandbox.controllers.claim.plan import pool_owner
from agentsandbox.kube.informer import Informer

TITLE = "no over-creation: many pools created at once, 50 warm-pool workers"
FULL: dict[str, Any] = {"pools": 20, "replicas": 25, "cap_seconds": 400}
SMOKE: dict[str, Any] = {"pools": 2, "replicas": 3, "cap_seconds": 120}
WORKERS_FLAG = "--sandbox-warm-pool-concurrent-workers"
SETTLE_SECONDS = 5.0


def p4_flags(workers: int = 50) -> tuple[str, ...]:
    """GATE_FLAGS with the warm-pool worker count replaced (not appended twice)."""
    flags = tuple(f for f in GATE_FLAGS if not f.startswith(WORKERS_FLAG + "="))
    return (*flags, f"{WORKERS_FLAG}={workers}")


class CreateWatch:
    """Per pool: distinct sandbox uids ever seen, live members now and at most, Ready now."""

    def __init__(self, b: Bench, ns: str, t0: float) -> None:
        self.t0 = t0
        self.uids: dict[str, set[str]] = {}
        self.live: dict[str, set[str]] = {}
        self.max_live: dict[str, int] = {}
        self.ready: dict[str, set[str]] = {}
        self.series: list[tuple[float, int, int]] = []  # (t, creates, Ready)
        self.unowned = 0
        self.target: tuple[int, int] | None = None  # (pools, replicas)
        self.full = asyncio.Event()
        self.informer = Informer(b.api, SANDBOXES, ns)
        self.informer.add_handler(self._add, self._update, self._delete)

    def _add(self, sb: dict[str, Any]) -> None:
        if pool_owner(sb) is None:
            self.unowned += 1
        self._update(sb, sb)

    def _update(self, old: dict[str, Any], sb: dict[str, Any]) -> None:
        pool = pool_owner(sb) or pool_owner(old)
        if pool is None:
            return
        uid = sb["metadata"]["uid"]
        self.uids.setdefault(pool, set()).add(uid)
        live = self.live.setdefault(pool, set())
        ready = self.ready.setdefault(pool, set())
        if sb["metadata"].get("deletionTimestamp") or pool_owner(sb) != pool:
            live.discard(uid)
            ready.discard(uid)
        else:
            live.add(uid)
            if is_sandbox_ready(sb):
                ready.add(uid)
            else:
                ready.discard(uid)
        self.max_live[pool] = max(self.max_live.get(pool, 0), len(live))
        self._changed()

    def _delete(self, sb: dict[str, Any]) -> None:
        pool = pool_owner(sb)
        if pool is not None:
            self.live.setdefault(pool, set()).discard(sb["metadata"]["uid"])
            self.ready.setdefault(pool, set()).discard(sb["metadata"]["uid"])
            self._changed()

    @property
    def creates(self) -> int:
        return sum(len(u) for u in self.uids.values())

    def _changed(self) -> None:
        ready = sum(len(r) for r in self.ready.values())
        point = (round(time.monotonic() - self.t0, 3), self.creates, ready)
        if not self.series or self.series[-1][1:] != point[1:]:
            self.series.append(point)
        if self.target is not None:
            pools, replicas = self.target
            full = [p for p, r in self.ready.items() if len(r) >= replicas]
            if len(full) >= pools:
                self.full.set()


def audit_creates(events: list[dict[str, Any]], ns: str) -> dict[str, Any]:
    """Sandbox creates the apiserver logged in ``ns``: accepted, attempted, by user agent."""
    accepted = attempted = 0
    agents: Counter[str] = Counter()
    for ev in events:
        ref = ev.get("objectRef") or {}
        if ev.get("verb") != "create" or ref.get("resource") != "sandboxes":
            continue
        if ref.get("subresource") or ref.get("namespace") != ns:
            continue
        attempted += 1
        if (ev.get("responseStatus") or {}).get("code") == 201:
            accepted += 1
            agents[(ev.get("userAgent") or "?").split(" ")[0]] += 1
    return {"accepted": accepted, "attempted": attempted, "by_user_agent": dict(agents)}


async def run(b: Bench, size: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    pools, replicas = int(size["pools"]), int(size["replicas"])
    want = pools * replicas
    limit = 300.0
    names = [f"pool-{i:02d}" for i in range(pools)]
    with b.controller("P4", flags=p4_flags()) as proc:
        await proc.wait_ready()
        async with b.namespace("p4") as ns:
            await b.api.create(SANDBOX_TEMPLATES, template("tpl"), ns)
            w = CreateWatch(b, ns, time.monotonic())
            w.informer.start()
            try:
                await asyncio.wait_for(w.informer.wait_synced(), 30)
                w.target = (pools, replicas)
                audit0 = b.audit_offset()
                cpu0, mach0 = controller_cpu(b), machine_cpu_seconds()
                w.t0 = t0 = time.monotonic()
                w.series = [(0.0, w.creates, 0)]
                await asyncio.gather(
                    *(
                        b.api.create(SANDBOX_WARM_POOLS, warm_pool(name, "tpl", replicas), ns)
                        for name in names
                    )
                )
                try:
                    await asyncio.wait_for(w.full.wait(), limit)
                except TimeoutError:
                    raise BenchError(
                        f"pools not full after {limit:.0f} s: {w.creates} creates seen, "
                        f"Ready per pool {sorted(len(r) for r in w.ready.values())}"
                    ) from None
                fill_s = time.monotonic() - t0
                cpu1, mach1 = controller_cpu(b), machine_cpu_seconds()
                deadline = time.monotonic() + limit
                while True:  # every pool's own status agrees
                    items = (await b.api.list(SANDBOX_WARM_POOLS, ns)).items
                    ok = [
                        p
                        for p in items
                        if ((p.get("status") or {}).get("readyReplicas") or 0) == replicas
                    ]
                    if len(ok) == pools:
                        break
                    if time.monotonic() > deadline:
                        raise BenchError(f"only {len(ok)} of {pools} pool statuses show full")
                    await asyncio.sleep(0.2)
                status_s = time.monotonic() - t0
                await asyncio.sleep(SETTLE_SECONDS)  # late extra creates would show up now
                for _ in range(5):  # the audit log is written asynchronously (batch mode)
                    window = await b.audit_window(audit0)
                    audit = audit_creates(window.events(), ns)
                    if audit["accepted"] >= w.creates:
                        break
                proc.check()
            finally:
                await w.informer.stop()
    per_pool = {p: len(u) for p, u in sorted(w.uids.items())}
    max_members = max(w.max_live.values(), default=0)
    return {
        "pools": pools,
        "replicas": replicas,
        "expected_creates": want,
        "flags": list(proc.flags),
        "namespace": ns,
        "fill_seconds": round(fill_s, 2),
        "status_seconds": round(status_s, 2),
        "settle_seconds": SETTLE_SECONDS,
        "creates_informer": w.creates,
        "creates_per_pool": per_pool,
        "max_members_per_pool": dict(sorted(w.max_live.items())),
        "unowned_sandboxes_seen": w.unowned,
        "audit": audit,
        "controller_cpu_seconds": round(cpu1 - cpu0, 2),
        "machine_cpu_seconds": round(mach1 - mach0, 2),
        "series": w.series,
        "figures": {
            "creates_informer": w.creates,
            "creates_audit": audit["accepted"],
            "create_attempts_audit": audit["attempted"],
            "max_members_per_pool": max_members,
            "pools_with_exact_creates": sum(1 for c in per_pool.values() if c == replicas),
            "fill_seconds": round(fill_s, 2),
            "controller_cpu_seconds": round(cpu1 - cpu0, 2),
        },
    }


def rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    f = result["figures"]
    want = result["expected_creates"]
    pools, replicas = result["pools"], result["replicas"]
    return [
        (
            f"distinct Sandbox creates ({pools} x {replicas}), watch",
            str(f["creates_informer"]),
            f"= {want}",
        ),
        ("Sandbox creates accepted, audit log", str(f["creates_audit"]), f"= {want}"),
        ("Sandbox create attempts, audit log", str(f["create_attempts_audit"]), ""),
        ("max live members ever seen in one pool", str(f["max_members_per_pool"]), f"≤ {replicas}"),
        (
            "pools with exactly their replicas created",
            f"{f['pools_with_exact_creates']}",
            f"{pools}",
        ),
        ("fill of all pools", f"{f['fill_seconds']} s", ""),
    ]


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    s = result["series"]
    ax.step([p[0] for p in s], [p[1] for p in s], where="post", label="distinct creates seen")
    ax.step([p[0] for p in s], [p[2] for p in s], where="post", label="Ready pool sandboxes")
    ax.axhline(result["expected_creates"], color="grey", linestyle=":", label="pools x replicas")
    ax.set_xlabel("seconds after the pools were POSTed")
    ax.set_ylabel("sandboxes")
    f = result["figures"]
    ax.set_title(
        f"P4: {result['pools']} pools x {result['replicas']} at once, 50 workers: "
        f"{f['creates_informer']} creates (audit {f['creates_audit']})"
    )
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


GOALS = (
    ("P4 creates, 20 pools x 25 at once", "exactly 500"),
    ("P4 live members of one pool, ever", "<= 25"),
)


def goals(result: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    f = result["figures"]
    want = result["expected_creates"]
    replicas = result["replicas"]
    return [
        (
            f"P4 creates, {result['pools']} pools x {replicas} at once",
            f"exactly {want}",
            f"{f['creates_informer']} (watch), {f['creates_audit']} (audit log)",
            f["creates_informer"] == want and f["creates_audit"] == want,
        ),
        (
            "P4 live members of one pool, ever",
            f"<= {replicas}",
            str(f["max_members_per_pool"]),
            f["max_members_per_pool"] <= replicas,
        ),
    ]
