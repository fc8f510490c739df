"""The warm-pool autoscaler on a real (local) control plane: a shortened burst trace with a step
up in load and a controller restart, autoscaled vs the smallest static pool reaching the same warm
share, measured by the client.

    python bench/autoscale_real.py                      # the full trace (~15 min on 2 cores)
    python bench/autoscale_real.py --seed 2             # another draw of the same trace
    python bench/autoscale_real.py --out DIR --smoke    # 1 burst of 5 claims, a restart (< 60 s)

One private control plane (kube-apiserver + etcd + kwok, ``bench/harness.py``); each run has its
own namespace and its own controller process started with its **default flags** (``--extensions``;
the autoscaler is on by default, with its built-in settings: a pass every 5 s and on events, rates
over a 30 min window, 10 s burst bins — they are in-process settings, not flags, and the trace is
long enough for them).

The trace (fixed seed, ``--seed``, default 1): ``bursts`` (7) bursts; burst ``k``'s mark is
``first + k·period + U(-jitter, jitter)`` (15 s + k·40 s ± 5 s) and its claims are sent at
``mark + U(0, spread)`` (3 s), **open loop** (a claim's POST starts at its scheduled time whatever
the others do). Each claim is deleted ``dwell`` (20 s) seconds after it was seen Ready. The same
claim times are replayed in every run.

- **The step**: bursts ``0 .. step_at - 1`` have ``size`` (40) claims, bursts from ``step_at``
  (``--step-at``, default 4: the fifth burst, mark 175 s) on ``size * step_factor``
  (``--step-factor``, default 2: 80 claims) — the load steps up and stays up to the end. The step
  comes after the two warm-up bursts and at least two bursts before the end (checked), so the
  measured window holds two bursts before it and three after it. ``--step-factor 1``: no step.
- **The restart**: at ``restart_at`` seconds from the trace's start (``--restart-at``; default
  half a period after the step burst's mark: 195 s, between the fifth and the sixth burst, when
  the fifth's claims are being released) the run's controller process is stopped by its PID as
  ``bench/harness.py`` stops it (SIGTERM, then wait for it to exit; SIGKILL after 30 s) and
  started again with the same flags, watching the same namespace; the same restart at the same
  time in every run (autoscaled and static), so the comparison stays fair. The JSON records when
  SIGTERM was sent, how long the old process took to exit and how long the controller was down
  (SIGTERM -> the new process' ``/readyz`` OK, which waits for its caches). ``--no-restart``: none.

0. **calibration**: the pool's slot time (a claim adopting a pool member -> its replacement
   Ready) on this control plane, under one burst of each size the trace has (40, then 80 claims)
   against a pool that is never drained.
1. **autoscaled**: the pool starts at ``minReplicas``, a SandboxWarmPoolAutoscaler targets it.
2. **the static size**: the simulator (``agentsandbox.sim``: the real ``plan()``) replays the exact
   claim times with the slot times *measured in step 0* and searches the smallest static size
   whose warm share reaches the warm share run 1 measured (after the warm-up); the claim times are
   also written as ``claims.csv`` (``python -m agentsandbox.sim --csv claims.csv`` replays them).
   The exact times include the step. The restart is passed to the simulator too (its
   ``Config.restarts``: the autoscaler's memory is lost and rebuilt from a relist at that time),
   but the simulator's restart is instantaneous: the seconds the real controller is down (no
   reconcile, no refill, no adoption) are not simulated.
3. **static**: one run at that size; if it misses run 1's warm share, one more a size up, if it
   reaches it, one more a size down; the smallest run that reaches it is the static pool compared.

Measured by the client: one namespace-wide claim watch (latency = the Ready event minus the
claim's scheduled send time), one sandbox watch and one pool watch:

- **warm** = the claim's sandbox was a pool member that was **Ready when the claim adopted it**
  (the last state the watch showed before its controller changed from the pool to the claim).
  The claim controller also adopts a *not-Ready* pool member when none is Ready (docs/claims.md);
  those carry the ``agents.x-k8s.io/launch-type: warm`` label too but waited for a start: they
  are counted as **from the pool** beside, not as warm (the simulator's definition).
- **idle sandbox-seconds** = ∫ (pool-controlled sandboxes, Ready or not) dt, sampled every 0.5 s
  from the sandbox watch, to the trace's end (last claim + dwell + 5 s).
- **pool creates** = the sandboxes the pool created: first seen on the sandbox watch (its ADDED
  event) with the pool as their controller owner, counted by when they were seen, per window;
  the pool's initial fill (before the trace's start) apart. Beside them the **pool deletes**
  (members deleted while the pool still owned them, e.g. by a scale-down) and, of those, the ones
  **deleted before Ready** (never seen Ready): the churn the autoscaler's changes cost.

The comparison is over the trace **after a warm-up of the first two bursts** (from half a period
before the third burst's mark): the autoscaler learns a burst schedule from the spacing of the
bursts it has seen, so the first two are served reactively — as the simulator's figures start
after a 1 h warm-up. The whole run is reported beside, for both pools.

Writes ``autoscale_real.json``, ``autoscale_real.md`` (the table), ``autoscale_real.png`` (pool
size and claims over time, both runs) and ``claims.csv`` to ``--out``. Without ``--out`` the JSON
goes to ``bench/results/autoscale_real.json`` (committed, one seed: the next full run overwrites
it; ``python bench/report.py --write`` renders ``docs/autoscaling.md``'s table from it) and the
rest to ``bench/work/autoscale_real/``. ``--smoke`` needs ``--out`` outside ``bench/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import random
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (
    RESULTS,
    ROOT,
    WORK,
    Bench,
    BenchError,
    ControllerProcess,
    machine_facts,
    percentile,
    ready_sandbox,
    template,
    wait_pool_status,
    warm_claim,
    warm_pool,
)
from results import SmokeInResults, refuse_smoke_in_results

from agentsandbox.api import keys
from agentsandbox.api.conditions import is_sandbox_ready
from agentsandbox.api.kinds import SANDBOX_WARM_POOL_AUTOSCALER
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOL_AUTOSCALERS,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.controllers.autoscaler.plan import Policy
from agentsandbox.controllers.claim.plan import pool_owner
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import NotFound
from agentsandbox.kube.informer import Informer

POOL = "pool"
SAMPLE_EVERY = 0.5
WARM_GOAL = 0.97
SAVING_GOAL = 0.15


@dataclass(frozen=True)
class TraceSpec:
    bursts: int = 7
    size: int = 40
    period: float = 40.0
    jitter: float = 5.0
    spread: float = 3.0
    dwell: float = 20.0
    first: float = 15.0
    seed: int = 1
    step_at: int | None = 4  # from this burst (0-based) on, size * step_factor claims per burst
    step_factor: float = 2.0

    @property
    def stepped(self) -> bool:
        return self.step_at is not None and self.step_at < self.bursts and self.step_factor != 1

    @property
    def stepped_size(self) -> int:
        return max(1, round(self.size * self.step_factor)) if self.stepped else self.size

    def burst_size(self, k: int) -> int:
        """Burst ``k``'s claims: ``size``, or ``size * step_factor`` from ``step_at`` on."""
        return self.stepped_size if self.step_at is not None and k >= self.step_at else self.size

    def marks(self) -> list[tuple[float, list[float]]]:
        """Each burst's mark and its claims' send times, seconds from the trace's start (fixed
        by the random seed; the bursts before the step draw what the trace without it draws)."""
        rng = random.Random(f"autoscale-real-{self.seed}")
        out: list[tuple[float, list[float]]] = []
        for k in range(self.bursts):
            mark = self.first + k * self.period + rng.uniform(-self.jitter, self.jitter)
            out.append(
                (mark, [mark + rng.uniform(0.0, self.spread) for _ in range(self.burst_size(k))])
            )
        return out

    def times(self) -> list[float]:
        """The claims' send times, seconds from the trace's start, sorted."""
        return sorted(t for _mark, claims in self.marks() for t in claims)

    def describe(self) -> str:
        if self.stepped:
            sizes = (
                f"{self.size} claims, from burst {(self.step_at or 0) + 1} on "
                f"{self.stepped_size} (a step by a factor {self.step_factor:g})"
            )
        else:
            sizes = f"{self.size} claims (no step)"
        return (
            f"{self.bursts} bursts of {sizes}, every {self.period:g} s ± "
            f"{self.jitter:g} s (uniform), each claim uniform within {self.spread:g} s of its "
            f"burst's mark, dwell {self.dwell:g} s after Ready, first mark at {self.first:g} s, "
            f"seed {self.seed}"
        )

    def step(self) -> dict[str, Any] | None:
        """The step as the JSON records it (None without one)."""
        if not self.stepped or self.step_at is None:
            return None
        mark, claims = self.marks()[self.step_at]
        return {
            "burst_index": self.step_at,
            "burst_number": self.step_at + 1,
            "factor": self.step_factor,
            "size_before": self.size,
            "size_after": self.stepped_size,
            "nominal_mark_s": round(self.first + self.step_at * self.period, 2),
            "mark_s": round(mark, 2),
            "first_claim_s": round(min(claims), 2),
        }


