"""Can any autoscaler meet the goal on every trace of a quiet-then-burst scenario's family?

    python bench/autoscale/family.py --latency lognormal --out build/family
    python bench/autoscale/family.py --set tuning --only 'r*-quiet-then-burst' --out build/family

A quiet-then-burst trace (A) has claims, then a span without any, then a burst of ``k`` claims
within ``spread`` seconds at ``T2``, then claims again. Its **family**: the same trace with the
burst at any time ``t`` of the quiet span ``[T1, T2]`` (``A_t``), and the same trace without it
(``B``). The other parts draw the same random streams in every member, so the members agree until
the burst comes, and an autoscaler that sees only the past sizes the pool alike on all of them
until then: on ``B``, its pool at ``t`` is the pool ``A_t`` meets its burst with.

1. **Meeting the warm share on ``A_t`` needs ``m`` members at ``t``.** ``A_t`` judges ``N_A``
   claims; at most ``C = N_A - ceil(need x N_A)`` may go cold. A burst claim is warm only if a
   Ready member is there when it arrives: one in the pool at ``t`` (Ready or starting), or one
   created after ``t`` whose refill is within the burst's ``spread`` (``p_fast``, the refill
   distribution's probability of that, is reported: a handful of such members needs about
   ``1 / p_fast`` creates). So the pool at ``t`` holds ``m = k - C`` members or more.
2. **Meeting every ``A_t`` costs ``B`` idle time.** Holding ``m`` over the quiet span is
   ``m x (T2 - T1)`` idle sandbox-seconds on ``B`` (idle counts members starting or Ready). After
   the span, ``B`` needs ``W2 = ceil(need x N_B) - N1`` warm claims or more (``N1``: its judged
   claims before the span). A member taken by a claim after ``T2`` was either in the pool at
   ``T2`` (the j-th earliest claim it can take leaves it idle ``c_j - T2`` after ``T2``) or
   created after ``T2`` and starting for its refill time first. The refill is drawn when the
   member is created and seen only when it is Ready, so a member's expected start-up is the
   distribution's mean; the bound is also given with its 1st percentile, a refill only one
   member in a hundred beats. Whatever the number ``K`` of members at ``T2``, ``B``'s idle time
   after the warm-up is at least ``m x (T2 - T1) + min_K [sum_{j<=K} (c_j - T2) + (W2 - K) r]``.
3. **Against ``B``'s goal.** If that bound exceeds the allowance times the idle time of the
   smallest static pool reaching the target on ``B`` (found by the same search as
   ``evaluate.py``'s), an autoscaler that meets every ``A_t`` misses ``B``: none meets the whole
   family. Which member it misses depends on where it takes its risk, not on a constant.

The design's own figures on ``B`` are reported beside. Writes ``<out>/family.json`` (the figures,
the command, the commit); under ``build/`` only, as ``evaluate.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import math
import os
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import evaluate  # noqa: E402
import make_traces  # noqa: E402
from scenarios import SETS, Scenario, TraceSpec, load_set, load_traces  # noqa: E402

from agentsandbox.sim import latency as lat  # noqa: E402

TAG = "quiet-then-burst"
#: the cautious refill in the bound: one member in a hundred starts faster
CAUTIOUS_QUANTILE = 0.01


def burst_part(spec: TraceSpec) -> int:
    """The index of the trace's one ``burst`` part."""
    found = [i for i, p in enumerate(spec.parts) if p["kind"] == "burst"]
    if len(found) != 1:
        raise ValueError(f"{spec.name}: {len(found)} burst parts, one expected")
    return found[0]


def cold_allowed(claims: int, needed: float) -> int:
    """How many of ``claims`` judged claims may go cold with a warm share of ``needed``."""
    return claims - math.ceil(needed * claims)


