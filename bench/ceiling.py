"""The same-run ceiling of ``docs/benchmarks.md`` and the watches the fill scenarios share.

**The ceiling**: a bare async loop that creates the same Sandbox objects a warm pool would (the
pool's own blueprint, ``build_blueprint``, without the pool owner reference) with a client limited
like the controller (QPS 1000 / burst 2000), at a fixed concurrency, in a fresh namespace. The
Sandbox controller that is running (the scenario's) and kwok make them Ready; nothing of the warm
pool runs. Timed, like the pool, by an informer watch of Sandboxes: from just before the first
POST to the event that shows the last one Ready. The fastest of the concurrencies tried is the
ceiling.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable, Sequence
from typing import Any

from harness import Bench, BenchError, machine_cpu_seconds, template

from agentsandbox.api.conditions import is_sandbox_ready
from agentsandbox.api.resources import SANDBOXES
from agentsandbox.controllers.warmpool.blueprint import build_blueprint
from agentsandbox.kube.client import Client
from agentsandbox.kube.config import load_kubeconfig
from agentsandbox.kube.errors import NotFound
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.resources import NAMESPACES

QPS, BURST = 1000.0, 2000
CONCURRENCIES = (16, 64, 300)


class ReadyCounter:
    """Sandboxes of one namespace from an informer (a resuming watch): distinct creates (by
    uid), the Ready ones, and a time series of the Ready count (one point per change).

    ``select`` picks the sandboxes that count (e.g. members of one pool); the others are
    ignored. ``t0`` is the series' origin; set it just before the action being timed."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        select: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        self.informer = Informer(client, SANDBOXES, namespace)
        self.select = select
        self.uids: set[str] = set()
        self.ready: set[str] = set()
        self.series: list[tuple[float, int]] = []
        self.t0 = time.monotonic()
        self.done = asyncio.Event()
        self.target = 0
        self.informer.add_handler(self._add, self._update, self._delete)

    @property
    def created(self) -> int:
        return len(self.uids)

    def _add(self, obj: dict[str, Any]) -> None:
        self._update(obj, obj)

    def _update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        meta = new["metadata"]
        if self.select is not None and not self.select(new):
            self._drop(meta["uid"])
            return
        self.uids.add(meta["uid"])
        if is_sandbox_ready(new) and not meta.get("deletionTimestamp"):
            self.ready.add(meta["uid"])
        else:
            self.ready.discard(meta["uid"])
        self._changed()

    def _delete(self, obj: dict[str, Any]) -> None:
        self._drop(obj["metadata"]["uid"])

    def _drop(self, uid: str) -> None:
        if uid in self.ready:
            self.ready.discard(uid)
            self._changed()

    def _changed(self) -> None:
        n = len(self.ready)
        if not self.series or self.series[-1][1] != n:
            self.series.append((round(time.monotonic() - self.t0, 3), n))
        if self.target and n >= self.target:
            self.done.set()

    def restart_series(self) -> None:
        """Time from now, starting at the current Ready count."""
        self.t0 = time.monotonic()
        self.series = [(0.0, len(self.ready))]

    async def __aenter__(self) -> ReadyCounter:
        self.informer.start()
        await asyncio.wait_for(self.informer.wait_synced(), 30)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.informer.stop()

    async def wait(self, target: int, limit: float) -> float:
        """Seconds from ``t0`` until ``target`` are Ready at once."""
        self.target = target
        self.done.clear()
        if len(self.ready) >= target:
            self.done.set()
        try:
            await asyncio.wait_for(self.done.wait(), limit)
        except TimeoutError:
            raise BenchError(
                f"only {len(self.ready)} of {target} sandboxes Ready after {limit:.0f} s "
                f"({self.created} created)"
            ) from None
        return time.monotonic() - self.t0


async def wait_namespace_gone(b: Bench, ns: str, limit: float = 300.0) -> float | None:
    """Seconds until ``ns`` is deleted (so its teardown does not load the next measurement);
    None, without waiting, in a smoke run (``Bench.wait_namespaces_gone`` says why)."""
    if b.smoke:
        return None
    t0 = time.monotonic()
    while True:
        try:
            await b.api.get(NAMESPACES, ns)
        except NotFound:
            return time.monotonic() - t0
        if time.monotonic() - t0 > limit:
            raise BenchError(f"namespace {ns} still there after {limit:.0f} s")
        await asyncio.sleep(0.5)