@dataclass(frozen=True)
class Options:
    trace: TraceSpec
    target: float = 0.99
    min_replicas: int = 1
    max_replicas: int = 200
    stabilization: float = 15.0
    warmup_bursts: int = 2
    smoke: bool = False
    restart_at: float | None = None  # seconds from the trace's start; None: no restart

    @property
    def measured_from(self) -> float:
        """Half a period before the first burst after the warm-up (0 without a warm-up)."""
        t = self.trace
        return t.first + t.period * (self.warmup_bursts - 0.5) if self.warmup_bursts else 0.0

    def trace_end(self) -> float:
        """The measured span's end: every claim held and released, 5 s more."""
        return self.trace.times()[-1] + self.trace.dwell + 5.0


def default_restart(trace: TraceSpec, smoke: bool) -> float:
    """Half a period after the step burst's mark (between it and the next burst: its claims
    are being released); without a step, after the next-to-last burst; in a smoke run (one
    burst) 1 s after the burst's claims are released, before the trace's end."""
    if smoke:
        return trace.first + trace.spread + trace.dwell + 1.0
    k = trace.step_at if trace.step_at is not None else trace.bursts - 2
    return trace.first + (k + 0.5) * trace.period


@dataclass
class Observer:
    """Sandbox, claim and pool watches of one namespace, and the 0.5 s sampler."""

    client: Client
    ns: str
    t0: float = 0.0
    pool_member: dict[str, bool] = field(default_factory=dict)  # name -> Ready (pool members)
    first_seen: dict[str, float] = field(default_factory=dict)
    refill: list[float] = field(default_factory=list)  # create -> Ready of pool members, s
    adoptions: list[float] = field(default_factory=list)  # when a pool member was adopted
    new_ready: list[float] = field(default_factory=list)  # when a new pool member turned Ready
    adopted_ready: dict[str, bool] = field(default_factory=dict)  # sandbox -> Ready at adoption
    launch_type: dict[str, str] = field(default_factory=dict)
    claim_ready: dict[str, float] = field(default_factory=dict)
    claim_sandbox: dict[str, str] = field(default_factory=dict)
    ready_events: dict[str, asyncio.Event] = field(default_factory=dict)
    replicas: int = 0
    series: list[tuple[float, int, int, int]] = field(default_factory=list)  # t, spec, pool, ready
    autoscaler: list[dict[str, Any]] = field(default_factory=list)
    # the pool's creates: name -> when first seen (its ADDED event) with the pool as controller
    pool_created: dict[str, float] = field(default_factory=dict)
    ever_ready: set[str] = field(default_factory=set)
    # the pool's deletes: name -> (when first seen deleted while the pool owned it, ever Ready)
    pool_deleted: dict[str, tuple[float, bool]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.sandboxes = Informer(self.client, SANDBOXES, self.ns)
        self.sandboxes.add_handler(self._sb_add, self._sb_update, self._sb_gone)
        self.claims = Informer(self.client, SANDBOX_CLAIMS, self.ns)
        self.claims.add_handler(self._claim, lambda _o, n: self._claim(n))
        self.pools = Informer(self.client, SANDBOX_WARM_POOLS, self.ns)
        self.pools.add_handler(self._pool, lambda _o, n: self._pool(n))
        self.swpa = Informer(self.client, SANDBOX_WARM_POOL_AUTOSCALERS, self.ns)
        self.swpa.add_handler(self._swpa, lambda _o, n: self._swpa(n))

    # ----------------------------------------------------------------- handlers
    def _sb_add(self, sb: dict[str, Any]) -> None:
        self._sb_update(None, sb)

    def _sb_update(self, _old: dict[str, Any] | None, sb: dict[str, Any]) -> None:
        name = sb["metadata"]["name"]
        now = time.monotonic()
        owned = pool_owner(sb) == POOL
        if name not in self.first_seen and owned:
            self.pool_created[name] = now  # a pool create: first seen with the pool as owner
        self.first_seen.setdefault(name, now)
        label = (sb["metadata"].get("labels") or {}).get(keys.LABEL_LAUNCH_TYPE)
        if label:
            self.launch_type[name] = label
        deleting = bool(sb["metadata"].get("deletionTimestamp"))
        ready = is_sandbox_ready(sb) and not deleting
        if ready:
            self.ever_ready.add(name)
        if owned:
            if ready and not self.pool_member.get(name) and name not in self.adopted_ready:
                self.refill.append(now - self.first_seen[name])
                self.new_ready.append(now)
            self.pool_member[name] = ready
            if deleting:
                self._pool_delete(name, now)
        elif name in self.pool_member:  # adopted: its controller is no longer the pool
            self.adopted_ready[name] = self.pool_member.pop(name)
            self.adoptions.append(now)

    def _pool_delete(self, name: str, now: float) -> None:
        if name not in self.pool_deleted:
            self.pool_deleted[name] = (now, name in self.ever_ready)

    def _sb_gone(self, sb: dict[str, Any]) -> None:
        name = sb["metadata"]["name"]
        if self.pool_member.pop(name, None) is not None:  # deleted while the pool owned it
            self._pool_delete(name, time.monotonic())

    def _claim(self, claim: dict[str, Any]) -> None:
        name = claim["metadata"]["name"]
        sandbox = ready_sandbox(claim)
        if sandbox and name not in self.claim_ready:
            self.claim_ready[name] = time.monotonic()
            self.claim_sandbox[name] = sandbox
            ev = self.ready_events.get(name)
            if ev is not None:
                ev.set()

    def _pool(self, pool: dict[str, Any]) -> None:
        if pool["metadata"]["name"] == POOL:
            self.replicas = int((pool.get("spec") or {}).get("replicas") or 0)

    def _swpa(self, obj: dict[str, Any]) -> None:
        last = (obj.get("status") or {}).get("lastScale")
        if last and (not self.autoscaler or self.autoscaler[-1]["lastScale"] != last):
            t = round(time.monotonic() - self.t0, 2) if self.t0 else None
            self.autoscaler.append({"t": t, "lastScale": last})

    # ----------------------------------------------------------------- sampling
    def sample(self) -> None:
        ready = sum(1 for r in self.pool_member.values() if r)
        self.series.append(
            (round(time.monotonic() - self.t0, 3), self.replicas, len(self.pool_member), ready)
        )

    async def sampler(self, stop: asyncio.Event) -> None:
        next_at = time.monotonic()
        while not stop.is_set():
            self.sample()
            next_at += SAMPLE_EVERY
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))

    def slot_seconds(self) -> list[float]:
        """Adoption -> a replacement Ready, each adoption matched first-in first-out to the next
        new pool member turning Ready (as the simulator's ``local`` samples were derived from the
        claim rate sweep, ``bench/p1_claims.py``): the time a pool slot is busy, the controller's
        reaction included. Creates of a scale-up are matched too, so in an autoscaled run this is
        a little optimistic."""
        out: list[float] = []
        j = 0
        for a in self.adoptions:
            while j < len(self.new_ready) and self.new_ready[j] < a:
                j += 1
            if j == len(self.new_ready):
                break
            out.append(self.new_ready[j] - a)
            j += 1
        return out

    def pool_churn(self, start: float, end: float) -> dict[str, int]:
        """The pool's creates and deletes seen in [start, end) (seconds from t0)."""

        def inside(at: float) -> bool:
            return start <= at - self.t0 < end

        deleted = [ready for at, ready in self.pool_deleted.values() if inside(at)]
        return {
            "pool_creates": sum(1 for at in self.pool_created.values() if inside(at)),
            "pool_deletes": len(deleted),
            "pool_deletes_before_ready": sum(1 for ready in deleted if not ready),
        }

    def idle_seconds(self, start: float, end: float) -> float:
        """∫ pool members dt over [start, end] (seconds from t0), step-wise from the samples."""
        total = 0.0
        for (t, _r, n, _ready), (t2, *_rest) in zip(self.series, self.series[1:], strict=False):
            lo, hi = max(t, start), min(t2, end)
            if hi > lo:
                total += n * (hi - lo)
        return total

    async def __aenter__(self) -> Observer:
        informers = (self.sandboxes, self.claims, self.pools, self.swpa)
        for inf in informers:
            inf.start()
        await asyncio.gather(*(inf.wait_synced() for inf in informers))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for inf in (self.sandboxes, self.claims, self.pools, self.swpa):
            await inf.stop()