def after_span_bound(after: Sequence[float], t2: float, warm_needed: int, refill: float) -> float:
    """The least idle time after ``t2`` of any pool whose members serve ``warm_needed`` of the
    claims at ``after`` (sorted, all at or after ``t2``) warm: the ``K`` members present at
    ``t2`` best take the ``K`` earliest claims (idle ``c_j - t2`` each), every other member was
    starting for ``refill`` seconds first. Minimised over ``K``."""
    if warm_needed <= 0:
        return 0.0
    if warm_needed > len(after):
        raise ValueError("more warm claims needed than there are claims")
    best = warm_needed * refill
    waited = 0.0
    for k, c in enumerate(after[:warm_needed], start=1):
        waited += c - t2
        best = min(best, waited + (warm_needed - k) * refill)
    return best


@dataclasses.dataclass(frozen=True)
class Family:
    """The arithmetic of steps 1 and 2 for one scenario (no simulation)."""

    quiet_start: float  # T1: B's last claim before the burst, or the warm-up's end if later
    quiet_end: float  # T2: the burst's time in A
    burst_size: int
    burst_spread: float
    claims_a: int  # judged (after the warm-up)
    cold_allowed_a: int
    members_needed: int  # m
    claims_b: int
    claims_before: int  # N1: B's judged claims before the quiet span
    warm_needed_after: int  # W2
    after: tuple[float, ...]  # B's claim times from T2 on

    @property
    def quiet_idle(self) -> float:
        return self.members_needed * (self.quiet_end - self.quiet_start)

    def bound(self, refill: float) -> float:
        """The least idle sandbox-seconds on B of an autoscaler that meets every A_t."""
        after = after_span_bound(self.after, self.quiet_end, self.warm_needed_after, refill)
        return self.quiet_idle + after


def family(s: Scenario, spec: TraceSpec) -> tuple[Family, list[float]]:
    """The family's figures for scenario ``s``, and B's claim times."""
    needed, _ = evaluate.thresholds(s)
    b_index = burst_part(spec)
    burst = spec.parts[b_index]
    at, size = float(burst["at"]), int(burst["size"])
    every = make_traces.arrivals(spec)
    b = make_traces.arrivals(spec, leave_out={b_index})
    before = [t for t in b if t < at]
    # the family's bursts fall after the warm-up, where claims and idle time are judged
    t1 = max(before[-1] if before else 0.0, s.warmup)
    if t1 >= at:
        raise ValueError(f"{s.name}: the burst comes within the warm-up")
    claims_a = sum(1 for t in every if t >= s.warmup)
    claims_b = sum(1 for t in b if t >= s.warmup)
    claims_before = sum(1 for t in before if t >= s.warmup)
    allowed = cold_allowed(claims_a, needed)
    fam = Family(
        quiet_start=t1,
        quiet_end=at,
        burst_size=size,
        burst_spread=float(burst.get("spread", 0.0)),
        claims_a=claims_a,
        cold_allowed_a=allowed,
        members_needed=max(0, size - allowed),
        claims_b=claims_b,
        claims_before=claims_before,
        warm_needed_after=math.ceil(needed * claims_b) - claims_before,
        after=tuple(t for t in b if t >= at),
    )
    return fam, b


