"""Warm-pool autoscaler: the window of claim arrivals (per-bin counts, kept in the status) and
the tests run on it (pure): grouped arrivals, trends, significant changes."""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentsandbox.controllers.autoscaler.queueing import poisson_quantile

#: claims expected in a window before a slow change (a drift, a trend) is tested for: with fewer,
#: the counts are too small for the tests' normal approximation (a quiet spell looks like a drop)
MIN_EVIDENCE = 20.0

#: occupancies up to this are kept exactly; above, in buckets of OCCUPANCY_RATIO (4 %)
OCCUPANCY_EXACT = 32
OCCUPANCY_RATIO = 1.04
#: at most this many recent claim times are kept to count occupancies (beyond: the oldest drop,
#: the count is then a lower bound — at rates where the Erlang size dwarfs the burst excess)
OCCUPANCY_KEEP = 20_000
#: seconds of claim times kept to count what a static pool would have served of a burst
#: (cycle.py: a burst's claims, from a refill time before its rise to its end)
TIMES_KEPT = 900.0


def occupancy_bucket(c: int) -> int:
    if c <= OCCUPANCY_EXACT:
        return c
    return OCCUPANCY_EXACT + math.ceil(math.log(c / OCCUPANCY_EXACT) / math.log(OCCUPANCY_RATIO))


def bucket_value(b: int) -> int:
    """The largest occupancy of bucket ``b`` (an upper bound: the floor errs on the safe side)."""
    if b <= OCCUPANCY_EXACT:
        return b
    return math.floor(OCCUPANCY_EXACT * OCCUPANCY_RATIO ** (b - OCCUPANCY_EXACT) + 1e-9)