def autoscaler_obj(opts: Options) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_WARM_POOL_AUTOSCALER.api_version,
        "kind": SANDBOX_WARM_POOL_AUTOSCALER.kind,
        "metadata": {"name": POOL},
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                "kind": "SandboxWarmPool",
                "name": POOL,
            },
            "minReplicas": opts.min_replicas,
            "maxReplicas": opts.max_replicas,
            "targetWarmShare": opts.target,
            "scaleDownStabilizationSeconds": int(opts.stabilization),
        },
    }


async def calibrate(b: Bench, opts: Options) -> list[float]:
    """The pool's slot time on this control plane under one burst of each size the trace has
    (``size``, then ``size * step_factor``): a static pool of the larger size (never drained),
    each burst's claims within ``spread`` seconds, the pool full again between them, each
    adoption matched to the next replacement turning Ready (:meth:`Observer.slot_seconds`)."""
    trace = opts.trace
    await b.wait_namespaces_gone()
    await b.check_healthy()
    client = b.api
    rng = random.Random(f"calibrate-{trace.seed}")
    sizes = sorted({trace.size, trace.stepped_size})
    pool = max(sizes)
    with b.controller("calibrate", flags=()) as proc:
        await proc.wait_ready()
        async with b.namespace("as-calibrate") as ns, Observer(client, ns) as obs:
            await client.create(SANDBOX_TEMPLATES, template("tpl"), ns)
            await client.create(SANDBOX_WARM_POOLS, warm_pool(POOL, "tpl", pool), ns)
            await wait_pool_status(client, ns, POOL, pool, 120)
            for size in sizes:
                times = sorted(rng.uniform(0.0, trace.spread) for _ in range(size))
                await asyncio.sleep(1.0)
                t0 = time.monotonic() + 0.1

                async def send(name: str, at: float, t0: float = t0) -> None:
                    await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
                    await client.create(SANDBOX_CLAIMS, warm_claim(name, POOL), ns)

                await asyncio.gather(*(send(f"k{size}-{i:04d}", at) for i, at in enumerate(times)))
                await wait_pool_status(client, ns, POOL, pool, 120)
                proc.check()
    samples = obs.slot_seconds()
    print(
        f"calibration: {len(samples)} slot times (adoption -> replacement Ready), mean "
        f"{sum(samples) / max(1, len(samples)):.3f} s, p99 {percentile(samples, 99)} s",
        flush=True,
    )
    return samples