def run_one(s: Scenario, spec: TraceSpec, latency: str, out: Path) -> dict[str, Any]:
    fam, b = family(s, spec)
    _, allowance = evaluate.thresholds(s)
    spec_b = dataclasses.replace(spec, name=f"{spec.name}~no-burst")
    csv = out / "traces" / f"{spec_b.name}.csv"
    csv.parent.mkdir(parents=True, exist_ok=True)
    csv.write_text(make_traces.csv_text(b))
    s_b = dataclasses.replace(s, name=f"{s.name}~no-burst", trace=spec_b.name)
    entry = evaluate.run_one(s_b, spec_b, csv, latency, out, None)
    if entry["autoscaled"]["claims"] != fam.claims_b:
        raise AssertionError(f"{s.name}: the replay judged another count of claims than here")
    dist = lat.LOCAL if latency == "local" else lat.lognormal()  # as evaluate.py's replay
    refills = {"mean": dist.mean(), "p1": dist.quantile(CAUTIOUS_QUANTILE)}
    static_idle = entry["static"]["idle_sandbox_seconds"] if entry["static"] else None
    bounds = {k: fam.bound(r) for k, r in refills.items()}
    line = None if static_idle is None else allowance * static_idle
    return {
        "scenario": s.name,
        "trace": s.trace,
        "latency": entry["latency"],
        "warmup_s": s.warmup,
        "quiet_span_s": [fam.quiet_start, fam.quiet_end],
        "burst": {"size": fam.burst_size, "spread_s": fam.burst_spread},
        "p_fast": fast_share(dist, fam.burst_spread),
        "with_burst": {"claims": fam.claims_a, "cold_allowed": fam.cold_allowed_a},
        "members_needed": fam.members_needed,
        "without_burst": {
            "claims": fam.claims_b,
            "claims_before_quiet": fam.claims_before,
            "warm_needed_after_quiet": fam.warm_needed_after,
            "command": entry["command"],
            "static_size": entry["static_size"],
            "static_idle_sandbox_seconds": static_idle,
            "allowance": allowance,
            "design": entry["autoscaled"],
            "design_goal": entry["goal"],
        },
        "quiet_idle_sandbox_seconds": fam.quiet_idle,
        "refill_s": refills,
        "bound_idle_sandbox_seconds": bounds,
        "no_autoscaler_meets_family": {
            k: (line is not None and v > line) for k, v in bounds.items()
        },
    }


def fast_share(dist: Any, seconds: float) -> float:
    """The probability that one refill is within ``seconds`` (by bisection on the quantile)."""
    lo, hi = 0.0, 1.0
    if dist.quantile(1e-15) > seconds:
        return 0.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if dist.quantile(mid) <= seconds:
            lo = mid
        else:
            hi = mid
    return lo


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", choices=sorted(SETS), default="evaluation", dest="which")
    p.add_argument("--only", action="append", default=[], metavar="PATTERN")
    p.add_argument("--latency", choices=evaluate.LATENCIES, default="lognormal")
    p.add_argument("--out", type=Path, default=Path("build/family"))
    args = p.parse_args(argv)
    argv_shown = sys.argv[1:] if argv is None else argv
    out = args.out.resolve()
    if out == HERE.parent or HERE.parent in out.parents:
        p.error(f"{args.out}: the results of a run are not committed; write them under build/")
    specs = load_traces()
    chosen = [
        s
        for s in load_set(args.which, specs)
        if TAG in s.tags and (not args.only or any(fnmatch.fnmatch(s.name, o) for o in args.only))
    ]
    if not chosen:
        p.error(f"no {TAG} scenario in the {args.which} set matches")
    head = evaluate.commit()
    started = time.perf_counter()
    entries = []
    for s in chosen:
        e = run_one(s, specs[s.trace], args.latency, out)
        verdict = e["no_autoscaler_meets_family"]
        print(
            f"{s.name:<22} m {e['members_needed']:>3} "
            f"quiet idle {e['quiet_idle_sandbox_seconds']:.0f}"
            f" bound {e['bound_idle_sandbox_seconds']['mean']:.0f} / "
            f"{e['bound_idle_sandbox_seconds']['p1']:.0f} static B "
            f"{e['without_burst']['static_idle_sandbox_seconds']:.0f} "
            f"({e['without_burst']['static_size']}) -> none meets all: {verdict}",
            flush=True,
        )
        entries.append(e)
    report = {
        "set": args.which,
        "command": "python bench/autoscale/family.py " + shlex.join(argv_shown),
        "commit": head,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "commit": head},
        "elapsed_s": time.perf_counter() - started,
        "cautious_quantile": CAUTIOUS_QUANTILE,
        "results": entries,
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / "family.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
