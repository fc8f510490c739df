"""Warm-pool autoscaler: the sizing decision (pure; the caller keeps :class:`Memory`).

**The model.** A claim is served warm when the pool has a Ready sandbox for it; adopting one starts
a replacement that becomes Ready one refill time later. With Poisson claim arrivals at rate ``λ``,
a mean refill time ``T`` and immediate replacement, the pool of ``N`` is an Erlang loss system: the
``N`` pool slots are the servers, a slot is busy while its replacement is being made, a claim that
finds every slot busy is served cold. The share of cold claims is Erlang-B(N, a) with the offered
load ``a = λT`` — whatever the distribution of the refill time, only its mean counts.

**One rule, no burst/base split** (docs/design/autoscaler.md, "The decision"). The size is the
Erlang-B size of the offered load of the recent claims, from two windows as Knative's autoscaler
has them:

- the **stable** estimate: the claims of the last ``stable_window`` seconds (at most what was
  observed); while they are consistent with the **long** rate (:class:`LongWindow`, the claims
  of ``long_horizon`` seconds exponentially weighted) and nothing rises, the long rate, so that
  a steady load is not sized on the chance of one window;
- the **panic** estimate: the claims of the last ``panic_window`` seconds. When it is far above
  the stable one (a rise no Poisson noise explains) the autoscaler *panics* for
  ``panic_hold`` seconds: it sizes on the higher of the two, and never scales down while the
  rise goes on (until the claims of ``settle_window`` are significantly fewer than the panic's
  highest rate predicts: a burst that ended; it then sizes as without a panic). A short
  window over-states a burst shorter than the refill time, so the panic load is capped at the
  claims of the last refill time (``max(T, panic_window)`` seconds).

**The occupancy floor.** A claim's *occupancy* is the number of claims within one refill time
up to it (itself included): the slots a static pool would have busy as it comes. A static pool of
``N`` serves warm the claims of occupancy at most ``N``, so the ``target`` quantile of the recent
claims' occupancies (``occupancy_window``, stretched with the scale-down window up to the
claims the window holds) is the smallest static pool that would have met the target over them,
whatever their shape: bursts shorter than any rate window, groups. Less what that quantile
over-states for Poisson claims at the stable load (Erlang-B's size is below the Poisson
quantile: a cold claim frees no slot), it floors the size. Counted per bin as the window sees
claims (:class:`ArrivalBins`), kept in the status.

**Grouped arrivals** (claims created together, as parallel rollouts do) raise the variance of the
load at the same mean. Claims less than ``group_gap`` seconds apart form a group; the window keeps
the claims and the sum of their groups' squared sizes per bin, so the **peakedness**
``z = 1 + κ·(E[X²]/E[X] - 1)`` of the load is measured (``X``: a group's size; ``κ = ∫S²/∫S`` of
the refill times' survival function ``S``, 1 for a constant refill, ½ for an exponential one).
The size follows Hayward's approximation: ``z`` times the Erlang-B size of ``a/z``.

**Stabilisation and rate limits** (HPA's ``behavior``). Up at once, down only to the highest
recommendation of the last ``scale_down_window`` seconds, never while panicking; each direction
is further limited by its policies (:class:`Rules`: at most so many sandboxes or percent per
period; the one allowing the larger change applies).

**Feedback from the realised warm share.** The caller gives the claims served warm and cold in
the window (the claim controller counts them per pool). While the realised cold share is
significantly above the allowance ``1 - target``, the scale-down window is stretched (doubled, up
to ``hold_max`` times), so that capacity the model would release between irregular bursts is
kept; it relaxes back with the time constant ``hold_relax``.

**Bursts on a schedule** (:mod:`cycle`). The panics' rises are recorded; when the latest
``cycle_rises`` or more fit a period (within ``cycle_tolerance`` of it), the pool holds between
two bursts only what the claims between them need (their Erlang-B size at the spec's target),
and from the refill p99 (plus ``cycle_lead`` and the schedule's spread) before the next is due,
the size without a schedule, at least the static pool that served the bursts' own claims. Not
while the realised cold share misses the allowance; a burst off the schedule breaks it.

**A silence** (:mod:`quiet`): no claim for the scale-down window or more where the long rate
would have brought many holds the size of ``quiet_scale`` times that rate, for ``quiet_hold``.

**State that survives a restart** is the window itself (:class:`ArrivalBins`, at most
``rate_window / bin_width`` bins): the caller writes it to the autoscaler's status and gives it
back after a restart (:meth:`Memory.restore`); the first pass after a restart also holds the
current size as a recommendation, so a restart never shrinks the pool.

**No refill time yet:** ``NoData``, the current size kept (within min..max); a pool at 0 with
claims gets ``max(minReplicas, 1)`` (``Bootstrap``): one that creates nothing is never measured.

**The circuit breaker** (:func:`decide` around the sizing): while the pool's members do not
become Ready, or the pool reports it cannot progress, the size never grows (the refill time is
stale); reason ``MembersNeverReady`` / ``PoolNotReady``, :attr:`Decision.stalled`. The limits
of the model: docs/design/autoscaler.md, "Limits of the model".
"""