async def restart_controller(
    b: Bench, stack: contextlib.ExitStack, running: list[ControllerProcess], label: str
) -> dict[str, Any]:
    """Stop the run's controller by its PID as the harness stops it (SIGTERM, wait for it to
    exit, SIGKILL after 30 s; in a thread: the claims go on meanwhile) and start it again with
    the same flags (``flags=()``: the defaults, ``--extensions``; its own log file). The new
    process is appended to ``running``; returns the times (monotonic)."""
    old = running[-1]
    old.check()  # it ran until now
    sent = time.monotonic()
    await asyncio.to_thread(old.stop)
    exited = time.monotonic()
    new = stack.enter_context(b.controller(f"{label}-restarted", flags=()))
    running.append(new)
    await new.wait_ready()
    return {
        "sigterm": sent,
        "exited": exited,
        "ready": time.monotonic(),
        "exit_code": old.popen.returncode,
    }


async def run_once(b: Bench, opts: Options, label: str, static: int | None) -> dict[str, Any]:
    """One run of the trace: autoscaled (``static`` None) or a static pool of ``static``; the
    controller restarted at ``opts.restart_at`` (seconds from the trace's start)."""
    trace = opts.trace
    times = trace.times()
    end = opts.trace_end()  # the measured span: every claim held and released
    warm_from = opts.measured_from
    await b.wait_namespaces_gone()
    await b.check_healthy()
    client = b.api
    started = time.monotonic()
    restart: dict[str, Any] | None = None
    with contextlib.ExitStack() as stack:
        running = [stack.enter_context(b.controller(label, flags=()))]
        await running[0].wait_ready()
        async with b.namespace(f"as-{label}") as ns, Observer(client, ns) as obs:
            await client.create(SANDBOX_TEMPLATES, template("tpl"), ns)
            size0 = opts.min_replicas if static is None else static
            await client.create(SANDBOX_WARM_POOLS, warm_pool(POOL, "tpl", size0), ns)
            await wait_pool_status(client, ns, POOL, size0, 120)
            if static is None:
                await client.create(SANDBOX_WARM_POOL_AUTOSCALERS, autoscaler_obj(opts), ns)
            await asyncio.sleep(2.0 if opts.smoke else 5.0)  # the autoscaler's first pass
            names = [f"c-{i:04d}" for i in range(len(times))]
            errors: dict[str, str] = {}
            obs.t0 = t0 = time.monotonic() + 0.1
            stop = asyncio.Event()
            sampler = asyncio.create_task(obs.sampler(stop))

            async def claim(name: str, at: float) -> None:
                ev = obs.ready_events.setdefault(name, asyncio.Event())
                await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
                try:
                    await client.create(SANDBOX_CLAIMS, warm_claim(name, POOL), ns)
                except Exception as err:  # counted and reported
                    errors[name] = repr(err)
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ev.wait(), 60.0)
                held_from = obs.claim_ready.get(name, time.monotonic())
                await asyncio.sleep(max(0.0, held_from + trace.dwell - time.monotonic()))
                with contextlib.suppress(NotFound):
                    await client.delete(SANDBOX_CLAIMS, name, ns)

            paused = False  # the controller is being stopped and started again

            async def restart_at(at: float) -> dict[str, Any]:
                nonlocal paused
                await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
                paused = True
                try:
                    return await restart_controller(b, stack, running, label)
                finally:
                    paused = False

            tasks = [asyncio.create_task(claim(n, at)) for n, at in zip(names, times, strict=True)]
            restarting = (
                None
                if opts.restart_at is None
                else asyncio.create_task(restart_at(opts.restart_at))
            )
            try:
                while time.monotonic() < t0 + end or (
                    restarting is not None and not restarting.done()
                ):
                    if restarting is not None and restarting.done():
                        restarting.result()  # what it raised, at once
                    if not paused:
                        running[-1].check()
                    await asyncio.sleep(0.5)
                if restarting is not None:
                    got = await restarting
                    restart = {
                        "at_s": opts.restart_at,
                        "sigterm_at_s": round(got["sigterm"] - t0, 2),
                        "stop_seconds": round(got["exited"] - got["sigterm"], 2),
                        "exit_code": got["exit_code"],
                        "down_seconds": round(got["ready"] - got["sigterm"], 2),
                        "ready_again_at_s": round(got["ready"] - t0, 2),
                    }
                running[-1].check()
                await asyncio.gather(*tasks)
            finally:
                for task in (*tasks, *([restarting] if restarting else [])):
                    task.cancel()
            stop.set()
            await sampler
            swpa_status: dict[str, Any] = {}
            if static is None:
                with contextlib.suppress(NotFound):
                    got_swpa = await client.get(SANDBOX_WARM_POOL_AUTOSCALERS, POOL, ns)
                    swpa_status = got_swpa.get("status") or {}
    runtime = time.monotonic() - started

    def figures(idx: list[int], start: float, stop_at: float) -> dict[str, Any]:
        ready = [i for i in idx if names[i] in obs.claim_ready]
        lat = [(obs.claim_ready[names[i]] - (t0 + times[i])) * 1000 for i in ready]
        sbs = [obs.claim_sandbox[names[i]] for i in ready]
        warm = sum(1 for s in sbs if obs.adopted_ready.get(s))
        from_pool = sum(1 for s in sbs if s in obs.adopted_ready)
        labelled = sum(1 for s in sbs if obs.launch_type.get(s) == keys.LAUNCH_TYPE_WARM)
        idle = obs.idle_seconds(start, stop_at)
        p50, p99 = percentile(lat, 50), percentile(lat, 99)
        return {
            "claims": len(idx),
            "ready": len(ready),
            "warm": warm,
            "warm_share": round(warm / len(idx), 4) if idx else None,
            "from_pool": from_pool,
            "launch_type_warm": labelled,
            "latency_ms": {
                "p50": None if p50 is None else round(p50, 1),
                "p90": None if not lat else round(percentile(lat, 90) or 0.0, 1),
                "p99": None if p99 is None else round(p99, 1),
                "max": None if not lat else round(max(lat), 1),
            },
            "idle_sandbox_seconds": round(idle, 1),
            "mean_pool": round(idle / (stop_at - start), 2) if stop_at > start else None,
            "span_seconds": round(stop_at - start, 1),
            **obs.pool_churn(start, stop_at),
        }

    every = list(range(len(times)))
    later = [i for i in every if times[i] >= warm_from]
    # per burst (claims more than half a period apart start a new one): where the cold claims are
    groups: list[list[int]] = []
    for i in every:
        if not groups or times[i] - times[groups[-1][-1]] > trace.period / 2:
            groups.append([])
        groups[-1].append(i)
    per_burst = []
    step_from = (trace.step() or {}).get("first_claim_s")
    for g in groups:
        sbs = [obs.claim_sandbox.get(names[i]) for i in g]
        per_burst.append(
            {
                "stepped": step_from is not None and round(times[g[0]], 2) >= step_from,
                "after_restart": opts.restart_at is not None and times[g[0]] > opts.restart_at,
                "first_claim": round(times[g[0]], 2),
                "last_claim": round(times[g[-1]], 2),
                "claims": len(g),
                "warm": sum(1 for sb in sbs if sb and obs.adopted_ready.get(sb)),
                "from_pool": sum(1 for sb in sbs if sb and sb in obs.adopted_ready),
                "cold_at": [
                    round(times[i], 2)
                    for i, sb in zip(g, sbs, strict=True)
                    if not (sb and obs.adopted_ready.get(sb))
                ],
            }
        )
    result: dict[str, Any] = {
        "label": label,
        "static": static,
        "runtime_seconds": round(runtime, 1),
        "create_errors": len(errors),
        "measured_from": round(warm_from, 1),
        "whole": figures(every, 0.0, end),
        "after_warmup": figures(later, warm_from, end),
        # the pool's initial fill (and the autoscaler's first pass) before the trace's start
        "before_trace": obs.pool_churn(-1e9, 0.0),
        "restart": restart,
        "per_burst": per_burst,
        "refill_seconds": sorted(round(x, 4) for x in obs.refill),
        "slot_seconds": sorted(round(x, 4) for x in obs.slot_seconds()),
        "series": obs.series,
        "autoscaler_changes": obs.autoscaler,
        "autoscaler_status": swpa_status,
        "claim_times": times,
    }
    w = result["whole"]
    print(
        f"{label}: warm {w['warm']}/{w['claims']} ({w['warm_share']}), from pool "
        f"{w['from_pool']}, p50 {w['latency_ms']['p50']} p99 {w['latency_ms']['p99']} ms, idle "
        f"{w['idle_sandbox_seconds']} sandbox-s (mean pool {w['mean_pool']}), after warm-up warm "
        f"{result['after_warmup']['warm_share']} idle "
        f"{result['after_warmup']['idle_sandbox_seconds']}, pool creates "
        f"{result['after_warmup']['pool_creates']} (whole run {w['pool_creates']}, deleted "
        f"before Ready {w['pool_deletes_before_ready']}); {runtime:.0f} s",
        flush=True,
    )
    print(f"{label} per burst (warm/claims): {burst_line(per_burst)}", flush=True)
    if restart is not None:
        print(
            f"{label} restart: SIGTERM at {restart['sigterm_at_s']} s, exited after "
            f"{restart['stop_seconds']} s (code {restart['exit_code']}), down "
            f"{restart['down_seconds']} s",
            flush=True,
        )
    return result


