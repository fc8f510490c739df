"""Warm-pool autoscaler: bursts that come on a schedule (pure; the decision's helper).

A burst shorter than the refill time is served warm only by sandboxes that were Ready before it
came, so without knowing when the next one comes the pool must hold a burst's worth of them all
the time: the best a reactive autoscaler can do is a static pool. When the bursts come on a
schedule (a cron job, a batch every ten minutes), the next one can be foreseen: between two
bursts the pool holds what the claims between them need, and grows back one refill time (its
99th percentile) before the next is due.

The schedule is learnt from the starts of the panics' rises (:class:`Rise`): at least
``cycle_rises`` of them, whose times fit ``phase + k * period`` within ``cycle_tolerance`` of a
period. Bursts at random gaps almost never do; a burst that comes off the schedule breaks the fit,
and the pool is sized as without a schedule until enough rises fit again.

Bursts at random gaps (no schedule) are handled in two ways:

- **Their size is remembered** (:meth:`Bursts.memory_floor`): each burst's claims are kept, and
  the pool as a burst comes is the smallest static pool that would have served the bursts of
  the long horizon within the allowance of all its claims, counted as a static pool serves
  them (a cold claim frees no slot), not by the occupancy, which over-states a burst's cold
  claims when refills are faster than their mean.
- **Their spacing is learnt** (:class:`Spacing`): from ``gap_rises`` gaps between rises, the
  next burst is not expected before the shortest gap is over, less the spread of the gaps
  over their count (the unbiased lower end of a uniform law): until then the pool holds what
  the claims between bursts need, as between the bursts of a schedule.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentsandbox.controllers.autoscaler.policy import Policy
from agentsandbox.controllers.autoscaler.queueing import hayward_servers
from agentsandbox.controllers.autoscaler.window import (
    ArrivalBins,
    bucket_value,
    group_floor,
    occupancy_bucket,
    quantile_floor,
)

#: rises kept (at most, and none older than the policy's long_horizon)
RISES_KEPT = 12
#: claims a rise keeps at most (from a refill time before it to its end): counting what a static
#: pool of one size would have served of them is one pass over them, and sizing the pool on the
#: bursts about nine such passes per rise, once (a few milliseconds); a rise among more claims
#: keeps none, and the occupancy sizes the pool as before
RISE_CLAIMS_KEPT = 4096


@dataclass
class Rise:
    """A panic's rise: when it was detected, and when it was over (``None``: it goes on)."""

    start: float
    end: float | None = None
    # its claims' times (None: not read yet; empty: not kept whole), from a refill time before
    # the panic window that detected it to its end: those before ``counted`` only fill slots
    claims: tuple[float, ...] | None = None
    counted: float = 0.0
    refill: float = 0.0  # seconds a slot is busy with a claim, as the claims were read
    cold: dict[int, int] = field(default_factory=dict)  # static size -> claims served cold


def served_cold(times: Sequence[float], counted: float, size: int, refill: float) -> int:
    """The claims from ``counted`` on (``times`` ascending) that a static pool of ``size``
    would have served cold, each warm claim's slot busy ``refill`` seconds (a cold claim frees
    none)."""
    busy: deque[float] = deque()
    cold = 0
    for t in times:
        while busy and busy[0] <= t:
            busy.popleft()
        if len(busy) < size:
            busy.append(t + refill)
        elif t >= counted:
            cold += 1
    return cold


@dataclass(frozen=True)
class Spacing:
    """Rises at random gaps, none expected sooner than ``period`` seconds after the last;
    learnt from ``rises`` gaps."""

    period: float
    rises: int
    spread: float = 0.0

    def next_mark(self, last_rise: float) -> float:
        return last_rise + self.period