from __future__ import annotations

import math

from agentsandbox.controllers.autoscaler.behavior import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    PERCENT,
    PODS,
    SELECT_DISABLED,
    SELECT_MAX,
    SELECT_MIN,
    Limit,
    Rules,
    limit,
)
from agentsandbox.controllers.autoscaler.breaker import guard
from agentsandbox.controllers.autoscaler.decision import (
    REASON_AT_MAXIMUM,
    REASON_AT_MINIMUM,
    REASON_BOOTSTRAP,
    REASON_HOLDING,
    REASON_NO_DATA,
    REASON_PANICKING,
    REASON_RATE_LIMITED,
    REASON_SCALED_DOWN,
    REASON_SCALED_UP,
    REASON_STEADY,
    Decision,
    Observation,
)
from agentsandbox.controllers.autoscaler.feedback import (
    forget_relaxation,
    steer_allowance,
    stretch_hold,
)
from agentsandbox.controllers.autoscaler.memory import (
    ESTIMATE_BOUNDS,
    Memory,
    breaker_limit,
    occupancy_span,
    parse_estimates,
)
from agentsandbox.controllers.autoscaler.policy import Policy
from agentsandbox.controllers.autoscaler.queueing import (
    erlang_b,
    hayward_blocking,
    hayward_servers,
    percentile,
    poisson_quantile,
    servers_for,
    settled_mean,
    slot_kappa,
)
from agentsandbox.controllers.autoscaler.window import (
    MIN_EVIDENCE,
    ArrivalBins,
    group_floor,
    occupancy_floor,
    significantly_above_groups,
    significantly_below,
    significantly_off,
)
from agentsandbox.controllers.autoscaler.window import trend as trend_of


# ------------------------------------------------------------------------------------ decide
def decide(obs: Observation, policy: Policy, memory: Memory) -> Decision:
    """The size (:func:`_size`), then the circuit breaker. It trips when the pool's members
    do not become Ready — the oldest not-Ready one is older than :func:`breaker_limit` and no
    member turned Ready within that limit — or the pool reports it cannot progress. While
    tripped the size never grows (the refill time it is sized on is stale, and every claim is
    served cold whatever the size); scale-down is unchanged. It holds, even while the pool
    replaces its stuck members, until the pool progresses and a member becomes Ready after
    the trip (or no member has been left not Ready for a whole limit)."""
    return guard(_size(obs, policy, memory), obs, policy, memory)