def burst_line(per_burst: list[dict[str, Any]]) -> str:
    """``warm/claims`` per burst, the first stepped burst and the first after the restart
    marked (results written before the step and the restart have neither key)."""
    parts: list[str] = []
    step_seen = restart_seen = False
    for b in per_burst:
        mark = ""
        if b.get("stepped") and not step_seen:
            step_seen, mark = True, "step: "
        if b.get("after_restart") and not restart_seen:
            restart_seen, mark = True, mark + "restart: "
        parts.append(f"{mark}{b['warm']}/{b['claims']}")
    return ", ".join(parts)


def simulate_static(
    opts: Options, auto: dict[str, Any], slot: list[float], out: Path
) -> dict[str, Any]:
    """The smallest static size reaching run 1's warm share (after the warm-up) on the same
    claim times (the step included), with the slot time measured by :func:`calibrate` (the
    simulator's real ``plan()``); the simulator's own ``local`` samples (from the claim rate
    sweep) beside. The restart is passed as ``Config.restarts`` when it falls after the warm-up
    and before the end (the simulator's rule); its restart has no down time (module doc)."""
    from agentsandbox.sim import latency as lat
    from agentsandbox.sim.compare import compare
    from agentsandbox.sim.engine import Config
    from agentsandbox.sim.traces import Trace, from_csv

    times = auto["claim_times"]
    path = out / "claims.csv"
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["seconds"])
        for t in times:
            writer.writerow([f"{t:.3f}"])
    replay = from_csv(path, dwell=opts.trace.dwell)
    # the CSV shifts the first claim to 0; keep the run's own clock (the pool's first pass)
    trace = Trace(
        "autoscale-real",
        list(times),
        opts.trace.dwell,
        times[-1] + opts.trace.dwell + 5.0,
        opts.trace.describe(),
    )
    assert len(replay.arrivals) == len(trace.arrivals)
    # the slot time (adoption -> replacement Ready; create -> Ready alone misses the
    # controller's reaction to the adoption), measured under a burst of the trace's shape
    samples = tuple(slot) or lat.LOCAL.samples
    measured = lat.Empirical("measured here", samples)
    policy = Policy(
        min_replicas=opts.min_replicas,
        max_replicas=opts.max_replicas,
        target_warm_share=opts.target,
        scale_down_window=opts.stabilization,
    )
    goal = auto["after_warmup"]["warm_share"] or 0.0
    # the repository-relative path when it is inside (committed JSON names no machine path)
    csv_path = path.resolve()
    shown = csv_path.relative_to(ROOT) if csv_path.is_relative_to(ROOT) else csv_path
    at = opts.restart_at
    restarts = (at,) if at is not None and auto["measured_from"] < at < trace.duration else ()
    out_sim: dict[str, Any] = {
        "target_warm_share": goal,
        "csv": str(shown),
        "restarts": list(restarts),
        "restart_down_seconds_simulated": 0.0,  # the simulator's restart is instantaneous
    }
    for dist in (measured, lat.LOCAL):
        cfg = Config(
            trace=trace,
            latency=dist,
            seed=1,
            policy=policy,
            decide_interval=5.0,
            warmup=auto["measured_from"],
            restarts=restarts,
        )
        cmp = compare(cfg, goal, log=lambda line: print(line, file=sys.stderr, flush=True))
        out_sim[dist.name] = {
            "refill_mean_s": round(dist.mean(), 3),
            "refill_samples": len(dist.samples),
            "static_size": cmp.static_size,
            "sizes_tried": {str(k): round(v, 4) for k, v in cmp.tried.items()},
            "autoscaled_warm_share": round(cmp.autoscaled.warm_share, 4),
            "autoscaled_idle": round(cmp.autoscaled.idle_seconds, 1),
            "static_idle": None if cmp.static is None else round(cmp.static.idle_seconds, 1),
            # the pool's creates over the whole simulated run (the initial fill not counted)
            "autoscaled_creates": cmp.autoscaled.creates,
            "static_creates": None if cmp.static is None else cmp.static.creates,
            "autoscaled_restarts": cmp.autoscaled.restarts,
        }
        print(f"sim ({dist.name}): static {cmp.static_size} tried {cmp.tried}", flush=True)
    return out_sim