def spacing_of(starts: Sequence[float], gaps: int) -> Spacing | None:
    """The spacing of the rises (``starts`` in order), from at least ``gaps`` gaps between them:
    the shortest gap less the spread of the gaps over one fewer than their count (``None``:
    fewer gaps, or no time left)."""
    between = [b - a for a, b in itertools.pairwise(starts)]
    if len(between) < max(gaps, 2):
        return None
    low, high = min(between), max(between)
    period = low - (high - low) / (len(between) - 1)
    return Spacing(period, len(between)) if period > 0 else None


@dataclass(frozen=True)
class Cycle:
    """Rises every ``period`` seconds, one due at ``phase``, each within ``spread`` seconds of
    its mark; learnt from ``rises`` of them."""

    period: float
    phase: float
    spread: float
    rises: int

    def mark_after(self, t: float) -> float:
        """The first mark after ``t``."""
        k = math.floor((t - self.phase) / self.period) + 1
        return self.phase + k * self.period

    def next_mark(self, last_rise: float) -> float:
        """The mark after the one ``last_rise`` answered."""
        return self.mark_after(last_rise + self.period / 2.0)


def cycle_of(
    starts: Sequence[float], rises: int, tolerance: float, least_spread: float
) -> Cycle | None:
    """The schedule of the latest rises (``starts`` in order), or ``None``: fewer than ``rises``
    of them, or no run of the latest ``rises`` or more whose times fit a line within
    ``tolerance`` of its period. The spread either side of a mark is twice the largest miss
    of the fit, at least ``least_spread`` and a twentieth of the period."""
    for n in range(len(starts), rises - 1, -1):
        ts = starts[len(starts) - n :]
        mean_i = (n - 1) / 2.0
        mean_t = sum(ts) / n
        sii = sum((i - mean_i) ** 2 for i in range(n))
        period = sum((i - mean_i) * (t - mean_t) for i, t in enumerate(ts)) / sii
        if period <= 0:
            continue
        misses = [abs(t - (mean_t + (i - mean_i) * period)) for i, t in enumerate(ts)]
        if max(misses) > tolerance * period:
            continue
        spread = max(2.0 * max(misses), least_spread, period / 20.0)
        return Cycle(period, mean_t + (n - 1 - mean_i) * period, spread, n)
    return None


def _burst_bins(
    bins: ArrivalBins, first: int, last: int, rises: Sequence[Rise], now: float, margin: float
) -> set[int]:
    """The bin indexes from ``first`` to ``last`` within ``margin`` seconds of a rise."""
    out: set[int] = set()
    for r in rises:
        end = now if r.end is None else r.end
        lo = math.floor((r.start - margin) / bins.width)
        hi = math.floor((end + margin) / bins.width)
        out.update(range(max(lo, first), min(hi, last) + 1))
    return out


def burst_floor(
    bins: ArrivalBins,
    since: float,
    now: float,
    rises: Sequence[Rise],
    margin: float,
    allowance: float,
) -> int:
    """The smallest static pool that would have served the claims of the bursts (the bins
    within ``margin`` seconds of a rise, from ``since`` on) cold at most ``allowance`` of the
    time; 0: none counted. The pool must be that large as a burst comes: the claims between
    bursts are sized apart."""
    first = max(math.floor(since / bins.width), bins.first)
    last = math.floor(now / bins.width)
    total: dict[int, int] = {}
    for k in _burst_bins(bins, first, last, rises, now, margin):
        i = k - bins.first
        if 0 <= i < len(bins.occupancy):
            for b, n in bins.occupancy[i].items():
                total[b] = total.get(b, 0) + n
    return quantile_floor(total, allowance)


def base_rate(
    bins: ArrivalBins, since: float, now: float, rises: Sequence[Rise], margin: float
) -> float:
    """Claims per second of the bins from ``since`` to ``now``, those within ``margin`` seconds
    of a rise (from its start to its end) left out: the claims between the bursts."""
    first = max(math.floor(since / bins.width), bins.first)
    last = math.floor(now / bins.width)
    skipped = _burst_bins(bins, first, last, rises, now, margin)
    claims = 0
    kept = 0
    for k in range(first, last + 1):
        if k in skipped:
            continue
        kept += 1
        i = k - bins.first
        if 0 <= i < len(bins.claims):
            claims += bins.claims[i]
    span = kept * bins.width - (((last + 1) * bins.width - now) if last not in skipped else 0.0)
    return claims / span if span > 0 else 0.0