@dataclass
class ArrivalBins:
    """Claims per bin of ``width`` seconds (bin ``k`` covers ``[k·width, (k+1)·width)``); per bin
    also the increments of the groups' squared sizes (a claim starting a group adds 1, one
    joining a group of ``x`` adds ``2x + 1``: summed over a window, the sum of squares) and the
    largest group begun in it.

    The **occupancy** of a claim is the number of claims (itself included) within the ``span``
    seconds up to it, ``span`` being the pool's refill time: the pool slots a static pool would
    have busy refilling as the claim comes, had every claim been served warm. A static pool of
    ``N`` serves a claim warm when its occupancy is at most ``N`` (with a constant refill time;
    about so otherwise), so the ``target`` quantile of the occupancies is the smallest static
    pool that would have met the target — whatever the shape of the arrivals (bursts, groups).
    Per bin a histogram of them is kept (claims timed by the watch only, once ``span`` is
    known)."""

    width: float
    first: int = 0  # the bin index of claims[0]
    claims: list[int] = field(default_factory=list)
    squares: list[int] = field(default_factory=list)
    largest: list[int] = field(default_factory=list)
    start: float | None = None  # the first claim of the latest group
    group: int = 0  # the size of that group
    occupancy: list[dict[int, int]] = field(default_factory=list)  # per bin: bucket -> claims
    span: float = 0.0  # seconds the occupancy is counted over (0: not counted)
    recent: deque[float] = field(default_factory=deque)  # the recent claims' times, ascending
    # the claims' times of the last TIMES_KEPT seconds (at most OCCUPANCY_KEEP), ascending
    times: deque[float] = field(default_factory=deque)

    def _slot(self, k: int, extend: bool = False) -> int | None:
        if not self.claims:
            self.first = k
            self.claims.append(0)
            self.squares.append(0)
            self.largest.append(0)
            self.occupancy.append({})
        if k < self.first:
            if not extend:
                return None  # older than what is kept
            pad = self.first - k
            self.claims[:0] = [0] * pad
            self.squares[:0] = [0] * pad
            self.largest[:0] = [0] * pad
            self.occupancy[:0] = [{} for _ in range(pad)]
            self.first = k
        while k >= self.first + len(self.claims):
            self.claims.append(0)
            self.squares.append(0)
            self.largest.append(0)
            self.occupancy.append({})
        return k - self.first

    def add(self, t: float, gap: float) -> None:
        """A claim at ``t``: it joins the current group if within ``gap`` of the group's first
        claim (groups do not chain: at any rate a group spans at most ``gap``)."""
        i = self._slot(math.floor(t / self.width))
        if i is None:
            return
        self.claims[i] += 1
        if self.start is not None and 0 <= t - self.start <= gap:
            self.squares[i] += 2 * self.group + 1
            self.group += 1
            j = self._slot(math.floor(self.start / self.width))
            if j is not None:
                self.largest[j] = max(self.largest[j], self.group)
        else:
            self.squares[i] += 1
            self.largest[i] = max(self.largest[i], 1)
            if self.start is None or t > self.start:
                self.start, self.group = t, 1
        if gap >= 0 and self.span > 0 and (not self.recent or t >= self.recent[-1]):
            recent = self.recent
            while recent and (recent[0] <= t - self.span or len(recent) >= OCCUPANCY_KEEP):
                recent.popleft()
            recent.append(t)
            times = self.times
            while times and (times[0] <= t - TIMES_KEPT or len(times) >= OCCUPANCY_KEEP):
                times.popleft()
            times.append(t)
            b = occupancy_bucket(len(recent))
            self.occupancy[i][b] = self.occupancy[i].get(b, 0) + 1

    def trim(self, now: float, window: float) -> None:
        """Drop the bins wholly older than ``now - window``."""
        keep = math.floor((now - window) / self.width)
        drop = min(max(0, keep - self.first), len(self.claims))
        if drop:
            del self.claims[:drop]
            del self.squares[:drop]
            del self.largest[:drop]
            del self.occupancy[:drop]
            self.first += drop
            if not self.claims:
                # a window without a claim still covers its time: the next claim's bin is
                # padded from here, so that a rate over the window counts the empty seconds
                self._slot(keep)

    def total(self, since: float) -> tuple[int, int, int, float]:
        """(claims, sum of squares, largest group, the start of the first bin counted) of the
        bins from the one holding ``since`` on."""
        k = max(math.floor(since / self.width), self.first)
        i = k - self.first
        return (
            sum(self.claims[i:]),
            sum(self.squares[i:]),
            max(self.largest[i:], default=0),
            k * self.width,
        )

    def merge_max(self, other: ArrivalBins) -> None:
        """Per bin, the larger of the two counts (``other``: a subset seen again, or a superset
        kept elsewhere — never added twice)."""
        for j, c in enumerate(other.claims):
            i = self._slot(other.first + j, extend=True)
            if i is None:
                continue
            if c > self.claims[i]:
                self.claims[i] = c
                self.squares[i] = max(other.squares[j], c)
                self.largest[i] = max(other.largest[j], self.largest[i])
            if sum(other.occupancy[j].values()) > sum(self.occupancy[i].values()):
                self.occupancy[i] = dict(other.occupancy[j])

    def copy(self) -> ArrivalBins:
        return ArrivalBins(
            self.width,
            self.first,
            [*self.claims],
            [*self.squares],
            [*self.largest],
            occupancy=[dict(h) for h in self.occupancy],
            times=deque(self.times),
        )

    @classmethod
    def summed(cls, parts: Sequence[ArrivalBins], width: float) -> ArrivalBins:
        """The bins of several keys together (a claim is counted under one key only)."""
        out = cls(width)
        for part in parts:
            for j, c in enumerate(part.claims):
                i = out._slot(part.first + j, extend=True)
                assert i is not None  # extend: never older than what is kept
                out.claims[i] += c
                out.squares[i] += part.squares[j]
                out.largest[i] = max(out.largest[i], part.largest[j])
                for b, n in part.occupancy[j].items():
                    out.occupancy[i][b] = out.occupancy[i].get(b, 0) + n
        timed = [part.times for part in parts if part.times]
        if len(timed) == 1:
            out.times = timed[0]  # read only: the decision does not add claims
        elif timed:
            out.times = deque(heapq.merge(*timed), maxlen=OCCUPANCY_KEEP)
        return out

    @classmethod
    def of(cls, times: Sequence[float], width: float, gap: float) -> ArrivalBins:
        out = cls(width)
        for t in sorted(times):
            out.add(t, gap)
        return out

    def to_status(self, before: float | None = None) -> dict[str, object]:
        """The bins as the status keeps them; ``before``: only the bins ended by then."""
        n = len(self.claims)
        if before is not None:
            n = max(0, min(n, math.floor(before / self.width) - self.first))
        return {
            "binSeconds": self.width,
            "firstBin": self.first,
            "claims": self.claims[:n],
            "groupSquares": self.squares[:n],
            "largestGroups": self.largest[:n],
            # per bin: occupancy, claims, occupancy, claims, ... (occupancies rounded up)
            "occupancy": [
                [x for b in sorted(h) for x in (bucket_value(b), h[b])] for h in self.occupancy[:n]
            ],
        }

    @classmethod
    def from_status(cls, data: object, width: float) -> ArrivalBins | None:
        """The window a previous process wrote (None: absent, malformed or another width)."""
        if not isinstance(data, dict):
            return None
        claims, squares, first = data.get("claims"), data.get("groupSquares"), data.get("firstBin")
        largest = data.get("largestGroups")
        if (
            data.get("binSeconds") != width
            or not isinstance(first, int)
            or not isinstance(claims, list)
            or not isinstance(squares, list)
            or not isinstance(largest, list)
            or not len(claims) == len(squares) == len(largest)
            or not all(isinstance(v, int) and v >= 0 for v in (*claims, *squares, *largest))
        ):
            return None
        occupancy: list[dict[int, int]] = [{} for _ in claims]
        kept = data.get("occupancy")  # absent: written before it was kept
        if isinstance(kept, list) and len(kept) == len(claims):
            for h, pairs in zip(occupancy, kept, strict=True):
                if not isinstance(pairs, list) or len(pairs) % 2:
                    return None
                for value, count in zip(pairs[::2], pairs[1::2], strict=True):
                    if not (isinstance(value, int) and isinstance(count, int)):
                        return None
                    if value < 1 or count < 0:
                        return None
                    b = occupancy_bucket(value)
                    h[b] = h.get(b, 0) + count
        elif kept is not None:
            return None
        return cls(width, first, [*claims], [*squares], [*largest], occupancy=occupancy)