def run_name(r: dict[str, Any]) -> str:
    return "autoscaled" if r["static"] is None else f"static {r['static']}"


def md_header(result: dict[str, Any]) -> list[str]:
    """The trace's seed, its step and its restart (results written before them: nothing)."""
    if "step" not in result and "restart" not in result:
        return []
    seed = (result.get("trace_params") or {}).get("seed")
    step = result.get("step")
    restart = result.get("restart")
    runs = [result["autoscaled"], *result["static_runs"]]
    step_text = (
        "no step"
        if not step
        else f"step: from burst {step['burst_number']} (mark {step['mark_s']:g} s, first claim "
        f"{step['first_claim_s']:g} s) {step['size_after']} claims per burst instead of "
        f"{step['size_before']} (factor {step['factor']:g}), to the end"
    )
    if not restart:
        restart_text = "no controller restart"
    else:
        downs = ", ".join(
            f"{r['restart']['down_seconds']:g} s {run_name(r)}" for r in runs if r.get("restart")
        )
        restart_text = (
            f"controller restart at {restart['at_s']:g} s in every run (SIGTERM, wait for the "
            f"exit, started again with the same flags); down (SIGTERM -> new process Ready): "
            f"{downs}"
        )
    return [f"Seed {seed}; {step_text}; {restart_text}.", ""]