@dataclass(frozen=True)
class Between:
    """The size between two bursts, until ``armed_at``; the next burst is due at ``due``."""

    size: int
    due: float
    armed_at: float


@dataclass
class Bursts:
    """What the decision keeps of the bursts: the panics' rises, the schedule they fit, and the
    sizes recommended between bursts (their stabilisation window). Kept in memory only."""

    rises: list[Rise] = field(default_factory=list)
    cycle: Cycle | None = None
    spacing: Spacing | None = None  # without a schedule: how far apart the rises are at least
    quiet: list[tuple[float, int]] = field(default_factory=list)

    def rose(self, now: float, policy: Policy) -> None:
        """A panic's rise started: a new burst, or the same one raised again while its claims
        are still in the panic window."""
        if self.rises and now - self.rises[-1].start <= policy.panic_window:
            self.rises[-1].end = None
        else:
            self.rises.append(Rise(now))

    def ended(self, now: float) -> None:
        """The rise going on is over (it settled, or its panic ended)."""
        if self.rises and self.rises[-1].end is None:
            self.rises[-1].end = now

    def fit(self, bins: ArrivalBins, now: float, policy: Policy) -> None:
        """The rises of the long horizon (at most :data:`RISES_KEPT`), their schedule or their
        spacing, and the claims of those that ended (:meth:`record`)."""
        self.rises = [r for r in self.rises if r.start >= now - policy.long_horizon][-RISES_KEPT:]
        self.cycle = cycle_of(
            [r.start for r in self.rises],
            policy.cycle_rises,
            policy.cycle_tolerance,
            2.0 * policy.bin_width,
        )
        self.spacing = (
            None
            if self.cycle is not None
            else spacing_of([r.start for r in self.rises], policy.gap_rises)
        )
        self.record(bins, now, policy)

    def record(self, bins: ArrivalBins, now: float, policy: Policy) -> None:
        """Keep the claims of the rises that ended (two bins ago): from a refill time (the
        occupancy's span) before the panic window that detected the rise, to its end. A rise
        whose claims the window no longer holds whole, or more than :data:`RISE_CLAIMS_KEPT`,
        keeps none."""
        margin = 2.0 * bins.width
        times = bins.times
        for r in self.rises:
            if r.claims is not None or r.end is None or r.end + margin > now:
                continue
            r.counted = r.start - policy.panic_window
            r.refill = bins.span
            first = r.counted - r.refill
            if bins.span <= 0 or not times or times[0] > first:
                r.claims = ()
                continue
            claims = tuple(t for t in times if first <= t <= r.end + margin)
            r.claims = claims if len(claims) <= RISE_CLAIMS_KEPT else ()

    def memory_floor(
        self, policy: Policy, rate: float, now: float, allowance: float, hi: int
    ) -> int:
        """Without a schedule, from ``memory_rises`` kept bursts on: the smallest static pool
        (in the occupancy's buckets) that would have served their claims cold at most
        ``allowance`` of the claims (at ``rate``) from the first of them to ``now``; 0: too
        few."""
        kept = [r for r in self.rises if r.claims]
        if self.cycle is not None or len(kept) < policy.memory_rises:
            return 0
        allowed = max(allowance * rate * (now - kept[0].counted), 1.0)

        def cold(size: int) -> int:
            total = 0
            for r in kept:
                if size not in r.cold:
                    r.cold[size] = served_cold(r.claims or (), r.counted, size, r.refill)
                total += r.cold[size]
            return total

        lo, top = 1, occupancy_bucket(max(hi, 1))
        if cold(bucket_value(top)) > allowed:
            return hi
        while lo < top:  # the smallest bucket whose size keeps the cold claims allowed
            mid = (lo + top) // 2
            if cold(bucket_value(mid)) <= allowed:
                top = mid
            else:
                lo = mid + 1
        return min(bucket_value(top), hi)

    def between(
        self,
        bins: ArrivalBins,
        policy: Policy,
        now: float,
        since: float,
        refill: float,
        refill_p99: float,
        z: float,
        target: float,
        grouped: float | None,
    ) -> Between | None:
        """The size between the last burst and the next one due (``None``: no schedule, a
        burst going on, armed for the next, or a gap too short to be worth a refill): the
        Hayward size of the claims between bursts from ``since`` on, at ``target``, and the
        group floor with ``grouped`` claims allowed cold (``None``: no groups)."""
        last = self.rises[-1] if self.rises else None
        schedule = self.cycle if self.cycle is not None else self.spacing
        if schedule is None or last is None or last.end is None:
            return None
        due = schedule.next_mark(last.start)
        arm = due - schedule.spread - refill_p99 - policy.refill_overhead - policy.cycle_lead
        # a schedule's gap is worth it from two refill times; a spacing's from any time (the
        # bursts' sizes are remembered: the pool is armed the same)
        worth = 2.0 * refill if schedule is self.cycle else 0.0
        if not (last.end <= now < arm and arm - last.end >= worth):
            return None
        hi = max(policy.min_replicas, policy.max_replicas)
        rate = base_rate(bins, since, now, self.rises, 2.0 * bins.width)
        if schedule is not self.cycle:
            # the remembered size spends the whole allowance on the bursts, as a static pool
            # does (it never serves a claim between them cold): little is left for these
            target = 1.0 - (1.0 - target) * policy.gap_quiet_share
        size = hayward_servers(rate * refill, z, target, hi)
        if grouped is not None:
            size = max(size, min(group_floor(bins, since, grouped), hi))
        return Between(min(max(size, policy.min_replicas), hi), due, arm)

    def armed_floor(
        self, bins: ArrivalBins, since: float, now: float, allowance: float, hi: int
    ) -> int:
        """As a burst is due: the static pool that served the bursts' own claims from ``since``
        on within ``allowance`` (0: no schedule)."""
        if self.cycle is None:
            return 0
        return min(burst_floor(bins, since, now, self.rises, 2.0 * bins.width, allowance), hi)

    def hold(self, between: Between | None, current: int, now: float, window: float) -> int | None:
        """The size to set between bursts (``None``: not between): down at once from a burst's
        size, then only to the highest of the last ``window`` seconds (no step down and up again
        with the chance of the rate between bursts)."""
        if between is None:
            self.quiet = []
            return None
        self.quiet = [(t, n) for t, n in self.quiet if t >= now - window]
        self.quiet.append((now, between.size))
        if between.size >= current:
            return between.size
        return min(current, max(n for _, n in self.quiet))

    def describe(self, between: Between | None, now: float) -> str | None:
        """The schedule, for the decision's message (``None``: none)."""
        if self.cycle is None and self.spacing is not None and self.rises:
            gap = f"bursts at least {self.spacing.period:.0f}s apart ({self.spacing.rises} gaps)"
            if between is not None:
                return (
                    f"{gap}: {between.size} sandboxes for the claims between bursts until "
                    f"{between.armed_at - now:.0f}s from now"
                )
            return gap
        if self.cycle is None or not self.rises:
            return None
        c = self.cycle
        schedule = f"bursts every {c.period:.0f}s (within {c.spread:.0f}s, {c.rises} rises)"
        if between is not None:
            return (
                f"{schedule}: {between.size} sandboxes for the claims between bursts until "
                f"{between.armed_at - now:.0f}s from now, the next due in {between.due - now:.0f}s"
            )
        return f"{schedule}: the next due in {c.next_mark(self.rises[-1].start) - now:.0f}s"
