"""The comparison table (text) and the plots (PNG) of simulator runs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .compare import Comparison
from .engine import Result
from .traces import Trace


def _latency(seconds: float) -> str:
    if seconds < 1.0:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s"


def _count(x: float) -> str:
    return f"{x:,.0f}".replace(",", " ")


HEADER = (
    "| latency | pool | warm | warm (whole day) | p50 | p90 | p99 | max | idle sandbox-s "
    "| Ready idle sandbox-s | mean pool | peak replicas | plan() calls | run |"
)


def row(r: Result) -> str:
    return (
        f"| {r.latency} | {r.label} | {r.warm_share:.2%} | {r.warm_share_all:.2%} "
        f"| {_latency(r.percentile(0.5))} | {_latency(r.percentile(0.9))} "
        f"| {_latency(r.percentile(0.99))} | {_latency(max(r.latencies, default=0.0))} "
        f"| {_count(r.idle_seconds)} | {_count(r.ready_idle_seconds)} | {r.mean_pool:.1f} "
        f"| {r.max_replicas} | {_count(r.plan_calls)} | {r.runtime:.1f} s |"
    )


def verdict(c: Comparison) -> str:
    a = c.autoscaled
    if c.static is None or c.idle_ratio is None:
        return f"{a.latency}: no static pool reached {c.target:.0%} warm"
    saving = 1.0 - c.idle_ratio
    ready_saving = 1.0 - (c.ready_idle_ratio or 0.0)
    ok = a.warm_share >= c.target and saving >= 0.30
    return (
        f"{a.latency}: autoscaled {a.warm_share:.2%} warm with {_count(a.idle_seconds)} idle "
        f"sandbox-s vs the smallest static pool reaching {c.target:.0%} "
        f"({c.static_size}: {c.static.warm_share:.2%}, {_count(c.static.idle_seconds)}): "
        f"ratio {c.idle_ratio:.2f}, {saving:.0%} fewer (Ready idle: {ready_saving:.0%} fewer) "
        f"— goal (>= {c.target:.0%} warm, >= 30% fewer) {'MET' if ok else 'NOT met'}"
    )


def table(trace: Trace, comparisons: Sequence[Comparison], warmup: float) -> str:
    lines = [
        f"trace {trace.name}: {trace.description}; {len(trace.arrivals)} claims over "
        f"{trace.duration / 3600:g} h; figures after a {warmup / 60:g} min warm-up "
        "(idle = unclaimed pool members, starting or Ready)",
        "",
        HEADER,
        _rule(),
    ]
    for c in comparisons:
        lines.append(row(c.autoscaled))
        if c.static is not None:
            lines.append(row(c.static))
    lines.append("")
    for c in comparisons:
        lines.append(verdict(c))
        if c.tried:
            tried = ", ".join(f"{n}: {w:.2%}" for n, w in sorted(c.tried.items()))
            lines.append(f"  static sizes tried (warm share): {tried}")
    return "\n".join(lines)


def _rule() -> str:
    return "|" + "---|" * (HEADER.count("|") - 1)


def to_json(trace: Trace, comparisons: Sequence[Comparison]) -> dict[str, Any]:
    def res(r: Result | None) -> dict[str, Any] | None:
        if r is None:
            return None
        return {
            "pool": r.label,
            "warm_share": r.warm_share,
            "warm_share_whole_run": r.warm_share_all,
            "claims": r.claims,
            "latency_s": {
                "p50": r.percentile(0.5),
                "p90": r.percentile(0.9),
                "p99": r.percentile(0.99),
                "max": max(r.latencies, default=0.0),
            },
            "idle_sandbox_seconds": r.idle_seconds,
            "ready_idle_sandbox_seconds": r.ready_idle_seconds,
            "claimed_sandbox_seconds": r.claimed_seconds,
            "mean_pool": r.mean_pool,
            "peak_replicas": r.max_replicas,
            "creates": r.creates,
            "deletes": r.deletes,
            "deletes_before_ready": r.deletes_before_ready,
            "restarts": r.restarts,
            "plan_calls": r.plan_calls,
            "decisions": r.reasons,
            "runtime_s": r.runtime,
        }

    return {
        "trace": trace.name,
        "description": trace.description,
        "claims": len(trace.arrivals),
        "duration_s": trace.duration,
        "comparisons": [
            {
                "latency": c.autoscaled.latency,
                "target": c.target,
                "autoscaled": res(c.autoscaled),
                "static": res(c.static),
                "static_size": c.static_size,
                "idle_ratio": c.idle_ratio,
                "ready_idle_ratio": c.ready_idle_ratio,
                "static_sizes_tried": {str(k): v for k, v in c.tried.items()},
                "search_s": c.search_seconds,
            }
            for c in comparisons
        ],
    }


def write(out: Path, trace: Trace, comparisons: Sequence[Comparison], plot: bool) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    stem = trace.name.replace(":", "-").replace("/", "-")
    written = [out / f"{stem}.json"]
    written[0].write_text(json.dumps(to_json(trace, comparisons), indent=1) + "\n")
    if plot:
        written.append(out / f"{stem}.png")
        _plot(written[-1], trace, comparisons)
    return written


def _plot(path: Path, trace: Trace, comparisons: Sequence[Comparison]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = len(comparisons)
    fig, axes = plt.subplots(3, cols, figsize=(7.5 * cols, 11), squeeze=False)
    hours = trace.duration > 4 * 3600
    scale = 3600.0 if hours else 60.0
    unit = "h" if hours else "min"
    per_min: dict[int, int] = {}
    for t in trace.arrivals:
        per_min[int(t // 60)] = per_min.get(int(t // 60), 0) + 1
    minutes = range(int(trace.duration // 60) + 1)
    # a 30 min zoom from the middle of the run
    z0 = max(0.0, trace.duration / 2 - 900)
    z1 = min(trace.duration, z0 + 1800)
    for col, c in enumerate(comparisons):
        a = c.autoscaled
        ax = axes[0][col]
        ts = [p[0] / scale for p in a.series]
        ax.plot(ts, [p[1] for p in a.series], label="autoscaled spec.replicas", lw=0.6)
        if c.static is not None:
            ax.axhline(
                c.static_size or 0, color="red", ls="--", lw=1, label=f"static {c.static_size}"
            )
        ax.set_title(f"{trace.name}, {a.latency}: pool size")
        ax.set_xlabel(f"time ({unit})")
        ax.set_ylabel("sandboxes")
        twin = ax.twinx()
        twin.plot(
            [m * 60 / scale for m in minutes],
            [per_min.get(m, 0) / 60 for m in minutes],
            color="grey",
            lw=0.5,
            alpha=0.5,
        )
        twin.set_ylabel("claims/s (grey, per minute)")
        ax.legend(loc="upper left", fontsize=8)

        zoom = axes[1][col]
        for r, style in ((a, "-"), (c.static, ":")):
            if r is None:
                continue
            pts = [p for p in r.series if z0 <= p[0] <= z1]
            zt = [p[0] / 60 for p in pts]
            if r is a:
                zoom.plot(zt, [p[1] for p in pts], style, lw=1, label=f"{r.label} spec.replicas")
            zoom.plot(zt, [p[2] for p in pts], style, lw=1, label=f"{r.label} members")
            zoom.plot(zt, [p[3] for p in pts], style, lw=1, label=f"{r.label} Ready")
        claims = [t / 60 for t in trace.arrivals if z0 <= t <= z1]
        zt2 = zoom.twinx()
        zt2.hist(claims, bins=180, color="grey", alpha=0.3)
        zt2.set_ylabel("claims per 10 s (grey)")
        zoom.set_title(f"zoom: {z0 / 60:.0f}-{z1 / 60:.0f} min")
        zoom.set_xlabel("time (min)")
        zoom.set_ylabel("sandboxes")
        zoom.legend(loc="upper left", fontsize=7)

        tail = axes[2][col]
        for r in (a, c.static):
            if r is None or not r.latencies:
                continue
            xs = sorted(r.latencies)
            n = len(xs)
            ys = [1 - i / n for i in range(n)]
            tail.step(xs, ys, where="post", label=f"{r.label}: {r.warm_share:.2%} warm")
        tail.set_xscale("log")
        tail.set_yscale("log")
        tail.set_xlabel("claim latency (s)")
        tail.set_ylabel("share of claims at least this slow")
        tail.set_title("claim latency (tail)")
        tail.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