def controller_cpu(b: Bench) -> float:
    """CPU seconds of the running controller processes (0 when none runs)."""
    return sum(c.cpu() for c in b.controllers)


async def ceiling_run(b: Bench, n: int, concurrency: int, limit: float) -> dict[str, Any]:
    """One bare create loop of ``n`` pool-shaped Sandboxes at ``concurrency``, in a fresh
    namespace, timed from before the first POST to the last Ready event."""
    cfg = await load_kubeconfig(str(b.cluster.kubeconfig))
    client = Client(cfg, qps=QPS, burst=BURST, pool_size=concurrency + 8)
    try:
        async with b.namespace("ceiling") as ns:
            tpl = template("tpl")
            tpl["metadata"]["namespace"] = ns
            fake_pool = {
                "metadata": {"name": "ceiling", "namespace": ns, "uid": "0"},
                "spec": {"replicas": n, "sandboxTemplateRef": {"name": "tpl"}},
            }
            body = build_blueprint(fake_pool, tpl, "00000000")
            body["metadata"].pop("ownerReferences")
            errors: list[str] = []
            async with ReadyCounter(b.api, ns) as counter:
                cpu0, mach0 = controller_cpu(b), machine_cpu_seconds()
                counter.restart_series()
                todo = iter(range(n))

                async def worker() -> None:
                    for _ in todo:
                        try:
                            await client.create(SANDBOXES, copy.deepcopy(body), ns)
                        except Exception as err:  # counted, reported
                            errors.append(repr(err))

                await asyncio.gather(*(worker() for _ in range(concurrency)))
                created_s = time.monotonic() - counter.t0
                seconds = await counter.wait(n - len(errors), limit)
                cpu1, mach1 = controller_cpu(b), machine_cpu_seconds()
                await asyncio.sleep(1.0)  # a stray extra create would show up here
                creates_seen = counter.created
        gone_s = await wait_namespace_gone(b, ns)
    finally:
        await client.close()
    return {
        "namespace": ns,
        "concurrency": concurrency,
        "seconds": round(seconds, 2),
        "all_created_after": round(created_s, 2),
        "create_errors": len(errors),
        "first_errors": errors[:3],
        "creates_seen": creates_seen,
        "controller_cpu_seconds": round(cpu1 - cpu0, 2),
        "machine_cpu_seconds": round(mach1 - mach0, 2),
        "namespace_teardown_seconds": None if gone_s is None else round(gone_s, 1),
        "series": counter.series,
    }


async def ceiling(
    b: Bench, n: int, concurrencies: Sequence[int] = CONCURRENCIES, limit: float = 600.0
) -> dict[str, Any]:
    """The ceiling for ``n`` sandboxes: one bare create loop per concurrency (each in a fresh
    namespace, each waiting for the previous namespace to be gone); the fastest is the ceiling.

    Returns ``{"seconds", "concurrency", "runs": [...]}``; each run has its seconds, creates
    seen, create errors, the controller's and the machine's CPU seconds and its Ready series.
    A controller must be running (its Sandbox controller makes the sandboxes Ready)."""
    if not b.controllers:
        raise BenchError("the ceiling needs a running controller (its Sandbox controller)")
    runs = []
    for c in concurrencies:
        run = await ceiling_run(b, n, c, limit)
        print(
            f"  ceiling c={c}: {run['seconds']} s for {n} Ready "
            f"(all POSTed after {run['all_created_after']} s, {run['create_errors']} errors)",
            flush=True,
        )
        runs.append(run)
    clean = [r for r in runs if not r["create_errors"]] or runs
    best = min(clean, key=lambda r: r["seconds"])
    return {
        "n": n,
        "seconds": best["seconds"],
        "concurrency": best["concurrency"],
        "qps": QPS,
        "burst": BURST,
        "runs": runs,
    }