def _size(obs: Observation, policy: Policy, memory: Memory) -> Decision:
    now = obs.now
    lo, hi = policy.min_replicas, max(policy.min_replicas, policy.max_replicas)
    current = obs.current_replicas
    dt = now - memory.last_decision if memory.last_decision is not None else 0.0
    memory.last_decision = now
    if memory.first_seen is None:
        memory.first_seen = now
    # the window: the caller's bins, or the arrivals binned
    bins = obs.bins or ArrivalBins.of(obs.arrivals, policy.bin_width, policy.group_gap)
    arrived = next((i for i, c in enumerate(bins.claims) if c), None)
    if arrived is not None:
        memory.first_seen = min(memory.first_seen, (bins.first + arrived) * bins.width)
    if obs.arrivals:
        memory.first_seen = min(memory.first_seen, min(obs.arrivals))

    if obs.refill_seconds and (memory.refill_until is None or now >= memory.refill_until):
        memory.refill_until = None
        memory.refill_mean = settled_mean(
            memory.refill_mean,
            obs.refill_seconds,
            dt,
            policy.refill_horizon,
            policy.refill_sigmas,
        )
        memory.refill_p99 = percentile(obs.refill_seconds, 0.99)
        memory.refill_kappa = slot_kappa(obs.refill_seconds)
    if memory.refill_mean is None or memory.refill_p99 is None:
        keep = min(max(current, lo), hi)
        boot = min(max(lo, 1), hi)
        if keep == 0 and arrived is not None and boot > 0:
            # a pool at 0 never creates, so never gives a refill sample: one sandbox, so that
            # one can be measured (minReplicas 0 would otherwise stay at 0, every claim cold)
            return Decision(
                replicas=boot,
                reason=REASON_BOOTSTRAP,
                message=(
                    f"no refill time measured yet and {sum(bins.claims)} claims seen at 0 "
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
    target = policy.target_warm_share

    # the window, with what a previous process kept
    if memory.restored is not None:
        bins = bins.copy()
        bins.merge_max(memory.restored)
        memory.restored.trim(now, policy.rate_window)
        if not memory.restored.claims:
            memory.restored = None
    bins.trim(now, policy.rate_window)
    memory.window = bins

    # the stable and panic rates: the stable one over the current regime (since the last
    # significant change of rate, at most stable_window), the panic one over panic_window
    begin = memory.first_seen
    if memory.regime_start is not None:
        begin = max(begin, memory.regime_start)
    stable_claims, squares, largest, start = bins.total(max(now - policy.stable_window, begin))
    stable_span = max(now - max(start, begin), policy.bin_width)
    rate = stable_claims / stable_span
    # the index of dispersion of the counts: 1 for Poisson arrivals, E[X²]/E[X] for groups
    # (X: a group's size). It does not depend on the rate, so it is measured over about
    # group_horizon seconds (the closed bins, exponentially weighted), the window's own until
    # enough claims were seen
    decay = math.exp(-bins.width / policy.group_horizon)
    current_bin = math.floor(now / bins.width)
    uncounted = max(memory.counted_bin + 1, bins.first)  # the first closed bin not yet counted
    memory.long.count(bins, uncounted, current_bin, policy.long_horizon)
    for k in range(uncounted, current_bin):
        i = k - bins.first
        if i >= len(bins.claims):
            break
        memory.group_claims = memory.group_claims * decay + bins.claims[i]
        memory.group_squares = memory.group_squares * decay + bins.squares[i]
    memory.counted_bin = max(memory.counted_bin, current_bin - 1)
    if memory.group_claims >= max(stable_claims, 1):
        dispersion = max(1.0, memory.group_squares / memory.group_claims)
    else:
        dispersion = max(1.0, squares / stable_claims) if stable_claims else 1.0
    observed = max(now - memory.first_seen, policy.bin_width)
    panic_span = min(policy.panic_window, observed)
    panic_claims, _, _, pstart = bins.total(now - panic_span)
    panic_span = max(now - max(pstart, memory.first_seen), min(policy.bin_width, panic_span))
    panic_rate = panic_claims / panic_span
    expected = rate * panic_span
    was_panicking = memory.panic_until is not None and now < memory.panic_until
    if stable_span > panic_span and significantly_above_groups(
        panic_claims, expected, dispersion, largest, policy.panic_sigmas
    ):
        if not was_panicking or memory.panic_settled:
            memory.panic_peak, memory.panic_settled = 0.0, False
            memory.bursts.rose(now, policy)
            memory.rise_began = memory.last_rise = now
        memory.panic_until = now + policy.panic_hold
        memory.last_panic = now
        memory.regime_start = now - panic_span
    elif stable_span > 2 * panic_span and significantly_below(panic_claims, expected, dispersion):
        memory.regime_start = now - panic_span  # a significant drop: a new regime
        memory.dropped_at = now
    elif stable_span > 2 * policy.drift_window and rate * policy.drift_window >= MIN_EVIDENCE:
        # a slower change (a ramp): the last drift_window against the regime's rate, both ways
        drift_claims, _, _, dstart = bins.total(now - policy.drift_window)
        drift_expected = rate * (now - dstart)
        if significantly_off(drift_claims, drift_expected, dispersion):
            memory.regime_start = dstart
            if drift_claims > drift_expected:  # a slower rise: the same
                forget_relaxation(memory, memory.long.rate() * refill)
    panicking = memory.panic_until is not None and now < memory.panic_until
    if not panicking:
        memory.panic_until = None
        memory.bursts.ended(now)
    # a panic's rise is over when the claims of the last settle_window are significantly fewer
    # than its highest rate predicts (a burst that ended; a step goes on at that rate): the
    # panic then neither sizes on its load nor holds the size (it still marks a new regime,
    # and the stabilisation window keeps the floor's recommendations); it stays over until
    # the next rise starts a panic again
    if panicking and not memory.panic_settled:
        memory.panic_peak = max(memory.panic_peak, panic_rate)
        recent_claims, _, _, rstart = bins.total(now - policy.settle_window)
        recent_span = max(now - rstart, bins.width)
        memory.panic_settled = significantly_below(
            recent_claims, memory.panic_peak * recent_span, dispersion
        )
        if memory.panic_settled:
            memory.bursts.ended(now)
            memory.rise_began = None
        elif memory.rise_began is not None and now - memory.rise_began >= policy.panic_window:
            # a rise that outlasts the panic window is a change of the load, not a burst: a
            # relaxation learnt before it does not carry into it
            forget_relaxation(memory, memory.long.rate() * refill)
            memory.step_rise, memory.rise_began = memory.last_rise, None
    rising = panicking and not memory.panic_settled
    memory.bursts.fit(bins, now, policy)
    z, excess = 1.0, 0.0
    if stable_claims:
        # less the pairs Poisson arrivals make by chance (a claim within group_gap of the
        # previous one: probability about rate x group_gap, adding about 2 to the squares)
        excess = dispersion - 1.0 - 2.0 * rate * policy.group_gap
        z = 1.0 + memory.refill_kappa * max(0.0, excess)

    allowance = 1.0 - target
    # within the policy's bounds (a kept value may come from another policy)
    memory.allowance_scale = min(
        max(memory.allowance_scale, policy.feedback_min), policy.feedback_max
    )
    memory.hold = min(max(memory.hold, 1.0), max(policy.hold_max, 1.0))
    if obs.served_total is not None:
        # every claim counts once a whole stable window was observed (those of the start-up,
        # while the first members are made, say nothing of the sizing); a change of rate's cold
        # claims included: they are made up for by the claims after it
        counted = now - memory.first_seen >= policy.stable_window
        steer_allowance(obs.served_total, policy, memory, dt, counted, memory.long.rate(), refill)
    steered = min(allowance * memory.allowance_scale, 0.5)
    target = 1.0 - steered

    # a rising trend within the regime (a ramp too slow to be a change): the rate one refill
    # time ahead, when the least-squares slope of the bins is significantly positive
    # (tested once per bin, on the closed bins: as often whatever the passes' frequency). The
    # slope is fitted from the end of the last drop on (a regime that began with a drop, the
    # low panic window its first minute, rises from it when the drop was a chance dip: no
    # ramp), and only over drift_window of claims at least: a slope of a minute's bins,
    # extrapolated a refill time ahead, is chance times the refill time
    if memory.trend_bin != current_bin:
        memory.trend_bin = current_bin
        dropped = begin if memory.dropped_at is None else memory.dropped_at
        fitted = max(start, begin, dropped)
        closed = current_bin * bins.width
        memory.trend = (
            trend_of(bins, fitted, closed, dispersion)
            if stable_claims >= MIN_EVIDENCE and closed - fitted >= policy.drift_window
            else 0.0
        )
    trend = 0.0 if panicking else memory.trend
    ahead = rate
    # a steady load: the long horizon's rate when the window's claims are consistent with it
    # (the rate of a 30-minute window of a few dozen claims moves by a fifth with chance, and
    # an Erlang-B size on the edge of a step with it)
    long_rate = memory.long.rate()
    steady = (
        not panicking
        and trend <= 0
        and memory.long.span > stable_span
        and not significantly_off(
            stable_claims, long_rate * stable_span, dispersion, policy.floor_sigmas
        )
    )
    if steady:
        ahead = long_rate
    if trend > 0:
        # from the rate of the last drift_window (at most), its middle to a refill time ahead
        recent, _, _, rstart = bins.total(max(now - policy.drift_window, begin))
        span = max(now - max(rstart, begin), policy.bin_width)
        ahead = max(rate, recent / span + trend * (span / 2.0 + refill))
    load = ahead * refill
    # the occupancy floor (ArrivalBins): the smallest static pool that met the target over the
    # recent claims, whatever their shape (bursts shorter than the panic window, groups), less
    # what it over-states for Poisson claims (a cold claim frees no slot: Erlang-B's size is
    # below the Poisson quantile)
    # (the claims the window still holds: the stretch reaches no further back than rate_window)
    since = max(
        now - policy.occupancy_window * memory.hold, memory.first_seen, bins.first * bins.width
    )
    # in its place for bursts at random gaps: the size their claims needed (cycle.py), the
    # steering tightening it only; none for a steady grouped load (no rises): a clump of its
    # groups is chance, no change of the load
    tight = 1.0 - max(target, policy.target_warm_share)
    remembered = memory.bursts.memory_floor(policy, memory.long.rate(), now, tight, hi)
    occupied = remembered or (
        0
        if steady and excess > policy.grouped_excess
        else occupancy_floor(bins, since, 1.0 - target, current, policy.floor_sigmas, dispersion)
    )
    if occupied:
        base = rate * refill
        if memory.regime_start is not None and now - memory.regime_start < policy.panic_hold:
            # a young regime's rate may be a burst's: the whole stable window's until the regime
            # is panic_hold old (the floor and the panic load answer a rise meanwhile)
            whole, _, _, wstart = bins.total(max(now - policy.stable_window, memory.first_seen))
            base = whole / max(now - max(wstart, memory.first_seen), policy.bin_width) * refill
            load = max(base, ahead * refill if trend > 0 else 0.0)
        if not remembered:
            occupied -= max(0, 1 + poisson_quantile(base, target) - servers_for(base, target, hi))
    floor = min(occupied, hi + 1)
    if largest > 1 and stable_claims:
        # a group of G claims finds at most the Ready members there are: when the refill is fast
        # the pool is full as a group comes, and a pool of N serves G - N of them cold. With
        # each bin's largest group only (a lower bound on the cold claims), N must keep them
        # within the allowance of the window's claims
        groups = group_floor(bins, max(start, begin), (1.0 - target) * stable_claims)
        floor = max(floor, min(groups, hi + 1))
    # the size without a panic: what the stabilisation window keeps (a panic's size is not kept
    # past the panic when the occupancy is counted: the rise it answered is in the floor by then)
    calm = min(max(hayward_servers(load, z, target, hi), floor, lo), hi)
    if rising:
        # the panic load, at most the claims of the last refill time (a burst shorter than the
        # refill needs no more sandboxes than it has claims), unless the floor covers them
        recent, _, _, _ = bins.total(now - max(refill, policy.panic_window))
        if not occupied or recent > occupied:
            load = max(load, min(panic_rate * refill, float(recent)))
    need = max(hayward_servers(load, z, target, hi), floor)
    # a silence (quiet.py): the size of the long rate before it, at a tighter share
    held = memory.quiet.hold(bins, obs.arrivals, now, memory.long, refill, z, policy, hi)
    if held:
        need = calm = max(need, calm, held)
    rec = min(max(need, lo), hi)

    # the realised warm share: stretch the scale-down window while it misses the allowance
    realised, missing = stretch_hold(obs.served, policy, memory, now, dt)

    # bursts on a schedule (cycle.py): between the last one and the next one due, the size the
    # claims between bursts need; from the refill p99 (plus the rate limits' steps) before it,
    # the size without a schedule. Not while the realised share misses the target (the
    # schedule may be wrong), nor when the gap is too short to be worth a refill
    # at the spec's target, not the steered one: the steering learnt the sizing of the bursts,
    # not of the claims between them
    aim = max(target, policy.target_warm_share)
    between = None
    if not missing:
        between = memory.bursts.between(
            bins,
            policy,
            now,
            max(now - policy.stable_window, memory.first_seen),
            refill,
            memory.refill_p99,
            z,
            aim,
            (1.0 - aim) * stable_claims if largest > 1 and stable_claims else None,
        )
    if between is None:
        # as a burst is due: at least the size that served the bursts' own claims (those
        # between them are served by the size between them)
        rec = max(rec, memory.bursts.armed_floor(bins, since, now, 1.0 - aim, hi))

    # stabilisation (down only to the highest recommendation of the stretched window)
    # with the occupancy counted, a panic's recommendation is not kept past the panic: the
    # rise it answered is in the occupancy from then on (a burst's rate is not held)
    memory.recommendations.append((now, calm if occupied else rec))
    window = policy.scale_down_window * memory.hold
    horizon = now - window
    memory.recommendations = [(t, n) for t, n in memory.recommendations if t >= horizon]
    stable = max(n for _, n in memory.recommendations)
    wanted = rec
    quiet = memory.bursts.hold(between, current, now, policy.scale_down_window)
    if quiet is not None:
        wanted = quiet
    elif wanted < current:
        wanted = min(current, stable)
        if rising:
            wanted = current
    # rate limits (HPA behavior)
    longest = max(
        (lim.period for lim in (*policy.scale_up.limits, *policy.scale_down.limits)), default=0.0
    )
    memory.changes = [(t, d) for t, d in memory.changes if t > now - longest]
    limited = False
    if wanted > current:
        cap = limit(policy.scale_up, True, current, memory.changes, now)
        if cap is not None and wanted > cap:
            wanted, limited = max(cap, current), True
    elif wanted < current:
        lowest = limit(policy.scale_down, False, current, memory.changes, now)
        if lowest is not None and wanted < lowest:
            wanted, limited = min(lowest, current), True
    replicas = min(max(wanted, lo), hi)
    if replicas != current:
        memory.changes.append((now, replicas - current))

    predicted = 1.0 - hayward_blocking(replicas, load, z)
    timing = (
        f"create -> Ready mean {memory.refill_mean:.3g}s (p99 {memory.refill_p99:.3g}s) "
        f"+ {policy.refill_overhead:g}s"
    )
    parts = [
        f"claims {rate:.3g}/s over {stable_span:.0f}s ({panic_rate:.3g}/s over the last "
        f"{panic_span:.0f}s{', panicking' if rising else ', panic settling' if panicking else ''})"
        + (f", steady at {long_rate:.3g}/s over {policy.long_horizon:.0f}s" if steady else "")
        + f", {timing}: offered load "
        f"{load:.3g}"
        + (f" of peakedness {z:.2f}" if z > 1.0 else "")
        + f", {need} sandboxes for a {target:.2%} target"
        + (
            f" (the bursts remembered, as a static pool serves them: {floor})"
            if remembered and floor >= need
            else f" (the claims' occupancy over the last {now - since:.0f}s: {floor})"
            if floor >= need
            else " by Erlang-B"
        )
    ]
    if realised is not None:
        parts.append(f"realised warm share {realised:.2%} over the window")
    if memory.hold > 1.0 + 1e-6:
        parts.append(f"scale-down window stretched to {window:.0f}s")
    if held:
        parts.append(memory.quiet.describe(now, held))
    schedule = memory.bursts.describe(between, now)
    if schedule is not None:
        parts.append(schedule)
    if replicas > current:
        reason = REASON_RATE_LIMITED if limited else REASON_SCALED_UP
        parts.append(f"scaled up {current} -> {replicas}" + (" (rate-limited)" if limited else ""))
    elif replicas < current:
        reason = REASON_RATE_LIMITED if limited else REASON_SCALED_DOWN
        parts.append(
            f"scaled down {current} -> {replicas}" + (" (rate-limited)" if limited else "")
        )
    elif need > hi and replicas == hi:
        reason = REASON_AT_MAXIMUM
        parts.append(f"needs {need}, held at the maximum {hi}")
    elif limited:
        reason = REASON_RATE_LIMITED
        parts.append(f"recommends {rec}; rate limits keep {current}")
    elif rec < current and rising:
        reason = REASON_PANICKING
        parts.append(f"recommends {rec}; holding {current} while panicking")
    elif rec < current:
        reason = REASON_HOLDING
        parts.append(
            f"recommends {rec}; holding {current}: a higher recommendation within the last "
            f"{window:.0f}s"
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
        panic_rate=panic_rate,
        panicking=panicking,
        peakedness=z,
        realised_warm_share=realised,
        recommended=rec if between is None else between.size,
        burst_period=memory.bursts.cycle.period if memory.bursts.cycle is not None else 0.0,
    )


__all__ = [
    "DEFAULT_SCALE_DOWN",
    "DEFAULT_SCALE_UP",
    "ESTIMATE_BOUNDS",
    "PERCENT",
    "PODS",
    "SELECT_DISABLED",
    "SELECT_MAX",
    "SELECT_MIN",
    "ArrivalBins",
    "Decision",
    "Limit",
    "Memory",
    "Observation",
    "Policy",
    "Rules",
    "breaker_limit",
    "decide",
    "erlang_b",
    "hayward_blocking",
    "hayward_servers",
    "occupancy_span",
    "parse_estimates",
    "servers_for",
    "slot_kappa",
]