def md_table(result: dict[str, Any]) -> str:
    runs = [result["autoscaled"], *result["static_runs"]]
    # pool creates: results written before they were counted have no column
    churn = all("pool_creates" in r["whole"] for r in runs)
    lines = [
        *md_header(result),
        "| run | window | claims | warm | from the pool | p50 / p99 / max latency "
        "| idle sandbox-s | "
        + ("pool creates (deleted before Ready) | " if churn else "")
        + "mean pool | runtime |",
        "|---|---|---|---|---|---|---|---|---|" + ("---|" if churn else ""),
    ]
    for r in runs:
        name = run_name(r)
        for key, window in (
            ("after_warmup", f"from {r['measured_from']:g} s (measured)"),
            ("whole", "whole run"),
        ):
            w = r[key]
            lat = w["latency_ms"]
            creates = (
                f" **{w['pool_creates']}** ({w['pool_deletes_before_ready']}) |" if churn else ""
            )
            lines.append(
                f"| {name} | {window} | {w['claims']} | **{w['warm_share'] * 100:.1f} %** "
                f"({w['warm']}) | {w['from_pool']} | {lat['p50']} / {lat['p99']} / {lat['max']} ms"
                f" | **{w['idle_sandbox_seconds']:.0f}** |{creates} {w['mean_pool']} | "
                f"{r['runtime_seconds']:.0f} s |"
            )
    lines.append("")
    for r in runs:
        lines.append(
            f"- per burst, warm / claims, {run_name(r)}: {burst_line(r.get('per_burst') or [])}"
        )
    if churn:
        lines.append(
            "- pool creates before the trace's start (the initial fill): "
            + ", ".join(
                f"{run_name(r)} {(r.get('before_trace') or {}).get('pool_creates')}" for r in runs
            )
        )
    f = result["figures"]
    lines.append("")
    creates = ""
    if churn:
        creates = (
            f" Pool creates after the warm-up: autoscaled {f['autoscaled_pool_creates']}, "
            f"static {f['static_pool_creates']} (whole run {f['autoscaled_pool_creates_whole_run']}"
            f" / {f['static_pool_creates_whole_run']})."
        )
    lines.append(
        f"Compared with static {f['static_size']}: idle ratio autoscaled / static "
        f"**{f['idle_ratio']}** ({f['fewer_idle_percent']} % fewer idle sandbox-seconds after "
        f"the warm-up; whole run {f['fewer_idle_percent_whole_run']} %); autoscaled warm "
        f"{f['autoscaled_warm_share'] * 100:.1f} %, static warm {f['static_warm_share'] * 100:.1f} "
        f"% (whole run {f['autoscaled_warm_share_whole_run'] * 100:.1f} % / "
        f"{f['static_warm_share_whole_run'] * 100:.1f} %).{creates} "
        f"Goal (after the warm-up: ≥ 97 % warm, ≥ 15 % fewer idle sandbox-seconds): "
        f"**{'met' if f['goal_met'] else 'not met'}**."
    )
    sim = result.get("simulator") or {}
    for name in ("measured here", "local"):
        got = sim.get(name)
        if got:
            lines.append("")
            extra = ""
            if "autoscaled_creates" in got:
                extra = (
                    f" Pool creates (whole run) {got['autoscaled_creates']} vs "
                    f"{got['static_creates']}; restart at "
                    f"{', '.join(f'{x:g} s' for x in sim.get('restarts') or []) or 'none'} "
                    "(no down time simulated)."
                )
            lines.append(
                f"Simulator ({name} slot times, {got['refill_samples']} samples, mean "
                f"{got['refill_mean_s']} s), target {sim['target_warm_share'] * 100:.1f} % after "
                f"the warm-up: smallest static {got['static_size']} (tried "
                f"{', '.join(f'{k} -> {v * 100:.1f} %' for k, v in got['sizes_tried'].items())});"
                f" its autoscaled pool {got['autoscaled_warm_share'] * 100:.1f} % warm, idle "
                f"{got['autoscaled_idle']:.0f} vs static {got['static_idle'] or 0:.0f}.{extra}"
            )
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [result["autoscaled"], *result["static_runs"]]
    fig, axes = plt.subplots(len(runs), 1, figsize=(12, 3.6 * len(runs)), sharex=True)
    if len(runs) == 1:
        axes = [axes]
    for ax, r in zip(axes, runs, strict=True):
        s = r["series"]
        t = [x[0] for x in s]
        ax.step(t, [x[1] for x in s], where="post", label="spec.replicas")
        ax.step(t, [x[2] for x in s], where="post", label="pool sandboxes (idle)")
        ax.step(t, [x[3] for x in s], where="post", label="Ready pool sandboxes", alpha=0.7)
        ax.set_ylabel("sandboxes")
        ax.set_ylim(bottom=0)
        twin = ax.twinx()
        times = r["claim_times"]
        if times:
            bins = [i * 2.0 for i in range(int(max(times) / 2.0) + 2)]
            twin.hist(times, bins=bins, color="grey", alpha=0.3, label="claims per 2 s")
        twin.set_ylabel("claims per 2 s")
        w = r["after_warmup"]
        name = run_name(r)
        ax.axvline(r["measured_from"], color="black", linestyle=":", label="measured from")
        step = result.get("step")
        if step:
            ax.axvline(step["first_claim_s"], color="green", linestyle="--", label="step")
        restart = r.get("restart")
        if restart:
            ax.axvspan(
                restart["sigterm_at_s"],
                restart["ready_again_at_s"],
                color="red",
                alpha=0.25,
                label="controller down (restart)",
            )
        creates = f", pool creates {w['pool_creates']}" if "pool_creates" in w else ""
        ax.set_title(
            f"{name}: after the warm-up warm {w['warm_share'] * 100:.1f} %, idle "
            f"{w['idle_sandbox_seconds']:.0f} sandbox-s{creates}, p99 "
            f"{w['latency_ms']['p99']} ms"
        )
        ax.legend(loc="upper left", fontsize=8)
    axes[-1].set_xlabel("seconds from the trace's start")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