def occupancy_floor(
    bins: ArrivalBins,
    since: float,
    allowance: float,
    current: int = 0,
    sigmas: float = 0.0,
    dispersion: float = 1.0,
) -> int:
    """The smallest static pool whose claims of the bins from ``since`` on would have been served
    cold at most ``allowance`` of the time: the claims of occupancy above it are at most that
    share of those counted, and at least one may be (a single coincidence among few claims is
    chance); 0: none counted.

    With ``sigmas`` and the pool's ``current`` size, the floor is above ``current`` only when
    the claims ``current`` would have served cold are significantly more than the allowance
    (``sigmas`` standard deviations of their count, whose noise is that of arrivals of index
    of ``dispersion``: claims that come in groups are served cold in groups): the tail of a
    quantile over a few hundred claims moves with chance, and a floor that followed it would
    step the pool up and down around a size that serves the target."""
    k0 = max(math.floor(since / bins.width), bins.first)
    total: dict[int, int] = {}
    for h in bins.occupancy[k0 - bins.first :]:
        for b, n in h.items():
            total[b] = total.get(b, 0) + n
    counted = sum(total.values())
    if not counted:
        return 0
    floor = quantile_floor(total, allowance)
    if sigmas > 0 and current > 0:
        allowed = max(allowance * counted, 1.0)
        over = sum(n for b, n in total.items() if bucket_value(b) > current)
        if not significantly_above(over, allowed, dispersion, sigmas):
            return min(floor, current)
    return floor


def quantile_floor(total: Mapping[int, int], allowance: float) -> int:
    """The smallest static pool that would have served the claims of the occupancy histogram
    ``total`` (bucket -> claims) cold at most ``allowance`` of the time, and at least one of
    them (a single coincidence among few claims is chance, not a reason for a slot); 0: none."""
    allowed = max(allowance * sum(total.values()), 1.0)
    above = 0
    for b in sorted(total, reverse=True):
        if above + total[b] > allowed:
            return bucket_value(b)
        above += total[b]
    return 0


@dataclass
class LongWindow:
    """The claims of the last hours, exponentially weighted per closed bin (``horizon``
    seconds): their count and the seconds counted. Kept in memory only (a new process counts
    the window it restores, then goes on)."""

    span: float = 0.0
    claims: float = 0.0

    def add(self, claims: int, width: float, decay: float) -> None:
        """One closed bin of ``width`` seconds (``decay``: the weight a bin keeps per bin)."""
        self.span = self.span * decay + width
        self.claims = self.claims * decay + claims

    def fade(self, factor: float) -> None:
        """Bins passed uncounted: every weight times ``factor``."""
        self.span *= factor
        self.claims *= factor

    def count(self, bins: ArrivalBins, begin: int, end: int, horizon: float) -> None:
        """The bins ``begin`` to ``end`` (excluded) of ``bins``, empty ones too, weighted over
        ``horizon`` seconds; those more than five horizons before ``end`` only fade."""
        decay = math.exp(-bins.width / horizon)
        reach = end - math.ceil(5 * horizon / bins.width)
        if begin < reach:
            self.fade(decay ** (reach - begin))
            begin = reach
        for k in range(begin, end):
            i = k - bins.first
            self.add(bins.claims[i] if 0 <= i < len(bins.claims) else 0, bins.width, decay)

    def rate(self) -> float:
        return self.claims / self.span if self.span > 0 else 0.0


