"""The discrete-event simulation of one warm pool (no cluster).

Events, in simulated seconds: claims arrive (from a :class:`~.traces.Trace`); a claim adopts the
oldest Ready pool sandbox (**warm**) or goes **cold** (its latency is a create -> Ready draw);
the pool reconciles — the real :func:`agentsandbox.controllers.warmpool.plan.plan` on a Snapshot
of fake Sandbox objects — and its creates become Ready after a draw from the latency
distribution; optionally the autoscaler calls the real
:func:`agentsandbox.controllers.autoscaler.plan.decide` every ``decide_interval`` seconds and
sets ``spec.replicas``.

Reconciles are coalesced per 100 ms of simulated time, as the work queue coalesces the events of
one pool: every event that enqueues the pool in a 100 ms tick leads to one reconcile at the end of
that tick. The pool is enqueued by what can change its plan: a member adopted by a claim, a
change of ``spec.replicas``, and the ``requeue_after`` a plan asks for (the stuck-sandbox
deadline). A Sandbox turning Ready re-queues the real pool too, but that pass only rewrites
the pool's status (creates and deletes count members, Ready or not), so it is not simulated.

Two shortcuts keep a simulated day within seconds, both exact for what the simulator uses:

- the template and the pool's metadata never change, so the template's two hashes
  (``pod_template_hash``, ``sandbox_blueprint_hash``), the blueprint of a create
  (``build_blueprint``) and the parsed creation timestamps are memoised while a simulation
  runs (:func:`fast_plan`);
- **the compact view**: when the pool is not above ``spec.replicas`` (no excess to delete) plan
  is shown all not-Ready members that are past or nearest their readiness deadline plus a few
  Ready ones, with ``spec.replicas`` lowered by the number hidden. Creates (``replicas -
  members``), stuck replacements and the requeue deadline come out the same; above
  ``spec.replicas`` (a scale-down: the deletion order looks at every member) plan sees the whole
  pool. ``check_view=True`` runs plan on the whole pool as well and asserts the same decisions
  (the unit tests do).

Scenario events (:class:`Config`): ``restarts`` (the controller restarts at these times: the
autoscaler's memory is lost and its windows are rebuilt from a relist), ``skew`` (the
controller's clock minus the API server's) and ``never_ready`` (no member ever becomes Ready;
plan replaces them at its readiness deadline). A restart or a skew makes the autoscaler observe
through the controller's own windows (:mod:`.informer`) instead of the exact times.

Not modelled: API latency and errors, the API server slowing down under many creates (the
create -> Ready draws are independent of the load), expectations (the simulated cache sees every
write at once), terminating sandboxes (deletes are instant), claims adopting a not-Ready pool
sandbox (the real claim controller takes the oldest not-Ready one whose pod has an IP when no
Ready one is left; here such a claim is cold), the claim's own writes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import heapq
import math
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from agentsandbox.api import keys
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.kinds import SANDBOX, SANDBOX_WARM_POOL
from agentsandbox.controllers.autoscaler.plan import (
    ArrivalBins,
    Memory,
    Observation,
    Policy,
    decide,
    occupancy_span,
)
from agentsandbox.controllers.warmpool import plan as warmpool_plan
from agentsandbox.controllers.warmpool.plan import Settings, Snapshot

from .fastplan import fast_plan
from .informer import Informed
from .latency import Latency
from .traces import Trace

EPOCH = 1_800_000_000.0  # simulated t = 0 as a wall-clock time (timestamps in the objects)
TICK = 0.1  # seconds: reconciles coalesced per tick
SERVED_WINDOW = 600.0  # seconds of served counts the autoscaler is given (the claim controller's)
# seconds: a warm claim (p50 of the claim rate sweep at 10 claims/s, docs/benchmarks.md)
WARM_LATENCY = 0.017
NAMESPACE = "sim"
POOL = "pool"
VISIBLE_READY = 4  # Ready members the compact view shows
VISIBLE_NOT_READY = 8  # not-Ready members it shows beyond those past their deadline

TEMPLATE: dict[str, Any] = {
    "apiVersion": SANDBOX_WARM_POOL.api_version,
    "kind": "SandboxTemplate",
    "metadata": {"name": "tpl", "namespace": NAMESPACE, "uid": "uid-tpl"},
    "spec": {"podTemplate": {"spec": {"containers": [{"name": "agent", "image": "agent:1"}]}}},
}
OWNER = [
    {
        "apiVersion": SANDBOX_WARM_POOL.api_version,
        "kind": "SandboxWarmPool",
        "name": POOL,
        "uid": "uid-pool",
        "controller": True,
        "blockOwnerDeletion": True,
    }
]
LABELS = {keys.LABEL_WARM_POOL_SANDBOX: name_hash(POOL)}
READY_STATUS = {"conditions": [{"type": "Ready", "status": "True", "reason": "DependenciesReady"}]}
PENDING_STATUS = {
    "conditions": [{"type": "Ready", "status": "False", "reason": "DependenciesNotReady"}]
}


@functools.lru_cache(maxsize=4096)
def _stamp(t: float) -> str:
    return dt.datetime.fromtimestamp(EPOCH + t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Member:
    uid: str
    created: float  # simulated seconds (the object's timestamp is this, to the second)
    obj: dict[str, Any]
    ready_at: float | None = None


@dataclass
class Result:
    label: str
    trace: str
    latency: str
    replicas: int | None  # a static pool's size (None: autoscaled)
    claims: int = 0  # after the warm-up
    warm: int = 0
    claims_all: int = 0  # the whole run
    warm_all: int = 0
    latencies: list[float] = field(default_factory=list)  # seconds, after the warm-up
    idle_seconds: float = 0.0  # pool members (starting or Ready, unclaimed) x seconds
    ready_idle_seconds: float = 0.0  # Ready unclaimed members x seconds
    measured_seconds: float = 0.0
    claimed_seconds: float = 0.0  # claims x dwell (+ cold wait), after the warm-up
    creates: int = 0
    deletes: int = 0
    deletes_before_ready: int = 0  # members deleted while not Ready (stuck or excess)
    restarts: int = 0
    plan_calls: int = 0
    decisions: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    max_replicas: int = 0
    # never_ready: when the first member that never becomes Ready was created; and each time the
    # circuit breaker tripped (a new trip, as the controller emits one Warning Event per trip)
    stuck_since: float | None = None
    breaker_trips: list[float] = field(default_factory=list)
    # (t, spec.replicas, members, ready) every sample_every seconds
    series: list[tuple[float, int, int, int]] = field(default_factory=list)
    runtime: float = 0.0

    @property
    def warm_share(self) -> float:
        return self.warm / self.claims if self.claims else 1.0

    @property
    def warm_share_all(self) -> float:
        return self.warm_all / self.claims_all if self.claims_all else 1.0

    @property
    def mean_pool(self) -> float:
        return self.idle_seconds / self.measured_seconds if self.measured_seconds else 0.0

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


@dataclass(frozen=True)
class Config:
    trace: Trace
    latency: Latency
    seed: int = 1
    static: int | None = None  # a static pool of this size, else autoscaled by policy
    policy: Policy | None = None
    decide_interval: float = 5.0  # seconds between autoscaler decisions (the sync period)
    # a claim makes the autoscaler decide within this many seconds (its events, coalesced by the
    # controller's minimum interval); None: only every decide_interval
    decide_on_claims: float | None = 1.0
    # seconds of claim arrivals the autoscaler is given (None: the policy's rate window, as the
    # controller keeps them)
    arrival_window: float | None = None
    refill_samples: int = 200  # recent create -> Ready durations it is given
    warmup: float = 3600.0  # seconds at the start not counted in the figures
    sample_every: float = 10.0
    settings: Settings = field(default_factory=Settings)
    check_view: bool = False  # run plan on the whole pool too and compare (slow; for tests)
    # scenario events (module doc): controller restarts (seconds), clock skew (controller minus
    # API server, seconds), members that never become Ready
    restarts: tuple[float, ...] = ()
    skew: float = 0.0
    never_ready: bool = False
    informed: bool = False  # observe through the controller's windows even without the above

    def __post_init__(self) -> None:
        for at in self.restarts:
            if not self.warmup < at < self.trace.duration:
                raise ValueError(
                    f"a restart at {at:g}s is not after the warm-up ({self.warmup:g}s) and "
                    f"before the end ({self.trace.duration:g}s) of the trace"
                )


def default_policy() -> Policy:
    return Policy(min_replicas=1, max_replicas=2000, target_warm_share=0.99)


class Simulation:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        # common random numbers (docs/autoscaling.md, "The simulator"): two runs of a trace
        # draw the same time for claim i's cold start, for the refill replacing claim i's
        # adoption (``replacing``: the claims waiting for theirs), for the n-th other create
        self.draws = f"sim-{cfg.seed}-{cfg.latency.name}"
        self.replacing: deque[int] = deque()
        self.other_creates = 0
        self.policy = cfg.policy or default_policy()
        self.window = (
            cfg.arrival_window if cfg.arrival_window is not None else self.policy.rate_window
        )
        self.autoscaled = cfg.static is None
        self.replicas = cfg.static if cfg.static is not None else self.policy.min_replicas
        self.pool: dict[str, Any] = {
            "apiVersion": SANDBOX_WARM_POOL.api_version,
            "kind": "SandboxWarmPool",
            "metadata": {
                "name": POOL,
                "namespace": NAMESPACE,
                "uid": "uid-pool",
                "generation": 1,
            },
            "spec": {"replicas": self.replicas, "sandboxTemplateRef": {"name": "tpl"}},
        }
        self.members: dict[str, Member] = {}
        self.pending: dict[str, None] = {}  # not-Ready members, oldest first
        self.ready: dict[str, None] = {}  # Ready members, oldest Ready first
        self.heap: list[tuple[float, int, int, str]] = []
        self.seq = 0
        self.ticks: set[int] = set()
        self.names = 0
        # (arrival, served warm) of the claims in the window: the claim controller's counts,
        # in process (a restart empties them)
        self.served: deque[tuple[float, bool]] = deque()
        self.served_total = [0, 0]  # (warm, cold) since the controller (re)started
        self.bins = ArrivalBins(self.policy.bin_width)  # the arrivals, as the controller bins them
        self.periodic_decision = 0.0  # the next periodic pass
        self.claim_decision: float | None = None  # a pass for claims, pending
        self.refills: deque[float] = deque(maxlen=cfg.refill_samples)
        self.memory = Memory()
        self.last_ready: float | None = None  # when a member last became Ready
        self.informed: Informed | None = None
        if cfg.informed or cfg.restarts or cfg.skew:
            self.informed = Informed(EPOCH, NAMESPACE, POOL, self.window, cfg.skew, cfg.trace.dwell)
        self.decide_epoch = 0  # a restart starts a new chain of passes
        label = f"static {cfg.static}" if cfg.static is not None else "autoscaled"
        self.result = Result(label, cfg.trace.name, cfg.latency.name, cfg.static)
        self.last_t = 0.0

    # ------------------------------------------------------------------------- bookkeeping
    def _push(self, t: float, kind: int, data: str = "") -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, data))

    def _enqueue(self, t: float) -> None:
        k = math.floor(t / TICK + 1e-9) + 1
        if k not in self.ticks:
            self.ticks.add(k)
            self._push(k * TICK, RECONCILE, str(k))

    def _draw(self, key: str) -> float:
        return self.cfg.latency.draw(random.Random(f"{self.draws}-{key}"))

    def _account(self, t: float) -> None:
        """Integrate the idle pool up to ``t`` (only after the warm-up)."""
        start = max(self.last_t, self.cfg.warmup)
        if t > start:
            dt_ = t - start
            self.result.idle_seconds += len(self.members) * dt_
            self.result.ready_idle_seconds += len(self.ready) * dt_
            self.result.measured_seconds += dt_
        self.last_t = max(self.last_t, t)

    def _create(self, t: float, ready: bool = False) -> None:
        self.names += 1
        uid = f"sb-{self.names}"
        created = math.floor(t)  # the API's timestamps are to the second
        obj = {
            "apiVersion": SANDBOX.api_version,
            "kind": "Sandbox",
            "metadata": {
                "name": f"{POOL}-{self.names:07d}",
                "namespace": NAMESPACE,
                "uid": uid,
                "labels": LABELS,
                "ownerReferences": OWNER,
                "creationTimestamp": _stamp(created),
            },
            "status": READY_STATUS if ready else PENDING_STATUS,
        }
        member = Member(uid, t, obj)
        self.members[uid] = member
        if self.cfg.never_ready and self.result.stuck_since is None:
            self.result.stuck_since = t
        if ready and self.informed is not None:
            obj["status"] = self.informed.initial_status()
        if ready and not self.cfg.never_ready:
            member.ready_at = t
            self.ready[uid] = None
            return
        if ready:
            obj["status"] = PENDING_STATUS
        self.pending[uid] = None
        if not self.cfg.never_ready:
            if self.replacing:
                key = f"refill-{self.replacing.popleft()}"
            else:
                self.other_creates += 1
                key = f"create-{self.other_creates}"
            self._push(t + self._draw(key), READY, uid)
        if self.informed is not None:
            self.informed.sandbox_added(t, obj)

    def _remove(self, uid: str) -> None:
        self.members.pop(uid, None)
        self.pending.pop(uid, None)
        self.ready.pop(uid, None)

    # ------------------------------------------------------------------------- reconcile
    def _view(self, t: float) -> tuple[list[dict[str, Any]], int]:
        """The sandboxes plan sees and how many members are hidden from it."""
        if self.replicas < len(self.members):
            return [m.obj for m in self.members.values()], 0
        grace = self.cfg.settings.readiness_grace_period
        shown: list[dict[str, Any]] = []
        extra = 0
        for uid in self.pending:
            m = self.members[uid]
            if t - math.floor(m.created) <= grace:
                extra += 1
                if extra > VISIBLE_NOT_READY:
                    break
            shown.append(m.obj)
        for i, uid in enumerate(self.ready):
            if i >= VISIBLE_READY:
                break
            shown.append(self.members[uid].obj)
        return shown, len(self.members) - len(shown)

    def _plan(self, t: float, sandboxes: list[dict[str, Any]], hidden: int) -> warmpool_plan.Plan:
        pool = {**self.pool, "spec": {**self.pool["spec"], "replicas": self.replicas - hidden}}
        snap = Snapshot(
            pool=pool,
            sandboxes=sandboxes,
            template=TEMPLATE,
            template_error=None,
            now=EPOCH + t,
            settings=self.cfg.settings,
        )
        return warmpool_plan.plan(snap)

    def _reconcile(self, t: float) -> None:
        shown, hidden = self._view(t)
        out = self._plan(t, shown, hidden)
        self.result.plan_calls += 1
        if self.cfg.check_view and hidden:
            full = self._plan(t, [m.obj for m in self.members.values()], 0)
            assert full.create == out.create, (t, full.create, out.create)
            assert [s["metadata"]["uid"] for s in full.delete_stuck] == [
                s["metadata"]["uid"] for s in out.delete_stuck
            ]
            assert not full.delete_excess and not out.delete_excess
            assert full.requeue_after == out.requeue_after, (full.requeue_after, out.requeue_after)
        self._account(t)
        for sb in [*out.delete_stale, *out.delete_stuck, *out.delete_excess]:
            uid = sb["metadata"]["uid"]
            if uid in self.pending:
                self.result.deletes_before_ready += 1
            if self.informed is not None and uid in self.members:
                self.informed.sandbox_deleted(t, self.members[uid].obj)
            self._remove(uid)
            self.result.deletes += 1
        for _ in range(out.create):
            self._create(t)
            self.result.creates += 1
        if out.create and self.cfg.never_ready:
            # the creates' watch events re-queue the pool, which then times their deadline
            # (otherwise an adoption or a size change does, which never_ready may not have)
            self._enqueue(t)
        if out.requeue_after is not None:
            self._enqueue(t + out.requeue_after)

    # ------------------------------------------------------------------------- events
    def _arrive(self, t: float) -> None:
        cfg = self.cfg
        counted = t >= cfg.warmup
        self.result.claims_all += 1
        self.served.append((t, bool(self.ready)))
        self.bins.add(t, self.policy.group_gap)
        if (
            self.autoscaled
            and cfg.decide_on_claims is not None
            and self.claim_decision is None
            and self.periodic_decision > t + cfg.decide_on_claims
        ):
            self.claim_decision = t + cfg.decide_on_claims
            self._push(self.claim_decision, DECIDE, f"claim-{self.decide_epoch}")
        self.served_total[0 if self.ready else 1] += 1
        if self.ready:
            self._account(t)
            uid = next(iter(self.ready))
            self._remove(uid)
            self.replacing.append(self.result.claims_all)
            self._enqueue(t)
            latency = WARM_LATENCY
            self.result.warm_all += 1
            if counted:
                self.result.warm += 1
        else:
            latency = self._draw(f"cold-{self.result.claims_all}")
        if counted:
            self.result.claims += 1
            self.result.latencies.append(latency)
            self.result.claimed_seconds += latency + cfg.trace.dwell
        if self.informed is not None:
            self.informed.claim_added(t, latency)

    def _ready(self, t: float, uid: str) -> None:
        member = self.members.get(uid)
        if member is None:
            return  # deleted before it was Ready
        self._account(t)
        member.ready_at = t
        if self.informed is not None:
            old = {**member.obj}
            member.obj["status"] = self.informed.ready_status(t)
            self.informed.sandbox_ready(t, old, member.obj)
        else:
            member.obj["status"] = READY_STATUS
        del self.pending[uid]
        self.ready[uid] = None
        self.last_ready = t
        self.refills.append(t - member.created)

    def _decide(self, t: float) -> None:
        # the claim controller's served counts keep 10 minutes
        while self.served and self.served[0][0] <= t - SERVED_WINDOW:
            self.served.popleft()
        warm = sum(1 for _, w in self.served if w)
        if self.informed is not None:
            obs = self.informed.observe(t, self.replicas)
            self.memory = self.informed.memory
        else:
            self.bins.trim(t, self.window)
            obs = Observation(
                now=t,
                arrivals=(),
                bins=self.bins,
                refill_seconds=list(self.refills),
                current_replicas=self.replicas,
            )
        # the circuit breaker's inputs: the oldest not-Ready member's age (pending is oldest
        # first), the last Ready transition; the pool always progresses (never_ready members
        # are stuck, replaced at the readiness deadline: the pool's Ready reason is Scaling)
        oldest = next(iter(self.pending), None)
        obs = dataclasses.replace(
            obs,
            served=(warm, len(self.served) - warm),
            served_total=(self.served_total[0], self.served_total[1]),
            oldest_not_ready_age=t - self.members[oldest].created if oldest else None,
            last_ready_age=t - self.last_ready if self.last_ready is not None else None,
        )
        tripped = self.memory.breaker_since
        d = decide(obs, self.policy, self.memory)
        if d.stalled and self.memory.breaker_since != tripped:
            # the circuit breaker tripped in this pass (the controller's Warning Event)
            self.result.breaker_trips.append(t)
        span = occupancy_span(self.policy, self.memory)
        self.bins.span = span
        if self.informed is not None:
            self.informed.windows.set_span([self.informed.key], span)
        self.result.decisions += 1
        self.result.reasons[d.reason] = self.result.reasons.get(d.reason, 0) + 1
        if d.replicas != self.replicas:
            self.replicas = d.replicas
            self.pool["spec"]["replicas"] = d.replicas
            self._enqueue(t)

    def _restart(self, t: float) -> None:
        """The controller restarts: the autoscaler relists (its memory is gone) and passes
        start again now; the pool is reconciled once as every object is re-queued."""
        self.result.restarts += 1
        self.served.clear()
        self.served_total = [0, 0]
        if self.informed is not None:
            self.informed.restart(t, [m.obj for m in self.members.values()])
            self.memory = self.informed.memory
        if self.autoscaled:
            self.decide_epoch += 1
            self.claim_decision = None
            self.periodic_decision = t
            self._push(t, DECIDE, str(self.decide_epoch))
        self._enqueue(t)

    def _sample(self, t: float) -> None:
        self.result.series.append((t, self.replicas, len(self.members), len(self.ready)))
        if t >= self.cfg.warmup:
            self.result.max_replicas = max(self.result.max_replicas, self.replicas)

    # ------------------------------------------------------------------------- run
    def run(self) -> Result:
        started = time.perf_counter()
        cfg = self.cfg
        end = cfg.trace.duration
        for _ in range(self.replicas):  # the pool starts full at its initial size
            self._create(0.0, ready=True)
        if self.autoscaled:
            self._push(0.0, DECIDE, "0")
        for at in cfg.restarts:
            self._push(at, RESTART)
        if cfg.never_ready:
            self._enqueue(0.0)  # the first pass times the not-Ready members' deadlines
        self._push(0.0, SAMPLE)
        arrivals = cfg.trace.arrivals
        i, n = 0, len(arrivals)
        heap = self.heap
        with fast_plan():
            while True:
                next_arrival = arrivals[i] if i < n else math.inf
                next_event = heap[0][0] if heap else math.inf
                t = min(next_arrival, next_event)
                if t >= end:
                    break
                if next_arrival <= next_event:
                    i += 1
                    self._arrive(t)
                    continue
                _, _, kind, data = heapq.heappop(heap)
                if kind == READY:
                    self._ready(t, data)
                elif kind == RECONCILE:
                    self.ticks.discard(int(data))
                    self._reconcile(t)
                elif kind == DECIDE:
                    if data == f"claim-{self.decide_epoch}":
                        self.claim_decision = None
                        self._decide(t)  # a pass for claims: the periodic chain goes on
                        continue
                    if data != str(self.decide_epoch):
                        continue  # a pass of the process before a restart
                    self._decide(t)
                    self.periodic_decision = t + cfg.decide_interval
                    self._push(self.periodic_decision, DECIDE, data)
                elif kind == RESTART:
                    self._restart(t)
                else:
                    self._sample(t)
                    self._push(t + cfg.sample_every, SAMPLE)
        self._account(end)
        self.result.runtime = time.perf_counter() - started
        return self.result


READY, RECONCILE, DECIDE, SAMPLE, RESTART = range(5)


def simulate(cfg: Config) -> Result:
    return Simulation(cfg).run()