async def main_async(opts: Options, out: Path, static: int | None) -> dict[str, Any]:
    b = Bench(out, smoke=opts.smoke)
    t_start = time.monotonic()
    b.start()
    try:
        await b.connect()
        await b.check_healthy()
        machine = machine_facts(b.cluster)
        # --smoke: no calibration (its seconds); the slot times seen in the autoscaled run
        slot = [] if opts.smoke else await calibrate(b, opts)
        auto = await run_once(b, opts, "autoscaled", None)
        slot = slot or auto["slot_seconds"]
        sim: dict[str, Any] = {}
        if static is None:
            sim = await asyncio.to_thread(simulate_static, opts, auto, slot, out)
            static = sim["measured here"]["static_size"] or 1
        goal = auto["after_warmup"]["warm_share"] or 0.0
        static_runs = [await run_once(b, opts, f"static-{static}", static)]

        def reaches(r: dict[str, Any]) -> bool:
            return (r["after_warmup"]["warm_share"] or 0.0) >= goal

        if not opts.smoke:
            # the simulator's size checked on the cluster: missed -> one size up; reached -> one
            # size down (is it the smallest?)
            other = static + (1 if not reaches(static_runs[0]) else -1)
            if other >= 1:
                static_runs.append(await run_once(b, opts, f"static-{other}", other))
            static_runs.sort(key=lambda r: int(r["static"]))
        runs = [auto, *static_runs]
        good = [r for r in static_runs if reaches(r)]
        chosen = good[0] if good else static_runs[-1]
        aw, sw = auto["after_warmup"], chosen["after_warmup"]
        ratio = aw["idle_sandbox_seconds"] / sw["idle_sandbox_seconds"]
        ratio_whole = (
            auto["whole"]["idle_sandbox_seconds"] / chosen["whole"]["idle_sandbox_seconds"]
        )
        figures = {
            "seed": opts.trace.seed,
            "restart_at_s": opts.restart_at,
            "autoscaled_warm_share": aw["warm_share"],
            "static_size": chosen["static"],
            "static_warm_share": sw["warm_share"],
            "static_reaches_autoscaled_share": (sw["warm_share"] or 0.0) >= goal,
            "autoscaled_idle_sandbox_seconds": aw["idle_sandbox_seconds"],
            "static_idle_sandbox_seconds": sw["idle_sandbox_seconds"],
            "autoscaled_pool_creates": aw["pool_creates"],
            "static_pool_creates": sw["pool_creates"],
            "autoscaled_pool_creates_whole_run": auto["whole"]["pool_creates"],
            "static_pool_creates_whole_run": chosen["whole"]["pool_creates"],
            "autoscaled_pool_deletes_before_ready": aw["pool_deletes_before_ready"],
            "static_pool_deletes_before_ready": sw["pool_deletes_before_ready"],
            "idle_ratio": round(ratio, 3),
            "fewer_idle_percent": round((1 - ratio) * 100, 1),
            "fewer_idle_percent_whole_run": round((1 - ratio_whole) * 100, 1),
            "autoscaled_warm_share_whole_run": auto["whole"]["warm_share"],
            "static_warm_share_whole_run": chosen["whole"]["warm_share"],
            "autoscaled_latency_ms": aw["latency_ms"],
            "static_latency_ms": sw["latency_ms"],
            "goal_met": (aw["warm_share"] or 0.0) >= WARM_GOAL and ratio <= 1 - SAVING_GOAL,
        }
        return {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "trace": opts.trace.describe(),
            "trace_params": opts.trace.__dict__,
            "seed": opts.trace.seed,
            "step": opts.trace.step(),
            "restart": None
            if opts.restart_at is None
            else {
                "at_s": opts.restart_at,
                "how": "SIGTERM to the controller's PID, wait for its exit (SIGKILL after 30 s), "
                "start it again with the same flags; the same time in every run",
                "down_seconds": {
                    r["label"]: (r["restart"] or {}).get("down_seconds") for r in runs
                },
            },
            "autoscaler": autoscaler_obj(opts)["spec"],
            "controller_flags": "default (--extensions; autoscaler on, built-in settings)",
            "warmup_bursts_excluded_in_after_warmup": opts.warmup_bursts,
            "machine": machine,
            "figures": figures,
            "simulator": sim,
            "calibration_slot_seconds": sorted(round(x, 4) for x in slot),
            "autoscaled": auto,
            "static_runs": static_runs,
            "total_seconds": round(time.monotonic() - t_start, 1),
        }
    finally:
        await b.close()
        b.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None, help="every file here (see the doc)")
    p.add_argument("--smoke", action="store_true", help="1 burst of 5 claims, seconds")
    p.add_argument("--bursts", type=int, default=None)
    p.add_argument("--size", type=int, default=None, help="claims per burst")
    p.add_argument("--period", type=float, default=None)
    p.add_argument("--jitter", type=float, default=None)
    p.add_argument("--spread", type=float, default=None)
    p.add_argument("--dwell", type=float, default=None)
    p.add_argument("--seed", type=int, default=1, help="the trace's random seed")
    p.add_argument(
        "--step-at",
        type=int,
        default=None,
        help="the load steps up from this burst (0-based; default 4: the fifth burst)",
    )
    p.add_argument(
        "--step-factor", type=float, default=None, help="claims per burst times this (default 2)"
    )
    p.add_argument(
        "--restart-at",
        type=float,
        default=None,
        help="restart the controller at this many seconds from the trace's start (default: half "
        "a period after the step burst's mark)",
    )
    p.add_argument("--no-restart", action="store_true", help="no controller restart")
    p.add_argument("--target", type=float, default=0.99, help="targetWarmShare")
    p.add_argument("--min-replicas", type=int, default=1)
    p.add_argument("--stabilization", type=float, default=15.0)
    p.add_argument("--static", type=int, default=None, help="static size (skip the simulator)")
    args = p.parse_args(argv)
    base = (
        TraceSpec(bursts=1, size=5, period=10, jitter=0, spread=1, dwell=1, first=3)
        if args.smoke
        else TraceSpec()
    )
    trace = replace(
        base,
        **{
            k: v
            for k, v in {
                "bursts": args.bursts,
                "size": args.size,
                "period": args.period,
                "jitter": args.jitter,
                "spread": args.spread,
                "dwell": args.dwell,
                "step_at": args.step_at,
                "step_factor": args.step_factor,
            }.items()
            if v is not None
        },
        seed=args.seed,
    )
    warmup_bursts = 0 if args.smoke else 2
    step_at = trace.step_at if trace.stepped else None
    if step_at is not None and not args.smoke and not warmup_bursts <= step_at <= trace.bursts - 2:
        p.error(
            f"--step-at {step_at}: the step comes after the {warmup_bursts} warm-up bursts and "
            f"at least two bursts before the end (at most {trace.bursts - 2})"
        )
    restart_at = (
        None
        if args.no_restart
        else args.restart_at
        if args.restart_at is not None
        else default_restart(trace, args.smoke)
    )
    opts = Options(
        trace=trace,
        target=args.target,
        min_replicas=args.min_replicas,
        stabilization=args.stabilization,
        warmup_bursts=warmup_bursts,
        smoke=args.smoke,
        restart_at=restart_at,
    )
    if restart_at is not None and not opts.measured_from < restart_at < opts.trace_end():
        p.error(
            f"--restart-at {restart_at:g}: the restart falls after the warm-up "
            f"({opts.measured_from:g} s) and before the trace's end ({opts.trace_end():.1f} s)"
        )
    if args.out is None:
        if args.smoke:
            p.error("--smoke needs --out DIR (a smoke run never writes into bench/results/)")
        json_dir, out = RESULTS, WORK / "autoscale_real"
    else:
        try:
            refuse_smoke_in_results(args.out, smoke=args.smoke)
        except SmokeInResults as err:
            p.error(str(err))
        json_dir = out = args.out
    out.mkdir(parents=True, exist_ok=True)
    json_dir.mkdir(parents=True, exist_ok=True)
    static = args.static
    try:
        result = asyncio.run(main_async(opts, out, static))
    except BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    result["command"] = " ".join(["python", "bench/autoscale_real.py", *sys.argv[1:]])
    result["smoke"] = opts.smoke
    (json_dir / "autoscale_real.json").write_text(json.dumps(result, indent=1, default=str))
    md = f"{result['trace']}\n\n" + md_table(result)
    (out / "autoscale_real.md").write_text(md)
    plot(result, out / "autoscale_real.png")
    print(md)
    print(
        f"wrote {json_dir}/autoscale_real.json and {out}/autoscale_real.{{md,png}} "
        f"({result['total_seconds']:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