def group_floor(bins: ArrivalBins, since: float, allowed: float) -> int:
    """The smallest N with ``sum over bins of (largest group - N)+ <= allowed``, where at least
    one cold claim is allowed (two claims at once among few is a coincidence, not a group to
    hold a sandbox for)."""
    allowed = max(allowed, 1.0)
    k0 = max(math.floor(since / bins.width), bins.first)
    sizes = [g for g in bins.largest[k0 - bins.first :] if g > 1]
    n = max(sizes, default=0)
    while n > 0 and sum(g - n + 1 for g in sizes if g > n - 1) <= allowed:
        n -= 1
    return n


def trend(bins: ArrivalBins, since: float, now: float, dispersion: float) -> float:
    """The slope (claims/s per second) of the bins from ``since`` to ``now`` by least squares,
    when it is positive beyond three standard errors of counts of that dispersion; else 0."""
    k0 = max(math.floor(since / bins.width), bins.first)
    counts = bins.claims[k0 - bins.first : max(0, math.floor(now / bins.width) - bins.first)]
    n = len(counts)
    if n < 6:
        return 0.0
    xs = [(k0 + i + 0.5) * bins.width for i in range(n)]
    mx = sum(xs) / n
    my = sum(counts) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (c - my) for x, c in zip(xs, counts, strict=True))
    slope = sxy / sxx  # claims per bin, per second
    # the counts' variance: that of arrivals of this dispersion, or the bins' own scatter about
    # the line when larger (a burst in the last bins is not a ramp: it scatters far more)
    scatter = sum((c - my - slope * (x - mx)) ** 2 for x, c in zip(xs, counts, strict=True)) / (
        n - 2
    )
    error = math.sqrt(max(dispersion * my, scatter, 1e-9) / sxx)
    if slope <= 3.0 * error:
        return 0.0
    return slope / bins.width


def significantly_above(
    count: float, expected: float, dispersion: float = 1.0, sigmas: float = 3.0
) -> bool:
    """``count`` claims where ``expected`` were due: a rise the noise of arrivals of that
    index of dispersion hardly explains (``sigmas`` standard deviations, and as many groups)."""
    return count > expected + sigmas * (math.sqrt(dispersion * expected) + dispersion)


def significantly_above_groups(
    count: float, expected: float, dispersion: float, largest: int, sigmas: float = 3.0
) -> bool:
    """:func:`significantly_above`, and beyond the tail of the load's largest groups as well.
    The normal reading of a count of that dispersion holds while many groups are due; with
    under one group of ``largest`` claims due, a few of them at once are far likelier than it
    says (a clump of chance, no rise). Counted as groups of ``largest`` claims with the load's
    variance (``expected * dispersion / largest**2`` of them due), the count must also exceed
    what the Poisson quantile of that many groups at the normal tail of ``sigmas`` brings."""
    if not significantly_above(count, expected, dispersion, sigmas):
        return False
    if largest <= 1 or dispersion <= 1.0:
        return True
    size = float(largest)
    due = expected * dispersion / (size * size)
    quantile = poisson_quantile(due, 1.0 - 0.5 * math.erfc(sigmas / math.sqrt(2.0)))
    return count > expected - due * size + quantile * size


def significantly_below(
    count: float, expected: float, dispersion: float = 1.0, sigmas: float = 3.0
) -> bool:
    """``count`` claims where ``expected`` were due: a drop the noise of arrivals of that index
    of dispersion hardly explains. The noise is that of the expected count (the rate unchanged),
    not of the lower one observed, which would call chance dips drops."""
    return count < expected - sigmas * (math.sqrt(dispersion * expected) + dispersion)


def significantly_off(
    count: float, expected: float, dispersion: float = 1.0, sigmas: float = 3.0
) -> bool:
    """``count`` is :func:`significantly_above` or :func:`significantly_below` ``expected``."""
    return significantly_above(count, expected, dispersion, sigmas) or significantly_below(
        count, expected, dispersion, sigmas
    )
