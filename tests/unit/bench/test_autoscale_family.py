"""bench/autoscale/family.py: the bound on a quiet-then-burst family (the same trace with its burst
at any time of the quiet span, and without it). The arithmetic of the bound, that the least idle
time after the span is found (checked against every assignment on small cases), and that the
trace without the burst is the trace with it, its burst's claims taken out."""

from __future__ import annotations

import importlib
import itertools
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

AUTOSCALE = Path(__file__).resolve().parents[3] / "bench" / "autoscale"


@pytest.fixture(scope="module")
def fam() -> ModuleType:
    if str(AUTOSCALE) not in sys.path:
        sys.path.insert(0, str(AUTOSCALE))
    return importlib.import_module("family")


def test_cold_allowed_is_what_keeps_the_warm_share_needed(fam: ModuleType) -> None:
    needed = 0.985 - 1e-12  # evaluate.thresholds' line
    assert fam.cold_allowed(2439, needed) == 36  # 2403 / 2439 = 98.52 %, 2402 / 2439 = 98.48 %
    assert fam.cold_allowed(2000, needed) == 30  # exactly 98.5 % warm is enough
    assert fam.cold_allowed(10, needed) == 0


def test_members_at_the_span_take_the_earliest_claims_then_each_new_one_costs_its_refill(
    fam: ModuleType,
) -> None:
    # claims at 0, 10 and 200 s after the span; a refill of 100 s
    # K=0: 300; K=1: 0 + 200; K=2: 0 + 10 + 100 = 110; K=3: 210
    assert fam.after_span_bound([50.0, 60.0, 250.0], 50.0, 3, 100.0) == pytest.approx(110.0)
    assert fam.after_span_bound([50.0, 60.0, 250.0], 50.0, 0, 100.0) == 0.0
    with pytest.raises(ValueError):
        fam.after_span_bound([50.0], 50.0, 2, 100.0)


def test_the_after_span_bound_is_the_least_over_every_choice_of_claims(fam: ModuleType) -> None:
    """Old members may take any of the claims, not only the earliest: brute force on small
    cases finds nothing below the bound."""
    rng = random.Random(7)
    for _ in range(200):
        t2 = 1000.0
        after = sorted(t2 + rng.uniform(0, 300) for _ in range(rng.randint(1, 7)))
        need = rng.randint(1, len(after))
        refill = rng.uniform(5, 150)
        best = float("inf")
        for served in itertools.combinations(after, need):  # the claims served warm
            for k in range(need + 1):
                for old in itertools.combinations(served, k):  # those an old member takes
                    best = min(best, sum(c - t2 for c in old) + (need - k) * refill)
        assert fam.after_span_bound(after, t2, need, refill) == pytest.approx(best)


def test_the_trace_without_the_burst_is_the_trace_less_its_burst(fam: ModuleType) -> None:
    traces = fam.load_traces()
    # a tuning scenario: a test reads no held-out trace (the next round's set is not seen)
    (s,) = [x for x in fam.load_set("tuning", traces) if x.name == "r14-quiet-then-burst"]
    spec = traces[s.trace]
    f, b = fam.family(s, spec)
    every = fam.make_traces.arrivals(spec)
    burst = spec.parts[fam.burst_part(spec)]
    assert len(every) - len(b) == int(burst["size"]) == f.burst_size
    assert [t for t in every if t < f.quiet_end] == [t for t in b if t < f.quiet_end]
    assert not [t for t in b if f.quiet_start < t < f.quiet_end]  # nothing in the quiet span
    assert f.claims_a == f.claims_b + f.burst_size
    assert f.members_needed == f.burst_size - f.cold_allowed_a
    assert f.quiet_idle == f.members_needed * (f.quiet_end - f.quiet_start)
    assert f.bound(90.0) > f.bound(45.0) > f.quiet_idle


def test_a_trace_needs_exactly_one_burst_part(fam: ModuleType) -> None:
    traces = fam.load_traces()
    with pytest.raises(ValueError, match="0 burst parts"):
        fam.burst_part(traces["held15-steady-low"])


def test_the_chance_of_a_refill_within_the_burst_is_the_distributions(fam: ModuleType) -> None:
    dist = fam.lat.lognormal()
    assert fam.fast_share(dist, dist.quantile(0.25)) == pytest.approx(0.25, abs=1e-9)
    assert fam.fast_share(dist, 12.0) < 1e-10  # median 90 s, sigma 0.3
