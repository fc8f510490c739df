"""Warm-pool autoscaler: the sizing decision (pure). Observation in, decision out; no I/O, no
clock reads. The caller keeps :class:`Memory` between decisions.

**The model.** A claim is served warm when the pool has a Ready sandbox for it; adopting one starts
a replacement that becomes Ready one refill time later. With Poisson claim arrivals at rate ``λ``,
a mean refill time ``T`` and immediate replacement, the pool of ``N`` is an Erlang loss system: the
``N`` pool slots are the servers, a slot is busy while its replacement is being made, a claim that
finds every slot busy is served cold (and does not occupy a slot). The share of cold claims is
Erlang-B(N, λT) — whatever the distribution of the refill time, only its mean counts. The base size
is the smallest ``N`` with ``1 - ErlangB(N, λT) ≥ target``.

**Bursts** are what static Poisson sizing misses: many claims within one refill time. Arrivals are
binned (``Policy.burst_bin`` seconds); a bin far above the median bin (a Poisson tail test) is
bursty, and a run of bursty bins is a burst *episode* (start, end, size above the base). Episodes
are remembered across decisions (:class:`Memory`). From them the decision learns

- the **size** a burst needs from the pool: the claims that arrive within one refill time inside a
  burst, sized by Erlang-B (``min(S, servers(S·min(1, T/D)))``: for a refill longer than the
  burst that is the whole burst ``S``; for a fast refill a handful);
- **when** the next burst comes, if bursts recur regularly (gaps within a factor of 2 of each
  other): the pool grows by that headroom ``lead`` seconds before the earliest expected start.
  While a replacement made now would be Ready before the burst's expected end (its start + the
  longest burst seen + the decision margin) the headroom is a rolling buffer and held whole;
  after that it shrinks to the claims still to come, so replacements that cannot serve this
  burst do not sit idle until the next one. The lead comes from the
  measured refill times and the burst's length (:func:`lead_time`: the claims late in a burst
  can wait for the slower creates) plus the decision cadence;
- for bursts that do not recur regularly the headroom is held all the time (nothing to predict).

**No refill time yet.** The decision is ``NoData`` and keeps the current size (within min..max),
except a pool at 0 with claims arriving: it gets ``max(minReplicas, 1)`` (``Bootstrap``), as a
pool that creates nothing never gives a refill sample.

**Stabilisation.** Up at once; down only to the highest base recommendation of the last
``scale_down_window`` seconds (HPA's rule). The learned burst schedule is a forecast, not noise,
so it is not stabilised: its headroom comes at the predicted time and goes as the burst is served.

**The circuit breaker** (:func:`decide` around the sizing): while the pool's members do not
become Ready, or the pool reports it cannot progress, the size never grows (the refill time is
stale); reason ``MembersNeverReady`` / ``PoolNotReady``, :attr:`Decision.stalled`.

**Optional: the target over a horizon** (``Policy.warm_share_horizon`` > 0): the base size
minimises ``N + price·λ·ErlangB(N, λT)``, the price adapted so that the predicted cold share over
the horizon meets ``1 - target`` (quiet hours may run below the target where that costs few
claims). Off by default.

Limits (docs/design/autoscaler.md, "Limits of the model"): Poisson within a regime, refill times
independent of the load (a real API server slows down under a burst of creates), one pool, bursts
detected at bin granularity, a schedule learned only from regular gaps (no time-of-day
seasonality).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

REASON_NO_DATA = "NoData"
REASON_BOOTSTRAP = "Bootstrap"
REASON_SCALED_UP = "ScaledUp"
REASON_SCALED_DOWN = "ScaledDown"
REASON_HOLDING = "HoldingForWindow"
REASON_AT_MINIMUM = "AtMinimum"
REASON_AT_MAXIMUM = "AtMaximum"
REASON_STEADY = "Steady"
# the circuit breaker (not sizing reasons: ScalingActive=False)
REASON_MEMBERS_NEVER_READY = "MembersNeverReady"
REASON_POOL_NOT_READY = "PoolNotReady"


@dataclass(frozen=True)
class Policy:
    min_replicas: int
    max_replicas: int
    target_warm_share: float  # e.g. 0.99: the share of claims to serve warm
    scale_down_window: float = 300.0  # seconds a lower recommendation must hold before scaling down
    # seconds of arrivals the rate is measured over (at most; less while less was observed)
    rate_window: float = 600.0
    # added to the measured create -> Ready time: the work queue's coalescing and the create call
    # before the create is timed (the slot is busy from the adoption, not from the create)
    refill_overhead: float = 0.1
    # burst detection: bin width (seconds) and the least excess claims an episode must have
    burst_bin: float = 10.0
    burst_min_claims: int = 10
    # how many past episodes the burst size and spacing are learned from
    burst_history: int = 12
    # 0: the target holds at every moment (Erlang-B at the current rate). > 0: it holds on
    # average over about this many seconds of claims: the size minimises sandboxes + mu x
    # predicted cold claims, mu adapted so the predicted cold share over the horizon meets the
    # allowance (a sandbox is added where it saves the most cold claims; a quiet night may run
    # below the target where it costs few claims). See docs/design/autoscaler.md, "The
    # decision" (item 7); the results in docs/autoscaling.md, "Results".
    warm_share_horizon: float = 0.0
    # the circuit breaker (docs/design/autoscaler.md, "A pool that never becomes Ready"): it
    # trips when the oldest not-Ready member is older than breaker_factor x the p99 refill time
    # (breaker_default when none was measured), kept within breaker_floor..breaker_cap — the
    # cap below the pool's readiness grace period (300 s by default), after which the pool
    # replaces a stuck member and the oldest not-Ready one is young again
    breaker_factor: float = 3.0
    breaker_default: float = 120.0
    breaker_floor: float = 60.0
    breaker_cap: float = 240.0


@dataclass(frozen=True)
class Observation:
    now: float  # seconds (any epoch, monotonic in tests/sim)
    arrivals: Sequence[float]  # claim creation times seen (the caller keeps a window, e.g. 10 min)
    refill_seconds: Sequence[float]  # recent pool-sandbox create->Ready durations
    current_replicas: int  # the pool's spec.replicas now
    # the circuit breaker's inputs: seconds since the oldest not-Ready pool member was created
    # (None: every member is Ready), whether the pool reports it can progress (its Ready
    # condition not SandboxCreateFailed, SandboxesBlocked, TemplateNotFound or TemplateError),
    # and seconds since a member was last seen turning Ready (None: not seen)
    oldest_not_ready_age: float | None = None
    pool_progressing: bool = True
    pool_condition: str = ""  # the pool's Ready reason and message, for the decision's message
    last_ready_age: float | None = None


@dataclass
class Burst:
    start: float  # first claim of the episode
    end: float  # last claim seen in it
    size: int  # claims above the base level


@dataclass
class Memory:
    """Kept by the caller between decisions; starts empty."""

    recommendations: list[tuple[float, int]] = field(default_factory=list)
    first_seen: float | None = None  # earliest time observed (first decision or arrival)
    last_decision: float | None = None
    refill_mean: float | None = None  # last measured (kept when the samples run out)
    refill_p99: float | None = None
    refill_sorted: list[float] = field(default_factory=list)  # the last samples, sorted
    bursts: list[Burst] = field(default_factory=list)
    # warm_share_horizon: the cold-claim price (sandbox-seconds per cold claim) and the
    # predicted claims and cold claims over the horizon (exponentially decayed)
    cold_price: float | None = None
    claims_seen: float = 0.0
    cold_seen: float = 0.0
    breaker_since: float | None = None  # when the circuit breaker tripped (None: not tripped)


@dataclass(frozen=True)
class Decision:
    replicas: int  # the pool size to set (within min..max)
    reason: str  # CamelCase: see the REASON_* constants
    message: str  # human sentence: why (rate, refill time, Erlang-B cold share, headroom)
    arrival_rate: float  # per second, as measured (all claims in the window)
    refill_time: float  # seconds: the mean create -> Ready time measured (+ refill_overhead)
    predicted_warm_share: float  # 1 - ErlangB(replicas, base rate x refill time)
    base_replicas: int = 0  # Erlang-B size for the base (non-burst) rate
    burst_headroom: int = 0  # added for a burst (predicted, ongoing or unpredictable)
    base_rate: float = 0.0  # per second, claims outside burst episodes
    next_burst: float | None = None  # earliest expected start of the next burst, if predicted
    stalled: bool = False  # the circuit breaker is tripped: no growth (ScalingActive=False)


# ------------------------------------------------------------------------------------ Erlang-B
def erlang_b(servers: int, offered_load: float) -> float:
    """Blocking probability of an M/G/N/N loss system: the recursion
    ``B(0) = 1, B(n) = a·B(n-1) / (n + a·B(n-1))`` (stable: no factorials, no powers)."""
    if servers < 0:
        raise ValueError("servers must be >= 0")
    if offered_load < 0:
        raise ValueError("offered_load must be >= 0")
    b = 1.0
    for n in range(1, servers + 1):
        ab = offered_load * b
        b = ab / (n + ab)
    return b


def servers_for(offered_load: float, target: float, cap: int) -> int:
    """The smallest N ≤ cap with ``1 - ErlangB(N, a) ≥ target``; ``cap + 1`` if none is."""
    if offered_load <= 0:
        return 0
    b = 1.0
    n = 0
    while 1.0 - b < target:
        if n > cap:
            return cap + 1
        n += 1
        ab = offered_load * b
        b = ab / (n + ab)
    return n


# ------------------------------------------------------------------------------------ helpers
def lead_time(refills: Sequence[float], duration: float, target: float) -> float:
    """How long before a burst of ``duration`` seconds its headroom must be created.

    The burst's claims arrive spread over ``duration``; the share ``p`` of them that arrives first
    needs Ready sandboxes only ``p·duration`` after the start. Sandboxes created ``lead`` seconds
    before the start are Ready by then in the share ``F(lead + p·duration)`` (F: the refill
    times' distribution, from the samples). Every ``p`` up to the target must be covered:
    ``lead = max over p <= target of (Q(p) - p·duration)``.
    """
    ordered = sorted(refills)
    n = len(ordered)
    lead = 0.0
    for k, q in enumerate(ordered):
        p = k / n
        if p > target:
            break
        lead = max(lead, q - p * duration)
    return lead


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[rank]


def _episodes(arrivals: Sequence[float], start: float, now: float, policy: Policy) -> list[Burst]:
    """Burst episodes among ``arrivals`` in (start, now]: runs of bins far above the median."""
    width = policy.burst_bin
    first = math.floor(start / width)
    last = math.floor(now / width)
    nbins = last - first + 1
    if nbins < 3:
        return []
    counts = [0] * nbins
    members: list[list[float]] = [[] for _ in range(nbins)]
    for t in arrivals:
        if start < t <= now:
            i = math.floor(t / width) - first
            counts[i] += 1
            members[i].append(t)
    base = sorted(counts)[nbins // 2]
    threshold = base + max(3.0, 4.0 * math.sqrt(base) + 1.0)
    out: list[Burst] = []
    run: list[int] = []

    def close() -> None:
        if not run:
            return
        count = sum(counts[i] for i in run)
        span = run[-1] - run[0] + 1
        excess = count - base * span
        if excess >= max(policy.burst_min_claims, 6.0 * math.sqrt(base * span + 1.0)):
            times = [t for i in run for t in members[i]]
            out.append(Burst(start=min(times), end=max(times), size=int(excess)))

    for i, c in enumerate(counts):
        if c >= threshold:
            if run and i - run[-1] > 2:  # a gap of more than one quiet bin ends the episode
                close()
                run = []
            run.append(i)
    close()
    return out


def _merge(memory: Memory, found: list[Burst], policy: Policy) -> None:
    slack = 2 * policy.burst_bin
    for ep in found:
        for old in memory.bursts:
            if ep.start <= old.end + slack and ep.end >= old.start - slack:
                old.start = min(old.start, ep.start)
                old.end = max(old.end, ep.end)
                old.size = max(old.size, ep.size)
                break
        else:
            memory.bursts.append(ep)
    memory.bursts.sort(key=lambda b: b.start)
    del memory.bursts[: max(0, len(memory.bursts) - (policy.burst_history + 1))]


def _in_episodes(t: float, bursts: Sequence[Burst]) -> bool:
    return any(b.start <= t <= b.end for b in bursts)


# ------------------------------------------------------------------------------------ decide
def breaker_limit(policy: Policy, memory: Memory) -> float:
    """Seconds a pool member may stay not Ready before the circuit breaker trips."""
    base = (
        policy.breaker_factor * memory.refill_p99
        if memory.refill_p99 is not None
        else policy.breaker_default
    )
    return min(max(base, policy.breaker_floor), policy.breaker_cap)


def decide(obs: Observation, policy: Policy, memory: Memory) -> Decision:
    """The size (:func:`_size`), then the circuit breaker. It trips when the pool's members
    do not become Ready — the oldest not-Ready one is older than :func:`breaker_limit` and no
    member turned Ready within that limit — or the pool reports it cannot progress. While
    tripped the size never grows (the refill time it is sized on is stale, and every claim is
    served cold whatever the size); scale-down is unchanged. It holds, even while the pool
    replaces its stuck members, until the pool progresses and a member becomes Ready after
    the trip (or no member is left not Ready)."""
    sized = _size(obs, policy, memory)
    limit = breaker_limit(policy, memory)
    age = obs.oldest_not_ready_age
    old = age is not None and age > limit
    # a slow but healthy pool has members turning Ready all the time; a broken one has none
    idle = obs.last_ready_age is None or obs.last_ready_age > limit
    if memory.breaker_since is not None and obs.pool_progressing:
        ready_since_trip = (
            obs.last_ready_age is not None and obs.now - obs.last_ready_age >= memory.breaker_since
        )
        if ready_since_trip or age is None:
            memory.breaker_since = None
    if memory.breaker_since is None:
        if obs.pool_progressing and not (old and idle):
            return sized
        memory.breaker_since = obs.now
    frozen = max(obs.current_replicas, policy.min_replicas)
    replicas = min(sized.replicas, frozen)
    if not obs.pool_progressing:
        reason = REASON_POOL_NOT_READY
        why = "the pool reports it cannot progress" + (
            f" ({obs.pool_condition})" if obs.pool_condition else ""
        )
    else:
        reason = REASON_MEMBERS_NEVER_READY
        why = (
            f"a pool member is still not Ready {age:.0f}s after its create (limit {limit:.0f}s)"
            if old and age is not None
            else "no pool member has become Ready since the breaker tripped "
            f"{obs.now - memory.breaker_since:.0f}s ago"
        )
    message = (
        f"{why}: scale-up frozen at {frozen} replicas (sizing wanted {sized.replicas}: "
        f"{sized.message}); resumes when a member becomes Ready"
    )
    return replace(sized, replicas=replicas, reason=reason, message=message, stalled=True)


def _size(obs: Observation, policy: Policy, memory: Memory) -> Decision:
    now = obs.now
    lo, hi = policy.min_replicas, max(policy.min_replicas, policy.max_replicas)
    current = obs.current_replicas
    cadence = (
        min(now - memory.last_decision, policy.rate_window)
        if memory.last_decision is not None and now > memory.last_decision
        else policy.burst_bin
    )
    memory.last_decision = now
    if memory.first_seen is None:
        memory.first_seen = now
    if obs.arrivals:
        memory.first_seen = min(memory.first_seen, min(obs.arrivals))

    if obs.refill_seconds:
        memory.refill_mean = sum(obs.refill_seconds) / len(obs.refill_seconds)
        memory.refill_p99 = _percentile(obs.refill_seconds, 0.99)
        memory.refill_sorted = sorted(obs.refill_seconds)
    if memory.refill_mean is None or memory.refill_p99 is None:
        keep = min(max(current, lo), hi)
        boot = min(max(lo, 1), hi)
        if keep == 0 and obs.arrivals and boot > 0:
            # a pool at 0 never creates, so never gives a refill sample: one sandbox, so that
            # one can be measured (minReplicas 0 would otherwise stay at 0, every claim cold)
            return Decision(
                replicas=boot,
                reason=REASON_BOOTSTRAP,
                message=(
                    f"no refill time measured yet and {len(obs.arrivals)} claims seen at 0 "
                    f"replicas: bootstrap to {boot} so that a refill can be measured"
                ),
                arrival_rate=0.0,
                refill_time=0.0,
                predicted_warm_share=0.0,
            )
        return Decision(
            replicas=keep,
            reason=REASON_NO_DATA,
            message=f"no refill time measured yet: keeping {keep} replicas",
            arrival_rate=0.0,
            refill_time=0.0,
            predicted_warm_share=0.0,
        )
    refill = memory.refill_mean + policy.refill_overhead
    margin = policy.refill_overhead + cadence

    # rates: all claims, and those outside burst episodes
    span = max(min(policy.rate_window, now - memory.first_seen), policy.burst_bin)
    since = now - span
    recent = [t for t in obs.arrivals if since < t <= now]
    rate = len(recent) / span
    _merge(memory, _episodes(recent, since, now, policy), policy)
    base_rate = sum(1 for t in recent if not _in_episodes(t, memory.bursts)) / span

    target = policy.target_warm_share
    base = servers_for(base_rate * refill, target, hi)
    if policy.warm_share_horizon > 0 and base_rate > 0:
        base = _priced_size(base_rate, refill, base, cadence, policy, memory)
    headroom, why, next_burst = _burst_headroom(now, recent, refill, margin, policy, memory)

    # HPA stabilisation on the base recommendation; the burst schedule adds on top
    base_rec = min(max(base, lo), hi)
    memory.recommendations.append((now, base_rec))
    horizon = now - policy.scale_down_window
    memory.recommendations = [(t, n) for t, n in memory.recommendations if t >= horizon]
    stable = max(n for _, n in memory.recommendations)
    need = base + headroom  # unclamped
    rec = min(max(base_rec + headroom, lo), hi)
    wanted = min(max(base_rec + headroom, lo), hi)
    if wanted < current:
        wanted = min(current, max(wanted, min(stable + headroom, hi)))
    replicas = wanted

    load = base_rate * refill
    cold = erlang_b(base, load) if base <= hi else erlang_b(hi, load)
    predicted = 1.0 - erlang_b(max(replicas - headroom, 0), load)
    if policy.warm_share_horizon > 0:
        decay = math.exp(-cadence / policy.warm_share_horizon)
        memory.claims_seen = memory.claims_seen * decay + base_rate * cadence
        memory.cold_seen = memory.cold_seen * decay + base_rate * cadence * (1.0 - predicted)
    # the measured create -> Ready (mean, p99) and the overhead the slot adds to it
    timing = (
        f"create -> Ready mean {memory.refill_mean:.3g}s (p99 {memory.refill_p99:.3g}s) "
        f"+ {policy.refill_overhead:g}s"
    )
    if load > 0:
        sizing = (
            f"offered load {load:.3g}, Erlang-B cold share {cold:.2%} at {min(base, hi)} "
            f"for a {target:.2%} target"
        )
    else:
        sizing = "no claims outside bursts: no base size needed"
    parts = [f"claims {rate:.3g}/s ({base_rate:.3g}/s outside bursts), {timing}: {sizing}"]
    if headroom:
        parts.append(f"burst headroom {headroom} ({why})")
    elif why:
        parts.append(why)
    if replicas > current:
        reason = REASON_SCALED_UP
        parts.append(f"scaled up {current} -> {replicas}")
    elif replicas < current:
        reason = REASON_SCALED_DOWN
        parts.append(f"scaled down {current} -> {replicas}")
    elif need > hi and replicas == hi:
        reason = REASON_AT_MAXIMUM
        parts.append(f"needs {need}, held at the maximum {hi}")
    elif rec < current:
        reason = REASON_HOLDING
        parts.append(
            f"recommends {rec}; holding {current}: a higher recommendation "
            f"within the last {policy.scale_down_window:g}s"
        )
    elif need <= lo and replicas == lo:
        reason = REASON_AT_MINIMUM
        parts.append(f"at the minimum {lo}")
    else:
        reason = REASON_STEADY
        parts.append(f"keeping {replicas}")
    return Decision(
        replicas=replicas,
        reason=reason,
        message="; ".join(parts),
        arrival_rate=rate,
        refill_time=refill,
        predicted_warm_share=predicted,
        base_replicas=base_rec,
        burst_headroom=headroom,
        base_rate=base_rate,
        next_burst=next_burst,
    )


def _priced_size(
    rate: float, refill: float, strict: int, cadence: float, policy: Policy, memory: Memory
) -> int:
    """The size minimising ``N + price x rate x ErlangB(N, rate x refill)``: sandboxes are added
    while the next one saves at least 1/price cold claims per second. The price starts where
    this size equals the per-moment one (``strict``) and is adapted (a time constant of a tenth
    of the horizon) towards the predicted cold share over the horizon meeting ``1 - target``."""
    load = rate * refill
    allowance = 1.0 - policy.target_warm_share
    if memory.cold_price is None:
        saved = rate * (erlang_b(max(strict - 1, 0), load) - erlang_b(strict, load))
        memory.cold_price = 1.0 / max(saved, 1e-12)
    elif memory.claims_seen > 0 and allowance > 0:
        share = memory.cold_seen / memory.claims_seen
        step = cadence / (0.1 * policy.warm_share_horizon)
        ratio = min(max(share / allowance, 0.1), 10.0)
        memory.cold_price *= math.exp(min(step, 1.0) * math.log(ratio))
    price = memory.cold_price
    n = 0
    b = 1.0
    while n <= policy.max_replicas:
        nxt = load * b / (n + 1 + load * b)
        if price * rate * (b - nxt) < 1.0:
            break
        n, b = n + 1, nxt
    return n


def _burst_headroom(
    now: float,
    recent: Sequence[float],
    refill: float,
    margin: float,
    policy: Policy,
    memory: Memory,
) -> tuple[int, str, float | None]:
    """(headroom, why, next expected burst start) from the learned episodes."""
    bursts = memory.bursts
    if not bursts:
        return 0, "", None
    cap = policy.max_replicas
    target = policy.target_warm_share
    ongoing = bursts[-1] if bursts[-1].end >= now - 2 * policy.burst_bin else None
    done = [b for b in bursts if b is not ongoing][-policy.burst_history :]

    def need(size: int, duration: float) -> int:
        # the claims of one refill time within the burst: all of them when the refill is
        # longer than the burst
        load = size * min(1.0, refill / max(duration, 1e-9))
        return min(size, servers_for(load, target, cap))

    if ongoing is not None:
        seen = sum(1 for t in recent if t >= ongoing.start)
        if done:
            size = max(b.size for b in done)
            duration = max(b.end - b.start for b in done)
            expected_end = ongoing.start + duration + margin
            if now + refill < expected_end:
                # a replacement made now is Ready before the burst should be over: the headroom
                # is a rolling buffer, held whole (a claim seen is not yet a claim served — the
                # adoption lags — and a smaller pool deletes not-Ready replacements first, then
                # the newest Ready members, which the burst's claims still to come need).
                # Otherwise replacements cannot serve this burst and the headroom shrinks to
                # the claims still to come.
                return (
                    need(size, duration),
                    f"burst under way: {seen} of ~{size} claims seen, "
                    f"held until t+{expected_end - now:.0f}s",
                    None,
                )
            remaining = max(0, size - seen)
            return (
                min(need(size, duration), remaining),
                f"burst under way: {seen} of ~{size} claims seen",
                None,
            )
        # a first burst: react at its own rate
        duration = max(now - ongoing.start, policy.burst_bin)
        return need(seen, duration), f"burst under way: {seen} claims so far", None
    size = max(b.size for b in done)
    duration = max(b.end - b.start for b in done)
    headroom = need(size, duration)
    starts = [b.start for b in done]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    if not gaps:
        return 0, f"one burst of {size} seen; waiting for a second to learn the spacing", None
    gmin, gmax = min(gaps), max(gaps)
    if gmax > 2 * gmin:
        return headroom, f"bursts of up to {size} at irregular gaps: held", None
    # the shortest gap seen, less a slack (a few samples rarely hold the true minimum) and a
    # bin (episodes start at bin granularity). The slack: for n gaps spread uniformly the
    # smallest lies about range/(n-1) above the true minimum; never less than a quarter of the
    # range; from a single gap (no spread known yet) a quarter of that gap.
    n = len(gaps)
    slack = 0.25 * gmin if n == 1 else max(0.25, 1.0 / (n - 1)) * (gmax - gmin)
    earliest = starts[-1] + gmin - slack - policy.burst_bin
    lead = margin + lead_time(memory.refill_sorted, duration, target)
    if now > starts[-1] + 2 * gmax:
        return 0, f"bursts every ~{gmin:.0f}-{gmax:.0f}s stopped", None
    if now >= earliest - lead:
        return (
            headroom,
            f"next burst of ~{size} expected from t+{max(earliest - now, 0):.0f}s "
            f"(every {gmin:.0f}-{gmax:.0f}s, lead {lead:.0f}s)",
            earliest,
        )
    return (
        0,
        f"next burst of ~{size} expected in {earliest - now:.0f}s; growing {lead:.0f}s before",
        earliest,
    )
