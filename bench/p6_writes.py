"""P6 — API writes per warm claim, counted from the apiserver's audit log.

A template and a pool of ``pool`` Ready sandboxes; after a quiet second the audit offset is taken
and ``claims`` v1beta1 SandboxClaims (``spec.warmPoolRef``) are sent open loop at ``rate``/s.
The window closes once every claim is Ready (claim watch), the pool is back at ``pool`` Ready
(sandbox watch and the pool's status), every claim carries its first-Ready annotation, and 3 s
more have passed.

Only writes in the bench namespace count. Our controller is told apart by its user agent (the
``Client`` default, ``agentsandbox/<version>``); the load generator sends its claims through its own
client with a different user agent, so its creates are not counted as ours. Each write of ours is
put on one of two paths:

- **claim path**: writes to the claims, and to the adopted sandboxes and their pods/services
  (the names in the claims' ``status.sandbox.name``) from the claim's create on;
- **replacement**: the pool refilling behind the claims — every sandbox create, and writes to
  sandboxes/pods/services whose name is not an adopted one (or, for a sandbox the pool created
  in the window and a later claim adopted, made before that claim was created);
- **pool**: the pools' own status writes.

Events are split the same way by the object their name starts with. The goal figure is the
claim path's writes to ``sandboxes`` and ``sandboxclaims`` (any subresource) per warm claim.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections import Counter
from pathlib import Path
from typing import Any

from harness import (
    Bench,
    BenchError,
    count_by,
    template,
    until,
    wait_pool_status,
    warm_claim,
    warm_pool,
)

from agentsandbox.api import keys
from agentsandbox.api.conditions import is_condition_true, is_sandbox_ready
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.controllers.claim.plan import pool_owner
from agentsandbox.kube import transport as kube_transport
from agentsandbox.kube.client import Client
from agentsandbox.kube.config import load_kubeconfig
from agentsandbox.kube.informer import Informer

TITLE = "API writes per warm claim (apiserver audit log)"
FULL: dict[str, Any] = {"pool": 120, "claims": 100, "rate": 10.0, "cap_seconds": 240}
SMOKE: dict[str, Any] = {"pool": 4, "claims": 3, "rate": 10.0, "cap_seconds": 120}

POOL = "pool"
TEMPLATE = "tpl"
# count_by keeps the first word of the user agent
OUR_AGENT = kube_transport._USER_AGENT.split(" ")[0]
LOADGEN_AGENT = "agentsandbox-bench-loadgen/p6"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
CLAIM_RESOURCES = ("sandboxes", "sandboxclaims")
OBJECT_RESOURCES = ("sandboxes", "pods", "services")
GOAL = 3.0


class Watch:
    """Pool Ready members (sandbox informer) and claim readiness/annotations (claim informer)."""

    def __init__(self, client: Client, ns: str) -> None:
        self.pool_ready: set[str] = set()
        self.members: set[str] = set()
        self.wanted: set[str] = set()
        self.ready_at: dict[str, float] = {}
        self.sandbox_of: dict[str, str] = {}
        self.annotated: set[str] = set()
        self.changed = asyncio.Event()
        self.sandboxes = Informer(client, SANDBOXES, ns)
        self.sandboxes.add_handler(self._sandbox, self._sandbox, self._sandbox_gone)
        self.claims = Informer(client, SANDBOX_CLAIMS, ns)
        self.claims.add_handler(self._claim, self._claim)

    def _sandbox(self, *objs: dict[str, Any]) -> None:
        sb = objs[-1]
        name = sb["metadata"]["name"]
        if pool_owner(sb) == POOL:
            self.members.add(name)
        if (
            pool_owner(sb) == POOL
            and is_sandbox_ready(sb)
            and not sb["metadata"].get("deletionTimestamp")
        ):
            self.pool_ready.add(name)
        else:
            self.pool_ready.discard(name)
        self.changed.set()

    def _sandbox_gone(self, sb: dict[str, Any]) -> None:
        self.pool_ready.discard(sb["metadata"]["name"])
        self.changed.set()

    def _claim(self, *objs: dict[str, Any]) -> None:
        obj = objs[-1]
        name = obj["metadata"]["name"]
        if name not in self.wanted:
            return
        status = obj.get("status") or {}
        sandbox = (status.get("sandbox") or {}).get("name")
        if (
            sandbox
            and name not in self.ready_at
            and is_condition_true(status.get("conditions"), "Ready")
        ):
            self.ready_at[name] = time.monotonic()
            self.sandbox_of[name] = sandbox
        annotations = obj["metadata"].get("annotations") or {}
        if keys.ANNOTATION_CLAIM_FIRST_READY_AT in annotations:
            self.annotated.add(name)
        self.changed.set()

    async def until(self, cond: Any, limit: float, what: str) -> None:
        await until(self.changed, cond, limit, f"P6: {what}")

    async def __aenter__(self) -> Watch:
        for inf in (self.sandboxes, self.claims):
            inf.start()
        await asyncio.gather(self.sandboxes.wait_synced(), self.claims.wait_synced())
        return self

    async def __aexit__(self, *exc: object) -> None:
        for inf in (self.sandboxes, self.claims):
            await inf.stop()


def _wall(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _code(ev: dict[str, Any]) -> int:
    """The response code (a write refused with 409, 404, ... still cost the apiserver)."""
    return int((ev.get("responseStatus") or {}).get("code") or 0)


def classify(ev: dict[str, Any], adopted_at: dict[str, float], claims: set[str]) -> str:
    """``claim`` / ``replacement`` / ``pool`` for one write of ours. ``adopted_at`` maps each
    adopted sandbox to the time its claim was created: a write to that sandbox (or its pod,
    service, events) before then is the pool's work on a sandbox it created in the window and a
    later claim adopted."""
    ref = ev.get("objectRef") or {}
    res, name, verb = ref.get("resource", ""), ref.get("name") or "", ev.get("verb")
    if res == "sandboxclaims":
        return "claim"
    if res == "events":
        name = name.rsplit(".", 1)[0]
        if name in claims:
            return "claim"
    elif res not in OBJECT_RESOURCES:
        return "pool"  # the pools' own status writes (and anything else of ours)
    if (res == "sandboxes" and verb == "create") or name not in adopted_at:
        return "replacement"
    at = ev.get("requestReceivedTimestamp")
    return "replacement" if at and _wall(at) < adopted_at[name] else "claim"


async def run(b: Bench, size: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    pool, n, rate = int(size["pool"]), int(size["claims"]), float(size["rate"])
    limit = 120.0
    # the load generator's own client: a user agent of its own, so its writes are not ours
    loadgen = Client(
        await load_kubeconfig(str(b.cluster.kubeconfig)),
        qps=0,
        pool_size=100,
        user_agent=LOADGEN_AGENT,
    )
    try:
        with b.controller("P6") as proc:
            await proc.wait_ready()
            async with b.namespace("p6") as ns, Watch(b.api, ns) as w:
                await b.api.create(SANDBOX_TEMPLATES, template(TEMPLATE), ns)
                t_fill = time.monotonic()
                await b.api.create(SANDBOX_WARM_POOLS, warm_pool(POOL, TEMPLATE, pool), ns)
                await w.until(lambda: len(w.pool_ready) >= pool, limit, f"pool of {pool} Ready")
                await wait_pool_status(b.api, ns, POOL, pool, limit)
                fill_s = time.monotonic() - t_fill
                await asyncio.sleep(1.0)  # a quiet second before the window opens
                start = b.audit_offset()

                names = [f"c-{i:04d}" for i in range(n)]
                w.wanted = set(names)
                errors: list[str] = []

                async def send(name: str) -> None:
                    try:
                        await loadgen.create(SANDBOX_CLAIMS, warm_claim(name, POOL), ns)
                    except Exception as err:  # counted, reported
                        errors.append(f"{name}: {err!r}")

                t0 = time.monotonic() + 0.05
                tasks: list[asyncio.Task[None]] = []
                for i, name in enumerate(names):  # open loop: due times only
                    delay = t0 + i / rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    tasks.append(asyncio.create_task(send(name)))
                await asyncio.gather(*tasks)
                if errors:
                    raise BenchError(f"P6: {len(errors)} claim creates failed: {errors[:3]}")
                await w.until(lambda: len(w.ready_at) == n, limit, f"{n} claims Ready")
                claims_ready_s = time.monotonic() - t0
                await w.until(lambda: len(w.pool_ready) >= pool, limit, "pool refilled")
                await wait_pool_status(b.api, ns, POOL, pool, limit)
                await w.until(
                    lambda: w.annotated >= w.wanted, limit, "claims' first-Ready annotations"
                )
                settled_s = time.monotonic() - t0
                await asyncio.sleep(3.0)
                window = await b.audit_window(start)
                rss_now, rss_peak = proc.rss()
                adopted = set(w.sandbox_of.values())
                warm = len(adopted & w.members)
    finally:
        await loadgen.close()

    events = [
        ev
        for ev in window.events()
        if (ev.get("objectRef") or {}).get("namespace") == ns and ev.get("verb") in WRITE_VERBS
    ]
    ours, others = [], []
    for ev in events:
        mine = (ev.get("userAgent") or "").split(" ")[0] == OUR_AGENT
        (ours if mine else others).append(ev)
    paths: dict[str, list[dict[str, Any]]] = {"claim": [], "replacement": [], "pool": []}
    created: dict[str, float] = {}
    for ev in others:
        ref = ev.get("objectRef") or {}
        if ev["verb"] == "create" and ref.get("resource") == "sandboxclaims" and ref.get("name"):
            created[ref["name"]] = _wall(ev["requestReceivedTimestamp"])
    adopted_at = {sb: created.get(c, 0.0) for c, sb in w.sandbox_of.items()}
    for ev in ours:
        paths[classify(ev, adopted_at, set(names))].append(ev)

    table = []
    for path, evs in paths.items():
        refused = count_by([ev for ev in evs if _code(ev) >= 300])
        for (agent, res, verb), count in sorted(count_by(evs).items()):
            table.append(
                {
                    "path": path,
                    "agent": agent,
                    "resource": res,
                    "verb": verb,
                    "count": count,
                    "refused": refused.get((agent, res, verb), 0),
                    "per_claim": round(count / n, 3),
                }
            )
    others_table = [
        {"agent": a, "resource": r, "verb": v, "count": c}
        for (a, r, v), c in sorted(count_by(others).items())
    ]

    def per_claim(path: str, resources: tuple[str, ...]) -> float:
        hits = sum(
            1 for ev in paths[path] if (ev.get("objectRef") or {}).get("resource") in resources
        )
        return round(hits / n, 3)

    replacement_creates = sum(
        1
        for ev in paths["replacement"]
        if (ev.get("objectRef") or {}).get("resource") == "sandboxes" and ev["verb"] == "create"
    )
    loadgen_creates = sum(
        1
        for ev in others
        if (ev.get("userAgent") or "").startswith(LOADGEN_AGENT)
        and (ev.get("objectRef") or {}).get("resource") == "sandboxclaims"
    )
    figures = {
        "claim_path_sandbox_and_claim_writes_per_claim": per_claim("claim", CLAIM_RESOURCES),
        "claim_path_refused_sandbox_and_claim_writes_per_claim": round(
            sum(
                1
                for ev in paths["claim"]
                if (ev.get("objectRef") or {}).get("resource") in CLAIM_RESOURCES
                and _code(ev) >= 300
            )
            / n,
            3,
        ),
        "claim_path_pod_writes_per_claim": per_claim("claim", ("pods",)),
        "claim_path_event_writes_per_claim": per_claim("claim", ("events",)),
        "claim_path_all_writes_per_claim": round(len(paths["claim"]) / n, 3),
        "replacement_writes_per_claim": round(len(paths["replacement"]) / n, 3),
        "replacement_sandbox_creates": replacement_creates,
        "replacement_writes_per_sandbox": round(
            len(paths["replacement"]) / max(1, replacement_creates), 3
        ),
        "pool_writes_per_claim": round(len(paths["pool"]) / n, 3),
        "our_writes_per_claim": round(len(ours) / n, 3),
        "claims_ready": len(w.ready_at),
    }
    return {
        "namespace": ns,
        "pool": pool,
        "claims": n,
        "rate": rate,
        "our_user_agent": OUR_AGENT,
        "loadgen_user_agent": LOADGEN_AGENT,
        "loadgen_claim_creates": loadgen_creates,
        "warm_claims": warm,
        "pool_fill_seconds": round(fill_s, 2),
        "claims_ready_seconds": round(claims_ready_s, 2),
        "settled_seconds": round(settled_s, 2),
        "audit_events_in_namespace": len(events),
        "controller_rss_mib": {"now": rss_now, "peak": rss_peak},
        "flags": list(proc.flags),
        "figures": figures,
        "writes": table,
        "other_agents_writes": others_table,
    }


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per: dict[str, Counter[str]] = {"claim": Counter(), "replacement": Counter()}
    for row in result["writes"]:
        if row["path"] in per:
            per[row["path"]][f"{row['resource']} {row['verb']}"] += row["per_claim"]
    labels = sorted(set(per["claim"]) | set(per["replacement"]))
    fig, ax = plt.subplots(figsize=(max(8, 0.7 * len(labels) + 3), 4.8))
    xs = range(len(labels))
    width = 0.4
    ax.bar(
        [x - width / 2 for x in xs],
        [per["claim"][k] for k in labels],
        width,
        label="claim path",
    )
    ax.bar(
        [x + width / 2 for x in xs],
        [per["replacement"][k] for k in labels],
        width,
        label="pool replacement",
    )
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=35, ha="right")
    ax.set_ylabel("writes per warm claim")
    fig_ = result["figures"]
    ax.set_title(
        f"{result['claims']} warm claims at {result['rate']:g}/s, pool {result['pool']}: "
        f"{fig_['claim_path_sandbox_and_claim_writes_per_claim']} sandbox+claim writes/claim "
        f"(goal <= {GOAL:g})"
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    f = result["figures"]
    out = [
        (
            "sandbox+claim writes / warm claim",
            f"{f['claim_path_sandbox_and_claim_writes_per_claim']:g}",
            f"<= {GOAL:g}",
        ),
        ("pod writes / warm claim (claim path)", f"{f['claim_path_pod_writes_per_claim']:g}", ""),
        ("event writes / warm claim", f"{f['claim_path_event_writes_per_claim']:g}", ""),
        (
            "pool replacement writes / claim",
            f"{f['replacement_writes_per_claim']:g} "
            f"({f['replacement_writes_per_sandbox']:g} per replacement sandbox)",
            "",
        ),
        ("pool status writes / claim", f"{f['pool_writes_per_claim']:g}", ""),
        ("all our writes / claim", f"{f['our_writes_per_claim']:g}", ""),
        ("claims Ready", f"{f['claims_ready']} / {result['claims']}", "all"),
    ]
    for row in result["writes"]:
        out.append(
            (
                f"  {row['path']}: {row['resource']} {row['verb']} / claim",
                f"{row['per_claim']:g}",
                "",
            )
        )
    return out


GOALS = (("P6 sandbox+claim writes per warm claim", "<= 3"),)


def goals(result: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    f = result["figures"]
    per = f["claim_path_sandbox_and_claim_writes_per_claim"]
    return [
        (
            "P6 sandbox+claim writes per warm claim",
            f"<= {GOAL:g}",
            f"{per:g}",
            per <= GOAL,
        )
    ]
